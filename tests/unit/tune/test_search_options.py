"""The tuner's options as one SearchOptions, its keywords still taken; each candidate's evidence read once."""

from __future__ import annotations

import inspect

import pandas as pd
import pytest
from test_replay_vllm_grid import META, REPLAY

from glm5lib import engines, rundir, tune
from glm5lib.diagnose import evidence
from glm5lib.engines import vllm as ev
from glm5lib.errors import ConfigError
from glm5lib.tune import phases, search


def _setup():
    base = ev.VllmConfig.load(META["config"])
    workload = tune.Workload(META["concurrency"], META["input_len"], META["output_len"], META["duration"],
                             api="completions", warmup=META.get("warmup", 2), sweep_options={"token_ids": False})
    return base, workload, tune.Goal.parse(META["slo"]), f"{META['lever']}={min(META['values'])}:{max(META['values'])}"


def test_tune_and_grid_take_at_most_ten_parameters():
    for fn in (tune.tune, tune.grid):
        named = [p for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]
        assert len(named) <= 10, (fn.__name__, [p.name for p in named])


def test_the_options_as_one_object_or_as_keywords_take_the_same_path(tmp_path):
    base, workload, goal, space = _setup()
    frames = []
    for name, kwargs in (("keywords", {"levers": [space], "noise": 0.1, "margin": 0.15}),
                         ("options", {"options": tune.SearchOptions(levers=[space], noise=0.1, margin=0.15)})):
        run = tmp_path / name
        result = tune.tune(base, run, goal, workload, backend="vllm", max_launches=3,
                           measure=REPLAY.measure(run, []), **kwargs)
        frames.append(pd.read_csv(run / rundir.TUNE_CSV))
        assert result.best is not None
    pd.testing.assert_frame_equal(frames[0], frames[1])


def test_a_keyword_sets_its_field_over_the_options_object():
    launch = {"noise": 0.2, "cpus": "split"}
    opts = search._options(tune.SearchOptions(noise=0.05, margin=0.1), launch)
    assert (opts.noise, opts.margin) == (0.2, 0.1)
    assert launch == {"cpus": "split"}  # what is left goes to the launch


def test_bad_noise_or_margin_is_refused_before_any_launch(tmp_path):
    base, workload, goal, space = _setup()
    with pytest.raises(ConfigError, match="noise and margin"):
        tune.tune(base, tmp_path, goal, workload, backend="vllm", options=tune.SearchOptions(levers=[space], noise=1.5),
                  measure=lambda *a: pytest.fail("launched"))


def test_each_candidate_is_read_once_per_measurement(tmp_path, monkeypatch):
    base, workload, goal, space = _setup()
    reads: list[str] = []
    real = evidence.load_evidence  # what the tuner's EvidenceCache (tune.phases) reads a phase with

    def counting(run_dir, *args, **kwargs):
        reads.append(kwargs.get("phase"))
        return real(run_dir, *args, **kwargs)

    monkeypatch.setattr(evidence, "load_evidence", counting)
    result = tune.tune(base, tmp_path, goal, workload, backend="vllm", max_launches=3, levers=[space],
                       measure=REPLAY.measure(tmp_path, []))
    measured = list(result.candidates["phase"])
    assert measured and sorted(reads) == sorted(measured), reads  # the evaluation and every fit share one read


def test_the_tuner_takes_a_phases_configuration_from_its_evidence(tmp_path, monkeypatch):
    """``config_of``: the configuration the phase's evidence read (config.json as its engine's), in
    one load of the phase; a recorded configuration that cannot be read is an error, not the fallback."""
    base, *_ = _setup()
    folder = tmp_path / "fix"
    folder.mkdir()
    base.save(folder / rundir.CONFIG)
    reads: list[str] = []
    real = evidence.load_evidence
    monkeypatch.setattr(evidence, "load_evidence", lambda *a, **k: reads.append(k.get("phase")) or real(*a, **k))
    config = tune.config_of(tmp_path, "fix", "glm5-fix")
    assert type(config) is type(base) and config.to_dict() == base.to_dict() and reads == ["fix"]
    assert phases.EvidenceCache is evidence.EvidenceCache
    assert type(tune.config_of(tmp_path, "not-measured", "glm5-fix")) is type(engines.load_config("glm5-fix"))
    assert tune.config_of(tmp_path, None) is None
    (folder / rundir.CONFIG).write_text("{not json")
    with pytest.raises(ConfigError, match=rundir.CONFIG):
        tune.config_of(tmp_path, "fix", "glm5-fix")


def test_a_misspelt_limit_metric_is_refused_with_the_spelling_that_parses():
    import pytest

    from glm5lib import tune
    from glm5lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"did you mean median_tpot_ms<=250\? the metrics: median_ttft_ms, ") as refused:
        tune.Goal.parse(["median_tpot<250"])
    assert refused.value.field == "slo" and "p99_e2e_latency_ms" in refused.value.valid
