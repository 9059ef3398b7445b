"""Prefill chunks between two sizes SGLang captures as prefill CUDA graphs, on one H100
(``data/examples/h100-sglang-tune-in-turn/``): chunks of 530 and 1,060 ran every full chunk eager.
The diagnosis names it from the log's prefill lines and offers the captured sizes on either side;
no other recorded phase, of any engine or release, draws it."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5lib import rundir
from glm5lib.diagnose import diagnose
from glm5lib.diagnose.evidence import load_evidence
from glm5lib.diagnose.model import PerfModel
from glm5lib.diagnose.rules.batch import rule_prefill_graph
from glm5lib.errors import ConfigError, DiagnosisError

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"
EXAMPLE = EXAMPLES / "h100-sglang-tune-in-turn"
CHUNKS = EXAMPLE / "tune" / "lever-1-chunked_prefill_size"


@pytest.mark.parametrize(("phase", "ceiling", "above"), [("tune-2", 512, 576), ("tune-3", 1024, 1280)])
def test_a_chunk_between_two_captured_sizes_is_named_with_the_sizes_either_side(phase, ceiling, above):
    frame = diagnose(CHUNKS, phase=phase, write=False)
    row = frame[frame["rule"] == "prefill_graph"].iloc[0]
    assert row["finding"] == f"prefill steps of more than {ceiling} tokens run without CUDA graphs"
    assert "cuda graph: False on" in row["evidence"] and f"the largest size captured under it is {ceiling}" in row["evidence"]
    assert f"set chunked_prefill_size to a size the engine captures as a prefill graph, {ceiling} or {above}" in row["suggestion"]
    # the eager steps' own rate against the graph steps' near the ceiling, from the same log
    ratio = float(row["evidence"].rsplit("(", 1)[1].split("x)")[0])
    assert ratio > 3


def test_no_other_recorded_phase_draws_it():
    """Every phase folder of the recorded examples with a server log (real SGLang on H100 and H200,
    the stand-in, vLLM, transformers serve): only the two eager chunks."""
    drawn, read = [], 0
    for log in sorted(EXAMPLES.rglob(rundir.SERVER_LOG)):
        try:
            ev = load_evidence(log.parent.parent, phase=log.parent.name, partial=True)
        except (DiagnosisError, ConfigError, ValueError, OSError):  # not a phase folder the evidence reads
            continue
        read += 1
        if rule_prefill_graph(ev):
            drawn.append(log.parent.relative_to(EXAMPLES).as_posix())
    assert read > 50
    assert drawn == [f"h100-sglang-tune-in-turn/tune/lever-1-chunked_prefill_size/{p}" for p in ("tune-2", "tune-3")]


def test_a_forecast_of_a_chunk_between_two_captured_sizes_is_withheld_and_says_why():
    """From the 512-token chunk's launch the model would read 530 as 512 with 3.5% wider forwards;
    it ran at 41% of the throughput. A captured size is forecast as before (here withheld too, for
    the prefill forwards' fixed part, but not for this)."""
    model = PerfModel.fit_phase(CHUNKS / "tune-1")
    (off,) = model.forecast({"chunked_prefill_size": 530}, [128], input_len=1536, output_len=97)
    assert not off.given
    assert any("not a size the engine captures as a prefill CUDA graph" in u and "512 and 576 are captured" in u
               for u in off.unseen_changes)
    (on,) = model.forecast({"chunked_prefill_size": 1024}, [128], input_len=1536, output_len=97)
    assert not any("prefill CUDA graph" in u for u in on.unseen_changes)


def test_the_start_up_reading_keeps_the_prefill_token_counts_apart_from_the_decode_batches():
    """0.5.16 logs its prefill capture as ``num_tokens=[...]`` and its decode capture as
    ``num_tokens_per_req=1, bs=[...]``: the first is the prefill grid, the second the decode batches."""
    from glm5lib.engines.sglang.config import prefill_graph_sizes
    from glm5lib.logs import parse_log

    startup = parse_log(CHUNKS / "tune-2" / rundir.SERVER_LOG).startup
    assert startup["cuda_graph_num_tokens"] == prefill_graph_sizes(530)
    assert startup["cuda_graph_batch_sizes"] == [1, 2, 4, 8, 12, 16, 24, 32]
