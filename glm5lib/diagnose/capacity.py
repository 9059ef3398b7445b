"""Capacity model: decode step time against batch size and KV tokens, and what cap to run.

:class:`CapacityModel` fits a run's decode lines, predicts throughput at other caps and
concurrencies (with the fit's error), and :func:`recommend_max_running_requests` gives the
largest ``--max-running-requests`` the KV pool supports for a workload. It reads decode lines
only; the forecast of a whole change (every limit, TTFT and TPOT, from a phase's sweep levels)
is :mod:`glm5lib.diagnose.model`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.diagnose.evidence import Evidence, _col, _num, _pct
from glm5lib.errors import ConfigError, DiagnosisError

__all__ = [
    "CapacityModel",
    "Recommendation",
    "recommend_max_running_requests",
]


@dataclasses.dataclass
class Recommendation:
    """A recommended ``--max-running-requests`` and why."""

    value: int | None
    kv_bound: int | None
    target_concurrency: int | None
    context_tokens: float | None
    kv_tokens: int | None
    predicted_throughput: float | None
    current_throughput: float | None
    reason: str


def _round_down(x: float, step: int = 8) -> int:
    return max(1, int(x // step * step)) if x >= step else max(1, int(x))


def recommend_max_running_requests(
    kv_tokens: int | None,
    context_tokens: float | None,
    *,
    target_concurrency: int | None = None,
    headroom: float = 0.9,
    model: CapacityModel | None = None,
    current_cap: int | None = None,
    ran_batch: int | None = None,
    say_throughput: bool = True,
) -> Recommendation:
    """The largest cap the KV pool supports for this workload (no retraction), within the load offered.

    ``context_tokens`` is what one request holds at its end (prompt + output); ``headroom`` keeps
    part of the pool free for the scheduler's estimates. With ``model``, predicted throughput at
    the recommended and current caps is reported; a model without a lever arm (see
    :attr:`CapacityModel.lever_arm`) recommends nothing and says why. ``ran_batch`` is the
    largest batch that already ran: a value below it comes with the reason. ``say_throughput=False``
    leaves the fit's throughput figures out of the reason (a finding that states the performance
    model's forecast, the one ``glm5 predict`` gives, states no second one).
    """
    if not 0 < headroom <= 1:
        raise ConfigError(f"headroom must be in (0, 1], got {headroom}", field="headroom")
    kv_bound = None
    if kv_tokens and context_tokens:
        if context_tokens <= 0:
            raise ConfigError(
                f"context_tokens must be positive, got {context_tokens}", field="context_tokens"
            )
        kv_bound = int(headroom * kv_tokens // context_tokens)
    candidates = [c for c in (kv_bound, target_concurrency) if c]
    if not candidates:
        return Recommendation(
            None,
            None,
            target_concurrency,
            context_tokens,
            kv_tokens,
            None,
            None,
            "KV pool size or workload context length unknown: measure the KV pool's size in tokens first",
        )
    value = _round_down(min(candidates))
    if model is not None and not model.lever_arm:
        return Recommendation(
            None,
            kv_bound,
            target_concurrency,
            context_tokens,
            kv_tokens,
            None,
            None,
            f"the capacity fit has no lever arm ({model.lever_arm_problem()}), so it cannot say "
            "what another cap would give; measure a sweep whose levels run different batch sizes",
        )
    reasons = []
    if kv_bound:
        reasons.append(
            f"a {kv_tokens:,}-token KV pool at {_pct(headroom)} holds {kv_bound} requests of "
            f"{context_tokens:,.0f} tokens"
        )
    if target_concurrency and (kv_bound is None or target_concurrency < kv_bound):
        reasons.append(f"the highest offered concurrency is {target_concurrency}")
    if ran_batch and value < ran_batch:
        why = (
            f"the pool holds only {kv_bound} requests at their full {context_tokens:,.0f} tokens, so the "
            f"batch of {ran_batch} that ran fitted only while its requests were shorter than that "
            "(or through retractions)"
            if kv_bound and value <= kv_bound
            else f"only {target_concurrency} requests were offered"
        )
        reasons.append(f"this is below the {ran_batch} requests that already ran at once because {why}")
    pred = cur = None
    lo, hi = model.batch_range if model is not None else (0, 0)
    if model is not None:
        pred = float(model.throughput(value))
        if current_cap and say_throughput:
            # what the current cap actually lets run: bounded by the offered load and the pool
            pool_holds = int(kv_tokens // context_tokens) if kv_bound else None
            now = min(c for c in (current_cap, target_concurrency, pool_holds) if c)
            cur = float(model.throughput(now))
            beyond = value > 1.1 * hi
            reasons.append(
                f"the decode model predicts {_num(pred)} tok/s with {value} running vs {_num(cur)} with "
                f"{now} running now (fit error {_pct(model.mape)}"
                + (f"; extrapolated beyond the measured batches {lo}-{hi}" if beyond else "")
                + ")"
            )
            if pred < cur:
                reasons.append(
                    f"the model predicts this cap to be slower than what runs now ({_num(pred)} vs "
                    f"{_num(cur)} tok/s): it trades throughput for the KV headroom that avoids retraction"
                )
    return Recommendation(
        value,
        kv_bound,
        target_concurrency,
        context_tokens,
        kv_tokens,
        pred,
        cur,
        "; ".join(reasons),
    )


@dataclasses.dataclass
class CapacityModel:
    """Decode step time as a linear function of batch size and KV tokens, fitted from decode lines.

    ``step_ms = intercept_ms + per_request_ms * batch + per_ktoken_ms * kv_tokens / 1000``; step
    time comes from each decode line as ``#running-req / gen throughput``; SGLang divides by the
    time since the previous decode line, so prefill batches in between are folded in at the
    workload's own mix. Lines far off the fit (the first after an idle gap) are dropped; ``mape`` is the fit's mean relative error in
    throughput on the lines it was fitted to.
    """

    intercept_ms: float
    per_request_ms: float
    per_ktoken_ms: float
    n_points: int
    n_outliers: int
    mape: float
    rmse_ms: float
    batch_range: tuple[int, int]
    tokens_per_request: float
    columns: tuple[str, ...]

    @classmethod
    def fit(cls, decode: pd.DataFrame) -> CapacityModel:
        if decode is None or decode.empty:
            raise DiagnosisError("cannot fit a capacity model: no decode lines")
        missing = {"running_req", "gen_throughput"} - set(decode.columns)
        if missing:
            raise DiagnosisError(
                f"cannot fit a capacity model: decode frame lacks {', '.join(sorted(missing))}"
            )
        d = Evidence(decode=decode).active_decode()
        b = _col(d, "running_req")
        g = _col(d, "gen_throughput")
        t = _col(d, "num_token") if "num_token" in d else pd.Series(np.nan, index=d.index)
        ok = (b > 0) & (g > 0)
        b, g, t = b[ok].to_numpy(float), g[ok].to_numpy(float), t[ok].to_numpy(float)
        if len(b) < 3:
            raise DiagnosisError(
                f"cannot fit a capacity model: need at least 3 decode lines with running requests and throughput, got {len(b)}"
            )
        step = 1000.0 * b / g
        use_tokens = bool(np.isfinite(t).all()) and np.ptp(t) > 0
        if use_tokens and len(np.unique(b)) > 1 and abs(np.corrcoef(b, t)[0, 1]) > 0.995:
            use_tokens = False  # collinear with batch: not separately identifiable
        cols = ["intercept", "batch"] + (["ktokens"] if use_tokens else [])
        if len(np.unique(b)) < 2:
            cols = ["batch"]  # a single batch size: only the per-request slope through the origin
        # The first line after a level change also times the ramp (prefill, idle): far off the
        # other lines of its own batch size, which a fit across batch sizes cannot always see.
        mask = cls._within_batch(b, step)
        coef: dict[str, float] = {}
        for _ in range(3):
            coef = cls._solve(b[mask], t[mask] / 1000.0, step[mask], list(cols))
            pred = cls._eval(coef, b, t / 1000.0)
            resid = step - pred
            mad = float(np.median(np.abs(resid[mask] - np.median(resid[mask])))) * 1.4826
            new = np.abs(resid) <= max(3.5 * mad, 0.05 * float(np.median(step)))
            if new.sum() < 3 or (new == mask).all():
                break
            if "intercept" in cols and len(np.unique(b[new])) < 2:
                # Rejecting a whole batch size would leave intercept and slope unidentifiable
                # (one noisy cluster, e.g. single-request lines, is still the only lever arm).
                break
            mask = new
        pred = cls._eval(coef, b[mask], t[mask] / 1000.0)
        thr_pred = b[mask] * 1000.0 / pred
        mape = float(np.mean(np.abs(thr_pred - g[mask]) / g[mask]))
        rmse = float(np.sqrt(np.mean((pred - step[mask]) ** 2)))
        tpr = float(np.nanmedian(t / b)) if np.isfinite(t).any() else float("nan")
        return cls(
            intercept_ms=coef.get("intercept", 0.0),
            per_request_ms=coef.get("batch", 0.0),
            per_ktoken_ms=coef.get("ktokens", 0.0),
            n_points=int(mask.sum()),
            n_outliers=int((~mask).sum()),
            mape=mape,
            rmse_ms=rmse,
            batch_range=(int(b.min()), int(b.max())),
            tokens_per_request=tpr,
            columns=tuple(c for c in cols if c in coef),
        )

    @staticmethod
    def _within_batch(b: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Lines whose step time is near the others of the same batch size (groups of 4 or more;
        a quarter of the group's median, or 3.5 robust deviations, whichever is wider)."""
        keep = np.ones(len(b), bool)
        for size in np.unique(b):
            group = b == size
            if group.sum() < 4:
                continue
            med = float(np.median(step[group]))
            mad = float(np.median(np.abs(step[group] - med))) * 1.4826
            keep[group] = np.abs(step[group] - med) <= max(3.5 * mad, 0.25 * med)
        return keep

    @staticmethod
    def _solve(b: np.ndarray, kt: np.ndarray, y: np.ndarray, cols: list[str]) -> dict[str, float]:
        # Least squares; a negative coefficient is not physical, so drop it and refit.
        while cols:
            x = np.column_stack(
                [{"intercept": np.ones_like(b), "batch": b, "ktokens": kt}[c] for c in cols]
            )
            sol, *_ = np.linalg.lstsq(x, y, rcond=None)
            neg = [c for c, v in zip(cols, sol, strict=True) if v < 0]
            if not neg:
                return dict(zip(cols, (float(v) for v in sol), strict=True))
            cols = [c for c in cols if c not in neg]
        return {"intercept": float(np.median(y))}

    @staticmethod
    def _eval(coef: Mapping[str, float], b: Any, kt: Any) -> np.ndarray:
        b = np.asarray(b, float)
        kt = np.nan_to_num(np.asarray(kt, float))
        return (
            coef.get("intercept", 0.0) + coef.get("batch", 0.0) * b + coef.get("ktokens", 0.0) * kt
        )

    def step_ms(self, batch: Any, kv_tokens: Any = None) -> np.ndarray:
        """Predicted decode step time (ms) at a batch size and KV tokens in use (default: typical per request)."""
        batch = np.asarray(batch, float)
        if kv_tokens is None:
            kv_tokens = batch * (
                0.0 if math.isnan(self.tokens_per_request) else self.tokens_per_request
            )
        coef = {
            "intercept": self.intercept_ms,
            "batch": self.per_request_ms,
            "ktokens": self.per_ktoken_ms,
        }
        return self._eval(coef, batch, np.asarray(kv_tokens, float) / 1000.0)

    def throughput(self, batch: Any, kv_tokens: Any = None) -> np.ndarray:
        """Predicted generated tokens per second with ``batch`` requests decoding."""
        return np.asarray(batch, float) * 1000.0 / self.step_ms(batch, kv_tokens)

    def predict(
        self,
        concurrency: Iterable[int] | int,
        *,
        cap: int | None = None,
        kv_tokens: int | None = None,
        context_tokens: float | None = None,
    ) -> pd.DataFrame:
        """Throughput at each offered concurrency under a running-request cap and a KV pool.

        The running batch is the smallest of concurrency, cap and what the KV pool holds
        (``kv_tokens / context_tokens``). Columns: concurrency, cap, batch,
        limited_by, step_ms, throughput, throughput_low, throughput_high, extrapolated.
        """
        levels = (
            [int(concurrency)]
            if isinstance(concurrency, (int, np.integer))
            else [int(c) for c in concurrency]
        )
        if any(c <= 0 for c in levels):
            raise ConfigError(
                f"concurrency levels must be positive, got {levels}", field="concurrency"
            )
        kv_limit = (
            int(kv_tokens // context_tokens)
            if kv_tokens and context_tokens
            else None
        )
        rows = []
        for c in levels:
            limits = {"concurrency": c}
            if cap:
                limits["cap"] = int(cap)
            if kv_limit:
                limits["kv"] = kv_limit
            by = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
            batch = max(1, limits[by])
            per_req = self.tokens_per_request
            if math.isnan(per_req) and context_tokens:
                per_req = 0.75 * context_tokens  # prompt plus half the output, for similar lengths
            tokens = batch * (0.0 if math.isnan(per_req) else per_req)
            step = float(self.step_ms(batch, tokens))
            thr = batch * 1000.0 / step
            rows.append(
                {
                    "concurrency": c,
                    "cap": cap,
                    "batch": batch,
                    "limited_by": by,
                    "step_ms": step,
                    "throughput": thr,
                    "throughput_low": thr * (1 - self.band(batch)),
                    "throughput_high": thr * (1 + self.band(batch)),
                    "extrapolated": batch > 1.1 * self.batch_range[1]
                    or batch < self.batch_range[0],
                }
            )
        return pd.DataFrame(rows)

    def recommend_max_running_requests(
        self,
        kv_tokens: int | None,
        context_tokens: float | None,
        *,
        target_concurrency: int | None = None,
        headroom: float = 0.9,
        current_cap: int | None = None,
        ran_batch: int | None = None,
    ) -> Recommendation:
        """See :func:`recommend_max_running_requests`; predictions come from this model."""
        return recommend_max_running_requests(
            kv_tokens,
            context_tokens,
            target_concurrency=target_concurrency,
            headroom=headroom,
            model=self,
            current_cap=current_cap,
            ran_batch=ran_batch,
        )

    def band(self, batch: float) -> float:
        """Relative uncertainty of a prediction at ``batch``: the fit's own error inside the
        measured batch sizes, widened by 10% per doubling beyond them (a straight line fitted
        on small batches says little about large ones)."""
        lo, hi = self.batch_range
        beyond = batch / hi if batch > hi else (lo / batch if batch < lo else 1.0)
        return min(0.95, max(self.mape, 0.1 * math.log2(beyond)) if beyond > 1 else self.mape)

    @property
    def lever_arm(self) -> bool:
        """True when the fit can tell step time apart at different batch sizes: its decode lines
        span batch sizes at least 1.5x apart, and a flat fit is not also a poor one."""
        return self.lever_arm_problem() is None

    def lever_arm_problem(self) -> str | None:
        """Why the fit has no lever arm, or None when it has one."""
        lo, hi = self.batch_range
        if hi < 1.5 * lo:
            return f"its decode lines cover batch sizes {lo}-{hi} only"
        if self.per_request_ms <= 1e-6 and self.per_ktoken_ms <= 1e-6 and self.mape > 0.5:
            return (
                f"step time does not grow with the batch in the fit (slope 0) and its throughput "
                f"error is {_pct(self.mape)}"
            )
        return None

    def describe(self) -> str:
        terms = [f"{self.intercept_ms:.2f} ms", f"{self.per_request_ms:.3f} ms x batch"]
        if self.per_ktoken_ms:
            terms.append(f"{self.per_ktoken_ms:.3f} ms per 1k KV tokens")
        return (
            f"decode step = {' + '.join(terms)}; fitted on {self.n_points} decode lines "
            f"(batch {self.batch_range[0]}-{self.batch_range[1]}, {self.n_outliers} outliers dropped), "
            f"throughput error {_pct(self.mape)}"
        )


def fitted_model(ev: Evidence) -> CapacityModel | None:
    """The capacity model of the evidence's decode lines (fitted once), or None when it cannot be."""

    def fit() -> CapacityModel | None:
        try:
            return CapacityModel.fit(ev.decode)
        except DiagnosisError:
            return None

    return ev.cached("capacity_model", ev.decode, fit)
