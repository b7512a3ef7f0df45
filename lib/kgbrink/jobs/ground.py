"""``kgbrink ground``: groundings of a rules table in a dataset's KG into ``<dataset>/groundings``.

Columns ``rule_id, head struct<h, r, t>, body array<struct<h, r, t>>, bindings map<variable, entity>,
sample_hash`` (entity and relation ids of the dataset); all groundings, or ``--per-rule N`` drawn by the
seeded hash of each grounding (:mod:`kgbrink.rules.grounding`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.kg.dataset import dataset_splits
from kgbrink.rules import grounding
from kgbrink.rules.table import read_rules


@dataclass
class GroundOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    rules: str | None = arg(None, "rules Delta table (default: <dataset>/rules)")
    out: str | None = arg(None, "output Delta table (default: <dataset>/groundings)")
    per_rule: int | None = arg(None, "at most this many groundings per rule, by seeded hash (default: all)", type=int)
    seed: int | None = arg(None, "sampling seed (default: setting grounding.seed)", type=int)
    splits: list[str] | None = arg(
        None, "comma-separated splits of the KG (default: setting mining.splits, else all)", convert=names
    )


@job("ground", "groundings of a rules table (all, or a seeded sample per rule)", GroundOptions, steps=1)
def run(ctx: JobContext, opts: GroundOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    dataset = config.require_dataset(opts.dataset)
    rules_path = opts.rules or catalog.path("rules", dataset=dataset)
    out = opts.out or catalog.path("groundings", dataset=dataset)
    per_rule = opts.per_rule
    seed = int(config.grounding.seed if opts.seed is None else opts.seed)
    summary = ctx.begin(dataset=dataset, rules=rules_path, out=out, per_rule=per_rule, seed=seed)
    ctx.read("rules", rules_path)
    relations = ctx.read("relations", catalog.path("relations", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    splits = sorted(opts.splits or config.mining.splits or dataset_splits(triples))
    summary.params["splits"] = ",".join(splits)
    rules = read_rules(spark, rules_path, summary.inputs["rules"].version)
    relation_ids = {r["key"]: r["id"] for r in relations.select("id", "key").collect()}
    triples = triples.filter(F.col("split").isin(splits)).select("h", "r", "t")
    with ctx.step("ground"):
        try:
            found = grounding.groundings(rules, triples, relation_ids, per_rule, seed, ctx.persist)
        except grounding.GroundingError as e:
            raise JobFailed(f"{rules_path}: {e}", summary) from None
        ctx.write("groundings", found, out, f"groundings of {len(rules)} rules", table="groundings")
    written = ctx.written("groundings")
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
