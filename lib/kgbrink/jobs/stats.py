"""``kgbrink stats``: popularity statistics of a dataset's triples on chosen splits, as Delta tables.

Tables under ``<dataset>/stats/<split>+<split>.../``: ``entity_popularity``,
``entity_relation_popularity``, ``relation_statistics``, ``degree_histogram`` (schemas in the catalog,
:mod:`kgbrink.core.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Observation
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import require_local_table
from kgbrink.core.frames import tasks_for
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.session import session_setting
from kgbrink.core.tracking import JobSummary
from kgbrink.kg import stats


@dataclass
class StatsOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    splits: list[str] | None = arg(None, "comma-separated splits (default: setting stats.splits)", convert=names)


def _check(config, opts: StatsOptions) -> None:
    """The dataset holds triples (a local one is looked at before Spark starts)."""
    dataset = config.require_dataset(opts.dataset)
    require_local_table(
        catalog.path("triples", dataset=dataset),
        f"{dataset} holds no dataset (no triples table): make one with `kgbrink ingest --format wikidata5m --input "
        f"DUMP --dataset {dataset}`, or `kgbrink run` for the sample",
    )


@job("stats", "entity/relation popularity statistics of a dataset", StatsOptions, steps=3, check=_check)
def run(ctx: JobContext, opts: StatsOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    dataset = config.require_dataset(opts.dataset)
    splits = sorted(opts.splits or config.stats.splits)
    summary = ctx.begin(dataset=dataset, splits=",".join(splits))
    triples_path = catalog.path("triples", dataset=dataset)
    triples_all = ctx.read("triples", triples_path)
    rows = {r["split"]: r["count"] for r in triples_all.groupBy("split").count().collect()}
    known = set(rows)
    missing = sorted(set(splits) - known)
    if missing:
        raise ValueError(f"split(s) {', '.join(missing)} not in {triples_path} (has: {', '.join(sorted(known))})")
    triples = triples_all.filter(F.col("split").isin(splits)).select("h", "r", "t")
    if len(splits) > 1:
        triples = triples.distinct()  # T is a set: a triple in two splits counts once
    out = catalog.stats_dir(dataset, splits)
    note = catalog.stats_note(splits, summary.inputs["triples"].version)
    # The (entity, relation) counts feed every table: aggregated once and kept (same speed on disk as in
    # memory at 20M triples; 20% faster than aggregating the occurrences twice). Cached without adaptive
    # re-planning, the cache keeps the counts' partitioning by entity, so entity popularity needs no shuffle.
    with session_setting(spark, "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "false"):
        partitions = tasks_for(
            sum(rows[s] for s in splits),
            stats.TRIPLES_PER_COUNT_TASK,
            int(spark.conf.get("spark.sql.shuffle.partitions")),
        )
        counts = ctx.persist(stats.entity_relation_counts(triples, partitions), StorageLevel.MEMORY_AND_DISK)
    with ctx.step("entity_relation_counts_and_entity_popularity"):
        ctx.write("entity_popularity", stats.entity_popularity(counts), f"{out}/entity_popularity", description=note)
        entities = ctx.written("entity_popularity")
    with ctx.step("entity_relation_popularity"):
        pairs = stats.entity_relation_popularity(counts, entities, bool(config.stats.broadcast_entity_degrees))
        ctx.write("entity_relation_popularity", pairs, f"{out}/entity_relation_popularity", description=note)
    with ctx.step("relation_statistics_and_histogram"):
        facts = Observation("facts")
        relations = stats.relation_statistics(counts).observe(facts, F.sum("facts").alias("triples"))
        ctx.write("relation_statistics", relations, f"{out}/relation_statistics", description=note)
        ctx.write("degree_histogram", stats.degree_histogram(entities), f"{out}/degree_histogram", description=note)
    ctx.unpersist(counts)
    summary.counts.update(
        triples=int(facts.get["triples"] or 0),
        entities_with_triples=summary.outputs["entity_popularity"].rows,
        entity_relation_pairs=summary.outputs["entity_relation_popularity"].rows,
        relations=summary.outputs["relation_statistics"].rows,
    )
    return summary
