"""Seed subgraphs by Algorithm 1 of paper 002 (App. A.1; spec 2.A), every sample in lock-step.

A sample starts from an entity ``s`` (uniform over the KG's nodes by seeded hash, with replacement as the
authors' code) with ``N = [s]``, ``Q = {}`` and repeats while ``|N| < n_nodes`` and ``|Q| < n_edges``:

1. pivot ``z`` from the valid pivots ``V = {x in N : N(x) \\ N != {}}`` with ``P(x) ~ exp(1/d(x))``;
   ``V`` empty stops the sample with ``exhausted`` (the paper's loop would spin; the code adds a random
   unconnected node). Drawing from ``V`` is the paper's loop that re-draws ``z`` until ``M`` is non-empty;
2. new node ``n`` from ``M = N(z) \\ N`` (distinct undirected neighbours) with ``P(x) ~ exp(1/d(x))``;
3. ``Q += {(h, r, t) : {h, t} = {n, y}, y in N}`` (every parallel triple; no self-loop of ``n``), append ``n``.

So ``Q`` is the subgraph induced by ``N`` without self-loops, and ``x`` has new neighbours iff its distinct
neighbours outnumber its distinct neighbours in ``Q``. ``d`` is the triple count at ``x`` (paper text) or
its distinct neighbours (``degree: neighbours``, the code), both after the excluded relations.

Every draw is exact and a function of (seed, sample, step, content): Gumbel-max ``argmax 1/d(x) + g_x``
with ``g = -ln(-ln U)`` from :func:`kgbrink.graph.hashing.uniform`, ties to the smaller id. A pivot with
more than ``enumerate_below_degree`` neighbours (a hub) is not enumerated: ``rejection_draws`` uniform
positions of its indexed neighbour list are tried in order, draw ``k`` accepted iff its node is not in
``N`` and ``U'_k < exp(1/d - 1)`` (the target over the proposal, at most 1), which is an exact draw from
``M``; when no draw is accepted the hub's list is enumerated, so the mixture stays exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint, with_positions
from kgbrink.graph import views
from kgbrink.graph.hashing import u64, uniform

SEED_GRAPH_SCHEMA = (
    "sample_id long, seed int, nodes array<int>, triples array<struct<h: int, r: int, t: int, step: int>>, "
    "n_nodes int, n_edges int, steps int, exhausted boolean"
)
_TRIPLE = "struct<h: int, r: int, t: int, step: int>"


@dataclass(frozen=True)
class Plan:
    """The parameters of one sampling run (settings ``seed_graphs``)."""

    n_samples: int
    n_nodes: int = 10
    n_edges: int = 30
    seed: int = 1111
    degree: str = "edges"
    trim_to_edge_limit: bool = False
    rejection_draws: int = 16
    enumerate_below_degree: int = 4096

    def __post_init__(self):
        if self.degree not in ("edges", "neighbours"):
            raise ValueError(f"seed_graphs.degree must be 'edges' or 'neighbours', got {self.degree!r}")
        for name in ("n_samples", "n_nodes", "n_edges", "rejection_draws"):
            if getattr(self, name) < 1:
                raise ValueError(f"seed_graphs.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class SamplingGraph:
    """The KG as Algorithm 1 reads it (cached by :func:`sampling_graph`).

    - ``nodes``: ``id, w, n_nbrs`` with ``w = 1/d(id)``;
    - ``nbrs``: ``src, dst`` -- the distinct undirected neighbours (:func:`kgbrink.graph.views.neighbours`);
    - ``hub_index``: ``src, pos, dst, w`` -- the neighbours ``dst`` of the hubs ``src`` (more than
      ``enumerate_below_degree``) at dense positions 0.. (by id) with their weights, for the rejection draws;
    - ``pairs``: ``src, dst, h, r, t`` -- every non-loop triple under its unordered endpoint pair
      ``src < dst``.
    """

    nodes: DataFrame
    nbrs: DataFrame
    hub_index: DataFrame
    pairs: DataFrame

    def unpersist(self) -> None:
        for frame in (self.nodes, self.nbrs, self.hub_index, self.pairs):
            frame.unpersist()


def sampling_graph(
    triples: DataFrame, plan: Plan, persist: Callable[[DataFrame], DataFrame] = DataFrame.persist
) -> SamplingGraph:
    """The views of :class:`SamplingGraph` from ``h, r, t`` (excluded relations already removed) for
    ``plan``: its ``degree``, and its hubs (more than ``enumerate_below_degree`` neighbours), each kept by
    ``persist`` (a job's ``ctx.persist``: released when the job ends)."""
    kg = triples.select("h", "r", "t").distinct()
    nbrs = persist(views.neighbours(kg))
    ends = views.incidence(kg).groupBy(F.col("src").alias("id")).agg(F.count("*").alias("degree"))
    n_nbrs = nbrs.groupBy(F.col("src").alias("id")).agg(F.count("*").alias("n_nbrs"))
    d = ends.join(n_nbrs, "id", "left").select("id", "degree", F.coalesce("n_nbrs", F.lit(0)).alias("n_nbrs"))
    weight = 1.0 / F.col("degree" if plan.degree == "edges" else "n_nbrs").cast("double")
    nodes = d.select("id", F.when(F.col("n_nbrs") > 0, weight).otherwise(F.lit(0.0)).alias("w"), "n_nbrs")
    nodes = persist(nodes)
    hubs = nodes.where(F.col("n_nbrs") > plan.enumerate_below_degree).select(F.col("id").alias("src"))
    position = F.row_number().over(Window.partitionBy("src").orderBy("dst")) - 1
    hub_index = persist(
        nbrs.join(F.broadcast(hubs), "src")
        .join(nodes.select(F.col("id").alias("dst"), "w"), "dst")
        .select("src", position.cast("int").alias("pos"), "dst", "w")
    )
    pairs = persist(
        kg.where(F.col("h") != F.col("t")).select(
            F.least("h", "t").alias("src"), F.greatest("h", "t").alias("dst"), "h", "r", "t"
        )
    )
    return SamplingGraph(nodes, nbrs, hub_index, pairs)


def _gumbel(seed: int, *keys: str | Column) -> Column:
    return -F.log(-F.log(uniform(u64(seed, *keys))))


def _softmax_pick(candidates: DataFrame, seed: int, salt: str, step: int, group: str, item: str) -> DataFrame:
    """``group, item``: per group the Gumbel-max draw of ``item`` with weights ``exp(w)``, ties by smaller id."""
    key = F.col("w") + _gumbel(seed, F.lit(salt), F.lit(step), group, item)
    order = F.struct(key.alias("k"), (-F.col(item)).alias("tie"))
    return candidates.groupBy(group).agg(F.max_by(item, order).alias(item))


def starts(graph: SamplingGraph, n_samples: int, seed: int) -> DataFrame:
    """``sample_id, seed``: the start entity of each sample, uniform over the nodes with replacement."""
    numbered = with_positions(graph.nodes.select("id"), ["id"], "idx")
    n = numbered.count()
    if n == 0:
        raise ValueError("seed-graphs: the KG has no triple left after the excluded relations")
    spark = graph.nodes.sparkSession
    samples = spark.range(n_samples).withColumnRenamed("id", "sample_id")
    idx = F.floor(uniform(u64(seed, F.lit("start"), "sample_id")) * F.lit(n)).cast("long")
    return (
        samples.withColumn("idx", idx).join(numbered, "idx").select("sample_id", F.col("id").cast("int").alias("seed"))
    )


def _initial(start: DataFrame, plan: Plan) -> DataFrame:
    return start.select(
        "sample_id",
        "seed",
        F.array("seed").alias("nodes"),
        F.array().cast(f"array<{_TRIPLE}>").alias("triples"),
        F.lit(False).alias("exhausted"),
        F.lit(plan.n_nodes <= 1).alias("done"),
    )


def _pivots(active: DataFrame, graph: SamplingGraph, plan: Plan, step: int) -> DataFrame:
    """``sample_id, z, n_nbrs``: each active sample's pivot (no row: no valid pivot, exhausted)."""
    members = active.select("sample_id", F.explode("nodes").alias("id"))
    ends = active.select("sample_id", F.explode("triples").alias("q")).select(
        "sample_id",
        F.explode(F.array(F.array("q.h", "q.t"), F.array("q.t", "q.h"))).alias("e"),
    )
    in_q = (
        ends.select("sample_id", F.col("e")[0].alias("id"), F.col("e")[1].alias("y"))
        .distinct()
        .groupBy("sample_id", "id")
        .agg(F.count("*").alias("in_q"))
    )
    valid = (
        graph.nodes.join(F.broadcast(members), "id")
        .join(in_q, ["sample_id", "id"], "left")
        .where(F.col("n_nbrs") > F.coalesce("in_q", F.lit(0)))
    )
    z = _softmax_pick(valid, plan.seed, "z", step, "sample_id", "id").withColumnRenamed("id", "z")
    return z.join(valid.select("sample_id", F.col("id").alias("z"), "n_nbrs"), ["sample_id", "z"])


def _new_nodes(active: DataFrame, pivots: DataFrame, graph: SamplingGraph, plan: Plan, step: int) -> DataFrame:
    """``sample_id, n``: the node each sample with a pivot adds (exact Softmax(1/d) over ``N(z) \\ N``)."""
    members = F.broadcast(active.select("sample_id", F.explode("nodes").alias("dst")))
    hubs = pivots.where(F.col("n_nbrs") > plan.enumerate_below_degree)
    draws = hubs.select(
        "sample_id", "z", "n_nbrs", F.explode(F.sequence(F.lit(0), F.lit(plan.rejection_draws - 1))).alias("k")
    ).select(
        "sample_id",
        F.col("z").alias("src"),
        "k",
        F.floor(uniform(u64(plan.seed, F.lit("pos"), F.lit(step), "sample_id", "k")) * F.col("n_nbrs"))
        .cast("int")
        .alias("pos"),
    )
    accept = uniform(u64(plan.seed, F.lit("accept"), F.lit(step), "sample_id", "k")) < F.exp(F.col("w") - 1.0)
    accepted = (
        graph.hub_index.join(F.broadcast(draws), ["src", "pos"])
        .join(members, ["sample_id", "dst"], "left_anti")
        .where(accept)
        .groupBy("sample_id")
        .agg(F.min_by("dst", "k").alias("n"))
    )
    # every other pivot (small, or a hub whose draws were all rejected) enumerates its neighbours
    listed = pivots.join(accepted, "sample_id", "left_anti").select("sample_id", F.col("z").alias("src"))
    candidates = (
        graph.nbrs.join(F.broadcast(listed), "src")
        .select("sample_id", "dst")
        .join(members, ["sample_id", "dst"], "left_anti")
        .join(graph.nodes.select(F.col("id").alias("dst"), "w"), "dst")
    )
    enumerated = _softmax_pick(candidates, plan.seed, "n", step, "sample_id", "dst").withColumnRenamed("dst", "n")
    return accepted.unionByName(enumerated)


def _added_triples(active: DataFrame, new: DataFrame, graph: SamplingGraph, step: int) -> DataFrame:
    """``sample_id, added``: the triples between each new node and the sample's earlier nodes, sorted."""
    links = (
        active.select("sample_id", F.explode("nodes").alias("y"))
        .join(new, "sample_id")
        .select("sample_id", F.least("n", "y").alias("src"), F.greatest("n", "y").alias("dst"))
    )
    found = graph.pairs.join(F.broadcast(links), ["src", "dst"])
    triple = F.struct("h", "r", "t", F.lit(step).alias("step"))
    return found.groupBy("sample_id").agg(F.sort_array(F.collect_list(triple)).alias("added"))


def _advance(state: DataFrame, graph: SamplingGraph, plan: Plan, step: int) -> DataFrame:
    active = state.where(~F.col("done"))
    # one small row per sample each; checkpointed so the scans of the graph views run once per round
    pivots = _pivots(active, graph, plan, step).transform(checkpoint)
    new = _new_nodes(active, pivots, graph, plan, step).transform(checkpoint)
    added = _added_triples(active, new, graph, step)
    moved = active.drop("exhausted", "done").join(new, "sample_id", "left").join(added, "sample_id", "left")
    nodes = F.when(F.col("n").isNull(), F.col("nodes")).otherwise(F.concat("nodes", F.array("n")))
    triples = F.concat("triples", F.coalesce("added", F.array().cast(f"array<{_TRIPLE}>")))
    moved = moved.select(
        "sample_id", "seed", nodes.alias("nodes"), triples.alias("triples"), F.col("n").isNull().alias("exhausted")
    )
    done = F.col("exhausted") | (F.size("nodes") >= plan.n_nodes) | (F.size("triples") >= plan.n_edges)
    return state.where(F.col("done")).unionByName(moved.withColumn("done", done))


def _trimmed(state: DataFrame, plan: Plan) -> DataFrame:
    """The code's ``trim_to_edge_limit``: ``n_edges`` triples of each larger Q, smallest seeded hashes."""
    if not plan.trim_to_edge_limit:
        return state
    key = F.transform(
        "triples",
        lambda q: F.struct(
            F.xxhash64(F.lit(plan.seed), F.lit("trim"), F.col("sample_id"), q["h"], q["r"], q["t"]).alias("k"),
            q.alias("q"),
        ),
    )
    kept = F.transform(F.slice(F.array_sort(key), 1, plan.n_edges), lambda x: x["q"])
    return state.withColumn(
        "triples", F.when(F.size("triples") > plan.n_edges, F.array_sort(kept)).otherwise(F.col("triples"))
    )


def seed_graphs(graph: SamplingGraph, plan: Plan, start: DataFrame | None = None) -> DataFrame:
    """The seed subgraphs (:data:`SEED_GRAPH_SCHEMA`) of ``plan.n_samples`` samples, or of the given
    ``start`` (``sample_id, seed``). At most ``n_nodes - 1`` rounds, each a few broadcast joins against the
    cached graph views; the per-sample state is checkpointed every round."""
    start = starts(graph, plan.n_samples, plan.seed) if start is None else start
    state = _initial(start, plan).transform(checkpoint)
    for step in range(1, plan.n_nodes):
        if state.where(~F.col("done")).isEmpty():
            break
        state = _advance(state, graph, plan, step).transform(checkpoint)
    state = _trimmed(state, plan)
    steps = F.size("nodes") - 1
    return state.select(
        F.col("sample_id").cast("long"),
        F.col("seed").cast("int"),
        "nodes",
        "triples",
        F.size("nodes").alias("n_nodes"),
        F.size("triples").alias("n_edges"),
        steps.alias("steps"),
        "exhausted",
    )


def _named(ids: DataFrame, prefix: str) -> DataFrame:
    """``id, <prefix>_key, <prefix>_name``: the dictionary's key and ``label (KEY)`` (the key alone unlabelled)."""
    name = F.when(F.col("label").isNull() | (F.col("label") == ""), F.col("key")).otherwise(
        F.concat("label", F.lit(" ("), "key", F.lit(")"))
    )
    return ids.select("id", F.col("key").alias(f"{prefix}_key"), name.alias(f"{prefix}_name"))


def prompt_records(graphs: DataFrame, entities: DataFrame, relations: DataFrame, k: int) -> DataFrame:
    """One prompt record per sample: ``sample_id, seed, k, nodes [{key, label}], triples [[h, r, t] keys],
    flattened`` (the authors' ``flatten``: triples as ``h-r-t`` names joined by ``;``)."""
    ent = _named(entities.select("id", "key", "label"), "e")
    rel = _named(relations.select("id", "key", "label"), "r")
    triples = graphs.select("sample_id", F.posexplode("triples").alias("i", "q")).select(
        "sample_id", "i", "q.h", "q.r", "q.t"
    )
    for side, table in (("h", ent), ("r", rel), ("t", ent)):
        pre = "e" if side != "r" else "r"
        renamed = table.select(
            F.col("id").alias(side),
            F.col(f"{pre}_key").alias(f"{side}_key"),
            F.col(f"{pre}_name").alias(f"{side}_name"),
        )
        triples = triples.join(renamed, side, "left")
    per_sample = triples.groupBy("sample_id").agg(
        F.sort_array(
            F.collect_list(
                F.struct(
                    "i",
                    F.array("h_key", "r_key", "t_key").alias("keys"),
                    F.concat_ws("-", "h_name", "r_name", "t_name").alias("text"),
                )
            )
        ).alias("qs")
    )
    nodes = (
        graphs.select("sample_id", F.posexplode("nodes").alias("i", "id"))
        .join(entities.select("id", "key", "label"), "id", "left")
        .groupBy("sample_id")
        .agg(F.sort_array(F.collect_list(F.struct("i", "key", "label"))).alias("ns"))
    )
    seed_key = entities.select(F.col("id").alias("seed"), F.col("key").alias("seed_key"))
    return (
        graphs.join(seed_key, "seed", "left")
        .join(nodes, "sample_id", "left")
        .join(per_sample, "sample_id", "left")
        .select(
            "sample_id",
            F.col("seed_key").alias("seed"),
            F.lit(k).alias("k"),
            F.transform("ns", lambda n: F.struct(n["key"].alias("key"), n["label"].alias("label"))).alias("nodes"),
            F.coalesce(F.transform("qs", lambda q: q["keys"]), F.array().cast("array<array<string>>")).alias("triples"),
            F.coalesce(F.array_join(F.transform("qs", lambda q: q["text"]), ";"), F.lit("")).alias("flattened"),
            "exhausted",
        )
    )
