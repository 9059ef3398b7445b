from __future__ import annotations

import pytest

from glm5lib import rundir
from glm5lib.errors import ConfigError
from glm5lib.widgets import ServerPanel


@pytest.mark.slow
def test_panel_launches_sweeps_live_and_stops_a_real_stand_in(tmp_path):
    panel = ServerPanel(tmp_path, phase="panel", concurrencies=[1, 4], input_len=32, output_len=8, duration=1.5)
    assert panel.sweep_button.disabled and not panel.launch_button.disabled
    panel.launch_button.click()
    try:
        assert panel.error is None, panel.status.value
        srv = panel.server
        assert srv.alive()
        assert "server ready at http://127.0.0.1:" in panel.status.value
        assert not panel.sweep_button.disabled and panel.launch_button.disabled
        assert (tmp_path / "panel" / rundir.SERVER_LOG).exists()
        panel.sweep_button.click()
        sweep = panel.wait(timeout=60)
        assert panel.error is None, panel.status.value
        assert list(sweep["concurrency"]) == [1, 4]
        assert (sweep["output_throughput"] > 0).all()
        kinds = [e["event"] for e in panel.events]
        assert kinds.count("level_done") == 2 and "progress" in kinds
        assert panel.bar.n == 2 and panel.bar.total == 2
        assert panel.plot.value[:4] == b"\x89PNG"
        assert (tmp_path / "panel" / rundir.SWEEP).exists()
        assert panel.status.value.startswith("sweep done: 2 levels")
    finally:
        panel.stop_button.click()
    assert not srv.alive()
    assert panel.server is None and panel.sweep_button.disabled


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
