"""Rule shapes and join plans, shared by rule mining (:mod:`kgbrink.rules.mining`) and grounding
(:mod:`kgbrink.rules.grounding`).

Relations are join outputs, not loop variables: the variable patterns (*shapes*) of closed connected bodies
are enumerated up front (2 for one atom, 7 for two, a few dozen for three) and one Spark plan per shape
evaluates every relation assignment at once (up to 822^k rules), variables as columns ``v0, v1, ..`` (the
head is (0, 1)) and body relations as slot columns ``a0, a1, ..``.

Join order: with the head facts bound, closing atoms (both variables bound: an (entity, entity) key join
that only filters) come before expanding ones; variables no longer needed are projected away and rows
de-duplicated. Costs come from degree statistics: one aggregation over facts x (entity, relation) degrees
gives, for every head relation r and every dangling atom touching x or y, the atom's exact support and the
number of rows its expansion would produce (facts are first counted per (relation, entity), so a hub joins
its degrees once per head relation); dangling atoms below the threshold are filtered as they are joined
(broadcast semi-join).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.rules.model import FRESH_VARIABLES, HEAD_VARIABLES

X, Y = 0, 1


# --- shapes -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Variable pattern of a body: ``atoms[k] = (subject variable, object variable)``; the head is (0, 1),
    fresh variables are 2, 3, ..."""

    atoms: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        return len(self.atoms) + 1

    def variables(self) -> set[int]:
        return {v for a in self.atoms for v in a}


def _shape_key(atoms: tuple[tuple[int, int], ...]) -> tuple:
    fresh = sorted({v for a in atoms for v in a} - {X, Y})
    best = None
    for perm in itertools.permutations(range(2, 2 + len(fresh))):
        names = {X: X, Y: Y, **dict(zip(fresh, perm))}
        key = tuple(sorted((names[s], names[o]) for s, o in atoms))
        best = key if best is None or key < best else best
    return best


def _is_closed_connected(atoms: tuple[tuple[int, int], ...]) -> bool:
    counts: dict[int, int] = {X: 1, Y: 1}
    for s, o in atoms:
        counts[s] = counts.get(s, 0) + 1
        counts[o] = counts.get(o, 0) + 1
    if any(c < 2 for c in counts.values()):
        return False
    linked, pending = {X, Y}, list(atoms)
    while pending:
        step = [a for a in pending if linked & set(a)]
        if not step:
            return False
        for a in step:
            linked |= set(a)
            pending.remove(a)
    return True


def body_shapes(max_atoms: int) -> list[Shape]:
    """Every closed connected body pattern with 1 .. max_atoms - 1 atoms, up to renaming of fresh
    variables (2 patterns of length 2, 7 of length 3, 56 of length 4)."""
    shapes = []
    for n in range(1, max_atoms):
        variables = range(2 + n - 1)
        pairs = [(s, o) for s in variables for o in variables if s != o]
        seen = set()
        for atoms in itertools.combinations_with_replacement(pairs, n):
            fresh = {v for a in atoms for v in a} - {X, Y}
            if fresh != set(range(2, 2 + len(fresh))) or not _is_closed_connected(atoms):
                continue
            key = _shape_key(atoms)
            if key not in seen:
                seen.add(key)
                shapes.append(Shape(key))
    return shapes


def variable_name(v: int) -> str:
    return HEAD_VARIABLES[v] if v in (X, Y) else FRESH_VARIABLES[v - 2]


# --- inputs ---------------------------------------------------------------------------------------------


def kg_edges(triples: DataFrame) -> DataFrame:
    """``rel, s, o``: the KG as a set (duplicates across splits counted once)."""
    return triples.select(F.col("r").alias("rel"), F.col("h").alias("s"), F.col("t").alias("o")).distinct()


def relation_profile(edges: DataFrame) -> DataFrame:
    """Per relation: ``rel, facts, subjects, objects, subject_functional`` (functionality >= inverse
    functionality, i.e. #subjects >= #objects: AMIE3's choice of the PCA functional variable)."""
    return (
        edges.groupBy("rel")
        .agg(
            F.count(F.lit(1)).alias("facts"),
            F.countDistinct("s").alias("subjects"),
            F.countDistinct("o").alias("objects"),
        )
        .withColumn("subject_functional", F.col("subjects") >= F.col("objects"))
    )


def entity_relation_degrees(edges: DataFrame) -> DataFrame:
    """``entity, rel, out_deg, in_deg``: facts of ``rel`` with ``entity`` as subject / as object."""
    out = edges.groupBy(F.col("s").alias("entity"), "rel").agg(F.count(F.lit(1)).alias("out_deg"))
    inn = edges.groupBy(F.col("o").alias("entity"), "rel").agg(F.count(F.lit(1)).alias("in_deg"))
    return out.join(inn, ["entity", "rel"], "full").fillna(0, ["out_deg", "in_deg"])


def single_atom_table(edges: DataFrame, head_facts: DataFrame, degrees: DataFrame) -> DataFrame:
    """For every head relation ``r`` and one-atom body pattern ``(s, o)`` over the head variables 0, 1 and
    a fresh 2, and body relation ``a``: ``support`` (#facts r(x, y) with the atom satisfiable) and
    ``rows`` (the rows joining the atom to the facts produces). Columns ``r, subject, object, a,
    support, rows``. Closing patterns (0, 1) and (1, 0) have rows = support."""
    parts = []
    for var, name in ((X, "v0"), (Y, "v1")):
        # one join and one aggregation per head variable gives both roles of the fresh variable
        # facts are first counted per (r, entity): a hub in a million facts joins its degrees once per
        # head relation, not once per fact; support = Sum facts [deg > 0], rows = Sum facts * deg
        per_entity = head_facts.groupBy("r", F.col(name).alias("entity")).agg(F.count(F.lit(1)).alias("facts"))
        sums = (
            per_entity.join(degrees, "entity")
            .groupBy("r", "rel")
            .agg(
                F.sum(F.when(F.col("out_deg") > 0, F.col("facts"))).alias("support_out"),
                F.sum(F.col("facts") * F.col("out_deg")).alias("rows_out"),
                F.sum(F.when(F.col("in_deg") > 0, F.col("facts"))).alias("support_in"),
                F.sum(F.col("facts") * F.col("in_deg")).alias("rows_in"),
            )
            .fillna(0, ["support_out", "support_in"])
        )
        roles = F.explode(
            F.array(
                F.struct(
                    F.lit(var).alias("subject"),
                    F.lit(2).alias("object"),
                    F.col("support_out").alias("support"),
                    F.col("rows_out").alias("rows"),
                ),
                F.struct(
                    F.lit(2).alias("subject"),
                    F.lit(var).alias("object"),
                    F.col("support_in").alias("support"),
                    F.col("rows_in").alias("rows"),
                ),
            )
        )
        parts.append(
            sums.select("r", F.col("rel").alias("a"), roles.alias("x"))
            .filter(F.col("x.support") > 0)
            .select("r", "x.subject", "x.object", "a", "x.support", "x.rows")
        )
    for pattern, keys in (((X, Y), ("v0", "v1")), ((Y, X), ("v1", "v0"))):
        closing = head_facts.join(
            edges.select(F.col("s").alias(keys[0]), F.col("o").alias(keys[1]), F.col("rel").alias("a")), list(keys)
        ).filter(~((F.col("a") == F.col("r")) & F.lit(pattern == (X, Y))))
        parts.append(
            closing.groupBy("r", "a")
            .agg(F.count(F.lit(1)).alias("support"))
            .select(
                "r",
                F.lit(pattern[0]).alias("subject"),
                F.lit(pattern[1]).alias("object"),
                "a",
                "support",
                F.col("support").alias("rows"),
            )
        )
    return reduce(DataFrame.unionByName, parts)


# --- join plans -----------------------------------------------------------------------------------------


def var_column(v: int) -> str:
    return f"v{v}"


def slot_column(k: int) -> str:
    return f"a{k}"


def slot_constraints(shape: Shape, done: list[int], k: int, head: bool = True) -> list:
    """Conditions on slot ``k`` once it is bound: atoms with the same variable pair take strictly
    increasing relations (no repeated atom, one order per set); atom (0, 1) is never the head."""
    conds = []
    for j in done:
        if shape.atoms[j] == shape.atoms[k]:
            conds.append(F.col(slot_column(min(j, k))) < F.col(slot_column(max(j, k))))
    if head and shape.atoms[k] == (X, Y):
        conds.append(F.col(slot_column(k)) != F.col("r"))
    return conds


def join_atom(
    bindings: DataFrame,
    edges: DataFrame,
    atom: tuple[int, int],
    k: int,
    bound: set[int],
    allowed: DataFrame | None = None,
    on: list[str] | None = None,
    attach_first: bool = False,
    broadcast_edges: bool = False,
) -> DataFrame:
    """Join body atom ``k`` to ``bindings`` on its bound variables; ``allowed`` (columns ``on`` + the slot)
    restricts the atom's relation. ``attach_first`` (for short candidate lists) attaches the allowed
    relations before joining the edges on (relation, bound variable); otherwise the edges are joined on
    the bound variables and the result filtered (broadcast semi-join), which keeps the row count at the
    expansion itself when many relations are allowed. ``broadcast_edges`` makes closing joins probe a
    broadcast (s, o) hash of the edges instead of shuffling the expanded rows (one machine, or edges that
    fit executor memory)."""
    s, o = atom
    renamed = edges.select(
        F.col("rel").alias(slot_column(k)), F.col("s").alias(var_column(s)), F.col("o").alias(var_column(o))
    )
    keys = [var_column(v) for v in (s, o) if v in bound]
    if broadcast_edges and len(keys) == 2:  # closing: probe the expanded rows against an (s, o) hash, no shuffle
        renamed = F.broadcast(renamed)
    if allowed is not None and attach_first and len(keys) == 1:
        return bindings.join(F.broadcast(allowed), on).join(renamed, [slot_column(k), *keys])
    joined = bindings.join(renamed, keys)
    return joined if allowed is None else joined.join(F.broadcast(allowed), [*on, slot_column(k)], "left_semi")


def needed_later(shape: Shape, order: list[int], position: int) -> set[int]:
    later = {v for k in order[position + 1 :] for v in shape.atoms[k]}
    return later | {X, Y}


def _complete_order(shape: Shape, order: list[int], bound: set[int]) -> list[int]:
    """``order`` extended greedily: next an atom whose variables are all bound (a filter), else any atom
    connected to the bound variables (``bound`` plus those of the atoms in ``order``)."""
    order = list(order)
    bound = bound | {v for k in order for v in shape.atoms[k]}
    remaining = [k for k in range(len(shape.atoms)) if k not in order]
    while remaining:
        closing = [k for k in remaining if set(shape.atoms[k]) <= bound]
        connected = [k for k in remaining if set(shape.atoms[k]) & bound]
        k = closing[0] if closing else connected[0]
        order.append(k)
        remaining.remove(k)
        bound |= set(shape.atoms[k])
    return order


def atom_order(shape: Shape, first: int | None) -> list[int]:
    """Support join order (head facts bound): closing atoms on the head variables first, then ``first``
    (an expanding atom touching x or y), then :func:`_complete_order`."""
    order = [k for k, a in enumerate(shape.atoms) if set(a) <= {X, Y}]
    if first is not None and first not in order:
        order.append(first)
    return _complete_order(shape, order, {X, Y})


def body_atom_order(shape: Shape) -> list[int]:
    """Body join order (nothing bound): an atom on a head variable first, then :func:`_complete_order`."""
    return _complete_order(shape, [next(k for k, a in enumerate(shape.atoms) if set(a) & {X, Y})], set())


def expanding_head_atoms(shape: Shape) -> list[int]:
    """Atoms joining a head variable to a fresh one: the candidates to start the expansion from."""
    return [k for k, a in enumerate(shape.atoms) if (p := single_pattern(a)) is not None and len(set(p) & {X, Y}) == 1]


def single_pattern(atom: tuple[int, int]) -> tuple[int, int] | None:
    """The one-atom pattern an atom of a longer body reduces to, when it touches a head variable and at most
    one fresh variable (renamed 2): its support as a one-atom rule bounds the longer rule's support."""
    s, o = atom
    if {s, o} <= {X, Y}:
        return atom
    if s in (X, Y) and o not in (X, Y):
        return (s, 2)
    if o in (X, Y) and s not in (X, Y):
        return (2, o)
    return None
