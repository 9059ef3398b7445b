#!/usr/bin/env bash
# One-shot real-hardware run: transformers serve (continuous batching) with a random-weight
# Qwen3-MoE model on this host's GPU, baseline = capped --cb-max-batch-tokens, fix = uncapped,
# the workbook's notebooks 01, 02, 04, 05 headless, NVML telemetry; the run folder is packed
# into OUT_DIR/run.tar.gz.
#
#   scripts/gpu/h200_transformers_serve.sh OUT_DIR [extra run_engine_workbook.py options]
#
# Wheels the host lacks (see scripts/gpu/wheels.txt) are installed from .whl/ when that folder
# exists (hosts without a package registry); the model is built into $MODEL (default /tmp/tinymoe).
set -euo pipefail
OUT_DIR=${1:?usage: $0 OUT_DIR [options]}
shift
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-/tmp/tinymoe}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the transformers console script of this interpreter
export PATH=$(dirname "$(command -v "$PY")"):$PATH
"$PY" -m ipykernel install --user --name python3 >/dev/null 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total --format=csv | tee "$OUT_DIR/nvidia-smi.txt"
"$PY" -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a "$OUT_DIR/nvidia-smi.txt"
[ -f "$MODEL/config.json" ] || "$PY" scripts/gpu/make_tiny_model.py "$MODEL"
RUN=${RUN_DIR:-data/runs/h200-transformers-serve}
rm -rf "$RUN"
set +e
"$PY" scripts/gpu/run_engine_workbook.py --engine transformers-serve --model "$MODEL" \
  --run-dir "$RUN" --archive "$OUT_DIR/run.tar.gz" "$@" 2>&1 | tee "$OUT_DIR/run.log"
code=${PIPESTATUS[0]}
set -e
exit "$code"
