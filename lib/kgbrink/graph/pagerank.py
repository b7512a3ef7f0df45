"""Personalized PageRank for many source sets at once (spec Sec. 5.3.4), with networkx ``pagerank``
semantics (alpha 0.85, tol 1e-6, max_iter 100; both papers' code calls it):

    x0 = 1/n;  x <- alpha (x P + (sum of x over dangling nodes) s) + (1 - alpha) s;  stop at ||dx||_1 < n tol

per query ``qid`` over its own directed multigraph (P[u, v] = w(u, v) / W(u), parallel edges add up),
s = 1/|S| on its seeds. Two implementations that agree to rounding:

- :func:`pagerank_local`: one ``applyInPandas`` task per query with scipy (:mod:`kgbrink.graph.local`),
  the default for per-question subgraphs;
- :func:`pagerank_batched`: power iteration as join + aggregate per round over all queries at once, for
  subgraphs too large for one task; its sums are exact decimals, so the result is partition-independent. Converged queries leave the loop (Pregel's active flag); each round
  is persisted and the lineage is cut every ``checkpoint_every`` rounds.

Both return ``scores(qid, id, ppr)`` and ``info(qid, n_nodes, iterations, converged)``; a query that
does not converge keeps its last iterate with ``converged = false`` (networkx raises instead).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.graph.local import personalized_pagerank

INFO_COLUMNS = ["qid", "n_nodes", "iterations", "converged"]


def _exact_sum(values: Column) -> Column:
    """A sum whose result does not depend on the order of the rows, hence not on the partitioning:
    doubles in [0, 1] added as decimal(38, 24) (exact), then back to double."""
    return F.sum(values.cast("decimal(38,24)")).cast("double")


def _weighted(edges: DataFrame) -> DataFrame:
    """``qid, src, dst, weight``: ``weight`` defaults to 1 per row (each triple adds one)."""
    if "weight" in edges.columns:
        return edges.select("qid", "src", "dst", F.col("weight").cast("double"))
    return edges.select("qid", "src", "dst", F.lit(1.0).alias("weight"))


def pagerank_local(
    edges: DataFrame, seeds: DataFrame, alpha: float = 0.85, tol: float = 1e-6, max_iter: int = 100
) -> tuple[DataFrame, DataFrame]:
    """PPR per ``qid`` of ``edges(qid, src, dst[, weight])`` with personalization on ``seeds(qid, id)``,
    each query in one task (cogrouped ``applyInPandas``). Queries without seeds are absent."""
    qid_type = edges.schema["qid"].dataType.simpleString()
    schema = f"qid {qid_type}, id int, ppr double, iterations int, converged boolean"

    def run(key, group_edges: pd.DataFrame, group_seeds: pd.DataFrame) -> pd.DataFrame:
        if group_seeds.empty:
            return pd.DataFrame(columns=["qid", "id", "ppr", "iterations", "converged"])
        result = personalized_pagerank(
            group_edges["src"].to_numpy(),
            group_edges["dst"].to_numpy(),
            group_seeds["id"].to_numpy(),
            weight=group_edges["weight"].to_numpy(),
            alpha=alpha,
            tol=tol,
            max_iter=max_iter,
        )
        return pd.DataFrame(
            {
                "qid": key[0],
                "id": result.nodes.astype("int32"),
                "ppr": result.scores,
                "iterations": result.iterations,
                "converged": result.converged,
            }
        )

    out = (
        _weighted(edges)
        .groupBy("qid")
        .cogroup(seeds.select("qid", "id").groupBy("qid"))
        .applyInPandas(run, schema)
        .transform(checkpoint)
    )
    info = out.groupBy("qid").agg(
        F.count("*").alias("n_nodes"),
        F.first("iterations").alias("iterations"),
        F.first("converged").alias("converged"),
    )
    return out.select("qid", "id", "ppr"), info


def pagerank_batched(
    edges: DataFrame,
    seeds: DataFrame,
    alpha: float = 0.85,
    tol: float = 1e-6,
    max_iter: int = 100,
    checkpoint_every: int = 2,
    persist: Callable[[DataFrame], DataFrame] = DataFrame.persist,
) -> tuple[DataFrame, DataFrame]:
    """PPR per ``qid`` as DataFrame power iteration (see the module docstring); same inputs and outputs
    as :func:`pagerank_local`. One small action per round (the count of queries still running); each
    round's state kept by ``persist`` (a job's ``ctx.persist``: the last one is released when it ends)."""
    seeds = seeds.select("qid", "id").distinct()
    weighted = _weighted(edges).join(seeds.select("qid").distinct(), "qid", "left_semi")
    pair = weighted.groupBy("qid", "src", "dst").agg(F.sum("weight").alias("w"))
    out_weight = pair.groupBy("qid", "src").agg(F.sum("w").alias("out_w"))
    transition = pair.join(out_weight, ["qid", "src"]).select(
        "qid", "src", "dst", (F.col("w") / F.col("out_w")).alias("p")
    )
    transition = transition.persist()
    nodes = (
        weighted.select("qid", F.col("src").alias("id"))
        .union(weighted.select("qid", F.col("dst").alias("id")))
        .union(seeds)
        .distinct()
    )
    n_seeds = seeds.groupBy("qid").agg(F.count("*").alias("n_seeds"))
    n_nodes = nodes.groupBy("qid").agg(F.count("*").alias("n_nodes"))
    base = (
        nodes.join(seeds.withColumn("is_seed", F.lit(True)), ["qid", "id"], "left")
        .join(
            out_weight.select("qid", F.col("src").alias("id"), F.lit(False).alias("dangling")),
            ["qid", "id"],
            "left",
        )
        .join(n_seeds, "qid")
        .join(n_nodes, "qid")
        .select(
            "qid",
            "id",
            F.when(F.col("is_seed"), 1.0 / F.col("n_seeds")).otherwise(0.0).alias("s"),
            F.coalesce("dangling", F.lit(True)).alias("dangling"),
            "n_nodes",
            (1.0 / F.col("n_nodes")).alias("x"),
        )
    )
    state = persist(base.withColumn("iterations", F.lit(0)).withColumn("done", F.lit(False)))
    state.count()
    for iteration in range(1, max_iter + 1):
        active = state.where(~F.col("done"))
        spread = (
            active.withColumnRenamed("id", "src")
            .join(transition, ["qid", "src"])
            .groupBy("qid", F.col("dst").alias("id"))
            .agg(F.sum(F.col("x") * F.col("p")).alias("inflow"))
        )
        dangling_mass = active.where("dangling").groupBy("qid").agg(_exact_sum(F.col("x")).alias("dm"))
        stepped = (
            active.join(spread, ["qid", "id"], "left")
            .join(dangling_mass, "qid", "left")
            .withColumn(
                "x_new",
                alpha * (F.coalesce("inflow", F.lit(0.0)) + F.coalesce("dm", F.lit(0.0)) * F.col("s"))
                + (1 - alpha) * F.col("s"),
            )
        )
        change = stepped.groupBy("qid").agg(
            (_exact_sum(F.abs(F.col("x_new") - F.col("x"))) < F.first("n_nodes") * tol).alias("now_done")
        )
        stepped = stepped.join(change, "qid").select(
            "qid",
            "id",
            "s",
            "dangling",
            "n_nodes",
            F.col("x_new").alias("x"),
            F.lit(iteration).alias("iterations"),
            F.col("now_done").alias("done"),
        )
        previous = state
        state = state.where("done").unionByName(stepped)
        state = state.transform(checkpoint) if iteration % checkpoint_every == 0 else persist(state)
        running = state.where(~F.col("done")).count()
        previous.unpersist()
        if running == 0:
            break
    transition.unpersist()
    info = state.groupBy("qid").agg(
        F.first("n_nodes").alias("n_nodes"), F.max("iterations").alias("iterations"), F.min("done").alias("converged")
    )
    return state.select("qid", "id", F.col("x").alias("ppr")), info
