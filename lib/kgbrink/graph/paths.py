"""Distances, shortest-path triples and path counts on the whole KG (spec Sec. 2.E, 5.3.2, 5.3.3).

The graph is the multigraph of the distinct triples ``h, r, t`` (Sec. 1.1); walks ignore direction unless
``directed``. Self-loops never shorten a walk and never lie on a shortest path (ds(u) + 1 + da(u) > D),
so they are dropped from the steps.

- :func:`bfs_distances`: multi-source BFS for many keys at once (qid, pair or landmark), one row state
  ``(key, id, dist)`` per reached node (Sec. 5.3.3); a key's distance is to its nearest source.
- :func:`shortest_path_edges` for pairs ``(pair_id, s, a)``, undirected:
  1. bidirectional BFS (Sec. 5.3.2), one row per (pair_id, id) with ds and da, null until that side
     reaches the node: each round grows, per pair, the side with the smaller last layer by one layer
     (both sides on a tie, which saves a round at no more than twice the cost); the round the two balls
     first share nodes, D = the smallest ds + da among them, and M = the shared nodes with ds + da = D at
     the largest ds, one position of every shortest path. Nothing beyond the two balls is explored;
  2. sigma DP during the expansion, one aggregation per layer: sigma(x) = sum over neighbours y one
     layer closer of sigma(y) * mult(y, x), mult = number of triples between them ("triple paths",
     parallel triples multiply) or 1 ("node paths", as ``nx.all_shortest_paths``); the number of shortest
     paths is sum over M of sigma_s * sigma_a;
  3. the shortest-path DAG is marked backwards from M on each side (a neighbour one layer closer to the
     side's end), giving ds and da = D - ds on every shortest-path node; a triple (u, r, v) is on a
     shortest path iff ds(u) + 1 + da(v) = D or ds(v) + 1 + da(u) = D. No path is enumerated.
  Unreachable pairs have distance null and no paths; s == a has distance 0 and one path. Counts are
  doubles: exact, and so independent of the partitioning, below 2^53.

Loops follow Sec. 5.3.6: each round is persisted, the lineage is cut every ``checkpoint_every`` rounds,
and a loop stops when its frontier is empty.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.graph.views import incidence

COUNTS = ("triples", "nodes")


def _keep(frame: DataFrame, step: int, every: int) -> DataFrame:
    """Round ``step``'s state: a checkpoint every ``every`` rounds, otherwise persisted."""
    return frame.transform(checkpoint) if step % every == 0 else frame.persist()


def _steps(triples: DataFrame, directed: bool) -> DataFrame:
    """``src, dst``: distinct one-step moves along h -> t (and back unless ``directed``), no self-loops."""
    steps = incidence(triples)
    if directed:
        steps = steps.where(F.col("dir") == "out")
    return steps.where(F.col("src") != F.col("dst")).select("src", "dst").distinct()


def _weighted_steps(distinct: DataFrame, count: str) -> DataFrame:
    """``src, dst, mult``: undirected moves with the number of distinct triples between the two nodes
    (either direction), or 1 when counting node paths."""
    moves = incidence(distinct).where(F.col("src") != F.col("dst"))
    mult = F.count("*").cast("double") if count == "triples" else F.lit(1.0)
    return moves.groupBy("src", "dst").agg(mult.alias("mult"))


def bfs_distances(
    triples: DataFrame,
    sources: DataFrame,
    max_dist: int | None = None,
    directed: bool = False,
    checkpoint_every: int = 2,
) -> DataFrame:
    """``key, id, dist``: BFS distance from each key's nearest source in ``sources(key, id)``, for the
    nodes within ``max_dist`` (all reachable ones when None). Sources off every triple keep dist 0."""
    if max_dist is not None and max_dist < 0:
        raise ValueError(f"max_dist must be >= 0, got {max_dist}")
    steps = _steps(triples, directed).repartition("src").persist()
    visited = sources.select("key", "id").distinct().withColumn("dist", F.lit(0)).persist()
    frontier, step = visited, 0
    while max_dist is None or step < max_dist:
        step += 1
        new = (
            frontier.withColumnRenamed("id", "src")
            .join(steps, "src")
            .select("key", F.col("dst").alias("id"))
            .distinct()
            .join(visited, ["key", "id"], "left_anti")
            .withColumn("dist", F.lit(step))
        )
        previous, visited = visited, _keep(visited.unionByName(new), step, checkpoint_every)
        frontier = visited.where(F.col("dist") == step).select("key", "id")
        empty = frontier.isEmpty()
        previous.unpersist()
        if empty:
            break
    steps.unpersist()
    return visited


def _bidirectional(steps: DataFrame, pairs: DataFrame, every: int) -> DataFrame:
    """``pair_id, id, ds, ss, da, sa, new_s, new_a``: distance and sigma from s and from a, null where
    that side has not reached the node, and whether the last round set them. ``front(pair_id, d0, n0, d1, n1)`` holds the depth and size of each side's last
    layer for the pairs still running; a round expands every side whose last layer is no larger than the
    other's (the smaller one, both on a tie) and a pair stops when its sides meet or one runs out."""
    same = F.col("s") == F.col("a")
    none_i, none_d, one, no = F.lit(None).cast("int"), F.lit(None).cast("double"), F.lit(1.0), F.lit(False)
    start_s = [F.col("s").alias("id"), F.lit(0).alias("ds"), one.alias("ss")]
    start_a = [F.when(same, F.lit(0)).alias("da"), F.when(same, one).alias("sa")]
    state = pairs.select("pair_id", *start_s, *start_a).unionByName(
        pairs.where(~same).select(
            "pair_id",
            F.col("a").alias("id"),
            none_i.alias("ds"),
            none_d.alias("ss"),
            F.lit(0).alias("da"),
            one.alias("sa"),
        )
    )
    state = state.select("*", no.alias("new_s"), no.alias("new_a")).persist()
    size = F.lit(1).cast("long")
    front = pairs.where(~same).select(
        "pair_id", F.lit(0).alias("d0"), size.alias("n0"), F.lit(0).alias("d1"), size.alias("n1")
    )
    front, step = front.persist(), 0
    running = not front.isEmpty()
    while running:
        step += 1
        grow_s, grow_a = F.col("n0") <= F.col("n1"), F.col("n1") <= F.col("n0")
        chosen = front.select("pair_id", grow_s.alias("grow_s"), grow_a.alias("grow_a"), "d0", "d1")
        in_s = F.col("grow_s") & F.col("ds").eqNullSafe(F.col("d0"))  # never null; not both (no shared node)
        in_a = F.col("grow_a") & F.col("da").eqNullSafe(F.col("d1"))
        layer = (
            state.join(F.broadcast(chosen), "pair_id")
            .where(in_s | in_a)
            .select("pair_id", F.col("id").alias("src"), in_s.alias("from_s"), "d0", "d1", "ss", "sa")
        )
        from_s, from_a = F.col("from_s"), ~F.col("from_s")
        reached = (
            layer.join(steps, "src")
            .groupBy("pair_id", F.col("dst").alias("id"))
            .agg(
                F.max(F.when(from_s, F.col("d0") + 1)).alias("to_s"),
                F.sum(F.when(from_s, F.col("ss") * F.col("mult"))).alias("sigma_s"),
                F.max(F.when(from_a, F.col("d1") + 1)).alias("to_a"),
                F.sum(F.when(from_a, F.col("sa") * F.col("mult"))).alias("sigma_a"),
            )
        )
        new_s = F.col("ds").isNull() & F.col("to_s").isNotNull()
        new_a = F.col("da").isNull() & F.col("to_a").isNotNull()
        grown = state.join(reached, ["pair_id", "id"], "full").select(
            "pair_id",
            "id",
            F.coalesce("ds", "to_s").alias("ds"),
            F.when(new_s, F.col("sigma_s")).otherwise(F.col("ss")).alias("ss"),
            F.coalesce("da", "to_a").alias("da"),
            F.when(new_a, F.col("sigma_a")).otherwise(F.col("sa")).alias("sa"),
            new_s.alias("new_s"),
            new_a.alias("new_a"),
        )
        previous = (state, front)
        state = _keep(grown, step, every)
        both = F.col("ds").isNotNull() & F.col("da").isNotNull()
        news = state.where(F.col("new_s") | F.col("new_a")).groupBy("pair_id")
        news = news.agg(F.count_if("new_s").alias("g0"), F.count_if("new_a").alias("g1"), F.max(both).alias("met"))
        zero = F.lit(0).cast("long")
        front = (
            front.join(news, "pair_id", "left")
            .select(
                "pair_id",
                (F.col("d0") + grow_s.cast("int")).alias("d0"),
                F.when(grow_s, F.coalesce("g0", zero)).otherwise(F.col("n0")).alias("n0"),
                (F.col("d1") + grow_a.cast("int")).alias("d1"),
                F.when(grow_a, F.coalesce("g1", zero)).otherwise(F.col("n1")).alias("n1"),
                F.coalesce("met", no).alias("met"),
            )
            .where(~F.col("met") & (F.col("n0") > 0) & (F.col("n1") > 0))
            .drop("met")
        )
        front = _keep(front, step, every)
        running = not front.isEmpty()  # computes this round before the previous one is released
        for frame in previous:
            frame.unpersist()
    front.unpersist()
    return state


def _shortest_path_nodes(steps: DataFrame, state: DataFrame, meet: DataFrame, every: int) -> DataFrame:
    """``pair_id, side, id, dist, step``: the explored nodes on a shortest path, marked backwards layer
    by layer (``step``) from the meeting nodes ``meet`` on both sides (side 0: dist = ds, side 1: dist =
    da); the meeting nodes are the rows of step 0 on both sides."""
    marked = meet.select("pair_id", F.lit(0).alias("side"), "id", F.col("ds").alias("dist")).unionByName(
        meet.select("pair_id", F.lit(1).alias("side"), "id", F.col("da").alias("dist"))
    )
    marked = marked.withColumn("step", F.lit(0))
    rounds = meet.agg(F.max(F.greatest("ds", "da"))).first()[0] or 0
    explored = state.select("pair_id", "id", "ds", "da")
    pending = []
    for step in range(1, rounds + 1):
        back = (
            marked.where((F.col("step") == step - 1) & (F.col("dist") > 0))
            .withColumnRenamed("id", "src")
            .join(steps.select("src", "dst"), "src")
            .select("pair_id", "side", F.col("dst").alias("id"), (F.col("dist") - 1).alias("dist"))
            .distinct()
            .join(explored, ["pair_id", "id"])
            .where(F.when(F.col("side") == 0, F.col("ds")).otherwise(F.col("da")) == F.col("dist"))
            .select("pair_id", "side", "id", "dist", F.lit(step).alias("step"))
        )
        marked = marked.unionByName(back)
        if step % every and step < rounds:
            pending.append(marked.persist())
            continue
        marked = marked.transform(checkpoint)
        for frame in pending:
            frame.unpersist()
        pending = []
    return marked


def shortest_path_edges(
    triples: DataFrame, pairs: DataFrame, count: str = "triples", checkpoint_every: int = 2
) -> tuple[DataFrame, DataFrame]:
    """``(edges(pair_id, h, r, t), summary(pair_id, distance, n_paths, n_sp_nodes, n_sp_triples))`` for
    ``pairs(pair_id, s, a)`` (one row per pair_id) in the undirected multigraph of ``triples``: the
    distinct triples on some shortest s-a path and, per pair, dist(s, a), the number of shortest paths
    (``count`` 'triples': parallel triples multiply; 'nodes': node sequences) and the sizes of the
    shortest-path node and triple sets. See the module docstring for the method."""
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}")
    distinct = triples.select("h", "r", "t").distinct()
    steps = _weighted_steps(distinct, count).repartition("src").persist()
    pairs = pairs.select("pair_id", "s", "a")
    state = _bidirectional(steps, pairs, checkpoint_every)
    # shared nodes: D = their smallest ds + da; M = those at the largest ds among them (one position, so
    # that every shortest path passes exactly one node of M; both sides may have grown in the last round)
    shared = state.where(F.col("ds").isNotNull() & F.col("da").isNotNull())
    total = F.col("ds") + F.col("da")
    best = shared.groupBy("pair_id").agg(F.max(F.struct((-total).alias("neg_d"), "ds")).alias("b"))
    meet = shared.join(best, "pair_id").where((total == -F.col("b.neg_d")) & (F.col("ds") == F.col("b.ds")))
    meet = meet.select("pair_id", "id", "ds", "ss", "da", "sa").persist()
    found = (
        meet.groupBy("pair_id")
        .agg(F.min(total).alias("distance"), F.sum(F.col("ss") * F.col("sa")).alias("n_paths"))
        .persist()
    )
    marked = _shortest_path_nodes(steps, state, meet, checkpoint_every)
    ds = F.when(F.col("side") == 0, F.col("dist")).otherwise(F.col("distance") - F.col("dist"))
    sp_nodes = (
        marked.where((F.col("side") == 0) | (F.col("step") > 0))  # each node once: the meeting nodes from side 0
        .join(found.select("pair_id", "distance"), "pair_id")
        .select("pair_id", "id", ds.alias("ds"), "distance")
        .withColumn("da", F.col("distance") - F.col("ds"))
        .persist()
    )
    head = sp_nodes.select("pair_id", F.col("id").alias("h"), F.col("ds").alias("ds_h"), F.col("da").alias("da_h"))
    tail = sp_nodes.select(
        "pair_id", F.col("id").alias("t"), F.col("ds").alias("ds_t"), F.col("da").alias("da_t"), "distance"
    )
    on_path = (F.col("ds_h") + 1 + F.col("da_t") == F.col("distance")) | (
        F.col("ds_t") + 1 + F.col("da_h") == F.col("distance")
    )
    edges = distinct.join(head, "h").join(tail, ["pair_id", "t"]).where(on_path).select("pair_id", "h", "r", "t")
    edges = edges.transform(checkpoint)
    one, zero = F.lit(1), F.lit(0)
    sizes = (
        sp_nodes.select("pair_id", one.alias("n_sp_nodes"), zero.alias("n_sp_triples"))
        .unionByName(edges.select("pair_id", zero.alias("n_sp_nodes"), one.alias("n_sp_triples")))
        .groupBy("pair_id")
        .agg(F.sum("n_sp_nodes").alias("n_sp_nodes"), F.sum("n_sp_triples").alias("n_sp_triples"))
    )
    summary = (
        pairs.select("pair_id")
        .join(found, "pair_id", "left")
        .join(sizes, "pair_id", "left")
        .select(
            "pair_id",
            "distance",
            F.coalesce("n_paths", F.lit(0.0)).alias("n_paths"),
            F.coalesce("n_sp_nodes", zero.cast("long")).alias("n_sp_nodes"),
            F.coalesce("n_sp_triples", zero.cast("long")).alias("n_sp_triples"),
        )
        .transform(checkpoint)
    )
    for frame in (steps, state, meet, found, sp_nodes):
        frame.unpersist()
    return edges, summary
