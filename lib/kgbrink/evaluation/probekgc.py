"""ProbeKGC (paper 003) for a model: prompts from the question table, answers to score-mcq predictions.

Prompts (spec 4.1, [code] ``prompt_hub.question_prompt``): :func:`kgbrink.mcq.answering.prompt` of each
question (``id, text, options``: the text-label rendering of ``kgbrink mcq``) with a template: direct
(``probekgc-direct@1``: ``system`` = :data:`kgbrink.mcq.render.SYSTEM_PROMPT`, ``user`` = the text; its
request asks for the first token's top log-probabilities, ``top_logprobs`` 20, the API's maximum, [code]) or
CoT (``probekgc-cot@1``, E5). A template that fills ``{question_block}`` (the question without its reply
instruction) asks for reasoning, so its answers are read the CoT way. Parsing (spec 4.2): direct, the
letter (:func:`kgbrink.mcq.answering.direct_letter`) and the K option log-probabilities of the first token
(:func:`kgbrink.mcq.answering.option_logprobs`, the NKD input of score-mcq); CoT, the letter of ``The answer
is X.`` (:func:`kgbrink.mcq.answering.cot_letter`), no log-probabilities.
"""

from __future__ import annotations

import json

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.evaluation.calls import messages_json
from kgbrink.llm import templates
from kgbrink.mcq import answering

PREDICTION_SCHEMA = "id string, letter string, logprobs array<double>, reason string, detail string"


def strategy(template: templates.Template) -> str:
    """``cot`` for a template that fills ``{question_block}`` (it asks for reasoning), else ``direct``."""
    return "cot" if "question_block" in template.slots else "direct"


def prompts(questions: DataFrame, template: templates.Template) -> DataFrame:
    """``item_id, messages`` of every question (``id, text, options``) rendered with ``template``."""
    how = strategy(template)

    @F.pandas_udf("string")
    def build(texts: pd.Series, sizes: pd.Series) -> pd.Series:
        out = [
            messages_json(answering.prompt({"text": t, "n_options": int(k)}, template, strategy=how))
            for t, k in zip(texts, sizes)
        ]
        return pd.Series(out, dtype=object)

    return questions.select(F.col("id").alias("item_id"), build("text", F.size("options")).alias("messages"))


def _parse(content: str | None, top_logprobs: str | None, n_options: int, how: str = "direct") -> tuple:
    """``(letter, logprobs, reason, detail)`` of one answer."""
    if how == "cot":
        letter = answering.cot_letter(content or "", n_options)
        if letter is None:
            return None, None, "void", f"no 'The answer is X.' in {content[-120:]!r}" if content else "empty answer"
        return letter, None, None, None
    tops = json.loads(top_logprobs) if top_logprobs else None
    letter = answering.direct_letter(content or "", n_options)
    logprobs = answering.option_logprobs(tops, n_options) if tops else None
    if logprobs is not None and all(v is None for v in logprobs):
        logprobs = None
    if letter is None and logprobs is None:
        return None, None, "void", f"no option letter in {content[:120]!r}" if content else "empty answer"
    return letter, logprobs, None, None


def predictions(answers: DataFrame, how: str = "direct") -> DataFrame:
    """score-mcq predictions of answered questions (``item_id, content, top_logprobs, n_options``) read the
    ``how`` way (``direct`` or ``cot``): :data:`PREDICTION_SCHEMA`, ``reason`` set (and no letter or
    log-probabilities) on an unparseable one."""

    @F.pandas_udf(PREDICTION_SCHEMA.split(", ", 1)[1])
    def parse(content: pd.Series, tops: pd.Series, n: pd.Series) -> pd.DataFrame:
        rows = [_parse(c, t, int(k), how) for c, t, k in zip(content, tops, n)]
        return pd.DataFrame(rows, columns=["letter", "logprobs", "reason", "detail"])

    parsed: Column = parse("content", "top_logprobs", "n_options")
    return answers.select(F.col("item_id").alias("id"), parsed.alias("p")).select("id", "p.*")
