"""Question records of paper 002 (spec 2.0, 2.B, 2.C): ingest against a dataset's dictionaries with
quarantine, classification, and the tree queries' answer sets against a brute-force evaluator."""

from __future__ import annotations

import itertools
import json
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.core.files import read_lines
from kgbrink.synthkgqa import answer_types
from kgbrink.synthkgqa import questions as synthkgqa_questions

ENTITIES = [(i, f"Q{i}", f"entity {i}") for i in range(12)]
RELATIONS = [(i, f"P{i}", f"relation {i}") for i in range(4)]
# a small KG: 0 -P0-> 1 -P1-> 2, 3 -P0-> 1, 4 -P2-> 2, 5 -P0-> 6 -P1-> 2, 7 -P3-> 7 (self-loop)
KG = [(0, 0, 1), (1, 1, 2), (3, 0, 1), (4, 2, 2), (5, 0, 6), (6, 1, 2), (7, 3, 7), (8, 0, 9), (9, 0, 8), (1, 2, 2)]


def _frames(spark):
    entities = spark.createDataFrame(ENTITIES, "id int, key string, label string")
    relations = spark.createDataFrame(RELATIONS, "id int, key string, label string")
    kg = spark.createDataFrame([(*t, "train") for t in KG], "h int, r int, t int, split string")
    return entities, relations, kg


def _rec(i, seeds, answer, triples, **extra):
    return json.dumps({"id": i, "seeds": seeds, "answer": answer, "answer_subgraph": triples, **extra})


LINES = [
    # 1: valid (2)(1): Q0 -P0-> Q1 -P1-> Q2 <-P2- Q4, answer Q2
    _rec("ok1", ["Q0", "Q4"], "Q2", [["Q0", "P0", "Q1"], ["Q1", "P1", "Q2"], ["Q4", "P2", "Q2"]], split="test"),
    # 2: valid ((1)(1)): Q0 and Q3 meet at Q1, answer Q2
    _rec("ok2", ["Q0", "Q3"], "Q2", [["Q0", "P0", "Q1"], ["Q3", "P0", "Q1"], ["Q1", "P1", "Q2"]], split="train"),
    "",
    "not json",
    '{"id": "m1", "seeds": "Q0", "answer": "Q1", "answer_subgraph": []}',
    '{"id": "m2", "answer": "Q1", "answer_subgraph": [["Q0", "P0", "Q1"]]}',
    _rec("m3", ["Q0"], "Q1", [["Q0", "P0"]]),
    _rec("ok1", ["Q0"], "Q1", [["Q0", "P0", "Q1"]]),  # 8: duplicate id
    _rec("u1", ["Q0", "Q99"], "Q1", [["Q0", "P0", "Q1"]]),
    _rec("u2", ["Q0"], "Q1", [["Q0", "P9", "Q1"]]),
    _rec("k1", ["Q0"], "Q1", [["Q0", "P1", "Q1"]]),  # 11: not in the KG
    _rec("c1", ["Q8"], "Q9", [["Q8", "P0", "Q9"], ["Q9", "P0", "Q8"]]),  # 12: parallel edges
    _rec("c2", ["Q0"], "Q0", [["Q0", "P0", "Q1"]]),  # 13: answer is a seed
    _rec("c3", ["Q0"], "Q2", [["Q0", "P0", "Q1"], ["Q1", "P1", "Q2"], ["Q4", "P2", "Q2"]]),  # 14: non-seed leaf
    _rec(7, ["Q0"], "Q1", [["Q0", "P0", "Q1"], ["Q0", "P0", "Q1"]], split="valid"),  # 15: numeric id, repeat
    # 16, 17: GTSQA's own type and hops are kept beside the classification
    _rec("g1", ["Q5"], "Q2", [["Q5", "P0", "Q6"], ["Q6", "P1", "Q2"]], graph_isomorphism="(2)", n_hops=2),
    _rec("g2", ["Q3"], "Q1", [["Q3", "P0", "Q1"]], graph_isomorphism="(2)", n_hops="1"),
]


def test_ingest_with_quarantine_reasons_and_line_numbers(spark, tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    entities, relations, kg = _frames(spark)
    records = synthkgqa_questions.parse_lines(read_lines(spark, {"questions": [str(path)]}), 1000)
    valid, bad = synthkgqa_questions.ingest(records, entities, relations, kg.select("h", "r", "t"), max_edges=6)
    table = synthkgqa_questions.as_table(valid).collect()
    got = {r.id: r for r in table}
    assert sorted(got) == ["7", "g1", "g2", "ok1", "ok2"]
    given = {r.id: (r.given_type, r.given_hops, r.graph_isomorphism, r.n_hops) for r in valid.collect()}
    assert given["g1"] == ("(2)", "2", "(2)", 2) and given["g2"] == ("(2)", "1", "(1)", 1)
    assert given["ok1"][:2] == (None, None)
    assert got["ok1"].graph_isomorphism == "(2)(1)" and got["ok1"].split == "test"
    assert got["ok1"].seeds == [0, 4] and got["ok1"].answer == 2
    assert [tuple(x) for x in got["ok1"].answer_subgraph] == [(0, 0, 1), (1, 1, 2), (4, 2, 2)]
    assert (got["ok1"].n_hops, got["ok1"].n_edges, got["ok1"].n_seeds, got["ok1"].n_intermediate) == (2, 3, 2, 1)
    assert got["ok1"].dutt_label == "Iso-3" and got["ok1"].all_answers is None
    assert got["ok2"].graph_isomorphism == "((1)(1))" and got["ok2"].dutt_label == "Iso-4"
    assert got["7"].graph_isomorphism == "(1)" and got["7"].n_edges == 1  # the repeated triple counts once
    quarantined = {r.line_number: (r.reason, r.id, r.detail) for r in bad.collect()}
    assert {k: v[0] for k, v in quarantined.items()} == {
        4: "malformed_json",
        5: "bad_field_type",
        6: "missing_field",
        7: "bad_triple",
        8: "duplicate_id",
        9: "unknown_entity",
        10: "unknown_relation",
        11: "triple_not_in_kg",
        12: "parallel_edges",
        13: "answer_is_seed",
        14: "non_seed_leaf",
    }
    assert quarantined[6][2] == "missing or null: seeds"
    assert quarantined[8][2] == "the id of line 1"
    assert quarantined[9][2] == "Q99" and quarantined[10][2] == "P9"
    assert "0 1 1" in quarantined[11][2]
    row = next(r for r in bad.collect() if r.line_number == 4)
    assert row.line == "not json" and row.source_file.endswith("questions.jsonl")
    counts = {
        (r.split, r.graph_isomorphism): r.questions
        for r in synthkgqa_questions.type_counts(synthkgqa_questions.as_table(valid)).collect()
    }
    assert counts == {
        ("test", "(2)(1)"): 1,
        ("train", "((1)(1))"): 1,
        ("valid", "(1)"): 1,
        (None, "(2)"): 1,
        (None, "(1)"): 1,
    }


def _brute_answers(kg: set, seeds, answer, triples, realised: set | None = None) -> set:
    """Every binding of the answer over all assignments of the non-seed nodes (the query's definition);
    the KG triples of every satisfying assignment added to ``realised`` (App. A.4's CONSTRUCT)."""
    nodes = sorted({x for h, _, t in triples for x in (h, t)})
    variables = [n for n in nodes if n not in seeds]
    universe = sorted({x for h, _, t in kg for x in (h, t)})
    found = set()
    for values in itertools.product(universe, repeat=len(variables)):
        bind = dict(zip(variables, values, strict=True))
        bind.update({s: s for s in seeds})
        if all((bind[h], r, bind[t]) in kg for h, r, t in triples):
            found.add(bind[answer])
            if realised is not None:
                realised.update((bind[h], r, bind[t]) for h, r, t in triples)
    return found


def test_answer_sets_equal_brute_force_on_random_kgs(spark):
    rng = random.Random(3)
    kg = {(rng.randrange(14), rng.randrange(3), rng.randrange(14)) for _ in range(60)}
    adjacency = {}
    for h, r, t in kg:
        adjacency.setdefault(h, []).append((h, r, t, t))
        adjacency.setdefault(t, []).append((h, r, t, h))
    questions = []
    for q in range(40):
        # a random tree walked in the KG from a random answer, up to 3 variables
        answer = rng.choice(sorted(adjacency))
        tree, nodes = [], [answer]
        for _ in range(rng.randint(1, 4)):
            at = rng.choice(nodes)
            options = [x for x in adjacency[at] if x[3] not in nodes]
            if not options:
                break
            h, r, t, other = rng.choice(sorted(options))
            tree.append((h, r, t))
            nodes.append(other)
        degree = {}
        for h, _, t in tree:
            degree[h] = degree.get(h, 0) + 1
            degree[t] = degree.get(t, 0) + 1
        seeds = [n for n in nodes[1:] if degree[n] == 1]
        if len(nodes) - len(seeds) > 4 or not tree:
            continue
        v = answer_types.classify(seeds, answer, tree)
        assert v.valid, v
        questions.append((f"q{q}", seeds, answer, tree, v.type.n_hops))
    frame = spark.createDataFrame(
        [(q, s, a, [dict(zip("hrt", x, strict=True)) for x in g], n) for q, s, a, g, n in questions],
        f"id string, seeds array<int>, answer int, answer_subgraph {synthkgqa_questions.TRIPLE_TYPE}, n_hops int",
    )
    kg_frame = spark.createDataFrame(sorted(kg), "h int, r int, t int").repartition(3)
    got = {r.id: r for r in synthkgqa_questions.answer_sets(frame, kg_frame, max_answers=5).collect()}
    assert len(got) == len(questions) >= 25
    over = wider = 0
    for q, s, a, g, _ in questions:
        realised = set()
        expected = _brute_answers(kg, s, a, g, realised)
        row = got[q]
        assert row.n_answers == len(expected) and row.answer_in_set and a in expected, q
        if len(expected) <= 5:
            assert row.all_answers == sorted(expected), q
            assert [tuple(x) for x in row.full_answer_subgraph] == sorted(realised), q
            assert {tuple(x) for x in g} <= realised  # the question's own tree is one binding
            wider += len(realised) > len(g)
        else:
            over += 1
            assert row.all_answers is None and row.full_answer_subgraph is None
    assert over > 0 and wider > 0
    # past the broadcast, a level's KG join spread over tasks (frames.spread_join): the same answers
    spread = synthkgqa_questions.answer_sets(frame, kg_frame, max_answers=5, broadcast_bindings=0, spread_rows=2)
    assert {r.id: r for r in spread.collect()} == got
    # a question with more bindings at one level than max_bindings is left out, the others are unchanged
    capped = {
        r.id: r for r in synthkgqa_questions.answer_sets(frame, kg_frame, max_answers=5, max_bindings=3).collect()
    }
    left_out = [q for q, row in capped.items() if row.n_answers is None]
    assert 0 < len(left_out) < len(questions)
    for q, row in capped.items():
        if row.n_answers is not None:
            assert row == got[q]
        else:
            assert row.all_answers is None and row.answer_in_set is None


def _parse(spark, lines: list[str], max_keys: int) -> dict[int, tuple]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "questions.jsonl"
        path.write_text("\n".join(lines) + "\n")
        rows = synthkgqa_questions.parse_lines(read_lines(spark, {"questions": [str(path)]}), max_keys).collect()
    return {r.line_number: (r.id, r.reason) for r in rows}


def test_each_wrong_type_has_its_own_reason(spark):
    triple = [["Q0", "P0", "Q1"]]
    lines = [
        _rec(True, ["Q0"], "Q1", triple),  # 1
        _rec(7.0, ["Q0"], "Q1", triple),  # 2
        _rec("a", [None, "Q0"], "Q1", triple),  # 3: a null seed
        _rec("b", [["Q0"]], "Q1", triple),  # 4: a list where a key belongs
        _rec("c", ["Q0"], 5, triple),  # 5
        _rec("d", ["Q0"], "Q1", triple, n_hops=1.5),  # 6
        _rec("e", ["Q0"], "Q1", [["Q0", "P0", 1]]),  # 7: a number in a triple
        _rec("f", ["Q0", "Q2", "Q3"], "Q1", triple),  # 8: 4 keys > 3
        '{"id": "g", "id": "h", "seeds": ["Q0"], "answer": "Q1", "answer_subgraph": [["Q0", "P0", "Q1"]]}',  # 9
        _rec(8, ["Q0"], "Q1", triple, split="test", graph_isomorphism="(1)", n_hops="1"),  # 10: good
    ]
    assert _parse(spark, lines, 3) == {
        1: (None, "bad_field_type"),
        2: (None, "bad_field_type"),
        3: ("a", "bad_field_type"),
        4: ("b", "bad_field_type"),
        5: ("c", "bad_field_type"),
        6: ("d", "bad_field_type"),
        7: ("e", "bad_triple"),
        8: ("f", "too_many_keys"),
        9: (None, "malformed_json"),
        10: ("8", None),
    }


def _oracle(line: str, max_keys: int) -> tuple:
    """(id, reason) of one record by Python's json module (duplicate_id left to the caller)."""

    def unique(pairs):
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("repeated key")
        return dict(pairs)

    try:
        rec = json.loads(line, object_pairs_hook=unique)
    except ValueError:
        return None, "malformed_json"
    if not isinstance(rec, dict):
        return None, "malformed_json"
    if any(rec.get(f) is None for f in ("id", "seeds", "answer", "answer_subgraph")):
        ident = rec.get("id")
        ok = isinstance(ident, str) or (type(ident) is int and -(2**63) <= ident < 2**63)
        return (str(ident) if ok else None), "missing_field"
    ident = rec["id"]
    ok_id = isinstance(ident, str) or (type(ident) is int and -(2**63) <= ident < 2**63)
    ident = str(ident) if ok_id else None

    def given(name, kinds):
        return name in rec and rec[name] is not None and not any(_is(rec[name], k) for k in kinds)

    bad = (
        not ok_id
        or not isinstance(rec["seeds"], list)
        or not all(isinstance(s, str) for s in rec["seeds"])
        or not isinstance(rec["answer"], str)
        or not isinstance(rec["answer_subgraph"], list)
        or given("split", ("string",))
        or given("graph_isomorphism", ("string",))
        or given("n_hops", ("integer", "string"))
    )
    if bad:
        return ident, "bad_field_type"
    if not all(
        isinstance(x, list) and len(x) == 3 and all(isinstance(k, str) for k in x) for x in rec["answer_subgraph"]
    ):
        return ident, "bad_triple"
    if len(rec["seeds"]) + len(rec["answer_subgraph"]) > max_keys:
        return ident, "too_many_keys"
    return ident, None


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return type(value) is int and -(2**63) <= value < 2**63
    return isinstance(value, str)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["Q0", "P0", ""]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=6,
)
_KEY_LISTS = st.lists(st.sampled_from(["Q0", "Q1"]), max_size=3)
_TRIPLES = st.lists(st.one_of(st.just(["Q0", "P0", "Q1"]), _VALUES), max_size=3)
_RECORDS = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.sampled_from(["a", "b"]), st.integers(0, 2), _VALUES),
        "seeds": st.one_of(_KEY_LISTS, _VALUES),
        "answer": st.one_of(st.just("Q1"), _VALUES),
        "answer_subgraph": st.one_of(_TRIPLES, _VALUES),
        "split": st.one_of(st.just("test"), _VALUES),
        "n_hops": st.one_of(st.integers(0, 3), _VALUES),
    },
)
_LINES = st.one_of(
    _RECORDS.map(json.dumps), _VALUES.map(json.dumps), st.sampled_from(["{", "not json", '{"id": 1, "id": 2}'])
)


@settings(max_examples=8, deadline=None)
@given(lines=st.lists(_LINES, min_size=1, max_size=12))
def test_every_record_is_parsed_or_quarantined_with_the_reason_of_an_oracle(spark, lines):
    got = _parse(spark, lines, 3)
    expected, seen = {}, set()
    for number, line in enumerate(lines, start=1):
        ident, reason = _oracle(line, 3)
        if reason is None and ident in seen:
            reason = "duplicate_id"
        elif reason is None:
            seen.add(ident)
        expected[number] = (ident, reason)
    assert got == expected
