"""Weakly connected components (spec Sec. 5.3.5): hand examples, networkx as the oracle on random multigraphs,
partition independence, and GraphFrames' two_phase where its jar is on the classpath."""

from __future__ import annotations

import random

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.session import find_jars, has_jar
from kgbrink.graph.components import ComponentsNotConverged, component_sizes, connected_components
from kgbrink.graph.graphframes_compat import connected_components_graphframes, graphframes_available
from tests import graphs

TRIPLES = "h int, r int, t int"
COMPONENTS = "id int, component int"


def _triples(spark, rows):
    return spark.createDataFrame(rows, TRIPLES)


def _vertices(spark, ids):
    return spark.createDataFrame([(i,) for i in ids], "id int")


def _oracle(spark, triples_rows, vertex_ids=()):
    """``id, component`` by networkx: the minimum id of each connected component of the undirected graph."""
    g = nx.Graph()
    g.add_nodes_from(vertex_ids)
    g.add_edges_from((h, t) for h, _, t in triples_rows)
    rows = [(v, min(c)) for c in nx.connected_components(g) for v in c]
    return spark.createDataFrame(rows, COMPONENTS)


# The hand examples (graphs.COMPONENTS), each in its own block of ids, solved together in one connected_components call.
@pytest.fixture(scope="module")
def hand(spark):
    rows = [row for example in graphs.COMPONENTS.values() for row in example]
    stats = {}
    return connected_components(
        _triples(spark, rows), vertices=_vertices(spark, graphs.COMPONENTS_VERTICES), stats=stats
    ), stats


def _block(frame, first, last):
    return frame.where(F.col("id").between(first, last))


def test_path_in_mixed_directions(spark, hand):
    got, stats = hand
    assertDataFrameEqual(_block(got, 1, 9), spark.createDataFrame([(1, 1), (2, 1), (3, 1), (4, 1)], COMPONENTS))
    assert stats["iterations"] >= 2  # at least one round that moves labels, one that sees them settled


def test_star_whose_centre_is_not_the_minimum(hand):
    assertDataFrameEqual(_block(hand[0], 10, 19), [(11, 11), (12, 11), (15, 11), (17, 11), (19, 11)])


def test_two_components_isolated_and_self_loop_only_vertices(hand):
    got = _block(hand[0], 20, 39)
    assertDataFrameEqual(got, [(21, 21), (22, 21), (23, 23), (24, 23), (25, 23), (27, 27), (30, 30), (31, 31)])
    assertDataFrameEqual(component_sizes(got), [(21, 2), (23, 3), (27, 1), (30, 1), (31, 1)])


def test_only_self_loops_needs_no_round(spark):
    stats = {}
    got = connected_components(_triples(spark, [(4, 0, 4), (6, 1, 6)]), stats=stats)
    assertDataFrameEqual(got, [(4, 4), (6, 6)])
    assert stats["iterations"] == 0
    with pytest.raises(ValueError, match="checkpoint_every"):
        connected_components(_triples(spark, [(1, 0, 2)]), checkpoint_every=0)


def test_long_path_needs_several_rounds_and_max_iter_is_enforced(spark):
    rows = [(i + 1, 0, i) for i in range(29)]  # 0 - 1 - ... - 29: the labels move a few hops per round
    stats = {}
    # three persisted rounds before a checkpoint: the plan must not multiply per round (it ran out of memory
    # with the aggregate-and-join form of the stars)
    got = connected_components(_triples(spark, rows), stats=stats, checkpoint_every=4)
    assertDataFrameEqual(got, [(i, 0) for i in range(30)])
    assert stats["iterations"] == 6  # five rounds to a star, one to see the sum unchanged
    with pytest.raises(ComponentsNotConverged, match=r"max_iter=2 .*raise max_iter"):
        connected_components(_triples(spark, rows), max_iter=2)


def test_ids_whose_sum_overflows_a_long(spark):
    big = 2**62
    rows = [(big + 3, 0, big + 1), (big + 2, 0, big + 3), (big + 5, 0, big + 4)]
    triples = spark.createDataFrame(rows, "h long, r int, t long")
    expected = [(big + i, big + (1 if i < 4 else 4)) for i in range(1, 6)]
    assertDataFrameEqual(connected_components(triples), spark.createDataFrame(expected, "id long, component long"))


# One example = 60 random multigraphs (self-loops, parallel triples, both directions, isolated vertices),
# offset by 100 ids each so that they are disjoint, solved in ONE connected_components call.
random_graphs = st.lists(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 2), st.integers(0, n - 1)), max_size=2 * n),
        )
    ),
    min_size=60,
    max_size=60,
)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=random_graphs)
def test_equals_networkx_on_random_multigraphs(spark, batch):
    rows = [(100 * g + h, r, 100 * g + t) for g, (_, triples) in enumerate(batch) for h, r, t in triples]
    ids = [100 * g + v for g, (n, _) in enumerate(batch) for v in range(n)]
    got = connected_components(_triples(spark, rows), vertices=_vertices(spark, ids))
    assertDataFrameEqual(got, _oracle(spark, rows, ids))


def _random_graph(seed: int, n: int = 400, m: int = 330) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    ids = rng.sample(range(10_000), n)
    return [(rng.choice(ids), rng.randrange(5), rng.choice(ids)) for _ in range(m)]


def test_output_is_identical_for_1_and_7_input_partitions(spark):
    rows = _random_graph(7)
    triples = _triples(spark, rows)
    one = connected_components(triples.repartition(1), checkpoint_every=1)
    seven = connected_components(triples.repartition(7, "r"), checkpoint_every=1)
    assertDataFrameEqual(one, seven)
    assertDataFrameEqual(one, _oracle(spark, rows))


def test_same_as_graphframes_two_phase(spark):
    jars = has_jar(find_jars(["./.cache/jars/graphframes"]), "graphframes-spark4")
    if not (jars and graphframes_available(spark)):
        pytest.skip(
            "GraphFrames' jar (io.graphframes:graphframes-spark4_2.13) is not on the classpath: the Maven "
            "repository this machine reaches serves no io.graphframes artifact (docs/configuration.md, 'GraphFrames')"
        )
    rows = _random_graph(11)
    triples = _triples(spark, rows)
    vertices = _vertices(spark, [10_001, 10_002])
    assertDataFrameEqual(
        connected_components_graphframes(spark, triples, vertices), connected_components(triples, vertices)
    )


def test_graphframes_absent_is_named(spark):
    if graphframes_available(spark):
        pytest.skip("GraphFrames is on the classpath here")
    with pytest.raises(RuntimeError, match=r"io\.graphframes:graphframes-spark4_2\.13"):
        connected_components_graphframes(spark, _triples(spark, [(1, 0, 2)]))
