#!/usr/bin/env python
"""Build one isolated environment per supported SGLang release under ``.engines/`` (CPU only).

Usage::

    python scripts/sglang_envs.py [--root .engines] [--release 0.5.23 ...] [--python python3]

For each release: a virtualenv ``.engines/sglang-<release>`` holding that release's ``sglang``
wheel (installed with ``--no-deps``; its sha256 must match the one recorded in
:data:`RELEASES`) and the pins that differ between releases; the packages every release
imports live once in ``.engines/sglang-base`` (CPU torch among them), put on the path by a
``.pth`` file after the release's own site-packages. Only what ``sglang.srt.server_args`` and
``sglang.bench_serving`` import is installed. Wheels are downloaded once into
``.engines/wheels-sglang`` and installed from there offline. An environment whose recorded spec is
unchanged is kept; each one is smoke-tested by importing both modules, and described in
``.engines/sglang-<release>/glm5-env.json`` (release, wheel sha256, status).

Exit status 0 when every requested environment imports; 1 otherwise (the reason is printed and
written to the environment's ``glm5-env.json``, which the contract tests report when they skip).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLACEHOLDERS = Path(__file__).resolve().parent / "sglang_env"

#: Supported releases: the sha256 of the PyPI wheel the catalogues were generated from.
#: 0.5.8 (2026-01-23) is the early-2026 release the investigation used (0.5.7: 2026-01-01);
#: 0.5.9 (2026-02-23) the one the shipped
#: configs were first written against; 0.5.16 the one every recorded GPU run in data/examples used;
#: 0.5.23 (2026-10-30) the newest.
RELEASES: dict[str, dict[str, str]] = {
    "0.5.8": {
        "wheel": "sglang-0.5.8-py3-none-any.whl",
        "sha256": "b7fbd890f6edd87f46c6e3ce72d592316af316f183c9bd999c3cc44b20fa2451",
    },
    "0.5.9": {
        "wheel": "sglang-0.5.9-py3-none-any.whl",
        "sha256": "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1",
    },
    "0.5.16": {
        "wheel": "sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sha256": "d5f345a18953dd35df568ac56bdcb7f5ee910ab39efea4469b714556d1070713",
    },
    "0.5.23": {
        "wheel": "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sha256": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    },
}

#: What every release's server_args/bench_serving import, all installed with --no-deps.
BASE = [
    "torch==2.13.0", "sympy==1.14.0", "mpmath==1.3.0", "networkx==3.6.1", "jinja2==3.1.6",
    "markupsafe==3.0.4", "filelock==4.3.1", "fsspec==2026.9.0", "typing-extensions==4.16.0",
    "numpy==2.4.6", "orjson==3.13.0", "psutil==7.2.2", "pybase64==1.5.1", "requests==2.34.2",
    "urllib3==2.8.0", "idna==3.20", "certifi==2026.10.19.post1", "charset-normalizer==3.5.3",
    "triton==3.9.0", "packaging==26.4", "pillow==13.0.0", "starlette==1.10.0", "anyio==4.16.0",
    "sniffio==1.3.1", "msgspec==0.23.0", "pydantic==2.14.4", "pydantic-core==2.50.5",
    "annotated-types==0.8.0", "typing-inspection==0.4.5", "pyzmq==27.3.0", "tqdm==4.70.1",
    "ipython==9.18.1", "traitlets==5.16.1", "pygments==2.21.0", "aiohttp==3.14.5",
    "multidict==7.2.1", "attrs==26.1.0", "yarl==1.25.1", "propcache==0.5.4",
    "aiohappyeyeballs==2.7.1", "aiosignal==1.4.0", "frozenlist==1.8.0", "h11==0.16.0",
    "partial-json-parser==0.2.1.1.post7", "pyyaml==6.0.4", "regex==2026.11.19",
    "safetensors==0.8.0", "truststore==0.10.5", "dill==0.4.1", "distro==1.9.0",
    "sentencepiece==0.2.3", "xxhash==4.1.0", "multiprocess==0.70.19", "pandas==3.1.1",
    "pyarrow==26.0.1", "python-dateutil==4.0.0", "six==1.17.0",
]

_HF4 = [
    "transformers==4.57.1", "tokenizers==0.22.1", "huggingface-hub==0.36.0", "openai==2.6.1",
    "httpx==0.28.1", "httpcore==1.0.9", "datasets==4.4.1",
]
#: Release-specific pins (from each wheel's Requires-Dist where it pins), --no-deps.
EXTRA: dict[str, list[str]] = {
    "0.5.8": _HF4,
    "0.5.9": _HF4,
    "0.5.16": [
        "transformers==5.12.1", "tokenizers==0.22.2", "huggingface-hub==1.33.0", "openai==2.6.1",
        "httpx==0.28.1", "httpcore==1.0.9", "datasets==5.2.0", "apache-tvm-ffi==0.1.11",
        "compressed-tensors==0.20.1", "loguru==0.7.3", "gguf==0.19.0", "xgrammar==0.2.1", "einops==0.8.2",
    ],
    "0.5.23": [
        "transformers==5.19.0", "tokenizers==0.23.2", "huggingface-hub==2.4.0", "openai==2.8.0",
        "httpx2==2.16.2", "httpcore2==2.16.2", "datasets==5.2.0", "apache-tvm-ffi==0.1.11",
        "compressed-tensors==0.18.0", "loguru==0.7.3", "gguf==0.19.0",
    ],
}

SMOKE = "import sglang.srt.server_args, sglang.bench_serving, sglang.version as v; print(v.__version__)"


def _say(message: str) -> None:
    print(f"[sglang-envs] {message}", flush=True)


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise RuntimeError(f"{venv} has no lib/python3*/site-packages")
    return found[0]


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return _run([str(venv / "bin" / "python"), "-m", "pip", *args], env=env)


# The releases' wheels: a folder of their own, so that their downloads may run beside the CPU engines'
# installs, which share .engines/wheels.
WHEELS = "wheels-sglang"


def download(wheels: Path, specs: list[str], python: str) -> None:
    """Fetch the wheels of ``specs`` into ``wheels`` unless they are there already."""
    wheels.mkdir(parents=True, exist_ok=True)
    stamp = wheels / ".sglang-downloaded.json"
    done = set(json.loads(stamp.read_text())) if stamp.is_file() else set()
    todo = [s for s in specs if s not in done]
    if not todo:
        return
    _say(f"downloading {len(todo)} wheels into {wheels}")
    result = _run([python, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "-d", str(wheels), *todo])
    if result.returncode != 0:
        raise RuntimeError(f"pip download failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    stamp.write_text(json.dumps(sorted(done | set(todo)), indent=0))


def _install(venv: Path, wheels: Path, specs: list[str]) -> None:
    result = _pip(venv, "install", "-q", "--no-deps", "--no-index", "--find-links", str(wheels), *specs)
    if result.returncode != 0:
        raise RuntimeError(f"pip install into {venv} failed:\n{result.stderr[-3000:]}")


def _spec_hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def build_base(root: Path, python: str) -> Path:
    venv = root / "sglang-base"
    stamp = venv / "glm5-env.json"
    spec = _spec_hash(BASE, sys.version_info[:2])
    if stamp.is_file() and json.loads(stamp.read_text()).get("spec") == spec:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    _say(f"creating {venv}")
    _run([python, "-m", "venv", str(venv)]).check_returncode()
    _install(venv, root / WHEELS, BASE)
    stamp.write_text(json.dumps({"spec": spec, "packages": BASE}, indent=2) + "\n")
    return venv


def build_release(root: Path, release: str, base: Path, python: str) -> dict:
    info = RELEASES[release]
    venv = root / f"sglang-{release}"
    stamp = venv / "glm5-env.json"
    wheel = root / WHEELS / info["wheel"]
    spec = _spec_hash(info, EXTRA[release], _spec_hash(BASE), sorted(
        str(p.relative_to(PLACEHOLDERS)) + _sha256(p) for p in PLACEHOLDERS.rglob("*.py")))
    if stamp.is_file():
        old = json.loads(stamp.read_text())
        if old.get("spec") == spec and old.get("status") == "ok":
            _say(f"{venv.name}: up to date")
            return old
    record = {"release": release, "wheel": info["wheel"], "sha256": info["sha256"], "spec": spec,
              "python": str(venv / "bin" / "python"), "status": "failed", "reason": ""}
    try:
        actual = _sha256(wheel)
        if actual != info["sha256"]:
            raise RuntimeError(f"{wheel.name} has sha256 {actual}, expected {info['sha256']}")
        shutil.rmtree(venv, ignore_errors=True)
        _say(f"creating {venv}")
        _run([python, "-m", "venv", str(venv)]).check_returncode()
        site = _site_packages(venv)
        (site / "_glm5_sglang_base.pth").write_text(str(_site_packages(base)) + "\n")
        _install(venv, root / WHEELS, [str(wheel), *EXTRA[release]])
        shutil.copytree(PLACEHOLDERS / "torchvision", site / "torchvision",
                        ignore=shutil.ignore_patterns("__pycache__"))
        smoke = _run([str(venv / "bin" / "python"), "-W", "ignore", "-c", SMOKE])
        if smoke.returncode != 0:
            raise RuntimeError(f"importing server_args/bench_serving failed:\n{smoke.stderr[-3000:]}")
        if smoke.stdout.strip().splitlines()[-1] != release:
            raise RuntimeError(f"sglang.version says {smoke.stdout.strip()!r}, expected {release}")
        record.update(status="ok")
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        record["reason"] = str(exc)
        _say(f"{venv.name}: FAILED: {exc}")
    venv.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO / ".engines", help="where the envs go")
    parser.add_argument("--release", action="append", choices=sorted(RELEASES),
                        help="build only this release (repeatable; default: all)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    args = parser.parse_args(argv)
    started = time.monotonic()
    releases = args.release or list(RELEASES)
    root = args.root.resolve()
    try:
        # one pip call per set: the releases pin conflicting versions of the same packages
        for specs in [BASE, *(EXTRA[r] + [f"sglang=={r}"] for r in releases)]:
            download(root / WHEELS, specs, args.python)
        base = build_base(root, args.python)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        _say(f"FAILED: {exc}")
        return 1
    records = [build_release(root, r, base, args.python) for r in releases]
    for record in records:
        _say(f"sglang {record['release']}: {record['status']} (wheel sha256 {record['sha256'][:16]}...)")
    _say(f"done in {time.monotonic() - started:.0f} s")
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
