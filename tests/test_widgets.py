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
    assert panel.plot.layout.display == "none" and "No sweep yet" in panel.placeholder.value
    panel.launch_button.click()
    try:
        assert panel.error is None, panel.status.value
        srv = panel.server
        assert srv.alive()
        assert "server ready at http://127.0.0.1:" in panel.status.value
        assert not panel.sweep_button.disabled and panel.launch_button.disabled
        assert (tmp_path / "panel" / rundir.SERVER_LOG).exists()
        for attempt in (1, 2):  # a finished sweep leaves the panel ready for the next one
            panel.sweep_button.click()
            assert panel.sweep_button.disabled and not panel.stop_button.disabled
            assert panel.status.value.startswith("sweeping levels 1, 4")
            assert panel.plot.layout.display == "none", "no plot of the last sweep while this one starts"
            sweep = panel.wait(timeout=60)
            assert panel.error is None, panel.status.value
            assert list(sweep["concurrency"]) == [1, 4]
            assert (sweep["output_throughput"] > 0).all()
            kinds = [e["event"] for e in panel.events]
            assert kinds.count("level_done") == 2 and "progress" in kinds
            assert panel.bar.n == 2 and panel.bar.total == 2
            assert panel.bar.container.children[1].bar_style == "success"
            assert panel.plot.value[:4] == b"\x89PNG" and panel.plot.layout.display is None
            assert panel.placeholder.layout.display == "none"
            assert panel.plot_title == "panel: throughput", attempt
            on_disk = (tmp_path / "panel" / rundir.SWEEP).read_text().splitlines()
            assert len(on_disk) == 3, "each sweep replaces the last"
            assert panel.status.value.startswith("sweep done: 2 levels")
            assert "GPU power at 4:" in panel.status.value
            assert panel.power is not None and list(panel.power["concurrency"]) == [1, 4]
            assert not panel.sweep_button.disabled and not panel.stop_button.disabled
            assert panel.launch_button.disabled

        panel.duration.value = 30.0
        panel.sweep_button.click()
        _wait_for(lambda: any(e["event"] == "progress" and e["level"] == 1 for e in panel.events))
    finally:
        panel.stop_button.click()
    assert "sweep stopped by the user" in panel.status.value and "during level 1" in panel.status.value
    panel.wait(timeout=30)
    assert not panel.sweeping and panel.error is None
    assert panel.status.value.startswith("<b>sweep stopped by the user</b> during level 1 (no level finished)")
    assert "server stopped" in panel.status.value
    assert panel.bar.container.children[1].bar_style == "danger"
    assert "stopped by the user" in panel.bar.desc
    assert "(live)" not in panel.plot_title and panel.plot_title.endswith("(stopped by the user)")
    assert not srv.alive()
    assert panel.server is None and panel.sweep_button.disabled and panel.stop_button.disabled
    assert not panel.launch_button.disabled


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
