"""Question-specific graphs of paper 002 on Spark (App. C.1; spec 2.D): per question, a graph of at most
~30,000 triples that still holds its answer subgraph G.

In: a ``gt_questions`` table (``id, split, seeds, answer, answer_subgraph``, optionally
``full_answer_subgraph`` and ``n_hops``; :func:`prepare_questions`) and the KG ``triples(h, r, t)``. Out:
``question_graphs(id, split, h, r, t, is_gt, on_sp, source, ppr)`` and ``question_graph_sizes`` (catalog).

Each triple is labelled ``is_gt`` (in G), ``on_sp`` (on a shortest seed-answer path in H, the distance-sum
test of :mod:`kgbrink.graph.local_paths`), ``source`` (the step that put it in the graph, first of
neighbourhood, sp_metapath, confounder, gt_readd) and ``ppr`` (the smaller PPR of its two ends: the
score that decides whether the top-node rule keeps it; null for a triple of G outside H).

Every step runs per question in one Python task (:func:`per_question`) on the whole KG's adjacency, built
once and memory-mapped by the tasks (:mod:`kgbrink.graph.adjacency`): a k-hop ball through hubs reaches
much of the KG, and its node-induced subgraph as a join is the KG's triples once per question. The steps
are :mod:`kgbrink.synthkgqa.question_graph_local`; the tasks' rows :mod:`kgbrink.synthkgqa.question_graph_rows`.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint
from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.core.typed import ConfigError
from kgbrink.graph import adjacency as graph_adjacency
from kgbrink.synthkgqa.question_graph_local import local_neighbourhood, tree_path
from kgbrink.synthkgqa.question_graph_rows import (
    EDGE_SCHEMA,
    LOCAL_SCHEMA,
    edge_rows,
    local_question_graph,
    search_graph_of,
)

MODES = ("directed_union", "undirected")
SOURCES = ("neighbourhood", "sp_metapath", "confounder", "gt_readd")
NO_SPLIT = "none"
QUARANTINE_COLUMNS = ["id", "split", "reason", "detail"]
GRAPH_COLUMNS = ["id", "split", "h", "r", "t", "is_gt", "on_sp", "source", "ppr"]
SIZE_COLUMNS = [
    "id",
    "k",
    "mode",
    "n_neighbourhood",
    "n_top_nodes",
    "n_kept_ppr",
    "n_confounders",
    "n_sp_metapath",
    "n_gt_readded",
    "n_final",
    "caps_applied",
    "ppr_iterations",
    "ppr_converged",
]
_TRIPLES = "array<struct<h: int, r: int, t: int>>"


def check_settings(cfg: QuestionGraphSettings) -> None:
    """ConfigError naming the first ``question_graphs`` setting out of its range."""
    checks = [
        (cfg.mode in MODES, f"question_graphs.mode must be one of {', '.join(MODES)}, got {cfg.mode!r}"),
        (cfg.k_min >= 1, f"question_graphs.k_min must be >= 1, got {cfg.k_min}"),
        (0 < cfg.alpha < 1, f"question_graphs.alpha must be in (0, 1), got {cfg.alpha}"),
        (cfg.tol > 0 and cfg.max_iter >= 1, "question_graphs.tol must be > 0 and max_iter >= 1"),
        (cfg.top_nodes >= 1 and cfg.min_ppr >= 0, "question_graphs.top_nodes must be >= 1 and min_ppr >= 0"),
        (cfg.max_triples >= 2 and cfg.shrink_step >= 1, "question_graphs.max_triples >= 2, shrink_step >= 1"),
        (cfg.min_top_nodes >= 0, "question_graphs.min_top_nodes must be >= 0"),
    ]
    for key in ("mixed_step_cap", "keep_always_cap", "metapath_cap", "sp_metapath_cap"):
        checks.append((getattr(cfg, key) >= 1, f"question_graphs.{key} must be >= 1"))
    for key in ("max_expand_degree", "max_neighbourhood_edges"):
        value = getattr(cfg, key)
        checks.append((value is None or value >= 1, f"question_graphs.{key} must be null or >= 1"))
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


# ---------------------------------------------------------------------------------------------------------
# ground-truth paths (plain Python per question: G has at most a few edges)


def gt_paths(questions: DataFrame) -> DataFrame:
    """``qid, seed, gt_len, relations, forward``: per question and distinct seed the path seed -> answer in
    ``gt`` (array of (h, r, t)); nulls when the answer is not reachable from the seed in G."""

    def run(batches):
        for frame in batches:
            rows = []
            for qid, seeds, answer, gt in zip(frame["qid"], frame["seeds"], frame["answer"], frame["gt"]):
                edges = [(int(x["h"]), int(x["r"]), int(x["t"])) for x in gt]
                for seed in sorted({int(s) for s in seeds}):
                    path = tree_path(edges, seed, int(answer))
                    rows.append(
                        (
                            qid,
                            seed,
                            None if path is None else len(path),
                            None if path is None else [p[1] for p in path],
                            None if path is None else [p[3] for p in path],
                        )
                    )
            yield pd.DataFrame(rows, columns=["qid", "seed", "gt_len", "relations", "forward"]).astype(
                {"gt_len": "Int64"}
            )

    schema = "qid string, seed int, gt_len int, relations array<int>, forward array<boolean>"
    return questions.select("qid", "seeds", "answer", "gt").mapInPandas(run, schema)


# ---------------------------------------------------------------------------------------------------------
# input: the gt_questions table, validated


def prepare_questions(
    questions: DataFrame, entities: DataFrame, relations: DataFrame
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``(prepared, paths, quarantine)`` from a ``gt_questions`` table (spec 2.0) and the dataset's
    ``entities(id)`` and ``relations(id)``.

    ``prepared``: ``qid, split, seeds (sorted distinct), answer, gt (distinct triples of answer_subgraph),
    keep_gt (of full_answer_subgraph when present and not null, i.e. computed, else gt), n_hops (the table's, else computed)`` and
    ``all_answers`` when the table has it;
    ``paths``: :func:`gt_paths` of the prepared questions. A question is quarantined (``id, split, reason,
    detail``) when its id is missing or repeated, seeds/answer/answer_subgraph are missing or empty, an
    id is not an entity or relation of the dataset, or a seed has no path to the answer in G."""
    missing = {"id", "seeds", "answer", "answer_subgraph"} - set(questions.columns)
    if missing:
        raise ValueError(
            f"question table lacks column(s) {', '.join(sorted(missing))}; it needs id, seeds, answer, "
            "answer_subgraph (and optionally split, n_hops, full_answer_subgraph)"
        )
    split = F.col("split").cast("string") if "split" in questions.columns else F.lit(None).cast("string")
    hops = F.col("n_hops").cast("int") if "n_hops" in questions.columns else F.lit(None).cast("int")
    full = "full_answer_subgraph" in questions.columns
    triple_null = lambda c: F.exists(c, lambda x: x.isNull() | x["h"].isNull() | x["r"].isNull() | x["t"].isNull())  # noqa: E731
    rows = questions.select(
        F.col("id").cast("string").alias("qid"),
        F.coalesce(split, F.lit(NO_SPLIT)).alias("split"),
        F.col("seeds").cast("array<int>").alias("seeds"),
        F.col("answer").cast("int").alias("answer"),
        F.col("answer_subgraph").cast(_TRIPLES).alias("gt"),
        (F.coalesce("full_answer_subgraph", "answer_subgraph") if full else F.col("answer_subgraph"))
        .cast(_TRIPLES)
        .alias("keep_gt"),
        hops.alias("n_hops"),
        *([F.col("all_answers").cast("array<int>").alias("all_answers")] if "all_answers" in questions.columns else []),
    )
    n_same = F.count("*").over(Window.partitionBy("qid"))
    reason = (
        F.when(F.col("qid").isNull(), F.array(F.lit("missing_id"), F.lit("id is null")))
        .when(n_same > 1, F.array(F.lit("duplicate_id"), F.format_string("%d rows share this id", n_same)))
        .when(
            F.col("seeds").isNull() | (F.size("seeds") == 0) | F.exists("seeds", lambda x: x.isNull()),
            F.array(F.lit("no_seeds"), F.lit("seeds is null, empty or holds a null")),
        )
        .when(F.col("answer").isNull(), F.array(F.lit("missing_answer"), F.lit("answer is null")))
        .when(
            F.col("gt").isNull() | (F.size("gt") == 0) | triple_null("gt"),
            F.array(F.lit("empty_answer_subgraph"), F.lit("answer_subgraph is null, empty or holds a null")),
        )
        .when(
            F.col("keep_gt").isNull() | triple_null("keep_gt"),
            F.array(F.lit("bad_full_answer_subgraph"), F.lit("full_answer_subgraph holds a null")),
        )
    )
    rows = rows.withColumn("_why", reason).transform(checkpoint)
    good = rows.where(F.col("_why").isNull()).drop("_why")
    bad = rows.where(F.col("_why").isNotNull()).select(
        "qid", "split", F.col("_why")[0].alias("reason"), F.col("_why")[1].alias("detail")
    )
    nodes = good.select(
        "qid",
        F.explode(
            F.concat(
                F.transform("seeds", lambda x: F.struct(F.lit("seeds").alias("field"), x.alias("id"))),
                F.array(F.struct(F.lit("answer").alias("field"), F.col("answer").alias("id"))),
                F.transform("gt", lambda x: F.struct(F.lit("answer_subgraph").alias("field"), x["h"].alias("id"))),
                F.transform("gt", lambda x: F.struct(F.lit("answer_subgraph").alias("field"), x["t"].alias("id"))),
                F.transform(
                    "keep_gt", lambda x: F.struct(F.lit("full_answer_subgraph").alias("field"), x["h"].alias("id"))
                ),
                F.transform(
                    "keep_gt", lambda x: F.struct(F.lit("full_answer_subgraph").alias("field"), x["t"].alias("id"))
                ),
            )
        ).alias("x"),
    ).select("qid", "x.field", "x.id")
    rels = good.select(
        "qid",
        F.explode(F.concat(F.transform("gt", lambda x: x["r"]), F.transform("keep_gt", lambda x: x["r"]))).alias("id"),
    )
    unknown_nodes = (
        nodes.join(entities.select("id"), "id", "left_anti")
        .groupBy("qid")
        .agg(F.min(F.struct("field", "id")).alias("u"))
    )
    unknown_rels = rels.join(relations.select("id"), "id", "left_anti").groupBy("qid").agg(F.min("id").alias("u"))
    unknown = unknown_nodes.select(
        "qid",
        F.lit("unknown_entity").alias("reason"),
        F.format_string("%s: %d is not an entity id of the dataset", "u.field", "u.id").alias("detail"),
    ).unionByName(
        unknown_rels.select(
            "qid",
            F.lit("unknown_relation").alias("reason"),
            F.format_string("answer_subgraph: relation %d is not a relation id of the dataset", "u").alias("detail"),
        )
    )
    unknown = unknown.groupBy("qid").agg(F.min(F.struct("reason", "detail")).alias("w")).select("qid", "w.*")
    good = good.join(unknown.select("qid"), "qid", "left_anti")
    bad = bad.unionByName(
        unknown.join(rows.select("qid", "split").distinct(), "qid").select("qid", "split", "reason", "detail")
    )
    good = good.withColumn("seeds", F.array_sort(F.array_distinct("seeds")))
    good = good.withColumn("gt", F.array_sort(F.array_distinct("gt"))).withColumn(
        "keep_gt", F.array_sort(F.array_distinct("keep_gt"))
    )
    paths = gt_paths(good).transform(checkpoint)
    no_path = paths.where(F.col("gt_len").isNull()).groupBy("qid").agg(F.min("seed").alias("seed"))
    bad = bad.unionByName(
        no_path.join(good.select("qid", "split"), "qid").select(
            "qid",
            "split",
            F.lit("no_gt_path").alias("reason"),
            F.format_string("answer_subgraph has no path from seed %d to the answer", "seed").alias("detail"),
        )
    )
    good = good.join(no_path.select("qid"), "qid", "left_anti")
    paths = paths.join(no_path.select("qid"), "qid", "left_anti")
    longest = paths.groupBy("qid").agg(F.max("gt_len").alias("_hops"))
    good = good.join(longest, "qid", "left").withColumn("n_hops", F.coalesce("n_hops", "_hops")).drop("_hops")
    quarantine = bad.select(F.col("qid").alias("id"), "split", "reason", "detail")
    return good, paths, quarantine


# ---------------------------------------------------------------------------------------------------------
# steps 2-4: the search graph H, per question in memory on the KG's shared adjacency


def search_inputs(questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings) -> DataFrame:
    """``qid, seeds, k, walks`` (and the other columns of ``questions``): one row per question with its
    radius and its GT metapaths of length > 0."""
    walks = (
        paths.where(F.col("gt_len") > 0)
        .groupBy("qid")
        .agg(F.collect_list(F.struct("seed", "relations", "forward")).alias("walks"))
    )
    return questions.withColumn("k", F.greatest(F.lit(cfg.k_min), F.col("n_hops"))).join(walks, "qid", "left")


def per_question(kg: DataFrame, rows: DataFrame, fn, schema: str) -> DataFrame:
    """``fn(adjacency, row)`` (a pandas DataFrame of ``schema``) for every row of ``rows`` (one per
    question, column ``qid``), in Python tasks that share the adjacency of ``kg(h, r, t)`` (int columns);
    checkpointed. Every row is answered from its own content, so the output does not depend on the
    partitioning."""
    for column in ("h", "r", "t"):
        if kg.schema[column].dataType.simpleString() != "int":
            raise ValueError(f"per_question: the KG's column {column} must be int (the hashes are of ints)")
    shared = graph_adjacency.share(kg)

    def run(batches):
        g = shared.get()
        for frame in batches:
            for row in frame.to_dict("records"):
                yield fn(g, row)

    spark = rows.sparkSession
    parts = max(2, 8 * spark.sparkContext.defaultParallelism)
    try:
        return rows.repartition(parts, "qid").mapInPandas(run, schema).transform(checkpoint)
    finally:
        graph_adjacency.release(shared)


def neighbourhood(
    kg: DataFrame, seeds: DataFrame, limits: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(edges(qid, h, r, t), caps(qid, cap))``: E_nb of step 2 for ``seeds(qid, id)`` with the radius
    ``limits(qid, k)`` (:func:`local_neighbourhood`)."""
    rows = seeds.groupBy("qid").agg(F.collect_set("id").alias("seeds")).join(limits.select("qid", "k"), "qid")

    def fn(g, row):
        edges, caps = local_neighbourhood(g, row["qid"], row["seeds"], int(row["k"]), cfg)
        return edge_rows(g, row["qid"], edges, caps)

    out = per_question(kg, rows, fn, EDGE_SCHEMA)
    return out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t"), out.where(F.col("cap").isNotNull()).select(
        "qid", "cap"
    )


def search_graph(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(H(qid, h, r, t, in_nb, is_conf), caps(qid, cap))``: the neighbourhood and the confounders of
    the prepared ``questions`` (steps 1-4), the graph PPR and the shortest paths run on."""
    rows = search_inputs(questions, paths, cfg).select("qid", "seeds", "k", "walks")

    def fn(g, row):
        found = search_graph_of(g, row, cfg)
        return edge_rows(g, row["qid"], found.edges, found.caps, found.in_nb, found.is_conf)

    out = per_question(kg, rows, fn, EDGE_SCHEMA)
    graph = out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t", "in_nb", "is_conf")
    return graph, out.where(F.col("cap").isNotNull()).select("qid", "cap")


# ---------------------------------------------------------------------------------------------------------
# steps 5-10: one question in memory


GRAPH_INPUTS = ("qid", "seeds", "answer", "gt", "keep_gt", "k", "walks")


def question_graphs(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(graphs(id, split, h, r, t, is_gt, on_sp, source, ppr), sizes)`` (catalog ``question_graphs``,
    ``question_graph_sizes``) of :func:`prepare_questions` output over ``kg(h, r, t)`` (distinct): steps
    1-10 per question in one task (:func:`per_question`)."""
    check_settings(cfg)
    rows = search_inputs(questions, paths, cfg).select(*GRAPH_INPUTS)
    out = per_question(kg, rows, lambda g, row: local_question_graph(g, row, cfg)[1], LOCAL_SCHEMA)
    return graph_tables(out, questions, cfg)


def graph_tables(out: DataFrame, questions: DataFrame, cfg: QuestionGraphSettings) -> tuple[DataFrame, DataFrame]:
    """The ``question_graphs`` and ``question_graph_sizes`` tables of per-question rows of
    :data:`LOCAL_SCHEMA` (triples: h set; sizes: n_final set; other rows are ignored)."""
    splits = questions.select("qid", "split", F.greatest(F.lit(cfg.k_min), F.col("n_hops")).alias("k"))
    graphs = (
        out.where(F.col("h").isNotNull())
        .join(splits, "qid")
        .select(F.col("qid").alias("id"), "split", "h", "r", "t", "is_gt", "on_sp", "source", "ppr")
    )
    sizes = (
        out.where(F.col("n_final").isNotNull())
        .join(splits, "qid")
        .select(
            F.col("qid").alias("id"),
            "k",
            F.lit(cfg.mode).alias("mode"),
            "n_neighbourhood",
            "n_top_nodes",
            "n_kept_ppr",
            "n_confounders",
            "n_sp_metapath",
            "n_gt_readded",
            "n_final",
            F.array_sort("local_caps").alias("caps_applied"),
            "ppr_iterations",
            "ppr_converged",
        )
    )
    return graphs, sizes


def graph_totals(sizes: DataFrame, graphs: DataFrame) -> dict[str, int]:
    """Over ``question_graph_sizes`` and ``question_graphs``: graphs, triples, the largest graph, GT triples
    re-added, PPR runs not converged, questions capped, and the graphs' triples by ``source``."""
    row = sizes.agg(
        F.count("*").alias("graphs"),
        F.sum("n_final").alias("triples"),
        F.max("n_final").alias("largest_graph"),
        F.sum("n_gt_readded").alias("gt_triples_readded"),
        F.sum(F.when(~F.col("ppr_converged"), 1).otherwise(0)).alias("ppr_not_converged"),
        F.sum(F.when(F.size("caps_applied") > 0, 1).otherwise(0)).alias("questions_capped"),
    ).first()
    by_source = {r["source"]: r["count"] for r in graphs.groupBy("source").count().collect()}
    return {
        **{k: int(v or 0) for k, v in row.asDict().items()},
        **{f"triples_{k}": v for k, v in sorted(by_source.items())},
    }
