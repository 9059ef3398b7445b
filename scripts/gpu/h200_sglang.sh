#!/usr/bin/env bash
# Real SGLang on a GPU host that reaches no package registry: unpack the carried SGLang (once), build the
# random-weight model (once), then go on with scripts/gpu/run_sglang_h200.py's plan until this call's time is up.
#
#   scripts/gpu/h200_sglang.sh OUT_DIR [run_sglang_h200.py options]
#
# SGLang and the notebooks' wheels come packed in .gpu/ (parts p1/, p2/, ... of one xz tar, assemble.sh, make_model.py),
# carried in parts over several calls; a call that brings the last part unpacks it into /tmp/site. One part and the
# working tree travel together under 64 MiB: with the recorded examples the tree is about 52 MiB, so parts of at
# most 11 MiB (`cat .gpu/p*/part.* | split -b 11M -d - part.` into p1/, p2/, ...; their count in .gpu/parts). The run folder
# ($RUN_DIR, default /tmp/h200-sglang) stays on the host between calls and is packed into OUT_DIR after each call.
# CALL_S (default 570) is this call's budget in seconds; the plan stops before a step that would not fit.
set -uo pipefail
START=$(date +%s)
OUT_DIR=${1:?usage: $0 OUT_DIR [options]}
shift
cd "$(dirname "$0")/../.."
RUN=${RUN_DIR:-/tmp/h200-sglang}
MODEL=${MODEL:-/tmp/m}
CALL_S=${CALL_S:-570}
mkdir -p "$OUT_DIR"
[ -f .gpu/assemble.sh ] && [ ! -d /tmp/site/sglang ] && bash .gpu/assemble.sh
if [ ! -d /tmp/site/sglang ]; then echo "SGLang not unpacked yet (carry the remaining parts)"; exit 0; fi
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m ipykernel install --user --name python3 >/dev/null 2>&1 || { echo "ipykernel install failed: the kernel spec under /tmp/site"; export JUPYTER_PATH=/tmp/site/share/jupyter; }
[ -f "$MODEL/config.json" ] || python3 .gpu/make_model.py "$MODEL"
nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total --format=csv > "$OUT_DIR/nvidia-smi.txt" 2>&1
LEFT=$(( CALL_S - ($(date +%s) - START) - 20 ))
timeout $((LEFT + 15)) python3 scripts/gpu/run_sglang_h200.py --model "$MODEL" --run-dir "$RUN" --deadline "$LEFT" "$@" \
  2>&1 | tee "$OUT_DIR/plan-$(date +%H%M%S).log" | grep -v " INFO glm5lib.loadgen" | tail -c 6000
code=${PIPESTATUS[0]}
pkill -TERM -f "sglang.launch_server" 2>/dev/null; sleep 1; pkill -KILL -f "sglang.launch_server|sglang::" 2>/dev/null
tar czf "$OUT_DIR/run.tar.gz" --exclude=requests.jsonl -C "$(dirname "$RUN")" "$(basename "$RUN")"
# the request records apart (a level's window can be read again from them): over the size a call brings back,
# this one file stays behind and the run's figures still come
(cd "$(dirname "$RUN")" && find "$(basename "$RUN")" -name requests.jsonl -print0 | tar czf "$OUT_DIR/requests.tar.gz" --null -T -)
ls -la "$OUT_DIR"
exit "$code"
