"""Stand-in profiles: the performance model of one deployment, read from a JSON file.

A profile describes a model served on a set of GPUs well enough to reproduce its throughput
from the outside: how long a decode step takes for a given batch and KV cache, how long a
prefill chunk takes, how the modelled flags change that, how much KV cache fits, and how much
power the GPUs draw for the work done. Every field is documented in ``data/profiles/README.md``.

Profiles ship in ``data/profiles/`` and are selected by name (the file stem) or by path.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5lib.errors import ConfigError
from glm5lib.paths import data_dir
from glm5lib.stepmodel import StepParams, step_time_ms

__all__ = [
    "DEFAULT_PROFILE",
    "Profile",
    "StepContext",
    "list_profiles",
    "load_profile",
    "profiles_dir",
]

DEFAULT_PROFILE = "glm5-nvfp4-8x-rtxpro6000"

_GIB = 1024**3

# Sections and keys every profile must have; values are checked for type and sign on load.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "model": ("model_path", "context_len", "vocab_size", "eos_token_id", "natural_output_mean_tokens"),
    "hardware": (
        "gpu_name",
        "num_gpus",
        "compute_capability",
        "power_limit_w",
        "memory_total_bytes",
        "max_sm_clock_mhz",
        "idle_sm_clock_mhz",
        "max_mem_clock_mhz",
        "pcie_gen",
        "pcie_width",
        "p2p",
        "driver_version",
        "cuda_version",
    ),
    "memory": (
        "weights_bytes_per_gpu",
        "kv_bytes_per_token_per_gpu",
        "activation_reserve_bytes",
        "cuda_graph_reserve_bytes",
        "default_mem_fraction_static",
    ),
    "defaults": (
        "chunked_prefill_size",
        "cuda_graph_max_bs",
        "max_running_requests",
        "page_size",
        "attention_backend",
    ),
    "decode": (
        "base_ms",
        "per_req_ms",
        "batch_exponent",
        "per_kv_token_us",
        "cuda_graph_saving_ms",
        "jitter",
    ),
    "prefill": ("base_ms", "per_token_us", "per_cached_token_us"),
    "flags": (
        "attention_backend",
        "allreduce_fusion_supported",
        "allreduce_fusion_factor",
        "moe_runner_backend",
        "fp4_gemm_backend",
        "moe_autotune_factor",
    ),
    "power": ("idle_w", "w_per_generated_tok_s", "w_per_prefill_tok_s", "pcie_bytes_per_token"),
    "startup": ("load_seconds", "cuda_graph_capture_seconds"),
}


def profiles_dir() -> Path:
    """The folder of shipped profiles (``data/profiles``)."""
    return data_dir() / "profiles"


def list_profiles() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in profiles_dir().glob("*.json"))


@dataclass(frozen=True)
class StepContext:
    """The modelled server flags that change step times, resolved once at start."""

    attention_backend: str
    cuda_graph: bool
    cuda_graph_max_bs: int
    allreduce_fusion: bool
    moe_runner_backend: str
    fp4_gemm_backend: str
    moe_autotune: bool
    #: the decode batch sizes captured as graphs, as SGLang captures them (a batch pads to the next);
    #: () reads as every batch up to cuda_graph_max_bs
    graph_sizes: tuple[int, ...] = ()


@dataclass
class Profile:
    """A parsed profile; ``data`` keeps the JSON as read (sections of plain dicts)."""

    name: str
    path: Path | None
    data: dict[str, Any] = field(repr=False)

    # -- access -------------------------------------------------------------------------------
    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.data[section]

    @property
    def description(self) -> str:
        return str(self.data.get("description", ""))

    @property
    def num_gpus(self) -> int:
        return int(self["hardware"]["num_gpus"])

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2) + "\n"

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json())
        return path

    # -- memory ---------------------------------------------------------------------------------
    def kv_capacity_tokens(self, mem_fraction_static: float | None, cuda_graph: bool) -> int:
        """KV cache tokens that fit in the static memory pool (SGLang's max_total_num_tokens)."""
        mem = self["memory"]
        frac = mem_fraction_static or float(mem["default_mem_fraction_static"])
        total = float(self["hardware"]["memory_total_bytes"])
        free = total * frac - float(mem["weights_bytes_per_gpu"]) - float(mem["activation_reserve_bytes"])
        if cuda_graph:
            free -= float(mem["cuda_graph_reserve_bytes"])
        return max(0, int(free // float(mem["kv_bytes_per_token_per_gpu"])))

    def min_mem_fraction(self, cuda_graph: bool) -> float:
        """The smallest --mem-fraction-static that leaves any room for the KV cache."""
        mem = self["memory"]
        need = float(mem["weights_bytes_per_gpu"]) + float(mem["activation_reserve_bytes"])
        if cuda_graph:
            need += float(mem["cuda_graph_reserve_bytes"])
        return need / float(self["hardware"]["memory_total_bytes"])

    # -- timing ---------------------------------------------------------------------------------
    def flag_factor(self, ctx: StepContext) -> float:
        """Multiplier on step time from the modelled flags (1.0 = the profile's reference)."""
        flags = self["flags"]
        factor = float(flags["attention_backend"].get(ctx.attention_backend, 1.0))
        factor *= float(flags["moe_runner_backend"].get(ctx.moe_runner_backend, 1.0))
        factor *= float(flags["fp4_gemm_backend"].get(ctx.fp4_gemm_backend, 1.0))
        if ctx.allreduce_fusion and flags["allreduce_fusion_supported"]:
            factor *= float(flags["allreduce_fusion_factor"])
        if ctx.moe_autotune:
            factor *= float(flags["moe_autotune_factor"])
        return factor

    def graph_used(self, ctx: StepContext, batch: int) -> bool:
        top = max(ctx.graph_sizes) if ctx.graph_sizes else ctx.cuda_graph_max_bs
        return ctx.cuda_graph and batch <= top

    @staticmethod
    def graph_rows(ctx: StepContext, batch: int) -> int:
        """The rows a graph step of ``batch`` computes: the next captured size."""
        for size in ctx.graph_sizes:
            if size >= batch:
                return size
        return batch

    def step_params(self) -> StepParams:
        """The decode section as the step formula's coefficients (:mod:`glm5lib.stepmodel`)."""
        d = self["decode"]
        return StepParams(
            fixed_ms=float(d["base_ms"]),
            per_seq_ms=float(d["per_req_ms"]),
            exponent=float(d["batch_exponent"]),
            per_kv_token_ms=float(d["per_kv_token_us"]) / 1000.0,
            graph_saving_ms=float(d["cuda_graph_saving_ms"]),
        )

    def decode_ms(self, batch: int, kv_tokens: int, ctx: StepContext) -> float:
        """Modelled wall time of one decode step, in milliseconds (no jitter): the step formula
        the diagnosis's performance model fits, with this profile's coefficients; a graph step
        computes the rows of the captured size it pads to, an eager one its own batch."""
        graph = self.graph_used(ctx, batch)
        params = self.step_params()
        if graph and ctx.graph_sizes:
            rows = self.graph_rows(ctx, batch)
            # the padded rows pay the per-request part; the KV tokens are the batch's own
            extra = params.per_seq_ms * (rows ** params.exponent - batch ** params.exponent)
            params = dataclasses.replace(params, fixed_ms=params.fixed_ms + extra)
        return step_time_ms(params, batch, kv_tokens=kv_tokens, graph=graph, factor=self.flag_factor(ctx), floor_ms=0.5)

    def prefill_ms(self, new_tokens: int, cached_tokens: int, ctx: StepContext) -> float:
        """Modelled wall time of one prefill (extend) batch, in milliseconds."""
        p = self["prefill"]
        t = (
            float(p["base_ms"])
            + float(p["per_token_us"]) * new_tokens / 1000.0
            + float(p["per_cached_token_us"]) * cached_tokens / 1000.0
        )
        return t * self.flag_factor(ctx)

    def power_w(self, gen_tok_s: float, prefill_tok_s: float) -> float:
        """Per-GPU board power for a given aggregate work rate, capped at the power limit."""
        pw = self["power"]
        w = (
            float(pw["idle_w"])
            + float(pw["w_per_generated_tok_s"]) * gen_tok_s
            + float(pw["w_per_prefill_tok_s"]) * prefill_tok_s
        )
        return min(w, float(self["hardware"]["power_limit_w"]))

    def with_changes(self, name: str | None = None, **sections: dict[str, Any]) -> Profile:
        """A copy with some keys of some sections replaced (``decode={"base_ms": 50}``)."""
        data = copy.deepcopy(self.data)
        for section, values in sections.items():
            data.setdefault(section, {}).update(values)
        if name:
            data["name"] = name
        prof = Profile(name=name or self.name, path=None, data=data)
        _validate(prof.data, source=f"profile {prof.name!r}")
        return prof


def _validate(data: dict[str, Any], source: str) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a profile must be a JSON object", field="profile")
    for section, keys in _REQUIRED.items():
        sec = data.get(section)
        if not isinstance(sec, dict):
            raise ConfigError(
                f"{source}: missing section {section!r}; a profile needs sections "
                f"{', '.join(_REQUIRED)} (see data/profiles/README.md)",
                field=section,
                valid=list(_REQUIRED),
            )
        missing = [k for k in keys if k not in sec]
        if missing:
            raise ConfigError(
                f"{source}: section {section!r} lacks {', '.join(missing)} (see data/profiles/README.md)",
                field=f"{section}.{missing[0]}",
                valid=list(keys),
            )
    for section in ("decode", "prefill", "power"):
        for key, value in data[section].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ConfigError(
                    f"{source}: {section}.{key} = {value} must not be negative",
                    field=f"{section}.{key}",
                )
    for key in ("attention_backend", "moe_runner_backend", "fp4_gemm_backend"):
        if not isinstance(data["flags"][key], dict):
            raise ConfigError(
                f"{source}: flags.{key} must map backend names to step-time factors",
                field=f"flags.{key}",
            )


def load_profile(name_or_path: str | Path | None = None) -> Profile:
    """Load a profile by shipped name (``glm5-nvfp4-8x-rtxpro6000``) or by JSON file path."""
    if name_or_path is None or name_or_path == "":
        name_or_path = DEFAULT_PROFILE
    text = str(name_or_path)
    candidate = Path(text).expanduser()
    if candidate.suffix == ".json" or candidate.exists() or "/" in text:
        path = candidate
    else:
        path = profiles_dir() / f"{text}.json"
    if not path.is_file():
        raise ConfigError(
            f"stand-in profile {text!r} not found (looked for {path}); shipped profiles: "
            f"{', '.join(list_profiles()) or 'none'}; or give a path to a profile JSON file",
            field="sim_profile",
            valid=list_profiles(),
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"stand-in profile {path}: not valid JSON ({exc})", field="sim_profile") from exc
    _validate(data, source=str(path))
    name = str(data.get("name") or path.stem)
    return Profile(name=name, path=path.resolve(), data=data)
