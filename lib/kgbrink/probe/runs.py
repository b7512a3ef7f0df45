"""Score-run records: what a ``kgbrink score`` run was asked and which table versions it read, kept in the
description of its ``results`` table so a refresh can tell a stale score and run it again the same way."""

from __future__ import annotations

import dataclasses
import json

from kgbrink.probe import scoring

RUN_RECORD = "score run "


def run_record(
    ranks: str, fmt: str, id_kind: str, model, run, splits: list[str], spec: scoring.MetricSpec, inputs: dict
) -> dict:
    """What a score run was asked (the options that decide its output, the metric spec) and the version of
    every table it read (``inputs``: name -> ``TableVersion.as_dict()``)."""
    return {
        "ranks": ranks,
        "format": fmt,
        "ids": id_kind,
        "model": model,
        "run": run,
        "splits": splits,
        "spec": dataclasses.asdict(spec),
        "inputs": inputs,
    }


def describe(record: dict) -> str:
    """The results table's description holding ``record``."""
    return RUN_RECORD + json.dumps(record, sort_keys=True)


def parse(description: str | None) -> dict | None:
    """The record of a results table's description (None: an unfinished run, or one from before records)."""
    text = description or ""
    return json.loads(text[len(RUN_RECORD) :]) if text.startswith(RUN_RECORD) else None


def spec_from_record(record: dict) -> scoring.MetricSpec:
    """The :class:`kgbrink.probe.scoring.MetricSpec` of a :func:`run_record` (JSON lists back to tuples)."""
    return scoring.MetricSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["spec"].items()})
