"""What a phase's ``/metrics`` scrapes (``metrics.csv``: time, metric, labels, value) say in the
evidence schema: decode rows from the gauges, retractions from a preemption counter, and the
per-step token counters. :func:`glm5lib.diagnose.evidence.load_evidence` reads them through these."""

from __future__ import annotations

import pandas as pd

from glm5lib import engines

__all__ = ["decode_from_metrics", "preemptions_from_metrics", "step_tokens_from_metrics"]

_GAUGES = {column: engines.metric_names(column) for column in engines.DECODE_METRIC_COLUMNS}


def decode_from_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    """Decode rows in the evidence schema from scraped ``/metrics`` gauges (``metrics.csv``: time,
    metric, labels, value), one row per scrape, for servers whose log holds no scheduler lines.

    ``time`` is UTC (time-zone aware); ``token_usage`` is the 0-1 fraction both engines report;
    ``attrs["engine"]`` says whose names were found. Empty when no running-request gauge was scraped.
    """
    if metrics is None or metrics.empty or not {"time", "metric", "value"} <= set(metrics.columns):
        return pd.DataFrame()
    m = metrics[["time", "metric", "value"]].copy()
    m["value"] = pd.to_numeric(m["value"], errors="coerce")
    m["time"] = pd.to_numeric(m["time"], errors="coerce")
    # one value per scrape and gauge: TP ranks repeat the same figure, so take the largest
    wide = m.pivot_table(index="time", columns="metric", values="value", aggfunc="max")
    out = pd.DataFrame(index=wide.index)
    engine = None
    for column, names in _GAUGES.items():
        found = next((n for n in names if n in wide.columns), None)
        if found is not None:
            out[column] = wide[found].to_numpy()
            engine = engine or found.split(":", 1)[0]
    if "running_req" not in out:
        return pd.DataFrame()
    out = out.reset_index()
    out["epoch"] = out["time"].astype(float)
    out["time"] = pd.to_datetime(out["time"], unit="s", utc=True)
    out["rank"] = ""
    out.attrs["engine"] = engine
    return out



# vLLM's histogram of tokens per engine step (prompt and decode tokens the scheduler took).
_STEP_TOKENS = "vllm:iteration_tokens_total"


_PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")


def preemptions_from_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    """Retraction rows (``time``, ``rank``, ``retracted_reqs``, ``epoch``) from vLLM's preemption
    counter in ``metrics.csv``: one row per scrape in which it rose, by how much. Empty when the
    counter was not scraped or never rose."""
    if metrics is None or metrics.empty or not {"time", "metric", "value"} <= set(metrics.columns):
        return pd.DataFrame()
    m = metrics[metrics["metric"].isin(_PREEMPTIONS)]
    if m.empty:
        return pd.DataFrame()
    per = m.assign(value=pd.to_numeric(m["value"], errors="coerce"), time=pd.to_numeric(m["time"], errors="coerce"))
    total = per.groupby("time")["value"].sum().sort_index()
    rose = total.diff().fillna(0)
    rose = rose[rose > 0]
    if rose.empty:
        return pd.DataFrame()
    return pd.DataFrame({"time": pd.to_datetime(rose.index, unit="s", utc=True), "rank": "",
                         "retracted_reqs": rose.to_numpy().astype(int), "epoch": rose.index.to_numpy(dtype=float)})


def step_tokens_from_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    """Cumulative per-step token counters, one row per scrape: ``epoch``, ``steps`` (engine steps
    so far) and ``tokens`` (tokens they took), from the count and sum of vLLM's
    ``iteration_tokens_total`` histogram in ``metrics.csv``. Empty when not scraped.

    Only the mean per step is read from it: vLLM 0.32 credits a prompt's tokens to the step that
    finishes its prefill, so under chunked prefill the buckets show a few huge steps and many
    small ones while the sum over steps (and so the mean) is what the steps took."""
    if metrics is None or metrics.empty or not {"time", "metric", "value"} <= set(metrics.columns):
        return pd.DataFrame()
    m = metrics[metrics["metric"].astype(str).str.startswith(_STEP_TOKENS)]
    if m.empty:
        return pd.DataFrame()
    m = m.assign(value=pd.to_numeric(m["value"], errors="coerce"), time=pd.to_numeric(m["time"], errors="coerce"))
    metric = m["metric"].astype(str)
    out = pd.DataFrame(index=pd.Index(sorted(m["time"].dropna().unique()), name="epoch"))
    for suffix, column in (("_count", "steps"), ("_sum", "tokens")):
        part = m[metric == _STEP_TOKENS + suffix]
        if not part.empty:
            out[column] = part.groupby("time")["value"].sum()
    if "steps" not in out:
        return pd.DataFrame()
    return out.reset_index()
