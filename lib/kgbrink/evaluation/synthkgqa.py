"""SynthKGQA (paper 002) for a model: questions written from seed subgraphs, parsed into the records
``gt-questions`` validates (§2 steps 1-2, App. A.1; spec 3.1-3.2).

Records in: the ``seed-graphs`` prompt records (``sample_id, seed, k, nodes, triples, flattened``, keys and
labels). Prompts: :func:`kgbrink.synthkgqa.writing.prompt` with A.1's printed example as the one few-shot
pair (``synthkgqa-write@1``). Answers: :func:`kgbrink.synthkgqa.writing.parse`: :data:`WRITTEN_SCHEMA`,
``reason`` null for a question that parsed and resolved in its seed graph (then ``gt-questions`` applies
its own checks: a tree of at most 6 edges with seeds or the answer as leaves, and with ``--answers`` the
answer in the tree query's answer set).
"""

from __future__ import annotations

import json

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.evaluation.calls import messages_json
from kgbrink.synthkgqa import writing

WRITTEN_SCHEMA = (
    "question string, seeds array<string>, answer string, answer_subgraph array<array<string>>, sparql string, "
    "reason string, detail string"
)
RECORD_FIELDS = ("sample_id", "seed", "k", "nodes", "triples", "flattened")


def prompts(records: DataFrame, template: str | None = None) -> DataFrame:
    """``item_id, messages``: A.1's messages for every prompt record (``item_id`` = the sample id)."""

    @F.pandas_udf("string")
    def build(texts: pd.Series) -> pd.Series:
        out = [messages_json(writing.prompt(json.loads(t), template, examples=[writing.A1_EXAMPLE])) for t in texts]
        return pd.Series(out, dtype=object)

    return records.select(
        F.col("sample_id").cast("string").alias("item_id"), build(F.to_json(F.struct(*RECORD_FIELDS))).alias("messages")
    )


def written(answers: DataFrame, records: DataFrame) -> DataFrame:
    """``item_id, sample_id, k,`` :data:`WRITTEN_SCHEMA` of answered prompts (``item_id, content``; a
    truncated answer never gets here: predict quarantines it) against their prompt records."""

    @F.pandas_udf(WRITTEN_SCHEMA)
    def parse(contents: pd.Series, texts: pd.Series) -> pd.DataFrame:
        rows = []
        for content, text in zip(contents, texts):
            out = writing.parse(content, json.loads(text))
            rows.append({name.split()[0]: out[name.split()[0]] for name in WRITTEN_SCHEMA.split(", ")})
        return pd.DataFrame(rows, columns=[c.split()[0] for c in WRITTEN_SCHEMA.split(", ")])

    joined = answers.join(
        records.select(
            F.col("sample_id").cast("string").alias("item_id"),
            "sample_id",
            "k",
            F.to_json(F.struct(*RECORD_FIELDS)).alias("_r"),
        ),
        "item_id",
    )
    return joined.select("item_id", "sample_id", "k", parse("content", "_r").alias("w")).select(
        "item_id", "sample_id", "k", "w.*"
    )


def gt_records(parsed: DataFrame, model: str) -> DataFrame:
    """The ``gt-questions --input`` lines of the questions that parsed: ``id, seeds, answer, answer_subgraph,
    question, sparql, writer_model, k, sample_id`` (spec 3.2's output)."""
    return parsed.filter(F.col("reason").isNull()).select(
        F.col("item_id").alias("id"),
        "seeds",
        "answer",
        "answer_subgraph",
        "question",
        "sparql",
        F.lit(model).alias("writer_model"),
        "k",
        "sample_id",
    )
