"""A published release as predict's input (issue 58): its configs read back into the frames the dataset's
tables give (``kgbrink release`` wrote them; ``release.json`` lists their files by split).

ProbeKGC (:func:`mcq_questions`): ``probekgc_questions`` (by key) and ``probekgc_questions_text`` (the
prompt ``kgbrink mcq`` rendered), one split per difficulty, into ``mcq.questions`` rows: entities and
relations numbered by their key's rank in ``kg_entities`` / ``kg_relations`` (ids of this reading only),
``gold_position`` from the answer letter, ``topic_degree`` = the triples of the release's KG in
``stats.splits`` that contain the query entity (the tail of a head prediction, else the head; spec 3.C, as
``kgbrink mcq`` counts it). BRINK (:func:`brink_records`): the questions of one scheme and split, as the
reader's records (``--context none``: the question alone).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import with_positions

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class ReleaseInputError(ValueError):
    """A release lacks what predict asks of it: names the release and the config."""


def config_files(manifest: dict, name: str, where: str) -> dict[str, list[str]]:
    """``{split: [relative Parquet file, ...]}`` of the config ``name`` of a checked ``release.json``."""
    for config in manifest["configs"]:
        if config.get("name") == name:
            return {split: list(files) for split, files in config["files"].items()}
    raise ReleaseInputError(f"{where}: the release has no config {name}")


def numbered(keys: DataFrame) -> DataFrame:
    """``key, id``: each key's rank (0-based) in key order, numbered in ranges of keys
    (:func:`kgbrink.core.frames.with_positions`), not in one task."""
    return with_positions(keys.select("key").distinct(), ["key"], "id").select("key", F.col("id").cast("int"))


def mcq_questions(
    text: DataFrame, by_key: DataFrame, entities: DataFrame, relations: DataFrame, kg: DataFrame
) -> DataFrame:
    """``mcq.questions`` rows of a release's ProbeKGC questions. ``text``: ``id, prompt, split`` (the
    difficulty); ``by_key``: ``id, triple, task, answer, A, B, ...``; ``entities`` / ``relations``: ``key``;
    ``kg``: ``h, r, t`` keys of the triples the degrees count."""
    letters = [c for c in LETTERS if c in by_key.columns]
    entity_ids, relation_ids = numbered(entities), numbered(relations)

    def entity(column: str) -> F.Column:
        return F.element_at(F.map_from_entries(F.col("_entities")), F.col(column))

    options = by_key.select(
        "id",
        "task",
        F.col("triple")[0].alias("_h"),
        F.col("triple")[1].alias("_r"),
        F.col("triple")[2].alias("_t"),
        F.array(*[F.col(c) for c in letters]).alias("_options"),
        (F.ascii("answer") - F.lit(ord("A"))).alias("gold_position"),
    )
    exploded = options.select("id", F.explode(F.array_distinct(F.concat("_options", F.array("_h", "_t")))).alias("key"))
    ids = (
        exploded.join(entity_ids.withColumnRenamed("id", "_id"), "key", "left")
        .groupBy("id")
        .agg(F.collect_list(F.struct("key", "_id")).alias("_entities"))
    )
    with_ids = (
        options.join(ids, "id")
        .join(relation_ids.select(F.col("key").alias("_r"), F.col("id").alias("r")), "_r", "left")
        .select(
            "id",
            entity("_h").alias("h"),
            "r",
            entity("_t").alias("t"),
            "task",
            F.transform("_options", lambda key: F.element_at(F.map_from_entries(F.col("_entities")), key)).alias(
                "options"
            ),
            "gold_position",
        )
    )
    query = F.when(F.col("task") == "head prediction", F.col("t")).otherwise(F.col("h"))
    questions = with_ids.withColumn("query_entity", query).withColumn("gold", F.col("options")[F.col("gold_position")])
    distinct = kg.select("h", "r", "t").distinct()
    ends = (
        distinct.select(F.explode(F.array_distinct(F.array("h", "t"))).alias("key"))
        .join(entity_ids, "key")
        .groupBy(F.col("id").alias("query_entity"))
        .agg(F.count("*").alias("topic_degree"))
    )
    return (
        questions.join(text.select("id", F.col("prompt").alias("text"), F.col("split").alias("difficulty")), "id")
        .join(ends, "query_entity", "left")
        .select(
            "id",
            F.col("h").cast("int").alias("h"),
            F.col("r").cast("int").alias("r"),
            F.col("t").cast("int").alias("t"),
            "task",
            F.col("query_entity").cast("int").alias("query_entity"),
            F.col("gold").cast("int").alias("gold"),
            "difficulty",
            F.col("options").cast("array<int>").alias("options"),
            F.col("gold_position").cast("int").alias("gold_position"),
            F.lit(None).cast("string").alias("distractor_source"),
            F.lit(None).cast("boolean").alias("fallback"),
            F.coalesce("topic_degree", F.lit(0)).cast("long").alias("topic_degree"),
            "text",
        )
    )


def brink_records(questions: DataFrame, split: str) -> DataFrame:
    """The reader's records (``id, question, topic_entity, answers, hard_answer``) of a release's BRINK
    questions of one scheme (``brink_questions_<scheme>``), split ``split``."""
    return questions.filter(F.col("split") == split).select("id", "question", "topic_entity", "answers", "hard_answer")
