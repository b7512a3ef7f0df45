"""OKGQA question subgraphs (paper 004 Sec. 3.1 and App. A.5; spec Sec. 4.A).

For each question (``qid``) and its entities S:

1. the k-hop edge ball (k = 2): every triple with an endpoint at undirected distance <= k - 1 from S,
   i.e. every triple on an undirected walk of length <= k from S, as the authors' SPARQL query unions
   the four direction patterns of ``entity -p- first -p2- second``; hubs above ``max_expand_degree``
   stop walks (they are visited, not expanded), then at most ``max_subgraph_edges`` triples are kept
   (all those incident to S first, then the smallest seeded hashes);
2. Personalized PageRank on the subgraph, directed h -> t as the authors' ``nx.DiGraph``, s = 1/|S| on the
   question entities, ``p = alpha A^T p + (1 - alpha) s`` with alpha 0.85, tol 1e-6, max_iter 100
   (networkx semantics, :mod:`kgbrink.graph.pagerank`);
3. pruning: nodes with PPR below the threshold 1e-5 are removed, and a triple is kept iff both of its
   ends are kept.

Parallel triples between the same ordered pair each add weight 1 to the transition (kgbrink keeps all
triples); ``collapse_parallel`` gives the DiGraph's weight 1 per pair, for parity with the authors' code.
Directions come from the triples table (the authors rebuilt them from SPARQL rows; spec 4.A).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.core.settings import OkgqaSubgraphSettings
from kgbrink.graph import khop, pagerank


def ppr_edges(subgraph: DataFrame, directed: bool, collapse_parallel: bool) -> DataFrame:
    """``qid, src, dst`` transitions of the PPR walk: one per triple (or per ordered pair when collapsed),
    both ways when ``directed`` is false."""
    edges = subgraph.select("qid", F.col("h").alias("src"), F.col("t").alias("dst"))
    if collapse_parallel:
        edges = edges.distinct()
    if not directed:
        edges = edges.unionAll(edges.where(F.col("src") != F.col("dst")).select("qid", F.col("dst"), F.col("src")))
    return edges


def question_subgraphs(
    triples: DataFrame,
    seeds: DataFrame,
    cfg: OkgqaSubgraphSettings,
    persist: Callable[[DataFrame], DataFrame] = DataFrame.persist,
) -> tuple[DataFrame, DataFrame]:
    """``(subgraphs(qid, h, r, t, ppr_h, ppr_t), sizes)`` for ``seeds(qid, id)`` over ``triples(h, r, t)``.

    ``sizes``: ``qid, n_seeds, n_nodes_raw, n_edges_raw, n_nodes_pruned, n_edges_pruned, ppr_iterations,
    ppr_converged, hubs_not_expanded, n_edges_before_cap, caps_applied`` (raw = after the caps; a question
    whose entities have no triple has one node per entity and no edge). The walks' states are kept by
    ``persist`` (a job's ``ctx.persist``)."""
    seeds = seeds.select("qid", "id").distinct()
    visited, hubs = khop.expand(
        triples.select("h", "r", "t"), seeds, cfg.k - 1, max_expand_degree=cfg.max_expand_degree, persist=persist
    )
    ball = khop.edge_ball(triples.select("h", "r", "t"), visited, cfg.k)
    raw, capped = khop.cap_edges(ball, seeds, cfg.max_subgraph_edges, cfg.seed)
    raw = raw.transform(checkpoint)
    edges = ppr_edges(raw, cfg.directed, cfg.collapse_parallel)
    if cfg.ppr_implementation == "local":
        scores, info = pagerank.pagerank_local(edges, seeds, cfg.alpha, cfg.tol, cfg.max_iter)
    else:
        scores, info = pagerank.pagerank_batched(edges, seeds, cfg.alpha, cfg.tol, cfg.max_iter, persist=persist)
    scores = scores.transform(checkpoint)
    kept = scores.where(F.col("ppr") >= cfg.threshold)
    pruned = raw.join(kept.select("qid", F.col("id").alias("h"), F.col("ppr").alias("ppr_h")), ["qid", "h"]).join(
        kept.select("qid", F.col("id").alias("t"), F.col("ppr").alias("ppr_t")), ["qid", "t"]
    )
    pruned = pruned.select("qid", "h", "r", "t", "ppr_h", "ppr_t")
    per_q = lambda frame, name: frame.groupBy("qid").agg(F.count("*").alias(name))  # noqa: E731
    caps = F.filter(
        F.array(
            F.when(F.col("hubs_not_expanded") > 0, F.format_string("max_expand_degree: %d hubs", "hubs_not_expanded")),
            F.when(F.col("edges_capped"), F.format_string("max_subgraph_edges: %d edges", "n_edges_before_cap")),
        ),
        lambda c: c.isNotNull(),
    )
    sizes = (
        seeds.groupBy("qid")
        .agg(F.count("*").alias("n_seeds"))
        .join(info.select("qid", F.col("n_nodes").alias("n_nodes_raw"), "iterations", "converged"), "qid", "left")
        .join(per_q(raw, "n_edges_raw"), "qid", "left")
        .join(per_q(kept, "n_nodes_pruned"), "qid", "left")
        .join(per_q(pruned, "n_edges_pruned"), "qid", "left")
        .join(hubs, "qid", "left")
        .join(capped, "qid", "left")
        .fillna(0, ["n_edges_raw", "n_nodes_pruned", "n_edges_pruned", "hubs_not_expanded", "n_edges_before_cap"])
        .fillna(False, ["edges_capped"])
        .select(
            "qid",
            "n_seeds",
            "n_nodes_raw",
            "n_edges_raw",
            "n_nodes_pruned",
            "n_edges_pruned",
            F.col("iterations").alias("ppr_iterations"),
            F.col("converged").alias("ppr_converged"),
            "hubs_not_expanded",
            "n_edges_before_cap",
            caps.alias("caps_applied"),
        )
    )
    return pruned, sizes


def size_totals(sizes: DataFrame) -> dict[str, int]:
    """Over ``subgraph_sizes``: subgraphs, raw and pruned edges, PPR runs not converged, questions capped."""
    row = sizes.agg(
        F.count("*").alias("subgraphs"),
        F.sum("n_edges_raw").alias("edges_raw"),
        F.sum("n_edges_pruned").alias("edges_pruned"),
        F.sum(F.when(~F.col("ppr_converged"), 1).otherwise(0)).alias("ppr_not_converged"),
        F.sum(F.when(F.size("caps_applied") > 0, 1).otherwise(0)).alias("questions_capped"),
    ).first()
    return {name: int(row[name] or 0) for name in row.asDict()}
