"""Per-relation triangles and clustering (kgbrink.graph.triangles): spec App. A.3 by hand, the degree order
of the wedge join, the wedge cap, and networkx (dev-only oracle) on random multigraphs, all batched into
one triples frame (graph g's relation r is g * RELS + r, its node x is g * NODES + x)."""

from __future__ import annotations

from math import comb

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from kgbrink.graph import triangles
from tests import graphs

SCHEMA = "h int, r int, t int"
# Spec App. A.3: a=0, b=1, c=2, d=3; r=0, s=1. G^r is the triangle a-b-c plus c-d, G^s is a-d.
A3 = [(0, 0, 1), (1, 0, 2), (0, 0, 2), (2, 0, 3), (0, 1, 3)]
# The same G^r, G^s: a self-loop, a reversed duplicate and a repeated row change nothing.
A3_NOISY = A3 + [(0, 0, 0), (1, 0, 0), (0, 0, 1), (3, 1, 3)]
NODES, RELS = 8, 4
random_graphs = st.lists(
    st.tuples(st.integers(0, NODES - 1), st.integers(0, RELS - 1), st.integers(0, NODES - 1)), max_size=40
)


def test_appendix_a3_and_a_star_by_hand(spark):
    triples = spark.createDataFrame(A3_NOISY + graphs.STAR_FIVE, SCHEMA)
    # G^r: deg a = 2 (b, c), b = 2 (a, c), c = 3 (a, b, d), d = 1; one triangle a-b-c:
    # c_r(a) = c_r(b) = 2 * 1 / (2 * 1) = 1, c_r(c) = 2 * 1 / (3 * 2) = 1/3, c_r(d) = 0 (deg < 2).
    # G^s: a-d, both deg 1, c = 0. The self-loop (d, s, d) adds no node and no degree. The star: no triangle.
    expected = [(0, 0, 2, 1, 1.0), (0, 1, 2, 1, 1.0), (0, 2, 3, 1, 1 / 3), (0, 3, 1, 0, 0.0)]
    expected += [(1, 0, 1, 0, 0.0), (1, 3, 1, 0, 0.0), (2, 10, 5, 0, 0.0)]
    expected += [(2, leaf, 1, 0, 0.0) for leaf in range(11, 16)]
    assertDataFrameEqual(triangles.relation_triangles(triples), expected)
    # C = c^r + c^s = (1, 1, 1/3, 0) on a..d, zeros kept; the star's nodes have C = 0. One wedge (next test):
    # a cap of 1 lets the join run.
    sums = [(0, 1.0), (1, 1.0), (2, 1 / 3), (3, 0.0)] + [(x, 0.0) for x in range(10, 16)]
    assertDataFrameEqual(triangles.clustering_sum(triples, max_wedges=1), sums)


def test_degree_order_centres_no_wedge_on_the_hub_and_the_cap_is_checked_first(spark):
    triples = spark.createDataFrame(A3 + graphs.STAR_FIVE, SCHEMA)
    # G^r ranks (deg, id): d (1, 3) < a (2, 0) < b (2, 1) < c (3, 2): a -> b, a -> c, b -> c, d -> c, so a has
    # out-degree 2 and the one wedge (b, c). G^s: a -> d. The star: every leaf (1, x) -> hub (5, 10), out-degree
    # 1 each, no wedge (ordered by id alone the hub would centre C(5, 2) = 10). Budget = 1 > 0: refused.
    with pytest.raises(ValueError, match=r"needs 1 wedges, over max_wedges=0"):
        triangles.relation_triangles(triples, max_wedges=0)


def _draw(n: int) -> list[list[tuple[int, int, int]]]:
    """``n`` random multigraphs from hypothesis (self-loops, repeated and reversed triples, unused nodes)."""
    drawn = []

    @settings(max_examples=n, database=None, deadline=None)
    @given(random_graphs)
    def collect(graph):
        drawn.append(graph)

    collect()
    return drawn


def _oracle(graph: list[tuple[int, int, int]]):
    """networkx per relation: ``{(r, x): (deg, triangles, clustering)}`` for the nodes with a neighbour, the
    wedge budget of the (deg, id) order, and C(x) = sum_r clustering."""
    rows, budget, total = {}, 0, {}
    for r in sorted({r for _, r, _ in graph}):
        g = nx.DiGraph([(h, t) for h, rr, t in graph if rr == r]).to_undirected()
        g.add_nodes_from(range(NODES))  # isolated in G^r: must not appear
        deg = {x: len(set(g[x]) - {x}) for x in g}
        tri, clustering = nx.triangles(g), nx.clustering(g)
        for x in g:
            if deg[x] >= 1:
                rows[(r, x)] = (deg[x], tri[x], clustering[x])
                total[x] = total.get(x, 0.0) + clustering[x]
        out = {x: sum(1 for y in set(g[x]) - {x} if (deg[x], x) < (deg[y], y)) for x in g}
        budget += sum(comb(k, 2) for k in out.values())
    return rows, budget, total


def test_random_multigraphs_equal_networkx_in_one_job_whatever_the_partitioning(spark):
    drawn = _draw(60)
    assert len(drawn) == 60
    batched = [(g * NODES + h, g * RELS + r, g * NODES + t) for g, graph in enumerate(drawn) for h, r, t in graph]
    frame = spark.createDataFrame(batched, SCHEMA)
    one, seven = frame.repartition(1), frame.repartition(7)
    result = triangles.relation_triangles(seven)
    sums = triangles.clustering_sum(seven)
    assertDataFrameEqual(triangles.relation_triangles(one), result, rtol=0, atol=0)
    assertDataFrameEqual(triangles.clustering_sum(one), sums, rtol=0, atol=0)

    got = {(row.r, row.id): (row.degree, row.triangles, row.clustering) for row in result.collect()}
    got_sums = {row.id: row.c for row in sums.collect()}
    budget = 0
    for g, graph in enumerate(drawn):
        rows, graph_budget, total = _oracle(graph)
        budget += graph_budget
        mine = {(r - g * RELS, x - g * NODES): v for (r, x), v in got.items() if r // RELS == g}
        assert mine.keys() == rows.keys(), graph
        for key, (deg, tri, c) in rows.items():
            assert mine[key][:2] == (deg, tri) and mine[key][2] == pytest.approx(c, abs=1e-12), (graph, key)
        mine_sums = {x - g * NODES: c for x, c in got_sums.items() if x // NODES == g}
        assert mine_sums == pytest.approx(total, abs=1e-12), graph
    assert triangles.wedge_budget(frame) == budget
