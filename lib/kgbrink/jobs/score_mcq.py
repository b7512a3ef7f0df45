"""``kgbrink score-mcq``: accuracy and NKD of model predictions on ProbeKGC multiple-choice questions
(paper 003, spec 3.C; formulas in :mod:`kgbrink.mcq.scoring`).

Inputs: the questions table written by ``kgbrink mcq`` (``--questions PATH``, or ``<dataset>/mcq/<name>/
questions``) and predictions (JSON Lines files, a Parquet or a Delta table; docs/formats.md). Bad
predictions are quarantined with their reason (file and line for files) and counted; past
``mcq_scoring.max_bad_fraction`` of the predictions the job fails. Output under ``--out`` (default
``<questions' folder>/scores/<fingerprint>``, the fingerprint hashing the inputs and options):
``mcq_scores``, ``mcq_overlap``, ``mcq_quarantine`` (when there are bad rows) and a report (Markdown and
plots).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.console import headline
from kgbrink.core.delta import table_exists
from kgbrink.core.files import local_dir
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.core.typed import ConfigError
from kgbrink.mcq import report, scoring

# the numbers the summary prints (paper 003): accuracy, then NKD, by difficulty
HEADLINE = {
    **{f"accuracy.{d}": f"accuracy {d}" for d in scoring.DIFFICULTIES},
    **{f"nkd.{d}": f"NKD {d}" for d in scoring.DIFFICULTIES},
}


@dataclass
class ScoreMcqOptions:
    predictions: str = arg(
        None, "predictions: a JSON Lines file, directory or glob, or a Parquet or Delta table", required=True
    )
    questions: str | None = arg(None, "questions table (default: <dataset>/mcq/<name>/questions)")
    dataset: str | None = arg(None, "dataset of the question set --name (default: setting 'dataset')")
    name: str = arg("probekgc", "question set name (kgbrink mcq --name)")
    fmt: str | None = arg(
        None,
        "predictions format (default: delta for a Delta table, parquet for .parquet files, else jsonl)",
        flag="--format",
        choices=list(scoring.FORMATS),
    )
    model: str | None = arg(None, "model name for predictions without a model field (default: the file name)")
    run: str | None = arg(None, "run name for predictions without a run field (default: 1)", flag="--run")
    api_raw: bool | None = arg(
        None,
        "log-probabilities as given, not renormalised (the authors' API mode; default: mcq_scoring.api_raw)",
        action="store_true",
    )
    degree_bins: str | None = arg(
        None, "topic-degree groups (default: setting mcq_scoring.degree_bins)", choices=["log2", "quantiles"]
    )
    degree_groups: int | None = arg(None, "quantile groups (default: setting mcq_scoring.degree_groups)", type=int)
    out: str | None = arg(None, "output folder of the tables (default: <questions' folder>/scores/<fingerprint>)")
    report_dir: str | None = arg(None, "local folder of the report (default: <out>/report)", flag="--report")


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


@dataclass
class _Work:
    """One scoring: its settings, the pinned questions and predictions, and the output tables."""

    api_raw: bool
    bins: str
    n_groups: int
    questions: DataFrame
    n_questions: int
    fmt: str
    files: list
    table: DataFrame | None  # the predictions' Delta table, pinned
    out: str

    def path(self, table: str) -> str:
        return f"{self.out}/{table}"


def _open(ctx: JobContext, opts: ScoreMcqOptions) -> _Work:
    """The settings checked, the questions (unique ids) and predictions pinned, the output folder named
    by the fingerprint of all of them."""
    spark, cfg = ctx.spark, ctx.config.mcq_scoring
    api_raw = cfg.api_raw if opts.api_raw is None else bool(opts.api_raw)
    bins = opts.degree_bins or cfg.degree_bins
    n_groups = cfg.degree_groups if opts.degree_groups is None else opts.degree_groups
    if bins not in ("log2", "quantiles"):
        raise ConfigError(f"mcq_scoring.degree_bins must be log2 or quantiles, got {bins!r}")
    if n_groups < 1:
        raise ConfigError(f"degree groups must be >= 1, got {n_groups}")
    questions_path = opts.questions or catalog.path(
        "mcq.questions", dataset=ctx.config.require_dataset(opts.dataset), questions=opts.name
    )
    summary = ctx.begin(
        predictions=opts.predictions,
        questions=questions_path,
        api_raw=api_raw,
        degree_bins=bins,
        degree_groups=n_groups if bins == "quantiles" else None,
    )
    if not table_exists(spark, questions_path):
        raise JobFailed(f"no questions table at {questions_path}: run `kgbrink mcq` first or pass --questions", summary)
    questions = ctx.persist(scoring.question_columns(ctx.read("questions", questions_path), questions_path))
    n_questions, n_ids = questions.agg(F.count(F.lit(1)), F.countDistinct("id")).first()
    if n_questions != n_ids:
        raise JobFailed(f"{questions_path}: {n_questions - n_ids} repeated question ids", summary)
    fmt, files = scoring.detect_format(spark, opts.predictions, opts.fmt)
    table = ctx.read("predictions", opts.predictions) if fmt == "delta" else None  # pinned to this version
    source = (
        {"delta": opts.predictions, "version": summary.inputs["predictions"].version}
        if table is not None
        else {"files": files}
    )
    fingerprint = _digest(
        {
            "source": source,
            "format": fmt,
            "model": opts.model,
            "run": opts.run,
            "api_raw": api_raw,
            "bins": bins,
            "groups": n_groups,
            "questions": summary.inputs["questions"].as_dict(),
        }
    )
    out = (opts.out or f"{_parent(questions_path)}/scores/{fingerprint}").rstrip("/")
    summary.params.update(format=fmt, out=out)
    return _Work(api_raw, bins, n_groups, questions, n_questions, fmt, files, table, out)


def _validate(ctx: JobContext, opts: ScoreMcqOptions, work: _Work):
    """The predictions checked against the questions (``reason`` set on the bad ones); the bad ones
    quarantined and counted, and the job failed past ``mcq_scoring.max_bad_fraction`` or without rows."""
    summary = ctx.summary
    predictions = scoring.read_predictions(
        ctx.spark, opts.predictions, work.fmt, [f for f, _, _ in work.files], opts.model, opts.run, work.table
    )
    checked = scoring.validate(predictions, work.questions).transform(checkpoint)
    by_reason = {
        r["reason"]: int(r["count"])
        for r in checked.filter(F.col("reason").isNotNull()).groupBy("reason").count().collect()
    }
    total = checked.count()
    blank = predictions.filter(F.col("_skip")).count() if work.fmt == "jsonl" else 0
    quarantined = sum(by_reason.values())
    summary.counts.update(questions=work.n_questions, predictions=total, blank_lines=blank)
    summary.counts.update(scored=total - quarantined, quarantined=quarantined, quarantined_by_reason=by_reason)
    if quarantined:
        ctx.write(
            "mcq_quarantine",
            scoring.quarantine_rows(checked, predictions),
            work.path("mcq_quarantine"),
            "predictions that were not scored",
            table="mcq.prediction_quarantine",
        )
    if total == 0:
        raise JobFailed(f"{opts.predictions}: no predictions", summary)
    fail_past_bad_fraction(
        summary,
        by_reason,
        total,
        float(ctx.config.mcq_scoring.max_bad_fraction),
        "mcq_scoring.max_bad_fraction",
        "predictions",
        f"see {work.path('mcq_quarantine')}",
    )
    return checked


def _aggregate(ctx: JobContext, work: _Work, checked) -> tuple[list[dict], list[dict]]:
    """Accuracy and NKD per model, run, difficulty and degree group, and the correct answers' overlap
    across difficulties; the letter and unanswered counts."""
    grouping = scoring.degree_grouping(work.questions, work.bins, work.n_groups)
    good = scoring.scored(checked.filter(F.col("reason").isNull()), work.api_raw)
    rows = ctx.persist(grouping.column(ctx.spark, good))
    scores = scoring.finish([r.asDict() for r in scoring.group_sums(rows).collect()])
    overlap = [
        r.asDict() for r in rows.transform(scoring.overlap).orderBy("model", "run", *scoring.DIFFICULTIES).collect()
    ]
    per_run = scoring.answer_counts(rows)
    ctx.unpersist(rows)
    ctx.summary.counts.update(
        letter_predictions=sum(int(r["letters"]) for r in per_run),
        letters_disagreeing_with_scores=sum(int(r["disagree"]) for r in per_run),
        unanswered={f"{r['model']}/{r['run']}": work.n_questions - int(r["answered"]) for r in per_run},
    )
    return scores, overlap


def _write(ctx: JobContext, opts: ScoreMcqOptions, work: _Work, scores: list[dict], overlap: list[dict]) -> None:
    spark = ctx.spark
    schema = catalog.table("mcq.scores").schema
    columns = [c.split()[0] for c in schema.split(", ")]
    ctx.write(
        "mcq_scores",
        spark.createDataFrame([tuple(r[c] for c in columns) for r in scores], schema),
        work.path("mcq_scores"),
        f"score-mcq {opts.predictions}",
        table="mcq.scores",
    )
    ctx.write(
        "mcq_overlap",
        spark.createDataFrame(
            [tuple(r[c] for c in ("model", "run", *scoring.DIFFICULTIES, "n")) for r in overlap],
            catalog.table("mcq.overlap").schema,
        ),
        work.path("mcq_overlap"),
        "correct answers across difficulties",
        table="mcq.overlap",
    )


@job("score-mcq", "accuracy and NKD of predictions on ProbeKGC multiple-choice questions", ScoreMcqOptions, steps=4)
def run(ctx: JobContext, opts: ScoreMcqOptions) -> JobSummary:
    work = _open(ctx, opts)
    summary = ctx.summary
    with ctx.step("validate"):
        checked = _validate(ctx, opts, work)
    with ctx.step("aggregate"):
        scores, overlap = _aggregate(ctx, work, checked)
    with ctx.step("write"):
        _write(ctx, opts, work, scores, overlap)
    summary.results = scoring.headline_results(scores)
    summary.highlights.update(headline(summary.results, HEADLINE))
    summary.extra["scores"] = scores
    summary.extra["overlap"] = overlap
    ctx.unpersist(work.questions)
    with ctx.step("report"):
        where = local_dir(opts.report_dir or f"{work.out}/report")
        summary.artifacts.extend(report.write(scores, overlap, Path(where), summary.params, summary.counts))
    summary.highlights["report"] = str(Path(where) / "report.md")
    return summary
