"""Answers kept as they arrive: one JSON Lines file per task attempt, each answer appended and flushed.

A run's spool is a folder ``<spool_dir>/<run_id>/`` of files ``part-<partition>-<attempt>.jsonl``, one
:func:`record` a line. A task first reads the files of its partition's earlier attempts
(:func:`answered_keys`) and asks only what they lack, so a lost executor or a retried task asks no
answered prompt twice; the driver folds finished spools into the ``model_calls`` table and removes them,
and a run killed before that is folded by the next run. A line cut by a kill is not JSON and is ignored:
its prompt is asked again. The folder must be visible to the driver and every executor (local mode, or a
shared file system).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# The spool's columns, in the order of the Spark schema the driver reads them with.
SCHEMA = (
    "call_id string, status string, answered boolean, content string, finish_reason string, top_logprobs string, "
    "prompt_tokens bigint, completion_tokens bigint, tries int, latency_s double, http_status int, "
    "response_model string, system_fingerprint string, detail string, created_at string, model string, "
    "params string, prompt_sha256 string"
)
RECORDED = ("model", "params", "prompt_sha256")  # a request's columns its spool line carries


def record(result: Any) -> dict:
    """The spool line of a :class:`kgbrink.llm.client.CallResult` (``top_logprobs`` as JSON text)."""
    logprobs = result.top_logprobs
    return {
        "call_id": result.key,
        "status": result.status,
        "answered": bool(result.answered),
        "content": result.content,
        "finish_reason": result.finish_reason,
        "top_logprobs": None if logprobs is None else json.dumps(logprobs, separators=(",", ":")),
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "tries": result.tries,
        "latency_s": result.latency_s,
        "http_status": result.http_status,
        "response_model": result.response_model,
        "system_fingerprint": result.system_fingerprint,
        "detail": result.detail,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


class Budget:
    """What one task may spend (``limit``, in the prices' currency) at ``prompt`` and ``completion`` per 10^6
    tokens."""

    __slots__ = ("limit", "prompt", "completion")

    def __init__(self, limit: float, prompt: float | None, completion: float | None):
        self.limit, self.prompt, self.completion = float(limit), float(prompt or 0), float(completion or 0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


class Secret:
    """A value carried to the tasks (the API key) that prints as ``Secret(***)``, never itself."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


def part_name(partition: int, attempt: int) -> str:
    return f"part-{partition:05d}-{attempt:03d}.jsonl"


def _lines(path: Path) -> Iterator[dict]:
    """The whole JSON objects of a spool file (a line cut by a kill is skipped)."""
    with path.open("rb") as stream:
        for raw in stream:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and isinstance(line.get("call_id"), str):
                yield line


def lines(folder: Path, partition: int) -> list[dict]:
    """The whole lines of every attempt of ``partition`` in a spool folder."""
    return [line for path in sorted(Path(folder).glob(f"part-{partition:05d}-*.jsonl")) for line in _lines(path)]


def answered_keys(folder: Path, partition: int) -> set[str]:
    """The call ids earlier attempts of ``partition`` got an answer for."""
    keys: set[str] = set()
    for path in sorted(Path(folder).glob(f"part-{partition:05d}-*.jsonl")):
        keys.update(line["call_id"] for line in _lines(path) if line.get("answered") is True)
    return keys


class SpoolWriter:
    """Appends records to one spool file, flushing each to the operating system as it is written."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._stream = path.open("a", encoding="utf-8")

    def append(self, result: Any, extra: dict | None = None) -> None:
        line = record(result)
        if extra:
            line.update(extra)
        self._stream.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()


def ask_partition(
    partition: int,
    rows: Iterable[Any],
    *,
    endpoint: Any,
    folder: str,
    attempt: int,
    api_key: Secret | None = None,
    budget: Budget | None = None,
) -> Iterator[dict]:
    """Ask the prompts of one partition (rows with ``call_id, body``: the request's JSON text, and the
    ``model, params, prompt_sha256`` recorded with its answer) that its earlier attempts left unanswered;
    every result appended to this attempt's spool file. Yields one dictionary of counts
    (:class:`kgbrink.llm.client.CallStats` fields plus ``skipped``, ``spent`` and ``over_budget``: the rows
    not asked once ``budget`` was spent; the requests in flight then still finish). ``api_key``: the key the
    driver read from ``endpoint.api_key_env``, put in this worker's environment under that name."""
    from kgbrink.llm.client import run_calls

    if api_key is not None and endpoint.api_key_env:
        os.environ[endpoint.api_key_env] = api_key.value

    done = answered_keys(Path(folder), partition)
    skipped = over_budget = 0
    spent = 0.0
    pending: dict[str, dict] = {}  # the recorded columns of the requests in flight

    def requests():
        nonlocal skipped, over_budget
        for row in rows:
            if row["call_id"] in done:
                skipped += 1
                continue
            if budget is not None and spent >= budget.limit:
                over_budget += 1
                continue
            pending[row["call_id"]] = {k: row[k] for k in RECORDED}
            yield row["call_id"], json.loads(row["body"])

    writer = SpoolWriter(Path(folder) / part_name(partition, attempt))

    def keep(result: Any) -> None:
        nonlocal spent
        writer.append(result, pending.pop(result.key, None))
        if budget is not None:
            spent += budget.cost(result.prompt_tokens or 0, result.completion_tokens or 0)

    try:
        stats = run_calls(endpoint, requests(), keep)
    finally:
        writer.close()
    counts = {k: v for k, v in vars(stats).items() if not k.startswith("_")}
    counts.update(skipped=skipped, over_budget=over_budget, spent=spent, partition=partition)
    yield counts
