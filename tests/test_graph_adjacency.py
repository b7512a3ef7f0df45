"""The shared CSR adjacency and Spark's xxhash64 in numpy: hashes against Spark's own, BFS balls, induced
subgraphs and relation steps against brute force, and the in-memory caps of the question graphs against
their DataFrame definitions (khop.cap_edges, hashing.smallest_per_key, metapaths.walk)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.graph import adjacency, hashing, khop, metapaths, xxhash
from kgbrink.synthkgqa import question_graph_local
from tests import oracles


def test_xxhash_equals_spark(spark):
    rng = random.Random(3)
    words = [
        "",
        "a",
        "q1",
        "out_in",
        "in_out",
        "é",
        "日本語のキー",
        *["x" * n for n in (3, 4, 7, 8, 9, 31, 32, 33, 64, 70)],
    ]
    words += ["".join(rng.choice("abcdefghé0123") for _ in range(rng.randrange(1, 80))) for _ in range(20)]
    ints = [0, 1, -1, 7, 2**31 - 1, -(2**31), *[rng.randrange(-(2**31), 2**31) for _ in range(30)]]
    rows = [(w, ints[i % len(ints)], ints[(3 * i + 1) % len(ints)]) for i, w in enumerate(words)]
    frame = spark.createDataFrame(rows, "s string, a int, b int").withColumn("p", F.lit("in_out"))
    got = frame.select(
        "s",
        "a",
        "b",
        hashing.u64(1111, "s", "a", "b").alias("plain"),
        hashing.u64(1111, F.struct("s", "p"), "a", "b").alias("struct"),
        hashing.u64(5, F.struct("s", "a"), F.lit(3), "b", "a").alias("walk"),
    ).collect()
    for row in got:
        a, b = np.array([row.a]), np.array([row.b])
        assert xxhash.hash_columns(xxhash.prefix(1111, row.s), a, b)[0] == row.plain
        assert xxhash.hash_columns(xxhash.prefix(1111, row.s, "in_out"), a, b)[0] == row.struct
        assert xxhash.hash_columns(xxhash.extend(xxhash.prefix(5, row.s, row.a), 3), b, a)[0] == row.walk


def test_xxhash_columns_across_blocks_equal_spark(spark, monkeypatch):
    """Whole columns, with blocks of 1,000 rows so that a partial last block is hashed too."""
    monkeypatch.setattr(xxhash, "BLOCK", 1000)
    rng = np.random.default_rng(5)
    n = 2_500
    a = rng.integers(-(2**31), 2**31, n)
    b = rng.integers(-(2**31), 2**31, n).astype(np.int32)
    frame = spark.createDataFrame([(i, int(x), int(y)) for i, (x, y) in enumerate(zip(a, b))], "i int, a int, b int")
    want = [r.u for r in frame.select(hashing.u64(9, F.lit("q7"), "a", "b").alias("u")).orderBy("i").collect()]
    got = xxhash.hash_columns(xxhash.prefix(9, "q7"), a, b)
    assert got.dtype == np.int64 and got.tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=60))
def test_distinct_is_sorted_set(values):
    from kgbrink.graph.local import distinct

    assert distinct(np.array(values, dtype=np.int64)).tolist() == sorted(set(values))
    small = np.array([v % 50 for v in values], dtype=np.int64)
    for n in (50, 10**6):  # a mask scan (many values for n), a sort (few)
        assert adjacency.distinct(small, n).tolist() == sorted({v % 50 for v in values})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-5, 40), st.integers(0, 3), st.integers(-5, 40)), max_size=40),
    st.sampled_from([1, 2**40, 2**57]),
)
def test_unique_triples_and_in_order_equal_numpy(rows, spread):
    """Packed keys when the ranges fit, the lexsort fallback when they do not (spread 2^57)."""
    from kgbrink.graph.local import unique_triples

    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    a[:, 0] *= spread
    got = np.column_stack(unique_triples(a[:, 0], a[:, 1], a[:, 2])).reshape(-1, 3)
    assert got.tolist() == np.unique(a, axis=0).tolist()
    g = adjacency.from_arrays(a[:, 2] % 7, a[:, 1] * spread, a[:, 0] % 11)
    heads, rels, tails = g.triples(np.asarray(g.in_edge))
    assert sorted(zip(tails, rels, heads)) == list(zip(tails, rels, heads))


graphs = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2), st.integers(0, 9)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(triples=graphs, seeds=st.lists(st.integers(0, 10), min_size=1, max_size=3), k=st.integers(1, 3))
def test_adjacency_against_brute_force(triples, seeds, k):
    g = adjacency.from_arrays(*np.array(triples, dtype=np.int64).reshape(-1, 3).T)
    distinct = sorted(set(triples))
    assert list(zip(*[x.tolist() for x in g.triples(np.arange(len(distinct)))])) == distinct
    degree = {}
    for h, _, t in distinct:
        degree[h] = degree.get(h, 0) + 1
        degree[t] = degree.get(t, 0) + 1
    on_triples = [s for s in seeds if s in degree]
    for direction in ("out", "in", "both"):
        expected = oracles.ball(distinct, on_triples, k, direction, 3, degree) if on_triples else {}
        got = adjacency.ball(g, g.index(on_triples), k, direction, 3)
        ids = g.node_ids(got.nodes)
        assert dict(zip(ids.tolist(), zip(got.dist.tolist(), got.hub.tolist()))) == expected
        nodes = set(expected)
        induced = [x for x in distinct if x[0] in nodes and x[2] in nodes]
        assert list(zip(*[x.tolist() for x in g.triples(adjacency.induced(g, got.nodes))])) == induced
    for r in range(3):
        for u in set(seeds):
            index = g.index([u])
            if index[0] < 0:
                continue
            out_got = {tuple(int(v) for v in x) for x in zip(*g.triples(adjacency.relation_out_edges(g, index, r)))}
            in_got = {tuple(int(v) for v in x) for x in zip(*g.triples(adjacency.relation_in_edges(g, index, r)))}
            assert out_got == {x for x in distinct if x[0] == u and x[1] == r}
            assert in_got == {x for x in distinct if x[2] == u and x[1] == r}


def test_sparse_and_negative_ids_are_numbered():
    g = adjacency.from_arrays(np.array([10**9, -5]), np.array([0, 1]), np.array([-5, 10**9]))
    assert g.ids is not None and g.index([-5, 10**9, 3]).tolist() == [0, 1, -1]
    assert sorted(zip(*[x.tolist() for x in g.triples(np.arange(2))])) == [(-5, 1, 10**9), (10**9, 0, -5)]


@pytest.fixture(scope="module")
def random_kg(spark):
    rng = random.Random(5)
    triples = sorted({(rng.randrange(30), rng.randrange(3), rng.randrange(30)) for _ in range(260)})
    return triples, spark.createDataFrame(triples, "h int, r int, t int"), adjacency.from_arrays(*np.array(triples).T)


def test_neighbourhood_cap_equals_cap_edges(spark, random_kg):
    # undirected 2-balls of 20 questions are far above 25 triples: the kept ones are khop.cap_edges's
    triples, kg, g = random_kg
    cfg = QuestionGraphSettings(mode="undirected", max_neighbourhood_edges=25, seed=9)
    questions = [(f"q{i}", [i, (7 * i + 3) % 30][: 1 + i % 2]) for i in range(20)]
    seeds = spark.createDataFrame([(q, s) for q, ss in questions for s in ss], "qid string, id int")
    visited, _ = khop.expand(kg, seeds, 2)
    expected, capped = khop.cap_edges(khop.induced_edges(kg, visited), seeds, 25, 9)
    want = {}
    for row in expected.collect():
        want.setdefault(row.qid, set()).add((row.h, row.r, row.t))
    n_capped = 0
    for qid, ss in questions:
        edges, caps = question_graph_local.local_neighbourhood(g, qid, np.array(ss), 2, cfg)
        assert set(zip(*[x.tolist() for x in g.triples(edges)])) == want[qid], qid
        n_capped += bool(caps)
    assert n_capped == capped.where("edges_capped").count() > 0


def test_confounders_equal_the_distributed_walk_and_cap(spark, random_kg):
    # metapath_cap 4: each step keeps 4 transitions, then 4 triples per walk (complete walks first), as
    # confounders did on DataFrames (metapaths.walk, hashing.smallest_per_key); undirected and directed
    triples, kg, g = random_kg
    rng = random.Random(2)
    walks = [(f"q{i}", rng.randrange(30), [rng.randrange(3) for _ in range(1 + i % 3)]) for i in range(12)]
    walks = [(q, s, rels, [rng.random() < 0.5 for _ in rels]) for q, s, rels in walks]
    frame = spark.createDataFrame(walks, "qid string, seed int, relations array<int>, forward array<boolean>")
    frame = frame.select(F.struct("qid", "seed").alias("key"), F.col("seed").alias("start"), "relations", "forward")
    for directed in (False, True):
        walked, step_capped = metapaths.walk(kg, frame, 4, 1111, directed)
        order = hashing.u64(1111, "key", "h", "r", "t")
        kept, counts = hashing.smallest_per_key(walked, 4, ["key"], order, ["h", "r", "t"], first=F.col("complete"))
        want = {}
        for row in kept.collect():
            want.setdefault(row.key.qid, set()).add((row.h, row.r, row.t))
        flagged = {r.key.qid for r in step_capped.union(counts.select("key", "capped")).where("capped").collect()}
        cfg = QuestionGraphSettings(metapath_cap=4, metapath_directed=directed)
        for qid, seed, rels, fwd in walks:
            edges, caps = question_graph_local.local_confounders(g, qid, [(seed, rels, fwd)], cfg)
            assert set(zip(*[x.tolist() for x in g.triples(edges)])) == want.get(qid, set()), (qid, directed)
            assert caps == (["metapath_cap: 1 seeds"] if qid in flagged else []), (qid, directed)
        assert flagged  # some cap hit


def test_first_by_hash_is_a_lexsort_prefix():
    rng = np.random.default_rng(1)
    for trial in range(2000):
        n, m = int(rng.integers(0, 60)), int(rng.integers(0, 70))
        hashes = rng.integers(-5, 5, n) if trial % 2 else rng.integers(-(2**62), 2**62, n)  # ties, or none
        a, b = rng.permutation(n), rng.integers(0, 3, n)
        first = rng.random(n) < 0.3 if trial % 3 else None
        keys = (a, b, hashes) if first is None else (a, b, hashes, ~first)
        assert np.array_equal(question_graph_local.first_by_hash(hashes, (a, b), m, first), np.lexsort(keys)[:m]), trial
