"""``kgbrink run``: the main job end to end on the embedded default.

1. ``synth``: the sample KG (size and seed from config ``synth.*``) into ``<data_dir>/sample-kg``,
   unless a sample with the same settings is already there, or ``--input`` names a dump (a Wikidata5m
   folder, local or s3a: the cluster run of ``make test-cluster``);
2. ``ingest`` it into the dataset (Delta tables);
3. ``stats`` on the configured splits;
4. ``build``: mine rules, remove, verify, questions, export and report (:mod:`kgbrink.jobs.build`).

Statistics and the variant already computed from the same table versions with the same settings are
reused, not computed again (:mod:`kgbrink.release.reuse`): a rerun on an unchanged dump ingests nothing
and reuses both (the variant only when its files and report are in its own folder, no ``--out``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.settings import Settings
from kgbrink.core.tracking import JobSummary
from kgbrink.jobs.steps.variant_options import variant_dir
from kgbrink.release import layout, reuse


def _sample_is_current(directory: Path, config: Settings) -> bool:
    manifest = directory / "synth_manifest.json"
    if not manifest.is_file():
        return False
    meta = json.loads(manifest.read_text())
    planted = {
        "triples": meta.get("triples"),
        "seed": meta.get("seed"),
        "duplicates": meta.get("duplicate_lines"),
        "malformed": sum(meta.get("malformed_lines", {}).values()),
    }
    wanted_triples = int(config.synth.triples)
    wanted = {
        "triples": wanted_triples,
        "seed": int(config.synth.seed),
        "duplicates": round(float(config.synth.duplicate_fraction) * wanted_triples),
        "malformed": round(float(config.synth.malformed_fraction) * wanted_triples),
    }
    return planted == wanted


@dataclass
class RunOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    sample_dir: str | None = arg(None, "where the generated sample KG goes (default: <data_dir>/sample-kg)")
    input: str | None = arg(None, "ingest this Wikidata5m dump (local or s3a) instead of generating the sample")
    out: str | None = arg(
        None,
        "local directory of the exported files and report (default: in the variant; required for a dataset on s3a://)",
    )


@job(
    "run",
    "the main job end to end: sample KG -> ingest -> stats -> build",
    RunOptions,
    steps=4,
    entry_point="run_pipeline.py",
)
def run(ctx: JobContext, opts: RunOptions) -> JobSummary:
    config = ctx.config
    dataset = config.require_dataset(opts.dataset)
    sample = Path(opts.sample_dir or Path(config.data_dir) / "sample-kg")
    source = opts.input or str(sample)
    summary = ctx.begin(dataset=dataset, input=source)
    steps: list[JobSummary] = []
    with ctx.step("synth"):
        if opts.input is None and not _sample_is_current(sample, config):
            steps.append(ctx.run("synth", out=str(sample)))
    with ctx.step("ingest"):
        ingested = ctx.run("ingest", dataset=dataset, format="wikidata5m", input=source)
    steps.append(ingested)
    # a rerun on the same tables with the same settings reuses what the dataset holds (as `release` does)
    inputs = {name: ingested.outputs[name].version for name in layout.INPUT_TABLES}
    reused = []
    with ctx.step("stats"):
        if reuse.current_statistics(ctx.spark, dataset, config.stats.splits, inputs["triples"]):
            reused.append("stats")
        else:
            steps.append(ctx.run("stats", dataset=dataset))
    with ctx.step("build"):
        record = None if opts.out else reuse.current_build_in_variant(ctx.spark, config, dataset, inputs)
        if record is None:
            built = ctx.run("build", dataset=dataset, out=opts.out)
            steps.append(built)
            highlights = built.highlights
        else:
            reused.append("build")
            root = variant_dir(dataset, config.variant.name)
            highlights = {"export": f"{root}/export", "report": f"{root}/report/report.md", "built": record["built"]}
    summary.merge_steps(steps)
    kept = ingested.counts.get("kept")
    summary.highlights.update(dataset=dataset + (f" ({kept:,} triples)" if kept is not None else ""), **highlights)
    summary.counts["reused"] = reused
    if not ingested.counts.get("changed", True):
        summary.highlights["ingest"] = "no change: the dataset already holds this dump"
    if reused:
        labels = {"stats": "stats", "build": "the brink variant"}
        summary.highlights["reused"] = (
            " and ".join(labels[r] for r in reused) + ", already computed from these tables with these settings"
        )
    return summary
