"""Closed Horn-rule mining on Spark with AMIE3's semantics (BRINK Sec. 3.1, App. A-B; Lajus et al. 2020).

Definitions (rule ``B => r(x, y)``, KG as a set of triples, no injectivity between variables):

- support = #distinct (x, y) with B and r(x, y); head coverage = support / #facts of r;
- standard confidence = support / body size, body size = #distinct (x, y) satisfying B;
- PCA confidence = support / PCA body size, PCA body size = #distinct (x, y) satisfying B with some
  r(x, y') (functional variable x) or some r(x', y) (functional variable y); the functional variable is
  x when functionality(r) = #subjects/#facts >= inverse functionality(r) = #objects/#facts, else y.

Search space, exactly AMIE3's output without constants: every closed, connected rule with at most
``max_atoms`` atoms counting the head, built from dangling and closing atoms (no constants, no atom
r(?x, ?x), no repeated atom, no body atom equal to the head, a relation at most ``recursivity_limit``
times per rule), with head relations of at least ``min_initial_support`` facts. A rule is output when
std confidence >= ``min_std_confidence``, PCA confidence >= ``min_pca_confidence``, support >=
``min_support`` and head coverage >= ``min_head_coverage``, it is reachable by AMIE's breadth-first
refinement (some order of adding its atoms in which every closed intermediate rule is not "perfect",
PCA confidence 1, because AMIE does not refine perfect rules), and its PCA confidence is strictly above
that of every output rule with the same head and a subset of its body.

Strategy (why this finishes where naive path joins cannot):

1. Rule *shapes*: the variable patterns of closed connected bodies are enumerated up front (2 for one
   atom, 7 for two, a few dozen for three). For each shape all relation assignments are evaluated at once:
   relations are join outputs, not loop variables, so one Spark plan covers up to 822^k rules.
2. Supports are computed from the head facts outwards (never from the body): a binding table starts as
   the facts of every head relation and each body atom is joined on the variables already bound, closing
   atoms (both variables bound: an (entity, entity) key join that only filters) before expanding ones.
   When all facts go through one plan (a single start atom, no buckets), after each step the prefix
   rule's support, an upper bound of every extension's support (anti-monotone), is counted and
   assignments below the head-coverage / support threshold are dropped before the next join (a count
   over part of the facts is no bound, so split plans skip it; only 3-atom bodies have such prefixes).
   Variables no longer needed are projected away and rows de-duplicated.
3. Join planning from degree statistics: before any expansion, one aggregation over facts x (entity,
   relation) degrees gives, for every head relation r and every dangling atom touching x or y, the
   atom's exact support and the number of rows its expansion would produce (facts are first counted per
   (relation, entity), so a hub joins its degrees once per head relation). Dangling atoms below the
   threshold are filtered as they are joined (broadcast semi-join). Per-entity degree totals give every
   fact's endpoint degrees, and each fact starts from the endpoint with fewer edges in
   the atom's role, so the work is Sum over facts of min(d(x), d(y)) rather than of d(x) or d(y): the
   facts of P31 (instance of) expand from the instance (one class), never from the class (a million
   instances). On the 20M generated KG that is 1.0e9 rows against 9.9e9 from x and 1.9e12 from y.
   When a shape's expansion exceeds ``rows_per_batch`` its facts are cut into hash buckets of the head
   pair whose partial support counts are persisted and summed, so memory and shuffle stay bounded;
   remaining skew on hub keys is split by Spark's adaptive skew-join handling. On a KG with fewer
   than ``adaptive_min_edges`` edges the rule queries run without adaptive query execution instead:
   there the data is tiny and AQE's re-planning of the whole query after every stage dominates (one
   query per rule length holds hundreds of stages at max_atoms 4; a 9-fact KG mined to 4 atoms took
   190 s for the 4-atom rules with it and 90 s without).
4. Body sizes are computed only for closed rules that passed head-coverage pruning, once per distinct
   body (shared across head relations). Before joining two atoms on a non-head variable z the job
   estimates, per relation pair, the number of paths Sum_z d1(z) d2(z) and the exact lower bound
   max_z d1(z) d2(z) of distinct (x, y) pairs. A rule of maximal length whose lower bound already exceeds
   support / min_std_confidence cannot be output (its std confidence is below the threshold) and is
   dropped with its body size left unknown; if the remaining estimate exceeds ``max_body_paths`` the job
   fails naming the bodies instead of running for hours.
5. Only small data reaches the driver: per-relation statistics, the per-(relation, atom) support and cost
   table (bounded by relations^2), and the candidate rules with their metrics. The AMIE acceptance tests
   (reachability, confidence thresholds, the "better than every kept sub-rule" test) run there.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import time
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.session import session_setting
from kgbrink.rules.model import FRESH_VARIABLES, HEAD_VARIABLES, Atom, Rule

X, Y = 0, 1
LOG = logging.getLogger(__name__)


class MiningError(RuntimeError):
    """The mining job cannot go on (bad parameters, or a join that would not finish)."""


@dataclass(frozen=True)
class MiningParams:
    """AMIE3's parameters (command-line names in brackets)."""

    max_atoms: int = 3  # -maxad
    min_head_coverage: float = 0.01  # -minhc
    min_std_confidence: float = 0.0  # -minc
    min_pca_confidence: float = 0.0  # -minpca
    min_support: int = 0  # -mins (AMIE3 applies it only with -pm support)
    min_initial_support: int = 100  # -minis
    recursivity_limit: int = 3
    max_body_paths: int = 2_000_000_000
    broadcast_edges: bool = False  # execution only: ship the edge table to every task instead of shuffling
    rows_per_batch: int = 50_000_000  # execution only: expanded rows per bucket of head facts
    adaptive_min_edges: int = 1_000_000  # execution only: smaller KGs are mined without adaptive query execution

    def validate(self) -> MiningParams:
        problems = []
        if not 2 <= self.max_atoms <= 4:
            problems.append(f"max_atoms must be 2, 3 or 4, got {self.max_atoms}")
        for name in ("min_head_coverage", "min_std_confidence", "min_pca_confidence"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                problems.append(f"{name} must lie in [0, 1], got {value}")
        for name in (
            "min_support",
            "min_initial_support",
            "recursivity_limit",
            "max_body_paths",
            "rows_per_batch",
            "adaptive_min_edges",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name != "min_support" else 0):
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if problems:
            raise MiningError("invalid mining parameters: " + "; ".join(problems))
        return self


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


# --- supports -------------------------------------------------------------------------------------------


def var_column(v: int) -> str:
    return f"v{v}"


def slot_column(k: int) -> str:
    return f"a{k}"


def _slot_constraints(shape: Shape, done: list[int], k: int, head: bool = True) -> list:
    """Conditions on slot ``k`` once it is bound: atoms with the same variable pair take strictly
    increasing relations (no repeated atom, one order per set); atom (0, 1) is never the head."""
    conds = []
    for j in done:
        if shape.atoms[j] == shape.atoms[k]:
            conds.append(F.col(slot_column(min(j, k))) < F.col(slot_column(max(j, k))))
    if head and shape.atoms[k] == (X, Y):
        conds.append(F.col(slot_column(k)) != F.col("r"))
    return conds


def _recursivity_ok(shape: Shape, limit: int):
    """At most ``limit`` occurrences of any relation in the rule (head included)."""
    slots = ["r"] + [slot_column(k) for k in range(len(shape.atoms))]
    if len(slots) <= limit:
        return F.lit(True)
    conds = []
    for combo in itertools.combinations(slots, limit + 1):
        conds.append(reduce(lambda a, b: a & b, [F.col(combo[0]) == F.col(c) for c in combo[1:]]))
    return ~reduce(lambda a, b: a | b, conds)


def _join_atom(
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


def _needed_later(shape: Shape, order: list[int], position: int) -> set[int]:
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
            bindings = _join_atom(
                bindings, edges, atom, k, bound, allowed, ["r"], broadcast_edges=params.broadcast_edges
            )
            for cond in _slot_constraints(shape, done, k):
                bindings = bindings.filter(cond)
            done.append(k)
            bound |= set(atom)
            keep = [var_column(v) for v in sorted(_needed_later(shape, order, position) & bound)]
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
        counts.write.mode("overwrite").parquet(f"{directory}/bucket={b}")
        LOG.info("shape %s: bucket %d/%d, %.1f s", shape.atoms, b + 1, buckets, time.perf_counter() - started)
    partials = facts.sparkSession.read.parquet(directory).drop("bucket")
    return _passing(partials.groupBy("r", *slots).agg(F.sum("support").alias("support")), inputs.thresholds, slots)


def expanding_head_atoms(shape: Shape) -> list[int]:
    """Atoms joining a head variable to a fresh one: the candidates to start the expansion from."""
    return [k for k, a in enumerate(shape.atoms) if (p := single_pattern(a)) is not None and len(set(p) & {X, Y}) == 1]


def _endpoint_degree(atom: tuple[int, int]):
    """The bound endpoint's degree in the atom's role: out-degree when the head variable is the subject."""
    s, o = atom
    return F.col(f"out{s}") if s in (X, Y) else F.col(f"in{o}")


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


# --- body sizes -----------------------------------------------------------------------------------------


def body_atom_order(shape: Shape) -> list[int]:
    """Body join order (nothing bound): an atom on a head variable first, then :func:`_complete_order`."""
    return _complete_order(shape, [next(k for k, a in enumerate(shape.atoms) if set(a) & {X, Y})], set())


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
        bindings = _join_atom(bindings, edges, shape.atoms[k], k, bound, allowed, previous)
        for cond in _slot_constraints(shape, done, k, head=False):
            bindings = bindings.filter(cond)
        done.append(k)
        bound |= set(shape.atoms[k])
        slots = [slot_column(j) for j in sorted(done)]
        keep = [var_column(v) for v in sorted(_needed_later(shape, order, position) & bound)]
        bindings = bindings.select(*slots, *keep)
        if len(keep) < len(bound):
            bindings = bindings.distinct()
    return bindings.select(*slots_all, "v0", "v1")


def estimates_bodies(shape: Shape, edge_count: int, params: MiningParams) -> bool:
    """Whether the bodies of ``shape`` go through :func:`affordable_bodies` before their sizes are joined:
    two-atom chains, on a KG whose edges could make more than ``max_body_paths`` paths."""
    return path_middle(shape) is not None and edge_count**2 > params.max_body_paths


def drops_by_lower_bound(shape: Shape, params: MiningParams) -> bool:
    """Whether :func:`affordable_bodies` drops bodies of ``shape`` by their lower bound: only at the
    maximal length (a shorter rule's body size is needed to refine it) and with a confidence threshold."""
    return params.min_std_confidence > 0 and shape.length == params.max_atoms


def affordable_bodies(shape: Shape, candidates: DataFrame, degrees: DataFrame, params: MiningParams) -> DataFrame:
    """The bodies (``a0, a1``) of a chain shape worth joining: those of a maximal-length rule whose lower
    bound of distinct pairs exceeds support / min_std_confidence are dropped (the rule cannot be output);
    fails with :class:`MiningError` when the rest would join more than ``max_body_paths`` rows."""
    slots = [slot_column(k) for k in range(len(shape.atoms))]
    bodies = candidates.select(*slots).distinct()
    estimates = path_estimates(shape, bodies, degrees)
    if drops_by_lower_bound(shape, params):
        limit = candidates.groupBy(*slots).agg((F.max("support") / F.lit(params.min_std_confidence)).alias("limit"))
        estimates = estimates.join(limit, slots).filter(F.col("lower_bound") <= F.col("limit"))
    estimates = estimates.cache()
    total = estimates.agg(F.sum("paths")).collect()[0][0] or 0
    if total > params.max_body_paths:
        worst = estimates.orderBy(F.desc("paths")).limit(5).collect()
        listed = ", ".join(f"({', '.join(str(r[s]) for s in slots)}): {r['paths']:.3g} paths" for r in worst)
        raise MiningError(
            f"body sizes of shape {shape.atoms} need {total:.3g} joined rows (> max_body_paths = "
            f"{params.max_body_paths}); largest bodies (relation ids) {listed}. Raise min_head_coverage or "
            f"min_std_confidence, or max_body_paths on a bigger cluster."
        )
    return estimates.select(*slots)


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


# --- AMIE acceptance (driver, small data) -------------------------------------------------------------


def _sub_bodies(rule: Rule) -> list[tuple[Atom, ...]]:
    """Proper non-empty subsets of the body that form a valid rule with the same head."""
    out = []
    for n in range(1, len(rule.body)):
        for subset in itertools.combinations(rule.body, n):
            if _valid(rule.head, subset):
                out.append(subset)
    return out


def _valid(head: Atom, body: tuple[Atom, ...]) -> bool:
    try:
        Rule(head, body)
    except ValueError:
        return False
    return True


def _is_perfect(rule: Rule) -> bool:
    m = rule.metrics
    return m.get("pca_body_size") is not None and m["pca_body_size"] > 0 and m["support"] == m["pca_body_size"]


def _reachable(rule: Rule, closed: dict[str, Rule], memo: dict[tuple, bool]) -> bool:
    """Some order of adding the body atoms keeps every prefix connected to the head and never passes a
    closed intermediate rule that is perfect (AMIE does not refine those)."""

    def search(prefix: frozenset) -> bool:
        if prefix in memo:
            return memo[prefix]
        if len(prefix) == len(rule.body):
            return True
        ok = False
        if prefix:
            sub = tuple(sorted(prefix))
            if _valid(rule.head, sub):
                known = closed.get(Rule(rule.head, sub).key())
                if known is not None and _is_perfect(known):
                    memo[prefix] = False
                    return False
        linked = set(rule.head.variables()) | {v for a in prefix for v in a.variables()}
        for atom in rule.body:
            if atom not in prefix and set(atom.variables()) & linked and search(prefix | {atom}):
                ok = True
                break
        memo[prefix] = ok
        return ok

    return search(frozenset())


def amie_selection(candidates: list[Rule], params: MiningParams) -> list[Rule]:
    """AMIE3's output from the closed candidate rules (metrics attached; every closed rule with support
    >= the head-coverage threshold must be present), breadth-first by length. A rule is output when it is
    reachable, std confidence >= min_std_confidence, PCA confidence >= min_pca_confidence, and its PCA
    confidence is strictly above that of each of its ancestors (AMIE3 ``testConfidenceThresholds``):
    the closed rules it is refined from (one atom fewer, refined by AMIE: reachable, not perfect, shorter
    than max_atoms; output or not), and the output rules with the same head and a subset of its body.
    AMIE3 keeps the parent of the path that first reached a rule; kgbrink counts every parent, so the
    result does not depend on the order of AMIE's threads (a choice; identical on Family)."""
    closed = {r.key(): r for r in candidates}
    reachable = {key: _reachable(rule, closed, {}) for key, rule in closed.items()}
    kept: dict[str, Rule] = {}

    def pca_of(rule: Rule) -> float | None:
        m = rule.metrics
        return m["support"] / m["pca_body_size"] if m.get("pca_body_size") else None

    for rule in sorted(candidates, key=lambda r: (r.length, r.key())):
        m = rule.metrics
        if not m.get("body_size") or not m.get("pca_body_size") or not reachable[rule.key()]:
            continue
        std, pca = m["support"] / m["body_size"], pca_of(rule)
        if std < params.min_std_confidence or pca < params.min_pca_confidence:
            continue
        ancestors = []
        for sub in _sub_bodies(rule):
            key = Rule(rule.head, sub).key()
            if key in kept:
                ancestors.append(kept[key])
            elif len(sub) == len(rule.body) - 1 and key in closed and reachable[key] and not _is_perfect(closed[key]):
                ancestors.append(closed[key])
        if any(pca_of(a) is not None and pca <= pca_of(a) for a in ancestors):
            continue
        kept[rule.key()] = Rule(rule.head, rule.body, {**m, "std_confidence": std, "pca_confidence": pca})
    return list(kept.values())


# --- orchestration --------------------------------------------------------------------------------------


def min_support_count(facts: int, params: MiningParams) -> int:
    """Smallest support a rule with a head relation of ``facts`` facts needs: AMIE3's
    ``ceil(min_head_coverage * facts)`` (the same double arithmetic), and ``min_support``. AMIE3 applies
    its ``-mins`` only when pruning by support instead of head coverage; kgbrink applies both thresholds,
    and ``min_support`` defaults to 0 so that the default equals AMIE3's head-coverage pruning."""
    return max(math.ceil(params.min_head_coverage * facts), params.min_support, 1)


def variable_name(v: int) -> str:
    return HEAD_VARIABLES[v] if v in (X, Y) else FRESH_VARIABLES[v - 2]


def shape_head_relations(shape: Shape, relations: list[int], survivors: dict) -> list[int]:
    """Head relations for which every atom of ``shape`` touching x or y has a surviving relation (else no
    rule of the shape can pass)."""
    patterns = [single_pattern(a) for a in shape.atoms]
    return [r for r in relations if all(p is None or survivors.get((r, p)) for p in patterns)]


def support_inputs(
    edges: DataFrame, degrees: DataFrame, thresholds: DataFrame, heads: list[int], params: MiningParams
) -> tuple[SupportInputs, dict]:
    """The cached :class:`SupportInputs` of the head relations ``heads`` and the one-atom patterns that
    pass, ``{(r, (subject, object)): [body relations]}`` (:func:`single_atom_table`, driver-side)."""
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


@dataclass
class MiningResult:
    candidates: list[Rule]
    rules: list[Rule]
    counts: dict


def mine(
    triples: DataFrame, relation_names: dict[int, str], params: MiningParams, work_dir: str | None = None
) -> MiningResult:
    """Mine ``triples`` (``h, r, t`` ids; duplicates ignored) with AMIE3's semantics (module docstring).
    ``relation_names`` maps relation ids to the keys printed in rules; ``work_dir`` (a directory or URI)
    holds the partial support counts of shapes too big for one pass (none without it)."""
    params.validate()
    started_all = time.perf_counter()
    edges = kg_edges(triples).cache()
    profile_rows = relation_profile(edges).collect()
    facts = {row["rel"]: row["facts"] for row in profile_rows}
    subject_functional = {row["rel"]: row["subject_functional"] for row in profile_rows}
    heads = sorted(r for r, n in facts.items() if n >= params.min_initial_support)
    counts = {"facts": sum(facts.values()), "relations": len(facts), "head_relations": len(heads)}
    # small KGs: AQE re-plans the whole (huge) query after every (tiny) stage; see the module docstring
    with session_setting(
        triples.sparkSession, "spark.sql.adaptive.enabled", str(counts["facts"] >= params.adaptive_min_edges).lower()
    ):
        if not heads:
            return MiningResult([], [], {**counts, "candidates": 0, "rules": 0})
        spark = triples.sparkSession
        thresholds = spark.createDataFrame(
            [(r, min_support_count(facts[r], params)) for r in heads], "r int, min_count long"
        )
        degrees = entity_relation_degrees(edges).cache()
        inputs, survivors = support_inputs(edges, degrees, thresholds, heads, params)
        LOG.info(
            "relation profile, degrees and one-atom supports: %d head relations, %d (relation, atom) pairs pass, %.1f s",
            len(heads),
            sum(map(len, survivors.values())),
            time.perf_counter() - started_all,
        )
        domains = head_domains(
            edges.filter(F.col("rel").isin(heads)),
            spark.createDataFrame([(r, subject_functional[r]) for r in heads], "rel int, subject_functional boolean"),
        ).cache()
        edge_count = counts["facts"]
        candidates: list[Rule] = []
        shapes_by_length: dict[int, list[Shape]] = {}
        for shape in body_shapes(params.max_atoms):
            shapes_by_length.setdefault(shape.length, []).append(shape)
        for length, shapes in sorted(shapes_by_length.items()):
            # all shapes of one length in one query (same columns, a shape index): a few Spark jobs per
            # length instead of a few per shape
            started = time.perf_counter()
            slots = [slot_column(k) for k in range(length - 1)]
            plans = []
            for index, shape in enumerate(shapes):
                relations = shape_head_relations(shape, heads, survivors)
                if relations:
                    plans.append(
                        batched_shape_supports(shape, inputs, relations, work_dir).withColumn("shape", F.lit(index))
                    )
            if not plans:
                continue
            if params.broadcast_edges:  # one shape at a time: at most a few edge hash tables in memory
                supported = [row for plan in plans for row in plan.collect()]
            else:
                supported = reduce(DataFrame.unionByName, plans).collect()
            if not supported:  # no rule of these shapes reaches the support threshold
                continue
            by_shape: dict[int, list] = {}
            for row in supported:
                by_shape.setdefault(row["shape"], []).append(row)
            sized = []
            for index, mine_rows in sorted(by_shape.items()):
                shape = shapes[index]
                found = spark.createDataFrame(
                    [
                        (row["r"], *[row[s] for s in slots], row["support"], 0 if subject_functional[row["r"]] else 1)
                        for row in mine_rows
                    ],
                    ", ".join(["r int", *[f"{s} int" for s in slots], "support long", "functional_var int"]),
                )
                bodies = found.select(*slots).distinct()
                if estimates_bodies(shape, edge_count, params):
                    bodies = affordable_bodies(shape, found, degrees, params)
                sized.append(body_sizes(shape, found, bodies, edges, domains).withColumn("shape", F.lit(index)))
            sizes = {
                (row["shape"], row["r"], *[row[s] for s in slots]): row
                for row in reduce(DataFrame.unionByName, sized).collect()
            }
            for row in supported:
                r, shape = row["r"], shapes[row["shape"]]
                size = sizes.get((row["shape"], r, *[row[s] for s in slots]))
                body = tuple(
                    Atom(relation_names[row[s]], variable_name(a), variable_name(b))
                    for s, (a, b) in zip(slots, shape.atoms)
                )
                metrics = {
                    "support": row["support"],
                    "head_coverage": row["support"] / facts[r],
                    "body_size": size["body_size"] if size else None,
                    "pca_body_size": size["pca_body_size"] if size else None,
                    "functional_variable": HEAD_VARIABLES[0] if subject_functional[r] else HEAD_VARIABLES[1],
                }
                metrics["std_confidence"] = row["support"] / size["body_size"] if size else None
                metrics["pca_confidence"] = (
                    row["support"] / size["pca_body_size"] if size and size["pca_body_size"] else None
                )
                candidates.append(Rule(Atom(relation_names[r], *HEAD_VARIABLES), body, metrics))
            LOG.info(
                "rules of %d atoms (%d shapes): %d candidates, %d with body sizes, %.1f s",
                length,
                len(shapes),
                len(supported),
                len(sizes),
                time.perf_counter() - started,
            )
        for frame in (edges, inputs.head_facts, degrees, inputs.singles, domains):
            frame.unpersist()
        unique = {c.key(): c for c in candidates}
        selected = amie_selection(list(unique.values()), params)
        counts.update(candidates=len(unique), rules=len(selected))
        return MiningResult(
            sorted(unique.values(), key=lambda r: r.key()), sorted(selected, key=lambda r: r.key()), counts
        )
