"""What a person sees: progress on stderr, a short human summary, and errors without stack traces.

Progress: the top job's steps as ``[k/n] name`` with their time, the steps one level down as indented
lines, and for a Spark stage running longer than :data:`STAGE_REPORT_SECONDS` its tasks done, the percent
and an estimate of its time left (:func:`stage_line`). Errors:
a Py4J/JVM failure is reduced to the chain of its causes (which names the file a reader failed on); the
whole trace goes to a log file.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

STAGE_REPORT_SECONDS = 30.0


def clock(seconds: float) -> str:
    """``4m05s``, or ``12.3s`` under a minute."""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


@dataclass
class Progress:
    """Step reporter; ``depth`` 0 is the job the user started (deeper levels report less)."""

    stream: TextIO | None = None
    depth: int = 0
    total: int | None = None
    counter: list[int] = field(default_factory=lambda: [0])
    # False for the command line's own reporter: the job it starts is at depth 0.
    parent_job: bool = False
    # the stage watchers of the steps running, outermost first, shared with the children: only the last reports
    watchers: list = field(default_factory=list)
    watch: bool = True  # False: steps report no stages (a thread's, beside others: one watcher reports all)

    def child(self, total: int | None = None) -> Progress:
        """The reporter of a job run by this one (or by the command line, for the top job: depth 0)."""
        depth = self.depth + 1 if self.parent_job else self.depth
        return Progress(self.stream, depth, total, [0], True, self.watchers, self.watch)

    def unwatched(self) -> Progress:
        """This reporter (its step numbers shared) for a thread whose steps run beside others': they print
        their lines but watch no stages (:meth:`watching` reports the application's)."""
        return Progress(self.stream, self.depth, self.total, self.counter, self.parent_job, [], False)

    @contextmanager
    def watching(self, spark: Any, name: str) -> Iterator[None]:
        """While inside: the application's running stages reported as ``name``'s (threads' steps beside)."""
        watcher = _StageWatcher(spark, self, time.perf_counter(), name) if spark is not None else None
        try:
            yield
        finally:
            if watcher:
                watcher.stop()

    def _print(self, text: str) -> None:
        stream = self.stream or sys.stderr
        print(text, file=stream, flush=True)

    @contextmanager
    def reporting(self, report: Callable[[], str | None]) -> Iterator[None]:
        """While inside: the running step's periodic line is ``report()`` (e.g. answers counted by the job
        itself) instead of Spark's task counts; ``report`` returning None prints nothing."""
        watcher = self.watchers[-1] if self.watchers else None
        if watcher is not None:
            watcher.report = report
        try:
            yield
        finally:
            if watcher is not None:
                watcher.report = None

    def note(self, text: str) -> None:
        """One line before or between the top job's steps (a job run by another leaves it to that one)."""
        if self.depth == 0:
            self._print(text)

    @contextmanager
    def step(self, name: str, spark: Any = None) -> Iterator[None]:
        self.counter[0] += 1
        k = self.counter[0]
        label = f"[{k}/{max(k, self.total)}]" if self.total else f"[{k}]"
        start = time.perf_counter()
        if self.depth <= 1:
            self._print(f"{'  ' * self.depth}{label} {name}")
        watched = spark is not None and self.watch and self.depth <= 2
        watcher = _StageWatcher(spark, self, start, name) if watched else None
        try:
            yield
        finally:
            if watcher:
                watcher.stop()
            if self.depth == 0:
                self._print(f"      {name} done in {clock(time.perf_counter() - start)}")


def stage_line(finished: int, tasks: int, done_since: int = 0, seconds: float = 0.0) -> str:
    """``finished/tasks tasks (p%, about T left)``: the time left at the pace of the ``done_since`` tasks
    finished in the last ``seconds`` the stages were watched (left out until a pace is known)."""
    if tasks <= 0:
        return f"{finished}/{tasks} tasks"
    text = f"{finished}/{tasks} tasks ({100 * finished / tasks:.0f}%"
    if finished < tasks and done_since > 0 and seconds > 0:
        text += f", about {clock(seconds * (tasks - finished) / done_since)} left"
    return text + ")"


def answers_line(answered: int, total: int, seconds: float, retries: int, quarantined: int) -> str:
    """``answered/total answered (p%), r/s, n retries, q quarantined, about T left`` of a model-call step."""
    rate = answered / seconds if seconds > 0 else 0.0
    text = f"{answered:,}/{total:,} answered ({100 * answered / total if total else 100:.0f}%), {rate:,.1f}/s"
    text += f", {retries:,} retries, {quarantined:,} quarantined"
    if 0 < answered < total and rate > 0:
        text += f", about {clock((total - answered) / rate)} left"
    return text


class _StageWatcher:
    """Reports the active Spark stage's task progress, named by its step, while a step runs past
    STAGE_REPORT_SECONDS (the innermost step's watcher alone: the stages are the whole application's)."""

    def __init__(self, spark: Any, progress: Progress, start: float, name: str = ""):
        self.spark, self.progress, self.start, self.name = spark, progress, start, name
        self.done = threading.Event()
        self.first_seen: dict[int, tuple[float, int]] = {}  # stage id -> (time, tasks done) when first seen
        self.report: Callable[[], str | None] | None = None  # Progress.reporting's line, when one is set
        progress.watchers.append(self)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(STAGE_REPORT_SECONDS):
            if self.progress.watchers[-1:] != [self]:  # a step inside this one reports the same stages
                continue
            if self.report is not None:
                try:
                    line = self.report()
                except Exception:  # noqa: BLE001 - a report that fails ends the reports, never the job
                    self.report = None
                    continue
                if line:
                    where = f"{self.name}, " if self.name else ""
                    now = time.perf_counter()
                    self.progress._print(
                        f"{'  ' * (self.progress.depth + 1)}... {where}{clock(now - self.start)}: {line}"
                    )
                continue
            try:
                tracker = self.spark.sparkContext.statusTracker()
                active = list(tracker.getActiveStageIds())
                infos = [tracker.getStageInfo(s) for s in active]
            except Exception:  # noqa: BLE001 - a stopped context ends the reports, never the job
                return
            infos = [i for i in infos if i is not None]
            if infos:
                now = time.perf_counter()
                seen = [self.first_seen.setdefault(i.stageId, (now, i.numCompletedTasks)) for i in infos]
                tasks = sum(i.numTasks for i in infos)
                finished = sum(i.numCompletedTasks for i in infos)
                line = stage_line(finished, tasks, finished - sum(n for _, n in seen), now - min(t for t, _ in seen))
                where = f"{self.name}, " if self.name else ""
                self.progress._print(f"{'  ' * (self.progress.depth + 1)}... {where}{clock(now - self.start)}: {line}")

    def stop(self) -> None:
        self.done.set()
        if self in self.progress.watchers:
            self.progress.watchers.remove(self)


def java_causes(exc: BaseException) -> list[str]:
    """The messages of a Py4J Java exception and its causes, outermost first (empty for other errors)."""
    java = getattr(exc, "java_exception", None)
    causes: list[str] = []
    seen = 0
    while java is not None and seen < 12:
        seen += 1
        try:
            name = java.getClass().getName()
            message = java.getMessage()
        except Exception:  # noqa: BLE001
            break
        text = f"{name.rsplit('.', 1)[-1]}: {message}" if message else name.rsplit(".", 1)[-1]
        causes.append(" ".join(str(text).split()))
        java = java.getCause()
    return causes


_FILE = re.compile(
    r"(?:file|s3a?|hdfs|viewfs|abfss?|gs)://\S+?(?=[\s,;)\]'\"]|\.?$)|(?<![\w/])/(?:[\w.@%+=-]+/)+[\w.@%+=-]+"
)


def error_message(exc: BaseException) -> str:
    """One readable message: Python errors as they are; JVM errors as the file they name and the chain of
    causes (Spark's error classes and their parameters, the root cause last)."""
    causes = java_causes(exc)
    if not causes:
        return f"{type(exc).__name__}: {exc}"
    files = []
    for cause in causes:
        for found in _FILE.findall(cause):
            if found not in files:
                files.append(found.rstrip(".,"))
    unique = []
    for cause in causes:
        short = cause[:400]
        if short not in unique:
            unique.append(short)
    where = f"while reading {files[0]}: " if files else ""
    return where + " <- ".join([unique[0], unique[-1]] if len(unique) > 1 else unique)


def write_trace(exc: BaseException, log_dir: str, job: str) -> str | None:
    """The full Python (and Java) trace into ``<log_dir>/<job>-<time>.log``; its path, or None."""
    try:
        directory = Path(log_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{job}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        path.write_text("".join(traceback.format_exception(exc)))
        return str(path)
    except OSError:
        return None


def headline(results: list[dict], metrics: dict[str, str]) -> dict[str, str]:
    """The headline numbers of a job's ``results`` (rows ``metric, value``, with ``model, run`` where
    several are scored) as summary highlights: ``{"scores": "Hits@Any 0.335, F1 0.271"}``, or one
    ``"scores <model> run <run>"`` per model and run; ``metrics`` maps a metric (``(metric, alpha, beta)``
    for a row with either) to its label, in order."""
    groups: dict[tuple, dict] = {}
    for row in results:
        plain = row.get("alpha") is None and row.get("beta") is None
        key = row.get("metric") if plain else (row.get("metric"), row.get("alpha"), row.get("beta"))
        if key in metrics:
            groups.setdefault((row.get("model"), row.get("run")), {})[key] = row.get("value")
    out = {}
    for (model, run), values in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        text = ", ".join(
            f"{label} {'-' if values[m] is None else f'{values[m]:.3f}'}" for m, label in metrics.items() if m in values
        )
        name = "scores" if len(groups) == 1 else f"scores {model} run {run}"
        out[name] = text
    return out


_WIDTH = 100


def _kinds(counts: dict, name: str) -> str:
    """`` (kind: n, ...)`` from the count ``name``'s breakdown ``<name>_by_kind`` or ``<name>_by_reason``, the
    commonest first; empty without one."""
    parts = counts.get(f"{name}_by_kind") or counts.get(f"{name}_by_reason")
    if not isinstance(parts, dict) or not parts or not counts.get(name):
        return ""
    ranked = sorted(parts.items(), key=lambda item: (-item[1], str(item[0])))
    return " (" + ", ".join(f"{kind}: {n:,}" for kind, n in ranked) + ")"


def human_summary(summary: Any, tracking_uri: str | None, json_path: str | None) -> list[str]:
    """A few lines on what a job built: status and time, where its files are, its key counts."""
    seconds = sum(v for k, v in summary.timings.items() if "." not in k)
    lines = [f"kgbrink {summary.job}: {summary.status}" + (f" in {clock(seconds)}" if seconds else "")]
    # the dataset the job read or wrote, also when it failed (overwriting jobs may default to a setting)
    if summary.params.get("dataset") and "dataset" not in summary.highlights:
        lines.append(f"  dataset: {summary.params['dataset']}")
    for label, location in summary.highlights.items():
        lines.append(f"  {label}: {location}")
    places = [label for label in summary.highlights if not label.startswith("scores")]  # not the numbers
    if not places and summary.outputs:
        paths = [table.path for table in summary.outputs.values()]
        common = paths[0] if len(paths) == 1 else os.path.commonprefix(paths).rsplit("/", 1)[0]
        lines.append(f"  wrote: {common} ({len(paths)} table{'s' if len(paths) > 1 else ''})")
    counts = [
        f"{k} {v:,}{_kinds(summary.counts, k)}"
        for k, v in summary.counts.items()
        if isinstance(v, int) and not isinstance(v, bool)
    ]
    label = "  counts: "
    while counts:  # every count, wrapped
        line = counts.pop(0)
        while counts and len(label) + len(line) + len(counts[0]) + 2 <= _WIDTH:
            line += ", " + counts.pop(0)
        lines.append(label + line)
        label = " " * len(label)
    for warning in getattr(summary, "extra", {}).get("warnings", []):
        lines.append(f"  warning: {warning}")
    memory = getattr(summary, "memory", {})
    if memory:  # the driver's peaks (kgbrink.core.session.driver_memory): what to size spark.driver.memory by
        parts = [
            f"{label} {memory[key]:,} MB"
            for key, label in (
                ("driver_peak_heap_mb", "JVM heap"),
                ("driver_peak_old_gen_mb", "old generation"),
                ("driver_jvm_peak_rss_mb", "JVM resident"),
                ("driver_peak_rss_mb", "Python"),
            )
            if isinstance(memory.get(key), int)
        ]
        lines.append("  driver peak: " + ", ".join(parts))
    actions = getattr(summary, "actions", {})
    if actions.get("spark_jobs") or actions.get("delta_commits"):
        lines.append(
            f"  spark: {actions['spark_jobs']:,} jobs, {actions['spark_stages']:,} stages, "
            f"{actions['delta_commits']:,} Delta commits"
        )
    if summary.mlflow_run_id and tracking_uri:
        lines.append(f"  MLflow run {summary.mlflow_run_id} in {tracking_uri}")
        lines.append(f"    (browse: mlflow ui --backend-store-uri {tracking_uri}, with the full mlflow package)")
    if json_path:
        lines.append(f"  summary JSON: {json_path}")
    return lines
