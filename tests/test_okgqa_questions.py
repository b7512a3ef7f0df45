"""OKGQA question files: every field's JSON type checked, each bad line quarantined with its own reason."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.core.files import read_lines
from kgbrink.okgqa import questions


def _parse(spark, lines: list[str], cap: int = 3) -> dict[int, tuple]:
    """line number -> (qid, entities, reason) of :func:`questions.parse_lines` on ``lines`` written to a file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "questions.jsonl"
        path.write_bytes(b"\n".join(line.encode("utf-8", "surrogatepass") for line in lines) + b"\n")
        rows = questions.parse_lines(read_lines(spark, {"questions": [str(path)]}), cap).collect()
    return {r.line_number: (r.qid, r.entities, r.reason) for r in rows}


def test_each_wrong_type_has_its_own_reason(spark):
    lines = [
        '{"qid": "a", "entities": ["Q1", "Q2"]}',  # 1 good
        '{"qid": 7, "entities": ["Q1"]}',  # 2 an integer id is its text
        '{"qid": true, "entities": ["Q1"]}',  # 3
        '{"id": 7.0, "entities": ["Q1"]}',  # 4
        '{"qid": "b", "entities": [null, "Q1"]}',  # 5 the null is not dropped silently
        '{"qid": "c", "entities": []}',  # 6 missing, not "no known entity"
        '{"qid": "d", "entities": [["Q1"], "Q2"]}',  # 7 a list where a key belongs
        '{"qid": "e", "entities": "Q1"}',  # 8
        '{"qid": "f", "entities": ["Q1", "Q2", "Q3", "Q4"]}',  # 9 over the cap of 3
        '{"qid": "g", "qid": "h", "entities": ["Q1"]}',  # 10 a repeated key
        '["a", ["Q1"]]',  # 11
        '{"qid": null, "id": "i", "entities": ["Q1"]}',  # 12 id stands in for a null qid
        '{"entities": ["Q1"]}',  # 13
        '{"qid": "a", "entities": ["Q3"]}',  # 14 a repeated qid
        "",  # blank: not a record
        '{"qid": {"x": 1}, "entities": ["Q1"]}',  # 16
    ]
    got = _parse(spark, lines)
    assert got == {
        1: ("a", ["Q1", "Q2"], None),
        2: ("7", ["Q1"], None),
        3: (None, None, "bad_qid"),
        4: (None, None, "bad_qid"),
        5: ("b", None, "bad_entities"),
        6: ("c", None, "missing_entities"),
        7: ("d", None, "bad_entities"),
        8: ("e", None, "bad_entities"),
        9: ("f", None, "too_many_entities"),
        10: (None, None, "malformed_json"),
        11: (None, None, "malformed_json"),
        12: ("i", ["Q1"], None),
        13: (None, None, "missing_qid"),
        14: ("a", ["Q3"], "duplicate_qid"),
        16: (None, None, "bad_qid"),
    }


def test_a_question_table_with_null_or_too_many_entities_is_quarantined(spark):
    table = spark.createDataFrame(
        [("a", "Q1"), ("a", "Q1"), ("b", None), ("b", "Q1"), (None, "Q2"), ("c", "Q1"), ("c", "Q2")],
        "qid string, entity string",
    )
    rows = {r.qid: (r.entities, r.reason) for r in questions.from_table(table, 1).collect()}
    assert rows == {
        "a": (["Q1"], None),
        "b": (None, "bad_entities"),
        None: (None, "missing_qid"),
        "c": (None, "too_many_entities"),
    }
    with pytest.raises(ValueError, match="column qid is double"):
        questions.from_table(spark.createDataFrame([(1.5, "Q1")], "qid double, entity string"), 1)


def _oracle(line: str, cap: int):
    """(qid, entities, reason) of one line, by Python's json module (duplicate_qid left to the caller)."""

    def unique(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("repeated key")
        return dict(pairs)

    try:
        record = json.loads(line, object_pairs_hook=unique)
    except ValueError:
        return None, None, "malformed_json"
    if not isinstance(record, dict):
        return None, None, "malformed_json"
    qid = record.get("qid")
    qid = record.get("id") if qid is None else qid
    if qid is None:
        return None, None, "missing_qid"
    integer = isinstance(qid, int) and not isinstance(qid, bool) and -(2**63) <= qid < 2**63
    if not (isinstance(qid, str) or integer):
        return None, None, "bad_qid"
    qid = str(qid)
    entities = record.get("entities")
    if entities is None or entities == []:
        return qid, None, "missing_entities"
    if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
        return qid, None, "bad_entities"
    if len(entities) > cap:
        return qid, None, "too_many_entities"
    return qid, entities, None


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=5,
)
_KEYS = st.lists(st.sampled_from(["Q1", "Q2", "ä", ""]), max_size=5)
_RECORDS = st.fixed_dictionaries(
    {},
    optional={
        "qid": st.one_of(st.sampled_from(["a", "b", "7"]), st.integers(0, 3), _VALUES),
        "id": st.one_of(st.sampled_from(["a", "c"]), _VALUES),
        "entities": st.one_of(_KEYS, _VALUES, st.lists(_VALUES, max_size=3)),
        "other": _VALUES,
    },
)
_LINES = st.one_of(
    _RECORDS.map(json.dumps),
    _VALUES.map(json.dumps),
    st.sampled_from(['{"qid": "a"', "{not json", '{"qid": "a", "qid": "b"}', "qid,entities", "[1, 2"]),
)


@settings(max_examples=10, deadline=None)
@given(lines=st.lists(_LINES, min_size=1, max_size=12))
def test_every_line_is_a_question_or_quarantined_with_the_reason_of_an_oracle(spark, lines):
    lines = [line.replace("\n", " ") for line in lines]
    got = _parse(spark, lines)
    expected, seen = {}, set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        qid, entities, reason = _oracle(line, 3)
        if reason is None and qid in seen:
            reason = "duplicate_qid"
        elif reason is None:
            seen.add(qid)
        if reason is not None and reason != "duplicate_qid":
            entities = None
        expected[number] = (
            qid if reason not in ("malformed_json", "missing_qid", "bad_qid") else None,
            entities,
            reason,
        )
    assert got == expected
