"""Command-line arguments of the stand-in: SGLang's launch flags plus its own ``--sim-*`` flags.

The ``--sim-*`` flags are taken out first; the rest is parsed by
:meth:`glm5lib.engines.sglang.config.ServerConfig.from_argv`, so every flag ``sglang.launch_server`` accepts
is accepted here and a misspelt one is rejected with the closest valid name. Flags that change
nothing in the model are accepted and listed in the log as not modelled.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from glm5lib.engines.sglang.config import (
    BUNDLED_RELEASES,
    DEFAULT_RELEASE,
    ServerConfig,
    catalogue,
    cuda_graphs_off,
    decode_graph_sizes,
    graphs_off_for,
    merge_config_file,
)
from glm5lib.errors import ConfigError
from glm5lib.masking import mask_value
from glm5lib.sim.faults import Faults, parse_faults
from glm5lib.sim.lines import (
    NOMINAL_ACCEPT_LENGTH,
    SPECULATIVE_DEFAULTS,
    LineShape,
    line_shape,
    server_args_line,
)
from glm5lib.sim.profile import Profile, StepContext, load_profile

__all__ = ["MODELLED_FIELDS", "SIM_FLAGS", "SimArgs", "parse_sim_argv", "sim_usage"]

# ServerArgs fields the stand-in's model or HTTP layer uses.
MODELLED_FIELDS = frozenset(
    {
        "model_path",
        "tokenizer_path",
        "served_model_name",
        "tp_size",
        "host",
        "port",
        "api_key",
        "max_running_requests",
        "max_total_tokens",
        "mem_fraction_static",
        "chunked_prefill_size",
        "max_prefill_tokens",
        "page_size",
        "attention_backend",
        "disable_cuda_graph",
        "cuda_graph_max_bs",
        "cuda_graph_max_bs_decode",
        "cuda_graph_backend_decode",
        "cuda_graph_backend_prefill",
        "disable_decode_cuda_graph",
        "disable_prefill_cuda_graph",
        "disable_radix_cache",
        "schedule_policy",
        "schedule_conservativeness",
        "moe_runner_backend",
        "fp4_gemm_runner_backend",
        "enable_flashinfer_allreduce_fusion",
        "enable_metrics",
        "decode_log_interval",
        "stream_interval",
        "stream_output",
        "incremental_streaming_output",
        "log_level",
        "context_length",
        "random_seed",
    }
)

# The stand-in's own flags: name -> (takes a value, repeatable, help).
SIM_FLAGS: dict[str, tuple[bool, bool, str]] = {
    "--sim-profile": (True, False, "profile name (data/profiles/<name>.json) or path to a profile JSON file"),
    "--sim-fault": (True, True, "inject a fault: nan-after=N, oom-at-start, nccl-at-start, slow-start=SECONDS, hang-after=N"),
    "--sim-zero-delay": (False, False, "steps take no modelled time (for measuring clients; figures are then meaningless)"),
    "--sim-moe-autotune": (False, False, "model the FlashInfer CUTLASS MoE autotune as enabled (profile's flags.moe_autotune_factor)"),
    "--sim-seed": (True, False, "seed of the step-time jitter and output lengths (default: --random-seed or 0)"),
    "--sim-no-access-log": (False, False, "do not print uvicorn-style access lines"),
    "--sim-release": (True, False, f"SGLang release to emulate: its flags and ServerArgs ({', '.join(BUNDLED_RELEASES)}; default {DEFAULT_RELEASE}, the newest)"),
}


def sim_usage() -> str:
    lines = ["stand-in flags (besides every sglang.launch_server flag):"]
    for name, (takes, _rep, text) in SIM_FLAGS.items():
        lines.append(f"  {name}{' VALUE' if takes else ''}: {text}")
    return "\n".join(lines)


@dataclass
class SimArgs:
    """Everything the stand-in needs, resolved."""

    config: ServerConfig
    profile: Profile
    faults: Faults
    zero_delay: bool
    moe_autotune: bool
    seed: int
    access_log: bool
    server_args: dict[str, Any]  # every ServerArgs field, resolved, SGLang order
    not_modelled: list[str]  # flags given that the model does not use
    notes: list[str] = field(default_factory=list)  # how defaults were resolved
    max_total_num_tokens: int = 0
    step: StepContext | None = None
    release: str = DEFAULT_RELEASE  # the SGLang release emulated: its flags, ServerArgs and log lines
    shape: LineShape = field(default_factory=LineShape)  # the variant of its stats lines (prefill graphs, speculative decoding)

    def server_args_repr(self) -> str:
        """``ServerArgs(model_path='...', ...)`` with secrets masked, as SGLang logs it."""
        inner = ", ".join(f"{k}={mask_value(k, v)!r}" for k, v in self.server_args.items())
        return f"ServerArgs({inner})"

    def server_args_line(self) -> str:
        """The start-up ``server_args=...`` line of the emulated release, secrets masked."""
        return server_args_line(self.release, {k: mask_value(k, v) for k, v in self.server_args.items()})


def _split_sim(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    sim: dict[str, Any] = {"--sim-fault": []}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--sim"):
            rest.append(token)
            continue
        name, has_inline, inline = token.partition("=")
        if name not in SIM_FLAGS:
            close = difflib.get_close_matches(name, list(SIM_FLAGS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"unknown stand-in flag {name!r}{hint} (valid: {', '.join(SIM_FLAGS)})",
                field=name,
                valid=list(SIM_FLAGS),
            )
        takes, repeatable, _ = SIM_FLAGS[name]
        if takes:
            if has_inline:
                value = inline
            elif i < len(argv) and not argv[i].startswith("--"):
                value = argv[i]
                i += 1
            else:
                raise ConfigError(f"{name} expects a value", field=name, valid=[SIM_FLAGS[name][2]])
            if repeatable:
                sim[name].append(value)
            else:
                sim[name] = value
        else:
            if has_inline:
                raise ConfigError(f"{name} is a switch and takes no value", field=name, valid=[name])
            sim[name] = True
    return sim, rest


def _default_max_running(total_tokens: int, context_len: int) -> int:
    # SGLang sizes its request pool from the KV capacity and the context length, then caps the
    # running batch at half the token count (model_runner / scheduler, 0.5.x).
    pool = min(max(int(total_tokens / max(1, context_len) * 512), 2048), 4096)
    return max(1, min(pool, total_tokens // 2))


def parse_sim_argv(argv: list[str]) -> SimArgs:
    """Parse the stand-in's command line; raises ConfigError with the offending flag and valid ones."""
    sim, rest = _split_sim([str(a) for a in argv])
    release = _release(sim)
    # SGLang's --config FILE (glm5lib's launcher puts the API keys there), merged as SGLang merges it
    config = ServerConfig.from_argv(merge_config_file(rest, catalogue(release)), release=release)
    # the largest graph batch is cuda_graph_max_bs up to 0.5.9, cuda_graph_max_bs_decode later
    max_bs = config.catalogue.field_name("cuda_graph_max_bs") or "cuda_graph_max_bs"
    profile = load_profile(sim.get("--sim-profile"))
    faults = parse_faults(sim["--sim-fault"])
    explicit = config.explicit
    notes: list[str] = []

    values = _server_values(config, profile, max_bs, notes)
    # decode graphs: 0.5.23's own switches for the phase win over the legacy all-graphs one
    cuda_graph = not graphs_off_for(values, "decode")
    capacity = _kv_capacity(profile, values, cuda_graph, notes)
    if values.get("max_running_requests") is None:
        values["max_running_requests"] = _default_max_running(capacity, values["context_length"])
    # SGLang never captures graphs for batches larger than the running cap.
    values[max_bs] = min(int(values[max_bs]), int(values["max_running_requests"]))
    seed = int(sim.get("--sim-seed") or values["random_seed"] or 0)

    if values["schedule_policy"] != "fcfs" and "schedule_policy" in explicit:
        notes.append(f"schedule_policy={values['schedule_policy']!r} is modelled as 'fcfs'")
    _resolve_speculative(values, notes)
    shape = line_shape(release, values, graphs_off=cuda_graphs_off(values))
    not_modelled = [config.catalogue.specs[name].flag for name in explicit if name not in MODELLED_FIELDS]
    step = _step_context(values, max_bs, cuda_graph, moe_autotune=bool(sim.get("--sim-moe-autotune", False)))
    notes += _profile_notes(profile, values, step)

    return SimArgs(
        config=config,
        profile=profile,
        faults=faults,
        zero_delay=bool(sim.get("--sim-zero-delay", False)),
        moe_autotune=step.moe_autotune,
        seed=seed,
        access_log=not sim.get("--sim-no-access-log", False),
        server_args=values,
        not_modelled=not_modelled,
        notes=notes,
        max_total_num_tokens=capacity,
        step=step,
        release=release,
        shape=shape,
    )


def _release(sim: dict[str, Any]) -> str:
    """The SGLang release to emulate (``--sim-release``, else the newest bundled one)."""
    release = sim.get("--sim-release") or DEFAULT_RELEASE
    if release not in BUNDLED_RELEASES:
        raise ConfigError(
            f"--sim-release {release!r}: the stand-in emulates {', '.join(BUNDLED_RELEASES)}",
            field="--sim-release", valid=list(BUNDLED_RELEASES),
        )
    return release


def _server_values(config: ServerConfig, profile: Profile, max_bs: str, notes: list[str]) -> dict[str, Any]:
    """Every ServerArgs field of ``config``, those the model needs and the command line left
    unset taken from the profile (each such choice the user may not expect added to ``notes``)."""
    explicit = config.explicit
    values: dict[str, Any] = {
        name: getattr(config, name) for name, spec in config.catalogue.specs.items()
        if spec.in_server_args and not name.startswith("_")  # private fields of 0.5.1x ServerArgs
    }
    if config.catalogue.graphs_by_phase and "disable_cuda_graph" in values:
        # like 0.5.23, which says "graphs off" in cuda_graph_backend_{decode,prefill} and leaves
        # the deprecated switch as given
        values["disable_cuda_graph"] = bool(explicit.get("disable_cuda_graph", False))
    model = profile["model"]
    hw = profile["hardware"]
    defaults = profile["defaults"]
    if not values.get("model_path"):
        values["model_path"] = model["model_path"]
        notes.append(f"--model-path not given: using the profile's {model['model_path']!r}")
    values["tokenizer_path"] = values.get("tokenizer_path") or values["model_path"]
    values["served_model_name"] = values.get("served_model_name") or values["model_path"]
    if "tp_size" not in explicit:
        values["tp_size"] = int(hw["num_gpus"])
        notes.append(f"--tp-size not given: using the profile's {hw['num_gpus']} GPUs")
    values["context_length"] = values.get("context_length") or int(model["context_len"])
    values["attention_backend"] = values.get("attention_backend") or defaults["attention_backend"]
    values["page_size"] = values.get("page_size") or int(defaults["page_size"])
    if values.get("chunked_prefill_size") is None:
        values["chunked_prefill_size"] = int(defaults["chunked_prefill_size"])
    if values.get(max_bs) is None:
        values[max_bs] = int(defaults["cuda_graph_max_bs"])
    if values.get("mem_fraction_static") is None:
        values["mem_fraction_static"] = float(profile["memory"]["default_mem_fraction_static"])
    if values.get("random_seed") is None:
        values["random_seed"] = 0
    return values


def _kv_capacity(profile: Profile, values: dict[str, Any], cuda_graph: bool, notes: list[str]) -> int:
    """The KV pool in tokens: the profile's memory at the static fraction, rescaled for a TP group
    other than the profile's, bounded by ``max_total_tokens``, whole pages."""
    hw = profile["hardware"]
    capacity = profile.kv_capacity_tokens(values["mem_fraction_static"], cuda_graph)
    # Weights are split over the TP group; a smaller group holds more per GPU.
    tp_ratio = int(hw["num_gpus"]) / max(1, int(values["tp_size"]))
    if tp_ratio != 1.0:
        extra = float(profile["memory"]["weights_bytes_per_gpu"]) * (tp_ratio - 1.0)
        capacity = max(0, capacity - int(extra / float(profile["memory"]["kv_bytes_per_token_per_gpu"])))
        notes.append(
            f"tp_size={values['tp_size']} differs from the profile's {hw['num_gpus']} GPUs: memory is "
            "rescaled, step times are not (not modelled)"
        )
    if values.get("max_total_tokens"):
        capacity = min(capacity, int(values["max_total_tokens"]))
    page = max(1, int(values["page_size"]))
    capacity -= capacity % page
    return capacity


def _resolve_speculative(values: dict[str, Any], notes: list[str]) -> None:
    """With speculative decoding on, its step counts as SGLang chooses them where none is given,
    and a note that its step times are not modelled."""
    spec_fields = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if values.get("speculative_algorithm"):
        if all(values.get(f) is None for f in spec_fields):
            # SGLang chooses them at start and logs the choice
            values.update(zip(spec_fields, SPECULATIVE_DEFAULTS, strict=True))
        notes.append(
            f"--speculative-algorithm {values['speculative_algorithm']}: decode lines carry a nominal "
            f"accept len of {NOMINAL_ACCEPT_LENGTH:.2f}; speculative decoding's step times are not modelled"
        )


def _step_context(values: dict[str, Any], max_bs: str, cuda_graph: bool, *, moe_autotune: bool) -> StepContext:
    """What the step-time model reads of the resolved arguments, the decode graph sizes captured
    among them (SGLang's schedule up to the ceiling, trimmed to the running cap)."""
    graph_top = int(values[max_bs])
    running = int(values.get("max_running_requests") or graph_top)
    # SGLang captures its schedule up to the ceiling, trimmed to the request pool (the cap)
    sizes = [b for b in decode_graph_sizes(graph_top) if b <= running]
    if sizes and graph_top > running and running not in sizes:
        sizes.append(running)
    return StepContext(
        attention_backend=str(values["attention_backend"]),
        cuda_graph=cuda_graph,
        cuda_graph_max_bs=int(values[max_bs]),
        graph_sizes=tuple(sorted(sizes)) if cuda_graph else (),
        allreduce_fusion=bool(values["enable_flashinfer_allreduce_fusion"]),
        moe_runner_backend=str(values["moe_runner_backend"]),
        fp4_gemm_backend=str(values["fp4_gemm_runner_backend"]),
        moe_autotune=moe_autotune,
    )


def _profile_notes(profile: Profile, values: dict[str, Any], step: StepContext) -> list[str]:
    """Where the profile cannot time what was asked for: a backend without a factor of its own,
    an autotune it did not measure, an all-reduce fusion these GPUs do not support."""
    notes = []
    for flag_field, table in (
        ("attention_backend", "attention_backend"),
        ("moe_runner_backend", "moe_runner_backend"),
        ("fp4_gemm_runner_backend", "fp4_gemm_backend"),
    ):
        if str(values[flag_field]) not in profile["flags"][table]:
            notes.append(
                f"{flag_field}={values[flag_field]!r} has no factor in profile {profile.name!r}: "
                "timed like the profile's reference (factor 1.0)"
            )
    if step.moe_autotune and float(profile["flags"]["moe_autotune_factor"]) == 1.0:
        notes.append(
            f"--sim-moe-autotune: profile {profile.name!r} has moe_autotune_factor 1.0 (the autotune's "
            "share of the published fix was not measured separately), so it changes no timing"
        )
    if step.allreduce_fusion and not profile["flags"]["allreduce_fusion_supported"]:
        notes.append(
            "--enable-flashinfer-allreduce-fusion: not supported on these GPUs per the profile; "
            "it changes nothing (as on SM120)"
        )
    return notes
