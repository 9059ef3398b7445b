#!/usr/bin/env bash
# `glm5 watch` on a live real SGLang server that an independent client loads: the watch sends no inference request,
# reads /metrics, the log and NVML window by window; then `glm5 diagnose` on the watch, beside the client's own figures.
#
#   scripts/gpu/sglang_watch.sh OUT_DIR [sglang.launch_server flags beyond the model's]
#
# BACKEND=sim rehearses on the stand-in (pass its flags, e.g. --tp-size 8). CLIENT_C (256), INPUT_LEN (2048),
# OUTPUT_LEN (128), WATCH_S (60), WINDOW_S (20) shape it. Results: OUT_DIR/watch.tar.gz (the client's and the
# watch's run folders, the server log) and OUT_DIR/watch-*.txt.
set -uo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR [server flags]}
shift
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-/tmp/m}
BACKEND=${BACKEND:-sglang}
RUN=${RUN_DIR:-/tmp/sglang-watch}
PORT=${PORT:-30100}
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PY:-python3}
mkdir -p "$OUT_DIR" "$RUN"
MODEL_FLAGS=(--model-path "$MODEL")
[ "$BACKEND" = sglang ] && MODEL_FLAGS+=(--load-format dummy --attention-backend triton --sampling-backend pytorch --mem-fraction-static 0.8)
setsid $PY -m glm5lib.cli launch --backend "$BACKEND" --port "$PORT" --log "$RUN/server.log" --ready-timeout 400 -- \
  "${MODEL_FLAGS[@]}" --enable-metrics "$@" > "$RUN/launch.out" 2>&1 &
LPID=$!
URL=http://127.0.0.1:$PORT
for _ in $(seq 1 420); do grep -q "$URL" "$RUN/launch.out" 2>/dev/null && break; kill -0 $LPID 2>/dev/null || break; sleep 1; done
echo "launch: $(grep -c . "$RUN/launch.out") lines"; tail -3 "$RUN/launch.out"
$PY -m glm5lib.cli sweep "$URL" -c "${CLIENT_C:-256}" --input-len "${INPUT_LEN:-2048}" --output-len "${OUTPUT_LEN:-128}" \
  --duration $(( ${WATCH_S:-60} + 30 )) --warmup 0 --run-dir "$RUN/client" -q > "$OUT_DIR/watch-client.txt" 2>&1 &
CPID=$!
sleep 15  # the client's ramp: its first requests are still in prefill
$PY -m glm5lib.cli watch "$URL" --log "$RUN/server.log" --duration "${WATCH_S:-60}" --window "${WINDOW_S:-20}" \
  --run-dir "$RUN/watched" > "$OUT_DIR/watch-windows.txt" 2>&1
echo "watch exit $?"; tail -8 "$OUT_DIR/watch-windows.txt"
wait $CPID; echo "client exit $?"; tail -6 "$OUT_DIR/watch-client.txt"
$PY -m glm5lib.cli diagnose "$RUN/watched" --phase watch > "$OUT_DIR/watch-diagnose.txt" 2>&1
echo "diagnose exit $?"; head -30 "$OUT_DIR/watch-diagnose.txt"
kill -INT -- -$LPID 2>/dev/null; for _ in $(seq 1 30); do kill -0 $LPID 2>/dev/null || break; sleep 1; done
kill -KILL -- -$LPID 2>/dev/null; pkill -KILL -f "sglang.launch_server|sglang::" 2>/dev/null
tar czf "$OUT_DIR/watch.tar.gz" --exclude=requests.jsonl -C "$(dirname "$RUN")" "$(basename "$RUN")"
ls -la "$OUT_DIR"
