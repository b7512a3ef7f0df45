"""Question records from removed triples (BRINK Sec. 3.2-3.3, Alg. 1) and their three renderings (Sec. 5.4).

Every random choice is a seeded hash of content (``xxhash64(seed, purpose, ...)``), so questions, their
split and the downsampling depend only on the removed triples, the KG and the seed.

- One question per removed triple r(h, t). The topic entity is h or t by the low bit of
  ``xxhash64(seed, "topic", h, r, t)``; the *hard answer* is the other entity. (BRINK's Table 3 lists
  more Family questions (2,165) than removed triples (17,615 - 15,785 = 1,830), so the published code
  emits a question per sampled grounding, repeating a removed triple once per rule that grounds it; we
  emit one per removed triple and keep the rules behind it in ``rule_ids``.)
- Complete answer set, from the complete KG in the question's direction: topic h -> every t' with
  r(h, t'); topic t -> every h' with r(h', t). (The published code always completes from the grounding's
  head entity, which is wrong when the topic is the tail.)
- Questions with more than ``variant.max_answers`` answers are dropped (and counted): answer sets of hub
  topics run to millions of entities and are no question a QA model can be scored on.
- Downsampling (Alg. 1), by hard answer a: when |Q_a| > tau |Q|, keep the floor(tau |Q|) questions of
  Q_a with the smallest ``xxhash64(seed, "downsample", question id)``; |Q| is the count before
  downsampling. The paper leaves "answer(q)" open for multi-answer questions; the hard answer is the one
  entity every question has, and the one the removal made hard.
- Split 8:1:1 (configurable) over the kept questions ranked by ``xxhash64(seed, "split", id)``: the first
  round(0.8 n) are train, the next round(0.1 n) validation (rounded half up), the rest test (exact proportions, unlike an
  independent draw per question).
- Text from templates on the relation label (no LLM): ``forward`` when the topic is the head,
  ``inverse`` when it is the tail, with ``{topic}`` and ``{relation}`` placeholders.

Renderings (Sec. 5.4) name entities three ways; relations are always named by their label (or key):
``private_id`` = a random dense id (rank of ``xxhash64(seed, "private", key)`` over all entities of the
dataset), ``entity_id`` = the dataset's own key (e.g. Q42), ``text_label`` = the entity label, or the
key for entities without one (counted as ``unlabelled``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.core.frames import with_positions

SCHEMES = ("private_id", "entity_id", "text_label")
SPLITS = ("train", "valid", "test")


def question_records(removed: DataFrame, complete: DataFrame, seed: int, max_answers: int) -> DataFrame:
    """``id, h, r, t, direction, topic, hard_answer, answers, n_answers, rule_ids``: one question per
    removed triple (``h, r, t, rule_ids``), its answers completed from ``complete`` (``h, r, t``) in its
    direction. ``answers`` is null when there are more than ``max_answers`` of them (a hub topic such as
    (?, instance of, human)); such questions are counted and left out by the job, never materialised."""
    picked = removed.select(
        F.lower(F.lpad(F.hex(F.xxhash64(F.lit(seed), F.lit("question"), "h", "r", "t")), 16, "0")).alias("id"),
        "h",
        "r",
        "t",
        "rule_ids",
        F.when((F.xxhash64(F.lit(seed), F.lit("topic"), "h", "r", "t") % 2) == 0, "forward")
        .otherwise("inverse")
        .alias("direction"),
    )
    picked = picked.withColumn(
        "topic", F.when(F.col("direction") == "forward", F.col("h")).otherwise(F.col("t"))
    ).withColumn("hard_answer", F.when(F.col("direction") == "forward", F.col("t")).otherwise(F.col("h")))
    facts = complete.select("h", "r", "t").distinct()
    forward = facts.select(
        F.lit("forward").alias("direction"), F.col("h").alias("topic"), "r", F.col("t").alias("answer")
    )
    inverse = facts.select(
        F.lit("inverse").alias("direction"), F.col("t").alias("topic"), "r", F.col("h").alias("answer")
    )
    key = ["direction", "topic", "r"]
    candidates = forward.unionByName(inverse).join(picked.select(*key).distinct(), key, "left_semi")
    sizes = candidates.groupBy(*key).agg(F.count(F.lit(1)).alias("n_answers"))
    small = sizes.filter(F.col("n_answers") <= max_answers).select(*key)
    answers = (
        candidates.join(small, key, "left_semi")
        .groupBy(*key)
        .agg(F.array_sort(F.collect_list("answer")).alias("answers"))
    )
    return (
        picked.join(sizes, key, "left")
        .join(answers, key, "left")
        .select("id", "h", "r", "t", "direction", "topic", "hard_answer", "answers", "n_answers", "rule_ids")
    )


def downsample(questions: DataFrame, tau: float, seed: int) -> DataFrame:
    """Algorithm 1 by hard answer: the questions kept (module docstring). ``0 < tau <= 1``."""
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    total = questions.count()
    cap = int(tau * total)
    limit = tau * total
    by_answer = Window.partitionBy("hard_answer")
    order = Window.partitionBy("hard_answer").orderBy(F.xxhash64(F.lit(seed), F.lit("downsample"), "id"), "id")
    ranked = questions.withColumn("_n", F.count(F.lit(1)).over(by_answer)).withColumn(
        "_rank", F.row_number().over(order)
    )
    return ranked.filter((F.col("_n") <= F.lit(limit)) | (F.col("_rank") <= F.lit(cap))).drop("_n", "_rank")


def assign_splits(questions: DataFrame, seed: int, ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> DataFrame:
    """The questions with ``split`` (train/valid/test) in the exact proportions ``ratios`` (module docstring)."""
    if len(ratios) != 3 or min(ratios) < 0 or abs(sum(ratios) - 1.0) > 1e-9:
        raise ValueError(f"split ratios must be three non-negative numbers summing to 1, got {ratios}")
    n = questions.count()
    n_train = int(ratios[0] * n + 0.5)
    n_valid = int(ratios[1] * n + 0.5)
    ranked = with_positions(questions, [F.xxhash64(F.lit(seed), F.lit("split"), "id"), "id"], "_rank", start=1)
    split = (
        F.when(F.col("_rank") <= n_train, "train").when(F.col("_rank") <= n_train + n_valid, "valid").otherwise("test")
    )
    return ranked.withColumn("split", split).drop("_rank")


def entity_names(entities: DataFrame, scheme: str, seed: int) -> DataFrame:
    """``id, name``: how ``scheme`` names every entity of the dataset (``id, key, label``)."""
    if scheme == "entity_id":
        return entities.select("id", F.col("key").alias("name"))
    if scheme == "text_label":
        return entities.select("id", F.coalesce(F.nullif(F.trim("label"), F.lit("")), "key").alias("name"))
    if scheme == "private_id":
        numbered = with_positions(
            entities.select("id", "key"), [F.xxhash64(F.lit(seed), F.lit("private"), "key"), "key"], "position"
        )
        return numbered.select("id", F.col("position").cast("string").alias("name"))
    raise ValueError(f"entity labelling scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")


def relation_names(relations: DataFrame) -> DataFrame:
    """``id, name``: a relation's label, or its key when it has none."""
    return relations.select("id", F.coalesce(F.nullif(F.trim("label"), F.lit("")), "key").alias("name"))


def render_triples(triples: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``h, r, t`` as names (``entities`` / ``relations``: ``id, name``)."""
    e_h = entities.select(F.col("id").alias("h"), F.col("name").alias("h_name"))
    e_t = entities.select(F.col("id").alias("t"), F.col("name").alias("t_name"))
    rel = relations.select(F.col("id").alias("r"), F.col("name").alias("r_name"))
    return (
        triples.join(e_h, "h")
        .join(rel, "r")
        .join(e_t, "t")
        .select(F.col("h_name").alias("h"), F.col("r_name").alias("r"), F.col("t_name").alias("t"))
    )


def render_questions(
    questions: DataFrame, entities: DataFrame, relations: DataFrame, templates: dict[str, str]
) -> DataFrame:
    """Question JSON records named by ``entities`` / ``relations`` (``id, name``): ``id, split, question,
    topic_entity, relation, answers, hard_answer, removed_triple, direction, rule_ids``."""
    for key in ("forward", "inverse"):
        if "{topic}" not in templates.get(key, "") or "{relation}" not in templates.get(key, ""):
            raise ValueError(
                f"question template {key!r} must contain {{topic}} and {{relation}}: {templates.get(key)!r}"
            )
    name = {
        row: entities.select(F.col("id").alias(row), F.col("name").alias(f"{row}_name"))
        for row in ("h", "t", "topic", "hard_answer")
    }
    rel = relations.select(F.col("id").alias("r"), F.col("name").alias("r_name"))
    exploded = questions.select("id", F.posexplode("answers").alias("pos", "answer"))
    answer_names = (
        exploded.join(entities.select(F.col("id").alias("answer"), F.col("name").alias("answer_name")), "answer")
        .groupBy("id")
        .agg(F.array_sort(F.collect_list("answer_name")).alias("answer_names"))
    )
    joined = questions
    for row, frame in name.items():
        joined = joined.join(frame, row)
    joined = joined.join(rel, "r").join(answer_names, "id")

    def fill(template: str):
        parts = template.replace("{relation}", "\x00R\x00").replace("{topic}", "\x00T\x00").split("\x00")
        return F.concat(
            *[F.col("r_name") if p == "R" else F.col("topic_name") if p == "T" else F.lit(p) for p in parts if p]
        )

    text = F.when(F.col("direction") == "forward", fill(templates["forward"])).otherwise(fill(templates["inverse"]))
    return joined.select(
        "id",
        "split",
        text.alias("question"),
        F.col("topic_name").alias("topic_entity"),
        F.col("r_name").alias("relation"),
        F.col("answer_names").alias("answers"),
        F.col("hard_answer_name").alias("hard_answer"),
        F.array("h_name", "r_name", "t_name").alias("removed_triple"),
        "direction",
        "rule_ids",
    )
