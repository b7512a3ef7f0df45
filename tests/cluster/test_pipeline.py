"""The distributed path on the local stack (issue 26): the make-run sample staged to the S3 server with
boto3; ``kgbrink run`` (ingest -> stats -> build) and ``score`` by spark-submit on the 2-worker standalone
cluster with the Delta tables on s3a and tracking on the MLflow server, every table equal to a local-mode
run's and the release files byte for byte although a worker was killed inside four of their steps; the
benchmark jobs surviving a killed worker the same way; a refresh with added and removed triples, then the same dump again as a no-op; nothing listening beyond loopback; the credentials
in no log, summary or MLflow run.

The tests run in file order and build on each other (``make test-cluster``)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import matplotlib.image
import psutil
import pytest

from kgbrink.storage import staging
from tests.cluster.conftest import CREDENTIALS, ROOT, env, run, stack_module

CLUSTER_CONF = "conf/cluster-local.yaml"
DUMP = "s3a://kgbrink/dumps/sample"
DATASET = "s3a://kgbrink/datasets/sample"
RANKS = "s3a://kgbrink/ranks/sample/ranks.tsv"
DUMP_V2 = "s3a://kgbrink/dumps/sample-v2"
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


def _ranks(sample: Path, target: Path) -> Path:
    """A rank file of the sample's valid and test triples, both sides: ranks drawn by a hash of the row."""
    lines = ["h\tr\tt\tside\trank\tnum_candidates"]
    for split in ("valid", "test"):
        for triple in (sample / f"wikidata5m_transductive_{split}.txt").read_text().splitlines():
            for side in ("head", "tail"):
                draw = int.from_bytes(hashlib.sha256(f"{triple}\t{side}".encode()).digest()[:8], "big")
                lines.append(f"{triple}\t{side}\t{1 + draw % 50}\t1000")
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.fixture(scope="module")
def ranks(stack, run_dir, sample) -> dict[str, str]:
    """The rank file, locally and uploaded to the bucket with boto3."""
    local = _ranks(sample, run_dir / "ranks.tsv")
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    bucket, key = staging.parse_uri(RANKS)
    client.upload_file(str(local), bucket, key)
    return {"local": str(local), "cluster": RANKS}


def _local_conf(local: Path) -> list[str]:
    return [
        "--conf", "conf/local.yaml", "--set", f"tracking.uri=sqlite:///{local}/mlflow.db",
        "--set", f"tracking.artifact_location={local}/mlflow-artifacts", "--set", f"log_dir={local}/logs",
    ]  # fmt: skip


# Worker 2 and its executors are SIGKILLed inside these steps of the cluster's ``run`` and ``score``, in
# the order the jobs begin them: once a task of the step ran on worker 2 and (True) the step wrote a
# checkpoint; the worker is started again after each kill. ingest's dictionaries and stats have no
# checkpoint, build's remove has; score's batches are its own recovery unit.
STATS_STEP = "entity_relation_counts_and_entity_popularity"
# A kill waits at most this long for its step to start a task on worker 2; past it the test fails.
KILL_DEADLINE_S = 300
RUN_KILLS = (("dictionaries", False), (STATS_STEP, False), ("remove", True))
SCORE_KILLS = (("batches", False),)

# The benchmark jobs on the sample, on small settings (the valid and test splits for seed-graphs and the
# sweep), so each takes about a minute on the cluster; the step each is killed in (after a checkpoint).
BENCHMARK_JOBS = {
    "mcq": (["--n-triples", "300", "--seed", "7", "--difficulties", "easy,medium"], "options"),
    "seed_graphs": (["--n-samples", "30", "--seed", "7", "--splits", "valid,test"], "sample"),
    "okgqa_sweep": (
        ["--scope", "kg", "--methods", "RS,ED", "--levels", "0.5", "--seeds", "1", "--splits", "valid,test"],
        "perturb",
    ),
}


def _benchmark_args(job: str, run_dir: Path, mode: str) -> list[str]:
    """``job``'s arguments in ``mode`` (cluster or local) but the dataset: its settings and its output."""
    args, _ = BENCHMARK_JOBS[job]
    out = run_dir / f"{job.replace('_', '-')}-{mode}"
    flag = {"mcq": ["--out", str(out)], "seed_graphs": ["--out", str(out / "prompts.jsonl")]}
    return [*args, *flag.get(job, ["--report-dir", str(out)])]


def _local_runs(run_dir: Path, sample: Path, ranks: dict) -> dict:
    """run, score and the benchmark jobs in local mode on local files: the expected outputs."""
    local = run_dir / "local"
    dataset = str(local / "datasets/sample")
    out: dict = {"seconds": {}}
    run_args = ["--input", str(sample), "--dataset", dataset, "--out", str(run_dir / "release-local")]
    summary = ["--json", str(run_dir / "run-local.json")]
    out["seconds"]["run"] = run([KGBRINK, "run", *_local_conf(local), *run_args, *summary], run_dir, "run-local")
    score_args = ["--ranks", ranks["local"], "--dataset", dataset, "--json", str(run_dir / "score-local.json")]
    out["seconds"]["score"] = run([KGBRINK, "score", *_local_conf(local), *score_args], run_dir, "score-local")
    for job in ("run", "score"):
        out[job] = json.loads((run_dir / f"{job}-local.json").read_text())
    for job in sorted(BENCHMARK_JOBS):
        name = job.replace("_", "-")
        summary = run_dir / f"{name}-local.json"
        command = [KGBRINK, name, *_local_conf(local), *_benchmark_args(job, run_dir, "local"), "--dataset", dataset]
        run([*command, "--json", str(summary)], run_dir, f"{name}-local")
        out[job] = json.loads(summary.read_text())
    return out


@pytest.fixture(scope="module")
def pipelines(stack, run_dir, sample, staged, ranks) -> dict:
    """``kgbrink run`` (ingest -> stats -> build) then ``score`` on the cluster (input, dataset and rank file
    on s3a, release files into a local folder), worker 2 killed inside the steps of RUN_KILLS and
    SCORE_KILLS; then the same and the benchmark jobs in local mode (``_local_runs``)."""
    cluster = {}
    run_args = ["--input", DUMP + "/", "--dataset", DATASET, "--out", str(run_dir / "release-cluster")]
    cluster["run"] = _killed_in_steps(stack, run_dir, "run_pipeline", run_args, "run-cluster", RUN_KILLS)
    score_args = ["--ranks", ranks["cluster"], "--dataset", DATASET]
    cluster["score"] = _killed_in_steps(stack, run_dir, "score", score_args, "score-cluster", SCORE_KILLS)
    # after the cluster's runs, not beside them: on 2 cores the two contend (1,020 s side by side)
    return {"cluster": cluster, "local": _local_runs(run_dir, sample, ranks)}


def _step(summary: dict, step: str) -> dict:
    """The outputs of ``step`` (``ingest``, ``stats``, ``build``) of a ``run`` summary, by table name."""
    return {k.split(".", 1)[1]: v for k, v in summary["outputs"].items() if k.split(".", 1)[0] == step}


def _canonical_csv(spark, path: str, version: int, target: Path) -> str:
    """The table at ``path`` (``version``) as CSV, nested columns as JSON, rows sorted by every column;
    its SHA-256."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    nested = (ArrayType, MapType, StructType)
    frame = frame.select(
        *(
            F.to_json(F.col(f"`{f.name}`")).alias(f.name) if isinstance(f.dataType, nested) else F.col(f"`{f.name}`")
            for f in frame.schema
        )
    )
    frame.toPandas().sort_values(list(frame.columns), kind="mergesort").to_csv(target, index=False)
    return hashlib.sha256(target.read_bytes()).hexdigest()


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


def _files(directory: Path) -> dict[str, str]:
    """``relative path -> SHA-256`` of every file under ``directory``."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_the_pipeline_and_its_scores_on_the_cluster_equal_local_mode(stack, run_dir, pipelines, reader):
    """The cluster's run and score, each surviving killed workers (``_killed_in_steps``), give local mode's
    counts, tables and release files."""
    cluster, local = pipelines["cluster"], pipelines["local"]
    for job in ("run", "score"):
        assert cluster[job]["status"] == local[job]["status"] == "ok"
        assert cluster[job]["counts"] == local[job]["counts"], job
    assert all(o["path"].startswith(DATASET + "/") for o in cluster["run"]["outputs"].values())
    compared = []
    for step in ("ingest", "stats", "build"):
        outputs, expected = _step(cluster["run"], step), _step(local["run"], step)
        compared += _same_tables(reader, outputs, expected, run_dir / "exported" / step)
    assert {"entities", "triples", "entity_popularity", "mine.rules", "remove.removed"} <= set(compared)
    assert {"questions.questions", "remove.complete", "remove.incomplete"} <= set(compared)
    # the release files, byte for byte; the build report names where the dataset is, and only that differs
    release = {mode: run_dir / f"release-{mode}" for mode in ("cluster", "local")}
    files = {mode: _files(folder) for mode, folder in release.items()}
    report = "report/report.md"
    assert sorted(files["cluster"]) == sorted(files["local"]) and "DATA_CARD.md" in files["local"]
    differ = sorted(name for name, digest in files["cluster"].items() if files["local"][name] != digest)
    assert differ in ([], [report]), differ
    texts = [(release[m] / report).read_text() for m in ("cluster", "local")]
    assert texts[0].replace(DATASET, "DATASET") == texts[1].replace(local["run"]["params"]["dataset"], "DATASET")
    # the scores: same results, and the same results table
    assert cluster["score"]["counts"]["scored"] == 200
    assert _same_tables(reader, cluster["score"]["outputs"], local["score"]["outputs"], run_dir / "exported" / "score")


def _step_lines(text: str, step: str | None = None) -> list[str]:
    """The names of the steps, in the order their progress lines (``[k/n] name``, indented two spaces a
    level down) began them (on spark-submit's standard output, where the Python driver's standard error
    goes too): the top job's and one level below, or (``step``) those at ``step``'s level only."""
    lines = re.findall(r"^((?:  )?)\[\d+(?:/\d+)?\] (.+)$", text, re.M)
    if step is not None:
        depth = next((indent for indent, name in lines if name == step), None)
        lines = [(indent, name) for indent, name in lines if indent == depth]
    return [name for _, name in lines]


_STEP_LINE = re.compile(r"^((?:  )?)\[\d+(?:/\d+)?\] (.+)$", re.M)
_DONE_LINE = re.compile(r"^ +\S.* done in ", re.M)


def _step_end(text: str, step: str) -> int | None:
    """Where ``step`` ended in the progress ``text``: the offset of its own ``done in`` line (a top-level
    step), else (a nested step, which prints none) of the first step line after it at its depth or above,
    or of a ``done in`` line (its parent's end); None when it has not ended, or not begun."""
    begun = next((m for m in _STEP_LINE.finditer(text) if m.group(2) == step), None)
    if begun is None:
        return None
    if not begun.group(1):
        found = text.find(f"{step} done in", begun.end())
        return None if found < 0 else found
    siblings = [m.start() for m in _STEP_LINE.finditer(text, begun.end()) if len(m.group(1)) <= len(begun.group(1))]
    parents = [m.start() for m in _DONE_LINE.finditer(text, begun.end())]
    return min(siblings + parents, default=None)


def _checkpoint_parts(client, bucket: str) -> set[str]:
    """The checkpoints written so far under ``s3://<bucket>/checkpoints/``: each ``<job folder>/rdd-N``
    with at least one part file."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="checkpoints/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {k.rsplit("/", 1)[0] for k in keys if "/rdd-" in k and k.rsplit("/", 1)[1].startswith("part-")}


def _lost_executors(err: str) -> set[str]:
    """The executors the driver's log reports lost."""
    return set(re.findall(r"Lost executor (\d+)", err)) | set(re.findall(r"Executor app-[\w-]+/(\d+) removed", err))


def _killed_in_steps(stack, run_dir: Path, job: str, args: list[str], name: str, kills, ready_when=None) -> dict:
    """``job`` on the cluster; worker 2 and its executors SIGKILLed inside each step of ``kills`` (``(step,
    after_checkpoint)`` in the order the job begins them), then started again: once the job printed the
    step's progress line, (``after_checkpoint``) wrote a checkpoint in it, then started a task on worker 2
    and (``ready_when``, a callable) that returned true. Asserts each kill landed inside its step (its line the last step line and, for a top-level
    step, its end not yet printed when the worker died), that each reached the job (an executor lost per
    kill in Spark's log on standard error), and that the job exited 0; its summary."""
    work = stack.state / "work" / "worker-2"
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    before = set(work.iterdir())
    summary, out_file, err_file = (run_dir / f"{name}{suffix}" for suffix in (".json", ".out", ".err"))
    started_at = time.monotonic()
    process = _submit(run_dir, job, [*args, "--json", str(summary)], name, wait=False)
    at_kill, killed_at, down = [], None, False
    try:
        for step, after_checkpoint in kills:
            deadline, started, checkpoints, tasks, ready = time.monotonic() + KILL_DEADLINE_S, None, None, None, False
            while process.poll() is None and time.monotonic() < deadline:
                logs = [f for d in work.iterdir() if d not in before for f in d.glob("*/stderr")]
                running = sum(f.read_text(errors="replace").count("Running task") for f in logs)
                if started is None:
                    if step in _step_lines(out_file.read_text(errors="replace")):
                        started, tasks = True, running
                        checkpoints = _checkpoint_parts(client, stack.bucket) if after_checkpoint else None
                elif checkpoints is not None:
                    if _checkpoint_parts(client, stack.bucket) - checkpoints:
                        checkpoints, tasks = None, running
                elif running > tasks and (ready_when is None or ready_when()):
                    ready = True
                    break
                time.sleep(0.1)
            assert process.poll() is None, f"{name}: the job ended before a task of step {step} ran on worker 2"
            if not ready:
                pytest.fail(f"{name}: no task of step {step} ran on worker 2 within {KILL_DEADLINE_S} s")
            stack_module.kill_worker(stack, 2)
            down, killed_at = True, time.monotonic()
            at_kill.append((step, out_file.read_text(errors="replace")))  # read once the worker is dead
            stack_module.restart_worker(stack, 2)
            down = False
        returncode = process.wait(timeout=1800)
    finally:
        if process.poll() is None:
            process.kill()
        if down:
            stack_module.restart_worker(stack, 2)
    with open(run_dir.parent / "test-cluster-times.txt", "a") as times:
        times.write(
            f"{name} {time.monotonic() - started_at:.1f} ({time.monotonic() - killed_at:.1f} after the last kill)\n"
        )
    done = out_file.read_text()
    for step, text in at_kill:  # inside the step when the worker was dead: begun, not ended; it ended later
        assert _step_lines(text, step)[-1] == step and _step_end(text, step) is None, (step, text[-2000:])
        assert (_step_end(done, step) or -1) >= len(text), (step, done[-2000:])
    err = err_file.read_text()
    assert returncode == 0, err[-4000:]
    assert len(_lost_executors(err)) >= len(kills), err[-4000:]  # each kill reached the job
    assert all(step in _step_lines(done) for step, _ in kills)
    result = json.loads(summary.read_text())
    assert result["status"] == "ok"
    return result


def _outputs(summary: dict) -> dict:
    """A summary's output tables, with those of the ``perturb`` job an ``okgqa-sweep`` ran."""
    nested = summary.get("perturb", {}).get("outputs", {})
    return {**summary["outputs"], **{f"perturb.{k}": v for k, v in nested.items()}}


@pytest.mark.parametrize("job", sorted(BENCHMARK_JOBS))
def test_benchmark_jobs_survive_a_killed_worker_with_identical_output(stack, run_dir, pipelines, reader, job):
    """mcq, seed-graphs and okgqa-sweep on the cluster's dataset, worker 2 killed inside their
    checkpointing step, against the same job in local mode on the local run's dataset: the same counts,
    results, tables and files (mcq's JSON Lines, seed-graphs' prompt records)."""
    _, step = BENCHMARK_JOBS[job]
    name = job.replace("_", "-")
    cluster_args = [*_benchmark_args(job, run_dir, "cluster"), "--dataset", DATASET]
    done = _killed_in_steps(stack, run_dir, job, cluster_args, f"{name}-kill", ((step, True),))
    expected = pipelines["local"][job]
    assert done["counts"] == expected["counts"] and done.get("results") == expected.get("results")
    compared = _same_tables(reader, _outputs(done), _outputs(expected), run_dir / "exported" / name)
    assert compared
    out = {mode: run_dir / f"{name}-{mode}" for mode in ("cluster", "local")}
    files = {mode: _files(folder) for mode, folder in out.items()}
    assert files["cluster"].keys() == files["local"].keys() and files["cluster"]
    for path, digest in files["cluster"].items():  # a plot's pixels; every other file's bytes
        if path.endswith(".png"):
            pixels = [matplotlib.image.imread(out[mode] / path) for mode in ("cluster", "local")]
            assert pixels[0].shape == pixels[1].shape and (pixels[0] == pixels[1]).all(), path
        else:
            assert digest == files["local"][path], path


NEW_ENTITIES = [f"Q99{i:04d}" for i in range(1, 11)]
SPLITS = ("train", "valid", "test")


def _dropped(line: str) -> bool:
    return hashlib.sha256(line.encode()).digest()[0] < 3  # about 1.2% of the lines


def _keys(lines) -> tuple[set[str], set[str]]:
    parts = [line.split("\t") for line in lines]
    return {p[0] for p in parts} | {p[2] for p in parts}, {p[1] for p in parts}


@pytest.fixture(scope="module")
def dump_v2(run_dir, sample) -> dict:
    """The sample with about 1% of its triples removed (``_dropped``) and 42 added, all of 10 new entities:
    4 train triples of each and a test triple of the first two; staged to the bucket with boto3."""
    target = run_dir / "sample-v2"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(sample, target)
    old = {s: (sample / f"wikidata5m_transductive_{s}.txt").read_text().splitlines() for s in SPLITS}
    relations = sorted({line.split("\t")[1] for line in old["train"][:200]})[:5]
    tails = [line.split("\t")[2] for line in old["train"][:10]]
    added = {
        "train": [f"{e}\t{r}\t{tails[i]}" for i, e in enumerate(NEW_ENTITIES) for r in relations[:4]],
        "valid": [],
        "test": [f"{e}\t{relations[4]}\t{tails[0]}" for e in NEW_ENTITIES[:2]],
    }
    new = {s: [x for x in old[s] if not _dropped(x)] + added[s] for s in SPLITS}
    for split, lines in new.items():
        (target / f"wikidata5m_transductive_{split}.txt").write_text("".join(x + "\n" for x in lines))
    summary = run_dir / "stage-v2.json"
    args = ["--conf", CLUSTER_CONF, "--input", str(target), "--to", DUMP_V2, "--json", str(summary)]
    run([KGBRINK, "stage", *args], run_dir, "stage-v2")
    removed = {s: [x for x in old[s] if _dropped(x)] for s in SPLITS}
    return {"old": old, "new": new, "added": added, "removed": removed, "stage": json.loads(summary.read_text())}


def _refresh(run_dir: Path, name: str) -> dict:
    summary = run_dir / f"{name}.json"
    args = ["--format", "wikidata5m", "--input", DUMP_V2 + "/", "--dataset", DATASET]
    args += ["--out", str(run_dir / "refresh-release"), "--json", str(summary)]
    _submit(run_dir, "refresh", args, name)
    return json.loads(summary.read_text())


@pytest.fixture(scope="module")
def refreshed(run_dir, pipelines, dump_v2) -> dict:
    """The changed dump refreshed into the cluster's dataset, then the same dump again."""
    return {"first": _refresh(run_dir, "refresh-cluster"), "again": _refresh(run_dir, "refresh-again")}


def _by_key(spark, table: str, version: int) -> dict[str, int]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(table)
    return {r["key"]: r["id"] for r in frame.select("key", "id").collect()}


def test_a_refresh_on_the_cluster_merges_the_changed_dump(stack, run_dir, dump_v2, refreshed, reader):
    done = refreshed["first"]
    assert dump_v2["stage"]["changed"] is True
    assert done["status"] == "ok" and done["counts"]["changed"] is True
    counts = done["counts"]
    # the change counts, exactly: what the dump added and removed per split
    added = {s: len(dump_v2["added"][s]) for s in SPLITS}
    removed = {s: len(dump_v2["removed"][s]) for s in SPLITS}
    assert added["train"] == 40 and added["test"] == 2 and sum(removed.values()) > 1000
    assert counts["triples_added_per_split"] == added
    assert counts["triples_removed_per_split"] == removed
    unchanged = {s: len(dump_v2["old"][s]) - removed[s] for s in SPLITS}
    assert counts["triples_unchanged_per_split"] == unchanged
    # new and retired keys: the ten new entities; what only removed triples used
    entities_v2, relations_v2 = _keys(x for s in SPLITS for x in dump_v2["new"][s])
    gone_entities, gone_relations = _keys(x for s in SPLITS for x in dump_v2["removed"][s])
    assert counts["new_entities"] == len(NEW_ENTITIES) and counts["new_relations"] == 0
    assert counts["retired_entities"] == len(gone_entities - entities_v2)
    assert counts["retired_relations"] == len(gone_relations - relations_v2)
    # known keys keep their ids; the new keys are numbered after them
    versions = counts["versions"]
    path = f"{DATASET}/entities"
    before = _by_key(reader, path, versions["before"]["entities"])
    after = _by_key(reader, path, versions["after"]["entities"])
    assert {k: after[k] for k in before} == before
    assert sorted(set(after) - set(before)) == NEW_ENTITIES
    assert min(after[k] for k in NEW_ENTITIES) > max(before.values())
    # the merged triples are the new dump's
    triples = reader.read.format("delta").option("versionAsOf", versions["after"]["triples"])
    triples = triples.load(f"{DATASET}/triples")
    names = {i: k for k, i in after.items()}
    relation_names = {i: k for k, i in _by_key(reader, f"{DATASET}/relations", versions["after"]["relations"]).items()}
    merged = {
        (f"{names[r['h']]}\t{relation_names[r['r']]}\t{names[r['t']]}", r["split"])
        for r in triples.select("h", "r", "t", "split").collect()
    }
    assert merged == {(x, s) for s in SPLITS for x in dump_v2["new"][s]}
    # downstream: statistics recomputed, the variant rebuilt (release files written), the score run again
    acted = {(d["kind"], d["name"]): d["action"] for d in done["downstream"]}
    assert {a for (kind, _), a in acted.items() if kind == "stats"} == {"recompute"}
    assert acted[("variant", "brink")] == "rebuild"
    assert [a for (kind, _), a in acted.items() if kind == "score"] == ["rescore"]
    assert (run_dir / "refresh-release" / "brink" / "DATA_CARD.md").is_file()


def test_the_same_dump_again_is_a_no_op_that_says_so(refreshed):
    first, again = refreshed["first"], refreshed["again"]
    assert again["status"] == "ok" and again["counts"]["changed"] is False
    assert again["counts"]["triples_added"] == again["counts"]["triples_removed"] == 0
    assert {d["action"] for d in again["downstream"]} == {"skip"}
    assert again["counts"]["versions"]["before"] == again["counts"]["versions"]["after"]
    assert again["counts"]["versions"]["after"] == first["counts"]["versions"]["after"]


def _mlflow(stack, path: str, **query) -> dict:
    url = f"{stack.mlflow_uri}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    status, body = stack_module.http_get(url, timeout=10)
    assert status == 200, (url, body[:500])
    return json.loads(body)


def test_cluster_runs_are_tracked_on_the_server_with_artifacts_in_the_bucket(stack, pipelines):
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    for job in ("run", "score"):
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
