"""Distances and shortest paths: hand-computed examples, networkx as the oracle on random multigraphs,
distributed (kgbrink.graph.paths) == local (kgbrink.graph.local_paths), partitioning."""

from __future__ import annotations

from math import prod

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from kgbrink.graph import local_paths
from kgbrink.graph import paths as graph_paths

TRIPLE_SCHEMA = "h int, r int, t int"
PAIR_SCHEMA = "pair_id int, s int, a int"
SUMMARY_SCHEMA = "pair_id int, distance int, n_paths double, n_sp_nodes long, n_sp_triples long"
EDGE_SCHEMA = "pair_id int, h int, r int, t int"
DISTANCE_SCHEMA = "key int, id int, dist int"

# 0 and 1 are joined by three parallel triples, one of them reversed; 3 has a self-loop; 5 - 6 is a second
# component; 9 is on no triple; (0, 1, 1) is listed twice and counts once.
#
#        (0,1,1) (0,2,1) (1,5,0)
#     0 ========================= 1 --(1,1,3)-- 3 --(3,2,4)-- 4        5 --(5,1,6)-- 6        9
#     |                                         |  \_(3,1,3) self-loop
#     +--(0,1,2)-- 2 ---------(2,3,3)-----------+
HAND_TRIPLES = [(0, 1, 1), (0, 2, 1), (1, 5, 0), (1, 1, 3), (0, 1, 2), (2, 3, 3), (3, 1, 3), (3, 2, 4), (5, 1, 6)]
HAND_TRIPLES += [(0, 1, 1)]
FROM_0_TO_3 = [(0, 1, 1), (0, 1, 2), (0, 2, 1), (1, 1, 3), (1, 5, 0), (2, 3, 3)]
HAND_PAIRS = [(1, 0, 3), (2, 4, 0), (3, 3, 3), (4, 0, 9), (5, 5, 0), (6, 5, 6)]
HAND_SUMMARY = [
    # 0-1-3 (3 triples x 1) and 0-2-3 (1 x 1): D = 2, 4 triple paths (2 node paths), nodes {0, 1, 2, 3}, the
    # six triples of FROM_0_TO_3 (the self-loop at 3 is on no shortest path)
    (1, 2, 4.0, 4, 6),
    # 4-3 then the four paths from 3 to 0: D = 3, 4 x 1 triple paths, nodes {0..4}, FROM_0_TO_3 + (3, 2, 4)
    (2, 3, 4.0, 5, 7),
    (3, 0, 1.0, 1, 0),  # s == a: the empty path; the self-loop does not count
    (4, None, 0.0, 0, 0),  # 9 is on no triple
    (5, None, 0.0, 0, 0),  # another component
    (6, 1, 1.0, 2, 1),
]
HAND_EDGES = [(1, *x) for x in FROM_0_TO_3] + [(2, *x) for x in FROM_0_TO_3 + [(3, 2, 4)]] + [(6, 5, 1, 6)]
HAND_NODE_PATHS = {1: 2.0, 2: 2.0, 3: 1.0, 4: 0.0, 5: 0.0, 6: 1.0}
# BFS from 0 (key 1) and from {4, 5} (key 2); directed h -> t, 4 and 5 only reach 6 (from 5) and key 1
# loses nothing (1 -> 0 is the only triple against the way: 0 -> 1 -> 3 -> 4 still holds).
HAND_SOURCES = [(1, 0), (2, 4), (2, 5)]
UNDIRECTED = [(1, 0, 0), (1, 1, 1), (1, 2, 1), (1, 3, 2), (1, 4, 3)]
UNDIRECTED += [(2, 4, 0), (2, 5, 0), (2, 3, 1), (2, 6, 1), (2, 1, 2), (2, 2, 2), (2, 0, 3)]
DIRECTED = [(1, 0, 0), (1, 1, 1), (1, 2, 1), (1, 3, 2), (1, 4, 3), (2, 4, 0), (2, 5, 0), (2, 6, 1)]


def test_local_shortest_paths_by_hand():
    h, r, t = np.array(HAND_TRIPLES).T
    for (pair_id, s, a), (_, distance, n_paths, n_nodes, n_triples) in zip(HAND_PAIRS, HAND_SUMMARY):
        got = local_paths.shortest_path_edges(h, r, t, s, a)
        assert (got.distance, got.n_paths, got.n_sp_nodes, got.n_sp_triples) == (distance, n_paths, n_nodes, n_triples)
        assert [(pair_id, *x) for x in got.edges.itertuples(index=False)] == [e for e in HAND_EDGES if e[0] == pair_id]
        assert local_paths.shortest_path_edges(h, r, t, s, a, count="nodes").n_paths == HAND_NODE_PATHS[pair_id]


def test_local_bfs_distances_by_hand():
    h, t = np.array(HAND_TRIPLES)[:, [0, 2]].T
    for directed, expected in ((False, UNDIRECTED), (True, DIRECTED)):
        for key in (1, 2):
            got = local_paths.bfs_distances(h, t, [n for k, n in HAND_SOURCES if k == key], directed=directed)
            assert sorted(got.itertuples(index=False)) == sorted((n, d) for k, n, d in expected if k == key)
    near = local_paths.bfs_distances(h, t, [0], max_dist=1)
    assert list(near.itertuples(index=False)) == [(0, 0), (1, 1), (2, 1)]
    assert local_paths.bfs_distances(h, t, [9]).values.tolist() == [[9, 0]]  # a source on no triple


def test_distributed_by_hand_is_partition_independent(spark):
    triples = spark.createDataFrame(HAND_TRIPLES, TRIPLE_SCHEMA)
    pairs = spark.createDataFrame(HAND_PAIRS, PAIR_SCHEMA)
    runs = [graph_paths.shortest_path_edges(triples.repartition(n), pairs.repartition(n)) for n in (1, 7)]
    for edges, summary in runs:
        assertDataFrameEqual(summary, spark.createDataFrame(HAND_SUMMARY, SUMMARY_SCHEMA), rtol=0, atol=0)
        assertDataFrameEqual(edges, spark.createDataFrame(HAND_EDGES, EDGE_SCHEMA))
    for one, seven in zip(*runs):
        assertDataFrameEqual(one, seven, rtol=0, atol=0)
    # undirected distances: the random graphs below; here the directed walk, cut at 2 steps
    sources = spark.createDataFrame(HAND_SOURCES, "key int, id int")
    directed = graph_paths.bfs_distances(triples.repartition(7), sources, max_dist=2, directed=True)
    near = [row for row in DIRECTED if row[2] <= 2]
    assertDataFrameEqual(directed, spark.createDataFrame(near, DISTANCE_SCHEMA))


def test_bad_arguments():
    with pytest.raises(ValueError, match="count"):
        local_paths.shortest_path_edges(np.array([0]), np.array([0]), np.array([1]), 0, 1, count="walks")
    with pytest.raises(ValueError, match="max_dist"):
        graph_paths.bfs_distances(None, None, max_dist=-1)


# Random multigraphs on nodes 0..7 (self-loops, parallel and repeated triples arise); endpoints and sources
# are drawn from 0..9, so 8 and 9 are isolated. Graph g is moved to ids 10 g .. 10 g + 9 so that a batch is
# one Spark input.
graphs = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(0, 7)), max_size=14),
        st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=3),
        st.lists(st.integers(0, 9), min_size=1, max_size=2),
    ),
    min_size=60,
    max_size=60,
).filter(lambda batch: any(triples for triples, _, _ in batch))  # skips the all-empty first example


def _networkx_paths(triples, s, a):
    """``(distance, triple paths, node paths, nodes, triples)`` by enumerating ``nx.all_shortest_paths``."""
    g = nx.MultiGraph()
    g.add_nodes_from(range(10))
    g.add_edges_from((h, t, (h, r, t)) for h, r, t in triples)
    try:
        paths = list(nx.all_shortest_paths(g, s, a))
    except nx.NetworkXNoPath:
        return None, 0.0, 0.0, set(), set()
    steps = [list(zip(p, p[1:])) for p in paths]
    n_triple_paths = sum(prod(g.number_of_edges(x, y) for x, y in path) for path in steps)
    on_path = {key for path in steps for x, y in path for key in g[x][y]}
    return len(paths[0]) - 1, float(n_triple_paths), float(len(paths)), {x for p in paths for x in p}, on_path


def _networkx_distances(triples, sources, max_dist, directed=False):
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(10))
    g.add_edges_from((h, t) for h, _, t in triples)
    best = {}
    for source in sources:
        for node, dist in nx.single_source_shortest_path_length(g, source, cutoff=max_dist).items():
            best[node] = min(dist, best.get(node, dist))
    return best


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=graphs, max_dist=st.sampled_from([None, 1, 2]))
def test_random_multigraphs_against_networkx(spark, batch, max_dist):
    triple_rows, pair_rows, frame_rows, source_rows = [], [], [], []
    summary_rows, edge_rows, distance_rows = [], [], []
    for g, (triples, pairs, sources) in enumerate(batch):
        moved = [(10 * g + h, r, 10 * g + t) for h, r, t in triples]
        triple_rows += moved
        source_rows += [(g, 10 * g + x) for x in sources]
        expected = _networkx_distances(triples, sources, max_dist)
        distance_rows += [(g, 10 * g + node, dist) for node, dist in expected.items()]
        h, r, t = np.array(triples, dtype=np.int64).reshape(-1, 3).T
        for directed in (False, True):
            local = local_paths.bfs_distances(h, t, sources, max_dist=max_dist, directed=directed)
            assert dict(local.itertuples(index=False)) == _networkx_distances(triples, sources, max_dist, directed)
        for k, (s, a) in enumerate(pairs):
            pair_id = 3 * g + k
            pair_rows.append((pair_id, 10 * g + s, 10 * g + a))
            frame_rows += [(pair_id, *x) for x in moved]
            distance, n_paths, n_node_paths, nodes, on_path = _networkx_paths(set(triples), s, a)
            summary_rows.append((pair_id, distance, n_paths, len(nodes), len(on_path)))
            edge_rows += [(pair_id, 10 * g + x, y, 10 * g + z) for x, y, z in on_path]
            got = local_paths.shortest_path_edges(h, r, t, s, a)
            assert (got.distance, got.n_paths, got.n_sp_nodes, got.n_sp_triples) == summary_rows[-1][1:]
            assert set(got.edges.itertuples(index=False, name=None)) == on_path
            assert local_paths.shortest_path_edges(h, r, t, s, a, count="nodes").n_paths == n_node_paths
    triples = spark.createDataFrame(triple_rows, TRIPLE_SCHEMA)
    pairs = spark.createDataFrame(pair_rows, PAIR_SCHEMA)
    edges, summary = graph_paths.shortest_path_edges(triples.repartition(7), pairs)
    assertDataFrameEqual(summary, spark.createDataFrame(summary_rows, SUMMARY_SCHEMA), rtol=0, atol=0)
    assertDataFrameEqual(edges, spark.createDataFrame(edge_rows, EDGE_SCHEMA))
    local_edges, local_summary = local_paths.shortest_paths_per_group(
        spark.createDataFrame(frame_rows, EDGE_SCHEMA), pairs
    )
    assertDataFrameEqual(local_summary, summary, rtol=0, atol=0)
    assertDataFrameEqual(local_edges, edges)
    sources = spark.createDataFrame(source_rows, "key int, id int")
    distances = graph_paths.bfs_distances(triples, sources, max_dist=max_dist)
    assertDataFrameEqual(distances, spark.createDataFrame(distance_rows, DISTANCE_SCHEMA))
