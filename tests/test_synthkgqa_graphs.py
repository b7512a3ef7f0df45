"""Question-specific graphs of paper 002 (App. C.1, spec 2.D): every rule and cap on hand-computed
examples, PPR / top-k / shortest paths / SP metapaths against networkx and walk enumeration, the
distributed neighbourhood and confounders against a Python BFS oracle, input quarantine, partitioning."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.core.typed import ConfigError
from kgbrink.synthkgqa import question_graph_local, question_graphs, shortest_paths
from tests import graphs, oracles

QUESTION_SCHEMA = (
    "id string, split string, seeds array<int>, answer int, answer_subgraph array<struct<h:int,r:int,t:int>>, "
    "n_hops int"
)
NO_TRIPLES = np.zeros((0, 3), dtype=np.int64)


def _build(triples, seeds, answer, gt, keep_gt=None, conf=(), hashes=None, **settings_):
    """build_local on hand triples (all in E_nb unless listed in ``conf`` only), as a dict per triple."""
    triples = sorted(set(triples) | set(conf))
    h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
    in_nb = [x not in conf for x in triples]
    is_conf = [x in conf for x in triples]
    hashes = np.arange(len(triples))[::-1] if hashes is None else [hashes[x] for x in triples]
    keep = gt if keep_gt is None else keep_gt
    got = question_graph_local.build_local(
        h,
        r,
        t,
        in_nb,
        is_conf,
        hashes,
        seeds,
        answer,
        np.array(gt).reshape(-1, 3),
        np.array(keep).reshape(-1, 3),
        QuestionGraphSettings(**settings_),
    )
    rows = {
        (int(a), int(b), int(c)): (bool(g), bool(s), src, None if np.isnan(p) else p)
        for a, b, c, g, s, src, p in zip(got.h, got.r, got.t, got.is_gt, got.on_sp, got.source, got.ppr)
    }
    return rows, got


# graphs.STAR_WITH_TAIL, a star around seed 0 and a tail 5 - 6 - 7:   1 2 3 4 on 0;  0 -0-> 5 -1-> 6 -1-> 7
# PPR (seed 0): x_leaf = 0.17 x0, x5 = 0.17 x0 + 0.425 x6, x6 = 0.425 x5 + 0.85 x7, x7 = 0.425 x6, so
# x6 = 0.6654 x5, x5 = 0.237 x0, x6 = 0.158 x0 < x_leaf, x7 = 0.067 x0: the order is 0, 5, 1, 2, 3, 4, 6, 7
# (1..4 tie and go by id).


def test_top_nodes_ties_by_id_and_the_shrink_loop():
    # the answer is the seed here: no shortest-path metapath re-adds triples (one would: [0] covers the star)
    # no keep-always nodes: the top 4 are 0, 5, 1, 2 (1..4 tie, by id), so 3 triples have both ends in them
    rows, got = _build(graphs.STAR_WITH_TAIL, [0], 0, [(0, 0, 1)], keep_gt=[], top_nodes=4)
    assert set(rows) == {(0, 0, 1), (0, 0, 2), (0, 0, 5)} and got.n_top_nodes == 4
    assert {v[2] for v in rows.values()} == {"neighbourhood"} and got.caps == []
    # every node on top: 7 triples > max_triples 6, drop 1 top node (7): the 6 others fit
    rows, got = _build(graphs.STAR_WITH_TAIL, [0], 0, [(0, 0, 1)], max_triples=6, shrink_step=1, min_top_nodes=0)
    assert set(rows) == set(graphs.STAR_WITH_TAIL) - {(6, 1, 7)}
    assert (got.n_top_nodes, got.n_kept_ppr, got.caps) == (7, 6, ["max_triples: 7 of 8 top nodes"])
    # the answer's triple is always kept (its nodes are G's): drop 10 at once -> no top node is left, the
    # 5 triples at 0 remain (keep-always) > 3, and 0 < min_top_nodes: a hashed sample of 3 - 2 = 1 triple
    # (hashes: the triple order reversed, so (0, 0, 5) has the smallest of those 5); G's triple is re-added
    rows, got = _build(graphs.STAR_WITH_TAIL, [0], 0, [(0, 0, 1)], max_triples=3, shrink_step=10, min_top_nodes=5)
    assert rows == {
        (0, 0, 5): (False, False, "neighbourhood", pytest.approx(rows[(0, 0, 5)][3])),
        (0, 0, 1): (True, False, "gt_readd", pytest.approx(rows[(0, 0, 1)][3])),
    }
    assert got.caps == ["min_top_nodes: sampled 1 of 5", "max_triples: 0 of 8 top nodes"]
    assert (got.n_kept_ppr, got.n_gt_readded) == (1, 1)
    # min_ppr above every score: no top node, only the keep-always triples
    rows, got = _build(graphs.STAR_WITH_TAIL, [0], 0, [(0, 0, 1)], min_ppr=0.99)
    assert set(rows) == set(graphs.STAR_WITH_TAIL[:5]) and got.n_top_nodes == 0


def test_keep_always_cap_keeps_g_and_the_smallest_one_end_triples():
    star = [(0, 0, i) for i in range(1, 7)]
    hashes = {(0, 0, i): 60 - 10 * i for i in range(1, 7)}  # (0, 0, 6) smallest, then (0, 0, 5)
    rows, got = _build(star, [0], 0, [(0, 0, 1)], hashes=hashes, keep_always_cap=2, top_nodes=1)
    assert set(rows) == {(0, 0, 1), (0, 0, 6), (0, 0, 5)}
    assert got.caps == ["keep_always_cap: 5 triples with one end in G"]


def test_re_additions_sources_and_labels():
    # seed 0, answer 3, G = 0 -1-> 1 -2-> 3; H lacks (1, 2, 3), has the shortcut 0 -5-> 3 (the only
    # shortest path: on_sp), 0 -5-> 8 (on a walk along the SP metapath [5]), the confounder 8 -5-> 9 and a
    # self-loop at 3. No keep-always nodes and one top node: PPR keeps nothing.
    h_triples = [(0, 1, 1), (0, 5, 3), (0, 5, 8), (3, 7, 3)]
    gt = [(0, 1, 1), (1, 2, 3)]
    rows, got = _build(h_triples, [0], 3, gt, keep_gt=[], conf=[(8, 5, 9)], top_nodes=1)
    labels = {k: v[:3] for k, v in rows.items()}
    assert labels == {
        (0, 5, 3): (False, True, "sp_metapath"),
        (0, 5, 8): (False, False, "sp_metapath"),
        (8, 5, 9): (False, False, "confounder"),
        (0, 1, 1): (True, False, "gt_readd"),
        (1, 2, 3): (True, False, "gt_readd"),
    }
    assert rows[(1, 2, 3)][3] is None and rows[(0, 1, 1)][3] > 0  # ppr: outside H null, else min of the ends
    assert (got.n_neighbourhood, got.n_confounders, got.n_kept_ppr, got.n_sp_metapath, got.n_gt_readded) == (
        4,
        1,
        0,
        2,
        2,
    )
    # sp_metapath_cap 1: the smaller hash of the two (hashes reversed: (0, 5, 8) comes after (0, 5, 3))
    rows, got = _build(h_triples, [0], 3, gt, keep_gt=[], conf=[(8, 5, 9)], top_nodes=1, sp_metapath_cap=1)
    assert {k for k, v in rows.items() if v[2] == "sp_metapath"} == {(0, 5, 8)}
    assert got.caps == ["sp_metapath_cap: 2 triples"]


def test_question_without_triples_gets_g_only():
    rows, got = _build([], [4], 2, [(4, 0, 2)])
    assert rows == {(4, 0, 2): (True, False, "gt_readd", None)}
    assert (got.ppr_iterations, got.ppr_converged, got.n_top_nodes) == (1, True, 1)


def test_tree_path_and_settings_checks():
    edges = [(5, 1, 2), (2, 3, 9), (7, 4, 2)]  # 5 -> 2 <- 7, 2 -> 9
    assert question_graph_local.tree_path(edges, 5, 9) == [(5, 1, 2, True), (2, 3, 9, True)]
    assert question_graph_local.tree_path(edges, 9, 7) == [(2, 3, 9, False), (7, 4, 2, False)]
    assert question_graph_local.tree_path(edges, 5, 5) == [] and question_graph_local.tree_path(edges, 5, 8) is None
    with pytest.raises(ConfigError, match="question_graphs.mode"):
        question_graphs.check_settings(QuestionGraphSettings(mode="both"))
    with pytest.raises(ConfigError, match="max_expand_degree"):
        question_graphs.check_settings(QuestionGraphSettings(max_expand_degree=0))


def _oracle_local(triples, seeds, answer, gt, cfg, hashes):
    """Steps 5-10 with networkx: PPR of the MultiGraph, top nodes, keep-always, shrink loop, SP triples and
    the walks along SP metapaths by enumeration, re-additions; ``{triple: (is_gt, on_sp, source)}``."""
    g = nx.MultiGraph()
    g.add_nodes_from(seeds)
    g.add_edges_from((h, t, {"triple": (h, r, t)}) for h, r, t in triples)
    ppr = nx.pagerank(g, personalization={s: 1 for s in seeds}, alpha=cfg.alpha, tol=cfg.tol, max_iter=cfg.max_iter)
    order = sorted((n for n in ppr if ppr[n] > cfg.min_ppr), key=lambda n: (-round(ppr[n], 12), n))[: cfg.top_nodes]
    gt_nodes = {x for h, _, t in gt for x in (h, t)}
    by_hash = sorted(triples, key=lambda x: (hashes[x], x))
    one_end = [x for x in by_hash if (x[0] in gt_nodes) != (x[2] in gt_nodes)]
    always = {x for x in triples if x[0] in gt_nodes and x[2] in gt_nodes}
    always |= set(one_end if len(always) + len(one_end) <= cfg.keep_always_cap else one_end[: cfg.keep_always_cap])
    n = len(order)
    kept = {x for x in triples if {x[0], x[2]} <= set(order[:n])} | always
    while len(kept) > cfg.max_triples:
        n = max(n - cfg.shrink_step, 0)
        kept = {x for x in triples if {x[0], x[2]} <= set(order[:n])} | always
        if n < cfg.min_top_nodes or n == 0:
            kept = set([x for x in by_hash if x in kept][: cfg.max_triples - 2])
            break
    on_sp, walks = set(), set()
    for s in seeds:
        try:
            paths = list(nx.all_shortest_paths(g, s, answer)) if s != answer else []
        except nx.NetworkXNoPath:
            paths = []
        on_sp |= {d["triple"] for p in paths for x, y in zip(p, p[1:]) for d in g[x][y].values()}
        if paths:
            complete, _ = oracles.enumerate_walks(triples, s, oracles.networkx_metapaths(triples, s, answer), False)
            walks |= {triples[i] for i in complete}
    walks = set([x for x in by_hash if x in walks][: cfg.sp_metapath_cap])
    out = {x: (x in gt, x in on_sp, "neighbourhood") for x in kept}
    out |= {x: (x in gt, x in on_sp, "sp_metapath") for x in walks - kept}
    out |= {x: (True, x in on_sp, "gt_readd") for x in gt if x not in out}
    return out, ppr


@settings(max_examples=120, deadline=None)
@given(
    triples=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(0, 7)), max_size=16, unique=True),
    seeds=st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True),
    answer=st.integers(0, 8),
    n_gt=st.integers(0, 3),
    caps=st.tuples(st.integers(1, 9), st.integers(2, 12), st.integers(1, 4), st.integers(0, 4), st.integers(1, 6)),
    salt=st.integers(0, 1000),
)
def test_build_local_equals_a_networkx_oracle(triples, seeds, answer, n_gt, caps, salt):
    top_nodes, max_triples, shrink_step, min_top_nodes, small_cap = caps
    cfg = QuestionGraphSettings(
        top_nodes=top_nodes,
        max_triples=max_triples,
        shrink_step=shrink_step,
        min_top_nodes=min_top_nodes,
        keep_always_cap=small_cap,
        sp_metapath_cap=small_cap,
    )
    gt = sorted(set(triples[:n_gt]) | {(answer, 9, 99)} if n_gt == 3 else set(triples[:n_gt]))  # one outside H
    rng = random.Random(salt)
    hashes = {x: rng.randrange(-(2**62), 2**62) for x in triples}
    h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
    got = question_graph_local.build_local(
        h,
        r,
        t,
        [True] * len(triples),
        [False] * len(triples),
        [hashes[x] for x in triples],
        seeds,
        answer,
        np.array(gt).reshape(-1, 3),
        np.array(gt).reshape(-1, 3),
        cfg,
    )
    expected, ppr = _oracle_local(sorted(triples), sorted(seeds), answer, gt, cfg, hashes)
    rows = {
        (int(a), int(b), int(c)): (bool(x), bool(y), s)
        for a, b, c, x, y, s in zip(got.h, got.r, got.t, got.is_gt, got.on_sp, got.source)
    }
    assert rows == expected
    for a, b, c, p in zip(got.h, got.r, got.t, got.ppr):
        if (int(a), int(b), int(c)) in hashes:
            assert p == pytest.approx(min(ppr[int(a)], ppr[int(c)]), abs=1e-9)
        else:
            assert np.isnan(p)


# ---------------------------------------------------------------------------------------------------------
# Spark: input, neighbourhood and confounders against a Python oracle, partitioning


def _oracle_search_graph(triples, seeds, k, paths, cfg):
    """E_nb (no mixed-step or neighbourhood cap hit), the confounders (walk enumeration, no cap hit) and the
    number of hubs visited."""
    degree = {}
    for h, _, t in triples:
        degree[h] = degree.get(h, 0) + 1
        degree[t] = degree.get(t, 0) + 1
    induced = lambda nodes: {x for x in triples if x[0] in nodes and x[2] in nodes}  # noqa: E731
    cap, hubs = cfg.max_expand_degree, set()
    if cfg.mode == "undirected":
        ball = oracles.ball(triples, seeds, k, "both", cap, degree)
        nb, hubs = induced(ball), {n for n, (_, hub) in ball.items() if hub}
    else:
        nb = set()
        for direction, back in (("out", "in"), ("in", "out")):
            ball = oracles.ball(triples, seeds, k, direction, cap, degree)
            hubs |= {n for n, (_, hub) in ball.items() if hub}
            near = {n for n, (d, _) in ball.items() if d <= 1}
            grown = set(near)
            for n in near:
                if not ball[n][1]:
                    grown |= set(oracles.ball(triples, [n], 1, back, None, degree))
            nb |= induced(set(ball)) | induced(grown)
    conf = set()
    for seed, relations in paths:
        _, reached = oracles.enumerate_walks(triples, seed, [relations], False)
        conf |= {triples[i] for i in reached}
    return nb, conf, len(hubs)


def _random_questions(rng, triples, n):
    """Questions planted on ``triples``: 2-hop chains (one seed) and (1)(1) (two seeds on the answer)."""
    by_node = {}
    for x in triples:
        by_node.setdefault(x[0], []).append((x, x[2]))
        by_node.setdefault(x[2], []).append((x, x[0]))
    out = []
    for i in range(n):
        while True:
            a = rng.choice(sorted(by_node))
            first = rng.choice(by_node[a])
            second = rng.choice(by_node[first[1]] if i % 2 == 0 else by_node[a])
            if i % 2 == 0 and second[1] not in (a, first[1]) and first[1] != a:
                out.append((f"q{i}", "test" if i % 3 else "train", [second[1]], a, [first[0], second[0]], 2))
                break
            if i % 2 == 1 and len({a, first[1], second[1]}) == 3:
                out.append((f"q{i}", "test", [first[1], second[1]], a, [first[0], second[0]], None))
                break
    return out


@pytest.fixture(scope="module")
def small_kg(spark):
    rng = random.Random(11)
    triples = sorted({(rng.randrange(45), rng.randrange(4), rng.randrange(45)) for _ in range(80)})
    questions = _random_questions(rng, triples, 6)
    kg = spark.createDataFrame(triples, "h int, r int, t int")
    entities = spark.createDataFrame([(i,) for i in range(45)], "id int")
    relations = spark.createDataFrame([(i,) for i in range(4)], "id int")
    return triples, questions, kg, entities, relations


def test_prepare_questions_quarantines_with_reasons(spark, small_kg):
    triples, questions, _, entities, relations = small_kg
    bad_rows = [
        (None, "test", [1], 2, [triples[0]], 1),
        ("dup", "test", [1], 2, [triples[0]], 1),
        ("dup", "train", [1], 2, [triples[0]], 1),
        ("no_seeds", "test", [], 2, [triples[0]], 1),
        ("no_answer", "test", [1], None, [triples[0]], 1),
        ("no_g", "test", [1], 2, [], 1),
        ("ghost", "test", [1], 2, [(1, 0, 77)], 1),
        ("bad_r", "test", [1], 2, [(1, 9, 2)], 1),
        ("far", "test", [5], 2, [(1, 0, 2)], 1),
    ]
    frame = spark.createDataFrame(questions + bad_rows, QUESTION_SCHEMA)
    good, paths, bad = question_graphs.prepare_questions(frame, entities, relations)
    reasons = {(r.id, r.reason) for r in bad.collect()}
    assert reasons == {
        (None, "missing_id"),
        ("dup", "duplicate_id"),
        ("no_seeds", "no_seeds"),
        ("no_answer", "missing_answer"),
        ("no_g", "empty_answer_subgraph"),
        ("ghost", "unknown_entity"),
        ("bad_r", "unknown_relation"),
        ("far", "no_gt_path"),
    }
    assert bad.count() == 9  # both rows of the repeated id
    hops = {r.qid: r.n_hops for r in good.collect()}
    assert hops == {q[0]: q[5] or 1 for q in questions}  # (1)(1) questions: n_hops computed, 1
    assert paths.where("gt_len is null").count() == 0
    with pytest.raises(ValueError, match="answer_subgraph"):
        question_graphs.prepare_questions(frame.drop("answer_subgraph"), entities, relations)


def test_question_graphs_equal_the_oracle(spark, small_kg):
    triples, questions, kg, entities, relations = small_kg
    mode = "directed_union"
    # k = max(1, n_hops): 2 for the chains, 1 for (1)(1); a hub cap of 7 triples
    cfg = QuestionGraphSettings(mode=mode, k_min=1, max_expand_degree=7)
    good, paths, _ = question_graphs.prepare_questions(
        spark.createDataFrame(questions, QUESTION_SCHEMA), entities, relations
    )
    graphs, sizes = question_graphs.question_graphs(kg.repartition(3), good, paths, cfg)
    got = {}
    for row in graphs.collect():
        got.setdefault(row.id, {})[(row.h, row.r, row.t)] = (row.is_gt, row.on_sp, row.source, row.split)
    size_rows = {row.id: row for row in sizes.collect()}
    path_rows, hubs_seen = {}, False
    for row in paths.collect():
        path_rows.setdefault(row.qid, []).append((row.seed, row.relations))
    for qid, split, seeds, answer, gt, n_hops in questions:
        k = max(1, n_hops or 1)
        nb, conf, hubs = _oracle_search_graph(triples, seeds, k, path_rows[qid], cfg)
        h_triples = sorted(nb | conf)
        expected, _ = _oracle_local(h_triples, sorted(seeds), answer, gt, cfg, {x: 0 for x in h_triples})
        assert {x: v[:3] for x, v in got[qid].items()} == expected, qid
        assert {v[3] for v in got[qid].values()} == {split}
        row = size_rows[qid]
        assert (row.k, row.mode, row.n_neighbourhood, row.n_confounders) == (k, mode, len(nb), len(conf)), qid
        assert row.n_final == len(expected) and row.ppr_converged
        assert row.caps_applied == ([f"max_expand_degree: {hubs} hubs"] if hubs else []), qid
        hubs_seen |= hubs > 0
    assert hubs_seen


def test_one_pass_equals_question_graphs_and_neighbourhood_paths(spark, small_kg):
    """question_graphs_and_paths (question-graphs --sp-analysis) against the two passes it replaces, on
    questions with one seed and with two (two pairs), whatever the partitioning."""
    _, questions, kg, entities, relations = small_kg
    cfg = QuestionGraphSettings(k_min=1, max_expand_degree=7)
    good, paths, _ = question_graphs.prepare_questions(
        spark.createDataFrame(questions, QUESTION_SCHEMA), entities, relations
    )
    pairs = shortest_paths.seed_answer_pairs(good, paths).localCheckpoint()
    assert pairs.groupBy("qid").count().where("count = 2").count() == 3
    graphs, sizes = question_graphs.question_graphs(kg, good, paths, cfg)
    found, sp_triples = shortest_paths.shortest_paths_neighbourhood(kg, good, paths, pairs, cfg)
    fused = shortest_paths.question_graphs_and_paths(kg.repartition(3), good.repartition(2), paths, pairs, cfg)
    for a, b in zip(fused, (graphs, sizes, found, sp_triples)):
        assertDataFrameEqual(a, b, rtol=0, atol=0)
    assert fused[3].count() > 0 and fused[2].where("sp_len is not null").count() == pairs.count()


def test_undirected_neighbourhood_equals_the_oracle(spark, small_kg):
    triples, questions, kg, entities, relations = small_kg
    # the paper's mode: the node-induced undirected k-ball, hubs of more than 7 triples not expanded;
    # k = max(1, n_hops) differs per question (2 for the chains, 1 for (1)(1))
    cfg = QuestionGraphSettings(mode="undirected", k_min=1, max_expand_degree=7)
    good, paths, _ = question_graphs.prepare_questions(
        spark.createDataFrame(questions, QUESTION_SCHEMA), entities, relations
    )
    seeds = good.selectExpr("qid", "explode(seeds) as id")
    limits = good.selectExpr("qid", "greatest(1, n_hops) as k")
    edges, caps = question_graphs.neighbourhood(kg, seeds, limits, cfg)
    got = {}
    for row in edges.collect():
        got.setdefault(row.qid, set()).add((row.h, row.r, row.t))
    cap_rows = {(r.qid, r.cap) for r in caps.collect()}
    for qid, _, seeds_q, _, _, n_hops in questions:
        nb, _, hubs = _oracle_search_graph(triples, seeds_q, max(1, n_hops or 1), [], cfg)
        assert got.get(qid, set()) == nb, qid
        assert ((qid, f"max_expand_degree: {hubs} hubs") in cap_rows) == (hubs > 0)


@pytest.mark.slow
def test_caps_of_the_distributed_steps_and_partitioning(spark, small_kg):
    triples, questions, kg, entities, relations = small_kg
    # every cap of the distributed steps (max_neighbourhood_edges: the triples at a seed first, then the
    # smallest hashes, as khop.cap_edges), and the same output whatever the partitioning
    cfg = QuestionGraphSettings(k_min=2, mixed_step_cap=3, metapath_cap=2, max_neighbourhood_edges=10, top_nodes=5)
    good, paths, _ = question_graphs.prepare_questions(
        spark.createDataFrame(questions, QUESTION_SCHEMA), entities, relations
    )
    one = question_graphs.question_graphs(kg.repartition(1), good.repartition(1), paths, cfg)
    seven = question_graphs.question_graphs(kg.repartition(7), good.repartition(4), paths.repartition(3), cfg)
    for a, b in zip(one, seven):
        assertDataFrameEqual(a, b, rtol=0, atol=0)
    sizes = {r.id: r for r in one[1].collect()}
    kinds = {c.split(":")[0] for r in sizes.values() for c in r.caps_applied}
    assert kinds == {"max_neighbourhood_edges", "metapath_cap", "mixed_step_cap"}
    for qid, _, seeds, *_ in questions:
        row = sizes[qid]
        assert row.n_confounders <= 2 * len(seeds)  # metapath_cap per seed
        if any(c.startswith("max_neighbourhood_edges") for c in row.caps_applied):
            assert row.n_neighbourhood >= 10  # 10, or more when the triples at the seeds alone exceed it
        else:
            assert row.n_neighbourhood <= 10
        assert row.n_top_nodes <= 5
