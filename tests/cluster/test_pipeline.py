"""The distributed path on the local stack (issue 26): the make-run sample staged to the S3 server with
boto3, ingest -> stats by spark-submit on the 2-worker standalone cluster with the Delta tables on s3a and
tracking on the MLflow server, every table equal byte for byte to a local-mode run's; nothing listening
beyond loopback; the credentials in no log, summary or MLflow run.

The tests run in file order and build on each other (``make test-cluster``)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import psutil
import pytest

from kgbrink.storage import staging
from tests.cluster.conftest import CREDENTIALS, ROOT, env, run, stack_module

CLUSTER_CONF = "conf/cluster-local.yaml"
DUMP = "s3a://kgbrink/dumps/sample"
DATASET = "s3a://kgbrink/datasets/sample"
KGBRINK = str(ROOT / ".venv/bin/kgbrink")


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_the_stack_listens_on_loopback_only(stack):
    pids = {}
    for name in stack_module.service_names(stack):
        for pid in stack_module.group_pids(stack_module.running(stack, name)):
            pids[pid] = name
    listening = [c for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    found = {(pids[c.pid], c.laddr.port) for c in listening}
    # every service is seen listening on its port (the check below looks at real sockets) ...
    expected = {("s3", stack.s3_port), ("mlflow", stack.mlflow_port), ("spark-master", stack.master_port)}
    expected |= {("spark-master", stack.master_ui_port)}
    for index in range(1, stack.workers + 1):
        expected |= {(f"spark-worker-{index}", port) for port in stack.worker_ports(index)}
    assert expected <= found, expected - found
    # ... and none of the stack's processes listens beyond 127.0.0.0/8
    outside = [(pids[c.pid], c.laddr) for c in listening if not _loopback(c.laddr.ip)]
    assert outside == []


@pytest.fixture(scope="module")
def sample(run_dir) -> Path:
    """The make-run sample KG (settings synth.* of conf/local.yaml), generated locally."""
    out = run_dir / "sample-kg"
    run([KGBRINK, "synth", "--conf", "conf/local.yaml", "--out", str(out), "--no-tracking"], run_dir, "synth")
    return out


@pytest.fixture(scope="module")
def staged(run_dir, sample) -> dict:
    summary = run_dir / "stage.json"
    args = ["--conf", CLUSTER_CONF, "--input", str(sample), "--to", DUMP, "--json"]
    run([KGBRINK, "stage", *args, str(summary)], run_dir, "stage")
    again = run_dir / "stage-check.json"
    run([KGBRINK, "stage", *args, str(again), "--check"], run_dir, "stage-check")
    return {"first": json.loads(summary.read_text()), "again": json.loads(again.read_text())}


def test_the_sample_is_staged_with_a_manifest_and_a_second_stage_sees_no_change(stack, sample, staged):
    first, again = staged["first"], staged["again"]
    files = sorted(p.relative_to(sample).as_posix() for p in sample.rglob("*") if p.is_file())
    assert first["status"] == "ok" and first["changed"] is True
    assert first["counts"]["uploaded"] == len(files) and first["counts"]["added"] == len(files)
    assert again["changed"] is False and again["counts"]["uploaded"] == 0
    assert again["dump_version"] == first["dump_version"]
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    manifest = staging.read_manifest(client, DUMP)
    assert sorted(manifest.files) == files
    for name in files:
        assert manifest.files[name].sha256 == staging.sha256_of(sample / name)


def _submit(run_dir: Path, job: str, args: list[str], name: str, wait: bool = True):
    jars = ",".join(
        str(p) for d in ("core", "graphframes", "s3") for p in sorted((ROOT / ".cache/jars" / d).glob("*.jar"))
    )
    archive = run_dir / "kgbrink.zip"
    if not archive.exists():
        shutil.make_archive(str(archive.with_suffix("")), "zip", ROOT / "lib", "kgbrink")
    submit = [
        str(ROOT / ".venv/bin/spark-submit"), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client",
        "--driver-memory", "2g", "--jars", jars, "--py-files", str(archive), f"jobs/{job}.py",
    ]  # fmt: skip
    command = [*submit, "--conf", CLUSTER_CONF, *args]
    if wait:
        return run(command, run_dir, name)
    out, err = open(run_dir / f"{name}.out", "w"), open(run_dir / f"{name}.err", "w")  # noqa: SIM115
    return subprocess.Popen(command, cwd=ROOT, env=env(), stdout=out, stderr=err)


@pytest.fixture(scope="module")
def pipelines(run_dir, sample, staged) -> dict:
    """ingest -> stats on the cluster (input and dataset on s3a) and in local mode (local files)."""
    out: dict = {"cluster": {}, "local": {}, "seconds": {}}
    ingest = ["--format", "wikidata5m", "--input", DUMP + "/", "--dataset", DATASET]
    seconds = _submit(run_dir, "ingest", [*ingest, "--json", str(run_dir / "ingest-cluster.json")], "ingest-cluster")
    seconds += _submit(
        run_dir, "stats", ["--dataset", DATASET, "--json", str(run_dir / "stats-cluster.json")], "stats-cluster"
    )
    out["seconds"]["cluster"] = seconds
    local = run_dir / "local"
    conf = [
        "--conf", "conf/local.yaml", "--set", f"tracking.uri=sqlite:///{local}/mlflow.db",
        "--set", f"tracking.artifact_location={local}/mlflow-artifacts", "--set", f"log_dir={local}/logs",
    ]  # fmt: skip
    dataset = str(local / "datasets/sample")
    ingest = ["--format", "wikidata5m", "--input", str(sample), "--dataset", dataset]
    seconds = run(
        [KGBRINK, "ingest", *conf, *ingest, "--json", str(run_dir / "ingest-local.json")], run_dir, "ingest-local"
    )
    stats = ["--dataset", dataset, "--json", str(run_dir / "stats-local.json")]
    seconds += run([KGBRINK, "stats", *conf, *stats], run_dir, "stats-local")
    out["seconds"]["local"] = seconds
    for mode in ("cluster", "local"):
        for job in ("ingest", "stats"):
            out[mode][job] = json.loads((run_dir / f"{job}-{mode}.json").read_text())
    with open(run_dir.parent / "test-cluster-times.txt", "a") as times:
        ratio = out["seconds"]["cluster"] / out["seconds"]["local"]
        times.write(f"ingest+stats cluster/local ratio {ratio:.2f}\n")
    return out


def _canonical_csv(spark, path: str, version: int, target: Path) -> str:
    """The table at ``path`` (``version``) as CSV with its rows sorted by every column; its SHA-256."""
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    frame.toPandas().sort_values(list(frame.columns), kind="mergesort").to_csv(target, index=False)
    return hashlib.sha256(target.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def reader():
    """A local-mode session that reads the tables on s3a as well as the local ones."""
    from kgbrink.core.session import spark_session
    from kgbrink.core.settings import load_config

    config = load_config(ROOT / CLUSTER_CONF, ["spark.master=local[2]", "spark.conf.spark.driver.memory=2g"])
    spark = spark_session(config)
    yield spark
    spark.stop()


def _same_tables(spark, outputs: dict, expected: dict, exported: Path) -> list[str]:
    """Assert every output table equals the expected one as canonical CSV; the names compared."""
    assert sorted(outputs) == sorted(expected)
    compared = []
    for name, table in sorted(outputs.items()):
        (exported / "cluster").mkdir(parents=True, exist_ok=True)
        (exported / "local").mkdir(parents=True, exist_ok=True)
        a = _canonical_csv(spark, table["path"], table["version"], exported / "cluster" / f"{name}.csv")
        b = _canonical_csv(spark, expected[name]["path"], expected[name]["version"], exported / "local" / f"{name}.csv")
        assert a == b, f"table {name} differs between the cluster and local mode (see {exported})"
        compared.append(name)
    return compared


def test_ingest_and_stats_on_the_cluster_equal_local_mode(stack, run_dir, pipelines, reader):
    compared = []
    for job in ("ingest", "stats"):
        cluster, local = pipelines["cluster"][job], pipelines["local"][job]
        assert cluster["status"] == local["status"] == "ok"
        assert cluster["counts"] == local["counts"], job
        assert all(o["path"].startswith(DATASET + "/") for o in cluster["outputs"].values())
        compared += _same_tables(reader, cluster["outputs"], local["outputs"], run_dir / "exported" / job)
    assert {"entities", "relations", "triples", "entity_popularity", "relation_statistics"} <= set(compared)


def test_a_job_survives_a_killed_worker_with_identical_output(stack, run_dir, pipelines, reader):
    """stats again on the cluster; worker 2 and its executor are SIGKILLed once a task of the job ran
    there; the job finishes on worker 1 and writes the same tables as local mode."""
    work = stack.state / "work" / "worker-2"
    before = set(work.iterdir())
    summary = run_dir / "stats-kill.json"
    process = _submit(run_dir, "stats", ["--dataset", DATASET, "--json", str(summary)], "stats-kill", wait=False)
    try:
        deadline = time.monotonic() + 900
        while process.poll() is None and time.monotonic() < deadline:
            apps = [d for d in work.iterdir() if d not in before]
            logs = [f for d in apps for f in d.glob("*/stderr")]
            if any("Running task" in f.read_text(errors="replace") for f in logs):
                break
            time.sleep(0.5)
        assert process.poll() is None, "the job ended before a task ran on worker 2"
        stack_module.kill_worker(stack, 2)
        killed_at = time.monotonic()
        returncode = process.wait(timeout=1800)
    finally:
        if process.poll() is None:
            process.kill()
        stack_module.restart_worker(stack, 2)
    with open(run_dir.parent / "test-cluster-times.txt", "a") as times:
        times.write(f"stats-after-kill {time.monotonic() - killed_at:.1f}\n")
    err = (run_dir / "stats-kill.err").read_text()
    assert returncode == 0, err[-4000:]
    assert "Lost executor" in err or "worker lost" in err.lower()  # the kill reached the job
    done = json.loads(summary.read_text())
    compared = _same_tables(
        reader, done["outputs"], pipelines["local"]["stats"]["outputs"], run_dir / "exported" / "kill"
    )
    assert "entity_popularity" in compared


def _mlflow(stack, path: str, **query) -> dict:
    url = f"{stack.mlflow_uri}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    status, body = stack_module.http_get(url, timeout=10)
    assert status == 200, (url, body[:500])
    return json.loads(body)


def test_cluster_runs_are_tracked_on_the_server_with_artifacts_in_the_bucket(stack, pipelines):
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    for job in ("ingest", "stats"):
        run_id = pipelines["cluster"][job]["mlflow_run_id"]
        info = _mlflow(stack, "runs/get", run_id=run_id)["run"]
        assert info["info"]["status"] == "FINISHED"
        tags = {t["key"]: t["value"] for t in info["data"].get("tags", [])}
        assert tags["job"] == job and tags["env"] == "cluster-local"
        objects = client.list_objects_v2(Bucket=stack.bucket, Prefix="mlflow-artifacts/").get("Contents", [])
        assert any(o["Key"].endswith(f"{run_id}/artifacts/summary.json") for o in objects), run_id


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
    experiments = _mlflow(stack, "experiments/search", max_results=100)["experiments"]
    ids = [e["experiment_id"] for e in experiments]
    url = f"{stack.mlflow_uri}/api/2.0/mlflow/runs/search"
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps({"experiment_ids": ids, "max_results": 1000}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
        runs = json.loads(response.read())["runs"]
    assert {pipelines["cluster"][j]["mlflow_run_id"] for j in ("ingest", "stats")} <= {
        r["info"]["run_id"] for r in runs
    }
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
    assert any(p.endswith("ingest-cluster.err") for p in texts) and any(p.startswith("mlflow run") for p in texts)
    leaks = sorted((where, key) for where, text in texts.items() for key, value in secrets.items() if value in text)
    assert leaks == []
    # the search itself finds a value where one is (the stack's own credentials file)
    assert secrets["AWS_SECRET_ACCESS_KEY"] in (stack.state / "aws.env").read_text()
