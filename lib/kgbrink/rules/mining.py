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
that of every output rule with the same head and a subset of its body and of every closed parent (one
atom fewer) whose std confidence reaches ``min_std_confidence``: AMIE computes PCA confidence only there,
so a rule below it is neither perfect nor a pruning parent (:mod:`kgbrink.rules.selection`).

This module holds the parameters and the orchestration, per rule length: the supports of every shape in
one query (:mod:`kgbrink.rules.supports`, plans of :mod:`kgbrink.rules.plan`), the body sizes of the rules
that pass, and AMIE's acceptance tests on the driver (:mod:`kgbrink.rules.selection`). Only small data
reaches the driver: per-relation statistics, the per-(relation, atom) support and cost table (bounded by
relations^2), and the candidate rules with their metrics.

Body-size budget: before joining two atoms on a non-head variable z the job estimates, per relation pair,
the number of paths Sum_z d1(z) d2(z) and the exact lower bound max_z d1(z) d2(z) of distinct (x, y)
pairs. A rule of maximal length whose lower bound already exceeds support / min_std_confidence cannot be
output (its std confidence is below the threshold) and is dropped with its body size left unknown; if the
remaining estimate exceeds ``max_body_paths`` the job fails naming the bodies instead of running for hours.

On a KG with fewer than ``adaptive_min_edges`` edges the rule queries run without adaptive query
execution: there the data is tiny and AQE's re-planning of the whole query after every stage dominates
(one query per rule length holds hundreds of stages at max_atoms 4; a 9-fact KG mined to 4 atoms took
190 s for the 4-atom rules with it and 90 s without).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.session import session_setting
from kgbrink.rules.model import HEAD_VARIABLES, Atom, Rule
from kgbrink.rules.params import MiningError, MiningParams
from kgbrink.rules.plan import (
    Shape,
    body_shapes,
    entity_relation_degrees,
    kg_edges,
    relation_profile,
    slot_column,
    variable_name,
)
from kgbrink.rules.selection import amie_selection
from kgbrink.rules.supports import (
    batched_shape_supports,
    body_sizes,
    head_domains,
    min_support_count,
    path_estimates,
    path_middle,
    shape_head_relations,
    support_inputs,
)

LOG = logging.getLogger(__name__)


# --- body-size budget -----------------------------------------------------------------------------------


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


# --- orchestration --------------------------------------------------------------------------------------


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
