"""Metapath walks on the whole KG for many walks at once (spec Sec. 2.D step 4): from a start node, follow
a sequence of relations r_1 .. r_L, one triple per step, each step a triple of relation r_i incident to the
current node (either way round, or only the given way with ``directed``).

The walks are explored as a layered graph of states (step i, node): a triple of relation r_i joins state
(i - 1, u) to (i, v) when it links u and v. A triple is on a *complete* walk when it joins a state
reachable from the start to a state from which step L is reachable (a forward pass over the layers,
then a backward pass from layer L); the other triples of the forward pass are on *partial* walks only.
Walks may revisit nodes and a self-loop is one step (as the reference code's ``bfs_with_rule_original``
/ ``bfs_with_rule`` walking a networkx MultiGraph). No walk is enumerated.

Hubs: with ``cap``, a step of one walk keeps at most ``cap`` transitions, those with the smallest
``u64(seed, key, step, h, r, t, src)`` (exact and partition-independent); only their far ends continue,
and the walk is flagged. The reference enumerates every walk; the per-step cap bounds the work at
Wikidata5m scale (spec 2.D "Scale plan") at the price of missing complete walks through a capped step.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.graph.hashing import smallest_per_key, u64


def moves(triples: DataFrame, directed: bool = False) -> DataFrame:
    """``src, dst, r, forward, h, t``: one row per way a triple can be stepped along, h -> t (forward) and
    t -> h; a self-loop is one step unless ``directed`` (then it matches either direction)."""
    distinct = triples.select("h", "r", "t").distinct()
    out = distinct.select(F.col("h").alias("src"), F.col("t").alias("dst"), "r", F.lit(True).alias("forward"), "h", "t")
    back = distinct.select(
        F.col("t").alias("src"), F.col("h").alias("dst"), "r", F.lit(False).alias("forward"), "h", "t"
    )
    if not directed:
        back = back.where(F.col("h") != F.col("t"))
    return out.unionByName(back)


def walk(
    triples: DataFrame, walks: DataFrame, cap: int | None = None, seed: int = 0, directed: bool = False
) -> tuple[DataFrame, DataFrame]:
    """``(walked(key, h, r, t, complete), capped(key, capped))`` for ``walks(key, start, relations
    array<int>[, forward array<boolean>])``, one row per key (any column type). ``walked``: every triple
    some walk of the key steps along, ``complete`` when it lies on a walk of the full length (module
    docstring). ``forward`` (needed with ``directed``) says per step whether the triple is followed h -> t.
    ``capped``: keys with a step over ``cap`` transitions."""
    if directed and "forward" not in walks.columns:
        raise ValueError("walk: directed metapaths need the walks' forward array<boolean> column")
    if cap is not None and cap < 1:
        raise ValueError(f"walk: cap must be >= 1, got {cap}")
    forward = F.col("forward") if directed else F.lit(None).cast("array<boolean>")
    walks = walks.select("key", "start", "relations", forward.alias("fwd"), F.size("relations").alias("length"))
    walks = walks.persist()
    longest = walks.agg(F.max("length")).first()[0] or 0
    used = walks.select(F.explode("relations").alias("r")).distinct()  # only these relations are ever stepped
    steps = moves(triples.join(F.broadcast(used), "r", "left_semi"), directed).persist()
    state = walks.where(F.col("length") > 0).select("key", F.col("start").alias("id"))
    layers, caps = [], []
    for i in range(1, longest + 1):
        want = walks.where(F.col("length") >= i).select(
            "key", F.element_at("relations", i).alias("r"), F.element_at("fwd", i).alias("want_forward")
        )
        step = state.withColumnRenamed("id", "src").join(want, "key").join(steps, ["src", "r"])
        if directed:
            step = step.where(F.col("forward") == F.col("want_forward"))
        step = step.select("key", "src", "h", "r", "t", "dst")
        if cap is not None:
            order = u64(seed, "key", F.lit(i), "h", "r", "t", "src")
            step, counts = smallest_per_key(step, cap, ["key"], order, ["h", "r", "t", "src"])
            caps.append(counts.where("capped").select("key"))
        step = step.transform(checkpoint)
        layers.append(step)
        state = step.select("key", F.col("dst").alias("id")).distinct()
    # backward: a state (i, id) is alive when i is its walk's last step or a complete transition leaves it
    walked, back = [], None
    for i in range(longest, 0, -1):
        step = layers[i - 1]
        alive = step.join(walks.where(F.col("length") == i).select("key"), "key").select(
            "key", F.col("dst").alias("id")
        )
        if back is not None:
            alive = alive.unionByName(back)
        done = step.join(alive.withColumnRenamed("id", "dst").distinct(), ["key", "dst"], "left_semi")
        done = done.transform(checkpoint)
        back = done.select("key", F.col("src").alias("id")).distinct()
        marked = step.join(
            done.select("key", "src", "h", "r", "t", F.lit(True).alias("c")), ["key", "src", "h", "r", "t"], "left"
        )
        walked.append(marked.select("key", "h", "r", "t", F.coalesce("c", F.lit(False)).alias("complete")))
    schema = f"key {walks.schema['key'].dataType.simpleString()}, h int, r int, t int, complete boolean"
    out = triples.sparkSession.createDataFrame([], schema)
    for frame in walked:
        out = out.unionByName(frame)
    out = out.groupBy("key", "h", "r", "t").agg(F.max("complete").alias("complete"))
    capped = walks.select("key", F.lit(False).alias("capped"))
    if caps:
        flagged = caps[0]
        for frame in caps[1:]:
            flagged = flagged.unionByName(frame)
        flagged = flagged.distinct().withColumn("flag", F.lit(True))
        capped = capped.join(flagged, "key", "left").select("key", F.coalesce("flag", F.lit(False)).alias("capped"))
    steps.unpersist()
    return out, capped
