"""KG perturbations of OKGQA-P (paper 004 Sec. 3.2; spec Sec. 4.B), deterministic and nested across levels.

Triples in scope carry a ``scope_key`` (a question's ``qid``, or ``"kg"`` for the whole KG). Per method the
operations are the triples of a scope ordered by ``u64(seed, method, scope_key, h, r, t)``; level p takes
the first m(p) of them, so the triples perturbed at 0.2 are a subset of those at 0.4 (common random
numbers across levels; the authors' code draws afresh per call, with replacement for RS and RR):

- RS: m = 2 floor(p |T| / 2); operations 2i and 2i + 1 swap their relations (``noop`` when equal);
- RR: m = floor(p |T|); r' = argmin over the scope's relations r' != r of s_G(h, r', t), ties broken by
  a seeded draw (:mod:`kgbrink.okgqa.scorers`);
- ER: m = floor(p |T|); t is replaced by v3, the first of ``er_candidates`` seeded uniform draws over the
  scope's nodes outside the closed 1-hop neighbourhood N1(h) of the ORIGINAL scope graph (the code
  recomputes N1 on the graph being perturbed; simultaneous choice is what makes the result independent
  of processing order); an operation whose draws all fall in N1(h) is a rejection and changes nothing;
- ED: m = floor(p |T|); the triples are removed.

Triples are a set: a new triple equal to another triple of the perturbed graph collapses with it, and is
counted as a ``collision`` (|T'| = |T| - collisions for RS, RR and ER).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint, with_positions
from kgbrink.graph.hashing import smallest, u64, uniform

METHODS = ("RS", "RR", "ER", "ED")
LOG_COLUMNS = ["scope_key", "method", "level", "seed", "op_rank", "old_h", "old_r", "old_t", "new_h", "new_r", "new_t"]


def operations_count(method: str, level: float, n: int) -> int:
    """m for ``level`` of a scope with ``n`` triples (RS swaps pairs, so its m is even)."""
    if not 0 < level <= 1:
        raise ValueError(f"perturbation level {level} is outside (0, 1]")
    m = int(level * n + 1e-9)
    return 2 * (m // 2) if method == "RS" else m


def _m_column(method: str, level: float, n: F.Column) -> F.Column:
    m = F.floor(F.lit(level) * n + F.lit(1e-9)).cast("long")
    return F.floor(m / 2).cast("long") * 2 if method == "RS" else m


def _first_level(method: str, levels: list[float]) -> F.Column:
    """The smallest level whose m exceeds the operation's rank (null: beyond the largest level)."""
    out = F.lit(None).cast("double")
    for level in sorted(levels, reverse=True):
        out = F.when(F.col("op_rank") < _m_column(method, level, F.col("n_scope")), F.lit(level)).otherwise(out)
    return out


def choose_operations(scoped: DataFrame, method: str, levels: list[float], seed: int, whole_kg: bool) -> DataFrame:
    """``scope_key, h, r, t, op_rank, level, n_scope``: the triples the largest level perturbs, each with
    its rank in the hash order and the first level that includes it."""
    n_scope = scoped.groupBy("scope_key").agg(F.count("*").alias("n_scope"))
    hashed = scoped.withColumn("_u", u64(seed, F.lit(method), "scope_key", "h", "r", "t"))
    if whole_kg:
        total = n_scope.first()["n_scope"] if not n_scope.isEmpty() else 0
        chosen = smallest(hashed, operations_count(method, max(levels), total), "_u", ["h", "r", "t"])
    else:
        order = Window.partitionBy("scope_key").orderBy("_u", "h", "r", "t")
        chosen = hashed.withColumn("op_rank", (F.row_number().over(order) - 1).cast("long"))
    chosen = chosen.join(F.broadcast(n_scope), "scope_key")
    return chosen.withColumn("level", _first_level(method, levels)).where(F.col("level").isNotNull()).drop("_u")


def swap_relations(ops: DataFrame) -> DataFrame:
    """RS: operations 2i and 2i + 1 of a scope exchange relations. ``new_*`` columns added."""
    partner = ops.select(
        "scope_key",
        F.col("op_rank").bitwiseXOR(F.lit(1)).alias("op_rank"),
        F.col("r").alias("new_r"),
        F.col("level").alias("partner_level"),
    )
    paired = ops.join(partner, ["scope_key", "op_rank"])
    # both ends of a pair share the pair's level (the larger of the two, m being even)
    return paired.select(
        "scope_key",
        "h",
        "r",
        "t",
        "op_rank",
        F.greatest("level", "partner_level").alias("level"),
        "n_scope",
        F.col("h").alias("new_h"),
        "new_r",
        F.col("t").alias("new_t"),
    )


def delete_edges(ops: DataFrame) -> DataFrame:
    """ED: no new triple."""
    nothing = F.lit(None).cast("int")
    return ops.select("*", nothing.alias("new_h"), nothing.alias("new_r"), nothing.alias("new_t"))


def rewire_edges(ops: DataFrame, scoped: DataFrame, seed: int, candidates: int, whole_kg: bool) -> DataFrame:
    """ER: ``new_t`` = the first of ``candidates`` seeded draws over the scope's nodes not in N1(h) of the
    original scope graph; all-rejected operations keep their triple (``new_*`` = old, ``rejected`` true)."""
    nodes = (
        scoped.select("scope_key", F.col("h").alias("node")).union(scoped.select("scope_key", F.col("t"))).distinct()
    )
    if whole_kg:
        positioned = with_positions(nodes, ["node"], "pos")
    else:
        by_node = Window.partitionBy("scope_key").orderBy("node")
        positioned = nodes.withColumn("pos", (F.row_number().over(by_node) - 1).cast("long"))
    n_nodes = positioned.groupBy("scope_key").agg(F.count("*").alias("n_nodes"))
    near = (
        scoped.select("scope_key", F.col("h").alias("a"), F.col("t").alias("b"))
        .union(scoped.select("scope_key", F.col("t"), F.col("h")))
        .distinct()
    )
    pending = ops.join(F.broadcast(n_nodes), "scope_key")  # one row per scope: never a one-key shuffle
    done = []
    for k in range(candidates):
        draw = F.floor(uniform(u64(seed, F.lit("ER"), F.lit(k), "scope_key", "h", "r", "t")) * F.col("n_nodes"))
        drawn = pending.withColumn("pos", draw.cast("long")).join(positioned, ["scope_key", "pos"]).drop("pos")
        outside = drawn.where(F.col("node") != F.col("h")).join(
            near.withColumnRenamed("a", "h").withColumnRenamed("b", "node"), ["scope_key", "h", "node"], "left_anti"
        )
        done.append(outside.withColumnRenamed("node", "new_t").drop("n_nodes"))
        pending = pending.join(outside.select("scope_key", "op_rank"), ["scope_key", "op_rank"], "left_anti")
        pending = pending.transform(checkpoint)
        if pending.isEmpty():
            break
    chosen = reduce(DataFrame.unionByName, done)
    chosen = chosen.select("*", F.col("h").alias("new_h"), F.col("r").alias("new_r"), F.lit(False).alias("rejected"))
    rejected = pending.drop("n_nodes").select(
        "*",
        F.col("h").alias("new_h"),
        F.col("r").alias("new_r"),
        F.col("t").alias("new_t"),
        F.lit(True).alias("rejected"),
    )
    return chosen.unionByName(rejected)


def apply_level(scoped: DataFrame, changed: DataFrame, level: float) -> DataFrame:
    """``scope_key, h, r, t`` of the perturbed graph at ``level``: the scope without the triples of the
    operations up to that level, plus their new triples (null for ED), as a set."""
    ops = changed.where(F.col("level") <= level)
    kept = scoped.join(ops.select("scope_key", "h", "r", "t"), ["scope_key", "h", "r", "t"], "left_anti")
    new = ops.where(F.col("new_h").isNotNull()).select(
        "scope_key", F.col("new_h").alias("h"), F.col("new_r").alias("r"), F.col("new_t").alias("t")
    )
    return kept.select("scope_key", "h", "r", "t").unionByName(new).distinct()


def nested_graphs(scoped: DataFrame, changed: DataFrame, levels: list[float], method: str) -> DataFrame:
    """``scope_key, h, r, t, split, original, levels``: the original and every perturbed graph of one
    (method, seed) in one table. A row is a triple of the union; ``original`` says whether it is in the
    original graph and ``levels`` (ascending) the levels whose perturbed graph contains it.

    Each triple of the scope is joined once to its operation: below the operation's level it stays, from
    it on it becomes the new triple (none for ED). Per level this equals :func:`apply_level` (a triple that
    collapses with another is one row, with the smaller split of the two). Every operation switches one
    triple once, so the table holds at most 2 |T| rows instead of |levels| |T|. ``scoped`` may lack
    ``split`` (then null)."""
    keys = ["scope_key", "h", "r", "t"]
    split = F.col("split") if "split" in scoped.columns else F.lit(None).cast("string")
    ops = changed.select(*keys, F.col("level").alias("op_level"), "new_h", "new_r", "new_t")
    marked = scoped.select(*keys, split.alias("split")).join(ops, keys, "left")
    every = F.array(*[F.lit(float(x)) for x in sorted(levels)])
    op_level = F.col("op_level")
    old = marked.select(
        *keys,
        "split",
        F.lit(True).alias("original"),
        F.filter(every, lambda x: op_level.isNull() | (x < op_level)).alias("levels"),
    )
    if method == "ED":  # a subset of a set: nothing can collapse
        return old
    new = marked.where(F.col("new_h").isNotNull()).select(
        "scope_key",
        *[F.col(f"new_{c}").alias(c) for c in ("h", "r", "t")],
        "split",
        F.lit(False).alias("original"),
        F.filter(every, lambda x: x >= op_level).alias("levels"),
    )
    return (
        old.unionByName(new)
        .groupBy(*keys)
        .agg(
            F.min("split").alias("split"),
            F.max("original").alias("original"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("levels")))).alias("levels"),
        )
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
    """The perturbation log: one row per operation up to the largest level (``level`` = the first level
    that applies it)."""
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


def perturbation(
    scoped: DataFrame,
    method: str,
    levels: list[float],
    seed: int,
    whole_kg: bool,
    scorer=None,
    er_candidates: int = 8,
) -> DataFrame:
    """The operations of ``method`` up to the largest level over ``scoped(scope_key, h, r, t)``:
    ``scope_key, h, r, t, op_rank, level, n_scope, new_h, new_r, new_t, noop`` (``noop``: the operation
    leaves its triple as it was: an RS swap of equal relations, an ER rejection, an RR scope with a
    single relation)."""
    if method not in METHODS:
        raise ValueError(f"unknown perturbation method {method!r} (known: {', '.join(METHODS)})")
    for level in levels:
        operations_count(method, level, 0)  # validates the level
    ops = choose_operations(scoped, method, levels, seed, whole_kg).transform(checkpoint)
    if method == "RS":
        changed = swap_relations(ops)
    elif method == "ED":
        changed = delete_edges(ops)
    elif method == "ER":
        changed = rewire_edges(ops, scoped, seed, er_candidates, whole_kg).drop("rejected")
    else:
        if scorer is None:
            raise ValueError("RR needs a triple scorer")
        relations = scoped.select("scope_key", "r").distinct()
        changed = scorer.replace_relations(ops, relations)
        changed = changed.select(
            *ops.columns, F.col("h").alias("new_h"), F.coalesce("new_r", "r").alias("new_r"), F.col("t").alias("new_t")
        )
    noop = F.col("new_h").isNotNull() & (F.col("new_h") == F.col("h")) & (F.col("new_r") == F.col("r"))
    noop = noop & (F.col("new_t") == F.col("t"))
    return changed.select(*ops.columns, "new_h", "new_r", "new_t", F.coalesce(noop, F.lit(False)).alias("noop"))
