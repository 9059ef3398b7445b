"""One exception tree for glm5lib.

Every error the library raises on purpose derives from :class:`Glm5Error`, so a notebook can
catch the whole family in one place. Errors from lower layers (subprocess, aiohttp, pynvml) are
translated at the boundary into one of these, carrying what the user needs: what was tried,
the relevant log lines and what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "DiagnosisError",
    "Glm5Error",
    "LoadGenError",
    "NotebookFailedError",
    "PatchError",
    "ServerCrashedError",
    "ServerError",
    "ServerLaunchError",
    "SweepAbortedError",
    "TelemetryError",
    "TelemetryUnavailable",
    "UsageError",
    "WorkbookError",
]


class _QuotesLogLines:
    """Mixed into an error that carries the server's ``log_lines``: its text ends with them, each
    indented behind a bar."""

    log_lines: list[str]

    def __str__(self) -> str:
        text = super().__str__()
        if self.log_lines:
            text += "\n" + "\n".join(f"    | {line}" for line in self.log_lines)
        return text


class Glm5Error(Exception):
    """Base class of every error glm5lib raises on purpose."""


class ConfigError(Glm5Error, ValueError):
    """A server configuration, parameter or input file is invalid; raised before anything starts."""

    def __init__(self, message: str, *, field: str | None = None, valid: Sequence[str] | None = None):
        super().__init__(message)
        self.field = field
        self.valid = list(valid) if valid is not None else None


class UsageError(ConfigError):
    """A command line names something outside its choices (``glm5`` exits 2, as argparse does)."""


class ServerError(_QuotesLogLines, Glm5Error):
    """Something went wrong with an inference server process or endpoint."""

    def __init__(
        self,
        message: str,
        *,
        cause: str = "other",
        exit_code: int | None = None,
        log_lines: Sequence[str] = (),
        log_path: str | None = None,
    ):
        super().__init__(message)
        self.cause = cause
        self.exit_code = exit_code
        self.log_lines = list(log_lines)
        self.log_path = log_path


class ServerLaunchError(ServerError):
    """A server failed to become ready (exited, logged a fatal error, or timed out)."""


class ServerCrashedError(ServerError):
    """A server that was ready stopped answering or its process died."""


class LoadGenError(Glm5Error):
    """Load generation could not run as asked."""


class SweepAbortedError(_QuotesLogLines, LoadGenError):
    """A sweep stopped early because the server died or became unhealthy; results so far are kept."""

    def __init__(
        self,
        message: str,
        *,
        level: int | None = None,
        log_lines: Sequence[str] = (),
        completed_levels: Sequence[int] = (),
    ):
        super().__init__(message)
        self.level = level
        self.log_lines = list(log_lines)
        self.completed_levels = list(completed_levels)


class TelemetryError(Glm5Error):
    """GPU telemetry or server metrics could not be read."""


class TelemetryUnavailable(TelemetryError):
    """No telemetry source is available here (no GPU, no driver, no stand-in); carries the reason."""


class DiagnosisError(Glm5Error):
    """A diagnosis could not be made from the given run folder or inputs."""


class PatchError(Glm5Error):
    """A source patch to an installed package does not apply cleanly or cannot be reverted."""


class WorkbookError(Glm5Error):
    """The workbook runner could not run the notebooks as asked."""


class NotebookFailedError(WorkbookError):
    """A notebook of the workbook raised; names the notebook and the cell."""

    def __init__(self, message: str, *, notebook: str, cell: int | None = None, run_dir: str | None = None):
        super().__init__(message)
        self.notebook = notebook
        self.cell = cell
        self.run_dir = run_dir
