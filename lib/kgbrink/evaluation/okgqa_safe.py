"""SAFE's rounds on DataFrames (paper 004 §3.3; spec 5.3; :mod:`kgbrink.okgqa.safe`): the facts' state between
rounds, each round's prompts, the searches, the final prompts and verdicts, and the ``safe`` score rows.

State columns: ``item_id`` (JSON ``[answer item_id, fact index]``), ``answer_id``, ``fact``, ``documents``
(the question's knowledge source, one string per triple or reference), ``results`` (one string per search so
far) and ``searching`` (false once a reply gave no query or no reply came).
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.evaluation.calls import messages_json
from kgbrink.evaluation.okgqa import fact_rows, factscore_rows
from kgbrink.okgqa import answering, safe

STATE_SCHEMA = "item_id string, answer_id string, fact string, documents array<string>, results array<string>"


def facts_state(facts: DataFrame, answers: DataFrame, sources: DataFrame) -> DataFrame:
    """The state before the first round: one row per atomic fact (``facts``: ``item_id, facts`` per answer;
    ``answers``: ``item_id, qid``; ``sources``: ``qid, knowledge, references`` of
    :func:`kgbrink.evaluation.okgqa.knowledge`), its documents the triples as ``('h', 'r', 't')`` then the
    references, no result yet, searching."""

    @F.pandas_udf("array<string>")
    def documents(known: pd.Series, references: pd.Series) -> pd.Series:
        out = []
        for triples, passages in zip(known, references):
            lines = [answering.facts_line([list(t)]) for t in (triples if triples is not None else [])]
            out.append(lines + [str(p) for p in (passages if passages is not None else [])])
        return pd.Series(out, dtype=object)

    return fact_rows(facts, answers, sources).select(
        "item_id",
        "answer_id",
        "fact",
        documents("knowledge", "references").alias("documents"),
        F.array().cast("array<string>").alias("results"),
        F.lit(True).alias("searching"),
    )


def search_prompts(state: DataFrame) -> DataFrame:
    """``item_id, messages``: the search step of every fact still searching."""

    @F.pandas_udf("string")
    def build(facts: pd.Series, results: pd.Series) -> pd.Series:
        return pd.Series([messages_json(safe.search_prompt(f, list(r))) for f, r in zip(facts, results)], dtype=object)

    return state.filter("searching").select("item_id", build("fact", "results").alias("messages"))


def searched(state: DataFrame, answered: DataFrame, search: str, k: int) -> DataFrame:
    """The state after a round: a fact still searching whose reply (``answered``: ``item_id, content``) holds
    a query gets the search's result (``search``: :func:`kgbrink.okgqa.safe.resolve_search`'s spec, its ``k``
    documents one per line, :data:`kgbrink.okgqa.safe.NO_RESULT` when none) appended; one whose reply has no query, or that got no reply, stops searching."""

    @F.pandas_udf("string")
    def result(contents: pd.Series, documents: pd.Series) -> pd.Series:
        find = safe.resolve_search(search)
        out = []
        for content, docs in zip(contents, documents):
            text = safe.query(content)
            found = [] if text is None else [str(x) for x in find(text, list(docs), k)]
            out.append(None if text is None else "\n".join(found) or safe.NO_RESULT)
        return pd.Series(out, dtype=object)

    rows = state.join(answered.select("item_id", "content"), "item_id", "left")
    found = F.when(F.col("searching") & F.col("content").isNotNull(), result("content", "documents"))
    rows = rows.withColumn("_result", found)
    going = F.col("searching") & F.col("_result").isNotNull()
    return rows.select(
        "item_id",
        "answer_id",
        "fact",
        "documents",
        F.when(going, F.concat("results", F.array("_result"))).otherwise(F.col("results")).alias("results"),
        going.alias("searching"),
    )


def final_prompts(state: DataFrame) -> DataFrame:
    """``item_id, answer_id, messages``: the final step of every fact, with all its results."""

    @F.pandas_udf("string")
    def build(facts: pd.Series, results: pd.Series) -> pd.Series:
        return pd.Series([messages_json(safe.final_prompt(f, list(r))) for f, r in zip(facts, results)], dtype=object)

    return state.select("item_id", "answer_id", build("fact", "results").alias("messages"))


def verdicts(answered: DataFrame) -> DataFrame:
    """``item_id, supported`` of the final replies (``item_id, content``; :func:`kgbrink.okgqa.safe.verdict`,
    null when it names neither label)."""

    @F.pandas_udf("boolean")
    def read(contents: pd.Series) -> pd.Series:
        return pd.Series([safe.verdict(c) for c in contents], dtype=object)

    return answered.select("item_id", read("content").alias("supported"))


def safe_rows(answers: DataFrame, rated: DataFrame, labels: dict) -> DataFrame:
    """Rows of ``okgqa_scores`` with metric ``safe``: per ``(method, seed, level)`` the mean in % over the
    answers with a rated fact of supported / (supported + not supported) (spec 5.3 [P]); ``rated``:
    ``answer_id, supported`` without nulls. The columns of
    :func:`kgbrink.evaluation.okgqa.factscore_rows` without a length penalty."""
    return factscore_rows(answers, rated, None, labels).withColumn("metric", F.lit("safe"))
