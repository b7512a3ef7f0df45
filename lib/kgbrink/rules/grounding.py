"""Groundings of Horn rules in a KG (BRINK Sec. 3.1-3.2): all of them, or a seeded sample per rule.

A grounding of ``B => H`` is a substitution sigma of every rule variable by an entity such that every
body atom and the head are triples of the KG (the support instances of the rule; variables need not
bind distinct entities, as in AMIE). Groundings whose head triple is one of their own body triples are
excluded (possible only through self-loops).

Plan: rules with the same variable pattern share one Spark plan in which relations are columns (as in
:mod:`kgbrink.rules.plan`): the head facts of every rule's head relation are joined with the rules, then each
body atom is joined on its bound variables and its relation, closing atoms first, then expanding from
the head variable whose atoms expand to fewer rows (from degree statistics), so the work is bounded by
the rows the groundings themselves need, never by body paths through hubs that lack a head fact.

Sampling (``per_rule = N``): the sample of a rule is its N groundings with the smallest
``xxhash64(seed, rule id, binding of every variable)``: uniform over groundings, without replacement,
and identical whatever the partitioning. It is computed without storing or shuffling all groundings:
a first pass counts the groundings of each rule (only counts leave the tasks); the second keeps, as the
groundings stream out of the joins, those whose hash is below a per-rule threshold expected to pass
about 1.5 N + 64 of them, and takes the N smallest. A rule whose threshold kept fewer than N of its
groundings (rare) is redone with a wider threshold, so the result is always the exact N smallest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.rules.model import FRESH_VARIABLES, HEAD_VARIABLES, Rule
from kgbrink.rules.plan import (
    Shape,
    X,
    Y,
    atom_order,
    entity_relation_degrees,
    expanding_head_atoms,
    kg_edges,
    single_atom_table,
    single_pattern,
    slot_column,
    var_column,
)

HASH_SPAN = 2.0**64
HASH_MIN = -(2**63)

GROUNDINGS_SCHEMA_COLUMNS = ("rule_id", "head", "body", "bindings", "sample_hash")


class GroundingError(ValueError):
    """Rules that cannot be grounded against this KG (e.g. a relation the dataset does not have)."""


def _variable_index(name: str) -> int:
    if name in HEAD_VARIABLES:
        return HEAD_VARIABLES.index(name)
    return 2 + FRESH_VARIABLES.index(name)


def rule_pattern(rule: Rule) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """The canonical rule's body as (variable pattern, relations), atoms ordered by pattern."""
    canonical = rule.canonical()
    atoms = sorted(((_variable_index(a.subject), _variable_index(a.object)), a.relation) for a in canonical.body)
    return tuple(p for p, _ in atoms), tuple(r for _, r in atoms)


def rules_by_pattern(rules: list[Rule], relation_ids: dict[str, int]) -> dict[tuple, list[tuple]]:
    """``pattern -> [(rule id, head relation id, body relation ids...)]``; unknown relation keys fail."""
    unknown = sorted({a.relation for r in rules for a in (r.head, *r.body)} - set(relation_ids))
    if unknown:
        raise GroundingError(f"rule relation(s) not in the dataset: {', '.join(unknown[:10])}")
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for rule in rules:
        pattern, relations = rule_pattern(rule)
        groups[pattern].append(
            (rule.rule_id(), relation_ids[rule.head.relation], *[relation_ids[r] for r in relations])
        )
    return groups


def _start_atom(shape: Shape, members: list[tuple], rows: dict) -> int | None:
    """The expanding atom on x or y whose relations expand to the fewest rows over the group's rules."""
    expanding = expanding_head_atoms(shape)
    if not expanding:
        return None

    def cost(k: int) -> int:
        pattern = single_pattern(shape.atoms[k])
        return sum(rows.get((m[1], pattern, m[2 + k]), 0) for m in members)

    return min(expanding, key=lambda k: (cost(k), k))


def pattern_groundings(shape: Shape, rules: DataFrame, edges: DataFrame, first: int | None) -> DataFrame:
    """``rule_id, r, a.., v0, v1, v2..``: every grounding of the rules (one variable pattern, columns
    ``rule_id, r, a0..``) whose head is not one of its body triples."""
    order = atom_order(shape, first)
    bindings = edges.select(F.col("rel").alias("r"), F.col("s").alias("v0"), F.col("o").alias("v1")).join(
        F.broadcast(rules), "r"
    )
    bound = {X, Y}
    for k in order:
        s, o = shape.atoms[k]
        renamed = edges.select(
            F.col("rel").alias(slot_column(k)), F.col("s").alias(var_column(s)), F.col("o").alias(var_column(o))
        )
        keys = [slot_column(k)] + [var_column(v) for v in (s, o) if v in bound]
        bindings = bindings.join(renamed, keys)
        bound |= {s, o}
    for k, (s, o) in enumerate(shape.atoms):
        same = [F.col(var_column(v)) == F.col(h) for v, h in ((s, "v0"), (o, "v1")) if var_column(v) != h]
        head_in_body = reduce(lambda a, b: a & b, same, F.col(slot_column(k)) == F.col("r"))
        bindings = bindings.filter(~head_in_body)
    return bindings


def _triple(r: str, s: str, o: str):
    return F.struct(F.col(s).alias("h"), F.col(r).alias("r"), F.col(o).alias("t"))


def _shaped(groundings: DataFrame, shape: Shape, seed: int) -> DataFrame:
    variables = sorted(shape.variables() | {X, Y})
    names = [HEAD_VARIABLES[v] if v < 2 else FRESH_VARIABLES[v - 2] for v in variables]
    return groundings.select(
        "rule_id",
        _triple("r", "v0", "v1").alias("head"),
        F.array(*[_triple(slot_column(k), var_column(s), var_column(o)) for k, (s, o) in enumerate(shape.atoms)]).alias(
            "body"
        ),
        F.map_from_arrays(
            F.array(*[F.lit(n) for n in names]), F.array(*[F.col(var_column(v)) for v in variables])
        ).alias("bindings"),
        F.xxhash64(F.lit(seed), "rule_id", *[F.col(var_column(v)) for v in variables]).alias("sample_hash"),
    )


def groundings(
    rules: list[Rule],
    triples: DataFrame,
    relation_ids: dict[str, int],
    per_rule: int | None = None,
    seed: int = 0,
    persist: Callable[[DataFrame], DataFrame] = DataFrame.persist,
) -> DataFrame:
    """``rule_id, head struct<h, r, t>, body array<struct<h, r, t>>, bindings map<variable, entity>,
    sample_hash``: all groundings of ``rules`` in ``triples`` (``h, r, t`` ids), or the seeded sample of at
    most ``per_rule`` per rule (module docstring), each rule pattern's sample kept by ``persist`` (a job's
    ``ctx.persist``: released when the job ends)."""
    if per_rule is not None and per_rule < 1:
        raise GroundingError(f"per_rule must be a positive integer, got {per_rule}")
    spark = triples.sparkSession
    groups = rules_by_pattern(rules, relation_ids)
    empty = spark.createDataFrame(
        [],
        "rule_id string, head struct<h:int,r:int,t:int>, body array<struct<h:int,r:int,t:int>>, bindings map<string,int>, sample_hash long",
    )
    if not groups:
        return empty
    # a sample reads the de-duplicated edges in many passes (degrees, then a count and a sample pass per
    # pattern); cache them, and drop them once every pattern's sample is cached (sample_smallest)
    edges = kg_edges(triples) if per_rule is None else kg_edges(triples).persist()
    head_relations = sorted({m[1] for members in groups.values() for m in members})
    head_facts = edges.filter(F.col("rel").isin(head_relations)).select(
        F.col("rel").alias("r"), F.col("s").alias("v0"), F.col("o").alias("v1")
    )
    rows: dict = {}
    if any(_start_atom(Shape(p), [], {}) is not None for p in groups):
        for row in single_atom_table(edges, head_facts, entity_relation_degrees(edges)).collect():
            rows[(row["r"], (row["subject"], row["object"]), row["a"])] = row["rows"]
    parts = []
    for pattern, members in sorted(groups.items()):
        shape = Shape(pattern)
        slots = [slot_column(k) for k in range(len(pattern))]
        frame = spark.createDataFrame(members, ", ".join(["rule_id string", "r int", *[f"{s} int" for s in slots]]))
        found = _shaped(pattern_groundings(shape, frame, edges, _start_atom(shape, members, rows)), shape, seed)
        parts.append(found if per_rule is None else sample_smallest(found, per_rule, persist=persist))
    if per_rule is not None:
        edges.unpersist()
    return reduce(DataFrame.unionByName, parts)


def sample_smallest(
    found: DataFrame, n: int, widen: float = 1.0, persist: Callable[[DataFrame], DataFrame] = DataFrame.persist
) -> DataFrame:
    """The ``n`` rows of each ``rule_id`` with the smallest ``sample_hash`` (ties by head and body), computed
    with a per-rule hash threshold (module docstring). The result is cached and already materialised (its
    per-rule counts are checked), so it no longer reads ``found``'s inputs."""
    counts = {r["rule_id"]: r["count"] for r in found.groupBy("rule_id").count().collect()}
    limits = []
    for rule_id, count in counts.items():
        share = 1.0 if count <= n else min(1.0, widen * (1.5 * n + 64) / count)
        limits.append((rule_id, None if share >= 1.0 else int(HASH_MIN + share * HASH_SPAN)))
    spark = found.sparkSession
    threshold = spark.createDataFrame(limits, "rule_id string, below long")
    kept = found.join(F.broadcast(threshold), "rule_id").filter(
        F.col("below").isNull() | (F.col("sample_hash") < F.col("below"))
    )
    ranked = persist(
        kept.withColumn(
            "_rank", F.row_number().over(Window.partitionBy("rule_id").orderBy("sample_hash", "head", "body"))
        )
        .filter(F.col("_rank") <= n)
        .drop("_rank", "below")
    )
    got = {r["rule_id"]: r["count"] for r in ranked.groupBy("rule_id").count().collect()}
    short = [rule_id for rule_id, count in counts.items() if got.get(rule_id, 0) < min(n, count)]
    if not short:
        return ranked
    ranked.unpersist()
    return sample_smallest(found, n, widen * 4, persist)
