"""ProbeKGC questions and options (paper 003 README "Overview", "Option Design"; spec 3.A steps 1-5).

Every random choice is a seeded hash of content (:mod:`kgbrink.graph.hashing`), so the questions do not
depend on the partitioning:

- sample: the ``n`` triples of a split with the smallest ``u64(seed, h, r, t)``; two queries each,
  ``tail prediction`` (h, r, ?) and ``head prediction`` (?, r, t);
- true answers of a query: every e with (h, r, e) (tail) or (e, r, t) (head) in the filter splits, and
  the gold; a distractor is never a true answer nor the query entity, and the distractors are distinct;
- easy: uniform over all entities (dense ids); medium: uniform over the answer-side pool P(r, side) of the
  KG, optionally within one type of the gold (``type_relation``); hard: the highest-scored candidates of
  a candidate-score table (ties by hash), or the entities nearest to the gold in given vectors (L2);
- uniform draws from a pool: the pools are numbered densely (``with_positions``), so a draw is
  ``start + floor(uniform(u64(seed, tag, qid, j)) * size)``; draws j = 0, 1, ... are taken in order,
  the first valid and distinct ones win (``candidates`` draws per slot and round, three rounds), and the
  few queries still short after that take the valid pool entries in hash order (exhaustive);
- a pool with fewer valid entries than needed is filled from the easy procedure (``fallback``);
- options = gold + distractors sorted by ``u64(seed, id, difficulty, entity)``; ``gold_position``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint, distinct_packed, hash_partitioned, with_positions
from kgbrink.graph.hashing import smallest, u64, uniform

TASKS = {"tail": "tail prediction", "head": "head prediction"}
DIFFICULTIES = ("easy", "medium", "hard")
ROUNDS = 3
NO_TYPE = -1  # the type key of the untyped answer-side pools
_MASK = 0x7FFF_FFFF_FFFF_FFFF
BROADCAST_QUERIES = 2_000_000  # hard: query keys joined to the score rows by broadcast up to this many


def hex_hash(column: str | Column) -> Column:
    """A 64-bit hash as 16 lower-case hex digits (two's complement for negative values)."""
    c = F.col(column) if isinstance(column, str) else column
    return F.lpad(F.lower(F.hex(c)), 16, "0")


def sample_triples(triples: DataFrame, n: int, seed: int) -> DataFrame:
    """``h, r, t, triple_hash``: the ``n`` distinct triples with the smallest ``u64(seed, h, r, t)``
    (spec 3.A step 1; all if fewer). Self-loops are left out: their gold would be the query entity."""
    distinct = triples.select("h", "r", "t").distinct().where(F.col("h") != F.col("t"))
    distinct = distinct.withColumn("triple_hash", u64(seed, "h", "r", "t"))
    distinct = distinct.transform(checkpoint)
    return smallest(distinct, n, "triple_hash", ["h", "r", "t"]).drop("op_rank")


def queries(sampled: DataFrame) -> DataFrame:
    """``qid, h, r, t, task, side, query_entity, gold``: two queries per sampled triple (step 2);
    ``qid`` = ``<triple hash>-<side>``, ``side`` as in the candidate-score format (tail: (h, r, ?))."""

    def one(side: str, query: str, gold: str) -> DataFrame:
        return sampled.select(
            F.concat(hex_hash("triple_hash"), F.lit(f"-{side}")).alias("qid"),
            "h",
            "r",
            "t",
            F.lit(TASKS[side]).alias("task"),
            F.lit(side).alias("side"),
            F.col(query).alias("query_entity"),
            F.col(gold).alias("gold"),
        )

    return one("tail", "h", "t").unionByName(one("head", "t", "h"))


@dataclass(frozen=True)
class Exclusion:
    """What a query may not take as a distractor (step 3), without listing it per query: a query's true
    answers are the known triples through its (h, r) or (r, t), which on a hub run to 10^6 entities, so a
    candidate is checked by an anti-join of its triple against ``known``. ``keys``: per ``qid`` the query
    (``side, h, r, t, query_entity, gold``), ``n_answers`` (known triples through the query), ``gold_known``
    (its own triple is known) and ``qe_answer`` (a self-loop makes the query entity an answer); the
    excluded entities are the known answers, the gold and the query entity, ``n_excluded`` of them."""

    keys: DataFrame
    known: DataFrame

    def drop(self, candidates: DataFrame) -> DataFrame:
        """The rows of ``candidates`` (``qid, entity, ...``; with or without the key columns) whose entity
        is neither the gold, nor the query entity, nor a known answer of the query; same columns."""
        columns = candidates.columns
        missing = [c for c in _KEYS[1:] if c not in columns]
        joined = candidates.join(self.keys.select("qid", *missing), "qid") if missing else candidates
        tail = F.col("side") == "tail"
        joined = joined.where((F.col("entity") != F.col("gold")) & (F.col("entity") != F.col("query_entity")))
        joined = joined.withColumns(
            {
                "_a": F.when(tail, F.col("h")).otherwise(F.col("entity")),
                "_b": F.when(tail, F.col("entity")).otherwise(F.col("t")),
                "_r": F.col("r"),
            }
        )
        known = self.known.select(F.col("h").alias("_a"), F.col("r").alias("_r"), F.col("t").alias("_b"))
        return joined.join(known, ["_a", "_r", "_b"], "left_anti").select(*columns)

    def counts(self) -> DataFrame:
        """``qid, n_excluded``."""
        extra = (~F.col("gold_known")).cast("long") + (~F.col("qe_answer")).cast("long")
        return self.keys.select("qid", (F.col("n_answers") + extra).alias("n_excluded"))

    def inside(self, wanted: DataFrame, pools: DataFrame) -> DataFrame:
        """``qid, type, n_inside``: for each ``wanted`` (qid, type) how many excluded entities of the query
        lie in its pool P(r, side, type) of ``pools``. The known answers are counted once per (h, r, type)
        or (r, t, type) key, whatever the number of queries through it."""
        q = wanted.select("qid", "type").join(self.keys, "qid")
        members = pools.select("r", "side", "type", "entity")
        parts = []
        for side, fixed, other in (("tail", "h", "t"), ("head", "t", "h")):
            keys = q.where(F.col("side") == side).select(fixed, "r", "type").distinct()
            answers = self.known.select(fixed, "r", F.col(other).alias("entity")).join(keys, [fixed, "r"])
            answers = answers.transform(checkpoint)  # else the pool semi-join is pushed below, onto all known
            answers = answers.join(members.where(F.col("side") == side), ["r", "type", "entity"], "left_semi")
            counted = answers.groupBy(fixed, "r", "type").agg(F.count("*").alias("_n"))
            parts.append(q.where(F.col("side") == side).join(counted, [fixed, "r", "type"]).select("qid", "type", "_n"))
        gold = q.where(~F.col("gold_known")).select("qid", "type", "r", "side", F.col("gold").alias("entity"))
        own = q.where(~F.col("qe_answer")).select("qid", "type", "r", "side", F.col("query_entity").alias("entity"))
        extra = gold.unionByName(own).join(members, ["r", "side", "type", "entity"], "left_semi")
        parts.append(extra.groupBy("qid", "type").agg(F.count("*").alias("_n")))
        total = reduce(DataFrame.unionByName, parts).groupBy("qid", "type").agg(F.sum("_n").alias("n_inside"))
        return total.select("qid", "type", F.col("n_inside").cast("long"))


_KEYS = ["qid", "side", "h", "r", "t", "query_entity", "gold"]


def excluded_entities(queries: DataFrame, known: DataFrame) -> Exclusion:
    """The :class:`Exclusion` of ``queries`` given the ``known`` triples (every split, step 3): the true
    answers among them plus the gold, and the query entity (a distractor is neither)."""
    kg = hash_partitioned(known.select("h", "r", "t"))  # every check joins it on (h, r, t)
    q = queries.select(*_KEYS)
    n_tail = kg.groupBy("h", "r").agg(F.count("*").alias("_nt"))
    n_head = kg.groupBy("r", "t").agg(F.count("*").alias("_nh"))
    own = kg.select("h", "r", "t", F.lit(True).alias("gold_known"))
    loops = kg.where(F.col("h") == F.col("t")).select(F.col("h").alias("query_entity"), "r")
    loops = loops.withColumn("qe_answer", F.lit(True))
    keys = (
        q.join(n_tail, ["h", "r"], "left")
        .join(n_head, ["r", "t"], "left")
        .join(own, ["h", "r", "t"], "left")
        .join(loops, ["query_entity", "r"], "left")
        .select(
            *_KEYS,
            F.when(F.col("side") == "tail", F.coalesce("_nt", F.lit(0)))
            .otherwise(F.coalesce("_nh", F.lit(0)))
            .cast("long")
            .alias("n_answers"),
            F.coalesce("gold_known", F.lit(False)).alias("gold_known"),
            F.coalesce("qe_answer", F.lit(False)).alias("qe_answer"),
        )
    )
    return Exclusion(keys.transform(checkpoint), kg)


def topic_degrees(kg: DataFrame, queries: DataFrame) -> DataFrame:
    """``query_entity, topic_degree``: the KG triples containing the entity (a self-loop once; README
    "Factors Affecting Accuracy and NKD", spec 3.C)."""
    wanted = queries.select("query_entity").distinct()
    ends = kg.select("h", "r", "t").distinct().select(F.explode(F.array_distinct(F.array("h", "t"))).alias("e"))
    counts = ends.join(wanted.withColumnRenamed("query_entity", "e"), "e", "left_semi").groupBy("e").count()
    return wanted.join(counts.withColumnRenamed("e", "query_entity"), "query_entity", "left").select(
        "query_entity", F.coalesce(F.col("count"), F.lit(0)).cast("long").alias("topic_degree")
    )


# --- pools ---------------------------------------------------------------------------------------------


def answer_pools(kg: DataFrame, type_relation: int | None = None) -> DataFrame:
    """``r, side, type, entity, gpos``: the answer-side pools P(r, side) of the KG (objects of r for tail
    prediction, subjects for head prediction; ``type`` = -1) and, with a ``type_relation``, the typed pools
    P(r, side, type) = the members with (entity, type_relation, type) in the KG; ``gpos`` numbers all
    pools densely in (r, side, type, entity) order, so each pool is one range of positions."""
    n = int(kg.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    members = union_all(  # distinct (r, entity) per side, each row one packed long in the shuffle
        [
            distinct_packed(kg.select("r", F.col(end).alias("entity")), {"r": 31, "entity": 31}, n).withColumn(
                "side", F.lit(side)
            )
            for side, end in (("tail", "t"), ("head", "h"))
        ]
    )
    pools = members.withColumn("type", F.lit(NO_TYPE))
    if type_relation is not None:
        types = entity_types(kg, type_relation)
        pools = pools.unionByName(members.join(types, "entity").select("r", "side", "entity", "type"))
    return with_positions(pools.select("r", "side", "type", "entity"), ["r", "side", "type", "entity"], "gpos")


def entity_types(kg: DataFrame, type_relation: int) -> DataFrame:
    """``entity, type``: the objects of ``type_relation`` (e.g. P31 "instance of") per subject."""
    typed = kg.where(F.col("r") == type_relation).select(F.col("h").alias("entity"), F.col("t").alias("type"))
    return typed.distinct()


def pool_bounds(pools: DataFrame) -> DataFrame:
    """``r, side, type, start, size``: each pool's range of positions."""
    return pools.groupBy("r", "side", "type").agg(F.min("gpos").alias("start"), F.count("*").alias("size"))


def _valid_in_pool(requests: DataFrame, pools: DataFrame, excluded: Exclusion) -> DataFrame:
    """``requests`` (qid, r, side, type, start, size, ...) plus ``valid`` = size - |excluded in the pool|."""
    inside = excluded.inside(requests.select("qid", "type"), pools)
    joined = requests.join(inside, ["qid", "type"], "left")
    return joined.withColumn("valid", F.col("size") - F.coalesce(F.col("n_inside"), F.lit(0))).drop("n_inside")


def medium_requests(
    queries: DataFrame, pools: DataFrame, excluded: Exclusion, need: int, seed: int, typed: bool
) -> DataFrame:
    """``qid, start, size, need, source``: the pool each query draws its medium distractors from (step 4).

    Untyped: P(r, side) (``relation_pool``). Typed: among the gold's types T whose pool P(r, side, T)
    keeps >= ``need`` valid entries, the one with the smallest ``u64(seed, "type", qid, T)``
    (``relation_type_pool``), else P(r, side). ``need`` = min(need, valid entries); 0 when the pool is
    empty or holds only true answers (then everything is filled from easy)."""
    bounds = pool_bounds(pools)
    base = queries.select("qid", "r", "side", "gold")
    plain = base.withColumn("type", F.lit(NO_TYPE)).join(bounds, ["r", "side", "type"], "left")
    plain = _valid_in_pool(plain.fillna(0, ["start", "size"]), pools, excluded)
    plain = plain.withColumn("source", F.lit("relation_pool"))
    if typed:
        gold_types = pools.where(F.col("type") != NO_TYPE).select(F.col("entity").alias("gold"), "type").distinct()
        options = base.join(gold_types, "gold").join(bounds, ["r", "side", "type"])
        options = _valid_in_pool(options, pools, excluded).where(F.col("valid") >= need)
        pick = u64(seed, F.lit("type"), "qid", "type")
        chosen = (
            options.withColumn("_k", pick)
            .groupBy("qid")
            .agg(F.min_by(F.struct("type", "start", "size", "valid"), F.struct("_k", "type")).alias("c"))
        )
        chosen = chosen.select("qid", "c.*", F.lit("relation_type_pool").alias("source"))
        plain = plain.join(chosen.select("qid"), "qid", "left_anti").select(*chosen.columns).unionByName(chosen)
    return plain.select(
        "qid", "start", "size", F.least(F.lit(need), F.col("valid")).cast("int").alias("need"), "source"
    )


# --- drawing -------------------------------------------------------------------------------------------


def draw_distinct(
    requests: DataFrame,
    index: DataFrame | None,
    excluded: Exclusion,
    seed: int,
    tag: str,
    per_round: int,
    rounds: int = ROUNDS,
    blocked: DataFrame | None = None,
) -> DataFrame:
    """``qid, entity, draw``: per request (``qid, start, size, need``) the first ``need`` distinct
    entities of the draws ``j = 0, 1, ...`` at ``start + floor(uniform(u64(seed, tag, qid, j)) size)``
    that are not ``excluded`` nor ``blocked`` (qid, entity), among ``rounds`` x ``per_round`` draws
    (made in growing batches, :func:`_batches`). ``index`` maps positions to entities (``gpos, entity``;
    None: the position is the entity id). Requests still short after those draws take the valid entries of their range in ``u64(seed, tag, qid, entity)`` order
    (draw numbers after the rounds'). ``need`` must not exceed the valid entries of the range."""
    pending = requests.select("qid", "start", "size", "need").where(F.col("need") > 0)
    pending = pending.join(excluded.keys.select(*_KEYS), "qid")  # the draws carry what the check needs
    first: DataFrame | None = None

    def taken() -> DataFrame | None:
        prior = [x.select("qid", "entity") for x in (blocked, first) if x is not None]
        return union_all(prior) if prior else None

    for lo, hi in _batches(rounds * per_round, per_round):
        draws = pending.select("*", F.explode(F.sequence(F.lit(lo), F.lit(hi - 1))).alias("draw"))
        pos = F.col("start") + F.floor(uniform(u64(seed, F.lit(tag), "qid", "draw")) * F.col("size"))
        draws = draws.withColumn("gpos", pos.cast("long"))
        got = _first_valid(_entities(draws, index), excluded, taken())
        first = got if first is None else first.unionByName(got)
        pending = _still_short(pending, got)
        if pending.isEmpty():
            return first
    enumerated = pending.select(
        *[c for c in pending.columns if c not in ("start", "size")],
        F.explode(F.sequence(F.col("start"), F.col("start") + F.col("size") - 1)).alias("gpos"),
    )
    enumerated = _entities(enumerated, index)
    # draw numbers after the rounds': offset + the hash's top 61 bits (non-negative), ties by entity
    key = F.shiftright(u64(seed, F.lit(tag), "qid", "entity").bitwiseAND(F.lit(_MASK)), 2)
    enumerated = enumerated.withColumn("draw", F.lit(rounds * per_round).cast("long") + key)
    return first.unionByName(_first_valid(enumerated, excluded, taken()))


def _batches(total: int, per_round: int, first: int = 8) -> list[tuple[int, int]]:
    """The draw numbers 0..total-1 in growing batches, ``first`` then x4: most queries are served by the
    first few draws. The first valid draws in draw order do not depend on the batches, only on ``total``."""
    out, lo, size = [], 0, min(per_round, first)
    while lo < total:
        out.append((lo, min(total, lo + size)))
        lo, size = out[-1][1], size * 4
    return out


def _entities(draws: DataFrame, index: DataFrame | None) -> DataFrame:
    if index is None:
        return draws.withColumn("entity", F.col("gpos").cast("int"))
    return draws.join(index.select("gpos", "entity"), "gpos")


def _first_valid(candidates: DataFrame, excluded: Exclusion, taken: DataFrame | None) -> DataFrame:
    """Per qid the first ``need`` (in draw order) distinct entities neither excluded nor taken before."""
    ok = excluded.drop(candidates.select(*_KEYS, "need", "entity", "draw"))
    if taken is not None:
        ok = ok.join(taken.select("qid", "entity"), ["qid", "entity"], "left_anti")
    first = ok.groupBy("qid", "need", "entity").agg(F.min("draw").alias("draw"))
    rank = F.row_number().over(Window.partitionBy("qid").orderBy("draw", "entity"))
    first = first.withColumn("_n", rank).where(F.col("_n") <= F.col("need"))
    return first.select("qid", "entity", "draw").transform(checkpoint)


def _still_short(pending: DataFrame, got: DataFrame) -> DataFrame:
    counts = got.groupBy("qid").agg(F.count("*").alias("_got"))
    left = pending.join(counts, "qid", "left").withColumn("need", F.col("need") - F.coalesce("_got", F.lit(0)))
    return left.drop("_got").where(F.col("need") > 0).transform(checkpoint)


def easy_distractors(
    queries: DataFrame, excluded: Exclusion, n_entities: int, need: int, seed: int, candidates: int, tag: str = "easy"
) -> DataFrame:
    """``qid, entity, draw``: up to ``need`` distinct distractors per query uniform over the entity ids
    0..n_entities-1 (step 4 easy; ``candidates`` draws per slot and round)."""
    requests = queries.select("qid", F.lit(need).alias("need")).join(excluded.counts(), "qid", "left")
    valid = F.lit(n_entities) - F.coalesce(F.col("n_excluded"), F.lit(0))
    requests = requests.select(
        "qid",
        F.lit(0).cast("long").alias("start"),
        F.lit(n_entities).cast("long").alias("size"),
        F.least(F.col("need"), valid).cast("int").alias("need"),
    )
    return draw_distinct(requests, None, excluded, seed, tag, candidates * max(need, 1))


def fill_from_easy(
    queries: DataFrame,
    chosen: DataFrame,
    excluded: Exclusion,
    n_entities: int,
    need: int,
    seed: int,
    candidates: int,
    difficulty: str,
) -> DataFrame:
    """``qid, entity, draw, fill``: ``chosen`` (qid, entity, draw) topped up to ``need`` per query by
    easy draws (tag ``<difficulty>-fill``) distinct from the chosen ones; ``fill`` marks those (step 4:
    "fill from the easy procedure and set fallback = true")."""
    counts = chosen.groupBy("qid").agg(F.count("*").alias("_n"))
    short = queries.select("qid").join(counts, "qid", "left").where(F.coalesce("_n", F.lit(0)) < need)
    short = short.select("qid", (F.lit(need) - F.coalesce("_n", F.lit(0))).alias("_need"))
    out = chosen.select("qid", "entity", "draw", F.lit(False).alias("fill"))
    if short.isEmpty():
        return out
    blocked = chosen.select("qid", "entity").join(short.select("qid"), "qid", "left_semi")
    # the chosen distractors are not excluded ones: the blocked entities are n_excluded + the chosen
    requests = short.join(excluded.counts(), "qid", "left").select(
        "qid",
        F.lit(0).cast("long").alias("start"),
        F.lit(n_entities).cast("long").alias("size"),
        F.least(F.col("_need"), F.lit(n_entities) - F.coalesce("n_excluded", F.lit(0)) - (F.lit(need) - F.col("_need")))
        .cast("int")
        .alias("need"),
    )
    filled = draw_distinct(requests, None, excluded, seed, f"{difficulty}-fill", candidates * need, blocked=blocked)
    # fill draws come after the chosen ones in the option order of the record
    filled = filled.select("qid", "entity", (F.col("draw") + F.lit(2**62)).alias("draw"), F.lit(True).alias("fill"))
    return out.unionByName(filled)


def medium_distractors(
    queries: DataFrame, pools: DataFrame, excluded: Exclusion, need: int, seed: int, candidates: int, typed: bool
) -> tuple[DataFrame, DataFrame]:
    """``(chosen, sources)``: ``qid, entity, draw`` drawn uniformly from each query's medium pool, and
    ``qid, source`` (``relation_pool`` / ``relation_type_pool``)."""
    requests = medium_requests(queries, pools, excluded, need, seed, typed).transform(checkpoint)
    index = hash_partitioned(pools.select("gpos", "entity"), ["gpos"])  # joined by every batch of draws
    chosen = draw_distinct(requests, index, excluded, seed, "medium", candidates * need)
    return chosen, requests.select("qid", "source")


def hard_from_scores(
    queries: DataFrame,
    scores: DataFrame,
    excluded: Exclusion,
    need: int,
    seed: int,
    n_entities: int,
    pools: DataFrame | None = None,
    first: int = 16,
) -> DataFrame:
    """``qid, entity, draw``: per query the ``need`` highest-scored candidates that are not excluded
    (step 4 hard; candidate-score format ``h, r, t, side, candidate, score``; a candidate scored twice
    keeps its best score; NaN scores and candidates outside 0..n_entities-1 are ignored), ties by
    ``u64(seed, "hard", qid, candidate)``. ``pools``: only candidates of the query's untyped medium pool
    (``mcq.hard_restrict_to_medium_pool``).

    Only each query's ``first`` best score rows are ranked in full: the rank filter lets Spark keep a
    partial top-``first`` per query before the shuffle (a window group limit), so the 10^8-row score file
    is neither aggregated nor shuffled whole. The distinct entities among a query's best rows, first
    occurrence kept, are its best distinct candidates in order; a query left short while it had more
    rows is ranked again over all its rows."""
    side = F.lower(F.trim(F.col("side").cast("string")))
    side = F.when(side.isin("tail", "t"), "tail").when(side.isin("head", "h"), "head")
    candidate = F.when(F.col("candidate").between(0, n_entities - 1), F.col("candidate").cast("int"))
    s = scores.select(
        "h", "r", "t", side.alias("side"), candidate.alias("entity"), F.col("score").cast("double").alias("score")
    )
    s = s.where(F.col("entity").isNotNull() & F.col("score").isNotNull() & ~F.isnan("score"))
    keys = excluded.keys.select(*_KEYS).join(queries.select("qid"), "qid", "left_semi").transform(checkpoint)
    s = s.join(F.broadcast(keys) if keys.count() <= BROADCAST_QUERIES else keys, ["h", "r", "t", "side"])
    if pools is not None:
        members = pools.where(F.col("type") == NO_TYPE).select("r", "side", "entity")
        s = s.join(members, ["r", "side", "entity"], "left_semi")
    tie = u64(seed, F.lit("hard"), "qid", "entity")
    order = [F.desc("score"), tie, F.col("entity")]
    rows = s.withColumn("_pos", F.row_number().over(Window.partitionBy("qid").orderBy(*order)))
    best = rows.where(F.col("_pos") <= first + 1).transform(checkpoint)
    more = best.where(F.col("_pos") == first + 1).select("qid")
    firsts = best.where(F.col("_pos") <= first).groupBy(*_KEYS, "entity").agg(F.min("_pos").alias("_pos"))

    def choose(candidates: DataFrame) -> DataFrame:
        valid = excluded.drop(candidates)
        rank = F.row_number().over(Window.partitionBy("qid").orderBy("_pos"))
        return valid.withColumn("_n", rank).where(F.col("_n") <= need)

    top = choose(firsts).transform(checkpoint)
    got = top.groupBy("qid").agg(F.count("*").alias("_got"))
    short = more.join(got, "qid", "left").where(F.coalesce("_got", F.lit(0)) < need).select("qid").transform(checkpoint)
    chosen = top.join(short, "qid", "left_anti")
    if not short.isEmpty():
        mine = s.join(short, "qid", "left_semi")
        every = mine.groupBy(*_KEYS, "entity").agg(F.max("score").alias("score"))
        ranked = every.withColumn("_pos", F.row_number().over(Window.partitionBy("qid").orderBy(*order)))
        chosen = chosen.unionByName(choose(ranked.drop("score")))
    return chosen.select("qid", "entity", (F.col("_n") - 1).cast("long").alias("draw"))


def hard_from_vectors(
    queries: DataFrame, vectors: DataFrame, excluded: Exclusion, need: int, spark_context=None
) -> DataFrame:
    """``qid, entity, draw``: per query the ``need`` entities nearest to the gold in ``vectors``
    (``entity, vec``; L2, ties by entity id) that are not excluded (step 4 hard, ``embedding_neighbours``).
    The vectors are broadcast to the tasks as one matrix (driver memory bounds the entity count); a gold
    without a vector gets none (then filled from easy). Each task lists the ``m`` nearest entities but the
    gold and the query entity, the known answers among them are dropped by :meth:`Exclusion.drop`, and a
    query left short with more entities to list is listed again with 8 m."""
    frame = vectors.select(F.col("entity").cast("int").alias("entity"), "vec").toPandas()
    n = int(frame["entity"].max()) + 1 if len(frame) else 0
    dim = len(frame["vec"].iloc[0]) if len(frame) else 0
    matrix = np.full((n, dim), np.nan)
    if len(frame):
        matrix[frame["entity"].to_numpy()] = np.vstack(frame["vec"].map(np.asarray)).astype(np.float64)
    shared = (spark_context or queries.sparkSession.sparkContext).broadcast(matrix)

    def nearest(m: int):
        def run(batches):
            mat = shared.value
            known = ~np.isnan(mat).any(axis=1) if len(mat) else np.zeros(0, bool)
            clean = np.nan_to_num(mat)
            for pdf in batches:
                rows = []
                for qid, gold, qe in zip(pdf["qid"], pdf["gold"], pdf["query_entity"], strict=True):
                    if gold >= len(mat) or not known[gold]:
                        continue
                    d = np.where(known, ((clean - clean[gold]) ** 2).sum(axis=1), np.inf)
                    d[gold] = np.inf
                    if qe < len(d):
                        d[qe] = np.inf
                    available = int(np.isfinite(d).sum())
                    order = np.lexsort((np.arange(len(d)), d))[: min(m, available)]
                    rows += [(qid, int(e), k, available) for k, e in enumerate(order)]
                yield pd.DataFrame(rows, columns=["qid", "entity", "rank", "available"])

        return run

    pending = excluded.keys.select("qid", "gold", "query_entity").join(queries.select("qid"), "qid", "left_semi")
    found, m = None, max(8 * need, 16)
    while True:
        listed = pending.mapInPandas(nearest(m), "qid string, entity int, rank long, available long")
        listed = listed.transform(checkpoint)
        valid = excluded.drop(listed)
        order = F.row_number().over(Window.partitionBy("qid").orderBy("rank"))
        ranked = valid.withColumn("_n", order).where(F.col("_n") <= need).transform(checkpoint)  # read twice
        done = ranked.groupBy("qid").agg(F.count("*").alias("_got"), F.max("available").alias("available"))
        complete = done.where((F.col("_got") >= need) | (F.col("available") <= m)).select("qid")
        got = ranked.join(complete, "qid", "left_semi").select(
            "qid", "entity", (F.col("_n") - 1).cast("long").alias("draw")
        )
        found = got if found is None else found.unionByName(got)
        # short and more to list: those with valid entries but too few, and those whose m listed all invalid
        listed_all = listed.groupBy("qid").agg(F.max("available").alias("available")).where(F.col("available") > m)
        pending = pending.join(listed_all.join(complete, "qid", "left_anti").select("qid"), "qid", "left_semi")
        pending = pending.transform(checkpoint)
        if pending.isEmpty():
            return found
        m *= 8


# --- all difficulties ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What :func:`build` makes: the difficulties, options per question, seed, draws per slot and round,
    the type relation's id (None: untyped medium pools), the hard mode and its pool restriction."""

    difficulties: list[str]
    options: int = 4
    seed: int = 42
    candidates: int = 8
    type_relation: int | None = None
    hard_mode: str = "scores"
    restrict_to_medium_pool: bool = False


def build(
    queries: DataFrame,
    excluded: Exclusion,
    degrees: DataFrame,
    kg: DataFrame,
    n_entities: int,
    plan: Plan,
    scores: DataFrame | None = None,
    vectors: DataFrame | None = None,
) -> DataFrame:
    """The assembled questions of every difficulty of ``plan`` (:func:`assemble`; ``complete`` false:
    fewer distractors than needed). Hard needs ``scores`` (mode ``scores``) or ``vectors``."""
    seed, k, need = plan.seed, plan.candidates, plan.options - 1
    parts = []
    if "easy" in plan.difficulties:
        chosen = easy_distractors(queries, excluded, n_entities, need, seed, k).withColumn("fill", F.lit(False))
        parts.append(with_source(chosen, "easy", "uniform"))
    pools = None
    if "medium" in plan.difficulties or ("hard" in plan.difficulties and plan.restrict_to_medium_pool):
        pools = answer_pools(kg, plan.type_relation)
    if "medium" in plan.difficulties:
        chosen, sources = medium_distractors(queries, pools, excluded, need, seed, k, plan.type_relation is not None)
        filled = fill_from_easy(queries, chosen, excluded, n_entities, need, seed, k, "medium")
        parts.append(with_source(filled.join(sources, "qid"), "medium", F.col("source")))
    if "hard" in plan.difficulties:
        if plan.hard_mode == "scores":
            if scores is None:
                raise ValueError("the hard difficulty needs a candidate-score table (h, r, t, side, candidate, score)")
            restrict = pools if plan.restrict_to_medium_pool else None
            chosen, source = hard_from_scores(queries, scores, excluded, need, seed, n_entities, restrict), "scores"
        elif plan.hard_mode == "embedding_neighbours":
            if vectors is None:
                raise ValueError("hard mode embedding_neighbours needs entity vectors (entity, vec)")
            chosen, source = hard_from_vectors(queries, vectors, excluded, need), "embedding"
        else:
            raise ValueError(f"unknown hard mode {plan.hard_mode!r} (scores, embedding_neighbours)")
        chosen = chosen.transform(checkpoint)
        filled = fill_from_easy(queries, chosen, excluded, n_entities, need, seed, k, "hard")
        parts.append(with_source(filled, "hard", source))
    if not parts:
        raise ValueError(f"no known difficulty in {plan.difficulties} (easy, medium, hard)")
    difficulties = [d for d in DIFFICULTIES if d in plan.difficulties]
    return assemble(queries, union_all(parts), degrees, seed, plan.options, difficulties).transform(checkpoint)


# --- assembly ------------------------------------------------------------------------------------------


def assemble(
    queries: DataFrame, distractors: DataFrame, degrees: DataFrame, seed: int, options: int, difficulties: list[str]
) -> DataFrame:
    """One row per (query, difficulty of ``difficulties``) with the spec's ``mcq_questions`` columns
    (``text`` null) and ``complete`` (all ``options - 1`` distractors found; false also for a query that
    got none). ``distractors``: ``qid, difficulty, entity, draw, fill, source``. ``distractor_source`` =
    the difficulty's source, ``uniform`` when every distractor came from the easy fill; ``fallback`` =
    some did (step 4). Options sorted by ``u64(seed, id, difficulty, entity)`` (step 5)."""
    grouped = distractors.groupBy("qid", "difficulty").agg(
        F.array_sort(F.collect_list(F.struct("draw", "entity"))).alias("_d"),
        F.max(F.col("fill").cast("int")).alias("_fill"),
        F.min(F.col("fill").cast("int")).alias("_all_fill"),
        F.max("source").alias("_source"),
    )
    wanted = F.explode(F.array(*[F.lit(d) for d in difficulties])).alias("difficulty")
    q = queries.select("*", wanted).join(grouped, ["qid", "difficulty"], "left").join(degrees, "query_entity", "left")
    q = q.withColumn("_d", F.coalesce("_d", F.array().cast("array<struct<draw: bigint, entity: int>>")))
    qid = F.concat_ws("-", "qid", "difficulty")
    q = q.withColumn("id", qid)
    entities = F.concat(F.array("gold"), F.transform("_d", lambda x: x["entity"]))
    keyed = F.transform(entities, lambda e: F.struct(u64(seed, "id", "difficulty", e).alias("k"), e.alias("e")))
    ordered = F.transform(F.array_sort(keyed), lambda x: x["e"])
    q = q.withColumn("options", ordered)
    return q.select(
        "id",
        "h",
        "r",
        "t",
        "task",
        "query_entity",
        "gold",
        "difficulty",
        "options",
        (F.array_position("options", F.col("gold")) - 1).cast("int").alias("gold_position"),
        F.when(F.col("_all_fill") == 0, F.col("_source")).otherwise(F.lit("uniform")).alias("distractor_source"),
        F.coalesce(F.col("_fill") == 1, F.lit(False)).alias("fallback"),
        F.coalesce("topic_degree", F.lit(0)).cast("long").alias("topic_degree"),
        F.lit(None).cast("string").alias("text"),
        (F.size("_d") == options - 1).alias("complete"),
    )


def with_source(chosen: DataFrame, difficulty: str, source: str | Column) -> DataFrame:
    """``chosen`` (qid, entity, draw, fill) tagged with its difficulty and source."""
    src = F.lit(source) if isinstance(source, str) else source
    return chosen.select(
        "qid", F.lit(difficulty).alias("difficulty"), "entity", F.col("draw").cast("long"), "fill", src.alias("source")
    )


def statistics(questions: DataFrame, options: int) -> DataFrame:
    """``difficulty, entities, relations, triples, options``: the ProbeKGC README's statistics (spec 3.D:
    #Entities = distinct heads and tails of the sampled triples and options of the difficulty)."""
    ends = questions.select("difficulty", F.explode(F.concat(F.array("h", "t"), "options")).alias("e"))
    ents = ends.groupBy("difficulty").agg(F.countDistinct("e").alias("entities"))
    rest = questions.groupBy("difficulty").agg(
        F.countDistinct("r").alias("relations"), F.countDistinct("h", "r", "t").alias("triples")
    )
    return ents.join(rest, "difficulty").select(
        "difficulty", "entities", "relations", "triples", F.lit(options).alias("options")
    )


def union_all(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)
