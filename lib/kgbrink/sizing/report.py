"""A profile of recorded runs (:mod:`kgbrink.sizing.replay`) as a document, text and a figure.

The document per run (one event log): the measured span, T1, T∞ and T(N) for each N of ``cores``, shuffle
bytes written (and the most one stage read), the largest task's execution memory and the bytes spilled, per
kgbrink job (a job's figures include its sub-jobs': ``release`` holds ``release/brink/build``; ``release
(own)`` is its stages outside them, without a measured span) and per stage. Several runs (one log each, run
one after another) add up: :func:`merge`.
"""

from __future__ import annotations

from pathlib import Path

from kgbrink.sizing import replay
from kgbrink.sizing.eventlog import Application

UNLABELLED = "(no kgbrink job)"


def figures(
    profiles: list[replay.StageProfile],
    tail: float,
    cores: tuple[int, ...],
    jobs: dict | None = None,
    threads: dict | None = None,
) -> dict:
    return {
        "stages": len(profiles),
        "tasks": sum(p.tasks for p in profiles),
        "task_seconds": round(sum(p.task_seconds for p in profiles), 3),
        "driver_seconds": round(sum(p.gap for p in profiles) + tail, 3),
        "t1": round(replay.work(profiles, tail), 3),
        "t_inf": round(replay.critical_path(profiles, tail, jobs, threads), 3),
        "predicted": {str(n): round(replay.predicted(profiles, tail, n), 3) for n in cores},
        "shuffle_write_bytes": sum(p.shuffle_write_bytes for p in profiles),
        "input_rows": sum(p.input_rows for p in profiles),
        "peak_task_memory_bytes": max((p.peak_task_memory_bytes for p in profiles), default=0),
        "max_stage_shuffle_read_bytes": max((p.shuffle_read_bytes for p in profiles), default=0),
        "spilled_bytes": sum(p.spilled_bytes for p in profiles),
    }


OWN = " (own)"  # a job's own stages, beside its sub-jobs'


def _labels(profiles: list[replay.StageProfile]) -> list[str]:
    """Every job label and each of its parents' (``release/brink/build`` gives ``release``, ``release/brink``);
    a label with sub-jobs and stages of its own also as ``<label> (own)``."""
    labels, own = set(), {p.label or UNLABELLED for p in profiles}
    for label in own:
        parts = label.split("/")
        labels.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    parents = {label.rsplit("/", 1)[0] for label in labels if "/" in label}
    return sorted(labels | {label + OWN for label in own & parents})


def _in(profile: replay.StageProfile, label: str) -> bool:
    own = profile.label or UNLABELLED
    if label.endswith(OWN):
        return own == label.removesuffix(OWN)
    return own == label or own.startswith(label + "/")


def profile(
    app: Application, cores: tuple[int, ...] = replay.CORES, basis: str = "cpu", task_overhead: float = 0.0
) -> dict:
    """The document of one run, its tasks lasting their ``basis`` time plus ``task_overhead`` seconds
    (:func:`replay.stages`)."""
    profiles, tail, (start, end) = replay.stages(app, basis, task_overhead)
    jobs = []
    for label in _labels(profiles):
        chosen = [p for p in profiles if _in(p, label)]
        spark_jobs = {p.job for p in chosen}
        spans = [app.jobs[j] for j in spark_jobs if j in app.jobs]
        measured = (
            (max(e for _, e in spans if e is not None) - min(s for s, _ in spans)) / 1000.0
            if spans and all(e is not None for _, e in spans) and not label.endswith(OWN)
            else None
        )
        jobs.append({"job": label, "measured": measured, **figures(chosen, 0.0, cores, app.jobs, app.threads)})
    return {
        "sources": [app.source],
        "spark_version": app.spark_version,
        "complete": app.complete,
        "cores": list(cores),
        "basis": basis,
        "task_overhead": task_overhead,
        "measured": round((end - start) / 1000.0, 3),
        "total": figures(profiles, tail, cores, app.jobs, app.threads),
        "jobs": jobs,
        "stages": [p.as_dict() for p in profiles],
    }


def merge(documents: list[dict]) -> dict:
    """Runs one after another: their times, stages and jobs added up (a job of several runs: its sums)."""
    if len(documents) == 1:
        return documents[0]
    summed = ("stages", "tasks", "task_seconds", "driver_seconds", "t1", "t_inf", "shuffle_write_bytes", "input_rows",
              "spilled_bytes")  # fmt: skip

    def add(rows: list[dict]) -> dict:
        out = {k: round(sum(r.get(k, 0) for r in rows), 3) for k in summed}
        for k in ("peak_task_memory_bytes", "max_stage_shuffle_read_bytes"):
            out[k] = max(r.get(k, 0) for r in rows)
        out["predicted"] = {n: round(sum(r["predicted"][n] for r in rows), 3) for n in rows[0]["predicted"]}
        return out

    jobs: dict[str, list[dict]] = {}
    for document in documents:
        for row in document["jobs"]:
            jobs.setdefault(row["job"], []).append(row)
    return {
        "sources": [s for d in documents for s in d["sources"]],
        "spark_version": ",".join(sorted({d["spark_version"] for d in documents})),
        "complete": all(d["complete"] for d in documents),
        "cores": documents[0]["cores"],
        "basis": documents[0]["basis"],
        "task_overhead": documents[0].get("task_overhead", 0.0),
        "measured": round(sum(d["measured"] for d in documents), 3),
        "total": add([d["total"] for d in documents]),
        "jobs": [
            {"job": label, "measured": _sum_or_none([r["measured"] for r in rows]), **add(rows)}
            for label, rows in sorted(jobs.items())
        ],
        "stages": [s for d in documents for s in d["stages"]],
    }


def _sum_or_none(values: list) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 3)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def text(document: dict, top: int = 15) -> str:
    """The document as the report's text: totals, per job, the flagged stages and the longest ones."""
    cores, total = document["cores"], document["total"]
    lines = [
        f"{len(document['sources'])} event log(s), Spark {document['spark_version'] or '?'}"
        + ("" if document["complete"] else " (a log was cut short: its run had not ended)"),
        f"measured {_seconds(document['measured'])}; {total['tasks']:,} tasks in {total['stages']:,} stages; "
        f"T1 {_seconds(total['t1'])} (driver {_seconds(total['driver_seconds'])}); T∞ {_seconds(total['t_inf'])}",
        f"predicted (tasks at their {document['basis']} time): "
        + " · ".join(f"{n} cores {_seconds(total['predicted'][str(n)])}" for n in cores),
        "",
        "job".ljust(40)
        + "measured".rjust(10)
        + "T1".rjust(10)
        + "T∞".rjust(10)
        + "".join(f"{n} cores".rjust(11) for n in cores)
        + "shuffle GB".rjust(12)
        + "task MB".rjust(9)
        + "spill GB".rjust(10),
    ]
    for row in document["jobs"]:
        lines.append(
            row["job"][:39].ljust(40)
            + _seconds(row["measured"]).rjust(10)
            + _seconds(row["t1"]).rjust(10)
            + _seconds(row["t_inf"]).rjust(10)
            + "".join(_seconds(row["predicted"][str(n)]).rjust(11) for n in cores)
            + f"{row['shuffle_write_bytes'] / 1e9:12.2f}"
            + f"{row.get('peak_task_memory_bytes', 0) / (1 << 20):9.0f}"
            + f"{row.get('spilled_bytes', 0) / 1e9:10.2f}"
        )
    flagged = [s for s in document["stages"] if s["flags"]]
    lines += ["", f"stages that will not scale: {len(flagged)}"]
    for stage in flagged:
        where = "/".join(x for x in (stage["label"] or UNLABELLED, stage["step"]) if x)
        lines += [f"  stage {stage['id']} ({where}; {stage['name'][:60]}): {flag}" for flag in stage["flags"]]
    longest = sorted(document["stages"], key=lambda s: -s["task_seconds"])[:top]
    lines += [
        "",
        f"the {len(longest)} stages of most task time",
        "  stage  tasks   task s  longest  median   gap  rows in  shuffle MB  job",
    ]
    for s in longest:
        shuffle = (s["shuffle_read_bytes"] + s["shuffle_write_bytes"]) / (1 << 20)
        lines.append(
            f"  {s['id']:>5}  {s['tasks']:>5}  {s['task_seconds']:>7.1f}  {s['longest']:>7.1f}  {s['median']:>6.2f}"
            f"  {s['gap']:>4.1f}  {s['input_rows'] + s['shuffle_read_rows']:>7,}  {shuffle:>10.1f}  "
            f"{s['label'] or UNLABELLED}{'/' + s['step'] if s['step'] else ''}"
        )
    return "\n".join(lines) + "\n"


def figure(document: dict, path: Path, jobs: int = 8) -> Path:
    """Predicted time against cores (log-log), the whole run and its ``jobs`` top-level jobs of most work."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kgbrink.core.figures import save

    cores = document["cores"]
    top = [r for r in document["jobs"] if "/" not in r["job"]]
    top = sorted(top, key=lambda r: -r["t1"])[:jobs]
    fig, axis = plt.subplots(figsize=(6.4, 4.2))
    for row, style in [(document["total"] | {"job": "all"}, "k-o"), *[(r, "-o") for r in top]]:
        axis.plot(cores, [max(row["predicted"][str(n)], 1e-3) for n in cores], style, label=row["job"])
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(cores, [str(n) for n in cores])
    axis.set_xlabel("cores")
    axis.set_ylabel("predicted wall time (s)")
    axis.legend(fontsize=7)
    return save(fig, path)
