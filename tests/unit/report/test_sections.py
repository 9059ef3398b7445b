"""A report section that fails says so in the report, in its place."""

from __future__ import annotations

import pytest

from glm5lib.errors import ConfigError
from glm5lib.report import sections


@pytest.fixture
def providers(monkeypatch):
    monkeypatch.setattr(sections, "PROVIDERS", [])
    return sections.PROVIDERS


def test_a_failing_section_is_named_with_its_cause_and_the_others_stand(providers, tmp_path):
    def broken(run_dir):
        raise ValueError(f"no forecast in {run_dir.name}")

    sections.register(lambda run_dir: "## Fine\n\nall here\n")
    sections.register(broken)
    sections.register(lambda run_dir: None)
    sections.register(lambda run_dir: 42)
    out = sections.extra_sections(tmp_path)
    assert out[0].startswith("## Fine")
    assert "broken" in out[1] and "ValueError: no forecast in" in out[1] and out[1].startswith("## A section not written")
    assert "returned int, not Markdown" in out[2]
    assert len(out) == 3  # None: the run has nothing for that section


def test_a_provider_is_a_function_or_a_module_path(providers):
    with pytest.raises(ConfigError, match="neither a function nor"):
        sections.register("no_colon_here")
    sections.register("glm5lib.diagnose.section:section_markdown")
    sections.register("glm5lib.diagnose.section:section_markdown")
    assert providers == ["glm5lib.diagnose.section:section_markdown"]
