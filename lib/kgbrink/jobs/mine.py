"""``kgbrink mine``: Horn rules of a dataset with AMIE3's semantics into the Delta table ``<dataset>/rules``.

Also ``import-rules`` (an AMIE3 TSV file into a rules table, relations checked against the dataset) and
``export-rules`` (a rules table as AMIE3 TSV). Row schema: :data:`kgbrink.rules.model.RULE_TABLE_COLUMNS`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kgbrink.core.delta import (
    TableVersion,
    latest_version,
    read_table,
    table_path,
    write_table,
)
from kgbrink.core.settings import Config
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.rules import mining
from kgbrink.rules.model import (
    RULE_TYPES,
    Rule,
    RuleSyntaxError,
    read_amie_tsv,
    rule_from_row,
    rule_row,
    write_amie_tsv,
)

RULES_SCHEMA = (
    "id string, rule string, head_relation string, "
    "body array<struct<relation: string, subject: string, object: string>>, length int, rule_type string, "
    "support long, head_coverage double, std_confidence double, pca_confidence double, body_size long, "
    "pca_body_size long, functional_variable string"
)


def mining_params(config: Config, overrides: dict | None = None) -> mining.MiningParams:
    """``mining.*`` settings of the config, with non-None ``overrides`` (CLI flags) on top."""
    values = {f.name: config.get(f"mining.{f.name}") for f in fields(mining.MiningParams)}
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return mining.MiningParams(**values).validate()


def rules_frame(spark: SparkSession, rules: list[Rule]) -> DataFrame:
    rows = [rule_row(r) for r in rules]
    return spark.createDataFrame(rows, RULES_SCHEMA).orderBy("head_relation", "id")


def read_rules(spark: SparkSession, path: str, version: int | None = None) -> list[Rule]:
    return [rule_from_row(row) for row in read_table(spark, path, version).orderBy("id").collect()]


def _count_types(summary: JobSummary, rules: list[Rule]) -> None:
    types = {t: 0 for t in RULE_TYPES}
    for r in rules:
        types[r.rule_type()] += 1
    summary.counts["rules"] = len(rules)
    summary.counts["rules_by_type"] = types


def _relation_keys(spark: SparkSession, dataset: str, summary: JobSummary) -> dict[int, str]:
    path = table_path(dataset, "relations")
    summary.inputs["relations"] = TableVersion(path, latest_version(spark, path))
    rows = read_table(spark, path, summary.inputs["relations"].version).select("id", "key").collect()
    return {row["id"]: row["key"] for row in rows}


def run(
    spark: SparkSession,
    config: Config,
    dataset: str,
    splits: list[str] | None = None,
    out: str | None = None,
    tsv: str | None = None,
    overrides: dict | None = None,
) -> JobSummary:
    params = mining_params(config, overrides)
    splits = sorted(splits or config.get("mining.splits"))
    out = out or table_path(dataset, "rules")
    summary = JobSummary(
        "mine", params={"dataset": dataset, "splits": ",".join(splits), "rules": out, **params.__dict__}
    )
    names = _relation_keys(spark, dataset, summary)
    triples_path = table_path(dataset, "triples")
    summary.inputs["triples"] = TableVersion(triples_path, latest_version(spark, triples_path))
    triples = read_table(spark, triples_path, summary.inputs["triples"].version)
    known = {r["split"] for r in triples.select("split").distinct().collect()}
    missing = sorted(set(splits) - known)
    if missing:
        raise JobFailed(
            f"split(s) {', '.join(missing)} not in {triples_path} (has: {', '.join(sorted(known))})", summary
        )
    with summary.timed("mine"):
        try:
            work = table_path(dataset, "_work/mine")
            result = mining.mine(triples.filter(F.col("split").isin(splits)).select("h", "r", "t"), names, params, work)
        except mining.MiningError as e:
            raise JobFailed(str(e), summary) from None
    summary.counts.update(result.counts)
    _count_types(summary, result.rules)
    with summary.timed("write"):
        summary.outputs["rules"] = write_table(
            rules_frame(spark, result.rules), out, description=f"kgbrink mine on {'+'.join(splits)}"
        )
    if tsv:
        write_amie_tsv(result.rules, tsv)
        summary.artifacts.append(tsv)
    return summary


def import_rules(spark: SparkSession, config: Config, dataset: str, tsv: str, out: str | None = None) -> JobSummary:
    """An AMIE3 TSV file into a rules table; every relation must be a relation key of ``dataset``."""
    out = out or table_path(dataset, "rules")
    summary = JobSummary("import-rules", params={"dataset": dataset, "tsv": tsv, "rules": out})
    names = set(_relation_keys(spark, dataset, summary).values())
    try:
        rules = read_amie_tsv(tsv)
    except (OSError, RuleSyntaxError) as e:
        raise JobFailed(str(e), summary) from None
    unknown = sorted({a.relation for r in rules for a in (r.head, *r.body)} - names)
    if unknown:
        raise JobFailed(
            f"{tsv}: relation(s) not in dataset {dataset}: {', '.join(unknown[:10])}"
            + (" ..." if len(unknown) > 10 else ""),
            summary,
        )
    summary.outputs["rules"] = write_table(
        rules_frame(spark, rules), out, description=f"imported from {Path(tsv).name}"
    )
    _count_types(summary, rules)
    return summary


def export_rules(
    spark: SparkSession, config: Config, dataset: str, tsv: str, rules_path: str | None = None
) -> JobSummary:
    rules_path = rules_path or table_path(dataset, "rules")
    summary = JobSummary("export-rules", params={"dataset": dataset, "tsv": tsv, "rules": rules_path})
    summary.inputs["rules"] = TableVersion(rules_path, latest_version(spark, rules_path))
    rules = read_rules(spark, rules_path, summary.inputs["rules"].version)
    write_amie_tsv(rules, tsv)
    summary.artifacts.append(tsv)
    _count_types(summary, rules)
    return summary
