"""Weakly connected components of a triples table (spec Sec. 5.3.5; GraphFrames' ``two_phase`` algorithm,
Sec. 5.2): alternate large-star and small-star rounds on the undirected edge set (Kiveris, Lattanzi,
Mirrokni, Rastogi, Vassilvitskii, "Connected components in MapReduce and beyond", SoCC 2014).

    E    = {{h, t} : h != t}, distinct                        (relations and directions dropped)
    m(u) = min of u and its neighbours in E
    large-star: {v, m(u)} for every edge {u, v} with u < v     (each larger neighbour of u points at m(u))
    small-star: for every v, m2(v) = its smallest neighbour in the large-star graph;
                {m2(v), w} for each smaller neighbour w != m2(v) of v, and {m2(v), v}

A round keeps every component and every vertex of E and never raises m(v). As in GraphFrames, the loop
stops when the sum of m over the vertices, as a decimal(38,0), is unchanged; E is then a star forest centred
on each component's minimum id, so component(v) is the centre v is linked to, or v itself. The number of
rounds grows like O(log n) in practice. A self-loop is no edge, but its node is still a vertex.

Unlike the aggregate-and-join form of spec 5.3.5, each star step here is a window over the rows of a
vertex, so a round reads the previous round only once. The join form reads E and m(E), then the large-star
graph twice. Nested cached plans then grow the query plan manyfold per round until the next checkpoint. The
cost of windows: a hub's rows are in one task, where GraphFrames splits them with a skew join. The round's
state, both directions of E with each vertex's smallest neighbour, is persisted, and the lineage is cut
with a checkpoint (:func:`kgbrink.core.frames.checkpoint`) every ``checkpoint_every`` rounds. The result depends only on the graph, never
on the partitioning.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.graph import views

LOG = logging.getLogger(__name__)


class ComponentsNotConverged(RuntimeError):
    """The large-star / small-star loop ran ``max_iter`` rounds without converging."""


def _neighbourhoods(pairs: DataFrame) -> DataFrame:
    """``src, dst, min_dst``: every distinct edge {src, dst} of ``pairs(src, dst)`` (no self-pairs) in both
    directions, with ``min_dst`` = the smallest neighbour of src. One shuffle (by src) serves the distinct and
    the window."""
    both = F.explode(
        F.array(
            F.struct("src", "dst"),
            F.struct(F.col("dst").alias("src"), F.col("src").alias("dst")),
        )
    )
    rows = pairs.select(both.alias("e")).select("e.src", "e.dst").repartition("src").distinct()
    return rows.withColumn("min_dst", F.min("dst").over(Window.partitionBy("src")))


def _large_star(state: DataFrame) -> DataFrame:
    """``src, dst`` with ``src > dst``: (v, m(u)) for every edge {u, v} with u < v, m(u) = min(u, min_dst(u)),
    from ``state(src = u, dst = v, min_dst)``."""
    return state.where(F.col("dst") > F.col("src")).select(
        F.col("dst").alias("src"), F.least(F.col("src"), F.col("min_dst")).alias("dst")
    )


def _small_star(star: DataFrame) -> DataFrame:
    """``src, dst``: for every vertex v of ``star(src > dst)`` (repeats allowed) its smaller neighbours w and
    v itself linked to m2(v), the smallest of those neighbours (the pair (m2, m2) left out)."""
    m2 = star.withColumn("m2", F.min("dst").over(Window.partitionBy("src")))
    linked = m2.select(F.col("m2").alias("src"), F.explode(F.array("dst", "src")).alias("dst"))
    return linked.where(F.col("src") != F.col("dst"))


def _label_sum(state: DataFrame) -> Decimal | None:
    """The sum over the vertices u of m(u), as decimal(38,0) (exact whatever the row order), taken on each
    vertex's row to its smallest neighbour; None when there is no edge."""
    own = state.where(F.col("dst") == F.col("min_dst")).select(
        F.least("src", "min_dst").cast("decimal(38,0)").alias("m")
    )
    return own.agg(F.sum("m")).first()[0]


def connected_components(
    triples: DataFrame,
    vertices: DataFrame | None = None,
    checkpoint_every: int = 2,
    max_iter: int = 100,
    stats: dict[str, Any] | None = None,
) -> DataFrame:
    """``id, component``: every node of ``triples(h, r, t)`` and of ``vertices(id)`` (if given) with the
    minimum id of its weakly connected component (an isolated vertex is its own component).

    One small action per round (the convergence sum); the result is checkpointed. ``stats``, if
    given, receives ``iterations``: the rounds run, the last one confirming convergence (0 when there is no
    edge). The count is also logged. Raises :class:`ComponentsNotConverged` after ``max_iter`` rounds."""
    if checkpoint_every < 1 or max_iter < 1:
        raise ValueError(f"checkpoint_every ({checkpoint_every}) and max_iter ({max_iter}) must be >= 1")
    nodes = views.vertices(triples)
    if vertices is not None:
        nodes = nodes.union(vertices.select("id")).distinct()
    pairs = triples.where(F.col("h") != F.col("t")).select(F.col("h").alias("src"), F.col("t").alias("dst"))
    state = _neighbourhoods(pairs).persist()
    try:
        previous = _label_sum(state)
        iterations = 0
        while previous is not None:
            if iterations == max_iter:
                raise ComponentsNotConverged(
                    f"connected components did not converge in max_iter={max_iter} large-star/small-star rounds "
                    "(the sum of minimum-neighbour ids still changed in the last round); raise max_iter"
                )
            iterations += 1
            following = _neighbourhoods(_small_star(_large_star(state)))
            following = following.transform(checkpoint) if iterations % checkpoint_every == 0 else following.persist()
            current = _label_sum(following)
            state.unpersist()
            state = following
            if current == previous:
                break
            previous = current
        LOG.info("connected components: %d large-star/small-star rounds", iterations)
        if stats is not None:
            stats["iterations"] = iterations
        labels = state.where(F.col("src") < F.col("dst")).select(
            F.col("dst").alias("id"), F.col("src").alias("component")
        )
        return (
            nodes.join(labels, "id", "left")
            .select("id", F.coalesce(F.col("component"), F.col("id")).alias("component"))
            .transform(checkpoint)
        )
    finally:
        state.unpersist()


def component_sizes(components: DataFrame) -> DataFrame:
    """``component, size``: the number of vertices of each component of ``components(id, component)``."""
    return components.groupBy("component").agg(F.count("*").alias("size"))
