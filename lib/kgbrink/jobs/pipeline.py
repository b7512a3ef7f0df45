"""``kgbrink run``: the main job end to end on the embedded default.

1. ``synth``: the sample KG (size and seed from config ``synth.*``) into ``<data_dir>/sample-kg``,
   unless a sample with the same settings is already there;
2. ``ingest`` it into the dataset (Delta tables);
3. ``stats`` on the configured splits;
4. ``build``: mine rules, remove, verify, questions, export and report (:mod:`kgbrink.jobs.variant`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from kgbrink.core.settings import Config
from kgbrink.core.tracking import JobSummary
from kgbrink.jobs import ingest, stats, synth, variant


def _sample_is_current(directory: Path, config: Config) -> bool:
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
    wanted_triples = int(config.get("synth.triples"))
    wanted = {
        "triples": wanted_triples,
        "seed": int(config.get("synth.seed")),
        "duplicates": round(float(config.get("synth.duplicate_fraction")) * wanted_triples),
        "malformed": round(float(config.get("synth.malformed_fraction")) * wanted_triples),
    }
    return planted == wanted


def run(spark: SparkSession, config: Config, dataset: str, sample_dir: str | None = None) -> JobSummary:
    summary = JobSummary("run", params={"dataset": dataset})
    sample = Path(sample_dir or Path(config.location("data_dir")) / "sample-kg")
    summary.params["sample_dir"] = str(sample)
    steps: list[JobSummary] = []
    if not _sample_is_current(sample, config):
        steps.append(synth.run(config, str(sample), None, None, None, None, gzip=False))
    steps.append(
        ingest.run(spark, config, ingest.IngestOptions(dataset=dataset, format="wikidata5m", input=str(sample)))
    )
    steps.append(stats.run(spark, config, dataset))
    steps.append(variant.build(spark, config, dataset))
    variant.merge_steps(summary, steps)
    return summary
