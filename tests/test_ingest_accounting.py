"""The ingest's accounting without Spark (kgbrink.kg.ingest_accounting): hand-worked tallies and changes,
and their invariants on random line counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.core.quarantine import OK, QUARANTINED
from kgbrink.kg.ingest_accounting import LineTally, SplitChanges, tables_written

SKIPPED = "skipped"


def _row(split, status, reason, lines):
    return {"split": split, "status": status, "reason": reason, "lines": lines}


# two triple splits over two files each (blocks counted apart), one alias file with a bad line
COUNTS = [
    _row("train", OK, None, 7),
    _row("train", OK, None, 3),
    _row("train", QUARANTINED, "too_few_fields", 2),
    _row("train", SKIPPED, "comment", 1),
    _row("test", OK, None, 4),
    _row("test", QUARANTINED, "unknown_entity", 1),
    _row("entity_aliases", OK, None, 5),
    _row("entity_aliases", QUARANTINED, "too_few_fields", 1),
]


def test_a_tally_worked_by_hand():
    tally = LineTally.of(COUNTS, ["train", "test"])
    assert (tally.lines, tally.all_lines, tally.all_bad, tally.good) == (18, 24, 4, 14)
    assert tally.bad_by_reason == {"too_few_fields": 3, "unknown_entity": 1}
    assert tally.counts() == {
        "lines": 18,
        "lines_per_split": {"train": 13, "test": 5},
        "quarantined": 3,
        "quarantined_by_reason": {"too_few_fields": 2, "unknown_entity": 1},
        "skipped": 1,
        "skipped_by_kind": {"comment": 1},
        "alias_lines": {"entity_aliases": 6},
        "alias_quarantined_by_reason": {"too_few_fields": 1},
        "bad_fraction": 4 / 24,
    }
    # 10 good train lines gave 8 triples, 4 test lines 4
    assert tally.duplicates({"train": 8, "test": 4}) == {"train": 2, "test": 0}


def test_no_lines_have_no_bad_fraction_and_a_split_without_lines_counts_zero():
    tally = LineTally.of([], ["train", "valid"])
    assert tally.counts()["bad_fraction"] == 0.0 and tally.counts()["lines_per_split"] == {"train": 0, "valid": 0}
    assert tally.duplicates({}) == {"train": 0, "valid": 0}


def test_a_first_ingest_adds_every_kept_triple():
    changes = SplitChanges.of(["train", "test"], {"train": 8}, None)
    assert changes == SplitChanges({"train": 8, "test": 0}, {"train": 0, "test": 0}, [])
    assert changes.warnings(None) == [] and changes.unchanged({"train": 8}) == {"train": 0, "test": 0}


def test_a_refresh_reports_its_changes_and_warns_of_a_lost_split():
    kept = {"train": 9, "test": 4}
    diff = {"train": {"added": 2, "removed": 1}, "valid": {"added": 0, "removed": 6}}
    changes = SplitChanges.of(["train", "test"], kept, diff)
    assert changes.added == {"train": 2, "test": 0, "valid": 0}
    assert changes.removed == {"train": 1, "test": 0, "valid": 6}
    assert list(changes.added) == ["train", "test", "valid"] and changes.missing == ["valid"]
    assert changes.warnings(3) == [
        "split 'valid' is in the dataset but not in this dump: its 6 triples are removed (triples version 3 keeps them)"
    ]
    assert changes.unchanged(kept) == {"train": 7, "test": 4, "valid": 0}
    # the same triples: nothing added or removed, nothing missing
    assert SplitChanges.of(["train"], {"train": 9}, {}) == SplitChanges({"train": 0}, {"train": 0}, [])


def test_tables_written_are_those_whose_version_moved_or_that_were_new():
    read = {"quarantine": 2, "entities": 5, "triples": 7}
    written = {"quarantine": 2, "entities": 6, "relations": 0, "triples": 7}
    names = ("quarantine", "entities", "relations", "triples")
    assert tables_written(read, written, names) == ["entities", "relations"]
    assert tables_written({**read, "relations": 0, "entities": 6}, written, names) == []


SPLITS = ["train", "valid", "test"]
rows = st.lists(
    st.builds(
        _row,
        st.sampled_from([*SPLITS, "entity_aliases", "relation_aliases"]),
        st.sampled_from([OK, QUARANTINED, SKIPPED]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 50),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(rows, st.lists(st.sampled_from(SPLITS), min_size=1, max_size=3, unique=True))
def test_every_line_is_counted_once_whatever_the_rows(counts, splits):
    tally = LineTally.of(counts, splits)
    by_split = {s: sum(r["lines"] for r in counts if r["split"] == s) for s in splits}
    summary = tally.counts()
    assert summary["lines_per_split"] == by_split and summary["lines"] == sum(by_split.values())
    assert tally.all_lines == sum(r["lines"] for r in counts if r["split"] in splits) + sum(
        r["lines"] for r in counts if r["split"] not in splits
    )
    triple_rows = [r for r in counts if r["split"] in splits]
    assert summary["quarantined"] + summary["skipped"] + tally.good == summary["lines"]
    assert tally.good == sum(r["lines"] for r in triple_rows if r["status"] == OK)
    assert (
        sum(tally.bad_by_reason.values())
        == tally.all_bad
        == sum(r["lines"] for r in counts if r["status"] == QUARANTINED)
    )
    assert 0.0 <= summary["bad_fraction"] <= 1.0


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(SPLITS), st.integers(0, 100)),
    st.none() | st.dictionaries(st.sampled_from([*SPLITS, "old"]), st.fixed_dictionaries(
        {"added": st.integers(0, 100), "removed": st.integers(0, 100)})),
)  # fmt: skip
def test_changes_cover_the_dump_splits_then_the_lost_ones(kept, diff):
    changes = SplitChanges.of(SPLITS, kept, diff)
    assert list(changes.added) == list(changes.removed) == [*SPLITS, *changes.missing]
    assert changes.missing == sorted(set(diff or {}) - set(SPLITS))
    assert len(changes.warnings(1)) == len(changes.missing)
    if diff is None:
        assert changes.added == {s: kept.get(s, 0) for s in SPLITS} and not any(changes.removed.values())
    else:
        assert all(changes.added[s] == diff.get(s, {"added": 0})["added"] for s in changes.added)
