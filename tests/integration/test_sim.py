"""Tests of the stand-in server (glm5lib.sim): real processes, real HTTP on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from glm5lib.engines.sim import run_standin
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.sim import fit_profile, load_profile, parse_faults, parse_sim_argv
from glm5lib.sim.profile import StepContext
from glm5lib.sim.text import TokenText, count_prompt_tokens

KEY = "sk-test-123"


def _get(url: str, key: str | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, body: dict, key: str | None = KEY, timeout: float = 30.0) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _sse(raw: bytes) -> list:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


@pytest.fixture(scope="module")
def srv():
    with run_standin(
        "--api-key", KEY, "--enable-metrics", "--max-running-requests", "4",
        "--decode-log-interval", "1", "--log-requests", "--sim-seed", "3",
    ) as s:
        yield s


# -- argv, profiles, model ------------------------------------------------------------------


def test_misspelt_flag_is_rejected_with_the_closest_name():
    with pytest.raises(ConfigError) as err:
        parse_sim_argv(["--max-runing-requests", "8"])
    assert "--max-running-requests" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_sim_argv(["--sim-profle", "x"])
    assert "--sim-profile" in str(err.value)


def test_misspelt_flag_exits_2_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "glm5lib.sim", "--disable-cuda-grap"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "--disable-cuda-graph" in proc.stderr


def test_unknown_profile_and_bad_fault_name_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        load_profile("no-such-profile")
    assert "glm5-nvfp4-8x-rtxpro6000" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_faults(["nan-aftr=3"])
    assert "nan-after" in str(err.value)
    with pytest.raises(ConfigError):
        parse_faults(["hang-after=-1"])
    f = parse_faults(["nan-after=3,slow-start=1.5", "oom-at-start"])
    assert (f.nan_after, f.slow_start, f.oom_at_start) == (3, 1.5, True)


def test_flags_resolve_like_sglang():
    base = parse_sim_argv(["--max-running-requests", "64", "--attention-backend", "flashinfer",
                           "--enable-flashinfer-allreduce-fusion", "--enable-hierarchical-cache"])
    assert base.server_args["max_running_requests"] == 64
    assert base.step.cuda_graph and base.step.cuda_graph_max_bs == 64
    assert "--enable-hierarchical-cache" in base.not_modelled
    assert "--max-running-requests" not in base.not_modelled
    fix = parse_sim_argv(["--max-running-requests", "1024", "--disable-cuda-graph"])
    assert not fix.step.cuda_graph
    # Graph memory is given back to the KV pool when graphs are off.
    assert fix.max_total_num_tokens > base.max_total_num_tokens
    small = parse_sim_argv(["--max-total-tokens", "5000", "--page-size", "64"])
    assert small.max_total_num_tokens == 5000 - 5000 % 64
    assert "api_key='***'" in parse_sim_argv(["--api-key", "secret"]).server_args_repr()


def test_profiles_imply_the_published_step_times():
    prof = load_profile("glm5-nvfp4-8x-rtxpro6000")
    graphs = StepContext("flashinfer", True, 64, True, "auto", "flashinfer_cutlass", False)
    no_graph = StepContext("flashinfer", False, 1024, True, "auto", "flashinfer_cutlass", False)
    ctx_tokens = 256 + 64
    # Published: 880 tok/s with 64 running; 1,950 / 2,800 / 3,740 with 256 / 512 / 1,024 running.
    for batch, ctx, target in ((64, graphs, 880), (256, no_graph, 1950), (512, no_graph, 2800),
                               (1024, no_graph, 3740)):
        tok_s = batch / (prof.decode_ms(batch, batch * ctx_tokens, ctx) / 1000)
        assert abs(tok_s / target - 1) < 0.05, (batch, tok_s, target)
    # CUDA graphs only help up to cuda_graph_max_bs.
    assert prof.decode_ms(64, 0, graphs) < prof.decode_ms(64, 0, no_graph)
    assert prof.decode_ms(65, 0, graphs) == prof.decode_ms(65, 0, no_graph)
    # Power follows work: ~83 W at 880 tok/s, ~250 W at 3,740 tok/s.
    assert abs(prof.power_w(880, 0) - 83) < 4 and abs(prof.power_w(3740, 0) - 250) < 10
    # K2-Thinking: its reference run is bound by the KV pool at about 450 running requests.
    k2 = load_profile("k2-thinking-nvfp4-8x-rtxpro6000")
    k2ctx = StepContext("triton", False, 2048, False, "auto", "auto", False)
    assert abs(448 / (k2.decode_ms(448, 448 * 400, k2ctx) / 1000) / 5816 - 1) < 0.05


def test_k2_profile_matches_the_reference_run_log():
    from glm5lib.logs import parse_log
    from glm5lib.paths import data_dir

    ref = parse_log(data_dir() / "reference" / "k2-thinking" / "server.log")
    args = parse_sim_argv(["--sim-profile", "k2-thinking-nvfp4-8x-rtxpro6000", "--max-running-requests",
                           "2048", "--attention-backend", "triton", "--disable-cuda-graph", "--page-size", "1"])
    assert args.max_total_num_tokens == ref.startup["max_total_num_tokens"]
    steady = ref.decode[ref.decode["running_req"] == ref.decode["running_req"].max()]
    modelled = [r.running_req / (args.profile.decode_ms(r.running_req, r.num_token, args.step) / 1000)
                for r in steady.itertuples()]
    assert abs(sum(modelled) / len(modelled) / steady["gen_throughput"].mean() - 1) < 0.05


def test_token_text_slices_agree_with_ids_and_counts():
    t = TokenText(seed=1, cycle=64)
    for start, end in ((0, 5), (10, 64), (60, 70), (3, 200)):
        assert json.loads(t.ids_json(start, end)) == t.ids(start, end)
        assert count_prompt_tokens(t.text(start, end)) == end - start
        assert t.text(start, end) == t.text(start, start + 3) + t.text(start + 3, end)


def test_fit_profile_recovers_step_times_from_decode_lines(tmp_path):
    prof = load_profile("glm5-nvfp4-8x-rtxpro6000")
    ctx = StepContext("flashinfer", False, 1, False, "auto", "flashinfer_cutlass", False)
    lines = ["[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m', attention_backend='flashinfer', "
             "disable_cuda_graph=True, mem_fraction_static=0.88)",
             "[2026-01-01 00:00:01 TP0] max_total_num_tokens=500000, chunked_prefill_size=8192, "
             "max_prefill_tokens=16384, max_running_requests=1024, context_len=202752, available_gpu_mem=9.0 GB"]
    for i, batch in enumerate([32, 32, 128, 128, 300, 300, 600, 600, 1000, 1000]):
        kv = batch * 400
        tput = batch / (prof.decode_ms(batch, kv, ctx) / 1000)
        lines.append(f"[2026-01-01 00:01:{i:02d} TP0] Decode batch, #running-req: {batch}, #token: {kv}, "
                     f"token usage: 0.10, cuda graph: False, gen throughput (token/s): {tput:.2f}, #queue-req: 0, ")
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    fitted = fit_profile(log, out=tmp_path / "mine.json")
    assert fitted.data["fit"]["points"] >= 5
    for batch in (64, 512, 900):
        assert abs(fitted.decode_ms(batch, batch * 400, ctx) / prof.decode_ms(batch, batch * 400, ctx) - 1) < 0.03
    assert abs(fitted.kv_capacity_tokens(0.88, False) - 500000) < 50
    assert load_profile(tmp_path / "mine.json").name == fitted.name
    with pytest.raises(ConfigError):
        fit_profile("[2026-01-01 00:00:00] nothing here\n")


# -- HTTP -----------------------------------------------------------------------------------------


def test_banner_is_the_first_line_and_server_info_says_standin(srv):
    first = srv.log_text().splitlines()[0]
    assert "] glm5lib stand-in server (not SGLang): profile 'glm5-nvfp4-8x-rtxpro6000' (" in first
    assert first.endswith("timings come from a model, not from GPUs")
    status, body = _get(srv.base_url + "/get_server_info", KEY)
    info = json.loads(body)
    assert status == 200
    assert info["standin"]["profile"] == "glm5-nvfp4-8x-rtxpro6000"
    # the emulated release's version, as SGLang reports its own; the stand-in says what it is
    assert info["version"] == "0.5.23" and info["standin"]["release"] == "0.5.23"
    assert info["standin"]["glm5lib_version"]
    assert info["max_running_requests"] == 4 and info["api_key"] == "***"
    assert "--log-requests" in info["standin"]["not_modelled"]
    assert info["max_total_num_tokens"] > 0
    models = json.loads(_get(srv.base_url + "/v1/models", KEY)[1])
    assert models["data"][0]["standin"] is True
    assert json.loads(_get(srv.base_url + "/get_model_info", KEY)[1])["standin"]["profile"]
    assert "not modelled" in srv.log_text() and "--log-requests" in srv.log_text()


def test_api_key_is_enforced(srv):
    assert _get(srv.base_url + "/get_server_info")[0] == 401
    assert _post(srv.base_url + "/generate", {"text": "hi"}, key="wrong")[0] == 401
    assert _get(srv.base_url + "/health")[0] == 200


def test_generate_streams_the_whole_text_with_cumulative_counts(srv):
    status, raw = _post(srv.base_url + "/generate", {
        "text": "one two three four", "stream": True,
        "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}})
    chunks = _sse(raw)
    assert status == 200 and chunks[-1] == "[DONE]"
    data = chunks[:-1]
    assert [c["meta_info"]["completion_tokens"] for c in data] == [1, 2, 3, 4, 5, 6]
    assert all(c["meta_info"]["prompt_tokens"] == 4 for c in data)
    for a, b in itertools.pairwise(data):
        assert b["text"].startswith(a["text"]) and len(b["text"]) > len(a["text"])
    assert data[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert all(c["meta_info"]["finish_reason"] is None for c in data[:-1])
    assert len(data[-1]["output_ids"]) == 6
    assert len({c["meta_info"]["id"] for c in data}) == 1


def test_generate_non_streaming_and_min_tokens(srv):
    status, raw = _post(srv.base_url + "/generate", {
        "input_ids": list(range(10)), "sampling_params": {"max_new_tokens": 7, "min_new_tokens": 7}})
    out = json.loads(raw)
    assert status == 200
    assert out["meta_info"]["completion_tokens"] == 7 and out["meta_info"]["prompt_tokens"] == 10
    assert count_prompt_tokens(out["text"]) == 7
    status, raw = _post(srv.base_url + "/generate", {"text": "x " * 300000})
    assert status == 400 and b"context length" in raw
    status, raw = _post(srv.base_url + "/generate", {"text": "a", "rid": 'my "id"',
                                                      "sampling_params": {"max_new_tokens": 1}})
    assert status == 200 and json.loads(raw)["meta_info"]["id"] == 'my "id"'
    assert _post(srv.base_url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": -1}})[0] == 400
    assert _post(srv.base_url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": "x"}})[0] == 400
    assert _post(srv.base_url + "/v1/completions", {"max_tokens": 2})[0] == 400


def test_long_prompt_is_prefilled_in_chunks(srv):
    before = len(_prefill_lines(srv))
    status, raw = _post(srv.base_url + "/generate", {
        "text": "w " * 40000, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}})
    assert status == 200 and json.loads(raw)["meta_info"]["prompt_tokens"] == 40000
    new = _prefill_lines(srv)[before:]
    chunks = [int(line.split("#new-token: ")[1].split(",")[0]) for line in new]
    assert sum(chunks) == 40000 and max(chunks) <= 16384 and len(chunks) == 3


def _prefill_lines(srv) -> list[str]:
    return [line for line in srv.log_text().splitlines() if "Prefill batch" in line]


def test_openai_streams_with_usage(srv):
    status, raw = _post(srv.base_url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = _sse(raw)
    assert status == 200 and chunks[-1] == "[DONE]"
    body = chunks[:-1]
    assert body[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"]["content"] or "" for c in body if c["choices"])
    assert count_prompt_tokens(content) == 5
    assert body[-1]["choices"] == [] and body[-1]["usage"]["completion_tokens"] == 5
    with_text = body[1:-1]
    assert [c["usage"]["completion_tokens"] for c in with_text] == [1, 2, 3, 4, 5]
    assert with_text[-1]["choices"][0]["finish_reason"] == "length"
    status, raw = _post(srv.base_url + "/v1/completions", {"prompt": "a b c", "max_tokens": 3, "stream": True})
    chunks = _sse(raw)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]).count(" ") == 3
    status, raw = _post(srv.base_url + "/v1/completions", {"prompt": "a b c", "max_tokens": 4})
    out = json.loads(raw)
    assert out["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4,
                            "prompt_tokens_details": None}


def test_running_cap_queue_and_metrics(srv):
    async def drive():
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as session:
            async def one():
                async with session.post(srv.base_url + "/generate", json={
                        "text": "a b", "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}) as r:
                    return (await r.json())["meta_info"]["completion_tokens"]
            return await asyncio.gather(*[one() for _ in range(10)])

    assert asyncio.run(drive()) == [12] * 10
    status, text = _get(srv.base_url + "/metrics")
    assert status == 200
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    assert "sglang:num_running_reqs" in fams and "sglang:time_to_first_token_seconds" in fams
    gen = fams["sglang:generation_tokens"].samples[0].value
    assert gen >= 120
    from glm5lib.logs import parse_log

    decode = parse_log(srv.log_text()).decode
    assert decode["running_req"].max() == 4
    assert (decode[decode["running_req"] == 4]["queue_req"] > 0).any()
    assert set(decode["cuda_graph"]) == {True}


def test_sim_gpus_and_environment(srv):
    status, body = _get(srv.base_url + "/sim/gpus")
    snap = json.loads(body)
    assert status == 200 and snap["standin"] is True and len(snap["gpus"]) == 8
    g = snap["gpus"][0]
    for key in ("power_w", "power_limit_w", "energy_j", "gpu_util", "mem_util", "sm_clock_mhz",
                "mem_used_bytes", "pcie_tx_bytes_s", "temperature_c", "throttle_reasons"):
        assert key in g
    assert g["power_limit_w"] == 600 and 0 < g["power_w"] < 600
    env = json.loads(_get(srv.base_url + "/sim/environment")[1])
    assert env["source"] == "sim" and env["standin"] is True
    assert env["gpus"][0]["compute_capability"] == "12.0"
    assert env["gpus"][0]["pcie_gen_max"] == 5 and env["gpus"][0]["pcie_width_max"] == 16
    assert env["p2p"][0][1] == "OK" and len(env["p2p"]) == 8


def test_stream_interval_and_sigterm(tmp_path):
    with run_standin("--stream-interval", "4", "--max-running-requests", "8") as s:
        _, raw = _post(s.base_url + "/generate", {"text": "a", "stream": True,
                       "sampling_params": {"max_new_tokens": 10, "ignore_eos": True}}, key=None)
        counts = [c["meta_info"]["completion_tokens"] for c in _sse(raw)[:-1]]
        assert counts == [1, 4, 8, 10]
        # glm5lib's launch switches /metrics on unless the config sets enable_metrics false (the
        # stand-in's 404 without it: tests/integration/test_server.py::test_metrics_are_on_unless...)
        assert _get(s.base_url + "/metrics")[0] == 200
        os.kill(s.pid, signal.SIGTERM)
        assert s.proc.wait(timeout=30) == 0


def test_power_follows_work():
    with run_standin("--max-running-requests", "64", "--sim-no-access-log") as s:
        idle = json.loads(_get(s.base_url + "/sim/gpus")[1])["gpus"][0]["power_w"]

        async def load():
            async with aiohttp.ClientSession() as session:
                async def one():
                    async with session.post(s.base_url + "/generate", json={
                            "text": "a b", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}) as r:
                        await r.read()
                tasks = [asyncio.create_task(one()) for _ in range(64)]
                # read the GPUs while the batch decodes: once it is in full swing (however long a
                # busy machine takes to send 64 requests), or as the last request ends
                while True:
                    async with session.get(s.base_url + "/sim/gpus") as r:
                        busy = (await r.json())["gpus"][0]
                    if busy["gpu_util"] > 80 or all(t.done() for t in tasks):
                        break
                    await asyncio.sleep(0.05)
                await asyncio.gather(*tasks)
                return busy

        busy = asyncio.run(load())
        assert busy["power_w"] > idle + 30
        assert busy["gpu_util"] > 80 and busy["pcie_tx_bytes_s"] > 0


# -- faults ---------------------------------------------------------------------------------------


def test_nan_fault_logs_the_signature_and_kills_the_process():
    with run_standin("--sim-fault", "nan-after=1") as s:
        _post(s.base_url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2}}, key=None)
        try:
            _post(s.base_url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 50}},
                  key=None, timeout=10)
        except (urllib.error.URLError, ConnectionError):
            pass
        rc = s.proc.wait(timeout=30)
        assert rc != 0
        text = s.log_text()
        assert text.count("Detected errors during sampling! NaN in the logits.") >= 8
        assert "Scheduler hit an exception: Traceback (most recent call last):" in text
        assert "Received sigquit from a child process." in text
        from glm5lib.logs import parse_log

        assert parse_log(text).crash_cause() == "nan"


@pytest.mark.parametrize(("flags", "cause"), [
    (("--sim-fault", "oom-at-start"), "oom"),
    (("--sim-fault", "nccl-at-start"), "nccl"),
    (("--mem-fraction-static", "0.5"), "oom"),  # weights leave no room for the KV pool
    (("--tp-size", "4"), "oom"),  # twice the weights per GPU do not fit
])
def test_start_faults_exit_with_their_signature(flags, cause):
    with pytest.raises(ServerLaunchError) as err, run_standin(*flags, ready_timeout=30):
        pass
    assert err.value.exit_code != 0
    from glm5lib.logs import parse_log

    assert parse_log("\n".join(err.value.log_lines)).crash_cause() == cause


def test_slow_start_and_hang():
    t0 = time.monotonic()
    with run_standin("--sim-fault", "slow-start=1.5", "--sim-fault", "hang-after=1") as s:
        assert time.monotonic() - t0 >= 1.5
        assert _post(s.base_url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 2}},
                     key=None)[0] == 200
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            _get(s.base_url + "/health", timeout=1.0)
        assert s.alive()
        # The simulated GPUs, like NVML, still answer.
        assert _get(s.base_url + "/sim/gpus", timeout=2.0)[0] == 200


def test_retraction_when_the_kv_pool_is_full():
    with run_standin("--max-total-tokens", "600", "--max-running-requests", "16",
                     "--decode-log-interval", "5", "--sim-no-access-log") as s:
        async def drive():
            async with aiohttp.ClientSession() as session:
                async def one():
                    async with session.post(s.base_url + "/generate", json={
                            "text": "w " * 20, "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}) as r:
                        return (await r.json())["meta_info"]
                return await asyncio.gather(*[one() for _ in range(12)])

        metas = asyncio.run(drive())
        assert all(m["completion_tokens"] == 60 for m in metas)
        assert sum(m["total_retractions"] for m in metas) > 0
        from glm5lib.logs import parse_log

        log = parse_log(s.log_text())
        assert len(log.retractions) > 0
        assert log.decode["token_usage"].max() <= 1.0


def test_generate_batch_health_generate_and_sim_requests(srv):
    status, raw = _post(srv.base_url + "/generate", {
        "text": ["a b", "c d e"], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    outs = json.loads(raw)
    assert status == 200 and [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 3]
    assert _post(srv.base_url + "/generate", {"text": ["a"], "stream": True})[0] == 400
    assert _get(srv.base_url + "/health_generate")[0] == 200
    _post(srv.base_url + "/v1/completions", {"prompt": "x y", "max_tokens": 2, "stream": True})
    recs = json.loads(_get(srv.base_url + "/sim/requests?limit=1", KEY)[1])["requests"]
    assert len(recs) == 1 and recs[0]["completion_tokens"] == 2
    r = recs[0]
    assert r["arrival"] <= r["first_token"] <= r["first_chunk_sent"] <= r["finish"] + 1


def test_client_disconnect_aborts_the_request(srv):
    async def drive():
        body = {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as session, \
                session.post(srv.base_url + "/generate", json=body) as r:
            seen = 0
            async for line in r.content:
                seen += line.startswith(b"data: ")
                if seen >= 2:
                    break
        # the server notices the closed connection at its next write: wait for that, not a fixed time
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.get(srv.base_url + "/metrics") as r:
                    fams = {f.name: f.samples[0].value for f in text_string_to_metric_families(await r.text())
                            if f.samples}
                if fams["sglang:num_running_reqs"] == 0 or time.monotonic() > deadline:
                    return fams
                await asyncio.sleep(0.05)

    from prometheus_client.parser import text_string_to_metric_families

    fams = asyncio.run(drive())
    assert fams["sglang:num_aborted_requests"] >= 1
    assert fams["sglang:num_running_reqs"] == 0


def test_stream_output_log_level_and_sigint():
    from glm5lib.sim.args import parse_sim_argv

    # 0.5.23 renamed --stream-output: the same switch there, read the same way
    assert parse_sim_argv(["--incremental-streaming-output"]).server_args["incremental_streaming_output"] is True
    with pytest.raises(ConfigError, match="--incremental-streaming-output"):
        parse_sim_argv(["--stream-output"])
    with run_standin("--sim-release", "0.5.9", "--stream-output", "--log-level", "warning") as s:
        _, raw = _post(s.base_url + "/generate", {"text": "a", "stream": True,
                       "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}, key=None)
        texts = [c["text"] for c in _sse(raw)[:-1]]
        assert len(texts) == 4 and all(count_prompt_tokens(t) == 1 for t in texts)
        os.kill(s.pid, signal.SIGINT)
        assert s.proc.wait(timeout=30) == 0
        lines = s.log_text().splitlines()
        assert "glm5lib stand-in server (not SGLang)" in lines[0]
        assert not any("Prefill batch" in line for line in lines)


def test_zero_delay_mode_streams_as_fast_as_it_can():
    with run_standin("--sim-zero-delay", "--max-running-requests", "64", "--sim-no-access-log") as s:
        async def drive():
            async with aiohttp.ClientSession() as session:
                async def one():
                    async with session.post(s.base_url + "/generate", json={
                            "text": "a", "stream": True,
                            "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}) as r:
                        return len([1 async for line in r.content if line.startswith(b"data: {")])
                return await asyncio.gather(*[one() for _ in range(32)])

        t0 = time.monotonic()
        chunks = asyncio.run(drive())
        # Modelled time would be 200 steps of ~80 ms = 16 s.
        assert time.monotonic() - t0 < 8
        assert chunks == [200] * 32
        assert json.loads(_get(s.base_url + "/get_server_info")[1])["standin"]["zero_delay"] is True


def test_fit_from_one_batch_size_scales_the_base_profile(tmp_path):
    prof = load_profile("glm5-nvfp4-8x-rtxpro6000")
    ctx = StepContext("flashinfer", False, 1, False, "auto", "flashinfer_cutlass", False)
    lines = []
    for i in range(6):
        kv = 256 * (300 + 10 * i)
        tput = 256 / (1.2 * prof.decode_ms(256, kv, ctx) / 1000)  # 20 % slower than the profile
        lines.append(f"[2026-01-01 00:01:{i:02d}] Decode batch, #running-req: 256, #token: {kv}, token usage: 0.10, "
                     f"cuda graph: False, gen throughput (token/s): {tput:.2f}, #queue-req: 0, ")
    log = tmp_path / "one.log"
    log.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "glm5lib.sim", "fit", str(log), "--name", "one",
                           "--out", str(tmp_path / "one.json")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    fitted = load_profile(tmp_path / "one.json")
    assert "one batch size" in fitted.data["fit"]["method"]
    assert abs(fitted.decode_ms(256, 256 * 320, ctx) / prof.decode_ms(256, 256 * 320, ctx) - 1.2) < 0.03


def test_glm5_sim_subcommand_passes_every_flag_through():
    from glm5lib.cli import build_parser

    ns = build_parser().parse_args(["sim", "--max-running-requests", "64", "--sim-fault", "oom-at-start"])
    assert ns.sim_args == ["--max-running-requests", "64", "--sim-fault", "oom-at-start"]
    assert callable(ns.func)


def test_port_in_use_fails_fast_with_uvicorns_message():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "glm5lib.sim", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "address already in use" in proc.stderr and f"'127.0.0.1', {port}" in proc.stderr
    assert "glm5lib stand-in server (not SGLang)" in proc.stderr.splitlines()[0]


def test_sim_release_emulates_that_release_flags_and_server_args():
    from glm5lib.engines.sglang.config import ServerConfig
    from glm5lib.sim.args import parse_sim_argv

    argv = ["--sim-release", "0.5.23", "--cuda-graph-backend-decode", "disabled",
            "--cuda-graph-backend-prefill", "disabled", "--max-running-requests", "1024",
            "--enable-tf32-matmul", "--enable-metrics"]
    args = parse_sim_argv(argv)
    assert args.step.cuda_graph is False  # graphs off, spelt the 0.5.23 way
    assert "cuda_graph_max_bs_decode" in args.server_args and "cuda_graph_max_bs" not in args.server_args
    assert args.not_modelled == ["--enable-tf32-matmul"]
    # the logged ServerArgs reads back as a 0.5.23 config with the same settings
    back = ServerConfig.from_server_args(args.server_args)
    assert back.release == "0.5.23"
    assert back.disable_cuda_graph is True and back.max_running_requests == 1024
    capped = parse_sim_argv(["--sim-release", "0.5.23", "--cuda-graph-max-bs-decode", "64"])
    assert capped.step.cuda_graph and capped.step.cuda_graph_max_bs == 64
    with pytest.raises(ConfigError, match="--cuda-graph-max-bs-decode"):
        parse_sim_argv(["--sim-release", "0.5.9", "--cuda-graph-max-bs-decode", "64"])  # not a 0.5.9 flag
    with pytest.raises(ConfigError, match="--sim-release"):
        parse_sim_argv(["--sim-release", "0.4.0"])


def test_each_release_line_format_reads_back_the_same():
    # the formats themselves are checked against each release's source in tests/contract
    from glm5lib.logs import parse_log
    from glm5lib.sim.lines import decode_line, prefill_line, server_args_line

    for release in ("0.5.8", "0.5.9", "0.5.23"):
        decode = decode_line(release, running=5, tokens=700, usage=0.25, graph=True, gen_throughput=880.0, queue=3)
        prefill = prefill_line(release, new_seq=2, new_token=512, cached_token=0, usage=0.1, running=5, queue=3,
                               pending_token=1024, graph=False, input_throughput=4096.0)
        assert decode.endswith(", ") == prefill.endswith(", ") == (release == "0.5.8")
        args = server_args_line(release, {"model_path": "m", "max_running_requests": 64})
        assert args.startswith("server_args={'model_path'" if release == "0.5.23" else "server_args=ServerArgs(model_path=")
        text = "\n".join(f"[2026-11-02 10:00:0{i}] {line}" for i, line in enumerate((args, prefill, decode)))
        log = parse_log(text)
        assert log.server_args == {"model_path": "m", "max_running_requests": 64}
        assert log.decode[["running_req", "queue_req", "gen_throughput"]].iloc[0].tolist() == [5, 3, 880.0]
        row = log.prefill.iloc[0]
        assert (row["new_token"], row["running_req"]) == (512, 5)
        assert ("pending_token" in log.prefill and row["pending_token"] == 1024) == (release == "0.5.23")
        assert ("input_throughput" in log.prefill) == (release != "0.5.8")


def test_the_configuration_picks_the_line_variant_of_its_release():
    # prefill graphs: opt-in (piecewise) in 0.5.9, on by default in 0.5.23 up to the prefill cap;
    # speculative decoding adds accept len/rate with each release's own rate (tests/contract
    # checks the lines against each release's source)
    from glm5lib.logs import parse_log
    from glm5lib.sim.lines import decode_line

    def shape(release, *flags):
        return parse_sim_argv(["--sim-release", release, "--sim-zero-delay", *flags]).shape

    assert shape("0.5.8", "--enable-piecewise-cuda-graph").prefill_graph_tokens == 0  # no graph field
    assert shape("0.5.9").prefill_graph_tokens == 0
    assert shape("0.5.9", "--enable-piecewise-cuda-graph", "--chunked-prefill-size", "4096").prefill_graph_tokens == 4096
    assert shape("0.5.9", "--enable-piecewise-cuda-graph", "--piecewise-cuda-graph-max-tokens", "1024").prefill_graph_tokens == 1024
    assert shape("0.5.23", "--chunked-prefill-size", "4096").prefill_graph_tokens == 4096
    assert shape("0.5.23", "--cuda-graph-max-bs-prefill", "512").prefill_graph_tokens == 512
    assert shape("0.5.23", "--cuda-graph-backend-prefill", "disabled").prefill_graph_tokens == 0
    assert shape("0.5.23", "--disable-cuda-graph").prefill_graph_tokens == 0
    # one phase's graphs off leaves the other's on
    decode_off = parse_sim_argv(["--sim-release", "0.5.23", "--cuda-graph-backend-decode", "disabled"])
    assert not decode_off.step.cuda_graph and decode_off.shape.prefill_graph_tokens > 0
    assert not parse_sim_argv(["--sim-release", "0.5.23", "--disable-decode-cuda-graph"]).step.cuda_graph
    assert parse_sim_argv(["--sim-release", "0.5.23", "--cuda-graph-backend-prefill", "disabled"]).step.cuda_graph
    # 0.5.23's precedence: a phase's explicit backend beats its disable switch and the legacy one
    prefill_on = parse_sim_argv(
        ["--sim-release", "0.5.23", "--disable-cuda-graph", "--cuda-graph-backend-prefill", "breakable"])
    assert not prefill_on.step.cuda_graph and prefill_on.shape.prefill_graph_tokens > 0
    assert shape("0.5.23", "--disable-prefill-cuda-graph", "--cuda-graph-backend-prefill", "breakable"
                 ).prefill_graph_tokens > 0
    assert parse_sim_argv(["--sim-release", "0.5.23", "--disable-decode-cuda-graph",
                           "--cuda-graph-backend-decode", "full"]).step.cuda_graph
    assert shape("0.5.23").accept is None
    spec = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "d"]
    assert shape("0.5.9", *spec).accept == (2.0, 0.5)
    assert shape("0.5.23", *spec).accept == (2.0, 1.0 / 3.0)
    assert shape("0.5.23", *spec, "--speculative-num-draft-tokens", "2").accept == (2.0, 1.0)
    parsed = parse_sim_argv(["--sim-release", "0.5.23", *spec])
    assert [parsed.server_args[f] for f in ("speculative_num_steps", "speculative_eagle_topk",
                                            "speculative_num_draft_tokens")] == [3, 1, 4]
    assert any("nominal accept len" in note for note in parsed.notes)
    line = decode_line("0.5.9", running=5, tokens=700, usage=0.25, graph=True, gen_throughput=880.0, queue=3,
                       accept=(2.0, 0.5))
    row = parse_log(f"[2026-11-02 10:00:00] {line}").decode.iloc[0]
    assert (row["accept_len"], row["accept_rate"], row["running_req"], row["cuda_graph"]) == (2.0, 0.5, 5, True)


def test_a_config_of_an_older_release_launches_the_stand_in_emulating_it(tmp_path):
    # --stream-output is 0.5.9's (0.5.23 renamed it): the stand-in must parse 0.5.9's flags
    from glm5lib.engines.sglang import launch
    from glm5lib.engines.sglang.config import ServerConfig
    from glm5lib.http import get

    config = ServerConfig("0.5.9", stream_output=True, max_running_requests=4)
    with launch(config, backend="sim", log_path=tmp_path / "server.log", extra_args=["--sim-zero-delay"]) as server:
        assert "--sim-release" in server.argv and server.argv[server.argv.index("--sim-release") + 1] == "0.5.9"
        assert get(server.base_url, "/get_server_info").json()["version"] == "0.5.9"
    assert "server_args=ServerArgs(" in (tmp_path / "server.log").read_text()
