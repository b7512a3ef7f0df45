"""Spark's event log (JSON Lines, one listener event per line) read into the stages and tasks of one
application: what :mod:`kgbrink.sizing.replay` replays.

Events read: ``SparkListenerJobStart`` (a job's stages, their parents, and the properties kgbrink sets:
``kgbrink.job`` and ``kgbrink.step``), ``SparkListenerJobEnd``, ``SparkListenerStageCompleted`` and
``SparkListenerTaskEnd`` (launch and finish times, CPU time and its Python workers' time, input, shuffle and
result sizes, peak execution memory, bytes spilled); others are skipped. The log is untrusted: a line that is
not JSON, or an event without the fields it needs, fails naming the file and line; a compressed log
(``.lz4``, ``.zstd``, ...) fails saying how to write a plain one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

COMPRESSED = (".lz4", ".lzf", ".snappy", ".zstd", ".zst")


class EventLogError(ValueError):
    """An event log that cannot be read: names the file and line."""


@dataclass(frozen=True)
class Task:
    """One task attempt: times in ms since the epoch, rows and bytes read and written, its result's bytes."""

    stage: int
    index: int
    launch: int
    finish: int
    input_rows: int = 0
    input_bytes: int = 0
    shuffle_read_rows: int = 0
    shuffle_read_bytes: int = 0
    shuffle_write_rows: int = 0
    shuffle_write_bytes: int = 0
    result_bytes: int = 0
    result_task: bool = False
    failed: bool = False
    cpu_ms: float = 0.0  # executor CPU time, deserialisation's included (0: not recorded)
    python_ms: float = 0.0  # its Python workers' time executing Python code (pandas UDFs): outside the JVM's CPU
    peak_memory_bytes: int = 0  # its operators' peak execution memory (hash tables, sort buffers)
    spilled_bytes: int = 0  # what it spilled to disk, as written

    @property
    def seconds(self) -> float:
        return max(self.finish - self.launch, 0) / 1000.0

    @property
    def cpu_seconds(self) -> float:
        """The task's CPU time, its Python workers' included, else (not recorded) its wall time."""
        return (self.cpu_ms + self.python_ms) / 1000.0 if self.cpu_ms > 0 else self.seconds

    @property
    def rows_in(self) -> int:
        return self.input_rows + self.shuffle_read_rows


@dataclass
class Stage:
    """One stage (all its attempts' tasks): its Spark job, parents, name and kgbrink job and step labels."""

    id: int
    job: int
    name: str = ""
    parents: tuple[int, ...] = ()
    label: str = ""  # the kgbrink job (nested: release/brink/build)
    step: str = ""
    tasks: list[Task] = field(default_factory=list)


@dataclass
class Application:
    """The stages that ran (a stage without tasks, skipped for a shuffle already written, is left out), the
    Spark jobs' ``(submitted, completed)`` ms, and the log's file and Spark version."""

    source: str
    spark_version: str = ""
    stages: dict[int, Stage] = field(default_factory=dict)
    jobs: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    threads: dict[int, str] = field(default_factory=dict)  # a Spark job's kgbrink.thread label ("": the driver's)
    complete: bool = True  # the log ended with the application (not an .inprogress file cut short)


def _need(event: dict, key: str, where: str, kind: str | None = None):
    """``event[key]``, else an error naming the line and the event (``kind``: of a nested object's)."""
    if not isinstance(event, dict) or key not in event:
        raise EventLogError(f"{where}: {kind or event.get('Event', 'an event')} without '{key}'")
    return event[key]


def _int(value, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventLogError(f"{where}: '{name}' is {value!r}, not an integer")
    return value


PYTHON_TIME = "time to execute Python code"  # the SQL metric of Python UDF operators (ArrowPythonRunner)


def _python_ms(info: dict, where: str) -> float:
    """The task's ``time to execute Python code`` (ms): the updates of its accumulables of that name."""
    total = 0.0
    for accumulable in info.get("Accumulables") or []:
        if isinstance(accumulable, dict) and accumulable.get("Name") == PYTHON_TIME:
            try:
                total += float(accumulable.get("Update", 0))
            except (TypeError, ValueError):
                raise EventLogError(
                    f"{where}: '{PYTHON_TIME}' is {accumulable.get('Update')!r}, not a number"
                ) from None
    return total


def _task(event: dict, where: str) -> Task:
    info = _need(event, "Task Info", where)
    metrics = event.get("Task Metrics") or {}
    parts = (
        info,
        metrics,
        *(metrics.get(k) or {} for k in ("Input Metrics", "Shuffle Read Metrics", "Shuffle Write Metrics")),
    )
    if not all(isinstance(part, dict) for part in parts):
        raise EventLogError(f"{where}: SparkListenerTaskEnd whose Task Info or Task Metrics is not a JSON object")
    _, _, read_in, shuffle_in, shuffle_out = parts
    ended = event.get("Task End Reason") or {}
    reason = ended.get("Reason", "Success") if isinstance(ended, dict) else str(ended)
    return Task(
        stage=_int(_need(event, "Stage ID", where), where, "Stage ID"),
        index=_int(info.get("Index", 0), where, "Index"),
        launch=_int(_need(info, "Launch Time", where, "SparkListenerTaskEnd"), where, "Launch Time"),
        finish=_int(_need(info, "Finish Time", where, "SparkListenerTaskEnd"), where, "Finish Time"),
        input_rows=int(read_in.get("Records Read", 0)),
        input_bytes=int(read_in.get("Bytes Read", 0)),
        shuffle_read_rows=int(shuffle_in.get("Total Records Read", 0)),
        shuffle_read_bytes=int(shuffle_in.get("Remote Bytes Read", 0)) + int(shuffle_in.get("Local Bytes Read", 0)),
        shuffle_write_rows=int(shuffle_out.get("Shuffle Records Written", 0)),
        shuffle_write_bytes=int(shuffle_out.get("Shuffle Bytes Written", 0)),
        result_bytes=int(metrics.get("Result Size", 0)),
        result_task=event.get("Task Type") == "ResultTask",
        failed=bool(info.get("Failed")) or reason != "Success",
        peak_memory_bytes=int(metrics.get("Peak Execution Memory", 0)),
        spilled_bytes=int(metrics.get("Disk Bytes Spilled", 0)),
        cpu_ms=(float(metrics.get("Executor CPU Time", 0)) + float(metrics.get("Executor Deserialize CPU Time", 0)))
        / 1e6,
        python_ms=_python_ms(info, where),
    )


ROLLING = "eventlog_v2_"  # a rolling log's folder: events_<n>_<app> files, appstatus_<app>[.inprogress]


def _parts(path: Path) -> tuple[list[Path], bool]:
    """The files of one run's log in order, and whether the run had ended: a single file (``.inprogress``
    while running), or a rolling log's folder (its ``events_<n>_`` files by n)."""
    if path.is_dir():
        parts = [p for p in path.iterdir() if p.name.startswith("events_")]
        try:
            parts.sort(key=lambda p: int(p.name.split("_")[1]))
        except (IndexError, ValueError):
            raise EventLogError(f"{path}: a rolling event log's file named otherwise than events_<n>_<app>") from None
        if not parts:
            raise EventLogError(f"{path}: a rolling event log folder without events_ files")
        return parts, not any(p.name.endswith(".inprogress") for p in path.iterdir() if p.name.startswith("appstatus"))
    return [path], not path.name.endswith(".inprogress")


def _lines(parts: list[Path], complete: bool):
    """``(where, event)`` of each line; a last line cut short in a log still being written ends it."""
    for part_number, part in enumerate(parts):
        name = part.name.removesuffix(".inprogress")
        if name.endswith(COMPRESSED):
            raise EventLogError(
                f"{part}: a compressed event log; write plain ones (spark.eventLog.compress=false, as "
                "spark.event_log_dir sets it)"
            )
        last = part_number == len(parts) - 1
        with part.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{part}, line {number}"
                try:
                    event = json.loads(line)
                except json.JSONDecodeError as error:
                    if last and not complete and not line.endswith("\n"):
                        return  # the line being written when the log was read
                    raise EventLogError(f"{where}: not JSON ({error.msg})") from None
                yield where, event


def read(path: str | Path) -> Application:
    """The application of one run's event log: a plain JSON Lines file (``.inprogress`` read as far as
    written) or a rolling log's folder."""
    path = Path(path)
    parts, complete = _parts(path)
    app = Application(str(path), complete=complete)
    tasks: list[Task] = []
    for where, event in _lines(parts, complete):
        if not isinstance(event, dict):
            raise EventLogError(f"{where}: not a JSON object")
        kind = event.get("Event")
        if kind == "SparkListenerLogStart":
            app.spark_version = str(event.get("Spark Version", ""))
        elif kind == "SparkListenerJobStart":
            job = _int(_need(event, "Job ID", where), where, "Job ID")
            app.jobs[job] = (_int(_need(event, "Submission Time", where), where, "Submission Time"), None)
            properties = event.get("Properties") or {}
            app.threads[job] = str(properties.get("kgbrink.thread", ""))
            for info in _need(event, "Stage Infos", where):
                stage = _int(_need(info, "Stage ID", where, kind), where, "Stage ID")
                if stage in app.stages:
                    continue  # a stage of an earlier job, skipped in this one
                app.stages[stage] = Stage(
                    stage,
                    job,
                    str(info.get("Stage Name", "")),
                    tuple(int(p) for p in info.get("Parent IDs", [])),
                    str(properties.get("kgbrink.job", "")),
                    str(properties.get("kgbrink.step", "")),
                )
        elif kind == "SparkListenerJobEnd":
            job = _int(_need(event, "Job ID", where), where, "Job ID")
            if job in app.jobs:
                app.jobs[job] = (
                    app.jobs[job][0],
                    _int(_need(event, "Completion Time", where), where, "Completion Time"),
                )
        elif kind == "SparkListenerTaskEnd":
            tasks.append(_task(event, where))
    for task in tasks:
        if task.stage not in app.stages:
            raise EventLogError(f"{path}: a task of stage {task.stage}, which no job started")
        app.stages[task.stage].tasks.append(task)
    app.stages = {s: stage for s, stage in app.stages.items() if stage.tasks}
    return app


def log_files(location: str | Path) -> list[Path]:
    """The runs' event logs of ``location``: itself when a file or a rolling log's folder, else the files and
    rolling log folders in it (by name)."""
    location = Path(location)
    if location.is_file() or (location.is_dir() and location.name.startswith(ROLLING)):
        return [location]
    if not location.is_dir():
        raise EventLogError(f"{location}: no event log file or folder")
    files = sorted(
        p for p in location.iterdir()
        if (p.is_file() and not p.name.startswith(".")) or (p.is_dir() and p.name.startswith(ROLLING))
    )  # fmt: skip
    if not files:
        raise EventLogError(f"{location}: no event log in the folder (set spark.event_log_dir and run a job)")
    return files
