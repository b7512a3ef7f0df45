"""The stack's credentials are in no log, summary or MLflow run of the cluster tests (run last: every log is
there)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kgbrink.storage import staging
from tests.cluster.jobs import CREDENTIALS, mlflow


def _texts(stack, run_dir: Path, pipelines) -> dict[str, str]:
    """Every log, summary and MLflow record of the run, by where it came from."""
    texts = {}
    for folder in (stack.logs, stack.state / "work", run_dir):
        for path in folder.rglob("*"):
            if (
                path.is_file()
                and path.suffix not in (".jar", ".zip", ".parquet", ".crc")
                and path.stat().st_size < 200 << 20
            ):
                texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    experiments = mlflow(stack, "experiments/search", max_results=100)["experiments"]
    ids = [e["experiment_id"] for e in experiments]
    url = f"{stack.mlflow_uri}/api/2.0/mlflow/runs/search"
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps({"experiment_ids": ids, "max_results": 1000}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
        runs = json.loads(response.read())["runs"]
    assert {pipelines["cluster"][j]["mlflow_run_id"] for j in ("run", "score")} <= {r["info"]["run_id"] for r in runs}
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    for record in runs:
        texts[f"mlflow run {record['info']['run_id']}"] = json.dumps(record)
    for obj in client.list_objects_v2(Bucket=stack.bucket, Prefix="mlflow-artifacts/").get("Contents", []):
        body = client.get_object(Bucket=stack.bucket, Key=obj["Key"])["Body"].read()
        texts[f"s3://{stack.bucket}/{obj['Key']}"] = body.decode("utf-8", "replace")
    return texts


def test_the_credentials_are_in_no_log_summary_or_mlflow_run(stack, run_dir, pipelines):
    secrets = {k: os.environ[k] for k in CREDENTIALS}
    assert all(len(v) >= 16 for v in secrets.values())
    texts = _texts(stack, run_dir, pipelines)
    # the search looks where the runs left their traces: executor logs, spark-submit output, summaries
    assert any("/work/" in p and p.endswith("stderr") for p in texts), "no executor log found"
    assert any(p.endswith("run-cluster.err") for p in texts) and any(p.startswith("mlflow run") for p in texts)
    leaks = sorted((where, key) for where, text in texts.items() for key, value in secrets.items() if value in text)
    assert leaks == []
    # the search itself finds a value where one is (the stack's own credentials file)
    assert secrets["AWS_SECRET_ACCESS_KEY"] in (stack.state / "aws.env").read_text()
