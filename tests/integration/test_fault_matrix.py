"""Each stand-in fault at each phase: a classified error naming the cause and quoting the log,
every record kept, a rerun that resumes, and no process left behind.

Start-up faults make :func:`glm5lib.engines.sglang.launch` raise; faults during a sweep make
:func:`glm5lib.loadgen.run_sweep` raise :class:`~glm5lib.errors.SweepAbortedError` with the rows of
the finished levels already in sweep.csv and every request record in requests.jsonl whole (a
level the server died or hung in is not among them, even when its streams were only cut at the
deadline). With the patch applied, a crash, Ctrl-C, SIGTERM or SIGHUP reverts it, and a patch left
by a run killed outright is reverted by the next. Levels are small (short prompts, 1.5 s or 4
requests each) to keep the matrix fast.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import psutil
import pytest
from sglang_site import MODEL_RUNNER, make_site

from glm5lib import patching
from glm5lib import server as srv
from glm5lib.engines import sglang
from glm5lib.errors import ConfigError, ServerLaunchError, SweepAbortedError
from glm5lib.loadgen import load_sweep, run_sweep
from glm5lib.sim import parse_faults

LEVELS = [2, 4, 8, 16]
# The stand-in decodes about 20 steps a second at these batch sizes (each step is modelled
# time), so a first level of 1.5 s takes at most ~30 steps: 45 fires in a later level, and
# in time unless the machine runs the stand-in at under a third of its speed.
STEPS = 45


@pytest.fixture(autouse=True)
def _no_leftovers(no_leftover_processes):
    yield


def _standin(tmp_path, *faults, name="server.log", **kw):
    extra = ["--decode-log-interval", "5"]
    for fault in faults:
        extra += ["--sim-fault", fault]
    kw.setdefault("ready_timeout", 60)
    return sglang.launch(["--max-running-requests", "64"], backend="sim", log_path=tmp_path / name,
                      extra_args=extra, **kw)


def _sweep(server, run_dir, levels=LEVELS, **kw):
    options = {"duration": 1.5, "input_len": 16, "output_len": 4096, "health_interval": 0.5, "health_timeout": 1.0}
    options.update(kw)
    return run_sweep(server.base_url, levels, run_dir=run_dir, server=server, progress=False, warmup=0, **options)


def _records(run_dir):
    """Every line of requests.jsonl parsed: a half-written record fails here."""
    path = run_dir / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_kept_and_resume(tmp_path, run_dir, err, levels=LEVELS, **kw):
    """sweep.csv holds exactly the finished levels; requests.jsonl is whole; a rerun against a
    healthy server resumes: the finished levels are kept as they were, the rest measured."""
    kept = load_sweep(run_dir)
    assert list(kept["concurrency"]) == list(err.completed_levels)
    assert err.level not in list(kept["concurrency"])
    records = _records(run_dir)
    for row in kept.itertuples():
        sent = sum(1 for r in records if r["level"] == row.concurrency and not r["warmup"])
        assert sent == row.completed + row.failed + row.cancelled  # every request of the level
    with _standin(tmp_path, name="rerun.log") as healthy:
        again = _sweep(healthy, run_dir, levels, **kw)
    assert list(again["concurrency"]) == list(levels)
    if len(kept):
        before = kept.set_index("concurrency")["start_time"]
        after = again.set_index("concurrency")["start_time"]
        for conc in kept["concurrency"]:
            assert after[conc] == pytest.approx(before[conc])  # kept, not measured again
    assert len(_records(run_dir)) >= len(records)


# --------------------------------------------------------------------------- at start


@pytest.mark.parametrize(
    ("fault", "cause", "quoted"),
    [
        ("oom-at-start", "oom", "Not enough memory"),
        ("nccl-at-start", "nccl", "NCCL"),
        ("slow-start=60", "timeout", None),
        ("hang-after=0", "timeout", None),
    ],
)
def test_fault_at_start(tmp_path, fault, cause, quoted):
    with pytest.raises(ServerLaunchError) as info:
        _standin(tmp_path, fault, ready_timeout=20 if cause != "timeout" else 4)
    err = info.value
    assert err.cause == cause
    assert f"({cause})" in str(err) and err.log_path == str(tmp_path / "server.log")
    assert err.log_lines  # the log is quoted
    if quoted:
        assert any(quoted in line for line in err.log_lines)
    assert not srv.live_servers()


# --------------------------------------------------------------------------- mid-sweep


def test_nan_after_finished_requests_mid_sweep(tmp_path):
    run_dir = tmp_path / "run"
    with _standin(tmp_path, "nan-after=4") as server, pytest.raises(SweepAbortedError) as info:
        _sweep(server, run_dir, [2, 4], duration=None, requests_per_level=4, output_len=8)
    err = info.value
    assert err.level == 4 and err.completed_levels == [2]
    assert "(nan" in str(err)  # "(nan, exit status -9, killed by SIGKILL)" once it has died
    assert any("NaN in the logits" in line for line in err.log_lines)
    assert server.crash_cause() == "nan"
    assert len(_records(run_dir)) >= 4
    _check_kept_and_resume(tmp_path, run_dir, err, [2, 4], duration=None, requests_per_level=4, output_len=8)


@pytest.mark.parametrize("fault", [f"nan-after-steps={STEPS}", "nan-after-s=2.5"])
def test_nan_in_duration_bound_levels(tmp_path, fault):
    """No request finishes in these levels (cancelled at the deadline): the trigger counts
    decode steps or seconds, so the crash still comes."""
    run_dir = tmp_path / "run"
    with _standin(tmp_path, fault) as server, pytest.raises(SweepAbortedError) as info:
        _sweep(server, run_dir)
    err = info.value
    assert "nan" in str(err) and any("NaN in the logits" in line for line in err.log_lines)
    if "steps" in fault:
        assert err.completed_levels and err.completed_levels[0] == LEVELS[0]
    kept = load_sweep(run_dir)
    assert (kept["completed"] == 0).all() and (kept["cancelled"] == kept["concurrency"]).all()
    _check_kept_and_resume(tmp_path, run_dir, err)


# The seconds count from the moment the stand-in is ready, not from the sweep's first request:
# 3.5 s leaves the first 1.5 s level about 2 s to begin and end in, on a slow machine as well.
@pytest.mark.parametrize("fault", [f"hang-after-steps={STEPS}", "hang-after-s=3.5"])
def test_hang_in_duration_bound_levels(tmp_path, fault):
    """No request finishes in these levels (cancelled at the deadline): the hang's trigger counts
    decode steps or seconds. The level it hangs in is not kept, though its streams were cut at the
    deadline rather than failed, and three unanswered probes give the word for it."""
    run_dir = tmp_path / "run"
    with _standin(tmp_path, fault) as server, pytest.raises(SweepAbortedError) as info:
        _sweep(server, run_dir, health_timeout=0.5)
    err = info.value
    assert "hung" in str(err) and "/health did not answer" in str(err)
    assert err.completed_levels and err.completed_levels[0] == LEVELS[0]
    kept = load_sweep(run_dir)
    assert (kept["completed"] == 0).all() and (kept["cancelled"] == kept["concurrency"]).all()
    records = _records(run_dir)
    for row in kept.itertuples():  # the server streamed to the end of every level kept
        last_chunk = max(t for r in records if r["level_id"] == row.level_id for t in r["chunk_times"])
        assert row.end_time - last_chunk < 0.5, (row.concurrency, row.end_time - last_chunk)
    _check_kept_and_resume(tmp_path, run_dir, err)


def test_hang_mid_sweep_is_named(tmp_path):
    """A hung server answers nothing, /health included: the level's requests never end, and
    three unanswered probes end the sweep with the word for it."""
    run_dir = tmp_path / "run"
    options = {"duration": None, "requests_per_level": 4, "output_len": 8, "health_timeout": 0.5}
    with _standin(tmp_path, "hang-after=4") as server, pytest.raises(SweepAbortedError) as info:
        _sweep(server, run_dir, [2, 4], **options)
    err = info.value
    assert err.level == 4 and err.completed_levels == [2]
    assert "hung" in str(err) and "/health did not answer" in str(err)
    _check_kept_and_resume(tmp_path, run_dir, err, [2, 4], **options)


def test_slow_health_under_load_is_busy_not_hung(tmp_path, caplog):
    """SGLang's /health waits for the scheduler's step in progress, seconds behind a long prefill:
    a server whose /health takes longer than health_timeout while its streams flow is busy. Its
    level completes and keeps its row; a real hang later still stops the sweep as "hung"."""
    caplog.set_level(logging.INFO, logger="glm5lib.loadgen.health")
    run_dir = tmp_path / "run"
    with (
        _standin(tmp_path, "health-delay=3", "hang-after-s=3.5") as server,
        pytest.raises(SweepAbortedError) as info,
    ):
        _sweep(server, run_dir, [2, 4, 8], health_interval=0.3, health_timeout=0.5)
    err = info.value
    assert "hung" in str(err) and "/health did not answer" in str(err)
    assert err.completed_levels and err.completed_levels[0] == 2
    assert any("busy, not hung" in r.getMessage() for r in caplog.records)  # /health was slow
    kept = load_sweep(run_dir)
    assert list(kept["concurrency"]) == list(err.completed_levels)
    assert (kept["cancelled"] == kept["concurrency"]).all()  # streamed to the deadline


def test_server_killed_mid_level(tmp_path):
    run_dir = tmp_path / "run"
    server = _standin(tmp_path)

    def kill_in_second_level(event):
        if event.get("event") == "level_start" and event.get("level") == LEVELS[1]:
            os.kill(server.pid, signal.SIGKILL)

    with server, pytest.raises(SweepAbortedError) as info:
        _sweep(server, run_dir, callback=kill_in_second_level)
    err = info.value
    assert err.level == LEVELS[1] and err.completed_levels == [LEVELS[0]]
    assert "exit status -9, killed by SIGKILL" in str(err) and str(server.log_path) in str(err)
    _check_kept_and_resume(tmp_path, run_dir, err)


def test_connections_reset_mid_level_fail_those_requests_only(tmp_path):
    """Connections reset under a healthy server: the requests they carried are recorded as failed
    with the reason, the sweep goes on, and every request sent is accounted for."""
    run_dir = tmp_path / "run"
    with _standin(tmp_path, "reset-after=4") as server:
        frame = _sweep(server, run_dir, [8], duration=None, requests_per_level=24, output_len=48,
                       range_ratio=0.25)
        assert server.alive() and server.healthy()
        assert "stand-in fault: reset" in server.log_text()
    row = frame.iloc[0]
    records = [r for r in _records(run_dir) if not r["warmup"]]
    failed = [r for r in records if r["status"] != "ok"]
    assert row["failed"] >= 1 and row["completed"] + row["failed"] + row["cancelled"] == len(records) == 24
    assert len(failed) == row["failed"]
    assert all("reset by peer" in r["error"] for r in failed)  # the reason, in each record


# --------------------------------------------------------------------------- the triggers


def test_fault_triggers_parse_and_fire_at_the_first_reached():
    faults = parse_faults(["nan-after=100,nan-after-steps=10", "hang-after-s=2.5"])
    assert faults.specs() == ["nan-after=100", "nan-after-steps=10", "hang-after-s=2.5"]
    assert not faults.nan_due(finished=5, steps=9, seconds=100.0)
    assert faults.nan_due(finished=5, steps=10, seconds=0.0)
    assert faults.nan_due(finished=100, steps=0, seconds=0.0)
    assert not faults.hang_due(finished=10**6, steps=10**6, seconds=2.4)
    assert faults.hang_due(finished=0, steps=0, seconds=2.5)
    assert parse_faults(["reset-after=3"]).specs() == ["reset-after=3"]
    assert parse_faults(["health-delay=2.5"]).specs() == ["health-delay=2.5"]
    for bad in ("nan-after-s=-1", "nan-after-steps=1.5", "hang-after-s=inf", "nan-after-steps"):
        with pytest.raises(ConfigError) as info:
            parse_faults([bad])
        assert info.value.field == "sim_fault" and "nan-after-s=SECONDS" in info.value.valid


# --------------------------------------------------------------------------- with a patch applied

PATCH = "sglang-flashinfer-cutlass-moe-autotune"


@pytest.mark.parametrize("fault", ["nan", "ctrl-c"])
def test_fault_during_the_patched_phase_reverts_the_patch(tmp_path, fault, sigint_raises):
    """Notebook 4's step: the fix measured with a source patch applied. A crash or a Ctrl-C in
    the middle of its sweep leaves the installation as it was and no server running."""
    site = tmp_path / "site-packages"
    target = make_site(site)
    run_dir = tmp_path / "run" / "fix"
    faults = ("nan-after=4",) if fault == "nan" else ()
    expected = SweepAbortedError if fault == "nan" else KeyboardInterrupt

    def interrupt_in_second_level(event):
        if fault == "ctrl-c" and event.get("event") == "level_start" and event.get("level") == 4:
            os.kill(os.getpid(), signal.SIGINT)

    with (
        pytest.raises(expected),
        patching.SourcePatch(PATCH, root=site, record_dir=run_dir) as patch,
        _standin(tmp_path, *faults) as server,
    ):
        assert patch.applied and target.read_text() != MODEL_RUNNER
        _sweep(server, run_dir, [2, 4], duration=None, requests_per_level=4, output_len=8,
               callback=interrupt_in_second_level)
    assert target.read_text() == MODEL_RUNNER
    assert json.loads((run_dir / patching.PATCH_RECORD).read_text())["status"] == "reverted"
    assert not server.alive() and not srv.live_servers()
    assert list(load_sweep(run_dir)["concurrency"]) == [2]


# The patched phase in a Python of its own: the patch applied, a stand-in launched and a sweep
# running, as in notebook 4, until the test ends it with a signal.
PATCHED_PHASE = """
import signal, sys
from pathlib import Path
# the default actions, as in a terminal, whatever this process inherited (nohup ignores SIGHUP)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from glm5lib import patching
from glm5lib.engines import sglang
from glm5lib.loadgen import run_sweep

site, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
with patching.SourcePatch(sys.argv[3], root=site, record_dir=run_dir):
    with sglang.launch(["--max-running-requests", "64"], backend="sim", log_path=run_dir / "server.log",
                       ready_timeout=60) as srv:
        def told(event):
            if event.get("event") == "level_start":
                print("sweeping", srv.pid, flush=True)
        run_sweep(srv.base_url, [4], duration=120, input_len=16, output_len=4096, warmup=0,
                  run_dir=run_dir, progress=False, callback=told)
"""


def _fake_site(tmp_path):
    site = tmp_path / "site-packages"
    target = make_site(site)
    return site, target


def _ended(pid, timeout=30):
    """Wait for a process that is not our child to end (it was the child's)."""
    try:
        _, alive = psutil.wait_procs([psutil.Process(pid)], timeout=timeout)
    except psutil.NoSuchProcess:
        return True
    return not alive


def _start_patched_phase(tmp_path, site, run_dir):
    """The child, once its sweep is under way; and the stand-in's pid."""
    child = subprocess.Popen([sys.executable, "-c", PATCHED_PHASE, str(site), str(run_dir), PATCH],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()  # blocks until the sweep has started (or the child ended)
    assert line.startswith("sweeping"), (line, child.stderr.read() if child.poll() is not None else "")
    return child, int(line.split()[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_the_patched_phase_reverts_the_patch_and_ends_the_process(tmp_path, sig):
    """SIGTERM's (and SIGHUP's) default action ends Python without running a finally block or an
    atexit function: the patched phase reverts on the signal first, then ends as the signal would."""
    site, target = _fake_site(tmp_path)
    run_dir = tmp_path / "run" / "fix"
    child, standin = _start_patched_phase(tmp_path, site, run_dir)
    assert target.read_text() != MODEL_RUNNER
    child.send_signal(sig)
    assert child.wait(timeout=60) == -sig  # ended by the signal, as it would have been
    assert target.read_text() == MODEL_RUNNER
    record = json.loads((run_dir / patching.PATCH_RECORD).read_text())
    assert record["status"] == "reverted"
    assert f"{signal.Signals(sig).name} received" in child.stderr.read()
    assert not list(site.glob(".glm5lib-patch-*"))  # no marker left to say it is still applied
    assert _ended(standin)  # the guard ended the stand-in with the process that launched it


def test_a_patch_left_by_a_killed_run_is_reverted_by_the_next_one(tmp_path, caplog):
    """SIGKILL leaves no chance to revert: the next run finds the marker, says so and reverts the
    leftover before it applies the diff itself."""
    site, target = _fake_site(tmp_path)
    child, standin = _start_patched_phase(tmp_path, site, tmp_path / "run" / "fix")
    child.kill()
    child.wait(timeout=30)
    assert _ended(standin)
    assert target.read_text() != MODEL_RUNNER and list(site.glob(".glm5lib-patch-*"))  # left applied
    with caplog.at_level("WARNING", logger="glm5lib.patching"):
        again = patching.SourcePatch(PATCH, root=site, record_dir=tmp_path / "again")
        again.apply()
    assert "reverted a leftover" in again.record.note and f"pid {child.pid}" in again.record.note
    assert any("reverted a leftover" in r.getMessage() for r in caplog.records)
    assert target.read_text() != MODEL_RUNNER  # applied once, not twice
    again.revert()
    assert target.read_text() == MODEL_RUNNER and not list(site.glob(".glm5lib-patch-*"))
