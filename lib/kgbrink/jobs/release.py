"""``kgbrink release``: the benchmarks a settings file enables, from one dataset, as one versioned release.

Under the release root (``--out``, default ``release.out``; local or ``s3a://``) each release is a folder
``v1``, ``v2``, ... and ``LATEST`` names the current one; ``_timings.json`` beside it keeps each benchmark's
seconds when last built, the next release's estimate of its time left. A release holds one folder per configuration
(Parquet tables, JSON Lines questions; :mod:`kgbrink.release.layout`), ``README.md`` (the Hugging Face
dataset card), ``croissant.json``, ``SHA256SUMS``, ``release.json`` (the manifest: the dataset's input
table versions, each benchmark's fingerprint, configurations, files and rows), ``report/`` and, last,
``_kgbrink_manifest.json`` (the manifest of ``kgbrink stage``: every file's size and SHA-256, so ``kgbrink
fetch --from ROOT`` downloads the release checked).

A benchmark is built (its jobs run through ``ctx.run``) only when its fingerprint (input table versions,
settings, input files) differs from the current release's; the others' files are copied from it. When
nothing differs the job does nothing and says so. A benchmark built is taken from what the dataset
already holds when that is current (:mod:`kgbrink.release.reuse`): the BRINK variant ``kgbrink run`` or
``build`` made with the same inputs and settings is exported, not mined again, and current statistics
are not computed again (``reused_from_dataset`` in the summary; ``--force`` builds them anyway). The
files' bytes depend only on the dataset and settings.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog, publish
from kgbrink.core.console import clock
from kgbrink.core.delta import commit_timestamp, table_exists
from kgbrink.core.files import delete_path
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobSummary
from kgbrink.release import card, croissant, layout, reuse
from kgbrink.release import report as release_report
from kgbrink.release import results as release_results
from kgbrink.release.benchmarks import BY_NAME, NAME, FilePart
from kgbrink.storage import staging
from kgbrink.synthkgqa import generator

T = TypeVar("T")


@dataclass
class ReleaseOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    out: str | None = arg(None, "release root, local or s3a:// (default: setting release.out)")
    questions: str | None = arg(None, "synthkgqa: question file (JSON Lines by key) instead of planted questions")
    okgqa_questions: str | None = arg(
        None,
        'okgqa: questions whose subgraphs are perturbed and released: JSON Lines {"qid", "entities": [keys], '
        '"question", "references"?} (default: the whole-KG perturbations only)',
    )
    scores: str | None = arg(None, "probekgc: candidate scores for the hard options (kgbrink rank's format)")
    scores_model: str | None = arg(None, "probekgc: the model of --scores to use (scores with a model column)")
    force: bool = arg(
        False, "rebuild every enabled benchmark, also what the dataset holds current", action="store_true"
    )


def _file_digest(path: str | None) -> str | None:
    if path is None or is_uri(path) or not Path(path).is_file():
        return path
    return staging.sha256_of(Path(path))


@job(
    "release",
    "the enabled benchmarks as one versioned release: Parquet, JSON Lines, dataset card, Croissant",
    ReleaseOptions,
    steps=len(layout.BENCHMARKS) + 1,
)
def run(ctx: JobContext, opts: ReleaseOptions) -> JobSummary:
    config = ctx.config
    dataset = config.require_dataset(opts.dataset)
    root = (opts.out or config.release.out).rstrip("/")
    unknown = sorted(set(config.release.benchmarks) - set(layout.BENCHMARKS))
    if unknown:
        raise ValueError(f"release.benchmarks: unknown {', '.join(unknown)} (known: {', '.join(layout.BENCHMARKS)})")
    enabled = [b for b in layout.BENCHMARKS if b in config.release.benchmarks]
    # the results config: when the dataset holds kgbrink predict's scores
    has_results = table_exists(ctx.spark, catalog.path("predict.results", dataset=dataset))
    enabled = [b for b in enabled if b != "results" or has_results]
    if config.release.results and has_results and "results" not in enabled:
        enabled.append("results")
    summary = ctx.begin(dataset=dataset, out=root, benchmarks=",".join(enabled))
    plan = _plan(ctx, opts, dataset, root, enabled)
    if plan.previous is not None and not plan.todo and sorted(plan.previous["benchmarks"]) == sorted(enabled):
        summary.counts.update(rebuilt=0, reused=len(enabled))
        summary.highlights["release"] = f"{root}/{plan.latest}: unchanged (every input version and setting as before)"
        summary.extra.update(version=plan.latest, rebuilt=[], reused=enabled)
        return summary
    env = _Env(
        ctx, opts, dataset, f"{root}/v{plan.number}", Path(config.data_dir) / "_release_work" / f"v{plan.number}"
    )
    env.inputs, env.fingerprints = plan.inputs, plan.fingerprints
    delete_path(ctx.spark, env.target)
    shutil.rmtree(env.work, ignore_errors=True)
    configs = _build(env, plan, enabled, root)
    with ctx.step("describe"):
        files = _describe(env, plan, enabled, configs)
        publish.write_text(ctx.spark, f"{root}/LATEST", f"v{plan.number}\n")
    shutil.rmtree(env.work, ignore_errors=True)
    rebuilt = [b for b in enabled if b in plan.todo]
    # a benchmark taken from the dataset's current tables took less than its build: no estimate of one
    built = [b for b in rebuilt if b not in env.from_dataset]
    timings = {**plan.timings, **{b: round(summary.timings[b], 1) for b in built}}
    publish.write_text(ctx.spark, f"{root}/{layout.TIMINGS}", layout.canonical_json(timings) + "\n")
    reused = [b for b in enabled if b not in plan.todo]
    from_dataset = [b for b in rebuilt if b in env.from_dataset]
    summary.counts.update(rebuilt=len(rebuilt), reused=len(reused), reused_from_dataset=len(from_dataset))
    summary.counts.update(configs=len(configs), files=files)
    summary.counts.update({f"rows_{c.name}": sum(c.rows.values()) for c in configs})
    summary.extra.update(version=f"v{plan.number}", rebuilt=rebuilt, reused=reused, reused_from_dataset=from_dataset)
    summary.highlights["release"] = (
        f"{env.target}: rebuilt {', '.join(rebuilt) or 'none'}"
        + (f" ({', '.join(from_dataset)} from the dataset's current tables)" if from_dataset else "")
        + (f"; reused {', '.join(reused)} from {plan.latest}" if reused else "")
    )
    summary.artifacts.append(f"{env.target}/README.md")
    return summary


def _build(env: _Env, plan: _Plan, enabled: list[str], root: str) -> list[layout.Config]:
    """Each enabled benchmark's configurations, built or copied from the current release, in the order of
    ``enabled``: one after another, with the time left at the last build's times before each build, or
    ``release.parallel`` at once (:func:`_build_concurrently`)."""
    parallel = min(env.ctx.config.release.parallel, len(enabled))
    if parallel > 1:
        built = _build_concurrently(env, plan, enabled, root, parallel)
    else:
        built = {}
        for benchmark in enabled:
            todo = [b for b in plan.todo if enabled.index(b) >= enabled.index(benchmark)]
            left = layout.time_left(plan.timings, todo)
            if benchmark in plan.todo and left:
                env.ctx.progress.note(
                    f"      about {clock(left)} left at the times of the last release that built them"
                )
            built[benchmark] = _build_one(env, plan=plan, root=root, benchmark=benchmark)
    return [c for benchmark in enabled for c in built[benchmark] if c.files]


def _build_one(env: _Env, *, plan: _Plan, root: str, benchmark: str) -> list[layout.Config]:
    """One benchmark's configurations as a step: built when it is to do, else copied from the current
    release; those without rows are named in its notes."""
    with env.ctx.step(benchmark):
        if benchmark in plan.todo:
            built = BUILDERS[benchmark](env)
        else:
            built = _reuse(env, f"{root}/{plan.latest}", plan.previous, benchmark)
    empty = [c.name for c in built if not c.files]
    if empty:
        note = f"Without rows, so not in this release: {', '.join(empty)}."
        env.notes[benchmark] = " ".join(x for x in (env.notes.get(benchmark, ""), note) if x)
    return built


def _build_concurrently(env: _Env, plan: _Plan, enabled: list[str], root: str, parallel: int) -> dict:
    """:func:`_build_one` of every enabled benchmark, ``parallel`` at once (:func:`_in_threads`): a
    cluster's cores take the tasks of several benchmarks' jobs, and the release's critical path is its
    longest benchmark's, not their sum. The benchmarks share no table but the dataset's, read at the
    versions the plan pinned; each file's bytes are those of a release built one after another."""
    left = layout.time_left(plan.timings, plan.todo)
    if left:
        env.ctx.progress.note(
            f"      {parallel} benchmarks at a time; about {clock(left)} one after another, as last built"
        )
    with env.ctx.progress.watching(env.ctx.spark, "benchmarks"):
        built = _in_threads(
            env, [(b, functools.partial(_build_one, plan=plan, root=root, benchmark=b)) for b in enabled]
        )
    return dict(zip(enabled, built, strict=True))


def _in_threads(env: _Env, works: list[tuple[str, Callable[[_Env], T]]]) -> list[T]:
    """Each ``(name, work)`` as ``work(env)``, ``release.parallel`` at once (:meth:`JobContext.in_threads`:
    each thread with a context of its own), the results in order; the release's first failure raised."""
    return env.ctx.in_threads(
        [(name, functools.partial(_with_context, env=env, work=work)) for name, work in works],
        env.ctx.config.release.parallel,
        env.failures,
    )


def _with_context(ctx: JobContext, env: _Env, work: Callable[[_Env], T]) -> T:
    return work(env if ctx is env.ctx else dataclasses.replace(env, ctx=ctx))


@dataclass
class _Plan:
    """What this release starts from: the dataset's input versions, the settings sections, each enabled
    benchmark's fingerprint, the current release (``latest``, its checked manifest) and what to build."""

    inputs: dict
    sections: dict
    fingerprints: dict
    latest: str | None
    previous: dict | None
    todo: list
    number: int
    timings: dict  # seconds of each benchmark when last built (layout.read_timings)


def _plan(ctx: JobContext, opts: ReleaseOptions, dataset: str, root: str, enabled: list[str]) -> _Plan:
    config, spark = ctx.config, ctx.spark
    for name in layout.INPUT_TABLES:
        ctx.read(name, catalog.path(name, dataset=dataset))
    inputs = {name: ctx.summary.inputs[name].version for name in layout.INPUT_TABLES}
    sections = {s: dataclasses.asdict(getattr(config, s)) for b in enabled for s in BY_NAME[b].sections}
    extra = {
        "synthkgqa": {
            "questions": _file_digest(opts.questions),
            "question_graphs": config.release.question_graphs,
            "per_type": config.release.questions_per_type,
        },
        "probekgc": {"scores": _file_digest(opts.scores), "scores_model": opts.scores_model},
        "okgqa": {"questions": _file_digest(opts.okgqa_questions)},
    }
    if "results" in enabled:
        ctx.read("predict_results", catalog.path("predict.results", dataset=dataset))
        extra["results"] = {"version": ctx.summary.inputs["predict_results"].version}
    fingerprints = {b: layout.fingerprint(b, inputs, sections, extra.get(b)) for b in enabled}
    latest = layout.latest_version(publish.read_text(spark, f"{root}/LATEST"), f"{root}/LATEST")
    where = f"{root}/{latest}/release.json"
    previous = layout.checked_manifest(publish.read_text(spark, where), where) if latest else None
    todo = list(enabled) if opts.force else layout.changed(previous, fingerprints)
    number = int(previous["version_number"].split(".")[0]) + 1 if previous else 1
    timings = layout.read_timings(publish.read_text(spark, f"{root}/{layout.TIMINGS}"))
    return _Plan(inputs, sections, fingerprints, latest, previous, todo, number, timings)


def _describe(env: _Env, plan: _Plan, enabled: list[str], configs: list[layout.Config]) -> int:
    """The manifest, card, Croissant document, report and ``SHA256SUMS`` of the release; its file count."""
    spark, target = env.ctx.spark, env.target
    manifest = {
        "name": env.ctx.config.release.name,
        "version": f"v{plan.number}",
        "version_number": f"{plan.number}.0.0",
        "dataset_name": env.dataset.rstrip("/").rsplit("/", 1)[-1],
        "licence": env.ctx.config.release.licence,
        "url": env.ctx.config.release.url,
        "date": _date(env.ctx),
        "inputs": plan.inputs,
        "benchmarks": {
            b: {
                "fingerprint": plan.fingerprints[b],
                "settings": {s: plan.sections[s] for s in BY_NAME[b].sections},
                "notes": env.notes.get(b, ""),
            }
            for b in enabled
        },
        "configs": [c.as_dict() for c in configs],
    }
    for c in manifest["configs"]:
        for kind in ("files", "jsonl"):
            c[kind] = {s: [f[len(target) + 1 :] for f in fs] for s, fs in c[kind].items()}
    data = sorted(f for c in manifest["configs"] for kind in ("files", "jsonl") for fs in c[kind].values() for f in fs)
    digests = publish.digests(spark, target, data, env.written)  # read back: only Spark's files and copies
    if plan.previous is not None:
        reused = [b for b in enabled if b not in plan.todo]
        _check_reused(spark, f"{target.rsplit('/', 1)[0]}/{plan.latest}", digests, reused, manifest)
    publish.write_text(spark, f"{target}/README.md", card.dataset_card(manifest), env.written)
    document = croissant.metadata(manifest, digests)
    publish.write_text(spark, f"{target}/croissant.json", layout.canonical_json(document) + "\n", env.written)
    publish.write_text(spark, f"{target}/release.json", layout.canonical_json(manifest) + "\n", env.written)
    described = ["README.md", "croissant.json", "release.json", *_report(env, manifest, configs)]
    digests.update(publish.digests(spark, target, described, env.written))
    sums = "".join(f"{digests[n][0]}  {n}\n" for n in sorted(digests))
    publish.write_text(spark, f"{target}/SHA256SUMS", sums)
    digests["SHA256SUMS"] = (hashlib.sha256(sums.encode()).hexdigest(), len(sums.encode()))
    # the manifest of `kgbrink stage`, last: `kgbrink fetch --from ROOT` downloads the release checked
    files = {name: staging.FileEntry(name, size, digest) for name, (digest, size) in digests.items()}
    staged = staging.Manifest(manifest["version"], files, manifest["date"])
    publish.write_text(spark, f"{target}/{staging.MANIFEST}", staged.to_json())
    return len(digests) + 1


def _check_reused(spark, previous_dir: str, digests: dict, reused: list[str], manifest: dict) -> None:
    """Every file copied from the previous release has the SHA-256 its ``SHA256SUMS`` gives: a file changed
    or damaged since it was released fails the release, naming it, instead of being published again."""
    if not reused:
        return
    sums = {}
    for line in (publish.read_text(spark, f"{previous_dir}/SHA256SUMS") or "").splitlines():
        digest, _, name = line.partition("  ")
        sums[name] = digest
    for config in manifest["configs"]:
        if config["benchmark"] not in reused:
            continue
        for name in [f for fs in [*config["files"].values(), *config["jsonl"].values()] for f in fs]:
            if sums.get(name) != digests[name][0]:
                raise layout.ManifestError(
                    f"{previous_dir}/{name}: its SHA-256 is not the one {previous_dir}/SHA256SUMS gives; "
                    "the released file changed or is damaged (run with --force to rebuild)"
                )


def _report(env: _Env, manifest: dict, configs: list[layout.Config]) -> list[str]:
    """The report page (:mod:`kgbrink.release.report`) into ``report/``: its files, relative to the release."""
    spark = env.ctx.spark
    tables, shown = {}, {name for declared in BY_NAME.values() for name in declared.report_tables}
    for c in configs:
        if c.name in shown:
            frame = spark.read.parquet(*[f for files in c.files.values() for f in files])
            if c.name == "brink_removed":  # only its rule sets, counted: not a row per removed triple
                frame = frame.groupBy("rule_ids").count()
            tables[c.name] = frame.toPandas()
    local = env.work / "report"
    written = []
    for path in release_report.write(manifest, tables, local):
        publish.copy_file(spark, str(path), f"{env.target}/report/{path.name}", env.written)
        written.append(f"report/{path.name}")
    return sorted(written)


def _date(ctx: JobContext) -> str:
    """The date of the triples version the release is built from (ISO, UTC): deterministic per dataset."""
    import datetime

    table = ctx.summary.inputs["triples"]
    stamp = commit_timestamp(ctx.spark, table.path, table.version) or 0
    return datetime.datetime.fromtimestamp(stamp / 1000, datetime.UTC).date().isoformat()


@dataclass
class _Env:
    """What the builders share: the context, options, dataset, release folder and local work folder."""

    ctx: JobContext
    opts: ReleaseOptions
    dataset: str
    target: str
    work: Path
    notes: dict = dataclasses.field(default_factory=dict)
    written: publish.Digests = dataclasses.field(default_factory=dict)  # digests of the files written
    inputs: dict = dataclasses.field(default_factory=dict)  # the dataset's input table versions (the plan's)
    fingerprints: dict = dataclasses.field(default_factory=dict)  # each enabled benchmark's (the plan's)
    from_dataset: list = dataclasses.field(default_factory=list)  # benchmarks taken from the dataset's tables
    failures: list = dataclasses.field(default_factory=list)  # the threads' errors, first first (_in_threads)

    def dictionaries(self) -> tuple[DataFrame, DataFrame]:
        read = self.ctx.read
        entities = read("entities", catalog.path("entities", dataset=self.dataset)).select("id", "key")
        relations = read("relations", catalog.path("relations", dataset=self.dataset)).select("id", "key")
        return entities, relations


def _publish(
    env: _Env, config: str, benchmark: str, frame: DataFrame, split: str | None, description: str, jsonl: bool = False
) -> layout.Config:
    """Write ``frame`` as the configuration ``config`` (its rows counted per split first); ``jsonl``: also as
    JSON Lines shards beside the Parquet ones."""
    folder = f"{env.target}/{benchmark}/{config[len(benchmark) + 1 :]}"
    if split is not None:
        frame = frame.withColumn(split, F.coalesce(F.col(split), F.lit("train")))
    # counted, then written once or twice: computed (keys joined, JSON parsed) once
    frame = env.ctx.persist(frame, StorageLevel.MEMORY_AND_DISK)
    try:
        if split is not None:
            rows = {r[split]: r["count"] for r in frame.groupBy(split).count().collect()}
        else:
            rows = {"train": frame.count()}
        shard_rows = env.ctx.config.release.shard_rows
        if not sum(rows.values()):
            return layout.Config(config, benchmark, description)  # no rows: left out of the release, and named
        total = sum(rows.values())
        files = _ordered(publish.write_shards(frame, folder, total, shard_rows, "parquet", split, env.written))
        fields = [(f.name, f.dataType.jsonValue()) for f in frame.schema.fields if f.name != split]
        result = layout.Config(config, benchmark, description, files, {s: rows[s] for s in files}, fields)
        if jsonl:
            result.jsonl = _ordered(publish.write_shards(frame, folder, total, shard_rows, "json", split))
            result.jsonl_fields = fields
        return result
    finally:
        env.ctx.unpersist(frame)


SPLIT_ORDER = ("train", "valid", "test", "easy", "medium", "hard")


def _ordered(by_split: dict) -> dict:
    """``by_split`` with the splits in the usual order (train, valid, test; easy, medium, hard; then by name)."""
    rank = {s: i for i, s in enumerate(SPLIT_ORDER)}
    return {s: by_split[s] for s in sorted(by_split, key=lambda s: (rank.get(s, len(rank)), s))}


def _tables(env: _Env, benchmark: str, questions: bool = True) -> list[layout.Config]:
    """The benchmark's table configurations, published at once with ``release.parallel`` over 1
    (:func:`_in_threads`); ``questions`` False: those of its own location only, not those of a question set
    (:attr:`TablePart.questions`)."""
    entities, relations = env.dictionaries()
    declared, out, works = BY_NAME[benchmark], [], []
    for part in declared.tables:
        if part.questions and not questions:
            out.append(layout.Config(part.config, benchmark, part.description))
            continue
        location = declared.location(env.ctx.config) | ({"questions": part.questions} if part.questions else {})
        path = catalog.path(part.table, dataset=env.dataset, **location)
        frame = env.ctx.read(part.config, path)  # pinned here, in the caller's order
        if part.columns is not None:
            frame = frame.select(*part.columns)
        frame = layout.keyed(frame, entities, relations, part.entity_columns, part.relation_columns)
        publish_part = functools.partial(
            _publish, config=part.config, benchmark=benchmark, frame=frame, split=part.split,
            description=part.description, jsonl=part.jsonl,
        )  # fmt: skip
        out.append(len(works))
        works.append((part.config, publish_part))
    published = _in_threads(env, works)
    return [published[c] if isinstance(c, int) else c for c in out]


def _files(env: _Env, benchmark: str, exported: Path) -> list[layout.Config]:
    """The JSON Lines files a builder exported under ``exported``: copied as ``<split>.jsonl``, and read
    into the configuration's Parquet files (at once with ``release.parallel`` over 1)."""
    out, works = [], []
    for part in BY_NAME[benchmark].files:
        found = [(split, exported / name) for split, name in part.files if (exported / name).is_file()]
        found = [(split, source) for split, source in found if source.stat().st_size]
        if not found:
            out.append(layout.Config(part.config, benchmark, part.description))
            continue
        out.append(len(works))
        works.append((part.config, functools.partial(_file_config, part=part, benchmark=benchmark, found=found)))
    published = _in_threads(env, works)
    return [published[c] if isinstance(c, int) else c for c in out]


def _file_config(env: _Env, part: FilePart, benchmark: str, found: list[tuple[str, Path]]) -> layout.Config:
    """One :attr:`DeclaredBenchmark.files` configuration of :func:`_files`."""
    spark = env.ctx.spark
    folder = f"{env.target}/{benchmark}/{part.config[len(benchmark) + 1 :]}"
    jsonl = {}
    for split, source in found:
        publish.copy_file(spark, str(source), f"{folder}/{split}.jsonl", env.written)
        jsonl[split] = [f"{folder}/{split}.jsonl"]
    # one read of every split's file: one schema for all (a field null in one file keeps its type)
    by_name = F.create_map(*[F.lit(x) for split, source in found for x in (source.name, split)])
    name = F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1)
    frame = spark.read.json([str(source) for _, source in found]).withColumn("_split", by_name[name])
    config = _publish(env, part.config, benchmark, frame, "_split", part.description)
    config.jsonl = _ordered(jsonl)
    config.jsonl_fields = config.fields
    return config


def _reuse(env: _Env, previous_dir: str, previous: dict, benchmark: str) -> list[layout.Config]:
    """A benchmark unchanged since the previous release: its files copied, its configurations kept."""
    out = []
    for entry in previous["configs"]:
        if entry["benchmark"] != benchmark:
            continue
        config = layout.Config.from_dict(entry)
        for names in [*config.files.values(), *config.jsonl.values()]:
            for name in names:
                publish.copy_file(env.ctx.spark, f"{previous_dir}/{name}", f"{env.target}/{name}")
        config.files = {s: [f"{env.target}/{n}" for n in names] for s, names in config.files.items()}
        config.jsonl = {s: [f"{env.target}/{n}" for n in names] for s, names in config.jsonl.items()}
        out.append(config)
    env.notes[benchmark] = previous["benchmarks"][benchmark].get("notes", "")
    return out


def _kg(env: _Env) -> list[layout.Config]:
    return _tables(env, "kg")


def _brink(env: _Env) -> list[layout.Config]:
    """The variant built (mine, remove, verify, questions, export), or only exported when the dataset's
    variant is current (:func:`kgbrink.release.reuse.current_build`)."""
    exported, variant = env.work / "brink", env.ctx.config.variant.name
    record = None
    if not env.opts.force:
        record = reuse.current_build(env.ctx.spark, env.dataset, variant, env.fingerprints["brink"])
    if record is not None:
        env.ctx.run("export", dataset=env.dataset, variant=variant, out=str(exported), no_kg_files=True)
        env.notes["brink"] = record["built"]
        env.from_dataset.append("brink")
    else:
        built = env.ctx.run("build", dataset=env.dataset, out=str(exported), no_kg_files=True)
        env.notes["brink"] = built.highlights.get("built", "")
    return _tables(env, "brink") + _files(env, "brink", exported)


def _probe(env: _Env) -> list[layout.Config]:
    splits = env.ctx.config.stats.splits
    if env.opts.force or not reuse.current_statistics(env.ctx.spark, env.dataset, splits, env.inputs["triples"]):
        env.ctx.run("stats", dataset=env.dataset)
    else:
        env.from_dataset.append("probe")
    return _tables(env, "probe")


def _synthkgqa(env: _Env) -> list[layout.Config]:
    ctx, settings = env.ctx, env.ctx.config.release
    exported = env.work / "synthkgqa"
    ctx.run("seed-graphs", dataset=env.dataset, name=NAME, out=str(exported / "prompts.jsonl"))
    if env.opts.questions:
        ctx.run("gt-questions", dataset=env.dataset, input=env.opts.questions, name=NAME, answers=True)
    else:
        ctx.run(
            "gt-questions",
            dataset=env.dataset,
            generate=True,
            name=NAME,
            answers=True,
            per_type=settings.questions_per_type,
            export=str(exported / "questions.jsonl"),
        )
    configs = _files(env, "synthkgqa", exported) + [_gt_questions(env)]
    if settings.question_graphs:
        ctx.run(
            "question-graphs",
            dataset=env.dataset,
            name=NAME,
            sp_analysis=True,
            report_dir=str(exported / "report"),
        )
        configs += _tables(env, "synthkgqa")
    else:
        configs += [c for c in _tables(env, "synthkgqa") if c.name == "synthkgqa_answer_types"]
    return configs


def _gt_questions(env: _Env) -> layout.Config:
    """The question set by key (the form ``gt-questions --input`` reads) with its classification."""
    entities, relations = env.dictionaries()
    path = catalog.path("synthkgqa.gt_questions", dataset=env.dataset, questions=NAME)
    frame = generator.keyed_questions(env.ctx.read("synthkgqa_questions", path), entities, relations)
    # a question without a split is published under train and marked: read back, it is in every split again
    frame = frame.withColumn("no_split", F.col("split").isNull())
    description = "questions with ground-truth answer subgraphs by key, classified (App. A.2); no_split: none given"
    return _publish(env, "synthkgqa_questions", "synthkgqa", frame, "split", description, jsonl=True)


def _probekgc(env: _Env) -> list[layout.Config]:
    exported = env.work / "probekgc"
    difficulties = [d for d in env.ctx.config.mcq.difficulties if d != "hard" or env.opts.scores]
    env.ctx.run(
        "mcq",
        dataset=env.dataset,
        name=NAME,
        difficulties=difficulties,
        scores=env.opts.scores,
        scores_model=env.opts.scores_model,
        out=str(exported),
    )
    if "hard" not in difficulties:
        env.notes["probekgc"] = "No hard options: the release was built without candidate scores (--scores)."
    return _files(env, "probekgc", exported) + _tables(env, "probekgc")


def _okgqa(env: _Env) -> list[layout.Config]:
    """The whole KG's perturbations; with ``--okgqa-questions``, also the question set's subgraphs perturbed
    (okgqa-subgraphs, then okgqa-sweep on them) and the questions file, what ``predict --release`` asks."""
    ctx, exported, questions = env.ctx, env.work / "okgqa", env.opts.okgqa_questions
    ctx.run("okgqa-sweep", dataset=env.dataset, scope="kg", report_dir=str(exported / "report"))
    if not questions:
        return _tables(env, "okgqa", questions=False) + _files(env, "okgqa", exported)
    ctx.run("okgqa-subgraphs", dataset=env.dataset, questions=questions, name=NAME)
    ctx.run("okgqa-sweep", dataset=env.dataset, scope="subgraphs", name=NAME, report_dir=str(exported / "questions"))
    exported.mkdir(parents=True, exist_ok=True)
    publish.copy_file(ctx.spark, questions, str(exported / "questions.jsonl"))
    return _tables(env, "okgqa") + _files(env, "okgqa", exported)


def _results(env: _Env) -> list[layout.Config]:
    """The dataset's ``predict/results`` (kgbrink predict's scores; the run's local folder left out) and
    the leaderboard in the card's notes (:mod:`kgbrink.release.results`)."""
    frame = env.ctx.read("predict_results", catalog.path("predict.results", dataset=env.dataset))
    ordered = frame.drop("out").orderBy(*release_results.ORDER)
    env.notes["results"] = release_results.leaderboard([r.asDict() for r in ordered.collect()])
    return [_publish(env, "results_scores", "results", ordered, None, "kgbrink predict's scores per run and metric")]


BUILDERS = {
    "kg": _kg,
    "brink": _brink,
    "probe": _probe,
    "synthkgqa": _synthkgqa,
    "probekgc": _probekgc,
    "okgqa": _okgqa,
    "results": _results,
}
