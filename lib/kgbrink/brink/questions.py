"""Question records from removed triples (BRINK Sec. 3.2-3.3, Alg. 1) and their three renderings (Sec. 5.4).

Every random choice is a seeded hash of content (``xxhash64(seed, purpose, ...)``), so questions, their
split and the downsampling depend only on the removed triples, the KG and the seed.

- What makes a question (``variant.question_unit``). Sec. 3.2 generates a question "for each removed
  triple", yet Table 3 lists more questions than removed triples (Family 2,165 for 17,615 - 15,785 =
  1,830, ratio 1.18; Wikidata5m 34,651 for 32,101, 1.08). Of the readings the text allows, only one
  question per *selected grounding* (a removed triple grounded by k selected groundings gives k
  questions) yields a ratio a little above 1: both directions of every triple give 2 before
  downsampling (Alg. 1 would then have to drop ~40% of Family's questions, whose hard answers are
  spread thin: see docs/fidelity.md), and one per (relation, topic) query gives at most 1. kgbrink
  offers both: ``removed_triple`` (default: the text; no duplicate questions, so none can straddle the
  train/test split) and ``grounding`` (Table 3's count; id and topic side hash the grounding too, so
  the k questions of a triple draw their sides independently). The build reports both counts;
  docs/fidelity.md gives the measured ratios.
- The topic entity is h or t by the low bit of ``xxhash64(seed, "topic", h, r, t)`` (and the grounding's
  ``rule_id, sample_hash`` for ``grounding``); the *hard answer* is the other entity.
- Complete answer set, from the complete KG in the question's direction: topic h -> every t' with
  r(h, t'); topic t -> every h' with r(h', t). (The published code always completes from the grounding's
  head entity, which is wrong when the topic is the tail.)
- Questions with more than ``variant.max_answers`` answers are dropped before Alg. 1 (and counted):
  answer sets of hub topics run to millions of entities and are no question a QA model can be scored
  on. This is kgbrink's guard, not the paper's; ``max_answers: null`` keeps every question.
- Downsampling (Alg. 1), by hard answer a: when |Q_a| > tau |Q|, keep the floor(tau |Q|) questions of
  Q_a with the smallest ``xxhash64(seed, "downsample", question id)``; |Q| is the count before
  downsampling. For an integer |Q_a| the test |Q_a| > tau |Q| equals |Q_a| > floor(tau |Q|), so Alg. 1
  keeps exactly the questions ranked at most floor(tau |Q|) within their answer. tau is the decimal the
  settings give, in exact arithmetic (:func:`tau_fraction`): in binary floating point 0.29 * 100 is
  28.999..., which would keep 28 where the paper keeps 29. The paper leaves "answer(q)" open for
  multi-answer questions; the hard answer is the one entity every question has, and the one the removal
  made hard.
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

from fractions import Fraction

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint, with_positions

SCHEMES = ("private_id", "entity_id", "text_label")
SPLITS = ("train", "valid", "test")
UNITS = ("removed_triple", "grounding")
ANSWER_KEY = ["direction", "topic", "r"]


def pick_questions(source: DataFrame, seed: int, unit: str = "removed_triple") -> DataFrame:
    """``id, h, r, t, rule_ids, direction, topic, hard_answer``: the questions before answer completion.
    ``unit`` ``removed_triple``: one per row of ``source`` = the removed triples (``h, r, t, rule_ids``);
    ``grounding``: one per row of ``source`` = the provenance (``h, r, t, rule_id, sample_hash``)."""
    if unit == "removed_triple":
        identity, rule_ids = ["h", "r", "t"], F.col("rule_ids")
    elif unit == "grounding":
        identity, rule_ids = ["h", "r", "t", "rule_id", "sample_hash"], F.array("rule_id")
    else:
        raise ValueError(f"question unit must be one of {', '.join(UNITS)}, got {unit!r}")
    picked = source.select(
        F.lower(F.lpad(F.hex(F.xxhash64(F.lit(seed), F.lit("question"), *identity)), 16, "0")).alias("id"),
        "h",
        "r",
        "t",
        rule_ids.alias("rule_ids"),
        F.when((F.xxhash64(F.lit(seed), F.lit("topic"), *identity) % 2) == 0, "forward")
        .otherwise("inverse")
        .alias("direction"),
    )
    return picked.withColumn(
        "topic", F.when(F.col("direction") == "forward", F.col("h")).otherwise(F.col("t"))
    ).withColumn("hard_answer", F.when(F.col("direction") == "forward", F.col("t")).otherwise(F.col("h")))


def answer_sets(keys: DataFrame, complete: DataFrame, max_answers: int | None) -> DataFrame:
    """``direction, topic, r, n_answers, answers``: the complete answer set of every query of ``keys``
    (``direction, topic, r``) from ``complete`` (``h, r, t``); ``answers`` is null when there are more than
    ``max_answers`` (never collected; ``None``: no limit)."""
    facts = complete.select("h", "r", "t").distinct()
    forward = facts.select(
        F.lit("forward").alias("direction"), F.col("h").alias("topic"), "r", F.col("t").alias("answer")
    )
    inverse = facts.select(
        F.lit("inverse").alias("direction"), F.col("t").alias("topic"), "r", F.col("h").alias("answer")
    )
    candidates = forward.unionByName(inverse).join(keys.select(*ANSWER_KEY).distinct(), ANSWER_KEY, "left_semi")
    sizes = candidates.groupBy(*ANSWER_KEY).agg(F.count(F.lit(1)).alias("n_answers"))
    small = sizes if max_answers is None else sizes.filter(F.col("n_answers") <= max_answers)
    answers = (
        candidates.join(small.select(*ANSWER_KEY), ANSWER_KEY, "left_semi")
        .groupBy(*ANSWER_KEY)
        .agg(F.array_sort(F.collect_list("answer")).alias("answers"))
    )
    return sizes.join(answers, ANSWER_KEY, "left")


def with_answers(picked: DataFrame, answers: DataFrame) -> DataFrame:
    """Question records: :func:`pick_questions` rows with their :func:`answer_sets` row."""
    return picked.join(answers, ANSWER_KEY, "left").select(
        "id", "h", "r", "t", "direction", "topic", "hard_answer", "answers", "n_answers", "rule_ids"
    )


def question_records(
    source: DataFrame, complete: DataFrame, seed: int, max_answers: int | None, unit: str = "removed_triple"
) -> DataFrame:
    """``id, h, r, t, direction, topic, hard_answer, answers, n_answers, rule_ids``: one question per
    ``unit`` of ``source`` (:func:`pick_questions`), its answers completed from ``complete`` (``h, r, t``)
    in its direction. ``answers`` is null when there are more than ``max_answers`` of them (a hub topic
    such as (?, instance of, human)); such questions are counted and left out by the job, never
    materialised."""
    picked = pick_questions(source, seed, unit)
    return with_answers(picked, answer_sets(picked, complete, max_answers))


def tau_fraction(tau: float | str | Fraction) -> Fraction:
    """tau exactly as written: a float is read through its shortest round-trip decimal (``repr``), so the
    setting 0.29 is 29/100, not the double 0.28999999999999998002...; ``0 < tau <= 1``."""
    exact = tau if isinstance(tau, Fraction) else Fraction(repr(tau) if isinstance(tau, float) else tau)
    if not 0 < exact <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    return exact


def downsample_cap(tau: float | str | Fraction, total: int) -> int:
    """floor(tau |Q|) of Alg. 1 in exact integer arithmetic (|Q| = ``total``)."""
    exact = tau_fraction(tau)
    return exact.numerator * total // exact.denominator


def downsample(questions: DataFrame, tau: float | str | Fraction, seed: int) -> DataFrame:
    """Algorithm 1 by hard answer: the questions kept (module docstring). ``0 < tau <= 1``."""
    cap = downsample_cap(tau, questions.count())
    order = Window.partitionBy("hard_answer").orderBy(F.xxhash64(F.lit(seed), F.lit("downsample"), "id"), "id")
    return questions.withColumn("_rank", F.row_number().over(order)).filter(F.col("_rank") <= cap).drop("_rank")


def downsampled_count(questions: DataFrame, tau: float | str | Fraction) -> int:
    """How many questions :func:`downsample` keeps, without ranking them: sum over answers of
    min(|Q_a|, floor(tau |Q|))."""
    per_answer = questions.groupBy("hard_answer").agg(F.count(F.lit(1)).alias("n"))
    counts = [r["n"] for r in per_answer.collect()]
    cap = downsample_cap(tau, sum(counts))
    return sum(min(n, cap) for n in counts)


def unit_tally(picked: DataFrame, answers: DataFrame, tau) -> tuple[DataFrame, dict[str, int]]:
    """The questions of one unit that have answers (checkpointed: ``picked`` with ``answers``, those over
    ``max_answers`` dropped) and their counts: candidates, dropped, before and after Alg. 1's downsampling."""
    both = with_answers(picked, answers)
    row = both.agg(F.count(F.lit(1)).alias("n"), F.count_if(F.col("answers").isNull()).alias("dropped")).first()
    asked = both.filter(F.col("answers").isNotNull()).transform(checkpoint)
    return asked, {
        "candidates": row["n"],
        "dropped_too_many_answers": row["dropped"],
        "before_downsampling": row["n"] - row["dropped"],
        "after_downsampling": downsampled_count(asked, tau),
    }


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
