#!/usr/bin/env bash
# Install transformers serve (transformers[serving] 5.x) for CPU into an ignored virtual environment,
# for the real-engine tests of glm5lib's transformers adapter (tests/integration/test_transformers_engine.py).
#
#   ENGINES   folder for engines and wheels (default: .engines in the repository root)
#   PYTHON    interpreter for the environment (default python3)
#   TORCH_INDEX_URL  extra index holding torch==2.13.0+cpu when pip's own indexes lack it
#
# torch is the CPU build vLLM's install pins, so the wheels in $ENGINES/wheels serve both; a second
# install reads no registry, and a rerun only checks the marker file.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENGINES=${ENGINES:-.engines}
PYTHON=${PYTHON:-python3}
TRANSFORMERS_VERSION=5.19.0
TORCH_VERSION=2.13.0
VENV="$ENGINES/transformers"
WHEELS="$ENGINES/wheels"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

if [[ ! -f "$VENV/.installed-$TRANSFORMERS_VERSION" ]]; then
    mkdir -p "$WHEELS"
    "$PYTHON" -m venv "$VENV"
    "${PIP[@]}" install -q --upgrade pip
    cons="$ENGINES/transformers-constraints.txt"
    echo "torch==$TORCH_VERSION+cpu" > "$cons"
    extra=()
    [[ -n "${TORCH_INDEX_URL:-}" ]] && extra=(--extra-index-url "$TORCH_INDEX_URL")
    # transformers serve's command module imports requests (its chat client) and needs accelerate to place the model
    want=("transformers[serving]==$TRANSFORMERS_VERSION" "torch==$TORCH_VERSION+cpu" accelerate requests)
    "${PIP[@]}" download -q -d "$WHEELS" -c "$cons" "${want[@]}" "${extra[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" -c "$cons" "${want[@]}"
    "$VENV/bin/python" -c "import transformers, torch, accelerate, fastapi, uvicorn, requests, transformers.cli.transformers; print('transformers', transformers.__version__, 'torch', torch.__version__)"
    touch "$VENV/.installed-$TRANSFORMERS_VERSION"
fi
echo "transformers serve ready: $VENV/bin/python -m transformers.cli.transformers serve"
