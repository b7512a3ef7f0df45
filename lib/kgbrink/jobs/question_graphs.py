"""Paper 002 (SynthKGQA / GTSQA) jobs on a question set ``<dataset>/synthkgqa/<questions>/``:

- ``question-graphs``: question-specific graphs (App. C.1; :mod:`kgbrink.synthkgqa.question_graphs`) into
  ``question_graphs`` (partitioned by split), ``question_graph_sizes`` and ``question_graph_quarantine``;
  with ``--sp-analysis`` also sp-analysis's tables and report on the same search graphs, in one pass;
- ``sp-analysis``: shortest paths against ground-truth paths (App. D.2; :mod:`kgbrink.synthkgqa.
  shortest_paths`) into ``sp_pairs``, ``sp_triples``, ``sp_overlap``, ``sp_table_d2``, ``sp_figure_d9``,
  ``sp_quarantine`` and a report (``report.md``, ``shortest_paths.png``).

Both read the set's ``gt_questions`` table (catalog ``synthkgqa.gt_questions``, written by ``gt-questions``)
or ``--input`` (a Delta or Parquet table with at least id, seeds, answer, answer_subgraph), and the KG of
``--splits``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import table_exists
from kgbrink.core.files import local_dir
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.kg.dataset import dataset_splits
from kgbrink.synthkgqa import question_graphs as synthkgqa_question_graphs
from kgbrink.synthkgqa import report, shortest_paths


@dataclass
class QuestionSetOptions:
    name: str = arg(
        "generated",
        "question set name: <dataset>/synthkgqa/<name>/ (gt-questions writes it)",
        deprecated=("--questions",),
    )
    input: str | None = arg(
        None, "a question table to read instead of the set's gt_questions (Delta or Parquet: id, seeds, answer, ...)"
    )
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    splits: list[str] | None = arg(None, "comma-separated splits of the KG (default: all)", convert=names)


@dataclass
class _SpOptions(QuestionSetOptions):
    answers: str | None = arg(
        None,
        "answers: generated or all (default: setting shortest_paths.answers)",
        choices=list(shortest_paths.ANSWERS),
    )
    report_dir: str | None = arg(None, "local folder of the report (default: <dataset>/synthkgqa/<questions>/report)")


@dataclass
class QuestionGraphOptions(_SpOptions):
    sp_analysis: bool = arg(
        False,
        "also write sp-analysis's tables and report for the searched graphs, in the same pass (--graph neighbourhood)",
        action="store_true",
    )


@dataclass
class SpAnalysisOptions(_SpOptions):
    graph: str | None = arg(
        None,
        "graph searched: neighbourhood or full_kg (default: setting shortest_paths.graph)",
        choices=list(shortest_paths.GRAPHS),
    )


@dataclass
class _Inputs:
    dataset: str
    kg: DataFrame
    questions: DataFrame
    paths: DataFrame
    n_questions: int
    path: dict


def _inputs(
    ctx: JobContext,
    opts: QuestionSetOptions,
    summary: JobSummary,
    quarantines: tuple[str, ...],
    tables,
    reuse_kg: bool = False,
) -> _Inputs:
    """The KG (persisted when ``reuse_kg``: read by several queries), the validated questions and their GT
    paths; the quarantine written, the job failed past ``gt_questions.max_bad_fraction``."""
    spark, config = ctx.spark, ctx.config
    dataset = config.require_dataset(opts.dataset)
    if not opts.name or "/" in opts.name:
        raise ValueError(f"--name must be a plain name (a question set), got {opts.name!r}")
    path = {t: catalog.path(f"synthkgqa.{t}", dataset=dataset, questions=opts.name) for t in tables}
    entities = ctx.read("entities", catalog.path("entities", dataset=dataset))
    relations = ctx.read("relations", catalog.path("relations", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    splits = sorted(opts.splits or dataset_splits(triples))
    summary.params["splits"] = ",".join(splits)
    kg = triples.where(F.col("split").isin(splits)).select("h", "r", "t").distinct()
    kg = ctx.persist(kg) if reuse_kg else kg  # released when the job ends: the next job starts with the heap free
    source = opts.input or catalog.path("synthkgqa.gt_questions", dataset=dataset, questions=opts.name)
    summary.params["questions"] = source
    if opts.input or table_exists(spark, source):
        given = ctx.read_input("gt_questions", source)
    else:
        raise JobFailed(f"no question table at {source}: run gt-questions first or give --input", summary)
    questions, paths, bad = synthkgqa_question_graphs.prepare_questions(given, entities, relations)
    quarantine = quarantines[0]
    ctx.write("quarantine", bad, path[quarantine], f"quarantine of {opts.name}", table=f"synthkgqa.{quarantine}")
    for other in quarantines[1:]:
        ctx.write(other, ctx.written("quarantine"), path[other], f"quarantine of {opts.name}", f"synthkgqa.{other}")
    reasons = {r["reason"]: r["count"] for r in ctx.written("quarantine").groupBy("reason").count().collect()}
    questions = questions.transform(checkpoint)
    n_good = questions.count()
    n_bad = sum(reasons.values())
    summary.counts.update(questions=n_good, **{f"quarantined_{k}": v for k, v in sorted(reasons.items())})
    fail_past_bad_fraction(
        summary,
        reasons,
        n_good + n_bad,
        config.gt_questions.max_bad_fraction,
        "gt_questions.max_bad_fraction",
        "questions",
        f"see {path[quarantine]}",
        source=source,
    )
    return _Inputs(dataset, kg, questions, paths, n_good, path)


@job(
    "question-graphs",
    "SynthKGQA question-specific graphs: neighbourhood, confounders, PPR pruning, GT re-added (paper 002)",
    QuestionGraphOptions,
    steps=3,
)
def question_graphs(ctx: JobContext, opts: QuestionGraphOptions) -> JobSummary:
    config = ctx.config
    cfg = config.question_graphs
    synthkgqa_question_graphs.check_settings(cfg)
    if not opts.sp_analysis and (opts.answers or opts.report_dir):
        raise ValueError("--answers and --report-dir apply to --sp-analysis only")
    sp_cfg = _sp_settings(config, opts.answers, "neighbourhood") if opts.sp_analysis else None
    summary = ctx.begin(
        dataset=config.require_dataset(opts.dataset),
        questions=opts.name,
        **{f"question_graphs.{k}": v for k, v in vars(cfg).items()},
        **({f"shortest_paths.{k}": v for k, v in vars(sp_cfg).items()} if sp_cfg else {}),
    )
    tables = ("question_graphs", "question_graph_sizes", "question_graph_quarantine")
    if sp_cfg:
        tables += SP_TABLES
    with ctx.step("questions"):
        quarantines = ("question_graph_quarantine", "sp_quarantine") if sp_cfg else ("question_graph_quarantine",)
        got = _inputs(ctx, opts, summary, quarantines, tables)
    with ctx.step("graphs"):
        if sp_cfg:
            pairs = shortest_paths.seed_answer_pairs(got.questions, got.paths, sp_cfg.answers).transform(checkpoint)
            graphs, sizes, found, sp_triples = shortest_paths.question_graphs_and_paths(
                got.kg, got.questions, got.paths, pairs, cfg
            )
        else:
            graphs, sizes = synthkgqa_question_graphs.question_graphs(got.kg, got.questions, got.paths, cfg)
        named = f"of {opts.name}"
        path = got.path
        ctx.write(
            "sizes", sizes, path["question_graph_sizes"], f"sizes {named}", table="synthkgqa.question_graph_sizes"
        )
        ctx.write(
            "graphs", graphs, path["question_graphs"], f"question graphs {named}", table="synthkgqa.question_graphs"
        )
    with ctx.step("shortest paths" if sp_cfg else "counts"):
        if sp_cfg:
            _sp_tables(ctx, opts, got, pairs, found, sp_triples)
            _sp_report(ctx, opts, got, sp_cfg, summary)
        totals = synthkgqa_question_graphs.graph_totals(ctx.written("sizes"), ctx.written("graphs"))
    summary.counts.update(totals)
    return summary


SP_TABLES = ("sp_pairs", "sp_triples", "sp_overlap", "sp_table_d2", "sp_figure_d9", "sp_quarantine")


def _sp_settings(config, answers: str | None, graph: str | None):
    """The ``shortest_paths`` settings with the command line's ``--answers`` / ``--graph``, checked."""
    sets = [f"shortest_paths.{k}={v}" for k, v in (("graph", graph), ("answers", answers)) if v]
    cfg = config.with_overrides(sets).shortest_paths if sets else config.shortest_paths
    shortest_paths.check_settings(cfg)
    return cfg


def _sp_write(ctx: JobContext, opts, got: _Inputs, name: str, frame, what: str) -> None:
    ctx.write(name, frame, got.path[name], f"{what} of {opts.name}", table=f"synthkgqa.{name}")


def _sp_tables(ctx: JobContext, opts, got: _Inputs, pairs, found, sp_triples) -> None:
    """``sp_pairs``, ``sp_triples`` and ``sp_overlap`` from the pairs' shortest paths."""
    _sp_write(ctx, opts, got, "sp_pairs", shortest_paths.pair_table(pairs, found), "seed-answer shortest paths")
    triples = sp_triples.select(F.col("qid").alias("id"), "h", "r", "t")
    _sp_write(ctx, opts, got, "sp_triples", triples, "shortest-path triples")
    sp_rows = ctx.written("sp_triples").withColumnRenamed("id", "qid")
    _sp_write(ctx, opts, got, "sp_overlap", shortest_paths.overlap(got.questions, sp_rows), "GT / SP overlap")


def _sp_report(ctx: JobContext, opts, got: _Inputs, cfg, summary: JobSummary) -> None:
    """Table D2, Fig. D9, the report and the counts from the written pair and overlap tables."""
    _sp_write(ctx, opts, got, "sp_table_d2", shortest_paths.table_d2(ctx.written("sp_overlap")), "Table D2")
    _sp_write(ctx, opts, got, "sp_figure_d9", shortest_paths.figure_d9(ctx.written("sp_pairs")), "Fig. D9")
    d2 = ctx.written("sp_table_d2").toPandas().sort_values(["split", "n_hops"])
    d9 = ctx.written("sp_figure_d9").toPandas().sort_values(["split", "gt_len"])
    out = local_dir(opts.report_dir or str(Path(got.path["sp_pairs"]).parent / "report"))
    summary.artifacts.extend(report.write(d2, d9, out, cfg.graph, cfg.answers))
    summary.highlights["report"] = str(out / "report.md")
    summary.results = json.loads(d2.to_json(orient="records"))
    pair_stats = (
        ctx.written("sp_pairs")
        .agg(
            F.count("*").alias("pairs"),
            F.sum(F.col("shortcut").cast("int")).alias("shortcuts"),
            F.sum(F.col("sp_len").isNull().cast("int")).alias("unreachable"),
        )
        .first()
    )
    summary.counts.update(
        pairs=pair_stats["pairs"],
        shortcuts=int(pair_stats["shortcuts"] or 0),
        unreachable_pairs=int(pair_stats["unreachable"] or 0),
        sp_triples=ctx.written("sp_triples").count(),
    )


@job(
    "sp-analysis",
    "SynthKGQA shortest paths against ground-truth paths: Table D2, Fig. D9 (paper 002)",
    SpAnalysisOptions,
    steps=3,
)
def sp_analysis(ctx: JobContext, opts: SpAnalysisOptions) -> JobSummary:
    config = ctx.config
    cfg = _sp_settings(config, opts.answers, opts.graph)
    if cfg.graph == "neighbourhood":
        synthkgqa_question_graphs.check_settings(config.question_graphs)
    summary = ctx.begin(
        dataset=config.require_dataset(opts.dataset),
        questions=opts.name,
        **{f"shortest_paths.{k}": v for k, v in vars(cfg).items()},
        **(
            {f"question_graphs.{k}": v for k, v in vars(config.question_graphs).items()}
            if cfg.graph == "neighbourhood"
            else {}
        ),
    )
    with ctx.step("questions"):
        got = _inputs(ctx, opts, summary, ("sp_quarantine",), SP_TABLES, reuse_kg=cfg.graph != "neighbourhood")
    with ctx.step("shortest paths"):
        pairs = shortest_paths.seed_answer_pairs(got.questions, got.paths, cfg.answers).transform(checkpoint)
        if cfg.graph == "neighbourhood":
            found, sp_triples = shortest_paths.shortest_paths_neighbourhood(
                got.kg, got.questions, got.paths, pairs, config.question_graphs
            )
        else:
            found, sp_triples = shortest_paths.shortest_paths_full_kg(got.kg, pairs, config.question_graphs.seed)
        _sp_tables(ctx, opts, got, pairs, found, sp_triples)
    with ctx.step("tables and report"):
        _sp_report(ctx, opts, got, cfg, summary)
    return summary
