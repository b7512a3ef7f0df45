"""``kgbrink mcq``: ProbeKGC multiple-choice questions (paper 003, spec 3.A) from an ingested dataset.

Samples ``mcq.n_triples`` triples of ``mcq.split`` by seeded hash, two queries each, and per query the
option sets of ``mcq.difficulties`` (:mod:`kgbrink.mcq.options`): easy (uniform over the entities),
medium (the answer-side pool of the relation in the KG of ``stats.splits``, optionally within a type of
the gold through ``mcq.type_relation``), hard (the best-scored wrong candidates of ``--scores``, or the
gold's nearest neighbours in ``--entity-vectors`` with ``mcq.hard_mode: embedding_neighbours``; left out
with a warning when neither is given and the difficulties are the defaults, as the release does). True
answers are checked against ``mcq.filter_splits`` (default every split).

Writes under ``<dataset>/mcq/<name>/``: ``questions`` (Delta, the spec's ``mcq_questions``),
``statistics`` (the README's table, spec 3.D) and the JSON Lines files (:mod:`kgbrink.mcq.render`)
``export/<rendering>/test_{simple,medium,hard}.jsonl`` and ``export/<rendering>/fixed_<P>/...`` (the
position-bias variants), or under ``--out``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.files import delete_path, json_array_from_lines, local_dir, merge_parts, write_lines
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.settings import McqSettings
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.kg.dataset import dataset_splits
from kgbrink.mcq import options, render

log = logging.getLogger(__name__)

SCORE_COLUMNS = ("h", "r", "t", "side", "candidate", "score")


@dataclass
class McqOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    name: str = arg("probekgc", "question set name: <dataset>/mcq/<name>/")
    split: str | None = arg(None, "split the triples are sampled from (default: setting mcq.split)")
    n_triples: int | None = arg(None, "triples sampled (default: setting mcq.n_triples)", type=int)
    seed: int | None = arg(None, "seed (default: setting mcq.seed)", type=int)
    difficulties: list[str] | None = arg(
        None,
        "comma-separated difficulties: easy, medium, hard (default: setting mcq.difficulties, all three; hard only "
        "with --scores or --entity-vectors, else easy and medium with a warning)",
        convert=names,
    )
    scores: str | None = arg(
        None, "hard: candidate scores, Delta table or Parquet file/directory/glob (h, r, t, side, candidate, score)"
    )
    scores_model: str | None = arg(None, "hard: the model whose rows of --scores are used (scores with a model column)")
    entity_vectors: str | None = arg(
        None, "hard (mcq.hard_mode embedding_neighbours): Delta/Parquet table (entity int, vec array<float>)"
    )
    templates: str | None = arg(
        None, "JSON file {relation key: {'head prediction': ..., 'tail prediction': ...}} (ProbeKGC relation.json)"
    )
    out: str | None = arg(None, "local folder of the JSON Lines files (default: <dataset>/mcq/<name>/export)")


def _settings(ctx: JobContext, opts: McqOptions):
    """``mcq`` settings with the command line's values, checked as settings (ConfigError naming them)."""
    sets = []
    if opts.split is not None:
        sets.append(f"mcq.split={opts.split}")
    if opts.n_triples is not None:
        sets.append(f"mcq.n_triples={opts.n_triples}")
    if opts.seed is not None:
        sets.append(f"mcq.seed={opts.seed}")
    if opts.difficulties:
        sets.append(f"mcq.difficulties={','.join(opts.difficulties)}")
    if opts.templates:
        given = json.loads(Path(opts.templates).read_text())
        if not isinstance(given, dict):
            raise ValueError(f"{opts.templates}: expected a JSON object of relation keys")
        sets.append(f"mcq.templates={json.dumps({**ctx.config.mcq.templates, **given})}")
    return ctx.config.with_overrides(sets).mcq if sets else ctx.config.mcq


def _scores(ctx: JobContext, opts: McqOptions, summary: JobSummary) -> DataFrame:
    raw = ctx.read_input("scores", opts.scores)
    missing = [c for c in SCORE_COLUMNS if c not in raw.columns]
    if missing:
        raise JobFailed(
            f"{opts.scores}: missing column(s) {', '.join(missing)} (has {', '.join(raw.columns)})", summary
        )
    if "model" in raw.columns:
        if opts.scores_model:
            raw = raw.where(F.col("model") == opts.scores_model)
        else:
            models = [r[0] for r in raw.select("model").distinct().limit(3).collect()]
            if len(models) > 1:
                raise JobFailed(
                    f"{opts.scores} holds several models ({models}): choose one with --scores-model", summary
                )
    return raw


@dataclass
class _QuestionSet:
    """A ProbeKGC question set's settings, inputs and tables, checked."""

    name: str
    dataset: str
    cfg: object  # McqSettings
    difficulties: list[str]
    entities: DataFrame
    relations: DataFrame
    triples: DataFrame
    kg: DataFrame  # the KG of stats.splits (its users de-duplicate)
    known: DataFrame  # the triples of mcq.filter_splits: true answers
    n_entities: int
    type_id: int | None
    scores: DataFrame | None

    @property
    def base(self) -> str:
        return f"{self.dataset.rstrip('/')}/mcq/{self.name}"

    def path(self, table: str) -> str:
        return catalog.path(f"mcq.{table}", dataset=self.dataset, questions=self.name)


def _check_hard(cfg, opts: McqOptions, summary: JobSummary) -> None:
    if cfg.hard_mode == "scores" and not opts.scores:
        raise JobFailed(
            "the hard difficulty needs model scores: --scores (candidate scores h, r, t, side, candidate, "
            "score), or --entity-vectors with mcq.hard_mode=embedding_neighbours; without them, "
            "--difficulties easy,medium",
            summary,
        )
    if cfg.hard_mode == "embedding_neighbours" and not opts.entity_vectors:
        raise JobFailed("mcq.hard_mode embedding_neighbours needs --entity-vectors (entity, vec)", summary)
    if cfg.hard_mode == "embedding_neighbours" and cfg.hard_restrict_to_medium_pool:
        raise JobFailed("mcq.hard_restrict_to_medium_pool applies to hard_mode scores only", summary)


def _entity_count(entities: DataFrame, dataset: str, summary: JobSummary) -> int:
    """The number of entities, whose ids must be dense; a warning when most have no label."""
    labelled = F.count(F.when(F.trim("label") != "", 1)).alias("labelled")
    size = entities.agg(F.count("*").alias("n"), F.max("id").alias("top"), labelled).first()
    n_entities = int(size["n"])
    if size["labelled"] < n_entities / 2:
        # the text prompts (questions.text, export/text) name an entity without a label by its key
        warning = (
            f"{dataset}/entities: {size['labelled']:,} of {n_entities:,} entities have a label, so the text "
            "rendering names the others by their keys (WN18RR's and the PROBE dumps' keys are numeric ids); "
            "ingest an alias file to name them: `kgbrink ingest --entity-aliases` (docs/jobs.md)"
        )
        log.warning(warning)
        summary.extra.setdefault("warnings", []).append(warning)
    if size["top"] is not None and size["top"] != n_entities - 1:
        raise JobFailed(f"{dataset}/entities: ids are not dense 0..{n_entities - 1} (max {size['top']})", summary)
    return n_entities


def _open(ctx: JobContext, opts: McqOptions) -> _QuestionSet:
    config = ctx.config
    cfg = _settings(ctx, opts)
    dataset = config.require_dataset(opts.dataset)
    if not opts.name or "/" in opts.name:
        raise ValueError(f"--name must be a plain name, got {opts.name!r}")
    difficulties = [d for d in options.DIFFICULTIES if d in cfg.difficulties]
    # by default, what runs without a model (as the release does): hard only with its input
    hard_input = opts.entity_vectors if cfg.hard_mode == "embedding_neighbours" else opts.scores
    by_default = not opts.difficulties and list(cfg.difficulties) == list(McqSettings().difficulties)
    without_hard = "hard" in difficulties and by_default and not hard_input
    if without_hard:
        difficulties.remove("hard")
        cfg = dataclasses.replace(cfg, difficulties=difficulties)
    summary = ctx.begin(
        dataset=dataset,
        name=opts.name,
        scores=opts.scores,
        entity_vectors=opts.entity_vectors,
        kg_splits=",".join(config.stats.splits),
        **{
            f"mcq.{k}": ",".join(map(str, v)) if isinstance(v, list) else v
            for k, v in vars(cfg).items()
            if k not in ("templates", "default_templates")
        },
    )
    if without_hard:
        warning = (
            "no hard options: they need a model's candidate scores (--scores), or --entity-vectors with "
            "mcq.hard_mode=embedding_neighbours; built easy and medium"
        )
        log.warning(warning)
        summary.extra.setdefault("warnings", []).append(warning)
    if "hard" in difficulties:
        _check_hard(cfg, opts, summary)
    entities = ctx.read("entities", catalog.path("entities", dataset=dataset))
    relations = ctx.read("relations", catalog.path("relations", dataset=dataset))
    triples = ctx.read("triples", catalog.path("triples", dataset=dataset))
    splits = dataset_splits(triples)
    if cfg.split not in splits:
        raise JobFailed(f"{dataset} has no split {cfg.split!r} (splits: {', '.join(splits)})", summary)
    filter_splits = cfg.filter_splits or splits
    summary.params["filter_splits"] = ",".join(filter_splits)
    kg = triples.where(F.col("split").isin(config.stats.splits)).select("h", "r", "t")
    known = triples.where(F.col("split").isin(filter_splits))
    n_entities = _entity_count(entities, dataset, summary)
    type_id = None
    if cfg.type_relation is not None:
        found = relations.where(F.col("key") == cfg.type_relation).select("id").first()
        if found is None:
            raise JobFailed(f"mcq.type_relation {cfg.type_relation!r} is not a relation key of {dataset}", summary)
        type_id = int(found["id"])
    scores = _scores(ctx, opts, summary) if "hard" in difficulties and cfg.hard_mode == "scores" else None
    return _QuestionSet(
        opts.name, dataset, cfg, difficulties, entities, relations, triples, kg, known, n_entities, type_id, scores
    )


def _questions(ctx: JobContext, opts: McqOptions, qs: _QuestionSet, queries, excluded, degrees) -> tuple:
    """The option sets of every query and difficulty, the complete ones written with their text; the
    questions counted by difficulty, completeness and fallback, and the relation templates."""
    spark, cfg = ctx.spark, qs.cfg
    vectors = None
    if "hard" in qs.difficulties and cfg.hard_mode == "embedding_neighbours":
        vectors = ctx.read_input("entity_vectors", opts.entity_vectors)
    plan = options.Plan(
        qs.difficulties,
        cfg.options,
        cfg.seed,
        cfg.easy_candidates,
        qs.type_id,
        cfg.hard_mode,
        cfg.hard_restrict_to_medium_pool,
    )
    questions = options.build(queries, excluded, degrees, qs.kg, qs.n_entities, plan, qs.scores, vectors)
    counts = {
        (r["difficulty"], r["complete"], r["fallback"]): r["n"]
        for r in questions.groupBy("difficulty", "complete", "fallback").agg(F.count("*").alias("n")).collect()
    }
    complete = questions.where(F.col("complete")).drop("complete")
    templates = render.templates(spark, qs.relations, cfg.templates, cfg.default_templates).transform(checkpoint)
    with_text = render.with_text(complete, qs.entities, qs.relations, templates, cfg.options)
    ctx.write("questions", with_text, qs.path("questions"), f"ProbeKGC questions {qs.name}", table="mcq.questions")
    return counts, templates


def _statistics(ctx: JobContext, qs: _QuestionSet) -> list[dict]:
    """The README's statistics table (spec 3.D), written; its rows in difficulty order."""
    order = {d: i for i, d in enumerate(options.DIFFICULTIES)}
    stats = options.statistics(ctx.written("questions"), qs.cfg.options).orderBy(
        F.array_position(F.array(*[F.lit(d) for d in options.DIFFICULTIES]), F.col("difficulty"))
    )
    ctx.write("statistics", stats, qs.path("statistics"), f"statistics of {qs.name}", table="mcq.statistics")
    return sorted((r.asDict() for r in ctx.written("statistics").collect()), key=lambda r: order[r["difficulty"]])


@job("mcq", "ProbeKGC multiple-choice questions with easy, medium and hard options (paper 003)", McqOptions, steps=4)
def run(ctx: JobContext, opts: McqOptions) -> JobSummary:
    qs = _open(ctx, opts)
    cfg, summary = qs.cfg, ctx.summary
    with ctx.step("sample"):
        sampled = options.sample_triples(qs.triples.where(F.col("split") == cfg.split), cfg.n_triples, cfg.seed)
        queries = options.queries(sampled).transform(checkpoint)
        excluded = options.excluded_entities(queries, qs.known)
        degrees = options.topic_degrees(qs.kg, queries).transform(checkpoint)
        n_queries = queries.count()
        if queries.select("qid").distinct().count() != n_queries:
            raise JobFailed("two sampled triples share a 64-bit hash: choose another mcq.seed", summary)
    with ctx.step("options"):
        counts, templates = _questions(ctx, opts, qs, queries, excluded, degrees)
    with ctx.step("statistics"):
        summary.results = _statistics(ctx, qs)
    with ctx.step("export"):
        out = local_dir(opts.out or f"{qs.base}/export")
        staging = f"{qs.base}/_export_staging"
        summary.extra["files"] = _export(ctx, cfg, qs.entities, qs.relations, templates, out, staging, qs.difficulties)
        summary.highlights["export"] = str(out)
    summary.counts.update(triples=sampled.count(), queries=n_queries)
    for d in qs.difficulties:
        summary.counts[f"questions_{d}"] = sum(n for (dd, c, _), n in counts.items() if dd == d and c)
        summary.counts[f"fallback_{d}"] = sum(n for (dd, c, f), n in counts.items() if dd == d and c and f)
        summary.counts[f"dropped_{d}"] = sum(n for (dd, c, _), n in counts.items() if dd == d and not c)
    return summary


def _export(ctx, cfg, entities, relations, templates, out: Path, staging: str, difficulties) -> list[str]:
    """The JSON Lines files of every rendering, difficulty and (``mcq.position_variants``) fixed gold
    letter, each sorted by id; one Spark write per rendering, parts merged per file."""
    spark = ctx.spark
    questions = ctx.written("questions")
    fixed = [-1, *range(cfg.options)] if cfg.position_variants else [-1]
    written = []
    for rendering in cfg.renderings:
        frame = render.named(questions, render.names(entities, rendering), render.names(relations, rendering))
        if rendering == "text":
            frame = frame.join(templates, "r")
        frame = frame.withColumn("_fixed", F.explode(F.array(*[F.lit(p) for p in fixed])))
        variant = frame.withColumns(
            {
                "options": F.when(F.col("_fixed") < 0, F.col("options")).otherwise(
                    render.swapped("options", "gold_position", F.col("_fixed"))
                ),
                "option_names": F.when(F.col("_fixed") < 0, F.col("option_names")).otherwise(
                    render.swapped("option_names", "gold_position", F.col("_fixed"))
                ),
            }
        ).withColumn("gold_position", F.when(F.col("_fixed") < 0, F.col("gold_position")).otherwise(F.col("_fixed")))
        file_name = F.element_at(
            F.create_map(*[F.lit(x) for kv in render.FILE_NAMES.items() for x in kv]), F.col("difficulty")
        )
        letter = F.element_at(F.array(*[F.lit(x) for x in render.LETTERS]), F.col("_fixed") + 1)
        prefix = F.when(F.col("_fixed") < 0, F.lit("")).otherwise(F.concat(F.lit("fixed_"), letter, F.lit(".")))
        variant = variant.withColumn("file", F.concat(prefix, file_name))
        records = render.records(variant, rendering, cfg.options, F.col("_fixed"), keep=["file"]).transform(checkpoint)
        target = f"{staging}/{rendering}"
        write_lines(records.orderBy("file", "id"), target, "json", partition_by="file")
        keys = [r["file"] for r in records.select("file").distinct().collect()]
        for key in sorted(keys):
            sub, _, stem = key.rpartition(".")  # fixed_A.test_simple -> fixed_A/test_simple.jsonl
            path = out / rendering / sub / f"{stem}.jsonl"
            merge_parts(spark, f"{target}/file={key}", str(path))
            if "json" in cfg.export_formats:
                json_array_from_lines(path, path.with_suffix(".json"))
                written.append(str(path.with_suffix(".json")))
            if "jsonl" in cfg.export_formats:
                written.append(str(path))
            else:
                path.unlink()
        delete_path(spark, target)
    delete_path(spark, staging)
    return written
