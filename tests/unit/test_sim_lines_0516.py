"""The stand-in asked for SGLang 0.5.16 writes its lines in the shape a real 0.5.16 server wrote them
(tests/fixtures/logs/sglang-0.5.16-h200.log, recorded on an H200): the same words and separators in
the same order, numbers aside. tests/integration/contract checks the same lines against 0.5.16's
source, where its environment is built."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glm5lib.sim import lines

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "sglang-0.5.16-h200.log"


def _shape(line: str) -> str:
    """The line with its values blanked: lists, numbers, booleans and the model's class name."""
    line = re.sub(r"\[[\d, ]*\]", "[L]", line)
    line = re.sub(r"type=\w+", "type=T", line)
    line = re.sub(r"\b(True|False)\b", "B", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)


def _real(head: str) -> str:
    for raw in REAL.read_text().splitlines():
        message = raw.split("] ", 1)[-1]
        if message.startswith(head):
            return message
    raise AssertionError(f"no {head!r} line in {REAL.name}")


def _standin(release: str) -> dict[str, str]:
    """The stand-in's start-up and stats lines as it writes them for ``release``, under the real log's heads."""
    begin, end = lines.capture_lines(release, sizes=[1, 2, 4, 8], avail_before=26.16, elapsed=7.68,
                                     mem_usage=0.07, avail_after=26.09)
    return {
        "Init torch distributed ends": lines.init_distributed_end_line(release, elapsed=0.28, mem_usage=0.09),
        "Load weight end": lines.load_weight_end_line(release, elapsed=0.34, model_type="GlmMoeDsaForCausalLM",
                                                      avail=124.51, mem_usage=14.62),
        "Capture target decode CUDA graph begin": begin[0],
        "Capture target decode CUDA graph end": end[-1],
        "Decode batch": lines.decode_line(release, running=64, tokens=24730, usage=0.01, graph=True,
                                          gen_throughput=11335.32, queue=0),
        "Prefill batch": lines.prefill_line(release, new_seq=1, new_token=28, cached_token=0, usage=0.0,
                                            running=0, queue=0, pending_token=0, graph=True, input_throughput=2.75),
    }


HEADS = list(_standin("0.5.16"))
# the lines 0.5.9 wrote alike (the stand-in wrote 0.5.9's lines for 0.5.16 before it knew 0.5.16)
LIKE_0_5_9 = {"Init torch distributed ends", "Decode batch"}


@pytest.mark.parametrize("head", HEADS)
def test_each_line_has_the_shape_real_0_5_16_wrote(head):
    assert _shape(_standin("0.5.16")[head]) == _shape(_real(head))
    assert (_shape(_standin("0.5.9")[head]) == _shape(_real(head))) == (head in LIKE_0_5_9)


def test_0_5_16_is_its_own_generation_between_0_5_9_and_0_5_23():
    assert lines.line_generation("0.5.16") == "0.5.16" and lines.line_generation("0.5.18") == "0.5.16"
    assert lines.line_generation("0.5.12") == "0.5.9" and lines.line_generation("0.5.23") == "0.5.23"
    assert lines.writes_since("0.5.16", "0.5.16") and not lines.writes_since("0.5.9", "0.5.16")
    # the prefill graphs 0.5.16 captures by default (the real log's prefill lines say True up to 8,192 tokens)
    shape = lines.line_shape("0.5.16", {"chunked_prefill_size": 8192}, graphs_off=False)
    assert shape.prefill_graph_tokens == 8192
    assert lines.line_shape("0.5.9", {"chunked_prefill_size": 8192}, graphs_off=False).prefill_graph_tokens == 0
