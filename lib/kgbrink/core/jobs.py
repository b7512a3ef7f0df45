"""The job interface: options as a dataclass, ``run(ctx, options) -> JobSummary``, one registry.

A job module declares its options (a dataclass whose fields carry their command-line form, :func:`arg`)
and registers ``run`` with :func:`job`. The :class:`JobContext` gives a job its SparkSession and
settings, records every table it reads (pinned to the version it read) and writes in its summary, times
its steps and reports progress. ``kgbrink <job>`` (:mod:`kgbrink.cli`, whose parser is a loop over
:data:`REGISTRY`) and the spark-submit entry points ``jobs/<job>.py`` run them; a job composes others with
:meth:`JobContext.run`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from pyspark.util import inheritable_thread_target

from kgbrink.core import catalog, delta
from kgbrink.core.console import Progress
from kgbrink.core.delta import TableVersion, delta_commits, read_table, table_exists, write_table
from kgbrink.core.files import write_parquet
from kgbrink.core.session import driver_memory, job_checkpoints, spark_actions, thread_session
from kgbrink.core.settings import Settings
from kgbrink.core.tracking import JobSummary
from kgbrink.core.writer import consistent_version

T = TypeVar("T")


def arg(
    default: Any = None,
    help: str = "",
    *,
    flag: str | None = None,
    cli: bool = True,
    factory: Callable[[], Any] | None = None,
    deprecated: tuple[str, ...] = (),
    **argparse_kwargs,
):
    """A job option with its command-line form (``--name`` from the field name unless ``flag`` is given;
    ``argparse_kwargs`` go to ``add_argument``; ``convert`` turns the parsed value into the option's).
    ``deprecated``: old flags still accepted for one release, each use warned about on standard error."""
    meta = {"help": help, "flag": flag, "cli": cli, "argparse": argparse_kwargs, "deprecated": deprecated}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Job:
    name: str
    help: str
    options: type
    run: Callable[[JobContext, Any], JobSummary]
    spark: bool = True
    # Steps the job reports (its ``ctx.step`` calls; the most it runs), for "step k of n".
    steps: int | None = None
    # The spark-submit entry point's file under jobs/ (the registry's test checks each exists).
    entry_point: str = ""
    # What needs no Spark, checked before the session starts (settings, options) -> None, raises ConfigError.
    check: Callable[[Settings, Any], None] | None = None


REGISTRY: dict[str, Job] = {}


@contextmanager
def labelled(spark: Any, **labels: str) -> Iterator[None]:
    """Spark jobs started inside carry ``kgbrink.<name>`` local properties (their event log's job and step:
    kgbrink profile groups stages by them); the previous values back after."""
    context = getattr(spark, "sparkContext", None)
    if context is None:
        yield
        return
    keys = {f"kgbrink.{name}": value for name, value in labels.items()}
    before = {key: context.getLocalProperty(key) for key in keys}
    for key, value in keys.items():
        context.setLocalProperty(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            context.setLocalProperty(key, value)


def registered() -> dict[str, Job]:
    """The registered jobs by command name (importing :mod:`kgbrink.jobs` registers every job)."""
    return {name: REGISTRY[name] for name in sorted(REGISTRY)}


def job(
    name: str,
    help: str,
    options: type,
    *,
    spark: bool = True,
    steps: int | None = None,
    entry_point: str | None = None,
    check: Callable[[Settings, Any], None] | None = None,
):
    """Register ``run(ctx, options)`` as the job ``name``; calling it runs it in a context of its own.
    ``check(settings, options)``: what can be checked without Spark, run by the command line before the
    session starts (raises ConfigError)."""

    def register(fn: Callable[[JobContext, Any], JobSummary]) -> Callable[[JobContext, Any], JobSummary]:
        @functools.wraps(fn)
        def run(ctx: JobContext, options: Any) -> JobSummary:
            return ctx.run(name, options)

        entry = entry_point or name.replace("-", "_") + ".py"
        REGISTRY[name] = Job(name, help, options, fn, spark, steps, entry, check)
        return run

    return register


@dataclass
class JobContext:
    """What a running job has: the session, the settings, its summary and its progress reporter."""

    spark: Any
    config: Settings
    summary: JobSummary = field(default_factory=lambda: JobSummary(""))
    progress: Progress = field(default_factory=Progress)
    records: dict = field(default_factory=dict)  # the datasets' recorded versions, read once per job
    nested: bool = False  # a job run by another job (shares that job's checkpoints)
    path: str = ""  # the job's name under the jobs that run it (release/brink/build): its Spark jobs' label
    cached: list = field(default_factory=list)  # the frames this job persisted: released when it ends

    def begin(self, **params: Any) -> JobSummary:
        """The job's summary with its parameters recorded."""
        self.summary.params.update(params)
        return self.summary

    def run(self, name: str, options: Any = None, /, **values: Any) -> JobSummary:
        """Run the registered job ``name`` in a child context with ``options``, or with its options made of
        ``values`` (the others at their defaults): jobs compose by name, never by importing each other. Its
        summary is returned."""
        if name not in REGISTRY:
            raise KeyError(f"no job {name!r} is registered (known: {', '.join(sorted(REGISTRY))})")
        definition = REGISTRY[name]
        if options is None:
            options = definition.options(**values)
        elif values:
            raise TypeError(f"ctx.run({name!r}): give options or values, not both")
        progress = self.progress.child(definition.steps)
        path = f"{self.path}/{name}" if self.path else name
        child = JobContext(self.spark, self.config, JobSummary(name), progress, nested=True, path=path)
        start = _actions(self.spark)
        try:
            with labelled(self.spark, job=path, step=""):
                if self.nested or self.spark is None:
                    return definition.run(child, options)
                with job_checkpoints(self.spark, self.config):
                    return definition.run(child, options)
        except Exception as exc:
            # The summary a failure carries up is the job's at each level; a failed sub-job is named in it.
            inner = getattr(exc, "summary", None)
            if inner is not None and inner is not child.summary:
                failed = inner.extra.get("failed_step") or {
                    "job": inner.job,
                    "counts": inner.counts,
                    "outputs": {k: v.as_dict() for k, v in inner.outputs.items()},
                }
                child.summary.extra.setdefault("failed_step", failed)
            try:
                exc.summary = child.summary
            except AttributeError:  # exceptions with __slots__
                pass
            raise
        finally:
            child.release_cached()
            child.summary.actions.update(_since(start, self.spark))
            child.summary.memory.update(driver_memory(self.spark))

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A named, timed step (its seconds under ``summary.timings[name]``), reported as progress."""
        start = _actions(self.spark)
        try:
            with self.progress.step(name, self.spark), self.summary.timed(name), labelled(self.spark, step=name):
                yield
        finally:
            by_step = self.summary.actions.setdefault("by_step", {})
            before = by_step.get(name, {})
            by_step[name] = {key: before.get(key, 0) + n for key, n in _since(start, self.spark).items()}

    def in_thread(self) -> JobContext:
        """This job's context for one of its threads, run beside others (``release.parallel``): the same
        summary, settings and checkpoints, its own Spark session (:func:`kgbrink.core.session.thread_session`),
        persisted frames and stage reports (:meth:`Progress.unwatched`). The thread releases its frames."""
        session = thread_session(self.spark) if self.spark is not None else None
        progress = self.progress.unwatched()
        return JobContext(session, self.config, self.summary, progress, self.records, True, self.path)

    def in_threads(self, works: list[tuple[str, Callable[[JobContext], T]]], parallel: int, failures: list) -> list[T]:
        """Each ``(name, work)`` as ``work(context)``: in order in this context, or with ``parallel`` over 1
        that many at once, each in a thread with a context of its own (:meth:`in_thread`) whose Spark jobs
        carry this thread's labels and ``kgbrink.thread`` (``name``, under the caller's thread:
        ``brink/brink_removed``; kgbrink profile runs threads side by side). The results in ``works``' order.
        The first failure (appended to ``failures``, shared by nested calls: the cause, not what it
        cancelled) cancels the running Spark jobs and is raised once every thread has ended."""
        parallel = min(parallel, len(works))
        if parallel <= 1:
            return [work(self) for _, work in works]
        spark = self.spark
        caller = spark.sparkContext.getLocalProperty("kgbrink.thread") if spark is not None else None

        def run(name: str, work: Callable[[JobContext], T]) -> T:
            thread = self.in_thread()
            try:
                with labelled(thread.spark, thread=f"{caller}/{name}" if caller else name):
                    return work(thread)
            except BaseException as exc:
                failures.append(exc)
                if len(failures) == 1 and spark is not None:
                    spark.sparkContext.cancelAllJobs()  # the others end at their next Spark job
                raise
            finally:
                thread.release_cached()

        def inheriting(target):  # the caller's labels, a copy for each thread (one copy would be shared)
            return inheritable_thread_target(spark)(target) if spark is not None else target

        with ThreadPoolExecutor(parallel, "kgbrink") as pool:
            futures = [pool.submit(inheriting(run), name, work) for name, work in works]
            wait(futures)
        if any(future.exception() is not None for future in futures):
            raise failures[0]
        return [future.result() for future in futures]

    def persist(self, frame, level=None):
        """``frame`` persisted (at ``level``, a StorageLevel; else Spark's default for DataFrames) until this
        job ends, or until :meth:`unpersist` releases it earlier."""
        frame = frame.persist() if level is None else frame.persist(level)
        # frames released by hand (a loop's previous round) are dropped, not kept until the job ends
        self.cached = [kept for kept in self.cached if kept.is_cached] + [frame]
        return frame

    def unpersist(self, frame) -> None:
        """Release a frame :meth:`persist` kept, before the job ends (its memory wanted back at once)."""
        frame.unpersist()
        self.cached = [kept for kept in self.cached if kept is not frame]

    def release_cached(self) -> None:
        """Release every frame this job still holds, the last persisted first (:meth:`run` does, at the job's
        end, failed or not)."""
        while self.cached:
            self.cached.pop().unpersist()

    def read(self, name: str, path: str, version: int | None = None):
        """The Delta table at ``path``, pinned: the version read first under ``name`` is recorded in the
        summary's inputs and every later read of ``name`` sees that same version. A dataset's core tables
        are read at the last complete ingest's versions (:func:`kgbrink.core.writer.consistent_version`)."""
        if name not in self.summary.inputs:
            pinned = consistent_version(self.spark, path, self.records) if version is None else version
            self.summary.inputs[name] = TableVersion(path, pinned)
        return read_table(self.spark, path, self.summary.inputs[name].version)

    def read_input(self, name: str, path: str):
        """A table the user names: a Delta table read pinned as by :meth:`read`, else the Parquet files at
        ``path`` (recorded in the inputs without a version)."""
        if table_exists(self.spark, path):
            return self.read(name, path)
        self.summary.inputs.setdefault(name, TableVersion(path, None))
        return self.spark.read.parquet(path)

    def written(self, name: str):
        """The version of ``name`` this job wrote (the outputs record it), read back."""
        table = self.summary.outputs[name]
        return read_table(self.spark, table.path, table.version)

    def write(self, name: str, frame, path: str, description: str = "", table: str | None = None):
        """Overwrite the Delta table at ``path`` (one new version), recorded under ``name`` in the outputs.
        A catalogued table (``table``, else the entry ``path`` matches) must have the catalog's columns and
        is partitioned as the catalog says."""
        entry = _checked(frame, path, name, table)
        partition_by = list(entry.partition_by) if entry is not None else None
        self.summary.outputs[name] = write_table(frame, path, partition_by, description or None)
        return self.summary.outputs[name]

    def replace_where(
        self,
        name: str,
        frame,
        path: str,
        predicate: str,
        description: str = "",
        rows: int | None = None,
        output: bool = True,
    ) -> TableVersion:
        """Replace the rows of the Delta table at ``path`` matching the SQL ``predicate`` by ``frame`` (one
        new version; a new table holds ``frame``); a catalogued table's columns are checked. Recorded under
        ``name`` in the outputs, with ``rows`` (else the rows written), unless ``output`` is False: a part
        of a table the job records once whole (:meth:`keep`) or its own bookkeeping."""
        _checked(frame, path, name)
        written = delta.replace_where(frame, path, predicate, description or None)
        if output:
            self.summary.outputs[name] = TableVersion(path, written.version, written.rows if rows is None else rows)
        return written

    def merge(self, name: str, path: str, source, on, rows: int | None = None, **clauses) -> int:
        """MERGE ``source`` into the Delta table at ``path`` (:func:`kgbrink.core.delta.merge`'s clauses);
        the new version (unchanged when nothing changed), recorded under ``name`` with ``rows``."""
        version = delta.merge(self.spark, path, source, on, **clauses)
        self.summary.outputs[name] = TableVersion(path, version, rows)
        return version

    def keep(self, name: str, path: str, rows: int | None, version: int | None = None) -> TableVersion:
        """Record under ``name`` a table this job leaves as it is (its rows already the ones it computed):
        ``version``, else the latest."""
        pinned = delta.latest_version(self.spark, path) if version is None else version
        self.summary.outputs[name] = TableVersion(path, pinned, rows)
        return self.summary.outputs[name]

    def write_files(self, name: str, frame, path: str, table: str) -> TableVersion:
        """Overwrite the Parquet (not Delta) table ``table`` of the catalog at ``path`` with ``frame``,
        columns checked, recorded under ``name`` (without a version: files have none)."""
        _checked(frame, path, name, table)
        write_parquet(frame, path)
        self.summary.outputs[name] = TableVersion(path, None, None)
        return self.summary.outputs[name]

    def set_table_property(self, path: str, key: str, value: str) -> bool:
        """Set the property ``key`` of the Delta table at ``path`` (one metadata commit when it differs)."""
        return delta.set_table_property(self.spark, path, key, value)


def _checked(frame, path: str, name: str | None, table: str | None = None) -> catalog.Table | None:
    """The catalog entry of a table about to be written (``table``, else the one ``path`` matches), after
    checking ``frame`` has its columns; None for a table the catalog does not know."""
    entry = catalog.table(table) if table else catalog.find(path, name)
    if entry is not None:
        catalog.check_schema(entry, frame)
    return entry


def _actions(spark: Any) -> dict[str, int]:
    jobs, stages = spark_actions(spark)
    return {"spark_jobs": jobs, "spark_stages": stages, "delta_commits": delta_commits()}


def _since(start: dict[str, int], spark: Any) -> dict[str, int]:
    """The Spark jobs, stages and Delta commits since ``start`` (an :func:`_actions`)."""
    end = _actions(spark)
    return {key: end[key] - start[key] for key in end}


def add_arguments(parser: argparse.ArgumentParser, options: type) -> None:
    """The options dataclass's fields as ``--flags`` of ``parser``."""
    for f in fields(options):
        meta = f.metadata
        if not meta.get("cli", False):
            continue
        kwargs = {k: v for k, v in meta["argparse"].items() if k != "convert"}
        kwargs.setdefault("default", None)
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        parser.add_argument(flag, dest=f.name, help=option_help(f), **kwargs)
        for old in meta.get("deprecated", ()):
            parser.add_argument(old, dest=f.name, help=argparse.SUPPRESS, action=_deprecated(flag), **kwargs)


def _deprecated(flag: str) -> type[argparse.Action]:
    """An argparse store action for an old spelling of ``flag``: stores as ``flag`` does, and says so once."""

    class Deprecated(argparse._StoreAction):
        def __call__(self, parser, namespace, values, option_string=None):
            print(
                f"warning: {option_string} is deprecated for this command, use {flag} (the old spelling is "
                "removed in the next release)",
                file=sys.stderr,
            )
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


def option_help(option: Field) -> str:
    """An option's help, ending with its default when the field has a plain one (text or a number) the help
    does not already name."""
    text = option.metadata["help"] or ""
    default = option.default
    plain = isinstance(default, str | int | float) and not isinstance(default, bool) and default != ""
    if not plain or "default" in text.lower() or option.metadata["argparse"].get("action"):
        return text
    return f"{text} (default: {str(default).replace('%', '%%')})"


def options_from(args: argparse.Namespace, options: type) -> Any:
    """The options dataclass from parsed arguments; an option not given keeps its declared default."""
    values = {}
    for f in fields(options):
        if not f.metadata.get("cli", False):
            continue
        value = getattr(args, f.name, None)
        if value is None:
            continue
        convert = f.metadata["argparse"].get("convert")
        values[f.name] = convert(value) if convert else value
    return options(**values)


def names(text: str | None) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]`` (argparse conversion of comma-separated names)."""
    return [s.strip() for s in text.split(",") if s.strip()] if text else None
