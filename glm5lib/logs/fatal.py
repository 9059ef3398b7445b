"""Fatal signatures: whether a line (or a traceback) says the server died, and of what.

:data:`ERROR_KINDS` lists the kinds from the most specific cause to the least, the order
:meth:`glm5lib.logs.ServerLog.crash_cause` picks in.
"""

from __future__ import annotations

from glm5lib.logs.text import strip_ansi

__all__ = ["ERROR_KINDS", "classify_fatal"]

ERROR_KINDS = ("oom", "nan", "nccl", "engine_dead", "scheduler_exception", "health_check", "sigquit", "other")

# Fatal signatures, in the order a block is classified: the most specific cause wins.
_FATAL_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "oom",
        (
            "CUDA out of memory",
            "OutOfMemoryError",
            "CUDA error: out of memory",
            "Not enough memory. Please try to increase",  # SGLang: "... --mem-fraction-static"
            "RuntimeError: Not enough memory",
            "HIP out of memory",
        ),
    ),
    ("nan", ("NaN in the logits", "nan in the logits")),
    (
        "nccl",
        (
            "NCCL error",
            "ncclUnhandledCudaError",
            "ncclSystemError",
            "ncclInternalError",
            "ncclInvalidUsage",
            "ncclRemoteError",
            "DistBackendError",
            "Watchdog caught collective operation timeout",
        ),
    ),
    ("health_check", ("Health check failed",)),
    (
        "scheduler_exception",
        (
            "Scheduler hit an exception",
            "hit an exception:",
            "Exception in ControllerSingle",
            "Exception in ControllerMulti",
            "Exception in ModelTpServer",
            "Exception in run_tp_server",
        ),
    ),
    ("sigquit", ("Received sigquit from a child process", "kill_process_tree called")),
)
_FATAL_PRECHECK = ("memory", "NaN", "nan in", "NCCL", "nccl", "DistBackend", "Watchdog", "Health", "xception", "sigquit", "kill_process_tree")


def _may_be_fatal(line: str) -> bool:
    """Whether ``line`` holds any of _FATAL_PRECHECK: the same tests written out, two to four
    times faster than a generator over the tuple (this runs on most lines that are not
    scheduler lines; tests check the two agree)."""
    return (
        "memory" in line or "NaN" in line or "nan in" in line or "NCCL" in line or "nccl" in line
        or "DistBackend" in line or "Watchdog" in line or "Health" in line or "xception" in line
        or "sigquit" in line or "kill_process_tree" in line
    )


def classify_fatal(line: str) -> str | None:
    """The fatal kind a single log line signals (``oom``, ``nan``, ``nccl``, ``health_check``,
    ``scheduler_exception``, ``sigquit``), or None for an ordinary line.

    Cheap enough to call on every line a starting server prints. A bare ``Traceback`` is not
    fatal by itself (libraries print warnings with tracebacks); its cause line is.
    """
    if not isinstance(line, str) or not line:
        return None
    if not _may_be_fatal(line):
        return None
    line = strip_ansi(line)
    for kind, needles in _FATAL_SIGNATURES:
        for needle in needles:
            if needle in line:
                return kind
    return None


def _classify_block(text: str) -> str:
    kind = classify_fatal(text)
    return kind or "other"

