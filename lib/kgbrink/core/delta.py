"""Delta table I/O for a dataset directory: the only place jobs read and write tables.

A dataset directory (local path or URI) holds one Delta table per name::

    <dataset>/entities  relations  triples  quarantine  stats/<splits>/...
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class TableVersion:
    """Where a table is and which Delta version a job read or wrote."""

    path: str
    version: int | None  # None: Parquet files (JobContext.write_files)
    rows: int | None = None

    def as_dict(self) -> dict:
        return {"path": self.path, "version": self.version, "rows": self.rows}


_COMMITS = [0]


def delta_commits() -> int:
    """The Delta commits this process has made through :mod:`kgbrink.core` so far."""
    return _COMMITS[0]


def committed(count: int = 1) -> None:
    """Count ``count`` Delta commits (every commit site in ``core`` calls it)."""
    _COMMITS[0] += count


def table_path(dataset: str, name: str) -> str:
    return f"{dataset.rstrip('/')}/{name}"


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """A Delta table, optionally as of ``version`` (time travel). Clear error if it does not exist."""
    if not table_exists(spark, path):
        raise FileNotFoundError(f"no Delta table at {path}")
    # pinned first, so that the schema and the files below are of one version
    pinned = version if version is not None else latest_version(spark, path)
    frame = spark.read.format("delta").option("versionAsOf", pinned).load(path)
    # A version that replaced the whole table is exactly the files its commit added: read them as Delta's
    # scan would, without rebuilding the table's snapshot (several Spark jobs per table and version).
    files = version_files(spark, path, pinned)
    if files is None:
        return frame
    if not files:
        return spark.createDataFrame([], frame.schema)
    return spark.read.schema(frame.schema).parquet(*files)


def _snapshot_version(spark: SparkSession, path: str) -> int | None:
    """The latest version from the table's snapshot (None where this Delta does not expose it)."""
    try:
        return int(DeltaTable.forPath(spark, path)._jdt.table().initialSnapshot().version())
    except Exception:  # noqa: BLE001 - another Delta layout or API
        return None


def latest_commit(spark: SparkSession, path: str) -> dict:
    """The latest commit's ``version``, ``operationMetrics`` and ``userMetadata``: the version from the
    table's snapshot and the rest from its commit file, which is what ``history(1)`` reads too, without a
    Spark job (a few milliseconds against about 0.2 s). Falls back to ``history(1)``."""
    version = _snapshot_version(spark, path)
    try:
        if version is not None:
            return {"version": version, **commit_info(spark, path, version)}
    except Exception:  # noqa: BLE001 - another log layout: ask Delta's history
        pass
    last = DeltaTable.forPath(spark, path).history(1).collect()[0]
    return {
        "version": last["version"],
        "operationMetrics": last["operationMetrics"],
        "userMetadata": last["userMetadata"],
    }


def _read_text(spark: SparkSession, location: str) -> str:
    """A small file through Hadoop's file system (local, HDFS, s3a)."""
    jvm = spark.sparkContext._jvm
    file = jvm.org.apache.hadoop.fs.Path(location)
    stream = file.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(file)
    try:
        return bytes(stream.readAllBytes()).decode("utf-8")
    finally:
        stream.close()


def _commit_actions(spark: SparkSession, path: str, version: int) -> list[dict]:
    text = _read_text(spark, f"{path.rstrip('/')}/_delta_log/{version:020d}.json")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def version_files(spark: SparkSession, path: str, version: int) -> list[str] | None:
    """The data files of ``version`` when its commit replaced the whole table (a :func:`write_table` of an
    unpartitioned table): the files it added, read from its commit file; else None."""
    actions = _commit_actions(spark, path, version)
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    if info is None or not _overwrote(info):
        return None
    adds = [a["add"] for a in actions if "add" in a]
    if any(add.get("partitionValues") or add.get("deletionVector") for add in adds):
        return None
    # the table's settings at that version (its checksum file): physical column names differ under mapping
    try:
        metadata = json.loads(_read_text(spark, f"{path.rstrip('/')}/_delta_log/{version:020d}.crc"))["metadata"]
    except Exception:  # noqa: BLE001 - no checksum file: let Delta read it
        return None
    if (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none") != "none":
        return None
    base = path.rstrip("/")
    return [add["path"] if "://" in add["path"] else f"{base}/{unquote(add['path'])}" for add in adds]


def _overwrote(info: dict) -> bool:
    """Whether a commit replaced every row: a WRITE in Overwrite mode without replaceWhere."""
    parameters = info.get("operationParameters") or {}
    return (
        info.get("operation") == "WRITE"
        and parameters.get("mode") == "Overwrite"
        and not parameters.get("predicate")
        and parameters.get("partitionOverwriteMode") != "DYNAMIC"
    )


def commit_info(spark: SparkSession, path: str, version: int) -> dict:
    """The ``operationMetrics`` and ``userMetadata`` of ``version``, read from its commit file, and whether
    it ``overwrote`` every row."""
    for action in _commit_actions(spark, path, version):
        if "commitInfo" in action:
            info = action["commitInfo"]
            return {
                "operationMetrics": info.get("operationMetrics") or {},
                "userMetadata": info.get("userMetadata"),
                "overwrote": _overwrote(info),
            }
    raise LookupError(f"{path}: no commitInfo in version {version}")


def commit_timestamp(spark: SparkSession, path: str, version: int) -> int | None:
    """The commit time of ``version`` (milliseconds since the epoch), read from its commit file."""
    for action in _commit_actions(spark, path, version):
        if "commitInfo" in action:
            return action["commitInfo"].get("timestamp")
    return None


def table_rows(spark: SparkSession, path: str, version: int) -> int:
    """The rows of ``version`` of the table at ``path``: the count its commit recorded when that commit
    overwrote the whole table (:func:`write_table`), else counted."""
    info = commit_info(spark, path, version)
    rows = (info["operationMetrics"] or {}).get("numOutputRows")
    if rows is not None and info.get("overwrote"):
        return int(rows)
    return read_table(spark, path, version).count()


def latest_version(spark: SparkSession, path: str) -> int:
    version = _snapshot_version(spark, path)
    return version if version is not None else latest_commit(spark, path)["version"]


def table_description(spark: SparkSession, path: str) -> str | None:
    """The ``description`` :func:`write_table` gave the table's latest version (Delta's ``userMetadata``)."""
    return latest_commit(spark, path)["userMetadata"]


def description(spark: SparkSession, path: str) -> str | None:
    """:func:`table_description`, or None when ``path`` holds no Delta table."""
    return table_description(spark, path) if table_exists(spark, path) else None


def write_table(
    df: DataFrame,
    path: str,
    partition_by: list[str] | None = None,
    description: str | None = None,
) -> TableVersion:
    """Overwrite the table at ``path`` with ``df`` (schema replaced) as one new Delta version.

    Returns the new version and the written row count, read from the commit's operation metrics
    (no second scan of ``df``).
    """
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if description:
        writer = writer.option("userMetadata", description)
    writer.save(path)
    return _saved(df.sparkSession, path)


def _saved(spark: SparkSession, path: str) -> TableVersion:
    """The version a write just committed, with the row count its commit's metrics give (no second scan)."""
    committed()
    last = latest_commit(spark, path)
    metrics = last["operationMetrics"] or {}
    rows = int(metrics["numOutputRows"]) if "numOutputRows" in metrics else None
    return TableVersion(path, int(last["version"]), rows)


def replace_where(df: DataFrame, path: str, predicate: str, description: str | None = None) -> TableVersion:
    """Replace the rows of the table at ``path`` that match the SQL ``predicate`` by ``df`` (one new Delta
    version; a new table holds ``df``). Returns the version and the written row count."""
    writer = df.write.format("delta").mode("overwrite")
    if table_exists(df.sparkSession, path):
        writer = writer.option("replaceWhere", predicate)
    if description:
        writer = writer.option("userMetadata", description)
    writer.save(path)
    return _saved(df.sparkSession, path)


def merge(
    spark: SparkSession,
    path: str,
    source: DataFrame,
    on,
    *,
    update_all_when=None,
    insert_all: bool = False,
    insert_when=None,
    insert_values: dict | None = None,
    delete_when=None,
    delete_missing: bool = False,
) -> int:
    """MERGE ``source`` (alias ``s``) into the table at ``path`` (alias ``t``) on ``on``: matched rows
    updated where ``update_all_when`` or deleted where ``delete_when``; unmatched source rows inserted
    (``insert_all``, or ``insert_values`` where ``insert_when``); table rows the source lacks deleted
    (``delete_missing``). Returns the new version (unchanged when the MERGE changed nothing)."""
    before = latest_version(spark, path)
    builder = DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), on)
    if update_all_when is not None:
        builder = builder.whenMatchedUpdateAll(condition=update_all_when)
    if delete_when is not None:
        builder = builder.whenMatchedDelete(condition=delete_when)
    if insert_all:
        builder = builder.whenNotMatchedInsertAll()
    elif insert_values is not None:
        builder = builder.whenNotMatchedInsert(condition=insert_when, values=insert_values)
    if delete_missing:
        builder = builder.whenNotMatchedBySourceDelete()
    builder.execute()
    after = latest_version(spark, path)
    committed(after - before)
    return after


def set_table_property(spark: SparkSession, path: str, key: str, value: str) -> bool:
    """Set the table property ``key`` of the table at ``path`` to ``value`` (one metadata commit, only
    when it differs). Returns whether it committed."""
    properties = DeltaTable.forPath(spark, path).detail().first()["properties"] or {}
    if properties.get(key) == value:
        return False
    table = "delta.`" + path.replace("`", "``") + "`"
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{key}' = '{value}')")
    committed()
    return True


def require_local_table(path: str, problem: str) -> None:
    """Without Spark: a local ``path`` that is no Delta table (no ``_delta_log`` folder) raises ConfigError
    ``problem``; a URI is not checked here (the job's read names it)."""
    from kgbrink.core.locations import is_uri
    from kgbrink.core.typed import ConfigError

    if not is_uri(path) and not (Path(path) / "_delta_log").is_dir():
        raise ConfigError(problem)
