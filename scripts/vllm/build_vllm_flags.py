"""Write glm5lib/engines/vllm/flags/<release>.json: every flag of vLLM's OpenAI server, from vLLM's own parser.

Run with the interpreter that has vLLM (``make vllm`` puts one in .engines/vllm):

    .engines/vllm/bin/python scripts/vllm/build_vllm_flags.py

For a release that is not installed (the GPU release beside the CPU build), put that release's
Python sources first on the path: its argument parser imports no compiled extension.

    unzip -q vllm-0.33.0-*.whl 'vllm/*' -d /tmp/vllm-0.33 && \
    VLLM_TARGET_DEVICE=cpu PYTHONPATH=/tmp/vllm-0.33 .engines/vllm/bin/python scripts/vllm/build_vllm_flags.py

(``VLLM_TARGET_DEVICE=cpu``: a GPU wheel's platform detection fails on a host without a GPU; the
flags, types and choices do not depend on the device.)

The catalogue lets glm5lib check a vLLM config's field names and values where vLLM itself is
not importable (the workbook's own environment); where it is, glm5lib reads the parser directly.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[2] / "glm5lib" / "engines" / "vllm" / "flags"
FORMAT = "glm5lib.vllm_flags/1"


def _jsonable(value):
    plain = (bool, int, float, str, type(None))
    if type(value) in plain:  # not isinstance: an IntEnum's repr is no literal
        return value
    if isinstance(value, (list, tuple)) and all(type(v) in plain for v in value):
        return list(value)
    return repr(value)


def catalogue() -> dict:
    import importlib

    import vllm
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # the OpenAI server's parser, where each release keeps it (0.32: launchers, 0.33: common)
    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                   "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise SystemExit("no make_arg_parser in this vLLM's entrypoints")

    parser = make_arg_parser(FlexibleArgumentParser())
    return {"version": vllm.__version__, "flags": flags_of(parser)}


def flags_of(parser: argparse.ArgumentParser) -> dict:
    flags = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help",):
            continue
        long = [s for s in action.option_strings if s.startswith("--")]
        kind = "bool" if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0 else "value"
        flags[action.dest] = {
            "flags": long or list(action.option_strings),
            "kind": kind,
            "negatable": isinstance(action, argparse.BooleanOptionalAction),
            "type": getattr(action.type, "__name__", None) if action.type else None,
            "default": _jsonable(action.default),
            "choices": [_jsonable(c) for c in action.choices] if action.choices else None,
        }
    return flags


def main() -> None:
    data = catalogue()
    # one file per release: "0.32.0+cpu" and "0.32.0" share a catalogue
    release = ".".join(re.findall(r"\d+", data["version"].split("+", 1)[0])[:3])
    out = OUT_DIR / f"{release}.json"
    out.write_text(json.dumps({"format": FORMAT, "version": data["version"], "flags": data["flags"]},
                              indent=1, sort_keys=True) + "\n")
    print(f"{len(data['flags'])} flags of vLLM {data['version']} -> {out.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
