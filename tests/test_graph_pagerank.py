"""Personalized PageRank: Appendix A.2 values, networkx as the oracle, local == batched, partitioning."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.graph import pagerank
from kgbrink.graph.local import personalized_pagerank


def test_appendix_a2_undirected_path_by_hand():
    # a - b - c as two directed edges each, s on a: fixed point p_b = 0.1275 / 0.2775, p_a = 0.425 p_b + 0.15,
    # p_c = 0.425 p_b; from uniform x0, tol 1e-6 * n = 3e-6 stops after 75 iterations (spec A.2).
    result = personalized_pagerank(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), np.array([0]))
    p_b = 0.1275 / 0.2775
    assert np.allclose(result.scores, [0.425 * p_b + 0.15, p_b, 0.425 * p_b], atol=1e-6)
    assert (result.iterations, result.converged) == (75, True)


def test_appendix_a2_directed_path_returns_dangling_mass_to_the_seed():
    result = personalized_pagerank(np.array([0, 1]), np.array([1, 2]), np.array([0]))
    assert np.allclose(result.scores, [0.388727, 0.330418, 0.280855], atol=1e-6)


def test_non_convergence_keeps_the_last_iterate():
    result = personalized_pagerank(np.array([0, 1]), np.array([1, 2]), np.array([0]), max_iter=3)
    assert (result.iterations, result.converged) == (3, False)
    assert result.scores.sum() == pytest.approx(1.0)


def test_isolated_seed_and_extra_nodes():
    # seed 5 has no edge: it is dangling, so all mass returns to it; node 9 only receives the 1/n start.
    result = personalized_pagerank(np.array([], dtype=int), np.array([], dtype=int), np.array([5]), nodes=[9])
    assert list(result.nodes) == [5, 9]
    assert np.allclose(result.scores, [1.0, 0.0], atol=1e-6)


graphs = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=0, max_size=20),  # edges, loops, parallels
        st.lists(st.integers(0, 9), min_size=1, max_size=3),  # seeds, maybe isolated
    ),
    min_size=60,
    max_size=60,
)


def _networkx(edge_list, seeds):
    g = nx.MultiDiGraph()
    g.add_nodes_from(seeds)
    g.add_edges_from(edge_list)
    return nx.pagerank(g, personalization={s: 1 for s in seeds}, max_iter=1000)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queries=graphs)
def test_local_and_batched_equal_networkx_on_random_multigraphs(spark, queries):
    edge_rows = [(q, u, v) for q, (edge_list, _) in enumerate(queries) for u, v in edge_list]
    seed_rows = [(q, s) for q, (_, seeds) in enumerate(queries) for s in seeds]
    edges = spark.createDataFrame(edge_rows, "qid int, src int, dst int")
    seeds = spark.createDataFrame(seed_rows, "qid int, id int")
    # the batched loop costs a few Spark jobs per round: compare the iterates after 6 rounds (some queries
    # converge earlier and leave the loop) and the local version to convergence against networkx
    short, short_info = pagerank.pagerank_local(edges, seeds, max_iter=6)
    batched, batched_info = pagerank.pagerank_batched(edges, seeds, max_iter=6)
    got_short = {(r.qid, r.id): r.ppr for r in short.collect()}
    got_batched = {(r.qid, r.id): r.ppr for r in batched.collect()}
    assert got_short.keys() == got_batched.keys()
    for key, value in got_short.items():
        assert value == pytest.approx(got_batched[key], abs=1e-12)
    assert sorted(map(tuple, short_info.collect())) == sorted(map(tuple, batched_info.collect()))
    local, _ = pagerank.pagerank_local(edges, seeds, max_iter=1000)
    got_local = {(r.qid, r.id): r.ppr for r in local.collect()}
    for q, (edge_list, seeds_q) in enumerate(queries):
        expected = _networkx(edge_list, seeds_q)
        # networkx's start vector and stopping rule are the same, so agreement is to the last iterate
        for node, value in expected.items():
            assert got_local[(q, node)] == pytest.approx(value, abs=1e-9)


def test_batched_is_partition_independent_and_flags_non_convergence(spark):
    rows = [(q, u, (u * 7 + q) % 11) for q in range(4) for u in range(11)] + [(9, 0, 1), (9, 1, 2)]
    edges = spark.createDataFrame(rows, "qid int, src int, dst int")
    seeds = spark.createDataFrame([(q, q) for q in range(4)] + [(9, 0)], "qid int, id int")
    one = pagerank.pagerank_batched(edges.repartition(1), seeds, max_iter=3)
    seven = pagerank.pagerank_batched(edges.repartition(7), seeds.repartition(7), max_iter=3)
    assert sorted(one[0].collect()) == sorted(seven[0].collect())  # exact, not approximately
    info = {r.qid: (r.iterations, r.converged) for r in one[1].collect()}
    assert info[9] == (3, False)
