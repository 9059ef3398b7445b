#!/usr/bin/env bash
# One stage of the forecast-and-tune run on a GPU host (transformers serve, continuous batching,
# a random-weight Qwen3-MoE): see scripts/gpu/run_forecast_tune.py for the stages.
#
#   scripts/gpu/h200_forecast_tune.sh forecast|grid|tune OUT_DIR [run_forecast_tune.py options]
#
# Wheels the host lacks (scripts/gpu/wheels.txt) are installed from .whl/ when it exists; the model
# is built into $MODEL (default /tmp/tinymoe) once; the run folder ($RUN_DIR, default
# data/runs/h200-forecast-tune) is packed into OUT_DIR/<stage>.tar.gz after the stage.
set -uo pipefail
STAGE=${1:?usage: $0 forecast|grid|tune OUT_DIR [options]}
OUT_DIR=${2:?usage: $0 forecast|grid|tune OUT_DIR [options]}
shift 2
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-/tmp/tinymoe}
RUN=${RUN_DIR:-data/runs/h200-forecast-tune}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
if [ -d .whl ] && [ ! -f /tmp/site/.installed ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PATH=$(dirname "$(command -v "$PY")"):$PATH
"$PY" -m ipykernel install --user --name python3 >/dev/null 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total --format=csv > "$OUT_DIR/nvidia-smi.txt"
"$PY" -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" >> "$OUT_DIR/nvidia-smi.txt"
[ -f "$MODEL/config.json" ] || "$PY" scripts/gpu/make_tiny_model.py "$MODEL"
"$PY" scripts/gpu/run_forecast_tune.py "$STAGE" --model "$MODEL" --run-dir "$RUN" "$@" 2>&1 | tee "$OUT_DIR/$STAGE.log"
code=${PIPESTATUS[0]}
# per-request records and executed notebooks stay behind (size); everything else comes back
tar czf "$OUT_DIR/$STAGE.tar.gz" --exclude='*.ipynb' --exclude='requests.jsonl' -C "$(dirname "$RUN")" "$(basename "$RUN")"
exit "$code"
