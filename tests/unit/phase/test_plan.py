"""A phase as one plan: frozen parts, each checked when made (the field named, what is valid), one
source of defaults, and measure_phase's keywords turned into the same plan."""

from __future__ import annotations

import dataclasses
import types

import pytest

from glm5lib import phase
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ConfigError
from glm5lib.loadgen import SweepSettings
from glm5lib.loadgen.settings import DEFAULT_CONCURRENCIES
from glm5lib.phase import EnginePlan, LoadPlan, PhasePlan, TelemetryOptions, measure
from glm5lib.phase.plan import check_backend


def test_the_default_plan_is_the_stand_in_at_the_default_levels_with_the_sweeps_own_settings():
    plan = PhasePlan()
    assert plan.engine == EnginePlan() and plan.engine.backend == "sim" and not plan.engine.attaches
    assert plan.load.concurrencies == DEFAULT_CONCURRENCIES and plan.load.settings == SweepSettings()
    assert plan.telemetry == TelemetryOptions() and plan.cpus is None and plan.keep_running is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cpus = "split"  # type: ignore[misc]


def test_each_part_refuses_a_bad_value_naming_its_field():
    cases = [
        (lambda: EnginePlan(backend="tgi"), "BACKEND"),
        (lambda: EnginePlan(config="glm5-baseline"), "server"),
        (lambda: EnginePlan(ready_timeout=0), "ready_timeout"),
        (lambda: EnginePlan(extra_args="--flag"), "extra_args"),
        (lambda: EnginePlan(backend="command", command="serve"), "command"),
        (lambda: EnginePlan(command_changes=["--x"]), "command_changes"),
        (lambda: LoadPlan((0, 1)), "concurrencies"),
        (lambda: LoadPlan((), SweepSettings()), "concurrencies"),
        (lambda: LoadPlan((1,), {"input_len": 8}), "settings"),
        (lambda: LoadPlan.of([1], mode="burst"), "mode"),
        (lambda: LoadPlan((1, 2, 3), SweepSettings(mode="poisson", rate=[1.0, 2.0])), "rate"),
        (lambda: TelemetryOptions(gpu_interval=0), "gpu_interval"),
        (lambda: TelemetryOptions(metrics_interval=float("nan")), "metrics_interval"),
        (lambda: TelemetryOptions(gpu="yes"), "gpu"),
        (lambda: PhasePlan(load=SweepSettings()), "load"),
        (lambda: PhasePlan(telemetry=None), "telemetry"),
        (lambda: PhasePlan(cpus="0-1/1"), "cpus"),
        (lambda: PhasePlan(keep_running="no"), "keep_running"),
    ]
    for make, field in cases:
        with pytest.raises(ConfigError) as info:
            make()
        assert info.value.field == field, (field, info.value)
    with pytest.raises(ConfigError) as info:
        check_backend("tgi")
    assert "sim" in info.value.valid and "http://HOST:PORT" in info.value.valid


def test_the_parts_keep_what_they_are_given_as_tuples():
    engine = EnginePlan("command", command=["serve", "{port}"], extra_args=["--a", 1])
    assert engine.command == ("serve", "{port}") and engine.extra_args == ("--a", "1")
    assert EnginePlan("http://127.0.0.1:9").attaches
    assert LoadPlan([1, 4]).concurrencies == (1, 4) and LoadPlan(8).concurrencies == 8
    assert LoadPlan.of([2], input_len=32, duration=3).settings == SweepSettings(input_len=32, duration=3)
    assert PhasePlan(engine=None).engine is None  # a running server is handed to run_phase


def test_measure_phase_keywords_make_the_same_plan_and_take_their_defaults_from_the_parts():
    config = ServerConfig.load("glm5-baseline")
    params = measure.KEYWORDS
    for name, default in [("backend", EnginePlan().backend), ("ready_timeout", EnginePlan().ready_timeout),
                          ("gpu_interval", TelemetryOptions().gpu_interval),
                          ("metrics_interval", TelemetryOptions().metrics_interval),
                          ("concurrencies", DEFAULT_CONCURRENCIES)]:
        assert params[name] == default, name
    given = dict(params)
    given.update(server=config, run_dir=".", concurrencies=[1, 4], input_len=32, ready_timeout=60,
                 sweep_options={"resume": False}, gpu=False, cpus=None)
    plan = measure._plan(given)
    assert plan == PhasePlan(engine=EnginePlan("sim", config, ready_timeout=60),
                             load=LoadPlan((1, 4), SweepSettings(input_len=32, resume=False)),
                             telemetry=TelemetryOptions(gpu=False))


def test_run_phase_refuses_what_is_not_a_plan_or_a_server_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError) as info:
        phase.run_phase({"load": None}, tmp_path, "x")
    assert info.value.field == "plan"
    with pytest.raises(ConfigError) as info:
        phase.run_phase(PhasePlan(), tmp_path, "x", server="http://127.0.0.1:9")
    assert info.value.field == "server"
    with pytest.raises(ConfigError) as info:
        phase.run_phase(PhasePlan(engine=None), tmp_path, "x")
    assert info.value.field == "engine"
    assert not (tmp_path / "x").exists()


def test_start_server_checks_its_engine_plan_before_it_makes_the_folder(tmp_path):
    with pytest.raises(ConfigError) as info:
        phase.start_server("sim", None, tmp_path / "p", ready_timeout=-1)
    assert info.value.field == "ready_timeout"
    with pytest.raises(TypeError, match="readytimeout"):
        phase.start_server("sim", None, tmp_path / "p", readytimeout=5)
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(("backend", "log_engine", "flag"), [
    ("sim", None, "--enable-metrics"),  # the stand-in takes SGLang's switch
    ("command", "vllm", None),  # vLLM serves /metrics unasked
    ("command", "sglang", "--enable-metrics"),  # the engine whose log the command writes decides
    ("command", None, None),  # an engine nobody named: the scraper words it neutrally
])
def test_the_scraper_is_handed_the_engines_own_metrics_switch(backend, log_engine, flag, tmp_path):
    from glm5lib.phase.measure import _Measurement

    srv = types.SimpleNamespace(base_url="http://127.0.0.1:9", log_engine=log_engine)
    measurement = _Measurement(PhasePlan(engine=EnginePlan(backend=backend)), "p", tmp_path, srv, None)
    assert measurement.metrics_flag() == flag
