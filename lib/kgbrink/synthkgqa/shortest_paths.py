"""Shortest paths against ground-truth paths (paper 002 App. D.2, Table D2, Fig. D9; spec 2.E).

Per question q with seeds S, answer a and ground-truth answer subgraph G, in a graph H searched as an
undirected multigraph of distinct triples:

- pairs (s, a) for every seed s and a = the generated answer (``shortest_paths.answers: generated``, the
  authors' code) or every answer of ``all_answers`` (``all``; gt_len is null for the other answers);
- dist(s, a) in H (``sp_len``), gt_len = the length of the path s -> a in the tree G, ``shortcut`` =
  sp_len < gt_len (null when either is);
- the triples on shortest s-a paths, by the distance-sum test ds(u) + 1 + da(v) = D (either way round;
  every parallel triple counts), and the number of shortest paths counted by the BFS layer DP, never
  enumerated: ``n_triple_paths`` with parallel triples multiplying (the code's enumeration of every
  parallel-edge combination) and ``n_node_paths`` as node sequences (``nx.all_shortest_paths``); doubles,
  exact below 2^53; 0 for an unreachable pair;
- SP_q = the union of the pairs' triple sets, GT_q = G; ``pct_gt_in_sp`` = 100 |GT_q & SP_q| / |GT_q|
  (Table D2 "% GT triples in SP"), ``pct_sp_in_gt`` = 100 |GT_q & SP_q| / |SP_q| (null when SP_q is
  empty), triples compared as exact (h, r, t);
- Table D2: per split and n_hops the means over questions; Fig. D9: per split and gt_len the means of
  sp_len, n_node_paths and n_triple_paths over the reachable pairs, and the shortcut share.

H is the question's search graph (``shortest_paths.graph: neighbourhood``, the code: E_nb and the
confounders of :func:`kgbrink.synthkgqa.question_graph_local.local_search_graph`, before PPR pruning), each
question in one task with numpy (:mod:`kgbrink.graph.local_paths`), H built in that task; or the whole KG (``full_kg``, the
paper's Wikidata example): the distributed bidirectional BFS of :mod:`kgbrink.graph.paths`, then the node
paths on each pair's shortest-path triples (they hold every shortest path, so the count is the same).
Means add their values in sorted order, so they do not depend on the partitioning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.core.settings import QuestionGraphSettings, ShortestPathSettings
from kgbrink.core.typed import ConfigError
from kgbrink.graph import local_paths
from kgbrink.graph import paths as graph_paths
from kgbrink.graph.hashing import u64
from kgbrink.synthkgqa import question_graph_rows, question_graphs

GRAPHS = ("neighbourhood", "full_kg")
ANSWERS = ("generated", "all")
PAIR_COLUMNS = [
    "id",
    "split",
    "seed",
    "answer",
    "gt_len",
    "sp_len",
    "shortcut",
    "n_node_paths",
    "n_triple_paths",
]
# Table D2 of the paper (GTSQA test split): n_hops -> (% GT in SP, % SP in GT, # GT, # SP triples).
PAPER_TABLE_D2 = {
    1: (100.0, 91.0, 2.37, 2.67),
    2: (89.8, 52.7, 3.08, 19.6),
    3: (54.7, 29.6, 3.6, 46.3),
    4: (27.5, 13.3, 4.0, 100.4),
}


def check_settings(cfg: ShortestPathSettings) -> None:
    if cfg.graph not in GRAPHS:
        raise ConfigError(f"shortest_paths.graph must be one of {', '.join(GRAPHS)}, got {cfg.graph!r}")
    if cfg.answers not in ANSWERS:
        raise ConfigError(f"shortest_paths.answers must be one of {', '.join(ANSWERS)}, got {cfg.answers!r}")


def seed_answer_pairs(questions: DataFrame, paths: DataFrame, answers: str = "generated") -> DataFrame:
    """``qid, split, seed, answer, gt_len``: the pairs of the prepared questions (their ``all_answers``
    column is used with ``answers='all'``; without it, the generated answer alone)."""
    if answers not in ANSWERS:
        raise ValueError(f"answers must be one of {ANSWERS}, got {answers!r}")
    targets = F.array("answer")
    if answers == "all" and "all_answers" in questions.columns:
        known = F.filter(F.coalesce("all_answers", F.array().cast("array<int>")), lambda x: x.isNotNull())
        targets = F.array_union(targets, known)
    pairs = questions.select("qid", "split", "answer", F.explode(targets).alias("target"))
    pairs = pairs.join(paths.select("qid", "seed", "gt_len"), "qid")
    return pairs.select(
        "qid",
        "split",
        "seed",
        F.col("target").alias("answer"),
        F.when(F.col("target") == F.col("answer"), F.col("gt_len")).alias("gt_len"),
    )


@dataclass(frozen=True)
class PairPaths:
    """One pair in H: ``distance`` (None if unreachable), both path counts and the shortest-path triples
    (rows of h, r, t, sorted)."""

    distance: int | None
    n_triple_paths: float
    n_node_paths: float
    edges: np.ndarray


def pair_paths(h, r, t, s: int, a: int) -> PairPaths:
    """The shortest s-a paths of the undirected multigraph of ``h, r, t`` (module docstring): one BFS pair
    on H, the node-path count on the shortest-path triples alone."""
    found = local_paths.shortest_path_edges(h, r, t, s, a, count="triples")
    edges = found.edges[["h", "r", "t"]].to_numpy(dtype=np.int64).reshape(-1, 3)
    if found.distance is None:
        return PairPaths(None, 0.0, 0.0, edges)
    nodes = local_paths.shortest_path_edges(edges[:, 0], edges[:, 1], edges[:, 2], s, a, count="nodes").n_paths
    return PairPaths(found.distance, found.n_paths, nodes, edges)


_LOCAL_SCHEMA = (
    "qid string, seed int, answer int, sp_len int, n_node_paths double, n_triple_paths double, h int, r int, t int"
)
_LOCAL_COLUMNS = [f.split()[0] for f in _LOCAL_SCHEMA.split(", ")]


def _question_rows(qid: str, graph: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One question's pair rows (h null) and its SP_q rows (seed null)."""
    h, r, t = (graph[c].to_numpy(dtype=np.int64) for c in ("h", "r", "t"))
    rows, union = [], []
    for s, a in sorted(zip(pairs["seed"].astype(int), pairs["answer"].astype(int))):
        got = pair_paths(h, r, t, s, a)
        rows.append((qid, s, a, got.distance, got.n_node_paths, got.n_triple_paths))
        union.append(got.edges)
    found = pd.DataFrame(rows, columns=_LOCAL_COLUMNS[:6]).astype(
        {"seed": "Int32", "answer": "Int32", "sp_len": "Int32"}
    )
    edges = np.unique(np.concatenate(union or [np.zeros((0, 3), dtype=np.int64)]), axis=0)
    triples = pd.DataFrame(
        {
            "qid": qid,
            "h": pd.array(edges[:, 0], dtype="Int32"),
            "r": pd.array(edges[:, 1], dtype="Int32"),
            "t": pd.array(edges[:, 2], dtype="Int32"),
        }
    )
    out = pd.concat([found, triples], ignore_index=True)
    return out.astype({c: "Int32" for c in ("seed", "answer", "sp_len", "h", "r", "t")})[_LOCAL_COLUMNS]


def shortest_paths_local(graph: DataFrame, pairs: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(found(qid, seed, answer, sp_len, n_node_paths, n_triple_paths), sp_triples(qid, h, r, t))`` for
    ``pairs(qid, seed, answer)`` in each question's own graph ``graph(qid, h, r, t)``, one question per
    task (cogrouped ``applyInPandas``)."""

    def run(key, group: pd.DataFrame, wanted: pd.DataFrame) -> pd.DataFrame:
        if wanted.empty:
            return pd.DataFrame(columns=_LOCAL_COLUMNS)
        return _question_rows(key[0], group, wanted)

    key = F.col("qid").alias("qid")  # new attributes: the graph may derive from the pairs (a self-join)
    out = (
        graph.select(key, "h", "r", "t")
        .groupBy("qid")
        .cogroup(pairs.select(key, "seed", "answer").groupBy("qid"))
        .applyInPandas(run, _LOCAL_SCHEMA)
        .transform(checkpoint)
    )
    found = out.where(F.col("seed").isNotNull()).select(*_LOCAL_COLUMNS[:6])
    return found, out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t")


def shortest_paths_neighbourhood(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, pairs: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """As :func:`shortest_paths_local` with each question's graph its search graph H of
    :func:`kgbrink.synthkgqa.question_graph_local.local_search_graph`, built in the same task (no H table
    in between)."""
    rows = _with_pairs(question_graphs.search_inputs(questions, paths, cfg).select("qid", "seeds", "k", "walks"), pairs)

    def fn(g, row):
        found = question_graph_rows.search_graph_of(g, row, cfg)
        h, r, t = g.triples(found.edges)
        return _question_rows(row["qid"], pd.DataFrame({"h": h, "r": r, "t": t}), _pair_frame(row["pairs"]))

    out = question_graphs.per_question(kg, rows, fn, _LOCAL_SCHEMA)
    found = out.where(F.col("seed").isNotNull()).select(*_LOCAL_COLUMNS[:6])
    return found, out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t")


_FUSED_SCHEMA = (
    question_graph_rows.LOCAL_SCHEMA
    + ", seed int, answer int, sp_len int, n_node_paths double, n_triple_paths double, sp_h int, sp_r int, sp_t int"
)
_PANDAS_TYPES = {"int": "Int32", "long": "Int64", "boolean": "boolean", "double": "float64"}


def question_graphs_and_paths(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, pairs: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """``(graphs, sizes, found, sp_triples)``: :func:`kgbrink.synthkgqa.question_graphs.question_graphs`
    and :func:`shortest_paths_neighbourhood` in one pass, each question's search graph H built once for
    both (the authors' ``compute_neighs_and_sp.py`` also does both in one loop)."""
    question_graphs.check_settings(cfg)
    rows = _with_pairs(
        question_graphs.search_inputs(questions, paths, cfg).select(*question_graphs.GRAPH_INPUTS), pairs, "left"
    )
    fields = [f.split() for f in _FUSED_SCHEMA.split(", ")]
    types = {name: _PANDAS_TYPES.get(kind, object) for name, kind in fields}

    def fn(g, row):
        (h, r, t), graph_rows = question_graph_rows.local_question_graph(g, row, cfg)
        sp = _question_rows(row["qid"], pd.DataFrame({"h": h, "r": r, "t": t}), _pair_frame(row["pairs"]))
        sp = sp.rename(columns={"h": "sp_h", "r": "sp_r", "t": "sp_t"})
        out = pd.concat([graph_rows, sp], ignore_index=True).reindex(columns=list(types))
        out = out.astype({c: k for c, k in types.items() if k is not object})
        for c in (c for c, k in types.items() if k is object):
            out[c] = out[c].astype(object).where(out[c].notna(), None)
        return out

    out = question_graphs.per_question(kg, rows, fn, _FUSED_SCHEMA)
    graphs, sizes = question_graphs.graph_tables(out, questions, cfg)  # pair and SP rows have neither h nor n_final
    found = out.where(F.col("seed").isNotNull()).select(*_LOCAL_COLUMNS[:6])
    sp_triples = out.where(F.col("sp_h").isNotNull()).select(
        "qid", F.col("sp_h").alias("h"), F.col("sp_r").alias("r"), F.col("sp_t").alias("t")
    )
    return graphs, sizes, found, sp_triples


def _with_pairs(rows: DataFrame, pairs: DataFrame, how: str = "inner") -> DataFrame:
    """``rows`` (one per qid) with a ``pairs`` column: the question's (seed, answer) structs."""
    wanted = pairs.groupBy("qid").agg(F.collect_list(F.struct("seed", "answer")).alias("pairs"))
    return rows.join(wanted, "qid", how)


def _pair_frame(value) -> pd.DataFrame:
    """``seed, answer`` of a ``pairs`` value as pandas gives it (None: no pair)."""
    pairs = [] if value is None else value  # a numpy array of dicts (no truth value)
    return pd.DataFrame([(int(p["seed"]), int(p["answer"])) for p in pairs], columns=["seed", "answer"])


def shortest_paths_full_kg(kg: DataFrame, pairs: DataFrame, seed: int = 0) -> tuple[DataFrame, DataFrame]:
    """As :func:`shortest_paths_local` with H = the whole ``kg`` (distributed bidirectional BFS)."""
    keyed = pairs.select("qid", "seed", "answer", u64(seed, "qid", "seed", "answer").alias("pair_id")).transform(
        checkpoint
    )
    if keyed.select("pair_id").distinct().count() != keyed.count():
        raise ValueError("two (question, seed, answer) pairs share a 64-bit hash; no pair ids for the BFS")
    edges, summary = graph_paths.shortest_path_edges(
        kg, keyed.select("pair_id", F.col("seed").alias("s"), F.col("answer").alias("a"))
    )
    nodes = local_paths.shortest_paths_per_group(
        edges, keyed.select("pair_id", F.col("seed").alias("s"), F.col("answer").alias("a")), count="nodes"
    )[1]
    found = (
        keyed.join(summary, "pair_id")
        .join(nodes.select("pair_id", F.col("n_paths").alias("n_node_paths")), "pair_id")
        .select(
            "qid",
            "seed",
            "answer",
            F.col("distance").alias("sp_len"),
            F.when(F.col("distance").isNull(), F.lit(0.0)).otherwise(F.col("n_node_paths")).alias("n_node_paths"),
            F.col("n_paths").alias("n_triple_paths"),
        )
    )
    triples = edges.join(keyed.select("pair_id", "qid"), "pair_id").select("qid", "h", "r", "t").distinct()
    return found, triples


def pair_table(pairs: DataFrame, found: DataFrame) -> DataFrame:
    """``sp_pairs``: the pairs with their gt_len, sp_len, shortcut and path counts."""
    return pairs.join(found, ["qid", "seed", "answer"], "left").select(
        F.col("qid").alias("id"),
        "split",
        "seed",
        "answer",
        "gt_len",
        "sp_len",
        (F.col("sp_len") < F.col("gt_len")).alias("shortcut"),
        F.coalesce("n_node_paths", F.lit(0.0)).alias("n_node_paths"),
        F.coalesce("n_triple_paths", F.lit(0.0)).alias("n_triple_paths"),
    )


def overlap(questions: DataFrame, sp_triples: DataFrame) -> DataFrame:
    """``sp_overlap``: per question ``id, split, n_hops, n_gt, n_sp, n_gt_in_sp, pct_gt_in_sp,
    pct_sp_in_gt`` (module docstring); ``questions(qid, split, n_hops, gt)``."""
    gt = questions.select("qid", F.explode("gt").alias("x")).select("qid", "x.h", "x.r", "x.t").distinct()
    marked = sp_triples.select("qid", "h", "r", "t").distinct().withColumn("in_sp", F.lit(1))
    both = gt.join(marked, ["qid", "h", "r", "t"]).groupBy("qid").agg(F.count("*").alias("n_gt_in_sp"))
    n_sp = marked.groupBy("qid").agg(F.count("*").alias("n_sp"))
    zero = F.lit(0).cast("long")
    return (
        questions.select("qid", "split", "n_hops", F.size("gt").cast("long").alias("n_gt"))
        .join(n_sp, "qid", "left")
        .join(both, "qid", "left")
        .select(
            F.col("qid").alias("id"),
            "split",
            "n_hops",
            "n_gt",
            F.coalesce("n_sp", zero).alias("n_sp"),
            F.coalesce("n_gt_in_sp", zero).alias("n_gt_in_sp"),
        )
        .withColumn("pct_gt_in_sp", 100.0 * F.col("n_gt_in_sp") / F.col("n_gt"))
        .withColumn("pct_sp_in_gt", F.when(F.col("n_sp") > 0, 100.0 * F.col("n_gt_in_sp") / F.col("n_sp")))
    )


def ordered_mean(column: str) -> Column:
    """The mean of the non-null values of ``column`` in the group, added in sorted order (partition-
    independent to the last bit); null for a group without values."""
    values = F.array_sort(F.collect_list(F.col(column).cast("double")))
    total = F.aggregate(values, F.lit(0.0), lambda acc, x: acc + x)
    return F.when(F.size(values) > 0, total / F.size(values))


def table_d2(overlaps: DataFrame) -> DataFrame:
    """``split, n_hops, questions, pct_gt_in_sp, pct_sp_in_gt, n_gt, n_sp``: Table D2's means."""
    return overlaps.groupBy("split", "n_hops").agg(
        F.count("*").alias("questions"),
        ordered_mean("pct_gt_in_sp").alias("pct_gt_in_sp"),
        ordered_mean("pct_sp_in_gt").alias("pct_sp_in_gt"),
        ordered_mean("n_gt").alias("n_gt"),
        ordered_mean("n_sp").alias("n_sp"),
    )


def figure_d9(pair_rows: DataFrame) -> DataFrame:
    """``split, gt_len, pairs, reachable, sp_len, n_node_paths, n_triple_paths, shortcut_share``: Fig.
    D9's means over the reachable pairs of the generated answer, per ground-truth path length."""
    reachable = F.col("sp_len").isNotNull()
    return (
        pair_rows.where(F.col("gt_len").isNotNull())
        .withColumn("node_paths", F.when(reachable, F.col("n_node_paths")))
        .withColumn("triple_paths", F.when(reachable, F.col("n_triple_paths")))
        .withColumn("short", F.col("shortcut").cast("int"))
        .groupBy("split", "gt_len")
        .agg(
            F.count("*").alias("pairs"),
            F.count("sp_len").alias("reachable"),
            ordered_mean("sp_len").alias("sp_len"),
            ordered_mean("node_paths").alias("n_node_paths"),
            ordered_mean("triple_paths").alias("n_triple_paths"),
            ordered_mean("short").alias("shortcut_share"),
        )
    )
