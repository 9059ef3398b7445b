"""toyserve's adapter for glm5lib: the whole of what a fifth engine brings, in its own folder.

Its log reader fills the evidence schema from ``[toy] ...`` lines, its adapter maps its flags
(``max_seqs``, ``kv_slots``) onto glm5lib's neutral limits and its ``toy_*`` gauges onto the
evidence columns, tells it apart from outside (``GET /toy/about``) and launches it from an argv
template through glm5lib's engine-blind server layer. ``glm5lib.engines.register(ADAPTER)`` is
the one registration: no file of glm5lib changes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import http, server
from glm5lib.engines import Capabilities, EngineAdapter, LaunchRequest, Lever
from glm5lib.logs import ServerLog, classify_fatal
from glm5lib.logs.engine import LogEngine
from glm5lib.logs.tables import empty_frame, errors_frame, http_frame

SERVER = Path(__file__).with_name("server.py")
#: the argv template that starts toyserve (``{python}``, ``{host}``, ``{port}`` filled by glm5lib)
COMMAND = ["{python}", str(SERVER), "--host", "{host}", "--port", "{port}"]

_LINE = re.compile(r"^\[toy\] (?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (?P<text>.*)$")
_SCHED = re.compile(r"sched step=(?P<step>\d+) batch=(?P<batch>\d+) queued=(?P<queued>\d+) "
                    r"kv_used=(?P<kv>[\d.]+) out_tok_per_s=(?P<rate>[\d.]+)")
_CONFIG = re.compile(r"(\w+)=(\S+)")
_DECODE = ("time", "rank", "running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req")
_PREFILL = ("time", "rank", "new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req")
_RETRACT = ("time", "rank", "retracted_reqs", "new_token_ratio_before", "new_token_ratio_after")


def _value(text: str) -> Any:
    """A number where the text is one (toyserve writes its settings as ``name=value``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class ToyParser:
    """Reads toyserve's log into glm5lib's evidence tables."""

    def __init__(self, date: str | None = None, *, incremental: bool = True):
        self.server_args: dict[str, Any] = {}
        self.startup: dict[str, Any] = {}
        self.decode: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.ready_at: pd.Timestamp | None = None
        self.became_ready = False
        self.lines = 0
        self.skipped = 0
        self.skipped_examples: list[str] = []
        self.first_time: pd.Timestamp | None = None
        self.last_time: pd.Timestamp | None = None

    def feed(self, lines: list[str], final: bool = True) -> None:
        for line in lines:
            self.lines += 1
            kind = classify_fatal(line)
            if kind is not None:
                self.errors.append({"time": self.last_time, "rank": "", "kind": kind, "message": line, "text": line})
            m = _LINE.match(line)
            if not m:
                continue
            when = pd.Timestamp(m["time"])
            self.first_time = self.first_time or when
            self.last_time = when
            text = m["text"]
            if text.startswith("config: "):
                self.server_args = {k: _value(v) for k, v in _CONFIG.findall(text)}
            elif text.startswith("kv cache: "):
                self.startup["kv_slots_total"] = int(text.split()[2])
            elif text.endswith("; ready"):
                self.ready_at, self.became_ready = when, True
            elif (s := _SCHED.match(text)) is not None:
                self.decode.append({"time": when, "rank": "", "running_req": int(s["batch"]), "num_token": None,
                                    "token_usage": float(s["kv"]), "cuda_graph": None,
                                    "gen_throughput": float(s["rate"]), "queue_req": int(s["queued"])})

    def feed_bulk(self, lines: list[str]) -> None:
        self.feed(lines, final=False)

    def finish(self) -> None:
        pass

    def build(self) -> ServerLog:
        decode = pd.DataFrame(self.decode, columns=list(_DECODE)) if self.decode else empty_frame(_DECODE)
        if self.decode:
            decode["cuda_graph"] = decode["cuda_graph"].astype("boolean")
        return ServerLog(server_args=dict(self.server_args), startup={"engine": "toy", **self.startup},
                         ready_at=self.ready_at, decode=decode, prefill=empty_frame(_PREFILL),
                         retractions=empty_frame(_RETRACT), errors=errors_frame(self.errors), http=http_frame([]),
                         skipped=self.skipped, skipped_examples=list(self.skipped_examples),
                         became_ready=self.became_ready, lines=self.lines, first_time=self.first_time,
                         last_time=self.last_time)

    def drain(self) -> ServerLog:
        slog = self.build()
        self.decode.clear()
        self.errors.clear()
        return slog


LOG_READER = LogEngine(name="toy", detect=lambda head: "[toy]" in head and "toyserve" in head,
                       new_parser=ToyParser, cap_keys=("max_seqs",), important_args=("max_seqs", "kv_slots"))

CAPABILITIES = Capabilities(
    logs_decode_lines=True,
    mixed_steps=True,
    running_cap_field="max_seqs",
    more_fields={"kv_tokens": "kv_slots"},
    startup_keys={"kv_tokens": "kv_slots_total"},
    launches_from_config=False,
    accepts_foreign_flags=True,
    default_api="completions",
    token_id_prompts=False,
)

METRICS = {
    "running_req": ("toy_batch_running",),
    "queue_req": ("toy_batch_queued",),
    "token_usage": ("toy_kv_fill",),
    "generation_tokens": ("toy_output_tokens_total",),
    "prompt_tokens": ("toy_input_tokens_total",),
    "requests_finished": ("toy_requests_done_total",),
}


def _launch(request: LaunchRequest) -> Any:
    srv = server.launch_command([*(request.command or COMMAND), *request.extra_args], log_path=request.log_path,
                                ready_timeout=request.ready_timeout, changes=request.command_changes,
                                port=request.port)
    srv.log_engine = "toy"
    return srv


def _identify(url: str, api_key: str | None, timeout: float) -> dict[str, Any] | None:
    about = http.get_json(url, "/toy/about", api_key=api_key, timeout=timeout)
    return about if isinstance(about, dict) and about.get("engine") == "toyserve" else None


ADAPTER = EngineAdapter(
    name="toy",
    title="toyserve",
    description="toyserve, a continuous-batching engine of its own flags, log lines and gauges",
    capabilities=CAPABILITIES,
    metrics=METRICS,
    log_engine="toy",
    launcher=_launch,
    lever_maker=lambda release=None: [Lever("max_seqs", "int", 1, 512, "sequences one batch may hold",
                                            flag="--max-seqs", acts_on="running")],
    identify=_identify,
    log_reader=LOG_READER,
)

if __name__ == "__main__":  # pragma: no cover - the module is imported by the test
    sys.exit("import this module; run server.py to start toyserve")
