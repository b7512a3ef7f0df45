"""OKGQA-P jobs (paper 004 Sec. 3.2, App. A.7): ``perturb`` writes RS/RR/ER/ED perturbations of the
question subgraphs (scope ``subgraphs``) or of the whole KG (scope ``kg``) at every level and seed, with
their operation log (:mod:`kgbrink.okgqa.perturb`); ``kg-similarity`` compares each perturbed graph with
its original (ATS, SC2D, SD2) and writes the Fig. 4 report; ``okgqa-sweep`` runs both.

Tables under ``<dataset>/okgqa/<questions>/`` (``<questions>`` = ``kg`` for the whole-KG scope).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import commit_info, table_exists
from kgbrink.core.files import local_dir
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.kg.dataset import dataset_splits
from kgbrink.okgqa import perturb as okgqa_perturb
from kgbrink.okgqa import report, sweep
from kgbrink.okgqa.scorers import Scorer, ScorerInputError

log = logging.getLogger(__name__)


def _floats(text: str | None) -> list[float] | None:
    return [float(x) for x in text.split(",") if x.strip()] if text else None


def _ints(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",") if x.strip()] if text else None


@dataclass
class PerturbOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    name: str | None = arg(
        None, "question set name (okgqa-subgraphs --name) for scope subgraphs", deprecated=("--questions",)
    )
    scope: str | None = arg(None, "subgraphs or kg (default: setting perturbation.scope)", choices=["subgraphs", "kg"])
    methods: list[str] | None = arg(
        None, "comma-separated methods (default: setting perturbation.methods)", convert=names
    )
    levels: list[float] | None = arg(None, "comma-separated levels in (0, 1] (default: setting)", convert=_floats)
    seeds: list[int] | None = arg(None, "comma-separated seeds (default: setting perturbation.seed)", convert=_ints)
    splits: list[str] | None = arg(None, "scope kg: comma-separated splits of the KG (default: all)", convert=names)
    entity_vectors: str | None = arg(None, "embeddings scorer: Delta/Parquet table (entity int, vec array<float>)")
    relation_vectors: str | None = arg(None, "embeddings scorer: Delta/Parquet table (relation int, vec array<float>)")
    scores: str | None = arg(None, "scores scorer: Delta/Parquet table (h int, r int, t int, score double)")
    report_dir: str | None = arg(None, "kg-similarity: local folder of the report (default: <scope dir>/report)")


class _Scope:
    """What both jobs need: the scope's settings, its original triples and the scorer."""

    def __init__(self, ctx: JobContext, opts: PerturbOptions):
        config = ctx.config
        cfg = config.perturbation
        self.cfg = cfg
        self.dataset = config.require_dataset(opts.dataset)
        self.scope = opts.scope or cfg.scope
        self.methods = opts.methods or cfg.methods
        self.levels = sorted(opts.levels or cfg.levels)
        self.seeds = opts.seeds or [cfg.seed]
        # the command line's methods and levels pass the settings' checks (ConfigError naming a bad value)
        config.with_overrides(
            [f"perturbation.methods={','.join(self.methods)}", f"perturbation.levels={','.join(map(str, self.levels))}"]
        )
        if self.scope == "subgraphs" and not opts.name:
            raise ValueError("scope subgraphs needs --name (the name given to okgqa-subgraphs)")
        self.name = "kg" if self.scope == "kg" else opts.name
        triples = ctx.read("triples", catalog.path("triples", dataset=self.dataset))
        self.splits = sorted(opts.splits or dataset_splits(triples))
        # the perturbed table's description: kg-similarity's KG and scorer must be the ones perturb used
        triples_version = ctx.summary.inputs["triples"].version
        self.note = f"perturbed {self.name} on {'+'.join(self.splits)} of triples version {triples_version}"
        kg = triples.where(F.col("split").isin(self.splits))
        self.kg = kg.select("h", "r", "t").distinct()
        if self.scope == "kg":
            self.original = (
                kg.groupBy("h", "r", "t").agg(F.min("split").alias("split")).withColumn("scope_key", F.lit("kg"))
            )
        else:
            sub = ctx.read("subgraphs", catalog.path("okgqa.subgraphs", dataset=self.dataset, questions=self.name))
            self.original = sub.select(
                F.col("qid").alias("scope_key"), "h", "r", "t", F.lit(None).cast("string").alias("split")
            )
        given = {
            name: ctx.read_input(name, getattr(opts, name)) if getattr(opts, name) is not None else None
            for name in ("entity_vectors", "relation_vectors", "scores")
        }
        self.scorer = Scorer(cfg.scorer, self.kg, self.seeds[0], cfg.scorer_model, cfg.gamma, *given.values())
        self.path = {
            t: catalog.path(f"okgqa.{t}", dataset=self.dataset, questions=self.name)
            for t in ("perturbed", "perturbations", "perturbation_log", "kg_similarity")
        }

    def params(self) -> dict:
        return dict(
            dataset=self.dataset,
            scope=self.scope,
            questions=self.name,
            methods=",".join(self.methods),
            levels=",".join(map(str, self.levels)),
            seeds=",".join(map(str, self.seeds)),
            splits=",".join(self.splits),
            scorer=self.cfg.scorer,
            paper_scorer=self.scorer.paper_scorer,
        )


def _operations(ctx: JobContext, s: _Scope, original: DataFrame) -> tuple[list, list, dict]:
    """Every method's perturbation per seed: its log rows, its nested graphs (the original and every level
    in one table; a new triple takes the split of the one it replaces) and its counts per level."""
    whole = s.scope == "kg"
    scoped = original.select("scope_key", "h", "r", "t")
    logs, graphs, counts = [], [], {}
    for seed in s.seeds:
        scorer = dataclasses.replace(s.scorer, seed=seed)
        for method in s.methods:
            try:
                made = okgqa_perturb.perturbation(scoped, method, s.levels, seed, whole, scorer)
            except ScorerInputError as e:
                raise JobFailed(f"{method}: {e}", ctx.summary) from None
            logs.append(okgqa_perturb.log_rows(made.changed, method, seed))
            counts.update({(method, level, seed): c for level, c in made.levels.items()})
            graph = okgqa_perturb.nested_graphs(original, made.changed, s.levels, method)
            graphs.append(graph.select(F.lit(method).alias("method"), F.lit(seed).alias("seed"), *graph.columns))
    return logs, graphs, counts


def _level_rows(ctx: JobContext, s: _Scope, n: int, counts: dict) -> list[dict]:
    """One row per method, level and seed: operations asked, done, no-ops, skipped, reached, collisions
    (0 by construction: no operation creates a triple its graph holds) and the graph's triples; a warning
    for every level some scope fell short of."""
    # triples per graph: one scan, a conditional count per level (no row per level)
    per_level = [
        F.count(F.when(F.array_contains("levels", float(lv)), 1)).alias(str(i)) for i, lv in enumerate(s.levels)
    ]
    sizes = ctx.written("perturbed").groupBy("method", "seed").agg(*per_level).collect()
    after = {(r["method"], lv, r["seed"]): r[str(i)] for r in sizes for i, lv in enumerate(s.levels)}
    rows = []
    for (method, level, seed), c in sorted(counts.items()):
        kept = after.get((method, level, seed), 0)
        collisions = n - kept - (c["operations"] if method == "ED" else 0)
        fields = ("requested", "operations", "noop", "skipped", "reached")
        rows.append(
            dict(
                method=method, level=level, seed=seed, **{k: c[k] for k in fields}, collisions=collisions, triples=kept
            )
        )
        if c["short_scopes"]:
            where = "the KG" if s.scope == "kg" else f"{c['short_scopes']} of the question subgraphs"
            why = (
                "their heads have no free target left"
                if method == "ER"
                else "the other candidates would create a triple already there"
            )
            warning = (
                f"{method} at level {level:g} (seed {seed}) reached {c['reached']:.4%}: {c['operations']:,} of "
                f"{c['requested']:,} operations in {where}; {why}"
            )
            log.warning(warning)
            ctx.summary.extra.setdefault("warnings", []).append(warning)
    return rows


@job("perturb", "OKGQA-P perturbations RS/RR/ER/ED of question subgraphs or the whole KG", PerturbOptions, steps=3)
def perturb(ctx: JobContext, opts: PerturbOptions) -> JobSummary:
    s = _Scope(ctx, opts)
    summary = ctx.begin(**s.params())
    original = s.original.transform(checkpoint)
    with ctx.step("operations"):
        logs, graphs, counts = _operations(ctx, s, original)
    with ctx.step("write_log"):
        log_rows = reduce(DataFrame.unionByName, logs)
        path = s.path["perturbation_log"]
        ctx.write("perturbation_log", log_rows, path, "perturbation log", table="okgqa.perturbation_log")
    with ctx.step("write_perturbed"):
        graph_rows = reduce(DataFrame.unionByName, graphs)
        ctx.write("perturbed", graph_rows, s.path["perturbed"], s.note, table="okgqa.perturbed")
    n = original.count()
    rows = _level_rows(ctx, s, n, counts)
    summary.counts.update(triples_in_scope=n, scopes=original.select("scope_key").distinct().count())
    summary.results = rows
    schema = catalog.table("okgqa.perturbations").schema
    ctx.write(
        "perturbations", ctx.spark.createDataFrame([tuple(r.values()) for r in rows], schema), s.path["perturbations"]
    )
    return summary


@job(
    "kg-similarity",
    "ATS, SC2D, SD2 of perturbed graphs against their originals, with the Fig. 4 report",
    PerturbOptions,
    steps=2,
)
def kg_similarity(ctx: JobContext, opts: PerturbOptions) -> JobSummary:
    s = _Scope(ctx, opts)
    summary = ctx.begin(**s.params())
    if not table_exists(ctx.spark, s.path["perturbations"]):
        raise JobFailed(f"no perturbations under {s.path['perturbations']}: run `kgbrink perturb` first", summary)
    perturbed = ctx.read("perturbed", s.path["perturbed"])
    pinned = ctx.summary.inputs["perturbed"].version
    made_from = commit_info(ctx.spark, s.path["perturbed"], pinned)["userMetadata"]
    if made_from != s.note:  # the original graph of the perturbed table must be this run's KG (and its scorer's)
        raise JobFailed(
            f"{s.path['perturbed']} (version {pinned}) holds {made_from!r}, this run reads {s.note!r}: run "
            "`kgbrink perturb` with the same --splits on this version of the triples first",
            summary,
        )
    perturbed = perturbed.where(F.col("method").isin(s.methods) & F.col("seed").isin(s.seeds))
    combos = [(m, float(lv), sd) for m in s.methods for lv in s.levels for sd in s.seeds]
    done = ctx.read("perturbations", s.path["perturbations"]).select("method", "level", "seed").collect()
    missing = set(combos) - {(r["method"], r["level"], r["seed"]) for r in done}
    if missing:
        raise JobFailed(
            f"{s.path['perturbed']} has no perturbed graph for {sorted(missing)[:5]}: run `kgbrink perturb` first",
            summary,
        )
    with ctx.step("similarity"):
        try:
            if s.scope == "kg":
                table = sweep.kg_similarity(ctx.spark, perturbed, combos, s.scorer, s.cfg.max_wedges)
            else:
                graphs = okgqa_perturb.per_level(perturbed).where(F.col("level").isin(s.levels))
                table = sweep.subgraph_similarity(
                    s.original.select("scope_key", "h", "r", "t"), graphs, combos, s.scorer
                )
        except ScorerInputError as e:
            raise JobFailed(str(e), summary) from None
        log = ctx.read("perturbation_log", s.path["perturbation_log"])
        table = sweep.with_operations(table, log.where(F.col("seed").isin(s.seeds)), s.levels)
        ctx.write(
            "kg_similarity", table, s.path["kg_similarity"], f"similarity of {s.name}", table="okgqa.kg_similarity"
        )
    with ctx.step("report"):
        means = sweep.summary(ctx.written("kg_similarity").toPandas())
        out = local_dir(opts.report_dir or str(Path(s.path["kg_similarity"]).parent / "report"))
        summary.artifacts.extend(report.write(means, out, s.cfg.scorer, s.scorer.paper_scorer))
    summary.results = means.to_dict("records")
    for row in means[means["reached"] < 1].itertuples():
        warning = (
            f"{row.method} at level {row.level:g} ({row.scope}) reached {row.reached:.4f} "
            f"({row.short_graphs} of {row.n_graphs} graphs short): see `kgbrink perturb`'s perturbations table"
        )
        summary.extra.setdefault("warnings", []).append(warning)
    summary.counts.update(graphs=summary.outputs["kg_similarity"].rows)
    summary.highlights["report"] = str(out / "report.md")
    return summary


@job("okgqa-sweep", "perturb, then kg-similarity: methods x levels x seeds (paper 004 Fig. 4)", PerturbOptions, steps=2)
def okgqa_sweep(ctx: JobContext, opts: PerturbOptions) -> JobSummary:
    dataset = ctx.config.require_dataset(opts.dataset)
    summary = ctx.begin(dataset=dataset, scope=opts.scope or ctx.config.perturbation.scope)
    with ctx.step("perturb"):
        summary.extra["perturb"] = ctx.run("perturb", opts).as_dict()
    with ctx.step("kg_similarity"):
        similarity = ctx.run("kg-similarity", opts)
    summary.results = similarity.results
    summary.highlights.update(similarity.highlights)
    return summary
