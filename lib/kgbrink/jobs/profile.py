"""``kgbrink profile``: what recorded runs would take on N cores, read from Spark's event log.

Reads the event logs of ``--logs`` (a file, or a folder's files: setting ``spark.event_log_dir``, which
jobs write when it is set) and reports per run, per kgbrink job and per stage the tasks, rows and bytes,
task time, longest and median task and the driver's gaps; the work T1, the critical path T∞ and the time
replayed on each ``--cores`` N (:mod:`kgbrink.sizing.replay`); and the stages that will not scale. Writes
``profile.txt``, ``profile.json`` and ``profile.png`` (predicted time against cores) under ``--out``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobSummary
from kgbrink.core.typed import ConfigError
from kgbrink.sizing import eventlog, replay, report


def _cores(text: str) -> list[int]:
    try:
        cores = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--cores: comma-separated integers, got {text!r}") from None
    if not cores or min(cores) < 1:
        raise ConfigError(f"--cores: integers >= 1, got {text!r}")
    return sorted(set(cores))


@dataclass
class ProfileOptions:
    logs: str | None = arg(None, "an event log file or a folder of them (default: setting spark.event_log_dir)")
    cores: list[int] | None = arg(None, "comma-separated core counts to predict (default: 2,8,32,128)", convert=_cores)
    out: str | None = arg(None, "report folder (default: <logs folder>/profile)")
    basis: str = arg(
        "cpu",
        "a task lasts its CPU time (cpu: a dedicated core's) or its recorded wall time (wall)",
        choices=["cpu", "wall"],
    )
    task_overhead: float = arg(
        0.0,
        "seconds a cluster's executors add to every task (the local stack's: 0.064; docs/cluster.md)",
        type=float,
    )


def _check(config, opts: ProfileOptions) -> None:
    logs = opts.logs or config.spark.event_log_dir
    if not logs:
        raise ConfigError("no event logs: pass --logs, or set spark.event_log_dir and run the jobs to profile")
    if opts.task_overhead < 0:
        raise ConfigError(f"--task-overhead: seconds >= 0, got {opts.task_overhead}")
    if is_uri(logs):
        raise ConfigError(f"--logs {logs}: profile reads a local folder; copy the logs from object storage first")


@job(
    "profile",
    "what recorded runs would take on N cores: T1, T∞ and a replay of Spark's event log",
    ProfileOptions,
    spark=False,
    steps=2,
    check=_check,
    entry_point="profile_runs.py",  # not profile.py: spark-submit's script folder would shadow the stdlib's profile
)
def run(ctx: JobContext, opts: ProfileOptions) -> JobSummary:
    _check(ctx.config, opts)
    logs = opts.logs or ctx.config.spark.event_log_dir
    cores = tuple(opts.cores or replay.CORES)
    files = eventlog.log_files(logs)
    folder = Path(logs) if Path(logs).is_dir() else Path(logs).parent
    out = Path(opts.out or folder / "profile")
    summary = ctx.begin(
        logs=str(logs),
        cores=",".join(map(str, cores)),
        out=str(out),
        basis=opts.basis,
        task_overhead=opts.task_overhead,
    )
    with ctx.step("read"):
        documents = [report.profile(eventlog.read(path), cores, opts.basis, opts.task_overhead) for path in files]
    with ctx.step("report"):
        document = report.merge(documents)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(document, indent=1) + "\n")
        (out / "profile.txt").write_text(report.text(document))
        report.figure(document, out / "profile.png")
    total = document["total"]
    summary.counts.update(
        logs=len(files), stages=total["stages"], tasks=total["tasks"],
        flagged_stages=sum(1 for s in document["stages"] if s["flags"]),
    )  # fmt: skip
    summary.results = [
        {"metric": "t1_seconds", "value": total["t1"]},
        {"metric": "t_inf_seconds", "value": total["t_inf"]},
        {"metric": "measured_seconds", "value": document["measured"]},
        *[{"metric": "predicted_seconds", "cores": n, "value": total["predicted"][str(n)]} for n in cores],
    ]
    summary.highlights["predicted"] = " · ".join(f"{n} cores {total['predicted'][str(n)]:.1f} s" for n in cores)
    summary.highlights["report"] = str(out / "profile.txt")
    summary.artifacts += [str(out / name) for name in ("profile.txt", "profile.json", "profile.png")]
    return summary
