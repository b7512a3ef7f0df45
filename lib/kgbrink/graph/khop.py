"""Batched k-hop expansion from many seed sets at once (spec Sec. 5.3.1), one row per (query, node).

:func:`expand` runs a frontier loop over the incidence view: each round joins the newly reached
``(qid, id)`` rows with the triples and anti-joins the visited ones, so a node's distance is its BFS
distance from the query's seeds. Hubs are visited but not expanded beyond: a non-seed node whose degree
(triple endpoints) exceeds ``max_expand_degree`` stops the walk, and the number of such stops is
recorded per query. A per-query radius (``limits(qid, k)``) stops each query at its own k in one loop.

Edge sets from the visited nodes:
- :func:`edge_ball`: triples incident to an expanded node at distance <= k - 1: for k = 2 every triple
  on an undirected walk of length <= 2 from a seed (paper 004 Sec. 3.1, the SPARQL of its code);
- :func:`induced_edges`: triples with both ends visited (paper 002's neighbourhoods);
- :func:`cap_edges`: at most ``max_edges`` triples per query, keeping every triple incident to a seed
  and then the smallest ``u64(seed, qid, h, r, t)``; capped queries are flagged.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint
from kgbrink.graph.hashing import u64

DIRECTIONS = ("both", "out", "in")


def _steps(triples: DataFrame, direction: str) -> DataFrame:
    """``src, dst`` steps a walk may take: along h -> t ('out'), against it ('in') or either ('both')."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    forward = triples.select(F.col("h").alias("src"), F.col("t").alias("dst"))
    backward = triples.select(F.col("t").alias("src"), F.col("h").alias("dst"))
    steps = {"out": forward, "in": backward, "both": forward.union(backward)}[direction]
    return steps.where(F.col("src") != F.col("dst")).distinct()


def expand(
    triples: DataFrame,
    seeds: DataFrame,
    k: int,
    direction: str = "both",
    max_expand_degree: int | None = None,
    degrees: DataFrame | None = None,
    checkpoint_every: int = 2,
    limits: DataFrame | None = None,
    persist: Callable[[DataFrame], DataFrame] = DataFrame.persist,
) -> tuple[DataFrame, DataFrame]:
    """``visited(qid, id, dist, hub)`` for dist <= k, and ``hubs(qid, hubs_not_expanded)``.

    ``seeds(qid, id)``; ``degrees(id, degree)`` is needed only with ``max_expand_degree`` (computed from
    ``triples`` when not given). ``hub`` marks a non-seed node above ``max_expand_degree``: it is visited
    but the walk does not continue through it. Seeds are always expanded. ``limits(qid, k)`` (optional)
    caps each query's distance at its own k (<= the argument ``k``); a query without a row uses ``k``. Each
    round's visits kept by ``persist`` (a job's ``ctx.persist``: the last one is released when it ends)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    radius = None if limits is None else F.broadcast(limits.select("qid", F.col("k").alias("_k")))
    steps = _steps(triples, direction).persist()
    hubs = None
    if max_expand_degree is not None:
        if degrees is None:
            ends = triples.select(F.col("h").alias("id")).unionAll(triples.select(F.col("t").alias("id")))
            degrees = ends.groupBy("id").agg(F.count("*").alias("degree"))
        hubs = degrees.where(F.col("degree") > max_expand_degree).select("id", F.lit(True).alias("hub"))
    visited = seeds.select("qid", "id").distinct().withColumn("dist", F.lit(0)).withColumn("hub", F.lit(False))
    visited = persist(visited)
    for step in range(1, k + 1):
        frontier = visited.where((F.col("dist") == step - 1) & ~F.col("hub")).select("qid", F.col("id").alias("src"))
        if radius is not None:
            frontier = frontier.join(radius, "qid", "left").where(F.coalesce("_k", F.lit(k)) >= step).drop("_k")
        new = (
            frontier.join(steps, "src")
            .select("qid", F.col("dst").alias("id"))
            .distinct()
            .join(visited, ["qid", "id"], "left_anti")
            .withColumn("dist", F.lit(step))
        )
        if hubs is not None:
            new = new.join(hubs, "id", "left").fillna(False, ["hub"])
        else:
            new = new.withColumn("hub", F.lit(False))
        previous = visited
        visited = visited.unionByName(new.select("qid", "id", "dist", "hub"))
        visited = visited.transform(checkpoint) if step % checkpoint_every == 0 else persist(visited)
        empty = visited.where(F.col("dist") == step).isEmpty()
        previous.unpersist()
        if empty:
            break
    steps.unpersist()
    hub_counts = visited.groupBy("qid").agg(F.sum(F.col("hub").cast("int")).alias("hubs_not_expanded"))
    return visited, hub_counts


def edge_ball(triples: DataFrame, visited: DataFrame, k: int) -> DataFrame:
    """``qid, h, r, t``: the distinct triples incident to a visited non-hub node at distance <= k - 1 (visit
    with :func:`expand` to k - 1 hops; the last hop is this join)."""
    centres = visited.where((F.col("dist") <= k - 1) & ~F.col("hub")).select("qid", "id")
    by_head = triples.join(centres.withColumnRenamed("id", "h"), "h")
    by_tail = triples.join(centres.withColumnRenamed("id", "t"), "t")
    cols = ["qid", "h", "r", "t"]
    return by_head.select(*cols).union(by_tail.select(*cols)).distinct()


def induced_edges(triples: DataFrame, visited: DataFrame) -> DataFrame:
    """``qid, h, r, t``: the triples with both ends visited by the query."""
    nodes = visited.select("qid", "id")
    return (
        triples.join(nodes.withColumnRenamed("id", "h"), "h")
        .join(nodes.withColumnRenamed("id", "t"), ["qid", "t"])
        .select("qid", "h", "r", "t")
        .distinct()
    )


def cap_edges(edges: DataFrame, seeds: DataFrame, max_edges: int | None, seed: int) -> tuple[DataFrame, DataFrame]:
    """``(edges, capped(qid, n_edges_before_cap, edges_capped))``: for a query with more than ``max_edges``
    triples keep all triples incident to its seeds, then the smallest ``u64(seed, qid, h, r, t)`` up to
    ``max_edges`` in all (the seed triples alone may exceed it; they are kept)."""
    counts = edges.groupBy("qid").agg(F.count("*").alias("n_edges_before_cap"))
    if max_edges is None:
        return edges, counts.withColumn("edges_capped", F.lit(False))
    nodes = seeds.select("qid", "id").distinct()
    marked = (
        edges.join(nodes.select("qid", F.col("id").alias("h"), F.lit(True).alias("sh")), ["qid", "h"], "left")
        .join(nodes.select("qid", F.col("id").alias("t"), F.lit(True).alias("st")), ["qid", "t"], "left")
        .withColumn("at_seed", F.coalesce("sh", F.lit(False)) | F.coalesce("st", F.lit(False)))
        .join(counts, "qid")
    )
    small = marked.where(F.col("n_edges_before_cap") <= max_edges)
    big = marked.where(F.col("n_edges_before_cap") > max_edges)
    order = Window.partitionBy("qid").orderBy(F.desc("at_seed"), u64(seed, "qid", "h", "r", "t"), "h", "r", "t")
    big = big.withColumn("_pos", F.row_number().over(order)).where(F.col("at_seed") | (F.col("_pos") <= max_edges))
    kept = small.select("qid", "h", "r", "t").unionByName(big.select("qid", "h", "r", "t"))
    return kept, counts.withColumn("edges_capped", F.col("n_edges_before_cap") > max_edges)
