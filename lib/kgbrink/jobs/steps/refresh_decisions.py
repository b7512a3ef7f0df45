"""What ``kgbrink refresh`` keeps current after a merge, each decided from what the tables hold: the
statistics sets, the variants and the score runs of a dataset (``skip``, ``recompute`` / ``rebuild`` /
``rescore``, or ``stale``), and the ``build`` options that give a rebuilt variant its rules the way it got
them."""

from __future__ import annotations

import hashlib
import json
import re

from kgbrink.core import catalog
from kgbrink.core.delta import (
    description,
    latest_version,
    read_table,
    table_description,
    table_exists,
    table_path,
)
from kgbrink.core.files import path_exists, subdirectories
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import JobFailed
from kgbrink.core.writer import RECORDED, consistent_version
from kgbrink.kg import refresh
from kgbrink.probe import runs as score_runs

# A variant whose rebuild began and has not finished carries this marker file (removed when ``build`` ends).
PENDING = "_refresh_pending"


class RefreshError(JobFailed):
    """The dataset cannot be refreshed (no complete ingest, an unknown variant)."""


def _decision(kind: str, name: str, action: str, reason: str, **extra) -> dict:
    return {"kind": kind, "name": name, "action": action, "reason": reason, **extra}


def _differing_splits(old: dict, new: dict, splits: list[str]) -> list[str]:
    return [s for s in splits if old.get(s) != new.get(s)]


def stats_decisions(ctx: JobContext, dataset: str, current: int) -> list[dict]:
    """Each statistics set of ``dataset`` and whether it is current: its four tables record one triples
    version whose triples of its splits equal those of version ``current``."""
    spark = ctx.spark
    triples_path = catalog.path("triples", dataset=dataset)
    now = refresh.split_fingerprints(read_table(spark, triples_path, current))
    out = []
    for name in subdirectories(spark, table_path(dataset, "stats")):
        splits = sorted(name.split("+"))
        where = catalog.stats_dir(dataset, splits)

        def decide(action: str, reason: str, name=name, splits=splits) -> None:
            out.append(_decision("stats", name, action, reason, splits=splits))

        versions = {
            catalog.recorded_triples_version(table_description(spark, f"{where}/{t}"))
            if table_exists(spark, f"{where}/{t}")
            else None
            for t in catalog.STATS_TABLES
        }
        missing = [s for s in splits if s not in now]
        if missing:
            decide("stale", f"split(s) {', '.join(missing)} are no longer in the dataset")
            continue
        if len(versions) != 1 or None in versions:
            decide("recompute", "its tables do not all record one triples version (an unfinished run)")
            continue
        version = versions.pop()
        if version == current:
            decide("skip", f"computed from the current triples version {current}")
            continue
        try:
            then = refresh.split_fingerprints(read_table(spark, triples_path, version), splits)
        except Exception:  # noqa: BLE001 - the version is gone (vacuumed): recompute
            then = {}
        changed = _differing_splits(then, now, splits)
        if changed:
            decide("recompute", f"the triples of {', '.join(changed)} changed since version {version}")
        else:
            decide("skip", f"the triples of {'+'.join(splits)} are those of version {version}, their source")
    return out


def _variant_splits(ctx: JobContext, complete: str, now: dict) -> list[str]:
    """The splits a variant is built from, as :meth:`kgbrink.jobs.steps.variant_options.Variant.splits` reads them."""
    if ctx.config.mining.splits:
        return sorted(ctx.config.mining.splits)
    found = re.match(r"splits (\S+) of ", table_description(ctx.spark, complete) or "")
    return sorted(found.group(1).split(",")) if found else sorted(now)


def rules_for_rebuild(variant_rules: str | None, built_in: str | None, dataset: str, dataset_rules: str | None) -> dict:
    """``build`` options that give a rebuilt variant its rules the way it got them. ``variant_rules``: the
    commit message of the variant's rules copy (``rules of SOURCE vN``); ``built_in``: the dataset the
    variant was built in (its ``complete`` table's message); ``dataset_rules``: the commit message of
    ``dataset``'s rules table. Rules from the dataset's own rules table (also when the dataset was copied
    elsewhere since) are mined again when ``mine`` wrote them (they depend on the triples) and reused when
    imported; another rules table is used as it is; unknown provenance means mining, ``build``'s default."""
    found = re.match(r"rules of (\S+) v\d+$", variant_rules or "")
    source = found.group(1).rstrip("/") if found else None
    own = {catalog.path("rules", dataset=d) for d in (dataset, built_in) if d}
    if source is not None and source not in own:
        return {"rules": source}
    if source is not None and dataset_rules is not None and not dataset_rules.startswith("kgbrink mine"):
        return {"reuse_rules": True}
    return {}


def variant_decisions(ctx: JobContext, dataset: str, current: int, wanted: list[str] | None) -> list[dict]:
    """Each variant of ``dataset`` (``wanted`` only, when given) and whether it is current: no unfinished
    rebuild, and its ``complete`` KG equal to the triples of its splits in version ``current``."""
    spark = ctx.spark
    found = [
        name
        for name in subdirectories(spark, table_path(dataset, "variants"))
        if table_exists(spark, catalog.path("variant.complete", dataset=dataset, variant=name))
    ]
    unknown = sorted(set(wanted or []) - set(found))
    if unknown:
        raise RefreshError(
            f"no variant {', '.join(unknown)} in {dataset} (has: {', '.join(found) or 'none'})", ctx.summary
        )
    now = refresh.split_fingerprints(read_table(spark, catalog.path("triples", dataset=dataset), current))
    out = []
    for name in wanted or found:
        complete = catalog.path("variant.complete", dataset=dataset, variant=name)
        splits = _variant_splits(ctx, complete, now)
        marker = f"{complete.rsplit('/', 1)[0]}/{PENDING}"
        if path_exists(spark, marker):
            out.append(_decision("variant", name, "rebuild", "a rebuild an earlier refresh began did not finish"))
            continue
        built = refresh.split_fingerprints(read_table(spark, complete), splits)
        changed = _differing_splits(built, now, splits)
        if changed:
            out.append(_decision("variant", name, "rebuild", f"the triples of {', '.join(changed)} changed"))
        else:
            out.append(_decision("variant", name, "skip", f"its KG ({'+'.join(splits)}) is the current triples"))
    return out


def _score_key(record: dict) -> str:
    asked = {k: v for k, v in record.items() if k != "inputs"}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


def _input_path(dataset: str, name: str, record: dict) -> str:
    """Where a score run's input ``name`` is in ``dataset`` now: the dataset's tables by their catalogued
    place (so a dataset copied elsewhere still finds its own), any other table where the run read it."""
    if name in RECORDED:
        return catalog.path(name, dataset=dataset)
    if name in catalog.STATS_TABLES:
        return f"{catalog.stats_dir(dataset, record['splits'])}/{name}"
    return record["inputs"][name]["path"]


def _current_version(spark, name: str, path: str) -> int | None:
    if not table_exists(spark, path):
        return None
    return consistent_version(spark, path) if name in RECORDED else latest_version(spark, path)


def score_decisions(ctx: JobContext, dataset: str) -> list[dict]:
    """Each score run of ``dataset`` grouped by what it was asked (its recorded options) and whether the
    group is current: some run of it read the current versions of every table it read."""
    spark = ctx.spark
    groups: dict[str, list[tuple[str, dict]]] = {}
    for work in subdirectories(spark, table_path(dataset, "scores")):
        results = table_path(dataset, f"scores/{work}/results")
        record = score_runs.parse(description(spark, results))
        if record is not None:
            groups.setdefault(_score_key(record), []).append((work, record))
    out = []
    for key, runs in sorted(groups.items()):
        stale = {}
        for work, record in runs:
            stale[work] = [
                name
                for name, table in record["inputs"].items()
                if _current_version(spark, name, _input_path(dataset, name, record)) != table["version"]
            ]
        current = [work for work, names_ in stale.items() if not names_]
        record = runs[0][1]
        what = f"{record['ranks']} ({record['format']}, splits {'+'.join(record['splits'])})"
        if current:
            out.append(_decision("score", key, "skip", f"run {current[0]} read the current tables", ranks=what))
        else:
            work, latest = runs[-1]
            reason = f"{', '.join(stale[work])} changed since run {work}"
            out.append(_decision("score", key, "rescore", reason, ranks=what, record=latest))
    return out
