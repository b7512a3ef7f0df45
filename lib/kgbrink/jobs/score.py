"""``kgbrink score``: PROBE and the classic rank metrics of rank files, in resumable batches.

The input files are cut into batches (whole files, up to ``scoring.batch_bytes`` each, in path order).
Each batch is one scan (:func:`kgbrink.probe.scoring.group_sums`) giving exact integer group sums of its good
rows and the count of its bad ones. When there are bad rows, they are written to ``<work>/quarantine``
(file, line, reason; this table is also the per-reason tally); then the sums go to ``<work>/partials``
and a row to ``<work>/batches`` marking the batch done, each with the batch id (Delta ``replaceWhere``,
so a re-run of a batch replaces its rows, never adds to them). ``<work>`` is
``<dataset>/scores/<fingerprint>``, the fingerprint being a hash of the input files (path, size,
modification time), the options, the metric spec and the pinned table versions: a killed run started
again with the same arguments skips the finished batches and recomputes only the rest. The final
metrics come from the sum of all batches' partials (exact, so the result is the same whatever the
batching) and are written to ``<work>/results`` and ``<work>/groups``.

Parquet batches first read their files' footers (:func:`kgbrink.probe.rankfiles.parquet_facts`): checks the
column statistics prove can never fail are not run row by row, and a one-valued ``model``/``run`` becomes
a constant (``scoring.parquet_statistics``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.console import headline
from kgbrink.core.delta import (
    latest_version,
    read_table,
    table_exists,
    table_path,
    table_rows,
)
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.settings import Settings
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.probe import rankfiles, runs, scoring

# The score job's data failures (too many bad rows, no rows); ``summary`` holds the counts so far.
ScoreError = JobFailed


def _numbers(kind: type):
    """A comma-separated list of numbers (argparse type)."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got '{text}'") from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def _eps(text: str) -> float | str:
    if text == "release":
        return "release"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--eps is 'release' or a positive number, got '{text}'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--eps must be > 0, got {value}")
    return value


@dataclass
class ScoreOptions:
    ranks: str = arg(None, "a rank file, directory or glob", required=True)
    dataset: str | None = arg(None, "dataset whose ids/keys the rank files use (default: setting 'dataset')")
    # What to compute; None: the --alpha/--beta/--hits/--p/--eps/--groups options over the scoring.* settings.
    spec: scoring.MetricSpec | None = None
    fmt: str | None = arg(
        None, "default: from the file names", flag="--format", choices=["parquet", "csv", "tsv", "jsonl", "probe"]
    )
    id_kind: str | None = arg(
        None,
        "h, r, t are integer ids or keys (default: id for probe dumps, key otherwise)",
        flag="--ids",
        choices=["id", "key"],
    )
    model: str | None = arg(None, "model name for files without a model column (default: the file name)")
    run: str | None = arg(None, "run name for files without a run column (default: 1)", flag="--run")
    splits: list[str] | None = arg(
        None, "splits the popularity statistics are computed on (default: setting stats.splits)", convert=names
    )
    plots_dir: str | None = arg(None, "write heat maps (Fig. 12) and comparison.md into this directory", flag="--plots")
    alpha: list[float] | None = arg(
        None, "PROBE alphas, e.g. 1,0.5,0,-0.5,-1 (default: setting scoring.alphas)", type=_numbers(float)
    )
    beta: list[float] | None = arg(
        None, "PROBE betas, e.g. 0,0.2,0.4,0.6,0.8 (default: setting scoring.betas)", type=_numbers(float)
    )
    hits: list[int] | None = arg(None, "Hits@K list (default: setting scoring.hits)", type=_numbers(int))
    p: list[float] | None = arg(None, "p-MRR exponents (default: setting scoring.p_values)", type=_numbers(float))
    eps: float | str = arg(
        "release",
        "'release' (smallest non-zero delta over the scored queries; default) or a constant",
        type=_eps,
    )
    groups: int | None = arg(
        None, "equal-count popularity groups of Fig. 11 (default: setting scoring.popularity_groups)", type=int
    )
    top_percent: list[float] | None = arg(
        None,
        "Fig. 11 groups: the top x percent most popular queries, e.g. 1,10,50 (default: setting scoring.popularity_top_percent)",
        type=_numbers(float),
    )
    strat_beta: list[float] | None = arg(
        None, "strat-MRR betas, e.g. 0.5,1 (default: setting scoring.strat_betas)", type=_numbers(float)
    )

    def metric_spec(self, config: Settings) -> scoring.MetricSpec:
        if self.spec is not None:
            return self.spec
        return scoring.MetricSpec(
            alphas=tuple(self.alpha or config.scoring.alphas),
            betas=tuple(self.beta or config.scoring.betas),
            hits=tuple(self.hits or config.scoring.hits),
            p_values=tuple(self.p or config.scoring.p_values),
            eps=None if self.eps == "release" else float(self.eps),
            popularity_groups=config.scoring.popularity_groups if self.groups is None else self.groups,
            popularity_top_percent=tuple(
                config.scoring.popularity_top_percent if self.top_percent is None else self.top_percent
            ),
            strat_betas=tuple(config.scoring.strat_betas if self.strat_beta is None else self.strat_beta),
        )


REPEATS_BROADCAST = 1_000_000  # repeated queries up to this many are joined to each batch by broadcast


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _replace_batch(ctx: JobContext, name: str, frame: DataFrame, path: str, batch_id: str) -> None:
    """Write ``frame`` (all rows of ``batch_id``) replacing that batch's rows of the table ``name``:
    idempotent per batch. Not an output of its own: the run's quarantine is recorded whole by ``_tally``,
    the partials and batches are the run's bookkeeping."""
    ctx.replace_where(name, frame, path, f"batch_id = '{batch_id}'", output=False)


def _done_batches(spark: SparkSession, path: str) -> set[str]:
    if not table_exists(spark, path):
        return set()
    return {r["batch_id"] for r in read_table(spark, path).select("batch_id").collect()}


def _repeated_queries(ctx: JobContext, work: _Work) -> tuple[DataFrame, int]:
    """The queries two or more rows of all rank files give, and how many: found once per work folder
    (a resumed run reads them back), so every batch marks the same rows whatever the batching."""
    spark, path = ctx.spark, work.paths["repeated_queries"]
    if not table_exists(spark, path):
        raw = rankfiles.read_ranks(spark, [f for f, _, _ in work.files], work.read_opts)
        checked = work.validate(raw, None, bool(ctx.config.scoring.broadcast_tables))
        repeats = rankfiles.repeated_queries(checked, work.n_entities, work.n_relations)
        ctx.write("repeated_queries", repeats, path, "queries given by more than one rank row")
    version = latest_version(spark, path)
    return read_table(spark, path, version), table_rows(spark, path, version)


@dataclass
class _Work:
    """One score run: its rank files and batches, tables, metric spec and work folder."""

    opts: ScoreOptions
    spec: scoring.MetricSpec
    dataset: str
    files: list
    fmt: str
    id_kind: str
    splits: list[str]
    entities: DataFrame
    relations: DataFrame
    n_entities: int
    n_relations: int
    popularity: tuple[DataFrame, DataFrame] | None
    total: int | None
    paths: dict[str, str]
    batches: list

    @property
    def read_opts(self) -> rankfiles.ReadOptions:
        return rankfiles.ReadOptions(fmt=self.fmt, model=self.opts.model, run=self.opts.run, n_entities=self.n_entities)

    @property
    def batch_ids(self) -> list[str]:
        return [f"{i:06d}-{_digest(b)}" for i, b in enumerate(self.batches)]

    def validate(self, raw: DataFrame, facts: rankfiles.ParquetFacts | None, broadcast: bool) -> DataFrame:
        return rankfiles.validate_ranks(
            raw, self.entities, self.relations, self.id_kind, self.n_entities, self.n_relations, broadcast, facts
        )


def _open(ctx: JobContext, opts: ScoreOptions) -> _Work:
    """The rank files (one format), the pinned dictionaries and popularity statistics (computed first when
    missing), and the work folder named by the fingerprint of all of them."""
    spark, config = ctx.spark, ctx.config
    spec = opts.metric_spec(config)
    ds = config.require_dataset(opts.dataset)
    files = rankfiles.list_rank_files(spark, opts.ranks, opts.fmt)
    fmt = opts.fmt or rankfiles.format_of(files[0][0])
    other = sorted({rankfiles.format_of(f) for f, _, _ in files} - {fmt}) if not opts.fmt else []
    if other:
        raise rankfiles.RankFileError(
            f"{opts.ranks}: mixed rank file formats ({fmt}, {', '.join(other)}); pass one format with --format"
        )
    id_kind = opts.id_kind or ("id" if fmt == "probe" else "key")
    splits = sorted(opts.splits or config.stats.splits)
    summary = ctx.begin(
        ranks=opts.ranks, dataset=ds, format=fmt, ids=id_kind, splits=",".join(splits), **spec.as_params()
    )
    entities = ctx.read("entities", catalog.path("entities", dataset=ds)).select("id", "key")
    relations = ctx.read("relations", catalog.path("relations", dataset=ds)).select("id", "key")
    popularity, total = None, None
    if spec.needs_popularity:
        stats_dir = catalog.stats_dir(ds, splits)
        if not table_exists(spark, f"{stats_dir}/entity_relation_popularity"):
            with ctx.step("stats"):
                ctx.run("stats", dataset=ds, splits=splits)
        popularity = tuple(ctx.read(n, f"{stats_dir}/{n}") for n in ("entity_popularity", "entity_relation_popularity"))
        total = scoring.total_degree(popularity[0])
    fingerprint = _digest(
        {
            "sums": scoring.SUMS_FORMAT,
            "files": files,
            "format": fmt,
            "ids": id_kind,
            "model": opts.model,
            "run": opts.run,
            "spec": spec.as_params(),
            "duplicates": bool(config.scoring.check_duplicate_queries),
            "inputs": {k: v.as_dict() for k, v in summary.inputs.items()},
        }
    )
    work = table_path(ds, f"scores/{fingerprint}")
    tables = ("partials", "quarantine", "batches", "results", "groups", "repeated_queries")
    summary.params["work_dir"] = work
    return _Work(
        opts, spec, ds, files, fmt, id_kind, splits, entities, relations, entities.count(), relations.count(),
        popularity, total, {name: f"{work}/{name}" for name in tables},
        rankfiles.batches_of(files, int(config.scoring.batch_bytes)),
    )  # fmt: skip


def _score_batch(ctx: JobContext, work: _Work, batch: list, batch_id: str, repeated, repeats: int) -> None:
    """One batch's group sums to ``partials``, its bad rows to ``quarantine``, then its row in ``batches``
    (each write replaces the batch's rows: a batch run again is idempotent)."""
    spark, config = ctx.spark, ctx.config
    broadcast = bool(config.scoring.broadcast_tables)
    use_facts = work.fmt == "parquet" and config.scoring.parquet_statistics
    facts = rankfiles.parquet_facts(spark, batch) if use_facts else None
    checked = work.validate(rankfiles.read_ranks(spark, [f for f, _, _ in batch], work.read_opts), facts, broadcast)
    if repeated is not None:
        checked = rankfiles.mark_duplicate_queries(checked, repeated, repeats <= REPEATS_BROADCAST)
    rows = checked.filter(~F.col("_skip")) if "_skip" in checked.columns else checked
    if work.popularity is not None:
        rows = scoring.with_target_degrees(rows, *work.popularity, broadcast=broadcast)
    sums = ctx.persist(scoring.group_sums(rows, work.spec, facts.constants(rankfiles.OPTIONAL) if facts else None))
    totals = sums.agg(F.sum("n").alias("n"), F.sum("quarantined").alias("quarantined")).first()
    scored_rows, bad = int(totals["n"] or 0), int(totals["quarantined"] or 0)
    if bad:
        _replace_batch(
            ctx, "quarantine", rankfiles.quarantine_of(checked, batch_id), work.paths["quarantine"], batch_id
        )
    partial = sums.filter(F.col("n") > 0).drop("quarantined").select(F.lit(batch_id).alias("batch_id"), "*")
    _replace_batch(ctx, "partials", partial, work.paths["partials"], batch_id)
    ctx.unpersist(sums)
    record = {"batch_id": batch_id, "files": json.dumps([f for f, _, _ in batch]), "rows": scored_rows + bad}
    record["quarantined"] = bad
    schema = "batch_id string, files string, rows long, quarantined long"
    _replace_batch(ctx, "batches", spark.createDataFrame([record], schema), work.paths["batches"], batch_id)


def _tally(ctx: JobContext, work: _Work, summary: JobSummary) -> DataFrame:
    """The partials of this run's batches; the rows scored and quarantined (by reason) counted, and the job
    failed past ``scoring.max_bad_fraction`` or without rows."""
    spark, paths = ctx.spark, work.paths
    partials = read_table(spark, paths["partials"]).filter(F.col("batch_id").isin(work.batch_ids))
    scored = int(partials.agg(F.sum("n")).first()[0] or 0)
    by_reason: dict[str, int] = {}
    if table_exists(spark, paths["quarantine"]):
        bad_rows = read_table(spark, paths["quarantine"]).filter(F.col("batch_id").isin(work.batch_ids))
        by_reason = {r["reason"]: int(r["count"]) for r in bad_rows.groupBy("reason").count().collect()}
    quarantined = sum(by_reason.values())
    summary.counts.update(rows=scored + quarantined, scored=scored, quarantined=quarantined)
    summary.counts["quarantined_by_reason"] = by_reason
    if quarantined:
        ctx.keep("quarantine", paths["quarantine"], quarantined)
    if scored + quarantined == 0:
        raise ScoreError(f"{work.opts.ranks}: no rank rows", summary)
    limit = float(ctx.config.scoring.max_bad_fraction)
    where = f"see {paths['quarantine']}"
    fail_past_bad_fraction(
        summary, by_reason, scored + quarantined, limit, "scoring.max_bad_fraction", "rank rows", where
    )
    return partials


def _write_results(ctx: JobContext, work: _Work, scores, summary: JobSummary) -> pd.DataFrame:
    """``results`` (described by the run's record, which ``refresh`` reads back) and ``groups``."""
    spark, opts = ctx.spark, work.opts
    results = scores.frame()
    inputs = {k: v.as_dict() for k, v in summary.inputs.items()}
    record = runs.run_record(opts.ranks, work.fmt, work.id_kind, opts.model, opts.run, work.splits, work.spec, inputs)
    frame = spark.createDataFrame(
        results.astype(object).where(results.notna(), None), catalog.table("score.results").schema
    )
    ctx.write("results", frame, work.paths["results"], description=runs.describe(record))
    if scores.groups:
        groups = spark.createDataFrame(pd.DataFrame(scores.groups))
        ctx.write("groups", groups, work.paths["groups"], description="popularity groups (Fig. 11)")
    return results


def _headline(work) -> dict:
    """The numbers the summary prints per model (the mean over its runs): MRR, the largest Hits@K and PROBE
    at the first alpha and beta of the spec (paper 001 Eq. 2-3; settings scoring.alphas, scoring.betas)."""
    spec = work.spec
    metrics = {"mrr": "MRR"}
    if spec.hits:
        metrics[f"hits@{max(spec.hits)}"] = f"Hits@{max(spec.hits)}"
    if spec.alphas and spec.betas:
        alpha, beta = float(spec.alphas[0]), float(spec.betas[0])
        metrics[("probe", alpha, beta)] = f"PROBE(alpha {alpha:g}, beta {beta:g})"
    return metrics


@job("score", "PROBE and the classic rank metrics of rank files", ScoreOptions, steps=4)
def run(ctx: JobContext, opts: ScoreOptions) -> JobSummary:
    work = _open(ctx, opts)
    summary = ctx.summary
    done = _done_batches(ctx.spark, work.paths["batches"])
    repeated, repeats = None, 0
    if ctx.config.scoring.check_duplicate_queries:
        with ctx.step("duplicates"):
            repeated, repeats = _repeated_queries(ctx, work)
    with ctx.step("batches"):
        todo = [(b, i) for b, i in zip(work.batches, work.batch_ids) if i not in done]
        for batch, batch_id in todo:
            _score_batch(ctx, work, batch, batch_id, repeated, repeats)
    summary.counts.update(
        rank_files=len(work.files), batches=len(work.batches), batches_skipped=len(work.batches) - len(todo)
    )
    partials = _tally(ctx, work, summary)
    with ctx.step("finish"):
        merged = scoring.with_deltas(scoring.merge_group_sums(partials, work.spec), work.total).toPandas()
        scores = scoring.finish(merged, work.spec)
    summary.results = scores.results
    summary.highlights.update(headline([r for r in scores.results if r["run"] == scoring.MEAN_RUN], _headline(work)))
    summary.extra["groups"] = scores.groups
    summary.extra["eps"] = [
        {"model": m, "run": r, "eps_entity": e, "eps_relation": er} for (m, r), (e, er) in sorted(scores.eps.items())
    ]
    results = _write_results(ctx, work, scores, summary)
    summary.counts["models"] = len({r["model"] for r in scores.results})
    if opts.plots_dir:
        from kgbrink.probe import plots

        summary.artifacts.extend(plots.write_all(results, Path(opts.plots_dir)))
    return summary
