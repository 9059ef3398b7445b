#!/usr/bin/env bash
# Install transformers serve (transformers[serving] 5.x) for CPU into an ignored virtual environment,
# for the real-engine tests of glm5lib's transformers adapter (tests/integration/test_transformers_engine.py).
#
#   ENGINES   folder for engines and wheels (default: .engines in the repository root)
#   PYTHON    interpreter for the environment (default python3)
#   TORCH_INDEX_URL  extra index holding torch==2.13.0+cpu when pip's own indexes lack it
#
# torch is the CPU build every engine's install pins (scripts/cpu_engine_env.sh), so the wheels in
# $ENGINES/wheels serve both; a second install reads no registry, and a rerun only checks the marker file.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cpu_engine_env.sh transformers
TRANSFORMERS_VERSION=5.19.0

if [[ ! -f "$VENV/.installed-$TRANSFORMERS_VERSION" ]]; then
    cons="$ENGINES/transformers-constraints.txt"
    new_venv "$cons"
    # transformers serve's command module imports requests (its chat client) and needs accelerate to place the model
    want=("transformers[serving]==$TRANSFORMERS_VERSION" "torch==$TORCH_VERSION+cpu" accelerate requests)
    "${PIP[@]}" download -q -d "$WHEELS" -c "$cons" "${want[@]}" "${TORCH_EXTRA[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" -c "$cons" "${want[@]}"
    "$VENV/bin/python" -c "import transformers, torch, accelerate, fastapi, uvicorn, requests, transformers.cli.transformers; print('transformers', transformers.__version__, 'torch', torch.__version__)"
    touch "$VENV/.installed-$TRANSFORMERS_VERSION"
fi
echo "transformers serve ready: $VENV/bin/python -m transformers.cli.transformers serve"
