"""Simulated GPUs: telemetry (``/sim/gpus``) and the environment snapshot (``/sim/environment``).

The numbers follow the scheduler's work: power is the profile's idle power plus a term per
generated (and prefilled) token per second, capped at the power limit; utilisation is the share
of recent time spent in steps; PCIe traffic is the profile's all-reduce bytes per token; energy
is integrated from start. Each GPU gets a small fixed offset so that eight lines are not one.
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from glm5lib.sim.profile import Profile
from glm5lib.sim.scheduler import SimScheduler

__all__ = ["SimGpus"]

# NVML clocks-event (throttle) reason bits.
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4


class SimGpus:
    """Per-GPU readings derived from the scheduler's state."""

    def __init__(self, profile: Profile, scheduler: SimScheduler, mem_fraction_static: float):
        self.profile = profile
        self.sched = scheduler
        hw = profile["hardware"]
        self.n = int(hw["num_gpus"])
        self.name = str(hw["gpu_name"])
        self.limit = float(hw["power_limit_w"])
        self.mem_total = int(hw["memory_total_bytes"])
        self.mem_used = int(self.mem_total * mem_fraction_static) + 600 * 1024**2
        seed = profile.name
        self.uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{seed}-{i}')}" for i in range(self.n)]
        # Fixed per-GPU spread of +-3 % in power, so the lines are distinguishable.
        self.spread = [1.0 + 0.03 * ((i * 37 % 7) - 3) / 3 for i in range(self.n)]
        self._t0 = time.time()
        self._util_t = time.monotonic()
        self._util_busy = scheduler.busy_time
        self._util = 0.0

    def _utilisation(self) -> float:
        now = time.monotonic()
        dt = now - self._util_t
        if dt >= 0.05:
            busy = self.sched.busy_time - self._util_busy
            self._util = max(0.0, min(100.0, 100.0 * busy / dt))
            self._util_t = now
            self._util_busy = self.sched.busy_time
        elif now <= self.sched.step_end_time:
            self._util = max(self._util, 99.0)
        return self._util

    def snapshot(self) -> dict[str, Any]:
        hw = self.profile["hardware"]
        pw = self.profile["power"]
        now = time.time()
        power = self.sched.power_now()
        busy = power > float(pw["idle_w"]) + 0.01
        util = self._utilisation()
        idle_w = float(pw["idle_w"])
        dyn_frac = max(0.0, (power - idle_w) / max(1.0, self.limit - idle_w))
        rate = self.sched.step_gen_rate if busy else 0.0
        pcie = rate * float(pw["pcie_bytes_per_token"])
        base_energy = idle_w * (now - self._t0)
        gpus = []
        for i in range(self.n):
            k = self.spread[i]
            p = min(self.limit, power * k)
            throttle = GPU_IDLE if not busy else (SW_POWER_CAP if p >= self.limit - 1 else 0)
            gpus.append(
                {
                    "index": i,
                    "name": self.name,
                    "uuid": self.uuids[i],
                    "power_w": round(p, 2),
                    "power_limit_w": self.limit,
                    "energy_j": round((base_energy + self.sched.dyn_energy_j) * k, 3),
                    "gpu_util": round(util),
                    "mem_util": round(min(100.0, 100.0 * dyn_frac * 1.6 * (util / 100.0))),
                    "sm_clock_mhz": int(hw["max_sm_clock_mhz"] if busy else hw["idle_sm_clock_mhz"]),
                    "max_sm_clock_mhz": int(hw["max_sm_clock_mhz"]),
                    "mem_used_bytes": self.mem_used,
                    "mem_total_bytes": self.mem_total,
                    "pcie_tx_bytes_s": round(pcie * k),
                    "pcie_rx_bytes_s": round(pcie * k),
                    "temperature_c": round(28.0 + 0.085 * p, 1),
                    "throttle_reasons": throttle,
                }
            )
        return {"standin": True, "profile": self.profile.name, "time": now, "gpus": gpus}

    def environment(self) -> dict[str, Any]:
        """The same shape as ``glm5lib.telemetry.environment()``, with ``source`` "sim"."""
        hw = self.profile["hardware"]
        n = self.n
        p2p_ok = str(hw.get("p2p", "OK"))
        topo_link = str(hw.get("topology_link", "NODE"))
        gpus = []
        for i in range(n):
            gpus.append(
                {
                    "index": i,
                    "name": self.name,
                    "uuid": self.uuids[i],
                    "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                    "compute_capability": str(hw["compute_capability"]),
                    "power_limit_w": self.limit,
                    "pcie_gen_current": int(hw["pcie_gen"]),
                    "pcie_gen_max": int(hw["pcie_gen"]),
                    "pcie_width_current": int(hw["pcie_width"]),
                    "pcie_width_max": int(hw["pcie_width"]),
                    "persistence_mode": bool(hw.get("persistence_mode", True)),
                    "mig_mode": False,
                    "sm_clock_max_mhz": int(hw["max_sm_clock_mhz"]),
                    "mem_clock_max_mhz": int(hw["max_mem_clock_mhz"]),
                    "memory_total_bytes": self.mem_total,
                }
            )
        p2p = [["OK" if a == b else p2p_ok for b in range(n)] for a in range(n)]
        topology = [["X" if a == b else topo_link for b in range(n)] for a in range(n)]
        warnings = [
            "stand-in: these GPUs are simulated by glm5lib.sim "
            f"(profile '{self.profile.name}'); no real GPU was queried"
        ]
        if p2p_ok != "OK":
            warnings.append(f"GPU peer-to-peer access is {p2p_ok} between GPUs (from the profile)")
        return {
            "source": "sim",
            "standin": True,
            "reason": None,
            "host": socket.gethostname(),
            "driver_version": str(hw["driver_version"]),
            "cuda_version": str(hw["cuda_version"]),
            "gpus": gpus,
            "p2p": p2p,
            "topology": topology,
            "packages": {"sglang": None, "flashinfer": None, "torch": None, "transformers": None, "vllm": None},
            "warnings": warnings,
        }
