from __future__ import annotations

import pytest

from glm5lib import rundir
from glm5lib.errors import ConfigError
from glm5lib.widgets import ServerPanel


def _wait_for(condition, timeout=60.0):
    """Wait (polling) until ``condition()`` holds; the panel's sweep runs in its own thread."""
    import time

    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


@pytest.mark.slow
def test_panel_launches_sweeps_twice_and_stops_a_sweep_on_a_real_stand_in(tmp_path):
    panel = ServerPanel(tmp_path, phase="panel", concurrencies=[1, 4], input_len=32, output_len=8, duration=1.5)
    assert panel.sweep_button.disabled and not panel.launch_button.disabled and panel.stop_button.disabled
    assert panel.server_button.disabled
    assert panel.plot.layout.display == "none" and "No sweep yet" in panel.placeholder.value
    panel.launch_button.click()
    try:
        assert panel.error is None, panel.status.value
        srv = panel.server
        assert srv.alive()
        assert "server ready at http://127.0.0.1:" in panel.status.value
        assert not panel.sweep_button.disabled and panel.launch_button.disabled
        assert panel.stop_button.disabled and not panel.server_button.disabled  # no sweep to stop yet
        assert (tmp_path / "panel" / rundir.SERVER_LOG).exists()
        for attempt in (1, 2):  # a finished sweep leaves the panel ready for the next one
            panel.sweep_button.click()
            assert panel.sweep_button.disabled and not panel.stop_button.disabled
            assert panel.status.value.startswith("sweeping levels 1, 4")
            assert panel.bar.postfix == "" and panel.bar.desc.rstrip(": ") == "sweep starting", "no numbers of the last sweep"
            if attempt == 1:
                assert panel.plot.layout.display == "none", "nothing to draw before the first level reports"
            else:
                # the earlier sweep stays drawn, and the plot says it is this sweep's live one
                assert panel.plot.layout.display is None and panel.plot_title == "panel: throughput (live)"
                assert b"sweep 1:" in bytes(panel.plot.value) and b"sweep 2:" not in bytes(panel.plot.value)
            sweep = panel.wait(timeout=60)
            assert panel.error is None, panel.status.value
            assert list(sweep["concurrency"]) == [1, 4]
            assert (sweep["output_throughput"] > 0).all()
            kinds = [e["event"] for e in panel.events]
            assert kinds.count("level_done") == 2 and "progress" in kinds
            assert panel.bar.n == 2 and panel.bar.total == 2
            assert panel.bar.container.children[1].bar_style == "success"
            assert b"<svg" in bytes(panel.plot.value)[:2000] and b'width="100%"' in bytes(panel.plot.value)[:2000]
            assert panel.plot.layout.display is None
            assert panel.placeholder.layout.display == "none"
            assert panel.plot_title == "panel: throughput", attempt
            # every sweep of the session drawn, each under its own label
            assert [label.split(":")[0] for label, _ in panel.history] == [f"sweep {n}" for n in range(1, attempt + 1)]
            for n in range(1, attempt + 1):
                assert f"sweep {n}: glm5-baseline on sim".encode() in bytes(panel.plot.value)
            assert panel.bar.postfix == "" and panel.bar.desc.rstrip(": ") == "sweep done (2 levels)"
            on_disk = (tmp_path / "panel" / rundir.SWEEP).read_text().splitlines()
            assert len(on_disk) == 3, "each sweep replaces the last"
            assert panel.status.value.startswith("sweep done: 2 levels")
            assert "GPU power at 4:" in panel.status.value
            assert panel.power is not None and list(panel.power["concurrency"]) == [1, 4]
            assert not panel.sweep_button.disabled and not panel.server_button.disabled
            assert panel.stop_button.disabled  # Stop stops a sweep: none runs
            assert panel.launch_button.disabled

        panel.duration.value = 30.0
        panel.sweep_button.click()
        _wait_for(lambda: any(e["event"] == "progress" and e["level"] == 1 for e in panel.events))
        panel.stop_button.click()  # Stop ends the sweep and keeps the server
        assert "sweep stopped by the user" in panel.status.value and "during level 1" in panel.status.value
        panel.wait(timeout=30)
        assert not panel.sweeping and panel.error is None
        assert panel.status.value == ("<b>sweep stopped by the user</b> during level 1 (no level finished); "
                                      "the server keeps running")
        assert panel.bar.container.children[1].bar_style == "danger"
        assert "stopped by the user" in panel.bar.desc and panel.bar.postfix == ""
        assert "(live)" not in panel.plot_title and panel.plot_title.endswith("(stopped by the user)")
        assert srv.alive() and panel.server is srv
        assert not panel.sweep_button.disabled and panel.stop_button.disabled and not panel.server_button.disabled
        assert len(panel.history) == 2  # a sweep stopped before any level adds nothing to compare
        # a sweep stopped by Stop server: the sweep ends first, then the server
        panel.sweep_button.click()
        _wait_for(lambda: any(e["event"] == "progress" and e["level"] == 1 for e in panel.events))
    finally:
        panel.server_button.click()
    panel.wait(timeout=30)
    assert not panel.sweeping and panel.error is None
    assert panel.status.value == ("<b>sweep stopped by the user</b> during level 1 (no level finished); "
                                  "server stopped")
    assert panel.bar.desc.rstrip(": ") == "no server" and panel.bar.postfix == ""
    assert not srv.alive()
    assert panel.server is None and panel.sweep_button.disabled and panel.stop_button.disabled
    assert panel.server_button.disabled and not panel.launch_button.disabled


def test_the_progress_line_shows_only_the_running_levels_numbers(tmp_path):
    panel = ServerPanel(tmp_path)
    panel._on_event({"event": "level_start", "level": 1})
    panel._on_event({"event": "progress", "level": 1, "completed": 3, "in_flight": 1,
                     "recent_output_throughput": 40.0, "gpu_power_w": 33.0})
    assert panel.bar.desc.rstrip(": ") == "C=1" and "tok_s=40" in panel.bar.postfix and "gpu_W=33" in panel.bar.postfix
    panel._on_event({"event": "level_start", "level": 64})
    assert panel.bar.desc.rstrip(": ") == "C=64" and panel.bar.postfix == "", "the new level with the old level's numbers"
    panel._on_event({"event": "progress", "level": 1, "completed": 4, "in_flight": 0,
                     "recent_output_throughput": 41.0})  # a late report of the level before
    assert panel.bar.postfix == "" and 1 not in panel._live


def test_panel_reports_bad_input_in_its_status_line(tmp_path):
    panel = ServerPanel(tmp_path)
    panel.sweep_button.click()  # disabled in a browser; a programmatic click still reaches the handler
    assert "no server" in panel.status.value and panel.error is not None
    panel.config.value = "no-such-config"
    panel.launch_button.click()
    assert panel.server is None
    assert "no-such-config" in panel.status.value
    panel.server = object()  # pretend a server is up, to reach the level parsing
    panel.concurrencies.value = "1, zero"
    with pytest.raises(ConfigError, match=r"concurrency levels '1, zero' are not valid") as exc:
        panel.start_sweep()
    assert exc.value.field == "concurrencies"
