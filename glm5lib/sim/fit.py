"""Fit a stand-in profile from a real SGLang server log, to rehearse one's own deployment.

Each decode line reports the batch (``#running-req``), the KV tokens (``#token``) and the
generation throughput over the last ``decode_log_interval`` steps, so ``running / throughput``
is the mean step time at that batch. :func:`fit_profile` fits the profile's decode model

    step_ms = base_ms + per_req_ms * batch ** batch_exponent + per_kv_token_us * kv_tokens / 1000

(minus ``cuda_graph_saving_ms`` on lines that ran with a CUDA graph) by least squares over a
grid of exponents, takes the KV capacity from the log's ``max_total_num_tokens``, and keeps the
rest (power, prefill, hardware) from a base profile. The fitted profile records its fit quality
in a ``fit`` section. Lines logged while the batch was changing fast fit worse; a sweep with
steady levels gives the best fit.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import numpy as np

from glm5lib import logs
from glm5lib.engines.sglang.config import cuda_graphs_off
from glm5lib.errors import ConfigError
from glm5lib.sim.profile import DEFAULT_PROFILE, Profile, StepContext, load_profile
from glm5lib.stepmodel import nnls

__all__ = ["fit_profile", "step_times_from_decode"]


def step_times_from_decode(decode) -> Any:
    """The decode lines usable for a fit, with ``step_ms`` = running_req / gen_throughput."""
    import pandas as pd

    if decode is None or len(decode) == 0:
        return pd.DataFrame(columns=["running_req", "num_token", "cuda_graph", "step_ms"])
    d = decode.copy()
    for col in ("running_req", "gen_throughput"):
        if col not in d.columns:
            raise ConfigError(f"decode lines lack {col!r}; cannot fit step times", field=col)
    if "num_token" not in d.columns:
        d["num_token"] = 0
    if "cuda_graph" not in d.columns:
        d["cuda_graph"] = False
    d = d[(d["running_req"] > 0) & (d["gen_throughput"] > 0)]
    # A line right after the batch changed mixes two batch sizes; keep lines whose batch equals
    # the previous line's within 10 %, when there are enough of them.
    prev = d["running_req"].shift(1)
    steady = d[(prev.notna()) & ((d["running_req"] - prev).abs() <= 0.1 * d["running_req"])]
    if len(steady) >= 3:
        d = steady
    d = d.assign(
        step_ms=1000.0 * d["running_req"].astype(float) / d["gen_throughput"].astype(float),
        cuda_graph=d["cuda_graph"].fillna(False).astype(bool),
        num_token=d["num_token"].fillna(0).astype(float),
    )
    return d[["running_req", "num_token", "cuda_graph", "step_ms"]].reset_index(drop=True)


def _source(log: Any) -> str:
    if isinstance(log, os.PathLike) or (isinstance(log, str) and "\n" not in log and len(log) < 4096):
        return str(log)
    return "log text" if isinstance(log, (str, bytes)) else "ServerLog"


def fit_profile(
    log: str | os.PathLike[str] | Any,
    base: str | os.PathLike[str] | Profile = DEFAULT_PROFILE,
    name: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> Profile:
    """A profile whose decode timings and KV capacity come from a server log.

    ``log`` is a log path, log text or a parsed :class:`glm5lib.logs.ServerLog`; ``base`` the
    profile to copy everything else from; ``out`` an optional path to save the profile to.
    Raises ConfigError when the log has fewer than 3 usable decode lines.
    """
    slog = log if hasattr(log, "decode") else logs.parse_log(log)
    base_prof = base if isinstance(base, Profile) else load_profile(base)
    pts = step_times_from_decode(slog.decode)
    if len(pts) < 3:
        raise ConfigError(
            f"the log has {len(pts)} usable decode lines (need at least 3 with running requests and "
            "a throughput); run some load through the server first",
            field="log",
        )
    b = pts["running_req"].to_numpy(float)
    kv = pts["num_token"].to_numpy(float)
    g = pts["cuda_graph"].to_numpy(bool)
    y = pts["step_ms"].to_numpy(float)
    mixed_graph = bool(g.any() and (~g).any())
    if b.max() < 1.3 * b.min():
        return _fit_scale(slog, base_prof, pts, name, out, log)
    best: tuple[float, float, np.ndarray] | None = None
    for p in np.arange(0.4, 1.31, 0.01):
        cols = [np.ones_like(b), b**p, kv / 1000.0]
        if mixed_graph:
            cols.append(-g.astype(float))
        x = np.column_stack(cols)
        coef = nnls(x, y)
        err = float(np.sqrt(np.mean((x @ coef - y) ** 2)))
        if best is None or err < best[0]:
            best = (err, float(p), coef)
    assert best is not None
    rmse, p, coef = best
    data = copy.deepcopy(base_prof.data)
    dec = data["decode"]
    method = "least squares over batch sizes"
    saving = float(coef[3]) if mixed_graph else float(dec["cuda_graph_saving_ms"])
    base_ms = float(coef[0])
    if g.all() and not mixed_graph:
        # Every line ran with graphs: the fitted constant already has the saving taken off.
        base_ms += saving
    dec.update(
        base_ms=round(base_ms, 4),
        per_req_ms=round(float(coef[1]), 6),
        batch_exponent=round(p, 3),
        per_kv_token_us=round(float(coef[2]), 6),
        cuda_graph_saving_ms=round(saving, 4),
    )
    ss = float(np.sum((y - y.mean()) ** 2))
    pred = coef[0] + coef[1] * b**p + coef[2] * kv / 1000.0 - (coef[3] * g if mixed_graph else 0.0)
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss if ss > 0 else 1.0
    return _finish(slog, base_prof, data, pts, name, out, log, method, rmse, r2)


def _fit_scale(slog, base_prof: Profile, pts, name, out, log) -> Profile:
    """One batch size only: keep the base profile's shape and fit one scale factor."""
    sa = slog.server_args or {}
    data = copy.deepcopy(base_prof.data)
    ctx = StepContext(
        attention_backend=str(sa.get("attention_backend") or data["defaults"]["attention_backend"]),
        cuda_graph=False, cuda_graph_max_bs=0, allreduce_fusion=False,
        moe_runner_backend=str(sa.get("moe_runner_backend") or "auto"),
        fp4_gemm_backend=str(sa.get("fp4_gemm_runner_backend") or "auto"), moe_autotune=False,
    )
    y = pts["step_ms"].to_numpy(float)
    g = pts["cuda_graph"].to_numpy(bool)
    saving = float(data["decode"]["cuda_graph_saving_ms"])
    model = np.array([
        base_prof.decode_ms(int(r.running_req), int(r.num_token), ctx) / base_prof.flag_factor(ctx)
        for r in pts.itertuples(index=False)
    ])
    target = y + saving * g  # put the graph saving back before scaling the no-graph model
    scale = float(np.dot(model, target) / np.dot(model, model))
    dec = data["decode"]
    for key in ("base_ms", "per_req_ms", "per_kv_token_us"):
        dec[key] = round(float(dec[key]) * scale, 6)
    pred = model * scale - saving * g
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    method = (f"one batch size ({int(pts['running_req'].min())}-{int(pts['running_req'].max())}): "
              f"the base profile's shape scaled by {scale:.3f}; log several batch sizes for a real fit")
    return _finish(slog, base_prof, data, pts, name, out, log, method, rmse, None)


def _finish(slog, base_prof: Profile, data: dict, pts, name, out, log, method: str, rmse: float,
            r2: float | None) -> Profile:
    b = pts["running_req"].to_numpy(float)
    g = pts["cuda_graph"].to_numpy(bool)
    sa = slog.server_args or {}
    # The log's own flags become the reference (factor 1.0); other factors keep their ratios.
    flags = data["flags"]
    for key, arg in (
        ("attention_backend", "attention_backend"),
        ("moe_runner_backend", "moe_runner_backend"),
        ("fp4_gemm_backend", "fp4_gemm_runner_backend"),
    ):
        used = sa.get(arg)
        if used is None:
            continue
        ref = float(flags[key].get(str(used), 1.0)) or 1.0
        flags[key] = {k: round(float(v) / ref, 4) for k, v in flags[key].items()}
        flags[key][str(used)] = 1.0
    tokens = slog.startup.get("max_total_num_tokens")
    if isinstance(tokens, (int, float)) and tokens > 0:
        mem = data["memory"]
        frac = sa.get("mem_fraction_static") or mem["default_mem_fraction_static"]
        free = float(data["hardware"]["memory_total_bytes"]) * float(frac) - float(mem["weights_bytes_per_gpu"])
        free -= float(mem["activation_reserve_bytes"])
        if not cuda_graphs_off(sa):
            free -= float(mem["cuda_graph_reserve_bytes"])
        if free > 0:
            mem["kv_bytes_per_token_per_gpu"] = max(1, int(free / float(tokens)))
            mem["default_mem_fraction_static"] = float(frac)
    if sa.get("context_length"):
        data["model"]["context_len"] = int(sa["context_length"])
    if sa.get("model_path"):
        data["model"]["model_path"] = str(sa["model_path"])
    new_name = name or f"{base_prof.name}-fitted"
    data["name"] = new_name
    data["description"] = (
        f"Fitted by glm5lib.sim.fit_profile from a server log ({len(pts)} decode lines); "
        f"everything but decode timings and KV capacity comes from {base_prof.name!r}."
    )
    data["fit"] = {
        "method": method,
        "source": _source(log),
        "points": len(pts),
        "rmse_ms": round(rmse, 3),
        "r2": round(r2, 4) if r2 is not None else None,
        "batch_range": [int(b.min()), int(b.max())],
        "cuda_graph_lines": int(g.sum()),
    }
    prof = Profile(name=new_name, path=None, data=data)
    if out is not None:
        path = Path(out)
        prof.save(path)
        prof.path = path.resolve()
    return prof
