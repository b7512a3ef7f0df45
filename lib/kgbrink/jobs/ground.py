"""``kgbrink ground``: groundings of a rules table in a dataset's KG into ``<dataset>/groundings``.

Columns ``rule_id, head struct<h, r, t>, body array<struct<h, r, t>>, bindings map<variable, entity>,
sample_hash`` (entity and relation ids of the dataset); all groundings, or ``--per-rule N`` drawn by the
seeded hash of each grounding (:mod:`kgbrink.rules.grounding`).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
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
from kgbrink.jobs.mine import read_rules
from kgbrink.rules import grounding


def run(
    spark: SparkSession,
    config: Config,
    dataset: str,
    rules_path: str | None = None,
    out: str | None = None,
    per_rule: int | None = None,
    seed: int | None = None,
    splits: list[str] | None = None,
) -> JobSummary:
    rules_path = rules_path or table_path(dataset, "rules")
    out = out or table_path(dataset, "groundings")
    splits = sorted(splits or config.get("mining.splits"))
    seed = int(config.get("grounding.seed") if seed is None else seed)
    summary = JobSummary(
        "ground",
        params={
            "dataset": dataset,
            "rules": rules_path,
            "out": out,
            "per_rule": per_rule,
            "seed": seed,
            "splits": ",".join(splits),
        },
    )
    for name, path in (
        ("rules", rules_path),
        ("relations", table_path(dataset, "relations")),
        ("triples", table_path(dataset, "triples")),
    ):
        summary.inputs[name] = TableVersion(path, latest_version(spark, path))
    rules = read_rules(spark, rules_path, summary.inputs["rules"].version)
    relation_ids = {
        r["key"]: r["id"]
        for r in read_table(spark, summary.inputs["relations"].path, summary.inputs["relations"].version)
        .select("id", "key")
        .collect()
    }
    triples = read_table(spark, summary.inputs["triples"].path, summary.inputs["triples"].version)
    triples = triples.filter(F.col("split").isin(splits)).select("h", "r", "t")
    with summary.timed("ground"):
        try:
            found = grounding.groundings(rules, triples, relation_ids, per_rule, seed)
        except grounding.GroundingError as e:
            raise JobFailed(f"{rules_path}: {e}", summary) from None
        summary.outputs["groundings"] = write_table(found, out, description=f"groundings of {len(rules)} rules")
    written = read_table(spark, out, summary.outputs["groundings"].version)
    per = written.groupBy("rule_id").count()
    stats = per.agg(
        F.count(F.lit(1)).alias("rules"), F.min("count").alias("min"), F.max("count").alias("max")
    ).collect()[0]
    summary.counts.update(
        rules=len(rules),
        grounded_rules=stats["rules"],
        groundings=summary.outputs["groundings"].rows,
        min_per_rule=stats["min"],
        max_per_rule=stats["max"],
    )
    return summary
