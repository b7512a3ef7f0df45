"""Benchmark: does `kgbrink profile` predict the 2-worker standalone cluster? (issue 71, item 2) The sample
pipeline (`kgbrink run`: ingest -> stats -> build) of make test-cluster (20,000 triples) on CI's cluster stack
(infra/cluster/stack.py: a master, two workers of one core and 1 GB, moto's S3), event log on:

1. ``cluster``: spark-submit on the stack, dump and dataset on s3a, reliable checkpoints on s3a;
2. ``local_s3a``: ``local[2]`` with the same settings (conf/cluster-local.yaml): the same I/O, tasks in the
   driver's JVM;
3. ``local``: ``local[2]`` on local files (conf/local.yaml), as a user profiles on a laptop.

Each log is replayed on 2 slots (the cluster's cores); the predictions of runs 2 and 3 are compared with the
cluster's measured Spark span (its first job submitted to its last completed), and the cluster's own log
says where the difference goes (task time, the driver's gaps, stages). Results:
``benchmarks/results/profile-cluster-<triples>.json``.

    .venv/bin/python benchmarks/bench_profile_cluster.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import load, measure, new_results

from kgbrink.sizing import eventlog, report

PY = str(PROJECT / ".venv" / "bin" / "python")
KGBRINK = str(PROJECT / ".venv" / "bin" / "kgbrink")
STACK = [PY, str(PROJECT / "infra" / "cluster" / "stack.py")]
DUMP, DATASET = "s3a://kgbrink/dumps/profile", "s3a://kgbrink/datasets/profile"


def stack_env() -> dict:
    """The environment of a command on the stack: its credentials (``aws.env``), loopback, kgbrink's Python."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "AWS_EC2_METADATA_DISABLED": "true"}
    env["PYSPARK_PYTHON"] = PY
    for line in (PROJECT / "data" / "cluster" / "aws.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.removeprefix("export ").strip()] = value.strip().strip("'\"")
    return env


def spark_submit(out: Path, args: list[str]) -> list[str]:
    """``jobs/run.py`` by spark-submit on the stack's master, as make test-cluster submits (client mode)."""
    jars = ",".join(
        str(p) for d in ("core", "graphframes", "s3") for p in sorted((PROJECT / ".cache/jars" / d).glob("*.jar"))
    )
    archive = out / "kgbrink.zip"
    if not archive.exists():
        shutil.make_archive(str(archive.with_suffix("")), "zip", PROJECT / "lib", "kgbrink")
    submit = [str(PROJECT / ".venv/bin/spark-submit"), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client"]
    submit += [
        "--driver-memory",
        "2g",
        "--jars",
        jars,
        "--py-files",
        str(archive),
        str(PROJECT / "jobs" / "run_pipeline.py"),
    ]
    return [*submit, *args]


def profiled(events: Path) -> dict:
    apps = [eventlog.read(p) for p in eventlog.log_files(events)]
    out = {}
    for basis in ("cpu", "wall"):
        document = report.merge([report.profile(app, (1, 2, 8), basis) for app in apps])
        out[basis] = {k: document[k] for k in ("measured", "total", "jobs")}
    return out


def checked(measured: dict, out: Path, fitted: float | None = None) -> dict:
    """The predictions of the local runs against the cluster's span, without and with a per-task overhead:
    the cluster's task time over the ``local_s3a`` run's (same I/O, same tasks), a task, and ``fitted`` (another
    run's: an out-of-sample check)."""
    cluster = measured["cluster"]["profile"]
    span = cluster["cpu"]["measured"]
    check = {"cluster_span": span, "cluster_wall_seconds": measured["cluster"]["seconds"]}
    for basis in ("cpu", "wall"):
        total = cluster[basis]["total"]
        check[f"cluster_{basis}"] = {k: total[k] for k in ("task_seconds", "driver_seconds", "t1", "t_inf", "tasks")}
        check[f"cluster_{basis}"]["replay_2_vs_its_span"] = round(total["predicted"]["2"] / span - 1, 3)
    local = measured["local_s3a"]["profile"]["wall"]["total"]
    overhead = round((cluster["wall"]["total"]["task_seconds"] - local["task_seconds"]) / local["tasks"], 3)
    check["task_overhead"] = overhead
    for name in ("local_s3a", "local"):
        app = eventlog.read(eventlog.log_files(out / f"events-{name}")[0])
        for basis in ("cpu", "wall"):
            for extra in sorted({0.0, overhead, *([fitted] if fitted is not None else [])}):
                predicted = report.profile(app, (2,), basis, extra)["total"]["predicted"]["2"]
                check[f"{name}_{basis}_overhead_{extra:g}"] = {
                    "predicted_2": predicted,
                    "error_span": round(predicted / span - 1, 3),
                }
    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, default=20_000)
    parser.add_argument("--out", default=str(HERE / "out" / "profile-cluster"))
    parser.add_argument("--check-only", action="store_true", help="recompute the check from the runs kept")
    parser.add_argument("--task-overhead", type=float, help="also predict with this overhead (another run's fit)")
    args = parser.parse_args()
    out = Path(args.out)
    target = HERE / "results" / f"profile-cluster-{args.triples}.json"
    if args.check_only:
        results = json.loads(target.read_text())
        results["check"] = checked(results["runs"], out, args.task_overhead)
        target.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps(results["check"], indent=1))
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    results = new_results() | {"triples": args.triples}
    subprocess.run([*STACK, "down"], cwd=PROJECT, check=False, capture_output=True)
    shutil.rmtree(PROJECT / "data" / "cluster", ignore_errors=True)
    subprocess.run([*STACK, "up"], cwd=PROJECT, check=True)
    try:
        env = stack_env()
        sample = out / "sample-kg"
        common = ["--no-tracking"]
        subprocess.run(
            [KGBRINK, "synth", "--set", f"synth.triples={args.triples}", "--out", str(sample), *common],
            check=True,
            env=env,
            cwd=PROJECT,
        )
        stage = [KGBRINK, "stage", "--conf", "conf/cluster-local.yaml", "--input", str(sample), "--to", DUMP]
        subprocess.run(stage, check=True, env=env, cwd=PROJECT)
        cluster_args = ["--conf", "conf/cluster-local.yaml", "--input", DUMP + "/", *common]
        runs = {
            "cluster": spark_submit(out, [*cluster_args, "--dataset", DATASET, "--out", str(out / "export-cluster")]),
            "local_s3a": [
                KGBRINK,
                "run",
                *cluster_args,
                "--dataset",
                DATASET + "-local",
                "--out",
                str(out / "export-s3a"),
                "--set",
                "spark.master=local[2]",
                "--set",
                "spark.conf.spark.driver.memory=2g",
            ],
            "local": [
                KGBRINK,
                "run",
                "--input",
                str(sample),
                "--dataset",
                str(out / "dataset"),
                "--out",
                str(out / "export-local"),
                *common,
                "--set",
                "spark.master=local[2]",
                "--set",
                "spark.conf.spark.driver.memory=2g",
            ],
        }
        measured = {}
        for name, command in runs.items():
            events = out / f"events-{name}"
            events.mkdir()
            command = [*command, "--set", f"spark.event_log_dir={events}", "--json", str(out / f"{name}.json")]
            record = {
                "command": " ".join(command),
                "load_before": load(),
                **measure(command, out / f"{name}.log", env=env),
            }
            record["load_after"] = load()
            record["profile"] = profiled(events)
            measured[name] = record
            print(name, record["seconds"], json.dumps(record["profile"]["cpu"]["total"]), flush=True)
            results["runs"] = measured
            target.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        subprocess.run([*STACK, "down"], cwd=PROJECT, check=False, capture_output=True)
    check = checked(measured, out, args.task_overhead)
    results["check"] = check
    target.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(check, indent=1))


if __name__ == "__main__":
    main()
