"""What a ``predict`` run reads and what its answers depend on: a release as input (:class:`ReleaseInput`),
an evaluation's dataset tables read pinned (:func:`pinned_sources`), and the run's fingerprint, which names
its output folder (:func:`fingerprint`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog, publish
from kgbrink.core.delta import table_exists
from kgbrink.core.files import read_parquet_splits, require_files
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import JobFailed
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation import releases
from kgbrink.evaluation.calls import canonical
from kgbrink.jobs.evaluations.protocol import Evaluation, Role
from kgbrink.release import layout


@dataclass(frozen=True)
class ReleaseInput:
    """A release read as predict's input: its folder (a root's ``LATEST`` version, or the version given)
    and its checked ``release.json``."""

    folder: str
    manifest: dict

    @property
    def where(self) -> str:
        return f"{self.folder}/release.json"

    @classmethod
    def open(cls, ctx: JobContext, location: str) -> ReleaseInput:
        location = location.rstrip("/")
        latest = layout.latest_version(publish.read_text(ctx.spark, f"{location}/LATEST"), f"{location}/LATEST")
        folder = f"{location}/{latest}" if latest else location
        where = f"{folder}/release.json"
        text = publish.read_text(ctx.spark, where)
        if text is None:
            raise ConfigError(f"--release {location}: no release.json (not a kgbrink release)")
        return cls(folder, layout.checked_manifest(text, where))

    def identity(self, benchmark: str) -> dict:
        """What a run's fingerprint takes from the release: its version and the benchmark's fingerprint."""
        return {
            "version_number": self.manifest["version_number"],
            "benchmark": self.manifest["benchmarks"][benchmark]["fingerprint"],
        }

    def dictionaries(self, ctx: JobContext) -> tuple[DataFrame, DataFrame]:
        """``id, key, label`` of the release's entities and relations (:func:`releases.dictionary`)."""
        return tuple(releases.dictionary(self.read(ctx, f"kg_{kind}")) for kind in ("entities", "relations"))

    def jsonl(self, config: str) -> list[str]:
        """The JSON Lines files of the config ``config``, every split's."""
        files = releases.config_files(self.manifest, config, self.where, "jsonl")
        return [f"{self.folder}/{name}" for names in files.values() for name in names]

    def read(self, ctx: JobContext, config: str) -> DataFrame:
        """The Parquet files of the config ``config``, with ``split``."""
        files = releases.config_files(self.manifest, config, self.where)
        paths = {split: [f"{self.folder}/{name}" for name in names] for split, names in files.items()}
        return read_parquet_splits(ctx.spark, paths)


def pinned_sources(ctx: JobContext, evaluation: Evaluation, opts, dataset: str, name: str) -> dict[str, DataFrame]:
    """The evaluation's tables in ``dataset`` read pinned: its inputs and those its options name (each
    required), then its optional ones where they exist."""
    sources = {}
    groups = ((True, evaluation.inputs), (True, evaluation.option_inputs(opts)), (False, evaluation.optional))
    for required, inputs in groups:
        for source, table in inputs:
            path = catalog.table(table).path(dataset=dataset, questions=name, variant=name)
            if table_exists(ctx.spark, path):
                sources[source] = ctx.read(source, path)
            elif required:
                message = f"no {source} table at {path}: build the {evaluation.name} benchmark first"
                raise JobFailed(message, ctx.summary)
    return sources


def digest(value) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:16]


def file_digest(ctx: JobContext, path: str) -> str:
    """SHA-256 of a file's bytes (local or on object storage)."""
    require_files(ctx.spark, [path])
    row = ctx.spark.read.format("binaryFile").load(path).select(F.sha2("content", 256).alias("d")).first()
    return row["d"]


# the options of every benchmark that shape its prompts or labels (a benchmark ignores those it has not)
PROMPT_OPTIONS = ("template", "scheme", "context", "kg", "split", "limit", "run_name")


def fingerprint(
    ctx: JobContext,
    evaluation: Evaluation,
    opts,
    release: ReleaseInput | None,
    answering: Role,
    judge: Role | None,
) -> str:
    """What the answers depend on: the pinned inputs (or the release), the model and its parameters, the
    options and settings that shape the prompts, the judge and its parameters."""
    return digest(
        {
            "inputs": {k: v.as_dict() for k, v in ctx.summary.inputs.items()},
            "release": release.identity(evaluation.release_benchmark) if release else None,
            "model": answering.model,
            "params": answering.params,
            "revision": answering.revision,
            "options": {k: getattr(opts, k) for k in PROMPT_OPTIONS},
            "settings": {key: ctx.config.get(key) for key in evaluation.fingerprint_settings},
            "judge": (
                {
                    "model": judge.model,
                    "params": judge.params,
                    **({"revision": judge.revision} if judge.revision else {}),
                }
                if judge
                else None
            ),
            "questions": file_digest(ctx, opts.questions) if opts.questions else None,
            "retrieved": file_digest(ctx, opts.retrieved) if opts.retrieved else None,
        }
    )
