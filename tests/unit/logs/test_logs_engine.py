"""Tests for glm5lib.logs.engine: a log is handed to the adapter of the engine that wrote it.

A toy engine, written to a module on sys.path the way a new engine's adapter would be, shows
that an engine plugs in by name alone and fills the same ServerLog tables.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import logs
from glm5lib.logs import engine as log_engine

FIX = Path(__file__).parents[2] / "fixtures" / "logs"

TOY_MODULE = '''
import pandas as pd

from glm5lib.logs import ServerLog
from glm5lib.logs.engine import LogEngine
from glm5lib.logs.tables import errors_frame, http_frame


class ToyParser:
    def __init__(self, date=None, *, incremental=True):
        self.rows = []
        self.lines = 0

    def feed(self, lines, final=True):
        for line in lines:
            self.lines += 1
            if line.startswith("step "):
                fields = dict(part.split("=") for part in line.split()[1:])
                self.rows.append({"running_req": int(fields["running"]), "token_usage": float(fields["kv"])})

    def feed_bulk(self, lines):
        self.feed(lines, final=False)

    def finish(self):
        pass

    def build(self):
        return ServerLog(decode=pd.DataFrame(self.rows), errors=errors_frame([]), http=http_frame([]), lines=self.lines)


ENGINE = LogEngine(name="toy", detect=lambda head: "TOY ENGINE" in head, new_parser=ToyParser)
'''


@pytest.fixture
def toy_engine(tmp_path, monkeypatch):
    (tmp_path / "toy_log_engine.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = {"toy": "toy_log_engine", **log_engine.ENGINE_MODULES}
    monkeypatch.setattr(log_engine, "ENGINE_MODULES", modules)
    return "toy"


TOY_LOG = "TOY ENGINE v1 starting\nstep running=3 kv=0.25\nstep running=5 kv=0.5\n"


def test_auto_hands_a_log_to_the_engine_that_wrote_it(toy_engine, tmp_path):
    assert "toy" in logs.available_engines() and "sglang" in logs.available_engines()
    slog = logs.parse_log(TOY_LOG)
    assert slog.decode["running_req"].tolist() == [3, 5]
    assert slog.decode["token_usage"].tolist() == [0.25, 0.5]
    # An SGLang log still goes to the SGLang adapter, auto or named.
    sglang_text = (FIX / "sglang-0.5.log").read_text()
    auto, named = logs.parse_log(sglang_text), logs.parse_log(sglang_text, engine="sglang")
    assert len(auto.decode) == 7
    pd.testing.assert_frame_equal(auto.decode, named.decode)
    # Naming an engine overrides detection: the toy parser reads no SGLang line.
    assert logs.parse_log(sglang_text, engine="toy").decode.empty
    # The follower detects from the first lines it reads.
    path = tmp_path / "toy.log"
    follower = logs.follow_log(path)
    assert follower.update().decode.empty  # nothing written yet
    path.write_text(TOY_LOG)
    assert follower.update().decode["running_req"].tolist() == [3, 5]


def test_unknown_engine_is_refused_with_the_valid_names(tmp_path):
    with pytest.raises(ValueError, match=r"unknown log engine 'tgi': valid values are 'auto', ") as refused:
        logs.parse_log("[2025-01-01 00:00:00] x\n", engine="tgi")
    # in detection order, which puts adapters registered in this process first (so not a fixed order)
    assert refused.value.valid[0] == "auto" and {"vllm", "transformers", "sglang"} <= set(refused.value.valid)
    for name in refused.value.valid:
        assert repr(name) in str(refused.value)
    with pytest.raises(ValueError, match="unknown log engine"):
        logs.follow_log(tmp_path / "server.log", engine="tgi")


def test_an_engine_whose_adapter_is_not_installed_is_not_offered(monkeypatch):
    modules = {"absent": "glm5lib.logs.no_such_engine_module", **log_engine.ENGINE_MODULES}
    monkeypatch.setattr(log_engine, "ENGINE_MODULES", modules)
    assert "absent" not in logs.available_engines()
    assert logs.parse_log((FIX / "sglang-0.5.log").read_text()).decode.shape[0] == 7


def test_iter_log_keeps_a_vllm_v0_prefix_hit_rate_that_follows_a_piece_boundary():
    # V0 prints the prefix cache hit rate on a line of its own after the stats line it
    # belongs to; here a piece ends exactly between the two.
    filler = "".join(
        f"2025-07-08 17:23:59 - vllm.engine.async_llm_engine - INFO - Added request {k:06d}.\n" for k in range(1200)
    )
    stats = (
        "2025-07-08 17:24:{s:02d} - vllm.engine.metrics - INFO - Avg prompt throughput: 2.8 tokens/s, Avg generation "
        "throughput: 0.1 tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.2%, "
        "CPU KV cache usage: 0.0%.\n"
    )
    hit = "2025-07-08 17:24:{s:02d} - vllm.engine.metrics - INFO - Prefix cache hit rate: GPU: {g}%, CPU: 0.00%\n"
    head = filler + stats.format(s=0, r=1)
    text = head + hit.format(s=0, g="52.22") + stats.format(s=5, r=2) + hit.format(s=5, g="10.00") + filler
    whole = logs.parse_log(text, engine="vllm")
    assert whole.decode["cache_hit_rate"].tolist() == [0.5222, 0.1]
    pieces = list(logs.iter_log(text.encode(), engine="vllm", piece_bytes=len(head.encode())))
    assert len(pieces) > 2 and pieces[0].lines == head.count("\n")  # the boundary is where it should be
    decode = pd.concat([p.decode for p in pieces if len(p.decode)], ignore_index=True)
    assert decode["cache_hit_rate"].tolist() == [0.5222, 0.1]
    assert decode["running_req"].tolist() == whole.decode["running_req"].tolist()


def test_no_log_module_imports_another_ones_underscore_names():
    # What the modules of glm5lib.logs share is public within the package (chunked's access
    # regex and line reader, scheduler's shapes, text's prefix regexes...).
    package = Path(logs.__file__).parent
    private = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("glm5lib"):
                private += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, private
