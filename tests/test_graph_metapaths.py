"""Metapath walks (local and distributed), the shortest-path metapath trie and per-key hash caps: brute-force
walk enumeration and networkx as oracles, hand-computed caps. (khop.expand's per-query radius is checked
against a Python BFS in tests/test_synthkgqa_graphs.py, questions of radius 1 and 2 in one expansion.)"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.graph import hashing, local_metapaths, metapaths
from tests import oracles

graph = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 5)), max_size=14, unique=True)


@settings(max_examples=300, deadline=None)
@given(
    triples=graph,
    start=st.integers(0, 6),
    directed=st.booleans(),
    paths=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), min_size=1, max_size=3),
)
def test_local_walk_equals_walk_enumeration(triples, start, directed, paths):
    paths = [[x % (6 if directed else 3) for x in p] for p in paths]
    h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
    got = local_metapaths.walk(h, r, t, start, local_metapaths.trie(paths), directed)
    complete, reached = oracles.enumerate_walks(triples, start, paths, directed)
    assert set(np.flatnonzero(got.complete)) == complete
    assert set(np.flatnonzero(got.reached)) == reached


@settings(max_examples=300, deadline=None)
@given(triples=graph, s=st.integers(0, 6), a=st.integers(0, 6))
def test_shortest_path_trie_equals_networkx_paths(triples, s, a):
    h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
    assert local_metapaths.shortest_path_trie(h, r, t, s, a).paths() == oracles.networkx_metapaths(triples, s, a)


def test_trie_and_directed_labels_by_hand():
    paths = local_metapaths.trie([(1, 2), (1, 3), (1,), (4,)])
    assert paths.paths() == [(1,), (1, 2), (1, 3), (4,)]
    assert list(paths.depth) == [0, 1, 2, 2, 1]
    # 0 -1-> 1 <-1- 2: directed, the metapath "1 forward, 1 backward" is 0 -> 1 <- 2
    h, r, t = np.array([0, 2]), np.array([1, 1]), np.array([1, 1])
    there_and_back = local_metapaths.trie([(3, 2)])  # 2 r + 1 forward, 2 r backward
    assert list(local_metapaths.walk(h, r, t, 0, there_and_back, directed=True).complete) == [True, True]
    assert list(local_metapaths.walk(h, r, t, 0, local_metapaths.trie([(3, 3)]), directed=True).reached) == [
        True,
        False,
    ]
    # the SP trie keeps directions when asked: 0 -> 1 <- 2 from 0 to 2
    assert local_metapaths.shortest_path_trie(h, r, t, 0, 2, directed=True).paths() == [(3, 2)]
    assert local_metapaths.shortest_path_trie(h, r, t, 0, 0).paths() == [()]  # s == a: the empty metapath
    assert local_metapaths.shortest_path_trie(h, r, t, 0, 9).paths() == []  # unreachable


walk_batches = st.lists(
    st.tuples(graph, st.integers(0, 6), st.lists(st.integers(0, 2), min_size=1, max_size=3)),
    min_size=30,
    max_size=30,
)


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=walk_batches)
def test_distributed_walk_equals_local_walks(spark, batch):
    # walk g runs on its own copy of its graph (ids moved to 10 g ..), so that one Spark input holds all;
    # directed walks: the hand test below
    triple_rows, walk_rows, expected = [], [], set()
    for g, (triples, start, relations) in enumerate(batch):
        moved = [(10 * g + h, r, 10 * g + t) for h, r, t in triples]
        triple_rows += moved
        walk_rows.append((g, 10 * g + start, relations))
        h, r, t = np.array(moved, dtype=np.int64).reshape(-1, 3).T
        got = local_metapaths.walk(h, r, t, 10 * g + start, local_metapaths.trie([relations]))
        expected |= {(g, *moved[i], bool(got.complete[i])) for i in np.flatnonzero(got.reached)}
    triples = spark.createDataFrame(triple_rows, "h int, r int, t int").repartition(3)
    walks = spark.createDataFrame(walk_rows, "key int, start int, relations array<int>")
    walked, capped = metapaths.walk(triples, walks)
    assert {tuple(row) for row in walked.collect()} == expected
    assert capped.where("capped").count() == 0


def test_distributed_directed_walk_caps_each_step_by_hash(spark):
    # a star: 0 -1-> 10..19, each 1x -2-> 100 + x, and 5 -1-> 0 against the first step's direction; the walk
    # [1 forward, 2 forward] keeps 3 of the 10 first-step transitions, the smallest
    # u64(seed, key, step, h, r, t, src); only their far ends continue to the second step. (5, 1, 0) would
    # be a step without direction, never with it.
    rows = [(0, 1, 10 + i) for i in range(10)] + [(10 + i, 2, 100 + i) for i in range(10)] + [(5, 1, 0)]
    triples = spark.createDataFrame(rows, "h int, r int, t int")
    walks = spark.createDataFrame(
        [("q", 0, [1, 2], [True, True])], "key string, start int, relations array<int>, forward array<boolean>"
    )
    walked, capped = metapaths.walk(triples, walks, cap=3, seed=5, directed=True)
    first = spark.createDataFrame(rows[:10], "h int, r int, t int").withColumn(
        "u", hashing.u64(5, F.lit("q"), F.lit(1), "h", "r", "t", "h")
    )
    chosen = [row.t for row in first.orderBy("u", "t").limit(3).collect()]
    expected = [("q", 0, 1, x, True) for x in chosen] + [("q", x, 2, x + 90, True) for x in chosen]
    assertDataFrameEqual(walked, spark.createDataFrame(expected, "key string, h int, r int, t int, complete boolean"))
    assert [tuple(r) for r in capped.collect()] == [("q", True)]


def test_smallest_per_key_with_complete_rows_first(spark):
    frame = spark.createDataFrame(
        [("a", i, i % 3 == 0) for i in range(10)] + [("b", 1, False)], "key string, x int, first boolean"
    ).withColumn("u", hashing.u64(1, "key", "x"))
    kept, counts = hashing.smallest_per_key(frame, 4, ["key"], F.col("u"), ["x"], first=F.col("first"))
    expected = sorted(range(0, 10, 3))  # the four rows of 'a' marked first, whatever their hashes
    assert sorted(r.x for r in kept.where("key = 'a'").collect()) == expected
    assert kept.where("key = 'b'").count() == 1
    assert sorted(map(tuple, counts.collect())) == [("a", 10, True), ("b", 1, False)]
    others = frame.where("key = 'a' and not first").orderBy("u", "x").limit(2).collect()
    kept2, _ = hashing.smallest_per_key(frame, 6, ["key"], F.col("u"), ["x"], first=F.col("first"))
    assert sorted(r.x for r in kept2.where("key = 'a'").collect()) == sorted(expected + [r.x for r in others])
