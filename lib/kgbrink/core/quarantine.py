"""Row statuses, the quarantine table's rows and exact line numbers: shared by every job that reads lines
(ingest of KG dumps, scoring of text rank files).

A parsed line carries ``split, source_file, block_start, row_id, status, reason, detail, line``; a bad
line is kept (status ``quarantined``) with its reason and detail and its 1-based line number in its file,
computed without a second pass over the input from per-block counts (:func:`block_offsets`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

OK = "ok"
SKIPPED = "skipped"
QUARANTINED = "quarantined"

# Share of a line kept in the quarantine table (a 10 MB garbage line must not blow up the table).
MAX_QUARANTINED_LINE_CHARS = 10_000


def line_counts(parsed: DataFrame) -> DataFrame:
    """Per (split, file, block, status, reason): lines and the first row id. Small: collect it."""
    return parsed.groupBy("split", "source_file", "block_start", "status", "reason").agg(
        F.count(F.lit(1)).alias("lines"), F.min("row_id").alias("first_row_id")
    )


def block_offsets(counts: DataFrame) -> DataFrame:
    """Per (split, file, block): the lines before the block in its file and the block's first row id.

    Line number of a row = ``lines_before + (row_id - first_row_id) + 1``: rows of one block are read by
    one task in file order, so their row ids are consecutive (see :func:`kgbrink.core.files.read_lines`).
    """
    blocks = counts.groupBy("split", "source_file", "block_start").agg(
        F.sum("lines").alias("lines"), F.min("first_row_id").alias("first_row_id")
    )
    before = (
        Window.partitionBy("split", "source_file").orderBy("block_start").rowsBetween(Window.unboundedPreceding, -1)
    )
    return blocks.withColumn("lines_before", F.coalesce(F.sum("lines").over(before), F.lit(0))).drop("lines")


def _line_number() -> Column:
    return (F.col("lines_before") + F.col("row_id") - F.col("first_row_id") + 1).alias("line_number")


def with_line_numbers(parsed: DataFrame) -> DataFrame:
    """Every row of ``parsed`` (rows of ``read_lines``: ``split, source_file, block_start, row_id, ...``) with
    its 1-based ``line_number`` in its file instead of ``block_start`` and ``row_id`` (one count per block)."""
    counts = line_counts(parsed.withColumn("status", F.lit("any")).withColumn("reason", F.lit(None)))
    keys = ["split", "source_file", "block_start"]
    numbered = parsed.join(F.broadcast(block_offsets(counts)), keys).withColumn("line_number", _line_number())
    return numbered.drop("block_start", "row_id", "lines_before", "first_row_id")


def quarantine_rows(parsed: DataFrame, offsets: DataFrame) -> DataFrame:
    """Quarantined lines with their 1-based line numbers: ``source_file, line_number, line, reason, detail``."""
    bad = parsed.filter(F.col("status") == QUARANTINED)
    return bad.join(F.broadcast(offsets), ["split", "source_file", "block_start"]).select(
        "source_file",
        _line_number(),
        # without the \r of a \r\n ending; invalid UTF-8 bytes shown as U+FFFD (the reason says so)
        F.make_valid_utf8(F.substring(F.regexp_replace("line", "\r$", ""), 1, MAX_QUARANTINED_LINE_CHARS)).alias(
            "line"
        ),
        "reason",
        "detail",
    )


def mark_repeats(records: DataFrame, key: str, reason: str) -> DataFrame:
    """``records`` (``source_file, line_number, ..., reason, detail``) with every good record of a ``key``
    after its first (by file and line) given ``reason`` and the first one's line in the detail."""
    first = Window.partitionBy(key).orderBy("source_file", "line_number")
    good = records.where(F.col("reason").isNull()).withColumns(
        {"_n": F.row_number().over(first), "_first": F.first("line_number").over(first)}
    )
    repeated = good.where(F.col("_n") > 1).select(
        *[c for c in records.columns if c not in ("reason", "detail")],
        F.lit(reason).alias("reason"),
        F.concat(F.lit(f"the {key} of line "), F.col("_first").cast("string")).alias("detail"),
    )
    return (
        records.where(F.col("reason").isNotNull())
        .unionByName(good.where(F.col("_n") == 1).drop("_n", "_first"))
        .unionByName(repeated)
    )
