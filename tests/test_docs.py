"""The generated references in docs/ (jobs, settings, tables) are current."""

from __future__ import annotations

from kgbrink.core.reference_docs import stale


def test_generated_references_are_current():
    assert stale() == [], "run `.venv/bin/python -m kgbrink.core.reference_docs` and commit docs/"
