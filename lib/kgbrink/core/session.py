"""The one SparkSession factory: every job, test and notebook builds its session here from a Settings.

JVM packages (Delta, GraphFrames, hadoop-aws) are never fetched at session start: ``make jars`` resolves
them with Maven from ``infra/jvm/pom.xml`` into ``.cache/jars/<profile>/`` and this factory passes every
jar found under ``spark.jars_dirs`` with ``spark.jars``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from kgbrink.core.files import delete_path
from kgbrink.core.locations import install_root, is_uri, resolve_location
from kgbrink.core.settings import Settings
from kgbrink.core.typed import ConfigError

# The running job's checkpoint mode (setting spark.checkpoint), read by kgbrink.core.frames.checkpoint.
CHECKPOINT_MODE = "spark.kgbrink.checkpoint"

DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def driver_gone(memory: str | None = None, wait: float = 0.0) -> str | None:
    """Why this process's Spark driver JVM is no longer running, in one line (None while it runs, or when
    there is none): killed by a signal (SIGKILL is what the kernel's out-of-memory killer sends) or exited.
    ``memory``: the driver heap setting, named in the advice; ``wait``: seconds to let a dying JVM exit."""
    import subprocess

    from pyspark import SparkContext

    process = getattr(getattr(SparkContext, "_gateway", None), "proc", None)
    if process is None:
        return None
    try:
        process.wait(timeout=wait) if wait > 0 else process.poll()
    except subprocess.TimeoutExpired:
        return None
    if process.returncode is None:
        return None
    code = process.returncode
    if code >= 0:
        return f"the Spark driver JVM exited with status {code} (its log: <log_dir>/jvm.log)"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    heap = f" (now {memory})" if memory else ""
    if code == -signal.SIGKILL:
        return (
            f"the Spark driver JVM was killed by {name}, most likely by the operating system for lack of memory "
            f"(dmesg says): free memory or lower spark.conf.spark.driver.memory{heap}"
        )
    return f"the Spark driver JVM was killed by {name}"


def find_jars(jars_dirs: list[str]) -> list[str]:
    """Every ``*.jar`` under the given directories, sorted for a stable classpath."""
    jars: list[str] = []
    for directory in jars_dirs:
        path = Path(resolve_location(directory))
        if path.is_dir():
            jars.extend(str(p) for p in sorted(path.glob("*.jar")))
    return jars


def has_jar(jars: list[str], artifact_prefix: str) -> bool:
    return any(Path(j).name.startswith(artifact_prefix) for j in jars)


def _quiet_accumulator_server() -> None:
    """The driver's accumulator server logs a lost JVM connection instead of printing its traceback (a
    killed JVM is then reported in one line by the CLI, :func:`driver_gone`)."""
    import logging

    from pyspark import accumulators

    def handle_error(self, request, client_address) -> None:
        logging.getLogger("kgbrink.core.session").debug("accumulator server: %s", sys.exc_info()[1])

    for name in ("AccumulatorTCPServer", "AccumulatorUnixServer"):
        if hasattr(accumulators, name):
            getattr(accumulators, name).handle_error = handle_error


def spark_session(config: Settings) -> SparkSession:
    """Build (or return the running) SparkSession for ``config``.

    Fails with a clear message when the Delta jars are missing, instead of letting Spark start without
    them and fail later on the first Delta read.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _quiet_accumulator_server()
    # Python workers (mapInArrow, UDFs) run the driver's interpreter unless the environment names another
    # (PySpark reads PYSPARK_PYTHON on the driver when it ships a Python function).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = find_jars(config.spark.jars_dirs)
    if not has_jar(jars, "delta-spark_"):
        raise ConfigError(
            f"no Delta jar under {config.spark.jars_dirs}: run `make jars` in kgbrink's installation "
            f"({install_root()}; it resolves infra/jvm/pom.xml into .cache/jars), or set $KGBRINK_HOME to the "
            "installation or spark.jars_dirs to the folders holding the jars"
        )
    builder = SparkSession.builder.appName(config.spark.app_name)
    master = config.spark.master
    if master:
        builder = builder.master(master)
    settings = {
        **{str(k): _spark_value(v) for k, v in config.spark.conf.items()},
        **_jvm_logging(config),
        **DELTA_SETTINGS,
        "spark.jars": ",".join(jars),
        "spark.sql.warehouse.dir": resolve_location(config.spark.warehouse_dir),
    }
    settings.update(event_log(config))
    for key, value in settings.items():
        builder = builder.config(key, value)
    _launch_driver(builder._options)
    spark = builder.getOrCreate()
    require_driver_class(spark, DELTA_SETTINGS["spark.sql.extensions"], jars)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def event_log(config: Settings) -> dict[str, str]:
    """Spark's settings writing the event log to ``spark.event_log_dir`` (made when local), uncompressed (kgbrink
    profile reads plain JSON Lines); none when it is null."""
    folder = config.spark.event_log_dir
    if not folder:
        return {}
    location = resolve_location(folder)
    if not is_uri(location):
        Path(location).mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": location, "spark.eventLog.compress": "false"}


# Spark's launcher gives every JVM jdk.incubator.vector, and the JVM says so on standard error at each start.
INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"


def _launch_driver(options: dict[str, str]) -> None:
    """Start the driver JVM as ``getOrCreate`` would (``options``: the builder's), with its standard error
    relayed by :func:`relay_stderr`; nothing when a driver runs already (this process's, or spark-submit's
    that started this Python)."""
    import subprocess
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(target=relay_stderr, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True).start()
        SparkContext._gateway, SparkContext._jvm = gateway, gateway.jvm


def relay_stderr(stream, fd: int = 2) -> None:
    """Copy ``stream`` (the driver JVM's standard error) line by line to ``fd``, without the JVM's
    incubator-module notice, until it ends."""
    for line in iter(stream.readline, b""):
        if line.startswith(INCUBATOR_NOTICE):
            continue
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]


def require_driver_class(spark: SparkSession, class_name: str, jars: list[str]) -> None:
    """Fail clearly when the driver JVM cannot load ``class_name``. A driver JVM started before this
    factory ran (``spark-submit``, a notebook kernel with a session) ignores ``spark.jars`` for its own
    classpath, and Delta would only fail at the first table read."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(class_name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
    except Exception as exc:
        raise ConfigError(
            f"the driver JVM cannot load {class_name}: it was started without the project's jars (under spark-submit, "
            f"pass them: --jars {','.join(jars) or '<the jars of spark.jars_dirs>'})"
        ) from exc


def _jvm_logging(config: Settings) -> dict[str, str]:
    """The driver JVM's log4j2 settings (:file:`log4j2.properties` beside this module): its log to
    ``<log_dir>/jvm.log`` instead of the console. Appended to the user's own driver Java options."""
    Path(config.log_dir).mkdir(parents=True, exist_ok=True)
    properties = Path(__file__).with_name("log4j2.properties")
    own = f"-Dlog4j2.configurationFile={properties.as_uri()} -Dkgbrink.log.dir={config.log_dir}"
    given = str(config.spark.conf.get("spark.driver.extraJavaOptions", "")).strip()
    return {"spark.driver.extraJavaOptions": f"{given} {own}".strip()}


def _spark_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def spark_actions(spark: SparkSession | None) -> tuple[int, int]:
    """The Spark jobs and stages this driver has launched so far (the DAG scheduler's own counters;
    (0, 0) without a session or on a Spark that does not expose them)."""
    if spark is None:
        return 0, 0
    try:
        scheduler = spark.sparkContext._jsc.sc().dagScheduler()
        return int(scheduler.numTotalJobs()), int(scheduler.nextStageId())
    except Exception:  # noqa: BLE001 - Spark Connect or another Spark: nothing to count
        return 0, 0


def cached_frames(spark: SparkSession | None) -> int | None:
    """The DataFrames the session's cache manager holds (persisted, materialised or not); None without a
    session or on a Spark whose cache manager does not expose them."""
    if spark is None:
        return None
    try:
        manager = spark._jsparkSession.sharedState().cacheManager()
        held = next(f for f in manager.getClass().getDeclaredFields() if f.getName() == "cachedData")
        held.setAccessible(True)
        return int(held.get(manager).size())
    except Exception:  # noqa: BLE001 - Spark Connect or another Spark: nothing to count
        return None


def driver_memory(spark: SparkSession | None) -> dict[str, int]:
    """The driver's peak memory so far, in MB: ``driver_peak_rss_mb`` (this Python process, ``ru_maxrss``)
    and, with a session, ``driver_peak_heap_mb`` (the JVM heap's peak use: the heap pools' peaks summed,
    at most the heap's size), ``driver_peak_old_gen_mb`` (the old generation's: data kept across
    collections) and ``driver_jvm_peak_rss_mb`` (the JVM process's ``VmHWM``, on Linux). Peaks of the
    processes, not of one job: the whole command under the CLI."""
    import resource

    out = {"driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
    if spark is None:
        return out
    try:
        jvm = spark.sparkContext._jvm
        management = jvm.java.lang.management.ManagementFactory
        heap = jvm.java.lang.management.MemoryType.HEAP
        pools = [p for p in management.getMemoryPoolMXBeans() if p.getType().equals(heap)]
        peaks = {p.getName(): p.getPeakUsage().getUsed() for p in pools}
        out["driver_peak_heap_mb"] = min(sum(peaks.values()), jvm.java.lang.Runtime.getRuntime().maxMemory()) >> 20
        old = [v for name, v in peaks.items() if "Old Gen" in name or "Tenured" in name]
        if old:
            out["driver_peak_old_gen_mb"] = max(old) >> 20
        pid = jvm.java.lang.ProcessHandle.current().pid()
    except Exception:  # noqa: BLE001 - Spark Connect or a JVM gone: the Python figure alone
        return out
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["driver_jvm_peak_rss_mb"] = int(line.split()[1]) // 1024
    except OSError:  # not Linux, or the JVM on another host
        pass
    return out


def thread_session(spark: SparkSession) -> SparkSession:
    """A session for another thread's jobs: ``spark``'s context and cached data, its SQL settings as they
    are now, but its own from here on, so one thread's :func:`session_setting` never reaches another's
    jobs (nor is restored out of order)."""
    session = spark.newSession()
    for key, value in spark.conf.getAll.items():
        if session.conf.get(key, None) == value:
            continue
        try:
            session.conf.set(key, value)
        except Exception:  # a static or core setting: the context's own, the same in both sessions
            if spark.conf.isModifiable(key):
                raise
    return session


@contextmanager
def session_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """The SQL setting ``key`` set to ``value`` for the block, then back to the session's own value."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


@contextmanager
def job_checkpoints(spark: SparkSession, config: Settings) -> Iterator[None]:
    """A job's checkpoints: the mode ``spark.checkpoint`` for the block and, when it is ``reliable``, a
    folder of the job's own under ``spark.checkpoint_dir`` (Spark names it by a UUID), removed at the end
    whether the job succeeded or failed."""
    mode = config.spark.checkpoint
    with session_setting(spark, CHECKPOINT_MODE, mode):
        if mode != "reliable":
            yield
            return
        context = spark.sparkContext
        context.setCheckpointDir(resolve_location(config.spark.checkpoint_dir))
        folder = context.getCheckpointDir()
        try:
            yield
        finally:
            delete_path(spark, folder)
