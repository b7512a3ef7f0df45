"""What the cluster tests share: spark-submit of a job on the stack, a job run with worker 2 killed inside
its steps, and tables and folders compared with a local-mode run's."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from kgbrink.storage import staging

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kgbrink_cluster_stack", ROOT / "infra/cluster/stack.py")
stack_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stack_module
_spec.loader.exec_module(stack_module)
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
CLUSTER_CONF = "conf/cluster-local.yaml"
KGBRINK = str(ROOT / ".venv/bin/kgbrink")
# A kgbrink command's options for a local-mode Spark with the stack's settings (s3a, the MLflow server).
LOCAL_OPTIONS = ["spark.master=local[2]", "spark.conf.spark.driver.memory=4g"]


def set_args(settings: list[str]) -> list[str]:
    """``key=value`` settings as a kgbrink command's ``--set`` arguments."""
    return [word for item in settings for word in ("--set", item)]


LOCAL_MODE = ["--conf", CLUSTER_CONF, *set_args(LOCAL_OPTIONS)]
# The test JVMs, drivers and executors, live for one job: the parallel collector, and C2 only for code 10x
# hotter than its defaults (conf/test.yaml's flags; BENCHMARKS.md, "The test suite and CI").
JAVA_OPTIONS = (
    "-XX:+UseParallelGC -XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000"
    " -XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=400000"
)


def job_overrides(codegen: bool = False) -> list[str]:
    """The settings of a test job: :data:`JAVA_OPTIONS` for its executors and a local-mode driver; without
    ``codegen``, interpreted expressions, as conf/test.yaml (the pipeline's runs keep code generation: make
    test-cluster exercises it on the cluster and in local mode)."""
    overrides = [f"spark.conf.spark.{side}.extraJavaOptions={JAVA_OPTIONS}" for side in ("driver", "executor")]
    # both ways explicit: commands run in one local-mode session (run_local) change it command by command
    whole_stage, factory = ("true", "FALLBACK") if codegen else ("false", "NO_CODEGEN")
    return [
        *overrides,
        # conf/test.yaml's 2 MB Tungsten pages: a 4 GB local-mode driver got 64 MB ones for a few rows
        "spark.conf.spark.buffer.pageSize=2m",
        f"spark.conf.spark.sql.codegen.wholeStage={whole_stage}",
        f"spark.conf.spark.sql.codegen.factoryMode={factory}",
    ]


def job_settings(codegen: bool = False) -> list[str]:
    """:func:`job_overrides` as ``--set`` arguments of a kgbrink command."""
    return set_args(job_overrides(codegen))


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
    return _ended(run_dir, name, started, " ".join(command[:4]), done.returncode)


def _ended(run_dir: Path, name: str, started: float, what: str, code: int) -> float:
    """The seconds since ``started``, appended to the stack's times file as ``name``; fail with the tail of
    ``<run_dir>/<name>.err`` when ``code`` is not 0."""
    seconds = round(time.monotonic() - started, 1)
    with open(run_dir.parent / "test-cluster-times.txt", "a") as times:
        times.write(f"{name} {seconds}\n")
    if code:
        tail = (run_dir / f"{name}.err").read_text()[-4000:]
        pytest.fail(f"{what} ... exited {code}:\n{tail}")
    return seconds


def local_session():
    """This process's local-mode session with the stack's settings (s3a, the MLflow server): the tests'
    reader of the tables, and the session :func:`run_local`'s commands run in. One driver JVM, started and
    warmed up once for all of them (CI time), built here before any command does, so with the s3a jars."""
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session

    for key, value in env().items():
        os.environ.setdefault(key, value)
    return spark_session(load_config(ROOT / CLUSTER_CONF, [*LOCAL_OPTIONS, *job_overrides()]))


def run_local(commands: list[list[str]], run_dir: Path, name: str, codegen: bool = False) -> float:
    """``kgbrink`` commands (argument lists without ``kgbrink``, with :data:`LOCAL_MODE` or another local
    config) in order, in this process's :func:`local_session` with :func:`job_settings` (``codegen``), as
    ``kgbrink.cli.main`` runs them (it never stops the session); their output in ``<run_dir>/<name>.out|.err``,
    their seconds returned and appended to the stack's times file, as :func:`run`."""
    from kgbrink.cli import main

    local_session()
    started, code = time.monotonic(), 0
    with open(run_dir / f"{name}.out", "w") as out, open(run_dir / f"{name}.err", "w") as err:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            for args in commands:
                print("$ kgbrink " + " ".join(args), file=err, flush=True)
                code = main([*args, *job_settings(codegen)])
                if code:
                    break
    return _ended(run_dir, name, started, f"kgbrink {' '.join(args[:4])}", code)


# A kill waits at most this long for its step to start a task on worker 2; past it the test fails.
KILL_DEADLINE_S = 300


def submit(run_dir: Path, job: str, args: list[str], name: str, wait: bool = True, codegen: bool = False):
    """``jobs/<job>.py`` by spark-submit on the stack's master (client mode, the project's jars, kgbrink as a
    zip, :func:`job_settings`), as :func:`run` runs a command; ``wait=False``: the process, running."""
    jars = ",".join(
        str(p) for d in ("core", "graphframes", "s3") for p in sorted((ROOT / ".cache/jars" / d).glob("*.jar"))
    )
    archive = run_dir / "kgbrink.zip"
    if not archive.exists():
        shutil.make_archive(str(archive.with_suffix("")), "zip", ROOT / "lib", "kgbrink")
    spark_submit = [
        str(ROOT / ".venv/bin/spark-submit"), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client",
        "--driver-memory", "2g", "--driver-java-options", JAVA_OPTIONS, "--jars", jars, "--py-files", str(archive),
        f"jobs/{job}.py",
    ]  # fmt: skip
    command = [*spark_submit, "--conf", CLUSTER_CONF, *job_settings(codegen), *args]
    if wait:
        return run(command, run_dir, name)
    out, err = open(run_dir / f"{name}.out", "w"), open(run_dir / f"{name}.err", "w")  # noqa: SIM115
    return subprocess.Popen(command, cwd=ROOT, env=env(), stdout=out, stderr=err)


def canonical_csv(spark, path: str, version: int, target: Path) -> str:
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


def same_tables(spark, outputs: dict, expected: dict, exported: Path) -> list[str]:
    """Assert every output table equals the expected one as canonical CSV; the names compared."""
    assert sorted(outputs) == sorted(expected)
    compared = []
    for name, table in sorted(outputs.items()):
        (exported / "cluster").mkdir(parents=True, exist_ok=True)
        (exported / "local").mkdir(parents=True, exist_ok=True)
        a = canonical_csv(spark, table["path"], table["version"], exported / "cluster" / f"{name}.csv")
        b = canonical_csv(spark, expected[name]["path"], expected[name]["version"], exported / "local" / f"{name}.csv")
        assert a == b, f"table {name} differs between the cluster and local mode (see {exported})"
        compared.append(name)
    return compared


def file_digests(directory: Path) -> dict[str, str]:
    """``relative path -> SHA-256`` of every file under ``directory``."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def step_lines(text: str, step: str | None = None) -> list[str]:
    """The names of the steps, in the order their progress lines (``[k/n] name``, indented two spaces a
    level down) began them (on spark-submit's standard output, where the Python driver's standard error
    goes too): the top job's and one level below, or (``step``) those at ``step``'s level only."""
    lines = re.findall(r"^((?:  )?)\[\d+(?:/\d+)?\] (.+)$", text, re.M)
    if step is not None:
        depth = next((indent for indent, name in lines if name == step), None)
        lines = [(indent, name) for indent, name in lines if indent == depth]
    return [name for _, name in lines]


STEP_LINE = re.compile(r"^((?:  )?)\[\d+(?:/\d+)?\] (.+)$", re.M)
DONE_LINE = re.compile(r"^ +\S.* done in ", re.M)


def step_end(text: str, step: str) -> int | None:
    """Where ``step`` ended in the progress ``text``: the offset of its own ``done in`` line (a top-level
    step), else (a nested step, which prints none) of the first step line after it at its depth or above,
    or of a ``done in`` line (its parent's end); None when it has not ended, or not begun."""
    begun = next((m for m in STEP_LINE.finditer(text) if m.group(2) == step), None)
    if begun is None:
        return None
    if not begun.group(1):
        found = text.find(f"{step} done in", begun.end())
        return None if found < 0 else found
    siblings = [m.start() for m in STEP_LINE.finditer(text, begun.end()) if len(m.group(1)) <= len(begun.group(1))]
    parents = [m.start() for m in DONE_LINE.finditer(text, begun.end())]
    return min(siblings + parents, default=None)


def checkpoint_parts(client, bucket: str) -> set[str]:
    """The checkpoints written so far under ``s3://<bucket>/checkpoints/``: each ``<job folder>/rdd-N``
    with at least one part file."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="checkpoints/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {k.rsplit("/", 1)[0] for k in keys if "/rdd-" in k and k.rsplit("/", 1)[1].startswith("part-")}


def lost_executors(err: str) -> set[str]:
    """The executors the driver's log reports lost."""
    return set(re.findall(r"Lost executor (\d+)", err)) | set(re.findall(r"Executor app-[\w-]+/(\d+) removed", err))


def killed_in_steps(
    stack, run_dir: Path, job: str, args: list[str], name: str, kills, ready_when=None, codegen: bool = False
) -> dict:
    """``job`` on the cluster; worker 2 and its executors SIGKILLed inside each step of ``kills`` (``(step,
    after_checkpoint)`` in the order the job begins them), then started again: once the job printed the
    step's progress line, (``after_checkpoint``) wrote a checkpoint in it, then started a task on worker 2
    and (``ready_when``, a callable) that returned true (``codegen``: :func:`job_settings`'s). Asserts each
    kill landed inside its step (its line the last step line and, for a top-level step, its end not yet
    printed when the worker died), that each reached the job (an executor lost per kill in Spark's log on
    standard error), and that the job exited 0; its summary."""
    work = stack.state / "work" / "worker-2"
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    before = set(work.iterdir())
    summary, out_file, err_file = (run_dir / f"{name}{suffix}" for suffix in (".json", ".out", ".err"))
    started_at = time.monotonic()
    process = submit(run_dir, job, [*args, "--json", str(summary)], name, wait=False, codegen=codegen)
    at_kill, killed_at, down = [], None, False
    try:
        for step, after_checkpoint in kills:
            deadline, started, checkpoints, tasks, ready = time.monotonic() + KILL_DEADLINE_S, None, None, None, False
            while process.poll() is None and time.monotonic() < deadline:
                logs = [f for d in work.iterdir() if d not in before for f in d.glob("*/stderr")]
                running = sum(f.read_text(errors="replace").count("Running task") for f in logs)
                if started is None:
                    if step in step_lines(out_file.read_text(errors="replace")):
                        started, tasks = True, running
                        checkpoints = checkpoint_parts(client, stack.bucket) if after_checkpoint else None
                elif checkpoints is not None:
                    if checkpoint_parts(client, stack.bucket) - checkpoints:
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
        assert step_lines(text, step)[-1] == step and step_end(text, step) is None, (step, text[-2000:])
        assert (step_end(done, step) or -1) >= len(text), (step, done[-2000:])
    err = err_file.read_text()
    assert returncode == 0, err[-4000:]
    assert len(lost_executors(err)) >= len(kills), err[-4000:]  # each kill reached the job
    assert all(step in step_lines(done) for step, _ in kills)
    result = json.loads(summary.read_text())
    assert result["status"] == "ok"
    return result


def mlflow(stack, path: str, **query) -> dict:
    """The stack's MLflow REST API: GET ``path`` with ``query``, its JSON (status 200 asserted)."""
    url = f"{stack.mlflow_uri}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    status, body = stack_module.http_get(url, timeout=10)
    assert status == 200, (url, body[:500])
    return json.loads(body)
