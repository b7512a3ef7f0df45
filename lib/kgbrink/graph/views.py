"""Views of a triples table ``(h, r, t)`` (spec Sec. 1.1).

- :func:`edges`: the directed multigraph as GraphFrames edges ``src, r, dst`` (distinct triples).
- :func:`incidence`: one row per triple and endpoint, ``src, dst, r, dir`` (the endpoint as ``src``, the
  other end as ``dst``; 'out' for the head's row, 'in' for the tail's); a self-loop gives two rows.
- :func:`neighbours`: the simple undirected neighbour sets as steps ``src, dst`` (distinct, ``src != dst``,
  both orders).
- :func:`degrees`: ``id, degree, n_nbrs``: triple endpoints at the vertex (a self-loop counts twice, as
  ``entity_popularity.degree``) and distinct neighbours other than itself.
- :func:`relation_graphs`: the per-relation simple undirected graphs G^r as ``r, src, dst`` with
  ``src < dst`` (direction and parallel triples dropped, self-loops dropped), as paper 004 App. A.7 builds
  them.
- :func:`vertices`: the GraphFrames vertex table ``id`` of the nodes on some triple.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def edges(triples: DataFrame) -> DataFrame:
    """``src, r, dst`` from ``h, r, t``: the distinct triples as directed edges."""
    return triples.select(F.col("h").alias("src"), "r", F.col("t").alias("dst")).distinct()


def vertices(triples: DataFrame) -> DataFrame:
    """``id``: every entity that is the head or the tail of some triple."""
    return triples.select(F.col("h").alias("id")).union(triples.select(F.col("t").alias("id"))).distinct()


def incidence(triples: DataFrame) -> DataFrame:
    """``src, dst, r, dir``: (h, t, r, 'out') and (t, h, r, 'in') per triple."""
    out = triples.select(F.col("h").alias("src"), F.col("t").alias("dst"), "r", F.lit("out").alias("dir"))
    inc = triples.select(F.col("t").alias("src"), F.col("h").alias("dst"), "r", F.lit("in").alias("dir"))
    return out.unionByName(inc)


def neighbours(triples: DataFrame) -> DataFrame:
    """``src, dst``: distinct undirected neighbour pairs, both orders, without self-pairs (de-duplicated
    as unordered pairs: one row per triple goes through the shuffle, not two)."""
    linked = triples.where(F.col("h") != F.col("t")).select(
        F.least("h", "t").alias("src"), F.greatest("h", "t").alias("dst")
    )
    linked = linked.distinct()
    return linked.unionByName(linked.select(F.col("dst").alias("src"), F.col("src").alias("dst")))


def degrees(triples: DataFrame) -> DataFrame:
    """``id, degree, n_nbrs`` for every vertex on a triple: d(x) counts triple endpoints (a self-loop
    twice); n_nbrs counts distinct neighbours other than x (a vertex with only self-loops has 0)."""
    inc = incidence(triples)
    degree = inc.groupBy(F.col("src").alias("id")).agg(F.count("*").alias("degree"))
    n_nbrs = neighbours(triples).groupBy(F.col("src").alias("id")).agg(F.count("*").alias("n_nbrs"))
    return degree.join(n_nbrs, "id", "left").select("id", "degree", F.coalesce("n_nbrs", F.lit(0)).alias("n_nbrs"))


def relation_graphs(triples: DataFrame) -> DataFrame:
    """``r, src, dst``: the simple undirected graph G^r of each relation, one row per edge with ``src < dst``."""
    return (
        triples.where(F.col("h") != F.col("t"))
        .select("r", F.least("h", "t").alias("src"), F.greatest("h", "t").alias("dst"))
        .distinct()
    )
