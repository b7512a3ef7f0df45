"""The rules table: rules as rows of the catalogued ``rules`` schema (:mod:`kgbrink.core.catalog`) and back.
Written by ``mine`` and ``import-rules``, read by ``export-rules``, ``ground`` and the variant jobs."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from kgbrink.core import catalog
from kgbrink.core.delta import read_table
from kgbrink.rules.model import Rule, rule_from_row, rule_row


def rules_frame(spark: SparkSession, rules: list[Rule]) -> DataFrame:
    """``rules`` as a frame of the catalog's rules schema, ordered by head relation and id."""
    rows = [rule_row(r) for r in rules]
    return spark.createDataFrame(rows, catalog.table("rules").schema).orderBy("head_relation", "id")


def read_rules(spark: SparkSession, path: str, version: int | None = None) -> list[Rule]:
    """The rules of the table at ``path`` (as of ``version``), ordered by id."""
    return [rule_from_row(row) for row in read_table(spark, path, version).orderBy("id").collect()]
