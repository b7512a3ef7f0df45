"""Supports, body sizes and PCA body sizes of every rule of a shape, on Spark (AMIE3's measures, defined
in :mod:`kgbrink.rules.mining`; plans from :mod:`kgbrink.rules.plan`).

Supports are computed from the head facts outwards, never from the body: a binding table starts as the
facts of every head relation and each body atom is joined on the variables already bound. When all facts
go through one plan (a single start atom, no buckets), after each step the prefix rule's support, an upper
bound of every extension's support (anti-monotone), is counted and assignments below the head-coverage /
support threshold are dropped before the next join (a count over part of the facts is no bound, so split
plans skip it; only 3-atom bodies have such prefixes).

Per-entity degree totals give every fact's endpoint degrees, and each fact starts from the endpoint with
fewer edges in the atom's role, so the work is Sum over facts of min(d(x), d(y)) rather than of d(x) or
d(y): the facts of P31 (instance of) expand from the instance (one class), never from the class (a million
instances). On the 20M generated KG that is 1.0e9 rows against 9.9e9 from x and 1.9e12 from y. When a
shape's expansion exceeds ``rows_per_batch`` its facts are cut into hash buckets of the head pair whose
partial support counts are persisted and summed, so memory and shuffle stay bounded; remaining skew on hub
keys is split by Spark's adaptive skew-join handling.

Body sizes are computed only for closed rules that passed head-coverage pruning, once per distinct body
(shared across head relations); a body pair counts towards the PCA body size when the head relation has
a fact with the pair's entity in the functional variable's role.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import time
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.files import write_parquet
from kgbrink.rules.plan import (
    Shape,
    X,
    Y,
    atom_order,
    body_atom_order,
    expanding_head_atoms,
    join_atom,
    needed_later,
    single_atom_table,
    single_pattern,
    slot_column,
    slot_constraints,
    var_column,
)

if TYPE_CHECKING:
    from kgbrink.rules.params import MiningParams

LOG = logging.getLogger(__name__)


# --- supports -------------------------------------------------------------------------------------------


def _recursivity_ok(shape: Shape, limit: int):
    """At most ``limit`` occurrences of any relation in the rule (head included)."""
    slots = ["r"] + [slot_column(k) for k in range(len(shape.atoms))]
    if len(slots) <= limit:
        return F.lit(True)
    conds = []
    for combo in itertools.combinations(slots, limit + 1):
        conds.append(reduce(lambda a, b: a & b, [F.col(combo[0]) == F.col(c) for c in combo[1:]]))
    return ~reduce(lambda a, b: a | b, conds)


@dataclass(frozen=True)
class SupportInputs:
    """What every support computation joins: ``head_facts`` (``r, v0, v1`` with endpoint degrees ``out0,
    in0, out1, in1``), ``edges``, ``thresholds`` (``r, min_count``: the smallest support with head
    coverage >= min_head_coverage and support >= min_support), ``singles`` (``r, subject, object, a``: the
    one-atom patterns that passed, used to prune atoms touching x or y as they are joined)."""

    head_facts: DataFrame
    edges: DataFrame
    thresholds: DataFrame
    singles: DataFrame
    params: MiningParams


def shape_supports(shape: Shape, inputs: SupportInputs, relations: list[int], passing: bool = True) -> DataFrame:
    """``r, a0 .. a{n-1}, support`` for every assignment of ``shape`` (``passing``: only those) whose
    support passes ``inputs.thresholds``, for the head relations ``relations`` (``passing`` off: the raw
    counts, e.g. of one bucket of the head facts).

    ``head_facts`` carries each fact's endpoint degrees (``out0, in0, out1, in1``); every fact starts from
    the expanding atom on x or y whose endpoint has the fewest edges in that role, so a fact between a
    hub and a rare entity is expanded from the rare one (work Sum over facts of min(d(x), d(y)))."""
    edges, singles, params = inputs.edges, inputs.singles, inputs.params
    facts = inputs.head_facts.filter(F.col("r").isin(relations))
    expanding = expanding_head_atoms(shape)
    if expanding:
        costs = [_endpoint_degree(shape.atoms[k]) for k in expanding]
        choice = F.lit(expanding[-1])
        for k, cost in reversed(list(zip(expanding[:-1], costs[:-1]))):
            choice = F.when(
                reduce(lambda a, b: a & b, [cost <= other for other in costs if other is not cost]), F.lit(k)
            ).otherwise(choice)
        facts = facts.withColumn("_start", choice)
        groups = [(k, facts.filter(F.col("_start") == k)) for k in expanding]
    else:
        groups = [(None, facts)]
    # a prefix's support counted over part of the facts (one start group, one bucket) is only part of its
    # support, so the threshold may prune prefixes only when every fact goes through this one plan
    prune_prefixes = passing and len(groups) == 1
    results = []
    for first, start_facts in groups:
        order = atom_order(shape, first)
        bindings = start_facts.select("r", "v0", "v1")
        bound = {X, Y}
        done: list[int] = []
        for position, k in enumerate(order):
            atom = shape.atoms[k]
            pattern = single_pattern(atom)
            allowed = None
            if pattern is not None:
                allowed = singles.filter((F.col("subject") == pattern[0]) & (F.col("object") == pattern[1])).select(
                    "r", F.col("a").alias(slot_column(k))
                )
            bindings = join_atom(
                bindings, edges, atom, k, bound, allowed, ["r"], broadcast_edges=params.broadcast_edges
            )
            for cond in slot_constraints(shape, done, k):
                bindings = bindings.filter(cond)
            done.append(k)
            bound |= set(atom)
            keep = [var_column(v) for v in sorted(needed_later(shape, order, position) & bound)]
            slots = [slot_column(j) for j in sorted(done)]
            dropped = len(keep) < len(bound)
            bindings = bindings.select("r", *slots, *keep)
            if dropped:  # joins of distinct rows on distinct edges stay distinct until a variable is dropped
                bindings = bindings.distinct()
            if prune_prefixes and len(done) >= 2 and position < len(order) - 1:
                prefix = bindings.groupBy("r", *slots).agg(F.countDistinct("v0", "v1").alias("support"))
                prefix_passing = prefix.join(F.broadcast(inputs.thresholds), "r").filter(
                    F.col("support") >= F.col("min_count")
                )
                bindings = bindings.join(prefix_passing.select("r", *slots), ["r", *slots], "left_semi")
        results.append(bindings.filter(_recursivity_ok(shape, params.recursivity_limit)))
    # each fact is in exactly one start group, so the groups' distinct (v0, v1) rows are disjoint
    slots = [slot_column(j) for j in range(len(shape.atoms))]
    counts = reduce(DataFrame.unionByName, results).groupBy("r", *slots).agg(F.count(F.lit(1)).alias("support"))
    return _passing(counts, inputs.thresholds, slots) if passing else counts


def _passing(counts: DataFrame, thresholds: DataFrame, slots: list[str]) -> DataFrame:
    return (
        counts.join(F.broadcast(thresholds), "r")
        .filter(F.col("support") >= F.col("min_count"))
        .select("r", *slots, "support")
    )


def batched_shape_supports(
    shape: Shape, inputs: SupportInputs, relations: list[int], work_dir: str | None
) -> DataFrame:
    """:func:`shape_supports` with bounded memory and disk: when the expansion (Sum over facts of the
    smaller endpoint degree) exceeds ``rows_per_batch``, the facts are cut into buckets by a hash of the
    head pair, each bucket's support counts are written under ``work_dir`` (a bucket's facts are its own,
    so the counts add up), and the sums are thresholded at the end."""
    expanding = expanding_head_atoms(shape)
    slots = [slot_column(k) for k in range(len(shape.atoms))]
    if not expanding or work_dir is None:
        return shape_supports(shape, inputs, relations)
    costs = [_endpoint_degree(shape.atoms[k]) for k in expanding]
    cost = F.least(*costs) if len(costs) > 1 else costs[0]
    facts = inputs.head_facts.filter(F.col("r").isin(relations))
    rows = facts.agg(F.sum(cost)).collect()[0][0] or 0
    buckets = math.ceil(rows / inputs.params.rows_per_batch)
    if buckets <= 1:
        return shape_supports(shape, inputs, relations)
    LOG.info("shape %s: about %.3g expanded rows, %d buckets", shape.atoms, rows, buckets)
    directory = f"{work_dir.rstrip('/')}/shape-" + "-".join(f"{s}{o}" for s, o in shape.atoms)
    for b in range(buckets):
        started = time.perf_counter()
        part = facts.filter(F.pmod(F.xxhash64("v0", "v1"), F.lit(buckets)) == b)
        counts = shape_supports(shape, dataclasses.replace(inputs, head_facts=part), relations, passing=False)
        write_parquet(counts, f"{directory}/bucket={b}")
        LOG.info("shape %s: bucket %d/%d, %.1f s", shape.atoms, b + 1, buckets, time.perf_counter() - started)
    partials = facts.sparkSession.read.parquet(directory).drop("bucket")
    return _passing(partials.groupBy("r", *slots).agg(F.sum("support").alias("support")), inputs.thresholds, slots)


def _endpoint_degree(atom: tuple[int, int]):
    """The bound endpoint's degree in the atom's role: out-degree when the head variable is the subject."""
    s, o = atom
    return F.col(f"out{s}") if s in (X, Y) else F.col(f"in{o}")


def min_support_count(facts: int, params: MiningParams) -> int:
    """Smallest support a rule with a head relation of ``facts`` facts needs: AMIE3's
    ``ceil(min_head_coverage * facts)`` (the same double arithmetic), and ``min_support``. AMIE3 applies
    its ``-mins`` only when pruning by support instead of head coverage; kgbrink applies both thresholds,
    and ``min_support`` defaults to 0 so that the default equals AMIE3's head-coverage pruning."""
    return max(math.ceil(params.min_head_coverage * facts), params.min_support, 1)


def shape_head_relations(shape: Shape, relations: list[int], survivors: dict) -> list[int]:
    """Head relations for which every atom of ``shape`` touching x or y has a surviving relation (else no
    rule of the shape can pass)."""
    patterns = [single_pattern(a) for a in shape.atoms]
    return [r for r in relations if all(p is None or survivors.get((r, p)) for p in patterns)]


def support_inputs(
    edges: DataFrame, degrees: DataFrame, thresholds: DataFrame, heads: list[int], params: MiningParams
) -> tuple[SupportInputs, dict]:
    """The cached :class:`SupportInputs` of the head relations ``heads`` and the one-atom patterns that
    pass, ``{(r, (subject, object)): [body relations]}``
    (:func:`~kgbrink.rules.plan.single_atom_table`, driver-side)."""
    spark = edges.sparkSession
    totals = degrees.groupBy("entity").agg(F.sum("out_deg").alias("out"), F.sum("in_deg").alias("in"))
    head_facts = (
        edges.filter(F.col("rel").isin(heads))
        .select(F.col("rel").alias("r"), F.col("s").alias("v0"), F.col("o").alias("v1"))
        .join(totals.select(F.col("entity").alias("v0"), F.col("out").alias("out0"), F.col("in").alias("in0")), "v0")
        .join(totals.select(F.col("entity").alias("v1"), F.col("out").alias("out1"), F.col("in").alias("in1")), "v1")
        .cache()
    )
    single_rows = (
        single_atom_table(edges, head_facts, degrees)
        .join(F.broadcast(thresholds), "r")
        .filter(F.col("support") >= F.col("min_count"))
        .collect()
    )
    survivors: dict = {}
    for row in single_rows:
        survivors.setdefault((row["r"], (row["subject"], row["object"])), []).append(row["a"])
    singles = spark.createDataFrame(
        [(r, p[0], p[1], a) for (r, p), rels in survivors.items() for a in rels],
        "r int, subject int, object int, a int",
    )
    return SupportInputs(head_facts, edges, thresholds, singles.cache(), params), survivors


# --- body sizes -----------------------------------------------------------------------------------------


def path_middle(shape: Shape) -> int | None:
    """The fresh variable two body atoms share, for the two-atom chain shapes x - z - y (else None)."""
    if len(shape.atoms) != 2:
        return None
    shared = set(shape.atoms[0]) & set(shape.atoms[1]) - {X, Y}
    return next(iter(shared)) if shared else None


def path_estimates(shape: Shape, bodies: DataFrame, degrees: DataFrame) -> DataFrame:
    """For a chain shape and each body ``a0, a1``: ``paths`` = Sum_z d0(z) d1(z) (rows the join on the
    middle variable z produces) and ``lower_bound`` = max_z d0(z) d1(z), a lower bound of the distinct
    (x, y) pairs (for one z all pairs are distinct)."""
    z = path_middle(shape)
    sides = []
    for k, (s, _o) in enumerate(shape.atoms):
        column = "out_deg" if s == z else "in_deg"
        rels = bodies.select(F.col(slot_column(k)).alias("rel")).distinct()
        sides.append(
            degrees.join(F.broadcast(rels), "rel")
            .filter(F.col(column) > 0)
            .select("entity", F.col("rel").alias(slot_column(k)), F.col(column).alias(f"d{k}"))
        )
    product = F.col("d0").cast("double") * F.col("d1")
    return (
        sides[0]
        .join(sides[1], "entity")
        .join(F.broadcast(bodies), [slot_column(0), slot_column(1)], "left_semi")
        .groupBy(slot_column(0), slot_column(1))
        .agg(F.sum(product).alias("paths"), F.max(product).alias("lower_bound"))
    )


def body_pairs(shape: Shape, bodies: DataFrame, edges: DataFrame) -> DataFrame:
    """``a0 .. a{n-1}, v0, v1``: the distinct head-variable pairs satisfying each body in ``bodies``."""
    order = body_atom_order(shape)
    slots_all = [slot_column(k) for k in range(len(shape.atoms))]
    first = order[0]
    s, o = shape.atoms[first]
    rels = bodies.select(F.col(slot_column(first)).alias("rel")).distinct()
    bindings = edges.join(F.broadcast(rels), "rel").select(
        F.col("rel").alias(slot_column(first)), F.col("s").alias(var_column(s)), F.col("o").alias(var_column(o))
    )
    bound, done = {s, o}, [first]
    for position, k in enumerate(order[1:], start=1):
        previous = [slot_column(j) for j in sorted(done)]
        allowed = bodies.select(*previous, slot_column(k)).distinct()
        bindings = join_atom(bindings, edges, shape.atoms[k], k, bound, allowed, previous)
        for cond in slot_constraints(shape, done, k, head=False):
            bindings = bindings.filter(cond)
        done.append(k)
        bound |= set(shape.atoms[k])
        slots = [slot_column(j) for j in sorted(done)]
        keep = [var_column(v) for v in sorted(needed_later(shape, order, position) & bound)]
        bindings = bindings.select(*slots, *keep)
        if len(keep) < len(bound):
            bindings = bindings.distinct()
    return bindings.select(*slots_all, "v0", "v1")


def body_sizes(
    shape: Shape, candidates: DataFrame, bodies: DataFrame, edges: DataFrame, domains: DataFrame
) -> DataFrame:
    """``r, a.., body_size, pca_body_size`` for the candidate rules of ``shape`` (``r, a.., support,
    functional_var``) whose body is in ``bodies`` (``a..``).

    ``domains`` (``r, entity``): for every head relation the subjects (functional variable 0) or objects
    (1) of its facts; a body pair counts towards the PCA body size when its functional variable's entity
    is there."""
    slots = [slot_column(k) for k in range(len(shape.atoms))]
    per_rule = body_pairs(shape, bodies, edges).join(F.broadcast(candidates), slots)
    keyed = per_rule.withColumn("entity", F.when(F.col("functional_var") == 0, F.col("v0")).otherwise(F.col("v1")))
    marked = keyed.join(domains.withColumn("in_domain", F.lit(1)), ["r", "entity"], "left")
    return marked.groupBy("r", *slots).agg(
        F.count(F.lit(1)).alias("body_size"), F.count("in_domain").alias("pca_body_size")
    )


def head_domains(edges: DataFrame, profile: DataFrame) -> DataFrame:
    """``r, entity``: the subjects of r when r's functional variable is x, else its objects."""
    joined = edges.join(F.broadcast(profile.select("rel", "subject_functional")), "rel")
    entity = F.when(F.col("subject_functional"), F.col("s")).otherwise(F.col("o"))
    return joined.select(F.col("rel").alias("r"), entity.alias("entity")).distinct()
