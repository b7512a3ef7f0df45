"""The make-run sample's pipeline on the stack (issue 26), which several cluster tests read: where its
dump, dataset and rank file are, the steps a worker is killed in, and the same runs in local mode, the
expected outputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.cluster.jobs import run_local

DUMP = "s3a://kgbrink/dumps/sample"
DATASET = "s3a://kgbrink/datasets/sample"
RANKS = "s3a://kgbrink/ranks/sample/ranks.tsv"
# The sample's size: make test's (conf/test.yaml), not make run's 200,000 (CI time: the jobs' fixed cost on the
# cluster is what is tested; 200,000 took 262 s for the cluster's run). Valid and test: 5 triples each.
SAMPLE_TRIPLES = 20_000


def ranks_file(sample: Path, target: Path) -> Path:
    """A rank file of the sample's valid and test triples, both sides: ranks drawn by a hash of the row."""
    lines = ["h\tr\tt\tside\trank\tnum_candidates"]
    for split in ("valid", "test"):
        for triple in (sample / f"wikidata5m_transductive_{split}.txt").read_text().splitlines():
            for side in ("head", "tail"):
                draw = int.from_bytes(hashlib.sha256(f"{triple}\t{side}".encode()).digest()[:8], "big")
                lines.append(f"{triple}\t{side}\t{1 + draw % 50}\t1000")
    target.write_text("\n".join(lines) + "\n")
    return target


def local_conf(local: Path) -> list[str]:
    """The local-mode runs' settings: tracking and logs under ``local``."""
    return [
        "--conf", "conf/local.yaml", "--set", f"tracking.uri=sqlite:///{local}/mlflow.db",
        "--set", f"tracking.artifact_location={local}/mlflow-artifacts", "--set", f"log_dir={local}/logs",
    ]  # fmt: skip


# Worker 2 and its executors are SIGKILLed inside these steps of the cluster's ``run`` and ``score``, in
# the order the jobs begin them: once a task of the step ran on worker 2 and (True) the step wrote a
# checkpoint; the worker is started again after each kill. ingest's dictionaries and stats have no
# checkpoint, build's remove has; score's batches are its own recovery unit.
STATS_STEP = "entity_relation_counts_and_entity_popularity"
RUN_KILLS = (("dictionaries", False), (STATS_STEP, False), ("remove", True))
SCORE_KILLS = (("batches", False),)


def local_runs(run_dir: Path, sample: Path, ranks: dict) -> dict:
    """run and score in local mode on local files, in one process: the expected outputs."""
    local = run_dir / "local"
    dataset = str(local / "datasets/sample")
    run_args = ["--input", str(sample), "--dataset", dataset, "--out", str(run_dir / "export-local")]
    commands = [["run", *local_conf(local), *run_args, "--json", str(run_dir / "run-local.json")]]
    score_args = ["--ranks", ranks["local"], "--dataset", dataset, "--json", str(run_dir / "score-local.json")]
    commands.append(["score", *local_conf(local), *score_args])
    run_local(commands, run_dir, "local-runs", codegen=True)
    return {job: json.loads((run_dir / f"{job}-local.json").read_text()) for job in ("run", "score")}


def step_outputs(summary: dict, step: str) -> dict:
    """The outputs of ``step`` (``ingest``, ``stats``, ``build``) of a ``run`` summary, by table name."""
    return {k.split(".", 1)[1]: v for k, v in summary["outputs"].items() if k.split(".", 1)[0] == step}
