from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glm5lib import plots
from glm5lib.errors import ConfigError


def _sweep(throughputs: dict[int, float]) -> pd.DataFrame:
    levels = list(throughputs)
    return pd.DataFrame(
        {
            "concurrency": levels,
            "output_throughput": list(throughputs.values()),
            "median_ttft_ms": [10.0 * c for c in levels],
            "p99_ttft_ms": [20.0 * c for c in levels],
            "median_tpot_ms": [50.0 + c / 10 for c in levels],
        }
    )


def test_throughput_draws_each_phase_on_the_same_axes_with_labels():
    baseline = _sweep({1: 40.0, 256: 880.0, 64: 800.0})
    fix = _sweep({1: 30.0, 256: 1950.0, 1024: 3740.0})
    fig = plots.throughput_vs_concurrency({"baseline": baseline, "fix": fix})
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"baseline", "fix"}
    # sorted by concurrency
    assert list(lines["baseline"].get_xdata()) == [1, 64, 256]
    assert list(lines["fix"].get_ydata()) == [30.0, 1950.0, 3740.0]
    texts = {t.get_text() for t in ax.texts}
    assert {"880", "3,740"} <= texts
    assert ax.get_xscale() == "log"


def test_latency_has_a_panel_per_metric_with_p99():
    fig = plots.latency_vs_concurrency(_sweep({1: 1.0, 256: 2.0}), metrics=["ttft", "tpot"])
    assert len(fig.axes) == 2
    ttft_labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert ttft_labels == ["sweep median", "sweep p99"]
    assert list(fig.axes[0].get_lines()[1].get_ydata()) == [20.0, 5120.0]
    # no p99 column for tpot: only the median line
    assert len(fig.axes[1].get_lines()) == 1


def test_running_queued_marks_the_cap_and_uses_one_rank():
    times = pd.date_range("2026-01-01 10:00:00", periods=4, freq="2s")
    decode = pd.DataFrame(
        {
            "time": list(times) * 2,
            "rank": [0] * 4 + [1] * 4,
            "running_req": [64, 64, 64, 64, 64, 64, 64, 64],
            "queue_req": [0, 100, 190, 192, 0, 100, 190, 192],
        }
    )
    fig = plots.running_queued_over_time({"baseline": decode}, running_cap={"baseline": 64})
    (ax,) = fig.axes
    running, queued, cap = ax.get_lines()
    assert list(running.get_xdata()) == [0.0, 2.0, 4.0, 6.0]
    assert list(queued.get_ydata()) == [0, 100, 190, 192]
    assert list(cap.get_ydata()) == [64, 64]
    assert "64" in cap.get_label()


def test_running_queued_accepts_epoch_seconds_and_empty_frames():
    decode = pd.DataFrame({"time": [100.0, 101.5], "running_req": [3, 4], "queue_req": [0, 0]})
    empty = decode.iloc[0:0]
    fig = plots.running_queued_over_time({"a": decode, "b": empty})
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [0.0, 1.5]
    assert "no decode lines" in fig.axes[1].texts[0].get_text()


def test_power_vs_tdp_draws_the_limit_and_share():
    per_level = pd.DataFrame(
        {
            "concurrency": [64, 256],
            "mean_power_w": [80.0, 83.0],
            "peak_power_w": [90.0, 95.0],
            "power_limit_w": [600.0, 600.0],
        }
    )
    fig = plots.power_vs_tdp({"baseline": per_level})
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["baseline mean per GPU", "baseline peak", "power limit 600 W"]
    assert "83 W" in {t.get_text() for t in ax.texts}
    (share,) = ax.child_axes
    assert share.get_ylabel() == "% of power limit"
    assert ax.get_ylim()[1] == pytest.approx(660.0)


def test_missing_column_names_it_and_what_exists():
    frame = pd.DataFrame({"concurrency": [1], "total_throughput": [np.nan]})
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['output_throughput'\]") as exc:
        plots.throughput_vs_concurrency({"baseline": frame})
    assert exc.value.field == "output_throughput"
    with pytest.raises(ConfigError, match="mapping"):
        plots.throughput_vs_concurrency([frame])


def test_save_figure_writes_a_png_in_figures(tmp_path):
    fig = plots.throughput_vs_concurrency(_sweep({1: 1.0, 2: 2.0}))
    path = plots.save_figure(fig, tmp_path, "throughput")
    assert path == tmp_path / "figures" / "throughput.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # what Jupyter displays
    with pytest.raises(ConfigError, match="plain file name"):
        plots.save_figure(fig, tmp_path, "../escape")


def test_power_figure_says_when_no_gpu_telemetry_was_recorded():
    import pandas as pd

    from glm5lib import plots

    no_power = pd.DataFrame({"concurrency": [1, 8], "mean_power_w": [float("nan")] * 2,
                             "peak_power_w": [float("nan")] * 2, "power_limit_w": [float("nan")] * 2})
    fig = plots.power_vs_tdp({"baseline": no_power, "fix": no_power})
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "no GPU telemetry was recorded" in texts


def test_throughput_labels_stay_inside_the_axes_and_the_size_is_the_callers():
    fig = plots.throughput_vs_concurrency({"baseline": _sweep({1: 40.0, 256: 880.0}),
                                           "fix": _sweep({1: 30.0, 1024: 3740.0})}, size=(6.4, 3.9))
    assert tuple(fig.get_size_inches()) == pytest.approx((6.4, 3.9))
    fig.canvas.draw()
    (ax,) = fig.axes
    box = ax.get_window_extent()
    for text in ax.texts:  # every point's label, the top one included, is drawn inside the axes
        extent = text.get_window_extent()
        assert extent.y1 <= box.y1 - 1 and extent.y0 >= box.y0, text.get_text()
    assert ax.get_ylim()[1] > 3740 * 1.1
    # one line: a legend only when asked for (the panel names its one sweep)
    single = plots.throughput_vs_concurrency(_sweep({1: 40.0}), legend=True)
    assert [t.get_text() for t in single.axes[0].get_legend().get_texts()] == ["sweep"]
    assert plots.throughput_vs_concurrency(_sweep({1: 40.0})).axes[0].get_legend() is None
