"""Procedural questions of chosen isomorphism types planted in a KG (paper 002's Table A1 templates,
spec 2.0 "a procedural generator that instantiates Table A1 templates in the KG").

For each type (an identifier, :func:`kgbrink.synthkgqa.answer_types.shape`) the generator draws candidate
answer entities by seeded hash and grows the type's tree from each, node by node in the shape's order: a
new node is a neighbour of its parent's entity through a real triple, either direction, chosen as the
incident triple with the smallest seeded hash ``u64(seed, type, answer, node index, h, r, t)`` among those
whose other end is not yet in the question (for an entity with more than PRESELECT triples: among a
hashed preselection of about PRESELECT of them, shared by every question there, so hubs cost their
degree once per node index, not once per question). Every node is thus a distinct entity, every edge a distinct
KG triple joining a new node to the tree, and the question's answer subgraph is a tree of exactly the
planted type whose leaves are the seeds. A candidate that reaches a node with no unused neighbour fails;
each type keeps its first ``per_type`` successes in hash order, drawing further candidates in later
rounds (disjoint hash ranges, sized by the type's success rate so far) while it is short.

Everything runs as DataFrame joins of the (small, broadcast) growing questions with the KG, two scans of
the KG per node index, so the KG is never collected; every choice is a function of the seed and of
content, so the questions do not depend on the partitioning.

:func:`to_records` maps questions (ids) back to keys in the JSON Lines form that
:func:`kgbrink.synthkgqa.questions.parse_lines` reads.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint
from kgbrink.graph.hashing import u64, uniform
from kgbrink.synthkgqa import answer_types
from kgbrink.synthkgqa.questions import QUESTION_COLUMNS, TRIPLE_TYPE

# Candidate answers drawn per type in the first round, as a multiple of the questions wanted; later rounds
# draw what the type's observed success rate says is needed, times SAFETY (at most MAX_RATE_INVERSE per
# question still wanted).
OVERSAMPLE = 4
SAFETY = 2.0
MAX_RATE_INVERSE = 256
ROUNDS = 5
# Incident triples of a frontier entity kept by the step hash before the attempts' own draws (about).
PRESELECT = 64


def shapes(types: list[str]) -> list[answer_types.Shape]:
    """The shapes of ``types`` (ValueError for a non-identifier, a non-canonical one or a repeat)."""
    if len(set(types)) != len(types):
        raise ValueError(f"repeated isomorphism type in {types}")
    return [answer_types.shape(t) for t in types]


def _shape_table(spark, planted: list[answer_types.Shape]) -> DataFrame:
    """``type, node, parent``: one row per non-root node of every shape."""
    rows = [(s.identifier, i, p) for s in planted for i, p in enumerate(s.parent, start=1)]
    return spark.createDataFrame(rows, "type string, node int, parent int")


def _choose(candidates: DataFrame, seed: int, j: int) -> DataFrame:
    """Per attempt ``(type, answer)``, the candidate ``(h, r, t, nbr)`` with the smallest attempt hash."""
    keyed = candidates.select(
        "type",
        "answer",
        F.struct(u64(seed, "type", "answer", F.lit(j), "h", "r", "t").alias("hash"), "h", "r", "t", "nbr").alias("c"),
    )
    return keyed.groupBy("type", "answer").agg(F.min("c").alias("c"))


def _grow(
    attempts: DataFrame, shape_rows: DataFrame, kg: DataFrame, degrees: DataFrame, max_nodes: int, seed: int
) -> DataFrame:
    """``type, answer, nodes array<int>, triples`` of the attempts that got every node of their shape.

    A hub is never expanded per attempt: at each node index the KG is scanned once for the distinct
    frontier entities, keeping of each only the incident triples whose step hash ``u64(seed, j, h, r, t)``
    falls below ``PRESELECT / degree`` (all of them for a node of degree <= PRESELECT, about PRESELECT
    otherwise); each attempt then takes, among the preselected triples to a node not yet in it, the one with
    the smallest attempt hash. An attempt whose preselected triples all lead back into it draws from the
    frontier's full incidence instead (rare: it needs PRESELECT excluded draws in a row)."""
    state = attempts.select(
        "type",
        "answer",
        F.array(F.col("answer")).alias("nodes"),
        F.array().cast(TRIPLE_TYPE).alias("triples"),
        "n_nodes",
    ).transform(checkpoint)
    out = kg.select(F.col("h").alias("at"), "h", "r", "t", F.col("t").alias("nbr"))
    inc = kg.select(F.col("t").alias("at"), "h", "r", "t", F.col("h").alias("nbr"))
    for j in range(1, max_nodes):
        done = state.where(F.col("n_nodes") <= j)
        todo = (
            state.where(F.col("n_nodes") > j)
            .join(F.broadcast(shape_rows.where(F.col("node") == j)), "type")
            .withColumn("at", F.element_at("nodes", F.col("parent") + 1))
            .transform(checkpoint)
        )
        frontier = (
            todo.select("at")
            .distinct()
            .join(degrees, "at", "left")
            .select("at", F.least(F.lit(1.0), F.lit(float(PRESELECT)) / F.coalesce("degree", F.lit(1))).alias("tau"))
        )
        frontier = F.broadcast(frontier.transform(checkpoint))
        step_draw = uniform(u64(seed, F.lit(j), "h", "r", "t"))
        pre = (
            out.join(frontier, "at")
            .unionByName(inc.join(frontier, "at"))
            .where((F.col("nbr") != F.col("at")) & (step_draw < F.col("tau")))
            .drop("tau")
            .transform(checkpoint)
        )
        keys = todo.select("type", "answer", "at", "nodes")
        chosen = _choose(pre.join(F.broadcast(keys), "at").where(~F.array_contains("nodes", F.col("nbr"))), seed, j)
        # attempts at a sampled frontier whose preselection held no new node: the full incidence
        missed = (
            keys.join(chosen.select("type", "answer"), ["type", "answer"], "left_anti")
            .join(frontier.where(F.col("tau") < 1.0).select("at"), "at", "left_semi")
            .transform(checkpoint)
        )
        if missed.count():
            full = out.join(F.broadcast(missed), "at").unionByName(inc.join(F.broadcast(missed), "at"))
            chosen = chosen.unionByName(_choose(full.where(~F.array_contains("nodes", F.col("nbr"))), seed, j))
        grown = todo.join(chosen, ["type", "answer"]).select(
            "type",
            "answer",
            F.concat("nodes", F.array("c.nbr")).alias("nodes"),
            F.concat("triples", F.array(F.struct("c.h", "c.r", "c.t"))).cast(TRIPLE_TYPE).alias("triples"),
            "n_nodes",
        )
        state = done.unionByName(grown).transform(checkpoint)
    return state.where(F.size("nodes") == F.col("n_nodes")).drop("n_nodes")


def plant(
    kg: DataFrame,
    nodes: DataFrame,
    types: list[str],
    per_type: int,
    seed: int,
    split: str | None = None,
) -> DataFrame:
    """``id, split, seeds, answer, answer_subgraph`` (ids): up to ``per_type`` questions of each type of
    ``types`` planted in ``kg(h, r, t)``, answers drawn from ``nodes(id)``. Ids are ``<type>:<k>`` with k
    the 0-based rank of the question among its type's (in hash order). A type may get fewer questions when
    its shape does not fit the KG (count the result per type)."""
    spark = kg.sparkSession
    planted = shapes(types)
    if per_type < 0:
        raise ValueError(f"per_type must be >= 0, got {per_type}")
    by_type = {s.identifier: s for s in planted}
    shape_rows = _shape_table(spark, planted)
    sizes = spark.createDataFrame([(s.identifier, s.n_nodes) for s in planted], "type string, n_nodes int")
    kg = kg.select("h", "r", "t")
    n_nodes = max(1, nodes.count())
    # incident triples per entity (a self-loop twice): the preselection rate of a frontier entity
    degrees = (
        kg.select(F.col("h").alias("at"))
        .unionAll(kg.select(F.col("t").alias("at")))
        .groupBy("at")
        .agg(F.count("*").alias("degree"))
        .where(F.col("degree") > PRESELECT)
        .transform(checkpoint)
    )
    found = None
    wanted = dict.fromkeys(by_type, per_type)
    # candidates needed per question still wanted, per type: OVERSAMPLE, then 1 / observed success rate
    need = dict.fromkeys(by_type, float(OVERSAMPLE))
    tried = dict.fromkeys(by_type, 0.0)
    low = 0.0
    for _ in range(ROUNDS):
        short = [t for t, n in wanted.items() if n > 0]
        if not short:
            break
        high = min(1.0, low + max(need[t] * wanted[t] for t in short) / n_nodes)
        for t in short:
            tried[t] += (high - low) * n_nodes  # expected candidates of the type so far
        draw = uniform(u64(seed, "type", "answer"))
        attempts = (
            nodes.select(F.col("id").alias("answer"))
            .crossJoin(F.broadcast(sizes.where(F.col("type").isin(short))))
            .where((draw >= F.lit(low)) & (draw < F.lit(high)))
        )
        grown = _grow(attempts, shape_rows, kg, degrees, max(by_type[t].n_nodes for t in short), seed)
        found = grown if found is None else found.unionByName(grown)
        found = found.transform(checkpoint)
        counts = {r["type"]: r["n"] for r in found.groupBy("type").agg(F.count("*").alias("n")).collect()}
        wanted = {t: per_type - counts.get(t, 0) for t in by_type}
        need = {t: SAFETY * min(MAX_RATE_INVERSE, tried[t] / max(counts.get(t, 0), 1e-9)) for t in by_type}
        low = high
        if high >= 1.0:
            break
    if found is None:
        return spark.createDataFrame(
            [], f"id string, split string, seeds array<int>, answer int, answer_subgraph {TRIPLE_TYPE}"
        )
    # the first successes in the order of the draw
    draw = uniform(u64(seed, "type", "answer"))
    rank = F.row_number().over(Window.partitionBy("type").orderBy(draw, "answer")) - 1
    seed_index = spark.createDataFrame(
        [(s.identifier, list(s.seeds)) for s in planted], "type string, seed_nodes array<int>"
    )
    kept = found.withColumn("k", rank).where(F.col("k") < per_type).join(F.broadcast(seed_index), "type")
    return kept.select(
        F.concat("type", F.lit(":"), F.col("k").cast("string")).alias("id"),
        F.lit(split).cast("string").alias("split"),
        F.transform("seed_nodes", lambda i: F.element_at("nodes", i + 1)).alias("seeds"),
        F.col("answer").cast("int"),
        F.col("triples").alias("answer_subgraph"),
    )


def _triple_keys(questions: DataFrame, column: str, ent: DataFrame, rel: DataFrame) -> DataFrame:
    """``id, keys``: the triples of the array column ``column`` by key (``[h, r, t]``), in their order; a
    question whose array is null or empty has no row."""
    return (
        questions.select("id", F.posexplode(column).alias("pos", "x"))
        .join(ent.select(F.col("e").alias("_h"), F.col("ek").alias("hk")), F.col("x.h") == F.col("_h"))
        .join(ent.select(F.col("e").alias("_t"), F.col("ek").alias("tk")), F.col("x.t") == F.col("_t"))
        .join(F.broadcast(rel), F.col("x.r") == F.col("rr"))
        .groupBy("id")
        .agg(F.array_sort(F.collect_list(F.struct("pos", F.array("hk", "rk", "tk").alias("k")))).alias("g"))
        .select("id", F.transform("g", lambda x: x["k"]).alias("keys"))
    )


def to_records(questions: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``id, value``: each question (ids) as its JSON Lines record with entity and relation keys, the
    form :func:`kgbrink.synthkgqa.questions.parse_lines` reads (``split`` and ``question`` left out when
    null)."""
    ent = entities.select(F.col("id").alias("e"), F.col("key").alias("ek"))
    rel = relations.select(F.col("id").alias("rr"), F.col("key").alias("rk"))
    seeds = (
        questions.select("id", F.posexplode("seeds").alias("pos", "e"))
        .join(ent, "e")
        .groupBy("id")
        .agg(F.array_sort(F.collect_list(F.struct("pos", "ek"))).alias("s"))
        .select("id", F.transform("s", lambda x: x["ek"]).alias("seed_keys"))
    )
    triples = _triple_keys(questions, "answer_subgraph", ent, rel).withColumnRenamed("keys", "triple_keys")
    text = F.col("question") if "question" in questions.columns else F.lit(None).cast("string")
    answer = questions.select("id", "split", text.alias("question"), F.col("answer").alias("e")).join(ent, "e")
    joined = answer.join(seeds, "id", "left").join(triples, "id", "left")
    record = F.struct(
        "id",
        "split",
        "question",
        F.coalesce("seed_keys", F.array().cast("array<string>")).alias("seeds"),
        F.col("ek").alias("answer"),
        F.coalesce("triple_keys", F.array().cast("array<array<string>>")).alias("answer_subgraph"),
    )
    return joined.select("id", F.to_json(record).alias("value"))


def types_short(type_rows: list[dict], types: list[str], per_type: int) -> dict[str, int]:
    """The planted types with fewer than ``per_type`` questions over all splits (``type_rows``: the
    ``answer_types`` rows), with how many they got."""
    got: dict[str, int] = {}
    for row in type_rows:
        got[row["graph_isomorphism"]] = got.get(row["graph_isomorphism"], 0) + row["questions"]
    return {t: got.get(t, 0) for t in types if got.get(t, 0) < per_type}


CLASSIFICATION_COLUMNS = QUESTION_COLUMNS[
    QUESTION_COLUMNS.index("graph_isomorphism") : QUESTION_COLUMNS.index("all_answers")
]
RECORD = (
    "id string, split string, question string, seeds array<string>, answer string, answer_subgraph array<array<string>>"
)


def keyed_questions(questions: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``id, split, question, seeds, answer, answer_subgraph`` by key (:func:`to_records`) with the
    classification (``graph_isomorphism, dutt_label, n_hops, n_edges, n_seeds, n_intermediate, n_answers``),
    ``all_answers`` by key in their order, ``answer_in_set`` and ``full_answer_subgraph`` by key in its order
    (null when not computed): a ``gt_questions`` table for a release."""
    records = to_records(questions, entities, relations).select("id", F.from_json("value", RECORD).alias("q"))
    classified = questions.select(
        "id", *CLASSIFICATION_COLUMNS, "n_answers", "answer_in_set", F.col("all_answers").alias("_ids"),
        F.col("full_answer_subgraph").isNotNull().alias("_full"),
    )  # fmt: skip
    keys = entities.select(F.col("id").alias("e"), "key")
    answers = (
        questions.select("id", F.posexplode("all_answers").alias("pos", "e"))
        .join(keys, "e", "left")
        .groupBy("id")
        .agg(F.array_sort(F.collect_list(F.struct("pos", "key"))).alias("a"))
        .select("id", F.transform("a", lambda x: x["key"]).alias("_keys"))
    )
    ent = entities.select(F.col("id").alias("e"), F.col("key").alias("ek"))
    rel = relations.select(F.col("id").alias("rr"), F.col("key").alias("rk"))
    full = _triple_keys(questions, "full_answer_subgraph", ent, rel).withColumnRenamed("keys", "_full_keys")
    frame = records.select("id", "q.split", "q.question", "q.seeds", "q.answer", "q.answer_subgraph")
    frame = frame.join(classified, "id")
    named = F.when(F.col("_ids").isNotNull(), F.coalesce("_keys", F.array().cast("array<string>")))
    full_named = F.when(F.col("_full"), F.coalesce("_full_keys", F.array().cast("array<array<string>>")))
    return (
        frame.join(answers, "id", "left")
        .join(full, "id", "left")
        .withColumns({"all_answers": named, "full_answer_subgraph": full_named})
        .drop("_ids", "_keys", "_full", "_full_keys")
    )
