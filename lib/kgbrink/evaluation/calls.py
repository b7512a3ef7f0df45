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


def _key(model: str, params: dict, prompt_sha256: str, revision: str | None) -> dict:
    key = {"model": model, "params": params, "prompt_sha256": prompt_sha256}
    return {**key, "revision": revision} if revision else key


def call_id(model: str, params: dict, prompt_sha256: str, revision: str | None = None) -> str:
    """The key of one request: SHA-256 of canonical ``{"model", "params", "prompt_sha256"}`` (and
    ``"revision"`` when given)."""
    key = canonical(_key(model, params, prompt_sha256, revision))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def call_rows(
    items: DataFrame, model: str, params: dict, limit: int | None = None, revision: str | None = None
) -> DataFrame:
    """``items`` (``item_id, messages``) keyed and with their request body; ``limit``: the first items by id;
    ``revision``: the model's revision label, in the key only (never sent)."""
    if limit is not None:
        items = items.orderBy("item_id").limit(int(limit))
    slot = "<prompt_sha256>"
    prefix = canonical(_key(model, params, slot, revision)).split(slot)
    if len(prefix) != 2:
        raise ValueError(f"model, params or revision contain {slot!r}")
    prompt_sha = F.sha2(F.col("messages"), 256)
    key = F.sha2(F.concat(F.lit(prefix[0]), prompt_sha, F.lit(prefix[1])), 256)
    head = canonical({"model": model, **params})[:-1]  # the body's fields but the messages, without its "}"
    body = F.concat(F.lit(head + ',"messages":'), F.col("messages"), F.lit("}"))
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
