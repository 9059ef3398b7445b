"""What a /metrics scrape keeps (glm5lib.telemetry.prometheus), on real vLLM's exposition text."""

from __future__ import annotations

from pathlib import Path

from glm5lib.telemetry.prometheus import MetricsScraper

TEXT = (Path(__file__).parents[2] / "fixtures" / "vllm" / "metrics-0.32.0-cpu.txt").read_text()


def test_between_snapshots_a_scrape_keeps_the_engines_gauges_and_counters_only():
    scraper = MetricsScraper("http://127.0.0.1:8000")
    every = scraper._parse(TEXT, 1.0, histograms=False)
    snapshot = scraper._parse(TEXT, 1.0, histograms=True)
    names = {row[1] for row in every}
    # what the evidence reads once a second stays
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:generation_tokens_total", "vllm:num_preemptions_total"} <= names
    # the serving process's own runtime, counters' creation times and histograms wait for a snapshot
    assert not [n for n in names if n.startswith(("python_", "process_", "http_")) or n.endswith(("_created", "_bucket"))]
    kept = {row[1] for row in snapshot}
    assert {"python_gc_objects_collected_total", "vllm:generation_tokens_created",
            "vllm:time_to_first_token_seconds_bucket"} <= kept
    assert len(every) * 3 < len(snapshot), (len(every), len(snapshot))
