"""Views of a triples table ``(h, r, t)`` (spec Sec. 1.1).

- :func:`edges`: the directed multigraph as GraphFrames edges ``src, r, dst`` (distinct triples).
- :func:`incidence`: one row per triple and endpoint, ``node, nbr, r, dir`` ('out' for the head's row,
  'in' for the tail's); a self-loop gives two rows.
- :func:`neighbours`: the simple undirected neighbour sets ``node, nbr`` (distinct, ``node != nbr``).
- :func:`degrees`: ``node, degree, n_nbrs``: triple endpoints at the node (a self-loop counts twice, as
  ``entity_popularity.degree``) and distinct neighbours other than itself.
- :func:`relation_graphs`: the per-relation simple undirected graphs G^r as ``r, u, v`` with ``u < v``
  (direction and parallel triples dropped, self-loops dropped), as paper 004 App. A.7 builds them.
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
    """``node, nbr, r, dir``: (h, t, r, 'out') and (t, h, r, 'in') per triple."""
    out = triples.select(F.col("h").alias("node"), F.col("t").alias("nbr"), "r", F.lit("out").alias("dir"))
    inc = triples.select(F.col("t").alias("node"), F.col("h").alias("nbr"), "r", F.lit("in").alias("dir"))
    return out.unionByName(inc)


def neighbours(triples: DataFrame) -> DataFrame:
    """``node, nbr``: distinct undirected neighbour pairs, both orders, without self-pairs (de-duplicated
    as unordered pairs: one row per triple goes through the shuffle, not two)."""
    linked = triples.where(F.col("h") != F.col("t")).select(
        F.least("h", "t").alias("u"), F.greatest("h", "t").alias("v")
    )
    linked = linked.distinct()
    return linked.select(F.col("u").alias("node"), F.col("v").alias("nbr")).unionByName(
        linked.select(F.col("v").alias("node"), F.col("u").alias("nbr"))
    )


def degrees(triples: DataFrame) -> DataFrame:
    """``node, degree, n_nbrs`` for every node on a triple: d(x) counts triple endpoints (a self-loop
    twice); n_nbrs counts distinct neighbours other than x (a node with only self-loops has 0)."""
    inc = incidence(triples)
    degree = inc.groupBy("node").agg(F.count("*").alias("degree"))
    n_nbrs = neighbours(triples).groupBy("node").agg(F.count("*").alias("n_nbrs"))
    return degree.join(n_nbrs, "node", "left").select("node", "degree", F.coalesce("n_nbrs", F.lit(0)).alias("n_nbrs"))


def relation_graphs(triples: DataFrame) -> DataFrame:
    """``r, u, v``: the simple undirected graph G^r of each relation, one row per edge with ``u < v``."""
    return (
        triples.where(F.col("h") != F.col("t"))
        .select("r", F.least("h", "t").alias("u"), F.greatest("h", "t").alias("v"))
        .distinct()
    )
