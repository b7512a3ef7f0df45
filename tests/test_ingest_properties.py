"""KG dump lines from anywhere: each line is a triple or quarantined with the reason a Python oracle gives."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.core.files import read_lines
from kgbrink.kg import ingest

_ENTITY = re.compile(r"Q[1-9][0-9]{0,17}")
_RELATION = re.compile(r"P[1-9][0-9]{0,17}")


def _oracle(raw: bytes) -> tuple:
    """(reason, (h, r, t)) of one wikidata5m line, by Python's own reading of the format."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8", None
    line = line[:-1] if line.endswith("\r") else line
    fields = line.split("\t")
    if len(fields) != 3:
        return "wrong_field_count", None
    h, r, t = fields
    for value in (h, r, t):
        if value == "":
            return "empty_field", None
    for value, pattern, reason in (
        (h, _ENTITY, "bad_entity_key"),
        (r, _RELATION, "bad_relation_key"),
        (t, _ENTITY, "bad_entity_key"),
    ):
        if not pattern.fullmatch(value):
            return reason, None
    return None, (h, r, t)


_KEYS = st.sampled_from(
    ["Q1", "Q42", "P31", "Q0", "q5", "Q1 ", "", "Q12345678901234567890", "Q7\r", "Q8\x85", "Q9\u2028"]
)
_FIELDS = st.lists(_KEYS, min_size=1, max_size=4)
_LINES = st.one_of(
    _FIELDS.map(lambda fields: "\t".join(fields).encode()),
    st.tuples(_KEYS, _KEYS, _KEYS).map(lambda f: f"{f[0]}\t{f[1]}\t{f[2]}\r".encode()),
    st.sampled_from([b"Q1\tP2\t\xff", b"\xc3\x28\tP1\tQ2", b"Q1\tP1\tQ2\r\r", b"Q1,P1,Q2", b"Q1\t\tQ2", b"Q3\tP1\tQ4"]),
)


@settings(max_examples=12, deadline=None)
@given(lines=st.lists(_LINES, min_size=1, max_size=14))
def test_every_dump_line_is_a_triple_or_quarantined_as_the_oracle_says(spark, lines):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.txt"
        path.write_bytes(b"\n".join(lines) + b"\n")
        parsed = ingest.parse_delimited_triples(read_lines(spark, {"train": [str(path)]}), ingest.WIKIDATA5M)
        rows = parsed.orderBy("row_id").select("line", "reason", "h_key", "r_key", "t_key").collect()
    assert len(rows) == len(lines)
    for raw, row in zip(lines, rows, strict=True):
        reason, triple = _oracle(raw)
        assert row.reason == reason, raw
        if triple is not None:
            assert (row.h_key, row.r_key, row.t_key) == triple, raw
