"""What a benchmark's evaluation declares (:class:`Evaluation`), a model's role in a run (:class:`Role`) and a
run's typed state (:class:`Run`); the answers split from the calls that got none, and the quarantine written.

An evaluation declares its inputs (dataset tables by catalog name), its contexts and, per context, the
templates it renders (the first is the default; a template's ``params`` are the request's defaults, settings
override them), the settings its prompts depend on, and its judge when its scorer asks one. ``kgbrink
predict`` runs its steps in order: ``prompts`` (``item_id, messages``), the model call, ``parse`` (the
answers into its scorer's input, the rest quarantined), ``score``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.files import reported_path_column
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import fail_past_bad_fraction
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation import templates as builtins
from kgbrink.llm import templates
from kgbrink.llm.client import EndpointConfig

QUARANTINE = "predict_quarantine"
REQUEST_SETTINGS = ("temperature", "top_p", "max_tokens", "seed")  # predict.* settings that override params


def request_params(template: templates.Template, settings) -> dict:
    """A request's parameters: the template's ``params``, then the ``predict`` settings that are set."""
    params = dict(template.params)
    for key in REQUEST_SETTINGS:
        value = getattr(settings, key)
        if value is not None:
            params[key] = value
    return params


def judge_params(ref: str, settings) -> dict:
    """A judge's request parameters: its built-in template's ``params``, and ``predict.seed`` when set (the
    answering model's sampling settings are not the judge's)."""
    params = dict(builtins.builtin(ref).params)
    if settings.seed is not None:
        params["seed"] = settings.seed
    return params


@dataclass(frozen=True)
class Role:
    """A model in one role of a run: ``answer`` (counts unprefixed), ``judge``, ``facts``, ``verify`` (counts
    prefixed by the role), its request parameters, endpoint, prices per 10^6 prompt and completion tokens
    (None: no cost) and revision label."""

    role: str
    model: str
    params: dict
    endpoint: EndpointConfig
    prices: tuple[float | None, float | None] = (None, None)
    revision: str | None = None  # predict.model_revision: in every call key of this role

    @property
    def prefix(self) -> str:
        return "" if self.role == "answer" else f"{self.role}_"


@dataclass
class QuestionTexts:
    """Question texts read from a user's file: the good ones (``qid, question, references``), the bad lines
    as quarantine rows, and the bad lines counted by reason."""

    good: DataFrame
    quarantine: DataFrame
    counts: dict[str, int]


@dataclass
class Run:
    """One ``predict`` run: where it reads and writes, the answering role, its template, and what its steps
    pass on. ``keep`` caches a frame until the run ends (:meth:`release`)."""

    benchmark: str
    dataset: str
    name: str
    answering: Role
    template: templates.Template
    judge: Role | None
    tasks: int
    out: str
    spool_dir: str
    fingerprint: str = ""
    files: str = ""  # a local folder: the plain files
    release: str = ""  # the release folder read instead of a dataset
    sources: dict[str, DataFrame] = field(default_factory=dict)
    records: DataFrame | None = None  # the benchmark's question records the prompts are rendered from
    prompts: DataFrame | None = None  # item_id, messages, prompt_sha256, call_id, body
    failed: DataFrame | None = None  # call_id, last: the calls the ask step left unanswered
    questions_path: str | None = None  # probekgc: the questions table score-mcq reads
    written: str | None = None  # synthkgqa: the written questions gt-questions reads
    texts: QuestionTexts | None = None  # okgqa: the question texts of --questions
    spent: float = 0.0  # what this run's answers cost so far, at the roles' prices

    @property
    def model(self) -> str:
        return self.answering.model

    def path(self, table: str) -> str:
        return f"{self.out}/{table}"


class Evaluation(ABC):
    """One benchmark's evaluation, declared once. ``inputs`` / ``optional``: ``(source, catalog table)``
    read from the dataset (required / where they exist); ``templates``: per context (the first is the
    default context) the built-in templates it renders, the first the default; ``fingerprint_settings``:
    the ``predict`` settings its prompts or scores depend on; ``judge``: the judge's template, when its
    scorer asks a judge through the same model-call step; ``released_as``: the release's benchmark that
    carries its inputs (its own name: None)."""

    name: ClassVar[str]
    inputs: ClassVar[tuple[tuple[str, str], ...]] = ()
    optional: ClassVar[tuple[tuple[str, str], ...]] = ()
    templates: ClassVar[dict[str, tuple[str, ...]]]
    fingerprint_settings: ClassVar[tuple[str, ...]] = ()
    judge: ClassVar[str | None] = None
    released_as: ClassVar[str | None] = None

    @property
    def release_benchmark(self) -> str:
        return self.released_as or self.name

    @property
    def contexts(self) -> tuple[str, ...]:
        return tuple(self.templates)

    def judge_template(self, opts) -> str | None:
        """The template of the judge's role in this run (a scorer's judge; BRINK's App. D rewriter)."""
        return self.judge

    def default_name(self, config) -> str:
        """The question set read when ``--name`` is not given."""
        raise ConfigError(f"--name is required with --benchmark {self.name}")

    def option_inputs(self, opts) -> tuple[tuple[str, str], ...]:
        """Inputs the options add (required)."""
        return ()

    def labels(self, opts) -> dict:
        """The options that shape the prompts, for the summary and the results' labels."""
        return {}

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        """The inputs read from a release instead of a dataset."""
        raise ConfigError(f"--release does not carry what {self.name} asks: read a dataset")

    def template(self, spec: str | None, context: str) -> templates.Template:
        """The template asked with ``--template`` (a built-in of this benchmark and context, or a file whose
        slots it fills), else the context's default."""
        accepted = self.templates[context]
        if spec is None:
            return builtins.builtin(accepted[0])
        try:
            template = builtins.resolve(spec)
        except templates.TemplateError as error:
            raise ConfigError(f"--template {spec}: {error}") from error
        if template.ref in accepted:
            return template
        if templates.builtin_ref(spec):
            raise ConfigError(
                f"--template {spec} is not a template of {self.name} with --context {context}: "
                f"use one of {', '.join(accepted)}"
            )
        filled = sorted({slot for ref in accepted for slot in builtins.builtin(ref).slots})
        try:
            templates.check_slots(template, filled)
        except templates.TemplateError as error:
            raise ConfigError(f"--template {spec}: {error} ({self.name} fills {', '.join(filled)})") from error
        return template

    @abstractmethod
    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        """``item_id, messages`` of every question asked; sets ``run.records``."""

    @abstractmethod
    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        """The answers (``item_id, call_id, status, content, top_logprobs, detail``) parsed into the scorer's
        input and written, with the quarantine rows; returns the bad prompts by reason (weighed against
        ``predict.max_bad_fraction``)."""

    @abstractmethod
    def score(self, ctx: JobContext, run: Run, opts) -> None:
        """The scorer run on what :meth:`parse` wrote, its results into the summary."""


def split_answers(prompts: DataFrame, calls: DataFrame | None, failed: DataFrame | None) -> tuple[DataFrame, DataFrame]:
    """``(answers, quarantine)``: the prompts (``item_id, call_id``) with an ``ok`` answer and its
    ``content, top_logprobs``; the others as quarantine rows (stage ``call``: no answer, the last try's
    status as the reason; stage ``answer``: an empty, refused or truncated answer)."""
    spark = prompts.sparkSession
    keys = prompts.select("item_id", "call_id")
    if calls is None:
        calls = spark.createDataFrame([], catalog.table("predict.model_calls").schema)
    got = keys.join(calls.select("call_id", "status", "content", "top_logprobs", "detail"), "call_id", "left")
    if failed is None:
        failed = spark.createDataFrame([], "call_id string, last struct<status: string, detail: string>")
    missing = got.filter(F.col("status").isNull()).select("item_id", "call_id").join(failed, "call_id", "left")
    unanswered = missing.select(
        "item_id",
        "call_id",
        F.lit("call").alias("stage"),
        F.coalesce(F.col("last.status"), F.lit("no_answer")).alias("reason"),
        F.col("last.detail").alias("detail"),
    )
    refused = got.filter(F.col("status").isNotNull() & (F.col("status") != "ok")).select(
        "item_id", "call_id", F.lit("answer").alias("stage"), F.col("status").alias("reason"), "detail"
    )
    return got.filter(F.col("status") == "ok"), unanswered.unionByName(refused)


def parse_failures(bad: DataFrame, id_column: str = "item_id") -> DataFrame:
    """Quarantine rows (stage ``parse``) of parsed answers with a ``reason`` (``id_column, call_id, reason,
    detail``)."""
    return bad.select(F.col(id_column).alias("item_id"), "call_id", F.lit("parse").alias("stage"), "reason", "detail")


def unparsed(parsed: DataFrame, prompts: DataFrame, missing: str, reason: str, detail: str) -> DataFrame:
    """Quarantine rows (:func:`parse_failures`) of the ``parsed`` answers (``item_id``) whose column
    ``missing`` is null, each with its call (``prompts``: ``item_id, call_id``), ``reason`` and ``detail``."""
    rows = parsed.filter(F.col(missing).isNull()).join(prompts.select("item_id", "call_id"), "item_id")
    return parse_failures(
        rows.select("item_id", "call_id", F.lit(reason).alias("reason"), F.lit(detail).alias("detail"))
    )


def write_quarantine(ctx: JobContext, run: Run, quarantine: DataFrame) -> dict[str, int]:
    """The quarantine rows written (an empty table when there are none: no stale rows of an earlier run in
    the folder), counted by reason from the table written (its plan is long: not cached)."""
    ctx.write(QUARANTINE, quarantine, run.path(QUARANTINE), table="predict.quarantine")
    written = ctx.written(QUARANTINE)
    by_reason = {r["reason"]: int(r["count"]) for r in written.groupBy("reason").count().collect()}
    ctx.summary.counts.update(quarantined=sum(by_reason.values()), quarantined_by_reason=by_reason)
    return by_reason


def quarantined_example(ctx: JobContext, reason: str) -> str | None:
    """The detail of one quarantined item with ``reason`` (the first by item id), for the failure message."""
    if QUARANTINE not in ctx.summary.outputs:
        return None
    rows = ctx.written(QUARANTINE).where(F.col("reason") == reason).orderBy("item_id").select("detail").take(1)
    return rows[0]["detail"] if rows else None


def adopt_results(ctx: JobContext, summary) -> None:
    """A scorer job's results, highlights and artifacts into this run's summary."""
    ctx.summary.results.extend(summary.results)
    ctx.summary.highlights.update(summary.highlights)
    ctx.summary.artifacts.extend(summary.artifacts)


def checked_lines(
    ctx: JobContext,
    run: Run,
    path: str,
    parsed: DataFrame,
    known: DataFrame,
    key: str,
    columns: tuple[str, ...],
    stage: str,
    unknown: tuple[str, str],
    what: str,
) -> DataFrame:
    """The good lines (``key, *columns``) of a user's file parsed into ``parsed`` (``source_file,
    line_number, key, *columns, reason, detail``) whose ``key`` is in ``known`` (``key``); the bad lines and
    those of other keys (``unknown``: reason, detail) quarantined at ``stage`` with file:line, kept in
    ``run.texts``. Fails when the bad lines exceed ``predict.max_bad_fraction`` of the lines (an unknown
    key is not weighed: one file may serve several sets)."""
    known = known.select(key).distinct().withColumn("_known", F.lit(True))
    stray = F.col("reason").isNull() & F.col("_known").isNull()
    parsed = parsed.join(known, key, "left").withColumns(
        {
            "reason": F.when(stray, F.lit(unknown[0])).otherwise(F.col("reason")),
            "detail": F.when(stray, F.lit(unknown[1])).otherwise(F.col("detail")),
        }
    )
    bad = parsed.filter(F.col("reason").isNotNull())
    where = F.concat(
        reported_path_column(F.col("source_file")), F.lit(":"), F.col("line_number").cast("string"), F.lit(": ")
    )
    quarantine = ctx.persist(
        bad.select(
            F.col(key).alias("item_id"),
            F.lit(None).cast("string").alias("call_id"),
            F.lit(stage).alias("stage"),
            "reason",
            F.concat(where, F.coalesce("detail", F.lit(""))).alias("detail"),
        )
    )
    counts = {r["reason"]: int(r["count"]) for r in bad.groupBy("reason").count().collect()}
    good = ctx.persist(parsed.filter(F.col("reason").isNull()).select(key, *columns))
    run.texts = QuestionTexts(good, quarantine, counts)
    weighed = {k: n for k, n in counts.items() if k != unknown[0]}
    fail_past_bad_fraction(
        ctx.summary,
        weighed,
        good.count() + sum(weighed.values()),
        float(ctx.config.predict.max_bad_fraction),
        "predict.max_bad_fraction",
        what,
        f"bad lines of {path}",
        source=path,
    )
    return good


def without_input_lines(by_reason: dict[str, int], run: Run) -> dict[str, int]:
    """The quarantined prompts by reason without the bad lines of a user's file (``run.texts``), which
    :func:`checked_lines` weighed against the lines already, not against the prompts."""
    lines = run.texts.counts if run.texts else {}
    return {k: n - lines.get(k, 0) for k, n in by_reason.items() if n > lines.get(k, 0)}
