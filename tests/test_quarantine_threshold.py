"""The one quarantine threshold every job applies (:func:`kgbrink.core.tracking.fail_past_bad_fraction`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.jobs.ingest import IngestError


def _summary() -> JobSummary:
    return JobSummary(job="test", params={})


def test_at_the_limit_passes_and_one_more_fails_naming_counts_reasons_and_where():
    summary = _summary()
    fail_past_bad_fraction(summary, {"a": 1, "b": 1}, 20, 0.1, "x.max_bad_fraction", "rows", "see q")
    with pytest.raises(JobFailed) as failed:
        fail_past_bad_fraction(summary, {"a": 2, "b": 1}, 20, 0.1, "x.max_bad_fraction", "rows", "see q", source="in")
    assert str(failed.value) == "in: 3 of 20 rows quarantined (> x.max_bad_fraction = 0.1; a: 2, b: 1); see q"
    assert failed.value.summary is summary


def test_the_error_class_and_the_share_in_the_verb():
    summary = _summary()
    with pytest.raises(IngestError, match=r"^2 of 6 input lines \(33.3333%\) are malformed \(> ingest") as failed:
        fail_past_bad_fraction(
            summary, {"wrong_field_count": 2}, 6, 0.001, "ingest.max_bad_fraction", "input lines", "nothing written",
            verb="({share}) are malformed", error=IngestError,
        )  # fmt: skip
    assert failed.value.summary is summary


@given(
    st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 50), max_size=7),
    st.integers(0, 400),
    st.floats(0, 1),
)
def test_fails_exactly_when_the_quarantined_rows_exceed_the_share(by_reason, good, limit):
    total = good + sum(by_reason.values())
    try:
        fail_past_bad_fraction(_summary(), by_reason, total, limit, "s", "rows", "see q")
        failed = False
    except JobFailed as exc:
        failed = True
        top = sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        assert ", ".join(f"{k}: {v}" for k, v in top) in str(exc)
    assert failed == (sum(by_reason.values()) > limit * total)


def test_the_commonest_reason_gets_one_example_asked_only_when_failing():
    asked = []

    def example(reason: str) -> str:
        asked.append(reason)
        return f"a {reason} row"

    fail_past_bad_fraction(_summary(), {"b": 2}, 20, 0.1, "x.max_bad_fraction", "rows", "see q", example=example)
    assert asked == []
    with pytest.raises(JobFailed) as failed:
        fail_past_bad_fraction(_summary(), {"a": 2, "b": 3}, 20, 0.1, "s", "rows", "see q", example=example)
    assert asked == ["b"] and str(failed.value).endswith("see q; e.g. b: a b row")
    with pytest.raises(JobFailed) as failed:
        fail_past_bad_fraction(_summary(), {"a": 3}, 20, 0.1, "s", "rows", "see q", example=lambda reason: None)
    assert str(failed.value).endswith("(> s = 0.1; a: 3); see q")
