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

from kgbrink.brink import reader
from kgbrink.brink.questions import render_questions
from kgbrink.evaluation.calls import messages_json

DEFAULT_PARAMS = {"temperature": 0.0, "max_tokens": 256}
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


def records(
    questions: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    templates: dict[str, str],
    split: str,
    provenance: DataFrame | None = None,
) -> DataFrame:
    """The question records of ``split`` (module docstring), with ``groundings`` when ``provenance`` is
    given (an empty list for a question without provenance rows)."""
    kept = questions.filter(F.col("split") == split)
    rendered = render_questions(kept, entities, relations, templates)
    if provenance is None:
        return rendered
    joined = rendered.join(groundings(kept, provenance, entities, relations), "id", "left")
    return joined.withColumn("groundings", F.coalesce("groundings", F.array()))


def prompts(records: DataFrame, context: str, relation_names: dict[str, str], template: str | None = None) -> DataFrame:
    """``item_id, messages``: the reader's messages of every record (``relation_names``: relation key to
    the name rules are written with)."""
    fields = ["question", "topic_entity", *(["groundings"] if context == "oracle" else [])]

    @F.pandas_udf("string")
    def build(texts: pd.Series) -> pd.Series:
        out = []
        for text in texts:
            record = json.loads(text)
            out.append(messages_json(reader.prompt(record, template, context=context, relation_names=relation_names)))
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
