"""The cluster's runs are tracked on the stack's MLflow server, their artifacts in the bucket."""

from __future__ import annotations

from kgbrink.storage import staging
from tests.cluster.jobs import mlflow


def test_cluster_runs_are_tracked_on_the_server_with_artifacts_in_the_bucket(stack, pipelines):
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    for job in ("run", "score"):
        run_id = pipelines["cluster"][job]["mlflow_run_id"]
        info = mlflow(stack, "runs/get", run_id=run_id)["run"]
        assert info["info"]["status"] == "FINISHED"
        tags = {t["key"]: t["value"] for t in info["data"].get("tags", [])}
        assert tags["job"] == job and tags["env"] == "cluster-local"
        objects = client.list_objects_v2(Bucket=stack.bucket, Prefix="mlflow-artifacts/").get("Contents", [])
        assert any(o["Key"].endswith(f"{run_id}/artifacts/summary.json") for o in objects), run_id
