"""SynthKGQA answering (paper 002 §4, Table 2; spec 3.4-3.5) for a model: a question set's questions with the
triples of a context, the reader's prompts, and each answer scored (:mod:`kgbrink.synthkgqa.answering`).

Questions in: ``gt_questions`` rows with a ``question`` text. Contexts (spec 3.4 [P]): ``gt`` (the answer
subgraph, in its order), ``full_gt`` (the full answer subgraph of ``gt-questions --answers``, else the answer
subgraph), ``sp`` (the ``sp_triples`` of ``sp-analysis``), ``question_graph`` (the question-specific graph,
highest PPR first, cut at ``max_triples``), ``retrieved`` (a retriever's ``{id, triples}`` by key, in its
order) and ``none`` (the 4-shot LLM-only prompt); the table-given contexts are sorted by ``(h, r, t)``.

Records out: ``id, split, graph_isomorphism, n_hops, question, shown`` (the context's triples as labels, a
key where an entity or relation has no label), ``answer_labels``, ``answer_keys`` (A: ``all_answers``, else
the question's answer), ``gt_keys`` (the full answer subgraph, else the answer subgraph, the retrieval's
target: App. A.4) and ``retrieval_keys`` (the context's triples by key; empty for ``none``). Retrieval is
compared by key, so a retriever's triple with a key the dataset has not counts in its size and matches no
ground-truth triple.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core import json_lines
from kgbrink.core.quarantine import mark_repeats, with_line_numbers
from kgbrink.evaluation.calls import messages_json
from kgbrink.llm import templates
from kgbrink.synthkgqa import answering

CONTEXTS = ("gt", "full_gt", "sp", "question_graph", "retrieved", "none")
KEYS = "array<array<string>>"
SCORES = (
    "em_hits",
    "em_recall",
    "em_strict_hits",
    "em_strict_recall",
    "gt_recall",
    "gt_precision",
    "gt_f1",
    "answer_hits",
    "answer_recall",
)
SCORE_SCHEMA = "answer string, " + ", ".join(f"{name} double" for name in SCORES) + ", size bigint"
RETRIEVED_REASONS = ("malformed_json", "missing_id", "bad_id", "bad_triples", "duplicate_id")


def retrieved_lines(lines: DataFrame) -> DataFrame:
    """``source_file, line_number, id, triples, reason, detail`` per non-blank line of ``read_lines`` output
    of a retriever's file (``{"id", "triples": [[h, r, t], ...]}`` by key; ``reason`` null for a good line,
    else the first of :data:`RETRIEVED_REASONS`)."""
    lines = lines.where(F.trim("line") != "")
    record = json_lines.record(F.col("line"))
    qid, triples = json_lines.field(record, "id"), json_lines.field(record, "triples")
    items = json_lines.elements(triples)
    fields = lines.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        json_lines.kind(record).alias("_record"),
        json_lines.kind(qid).alias("_id_kind"),
        json_lines.as_string(qid).alias("id"),
        json_lines.kind(triples).alias("_triples_kind"),
        F.transform(
            items, lambda x: F.transform(json_lines.elements(x), lambda k: F.try_variant_get(k, "$", "string"))
        ).alias("_triples"),
        F.exists(
            items,
            lambda x: ~F.coalesce(
                (json_lines.kind(x) == "array")
                & (F.size(json_lines.elements(x)) == 3)
                & ~F.exists(json_lines.elements(x), lambda k: json_lines.kind(k) != "string"),
                F.lit(False),
            ),
        ).alias("_bad_triple"),
    )

    def why(reason: str, detail: str) -> Column:
        return F.struct(F.lit(reason).alias("reason"), F.lit(detail).alias("detail"))

    kind = F.col("_id_kind")
    verdict = (
        F.when(F.col("_record").isNull() | (F.col("_record") != "object"), why("malformed_json", "not a JSON object"))
        .when(kind.isNull() | (kind == "null"), why("missing_id", "id absent or null"))
        .when(~kind.isin("string", "integer"), why("bad_id", "id must be a string or an integer"))
        .when(
            (F.col("_triples_kind") != "array") | F.col("_triples_kind").isNull() | F.col("_bad_triple"),
            why("bad_triples", "triples must be a list of [head, relation, tail] keys"),
        )
    )
    parsed = fields.withColumn("_v", verdict).select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        "id",
        F.when(F.col("_v").isNull(), F.col("_triples")).cast(KEYS).alias("triples"),
        F.col("_v.reason").alias("reason"),
        F.col("_v.detail").alias("detail"),
    )
    numbered = with_line_numbers(parsed).select("source_file", "line_number", "id", "triples", "reason", "detail")
    return mark_repeats(numbered, "id", "duplicate_id")


def _key_triples(column: str | Column, entity_keys: Column, relation_keys: Column) -> Column:
    """An ``array<struct<h, r, t>>`` of ids as ``[[h, r, t]]`` keys (``*_keys``: map columns id -> key)."""
    return F.transform(
        column,
        lambda x: F.array(
            F.element_at(entity_keys, x["h"]), F.element_at(relation_keys, x["r"]), F.element_at(entity_keys, x["t"])
        ),
    )


def context_triples(
    questions: DataFrame,
    context: str,
    table: DataFrame | None = None,
    max_triples: int = 200,
) -> DataFrame:
    """``id, ids`` (an ``array<struct<h, r, t>>`` in prompt order) per question of ``questions`` for a
    context given by ids: ``gt``, ``full_gt``, ``sp`` (``table``: ``id, h, r, t``), ``question_graph``
    (``table``: ``id, h, r, t, ppr``; highest PPR first, cut at ``max_triples``); ``none``: empty."""
    ids = "array<struct<h: int, r: int, t: int>>"
    if context == "gt":
        return questions.select("id", F.col("answer_subgraph").cast(ids).alias("ids"))
    if context == "full_gt":
        full = F.coalesce("full_answer_subgraph", "answer_subgraph")
        return questions.select("id", full.cast(ids).alias("ids"))
    if context == "none" or context == "retrieved":
        return questions.select("id", F.array().cast(ids).alias("ids"))
    if table is None:
        raise ValueError(f"context {context} needs its table")
    rows = table.select("id", "h", "r", "t", *(["ppr"] if context == "question_graph" else [])).distinct()
    if context == "question_graph":
        order = Window.partitionBy("id").orderBy(F.desc_nulls_last("ppr"), "h", "r", "t")
        rows = rows.withColumn("_n", F.row_number().over(order)).filter(F.col("_n") <= max_triples)
        item = F.struct("_n", F.struct("h", "r", "t").alias("x"))
    else:
        item = F.struct("h", "r", "t", F.struct("h", "r", "t").alias("x"))
    grouped = rows.groupBy("id").agg(F.array_sort(F.collect_list(item)).alias("_g"))
    per_question = grouped.select("id", F.transform("_g", lambda g: g["x"]).cast(ids).alias("ids"))
    return (
        questions.select("id")
        .join(per_question, "id", "left")
        .select("id", F.coalesce("ids", F.array().cast(ids)).alias("ids"))
    )


def records(
    questions: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    shown_ids: DataFrame,
    retrieved: DataFrame | None = None,
) -> DataFrame:
    """The answering records (module docstring) of the questions with a text: ``shown_ids`` (``id, ids``)
    the context given by ids, or ``retrieved`` (``id, triples`` by key) a retriever's."""
    asked = questions.filter(F.col("question").isNotNull() & (F.trim("question") != ""))
    node_ids = asked.select(
        "id",
        F.explode(
            F.array_distinct(
                F.concat(
                    F.coalesce("all_answers", F.array("answer")),
                    F.flatten(
                        F.transform(
                            F.coalesce("full_answer_subgraph", "answer_subgraph"), lambda x: F.array(x["h"], x["t"])
                        )
                    ),
                )
            )
        ).alias("e"),
    )
    shown_nodes = shown_ids.select("id", F.explode("ids").alias("x")).select(
        "id", F.explode(F.array("x.h", "x.t")).alias("e")
    )
    shown_relations = shown_ids.select("id", F.explode("ids").alias("x")).select("id", F.col("x.r").alias("e"))
    gt_relations = asked.select(
        "id", F.explode(F.coalesce("full_answer_subgraph", "answer_subgraph")).alias("x")
    ).select("id", F.col("x.r").alias("e"))
    ents = entities.select(F.col("id").alias("e"), "key", F.coalesce("label", "key").alias("label"))
    rels = relations.select(F.col("id").alias("e"), "key", F.coalesce("label", "key").alias("label"))

    def maps(ids: DataFrame, names: DataFrame, prefix: str) -> DataFrame:
        named = ids.distinct().join(names, "e")
        return named.groupBy("id").agg(
            F.map_from_entries(F.collect_list(F.struct("e", "key"))).alias(f"{prefix}_key"),
            F.map_from_entries(F.collect_list(F.struct("e", "label"))).alias(f"{prefix}_label"),
        )

    e_maps = maps(node_ids.unionByName(shown_nodes), ents, "e")
    r_maps = maps(gt_relations.unionByName(shown_relations), rels, "r")
    joined = asked.join(shown_ids, "id", "left").join(e_maps, "id", "left").join(r_maps, "id", "left")
    ek, el, rk, rl = (
        F.coalesce(F.col(c), F.create_map().cast("map<int,string>")) for c in ("e_key", "e_label", "r_key", "r_label")
    )
    answers = F.coalesce("all_answers", F.array("answer"))
    gt = F.coalesce("full_answer_subgraph", "answer_subgraph")
    ids = F.coalesce("ids", F.array().cast("array<struct<h: int, r: int, t: int>>"))
    frame = joined.select(
        "id",
        "split",
        "graph_isomorphism",
        "n_hops",
        "question",
        _key_triples(ids, el, rl).alias("shown"),
        F.transform(answers, lambda a: F.element_at(el, a)).alias("answer_labels"),
        F.transform(answers, lambda a: F.element_at(ek, a)).alias("answer_keys"),
        _key_triples(gt, ek, rk).alias("gt_keys"),
        _key_triples(ids, ek, rk).alias("retrieval_keys"),
    )
    if retrieved is None:
        return frame
    # a retriever's triples by key: shown by label where the dataset has one
    given = frame.join(retrieved.select("id", F.col("triples").alias("_r")), "id", "left")
    given = given.withColumn("_r", F.coalesce("_r", F.array().cast(KEYS)))
    keyed = given.select("id", F.posexplode("_r").alias("pos", "k"))
    for part, names in (("h", ents), ("r", rels), ("t", ents)):
        index = {"h": 0, "r": 1, "t": 2}[part]
        by_key = names.select(F.col("key").alias(f"_{part}"), F.col("label").alias(f"{part}_label"))
        keyed = keyed.join(by_key, F.col("k")[index] == F.col(f"_{part}"), "left").drop(f"_{part}")
    label = F.array(*[F.coalesce(F.col(f"{p}_label"), F.col("k")[i]) for i, p in enumerate("hrt")])
    shown = keyed.groupBy("id").agg(F.array_sort(F.collect_list(F.struct("pos", label.alias("l")))).alias("_s"))
    shown = shown.select("id", F.transform("_s", lambda s: s["l"]).alias("_shown"))
    return (
        given.join(shown, "id", "left")
        .withColumns(
            {
                "shown": F.coalesce("_shown", F.array().cast(KEYS)),
                "retrieval_keys": F.col("_r"),
            }
        )
        .drop("_r", "_shown")
    )


def prompts(records: DataFrame, template: templates.Template, context: str) -> DataFrame:
    """``item_id, messages``: the reader's messages of every record (``item_id`` = the question id)."""

    @F.pandas_udf("string")
    def build(questions: pd.Series, shown: pd.Series) -> pd.Series:
        out = []
        for question, triples in zip(questions, shown):
            record = {"question": question, "triples": [list(t) for t in triples] if triples is not None else []}
            out.append(messages_json(answering.prompt(record, template, context=context)))
        return pd.Series(out, dtype=object)

    return records.select(F.col("id").alias("item_id"), build("question", "shown").alias("messages"))


def scores(answered: DataFrame, records: DataFrame) -> DataFrame:
    """Per answered question (``item_id, content``): ``id, split, graph_isomorphism, n_hops`` and
    :data:`SCORE_SCHEMA`: :func:`kgbrink.synthkgqa.answering.answer_scores` against the answer labels and
    :func:`kgbrink.synthkgqa.answering.retrieval_scores` of the context's triples against the ground truth."""

    @F.pandas_udf(SCORE_SCHEMA)
    def score(contents: pd.Series, labels: pd.Series, keys: pd.Series, gt: pd.Series, got: pd.Series) -> pd.DataFrame:
        rows = []
        for content, label, key, truth, retrieval in zip(contents, labels, keys, gt, got):
            row = answering.answer_scores(content, [x for x in label if x is not None])
            row.update(
                answering.retrieval_scores(
                    [tuple(t) for t in retrieval], [tuple(t) for t in truth], [x for x in key if x is not None]
                )
            )
            rows.append(row)
        return pd.DataFrame(rows, columns=[c.split()[0] for c in SCORE_SCHEMA.split(", ")])

    joined = answered.select("item_id", "content").join(records.withColumnRenamed("id", "item_id"), "item_id")
    parts = score("content", "answer_labels", "answer_keys", "gt_keys", "retrieval_keys").alias("s")
    return joined.select(F.col("item_id").alias("id"), "split", "graph_isomorphism", "n_hops", parts).select(
        "id", "split", "graph_isomorphism", "n_hops", "s.*"
    )


def groups(answers: DataFrame) -> DataFrame:
    """``group_by, group, metric, value, n``: the mean of every score (and of ``size``) over all questions
    (``group_by`` ``all``), per ``graph_isomorphism`` and per ``n_hops`` (spec 3.5: per question, then
    averaged)."""
    metrics = [*SCORES, "size"]
    frames = []
    for group_by, column in (
        ("all", F.lit("all")),
        ("graph_isomorphism", F.col("graph_isomorphism")),
        ("n_hops", F.col("n_hops").cast("string")),
    ):
        grouped = answers.groupBy(column.alias("group")).agg(
            F.count("*").alias("n"), *[F.avg(F.col(m).cast("double")).alias(m) for m in metrics]
        )
        stacked = grouped.select(
            F.lit(group_by).alias("group_by"),
            "group",
            F.explode(F.array(*[F.struct(F.lit(m).alias("metric"), F.col(m).alias("value")) for m in metrics])).alias(
                "m"
            ),
            "n",
        )
        frames.append(stacked.select("group_by", "group", "m.metric", "m.value", "n"))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
