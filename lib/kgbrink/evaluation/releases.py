"""A published release as predict's input (issue 58): its configs read back into the frames the dataset's
tables give (``kgbrink release`` wrote them; ``release.json`` lists their files by split).

ProbeKGC (:func:`mcq_questions`): ``probekgc_questions`` (by key) and ``probekgc_questions_text`` (the
prompt ``kgbrink mcq`` rendered), one split per difficulty, into ``mcq.questions`` rows: entities and
relations by the dataset ids ``kg_entities`` / ``kg_relations`` carry (:func:`dictionary`),
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


def config_entry(manifest: dict, name: str) -> dict | None:
    """The entry of the config ``name`` in a checked ``release.json`` (None: the release has none)."""
    return next((config for config in manifest["configs"] if config.get("name") == name), None)


def config_files(manifest: dict, name: str, where: str, kind: str = "files") -> dict[str, list[str]]:
    """``{split: [relative file, ...]}`` of the config ``name`` of a checked ``release.json``: its Parquet
    ``files``, or (``kind`` jsonl) its JSON Lines files."""
    entry = config_entry(manifest, name)
    if entry is None or not entry.get(kind):
        what = "no config" if entry is None else "no JSON Lines files of"
        raise ReleaseInputError(f"{where}: the release has {what} {name}")
    return {split: list(files) for split, files in entry[kind].items()}


def has_config(manifest: dict, name: str) -> bool:
    return config_entry(manifest, name) is not None


def numbered(keys: DataFrame) -> DataFrame:
    """``key, id``: each key's rank (0-based) in key order, numbered in ranges of keys
    (:func:`kgbrink.core.frames.with_positions`), not in one task."""
    return with_positions(keys.select("key").distinct(), ["key"], "id").select("key", F.col("id").cast("int"))


def dictionary(frame: DataFrame) -> DataFrame:
    """``id, key, label`` of a release's ``kg_entities`` or ``kg_relations``: the dataset's ids it carries,
    or (a release without them) each key's rank (:func:`numbered`)."""
    if "id" in frame.columns:
        return frame.select(F.col("id").cast("int").alias("id"), "key", "label")
    return numbered(frame).join(frame.select("key", "label"), "key")


def _checked(frame: DataFrame, unknown: F.Column, message: F.Column) -> DataFrame:
    """``frame``, the query failing with ``message`` at the first row where ``unknown`` holds."""
    return frame.where(F.when(unknown, F.raise_error(message)).otherwise(F.lit(True)))


def by_id(
    frame: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    entity_columns: tuple[str, ...] = (),
    relation_columns: tuple[str, ...] = (),
    where: str = "release",
) -> DataFrame:
    """``frame`` with each key column of ``entity_columns`` / ``relation_columns`` replaced by its id in
    ``entities`` / ``relations`` (``id, key``), in place (the inverse of
    :func:`kgbrink.release.layout.keyed`); a null key stays null, a key the dictionary has not fails the
    query naming ``where`` and the column."""
    columns, out, checks = frame.columns, frame, []
    for names, lookup in ((entity_columns, entities), (relation_columns, relations)):
        for name in names:
            ids = lookup.select(F.col("key").alias(f"_key_{name}"), F.col("id").cast("int").alias(f"_id_{name}"))
            out = out.join(ids, out[name] == F.col(f"_key_{name}"), "left")
            checks.append(name)
    for name in checks:
        unknown = F.col(name).isNotNull() & F.col(f"_id_{name}").isNull()
        message = F.concat(F.lit(f"{where}: column {name} holds a key the release's KG has not: "), F.col(name))
        out = _checked(out, unknown, message)
    return out.select(*[F.col(f"_id_{c}").alias(c) if c in checks else F.col(c) for c in columns])


def gt_questions(keyed: DataFrame, entities: DataFrame, relations: DataFrame, where: str = "release") -> DataFrame:
    """``gt_questions`` rows (ids) of a release's ``synthkgqa_questions`` (by key, as
    :func:`kgbrink.synthkgqa.generator.keyed_questions` wrote them): seeds, answer, answers and both answer
    subgraphs looked up in ``entities`` / ``relations`` (``id, key``), each array in its order; a key the
    dictionaries have not fails the query naming ``where``."""
    triples = [
        F.coalesce(c, F.array().cast("array<array<string>>")) for c in ("answer_subgraph", "full_answer_subgraph")
    ]
    entity_keys = F.flatten(
        F.array(
            F.coalesce("seeds", F.array().cast("array<string>")),
            F.array("answer"),
            F.coalesce("all_answers", F.array().cast("array<string>")),
            *[F.flatten(F.transform(t, lambda x: F.array(x[0], x[2]))) for t in triples],
        )
    )
    relation_keys = F.flatten(F.array(*[F.transform(t, lambda x: x[1]) for t in triples]))

    def maps(keys: F.Column, lookup: DataFrame, alias: str, kind: str) -> DataFrame:
        exploded = keyed.select("id", F.explode(F.array_distinct(keys)).alias("key")).where(F.col("key").isNotNull())
        found = exploded.join(lookup.select("key", F.col("id").cast("int").alias("_v")), "key", "left")
        message = F.concat(
            F.lit(f"{where}: question "),
            F.col("id"),
            F.lit(f" names {'an' if kind == 'entity' else 'a'} {kind} the release's KG has not: "),
            F.col("key"),
        )
        found = _checked(found, F.col("_v").isNull(), message)
        return found.groupBy("id").agg(F.map_from_entries(F.collect_list(F.struct("key", "_v"))).alias(alias))

    frame = keyed.join(maps(entity_keys, entities, "_e", "entity"), "id", "left")
    frame = frame.join(maps(relation_keys, relations, "_r", "relation"), "id", "left")
    empty = F.create_map().cast("map<string,int>")
    e, r = F.coalesce("_e", empty), F.coalesce("_r", empty)

    def ids(column: str) -> F.Column:
        return F.transform(
            column,
            lambda x: F.struct(
                F.element_at(e, x[0]).alias("h"), F.element_at(r, x[1]).alias("r"), F.element_at(e, x[2]).alias("t")
            ),
        )

    split = F.col("split").cast("string")
    if "no_split" in keyed.columns:  # published under train, none given
        split = F.when(F.col("no_split"), F.lit(None).cast("string")).otherwise(split)
    return frame.select(
        "id",
        split.alias("split"),
        F.col("question").cast("string"),
        F.transform("seeds", lambda k: F.element_at(e, k)).alias("seeds"),
        F.element_at(e, F.col("answer")).alias("answer"),
        ids("answer_subgraph").alias("answer_subgraph"),
        "graph_isomorphism",
        "dutt_label",
        *[F.col(c).cast("int") for c in ("n_hops", "n_edges", "n_seeds", "n_intermediate")],
        F.transform("all_answers", lambda k: F.element_at(e, k)).alias("all_answers"),
        F.col("n_answers").cast("int"),
        F.col("answer_in_set").cast("boolean"),
        ids("full_answer_subgraph").alias("full_answer_subgraph"),
    )


def mcq_questions(
    text: DataFrame, by_key: DataFrame, entities: DataFrame, relations: DataFrame, kg: DataFrame
) -> DataFrame:
    """``mcq.questions`` rows of a release's ProbeKGC questions. ``text``: ``id, prompt, split`` (the
    difficulty); ``by_key``: ``id, triple, task, answer, A, B, ...``; ``entities`` / ``relations``: ``key``;
    ``kg``: ``h, r, t`` keys of the triples the degrees count."""
    letters = [c for c in LETTERS if c in by_key.columns]
    entity_ids, relation_ids = dictionary(entities), dictionary(relations)

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
    found = exploded.join(entity_ids.select("key", F.col("id").alias("_id")), "key", "left")
    message = F.concat(
        F.lit("release: question "), F.col("id"), F.lit(" names an entity the KG has not: "), F.col("key")
    )
    ids = (
        _checked(found, F.col("key").isNotNull() & F.col("_id").isNull(), message)
        .groupBy("id")
        .agg(F.collect_list(F.struct("key", "_id")).alias("_entities"))
    )
    with_relation = options.join(ids, "id").join(
        relation_ids.select(F.col("key").alias("_r"), F.col("id").alias("r")), "_r", "left"
    )
    message = F.concat(
        F.lit("release: question "), F.col("id"), F.lit(" names a relation the KG has not: "), F.col("_r")
    )
    with_ids = _checked(with_relation, F.col("_r").isNotNull() & F.col("r").isNull(), message).select(
        "id",
        entity("_h").alias("h"),
        "r",
        entity("_t").alias("t"),
        "task",
        F.transform("_options", lambda key: F.element_at(F.map_from_entries(F.col("_entities")), key)).alias("options"),
        "gold_position",
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
