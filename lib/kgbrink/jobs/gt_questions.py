"""``kgbrink gt-questions``: questions with ground-truth answer subgraphs (paper 002, spec 2.0, 2.B, 2.C)
into ``<dataset>/synthkgqa/<questions>/``.

Either ingests a question file (``--input``, JSON Lines by key, :mod:`kgbrink.synthkgqa.questions`):
records are checked against the dataset's dictionaries and the KG (``--splits``, default every split),
bad ones quarantined with their reasons, valid ones classified (isomorphism type, Dutt label, hops,
edges, seeds, intermediates); or plants questions of ``gt_questions.types`` in the KG (``--generate``,
:mod:`kgbrink.synthkgqa.generator`), classifies them the same way, and exports them as JSON Lines by key
(the ``--input`` form). ``--answers`` adds each tree query's answer set on the KG (spec 2.C).

Writes ``gt_questions`` (partitioned by split), ``question_quarantine`` and ``answer_types`` (questions
per split and type); fails when the quarantined share of the records exceeds
``gt_questions.max_bad_fraction`` (the quarantine is written first, to be looked at).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.files import delete_path, local_dir, merge_parts, read_lines, require_files, write_lines
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.kg.dataset import dataset_splits
from kgbrink.synthkgqa import generator
from kgbrink.synthkgqa import questions as synthkgqa_questions

GENERATED = "generated"


@dataclass
class GtQuestionOptions:
    input: str | None = arg(None, "question file: JSON Lines {id, split?, seeds, answer, answer_subgraph} by key")
    generate: bool = arg(False, "plant questions of gt_questions.types in the KG instead", action="store_true")
    name: str | None = arg(
        None,
        "question set name: <dataset>/synthkgqa/<name>/ (default: the file's stem, or 'generated')",
        deprecated=("--questions",),
    )
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    splits: list[str] | None = arg(
        None, "comma-separated splits that are the KG: triples checked, planted, queried (default: all)", convert=names
    )
    answers: bool = arg(
        False, "evaluate each question's tree query: all_answers, n_answers (spec 2.C)", action="store_true"
    )
    types: list[str] | None = arg(
        None, "--generate: comma-separated type identifiers (default: setting gt_questions.types)", convert=names
    )
    per_type: int | None = arg(
        None, "--generate: questions per type (default: setting gt_questions.per_type)", type=int
    )
    seed: int | None = arg(None, "--generate: seed (default: setting gt_questions.seed)", type=int)
    split: str | None = arg(None, "--generate: the split of the planted questions (default: none)")
    export: str | None = arg(
        None, "--generate: local JSON Lines file of the questions by key (default: <set>/export/questions.jsonl)"
    )


def question_set_name(opts: GtQuestionOptions) -> str:
    name = opts.name or (GENERATED if opts.generate else Path(opts.input.rstrip("/")).name.split(".")[0])
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--name must be a plain name, got {name!r}")
    return name


def _settings(ctx: JobContext, opts: GtQuestionOptions):
    sets = []
    if opts.types:
        sets.append(f"gt_questions.types={','.join(opts.types)}")
    if opts.per_type is not None:
        sets.append(f"gt_questions.per_type={opts.per_type}")
    if opts.seed is not None:
        sets.append(f"gt_questions.seed={opts.seed}")
    return ctx.config.with_overrides(sets).gt_questions if sets else ctx.config.gt_questions


@dataclass
class _QuestionSet:
    """Where a question set goes and what it is checked against: its settings, the KG of its splits."""

    name: str
    dataset: str
    cfg: object  # GtQuestionsSettings
    entities: DataFrame
    relations: DataFrame
    kg: DataFrame
    out: dict[str, str]

    @property
    def base(self) -> str:
        return f"{self.dataset.rstrip('/')}/synthkgqa/{self.name}"


def _open(ctx: JobContext, opts: GtQuestionOptions) -> _QuestionSet:
    config = ctx.config
    if bool(opts.input) == bool(opts.generate):
        raise ValueError("give either --input FILE (a question file) or --generate")
    cfg = _settings(ctx, opts)
    dataset = config.require_dataset(opts.dataset)
    name = question_set_name(opts)
    summary = ctx.begin(
        dataset=dataset,
        input=opts.input,
        generate=opts.generate,
        questions=name,
        answers=opts.answers,
        **{f"gt_questions.{k}": ",".join(v) if isinstance(v, list) else v for k, v in vars(cfg).items()},
    )
    if opts.generate:
        try:
            generator.shapes(cfg.types)
        except ValueError as exc:
            raise JobFailed(f"gt_questions.types: {exc}", summary) from None
    entities = ctx.read("entities", catalog.path("entities", dataset=dataset))
    relations = ctx.read("relations", catalog.path("relations", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    available = dataset_splits(triples)
    splits = sorted(opts.splits or available)
    unknown = [s for s in splits if s not in available]
    if unknown:
        raise JobFailed(f"{dataset} has no split(s) {', '.join(unknown)} (splits: {', '.join(available)})", summary)
    summary.params["splits"] = ",".join(splits)
    kg = triples.where(F.col("split").isin(splits)).select("h", "r", "t")
    out = {
        t: catalog.path(f"synthkgqa.{t}", dataset=dataset, questions=name)
        for t in ("gt_questions", "question_quarantine", "answer_types")
    }
    return _QuestionSet(name, dataset, cfg, entities, relations, kg, out)


def _questions(ctx: JobContext, opts: GtQuestionOptions, qs: _QuestionSet) -> DataFrame:
    """The valid classified questions (planted or read); the bad ones written to the quarantine, and the
    job failed past ``gt_questions.max_bad_fraction``."""
    spark, summary, cfg = ctx.spark, ctx.summary, qs.cfg
    if opts.generate:
        planted = generator.plant(qs.kg, qs.entities.select("id"), cfg.types, cfg.per_type, cfg.seed, opts.split)
        planted = planted.withColumns(
            {
                "source_file": F.lit("<generated>"),
                "line_number": F.lit(None).cast("bigint"),
                "line": F.lit(None).cast("string"),
            }
        ).transform(checkpoint)
        valid, bad = synthkgqa_questions.classify(planted, cfg.max_edges)
        n_records = planted.count()
    else:
        require_files(spark, [opts.input])
        lines = read_lines(spark, {"questions": [opts.input]})
        records = synthkgqa_questions.parse_lines(lines, cfg.max_keys_per_question).transform(checkpoint)
        n_records = records.count()
        valid, bad = synthkgqa_questions.ingest(records, qs.entities, qs.relations, qs.kg, cfg.max_edges)
    valid = valid.transform(checkpoint)
    quarantine = qs.out["question_quarantine"]
    ctx.write(
        "question_quarantine",
        bad.select(*synthkgqa_questions.QUARANTINE_COLUMNS),
        quarantine,
        f"quarantine of {qs.name}",
        table="synthkgqa.question_quarantine",
    )
    reasons = {r["reason"]: r["count"] for r in ctx.written("question_quarantine").groupBy("reason").count().collect()}
    summary.counts.update(records=n_records, quarantined=sum(reasons.values()))
    summary.counts.update({f"quarantined_{k}": v for k, v in sorted(reasons.items())})
    fail_past_bad_fraction(
        summary,
        reasons,
        n_records,
        cfg.max_bad_fraction,
        "gt_questions.max_bad_fraction",
        "question records",
        f"see {quarantine}",
        source=opts.input or "generated questions",
    )
    return valid


def _note_given(summary: JobSummary, valid: DataFrame) -> None:
    """GTSQA records carry their type and hops: the classification must reproduce them (spec 2.G)."""
    given = synthkgqa_questions.given_mismatches(valid)
    if not given:
        return
    summary.counts.update(given)
    if given["given_type_mismatch"] or given["given_hops_mismatch"]:
        summary.highlights["mismatch"] = (
            f"{given['given_type_mismatch']} given graph_isomorphism and {given['given_hops_mismatch']} given "
            "n_hops differ from the classification"
        )


def _write_questions(ctx: JobContext, opts: GtQuestionOptions, qs: _QuestionSet, valid, answers) -> DataFrame:
    """``gt_questions`` and ``answer_types`` written; the questions as written."""
    summary, cfg = ctx.summary, qs.cfg
    table = synthkgqa_questions.as_table(valid, answers)
    ctx.write("gt_questions", table, qs.out["gt_questions"], f"questions {qs.name}", table="synthkgqa.gt_questions")
    written = ctx.written("gt_questions")
    types = synthkgqa_questions.type_counts(written).orderBy("split", F.desc("questions"), "graph_isomorphism")
    ctx.write("answer_types", types, qs.out["answer_types"], f"types of {qs.name}", table="synthkgqa.answer_types")
    summary.results = [
        r.asDict() for r in ctx.written("answer_types").orderBy("split", "n_edges", "graph_isomorphism").collect()
    ]
    summary.counts.update(synthkgqa_questions.set_counts(written, cfg.max_answers, opts.answers))
    summary.counts["types"] = len({r["graph_isomorphism"] for r in summary.results})
    if opts.generate:
        short = generator.types_short(summary.results, cfg.types, cfg.per_type)
        summary.counts["types_short"] = short
        if short:
            summary.highlights["short"] = ", ".join(f"{t}: {n} of {cfg.per_type}" for t, n in short.items())
    return written


def _export(ctx: JobContext, opts: GtQuestionOptions, qs: _QuestionSet, written: DataFrame) -> None:
    """The planted questions by key as one local JSON Lines file (the ``--input`` form)."""
    spark, summary = ctx.spark, ctx.summary
    target = opts.export or (None if is_uri(qs.base) else f"{qs.base}/export/questions.jsonl")
    if not target:
        return
    path = local_dir(str(Path(target).parent)) / Path(target).name
    records = generator.to_records(written, qs.entities, qs.relations).orderBy("id").select("value")
    staging = f"{qs.base}/_export_staging"
    write_lines(records, staging, "text")
    merge_parts(spark, staging, str(path))
    delete_path(spark, staging)
    summary.highlights["export"] = str(path)
    summary.extra["files"] = [str(path)]


@job(
    "gt-questions",
    "questions with ground-truth answer subgraphs: ingest and classify, or plant them (paper 002)",
    GtQuestionOptions,
    steps=4,
)
def run(ctx: JobContext, opts: GtQuestionOptions) -> JobSummary:
    qs = _open(ctx, opts)
    with ctx.step("questions"):
        valid = _questions(ctx, opts, qs)
    _note_given(ctx.summary, valid)
    answers = None
    if opts.answers:
        with ctx.step("answers"):
            answers = synthkgqa_questions.answer_sets(valid, qs.kg, qs.cfg.max_answers).transform(checkpoint)
    with ctx.step("write"):
        written = _write_questions(ctx, opts, qs, valid, answers)
    if opts.generate:
        with ctx.step("export"):
            _export(ctx, opts, qs, written)
    ctx.summary.highlights["questions"] = qs.out["gt_questions"]
    return ctx.summary
