"""Fixtures of the cluster tests: the running local stack (``make cluster-up``), a folder for a run, a
local-mode session that reads s3a, and the make-run sample's pipeline (tests/cluster/sample_pipeline.py)
that several files read.

These tests need the stack and its credentials in the environment; ``make test-cluster`` brings the stack
up, runs them and stops it (``make test`` leaves this folder out). Their order is declared here
(:data:`ORDER`), not left to file names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kgbrink.storage import staging
from tests.cluster.jobs import (
    CLUSTER_CONF,
    CREDENTIALS,
    KGBRINK,
    killed_in_steps,
    local_session,
    run,
    stack_module,
)
from tests.cluster.sample_pipeline import (
    DATASET,
    DUMP,
    RANKS,
    RUN_KILLS,
    SAMPLE_TRIPLES,
    SCORE_KILLS,
    local_runs,
    ranks_file,
)

# The files in the order they run: the refresh changes the sample pipeline's dataset, so it runs after every
# file that reads it at the pipeline's versions; the credentials are looked for in every log, so last.
ORDER = (
    "test_stack.py",
    "test_staging.py",
    "test_pipeline.py",
    "test_tracking.py",
    "test_predict.py",
    "test_release.py",
    "test_refresh.py",
    "test_credentials.py",
)


@pytest.hookimpl(trylast=True)  # after tests/conftest.py's longest-first order of make test's files
def pytest_collection_modifyitems(items):
    """The tests in :data:`ORDER` of their files (a file not listed fails the run: declare it)."""
    unknown = sorted({item.path.name for item in items} - set(ORDER))
    if unknown:
        raise pytest.UsageError(f"tests/cluster/conftest.py ORDER does not list {', '.join(unknown)}")
    items.sort(key=lambda item: ORDER.index(item.path.name))


@pytest.fixture(scope="session")
def stack():
    layout = stack_module.Layout()
    health = stack_module.healthy(layout)
    if not all(health.values()):
        pytest.fail(f"the cluster stack is not up ({health}): run `make test-cluster`, or `make cluster-up` first")
    missing = [k for k in CREDENTIALS if not os.environ.get(k)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not set: `set -a; . {layout.state}/aws.env; set +a`")
    yield layout
    # every job removes its reliable checkpoints at its end, on success as after a lost executor
    client = staging.s3_client(layout.s3_endpoint, "us-east-1", path_style=True)
    listed = client.list_objects_v2(Bucket=layout.bucket, Prefix="checkpoints/").get("Contents", [])
    left = [o for o in listed if not (o["Key"].endswith("/") and o["Size"] == 0)]  # S3A's empty-folder markers
    assert not left, f"{len(left)} objects left under s3://{layout.bucket}/checkpoints/, e.g. {left[0]['Key']}"


@pytest.fixture(scope="session")
def run_dir(stack) -> Path:
    directory = stack.state / "run"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def reader():
    """A local-mode session that reads the tables on s3a as well as the local ones (the one run_local uses)."""
    spark = local_session()
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def sample(run_dir) -> Path:
    """The make-run sample's generator (conf/local.yaml) at :data:`SAMPLE_TRIPLES` triples, generated locally."""
    out = run_dir / "sample-kg"
    synth = ["synth", "--conf", "conf/local.yaml", "--set", f"synth.triples={SAMPLE_TRIPLES}"]
    run([KGBRINK, *synth, "--out", str(out), "--no-tracking"], run_dir, "synth")
    return out


@pytest.fixture(scope="session")
def staged(run_dir, sample) -> dict:
    summary = run_dir / "stage.json"
    args = ["--conf", CLUSTER_CONF, "--input", str(sample), "--to", DUMP, "--json"]
    run([KGBRINK, "stage", *args, str(summary)], run_dir, "stage")
    again = run_dir / "stage-check.json"
    run([KGBRINK, "stage", *args, str(again), "--check"], run_dir, "stage-check")
    return {"first": json.loads(summary.read_text()), "again": json.loads(again.read_text())}


@pytest.fixture(scope="session")
def ranks(stack, run_dir, sample) -> dict[str, str]:
    """The rank file, locally and uploaded to the bucket with boto3."""
    local = ranks_file(sample, run_dir / "ranks.tsv")
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    bucket, key = staging.parse_uri(RANKS)
    client.upload_file(str(local), bucket, key)
    return {"local": str(local), "cluster": RANKS}


@pytest.fixture(scope="session")
def pipelines(stack, run_dir, sample, staged, ranks) -> dict:
    """``kgbrink run`` (ingest -> stats -> build) then ``score`` on the cluster (input, dataset and rank file
    on s3a, exported files into a local folder), worker 2 killed inside the steps of RUN_KILLS and
    SCORE_KILLS; then the same and the benchmark jobs in local mode (``local_runs``)."""
    cluster = {}
    run_args = ["--input", DUMP + "/", "--dataset", DATASET, "--out", str(run_dir / "export-cluster")]
    cluster["run"] = killed_in_steps(stack, run_dir, "run_pipeline", run_args, "run-cluster", RUN_KILLS, codegen=True)
    score_args = ["--ranks", ranks["cluster"], "--dataset", DATASET]
    cluster["score"] = killed_in_steps(stack, run_dir, "score", score_args, "score-cluster", SCORE_KILLS, codegen=True)
    # after the cluster's runs, not beside them: on 2 cores the two contend (1,020 s side by side)
    return {"cluster": cluster, "local": local_runs(run_dir, sample, ranks)}
