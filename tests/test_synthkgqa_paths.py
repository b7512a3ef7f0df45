"""Shortest paths against ground-truth paths (paper 002 App. D.2, spec 2.E): path counts and shortest-path
triples against networkx enumeration, the overlap / Table D2 / Fig. D9 tables by hand, local == whole-KG
search, the Table D2 shape on generated questions (kgbrink.synthkgqa.generator) over a generated KG, and both
jobs through the CLI."""

from __future__ import annotations

import json
import random
from math import prod

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient
from pyspark.testing import assertDataFrameEqual

from kgbrink.cli import main
from kgbrink.core.delta import latest_version
from kgbrink.kg.synth import generate
from kgbrink.kg.synth_graph import INSTANCE_OF
from kgbrink.synthkgqa import generator, question_graph_local, shortest_paths
from tests.conftest import conf_args, own_copy
from tests.test_synthkgqa_graphs import QUESTION_SCHEMA


def _networkx_pair(triples, s, a):
    """``(distance, triple paths, node paths, triples on a shortest path)`` by enumerating
    ``nx.all_shortest_paths`` on the MultiGraph, expanded over parallel triples."""
    g = nx.MultiGraph()
    g.add_nodes_from([s, a])
    g.add_edges_from((h, t, (h, r, t)) for h, r, t in triples)
    try:
        paths = list(nx.all_shortest_paths(g, s, a))
    except nx.NetworkXNoPath:
        return None, 0.0, 0.0, set()
    steps = [list(zip(p, p[1:])) for p in paths]
    n_triple = sum(prod(g.number_of_edges(x, y) for x, y in path) for path in steps)
    on_path = {key for path in steps for x, y in path for key in g[x][y]}
    return len(paths[0]) - 1, float(n_triple), float(len(paths)), on_path


@settings(max_examples=300, deadline=None)
@given(
    triples=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(0, 7)), max_size=18, unique=True),
    s=st.integers(0, 8),
    a=st.integers(0, 8),
)
def test_pair_paths_equal_networkx_enumeration(triples, s, a):
    h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
    got = shortest_paths.pair_paths(h, r, t, s, a)
    distance, n_triple, n_node, on_path = _networkx_pair(triples, s, a)
    assert (got.distance, got.n_triple_paths, got.n_node_paths) == (distance, n_triple, n_node)
    assert {tuple(x) for x in got.edges.tolist()} == on_path


def test_question_rows_by_hand():
    # seeds 0 and 4, answer 3: 0 =(two triples)= 1 - 3 and 0 - 2 - 3 (D = 2: 3 triple paths, 2 node paths);
    # 4 - 3 directly; 5 is on no triple (unreachable); SP_q is the union of the pairs' triples
    import pandas as pd

    triples = pd.DataFrame([(0, 1, 1), (1, 2, 0), (1, 1, 3), (0, 1, 2), (2, 1, 3), (4, 0, 3)], columns=["h", "r", "t"])
    pairs = pd.DataFrame({"seed": [4, 0, 5], "answer": [3, 3, 3]})
    out = shortest_paths._question_rows("q", triples, pairs)
    found = [tuple(x) for x in out[out["h"].isna()][["seed", "sp_len", "n_node_paths", "n_triple_paths"]].values]
    assert found == [(0, 2, 2.0, 3.0), (4, 1, 1.0, 1.0), (5, pd.NA, 0.0, 0.0)]
    union = {tuple(int(v) for v in x) for x in out[out["seed"].isna()][["h", "r", "t"]].values}
    assert union == {(0, 1, 1), (1, 2, 0), (1, 1, 3), (0, 1, 2), (2, 1, 3), (4, 0, 3)}


def test_overlap_table_d2_and_figure_d9_by_hand(spark):
    questions = spark.createDataFrame(
        [
            ("a", "test", 1, [(0, 0, 1)]),
            ("b", "test", 2, [(0, 0, 1), (1, 0, 2)]),
            ("c", "test", 2, [(5, 0, 6), (6, 0, 7)]),
            ("d", "train", 1, [(8, 0, 9)]),
        ],
        "qid string, split string, n_hops int, gt array<struct<h:int,r:int,t:int>>",
    )
    # a: SP = G plus a parallel triple; b: a shortcut (0, 1, 2) only; c: G exactly; d: unreachable
    sp = spark.createDataFrame(
        [("a", 0, 0, 1), ("a", 1, 1, 0), ("b", 0, 1, 2), ("c", 5, 0, 6), ("c", 6, 0, 7)],
        "qid string, h int, r int, t int",
    )
    overlaps = shortest_paths.overlap(questions, sp)
    assertDataFrameEqual(
        overlaps,
        spark.createDataFrame(
            [
                ("a", "test", 1, 1, 2, 1, 100.0, 50.0),
                ("b", "test", 2, 2, 1, 0, 0.0, 0.0),
                ("c", "test", 2, 2, 2, 2, 100.0, 100.0),
                ("d", "train", 1, 1, 0, 0, 0.0, None),
            ],
            "id string, split string, n_hops int, n_gt long, n_sp long, n_gt_in_sp long, pct_gt_in_sp double, "
            "pct_sp_in_gt double",
        ),
    )
    assertDataFrameEqual(
        shortest_paths.table_d2(overlaps),
        spark.createDataFrame(
            [
                ("test", 1, 1, 100.0, 50.0, 1.0, 2.0),
                ("test", 2, 2, 50.0, 50.0, 2.0, 1.5),
                ("train", 1, 1, 0.0, None, 1.0, 0.0),
            ],
            "split string, n_hops int, questions long, pct_gt_in_sp double, pct_sp_in_gt double, n_gt double, "
            "n_sp double",
        ),
    )
    pairs = spark.createDataFrame(
        [
            ("a", "test", 0, 1, 1, 1, False, 1.0, 2.0),
            ("b", "test", 0, 2, 2, 1, True, 1.0, 1.0),
            ("c", "test", 5, 7, 2, 2, False, 3.0, 5.0),
            ("c", "test", 5, 9, None, 4, None, 7.0, 7.0),  # another answer (answers: all): no gt_len
            ("d", "train", 8, 9, 1, None, None, 0.0, 0.0),
        ],
        "id string, split string, seed int, answer int, gt_len int, sp_len int, shortcut boolean, "
        "n_node_paths double, n_triple_paths double",
    )
    assertDataFrameEqual(
        shortest_paths.figure_d9(pairs),
        spark.createDataFrame(
            [
                ("test", 1, 1, 1, 1.0, 1.0, 2.0, 0.0),
                ("test", 2, 2, 2, 1.5, 2.0, 3.0, 0.5),
                ("train", 1, 1, 0, None, None, None, None),
            ],
            "split string, gt_len int, pairs long, reachable long, sp_len double, n_node_paths double, "
            "n_triple_paths double, shortcut_share double",
        ),
    )


def test_seed_answer_pairs_for_the_generated_or_all_answers(spark):
    questions = spark.createDataFrame(
        [("a", "test", 5, [5, 6, None]), ("b", "train", 7, None)],
        "qid string, split string, answer int, all_answers array<int>",
    )
    paths = spark.createDataFrame([("a", 1, 2), ("a", 2, 1), ("b", 3, 1)], "qid string, seed int, gt_len int")
    generated = {tuple(r) for r in shortest_paths.seed_answer_pairs(questions, paths).collect()}
    assert generated == {("a", "test", 1, 5, 2), ("a", "test", 2, 5, 1), ("b", "train", 3, 7, 1)}
    every = {tuple(r) for r in shortest_paths.seed_answer_pairs(questions, paths, "all").collect()}
    # the other answers of a have no ground-truth path (gt_len null); b has no answer set: its answer alone
    assert every == generated | {("a", "test", 1, 6, None), ("a", "test", 2, 6, None)}
    with pytest.raises(ValueError, match="answers"):
        shortest_paths.seed_answer_pairs(questions, paths, "some")


def _planted_chains(triples, per_hop, hops, seed):
    """Chain questions ((n) types) planted on ``triples``: random walks of n distinct nodes from a random
    node, never along ``instance of``; seed = the walk's start, answer = its end, G = its triples."""
    rng = random.Random(seed)
    incident = {}
    for x in triples:
        if x[1] != INSTANCE_OF and x[0] != x[2]:
            incident.setdefault(x[0], []).append((x, x[2]))
            incident.setdefault(x[2], []).append((x, x[0]))
    nodes = sorted(incident)
    out = []
    for n in hops:
        made = 0
        while made < per_hop:
            walk, path = [rng.choice(nodes)], []
            while len(path) < n:
                options = [(x, y) for x, y in incident[walk[-1]] if y not in walk]
                if not options:
                    break
                x, y = rng.choice(options)
                walk.append(y)
                path.append(x)
            if len(path) == n:
                out.append((f"h{n}-{made}", "test", [walk[0]], walk[-1], path, n))
                made += 1
    return out


@pytest.mark.slow
def test_table_d2_shape_on_generated_questions_over_a_generated_kg(spark):
    # questions of six Table A1 types (1 to 4 hops) planted by the procedural generator on the generated KG
    # (5,000 triples, hubs included); H = the whole KG: the share of G's triples on shortest paths falls as
    # the hop count grows and shortest paths outnumber G's triples more and more (Table D2's shape)
    kg = generate(5000, seed=3)
    train = kg.splits["train"]
    triples = sorted(set(zip(train.h.tolist(), train.r.tolist(), train.t.tolist())))
    frame = spark.createDataFrame(triples, "h int, r int, t int")
    nodes = frame.selectExpr("h as id").union(frame.selectExpr("t as id")).distinct()
    types = ["(1)", "(1)(1)", "(2)", "(2)(1)", "(3)", "(4)"]
    planted = generator.plant(frame, nodes, types, per_type=15, seed=4, split="test").toPandas()
    h, r, t = np.array(triples, dtype=np.int64).T
    sp_rows, question_rows = [], []
    for q in planted.itertuples():
        gt = [(x["h"], x["r"], x["t"]) for x in q.answer_subgraph]
        paths = [question_graph_local.tree_path(gt, int(s), int(q.answer)) for s in q.seeds]
        question_rows.append((q.id, "test", max(len(p) for p in paths), gt))
        for s in q.seeds:
            sp_rows += [(q.id, *map(int, x)) for x in shortest_paths.pair_paths(h, r, t, int(s), int(q.answer)).edges]
    questions = spark.createDataFrame(
        question_rows, "qid string, split string, n_hops int, gt array<struct<h:int,r:int,t:int>>"
    )
    overlaps = shortest_paths.overlap(questions, spark.createDataFrame(sp_rows, "qid string, h int, r int, t int"))
    d2 = {row.n_hops: row for row in shortest_paths.table_d2(overlaps).collect()}
    gt_in_sp = [d2[n].pct_gt_in_sp for n in (1, 2, 3, 4)]
    sp_in_gt = [d2[n].pct_sp_in_gt for n in (1, 2, 3, 4)]
    # (the generated KG has few triangles: 2-hop paths rarely have a shortcut, 3- and 4-hop ones through
    # its hubs often do)
    assert gt_in_sp[0] == 100.0 and all(x >= y for x, y in zip(gt_in_sp, gt_in_sp[1:])), gt_in_sp
    assert gt_in_sp[1] > gt_in_sp[2] > gt_in_sp[3], gt_in_sp
    assert sp_in_gt[0] > sp_in_gt[-1] and d2[4].n_sp > d2[1].n_sp, (sp_in_gt, d2)


@pytest.mark.slow
def test_local_search_equals_the_whole_kg_search(spark):
    # with H = the whole KG for every question, the per-question numpy search and the distributed
    # bidirectional BFS give the same pairs and triples
    rng = random.Random(8)
    triples = sorted({(rng.randrange(40), rng.randrange(3), rng.randrange(40)) for _ in range(90)})
    kg = spark.createDataFrame(triples, "h int, r int, t int")
    pairs = spark.createDataFrame(
        [(f"q{i // 2}", rng.randrange(42), rng.randrange(42)) for i in range(16)], "qid string, seed int, answer int"
    ).distinct()
    graph = pairs.select("qid").distinct().crossJoin(kg)
    local = shortest_paths.shortest_paths_local(graph, pairs)
    whole = shortest_paths.shortest_paths_full_kg(kg.repartition(3), pairs)
    for a, b in zip(local, whole):
        assertDataFrameEqual(a, b, rtol=0, atol=0)


@pytest.fixture(scope="module")
def planted_dataset(spark, config, synth_5000, tmp_path_factory):
    """A generated KG ingested, with chain questions planted on its ids written as a Parquet table."""
    dataset, base = own_copy(synth_5000, tmp_path_factory, "synthkgqa-paths")  # synth --triples 5000, ingested
    rows = spark.read.format("delta").load(f"{dataset}/triples").select("h", "r", "t").distinct().collect()
    triples = sorted(tuple(x) for x in rows)
    questions = _planted_chains(triples, 3, (1, 2, 3), seed=5)
    questions.append(("broken", "test", [triples[0][0]], triples[0][2], [], 1))  # quarantined: empty G
    path = base / "gt_questions.parquet"
    spark.createDataFrame(questions, QUESTION_SCHEMA).write.parquet(str(path))
    return dataset, path, questions


@pytest.mark.slow
def test_question_graphs_and_sp_analysis_through_the_cli(spark, config, planted_dataset, tmp_path):
    dataset, path, questions = planted_dataset
    common = [*conf_args(config), "--dataset", str(dataset), "--name", "planted", "--input", str(path)]
    small = ["--set", "question_graphs.k_min=1", "--set", "question_graphs.max_expand_degree=40"]
    small += ["--set", "question_graphs.top_nodes=30", "--set", "gt_questions.max_bad_fraction=0.1"]
    strict = ["question-graphs", *common, "--json", str(tmp_path / "fail.json")]
    assert main([*strict, *small[:-2]]) != 0  # 1 bad of 10 > 1%
    assert main(["question-graphs", *common, *small, "--json", str(tmp_path / "qg.json")]) == 0
    summary = json.loads((tmp_path / "qg.json").read_text())
    assert summary["counts"]["questions"] == 9 and summary["counts"]["graphs"] == 9
    assert summary["counts"]["quarantined_empty_answer_subgraph"] == 1
    root = dataset / "synthkgqa" / "planted"
    graphs = spark.read.format("delta").load(str(root / "question_graphs"))
    for qid, _, _, _, gt, _ in questions[:-1]:
        have = {(r.h, r.r, r.t) for r in graphs.where(f"id = '{qid}' and is_gt").collect()}
        assert have == set(gt), qid  # every answer-subgraph triple is in its question's graph
    assert (root / "question_graphs" / "split=test").is_dir()
    run = MlflowClient(tracking_uri=config.tracking.uri).get_run(summary["mlflow_run_id"])
    assert run.data.tags["job"] == "question-graphs" and run.data.metrics["count.graphs"] == 9
    report = tmp_path / "report"
    args = ["sp-analysis", *common, *small, "--report-dir", str(report), "--json", str(tmp_path / "sp.json")]
    assert main(args) == 0
    summary = json.loads((tmp_path / "sp.json").read_text())
    assert summary["counts"]["pairs"] == 9 and {r["n_hops"] for r in summary["results"]} == {1, 2, 3}
    assert (report / "shortest_paths.png").stat().st_size > 10_000
    assert "Table D2, split `test`" in (report / "report.md").read_text()
    pairs = spark.read.format("delta").load(str(root / "sp_pairs"))
    assert pairs.where("gt_len is null or sp_len > gt_len").count() == 0  # G lies in H: never longer
    # the shortest-path triples of H are exactly those the question graphs mark on_sp
    on_sp = graphs.where("on_sp").select("id", "h", "r", "t")
    sp = spark.read.format("delta").load(str(root / "sp_triples"))
    assert on_sp.subtract(sp).count() == 0
    # question-graphs --sp-analysis: the same tables from one pass over the search graphs
    names = ["question_graphs", "question_graph_sizes", "sp_pairs", "sp_triples", "sp_overlap", "sp_table_d2"]
    names += ["sp_figure_d9", "sp_quarantine"]
    read = lambda name: spark.read.format("delta").load(str(root / name))  # noqa: E731
    before = {name: read(name).collect() for name in names}
    versions = {name: latest_version(spark, str(root / name)) for name in names}
    fused = ["question-graphs", *common, *small, "--sp-analysis", "--report-dir", str(tmp_path / "fused")]
    assert main([*fused, "--json", str(tmp_path / "fused.json")]) == 0
    for name in names:
        assert latest_version(spark, str(root / name)) == versions[name] + 1, name  # written again, once
        assertDataFrameEqual(read(name), before[name], rtol=0, atol=0)
    both = json.loads((tmp_path / "fused.json").read_text())
    assert both["counts"]["pairs"] == 9 and both["counts"]["graphs"] == 9 and both["results"] == summary["results"]
    assert (tmp_path / "fused" / "report.md").read_text() == (report / "report.md").read_text()
    spark.catalog.clearCache()  # what earlier tests in this process left cached
    assert main([*args[:-2], "--graph", "full_kg", "--json", str(tmp_path / "full.json")]) == 0
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()  # the KG persisted for it is released
    full = spark.read.format("delta").load(str(root / "sp_pairs"))
    assert full.where("sp_len > gt_len").count() == 0
