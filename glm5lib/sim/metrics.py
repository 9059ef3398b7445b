"""Prometheus ``/metrics`` for the stand-in, with SGLang's metric names.

A custom collector reads the scheduler's counters at scrape time, so nothing is updated per
token; histograms take one weighted observation per step (see
:class:`glm5lib.sim.scheduler.Histogram`). Names follow SGLang's ``metrics/collector.py``
(0.5.x): gauges ``sglang:num_running_reqs`` ..., counters ``sglang:prompt_tokens_total`` ...,
histograms ``sglang:time_to_first_token_seconds`` ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

if TYPE_CHECKING:
    from glm5lib.sim.scheduler import SimScheduler

__all__ = ["render_metrics"]

_LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank"]


class _Collector:
    def __init__(self, sched: SimScheduler, model_name: str):
        self.sched = sched
        self.model_name = model_name

    def collect(self):
        s = self.sched
        labels = [self.model_name, "unified", "0", "0"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=_LABELS)
            g.add_metric(labels, float(value))
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            c.add_metric(labels, float(value))
            return c

        hit = s.cached_total / s.prompt_total if s.prompt_total else 0.0
        yield gauge("sglang:num_running_reqs", "The number of running requests.", len(s.running))
        yield gauge("sglang:num_used_tokens", "The number of used tokens.", s.used)
        yield gauge("sglang:token_usage", "The token usage.", s.token_usage)
        yield gauge("sglang:gen_throughput", "The generation throughput (token/s).", s.last_gen_throughput)
        yield gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(s.waiting))
        yield gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hit)
        yield gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache.",
                    s.capacity)
        yield gauge("sglang:num_retracted_reqs", "The number of retracted requests.", s.retracted_total)
        # SGLang creates both gauges whatever the launch and reports 0 without speculative decoding;
        # with it, the figures its decode lines carry
        accept = s.s.shape.accept or (0.0, 0.0)
        yield gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
                    accept[0])
        yield gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.", accept[1])
        # as SGLang counts them: prompt and generation tokens when a request finishes; the tokens each
        # forward computes as it runs in realtime_tokens_total, by mode
        yield counter("sglang:prompt_tokens", "Number of prefill tokens processed.", s.finished_prompt)
        yield counter("sglang:generation_tokens", "Number of generation tokens processed.", s.finished_generated)
        realtime = CounterMetricFamily("sglang:realtime_tokens", "Total number of tokens processed (updated on "
                                       "each log interval). mode: prefill_compute, prefill_cache, decode.",
                                       labels=[*_LABELS, "mode"])
        for mode, value in (("prefill_compute", s.prompt_total - s.cached_total), ("prefill_cache", s.cached_total),
                            ("decode", s.generated_total)):
            realtime.add_metric([*labels, mode], float(value))
        yield realtime
        yield counter("sglang:cached_tokens", "Number of cached prompt tokens.", s.cached_total)
        yield counter("sglang:num_requests", "Number of requests processed.", s.finished_total)
        yield counter("sglang:num_aborted_requests", "Number of requests aborted.", s.aborted_total)
        for name, doc, hist in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft),
            ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.itl),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
             s.e2e),
        ):
            h = HistogramMetricFamily(name, doc, labels=_LABELS)
            h.add_metric(labels, buckets=hist.buckets(), sum_value=hist.sum)
            yield h


def render_metrics(sched: SimScheduler, model_name: str) -> tuple[bytes, str]:
    """The Prometheus text exposition of the stand-in scheduler's state and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(sched, model_name))
    return generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8"
