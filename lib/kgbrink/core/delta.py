"""Delta table I/O for a dataset directory: the only place jobs read and write tables.

A dataset directory (local path or URI) holds one Delta table per name::

    <dataset>/entities  relations  triples  quarantine  stats/<splits>/...
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class TableVersion:
    """Where a table is and which Delta version a job read or wrote."""

    path: str
    version: int
    rows: int | None = None

    def as_dict(self) -> dict:
        return {"path": self.path, "version": self.version, "rows": self.rows}


def table_path(dataset: str, name: str) -> str:
    return f"{dataset.rstrip('/')}/{name}"


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """A Delta table, optionally as of ``version`` (time travel). Clear error if it does not exist."""
    if not table_exists(spark, path):
        raise FileNotFoundError(f"no Delta table at {path}")
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def _latest_commit(spark: SparkSession, path: str) -> dict:
    """The latest commit's ``version``, ``operationMetrics`` and ``userMetadata``: the version from the
    table's snapshot and the rest from its commit file, which is what ``history(1)`` reads too, without a
    Spark job (a few milliseconds against about 0.2 s). Falls back to ``history(1)``."""
    try:
        version = int(DeltaTable.forPath(spark, path)._jdt.table().initialSnapshot().version())
        return {"version": version, **_commit_file_info(spark, path, version)}
    except Exception:  # noqa: BLE001 - another Delta layout or API: ask Delta's history
        last = DeltaTable.forPath(spark, path).history(1).collect()[0]
        return {
            "version": last["version"],
            "operationMetrics": last["operationMetrics"],
            "userMetadata": last["userMetadata"],
        }


def _commit_file_info(spark: SparkSession, path: str, version: int) -> dict:
    jvm = spark.sparkContext._jvm
    log_file = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log/{version:020d}.json")
    stream = log_file.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(log_file)
    try:
        text = bytes(stream.readAllBytes()).decode("utf-8")
    finally:
        stream.close()
    for line in text.splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            info = action["commitInfo"]
            return {"operationMetrics": info.get("operationMetrics") or {}, "userMetadata": info.get("userMetadata")}
    raise LookupError(f"{path}: no commitInfo in version {version}")


def latest_version(spark: SparkSession, path: str) -> int:
    return _latest_commit(spark, path)["version"]


def table_description(spark: SparkSession, path: str) -> str | None:
    """The ``description`` :func:`write_table` gave the table's latest version (Delta's ``userMetadata``)."""
    return _latest_commit(spark, path)["userMetadata"]


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
    last = _latest_commit(df.sparkSession, path)
    metrics = last["operationMetrics"] or {}
    rows = int(metrics["numOutputRows"]) if "numOutputRows" in metrics else None
    return TableVersion(path, int(last["version"]), rows)
