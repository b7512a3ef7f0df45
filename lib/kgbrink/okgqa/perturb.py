"""KG perturbations of OKGQA-P (paper 004 Sec. 3.2; spec Sec. 4.B), deterministic, nested across levels, and
keeping each method's invariant exactly on any KG.

In: ``scoped(scope_key, h, r, t)``, a set of triples per scope (a question's ``qid``, or ``"kg"`` for the
whole KG). Out: the made operations (:class:`Perturbation`), the ``perturbed`` table (:func:`nested_graphs`)
and the log (:func:`log_rows`).

The candidates of a scope are its triples in the order ``u64(seed, method, scope_key, h, r, t)``
(``cand_rank``). They are taken one by one: a candidate is made unless a triple it would create is in the
graph the operations made before it left (a triple present, or created by an earlier operation); then it is
skipped and the next one is taken. The graph at level p is the first m(p) made operations, so the graphs of
a sweep are nested (common random numbers across levels; the authors' code draws afresh per call, with
replacement for RS and RR, on a DiGraph that holds one edge per pair and so never meets a collision):

- RS: m = 2 floor(p |T| / 2); candidates 2i and 2i + 1 are a pair that swaps relations, made or skipped
  together (``noop`` when the relations are equal, or both triples join the same pair of entities);
- RR: m = floor(p |T|); r' = argmin over the scope's relations r' != r of s_G(h, r', t), ties broken by a
  seeded draw (:mod:`kgbrink.okgqa.scorers`);
- ER: m = floor(p |T|); t is replaced by v3 from the free set F(h) = nodes of the scope outside the closed
  1-hop neighbourhood N1(h) of the ORIGINAL scope graph (simultaneous choice: independent of processing
  order; the code recomputes N1 on the graph being perturbed). The j-th candidate of head h (in
  ``cand_rank`` order) takes element j of a seeded permutation of F(h), so no (h, v3) is chosen twice and
  no new triple exists; candidates with j >= |F(h)| are skipped;
- ED: m = floor(p |T|); the triples are removed.

So |T'| = |T| for RS, RR and ER (|T| - m for ED); RS keeps every node's in- and out-degree and every
relation's triple count. When every candidate is taken before m(p) are made, level p is not reached
(``Perturbation.levels``: ``reached`` < 1).

Only a candidate whose new triple is in the scope or created by another candidate, or whose own triple
another candidate creates, can be skipped: those ("entangled") are decided on the driver in rank order
(:func:`sequential_acceptance`); all other candidates are made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint, with_positions
from kgbrink.graph.hashing import smallest, u64

METHODS = ("RS", "RR", "ER", "ED")
KEYS = ["scope_key", "h", "r", "t"]
LOG_COLUMNS = ["scope_key", "method", "level", "seed", "op_rank", "old_h", "old_r", "old_t", "new_h", "new_r", "new_t"]
DECIDED = [*KEYS, "cand_rank", "new_h", "new_r", "new_t", "noop", "made", "recreates"]
_BROADCAST_ROWS = 1_000_000  # contested or recreated triples met by a broadcast (they are few)


def _new_triple() -> list[Column]:
    """``new_h, new_r, new_t`` as ``h, r, t``."""
    return [F.col(f"new_{c}").alias(c) for c in "hrt"]


def _broadcast_if_small(frame: DataFrame) -> DataFrame:
    """``frame`` marked for a broadcast join when it has at most ``_BROADCAST_ROWS`` rows (one count)."""
    return F.broadcast(frame) if frame.count() <= _BROADCAST_ROWS else frame


def operations_count(method: str, level: float, n: int) -> int:
    """m for ``level`` of a scope with ``n`` triples (RS swaps pairs, so its m is even)."""
    if not 0 < level <= 1:
        raise ValueError(f"perturbation level {level} is outside (0, 1]")
    m = int(level * n + 1e-9)
    return 2 * (m // 2) if method == "RS" else m


def operations_column(method: Column, level: Column, n: Column) -> Column:
    """:func:`operations_count` as a column expression."""
    m = F.floor(level * n + F.lit(1e-9)).cast("long")
    return F.when(method == "RS", F.floor(m / 2).cast("long") * 2).otherwise(m)


def _first_level(method: str, levels: list[float]) -> F.Column:
    """The smallest level whose m exceeds the operation's rank (null: beyond the largest level)."""
    out = F.lit(None).cast("double")
    for level in sorted(levels, reverse=True):
        out = F.when(
            F.col("op_rank") < operations_column(F.lit(method), F.lit(level), F.col("n_scope")), F.lit(level)
        ).otherwise(out)
    return out


@dataclass
class Perturbation:
    """The made operations of one method and seed, and their counts per level summed over the scopes.

    ``changed``: ``scope_key, h, r, t, cand_rank, op_rank, level, n_scope, new_h, new_r, new_t, noop,
    recreates`` (one row per operation up to the largest level; ``op_rank`` its rank among the made
    operations, ``level`` the first level that applies it; ``recreates``: a no-op, or its new triple is a
    triple of the scope, which an earlier operation removed). ``levels``: level -> ``requested`` (m summed
    over scopes), ``operations`` (made), ``noop``, ``skipped`` (candidates passed over before the level's
    last operation, or all of them when it is not reached), ``short_scopes`` (scopes where it is not
    reached) and ``reached`` (operations / requested; 1 when nothing is requested)."""

    changed: DataFrame
    levels: dict[float, dict] = field(default_factory=dict)


def perturbation(
    scoped: DataFrame, method: str, levels: list[float], seed: int, whole_kg: bool, scorer=None
) -> Perturbation:
    """The operations of ``method`` up to the largest level over ``scoped(scope_key, h, r, t)`` (a set per
    scope). Candidates are taken in rounds: first the m of the largest level, then more in the scopes whose
    skipped candidates left them short, until each is reached or has no candidate left."""
    if method not in METHODS:
        raise ValueError(f"unknown perturbation method {method!r} (known: {', '.join(METHODS)})")
    for level in levels:
        operations_count(method, level, 0)  # validates the level
    if method == "RR" and scorer is None:
        raise ValueError("RR needs a triple scorer")
    top = max(levels)
    scoped = scoped.select(*KEYS)
    sizes = {row["scope_key"]: row["n"] for row in scoped.groupBy("scope_key").agg(F.count("*").alias("n")).collect()}
    usable = {k: n - n % 2 if method == "RS" else n for k, n in sizes.items()}
    wanted = {k: operations_count(method, top, n) for k, n in sizes.items()}
    # a margin of 16: a small scope is decided in one round
    limits = {k: min(usable[k], w + 16) if method != "ED" else w for k, w in wanted.items()}
    hashed = scoped.withColumn("_u", u64(seed, F.lit(method), "scope_key", "h", "r", "t"))
    if whole_kg:
        hashed = hashed.transform(checkpoint)
    else:
        order = Window.partitionBy("scope_key").orderBy("_u", "h", "r", "t")
        hashed = hashed.withColumn("cand_rank", (F.row_number().over(order) - 1).cast("long")).transform(checkpoint)
    spark = scoped.sparkSession
    proposed = None  # RR: the scorer's replacements of the candidates so far (a later round adds to them)
    while True:
        if whole_kg:
            (scope,) = limits or ["kg"]
            cands = smallest(hashed, limits.get(scope, 0), "_u", ["h", "r", "t"]).withColumnRenamed(
                "op_rank", "cand_rank"
            )
        else:
            bounds = spark.createDataFrame(sorted(limits.items()), "scope_key string, _limit long")
            cands = hashed.join(F.broadcast(bounds), "scope_key").where(F.col("cand_rank") < F.col("_limit"))
        cands = cands.select(*KEYS, "cand_rank")
        if method == "RR":
            fresh = cands if proposed is None else cands.join(proposed, ["scope_key", "cand_rank"], "left_anti")
            fresh = replace_relations(fresh, scoped, scorer)
            proposed = (fresh if proposed is None else proposed.unionByName(fresh)).transform(checkpoint)
            decided = accept(proposed, scoped)
        else:
            decided = _decide(method, cands, scoped, seed, whole_kg)
        decided = decided.select(*DECIDED).transform(checkpoint)
        if method == "ED":
            made = dict(limits)
            break
        made = decided.where("made").groupBy("scope_key").agg(F.count("*").alias("n")).collect()
        made = {row["scope_key"]: row["n"] for row in made}
        short = [k for k in limits if made.get(k, 0) < wanted[k] and limits[k] < usable[k]]
        if not short:
            break
        for k in short:
            # the candidates still needed at the acceptance rate seen so far, and a margin
            rate = max(made.get(k, 0), 1) / limits[k]
            more = int((wanted[k] - made.get(k, 0)) / rate * 1.25) + 16
            limits[k] = min(usable[k], limits[k] + more + (more % 2 if method == "RS" else 0))
    considered = {k: min(limits[k], usable[k]) for k in limits}
    every_made = all(made.get(k, 0) == considered[k] for k in limits)
    changed = _ranked(decided, sizes, method, levels, whole_kg, every_made)
    changed = changed.transform(checkpoint)
    return Perturbation(changed, _level_counts(changed, method, levels, sizes, considered))


def _decide(method: str, cands: DataFrame, scoped: DataFrame, seed: int, whole_kg: bool) -> DataFrame:
    """``cands(scope_key, h, r, t, cand_rank)`` plus ``new_h, new_r, new_t, noop, made`` (RS, ER, ED)."""
    if method == "ED":
        nothing = F.lit(None).cast("int")
        return cands.select(
            "*",
            nothing.alias("new_h"),
            nothing.alias("new_r"),
            nothing.alias("new_t"),
            F.lit(False).alias("noop"),
            F.lit(True).alias("made"),
            F.lit(False).alias("recreates"),
        )
    if method == "ER":
        return rewire_edges(cands, scoped, seed, whole_kg)
    return accept(swap_relations(cands).transform(checkpoint), scoped)


def replace_relations(cands: DataFrame, scoped: DataFrame, scorer) -> DataFrame:
    """RR: ``cands`` plus ``pair`` (= ``cand_rank``), ``new_h, new_r, new_t, noop``: r' = the scorer's argmin
    over the scope's other relations (r kept, a ``noop``, when the scope has no other)."""
    relations = scoped.select("scope_key", "r").distinct()
    replaced = scorer.replace_relations(cands.withColumnRenamed("cand_rank", "op_rank"), relations)
    new_r = F.coalesce("new_r", "r")
    return replaced.select(
        *KEYS,
        F.col("op_rank").alias("cand_rank"),
        F.col("op_rank").alias("pair"),
        F.col("h").alias("new_h"),
        new_r.alias("new_r"),
        F.col("t").alias("new_t"),
        (new_r == F.col("r")).alias("noop"),
    )


def swap_relations(cands: DataFrame) -> DataFrame:
    """RS: candidates 2i and 2i + 1 of a scope exchange relations (a last unpaired candidate is dropped).
    Adds ``pair, new_h, new_r, new_t, noop`` (the pair leaves the graph as it was)."""
    partner = cands.select(
        "scope_key",
        F.col("cand_rank").bitwiseXOR(F.lit(1)).alias("cand_rank"),
        F.col("h").alias("p_h"),
        F.col("r").alias("p_r"),
        F.col("t").alias("p_t"),
    )
    paired = cands.join(partner, ["scope_key", "cand_rank"])
    same_set = (F.col("r") == F.col("p_r")) | ((F.col("h") == F.col("p_h")) & (F.col("t") == F.col("p_t")))
    return paired.select(
        *KEYS,
        "cand_rank",
        F.shiftright("cand_rank", 1).alias("pair"),
        F.col("h").alias("new_h"),
        F.col("p_r").alias("new_r"),
        F.col("t").alias("new_t"),
        same_set.alias("noop"),
    )


def accept(ops: DataFrame, scoped: DataFrame) -> DataFrame:
    """``ops(scope_key, h, r, t, cand_rank, pair, new_h, new_r, new_t, noop)`` plus ``made``: the pairs (RS)
    or operations (RR: ``pair`` = ``cand_rank``) the sequential rule of the module docstring makes. Only the
    entangled ones reach the driver (:func:`sequential_acceptance`): those creating a contested triple (one
    in the scope, or created by another operation too) or removing one (a triple of the scope some
    operation creates is contested). One aggregation finds the contested triples; ``ops`` (read three
    times: pass it materialized) meets them on the executors holding it, broadcast when few."""
    tagged = scoped.select(*KEYS, F.lit(1).alias("_in"), F.lit(0).alias("_new")).unionByName(
        ops.where(~F.col("noop")).select("scope_key", *_new_triple(), F.lit(0).alias("_in"), F.lit(1).alias("_new"))
    )
    contested = (
        tagged.groupBy(*KEYS)
        .agg(F.max("_in").alias("_in"), F.sum("_new").alias("_makers"))
        .where((F.col("_makers") > 1) | ((F.col("_makers") > 0) & (F.col("_in") == 1)))
        .select(*KEYS, (F.col("_in") == 1).alias("new_in_graph"))
    ).transform(checkpoint)
    contested = _broadcast_if_small(contested)
    as_new = contested.select("scope_key", *[F.col(c).alias(f"new_{c}") for c in "hrt"], "new_in_graph")
    by_new = ops.where(~F.col("noop")).join(as_new, ["scope_key", "new_h", "new_r", "new_t"], "left_semi")
    by_old = ops.join(contested, KEYS, "left_semi")
    entangled = by_new.select("scope_key", "pair").union(by_old.select("scope_key", "pair")).distinct()
    rows = (
        ops.join(F.broadcast(entangled), ["scope_key", "pair"], "left_semi")
        .join(as_new, ["scope_key", "new_h", "new_r", "new_t"], "left")
        .select(*KEYS, "cand_rank", "pair", "new_h", "new_r", "new_t", "noop", "new_in_graph")
        .collect()
    )
    skipped = sequential_acceptance(rows)
    marks = []  # (scope_key, cand_rank, made, recreates) where either differs from (True, noop)
    for row in rows:
        made = (row["scope_key"], row["pair"]) not in skipped
        recreates = made and not row["noop"] and bool(row["new_in_graph"])
        if not made or recreates:
            marks.append((row["scope_key"], row["cand_rank"], made, recreates))
    if not marks:
        return ops.select(*ops.columns, F.lit(True).alias("made"), F.col("noop").alias("recreates"))
    marked = ops.sparkSession.createDataFrame(
        sorted(marks), "scope_key string, cand_rank long, _made boolean, _recreates boolean"
    )
    return ops.join(marked, ["scope_key", "cand_rank"], "left").select(
        *ops.columns,
        F.coalesce("_made", F.lit(True)).alias("made"),
        (F.col("noop") | F.coalesce("_recreates", F.lit(False))).alias("recreates"),
    )


def sequential_acceptance(rows) -> set[tuple[str, int]]:
    """The ``(scope_key, pair)`` skipped among entangled operations (rows with ``scope_key, h, r, t,
    cand_rank, pair, new_h, new_r, new_t, noop, new_in_graph``): in ``cand_rank`` order, a pair is made iff
    none of the triples it creates is present in the graph without the pair's own triples; a made pair
    removes its triples and adds the new ones."""
    pairs: dict[tuple[str, int], list] = {}
    for row in sorted(rows, key=lambda row: (row["scope_key"], row["cand_rank"])):
        pairs.setdefault((row["scope_key"], row["pair"]), []).append(row)
    present: dict[tuple, bool] = {}
    skipped = set()
    for (scope, pair), members in pairs.items():
        if any(row["noop"] for row in members):
            continue  # the graph is left as it was
        olds = {(scope, row["h"], row["r"], row["t"]) for row in members}
        news = []
        for row in members:
            new = (scope, row["new_h"], row["new_r"], row["new_t"])
            present.setdefault(new, bool(row["new_in_graph"]))
            news.append(new)
        if any(present[new] and new not in olds for new in news):
            skipped.add((scope, pair))
            continue
        for old in olds:
            present[old] = False
        for new in news:
            present[new] = True
    return skipped


def rewire_edges(cands: DataFrame, scoped: DataFrame, seed: int, whole_kg: bool) -> DataFrame:
    """ER: ``cands(scope_key, h, r, t, cand_rank)`` plus ``new_h, new_r, new_t, noop, made``: the j-th
    candidate of head h takes element j of a seeded permutation of F(h) (:func:`permuted`); made iff j <
    |F(h)|."""
    nodes = scoped.select("scope_key", F.col("h").alias("node")).union(scoped.select("scope_key", "t")).distinct()
    if whole_kg:
        positioned = with_positions(nodes, ["node"], "pos")
    else:
        by_node = Window.partitionBy("scope_key").orderBy("node")
        positioned = nodes.withColumn("pos", (F.row_number().over(by_node) - 1).cast("long"))
    n_nodes = positioned.groupBy("scope_key").agg(F.count("*").alias("n_nodes"))
    heads = cands.select("scope_key", "h").distinct()
    # every node's neighbours and each head itself, repeats and all (:func:`_rewire_heads` keeps its heads'
    # and drops repeats); in a question subgraph, only the candidates' heads' rows, distinct
    near = (
        scoped.select("scope_key", "h", F.col("t").alias("node"))
        .union(scoped.select("scope_key", F.col("t").alias("h"), F.col("h").alias("node")))
        .union(heads.select("scope_key", "h", F.col("h").alias("node")))
    )
    if not whole_kg:
        near = near.join(heads, ["scope_key", "h"], "left_semi").distinct()
    near = near.join(positioned, ["scope_key", "node"]).select("scope_key", "h", "pos")
    own = cands.join(F.broadcast(n_nodes), "scope_key").select(
        "scope_key", "h", "r", "t", "cand_rank", "n_nodes", u64(seed, F.lit("ER"), "scope_key", "h").alias("key")
    )
    spark = cands.sparkSession
    buckets = int(spark.conf.get("spark.sql.shuffle.partitions")) * 4
    bucket = F.pmod(F.xxhash64("scope_key", "h"), F.lit(buckets)).alias("bucket")
    own = own.select(bucket, *own.columns)
    near = near.toDF("scope_key", "h", "pos").select(bucket, "scope_key", "h", "pos")  # new column ids
    schema = "scope_key string, h int, r int, t int, cand_rank long, made boolean, new_pos long"
    drawn = own.groupBy("bucket").cogroup(near.groupBy("bucket")).applyInPandas(_rewire_heads, schema)
    targets = positioned.select("scope_key", F.col("pos").alias("new_pos"), F.col("node").alias("new_t"))
    return drawn.join(targets, ["scope_key", "new_pos"], "left").select(
        *KEYS,
        "cand_rank",
        F.col("h").alias("new_h"),
        F.col("r").alias("new_r"),
        "new_t",
        F.lit(False).alias("noop"),
        "made",
        F.lit(False).alias("recreates"),  # the target is outside N1(h): the triple is new
    )


def _rewire_heads(own: pd.DataFrame, near: pd.DataFrame) -> pd.DataFrame:
    """The heads of one bucket at once: ``own(scope_key, h, r, t, cand_rank, n_nodes, key)`` and their closed
    neighbourhoods ``near(scope_key, h, pos)`` (other heads' rows and repeats allowed) -> ``scope_key, h, r,
    t, cand_rank, made, new_pos``."""
    if own.empty:  # a bucket of nodes that head no candidate
        empty = own[["scope_key", "h", "r", "t", "cand_rank"]].astype({"h": "int32", "r": "int32", "t": "int32"})
        return empty.assign(made=pd.Series([], dtype=bool), new_pos=pd.Series([], dtype="Int64"))
    own = own.sort_values(["scope_key", "h", "cand_rank"], kind="stable").reset_index(drop=True)
    head = own.groupby(["scope_key", "h"], sort=True).ngroup().to_numpy(np.int64)
    starts = np.flatnonzero(np.r_[True, head[1:] != head[:-1]])
    j = np.arange(len(own)) - starts[head]  # the candidate's rank among its head's
    heads = own.iloc[starts][["scope_key", "h"]].assign(g=np.arange(len(starts)))
    near = near.merge(heads, on=["scope_key", "h"]).drop_duplicates(["g", "pos"]).sort_values(["g", "pos"])
    near_g, near_pos = near["g"].to_numpy(np.int64), near["pos"].to_numpy(np.int64)
    excluded = np.bincount(near_g, minlength=len(starts))
    first = np.r_[0, np.cumsum(excluded)[:-1]]
    n_nodes = own["n_nodes"].to_numpy(np.int64)[starts]
    free = n_nodes - excluded
    made = j < free[head]
    g = head[made]
    index = permuted(j[made], free[g], own["key"].to_numpy(np.int64)[starts][g])
    new_pos = np.full(len(own), -1, np.int64)
    new_pos[made] = _skip_excluded(index, g, near_g, near_pos, first, int(n_nodes.max()) + 1)
    return pd.DataFrame(
        {
            "scope_key": own["scope_key"],
            "h": own["h"],
            "r": own["r"],
            "t": own["t"],
            "cand_rank": own["cand_rank"],
            "made": made,
            "new_pos": _nullable(new_pos, made),
        }
    )


def _skip_excluded(index, g, near_g, near_pos, first, big) -> np.ndarray:
    """The ``index``-th position (0-based) outside the sorted excluded positions of head ``g``: ``index`` plus
    the excluded positions at or below the answer, by one sorted search over every head's gaps."""
    gaps = near_g * big + (near_pos - (np.arange(len(near_g)) - first[near_g]))  # non-decreasing
    return index + np.searchsorted(gaps, g * big + index, side="right") - first[g]


_U64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN = 0x9E3779B97F4A7C15


def _nullable(values: np.ndarray, valid: np.ndarray) -> pd.Series:
    out = pd.Series(values, dtype="Int64")
    out[~valid] = pd.NA
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def permuted(j, size, key) -> np.ndarray:
    """Element ``j`` (0 <= j < size) of a permutation of range(size) seeded by ``key``, elementwise over
    arrays: a 4-round Feistel network on the smallest even number of bits that holds ``size`` (cycle walking
    back into range), then a rotation by a seeded offset, so each element is uniform over range(size)."""
    j = np.atleast_1d(np.asarray(j, np.int64)).astype(np.uint64)
    size = np.broadcast_to(np.asarray(size, np.int64), j.shape)
    key = np.broadcast_to(np.asarray(key, np.int64), j.shape).astype(np.uint64)
    out = np.zeros(len(j), np.int64)
    wide = size > 1
    x, n, k = j[wide], size[wide].astype(np.uint64), key[wide]
    bits = np.floor(np.log2((size[wide] - 1).astype(np.float64))).astype(np.int64) + 1
    half = np.maximum(1, (bits + 1) // 2).astype(np.uint64)
    mask = (np.uint64(1) << half) - np.uint64(1)
    rounds = [_mix(k + np.uint64(i * _GOLDEN & _U64)) for i in range(1, 6)]

    def encrypt(x, half, mask, keys):
        left, right = x >> half, x & mask
        for round_key in keys:
            left, right = right, left ^ (_mix(right ^ round_key) & mask)
        return (left << half) | right

    x = encrypt(x, half, mask, rounds[:4])
    outside = np.flatnonzero(x >= n)
    while len(outside):
        x[outside] = encrypt(x[outside], half[outside], mask[outside], [r[outside] for r in rounds[:4]])
        outside = outside[x[outside] >= n[outside]]
    out[wide] = ((x + rounds[4] % n) % n).astype(np.int64)
    return out


def _ranked(
    decided: DataFrame, sizes: dict, method: str, levels: list[float], whole_kg: bool, every_made: bool
) -> DataFrame:
    """The made operations of ``decided`` with ``op_rank`` (rank among them), ``n_scope`` and ``level``, up
    to the largest. In the whole KG, op_rank = cand_rank - the skipped candidates below it, when those are
    few enough to reach every task; else (and per question subgraph) a numbering of the made ones."""
    spark = decided.sparkSession
    made = decided.where("made").drop("made")
    skipped = None
    if whole_kg and not every_made:
        ranks = decided.where(~F.col("made")).select("cand_rank").limit(_BROADCAST_ROWS + 1).toPandas()
        if len(ranks) <= _BROADCAST_ROWS:
            skipped = np.sort(ranks["cand_rank"].to_numpy(np.int64))
    if every_made:  # no candidate skipped: the ranks are the candidates'
        ranked = made.withColumn("op_rank", F.col("cand_rank"))
    elif skipped is not None:
        ranked = made.withColumn("op_rank", _minus_below(skipped)("cand_rank"))
    elif whole_kg:
        ranked = with_positions(made, ["cand_rank"], "op_rank")
    else:
        ranked = made.withColumn(
            "op_rank", (F.row_number().over(Window.partitionBy("scope_key").orderBy("cand_rank")) - 1).cast("long")
        )
    n_scope = spark.createDataFrame(sorted(sizes.items()), "scope_key string, n_scope long")
    ranked = ranked.join(F.broadcast(n_scope), "scope_key").withColumn("level", _first_level(method, levels))
    return ranked.where(F.col("level").isNotNull()).select(
        *KEYS, "cand_rank", "op_rank", "level", "n_scope", "new_h", "new_r", "new_t", "noop", "recreates"
    )


def _minus_below(sorted_values: np.ndarray):
    """A pandas UDF: x minus the number of ``sorted_values`` below x."""

    @F.pandas_udf("long")
    def minus_below(x: pd.Series) -> pd.Series:
        values = x.to_numpy(np.int64)
        return pd.Series(values - np.searchsorted(sorted_values, values, side="left"))

    return minus_below


def _level_counts(changed: DataFrame, method: str, levels: list[float], sizes: dict, considered: dict) -> dict:
    per = changed.groupBy("scope_key", "level").agg(
        F.count("*").alias("n"), F.sum(F.col("noop").cast("int")).alias("noop"), F.max("cand_rank").alias("last")
    )
    found: dict[str, dict] = {}
    for row in per.collect():
        found.setdefault(row["scope_key"], {})[row["level"]] = (row["n"], row["noop"], row["last"])
    out = {}
    for level in sorted(levels):
        totals = dict(requested=0, operations=0, noop=0, skipped=0, short_scopes=0)
        for scope, n in sizes.items():
            mine = [v for lv, v in found.get(scope, {}).items() if lv <= level]
            wanted, ops = operations_count(method, level, n), sum(v[0] for v in mine)
            totals["requested"] += wanted
            totals["operations"] += ops
            totals["noop"] += sum(v[1] for v in mine)
            if ops < wanted:
                totals["short_scopes"] += 1
                totals["skipped"] += considered[scope] - ops
            elif mine:
                totals["skipped"] += max(v[2] for v in mine) + 1 - ops
        totals["reached"] = totals["operations"] / totals["requested"] if totals["requested"] else 1.0
        out[float(level)] = totals
    return out


def apply_level(scoped: DataFrame, changed: DataFrame, level: float) -> DataFrame:
    """``scope_key, h, r, t`` of the perturbed graph at ``level``: the scope without the triples of the
    operations up to that level, plus their new triples (null for ED), as a set."""
    ops = changed.where(F.col("level") <= level)
    kept = scoped.join(ops.select(*KEYS), KEYS, "left_anti")
    new = ops.where(F.col("new_h").isNotNull()).select("scope_key", *_new_triple())
    return kept.select(*KEYS).unionByName(new).distinct()


def nested_graphs(scoped: DataFrame, changed: DataFrame, levels: list[float], method: str) -> DataFrame:
    """``scope_key, h, r, t, split, original, levels``: the original and every perturbed graph of one
    (method, seed) in one table. ``original``: the row is a triple of the original graph with its input split;
    ``levels`` (ascending): the levels whose perturbed graph holds it.

    Each triple of the scope is joined once to its operation: below the operation's level it stays, from
    it on it becomes the new triple (none for ED), with the split of the triple it replaces. A triple that an
    operation removes and a later one creates again is one row when both carry the same split, else two rows
    with disjoint levels: no triple is in one graph twice, and an untouched triple keeps its split at every
    level. Per level this equals :func:`apply_level`; at most 2 |T| rows instead of |levels| |T|. ``scoped``
    may lack ``split`` (then null)."""
    split = F.col("split") if "split" in scoped.columns else F.lit(None).cast("string")
    hinted = "recreates" in changed.columns
    recreates = F.col("recreates") if hinted else F.lit(True)
    ops = changed.select(*KEYS, F.col("level").alias("op_level"), "new_h", "new_r", "new_t", recreates.alias("_meets"))
    marked = scoped.select(*KEYS, split.alias("split")).join(ops, KEYS, "left")
    every = F.array(*[F.lit(float(x)) for x in sorted(levels)])
    op_level = F.col("op_level")
    old = marked.select(
        *KEYS,
        "split",
        F.lit(True).alias("original"),
        F.filter(every, lambda x: op_level.isNull() | (x < op_level)).alias("levels"),
    )
    if method == "ED":  # a subset of a set: nothing can collapse
        return old
    new = marked.where(F.col("new_h").isNotNull()).select(
        "scope_key",
        *_new_triple(),
        "split",
        F.lit(False).alias("original"),
        F.filter(every, lambda x: x >= op_level).alias("levels"),
        "_meets",
    )
    if not hinted:
        return _collapsed(old.unionByName(new.drop("_meets")))
    # new triples are distinct, so a row meets another only where an operation recreates a triple of the
    # scope (``recreates``): those rows alone are grouped
    again = changed.where("recreates").select("scope_key", *_new_triple(), F.lit(True).alias("_meets"))
    again = _broadcast_if_small(again)  # a filter of ``changed``, which is materialized
    rows = old.join(again, KEYS, "left").unionByName(new)
    alone = rows.where(F.col("_meets").isNull() | ~F.col("_meets")).drop("_meets")
    return alone.unionByName(_collapsed(rows.where("_meets").drop("_meets")))


def _collapsed(rows: DataFrame) -> DataFrame:
    """One row per triple and split of :func:`nested_graphs`' rows: ``original`` if any is, the levels of all."""
    return (
        rows.groupBy(*KEYS, "split")
        .agg(
            F.max("original").alias("original"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("levels")))).alias("levels"),
        )
        .select(*KEYS, "split", "original", "levels")
    )


def at_level(nested: DataFrame, level: float) -> DataFrame:
    """The rows of :func:`nested_graphs` (or of the ``perturbed`` table) in the graph at ``level``."""
    return nested.where(F.array_contains("levels", float(level)))


def per_level(nested: DataFrame) -> DataFrame:
    """One row per (level, triple) of every perturbed graph in ``nested`` (without ``levels`` and
    ``original``): the graphs one by one, as :func:`apply_level` gives them."""
    rest = [c for c in nested.columns if c not in ("levels", "original")]
    return nested.select(F.explode("levels").alias("level"), *rest)


def log_rows(changed: DataFrame, method: str, seed: int) -> DataFrame:
    """The perturbation log: one row per made operation up to the largest level (``level`` = the first
    level that applies it, ``op_rank`` its rank among the made operations)."""
    return changed.select(
        "scope_key",
        F.lit(method).alias("method"),
        "level",
        F.lit(seed).alias("seed"),
        "op_rank",
        F.col("h").alias("old_h"),
        F.col("r").alias("old_r"),
        F.col("t").alias("old_t"),
        "new_h",
        "new_r",
        "new_t",
    )
