# What the CPU engines' installs share (scripts/vllm/install.sh, scripts/transformers/install.sh):
# sourced from the repository root as `source scripts/cpu_engine_env.sh NAME`, it sets
#
#   ENGINES        folder for engines and wheels (default: .engines in the repository root)
#   PYTHON         interpreter for the environment (default python3)
#   TORCH_VERSION  the one CPU build of torch every engine here is installed with, so the wheels in
#                  $WHEELS serve them all
#   VENV, WHEELS   the engine's ignored virtual environment ($ENGINES/NAME) and the shared wheels
#   PIP            that environment's pip, as an array
#   TORCH_EXTRA    --extra-index-url TORCH_INDEX_URL where that is set (an index holding
#                  torch==$TORCH_VERSION+cpu when pip's own indexes lack it), else nothing
#
# and defines new_venv CONSTRAINTS: a fresh environment with a current pip, and CONSTRAINTS
# written to pin the CPU torch.
ENGINES=${ENGINES:-.engines}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
VENV="$ENGINES/$1"
WHEELS="$ENGINES/wheels"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
TORCH_EXTRA=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    TORCH_EXTRA=(--extra-index-url "$TORCH_INDEX_URL")
fi

new_venv() {
    mkdir -p "$WHEELS"
    "$PYTHON" -m venv "$VENV"
    "${PIP[@]}" install -q --upgrade pip
    echo "torch==$TORCH_VERSION+cpu" > "$1"
}
