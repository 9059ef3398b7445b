"""glm5lib: diagnose why an SGLang server delivers less throughput than its GPUs should.

The library behind the workbook's notebooks: launching or attaching to a server
(:mod:`glm5lib.server`), generating load (:mod:`glm5lib.loadgen`), sampling GPU telemetry
(:mod:`glm5lib.telemetry`), parsing server logs (:mod:`glm5lib.logs`), diffing configurations
and diagnosing (:mod:`glm5lib.diagnose`), and a stand-in server for machines without GPUs
(:mod:`glm5lib.sim`).
"""

from __future__ import annotations

from glm5lib.lazy import module_getattr

# The one list of the package's top-level names: name -> the module that defines it, imported on
# first use so that ``import glm5lib`` stays cheap (the stand-in server and the CLI start without
# loading pandas or aiohttp). ``__all__`` is derived from it. (``diagnose`` is left out: the name
# is its module, so use ``glm5lib.diagnose.diagnose``.)
_LAZY: dict[str, str] = {
    "__version__": "glm5lib._version",
    "ConfigError": "glm5lib.errors",
    "DiagnosisError": "glm5lib.errors",
    "Glm5Error": "glm5lib.errors",
    "LoadGenError": "glm5lib.errors",
    "NotebookFailedError": "glm5lib.errors",
    "PatchError": "glm5lib.errors",
    "ServerCrashedError": "glm5lib.errors",
    "ServerError": "glm5lib.errors",
    "UsageError": "glm5lib.errors",
    "ServerLaunchError": "glm5lib.errors",
    "SweepAbortedError": "glm5lib.errors",
    "TelemetryError": "glm5lib.errors",
    "TelemetryUnavailable": "glm5lib.errors",
    "WorkbookError": "glm5lib.errors",
    "LogFollower": "glm5lib.logs",
    "ServerLog": "glm5lib.logs",
    "classify_fatal": "glm5lib.logs",
    "follow_log": "glm5lib.logs",
    "iter_log": "glm5lib.logs",
    "parse_bench_result": "glm5lib.logs",
    "parse_log": "glm5lib.logs",
    "parse_server_args": "glm5lib.logs",
    "to_epoch": "glm5lib.logs",
    "SGLANG_FLAGS": "glm5lib.engines.sglang.config",
    "ServerConfig": "glm5lib.engines.sglang.config",
    "field_for": "glm5lib.engines.sglang.config",
    "flag_for": "glm5lib.engines.sglang.config",
    "shipped_configs": "glm5lib.engines.sglang.config",
    "AttachedServer": "glm5lib.server",
    "CommandServer": "glm5lib.server",
    "Server": "glm5lib.engines.sglang.launcher",
    "attach": "glm5lib.server",
    "launch": "glm5lib.engines.sglang.launcher",
    "run_standin": "glm5lib.engines.sim",
    "launch_command": "glm5lib.server",
    "apply_flag_changes": "glm5lib.server",
    "ENGINES": "glm5lib.engines",
    "Engine": "glm5lib.engines",
    "get_engine": "glm5lib.engines",
    "VllmConfig": "glm5lib.engines",
    "launch_vllm": "glm5lib.engines",
    "stop_all": "glm5lib.server",
    "GpuSampler": "glm5lib.telemetry",
    "MetricsScraper": "glm5lib.telemetry",
    "environment": "glm5lib.telemetry",
    "format_environment": "glm5lib.telemetry",
    "level_windows": "glm5lib.levels",
    "save_environment": "glm5lib.telemetry",
    "load_requests": "glm5lib.loadgen",
    "load_sweep": "glm5lib.loadgen",
    "run_sweep": "glm5lib.loadgen",
    "SweepSettings": "glm5lib.loadgen",
    "PhaseResult": "glm5lib.phase",
    "measure_phase": "glm5lib.phase",
    "run_sweep_async": "glm5lib.loadgen",
    "PerfModel": "glm5lib.diagnose",
    "predict": "glm5lib.diagnose",
    "diff_configs": "glm5lib.diagnose",
    "list_references": "glm5lib.diagnose",
    "recommend_running_cap": "glm5lib.diagnose",
    "load_evidence": "glm5lib.diagnose",
    "evaluate": "glm5lib.diagnose",
    "fit_profile": "glm5lib.sim",
    "list_profiles": "glm5lib.sim",
    "load_profile": "glm5lib.sim",
    "write_report": "glm5lib.report",
    "run_workbook": "glm5lib.workbook",
    "CpuLayout": "glm5lib.cpus",
    "new_run_dir": "glm5lib.rundir",
    "phase_dir": "glm5lib.rundir",
}

__all__ = sorted(_LAZY)


__getattr__ = module_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
