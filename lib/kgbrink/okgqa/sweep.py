"""Similarity of every perturbed graph of a sweep to its original (paper 004 App. A.7, spec Sec. 4.C/D):
one row per (method, level, seed, scope_key) with ATS, SC2D and SD2 (:mod:`kgbrink.okgqa.similarity`),
and the Fig. 4 summary: the means over question subgraphs and seeds per (scope, method, level).

Question subgraphs are compared one group per task (``applyInPandas`` over the original and the perturbed
triples of the group); the whole KG is compared with the distributed functions, once per perturbed graph.
"""

from __future__ import annotations

import math

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.graph.triangles import clustering_sum
from kgbrink.okgqa import similarity as S

KEYS = ["method", "level", "seed", "scope_key"]
SIMILARITY_SCHEMA = (
    "scope string, qid string, method string, level double, seed int, n_triples bigint, "
    "n_triples_perturbed bigint, n_relations bigint, n_relations_perturbed bigint, ats double, sc2d double, "
    "sd2 double, scorer string"
)


def _ats(scored: DataFrame) -> DataFrame:
    return scored.groupBy(*KEYS).agg(F.avg("score").alias("ats"))


def subgraph_similarity(original: DataFrame, perturbed: DataFrame, combos: list[tuple], scorer) -> DataFrame:
    """Rows of ``kg_similarity`` for question subgraphs: ``original(scope_key, h, r, t)`` and
    ``perturbed(method, level, seed, scope_key, h, r, t)`` for the ``(method, level, seed)`` ``combos`` (a
    graph emptied by ED has no perturbed row, and still its similarity row)."""
    combos = perturbed.sparkSession.createDataFrame(combos, "method string, level double, seed int")
    paired = original.select("scope_key", "h", "r", "t").crossJoin(F.broadcast(combos))

    def compare(key, orig: pd.DataFrame, pert: pd.DataFrame) -> pd.DataFrame:
        o, p = orig[["h", "r", "t"]].drop_duplicates(), pert[["h", "r", "t"]].drop_duplicates()
        return pd.DataFrame(
            [
                {
                    "method": key[0],
                    "level": key[1],
                    "seed": key[2],
                    "scope_key": key[3],
                    "n_triples": len(o),
                    "n_triples_perturbed": len(p),
                    "n_relations": o["r"].nunique(),
                    "n_relations_perturbed": p["r"].nunique(),
                    "sc2d": S.sc2d_local(o, p),
                    "sd2": S.sd2_local(o, p),
                }
            ]
        )

    schema = (
        "method string, level double, seed int, scope_key string, n_triples bigint, n_triples_perturbed bigint, "
        "n_relations bigint, n_relations_perturbed bigint, sc2d double, sd2 double"
    )
    structure = paired.groupBy(*KEYS).cogroup(perturbed.groupBy(*KEYS)).applyInPandas(compare, schema)
    ats = _ats(scorer.score(perturbed.select(*KEYS, "h", "r", "t")))
    return structure.join(ats, KEYS, "left").select(
        F.lit("subgraph").alias("scope"),
        F.col("scope_key").alias("qid"),
        "method",
        "level",
        "seed",
        "n_triples",
        "n_triples_perturbed",
        "n_relations",
        "n_relations_perturbed",
        F.coalesce("ats", F.lit(0.0)).alias("ats"),
        "sc2d",
        "sd2",
        F.lit(scorer.kind).alias("scorer"),
    )


def _graph_vectors(triples: DataFrame, max_wedges: int | None) -> tuple[DataFrame, int, int]:
    """``(node, d, c)`` of one graph (degree d(x) and C(x) = sum_r c_r(x)), its triples and relations."""
    triples = triples.select("h", "r", "t").distinct().persist()
    n, n_rel = triples.count(), triples.select("r").distinct().count()
    ends = triples.select(F.explode(F.array("h", "t")).alias("node"))  # a self-loop twice
    degrees = ends.groupBy("node").agg(F.count("*").alias("d"))
    vectors = degrees.join(clustering_sum(triples, max_wedges), "node", "left").fillna(0.0, ["c"]).localCheckpoint()
    triples.unpersist()
    return vectors, n, n_rel


def kg_similarity(
    spark, original: DataFrame, perturbed: DataFrame, combos: list[tuple], scorer, max_wedges: int | None
) -> DataFrame:
    """Rows of ``kg_similarity`` for the whole KG, one per ``(method, level, seed)`` of ``combos``: the
    original's degrees and clustering sums are computed once, each perturbed graph's once, and SD2 and
    SC2D come from one outer join of the two (the definitions of :func:`similarity.sd2`, :func:`similarity.sc2d`;
    every square is added as an exact decimal, so the result does not depend on the partitioning)."""
    rows = []
    vo, n, n_rel = _graph_vectors(original, max_wedges)
    for method, level, seed in sorted(combos):
        p = perturbed.where((F.col("method") == method) & (F.col("level") == level) & (F.col("seed") == seed))
        vp, n_p, n_rel_p = _graph_vectors(p, max_wedges)
        ro, rp = max(n_rel, 1), max(n_rel_p, 1)
        joined = vo.join(vp.withColumnRenamed("d", "dp").withColumnRenamed("c", "cp"), "node", "full_outer").fillna(0)
        dd = (F.col("d") * rp - F.col("dp") * ro).cast("decimal(20,0)")  # (d/ro - dp/rp) ro rp, an integer
        dc = F.col("c") / ro - F.col("cp") / rp
        sums = joined.agg(F.sum(dd * dd).alias("dd"), F.sum((dc * dc).cast("decimal(38,24)")).alias("dc")).first()
        sd2 = 1.0 / (1.0 + math.sqrt(int(sums["dd"] or 0)) / (ro * rp))
        sc2d = 1.0 / (1.0 + math.sqrt(float(sums["dc"] or 0)))
        ats = S.ats(scorer.score(p.select("h", "r", "t").distinct()))
        rows.append(("kg", None, method, float(level), int(seed), n, n_p, n_rel, n_rel_p, ats, sc2d, sd2, scorer.kind))
    return spark.createDataFrame(rows, SIMILARITY_SCHEMA)


def summary(similarity: pd.DataFrame) -> pd.DataFrame:
    """Means per (scope, method, level) over subgraphs and seeds (Fig. 4), with the number of graphs."""
    grouped = similarity.groupby(["scope", "method", "level"], as_index=False)
    out = grouped.agg(n_graphs=("sd2", "size"), ats=("ats", "mean"), sc2d=("sc2d", "mean"), sd2=("sd2", "mean"))
    return out.sort_values(["scope", "method", "level"]).reset_index(drop=True)
