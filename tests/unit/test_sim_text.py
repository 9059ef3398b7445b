"""The stand-in's token text: any span reads the same as its pieces, across the cycle's end."""

import json

from glm5lib.sim.text import TokenText


def test_spans_cross_the_cycle_in_runs_no_longer_than_it():
    t = TokenText(seed=1, cycle=5)
    assert list(t._spans(3, 15)) == [(3, 5), (3, 5), (3, 2)]
    assert list(t._spans(4, 4)) == []


def test_text_ids_and_json_agree_on_every_span():
    t = TokenText(seed=2, cycle=7)
    for start in range(0, 9):
        for end in range(start - 1, start + 20):
            ids = t.ids(start, end)
            assert json.loads(t.ids_json(start, end)) == ids
            assert len(ids) == max(0, end - start)
            pieces = [t.text(k, k + 1) for k in range(start, end)]
            assert t.text(start, end) == "".join(pieces)
