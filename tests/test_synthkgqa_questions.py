"""Question records of paper 002 (spec 2.0, 2.B, 2.C): ingest against a dataset's dictionaries with
quarantine, classification, and the tree queries' answer sets against a brute-force evaluator."""

from __future__ import annotations

import itertools
import json
import random

from kgbrink.core.files import read_lines
from kgbrink.synthkgqa import answer_types as A
from kgbrink.synthkgqa import questions as Q

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
    records = Q.parse_lines(read_lines(spark, {"questions": [str(path)]}))
    valid, bad = Q.ingest(records, entities, relations, kg.select("h", "r", "t"), max_edges=6)
    table = Q.as_table(valid).collect()
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
        5: "malformed_json",
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
    counts = {(r.split, r.graph_isomorphism): r.questions for r in Q.type_counts(Q.as_table(valid)).collect()}
    assert counts == {
        ("test", "(2)(1)"): 1,
        ("train", "((1)(1))"): 1,
        ("valid", "(1)"): 1,
        (None, "(2)"): 1,
        (None, "(1)"): 1,
    }


def _brute_answers(kg: set, seeds, answer, triples) -> set:
    """Every binding of the answer over all assignments of the non-seed nodes (the query's definition)."""
    nodes = sorted({x for h, _, t in triples for x in (h, t)})
    variables = [n for n in nodes if n not in seeds]
    universe = sorted({x for h, _, t in kg for x in (h, t)})
    found = set()
    for values in itertools.product(universe, repeat=len(variables)):
        bind = dict(zip(variables, values, strict=True))
        bind.update({s: s for s in seeds})
        if all((bind[h], r, bind[t]) in kg for h, r, t in triples):
            found.add(bind[answer])
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
        v = A.classify(seeds, answer, tree)
        assert v.valid, v
        questions.append((f"q{q}", seeds, answer, tree, v.type.n_hops))
    frame = spark.createDataFrame(
        [(q, s, a, [dict(zip("hrt", x, strict=True)) for x in g], n) for q, s, a, g, n in questions],
        f"id string, seeds array<int>, answer int, answer_subgraph {Q.TRIPLE_TYPE}, n_hops int",
    )
    kg_frame = spark.createDataFrame(sorted(kg), "h int, r int, t int").repartition(3)
    got = {r.id: r for r in Q.answer_sets(frame, kg_frame, max_answers=5).collect()}
    assert len(got) == len(questions) >= 25
    over = 0
    for q, s, a, g, _ in questions:
        expected = _brute_answers(kg, s, a, g)
        row = got[q]
        assert row.n_answers == len(expected) and row.answer_in_set and a in expected, q
        if len(expected) <= 5:
            assert row.all_answers == sorted(expected), q
        else:
            over += 1
            assert row.all_answers is None
    assert over > 0
    # a question with more bindings at one level than max_bindings is left out, the others are unchanged
    capped = {r.id: r for r in Q.answer_sets(frame, kg_frame, max_answers=5, max_bindings=3).collect()}
    left_out = [q for q, row in capped.items() if row.n_answers is None]
    assert 0 < len(left_out) < len(questions)
    for q, row in capped.items():
        if row.n_answers is not None:
            assert row == got[q]
        else:
            assert row.all_answers is None and row.answer_in_set is None
