"""The state the vLLM and transformers serve log parsers share."""

from glm5lib.engines.lineparser import LineParser
from glm5lib.engines.transformers.log import TransformersParser
from glm5lib.engines.vllm.log import VllmParser
from glm5lib.logs.model import parser_facts


class _Recording(LineParser):
    def __init__(self):
        super().__init__("toy")
        self.calls = []

    def feed(self, lines, final=True):
        self.calls.append((list(lines), final))


def test_a_fresh_parser_holds_the_facts_every_log_reports_and_names_its_engine():
    p = _Recording()
    assert p.startup == {"engine": "toy"}
    assert parser_facts(p) == {"server_args": {}, "ready_at": None, "skipped": 0, "skipped_examples": [],
                               "became_ready": False, "lines": 0, "first_time": None, "last_time": None}
    assert (p.errors, p.http_rows, p.retract_rows, p.stopping, p.incremental) == ([], [], [], False, False)


def test_feed_bulk_feeds_complete_lines():
    p = _Recording()
    p.feed_bulk(["a", "b"])
    assert p.calls == [(["a", "b"], False)]


def test_the_engines_parsers_start_from_it():
    assert VllmParser().startup == {"engine": "vllm"}
    assert TransformersParser().startup == {"engine": "transformers"}
