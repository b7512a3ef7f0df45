"""What the dataset already holds that a release publishes without building it again.

A BRINK variant: ``build`` records, when it mined its own rules, ``<variant>/_build.json``: its fingerprint
(:func:`kgbrink.release.layout.fingerprint`: the input table versions it read, the digest of the
``mining`` and ``variant`` settings), the Delta version of each variant table it wrote and its one-line
summary. The variant is current when the fingerprint is the release's and every table is still at its
recorded version. Statistics: current when each table records the triples version the release reads
(:func:`kgbrink.core.catalog.stats_note`; their splits are their folder).
"""

from __future__ import annotations

import dataclasses
import json

from kgbrink.core import catalog, publish
from kgbrink.core.delta import latest_version, table_description, table_exists
from kgbrink.release import benchmarks, layout

RECORD = "_build.json"
# the variant tables a build writes; the release reads the first six (directly or through ``export``)
TABLES = ("rules", "complete", "incomplete", "removed", "provenance", "questions", "groundings", "violations")
NEEDED = TABLES[:6]


def record_path(dataset: str, variant: str) -> str:
    """``<dataset>/variants/<variant>/_build.json``."""
    return catalog.path("variant.complete", dataset=dataset, variant=variant).rsplit("/", 1)[0] + "/" + RECORD


def brink_fingerprint(config, inputs: dict, variant: str) -> dict:
    """The release's fingerprint of BRINK built as ``variant`` from ``inputs`` (table name -> version)."""
    sections = {s: dataclasses.asdict(getattr(config, s)) for s in benchmarks.BRINK.sections}
    sections["variant"]["name"] = variant
    return layout.fingerprint("brink", inputs, sections)


def build_record(config, dataset: str, variant: str, summary, built: str, in_variant: bool = False) -> dict | None:
    """The record of a finished ``build`` (its summary, sub-jobs merged); None when its sub-jobs read two
    versions of one input table or it wrote no version of a needed table (nothing to vouch for).
    ``in_variant``: its exported files and report went to the variant's own folder (``kgbrink run``
    reuses only such a build, :func:`current_build_in_variant`)."""
    inputs = {}
    for name in layout.INPUT_TABLES:
        versions = {t.version for key, t in summary.inputs.items() if key.rsplit(".", 1)[-1] == name}
        if len(versions) != 1 or None in versions:
            return None
        inputs[name] = versions.pop()
    paths = {catalog.path(f"variant.{t}", dataset=dataset, variant=variant): t for t in TABLES}
    tables = {paths[t.path]: t.version for t in summary.outputs.values() if t.path in paths}
    if not set(NEEDED) <= set(tables) or None in tables.values():
        return None
    record = {"fingerprint": brink_fingerprint(config, inputs, variant), "tables": tables, "built": built}
    return {**record, "exported_in_variant": True} if in_variant else record


def current_build(spark, dataset: str, variant: str, fingerprint: dict) -> dict | None:
    """The variant's build record when that build had ``fingerprint`` and none of its tables changed
    since; None otherwise (no record, unreadable, other inputs or settings, a table rewritten)."""
    try:
        record = json.loads(publish.read_text(spark, record_path(dataset, variant)) or "null")
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None
    tables, built = record.get("tables"), record.get("built")
    if not isinstance(tables, dict) or not isinstance(built, str) or not set(NEEDED) <= set(tables) <= set(TABLES):
        return None
    for name, version in tables.items():
        path = catalog.path(f"variant.{name}", dataset=dataset, variant=variant)
        if not table_exists(spark, path) or latest_version(spark, path) != version:
            return None
    return record


def current_build_in_variant(spark, config, dataset: str, inputs: dict) -> dict | None:
    """The current build record (:func:`current_build`) of the configured variant built from ``inputs``
    (table name -> version) with these settings, when that build exported its files and report into the
    variant's own folder (so they are its); None otherwise."""
    variant = config.variant.name
    record = current_build(spark, dataset, variant, brink_fingerprint(config, inputs, variant))
    return record if record is not None and record.get("exported_in_variant") is True else None


def current_statistics(spark, dataset: str, splits: list[str], triples_version: int) -> bool:
    """Whether every statistics table on ``splits`` exists and its latest version records ``triples_version``."""
    folder = catalog.stats_dir(dataset, splits)
    for name in catalog.STATS_TABLES:
        path = f"{folder}/{name}"
        if not table_exists(spark, path):
            return False
        if catalog.recorded_triples_version(table_description(spark, path)) != triples_version:
            return False
    return True
