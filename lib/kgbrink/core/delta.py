"""Delta table I/O for a dataset directory: the only place jobs read and write tables.

A dataset directory (local path or URI) holds one Delta table per name::

    <dataset>/entities  relations  triples  quarantine  stats/<splits>/...
"""

from __future__ import annotations

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


def _latest_commit(spark: SparkSession, path: str):
    return DeltaTable.forPath(spark, path).history(1).collect()[0]


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
    last = DeltaTable.forPath(df.sparkSession, path).history(1).collect()[0]
    metrics = last["operationMetrics"] or {}
    rows = int(metrics["numOutputRows"]) if "numOutputRows" in metrics else None
    return TableVersion(path, int(last["version"]), rows)
