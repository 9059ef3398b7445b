"""Launch real SGLang through glm5lib's launcher with the API key in $GLM5_API_KEY and check where it goes.

    PYTHONPATH=.:/tmp/site python3 scripts/gpu/check_sglang_key.py OUT_DIR MODEL_PATH [sglang|sim]

Checks, written to OUT_DIR/key-check.json (the key itself is never written): that no process's command
line holds the key while the server runs; that SGLang got it (``/v1/models`` answers 401 without it and
200 with it, and a ``/generate`` request with it completes); that the private ``--config`` file that
carried it was readable by its owner only and is gone once the server stopped; that the server log
glm5lib keeps does not hold it. CUDA graphs are off so the server starts in about a minute.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from glm5lib import engines, http
from glm5lib.engines.sglang.config import ServerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from keywatch import holders  # beside this script


def post_status(url: str, key: str, body: dict) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def config_file(pid: int) -> Path | None:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for i, a in enumerate(args[:-1]):
        if a == b"--config":
            return Path(args[i + 1].decode())
    return None


def main() -> None:
    out, model = Path(sys.argv[1]), sys.argv[2]
    backend = sys.argv[3] if len(sys.argv) > 3 else "sglang"  # sim: rehearse on the stand-in (8 GPUs' memory)
    key = os.environ["GLM5_API_KEY"]
    work = Path("/tmp/key-check")
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps({"format": "glm5lib.server_config/1", "name": "key-check", "server_args": {
        "model_path": model, "load_format": "dummy", "attention_backend": "triton", "sampling_backend": "pytorch",
        "mem_fraction_static": 0.8, "max_running_requests": 16, "disable_cuda_graph": True, "tp_size": 8 if backend == "sim" else 1}}))
    config = ServerConfig.load(work / "config.json")
    result: dict = {"config_has_key": config.api_key is not None}
    started = time.monotonic()
    srv = engines.get(backend).launch(engines.LaunchRequest(config=config, log_path=work / "server.log",
                                                             ready_timeout=400, api_key=key))
    try:
        result["ready_s"] = round(time.monotonic() - started, 1)
        path = config_file(srv.pid)
        result["config_file_passed"] = path is not None
        if path is not None:
            result["config_file_mode"] = oct(stat.S_IMODE(path.stat().st_mode))
        result["processes_holding_key"] = [f"{pid} {args[0].decode(errors='replace')}"
                                           for pid, args in holders(key.encode())]
        base = srv.base_url
        result["models_without_key"] = http.get(base, "/v1/models").status
        result["models_with_key"] = http.get(base, "/v1/models", api_key=key).status
        result["generate_with_key"] = post_status(f"{base}/generate", key, {
            "input_ids": list(range(1, 33)), "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}})
    finally:
        srv.stop()
    result["config_file_left"] = path.exists() if path is not None else None
    log = (work / "server.log").read_bytes()
    result["server_log_holds_key"] = key.encode() in log
    result["server_args_api_key"] = [line.split("api_key=", 1)[1][:12] for line in log.decode(errors="replace").splitlines()
                                     if "api_key=" in line][:1]
    (out / "key-check.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "key-check-server.log").write_bytes(log[-200_000:])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
