"""Random token-id prompts are sized to the served model's vocabulary (a 2,048-id model given ids
up to 30,000 died at its first request on the H200)."""

from __future__ import annotations

import json

import pytest

from glm5lib.loadgen.prompts import DEFAULT_ID_RANGE, PromptSizer, id_range, model_vocab
from glm5lib.loadgen.settings import SweepSettings


def _model(tmp_path, config=None, tokenizer=None):
    folder = tmp_path / "model"
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def test_vocab_from_config_text_config_or_tokenizer(tmp_path):
    assert model_vocab(_model(tmp_path / "a", {"vocab_size": 2048}))[0] == 2048
    assert model_vocab(_model(tmp_path / "b", {"text_config": {"vocab_size": 151936}}))[0] == 151936
    assert model_vocab(_model(tmp_path / "c", None, {"model": {"vocab": {f"t{i}": i for i in range(330)}}}))[0] == 330
    assert model_vocab(tmp_path / "nowhere") is None and model_vocab(None) is None


@pytest.mark.parametrize("vocab", [330, 2048, 32768, 151936])
def test_ids_stay_inside_the_vocabulary(vocab):
    lo, hi = id_range(vocab)
    assert 0 < lo < hi <= vocab
    assert id_range(None) == DEFAULT_ID_RANGE


def test_a_small_vocabulary_gets_ids_it_holds_and_says_whence(tmp_path):
    folder = _model(tmp_path, {"vocab_size": 2048})
    sizer = PromptSizer(SweepSettings(input_len=256, output_len=8))
    assert "assumed" in sizer.source
    assert max(max(s.prompt) for s in sizer.workload(64, level=1)) >= 2048  # the old range overflows it
    sizer.from_model([None, "not-a-folder", str(folder)])
    ids = [i for s in sizer.workload(64, level=1) for i in s.prompt]
    assert max(ids) < 2048 and min(ids) >= 0
    assert "vocabulary 2,048 from" in sizer.source and str(folder) in sizer.source


def test_a_death_at_warm_up_names_the_ids_it_was_sent(tmp_path):
    sizer = PromptSizer(SweepSettings(input_len=8, output_len=4))
    assert "random token ids 1000-29999 (assumed" in sizer.crash_hint()
    assert "embedding gather out of bounds" in sizer.crash_hint()
    assert PromptSizer(SweepSettings(input_len=8, output_len=4, api="chat")).crash_hint() == ""
