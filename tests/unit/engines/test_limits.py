"""The one vocabulary of limits: each adapter maps its own fields, flags, start-up facts and changes
onto the neutral names, and the performance model reads only those."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5lib import engines
from glm5lib.diagnose.model import PerfModel
from glm5lib.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"


def test_each_engine_spells_the_running_cap_its_own_way():
    assert engines.get("sglang").capabilities.field("running_cap") == "max_running_requests"
    assert engines.get("vllm").capabilities.field("running_cap") == "max_num_seqs"
    assert engines.get("vllm").capabilities.flag("token_budget") == "--max-num-batched-tokens"
    assert engines.get("command").capabilities.field("running_cap") is None
    with pytest.raises(ConfigError, match="valid: running_cap"):
        engines.get("sglang").capabilities.field("max_running_requests")


def test_a_field_or_a_flag_of_any_engine_names_its_limit():
    assert engines.limit_of("--max-num-seqs") == "running_cap"
    assert engines.limit_of("max_running_requests") == "running_cap"
    assert engines.limit_of("cuda_graph_max_bs_decode") == "graph_max_batch"  # SGLang 0.5.23's name
    assert engines.limit_of("schedule_policy") is None
    assert engines.topic("--max-num-seqs") == engines.topic("max_running_requests") == "running_cap"
    assert engines.topic("schedule_policy") == "schedule_policy"


def test_limits_come_from_the_start_up_line_before_the_arguments():
    sglang = engines.get("sglang")
    lim = sglang.limits({"max_running_requests": 64}, {"max_running_requests": 48, "max_total_num_tokens": 9000,
                                                       "cuda_graph_batch_sizes": [1, 2, 4, 8]})
    assert (lim.running_cap, lim.source("running_cap")) == (48, "start-up log line")
    assert lim.kv_tokens == 9000 and lim.graph_max_batch == 8 and lim.graphs_off is False
    # capture that stopped at the cap says only that the cap bounded it
    assert sglang.limits({}, {"max_running_requests": 8, "cuda_graph_batch_sizes": [1, 2, 4, 8]}).graph_max_batch is None
    # graphs off in 0.5.23's per-phase spelling
    assert sglang.limits({"cuda_graph_backend_decode": "disabled"}, {}).graphs_off is True


def test_arguments_read_back_from_an_argv_are_read_as_fields():
    lim = engines.get("vllm").limits({"--max-num-seqs": 16, "--max-num-batched-tokens": "512"}, {})
    assert (lim.running_cap, lim.token_budget) == (16, 512)
    # an engine launched from a command: its flags read in whichever engine's vocabulary has them
    assert engines.limits_of("command", {"--max-num-seqs": 16}).running_cap == 16
    assert engines.limits_in({"max_num_seqs": 16}).running_cap == 16


def test_a_change_sets_every_limit_its_field_sets():
    # transformers serve's one budget is its token budget and bounds its running batch
    found, others = engines.limit_changes({"--cb-max-batch-tokens": None, "foo": 1}, "transformers")
    assert found == {"running_cap": None, "token_budget": None} and others == {"foo": 1}
    # vLLM's pool in blocks of block_size tokens
    found, _ = engines.limit_changes({"num_gpu_blocks_override": 10, "block_size": 32}, "vllm")
    assert found["kv_tokens"] == 320
    # a neutral name is understood by every engine
    assert engines.limit_changes({"running_cap": "256"}, "sglang")[0] == {"running_cap": 256}


def test_removing_transformers_serves_budget_lifts_both_bounds_in_the_forecast():
    model = PerfModel.fit_phase(EXAMPLES / "h200-transformers-serve" / "baseline")
    assert model.engine == "transformers"
    assert (model.bounds.running_cap, model.bounds.token_budget) == (64, 64)  # from the argv it ran with
    [f] = model.forecast({"--cb-max-batch-tokens": None}, [128])
    assert f.binding_limit == "load" and f.running == 128
