"""Fixtures of the cluster tests: the running local stack (``make cluster-up``) and a folder for a run.

These tests need the stack and its credentials in the environment; ``make test-cluster`` brings the stack
up, runs them and stops it (``make test`` leaves this folder out).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kgbrink_cluster_stack", ROOT / "infra/cluster/stack.py")
stack_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stack_module
_spec.loader.exec_module(stack_module)
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


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
    from kgbrink.storage import staging

    client = staging.s3_client(layout.s3_endpoint, "us-east-1", path_style=True)
    listed = client.list_objects_v2(Bucket=layout.bucket, Prefix="checkpoints/").get("Contents", [])
    left = [o for o in listed if not (o["Key"].endswith("/") and o["Size"] == 0)]  # S3A's empty-folder markers
    assert not left, f"{len(left)} objects left under s3://{layout.bucket}/checkpoints/, e.g. {left[0]['Key']}"


@pytest.fixture(scope="session")
def run_dir(stack) -> Path:
    directory = stack.state / "run"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": str(ROOT / ".venv/bin/python"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }


def run(command: list[str], run_dir: Path, name: str, timeout: float = 900) -> float:
    """Run ``command`` from the project root with stdout/stderr in ``<run_dir>/<name>.out|.err``; fail with
    their tails on a non-zero exit. Its seconds are returned and appended to the stack's times file."""
    started = time.monotonic()
    with open(run_dir / f"{name}.out", "w") as out, open(run_dir / f"{name}.err", "w") as err:
        done = subprocess.run(command, cwd=ROOT, env=env(), stdout=out, stderr=err, timeout=timeout, check=False)
    seconds = round(time.monotonic() - started, 1)
    with open(run_dir.parent / "test-cluster-times.txt", "a") as times:
        times.write(f"{name} {seconds}\n")
    if done.returncode != 0:
        tail = (run_dir / f"{name}.err").read_text()[-4000:]
        pytest.fail(f"{' '.join(command[:4])} ... exited {done.returncode}:\n{tail}")
    return seconds


@pytest.fixture(scope="module")
def reader():
    """A local-mode session that reads the tables on s3a as well as the local ones."""
    from kgbrink.core.session import spark_session
    from kgbrink.core.settings import load_config

    config = load_config(
        ROOT / "conf/cluster-local.yaml", ["spark.master=local[2]", "spark.conf.spark.driver.memory=2g"]
    )
    spark = spark_session(config)
    yield spark
    spark.stop()
