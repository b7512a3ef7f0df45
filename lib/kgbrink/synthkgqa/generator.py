"""Procedural questions of chosen isomorphism types planted in a KG (paper 002's Table A1 templates,
spec 2.0 "a procedural generator that instantiates Table A1 templates in the KG").

For each type (an identifier, :func:`kgbrink.synthkgqa.answer_types.shape`) the generator draws candidate
answer entities by seeded hash and grows the type's tree from each, node by node in the shape's order: a
new node is a neighbour of its parent's entity through a real triple, either direction, chosen as the
incident triple with the smallest seeded hash ``u64(seed, type, answer, node index, h, r, t)`` among those
whose other end is not yet in the question. Every node is thus a distinct entity, every edge a distinct
KG triple joining a new node to the tree, and the question's answer subgraph is a tree of exactly the
planted type whose leaves are the seeds. A candidate that reaches a node with no unused neighbour fails;
each type keeps its first ``per_type`` successes in hash order, drawing further candidates in later
rounds (disjoint hash ranges) while it is short.

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

from kgbrink.graph.hashing import u64, uniform
from kgbrink.synthkgqa import answer_types as A
from kgbrink.synthkgqa.questions import TRIPLE_TYPE

# Candidate answers drawn per type and round, as a multiple of the questions still wanted.
OVERSAMPLE = 4
ROUNDS = 4


def shapes(types: list[str]) -> list[A.Shape]:
    """The shapes of ``types`` (ValueError for a non-identifier, a non-canonical one or a repeat)."""
    if len(set(types)) != len(types):
        raise ValueError(f"repeated isomorphism type in {types}")
    return [A.shape(t) for t in types]


def _shape_table(spark, planted: list[A.Shape]) -> DataFrame:
    """``type, node, parent``: one row per non-root node of every shape."""
    rows = [(s.identifier, i, p) for s in planted for i, p in enumerate(s.parent, start=1)]
    return spark.createDataFrame(rows, "type string, node int, parent int")


def _grow(attempts: DataFrame, shape_rows: DataFrame, kg: DataFrame, max_nodes: int, seed: int) -> DataFrame:
    """``type, answer, nodes array<int>, triples`` of the attempts that got every node of their shape."""
    state = attempts.select(
        "type",
        "answer",
        F.array(F.col("answer")).alias("nodes"),
        F.array().cast(TRIPLE_TYPE).alias("triples"),
        "n_nodes",
    ).localCheckpoint()
    out = kg.select(F.col("h").alias("at"), "h", "r", "t", F.col("t").alias("nbr"))
    inc = kg.select(F.col("t").alias("at"), "h", "r", "t", F.col("h").alias("nbr"))
    for j in range(1, max_nodes):
        done = state.where(F.col("n_nodes") <= j)
        todo = (
            state.where(F.col("n_nodes") > j)
            .join(F.broadcast(shape_rows.where(F.col("node") == j)), "type")
            .withColumn("at", F.element_at("nodes", F.col("parent") + 1))
        )
        keys = F.broadcast(todo.select("type", "answer", "at", "nodes"))
        candidates = (
            out.join(keys, "at")
            .unionByName(inc.join(keys, "at"))
            .where(~F.array_contains("nodes", F.col("nbr")))
            .select(
                "type",
                "answer",
                F.struct(
                    u64(seed, "type", "answer", F.lit(j), "h", "r", "t").alias("hash"), "h", "r", "t", "nbr"
                ).alias("c"),
            )
        )
        chosen = candidates.groupBy("type", "answer").agg(F.min("c").alias("c"))
        grown = todo.join(chosen, ["type", "answer"]).select(
            "type",
            "answer",
            F.concat("nodes", F.array("c.nbr")).alias("nodes"),
            F.concat("triples", F.array(F.struct("c.h", "c.r", "c.t"))).cast(TRIPLE_TYPE).alias("triples"),
            "n_nodes",
        )
        state = done.unionByName(grown).localCheckpoint()
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
    found = None
    wanted = dict.fromkeys(by_type, per_type)
    low = 0.0
    for _ in range(ROUNDS):
        short = [t for t, n in wanted.items() if n > 0]
        if not short:
            break
        high = min(1.0, low + OVERSAMPLE * max(wanted[t] for t in short) / n_nodes)
        draw = uniform(u64(seed, "type", "answer"))
        attempts = (
            nodes.select(F.col("id").alias("answer"))
            .crossJoin(F.broadcast(sizes.where(F.col("type").isin(short))))
            .where((draw >= F.lit(low)) & (draw < F.lit(high)))
        )
        grown = _grow(attempts, shape_rows, kg, max(by_type[t].n_nodes for t in short), seed)
        found = grown if found is None else found.unionByName(grown)
        found = found.localCheckpoint()
        counts = {r["type"]: r["n"] for r in found.groupBy("type").agg(F.count("*").alias("n")).collect()}
        wanted = {t: per_type - counts.get(t, 0) for t in by_type}
        low = high
        if high >= 1.0:
            break
    if found is None:
        return spark.createDataFrame(
            [], f"id string, split string, seeds array<int>, answer int, answer_subgraph {TRIPLE_TYPE}"
        )
    rank = F.row_number().over(Window.partitionBy("type").orderBy(u64(seed, "type", "answer"), "answer")) - 1
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


def to_records(questions: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``id, value``: each question (ids) as its JSON Lines record with entity and relation keys, the
    form :func:`kgbrink.synthkgqa.questions.parse_lines` reads (``split`` left out when null)."""
    ent = entities.select(F.col("id").alias("e"), F.col("key").alias("ek"))
    rel = relations.select(F.col("id").alias("rr"), F.col("key").alias("rk"))
    seeds = (
        questions.select("id", F.posexplode("seeds").alias("pos", "e"))
        .join(ent, "e")
        .groupBy("id")
        .agg(F.array_sort(F.collect_list(F.struct("pos", "ek"))).alias("s"))
        .select("id", F.transform("s", lambda x: x["ek"]).alias("seed_keys"))
    )
    triples = (
        questions.select("id", F.posexplode("answer_subgraph").alias("pos", "x"))
        .join(ent.select(F.col("e").alias("_h"), F.col("ek").alias("hk")), F.col("x.h") == F.col("_h"))
        .join(ent.select(F.col("e").alias("_t"), F.col("ek").alias("tk")), F.col("x.t") == F.col("_t"))
        .join(F.broadcast(rel), F.col("x.r") == F.col("rr"))
        .groupBy("id")
        .agg(F.array_sort(F.collect_list(F.struct("pos", F.array("hk", "rk", "tk").alias("k")))).alias("g"))
        .select("id", F.transform("g", lambda x: x["k"]).alias("triple_keys"))
    )
    answer = questions.select("id", "split", F.col("answer").alias("e")).join(ent, "e")
    joined = answer.join(seeds, "id", "left").join(triples, "id", "left")
    record = F.struct(
        "id",
        "split",
        F.coalesce("seed_keys", F.array().cast("array<string>")).alias("seeds"),
        F.col("ek").alias("answer"),
        F.coalesce("triple_keys", F.array().cast("array<array<string>>")).alias("answer_subgraph"),
    )
    return joined.select("id", F.to_json(record).alias("value"))
