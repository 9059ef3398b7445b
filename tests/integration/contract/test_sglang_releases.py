"""Contract tests against the real SGLang releases built by ``make sglang-envs``.

Each supported release's own parser (``ServerArgs.add_cli_args``, run in that release's
environment under .engines/) is the judge: the shipped configs rendered for the release parse
to the same values with no deprecation warning, and every switch of the release is accepted
by ServerConfig. Skipped, with the reason, where the environments are not built.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from glm5lib.engines.sglang.config import (
    BUNDLED_RELEASES,
    ServerConfig,
    catalogue,
    decode_graph_sizes,
    shipped_configs,
)
from glm5lib.sim.lines import GENERATIONS, writes_since

pytestmark = pytest.mark.contract

ENGINES = Path(__file__).resolve().parents[3] / ".engines"
SGLANG_CONFIGS = [n for n in shipped_configs() if not n.startswith("vllm")]

_PARSE = textwrap.dedent("""
    import argparse, json, sys, warnings, io, contextlib
    warnings.simplefilter("always")
    from sglang.srt.server_args import ServerArgs
    out = []
    for argv in json.loads(sys.stdin.read()):
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        err = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err), \\
                contextlib.redirect_stdout(err):
            warnings.simplefilter("always")
            ns = parser.parse_args(argv)
        values = {k: v for k, v in vars(ns).items() if isinstance(v, (int, float, str, bool, list, type(None)))}
        out.append({"values": values, "warnings": [str(w.message) for w in caught], "output": err.getvalue()})
    print(json.dumps(out))
""")


def _env(release: str) -> Path:
    stamp = ENGINES / f"sglang-{release}" / "glm5-env.json"
    if not stamp.is_file():
        pytest.skip(f"no SGLang {release} environment: run 'make sglang-envs' ({stamp} missing)")
    record = json.loads(stamp.read_text())
    if record.get("status") != "ok":
        pytest.skip(f"SGLang {release} environment failed to build: {record.get('reason', '')[:300]}")
    return Path(record["python"])


def _run_in(release: str, script: str, stdin: str = "") -> str:
    python = _env(release)
    done = subprocess.run([str(python), "-W", "ignore", "-c", script], input=stdin,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("release", sorted(BUNDLED_RELEASES))
def test_shipped_configs_parse_with_the_release_own_parser(release):
    configs = [ServerConfig.load(name, release=release) for name in SGLANG_CONFIGS]
    results = json.loads(_run_in(release, _PARSE, json.dumps([c.to_argv() for c in configs])))
    for name, config, result in zip(SGLANG_CONFIGS, configs, results, strict=True):
        noisy = [w for w in result["warnings"] if "deprecat" in w.lower()]
        assert not noisy and "deprecat" not in result["output"].lower(), (name, release, noisy, result["output"])
        parsed = result["values"]
        for field, value in config.explicit.items():
            dest = field if field in parsed else next(
                d for d in parsed if d.replace("tensor_parallel_size", "tp_size") == field)
            if field == "disable_cuda_graph" and config.catalogue.graphs_by_phase:
                assert parsed["cuda_graph_backend_decode"] == "disabled", name
                assert parsed["cuda_graph_backend_prefill"] == "disabled", name
                continue
            assert parsed[dest] == value, (name, release, field, parsed[dest], value)
        if config.disable_cuda_graph:
            off = parsed.get("disable_cuda_graph") or (
                parsed.get("cuda_graph_backend_decode") == "disabled"
                and parsed.get("cuda_graph_backend_prefill") == "disabled")
            assert off, (name, release)


_SWITCHES = textwrap.dedent("""
    import argparse, json
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = [a.option_strings[0] for a in parser._actions
             if a.option_strings and a.nargs == 0 and a.dest != "help"]
    print(json.dumps(flags))
""")


@pytest.mark.parametrize("release", sorted(BUNDLED_RELEASES))
def test_every_switch_of_the_release_is_accepted(release):
    switches = json.loads(_run_in(release, _SWITCHES))
    assert len(switches) > 80
    rejected = []
    for flag in switches:
        try:
            ServerConfig.from_argv(["--model-path", "m", flag], release=release)
        except Exception as exc:  # collect them all, report at once
            rejected.append(f"{flag}: {exc}")
    assert not rejected, rejected


_CONFIG_MERGE = textwrap.dedent("""
    import argparse, json, sys
    from sglang.srt.server_args import ServerArgs
    try:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    except ImportError:  # 0.5.23 moved it
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = json.loads(sys.stdin.read())
    ns = parser.parse_args(ConfigArgumentMerger(parser).merge_config_with_args(argv))
    print(json.dumps({"api_key": ns.api_key, "admin_api_key": ns.admin_api_key, "model_path": ns.model_path}))
""")


@pytest.mark.parametrize("release", sorted(BUNDLED_RELEASES))
def test_the_key_file_glm5lib_writes_is_read_by_the_release_own_config_merger(release):
    """The API keys go in a file named by --config, off the command line: each release's own
    ConfigArgumentMerger (what prepare_server_args calls) reads them from it."""
    from glm5lib.engines.sglang.config import merge_config_file, write_key_file

    key = 'sk-"odd": #key \u00e9'
    path = write_key_file({"api-key": key, "admin-api-key": "admin-1"})
    try:
        argv = ["--model-path", "m", "--config", str(path)]
        read = json.loads(_run_in(release, _CONFIG_MERGE, json.dumps(argv)))
        assert read == {"api_key": key, "admin_api_key": "admin-1", "model_path": "m"}
        # the stand-in's merge gives the same
        mine = ServerConfig.from_argv(merge_config_file(argv, catalogue(release)), release=release)
        assert (mine.api_key, mine.admin_api_key) == (key, "admin-1")
    finally:
        path.unlink()


def test_release_only_flags_of_0_5_23():
    config = ServerConfig.from_argv(
        ["--model-path", "m", "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill",
         "disabled", "--cuda-graph-max-bs-decode", "64", "--enable-tf32-matmul"], release="0.5.23")
    assert config.disable_cuda_graph is True
    assert config.cuda_graph_max_bs == 64  # the older name reads the decode-phase field
    assert config.enable_tf32_matmul is True
    assert "--cuda-graph-max-bs-decode" in config.to_argv()
    assert catalogue("0.5.23").source["wheel_sha256"]


def _site(release: str) -> Path:
    python = _env(release)
    found = sorted(python.parent.parent.glob("lib/python3*/site-packages"))
    assert found, python
    return found[0]


@pytest.mark.parametrize("release", sorted(BUNDLED_RELEASES))
def test_patch_step_per_release(release, tmp_path):
    from glm5lib.patching import SourcePatch

    site = _site(release)
    check = SourcePatch("sglang-flashinfer-cutlass-moe-autotune", root=site)
    check.check()  # a dry run: the installed release is not touched
    assert check.record.package_version == release
    if release in ("0.5.16", "0.5.23"):  # the fix is SGLang's own from 0.5.16 on
        assert check.record.status == "upstream"
        assert "sglang/srt/model_executor/runner/flashinfer_autotune.py" in check.record.note
        # the workbook's step (apply, measure, revert) goes on and touches nothing
        before = {p: p.read_bytes() for p in (site / "sglang" / "srt" / "model_executor").rglob("*.py")}
        step = SourcePatch("sglang-flashinfer-cutlass-moe-autotune", root=site, record_dir=tmp_path)
        assert step.apply().status == "upstream" and f"already upstream in sglang {release}" in step.record.note
        step.revert()
        assert {p: p.read_bytes() for p in before} == before
        assert json.loads(next(tmp_path.glob("*.json")).read_text())["status"] == "upstream"
        return
    assert check.record.status == "checked"
    # apply and revert on a copy of the file it edits
    rel = "sglang/srt/model_executor/model_runner.py"
    copy = tmp_path / rel
    copy.parent.mkdir(parents=True)
    copy.write_bytes((site / rel).read_bytes())
    patch = SourcePatch("sglang-flashinfer-cutlass-moe-autotune", root=tmp_path)
    with patch:
        assert '            "flashinfer_cutlass",\n' in copy.read_text()
    assert copy.read_bytes() == (site / rel).read_bytes()


# The releases whose line formats the stand-in writes (glm5lib.sim.lines.line_generation), each
# checked against that release's source below.
LINE_GENERATIONS = list(GENERATIONS)


@pytest.fixture(scope="module", params=LINE_GENERATIONS)
def standin_output(request, tmp_path_factory):
    """(release, the log of a stand-in emulating it after a few requests, its /metrics text)."""
    import urllib.request

    from glm5lib.engines.sim import run_standin
    from glm5lib.http import get

    release = request.param
    log = tmp_path_factory.mktemp("standin") / "server.log"
    with run_standin("--sim-release", release, "--sim-zero-delay", "--enable-metrics", "--decode-log-interval",
                     "1", "--sim-no-access-log", log_path=log) as server:
        for i in range(3):
            body = json.dumps({"text": f"hello {i}", "sampling_params": {"max_new_tokens": 8}}).encode()
            request_ = urllib.request.Request(f"{server.base_url}/generate", data=body,
                                              headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request_, timeout=30) as response:
                assert response.status == 200
        metrics = get(server.base_url, "/metrics").body.decode()
        info = get(server.base_url, "/get_server_info").json()
    assert info["version"] == release
    return release, log.read_text(), metrics


# Speculative decoding and prefill CUDA graphs: the stand-in writes the line variants they call
# for (0.5.9 captures prefill graphs only with --enable-piecewise-cuda-graph, 0.5.23 by default).
_VARIANT_FLAGS = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "draft-model"]
_PIECEWISE = {"0.5.8": [], "0.5.9": ["--enable-piecewise-cuda-graph"], "0.5.16": [], "0.5.23": []}


@pytest.fixture(scope="module", params=LINE_GENERATIONS)
def standin_variant_output(request, tmp_path_factory):
    """(release, the log of a stand-in emulating it with speculative decoding and prefill graphs on,
    its /metrics text)."""
    import urllib.request

    from glm5lib.engines.sim import run_standin
    from glm5lib.http import get

    release = request.param
    log = tmp_path_factory.mktemp("standin-variant") / "server.log"
    with run_standin("--sim-release", release, "--sim-zero-delay", "--decode-log-interval", "1", "--enable-metrics",
                     "--sim-no-access-log", *_VARIANT_FLAGS, *_PIECEWISE[release], log_path=log) as server:
        body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 8}}).encode()
        request_ = urllib.request.Request(f"{server.base_url}/generate", data=body,
                                          headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request_, timeout=30) as response:
            assert response.status == 200
        metrics = get(server.base_url, "/metrics").body.decode()
    return release, log.read_text(), metrics


def _source(release: str, folder: str = "srt") -> str:
    root = _site(release) / "sglang" / folder
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*.py")))


# The stats lines of each release as pieces of its own source, verbatim: each piece is found in
# the file named, in this order (the order the function appends them). Placeholders the plain
# path fills in: {iter_msg} is "" (no LOG_FORWARD_ITERS), {token_usage_msg} is the plain
# model's pool piece (USAGE), the graph label is "cuda graph"; every other {...} is a value.
_MIXIN = "managers/scheduler_metrics_mixin.py"
_REPORTER = "managers/scheduler_components/metrics_reporter.py"
_POOLS = "managers/scheduler_components/pool_stats_observer.py"
_LINES = {
    "0.5.8": {
        "prefill": (_MIXIN, ['f"token usage: {token_usage:.2f}, "', 'f"Prefill batch{iter_msg}, "',
                             'f"#new-seq: {len(can_run_list)}, "', 'f"#new-token: {adder.log_input_tokens}, "',
                             'f"#cached-token: {adder.log_hit_tokens}, "', 'f"{token_usage_msg}"',
                             'f"#running-req: {running_bs}, "', 'f"#queue-req: {len(self.waiting_queue)}, "']),
        "decode": (_MIXIN, ['f"#token: {num_used}, token usage: {token_usage:.2f}, "',
                            'f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"',
                            """f"{'cuda graph' if self.device == 'cuda' else 'cpu graph'}: {can_run_cuda_graph}, \"""",
                            'f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "',
                            'f"#queue-req: {len(self.waiting_queue)}, "']),
    },
    "0.5.9": {
        "prefill": (_MIXIN, ['f"token usage: {token_usage:.2f}, "', 'f"Prefill batch{iter_msg}, "',
                             'f"#new-seq: {prefill_stats.num_new_seqs}, "',
                             'f"#new-token: {prefill_stats.log_input_tokens}, "',
                             'f"#cached-token: {prefill_stats.log_hit_tokens}, "', 'f"{token_usage_msg}"',
                             'f"#running-req: {prefill_stats.running_bs}, "', 'f"#queue-req: {len(self.waiting_queue)}, "',
                             'msg += f"input throughput (token/s): {self.last_input_throughput:.2f}, "',
                             'msg += f"{graph_backend[self.device]}: {can_run_cuda_graph}"']),
        "decode": (_MIXIN, ['f"#token: {num_used}, token usage: {token_usage:.2f}, "',
                            'f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"',
                            'f"{graph_backend[self.device]}: {can_run_cuda_graph}, "',
                            'f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "',
                            'f"#queue-req: {len(self.waiting_queue)}"\n']),
    },
    "0.5.23": {
        "prefill": (_REPORTER, ['f"Prefill batch{iter_msg}, "', 'f"#new-seq: {prefill_stats.num_new_seqs}, "',
                                'f"#new-token: {prefill_stats.log_input_tokens}, "',
                                'f"#cached-token: {prefill_stats.log_hit_tokens}, "', 'f"{token_usage_msg}"',
                                'f"#running-req: {prefill_stats.num_running_reqs.total}, "',
                                'f"#queue-req: {len(self.scheduler.waiting_queue)}, "',
                                'f"#pending-token: {prefill_stats.num_pending_tokens}, "',
                                'msg += f"{self._graph_backend_label}: {can_run_cuda_graph}, "',
                                'msg += f"input throughput (token/s): {self.last_input_throughput:.2f}"\n']),
        "decode": (_REPORTER, ['f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"',
                               'f"{self._graph_backend_label}: {can_run_cuda_graph}, "',
                               'f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "',
                               'f"#queue-req: {len(self.scheduler.waiting_queue)}"\n']),
    },
}
# 0.5.16 writes them with the same pieces from the same file (at other line numbers)
_LINES["0.5.16"] = _LINES["0.5.23"]
# Start-up lines: (head the stand-in's line starts with, file, pieces); 0.5.23 has no
# torch.distributed line and puts the captured batch sizes in its capture's end line.
_RUNNER, _POOL, _SETUP = ("model_executor/model_runner.py", "mem_cache/memory_pool.py",
                          "model_executor/model_runner_components/cuda_graph_setup.py")
_GRAPH_08 = "{'cpu graph' if self.device == 'cpu' else 'cuda graph'}"
_STARTUP = {
    "0.5.8": [
        ("Init torch distributed ends", _RUNNER,
         ['f"Init torch distributed ends. mem usage={(before_avail_memory - local_gpu_memory):.2f} GB"']),
        ("Load weight end", _RUNNER, ['f"Load weight end. "', 'f"type={type(self.model).__name__}, "',
                                      'f"dtype={self.dtype}, "', 'f"avail mem={after_avail_memory:.2f} GB, "',
                                      'f"mem usage={self.weight_load_mem_usage:.2f} GB."']),
        ("KV Cache is allocated", _POOL, ['f"KV Cache is allocated. #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"']),
        ("Capture cuda graph begin", _RUNNER, ['f"Capture ' + _GRAPH_08 + ' begin. This can take up to several minutes. '
                                               'avail mem={before_mem:.2f} GB"']),
        ("Capture cuda graph bs", "model_executor/cuda_graph_runner.py", ['f"Capture cuda graph bs {self.capture_bs}"']),
        ("Capture cuda graph end", _RUNNER, ['f"Capture ' + _GRAPH_08 + ' end. Time elapsed: {time.perf_counter() - tic:.2f} s. "',
                                             'f"mem usage={self.graph_mem_usage:.2f} GB. avail mem={after_mem:.2f} GB."']),
    ],
    "0.5.9": [
        ("Init torch distributed ends", _RUNNER,
         ['f"Init torch distributed ends. elapsed={time.perf_counter() - tic:.2f} s, "',
          'f"mem usage={(before_avail_memory - local_gpu_memory):.2f} GB"']),
        ("Load weight end", _RUNNER, ['f"Load weight end. "', 'f"elapsed={time.perf_counter() - tic_total:.2f} s, "',
                                      'f"type={type(self.model).__name__}, "', 'f"dtype={self.dtype}, "',
                                      'f"avail mem={after_avail_memory:.2f} GB, "',
                                      'f"mem usage={self.weight_load_mem_usage:.2f} GB."']),
        ("KV Cache is allocated", _POOL, ['f"KV Cache is allocated. #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"']),
        ("Capture cuda graph begin", _RUNNER, ['f"Capture {graph_backend[self.device]} begin. This can take up to several '
                                               'minutes. avail mem={before_mem:.2f} GB"']),
        ("Capture cuda graph bs", "model_executor/cuda_graph_runner.py", ['f"Capture cuda graph bs {self.capture_bs}"']),
        ("Capture cuda graph end", _RUNNER, ['f"Capture {graph_backend[self.device]} end. Time elapsed: '
                                             '{time.perf_counter() - tic:.2f} s. "',
                                             'f"mem usage={self.graph_mem_usage:.2f} GB. avail mem={after_mem:.2f} GB."']),
    ],
    "0.5.16": [
        ("Init torch distributed ends", "distributed/bootstrap.py",
         ['f"Init torch distributed ends. elapsed={time.perf_counter() - tic:.2f} s, "',
          'f"mem usage={(before_avail_memory - local_gpu_memory):.2f} GB"']),
        ("Load weight end", _RUNNER, ['f"Load weight end. "', 'f"elapsed={time.perf_counter() - tic_total:.2f} s, "',
                                      'f"type={type(self.model).__name__}, "', "f\"{quant_str + ', ' if quant_str else ''}\"",
                                      'f"avail mem={after_avail_memory:.2f} GB, "',
                                      'f"mem usage={self.weight_load_mem_usage:.2f} GB."']),
        ("KV Cache is allocated", _POOL, [
            'f"KV Cache is allocated. dtype: {self.dtype}, #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"']),
        ("Capture target decode CUDA graph begin", _SETUP, [
            'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "',
            'f"backend={decode_backend}, num_tokens_per_req={num_tokens_per_req}, "',
            'f"bs={capture_bs}, avail mem={before_mem:.2f} GB"']),
        ("Capture target decode CUDA graph end", _SETUP, [
            'f"Capture {capture_name} {graph_backend[model_runner.device]} end. "',
            'f"elapsed={time.perf_counter() - tic:.2f} s, "',
            'f"mem usage={graph_mem_usage:.2f} GB, avail mem={after_mem:.2f} GB."']),
    ],
    "0.5.23": [
        ("Load weight end", _RUNNER, ['f"Load weight end. "', 'f"elapsed={self.weight_load_time:.2f} s, "',
                                      'f"type={type(self.model).__name__}, "', "f\"{quant_str + ', ' if quant_str else ''}\"",
                                      'f"avail mem={after_avail_memory:.2f} GB, "',
                                      'f"mem usage={self.weight_load_mem_usage:.2f} GB."']),
        ("KV Cache is allocated", _POOL, [
            "f\"{cache_name} {'VA upper bound' if self.post_capture_active else 'is allocated'}. dtype: {self.dtype}, \"",
            'f"#tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"']),
        ("Capture target decode CUDA graph begin", _SETUP, [
            'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "',
            'f"backend={decode_backend}, num_tokens_per_req={num_tokens_per_req}, "', 'f"avail mem={before_mem:.2f} GB"']),
        ("Capture target decode CUDA graph end", _SETUP, [
            'f"Capture {capture_name} {graph_backend[model_runner.device]} end. "', 'f"bs={runner.capture_bs}, "',
            'f"elapsed={capture_time:.2f} s, "', 'f"mem usage={memory_usage_gb:.2f} GB, avail mem={after_mem:.2f} GB."']),
    ],
}
# What the plain CUDA path puts in a placeholder that is not a value.
_FILLED = {"{iter_msg}": "", "{cache_name}": "KV Cache", "{capture_name}": "target decode",
           "{'VA upper bound' if self.post_capture_active else 'is allocated'}": "is allocated",
           "{quant_str + ', ' if quant_str else ''}": "", "{graph_backend[model_runner.device]}": "CUDA graph"}
_LISTS = ("{self.capture_bs}", "{runner.capture_bs}", "{capture_bs}")
# 0.5.16 and 0.5.23 build the pool piece in another file: ", ".join(parts) + ", "
_USAGE_POOLS = {"prefill": 'parts.append(f"token usage: {self.full_token_usage:.2f}")',
                 "decode": 'f"#token: {self.full_num_used}, token usage: {self.full_token_usage:.2f}"'}
_LABELS = ("{graph_backend[self.device]}", "{self._graph_backend_label}",
           "{'cuda graph' if self.device == 'cuda' else 'cpu graph'}", _GRAPH_08)


def _piece_regex(piece: str, usage: str) -> str:
    import re

    text = re.search(r'f"(.*)"', piece, re.S).group(1)
    out, i = "", 0
    for m in re.finditer(r"\{(?:[^{}]|\{[^{}]*\})*\}", text):
        out += re.escape(text[i:m.start()])
        field = m.group(0)
        out += (re.escape(_FILLED[field]) if field in _FILLED else usage if field == "{token_usage_msg}"
                else "cuda graph" if field in _LABELS else r"\[[\d, ]*\]" if field in _LISTS else r"[^\s,]+")
        i = m.end()
    return out + re.escape(text[i:])


def _in_order(release: str, where: str, pieces: list[str]) -> None:
    """Each piece is in ``release``'s ``where``, after the one before it."""
    source = (_site(release) / "sglang" / "srt" / where).read_text()
    at = -1
    for piece in pieces:
        found = source.find(piece, at + 1)
        assert found > at, f"SGLang {release}'s {where} has no {piece!r} after the pieces before it"
        at = found


# Speculative decoding's piece of the decode line, after the pool piece (same text in every release).
_ACCEPT = 'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "'


def _line_regex(release: str, kind: str, *, speculative: bool = False) -> str:
    """The full-line regex of ``kind`` in ``release``, each piece checked to be in its source;
    ``speculative``: the decode line of speculative decoding."""
    import re

    where, pieces = _LINES[release][kind]
    if speculative:
        at = next(i for i, p in enumerate(pieces) if p.startswith('f"Decode batch')) + 1
        pieces = [*pieces[:at], _ACCEPT, *pieces[at:]]
    _in_order(release, where, pieces)
    if writes_since(release, "0.5.16"):
        pools = (_site(release) / "sglang" / "srt" / _POOLS).read_text()
        assert _USAGE_POOLS[kind] in pools, (release, kind)
        usage = _piece_regex(_USAGE_POOLS[kind], "") + re.escape(", ")
        body = pieces
    else:
        usage, body = _piece_regex(pieces[0], ""), pieces[1:]
    return "".join(_piece_regex(p, usage) for p in body)


def test_standin_log_lines_are_the_release_own_format(standin_output):
    """Each release's decode and prefill lines, as the stand-in emulating it writes them, match
    the format strings in that release's installed source, and glm5lib's log parser reads them."""
    import re

    from glm5lib.logs import parse_log

    release, log, _ = standin_output
    lines = [ln.split("] ", 1)[1] for ln in log.splitlines() if "Prefill batch" in ln or "Decode batch" in ln]
    for kind, head in (("prefill", "Prefill batch"), ("decode", "Decode batch")):
        mine = [ln for ln in lines if ln.startswith(head)]
        assert mine, (release, kind)
        pattern = re.compile(_line_regex(release, kind))
        wrong = [ln for ln in mine if not pattern.fullmatch(ln)]
        assert not wrong, (release, kind, pattern.pattern, wrong[:2])
    # the server_args line: the ServerArgs repr up to 0.5.16, the resolved dict in 0.5.23
    args_line = next(ln for ln in log.splitlines() if "server_args=" in ln)
    engine = (_site(release) / "sglang" / "srt" / "entrypoints" / "engine.py").read_text()
    if release == "0.5.23":
        assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in engine
        assert "server_args={'model_path': " in args_line
    else:
        assert 'logger.info(f"{server_args=}")' in engine
        assert "server_args=ServerArgs(model_path=" in args_line
    # the start-up lines that differ between releases, each as its release writes it
    messages = [ln.split("] ", 1)[1] for ln in log.splitlines() if ln.startswith("[") and "] " in ln]
    for head, where, pieces in _STARTUP[release]:
        _in_order(release, where, pieces)
        pattern = re.compile("".join(_piece_regex(p, "") for p in pieces))
        mine = [m for m in messages if m.startswith(head)]
        assert mine and all(pattern.fullmatch(m) for m in mine), (release, head, pattern.pattern, mine[:1])
    heads = {head for head, _, _ in _STARTUP[release]}
    assert ("Init torch distributed ends" in heads) == any(m.startswith("Init torch distributed") for m in messages)
    parsed = parse_log(log)
    assert len(parsed.decode) and len(parsed.prefill) and len(parsed.server_args) > 300
    sizes = parsed.startup["cuda_graph_batch_sizes"]
    assert sizes and sizes == decode_graph_sizes(max(sizes)), sizes  # SGLang's schedule, as the capture line says
    assert ("pending_token" in parsed.prefill.columns) == writes_since(release, "0.5.16")
    assert ("input_throughput" in parsed.prefill.columns) == (release != "0.5.8")
    assert ServerConfig.from_server_args(parsed.server_args).release == release
    # prefill CUDA graphs: off by default in 0.5.9 (piecewise graphs are opt-in), on from 0.5.16
    if release != "0.5.8":
        assert set(parsed.prefill["cuda_graph"]) == {writes_since(release, "0.5.16")}


def test_standin_variant_lines_are_the_release_own_format(standin_variant_output):
    """With speculative decoding and prefill graphs on, the stand-in's decode lines carry the
    release's accept len/rate piece and its prefill lines say the graph ran, in the release's format."""
    import re

    from glm5lib.logs import parse_log

    release, log, _ = standin_variant_output
    lines = [ln.split("] ", 1)[1] for ln in log.splitlines() if "Prefill batch" in ln or "Decode batch" in ln]
    for kind, head, spec in (("prefill", "Prefill batch", False), ("decode", "Decode batch", True)):
        mine = [ln for ln in lines if ln.startswith(head)]
        assert mine, (release, kind)
        pattern = re.compile(_line_regex(release, kind, speculative=spec))
        wrong = [ln for ln in mine if not pattern.fullmatch(ln)]
        assert not wrong, (release, kind, pattern.pattern, wrong[:2])
    parsed = parse_log(log)
    # 0.5.x resolves the draft settings at start: (3, 1, 4) for GLM-5 and DeepSeek-style models
    assert parsed.server_args["speculative_num_draft_tokens"] == 4
    # accept rate per the release's definition: accepted/drafts up to 0.5.9, (accepted - 1)/(drafts - 1) after
    assert set(parsed.decode["accept_len"]) == {2.0}
    assert set(parsed.decode["accept_rate"]) == {0.33 if writes_since(release, "0.5.16") else 0.5}
    if release != "0.5.8":
        assert set(parsed.prefill["cuda_graph"]) == {True}


def test_standin_metrics_names_exist_in_the_release(standin_output):
    import re

    release, _, metrics = standin_output
    _metric_names_exist(release, metrics)
    # every release creates speculative decoding's gauges at start and reports 0 without it
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate"):
        assert re.search(rf"^{name}\{{[^}}]*\}} 0\.0$", metrics, re.M), (name, metrics[:2000])


def test_standin_speculative_metrics_exist_in_the_release(standin_variant_output):
    import re

    release, _, metrics = standin_variant_output
    _metric_names_exist(release, metrics)
    # speculative decoding's gauges, with the figure the decode lines carry
    assert re.search(r"^sglang:spec_accept_length\{[^}]*\} 2\.0$", metrics, re.M), metrics[:2000]
    rate = 0.333 if writes_since(release, "0.5.16") else 0.5
    found = re.search(r"^sglang:spec_accept_rate\{[^}]*\} ([0-9.]+)$", metrics, re.M)
    assert found and abs(float(found[1]) - rate) < 1e-3, metrics[:2000]


def _metric_names_exist(release: str, metrics: str) -> None:
    import re

    names = set()
    for line in metrics.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            names.add(f"{name}_total" if kind == "counter" and not name.endswith("_total") else name)
    assert "sglang:num_running_reqs" in names
    source = _source(release)
    known = set(re.findall(r'"(sglang:[a-z_0-9]+)"', source))
    missing = sorted(n for n in names if n not in known)
    assert not missing, f"SGLang {release} defines no {missing}"


_TOKENIZER = textwrap.dedent("""
    import sys
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([f"the quick brown fox {i} jumps over the lazy dog" for i in range(200)], trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>").save_pretrained(sys.argv[1])
    print("ok")
""")


@pytest.mark.parametrize("release", sorted(BUNDLED_RELEASES))
def test_sglang_bench_serving_runs_against_the_standin(release, tmp_path):
    """SGLang's own bench_serving (a local tokenizer, random ids) against the stand-in; its
    printed block and JSONL record parse with parse_bench_result to the same numbers."""
    from glm5lib.engines.sim import run_standin
    from glm5lib.logs import parse_bench_result

    python = _env(release)
    tokenizer = tmp_path / "tokenizer"
    done = subprocess.run([str(python), "-W", "ignore", "-c", _TOKENIZER, str(tokenizer)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "bench.jsonl"
    # bench_serving also asks the Hub for the served model's config (GLM-5-NVFP4); offline it
    # goes on with the local tokenizer at once instead of after five retries (about 45 s).
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with run_standin("--sim-release", release, "--sim-zero-delay", "--sim-no-access-log") as server:
        bench = subprocess.run(
            [str(python), "-W", "ignore", "-m", "sglang.bench_serving", "--backend", "sglang",
             "--base-url", server.base_url, "--dataset-name", "random-ids", "--random-input-len", "16",
             "--random-output-len", "8", "--num-prompts", "8", "--tokenizer", str(tokenizer),
             "--output-file", str(out)],
            capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path, env=offline)
    assert bench.returncode == 0, (bench.stdout[-2000:], bench.stderr[-2000:])
    printed = parse_bench_result(bench.stdout)
    recorded = parse_bench_result(out)
    assert len(printed) == 1 and len(recorded) == 1
    p, r = printed.iloc[0], recorded.iloc[0]
    assert r["completed"] == 8 and p["completed"] == 8
    for column in ("total_output_tokens", "output_throughput", "mean_ttft_ms", "median_e2e_latency_ms"):
        assert column in recorded.columns and column in printed.columns, column
        assert p[column] == pytest.approx(r[column], rel=0.01, abs=0.01), column
