"""Server metrics: :class:`MetricsScraper` scrapes a server's Prometheus ``/metrics`` into ``metrics.csv``.

Parsed with prometheus-client's parser into a long frame of ``time, metric, labels, value``
(labels as a JSON object string, keys sorted); :func:`metric_series` picks one metric out of it.

Kept compactly: the engine's gauges and counters (a few rows) are written at every scrape, so
running, queued and KV figures are there once a second; histograms and summaries (dozens of
bucket rows each, cumulative, so any two snapshots give the distribution between them), the
serving process's own runtime metrics (``python_*``, ``process_*``, ``http_*``) and counters'
``_created`` times only at the first scrape, at level boundaries (:meth:`MetricsScraper.mark`),
every ``histogram_interval`` seconds and at the last scrape. The file grows by a bounded amount per hour whatever the load; older
``metrics.csv`` files with every bucket of every scrape read the same way.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from pathlib import Path

import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from glm5lib import http
from glm5lib.errors import ConfigError, TelemetryError
from glm5lib.telemetry._common import _CsvSink, positive_interval

__all__ = ["METRICS_COLUMNS", "MetricsScraper", "load_metrics_csv", "metric_series"]

log = logging.getLogger(__name__)

METRICS_COLUMNS = ["time", "metric", "labels", "value"]

#: Seconds between snapshots of the histograms (their bucket rows), besides the level boundaries.
HISTOGRAM_INTERVAL_S = 30.0
# Prometheus family types whose samples are distributions (many rows per scrape).
_DISTRIBUTIONS = frozenset({"histogram", "gaugehistogram", "summary"})
# The serving process's own runtime (prometheus-client's default collectors, the HTTP
# instrumentation): kept at snapshots only, like the histograms. So are counters' ``_created``
# samples (when each series began: a constant). Real vLLM's /metrics: a median 113 rows a scrape -> 37.
_RUNTIME_PREFIXES = ("python_", "process_", "http_")


class MetricsScraper:
    """Scrapes a server's Prometheus ``/metrics`` every ``interval`` seconds in the background.

    ``.enabled`` is False (and ``.reason`` says why) when ``/metrics`` answers 404, as an engine
    does when started without its metrics switch (``metrics_flag``, from the engine's adapter). ``.frame()`` has one row per sample:
    ``time, metric, labels, value`` (labels as a JSON object string, keys sorted). Gauges and
    counters are kept from every scrape; histogram and summary samples from the first scrape,
    the first one after each :meth:`mark` (a level starts or ends), one every
    ``histogram_interval`` seconds (None: only those) and the last one (at :meth:`stop`).
    """

    def __init__(
        self,
        base_url: str,
        interval: float = 1.0,
        out: str | Path | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 5.0,
        histogram_interval: float | None = HISTOGRAM_INTERVAL_S,
        metrics_flag: str | None = None,
    ):
        if not base_url or not str(base_url).startswith(("http://", "https://")):
            raise ConfigError(f"base_url={base_url!r} must be an http(s) URL such as http://127.0.0.1:30000",
                              field="base_url")
        interval = positive_interval(interval, example=1.0)
        if histogram_interval is not None and not (
                isinstance(histogram_interval, (int, float)) and math.isfinite(histogram_interval)
                and histogram_interval > 0):
            raise ConfigError(f"histogram_interval={histogram_interval!r} must be a positive number of seconds "
                              "(e.g. 30.0) or None (histograms only at level boundaries)",
                              field="histogram_interval")
        self.histogram_interval = None if histogram_interval is None else float(histogram_interval)
        self._histograms_at: float | None = None  # monotonic time of the last histogram snapshot
        self._marked = threading.Event()
        self.base_url = str(base_url).rstrip("/")
        self.url = self.base_url + "/metrics"
        self.interval = interval
        self.out = Path(out) if out is not None else None
        self.timeout = timeout
        self._api_key = api_key
        self.metrics_flag = metrics_flag
        self.enabled: bool | None = None
        self.reason: str | None = None
        self.scrapes = 0
        self.errors = 0
        self._rows: list[tuple] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: _CsvSink | None = None

    def __repr__(self) -> str:
        return (f"MetricsScraper({self.url!r}, enabled={self.enabled}, scrapes={self.scrapes}"
                + (f", reason={self.reason!r})" if self.reason else ")"))

    def _parse(self, text: str, stamp: float, histograms: bool = True) -> list[tuple]:
        rows = []
        stamp = round(stamp, 3)  # milliseconds: the scrape itself takes longer
        for family in text_string_to_metric_families(text):
            if not histograms and (family.type in _DISTRIBUTIONS or family.name.startswith(_RUNTIME_PREFIXES)):
                continue
            for sample in family.samples:
                if not histograms and sample.name.endswith("_created"):
                    continue
                labels = json.dumps(dict(sorted(sample.labels.items())), separators=(",", ":"))
                rows.append((stamp, sample.name, labels, float(sample.value)))
        return rows

    def mark(self) -> None:
        """Ask for the histograms at the next scrape (a level started or ended), so each level's
        distribution is the difference of two snapshots. Returns at once (the scraping thread scrapes)."""
        self._marked.set()

    def _histograms_due(self) -> bool:
        if self._histograms_at is None or self._marked.is_set():
            return True
        return (self.histogram_interval is not None
                and time.monotonic() - self._histograms_at >= self.histogram_interval - 1e-3)

    def scrape_once(self, *, histograms: bool | None = None) -> pd.DataFrame:
        """Scrape now and return this scrape's rows (also kept in ``.frame()`` and ``out``).

        ``histograms``: keep this scrape's histogram and summary samples (None: when one is due;
        see the class docstring).
        """
        t0 = time.time()
        response = http.get(self.url, api_key=self._api_key, timeout=self.timeout)
        status, body = response.status, response.body
        if not response.reached:
            self.errors += 1
            if not self.enabled:
                self.enabled = False
                self.reason = f"{self.url} could not be reached ({response.error})"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        stamp = (t0 + time.time()) / 2.0
        if status == 404:
            self.enabled = False
            switch = self.metrics_flag or "its metrics switch"
            self.reason = (f"{self.url} answered 404: the server was started without {switch} "
                           f"(restart it with {switch} to record its queue and running-request gauges)")
            return pd.DataFrame(columns=METRICS_COLUMNS)
        if status in (401, 403):
            self.enabled = False
            self.errors += 1
            self.reason = f"{self.url} answered HTTP {status}: pass the server's api_key"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        if status != 200:
            self.errors += 1
            self.reason = f"{self.url} answered HTTP {status}"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        if histograms is None:
            histograms = self._histograms_due()
        if histograms:
            self._marked.clear()
        try:
            rows = self._parse(body.decode("utf-8", "replace"), stamp, histograms)
        except Exception as exc:  # the parser raises ValueError and friends on malformed text
            self.errors += 1
            self.reason = f"{self.url} returned text that is not Prometheus exposition format ({exc})"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        self.enabled, self.reason = True, None
        self.scrapes += 1
        if histograms:
            self._histograms_at = time.monotonic()
        with self._lock:
            self._rows.extend(rows)
        if self._sink is not None:
            self._sink.write(rows)
        return pd.DataFrame(rows, columns=METRICS_COLUMNS)

    def start(self) -> MetricsScraper:
        """Scrape once now (so ``.enabled`` is known), then keep scraping in the background.

        When ``/metrics`` answers 404 no thread is started: the server has no metrics to give.
        """
        if self._thread is not None:
            return self
        if self.out is not None and self._sink is None:
            self._sink = _CsvSink(self.out, METRICS_COLUMNS)
        self.scrape_once()
        if self.enabled is False and self.reason and "404" in self.reason:
            log.warning("%s", self.reason)
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="glm5-metrics", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        start = time.monotonic()
        k = 1
        while not self._stop.wait(max(0.0, start + k * self.interval - time.monotonic())):
            self.scrape_once()
            k = max(k + 1, math.floor((time.monotonic() - start) / self.interval) + 1)
            if self.enabled is False and self.reason and "404" in self.reason:
                return

    def stop(self) -> pd.DataFrame:
        """Stop scraping (one last scrape, histograms included) and return :meth:`frame`."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=self.timeout + 2 * self.interval)
            self._thread = None
            if self.enabled:
                self.scrape_once(histograms=True)
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        return self.frame()

    def __enter__(self) -> MetricsScraper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def frame(self) -> pd.DataFrame:
        with self._lock:
            rows = list(self._rows)
        return pd.DataFrame(rows, columns=METRICS_COLUMNS).astype(
            {"time": "float64", "metric": "object", "labels": "object", "value": "float64"}
        )


def load_metrics_csv(path: str | Path) -> pd.DataFrame:
    """Read a ``metrics.csv`` written by :class:`MetricsScraper`."""
    path = Path(path)
    if not path.exists():
        raise TelemetryError(f"{path} does not exist: no /metrics scrapes were recorded there")
    frame = pd.read_csv(path, dtype={"metric": str, "labels": str})
    missing = [c for c in METRICS_COLUMNS if c not in frame.columns]
    if missing:
        raise TelemetryError(f"{path} lacks columns {missing}; expected {METRICS_COLUMNS}")
    return frame[METRICS_COLUMNS]


def metric_series(frame: pd.DataFrame, metric: str, agg: str = "sum", **labels: str) -> pd.Series:
    """One metric as a time series: samples matching ``labels`` combined per scrape with ``agg``.

    ``sum`` suits SGLang's gauges (each data-parallel rank reports its own running and queued
    requests); use ``agg="mean"`` or a ``tp_rank="0"`` filter where ranks repeat one value.
    """
    rows = frame[frame["metric"] == metric]
    if rows.empty:
        known = sorted(frame["metric"].unique())
        close = [m for m in known if metric.split(":")[-1] in m][:5]
        hint = f"; similar: {close}" if close else ""
        raise TelemetryError(f"metric {metric!r} is not in the scrapes ({len(known)} metrics){hint}")
    if labels:
        parsed = rows["labels"].map(json.loads)
        mask = parsed.map(lambda d: all(str(d.get(k)) == str(v) for k, v in labels.items()))
        rows = rows[mask]
    return rows.groupby("time")["value"].agg(agg).rename(metric)
