"""ProbeKGC (paper 003) for a model: prompts from the question table, answers to score-mcq predictions.

Prompts (spec 4.1, [code] ``prompt_hub.question_prompt``, direct answering): ``system`` =
:data:`kgbrink.mcq.render.SYSTEM_PROMPT`, ``user`` = the question's ``text`` (the text-label rendering of
``kgbrink mcq``); the request asks for the first token's top log-probabilities (``logprobs``,
``top_logprobs`` 20: the API's maximum, [code]). Parsing (spec 4.2): the letter of a direct answer
(:func:`kgbrink.mcq.answering.direct_letter`) and the K option log-probabilities of the first token
(:func:`kgbrink.mcq.answering.option_logprobs`), the NKD input of score-mcq.
"""

from __future__ import annotations

import json

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.evaluation.calls import messages_column
from kgbrink.mcq import answering
from kgbrink.mcq.render import SYSTEM_PROMPT

DEFAULT_PARAMS = {"temperature": 0.0, "max_tokens": 16, "logprobs": True, "top_logprobs": 20}
PREDICTION_SCHEMA = "id string, letter string, logprobs array<double>, reason string, detail string"


def prompts(questions: DataFrame) -> DataFrame:
    """``item_id, messages`` of every question (``id, text``)."""
    messages = messages_column(("system", F.lit(SYSTEM_PROMPT)), ("user", F.col("text")))
    return questions.select(F.col("id").alias("item_id"), messages.alias("messages"))


def _parse(content: str | None, top_logprobs: str | None, n_options: int) -> tuple:
    """``(letter, logprobs, reason, detail)`` of one answer."""
    tops = json.loads(top_logprobs) if top_logprobs else None
    letter = answering.direct_letter(content or "", n_options)
    logprobs = answering.option_logprobs(tops, n_options) if tops else None
    if logprobs is not None and all(v is None for v in logprobs):
        logprobs = None
    if letter is None and logprobs is None:
        return None, None, "void", f"no option letter in {content[:120]!r}" if content else "empty answer"
    return letter, logprobs, None, None


def predictions(answers: DataFrame) -> DataFrame:
    """score-mcq predictions of answered questions (``item_id, content, top_logprobs, n_options``):
    :data:`PREDICTION_SCHEMA`, ``reason`` set (and no letter or log-probabilities) on an unparseable one."""

    @F.pandas_udf(PREDICTION_SCHEMA.split(", ", 1)[1])
    def parse(content: pd.Series, tops: pd.Series, n: pd.Series) -> pd.DataFrame:
        rows = [_parse(c, t, int(k)) for c, t, k in zip(content, tops, n)]
        return pd.DataFrame(rows, columns=["letter", "logprobs", "reason", "detail"])

    parsed: Column = parse("content", "top_logprobs", "n_options")
    return answers.select(F.col("item_id").alias("id"), parsed.alias("p")).select("id", "p.*")
