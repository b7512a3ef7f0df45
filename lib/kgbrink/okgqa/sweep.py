"""Similarity of every perturbed graph of a sweep to its original (paper 004 App. A.7, spec Sec. 4.C/D):
one row per (method, level, seed, scope_key) with ATS, SC2D and SD2 (:mod:`kgbrink.okgqa.similarity`),
and the Fig. 4 summary: the means over question subgraphs and seeds per (scope, method, level).

Question subgraphs are compared one group per task (``applyInPandas`` over the original and the perturbed
triples of the group); the whole KG once per (method, seed), all levels together: degrees by one
aggregation, the clustering of every G^r in one task per relation (scipy), sums as exact decimals.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.okgqa import similarity as okgqa_similarity
from kgbrink.okgqa.perturb import operations_column

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
                    "sc2d": okgqa_similarity.sc2d_local(o, p),
                    "sd2": okgqa_similarity.sd2_local(o, p),
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


def _bit(k: int) -> F.Column:
    return F.col("mask").bitwiseAND(F.lit(1 << k)) != 0


def _relation_clustering(width: int, max_wedges: int | None):
    """For ``applyInPandas`` grouped by r: ``id, c0 .. c{width-1}``, c_r(x) in the graph of each bit of
    ``mask`` (:func:`similarity.clustering_of_bits` on G^r), for the nodes with some c > 0."""

    def run(group: pd.DataFrame) -> pd.DataFrame:
        h, t, mask = (group[c].to_numpy(np.int64) for c in ("h", "t", "mask"))
        nodes, per_bit = okgqa_similarity.clustering_of_bits(h, t, mask, width, max_wedges)
        frame = pd.DataFrame({"id": nodes.astype(np.int32), **{f"c{k}": c for k, c in enumerate(per_bit)}})
        return frame[frame[[f"c{k}" for k in range(width)]].to_numpy().any(axis=1)]

    return run


def _nested_similarity(graph: DataFrame, levels: list[float], scorer, max_wedges: int | None) -> list[dict]:
    """ATS, SC2D, SD2 of every level of one (method, seed) against the original, from the nested table
    (``h, r, t, original, levels``; :func:`kgbrink.okgqa.perturb.nested_graphs`) in one pass each: bit 0 of
    ``mask`` is the original, bit i + 1 the graph at ``levels[i]``. Degrees per node and bit in one
    aggregation; c_r(x) per bit in one task per relation (scipy); sums as exact decimals."""
    width = len(levels) + 1
    mask = F.when(F.col("original"), 1).otherwise(0)
    for i, level in enumerate(levels):
        mask = mask + F.when(F.array_contains("levels", float(level)), 1 << (i + 1)).otherwise(0)
    g = graph.select("h", "r", "t", mask.cast("long").alias("mask")).where(F.col("mask") != 0).persist()
    per_relation_counts = g.groupBy("r").agg(*[F.count(F.when(_bit(k), 1)).alias(f"n{k}") for k in range(width)])
    counted = per_relation_counts.collect()  # triples per relation and graph: |T| and |R| of every graph
    n = {f"n{k}": sum(row[f"n{k}"] for row in counted) for k in range(width)}
    n_rel = [sum(1 for row in counted if row[f"n{k}"]) for k in range(width)]
    ro = max(n_rel[0], 1)
    rp = [max(x, 1) for x in n_rel]

    ends = g.select(F.explode(F.array("h", "t")).alias("id"), "mask")  # a self-loop twice
    degrees = ends.groupBy("id").agg(*[F.count(F.when(_bit(k), 1)).alias(f"d{k}") for k in range(width)])
    dd = [(F.col("d0") * rp[k] - F.col(f"d{k}") * ro).cast("decimal(20,0)") for k in range(width)]
    deg_sums = degrees.agg(*[F.sum(dd[k] * dd[k]).alias(f"s{k}") for k in range(1, width)]).first()

    schema = "id int, " + ", ".join(f"c{k} double" for k in range(width))
    per_relation = (
        g.select("r", "h", "t", "mask").groupBy("r").applyInPandas(_relation_clustering(width, max_wedges), schema)
    )
    exact = "decimal(38,24)"  # c_r(x) <= 1 and C(x) <= |R|: 14 integer digits are plenty; addition is exact
    per_node = per_relation.groupBy("id").agg(
        *[F.sum(F.col(f"c{k}").cast(exact)).cast("double").alias(f"c{k}") for k in range(width)]
    )
    dc = [F.col("c0") / ro - F.col(f"c{k}") / rp[k] for k in range(width)]
    c_sums = per_node.agg(*[F.sum((dc[k] * dc[k]).cast(exact)).alias(f"s{k}") for k in range(1, width)]).first()

    # a row of the original is a triple of the scorer's KG (the kg-similarity job checks that the perturbed
    # table was made from it): type compatibility scores it 1 without a lookup
    in_original = F.col("mask").bitwiseAND(1) == 1
    scored = scorer.score(
        g.where(F.col("mask") > 1).select("h", "r", "t", "mask", in_original.alias("_known")), "_known"
    )
    score = F.col("score").cast(exact)
    ats = scored.agg(
        *[F.sum(F.when(_bit(k), score)).alias(f"s{k}") for k in range(1, width)],
        *[F.count(F.when(_bit(k), score)).alias(f"n{k}") for k in range(1, width)],
    ).first()
    g.unpersist()
    rows = []
    for i, level in enumerate(levels):
        k = i + 1
        rows.append(
            dict(
                level=float(level),
                n_triples=n["n0"],
                n_triples_perturbed=n[f"n{k}"],
                n_relations=n_rel[0],
                n_relations_perturbed=n_rel[k],
                ats=float(ats[f"s{k}"] / ats[f"n{k}"]) if ats[f"n{k}"] else 0.0,
                sc2d=1.0 / (1.0 + math.sqrt(float(c_sums[f"s{k}"] or 0))),
                sd2=1.0 / (1.0 + math.sqrt(int(deg_sums[f"s{k}"] or 0)) / (ro * rp[k])),
            )
        )
    return rows


def kg_similarity(spark, nested: DataFrame, combos: list[tuple], scorer, max_wedges: int | None) -> DataFrame:
    """Rows of ``kg_similarity`` for the whole KG, one per ``(method, level, seed)`` of ``combos``, from the
    ``perturbed`` table of scope kg (``method, seed, h, r, t, original, levels``): one pass per (method,
    seed) over the union of the original and its graphs at every level (:func:`_nested_similarity`), with
    the definitions of :func:`similarity.sd2`, :func:`similarity.sc2d` and :func:`similarity.ats`."""
    wanted: dict[tuple, list[float]] = {}
    for method, level, seed in sorted(combos):
        wanted.setdefault((method, seed), []).append(float(level))
    rows = []
    for (method, seed), levels in sorted(wanted.items()):
        graph = nested.where((F.col("method") == method) & (F.col("seed") == seed))
        for r in _nested_similarity(graph, levels, scorer, max_wedges):
            rows.append(("kg", None, method, r.pop("level"), int(seed), *r.values(), scorer.kind))
    return spark.createDataFrame(rows, SIMILARITY_SCHEMA)


def with_operations(similarity: DataFrame, log: DataFrame, levels: list[float]) -> DataFrame:
    """``similarity`` rows (``scope, qid, method, level, seed, n_triples, ...``) plus ``operations`` (made up
    to the row's level, counted in ``log``, the ``perturbation_log``) and ``requested`` (m of the level for
    ``n_triples``: floor(p |T|), RS rounded down to even), in the column order of ``kg_similarity``."""
    every = F.array(*[F.lit(float(x)) for x in sorted(levels)])
    graph = ["method", "level", "seed", "scope_key"]
    made = (
        log.select(
            "method", "seed", "scope_key", F.explode(F.filter(every, lambda x: x >= F.col("level"))).alias("level")
        )
        .groupBy(*graph)
        .agg(F.count("*").alias("operations"))
    )
    requested = operations_column(F.col("method"), F.col("level"), F.col("n_triples"))
    joined = similarity.withColumn("scope_key", F.coalesce("qid", F.lit("kg"))).join(made, graph, "left")
    first = ["scope", "qid", "method", "level", "seed", "n_triples", "n_triples_perturbed", "n_relations"]
    return joined.select(
        *first,
        "n_relations_perturbed",
        F.coalesce("operations", F.lit(0)).cast("long").alias("operations"),
        requested.alias("requested"),
        "ats",
        "sc2d",
        "sd2",
        "scorer",
    )


def summary(similarity: pd.DataFrame) -> pd.DataFrame:
    """Means per (scope, method, level) over subgraphs and seeds (Fig. 4), with the number of graphs, the
    level reached (operations made / requested, summed) and the graphs that fell short of their level."""
    frame = similarity.assign(short=similarity["operations"] < similarity["requested"])
    grouped = frame.groupby(["scope", "method", "level"], as_index=False)
    out = grouped.agg(
        n_graphs=("sd2", "size"),
        ats=("ats", "mean"),
        sc2d=("sc2d", "mean"),
        sd2=("sd2", "mean"),
        operations=("operations", "sum"),
        requested=("requested", "sum"),
        short_graphs=("short", "sum"),
    )
    out["reached"] = [o / q if q else 1.0 for o, q in zip(out["operations"], out["requested"])]
    return out.sort_values(["scope", "method", "level"]).reset_index(drop=True)
