"""Constraint-respecting triple removal (BRINK Sec. 3.2) and its independent verification.

Input: a sample of groundings (:func:`kgbrink.rules.grounding.groundings` with ``per_rule = N``), one row per
grounding with ``rule_id, head struct<h, r, t>, body array<struct<h, r, t>>, bindings, sample_hash``.
Selecting a grounding g removes its head H(g) from the KG and relies on its body B(g). A selection S is
*conflict-free* when no removed head is a body triple of a selected grounding,
``H(g) not in B(g')`` for all g, g' in S, which states both constraints of Sec. 3.2 at once (every
body triple of a selected grounding stays; removing a head never removes another selected grounding's
body triple). Groundings sharing a head never conflict with each other.

Two selections of the same sample:

- ``reference``: the published code's one global pass: keep g iff H(g) is a body triple of no sampled
  grounding, whether or not that other grounding is itself kept. Conflict-free, but not maximal.
- ``maximal`` (default): the reference set extended to a *maximal* conflict-free set on the conflict
  graph (g -- g' iff H(g) in B(g') or H(g') in B(g)) by rounds of a Luby-style independent-set
  selection. Every round, an undecided grounding joins S when its priority is below the priorities of
  all its undecided neighbours; neighbours of the newly selected leave. Priority = (conflict degree,
  :func:`selection_priority`, position in the content order): low-degree groundings first (greedy
  minimum-degree, which tends to give larger independent sets), ties by a hash of the grounding's seeded
  sampling hash, so the result depends only on the sample, never on partitioning. With fixed priorities these rounds select
  exactly what the sequential greedy pass in priority order selects (the lexicographically first maximal
  independent set), which is how the DuckDB peer in ``benchmarks/bench_build.py`` checks it. It starts
  from the reference set (itself independent), so it never removes fewer triples than ``reference``.

Removed triples are the distinct heads of S; the provenance of a removed triple is every selected
grounding with that head (rule, bindings, body triples).
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint, with_positions
from kgbrink.rules.model import Rule

LOG = logging.getLogger(__name__)

MODES = ("maximal", "reference")
TRIPLE = ("h", "r", "t")


def numbered_groundings(sample: DataFrame) -> DataFrame:
    """The sample with ``gid``: a dense id in the order (rule_id, sample_hash, head, body), i.e. from the
    content only."""
    columns = sample.select("rule_id", "head", "body", "bindings", "sample_hash")
    return with_positions(columns, ["rule_id", "sample_hash", "head", "body"], "gid", start=1)


def selection_priority():
    """The tie-break of the maximal selection: ``xxhash64("remove", sample_hash)``. A hash of the sample
    hash, not the sample hash itself: a rule's sample is its N *smallest* sample hashes, so raw sample
    hashes would let rules with many groundings win every tie."""
    return F.xxhash64(F.lit("remove"), F.col("sample_hash"))


def conflict_edges(numbered: DataFrame) -> DataFrame:
    """``a, b``: grounding ``a``'s head is a body triple of grounding ``b`` (a != b), one row per pair."""
    bodies = numbered.select(F.col("gid").alias("b"), F.explode("body").alias("triple"))
    heads = numbered.select(F.col("gid").alias("a"), F.col("head").alias("triple"))
    return heads.join(bodies, "triple").filter(F.col("a") != F.col("b")).select("a", "b").distinct()


def reference_selection(numbered: DataFrame) -> DataFrame:
    """``gid`` of the groundings the published one-pass rule keeps: head in no sampled grounding's body."""
    in_bodies = numbered.select(F.explode("body").alias("head")).distinct()
    return numbered.join(in_bodies, "head", "left_anti").select("gid")


def maximal_selection(numbered: DataFrame, reference: DataFrame, max_rounds: int = 1000) -> DataFrame:
    """``gid`` of a maximal conflict-free selection containing :func:`reference_selection` (module
    docstring), grown from ``reference`` (:func:`reference_selection` of ``numbered``). Each round is a
    few joins over the undecided groundings; lineage is cut every round."""
    edges = conflict_edges(numbered)
    undirected = (
        edges.unionByName(edges.select(F.col("b").alias("a"), F.col("a").alias("b"))).distinct().transform(checkpoint)
    )
    degree = undirected.groupBy("a").agg(F.count(F.lit(1)).alias("degree"))
    priority = (
        numbered.join(degree.withColumnRenamed("a", "gid"), "gid", "left")
        .select("gid", F.coalesce("degree", F.lit(0)).alias("degree"), selection_priority().alias("tiebreak"))
        .transform(checkpoint)
    )
    selected = reference.transform(checkpoint)
    undecided = _drop_neighbours(priority.select("gid").join(selected, "gid", "left_anti"), selected, undirected)
    rounds = 0
    while not undecided.isEmpty():
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"independent-set selection did not finish in {max_rounds} rounds")
        ranked = undecided.join(priority, "gid")
        live_edges = undirected.join(undecided.withColumnRenamed("gid", "a"), "a").join(
            undecided.withColumnRenamed("gid", "b"), "b"
        )
        neighbour_min = (
            live_edges.join(priority.withColumnRenamed("gid", "b"), "b")
            .groupBy("a")
            .agg(F.min(F.struct("degree", "tiebreak", F.col("b").alias("gid"))).alias("lowest"))
        )
        mine = F.struct("degree", "tiebreak", "gid")
        winners = (
            ranked.join(neighbour_min.withColumnRenamed("a", "gid"), "gid", "left")
            .filter(F.col("lowest").isNull() | (mine < F.col("lowest")))
            .select("gid")
            .transform(checkpoint)
        )
        selected = selected.unionByName(winners).transform(checkpoint)
        undecided = _drop_neighbours(undecided.join(winners, "gid", "left_anti"), winners, undirected)
    LOG.info("independent-set selection: %d round(s)", rounds)
    return selected


def _drop_neighbours(undecided: DataFrame, chosen: DataFrame, undirected: DataFrame) -> DataFrame:
    neighbours = undirected.join(chosen.withColumnRenamed("gid", "a"), "a").select(F.col("b").alias("gid")).distinct()
    return undecided.join(neighbours, "gid", "left_anti").transform(checkpoint)


def select_groundings(sample: DataFrame, mode: str = "maximal") -> DataFrame:
    """The selected groundings (all columns of the sample) under ``mode`` (``maximal`` or ``reference``)."""
    if mode not in MODES:
        raise ValueError(f"removal mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "maximal":
        return maximal_and_reference(sample)[0]
    numbered = numbered_groundings(sample).transform(checkpoint)
    return numbered.join(reference_selection(numbered), "gid").drop("gid")


def maximal_and_reference(sample: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The groundings of the maximal selection and of the one-pass reference selection it grows from,
    sharing one numbering and one reference pass."""
    numbered = numbered_groundings(sample).transform(checkpoint)
    reference = reference_selection(numbered).transform(checkpoint)
    return numbered.join(maximal_selection(numbered, reference), "gid").drop("gid"), numbered.join(
        reference, "gid"
    ).drop("gid")


def removed_triples(selected: DataFrame) -> DataFrame:
    """``h, r, t, rule_ids``: the distinct heads of the selected groundings with the rules behind them."""
    return selected.groupBy(*[F.col(f"head.{c}").alias(c) for c in TRIPLE]).agg(
        F.array_sort(F.collect_set("rule_id")).alias("rule_ids")
    )


def provenance(selected: DataFrame, rules: list[Rule]) -> DataFrame:
    """``h, r, t, rule_id, rule, bindings, body, sample_hash``: each selected grounding's head with the
    rule (its text) that removes it (BRINK Sec. 3.2, the provenance of every removed triple)."""
    texts = selected.sparkSession.createDataFrame(
        [(r.rule_id(), r.text()) for r in rules], "rule_id string, rule string"
    )
    heads = selected.select(
        *[F.col(f"head.{c}").alias(c) for c in TRIPLE], "rule_id", "bindings", "body", "sample_hash"
    )
    return heads.join(texts, "rule_id").select(*TRIPLE, "rule_id", "rule", "bindings", "body", "sample_hash")


def incomplete_kg(complete: DataFrame, removed: DataFrame) -> DataFrame:
    """The complete KG (``h, r, t, split``) without the removed triples (every split)."""
    return complete.join(removed.select(*TRIPLE), list(TRIPLE), "left_anti")


def rule_atoms(spark, rules: list[Rule], relation_ids: dict[str, int]) -> DataFrame:
    """``rule_id, atom, is_head, r, s, o``: each rule's atoms with relation ids and variable names, for
    re-instantiating groundings from their bindings (atom 0 is the head)."""
    rows = []
    for rule in rules:
        canonical = rule.canonical()
        for k, atom in enumerate((canonical.head, *canonical.body)):
            rows.append((rule.rule_id(), k, k == 0, relation_ids[atom.relation], atom.subject, atom.object))
    return spark.createDataFrame(rows, "rule_id string, atom int, is_head boolean, r int, s string, o string")


def verification_violations(
    provenance: DataFrame, atoms: DataFrame, complete: DataFrame, incomplete: DataFrame, removed: DataFrame
) -> DataFrame:
    """``h, r, t, reason``: every way the variant breaks Sec. 3.2; empty when it is sound.

    Independent of the selection code: each provenance grounding is re-instantiated from its rule's atoms
    and its variable bindings (the recorded body triples are not trusted; a variable without a binding
    fails the atom), and a removed triple is proven
    inferable when one of its groundings re-instantiates to exactly its head with every body atom in the
    incomplete KG. This checks the recorded witnesses rather than searching the incomplete KG for new
    groundings: a witness is a complete proof, and checking it costs one join per rule atom whatever the
    KG size. Also: removed triples come from the complete KG and are absent from the incomplete
    one, and the incomplete KG is a subset of the complete one.
    """
    binding = F.col("bindings")
    grounded = provenance.select("h", "r", "t", "rule_id", F.col("bindings")).withColumn(
        "witness", F.monotonically_increasing_id()
    )
    instantiated = grounded.join(atoms.withColumnRenamed("r", "atom_r"), "rule_id", "left").select(
        "witness",
        "h",
        "r",
        "t",
        "is_head",
        F.col("atom_r").alias("ar"),
        binding[F.col("s")].alias("ah"),
        binding[F.col("o")].alias("at"),
    )
    present = incomplete.select(
        F.col("h").alias("ah"), F.col("r").alias("ar"), F.col("t").alias("at"), F.lit(True).alias("present")
    ).distinct()
    checked = instantiated.join(present, ["ah", "ar", "at"], "left").select(
        "witness",
        "h",
        "r",
        "t",
        F.when(F.col("ar").isNull(), False)
        .when(
            F.col("is_head"),
            F.coalesce(
                (F.col("ah") == F.col("h")) & (F.col("ar") == F.col("r")) & (F.col("at") == F.col("t")), F.lit(False)
            ),
        )
        .otherwise(F.coalesce("present", F.lit(False)))
        .alias("ok"),
    )
    valid = (
        checked.groupBy("witness", "h", "r", "t")
        .agg(F.min(F.col("ok").cast("int")).alias("ok"))
        .filter(F.col("ok") == 1)
        .select(*TRIPLE)
        .distinct()
    )
    triples = list(TRIPLE)

    def reason(frame: DataFrame, text: str) -> DataFrame:
        return frame.select(*triples).distinct().withColumn("reason", F.lit(text))

    return (
        reason(
            removed.join(valid, triples, "left_anti"),
            "no grounding of a mined rule with its whole body in the incomplete KG",
        )
        .unionByName(reason(removed.join(complete, triples, "left_anti"), "removed triple is not in the complete KG"))
        .unionByName(
            reason(removed.join(incomplete, triples, "left_semi"), "removed triple is still in the incomplete KG")
        )
        .unionByName(
            reason(incomplete.join(complete, triples, "left_anti"), "incomplete KG triple is not in the complete KG")
        )
    )
