"""Renderings of ProbeKGC questions (spec 3.A steps 6-7; README "Knowledge Utilization Analysis").

- names: ``ids`` (the dataset's integer ids), ``keys`` (the dataset's keys: the ProbeKGC JSON shape
  ``{"triple": [h, r, t], "task": ..., "A": e, ..., "D": e}`` that ProbeKGC's scripts read) or ``text``
  (labels, the key where an entity has none);
- prompt [code ``prompt_hub.question_prompt``, no CoT, no context]: "The incomplete triple is:" with
  (h, r, <mask>) or (<mask>, r, t), the question from the relation's template (``<head entity>``,
  ``<tail entity>``, ``<relation>`` replaced by labels), the lettered options and the reply instruction;
  the system prompt is :data:`SYSTEM_PROMPT`;
- position-bias variants [code ``_options2text(fixed_id)``]: for a fixed letter P the gold swaps places
  with the option at P, the others keep theirs.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
RENDERINGS = ("ids", "keys", "text")
SYSTEM_PROMPT = (
    'You are a good assistant about knowledge graph completion, which aims to predict the missing entity "<mask>" '
    "in an incomplete triple like (head entity, relation, <mask>) or (<mask>, relation, tail entity). Answer the "
    "question based on the given context."
)
FILE_NAMES = {"easy": "test_simple", "medium": "test_medium", "hard": "test_hard"}  # ProbeKGC's file names


def names(dictionary: DataFrame, rendering: str) -> DataFrame:
    """``id, name``: the entity or relation dictionary (``id, key, label``) as the rendering names it."""
    if rendering == "ids":
        return dictionary.select("id", F.col("id").alias("name"))
    if rendering == "keys":
        return dictionary.select("id", F.col("key").alias("name"))
    if rendering == "text":
        label = F.when(F.trim(F.col("label")) != "", F.col("label"))
        return dictionary.select("id", F.coalesce(label, F.col("key")).alias("name"))
    raise ValueError(f"unknown rendering {rendering!r} (known: {', '.join(RENDERINGS)})")


def named(questions: DataFrame, entity_names: DataFrame, relation_names: DataFrame) -> DataFrame:
    """``questions`` plus ``h_name, r_name, t_name`` and ``option_names`` (in ``options`` order)."""
    refs = questions.select("id", F.posexplode(F.concat(F.array("h", "t"), "options")).alias("i", "e"))
    refs = refs.join(entity_names.select(F.col("id").alias("e"), "name"), "e")
    back = refs.groupBy("id").agg(F.array_sort(F.collect_list(F.struct("i", "name"))).alias("_n"))
    out = questions.join(back, "id").join(
        relation_names.select(F.col("id").alias("r"), F.col("name").alias("r_name")), "r"
    )
    n = F.transform("_n", lambda x: x["name"])
    return out.select(
        *questions.columns,
        n[0].alias("h_name"),
        "r_name",
        n[1].alias("t_name"),
        F.slice(n, 3, F.size(n) - 2).alias("option_names"),
    )


def templates(spark: SparkSession, relations: DataFrame, per_relation: dict, defaults: dict[str, str]) -> DataFrame:
    """``r, template``-ready frame ``r, head_template, tail_template``: the configured templates of
    relation keys (``mcq.templates``, ProbeKGC's ``relation.json`` fields ``head prediction`` and ``tail
    prediction``) and the generic default for every other relation."""
    rows = [(str(k), v["head prediction"], v["tail prediction"]) for k, v in per_relation.items()]
    given = spark.createDataFrame(rows, "key string, head_template string, tail_template string")
    out = relations.select(F.col("id").alias("r"), "key").join(given, "key", "left")
    return out.select(
        "r",
        F.coalesce("head_template", F.lit(defaults["head prediction"])).alias("head_template"),
        F.coalesce("tail_template", F.lit(defaults["tail prediction"])).alias("tail_template"),
    )


def prompt(frame: DataFrame, options: int) -> Column:
    """The user prompt of a named question (``h_name, r_name, t_name, option_names, task`` and the
    templates' columns) [code ``prompt_hub.question_prompt``]."""
    h, r, t = (F.col(c).cast("string") for c in ("h_name", "r_name", "t_name"))
    tail = F.col("task") == "tail prediction"
    triple = F.when(tail, F.concat(F.lit("("), h, F.lit(", "), r, F.lit(", <mask>)")))
    triple = triple.otherwise(F.concat(F.lit("(<mask>, "), r, F.lit(", "), t, F.lit(")")))
    chosen = F.when(tail, F.col("tail_template")).otherwise(F.col("head_template"))
    # a label ending in "of" ("instance of") takes the template's own "of" once: "the instance of X"
    once = F.replace(chosen, F.lit("<relation> of "), F.lit("<relation> "))
    template = F.when(F.lower(r).endswith(" of"), once).otherwise(chosen)
    question = F.replace(
        F.replace(F.replace(template, F.lit("<head entity>"), h), F.lit("<tail entity>"), t), F.lit("<relation>"), r
    )
    letters = F.array(*[F.lit(x) for x in LETTERS[:options]])
    lines = F.transform(
        "option_names", lambda x, i: F.concat(F.element_at(letters, i + 1), F.lit(". "), x.cast("string"))
    )
    reply = "/".join(LETTERS[:options])
    return F.concat(
        F.lit("The incomplete triple is:\n"),
        triple,
        F.lit("\n\nComplete the triple by answering the following question:\n"),
        question,
        F.lit("\n"),
        F.concat_ws("\n", lines),
        F.lit(f"\n\nReply with the correct option ID ({reply}). Do not reply any other words."),
    )


def with_text(
    questions: DataFrame, entities: DataFrame, relations: DataFrame, relation_templates: DataFrame, options: int
) -> DataFrame:
    """``questions`` with ``text`` = the prompt in text labels."""
    n = named(questions.drop("text"), names(entities, "text"), names(relations, "text"))
    n = n.join(relation_templates, "r")
    return n.select(*[c for c in questions.columns if c != "text"], prompt(n, options).alias("text")).select(
        *questions.columns
    )


def swapped(array: str | Column, gold_position: str | Column, fixed: int | Column) -> Column:
    """``array`` with the elements at ``gold_position`` and ``fixed`` swapped (spec 3.A step 7)."""
    a = F.col(array) if isinstance(array, str) else array
    g = F.col(gold_position) if isinstance(gold_position, str) else gold_position
    return F.transform(
        a, lambda x, i: F.when(i == fixed, F.element_at(a, g + 1)).when(i == g, F.element_at(a, fixed + 1)).otherwise(x)
    )


def fixed_position(frame: DataFrame, fixed: int) -> DataFrame:
    """The position-bias variant of named questions: gold at letter ``fixed``, ``options`` and
    ``option_names`` swapped accordingly, ``gold_position`` = ``fixed``."""
    cols = {
        "options": swapped("options", "gold_position", fixed),
        "option_names": swapped("option_names", "gold_position", fixed),
    }
    return frame.withColumns(cols).withColumn("gold_position", F.lit(fixed))


def records(frame: DataFrame, rendering: str, options: int, fixed: int | Column | None = None, keep=()) -> DataFrame:
    """JSON records of named questions: ``id, triple, task, A, B, ..., answer`` (the ProbeKGC shape plus
    the id and the gold letter), ``fixed_position`` for a variant (``fixed`` a letter index, or a column
    that is negative for the original), ``system, prompt`` for ``text``; then the columns ``keep``."""
    letters = F.array(*[F.lit(x) for x in LETTERS[:options]])
    cols = [
        F.col("id"),
        F.array("h_name", "r_name", "t_name").alias("triple"),
        F.col("task"),
        *[F.col("option_names")[i].alias(LETTERS[i]) for i in range(options)],
        F.element_at(letters, F.col("gold_position") + 1).alias("answer"),
    ]
    if fixed is not None:
        p = F.lit(fixed) if isinstance(fixed, int) else fixed
        cols.append(F.when(p >= 0, F.element_at(letters, p + 1)).alias("fixed_position"))
    if rendering == "text":
        cols += [F.lit(SYSTEM_PROMPT).alias("system"), prompt(frame, options).alias("prompt")]
    return frame.select(*cols, *keep)
