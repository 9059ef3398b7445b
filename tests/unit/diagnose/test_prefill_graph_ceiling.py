"""A prefill graph ceiling of the engine's own, below the chunk: SGLang captures at most 2,048
prefill tokens for models with MLA attention in 0.5.16 (8,192 in 0.5.23), which the mission's
models (GLM-5, Kimi K2) have, so steps above it run eager with the chunk on the grid. The
diagnosis says so apart from a chunk between two captured sizes and does not call the chunk
wrong; the forecast withholds a chunk whose full chunks would change between eager and graphed.

The MLA phase here is the H100 run at a chunk of 8,192 (``data/examples/h100-sglang-tune-in-turn/
chunk-grid/grid-3``, a model without MLA) with its server log rewritten as an MLA model's would
read under SGLang 0.5.16: the start-up capture list ends at 2,048 and the 86 prefill steps of more
than 2,048 new tokens say ``cuda graph: False``. Their logged rates are the graphed run's, so no
test reads a cost from them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from glm5lib import rundir
from glm5lib.diagnose import diagnose
from glm5lib.diagnose.evidence import load_evidence
from glm5lib.diagnose.model import PerfModel
from glm5lib.diagnose.model.prefill import off_graph_sizes, prefill_ceiling
from glm5lib.diagnose.rules.batch import rule_prefill_graph
from glm5lib.engines import get
from glm5lib.engines.sglang.config import prefill_graph_sizes

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-tune-in-turn"
CHUNK_8K = EXAMPLE / "chunk-grid" / "grid-3"
CHUNK_512 = EXAMPLE / "tune" / "lever-1-chunked_prefill_size" / "tune-1"
CHUNK_530 = EXAMPLE / "tune" / "lever-1-chunked_prefill_size" / "tune-2"
MLA_CEILING = 2048
SGLANG = get("sglang")
GRID = SGLANG.prefill_grid("0.5.16")


def _as_mla(folder: Path, *, keep_list: bool = True) -> Path:
    """``CHUNK_8K``'s phase with its log as an MLA model's under 0.5.16 (see the module's text)."""
    phase = folder / "mla"
    shutil.copytree(CHUNK_8K, phase)
    log = phase / rundir.SERVER_LOG
    lines = []
    for line in log.read_text().splitlines(keepends=True):
        if "Capture target prefill CUDA graph begin" in line:
            if not keep_list:
                continue
            line = re.sub(r"num_tokens=\[[^\]]*\]", f"num_tokens={prefill_graph_sizes(MLA_CEILING)}", line)
        m = re.search(r"Prefill batch, .*#new-token: (\d+),", line)
        if m and int(m.group(1)) > MLA_CEILING:
            line = line.replace("cuda graph: True", "cuda graph: False")
        lines.append(line)
    log.write_text("".join(lines))
    return phase


def test_the_ceiling_is_read_only_where_the_log_shows_one_that_is_not_the_chunks():
    assert prefill_ceiling(prefill_graph_sizes(2048), GRID, 8192) == 2048  # MLA at a chunk of 8,192
    assert prefill_ceiling(prefill_graph_sizes(2048), GRID, 512) == 2048  # 0.5.16's MLA ceiling whatever the chunk
    assert prefill_ceiling(prefill_graph_sizes(8192), GRID, 8192) is None  # the chunk's own
    assert prefill_ceiling(prefill_graph_sizes(530), GRID, 530) is None  # off the grid: the grid's size under it
    assert prefill_ceiling([], GRID, 8192) is None and prefill_ceiling(prefill_graph_sizes(2048), GRID, None) is None


@pytest.mark.parametrize("keep_list", [True, False])
def test_a_ceiling_below_the_chunk_is_the_engines_and_the_chunk_is_not_called_wrong(tmp_path, keep_list):
    phase = _as_mla(tmp_path, keep_list=keep_list)
    frame = diagnose(tmp_path, phase=phase.name, write=False)
    row = frame[frame["rule"] == "prefill_graph"].iloc[0]
    assert row["finding"] == ("prefill steps of more than 2048 tokens run without CUDA graphs: the engine captures "
                              "prefill graphs up to 2048 tokens, below the chunk of 8192")
    assert "cuda graph: False on 86 of the 86 prefill lines of more than 2048 tokens" in row["evidence"]
    assert ("the start-up log's list of captured sizes ends at 2048" in row["evidence"]) == keep_list
    assert "SGLang's own" in row["suggestion"] and "cuda_graph_max_bs_prefill raises it" in row["suggestion"]
    assert "chunked_prefill_size 2048 runs every full chunk under a graph" in row["suggestion"]
    assert "set chunked_prefill_size to a size the engine captures" not in row["suggestion"]
    # said, but below a chunk that is off the grid, which is the user's to mend
    off = diagnose(EXAMPLE / "tune" / "lever-1-chunked_prefill_size", phase="tune-2", write=False)
    assert row["severity"] < off[off["rule"] == "prefill_graph"].iloc[0]["severity"]


def test_the_unchanged_run_draws_nothing(tmp_path):
    assert rule_prefill_graph(load_evidence(EXAMPLE / "chunk-grid", phase="grid-3")) == []


def _graph_reasons(forecast) -> list[str]:
    return [u for u in forecast.unseen_changes if "CUDA graph" in u]


def test_a_forecast_across_the_ceiling_is_withheld_and_one_under_it_is_not(tmp_path):
    """0.5.16 lists 2,048 for an MLA model whatever its chunk: the 512-token chunk's launch
    (``tune/.../tune-1``, two levels) with that list, as an MLA model's log would have it."""
    phase = tmp_path / "mla-512"
    shutil.copytree(CHUNK_512, phase)
    log = phase / rundir.SERVER_LOG
    log.write_text(re.sub(r"num_tokens=\[[^\]]*\]", f"num_tokens={prefill_graph_sizes(MLA_CEILING)}", log.read_text()))
    model = PerfModel.fit_phase(phase)
    assert model.bounds.prefill_captured == tuple(prefill_graph_sizes(MLA_CEILING))
    kw = {"input_len": 1536, "output_len": 97}
    (up,) = model.forecast({"chunked_prefill_size": 4096}, [128], **kw)
    assert not up.given and any("(2048 tokens, the start-up log's list)" in u for u in _graph_reasons(up))
    for graphed in (1024, 2048):
        (f,) = model.forecast({"chunked_prefill_size": graphed}, [128], **kw)
        assert _graph_reasons(f) == [], f.unseen_changes
    # without the MLA list the same 4,096 is a captured size, as the chunk's own grid has it
    (plain,) = PerfModel.fit_phase(CHUNK_512).forecast({"chunked_prefill_size": 4096}, [128], **kw)
    assert _graph_reasons(plain) == [], plain.unseen_changes


def test_a_chunk_the_phase_ran_eager_gains_a_graph_the_evidence_lacks():
    """From the 530-token chunk's launch (every full chunk eager) 512 would run under a graph; from a
    chunk above an MLA ceiling, 2,048 would, and 4,096 or 3,000 stay eager as the phase's did."""
    args = {"chunked_prefill_size": 8192, "cuda_graph_backend_prefill": "breakable"}
    listed = prefill_graph_sizes(MLA_CEILING)
    reason = off_graph_sizes(SGLANG, args, 2048, captured=listed, base_chunk=8192)
    assert reason and "where the phase's full chunks of 8192 ran eager: a gain not in the evidence" in reason
    assert off_graph_sizes(SGLANG, args, 4096, captured=listed, base_chunk=8192) is None
    assert off_graph_sizes(SGLANG, args, 3000, captured=listed, base_chunk=8192) is None
    reason = off_graph_sizes(SGLANG, args, 512, captured=prefill_graph_sizes(512), base_chunk=530)
    assert reason and "full chunks of 530 ran eager" in reason


def test_off_graph_sizes_across_a_ceiling_the_log_showed_at_a_smaller_chunk():
    """0.5.16 lists 2,048 for an MLA model whatever its chunk: from a 512-token chunk, 4,096 would run
    eager where 512 ran under a graph; 1,024 stays graphed."""
    listed = prefill_graph_sizes(2048)
    args = {"chunked_prefill_size": 512, "cuda_graph_backend_prefill": "breakable"}
    reason = off_graph_sizes(SGLANG, args, 4096, captured=listed, base_chunk=512)
    assert reason and "above the largest prefill step the engine captures as a CUDA graph (2048 tokens" in reason
    assert off_graph_sizes(SGLANG, args, 1024, captured=listed, base_chunk=512) is None
    assert off_graph_sizes(SGLANG, args, 4096, captured=prefill_graph_sizes(512), base_chunk=512) is None
    assert PerfModel.fit_phase(CHUNK_512).bounds.prefill_captured == tuple(prefill_graph_sizes(512))
