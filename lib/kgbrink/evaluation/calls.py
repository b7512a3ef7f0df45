"""Prompt rows keyed for the ``model_calls`` table: canonical request JSON and its SHA-256 keys.

Columns in: ``item_id`` (the benchmark's question id, unique), ``messages`` (the chat messages as
canonical JSON text). Columns out: ``item_id, messages, prompt_sha256, call_id, body``:
``prompt_sha256`` = SHA-256 of ``messages``; ``call_id`` = SHA-256 of the canonical JSON of
``{"model", "params", "prompt_sha256"}`` (the key of issue 58: model, sampling parameters, prompt), with
``"revision"`` when a model revision is given (``predict.model_revision``);
``body`` = the request sent, ``{"model", "messages", **params}``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def canonical(value: Any) -> str:
    """JSON with sorted keys, no spaces and UTF-8 text: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def messages_json(messages: list[dict]) -> str:
    """Chat messages (``role``, ``content``) as canonical JSON text."""
    return canonical([{"role": m["role"], "content": m["content"]} for m in messages])


def _key(model: str, params: dict, prompt_sha256: str, revision: str | None, sample: str | None = None) -> dict:
    key = {"model": model, "params": params, "prompt_sha256": prompt_sha256}
    if revision:
        key["revision"] = revision
    if sample is not None:
        key["sample"] = sample
    return key


def call_id(
    model: str, params: dict, prompt_sha256: str, revision: str | None = None, sample: int | None = None
) -> str:
    """The key of one request: SHA-256 of canonical ``{"model", "params", "prompt_sha256"}`` (and
    ``"revision"`` when given, ``"sample"`` as text for one of several samples of a prompt)."""
    key = canonical(_key(model, params, prompt_sha256, revision, None if sample is None else str(sample)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def call_rows(
    items: DataFrame,
    model: str,
    params: dict,
    limit: int | None = None,
    revision: str | None = None,
    field: str = "messages",
) -> DataFrame:
    """``items`` (``item_id, messages``, and ``sample`` for one of several samples of a prompt) keyed and with
    their request body; ``limit``: the first items by id; ``revision``: the model's revision label, in the key
    only (never sent); ``field``: the body's field holding ``messages`` (``input`` for an embeddings
    request, whose ``messages`` is the JSON list of its texts)."""
    if limit is not None:
        items = items.orderBy("item_id").limit(int(limit))
    slot, sample_slot = "<prompt_sha256>", "<sample>"
    sampled = "sample" in items.columns
    parts = canonical(_key(model, params, slot, revision, sample_slot if sampled else None)).split(slot)
    if len(parts) != 2 or (sampled and parts[1].count(sample_slot) != 1):
        raise ValueError(f"model, params or revision contain {slot!r} or {sample_slot!r}")
    prompt_sha = F.sha2(F.col("messages"), 256)
    tail = [F.lit(parts[1])]
    if sampled:
        before, after = parts[1].split(sample_slot)
        tail = [F.lit(before), F.col("sample").cast("string"), F.lit(after)]
    key = F.sha2(F.concat(F.lit(parts[0]), prompt_sha, *tail), 256)
    head = canonical({"model": model, **params})[:-1]  # the body's fields but the messages, without its "}"
    body = F.concat(F.lit(head + "," + canonical(field) + ":"), F.col("messages"), F.lit("}"))
    return items.select(
        "item_id", "messages", prompt_sha.alias("prompt_sha256"), key.alias("call_id"), body.alias("body")
    )


def messages_column(*parts: tuple[str, Column]) -> Column:
    """Chat messages, one per ``(role, content column)``, as canonical JSON text (:func:`messages_json`)."""
    roles = [role for role, _ in parts]

    @F.pandas_udf("string")
    def build(contents: pd.DataFrame) -> pd.Series:
        rows = contents.itertuples(index=False, name=None)
        return pd.Series(
            [messages_json([{"role": r, "content": c} for r, c in zip(roles, row)]) for row in rows], dtype=object
        )

    return build(F.struct(*[column.alias(f"m{i}") for i, (_, column) in enumerate(parts)]))
