"""The generated references in docs/ (jobs, settings, tables) are current."""

from __future__ import annotations

from kgbrink.core.reference_docs import stale
from tests.conftest import PROJECT_ROOT


def test_generated_references_are_current():
    assert stale() == [], "run `.venv/bin/python -m kgbrink.core.reference_docs` and commit docs/"


def _constants(module) -> set[str]:
    """The module's reason codes: its upper-case string constants that are snake_case words."""
    return {
        value
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and value.islower() and "_" in value and " " not in value
    }


def test_formats_lists_every_quarantine_reason():
    from kgbrink.kg import ingest
    from kgbrink.mcq import scoring as mcq_scoring
    from kgbrink.okgqa import questions as okgqa_questions
    from kgbrink.probe import rankfiles, ranking
    from kgbrink.synthkgqa import questions as synthkgqa_questions

    reasons = (
        _constants(ingest)
        | _constants(rankfiles)
        | set(ranking.QUARANTINE_REASONS)
        | set(mcq_scoring.REASONS)
        | set(okgqa_questions.LINE_REASONS + okgqa_questions.KEY_REASONS)
        | set(synthkgqa_questions.REASONS)
    )
    text = (PROJECT_ROOT / "docs" / "formats.md").read_text()
    assert len(reasons) > 40
    assert sorted(r for r in reasons if f"`{r}`" not in text) == []


def test_readme_and_benchmarks_stay_short():
    """Issue 46: README at most 200 lines, BENCHMARKS.md at most 170 (history goes to benchmarks/journal.md)."""
    lines = {name: len((PROJECT_ROOT / name).read_text().splitlines()) for name in ("README.md", "BENCHMARKS.md")}
    assert lines["README.md"] <= 200 and lines["BENCHMARKS.md"] <= 170, lines
