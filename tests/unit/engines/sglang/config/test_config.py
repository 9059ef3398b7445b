"""Tests for glm5lib.engines.sglang.config: the SGLang flag catalogue and ServerConfig."""

from __future__ import annotations

import argparse
import json

import pytest

from glm5lib.cli import config as cli_config
from glm5lib.engines.sglang import config as cfgmod
from glm5lib.engines.sglang.config import (
    SGLANG_FLAGS,
    SGLANG_SOURCE,
    ServerConfig,
    catalogue,
    field_for,
    flag_for,
    shipped_configs,
)
from glm5lib.engines.sglang.config import _values as cfgvalues
from glm5lib.errors import ConfigError

# --------------------------------------------------------------------------- catalogue


def test_catalogue_records_its_sglang_source():
    # the default release is the newest bundled one, in one constant
    from glm5lib.engines.sglang.config import BUNDLED_RELEASES, DEFAULT_RELEASE, NEWEST_RELEASE

    assert DEFAULT_RELEASE == NEWEST_RELEASE == "0.5.23" and set(BUNDLED_RELEASES) == {"0.5.8", "0.5.9", "0.5.16", "0.5.23"}
    assert SGLANG_SOURCE["version"] == "0.5.23"
    assert len(SGLANG_SOURCE["sha256"]) == 64
    # 0.5.23's ServerArgs has over 500 fields; a broken generator yields few
    assert len(SGLANG_FLAGS) > 500
    assert ServerConfig(model_path="m").release == "0.5.23"


def test_0_5_16_is_read_with_its_own_catalogue_not_0_5_9s(caplog):
    """Every recorded GPU run used SGLang 0.5.16, which split the graph flags by phase and keeps
    --cuda-graph-max-bs and --disable-cuda-graph only as deprecated spellings (it warns on them). Read
    with 0.5.9's catalogue (the nearest bundled one before), a remedy or a benchmark command named them."""
    with caplog.at_level("INFO"):
        cat = catalogue("0.5.16")
    assert cat.release == "0.5.16" and "nearest bundled" not in caplog.text
    assert cat.specs["cuda_graph_max_bs_decode"].flags == ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    assert "cuda_graph_max_bs" not in cat.specs
    config = ServerConfig(model_path="m", release="0.5.16", cuda_graph_max_bs=64, disable_cuda_graph=True)
    argv = config.to_argv()
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "64" and "--cuda-graph-max-bs" not in argv
    assert "--disable-cuda-graph" not in argv  # deprecated in 0.5.16: both phases' backends instead
    assert argv[argv.index("--cuda-graph-backend-decode") + 1] == "disabled"


@pytest.mark.parametrize(("switch", "backend"), [("--disable-piecewise-cuda-graph", "disabled"),
                                                 ("--enable-breakable-cuda-graph", "breakable"),
                                                 ("--enforce-piecewise-cuda-graph", "tc_piecewise")])
def test_a_switch_that_stores_a_value_of_another_field_is_read_as_that_value(switch, backend):
    """0.5.16's deprecated prefill-graph switches store one backend into cuda_graph_backend_prefill
    (DeprecatedStoreConstAction); its own parser is the judge (tests/integration/contract)."""
    config = ServerConfig.from_argv(["--model-path", "m", switch], release="0.5.16")
    assert config.explicit == {"model_path": "m", "cuda_graph_backend_prefill": backend}
    assert config.to_argv()[-2:] == ["--cuda-graph-backend-prefill", backend]
    with pytest.raises(ConfigError, match="is a switch and takes no value"):
        ServerConfig.from_argv(["--model-path", "m", f"{switch}=yes"], release="0.5.16")


@pytest.mark.parametrize(
    ("field", "flag"),
    [
        ("fp4_gemm_runner_backend", "--fp4-gemm-backend"),
        ("fp8_gemm_runner_backend", "--fp8-gemm-backend"),
        ("max_running_requests", "--max-running-requests"),
        ("tp_size", "--tensor-parallel-size"),
        ("model_path", "--model-path"),
    ],
)
def test_flag_for_and_field_for_are_inverse(field, flag):
    assert flag_for(field, "0.5.9") == flag
    assert field_for(flag, "0.5.9") == field
    assert field_for(flag_for(field)) == field  # the default release (0.5.23: --tp-size first)


def test_field_for_accepts_aliases_and_unambiguous_prefixes():
    assert field_for("--tp-size") == "tp_size"
    assert field_for("--model") == "model_path"
    assert field_for("--max-running-requests=64") == "max_running_requests"
    assert field_for("--mem-fraction") == "mem_fraction_static"


def test_field_for_unknown_flag_suggests_closest():
    with pytest.raises(ConfigError) as info:
        field_for("--max-runing-requests")
    assert "--max-running-requests" in str(info.value)
    assert info.value.field == "--max-runing-requests"
    assert info.value.valid[0] == "--max-running-requests"


def test_intent_flags_are_what_each_release_takes():
    assert cfgmod.intent_flags("cuda_graph_max_bs", "0.5.23") == "--cuda-graph-max-bs-decode"
    assert cfgmod.intent_flags("cuda_graph_max_bs", "0.5.9") == "--cuda-graph-max-bs"
    assert cfgmod.intent_flags("disable_cuda_graph", "0.5.23") == (
        "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled")
    assert cfgmod.intent_flags("disable_cuda_graph", "0.5.8") == "--disable-cuda-graph"
    assert cfgmod.intent_flags("stream_output", "0.5.23") == "--incremental-streaming-output"
    assert cfgmod.intent_flags("stream_output", "0.5.9") == "--stream-output"
    assert cfgmod.intent_flags("fp4_gemm_runner_backend", "0.5.23") == "--fp4-gemm-backend"
    with pytest.raises(ConfigError, match="unknown SGLang server argument 'no_such_field'"):
        cfgmod.intent_flags("no_such_field", "0.5.23")


def test_field_for_ambiguous_prefix_lists_candidates():
    with pytest.raises(ConfigError, match="ambiguous") as info:
        field_for("--disable-cuda")
    assert "--disable-cuda-graph" in info.value.valid
    assert "--disable-cuda-graph-padding" in info.value.valid
    # an exact spelling is never ambiguous, even when it prefixes another flag
    assert field_for("--disable-cuda-graph") == "disable_cuda_graph"
    # a flag 0.5.23 split per phase says what it became
    with pytest.raises(ConfigError, match="--cuda-graph-max-bs of earlier releases is --cuda-graph-max-bs-decode"):
        field_for("--cuda-graph-max-bs", "0.5.23")
    assert field_for("--cuda-graph-max-bs", "0.5.9") == "cuda_graph_max_bs"


def test_catalogue_entries_match_sglang_defaults():
    flags_0_5_9 = cfgmod.catalogue("0.5.9").specs
    for specs, graph_bs in ((flags_0_5_9, "cuda_graph_bs"), (SGLANG_FLAGS, "cuda_graph_bs_decode")):
        assert specs["attention_backend"].default is None
        assert "flashinfer" in specs["attention_backend"].choices
        assert "triton" in specs["attention_backend"].choices
        assert specs["moe_runner_backend"].default == "auto"
        assert specs["disable_cuda_graph"].value_type == "bool"
        assert specs[graph_bs].value_type == "list"
        assert specs[graph_bs].item_type == "int"
        assert specs["port"].default == 30000
        assert specs["host"].default == "127.0.0.1"
    assert SGLANG_FLAGS["disable_cuda_graph"].deprecated and not flags_0_5_9["disable_cuda_graph"].deprecated


def test_no_method_hides_a_field():
    public = {name for name in dir(ServerConfig) if not name.startswith("_")}
    assert not public & set(SGLANG_FLAGS)


def test_validation_rules_name_real_fields():
    fields_0_5_9 = set(cfgmod.catalogue("0.5.9").specs)
    # each rule names a field of 0.5.9 or of 0.5.23 (its per-phase successors of the graph sizes)
    assert fields_0_5_9 | set(SGLANG_FLAGS) >= cfgvalues._POSITIVE
    assert {f for f in cfgvalues._POSITIVE if f not in fields_0_5_9} == {
        "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "cuda_graph_bs_decode", "cuda_graph_bs_prefill"}
    assert set(cfgvalues._RANGES) <= set(SGLANG_FLAGS) & fields_0_5_9


# --------------------------------------------------------------------------- argv


def test_from_argv_parses_values_switches_lists_and_launcher():
    cfg = ServerConfig.from_argv(
        "python -m sglang.launch_server --model zai-org/GLM-5 --tp 8 --max-running-requests 64 "
        "--attention-backend flashinfer --enable-flashinfer-allreduce-fusion "
        "--cuda-graph-bs 1 2 4 --mem-fraction-static=0.85 --fp4-gemm-backend auto", release="0.5.9",
    )
    assert cfg.model_path == "zai-org/GLM-5"
    assert cfg.tp_size == 8
    assert cfg.max_running_requests == 64
    assert cfg.enable_flashinfer_allreduce_fusion is True
    assert cfg.cuda_graph_bs == [1, 2, 4]
    assert cfg.mem_fraction_static == pytest.approx(0.85)
    assert cfg.fp4_gemm_runner_backend == "auto"
    assert set(cfg.explicit) == {
        "model_path", "tp_size", "max_running_requests", "attention_backend",
        "enable_flashinfer_allreduce_fusion", "cuda_graph_bs", "mem_fraction_static",
        "fp4_gemm_runner_backend",
    }
    # unset fields read as SGLang's defaults
    assert cfg.disable_cuda_graph is False
    assert cfg.schedule_policy == "fcfs"


def test_to_argv_round_trips_and_uses_real_flag_names():
    cfg = ServerConfig(
        "0.5.9", model_path="m", tp_size=8, fp4_gemm_runner_backend="auto", disable_cuda_graph=True,
        cuda_graph_bs=[1, 8], json_model_override_args='{"a": 1}', chunked_prefill_size=-1,
    )
    argv = cfg.to_argv()
    assert argv[argv.index("--fp4-gemm-backend") + 1] == "auto"
    assert "--fp4-gemm-runner-backend" not in argv
    assert "--disable-cuda-graph" in argv
    assert argv[argv.index("--cuda-graph-bs") + 1 : argv.index("--cuda-graph-bs") + 3] == ["1", "8"]
    assert argv[argv.index("--chunked-prefill-size") + 1] == "-1"
    assert ServerConfig.from_argv(argv, release="0.5.9") == cfg
    assert ServerConfig.from_argv(argv, release="0.5.9").explicit == cfg.explicit
    # the same settings on the default release (0.5.23): its flags, the same values back
    new = cfg.for_release("0.5.23")
    argv = new.to_argv()
    assert "--disable-cuda-graph" not in argv and argv.count("disabled") == 2
    assert argv[argv.index("--cuda-graph-bs-decode") + 1 : argv.index("--cuda-graph-bs-decode") + 3] == ["1", "8"]
    assert ServerConfig.from_argv(argv) == new and new.diff(cfg) == {}
    with pytest.raises(ConfigError, match="no flag sets it"):
        ServerConfig(model_path="m", grpc_worker_threads="2").to_argv()


def test_switch_set_false_is_not_written():
    assert "--disable-cuda-graph" not in ServerConfig(model_path="m", disable_cuda_graph=False).to_argv()


def test_negative_number_is_a_value_not_a_flag():
    assert ServerConfig.from_argv(["--chunked-prefill-size", "-1"]).chunked_prefill_size == -1


def test_repeated_flag_last_wins():
    assert ServerConfig.from_argv(["--tp-size", "2", "--tp-size", "8"]).tp_size == 8


@pytest.mark.parametrize(
    ("argv", "field", "needle"),
    [
        (["--max-runing-requests", "5"], "--max-runing-requests", "--max-running-requests"),
        (["--attention-backend", "flashinfr"], "attention_backend", "flashinfer"),
        (["--tp-size", "0"], "tp_size", "positive"),
        (["--tp-size", "eight"], "tp_size", "integer"),
        (["--max-running-requests"], "max_running_requests", "expects a value"),
        (["--mem-fraction-static", "1.5"], "mem_fraction_static", "(0.0, 1.0]"),
        (["--disable-cuda-graph=yes"], "disable_cuda_graph", "switch"),
        (["--port", "70000"], "port", "65535"),
    ],
)
def test_from_argv_rejects_bad_input_naming_the_field(argv, field, needle):
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_argv(argv)
    assert info.value.field == field
    assert needle in str(info.value)


def test_unknown_attention_backend_lists_valid_values():
    with pytest.raises(ConfigError) as info:
        ServerConfig(attention_backend="flash")
    assert "triton" in info.value.valid and "flashinfer" in info.value.valid
    assert "'triton'" in str(info.value)


def test_stray_positional_is_rejected():
    with pytest.raises(ConfigError, match="unexpected argument"):
        ServerConfig.from_argv(["--tp-size", "8", "extra"])


def test_parse_known_argv_returns_foreign_flags():
    cfg, rest = ServerConfig.parse_known_argv(
        ["--model-path", "m", "--sim-fault", "oom-at-start", "--sim-profile", "p", "--tp", "8"]
    )
    assert cfg.tp_size == 8 and cfg.model_path == "m"
    assert rest == ["--sim-fault", "oom-at-start", "--sim-profile", "p"]


def test_parse_known_argv_still_validates_known_flags():
    with pytest.raises(ConfigError):
        ServerConfig.parse_known_argv(["--sim-fault", "x", "--tp-size", "-3"])


# --------------------------------------------------------------------------- keyword fields


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"max_running_request": 5}, "max_running_request"),
        ({"max_running_requests": 0}, "max_running_requests"),
        ({"max_running_requests": "64"}, "max_running_requests"),
        ({"max_running_requests": True}, "max_running_requests"),
        ({"disable_cuda_graph": "yes"}, "disable_cuda_graph"),
        ({"page_size": -4}, "page_size"),
        ({"schedule_policy": "fifo"}, "schedule_policy"),
        ({"tp_size": None}, "tp_size"),
        ({"cuda_graph_bs": [1, 0]}, "cuda_graph_bs"),
    ],
)
def test_keyword_validation(fields, bad):
    with pytest.raises(ConfigError) as info:
        ServerConfig("0.5.9", **fields)
    assert info.value.field == bad
    with pytest.raises(ConfigError) as info:  # the default release: a renamed field's successor
        ServerConfig(**fields)
    assert info.value.field in (bad, {"cuda_graph_bs": "cuda_graph_bs_decode"}.get(bad))


def test_unknown_keyword_suggests_closest_field():
    with pytest.raises(ConfigError, match="did you mean 'max_running_requests'"):
        ServerConfig(max_running_request=5)


def test_attribute_typo_suggests_field():
    with pytest.raises(AttributeError, match="max_running_requests"):
        _ = ServerConfig().max_runing_requests


def test_immutable_and_with_changes_returns_new_config():
    base = ServerConfig(model_path="m", max_running_requests=64)
    with pytest.raises(AttributeError, match="with_changes"):
        base.max_running_requests = 1024
    fixed = base.with_changes(max_running_requests=1024, disable_cuda_graph=True)
    assert base.max_running_requests == 64 and fixed.max_running_requests == 1024
    assert fixed.diff(base) == {"max_running_requests": (1024, 64), "disable_cuda_graph": (True, False)}
    with pytest.raises(ConfigError):
        base.with_changes(max_running_requests=-1)
    assert base.without("max_running_requests").max_running_requests is None


def test_diff_uses_defaults_for_unset_fields():
    a = ServerConfig(model_path="m", schedule_policy="fcfs")
    b = ServerConfig(model_path="m")
    assert a.diff(b) == {}
    assert a == b
    c = ServerConfig(model_path="m", schedule_policy="lpm")
    assert c.diff(b) == {"schedule_policy": ("lpm", "fcfs")}


def test_validate_requires_model_path_to_launch():
    with pytest.raises(ConfigError) as info:
        ServerConfig(tp_size=8).validate()
    assert info.value.field == "model_path"
    assert ServerConfig(tp_size=8).validate(require_model=False).tp_size == 8


# --------------------------------------------------------------------------- server args


def test_from_server_args_keeps_only_non_defaults_and_extras():
    logged = {
        "model_path": "moonshotai/Kimi-K2-Thinking",
        "tp_size": 8,
        "disable_cuda_graph": True,
        "moe_runner_backend": "auto",  # the default: not explicit
        "fp4_gemm_runner_backend": "auto",
        "attention_backend": "triton",
        "page_size": 1,
        "max_running_requests": 2048,
        "schedule_policy": "fcfs",
        "api_key": "***",
        "max_total_num_tokens": 123456,  # /get_server_info extra
        "version": "0.5.9",
    }
    cfg = ServerConfig.from_server_args(logged)
    assert cfg.max_running_requests == 2048
    assert "moe_runner_backend" not in cfg.explicit and cfg.moe_runner_backend == "auto"
    assert "api_key" not in cfg.explicit
    assert cfg.extras == {"max_total_num_tokens": 123456, "version": "0.5.9"}
    # the shipped reference also runs with --enable-metrics, which this log did not
    assert cfg.diff(ServerConfig.load("k2-thinking-reference")).keys() == {"model_path", "enable_metrics"}


def test_from_server_args_strict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="did you mean 'tp_size'"):
        ServerConfig.from_server_args({"tp_sizes": 8}, strict=True)


def test_from_server_args_keeps_values_newer_sglang_accepted(caplog):
    cfg = ServerConfig.from_server_args({"attention_backend": "some_future_backend"})
    assert cfg.attention_backend == "some_future_backend"
    assert "some_future_backend" in caplog.text
    with pytest.raises(ConfigError):
        ServerConfig.from_server_args({"attention_backend": "some_future_backend"}, strict=True)


# --------------------------------------------------------------------------- files


def test_shipped_configs_hold_the_investigation_facts():
    assert {"glm5-baseline", "glm5-fix", "k2-thinking-reference"} <= set(shipped_configs())
    base = ServerConfig.load("glm5-baseline")
    assert base.name == "glm5-baseline"
    assert (base.tp_size, base.max_running_requests, base.attention_backend) == (8, 64, "flashinfer")
    assert base.enable_flashinfer_allreduce_fusion is True and base.disable_cuda_graph is False
    fix = ServerConfig.load("glm5-fix")
    assert fix.diff(base) == {
        "max_running_requests": (1024, 64),
        "disable_radix_cache": (True, False),
        "disable_cuda_graph": (True, False),
    }
    ref = ServerConfig.load("k2-thinking-reference")
    assert ref.disable_cuda_graph is True
    assert (ref.moe_runner_backend, ref.fp4_gemm_runner_backend) == ("auto", "auto")
    assert (ref.attention_backend, ref.page_size, ref.max_running_requests) == ("triton", 1, 2048)
    assert ref.enable_flashinfer_allreduce_fusion is False
    for name in ("glm5-baseline", "glm5-fix", "k2-thinking-reference"):
        ServerConfig.load(name).validate()


def test_load_unknown_name_suggests_shipped():
    with pytest.raises(ConfigError, match="glm5-baseline") as info:
        ServerConfig.load("glm5-basline")
    assert "glm5-baseline" in info.value.valid


def test_save_masks_secrets_and_load_round_trips(tmp_path):
    cfg = ServerConfig(model_path="m", tp_size=8, api_key="sk-very-secret", max_running_requests=256)
    path = cfg.save(tmp_path / "c.json", name="mine", description="test")
    text = path.read_text()
    assert "sk-very-secret" not in text
    data = json.loads(text)
    assert data["server_args"]["api_key"] == "***"
    assert data["name"] == "mine"
    back = ServerConfig.load(path)
    assert "api_key" not in back.explicit
    assert back.diff(cfg) == {"api_key": (None, "sk-very-secret")}
    assert "sk-very-secret" not in repr(cfg)
    assert "sk-very-secret" not in cfg.to_shell()
    assert "sk-very-secret" in cfg.to_argv()  # needed to launch


def test_load_accepts_argv_files_and_reports_bad_json(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"argv": ["--model-path", "m", "--tp", "4"]}))
    assert ServerConfig.load(tmp_path / "a.json").tp_size == 4
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ServerConfig.load(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps({"server_args": {"tp_size": "8"}}))
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(tmp_path / "c.json")
    assert info.value.field == "tp_size"


def test_to_frame_lists_explicit_fields():
    frame = ServerConfig.load("glm5-baseline").to_frame()
    assert list(frame.columns) == ["field", "flag", "value", "default", "explicit"]
    row = frame.set_index("field").loc["max_running_requests"]
    assert row["value"] == 64 and row["flag"] == "--max-running-requests"


# --------------------------------------------------------------------------- CLI


def _run_cli(capsys, *argv: str) -> tuple[int, str]:
    """Run ``glm5 config ...`` through this module's own sub-command registration."""
    parser = argparse.ArgumentParser(prog="glm5")
    cli_config.register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    try:
        code = args.func(args)
    except ConfigError as exc:
        return 2, str(exc)
    return code, capsys.readouterr().out


def test_cli_argv_with_set(capsys):
    code, out = _run_cli(capsys, "config", "argv", "glm5-fix", "--set", "max_running_requests=2048", "--json")
    assert code == 0
    argv = json.loads(out)
    assert argv[argv.index("--max-running-requests") + 1] == "2048"
    assert "--disable-radix-cache" in argv


def test_cli_diff_and_show(capsys):
    code, out = _run_cli(capsys, "config", "diff", "glm5-baseline", "k2-thinking-reference", "--json")
    assert code == 0
    assert json.loads(out)["attention_backend"] == ["flashinfer", "triton"]
    code, out = _run_cli(capsys, "config", "diff", "glm5-baseline", "glm5-fix", "--exit-code")
    assert code == 1 and "max_running_requests" in out
    code, message = _run_cli(capsys, "config", "show", "glm5-baseline", "--set", "max_runing_requests=3")
    assert code == 2 and "max_running_requests" in message
    code, out = _run_cli(capsys, "config", "show", "glm5-baseline", "--json")
    assert json.loads(out)["max_running_requests"] == 64


def test_cli_flags_and_check(capsys):
    code, out = _run_cli(capsys, "config", "flags", "fp4")
    assert code == 0 and "--fp4-gemm-backend" in out and "--max-running-requests" not in out
    code, out = _run_cli(capsys, "config", "check", "--", "--model-path", "m", "--tp", "8")
    assert code == 0 and json.loads(out) == {"model_path": "m", "tp_size": 8}
    code, message = _run_cli(capsys, "config", "check", "--", "--attention-backend", "flashinfr")
    assert code == 2 and "flashinfer" in message


# --------------------------------------------------------------------------- property


def _value_strategy(spec):
    from hypothesis import strategies as st

    if spec.choices:  # a list field's choices are those of its items (0.5.23's --lora-target-modules)
        one = st.sampled_from(list(spec.choices))
        return st.lists(one, min_size=1, max_size=4) if spec.value_type == "list" else one
    positive = spec.field in cfgvalues._POSITIVE or spec.field in cfgvalues._MINUS_ONE_ALLOWED
    ints = st.integers(min_value=1 if positive else -(2**31), max_value=2**31)
    texts = st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
        min_size=1, max_size=12,
    ).filter(lambda s: not s.startswith("-"))
    if spec.field == "port":
        return st.integers(min_value=1, max_value=65535)
    if spec.field == "mem_fraction_static":
        return st.floats(min_value=0.01, max_value=1.0)
    if spec.value_type == "int":
        return ints
    if spec.value_type == "float":
        low = 0.001 if positive or spec.field in cfgvalues._RANGES else -1e6
        return st.floats(min_value=low, max_value=1e6, allow_nan=False)
    if spec.value_type == "bool":
        # False cannot be written for a switch whose default is None (SGLang decides): only True
        return st.booleans() if spec.default is False else st.just(True)
    if spec.value_type == "list":
        item = {"int": ints, "float": st.floats(-1e6, 1e6, allow_nan=False)}.get(spec.item_type, texts)
        return st.lists(item, min_size=1, max_size=4)
    if spec.value_type == "json":
        return st.dictionaries(st.text(min_size=1, max_size=5), st.integers(), max_size=3)
    return texts


_ROUND_TRIP_FIELDS = [
    name for name, spec in SGLANG_FLAGS.items()
    if spec.value_type != "none" and spec.action in (None, "store_true") and spec.nargs != "?"
    and not (spec.value_type == "bool" and spec.default is True)
    and spec.flags  # 0.5.23 has fields no flag sets: they cannot round-trip through argv
]


def test_explicit_graph_backend_wins_over_the_legacy_switch_as_in_sglang():
    """0.5.23's cuda_graph_hook: --cuda-graph-backend-<phase> beats --disable-cuda-graph (a case
    the round-trip property found: the legacy switch read True while decode graphs stayed on)."""
    config = ServerConfig(model_path="m", cuda_graph_backend_decode="full", disable_cuda_graph=True)
    argv = config.to_argv()
    assert argv[argv.index("--cuda-graph-backend-decode") + 1] == "full"
    assert argv[argv.index("--cuda-graph-backend-prefill") + 1] == "disabled"
    assert config.disable_cuda_graph is False  # decode graphs are on: not "CUDA graphs off"
    assert ServerConfig.from_argv(argv).diff(config) == {}
    both = ServerConfig(model_path="m", disable_cuda_graph=True)
    assert both.disable_cuda_graph is True and ServerConfig.from_argv(both.to_argv()).disable_cuda_graph is True
    phase = ServerConfig(model_path="m", disable_decode_cuda_graph=True, cuda_graph_backend_prefill="disabled")
    assert phase.disable_cuda_graph is True


def test_cuda_graphs_off_resolves_each_phase_like_sglang_and_reads_logged_text():
    """What ``glm5 logs``, the report and diff say about graphs agrees with the config: the
    per-phase backend beats the legacy switch, and a boolean logged as text reads as it says."""
    from glm5lib.engines.sglang.config import cuda_graphs_off, graphs_off_for

    decode_on = ServerConfig(model_path="m", cuda_graph_backend_decode="full", disable_cuda_graph=True).to_dict()
    assert cuda_graphs_off(decode_on) is False
    assert (graphs_off_for(decode_on, "decode"), graphs_off_for(decode_on, "prefill")) == (False, True)
    # --disable-decode-cuda-graph loses to an explicit decode backend too
    assert graphs_off_for({"disable_decode_cuda_graph": True, "cuda_graph_backend_decode": "full"}, "decode") is False
    # logged server_args may hold booleans as text
    assert cuda_graphs_off({"disable_cuda_graph": "False"}) is False
    assert cuda_graphs_off({"disable_cuda_graph": "True"}) is True
    assert graphs_off_for({"disable_decode_cuda_graph": "false", "disable_cuda_graph": "False"}, "decode") is False
    # 0.5.23 logs the deprecated switch as False and says it per phase; an unset backend falls through
    assert cuda_graphs_off({"disable_cuda_graph": False, "cuda_graph_backend_decode": "disabled",
                            "cuda_graph_backend_prefill": "disabled"}) is True
    assert cuda_graphs_off({"disable_cuda_graph": True, "cuda_graph_backend_decode": None}) is True
    assert cuda_graphs_off({"disable_cuda_graph": False}) is False
    with pytest.raises(ValueError, match="'decode' or 'prefill'"):
        graphs_off_for({}, "draft")

def test_argv_round_trip_property():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @st.composite
    def configs(draw):
        names = draw(st.lists(st.sampled_from(_ROUND_TRIP_FIELDS), min_size=1, max_size=8, unique=True))
        return ServerConfig(**{n: draw(_value_strategy(SGLANG_FLAGS[n])) for n in names})

    @settings(max_examples=150, deadline=None)
    @given(configs())
    def check(config):
        back = ServerConfig.from_argv(config.to_argv())
        assert back.diff(config) == {}

    check()


def test_release_pins_catalogue_argv_and_cli(capsys):
    from glm5lib.cli import main

    fix = ServerConfig.load("glm5-fix", release="0.5.23")
    assert fix.release == "0.5.23"
    argv = fix.to_argv()
    assert "--disable-cuda-graph" not in argv
    assert argv[argv.index("--cuda-graph-backend-decode") + 1] == "disabled"
    assert "--disable-cuda-graph" in ServerConfig.load("glm5-fix", release="0.5.9").to_argv()
    assert "cuda-graph-backend-decode disabled" in fix.to_shell()
    assert main(["config", "argv", "glm5-fix", "--release", "0.5.23", "--json"]) == 0
    assert "--cuda-graph-backend-prefill" in json.loads(capsys.readouterr().out)
    # a 0.5.9 reference lines up with 0.5.23's renamed field
    ref = ServerConfig(model_path="m", cuda_graph_max_bs=128)
    new = ServerConfig(release="0.5.23", model_path="m", cuda_graph_max_bs_decode=64)
    assert new.diff(ref) == {"cuda_graph_max_bs_decode": (64, 128)}
    assert new.for_release("0.5.9").cuda_graph_max_bs == 64
    with pytest.raises(ConfigError, match="unknown SGLang release"):
        ServerConfig(release="banana")


def test_0_5_23_dict_form_server_args_line_reads_as_a_0_5_23_config():
    # 0.5.23 logs server_args={'name': value, ...} (its ServerArgs is a msgspec Struct); the
    # fixture is that release's own output for glm5-fix (tests/fixtures/logs/SOURCES.md)
    from pathlib import Path

    from glm5lib.logs import parse_log, parse_server_args
    from glm5lib.logs.server_args import closes

    path = Path(__file__).parents[4] / "fixtures" / "logs" / "sglang-0.5.23-server-args.log"
    line = path.read_text().strip()
    args = parse_server_args(line)
    assert not args.incomplete and len(args) == 546
    assert (args["cuda_graph_backend_decode"], args["max_running_requests"]) == ("disabled", 1024)
    cut = parse_server_args(line[:9000])  # a paste cut mid-line keeps every complete item
    assert cut.incomplete and 100 < len(cut) < 546 and cut["model_path"] == "lukealonso/GLM-5-NVFP4"
    body = line.split("] ", 1)[1]
    assert closes(body) and not closes(body[:5000])
    slog = parse_log(path)
    assert len(slog.server_args) == 546 and not slog.server_args_incomplete
    config = ServerConfig.from_server_args(line)
    assert config.release == "0.5.23"
    assert config.disable_cuda_graph is True and config.max_running_requests == 1024
    assert config.diff(ServerConfig.load("glm5-fix", release="0.5.23")) == {}  # resolved at start: no choice
    assert set(config.explicit).isdisjoint({
        "enable_tf32_matmul", "swa_full_tokens_ratio", "mamba_full_memory_ratio", "mm_enable_dp_encoder"})


def test_logs_summary_says_graphs_off_for_a_0_5_23_log_that_turns_them_off_per_phase(capsys):
    # 0.5.23 logs the deprecated switch as False while both per-phase backends say 'disabled'
    from pathlib import Path

    from glm5lib.cli import main
    from glm5lib.logs import parse_log, summarize

    fixtures = Path(__file__).parents[4] / "fixtures" / "logs"
    new = summarize(parse_log(fixtures / "sglang-0.5.23-server-args.log"))["server_args"]
    assert new["disable_cuda_graph"] is True
    old = summarize(parse_log(fixtures / "glm5-rocm-server-args.log"))["server_args"]
    assert old["disable_cuda_graph"] is False  # graphs on, said the old way
    assert main(["logs", str(fixtures / "sglang-0.5.23-server-args.log")]) == 0
    assert "disable_cuda_graph = True" in capsys.readouterr().out


def test_a_changed_copy_says_what_changed_since_its_description(tmp_path):
    """A shipped config's description is of its own values ("about 880 tok/s" with the cap at 64);
    a copy with other values keeps the name but its description names the changes, saved and loaded."""
    from glm5lib.engines.vllm import VllmConfig

    base = ServerConfig.load("glm5-baseline")
    fixed = base.with_changes(max_running_requests=1024, disable_cuda_graph=True)
    assert fixed.name == base.name
    assert fixed.meta["description"] == (base.meta["description"]
                                         + " (then changed: max_running_requests=1024, disable_cuda_graph=True)")
    assert base.with_changes(max_running_requests=64).meta["description"] == base.meta["description"]  # its own value
    assert ServerConfig.load(fixed.save(tmp_path / "fix.json")).meta["description"] == fixed.meta["description"]
    keyed = base.with_changes(api_key="sk-very-secret")
    assert keyed.meta["description"].endswith("(then changed: api_key=***)") and "sk-very" not in str(keyed.meta)
    vllm = VllmConfig.load("vllm-capped")
    raised = vllm.with_changes(max_num_seqs=256, enforce_eager=None)  # unsetting what was never set: no change
    assert raised.meta["description"] == vllm.meta["description"] + " (then changed: max_num_seqs=256)"
    assert raised.with_changes(max_num_seqs=None).meta["description"] == raised.meta["description"] + \
        " (then changed: max_num_seqs=unset)"
