"""The variant the BRINK jobs share (``remove``, ``verify``, ``questions``, ``export``, ``build``): their
options, the :class:`Variant` they open (table locations, pinned reads, settings), and the question files
``questions`` and ``export`` write. A module of no job: the job modules import it, never each other.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.brink import questions
from kgbrink.core import catalog
from kgbrink.core.delta import TableVersion, table_description, table_exists, table_path
from kgbrink.core.files import delete_path, local_dir, write_single_file
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg
from kgbrink.kg.dataset import dataset_splits
from kgbrink.rules.model import Rule
from kgbrink.rules.table import read_rules

VARIANT_TABLES = ("rules", "groundings", "complete", "incomplete", "removed", "provenance", "questions", "violations")


def variant_dir(dataset: str, name: str) -> str:
    return table_path(dataset, f"variants/{name}")


class Variant:
    """Table locations and reads of one variant, recording the Delta version of every input read."""

    def __init__(self, ctx: JobContext, dataset: str, name: str):
        self.ctx, self.spark, self.dataset, self.name, self.summary = ctx, ctx.spark, dataset, name, ctx.summary
        self.root = variant_dir(dataset, name)
        self.names: dict[str, DataFrame] = {}

    def path(self, table: str) -> str:
        if table in VARIANT_TABLES:
            return catalog.path(f"variant.{table}", dataset=self.dataset, variant=self.name)
        return catalog.path(table, dataset=self.dataset)

    def read(self, table: str, path: str | None = None) -> DataFrame:
        return self.ctx.read(table, path or self.path(table))

    def write(self, table: str, frame: DataFrame, description: str) -> TableVersion:
        return self.ctx.write(table, frame, self.path(table), description=description)

    def splits(self, from_kg: bool = False) -> list[str]:
        """The KG's splits: ``mining.splits``; else those ``remove`` built the variant from (the ``complete``
        table's commit message records them); else (``from_kg``, for ``remove``) every split of the dataset."""
        if self.ctx.config.mining.splits:
            return sorted(self.ctx.config.mining.splits)
        if not from_kg and table_exists(self.spark, self.path("complete")):
            found = re.match(r"splits (\S+) of ", table_description(self.spark, self.path("complete")) or "")
            if found:
                return sorted(found.group(1).split(","))
        return dataset_splits(self.read("triples"))

    def staging(self, relative: Path | None = None) -> str:
        """Where the tasks write the parts of a plain file (``relative``: its path in the export) before
        the driver merges them; the whole staging area without ``relative``."""
        return table_path(self.root, "_staging" + (f"/{relative.as_posix()}" if relative else ""))

    def relation_ids(self) -> dict[str, int]:
        return {r["key"]: r["id"] for r in self.read("relations").select("id", "key").collect()}

    def rules(self, source: str | None = None) -> list[Rule]:
        """The variant's rules (its copy written by ``remove``), or the rules table at ``source``."""
        path = source or self.path("rules")
        self.read("rules", path)
        return read_rules(self.spark, path, self.summary.inputs["rules"].version)


def variant_settings(v: Variant, from_kg: bool = False) -> dict:
    config = v.ctx.config
    return {
        "per_rule": int(config.variant.groundings_per_rule),
        "seed": int(config.variant.seed),
        "mode": config.variant.removal_mode,
        "tau": float(config.variant.tau),
        "ratios": tuple(float(x) for x in config.variant.split_ratios),
        "templates": dict(config.variant.templates),
        "max_answers": None if config.variant.max_answers is None else int(config.variant.max_answers),
        "question_unit": config.variant.question_unit,
        "splits": v.splits(from_kg),
    }


@dataclass
class VariantOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    variant: str | None = arg(None, "variant name (default: setting variant.name)")


@dataclass
class RemoveOptions(VariantOptions):
    rules: str | None = arg(None, "rules Delta table (default: <dataset>/rules)")
    mode: str | None = arg(
        None, "conflict resolution (default: setting variant.removal_mode)", choices=["maximal", "reference"]
    )


@dataclass
class OutOptions(VariantOptions):
    out: str | None = arg(None, "output directory of the plain files (default: <dataset>/variants/<variant>/export)")


NO_KG_FILES = "leave out the KGs' TSV files (complete, incomplete, removed): `release` publishes the tables"


@dataclass
class ExportOptions(OutOptions):
    no_kg_files: bool = arg(False, NO_KG_FILES, action="store_true")


def open_variant(ctx: JobContext, opts: VariantOptions) -> Variant:
    return Variant(ctx, ctx.config.require_dataset(opts.dataset), opts.variant or ctx.config.variant.name)


QUESTION_COUNTS_PREFIX = "questions; counts "


def question_counts(v: Variant) -> dict | None:
    """The counts the ``questions`` job recorded with the ``questions`` table (its commit's description):
    the unit, the hub questions dropped and the count of both units; None for a table without them."""
    if not table_exists(v.spark, v.path("questions")):
        return None
    description = table_description(v.spark, v.path("questions")) or ""
    if not description.startswith(QUESTION_COUNTS_PREFIX):
        return None
    return json.loads(description[len(QUESTION_COUNTS_PREFIX) :])


def variant_entity_names(v: Variant, scheme: str, seed: int) -> DataFrame:
    """Entity names of ``scheme``, computed once per job (the private-id permutation sorts all entities)."""
    if scheme not in v.names:
        v.names[scheme] = questions.entity_names(v.read("entities"), scheme, seed).transform(checkpoint)
    return v.names[scheme]


def write_question_files(v: Variant, kept: DataFrame, s: dict, out: Path | None) -> list[str]:
    """``<out>/questions/<scheme>/<split>.jsonl`` for the three schemes (default out: the variant's export)."""
    out = out or local_dir(v.root) / "export"
    relations = questions.relation_names(v.read("relations"))
    written = []
    for scheme in questions.SCHEMES:
        rendered = questions.render_questions(
            kept, variant_entity_names(v, scheme, s["seed"]), relations, s["templates"]
        ).transform(checkpoint)
        for split in questions.SPLITS:
            path = out / "questions" / scheme / f"{split}.jsonl"
            write_single_file(
                rendered.filter(F.col("split") == split).orderBy("id"), path, "json", v.staging(path.relative_to(out))
            )
            written.append(str(path))
    delete_path(v.spark, v.staging())
    return written
