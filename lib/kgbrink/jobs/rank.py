"""``kgbrink rank``: filtered ranks from candidate-score files (PROBE protocol), as a rank file for ``score``.

Input: Parquet files with ``h, r, t, side, candidate, score`` (integer ids of the dataset; ``side`` head or
tail) and optional ``model``, ``run`` (else ``--model`` / the file name, and ``--run`` / ``1``). The known
triples of ``--filter-splits`` (default: every split of the dataset, as the PROBE protocol filters with
train + valid + test) are removed from each query's candidates (:mod:`kgbrink.probe.ranking`).

Ids outside the dataset's dense ranges are treated as missing: a query with such an ``h``, ``r`` or ``t``
is quarantined as ``null_key``, one with such a candidate as ``null_candidate``. Output under ``--out``:
``ranks`` (Parquet: ``model, run, h, r, t, side, rank, num_candidates``) and ``quarantine`` (Delta).
"""

from __future__ import annotations

from dataclasses import dataclass

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
from kgbrink.core.tracking import JobSummary, fail_past_bad_fraction
from kgbrink.probe import ranking
from kgbrink.probe.rankfiles import list_rank_files, with_model_and_run


@dataclass
class RankOptions:
    scores: str
    dataset: str
    out: str
    filter_splits: list[str] | None = None
    model: str | None = None
    run: str | None = None
    check_duplicates: bool = True


def run(spark: SparkSession, config: Config, opts: RankOptions) -> JobSummary:
    files = [f for f, _, _ in list_rank_files(spark, opts.scores, "parquet")]
    summary = JobSummary(
        "rank",
        params={
            "scores": opts.scores,
            "dataset": opts.dataset,
            "out": opts.out,
            "check_duplicates": opts.check_duplicates,
        },
    )
    for name in ("entities", "relations", "triples"):
        path = table_path(opts.dataset, name)
        summary.inputs[name] = TableVersion(path, latest_version(spark, path))
    n_entities = read_table(spark, summary.inputs["entities"].path, summary.inputs["entities"].version).count()
    n_relations = read_table(spark, summary.inputs["relations"].path, summary.inputs["relations"].version).count()
    triples = read_table(spark, summary.inputs["triples"].path, summary.inputs["triples"].version)
    if opts.filter_splits:
        triples = triples.filter(F.col("split").isin(opts.filter_splits))
    summary.params["filter_splits"] = ",".join(opts.filter_splits or ["all"])

    raw = spark.read.parquet(*files)
    missing = [c for c in ("h", "r", "t", "side", "candidate", "score") if c not in raw.columns]
    if missing:
        raise ValueError(f"{files[0]}: missing column(s) {', '.join(missing)} (has {', '.join(raw.columns)})")
    named = with_model_and_run(raw, F.col("_metadata.file_path"), opts.model, opts.run)

    def in_range(c: str, n: int):
        return F.when(F.col(c).between(0, n - 1), F.col(c).cast("int"))

    scores = named.select(
        "model",
        "run",
        in_range("h", n_entities).alias("h"),
        in_range("r", n_relations).alias("r"),
        in_range("t", n_entities).alias("t"),
        F.lower(F.trim(F.col("side").cast("string"))).alias("side"),
        in_range("candidate", n_entities).alias("candidate"),
        F.col("score").cast("double").alias("score"),
    )
    with summary.timed("rank"):
        outcomes = ranking.query_outcomes(
            scores, triples.select("h", "r", "t"), bool(config.get("scoring.broadcast_tables")), opts.check_duplicates
        )
        outcomes = outcomes.localCheckpoint(eager=True)
        ranks, quarantine = ranking.split_outcomes(outcomes)
        ranks.write.mode("overwrite").parquet(f"{opts.out}/ranks")
        summary.outputs["quarantine"] = write_table(
            quarantine, f"{opts.out}/quarantine", description=f"rank {opts.scores}"
        )
    tally = {r["reason"]: int(r["n"]) for r in outcomes.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    ranked = tally.pop(None, 0)
    bad = sum(tally.values())
    summary.counts.update(
        score_files=len(files), queries=ranked + bad, ranked=ranked, quarantined=bad, quarantined_by_reason=tally
    )
    summary.extra["ranks_path"] = f"{opts.out}/ranks"
    limit = float(config.get("scoring.max_bad_fraction"))
    fail_past_bad_fraction(
        summary, tally, ranked + bad, limit, "scoring.max_bad_fraction", "queries", f"{opts.out}/quarantine"
    )
    return summary
