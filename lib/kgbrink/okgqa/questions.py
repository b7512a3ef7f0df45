"""Question entity sets of OKGQA (paper 004 Sec. 3.1): JSON Lines ``{"qid": ..., "entities": [keys]}``
(``id`` is accepted for ``qid``; a number is read as its text), or a table ``(qid, entity)``.

Entity keys are looked up in the dataset's ``entities`` dictionary. Nothing is dropped silently: a line
that is not a JSON object with a qid and a list of entity keys, a repeated qid (its later lines), and an
entity key the KG does not have are quarantined with their file, line and reason. A question keeps the
entities it has; one left with none is quarantined as ``no_known_entity`` as well.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.core.quarantine import with_line_numbers

QUARANTINE_COLUMNS = ["source_file", "line_number", "qid", "entity", "reason", "detail"]
_RECORD = "struct<qid: string, id: string, entities: array<string>, _corrupt: string>"


def parse_lines(lines: DataFrame) -> DataFrame:
    """``source_file, line_number, qid, entities, reason`` per non-blank line of ``read_lines`` output
    (``reason`` null for a good line)."""
    lines = lines.where(F.trim("line") != "")
    record = F.from_json("line", _RECORD, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    parsed = lines.withColumn("rec", record).select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        F.coalesce("rec.qid", "rec.id").alias("qid"),
        F.col("rec.entities").alias("entities"),
        F.when(
            ~F.trim("line").startswith("{") | F.col("rec").isNull() | F.col("rec._corrupt").isNotNull(),
            "malformed_json",
        )
        .when(F.coalesce("rec.qid", "rec.id").isNull(), "missing_qid")
        .when(F.col("rec.entities").isNull(), "missing_entities")
        .alias("reason"),
    )
    numbered = with_line_numbers(parsed).select(
        "source_file",
        "line_number",
        "qid",
        "entities",
        "reason",
    )
    first = Window.partitionBy("qid").orderBy("source_file", "line_number")
    good = numbered.where(F.col("reason").isNull()).withColumn("_n", F.row_number().over(first))
    repeated = good.where(F.col("_n") > 1).drop("_n").withColumn("reason", F.lit("duplicate_qid"))
    return (
        numbered.where(F.col("reason").isNotNull())
        .unionByName(good.where(F.col("_n") == 1).drop("_n"))
        .unionByName(repeated)
    )


def resolve_entities(questions: DataFrame, entities: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(seeds(qid, node), quarantine)`` from parsed questions and ``entities(id, key)``."""
    bad_lines = questions.where(F.col("reason").isNotNull()).select(
        "source_file",
        "line_number",
        "qid",
        F.lit(None).cast("string").alias("entity"),
        "reason",
        F.lit(None).cast("string").alias("detail"),
    )
    good = questions.where(F.col("reason").isNull())
    keyed = good.select("source_file", "line_number", "qid", F.explode_outer("entities").alias("entity"))
    looked_up = keyed.join(entities.select(F.col("key").alias("entity"), F.col("id").alias("node")), "entity", "left")
    unknown = looked_up.where(F.col("entity").isNotNull() & F.col("node").isNull()).select(
        "source_file",
        "line_number",
        "qid",
        "entity",
        F.lit("unknown_entity").alias("reason"),
        F.lit("not a key of the dataset's entities table").alias("detail"),
    )
    seeds = looked_up.where(F.col("node").isNotNull()).select("qid", "node").distinct()
    empty = good.join(seeds, "qid", "left_anti").select(
        "source_file",
        "line_number",
        "qid",
        F.lit(None).cast("string").alias("entity"),
        F.lit("no_known_entity").alias("reason"),
        F.lit("the question has no entity key the dataset knows").alias("detail"),
    )
    return seeds, bad_lines.unionByName(unknown).unionByName(empty)


def from_table(table: DataFrame) -> DataFrame:
    """Parsed questions from a table ``(qid, entity)``: one row per question, numbered by first row."""
    missing = {"qid", "entity"} - set(table.columns)
    if missing:
        raise ValueError(f"question table lacks column(s) {', '.join(sorted(missing))}; it needs qid, entity")
    return (
        table.groupBy(F.col("qid").cast("string").alias("qid"))
        .agg(
            F.lit("<table>").alias("source_file"),
            F.lit(None).cast("bigint").alias("line_number"),
            F.array_sort(F.collect_set(F.col("entity").cast("string"))).alias("entities"),
            F.lit(None).cast("string").alias("reason"),
        )
        .select("source_file", "line_number", "qid", "entities", "reason")
    )
