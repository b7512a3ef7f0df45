"""Question entity sets of OKGQA (paper 004 Sec. 3.1): JSON Lines ``{"qid": ..., "entities": [keys]}``
(``id`` is accepted for ``qid``; a string or an integer, an integer read as its text), or a table
``(qid, entity)``.

Entity keys are looked up in the dataset's ``entities`` dictionary. Nothing is dropped silently: every
line that is not a well-typed question is quarantined with its file, line and the first reason of
:data:`LINE_REASONS` that applies; a repeated qid (its later lines), and an entity key the KG does not have
are quarantined too. A question keeps the entities it has; one left with none is quarantined as
``no_known_entity`` as well.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core import json_lines
from kgbrink.core.quarantine import mark_repeats, with_line_numbers

QUARANTINE_COLUMNS = ["source_file", "line_number", "qid", "entity", "reason", "detail"]
# per line, in the order they are checked: a line gets the first that applies
LINE_REASONS = (
    "malformed_json",  # not a JSON object (or a key repeated in it)
    "missing_qid",  # qid and id absent or null
    "bad_qid",  # qid neither a string nor an integer
    "missing_entities",  # entities absent, null or []
    "bad_entities",  # entities not a list, or an item not a string
    "too_many_entities",  # more keys than okgqa_subgraph.max_entities_per_question
    "duplicate_qid",  # every line of a qid after its first
)
# per entity key and per question, after the lookup
KEY_REASONS = ("unknown_entity", "no_known_entity")


def _why(reason: str, detail) -> Column:
    detail = F.lit(detail) if isinstance(detail, str) else detail
    return F.struct(F.lit(reason).alias("reason"), detail.alias("detail"))


def _checked(qid_kind: Column, entities: Column, entities_kind: Column, bad_item, cap: int) -> Column:
    """``struct<reason, detail>`` of the first line reason after ``malformed_json`` (NULL: a good record)."""
    n = F.size(entities)
    return (
        F.when(qid_kind.isNull() | (qid_kind == "null"), _why("missing_qid", "qid and id absent or null"))
        .when(
            ~qid_kind.isin("string", "integer"),
            _why("bad_qid", F.concat(F.lit("qid is "), qid_kind, F.lit("; it must be a string or an integer"))),
        )
        .when(
            entities_kind.isNull() | (entities_kind == "null") | ((entities_kind == "array") & (n == 0)),
            _why(
                "missing_entities",
                F.concat(
                    F.lit("entities is "),
                    F.coalesce(entities_kind, F.lit("absent")),
                    F.when(n == 0, F.lit(" (empty)")).otherwise(F.lit("")),
                ),
            ),
        )
        .when(
            entities_kind != "array",
            _why(
                "bad_entities",
                F.concat(F.lit("entities is "), entities_kind, F.lit("; it must be a list of entity keys")),
            ),
        )
        .when(
            bad_item.isNotNull(),
            _why(
                "bad_entities",
                F.format_string("entity %d of %d is %s; keys are strings", bad_item["position"], n, bad_item["kind"]),
            ),
        )
        .when(
            n > cap,
            _why(
                "too_many_entities",
                F.format_string("%d entities > okgqa_subgraph.max_entities_per_question = %d", n, F.lit(cap)),
            ),
        )
    )


def parse_lines(lines: DataFrame, max_entities: int) -> DataFrame:
    """``source_file, line_number, qid, entities, reason, detail`` per non-blank line of ``read_lines`` output
    (``reason`` null for a good line, else one of :data:`LINE_REASONS`; ``entities`` the keys of a good line)."""
    lines = lines.where(F.trim("line") != "")
    record = json_lines.record(F.col("line"))
    qid = json_lines.first_field(record, "qid", "id")
    entities = json_lines.field(record, "entities")
    items = json_lines.elements(entities)
    fields = lines.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        json_lines.kind(record).alias("_record"),
        qid.alias("_qid"),
        items.alias("_items"),
        json_lines.kind(entities).alias("_entities"),
    )
    verdict = _checked(
        json_lines.kind(F.col("_qid")),
        F.col("_items"),
        F.col("_entities"),
        json_lines.first_not(F.col("_items"), ("string",)),
        max_entities,
    )
    verdict = F.when(
        F.col("_record").isNull() | (F.col("_record") != "object"),
        _why("malformed_json", "not a JSON object with unique keys"),
    ).otherwise(verdict)
    parsed = fields.withColumn("_v", verdict).select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        json_lines.as_string(F.col("_qid")).alias("qid"),
        F.when(F.col("_v").isNull(), F.transform("_items", lambda item: F.try_variant_get(item, "$", "string")))
        .cast("array<string>")
        .alias("entities"),
        F.col("_v.reason").alias("reason"),
        F.col("_v.detail").alias("detail"),
    )
    numbered = with_line_numbers(parsed).select("source_file", "line_number", "qid", "entities", "reason", "detail")
    return mark_repeats(numbered, "qid", "duplicate_qid")


def resolve_entities(questions: DataFrame, entities: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(seeds(qid, id), quarantine)`` from parsed questions and ``entities(id, key)``."""
    bad_lines = questions.where(F.col("reason").isNotNull()).select(
        "source_file", "line_number", "qid", F.lit(None).cast("string").alias("entity"), "reason", "detail"
    )
    good = questions.where(F.col("reason").isNull())
    keyed = good.select("source_file", "line_number", "qid", F.explode_outer("entities").alias("entity"))
    looked_up = keyed.join(entities.select(F.col("key").alias("entity"), "id"), "entity", "left")
    unknown = looked_up.where(F.col("entity").isNotNull() & F.col("id").isNull()).select(
        "source_file",
        "line_number",
        "qid",
        "entity",
        F.lit("unknown_entity").alias("reason"),
        F.lit("not a key of the dataset's entities table").alias("detail"),
    )
    seeds = looked_up.where(F.col("id").isNotNull()).select("qid", "id").distinct()
    empty = good.join(seeds, "qid", "left_anti").select(
        "source_file",
        "line_number",
        "qid",
        F.lit(None).cast("string").alias("entity"),
        F.lit("no_known_entity").alias("reason"),
        F.lit("the question has no entity key the dataset knows").alias("detail"),
    )
    return seeds, bad_lines.unionByName(unknown).unionByName(empty)


def from_table(table: DataFrame, max_entities: int) -> DataFrame:
    """Parsed questions (as :func:`parse_lines`) from a table ``(qid, entity)``: one row per qid, its
    distinct keys sorted; a null qid or entity is a ``missing_qid`` / ``bad_entities`` question."""
    missing = {"qid", "entity"} - set(table.columns)
    if missing:
        raise ValueError(f"question table lacks column(s) {', '.join(sorted(missing))}; it needs qid, entity")
    qid_type, entity_type = table.schema["qid"].dataType, table.schema["entity"].dataType
    if not isinstance(qid_type, T.StringType | T.IntegerType | T.LongType | T.ShortType | T.ByteType):
        raise ValueError(f"question table column qid is {qid_type.simpleString()}; it must be a string or an integer")
    if not isinstance(entity_type, T.StringType):
        raise ValueError(f"question table column entity is {entity_type.simpleString()}; it must be a string")
    grouped = table.groupBy(F.col("qid").cast("string").alias("qid")).agg(
        F.array_sort(F.collect_set("entity")).alias("entities"),
        F.count_if(F.col("entity").isNull()).alias("_nulls"),
    )
    n = F.size("entities")
    verdict = (
        F.when(F.col("qid").isNull(), _why("missing_qid", "qid is null"))
        .when(
            F.col("_nulls") > 0,
            _why("bad_entities", F.format_string("%d rows of the qid have a null entity", F.col("_nulls"))),
        )
        .when(
            n > max_entities,
            _why(
                "too_many_entities",
                F.format_string("%d entities > okgqa_subgraph.max_entities_per_question = %d", n, F.lit(max_entities)),
            ),
        )
    )
    return grouped.withColumn("_v", verdict).select(
        F.lit("<table>").alias("source_file"),
        F.lit(None).cast("bigint").alias("line_number"),
        "qid",
        F.when(F.col("_v").isNull(), F.col("entities")).alias("entities"),
        F.col("_v.reason").alias("reason"),
        F.col("_v.detail").alias("detail"),
    )
