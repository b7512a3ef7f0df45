"""OKGQA-P jobs (paper 004): ``okgqa-subgraphs`` builds PPR-pruned question subgraphs
(:mod:`kgbrink.okgqa.subgraphs`) into ``<dataset>/okgqa/<name>/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.files import read_lines, require_files
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobSummary, fail_past_bad_fraction
from kgbrink.kg.dataset import dataset_splits
from kgbrink.okgqa import questions as okgqa_questions
from kgbrink.okgqa.subgraphs import question_subgraphs, size_totals


def question_set_name(path: str, given: str | None) -> str:
    name = given or Path(path.rstrip("/")).name.split(".")[0]
    if not name or "/" in name or name == "kg":
        raise ValueError(f"--name must be a plain name other than 'kg' (the whole-KG scope), got {name!r}")
    return name


@dataclass
class SubgraphOptions:
    questions: str = arg(None, 'question entity sets: JSON Lines {"qid": ..., "entities": [keys]}', required=True)
    questions_format: str = arg(
        "jsonl", "jsonl, or delta/parquet: a table (qid, entity)", choices=["jsonl", "delta", "parquet"]
    )
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    name: str | None = arg(None, "question set name: <dataset>/okgqa/<name>/ (default: the file's stem)")
    splits: list[str] | None = arg(None, "comma-separated splits of the KG (default: all)", convert=names)


def _seeds(ctx: JobContext, opts: SubgraphOptions, entities: DataFrame, quarantine: str) -> DataFrame:
    """The questions' seed entities (``qid, entity``); bad lines and unknown keys quarantined, counted,
    and the job failed past ``okgqa_subgraph.max_bad_fraction`` of the keys and lines."""
    spark, summary, cfg = ctx.spark, ctx.summary, ctx.config.okgqa_subgraph
    if opts.questions_format == "jsonl":
        require_files(spark, [opts.questions])
        lines = read_lines(spark, {"questions": [opts.questions]})
        parsed = okgqa_questions.parse_lines(lines, cfg.max_entities_per_question)
    else:
        table = spark.read.format(opts.questions_format).load(opts.questions)
        parsed = okgqa_questions.from_table(table, cfg.max_entities_per_question)
    parsed = parsed.transform(checkpoint)
    seeds, bad = okgqa_questions.resolve_entities(parsed, entities)
    seeds = seeds.transform(checkpoint)
    ctx.write("quarantine", bad, quarantine, f"quarantine of {opts.questions}", table="okgqa.quarantine")
    reasons = {r["reason"]: r["count"] for r in ctx.written("quarantine").groupBy("reason").count().collect()}
    good = parsed.where(F.col("reason").isNull())
    n_keys = good.select(F.sum(F.size("entities"))).first()[0] or 0
    summary.counts.update(questions=good.count(), entity_keys=int(n_keys))
    summary.counts.update({f"quarantined_{k}": v for k, v in sorted(reasons.items())})
    # the share of the entity keys of good lines and of the bad lines
    bad_lines = sum(reasons.get(reason, 0) for reason in okgqa_questions.LINE_REASONS)
    fail_past_bad_fraction(
        summary,
        reasons,
        n_keys + bad_lines,
        cfg.max_bad_fraction,
        "okgqa_subgraph.max_bad_fraction",
        "entity keys and question lines",
        f"see {quarantine}",
        source=opts.questions,
    )
    return seeds


@job("okgqa-subgraphs", "OKGQA question subgraphs: 2-hop edge ball pruned by PPR (paper 004)", SubgraphOptions, steps=2)
def subgraphs(ctx: JobContext, opts: SubgraphOptions) -> JobSummary:
    config = ctx.config
    cfg = config.okgqa_subgraph
    dataset = config.require_dataset(opts.dataset)
    name = question_set_name(opts.questions, opts.name)
    summary = ctx.begin(
        dataset=dataset, questions=opts.questions, name=name, **{f"okgqa_subgraph.{k}": v for k, v in vars(cfg).items()}
    )
    entities = ctx.read("entities", catalog.path("entities", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    splits = sorted(opts.splits or dataset_splits(triples))
    summary.params["splits"] = ",".join(splits)
    kg = triples.where(F.col("split").isin(splits)).select("h", "r", "t").distinct()
    out = {
        t: catalog.path(f"okgqa.{t}", dataset=dataset, questions=name)
        for t in ("subgraphs", "subgraph_sizes", "quarantine")
    }
    with ctx.step("questions"):
        seeds = _seeds(ctx, opts, entities, out["quarantine"])
    with ctx.step("subgraphs"):
        pruned, sizes = question_subgraphs(kg, seeds, cfg, ctx.persist)
        ctx.write("subgraph_sizes", sizes, out["subgraph_sizes"], f"sizes of {name}", table="okgqa.subgraph_sizes")
        ctx.write("subgraphs", pruned, out["subgraphs"], f"PPR-pruned subgraphs of {name}", table="okgqa.subgraphs")
    summary.counts.update(size_totals(ctx.written("subgraph_sizes")))
    return summary
