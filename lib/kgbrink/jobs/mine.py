"""``kgbrink mine``: Horn rules of a dataset with AMIE3's semantics into the Delta table ``<dataset>/rules``.

Also ``import-rules`` (an AMIE3 TSV file into a rules table, relations checked against the dataset) and
``export-rules`` (a rules table as AMIE3 TSV). Row schema: :data:`kgbrink.rules.model.RULE_TABLE_COLUMNS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import (
    table_path,
)
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.kg.dataset import dataset_splits
from kgbrink.rules import mining
from kgbrink.rules.model import (
    RULE_TYPES,
    Rule,
    RuleSyntaxError,
    read_amie_tsv,
    write_amie_tsv,
)
from kgbrink.rules.params import MiningParams
from kgbrink.rules.table import read_rules, rules_frame


def _count_types(summary: JobSummary, rules: list[Rule]) -> None:
    types = {t: 0 for t in RULE_TYPES}
    for r in rules:
        types[r.rule_type()] += 1
    summary.counts["rules"] = len(rules)
    summary.counts["rules_by_type"] = types


def _relation_keys(ctx: JobContext, dataset: str) -> dict[int, str]:
    rows = ctx.read("relations", catalog.path("relations", dataset=dataset)).select("id", "key").collect()
    return {row["id"]: row["key"] for row in rows}


@dataclass
class MineOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    rules: str | None = arg(None, "output Delta table (default: <dataset>/rules)")
    splits: list[str] | None = arg(
        None, "comma-separated splits to mine on (default: setting mining.splits, else all)", convert=names
    )
    tsv: str | None = arg(None, "also write the rules as AMIE3 TSV here")
    max_atoms: int | None = arg(None, "atoms per rule counting the head (AMIE -maxad): 2, 3 or 4", type=int)
    min_head_coverage: float | None = arg(None, "AMIE -minhc", type=float)
    min_std_confidence: float | None = arg(None, "AMIE -minc", type=float)
    min_pca_confidence: float | None = arg(None, "AMIE -minpca", type=float)
    min_support: int | None = arg(None, "support floor on top of head coverage", type=int)
    min_initial_support: int | None = arg(None, "AMIE -minis: facts a head relation needs", type=int)

    def thresholds(self) -> dict:
        keys = ("max_atoms", "min_head_coverage", "min_std_confidence", "min_pca_confidence", "min_support")
        return {k: getattr(self, k) for k in (*keys, "min_initial_support")}


@job("mine", "Horn rules with AMIE3's semantics into <dataset>/rules", MineOptions, steps=2)
def run(ctx: JobContext, opts: MineOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    dataset = config.require_dataset(opts.dataset)
    params = MiningParams.from_settings(config, opts.thresholds())
    out = opts.rules or catalog.path("rules", dataset=dataset)
    summary = ctx.begin(dataset=dataset, rules=out, **params.__dict__)
    relation_keys = _relation_keys(ctx, dataset)
    triples_path = catalog.path("triples", dataset=dataset)
    triples = ctx.read("triples", triples_path)
    known = set(dataset_splits(triples))
    splits = sorted(opts.splits or config.mining.splits or known)
    summary.params["splits"] = ",".join(splits)
    missing = sorted(set(splits) - known)
    if missing:
        raise JobFailed(
            f"split(s) {', '.join(missing)} not in {triples_path} (has: {', '.join(sorted(known))})", summary
        )
    with ctx.step("mine"):
        try:
            work = table_path(dataset, "_work/mine")
            selected = triples.filter(F.col("split").isin(splits)).select("h", "r", "t")
            result = mining.mine(selected, relation_keys, params, work)
        except mining.MiningError as e:
            raise JobFailed(str(e), summary) from None
    summary.counts.update(result.counts)
    _count_types(summary, result.rules)
    with ctx.step("write"):
        ctx.write("rules", rules_frame(spark, result.rules), out, f"kgbrink mine on {'+'.join(splits)}", table="rules")
    if opts.tsv:
        write_amie_tsv(result.rules, opts.tsv)
        summary.artifacts.append(opts.tsv)
    return summary


@dataclass
class ImportRulesOptions:
    tsv: str = arg(None, "AMIE3 output file (plain or .gz)", required=True)
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    rules: str | None = arg(None, "output Delta table (default: <dataset>/rules)")


@job("import-rules", "an AMIE3 TSV rule file into a rules Delta table", ImportRulesOptions)
def import_rules(ctx: JobContext, opts: ImportRulesOptions) -> JobSummary:
    """An AMIE3 TSV file into a rules table; every relation must be a relation key of ``dataset``."""
    dataset, tsv = ctx.config.require_dataset(opts.dataset), opts.tsv
    out = opts.rules or catalog.path("rules", dataset=dataset)
    summary = ctx.begin(dataset=dataset, tsv=tsv, rules=out)
    relation_keys = set(_relation_keys(ctx, dataset).values())
    try:
        rules = read_amie_tsv(tsv)
    except (OSError, RuleSyntaxError) as e:
        raise JobFailed(str(e), summary) from None
    unknown = sorted({a.relation for r in rules for a in (r.head, *r.body)} - relation_keys)
    if unknown:
        raise JobFailed(
            f"{tsv}: relation(s) not in dataset {dataset}: {', '.join(unknown[:10])}"
            + (" ..." if len(unknown) > 10 else ""),
            summary,
        )
    ctx.write("rules", rules_frame(ctx.spark, rules), out, f"imported from {Path(tsv).name}", table="rules")
    _count_types(summary, rules)
    return summary


@dataclass
class ExportRulesOptions:
    tsv: str = arg(None, "output file", required=True)
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    rules: str | None = arg(None, "rules Delta table (default: <dataset>/rules)")


@job("export-rules", "a rules Delta table as AMIE3 TSV", ExportRulesOptions)
def export_rules(ctx: JobContext, opts: ExportRulesOptions) -> JobSummary:
    dataset = ctx.config.require_dataset(opts.dataset)
    rules_path = opts.rules or catalog.path("rules", dataset=dataset)
    summary = ctx.begin(dataset=dataset, tsv=opts.tsv, rules=rules_path)
    ctx.read("rules", rules_path)
    rules = read_rules(ctx.spark, rules_path, summary.inputs["rules"].version)
    write_amie_tsv(rules, opts.tsv)
    summary.artifacts.append(opts.tsv)
    _count_types(summary, rules)
    return summary
