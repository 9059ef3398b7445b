#!/usr/bin/env bash
# After a plan's phases, on the same GPU host (SGLang unpacked in /tmp/site, the model in $MODEL):
# the API-key check (scripts/gpu/check_sglang_key.py, one launch with CUDA graphs off) and SGLang's offline
# prefill/decode benchmark, both written under OUT_DIR.
#
#   GLM5_API_KEY=... scripts/gpu/sglang_extras.sh OUT_DIR [bench_one_batch options]
#
# Default benchmark: batches of 1 and 4 prompts of 512 and 2,048 tokens, 4 output tokens each (one prefill forward
# of 512, 2,048 and 8,192 tokens).
set -uo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR [bench_one_batch options]}
shift
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-/tmp/m}
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT_DIR"
if [ -n "${GLM5_API_KEY:-}" ]; then
  timeout 300 python3 scripts/gpu/check_sglang_key.py "$OUT_DIR" "$MODEL" sglang > "$OUT_DIR/key-check.out" 2>&1
  echo "key check exit $?"; tail -20 "$OUT_DIR/key-check.out"
  pkill -KILL -f "sglang.launch_server|sglang::" 2>/dev/null; sleep 2
fi
BENCH=("$@")
[ ${#BENCH[@]} -eq 0 ] && BENCH=(--batch-size 1 4 --input-len 512 2048 --output-len 4)
timeout 240 python3 -m sglang.bench_one_batch --model-path "$MODEL" --load-format dummy --attention-backend triton \
  --sampling-backend pytorch --mem-fraction-static 0.8 "${BENCH[@]}" > "$OUT_DIR/bench-prefill.log" 2>&1
echo "bench exit $?"; grep -E "^(Prefill|Decode\.|Total)" "$OUT_DIR/bench-prefill.log" | tail -20
