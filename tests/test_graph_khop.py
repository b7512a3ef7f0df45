"""Batched k-hop expansion, edge balls, caps and exact hash-ordered selection."""

from __future__ import annotations

import networkx as nx
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.graph import hashing, khop
from tests import graphs

# graphs.KHOP: 0 -a-> 1 -b-> 2 -a-> 3, 1 -c-> 4, 5 -a-> 1, 3 -a-> 3 (self-loop), 6 isolated from 0's side: 6 -b-> 7


def test_expand_and_edge_ball_by_hand(spark):
    triples = spark.createDataFrame(graphs.KHOP, "h int, r int, t int")
    seeds = spark.createDataFrame([("q", 0)], "qid string, id int")
    visited, hubs = khop.expand(triples, seeds, 1)
    # one undirected hop from 0 reaches 1; the 2-hop edge ball is every triple incident to 0 or 1
    assertDataFrameEqual(visited, [("q", 0, 0, False), ("q", 1, 1, False)])
    assertDataFrameEqual(
        khop.edge_ball(triples, visited, 2), [("q", 0, 0, 1), ("q", 1, 1, 2), ("q", 1, 2, 4), ("q", 5, 0, 1)]
    )
    assertDataFrameEqual(hubs, [("q", 0)])


def test_hubs_are_visited_but_not_expanded(spark):
    triples = spark.createDataFrame(graphs.KHOP, "h int, r int, t int")
    seeds = spark.createDataFrame([("q", 0), ("p", 1)], "qid string, id int")
    # d(1) = 4 > 3: for q, node 1 is a hub at distance 1, so the ball keeps only 0's triple; for p node 1
    # is a seed and is expanded although it is a hub: its 4 triples, and (2, a, 3) of its neighbour 2.
    visited, hubs = khop.expand(triples, seeds, 1, max_expand_degree=3)
    assertDataFrameEqual(hubs, [("q", 1), ("p", 0)])
    ball = khop.edge_ball(triples, visited, 2)
    assertDataFrameEqual(ball.where("qid = 'q'"), [("q", 0, 0, 1)])
    assert ball.where("qid = 'p'").count() == 5
    # directed walks: 2 hops out of 0 reach 1 and 2; in-walks from 3 reach 2, 1 (and 3's self-loop is no step)
    out, _ = khop.expand(triples, seeds.where("qid = 'q'"), 2, direction="out")
    assertDataFrameEqual(out, [("q", 0, 0, False), ("q", 1, 1, False), ("q", 2, 2, False), ("q", 4, 2, False)])
    back, _ = khop.expand(triples, spark.createDataFrame([("r", 3)], "qid string, id int"), 2, direction="in")
    assertDataFrameEqual(back, [("r", 3, 0, False), ("r", 2, 1, False), ("r", 1, 2, False)])


def _oracle_ball(edge_list, seeds, k, cap):
    g = nx.MultiGraph()
    g.add_nodes_from(seeds)
    g.add_edges_from((h, t) for h, _, t in edge_list)
    degree = {n: sum(1 for h, _, t in edge_list for x in (h, t) if x == n) for n in g}
    dist, frontier = {s: 0 for s in seeds}, list(dict.fromkeys(seeds))
    for step in range(1, k):
        nxt = []
        for u in frontier:
            if u in seeds or cap is None or degree[u] <= cap:
                for v in g.neighbors(u):
                    if v not in dist:
                        dist[v] = step
                        nxt.append(v)
        frontier = nxt
    centres = {n for n in dist if n in seeds or cap is None or degree[n] <= cap}
    return {(h, r, t) for h, r, t in edge_list if h in centres or t in centres}


queries = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2), st.integers(0, 9)), max_size=25),
        st.lists(st.integers(0, 11), min_size=1, max_size=3),
    ),
    min_size=40,
    max_size=40,
)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=queries)
def test_edge_ball_equals_a_python_bfs_on_random_multigraphs(spark, batch):
    # one query per random graph; graphs are made disjoint by offsetting ids by 100 q
    rows = [(q * 100 + h, r, q * 100 + t) for q, (edges, _) in enumerate(batch) for h, r, t in set(edges)]
    seed_rows = [(q, q * 100 + s) for q, (_, seeds) in enumerate(batch) for s in seeds]
    triples = spark.createDataFrame(rows, "h int, r int, t int")
    seeds = spark.createDataFrame(seed_rows, "qid int, id int")
    for k, cap in ((2, None), (2, 3), (3, 2)):
        visited, _ = khop.expand(triples, seeds, k - 1, max_expand_degree=cap)
        got = {}
        for row in khop.edge_ball(triples, visited, k).collect():
            got.setdefault(row.qid, set()).add((row.h - row.qid * 100, row.r, row.t - row.qid * 100))
        for q, (edges, seeds_q) in enumerate(batch):
            assert got.get(q, set()) == _oracle_ball(set(edges), set(seeds_q), k, cap), (q, k, cap)


def test_cap_keeps_seed_triples_then_the_smallest_hashes(spark):
    edges = spark.createDataFrame(
        [("q", 0, 0, n) for n in range(1, 4)] + [("q", n, 1, n + 10) for n in range(1, 4)] + [("p", 0, 0, 1)],
        "qid string, h int, r int, t int",
    )
    seeds = spark.createDataFrame([("q", 0), ("p", 0)], "qid string, id int")
    kept, capped = khop.cap_edges(edges, seeds, 4, seed=7)
    others = edges.where("qid = 'q' and h != 0").withColumn("u", hashing.u64(7, "qid", "h", "r", "t"))
    first = others.orderBy("u", "h").first()
    expected = [("q", 0, 0, n) for n in range(1, 4)] + [("q", first.h, 1, first.t), ("p", 0, 0, 1)]
    assertDataFrameEqual(kept, expected)
    assertDataFrameEqual(capped, [("q", 6, True), ("p", 1, False)])


def test_smallest_is_exact_nested_and_partition_independent(spark):
    frame = spark.range(5000).select(F.col("id").cast("int").alias("k"))
    frame = frame.withColumn("u", hashing.u64(3, "k"))
    expected = frame.toPandas().sort_values(["u", "k"]).reset_index(drop=True)
    for m in (0, 1, 1234, 5000, 6000):
        got = hashing.smallest(frame.repartition(7), m, "u", ["k"]).toPandas().sort_values("op_rank")
        head = expected.head(m)
        assert got["k"].tolist() == head["k"].tolist()
        assert got["op_rank"].tolist() == list(range(len(head)))
    one = hashing.smallest(frame.repartition(1), 2500, "u", ["k"]).toPandas()
    seven = hashing.smallest(frame.repartition(7), 2500, "u", ["k"]).toPandas()
    pd.testing.assert_frame_equal(
        one.sort_values("k").reset_index(drop=True), seven.sort_values("k").reset_index(drop=True)
    )


def test_uniform_is_in_the_open_unit_interval(spark):
    values = spark.range(2000).select(hashing.uniform(hashing.u64(1, "id")).alias("x")).toPandas()["x"]
    assert values.between(0, 1, inclusive="neither").all()
    assert abs(values.mean() - 0.5) < 0.03
