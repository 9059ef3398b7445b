"""The stand-in's HTTP server (aiohttp) and its start-up/shutdown sequence.

Endpoints follow SGLang's HTTP server (``python/sglang/srt/entrypoints/http_server.py`` and the
OpenAI serving classes, 0.5.x): ``/health``, ``/health_generate``, ``/get_server_info`` and
``/server_info``, ``/get_model_info`` and ``/model_info``, ``/generate``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/models``, ``/flush_cache``, ``/metrics`` (with
``--enable-metrics``), plus the stand-in's own ``/sim/gpus``, ``/sim/environment`` and
``/sim/requests``.

Streaming responses are Server-Sent Events (``data: <json>\\n\\n`` then ``data: [DONE]``).
On ``/generate`` each chunk carries the whole text so far (SGLang's default without
``--stream-output``); on the OpenAI routes each chunk carries the new text only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
import sys
import time
import uuid
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from glm5lib._version import __version__
from glm5lib.masking import mask_value
from glm5lib.paths import display_path
from glm5lib.sim.args import SimArgs
from glm5lib.sim.gpus import SimGpus
from glm5lib.sim.health import health_status
from glm5lib.sim.lines import (
    capture_lines,
    init_distributed_end_line,
    kv_allocated_line,
    line_generation,
    load_weight_end_line,
)
from glm5lib.sim.logwriter import LogWriter, banner_line
from glm5lib.sim.metrics import render_metrics
from glm5lib.sim.scheduler import Req, SchedulerSettings, SimScheduler
from glm5lib.sim.text import TokenText, count_prompt_tokens

__all__ = ["StandinServer", "serve"]

_GB = 1024**3
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"
_STANDIN_NOTE = (
    "glm5lib stand-in server, not SGLang: same flags, endpoints and log format, but every "
    "timing and GPU reading comes from the profile's model"
)


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _access_logger(log: LogWriter) -> type[AbstractAccessLogger]:
    reasons = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
               405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}

    class UvicornStyle(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            peer = request.get("peer")
            host, port = (peer[0], peer[1]) if peer else ("-", 0)
            status = response.status
            log.raw(
                f'INFO:     {host}:{port} - "{request.method} {request.path_qs} HTTP/'
                f'{request.version.major}.{request.version.minor}" {status} {reasons.get(status, "")}'
            )

    return UvicornStyle


class StandinServer:
    """One stand-in server: scheduler, simulated GPUs and the aiohttp application."""

    def __init__(self, args: SimArgs, log: LogWriter | None = None):
        self.args = args
        sa = args.server_args
        self.log = log or LogWriter(tp_size=int(sa["tp_size"]), level=str(sa["log_level"]))
        self.profile = args.profile
        self.model_name = str(sa["served_model_name"])
        self.model_json = json.dumps(self.model_name)
        self.context_len = int(sa["context_length"])
        self.stream_interval = max(1, int(sa["stream_interval"]))
        # --stream-output: /generate chunks carry only the new text (SGLang's incremental mode).
        self.incremental = bool(sa.get("stream_output") or sa.get("incremental_streaming_output"))  # 0.5.23's name
        self.api_key = sa.get("api_key")
        self.text = TokenText(seed=args.seed)
        self.ready = False
        self.hang = asyncio.Event()  # set = the hang fault fired; handlers wait forever
        self.eos_id = int(self.profile["model"]["eos_token_id"])
        self.natural_mean = float(self.profile["model"]["natural_output_mean_tokens"])
        self.user_finished = 0
        self.decode_steps = 0  # after ready; fault triggers count them
        self.open_streams: set[asyncio.Transport] = set()  # for the reset fault
        self.reset_done = False
        self.ready_at: float | None = None
        settings = SchedulerSettings(
            max_running_requests=int(sa["max_running_requests"]),
            max_total_tokens=args.max_total_num_tokens,
            chunked_prefill_size=(
                int(sa["chunked_prefill_size"]) if int(sa["chunked_prefill_size"]) > 0 else 1 << 30
            ),
            max_prefill_tokens=int(sa["max_prefill_tokens"]),
            page_size=int(sa["page_size"]),
            radix_cache=not bool(sa["disable_radix_cache"]),
            decode_log_interval=max(1, int(sa["decode_log_interval"])),
            step=args.step,
            enable_metrics=bool(sa["enable_metrics"]),
            zero_delay=args.zero_delay,
            seed=args.seed,
            schedule_conservativeness=float(sa.get("schedule_conservativeness") or 1.0),
            release=args.release,
            shape=args.shape,
        )
        self.sched = SimScheduler(self.profile, settings, self.log, on_finish=self._on_finish)
        self.gpus = SimGpus(self.profile, self.sched, float(sa["mem_fraction_static"]))
        self._rng = random.Random(args.seed + 1)
        self.app = self._build_app()

    # -- faults --------------------------------------------------------------------------------
    def _on_finish(self, req: Req) -> None:
        if not self.ready or req.rid.startswith("warmup-") or req.rid.startswith("health-"):
            return
        self.user_finished += 1
        self._hang_check()
        f = self.args.faults
        if f.reset_after is not None and not self.reset_done and self.user_finished >= f.reset_after:
            self.reset_done = True
            self.reset_open_streams()

    def reset_open_streams(self) -> None:
        """The reset fault: RST every streaming connection open now; the server stays up."""
        for transport in list(self.open_streams):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        self.log.info(f"stand-in fault: reset {len(self.open_streams)} open connections", rank=None)

    def _fault_counts(self) -> tuple[int, int, float]:
        """(requests finished, decode steps, seconds) since the server became ready."""
        return self.user_finished, self.decode_steps, time.monotonic() - (self.ready_at or time.monotonic())

    def _hang_check(self) -> None:
        if self.ready and not self.hang.is_set() and self.args.faults.hang_due(*self._fault_counts()):
            self.hang.set()
            self.sched.hung = True

    def _crash_check(self) -> None:  # before every decode step
        if not self.ready:
            return
        self.decode_steps += 1
        if self.args.faults.nan_due(*self._fault_counts()):
            self.crash_nan()
        self._hang_check()

    def _exit_like_sglang(self, exc_lines: list[str], final: str, rank_lines: list[str]) -> None:
        """Scheduler traceback, the parent's sigquit line, then the whole process dies."""
        for line in rank_lines:
            self.log.all_ranks(line, level="error")
        self.log.error("Scheduler hit an exception: Traceback (most recent call last):")
        self.log.raw("\n".join([*exc_lines, final]))
        self.log.error("Received sigquit from a child process. It usually means the child failed.", rank=None)
        sys.stdout.flush()
        sys.stderr.flush()
        # SGLang's kill_process_tree ends its own process with SIGKILL.
        os.kill(os.getpid(), signal.SIGKILL)

    def crash_nan(self) -> None:
        frames = [
            '  File "sglang/srt/managers/scheduler.py", line 2674, in run_scheduler_process',
            "    scheduler.event_loop_overlap()",
            '  File "sglang/srt/managers/scheduler.py", line 1062, in event_loop_overlap',
            "    self.process_batch_result(tmp_batch, tmp_result)",
            '  File "sglang/srt/managers/scheduler_output_processor_mixin.py", line 251, in process_batch_result_decode',
            "    next_token_ids = self.tp_worker.resolve_last_batch_result(launch_done)",
            '  File "sglang/srt/layers/sampler.py", line 102, in forward',
            "    crash_on_warnings()",
        ]
        self._exit_like_sglang(
            frames,
            "ValueError: Detected errors during sampling! NaN in the logits.",
            ["Detected errors during sampling! NaN in the logits."],
        )

    # -- helpers ---------------------------------------------------------------------------------
    def _natural_len(self) -> int:
        return max(1, int(self._rng.expovariate(1.0 / self.natural_mean)))

    def _new_req(
        self,
        rid: str,
        prompt_len: int,
        max_new: int,
        min_new: int,
        ignore_eos: bool,
        stream: bool,
        prompt_hash: int | None,
    ) -> Req:
        if max_new < 0:
            raise _BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
        if prompt_len + max_new > self.context_len:
            raise _BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.context_len} tokens. You requested a total of {prompt_len + max_new} tokens: "
                f"{prompt_len} tokens from the input messages and {max_new} tokens for the completion. "
                "Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        if ignore_eos:
            stop_at = max_new
        else:
            stop_at = min(max_new, max(min_new, self._natural_len()))
        req = Req(rid, prompt_len, max_new, max(stop_at, 0), stream, self.stream_interval,
                  offset=self._rng.randrange(self.text.cycle), prompt_hash=prompt_hash)
        return req

    async def _run_req(self, req: Req) -> None:
        """Submit and wait until finished (non-streaming)."""
        if req.max_new == 0:
            req.finished = True
            req.finish_reason = "length"
            req.finish_time = time.time()
            return
        self.sched.submit(req)
        while not req.finished:
            await req.event.wait()
            req.event.clear()

    def _abort(self, req: Req) -> None:
        self.sched.abort(req)

    def _finish_reason_native(self, req: Req) -> str:
        if req.finish_reason == "length":
            return json.dumps({"type": "length", "length": req.max_new})
        if req.finish_reason == "stop":
            return json.dumps({"type": "stop", "matched": self.eos_id})
        if req.finish_reason == "abort":
            return json.dumps({"type": "abort", "message": "request aborted by the server"})
        return "null"

    def _meta_json(self, req: Req, final: bool) -> str:
        fr = self._finish_reason_native(req) if final else "null"
        extra = ""
        if final and req.finish_time is not None:
            extra = f', "e2e_latency": {req.finish_time - req.arrival:.6f}'
        return (
            f'{{"id": "{req.rid}", "finish_reason": {fr}, "prompt_tokens": {req.prompt_len}, '
            f'"weight_version": "default", "total_retractions": {req.retractions}, '
            f'"completion_tokens": {req.gen}, "cached_tokens": {req.cached}{extra}}}'
        )

    def _native_json_delta(self, req: Req, sent: int, final: bool) -> str:
        """A ``--stream-output`` chunk: only the text and ids generated since the last chunk."""
        a, b = req.offset + sent, req.offset + req.gen
        return (
            f'{{"text": "{self.text.text(a, b)}", "output_ids": {self.text.ids_json(a, b)}, '
            f'"meta_info": {self._meta_json(req, final)}}}'
        )

    def _native_json(self, req: Req, final: bool) -> str:
        n = req.gen
        return (
            f'{{"text": "{self.text.text(req.offset, req.offset + n)}", '
            f'"output_ids": {self.text.ids_json(req.offset, req.offset + n)}, '
            f'"meta_info": {self._meta_json(req, final)}}}'
        )

    # -- middleware -------------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        # A hung server answers nothing; the simulated GPUs (NVML's stand-in) still do.
        if self.hang.is_set() and not request.path.startswith("/sim/"):
            await asyncio.Event().wait()
        if request.transport is not None:
            request["peer"] = request.transport.get_extra_info("peername")
        path = request.path
        if self.api_key and not (
            request.method == "OPTIONS"
            or path.startswith("/health")
            or path.startswith("/metrics")
            or path.startswith("/sim/")
        ):
            auth = request.headers.get("Authorization", "")
            if auth != f"Bearer {self.api_key}":
                return web.json_response({"error": "Unauthorized"}, status=401)
        try:
            return await handler(request)
        except _BadRequest as exc:
            return self._error(str(exc), exc.status, request)

    def _error(self, message: str, status: int, request: web.Request) -> web.Response:
        if request.path.startswith("/v1/"):
            body = {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                    "code": status}
        else:
            body = {"error": {"message": message}}
        return web.json_response(body, status=status)

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"request body is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("request body must be a JSON object")
        return body

    # -- routes ------------------------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health_generate)
        for p in ("/get_server_info", "/server_info"):
            r.add_get(p, self.server_info)
        for p in ("/get_model_info", "/model_info"):
            r.add_get(p, self.model_info)
        r.add_route("*", "/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_get("/v1/models", self.models)
        r.add_route("*", "/flush_cache", self.flush_cache)
        r.add_get("/metrics", self.metrics)
        r.add_get("/sim/gpus", self.sim_gpus)
        r.add_get("/sim/environment", self.sim_environment)
        r.add_get("/sim/requests", self.sim_requests)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=await health_status(self.ready, self.sched, self.args.faults.health_delay))

    async def health_generate(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503)
        req = self._new_req(f"health-{uuid.uuid4().hex}", 1, 1, 0, True, False, None)
        try:
            await asyncio.wait_for(self._run_req(req), timeout=20.0)
        except asyncio.TimeoutError:
            self._abort(req)
            return web.Response(status=503)
        return web.Response(status=200)

    def standin_info(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "profile_path": display_path(self.profile.path) if self.profile.path else None,
            "note": _STANDIN_NOTE,
            "not_modelled": list(self.args.not_modelled),
            "faults": self.args.faults.specs(),
            "zero_delay": self.args.zero_delay,
            "release": self.args.release,
            "glm5lib_version": __version__,
        }

    async def server_info(self, request: web.Request) -> web.Response:
        sa = {k: mask_value(k, v) for k, v in self.args.server_args.items()}
        mem = self.profile["memory"]
        kv_gb = self.args.max_total_num_tokens * float(mem["kv_bytes_per_token_per_gpu"]) / _GB
        info = dict(sa)
        info.update(
            {
                "max_total_num_tokens": self.args.max_total_num_tokens,
                "max_req_input_len": self.context_len - 1,
                "internal_states": [
                    {
                        "last_gen_throughput": self.sched.last_gen_throughput,
                        "memory_usage": {
                            "weight": round(float(mem["weights_bytes_per_gpu"]) / _GB, 2),
                            "kvcache": round(kv_gb, 2),
                            "token_capacity": self.args.max_total_num_tokens,
                            "graph": round(float(mem["cuda_graph_reserve_bytes"]) / _GB, 2)
                            if self.args.step.cuda_graph else 0.0,
                        },
                        "effective_max_running_requests_per_dp": int(sa["max_running_requests"]),
                    }
                ],
                "version": self.args.release,  # the emulated SGLang's, as SGLang reports its own
                "standin": self.standin_info(),
            }
        )
        return web.json_response(info)

    async def model_info(self, request: web.Request) -> web.Response:
        sa = self.args.server_args
        return web.json_response(
            {
                "model_path": sa["model_path"],
                "tokenizer_path": sa["tokenizer_path"],
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": self.profile["model"].get("model_type"),
                "architectures": self.profile["model"].get("architectures"),
                "standin": self.standin_info(),
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": int(self.sched.start_time),
                        "owned_by": "glm5lib-standin",
                        "root": self.model_name,
                        "max_model_len": self.context_len,
                        "standin": True,
                    }
                ],
            }
        )

    async def flush_cache(self, request: web.Request) -> web.Response:
        ok = self.sched.flush_cache()
        self.log.info("Cache flushed successfully!" if ok else "Cache not flushed because there are pending requests.")
        return web.Response(
            text="Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n",
            status=200 if ok else 400,
        )

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.args.server_args.get("enable_metrics"):
            raise web.HTTPNotFound(text="metrics are off: start the server with --enable-metrics\n")

        body, content_type = render_metrics(self.sched, self.model_name)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def sim_gpus(self, request: web.Request) -> web.Response:
        return web.json_response(self.gpus.snapshot())

    async def sim_environment(self, request: web.Request) -> web.Response:
        return web.json_response(self.gpus.environment())

    async def sim_requests(self, request: web.Request) -> web.Response:
        """Finished requests as the server saw them (newest last; ``?limit=N``, default all kept)."""
        try:
            limit = int(request.query.get("limit", "0"))
        except ValueError as exc:
            raise _BadRequest(f"limit must be an integer, got {request.query.get('limit')!r}") from exc
        reqs = list(self.sched.recent)
        if limit > 0:
            reqs = reqs[-limit:]
        return web.json_response({"standin": True, "requests": [r.record() for r in reqs]})

    # -- /generate -----------------------------------------------------------------------------------
    def _prompt(self, body: dict[str, Any], api: str) -> tuple[int, int | None]:
        """(prompt tokens, prompt hash for the radix cache) from a request body."""
        if api == "generate":
            text, ids = body.get("text"), body.get("input_ids")
            if text is None and ids is None:
                raise _BadRequest("Either text or input_ids should be provided.")
        else:
            text = body.get("prompt")
            ids = None
            if isinstance(text, list) and text and all(isinstance(t, int) for t in text):
                ids, text = text, None
            elif isinstance(text, list) and len(text) == 1 and isinstance(text[0], str):
                text = text[0]
            if text is None and ids is None:
                raise _BadRequest("prompt is required (a string or a list of token ids)")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                raise _BadRequest("input_ids must be a list of integers (batches are not modelled)")
            return max(1, len(ids)), hash(tuple(ids))
        if not isinstance(text, str):
            raise _BadRequest("text must be a string (batched prompts are not modelled by the stand-in)")
        return count_prompt_tokens(text), hash(text)

    @staticmethod
    def _int_param(params: dict[str, Any], key: str, default: int | None) -> int | None:
        value = params.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise _BadRequest(f"{key} must be an integer, got {value!r}")
        return int(value)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("POST", "PUT"):
            raise web.HTTPMethodNotAllowed(request.method, ["POST", "PUT"])
        body = await self._json_body(request)
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise _BadRequest("sampling_params must be an object")
        text, ids = body.get("text"), body.get("input_ids")
        if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
            return await self._generate_batch(body, params)
        prompt_len, phash = self._prompt(body, "generate")
        max_new = self._int_param(params, "max_new_tokens", 128)
        min_new = self._int_param(params, "min_new_tokens", 0) or 0
        # A client-given rid goes into hand-built JSON: keep it escaped.
        rid = json.dumps(str(body["rid"]))[1:-1] if body.get("rid") else uuid.uuid4().hex
        req = self._new_req(rid, prompt_len, max_new, min_new, bool(params.get("ignore_eos", False)),
                            bool(body.get("stream", False)), phash)
        if not req.stream:
            try:
                await self._run_req(req)
            except asyncio.CancelledError:
                self._abort(req)
                raise
            return web.Response(body=self._native_json(req, True).encode(),
                                content_type="application/json")
        def render(req: Req, sent: int, final: bool) -> bytes:
            if self.incremental:
                payload = self._native_json_delta(req, sent, final)
            else:
                payload = self._native_json(req, final)
            return b"data: " + payload.encode() + b"\n\n"

        return await self._stream(request, req, render, tail=())

    async def _generate_batch(self, body: dict[str, Any], params: dict[str, Any]) -> web.Response:
        """A batch of prompts (``text`` or ``input_ids`` as lists): one output per prompt, in order."""
        if body.get("stream"):
            raise _BadRequest("streaming a batch of prompts is not modelled by the stand-in; "
                              "send one request per prompt")
        prompts = body.get("text") if body.get("text") is not None else body.get("input_ids")
        max_new = self._int_param(params, "max_new_tokens", 128)
        min_new = self._int_param(params, "min_new_tokens", 0) or 0
        reqs = []
        for item in prompts:
            sub = {"text": item} if isinstance(item, str) else {"input_ids": item}
            prompt_len, phash = self._prompt(sub, "generate")
            reqs.append(self._new_req(uuid.uuid4().hex, prompt_len, max_new, min_new,
                                      bool(params.get("ignore_eos", False)), False, phash))
        try:
            await asyncio.gather(*[self._run_req(r) for r in reqs])
        except asyncio.CancelledError:
            for r in reqs:
                self._abort(r)
            raise
        out = "[" + ", ".join(self._native_json(r, True) for r in reqs) + "]"
        return web.Response(body=out.encode(), content_type="application/json")

    # -- OpenAI ---------------------------------------------------------------------------------------
    def _openai_common(self, body: dict[str, Any]) -> tuple[int, int, bool, bool, bool]:
        if body.get("n", 1) not in (1, None):
            raise _BadRequest("n > 1 is not modelled by the stand-in")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise _BadRequest("stream_options must be an object")
        min_new = self._int_param(body, "min_tokens", 0) or 0
        ignore_eos = bool(body.get("ignore_eos", False))
        return (min_new, 0, ignore_eos, bool(opts.get("include_usage")),
                bool(opts.get("continuous_usage_stats")))

    @staticmethod
    def _usage(req: Req) -> str:
        return (
            f'{{"prompt_tokens": {req.prompt_len}, "total_tokens": {req.prompt_len + req.gen}, '
            f'"completion_tokens": {req.gen}, "prompt_tokens_details": null}}'
        )

    def _oai_finish(self, req: Req) -> tuple[str, str]:
        if req.finish_reason == "stop":
            return '"stop"', str(self.eos_id)
        if req.finish_reason == "abort":
            return '"abort"', "null"
        return '"length"', "null"

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._json_body(request)
        prompt_len, phash = self._prompt(body, "completions")
        return await self._openai(request, body, prompt_len, phash, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._json_body(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("messages must be a non-empty list")
        words = 0
        texts = []
        for m in messages:
            if not isinstance(m, dict):
                raise _BadRequest("each message must be an object with role and content")
            content = m.get("content") or ""
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            words += len(str(content).split())
            texts.append(f"{m.get('role')}:{content}")
        # Chat template tokens: a few per message plus the generation prompt.
        prompt_len = words + 4 * len(messages) + 3
        return await self._openai(request, body, prompt_len, hash("\x00".join(texts)), chat=True)

    async def _openai(self, request: web.Request, body: dict[str, Any], prompt_len: int,
                      phash: int, chat: bool) -> web.StreamResponse:
        min_new, _, ignore_eos, include_usage, continuous = self._openai_common(body)
        default_max = None if chat else 16
        max_new = self._int_param(body, "max_completion_tokens", None) if chat else None
        if max_new is None:
            max_new = self._int_param(body, "max_tokens", default_max)
        if max_new is None:
            max_new = max(1, self.context_len - prompt_len)
        stream = bool(body.get("stream", False))
        rid = uuid.uuid4().hex
        req = self._new_req(rid, prompt_len, max_new, min_new, ignore_eos, stream, phash)
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        head = f'{{"id": "{rid}", "object": "{obj}{".chunk" if chat and stream else ""}", ' \
               f'"created": {created}, "model": {self.model_json}, '
        if not stream:
            try:
                await self._run_req(req)
            except asyncio.CancelledError:
                self._abort(req)
                raise
            text = json.dumps(self.text.text(req.offset, req.offset + req.gen))
            fr, matched = self._oai_finish(req)
            if chat:
                choice = (f'{{"index": 0, "message": {{"role": "assistant", "content": {text}, '
                          f'"reasoning_content": null, "tool_calls": null}}, "logprobs": null, '
                          f'"finish_reason": {fr}, "matched_stop": {matched}}}')
            else:
                choice = (f'{{"index": 0, "text": {text}, "logprobs": null, '
                          f'"finish_reason": {fr}, "matched_stop": {matched}}}')
            out = head + f'"choices": [{choice}], "usage": {self._usage(req)}}}'
            return web.Response(body=out.encode(), content_type="application/json")

        def render(req: Req, sent: int, final: bool) -> bytes:
            delta = self.text.text(req.offset + sent, req.offset + req.gen)
            fr, matched = self._oai_finish(req) if final else ("null", "null")
            usage = self._usage(req) if continuous else "null"
            if chat:
                choice = (f'{{"index": 0, "delta": {{"role": null, "content": "{delta}"}}, '
                          f'"logprobs": null, "finish_reason": {fr}, "matched_stop": {matched}}}')
            else:
                choice = (f'{{"index": 0, "text": "{delta}", "logprobs": null, '
                          f'"finish_reason": {fr}, "matched_stop": {matched}}}')
            return b"data: " + (head + f'"choices": [{choice}], "usage": {usage}}}').encode() + b"\n\n"

        first = None
        if chat:
            first = (head + '"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, '
                     '"logprobs": null, "finish_reason": null, "matched_stop": null}], "usage": null}')
        tail: tuple = ()
        if include_usage:
            tail = (lambda r: head + f'"choices": [], "usage": {self._usage(r)}}}',)
        return await self._stream(request, req, render, tail=tail, first=first)

    async def _stream(self, request: web.Request, req: Req, render, tail: tuple = (),
                      first: str | None = None) -> web.StreamResponse:
        """Stream a request as SSE: ``render(req, sent, final)`` makes one event.

        The first chunk goes through aiohttp (which sends the headers with it); after that, on
        HTTP/1.1, the scheduler writes each step's chunks straight to the socket through
        ``req.sink`` (no task wake-up per token). A client that reads too slowly has
        intermediate chunks merged: the next chunk carries everything since the last one sent.
        """
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        fast = request.version >= (1, 1) and request.transport is not None
        if fast:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        if request.transport is not None:
            self.open_streams.add(request.transport)
        try:
            wrote = False
            if first is not None:
                await resp.write(b"data: " + first.encode() + b"\n\n")
                wrote = True
            if req.max_new == 0:
                await self._run_req(req)
            else:
                if fast and wrote:
                    req.sink = self._make_sink(request.transport, render)
                self.sched.submit(req)
            while True:
                if not (req.finished or req.aborted):
                    await req.event.wait()
                    req.event.clear()
                if req.aborted:
                    return resp
                if req.gen > req.sent or (req.finished and not req.final_sent):
                    final = req.finished
                    chunk = render(req, req.sent, final)
                    req.sent = req.gen
                    req.final_sent = final
                    await resp.write(chunk)
                    if req.first_chunk_sent is None and req.gen:
                        req.first_chunk_sent = time.time()
                if req.finished:
                    break
                if fast and req.sink is None:
                    req.sink = self._make_sink(request.transport, render)
            for make in tail:
                await resp.write(b"data: " + make(req).encode() + b"\n\n")
            await resp.write(_DONE)
        except ConnectionError:
            # The client went away: drop the request quietly, as SGLang aborts it.
            self._abort(req)
        except asyncio.CancelledError:
            self._abort(req)
            raise
        finally:
            self.open_streams.discard(request.transport)
        return resp

    def _make_sink(self, transport: asyncio.Transport, render):
        """The per-step writer the scheduler calls for a streaming request (see ``_stream``)."""
        limit = 1 << 20

        def sink(req: Req) -> None:
            if transport.is_closing():
                req.sink = None
                self._abort(req)
                req.event.set()
                return
            final = req.finished
            if not final and transport.get_write_buffer_size() > limit:
                return
            data = render(req, req.sent, final)
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            req.sent = req.gen
            if req.first_chunk_sent is None:
                req.first_chunk_sent = time.time()
            if final:
                req.final_sent = True

        return sink

    # -- start-up -------------------------------------------------------------------------------------
    async def _startup(self) -> bool:
        """Print SGLang's start-up sequence; False when a start-up fault ended it."""
        args, log, prof = self.args, self.log, self.profile
        sa = args.server_args
        mem = prof["memory"]
        hw = prof["hardware"]
        total_gb = float(hw["memory_total_bytes"]) / _GB
        t0 = time.time()
        if line_generation(args.release) != "0.5.23":  # 0.5.23 logs no torch.distributed lines
            log.info("Init torch distributed begin.", rank=0)
        if args.faults.nccl_at_start:
            await asyncio.sleep(0.2)
            self.log.raw(
                "NCCL WARN Cuda failure 'peer access is not supported between these two devices'\n"
                "NCCL WARN Failed to open/use peer memory (simulated by glm5lib.sim)"
            )
            self._exit_like_sglang(
                [
                    '  File "sglang/srt/managers/scheduler.py", line 2656, in run_scheduler_process',
                    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
                    '  File "sglang/srt/model_executor/model_runner.py", line 604, in init_torch_distributed',
                    "    initialize_model_parallel(tensor_model_parallel_size=self.tp_size)",
                    '  File "sglang/srt/distributed/parallel_state.py", line 1363, in initialize_model_parallel',
                    "    _TP = init_model_parallel_group(",
                ],
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
                [],
            )
            return False
        line = init_distributed_end_line(args.release, elapsed=time.time() - t0, mem_usage=0.62)
        if line:
            log.info(line, rank=0)
        avail = total_gb - 0.62 - 1.1
        log.all_ranks(f"Load weight begin. avail mem={avail:.2f} GB")
        load_s = float(prof["startup"]["load_seconds"]) + float(args.faults.slow_start)
        await asyncio.sleep(load_s)
        tp_ratio = int(hw["num_gpus"]) / max(1, int(sa["tp_size"]))
        w_gb = float(mem["weights_bytes_per_gpu"]) * tp_ratio / _GB
        if w_gb > avail:
            self._exit_like_sglang(
                [
                    '  File "sglang/srt/model_executor/model_runner.py", line 812, in load_model',
                    "    self.model = get_model(model_config=self.model_config, load_config=self.load_config)",
                ],
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {w_gb - avail:.2f} GiB. "
                f"GPU 0 has a total capacity of {total_gb:.2f} GiB",
                [],
            )
            return False
        after = avail - w_gb
        log.all_ranks(load_weight_end_line(
            args.release, elapsed=time.time() - t0, model_type=(prof['model'].get('architectures') or ['Model'])[0],
            avail=max(after, 0), mem_usage=w_gb,
        ))
        if args.faults.oom_at_start or args.max_total_num_tokens <= 0:
            self._exit_like_sglang(
                [
                    '  File "sglang/srt/managers/scheduler.py", line 2656, in run_scheduler_process',
                    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
                    '  File "sglang/srt/model_executor/model_runner.py", line 1714, in init_memory_pool',
                    "    raise RuntimeError(",
                ],
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                [],
            )
            return False
        tokens = args.max_total_num_tokens
        kv_gb = tokens * float(mem["kv_bytes_per_token_per_gpu"]) / _GB
        log.all_ranks(kv_allocated_line(args.release, tokens=tokens, kv_gb=kv_gb))
        after -= kv_gb
        log.all_ranks(f"Memory pool end. avail mem={after:.2f} GB")
        if args.step.cuda_graph:
            sizes = list(args.step.graph_sizes)
            capture_s = float(prof["startup"]["cuda_graph_capture_seconds"])
            g_gb = float(mem["cuda_graph_reserve_bytes"]) / _GB
            before, done = capture_lines(args.release, sizes=sizes, avail_before=after, elapsed=capture_s,
                                         mem_usage=g_gb, avail_after=after - g_gb)
            for line in before:
                log.info(line, rank=0)
            await asyncio.sleep(capture_s)
            after -= g_gb
            for line in done:
                log.info(line, rank=0)
        log.info(
            f"max_total_num_tokens={tokens}, chunked_prefill_size={sa['chunked_prefill_size']}, "
            f"max_prefill_tokens={sa['max_prefill_tokens']}, max_running_requests={sa['max_running_requests']}, "
            f"context_len={self.context_len}, available_gpu_mem={after:.2f} GB",
            rank=0,
        )
        return True

    async def _warmup(self) -> None:
        req = self._new_req("warmup-" + uuid.uuid4().hex, 6, 8, 0, True, False, None)
        await self._run_req(req)


def _raise_open_files_limit(target: int = 65535) -> None:
    """Allow thousands of client sockets, as SGLang's set_ulimit does at start."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _port_free(host: str, port: int) -> str | None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return str(exc)
    return None


async def serve(args: SimArgs, log: LogWriter | None = None) -> int:
    """Run the stand-in until SIGTERM/SIGINT (returns 0) or a fault ends it."""
    sa = args.server_args
    log = log or LogWriter(tp_size=int(sa["tp_size"]), level=str(sa["log_level"]))
    prof = args.profile
    log.info(banner_line(prof.name, display_path(prof.path) if prof.path else "<in memory>"), rank=None, force=True)
    log.info(args.server_args_line(), rank=None)
    for note in args.notes:
        log.info(f"stand-in: {note}", rank=None)
    if args.not_modelled:
        log.info(
            "stand-in: flags accepted but not modelled (no effect on timings): "
            + ", ".join(args.not_modelled),
            rank=None,
        )
    if args.faults.specs():
        log.info(f"stand-in: faults to inject: {', '.join(args.faults.specs())}", rank=None)
    _raise_open_files_limit()
    host, port = str(sa["host"]), int(sa["port"])
    busy = _port_free(host, port)
    if busy:
        log.raw(f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
                f"address already in use ({busy})")
        return 1

    server = StandinServer(args, log)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    startup = asyncio.ensure_future(server._startup())
    done, _ = await asyncio.wait({startup, asyncio.ensure_future(stop.wait())},
                                 return_when=asyncio.FIRST_COMPLETED)
    if startup not in done:
        startup.cancel()
        return 0
    if not startup.result():
        return 1
    server.sched.crash_hook = server._crash_check
    server.sched.start()
    runner = web.AppRunner(
        server.app,
        access_log_class=_access_logger(log) if args.access_log else AbstractAccessLogger,
        access_log=log if args.access_log else None,
        handle_signals=False,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        log.raw(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address ('{host}', {port}): "
                f"{exc.strerror}")
        await runner.cleanup()
        await server.sched.stop()
        return 1
    log.raw(f"INFO:     Started server process [{os.getpid()}]\nINFO:     Waiting for application startup.\n"
            f"INFO:     Application startup complete.\n"
            f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    await server._warmup()
    server.ready = True
    server.ready_at = time.monotonic()
    log.info("The server is fired up and ready to roll!", rank=None)
    if args.faults.hang_after == 0:
        server.hang.set()
        server.sched.hung = True
    await stop.wait()
    # Clean stop: end every open stream, close the listener, stop the scheduler.
    for req in list(server.sched.running) + list(server.sched.waiting):
        req.finished = True
        req.finish_reason = "abort"
        req.event.set()
    await server.sched.stop()
    await runner.cleanup()
    return 0
