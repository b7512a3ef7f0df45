"""BRINK (paper 000) for a model: reader prompts from a variant's questions, answers to evaluate-qa lines.

Records: the variant's questions of one split rendered in one labelling scheme
(:func:`kgbrink.brink.questions.render_questions`: ``id, split, question, topic_entity, relation, answers,
hard_answer, removed_triple, direction, rule_ids``), with ``groundings`` for the ``oracle`` context
(App. H: the provenance rows of the question's removed triple, ``[{"rule", "body": [[h, r, t], ...]}]``
in the scheme's names, body order kept). Prompts: :func:`kgbrink.brink.reader.prompt` (spec 1.1).
Answers: :func:`kgbrink.brink.reader.parse` (spec 1.2, App. E): ``{"id", "prediction"}`` lines, a refusal
as ``[]``.
"""

from __future__ import annotations

import json

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.brink import reader
from kgbrink.brink.questions import render_questions
from kgbrink.evaluation.calls import messages_json

PREDICTION_SCHEMA = "id string, prediction string, refusal boolean, reason string"


def groundings(questions: DataFrame, provenance: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``id, groundings``: per question (``id, h, r, t``), the groundings that removed its triple
    (``provenance``: ``h, r, t, rule_id, rule, body, sample_hash``), ordered by rule and sample hash, each
    ``{rule, body}`` with the body's triples as ``[h, r, t]`` names (``entities`` / ``relations``: ``id, name``)."""
    rows = questions.select("id", "h", "r", "t").join(provenance, ["h", "r", "t"])
    body = rows.select("id", "rule_id", "rule", "sample_hash", F.posexplode("body").alias("pos", "b"))
    names = {
        part: (entities if part != "r" else relations).select(
            F.col("id").alias(f"_{part}"), F.col("name").alias(f"{part}_name")
        )
        for part in ("h", "r", "t")
    }
    for part, frame in names.items():
        body = body.join(frame, F.col(f"b.{part}") == F.col(f"_{part}")).drop(f"_{part}")
    triple = F.struct("pos", F.array("h_name", "r_name", "t_name").alias("triple"))
    per_grounding = body.groupBy("id", "rule_id", "rule", "sample_hash").agg(
        F.array_sort(F.collect_list(triple)).alias("b")
    )
    grounding = F.struct("rule_id", "sample_hash", "rule", F.transform("b", lambda x: x["triple"]).alias("body"))
    per_question = per_grounding.groupBy("id").agg(F.array_sort(F.collect_list(grounding)).alias("g"))
    return per_question.select(
        "id", F.transform("g", lambda x: F.struct(x["rule"].alias("rule"), x["body"].alias("body"))).alias("groundings")
    )


def neighbourhoods(
    questions: DataFrame,
    triples: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    hops: int,
    max_triples: int,
    seed: int,
) -> DataFrame:
    """``id, triples``: per question (``id, topic``) the triples of a KG (``h, r, t``) within ``hops`` (1 or
    2) of its topic as ``[h, r, t, hop]`` names (``entities`` / ``relations``: ``id, name``), each prompt
    line (``h r t``) once, as its first triple in the reader's order (hop, then sha256 of ``seed, h, r, t``),
    cut at ``max_triples`` lines (spec 1.1 [P] ``neighbourhood``; :func:`kgbrink.brink.reader.neighbourhood_lines`);
    hop 2 is expanded only for a question whose hop 1 has fewer lines than the cut. A question with no
    triple near its topic gets ``[]``."""
    if hops not in (1, 2):
        raise ValueError(f"neighbourhood hops must be 1 or 2, got {hops}")
    edges = triples.select("h", "r", "t").distinct()
    topics = questions.select("id", F.col("topic").alias("node"))

    def incident(frontier: DataFrame) -> DataFrame:
        heads = frontier.join(edges, frontier["node"] == edges["h"]).select("id", "h", "r", "t")
        tails = frontier.join(edges, frontier["node"] == edges["t"]).select("id", "h", "r", "t")
        return heads.unionByName(tails).distinct()

    def named(frame: DataFrame) -> DataFrame:
        for part, names in (("h", entities), ("r", relations), ("t", entities)):
            frame = frame.join(names.select(F.col("id").alias(part), F.col("name").alias(f"{part}_name")), part)
        return frame.withColumn("line", F.concat_ws(" ", "h_name", "r_name", "t_name"))

    first = incident(topics).withColumn("hop", F.lit(1))
    ball = first
    if hops == 2:
        # the reader's lines, not id triples, count against the cut (two triples may read the same)
        lines = named(first).groupBy("id").agg(F.countDistinct("line").alias("n"))
        short = lines.filter(F.col("n") < max_triples).select("id")
        ends = first.join(short, "id").select("id", F.explode(F.array("h", "t")).alias("node")).distinct()
        frontier = ends.join(topics, ["id", "node"], "left_anti")
        second = incident(frontier).join(first.select("id", "h", "r", "t"), ["id", "h", "r", "t"], "left_anti")
        ball = ball.unionByName(second.withColumn("hop", F.lit(2)))
    names = ["h_name", "r_name", "t_name"]
    key = F.sha2(F.concat_ws("\x1f", F.lit(str(seed)), *names), 256)
    # each line once, as the first of its triples in the reader's order (hop, then key)
    best = named(ball).groupBy("id", "line").agg(F.min(F.struct("hop", key.alias("key"), *names)).alias("b"))
    ranked = (
        best.select("id", "b.*")
        .withColumn("_n", F.row_number().over(Window.partitionBy("id").orderBy("hop", "key")))
        .filter(F.col("_n") <= max_triples)
    )
    item = F.struct("_n", F.array(*names, F.col("hop").cast("string")).alias("triple"))
    grouped = ranked.groupBy("id").agg(F.array_sort(F.collect_list(item)).alias("_t"))
    per_question = grouped.select("id", F.transform("_t", lambda x: x["triple"]).alias("triples"))
    return (
        questions.select("id")
        .join(per_question, "id", "left")
        .select("id", F.coalesce("triples", F.array().cast("array<array<string>>")).alias("triples"))
    )


def records(
    questions: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    templates: dict[str, str],
    split: str,
    provenance: DataFrame | None = None,
    near: DataFrame | None = None,
) -> DataFrame:
    """The question records of ``split`` (module docstring), with ``groundings`` when ``provenance`` is
    given (an empty list for a question without provenance rows), with ``triples`` when ``near`` (the
    :func:`neighbourhoods` of the questions) is."""
    kept = questions.filter(F.col("split") == split)
    rendered = render_questions(kept, entities, relations, templates)
    if near is not None:
        rendered = rendered.join(near, "id", "left")
    if provenance is None:
        return rendered
    joined = rendered.join(groundings(kept, provenance, entities, relations), "id", "left")
    return joined.withColumn("groundings", F.coalesce("groundings", F.array()))


def prompts(
    records: DataFrame,
    context: str,
    relation_names: dict[str, str],
    template: str | None = None,
    seed: int = 0,
    max_triples: int = 200,
) -> DataFrame:
    """``item_id, messages``: the reader's messages of every record (``relation_names``: relation key to
    the name rules are written with; ``seed``, ``max_triples``: the neighbourhood's order and cut)."""
    extra = {"oracle": ["groundings"], "neighbourhood": ["triples"]}.get(context, [])
    fields = ["question", "topic_entity", *extra]

    @F.pandas_udf("string")
    def build(texts: pd.Series) -> pd.Series:
        out = []
        for text in texts:
            record = json.loads(text)
            messages = reader.prompt(
                record, template, context=context, relation_names=relation_names, seed=seed, max_triples=max_triples
            )
            out.append(messages_json(messages))
        return pd.Series(out, dtype=object)

    return records.select(
        F.col("id").cast("string").alias("item_id"), build(F.to_json(F.struct(*fields))).alias("messages")
    )


def predictions(answers: DataFrame, scheme: str) -> DataFrame:
    """evaluate-qa lines of answered questions (``item_id, content``): :data:`PREDICTION_SCHEMA`,
    ``prediction`` the output text (Answer: stripped), null for a refusal (written as ``[]``)."""

    @F.pandas_udf(PREDICTION_SCHEMA.split(", ", 1)[1])
    def parse(ids: pd.Series, contents: pd.Series) -> pd.DataFrame:
        rows = []
        for item_id, content in zip(ids, contents):
            parsed = reader.parse(content, item_id=item_id, scheme=scheme)
            text = None if parsed["refusal"] else parsed["prediction"]
            rows.append((text, bool(parsed["refusal"]), parsed["reason"] if parsed["reason"] == reader.EMPTY else None))
        return pd.DataFrame(rows, columns=["prediction", "refusal", "reason"])

    parsed = parse("item_id", "content")
    return answers.select(F.col("item_id").alias("id"), parsed.alias("p")).select("id", "p.*")


def failures(records: DataFrame, hard: DataFrame, context: str) -> DataFrame:
    """``id, failure``: App. J's kind of every question whose hard answer was not predicted (``hard``:
    ``id, hard`` 0 or 1, evaluate-qa's per-question Hits@Hard): ``reasoning_failure`` when one of its
    groundings (``records.groundings``) has its whole body among the triples its prompt showed (the
    ``neighbourhood``'s ``triples``; the ``oracle``'s grounding bodies; ``none``: nothing), else
    ``retrieval_failure`` (spec 1.3 [P])."""

    def key(triple):
        return F.concat_ws("\x1f", triple[0], triple[1], triple[2])

    empty = F.array().cast("array<string>")
    if context == "neighbourhood":
        shown = F.transform(F.coalesce("triples", F.array().cast("array<array<string>>")), key)
    elif context == "oracle":
        shown = F.flatten(F.transform("groundings", lambda g: F.transform(g["body"], key)))
    else:
        shown = empty
    with_shown = records.select(F.col("id").cast("string").alias("id"), "groundings", shown.alias("_shown"))
    found = F.exists(
        F.coalesce("groundings", F.array().cast(records.schema["groundings"].dataType)),
        lambda g: F.forall(g["body"], lambda b: F.array_contains(F.col("_shown"), key(b))),
    )
    missed = hard.filter(F.col("hard") == 0).select(F.col("id").cast("string").alias("id"))
    return with_shown.join(missed, "id").select(
        "id", F.when(found, F.lit(reader.REASONING_FAILURE)).otherwise(F.lit(reader.RETRIEVAL_FAILURE)).alias("failure")
    )


REWRITE_SCHEMA = "question string, rewritten boolean, reason string, detail string"


def rewrite_prompts(records: DataFrame) -> DataFrame:
    """``item_id, messages``: App. D's messages of every text-label record (``id, removed_triple,
    topic_entity, hard_answer``; :func:`kgbrink.brink.reader.rewrite_prompt`)."""

    @F.pandas_udf("string")
    def build(texts: pd.Series) -> pd.Series:
        return pd.Series([messages_json(reader.rewrite_prompt(json.loads(t))) for t in texts], dtype=object)

    fields = F.to_json(F.struct("removed_triple", "topic_entity", "hard_answer"))
    return records.select(F.col("id").cast("string").alias("item_id"), build(fields).alias("messages"))


def rewrites(answered: DataFrame, text_records: DataFrame, asked: DataFrame) -> DataFrame:
    """``id`` and :data:`REWRITE_SCHEMA` per question of ``asked`` (the records in the asked scheme: ``id,
    question, topic_entity``): the rewriter's answer (``item_id, content``; none: ``no_answer``) checked
    against its text-label record (:func:`kgbrink.brink.reader.rewrite_check`); an accepted rewrite is
    moved into the asked scheme (:func:`kgbrink.brink.reader.in_scheme`), a rejected one keeps the template
    question."""

    @F.pandas_udf(REWRITE_SCHEMA)
    def check(contents: pd.Series, texts: pd.Series, templates_: pd.Series, topics: pd.Series) -> pd.DataFrame:
        rows = []
        for content, text, template, topic in zip(contents, texts, templates_, topics):
            if content is None:
                rows.append((template, False, "no_answer", "the rewriter gave no answer"))
                continue
            record = json.loads(text)
            verdict = reader.rewrite_check(content, record)
            question = reader.in_scheme(verdict["question"], record["topic_entity"], topic)
            rows.append(
                (
                    question if verdict["rewritten"] else template,
                    *[verdict[k] for k in ("rewritten", "reason", "detail")],
                )
            )
        return pd.DataFrame(rows, columns=["question", "rewritten", "reason", "detail"])

    text = text_records.select(
        F.col("id").cast("string").alias("id"),
        F.to_json(F.struct("removed_triple", "topic_entity", "hard_answer", "question")).alias("_text"),
    )
    joined = (
        asked.select(F.col("id").cast("string").alias("id"), F.col("question").alias("_template"), "topic_entity")
        .join(text, "id")
        .join(answered.select(F.col("item_id").alias("id"), "content"), "id", "left")
    )
    return joined.select("id", check("content", "_text", "_template", "topic_entity").alias("r")).select("id", "r.*")
