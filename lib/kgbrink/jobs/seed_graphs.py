"""``kgbrink seed-graphs``: seed subgraphs of paper 002 (Algorithm 1, App. A.1; :mod:`kgbrink.synthkgqa.seeds`)
from an ingested dataset, for an LLM step outside kgbrink that writes a question from each.

Writes under ``<dataset>/synthkgqa/<name>/``: ``seed_graphs`` (Delta) and ``prompts.jsonl`` (or ``--out``),
one record per sample with the nodes and triples by key and label and the code's ``flattened`` text
(``label (KEY)-label (PID)-label (KEY)`` joined by ``;``), sorted by ``sample_id``. A set sampled from the
same triples and relations versions, splits and settings is kept, not sampled again, and a set of another
name sampled from the same is copied (``--force`` samples anyway): its commit message records their
fingerprint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import description
from kgbrink.core.files import local_dir, subdirectories, write_single_file
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.kg.dataset import dataset_splits
from kgbrink.synthkgqa.seeds import Plan, prompt_records, sampling_graph, seed_graphs


@dataclass
class SeedGraphOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    name: str = arg("seeds", "seed-graph set name: <dataset>/synthkgqa/<name>/")
    n_samples: int | None = arg(None, "samples (default: setting seed_graphs.n_samples)", type=int)
    seed: int | None = arg(None, "seed (default: setting seed_graphs.seed)", type=int)
    splits: list[str] | None = arg(None, "comma-separated splits of the KG (default: all)", convert=names)
    out: str | None = arg(None, "local file of the prompt records (default: <dataset>/synthkgqa/<name>/prompts.jsonl)")
    force: bool = arg(False, "sample again even when the set was sampled with the same inputs", action="store_true")


def _fingerprint(cfg, splits: list[str], inputs: dict) -> str:
    """The digest of what the samples depend on: the settings but ``prompt_edges``, the splits, the triples
    and relations versions."""
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "prompt_edges"}
    used = {"settings": settings, "splits": splits, **{t: inputs[t].version for t in ("triples", "relations")}}
    return hashlib.sha256(json.dumps(used, sort_keys=True, default=str).encode()).hexdigest()


def _description(name: str, fingerprint: str) -> str:
    """The commit message of the seed-graph set ``name``."""
    return f"seed subgraphs {name}; fingerprint {fingerprint}"


def _same_samples(spark, dataset: str, name: str, fingerprint: str) -> str | None:
    """The seed-graph table sampled with ``fingerprint``: set ``name``'s own, else another set of the
    dataset (the first by name), else None."""

    def sampled(candidate: str) -> str | None:
        path = catalog.path("synthkgqa.seed_graphs", dataset=dataset, questions=candidate)
        return path if description(spark, path) == _description(candidate, fingerprint) else None

    if own := sampled(name):
        return own
    for other in subdirectories(spark, f"{dataset.rstrip('/')}/synthkgqa"):
        if other != name and (found := sampled(other)):
            return found
    return None


@job("seed-graphs", "paper 002 seed subgraphs (Algorithm 1) and their prompt records", SeedGraphOptions, steps=3)
def run(ctx: JobContext, opts: SeedGraphOptions) -> JobSummary:
    config = ctx.config
    sets = [f"seed_graphs.{k}={v}" for k, v in (("n_samples", opts.n_samples), ("seed", opts.seed)) if v is not None]
    cfg = config.with_overrides(sets).seed_graphs if sets else config.seed_graphs
    plan = Plan(
        n_samples=cfg.n_samples,
        n_nodes=cfg.n_nodes,
        n_edges=cfg.n_edges,
        seed=cfg.seed,
        degree=cfg.degree,
        trim_to_edge_limit=cfg.trim_to_edge_limit,
        rejection_draws=cfg.rejection_draws,
        enumerate_below_degree=cfg.enumerate_below_degree,
    )
    dataset = config.require_dataset(opts.dataset)
    if not opts.name or "/" in opts.name:
        raise ValueError(f"--name must be a plain name, got {opts.name!r}")
    summary = ctx.begin(dataset=dataset, name=opts.name, **{f"seed_graphs.{k}": v for k, v in vars(cfg).items()})
    entities = ctx.read("entities", catalog.path("entities", dataset=dataset))
    relations = ctx.read("relations", catalog.path("relations", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    splits = sorted(opts.splits or dataset_splits(triples))
    summary.params["splits"] = ",".join(splits)
    excluded = {r["key"]: r["id"] for r in relations.where(F.col("key").isin(cfg.exclude_relations)).collect()}
    missing = sorted(set(cfg.exclude_relations) - set(excluded))
    if missing:
        summary.extra["exclude_relations_not_in_dataset"] = missing
    kg = triples.where(F.col("split").isin(splits) & ~F.col("r").isin(list(excluded.values()))).select("h", "r", "t")
    path = catalog.path("synthkgqa.seed_graphs", dataset=dataset, questions=opts.name)
    fingerprint = _fingerprint(cfg, splits, summary.inputs)
    note = _description(opts.name, fingerprint)
    source = None if opts.force else _same_samples(ctx.spark, dataset, opts.name, fingerprint)
    if source == path:
        kept = ctx.keep("seed_graphs", path, None)
        summary.extra["reused"] = f"{path} version {kept.version}: sampled from the same inputs and settings"
    elif source is not None:
        with ctx.step("sample"):
            ctx.write("seed_graphs", ctx.read("same_seed_graphs", source), path, note, table="synthkgqa.seed_graphs")
        copied = summary.inputs["same_seed_graphs"].version
        summary.extra["reused"] = f"{source} version {copied}: sampled from the same inputs and settings, copied"
    else:
        with ctx.step("graph"):
            graph = sampling_graph(kg, plan, ctx.persist)
            summary.counts["nodes"] = graph.nodes.count()
            if summary.counts["nodes"] == 0:
                raise JobFailed(
                    f"{dataset}: no triple of splits {splits} is left after excluding {sorted(excluded)}", summary
                )
        with ctx.step("sample"):
            ctx.write("seed_graphs", seed_graphs(graph, plan), path, note, table="synthkgqa.seed_graphs")
    written = ctx.written("seed_graphs")
    s = written.agg(
        F.count("*").alias("n"),
        F.sum(F.col("exhausted").cast("int")).alias("exhausted"),
        F.avg("n_nodes").alias("nodes"),
        F.avg("n_edges").alias("edges"),
        F.sum((F.col("n_edges") > plan.n_edges).cast("int")).alias("over"),
    ).first()
    summary.counts.update(samples=s["n"], exhausted=int(s["exhausted"] or 0), over_edge_limit=int(s["over"] or 0))
    summary.extra.update(mean_nodes=s["nodes"], mean_edges=s["edges"])

    with ctx.step("prompts"):
        base = f"{dataset.rstrip('/')}/synthkgqa/{opts.name}"
        target = local_dir(opts.out or f"{base}/prompts.jsonl")
        records = prompt_records(written, entities, relations, cfg.prompt_edges).orderBy("sample_id")
        write_single_file(records, target, "json", f"{base}/_prompts_staging")
        summary.highlights["prompts"] = str(target)
    return summary
