"""A host's environment snapshot as tidy tables for notebook 1 and the report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from glm5lib.report._files import fmt, missing

__all__ = ["environment_tables"]
_GIB = 1024**3


def _pair(now: Any, top: Any) -> str:
    """``'4 of 5'``: a PCIe link's current value against its maximum (``'5'`` when equal)."""
    if missing(now) and missing(top):
        return "n/a"
    if missing(top) or now == top:
        return fmt(now)
    return f"{fmt(now)} of {fmt(top)}"


def _yes_no(value: Any) -> str:
    return "n/a" if missing(value) else ("on" if value else "off")


def environment_tables(env: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """An environment snapshot (:func:`glm5lib.telemetry.environment`) as tidy tables in human units.

    ``host``: one row per fact (source, host, driver, CUDA, Python, CPUs, memory in GiB, GPU
    count, packages found); ``gpus``: one row per GPU (memory in GiB, power limit in W, clocks in
    MHz, PCIe generation and width as "current of maximum" where they differ); ``packages``: each
    package's version or "not installed".
    """
    info = env.get("host_info") or {}
    packages = dict(env.get("packages") or {})
    found = ", ".join(f"{k} {v}" for k, v in packages.items() if v)
    absent = [k for k, v in packages.items() if not v]
    gpus = list(env.get("gpus") or [])
    memory = info.get("memory_total_bytes")
    source = str(env.get("source") or "n/a") + (" (stand-in: simulated GPUs)" if env.get("standin") else "")
    host = [
        ("source", source),
        ("host", info.get("hostname") or env.get("host")),
        ("OS", info.get("os")),
        ("driver", env.get("driver_version")),
        ("CUDA", env.get("cuda_version")),
        ("Python", info.get("python")),
        ("CPUs", info.get("cpu_count")),
        ("host memory", None if missing(memory) else f"{memory / _GIB:,.1f} GiB"),
        ("GPUs", len(gpus)),
        ("packages", (found + (f" (not installed: {', '.join(absent)})" if absent else "")) if found
         else f"none installed ({', '.join(absent)})" if absent else "none listed"),
    ]
    if env.get("reason"):
        host.insert(1, ("why", env["reason"]))
    host_frame = pd.DataFrame([(k, "n/a" if missing(v) else str(v)) for k, v in host],
                              columns=["item", "value"]).set_index("item")
    rows = []
    for g in gpus:
        mem = g.get("memory_total_bytes")
        rows.append({
            "GPU": f"GPU{g.get('index')}",
            "name": g.get("name"),
            "compute capability": g.get("compute_capability"),
            "memory (GiB)": None if missing(mem) else round(mem / _GIB, 1),
            "power limit (W)": None if missing(g.get("power_limit_w")) else round(g["power_limit_w"]),
            "max SM clock (MHz)": g.get("sm_clock_max_mhz"),
            "PCIe gen": _pair(g.get("pcie_gen_current"), g.get("pcie_gen_max")),
            "PCIe width": _pair(g.get("pcie_width_current"), g.get("pcie_width_max")),
            "persistence": _yes_no(g.get("persistence_mode")),
            "MIG": _yes_no(g.get("mig_mode")),
        })
    gpu_frame = pd.DataFrame(rows, columns=[
        "GPU", "name", "compute capability", "memory (GiB)", "power limit (W)", "max SM clock (MHz)",
        "PCIe gen", "PCIe width", "persistence", "MIG",
    ]).set_index("GPU")
    package_frame = pd.DataFrame(
        [(k, v or "not installed") for k, v in packages.items()], columns=["package", "version"]
    ).set_index("package")
    return {"host": host_frame, "gpus": gpu_frame, "packages": package_frame}
