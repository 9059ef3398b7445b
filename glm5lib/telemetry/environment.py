"""The host snapshot for the report: GPUs, driver, PCIe links, P2P matrix, topology, packages.

:func:`environment` reads NVML (or the stand-in's ``/sim/environment``) and warns about the
signs the investigation met: P2P unavailable between GPU pairs, narrow or slow PCIe links, MIG,
lowered power limits, mixed GPUs.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from glm5lib import http
from glm5lib.errors import ConfigError
from glm5lib.rundir import ENVIRONMENT
from glm5lib.telemetry._common import _CLOCK_MEM, _CLOCK_SM, SOURCES, _load_nvml

__all__ = [
    "P2P_LEGEND",
    "TOPOLOGY_LEGEND",
    "environment",
    "format_environment",
    "package_versions",
    "save_environment",
]

log = logging.getLogger(__name__)

_P2P_CAPS_READ = 0
_P2P_CAPS_WRITE = 1
_NVLINK_MAX_LINKS = 18  # H100/H200 carry 18; older parts fewer
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DRK", 5: "NS", 6: "U"}
P2P_LEGEND = {
    "OK": "peer access supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology (IOH) not supported",
    "DRK": "disabled by driver registry key",
    "NS": "not supported",
    "U": "unknown",
}
_TOPOLOGY = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
TOPOLOGY_LEGEND = {
    "X": "self",
    "NV#": "NVLink, # links",
    "PIX": "one PCIe bridge",
    "PXB": "several PCIe bridges",
    "PHB": "a PCIe host bridge",
    "NODE": "PCIe host bridges within one NUMA node",
    "SYS": "across NUMA nodes (SMP interconnect)",
}
_PACKAGES = {
    "sglang": ("sglang",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm",),
    "sgl-kernel": ("sgl-kernel",),
    "triton": ("triton",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
    "nvidia-ml-py": ("nvidia-ml-py",),
    "glm5lib": ("glm5lib",),
}



def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception as exc:  # one unreadable property must not cost the whole snapshot
        log.debug("NVML read failed: %s", exc)
        return default


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for key, dists in _PACKAGES.items():
        versions[key] = None
        for dist in dists:
            try:
                versions[key] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def _host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(Exception):  # a container may hide the host's memory
        info["memory_total_bytes"] = int(psutil.virtual_memory().total)
    return info


def _nvlink_links(nvml: Any, handle: Any) -> list[tuple[Any, str]]:
    """(remote device type, remote PCI bus id) of each active NVLink of one GPU; [] without NVLink."""
    links: list[tuple[Any, str]] = []
    get_state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if get_state is None:
        return links
    for link in range(_NVLINK_MAX_LINKS):
        try:
            if get_state(handle, link) != 1:
                continue
        except nvml.NVMLError:
            break  # NOT_SUPPORTED, or past the GPU's last link
        remote_type = _try(lambda link=link: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
        bus = _try(lambda link=link: _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
        links.append((remote_type, _short_bus(bus)))
    return links


def _nvlink_label(links_i: list[tuple[Any, str]], links_j: list[tuple[Any, str]], bus_j: str,
                  gpu_buses: set[str]) -> str | None:
    """nvidia-smi's NV# for a GPU pair: direct links (bridges), else links both have into a
    fabric (NVSwitch, or a remote that is none of the GPUs here); None when not linked."""
    direct = sum(1 for kind, bus in links_i if kind != _NVLINK_SWITCH and bus and bus == bus_j)
    if direct:
        return f"NV{direct}"

    def fabric(links: list[tuple[Any, str]]) -> int:
        return sum(1 for kind, bus in links if kind == _NVLINK_SWITCH or not bus or bus not in gpu_buses)

    fi, fj = fabric(links_i), fabric(links_j)
    return f"NV{min(fi, fj)}" if fi and fj else None


def _short_bus(bus: str | None) -> str:
    # NVML pads the domain to 8 hex digits in busId, 4 in busIdLegacy: compare on the tail
    return (bus or "").lower()[-12:]


def _nvml_environment(nvml: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"source": "nvml", "standin": False, "reason": None}
    env["driver_version"] = _text(_try(nvml.nvmlSystemGetDriverVersion))
    cuda = _try(nvml.nvmlSystemGetCudaDriverVersion_v2) or _try(nvml.nvmlSystemGetCudaDriverVersion)
    env["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) and cuda else None
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus = []
    for i, h in enumerate(handles):
        cc = _try(lambda h=h: nvml.nvmlDeviceGetCudaComputeCapability(h))
        mig = _try(lambda h=h: nvml.nvmlDeviceGetMigMode(h))
        limit = _try(lambda h=h: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        default_limit = _try(lambda h=h: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))
        persistence = _try(lambda h=h: nvml.nvmlDeviceGetPersistenceMode(h))
        mem = _try(lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h))
        gpus.append({
            "index": i,
            "name": _text(_try(lambda h=h: nvml.nvmlDeviceGetName(h))),
            "uuid": _text(_try(lambda h=h: nvml.nvmlDeviceGetUUID(h))),
            "pci_bus_id": _text(_try(lambda h=h: nvml.nvmlDeviceGetPciInfo(h).busId)),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "power_limit_w": limit / 1e3 if limit is not None else None,
            "power_default_limit_w": default_limit / 1e3 if default_limit is not None else None,
            "pcie_gen_current": _try(lambda h=h: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "pcie_gen_max": _try(lambda h=h: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "pcie_width_current": _try(lambda h=h: nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "pcie_width_max": _try(lambda h=h: nvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "mig_mode": bool(mig[0]) if mig else None,
            "sm_clock_max_mhz": _try(lambda h=h: nvml.nvmlDeviceGetMaxClockInfo(h, _CLOCK_SM)),
            "mem_clock_max_mhz": _try(lambda h=h: nvml.nvmlDeviceGetMaxClockInfo(h, _CLOCK_MEM)),
            "memory_total_bytes": int(mem.total) if mem is not None else None,
        })
    env["gpus"] = gpus
    nvlinks = [_nvlink_links(nvml, h) for h in handles]
    gpu_buses = {_short_bus(g["pci_bus_id"]) for g in gpus}
    p2p, topo = [], []
    for i, hi in enumerate(handles):
        p2p_row, topo_row = [], []
        for j, hj in enumerate(handles):
            if i == j:
                p2p_row.append("OK")
                topo_row.append("X")
                continue
            statuses = [_try(lambda cap=cap, hi=hi, hj=hj: nvml.nvmlDeviceGetP2PStatus(hi, hj, cap), 6)
                        for cap in (_P2P_CAPS_READ, _P2P_CAPS_WRITE)]
            bad = [s for s in statuses if s != 0]
            p2p_row.append(_P2P_STATUS.get(bad[0], "U") if bad else "OK")
            label = _nvlink_label(nvlinks[i], nvlinks[j], _short_bus(gpus[j]["pci_bus_id"]), gpu_buses)
            if label:
                topo_row.append(label)
            else:
                level = _try(lambda hi=hi, hj=hj: nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj))
                topo_row.append(_TOPOLOGY.get(level, "?") if level is not None else "?")
        p2p.append(p2p_row)
        topo.append(topo_row)
    env["p2p"] = p2p
    env["topology"] = topo
    return env


def _environment_warnings(env: dict[str, Any]) -> list[str]:
    warnings: list[str] = []
    gpus = env.get("gpus") or []
    p2p = env.get("p2p") or []
    bad = [(i, j, s) for i, row in enumerate(p2p) for j, s in enumerate(row) if i < j and s != "OK"]
    if bad:
        pairs = ", ".join(f"{i}-{j} ({s}: {P2P_LEGEND.get(s, s)})" for i, j, s in bad[:12])
        more = f" and {len(bad) - 12} more" if len(bad) > 12 else ""
        warnings.append(
            f"P2P is unavailable between {len(bad)} GPU pair(s): {pairs}{more}. Tensor-parallel "
            "all-reduce then goes through host memory; a VM or IOMMU setting often causes this "
            "(in the investigation a Proxmox VM broke P2P and an LXC container restored it)."
        )
    for g in gpus:
        gen, gen_max = g.get("pcie_gen_current"), g.get("pcie_gen_max")
        width, width_max = g.get("pcie_width_current"), g.get("pcie_width_max")
        if width and width_max and width < width_max:
            warnings.append(
                f"GPU {g['index']}: PCIe link width x{width} below its maximum x{width_max} "
                "(a slot, riser or bifurcation setting limits it; this does not change with load)."
            )
        if gen and gen_max and gen < gen_max:
            warnings.append(
                f"GPU {g['index']}: PCIe link at Gen{gen} of Gen{gen_max}. Idle GPUs lower their link "
                "speed to save power; if it stays below Gen{0} under load, check the slot and BIOS.".format(gen_max)
            )
        if g.get("mig_mode"):
            warnings.append(f"GPU {g['index']}: MIG is enabled; the server sees a slice, not the whole GPU.")
        limit, default = g.get("power_limit_w"), g.get("power_default_limit_w")
        if limit and default and limit < 0.95 * default:
            warnings.append(f"GPU {g['index']}: power limit {limit:.0f} W is below its default {default:.0f} W.")
    names = {g.get("name") for g in gpus}
    if len(names) > 1:
        warnings.append(f"the GPUs are not all alike ({sorted(str(n) for n in names)}); tensor parallelism runs at the slowest one's pace.")
    if gpus and any(g.get("persistence_mode") is False for g in gpus):
        warnings.append("persistence mode is off on some GPUs: the first CUDA call after idle pays the driver start.")
    return warnings


def environment(source: str = "auto", base_url: str | None = None, *, api_key: str | None = None,
                _nvml: Any = None) -> dict[str, Any]:
    """A snapshot of the host for the report; never raises for a missing GPU.

    ``source="auto"`` reads the stand-in's ``/sim/environment`` when ``base_url`` is a glm5lib
    stand-in, else NVML; with neither, ``source`` is ``"unavailable"`` and ``reason`` says why.
    Keys: source, standin, reason, host, host_info, time, driver_version, cuda_version, gpus,
    p2p, topology, packages, warnings (see the module's contract).
    """
    if source not in SOURCES:
        raise ConfigError(f"source={source!r} is not valid", field="source", valid=SOURCES)
    if source == "sim" and not base_url:
        raise ConfigError("source='sim' needs base_url, the stand-in server's URL", field="base_url")
    base: dict[str, Any] = {
        "source": "unavailable", "standin": False, "reason": None,
        "host": socket.gethostname(), "host_info": _host_info(), "time": time.time(),
        "driver_version": None, "cuda_version": None, "gpus": [], "p2p": [], "topology": [],
        "packages": package_versions(), "warnings": [],
    }
    reasons = []
    if source in ("auto", "sim") and base_url:
        response = http.get(base_url, "/sim/environment", api_key=api_key, timeout=5.0)
        url = response.url
        sim = None
        if response.ok:
            try:
                sim = response.json()
            except ValueError as exc:
                reasons.append(f"{url} could not be read ({exc})")
            if sim is not None and not isinstance(sim, dict):
                reasons.append(f"{url} returned JSON that is not an object")
        elif response.reached:
            reasons.append(f"{url} answered HTTP {response.status}"
                           + (" (not glm5lib's stand-in)" if response.status == 404 else ""))
        else:
            reasons.append(f"{url} could not be read ({response.error})")
        if isinstance(sim, dict):
            env = {**base, **sim, "source": "sim", "standin": True}
            # the library's own rules apply to simulated GPUs as to real ones; the stand-in's
            # notes on other topics are kept after them
            ours = _environment_warnings(env)
            covered = ("p2p", "peer", "pcie")
            theirs = [w for w in sim.get("warnings") or []
                      if not (ours and any(c in str(w).lower() for c in covered))]
            env["warnings"] = ours + theirs
            return env
    if source in ("auto", "nvml"):
        nvml, why = _load_nvml(_nvml)
        if nvml is not None:
            try:
                env = {**base, **_nvml_environment(nvml)}
            except Exception as exc:  # a boundary: whatever reading the GPUs raises, the snapshot says why
                reasons.append(f"NVML failed while reading the GPUs: {exc}")
            else:
                env["warnings"] = _environment_warnings(env)
                return env
            finally:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlShutdown()
        else:
            reasons.append(why)
    base["reason"] = "; ".join(r for r in reasons if r) or "no source"
    base["warnings"] = [f"no GPU information: {base['reason']}"]
    return base


def save_environment(path: str | Path, env: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``environment()`` (or ``env``) as JSON to ``path`` (a file, or a run folder for
    ``environment.json``); returns the snapshot."""
    env = environment(**kwargs) if env is None else env
    path = Path(path)
    if path.is_dir():
        path = path / ENVIRONMENT
    path.write_text(json.dumps(env, indent=2, default=str) + "\n")
    return env


def format_environment(env: dict[str, Any]) -> str:
    """A plain-text rendering: versions, one line per GPU, the P2P and topology matrices, warnings."""
    lines = [f"source: {env.get('source')}" + (" (stand-in: simulated GPUs)" if env.get("standin") else "")]
    if env.get("reason"):
        lines.append(f"reason: {env['reason']}")
    lines.append(f"host: {env.get('host')}   driver: {env.get('driver_version')}   CUDA: {env.get('cuda_version')}")
    pk = env.get("packages") or {}
    installed = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
    lines.append(f"packages: {installed or 'none found'}")
    gpus = env.get("gpus") or []
    if gpus:
        table = pd.DataFrame(gpus)
        cols = [c for c in ("index", "name", "compute_capability", "power_limit_w", "pcie_gen_current",
                            "pcie_gen_max", "pcie_width_current", "pcie_width_max", "persistence_mode",
                            "mig_mode", "sm_clock_max_mhz", "memory_total_bytes") if c in table.columns]
        lines += ["", table[cols].to_string(index=False)]
    for key, title in (("p2p", "P2P (read/write)"), ("topology", "topology")):
        matrix = env.get(key) or []
        if matrix:
            labels = [f"GPU{i}" for i in range(len(matrix))]
            lines += ["", f"{title}:", pd.DataFrame(matrix, index=labels, columns=labels).to_string()]
    warnings = env.get("warnings") or []
    lines += ["", f"warnings ({len(warnings)}):"] + [f"  - {w}" for w in warnings]
    return "\n".join(lines)
