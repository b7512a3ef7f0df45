"""Popularity statistics of a KG (PROBE paper, Sec. 3.3) and relation functionality (AMIE).

For a triple set T (the chosen splits):

- d(e): triples in which e occurs, counting a triple once for its head and once for its tail (so a
  self-loop (e, r, e) counts twice); in_degree / out_degree split it by position.
- delta(e) = d(e) / (2 |T|)  (sums to 1 over entities).
- d(e=>r): triples with relation r in which e occurs in either position, each triple counted once
  (PROBE: "the number of triples where e participates in the relation r"; a self-loop counts once, so
  sum_r d(e=>r) = d(e) minus e's self-loops). Checked against the PROBE release's stored values, which
  agree with this choice on all four reference datasets.
- delta(r|e) = d(e=>r) / d(e).
- functionality(r) = #distinct subjects / #facts of r; inverse_functionality(r) = #distinct objects /
  #facts (AMIE, Galarraga et al.); they choose AMIE3's PCA functional variable.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def _occurrences(triples: DataFrame) -> DataFrame:
    """One row per (triple, position): ``entity, relation, o, i, l`` (out, in, self-loop flag on the head row)."""
    as_head = triples.select(
        F.col("h").alias("entity"),
        F.col("r").alias("relation"),
        F.lit(1).alias("o"),
        F.lit(0).alias("i"),
        (F.col("h") == F.col("t")).cast("int").alias("l"),
    )
    as_tail = triples.select(
        F.col("t").alias("entity"),
        F.col("r").alias("relation"),
        F.lit(0).alias("o"),
        F.lit(1).alias("i"),
        F.lit(0).alias("l"),
    )
    return as_head.unionByName(as_tail)


# Triples per aggregation task of entity_relation_counts: 32 tasks for the 20M-triple KG, whose hash
# tables (about 0.7M pairs each) fill 9% faster than 8 tasks' (BENCHMARKS.md).
TRIPLES_PER_COUNT_TASK = 625_000


def entity_relation_counts(triples: DataFrame, partitions: int) -> DataFrame:
    """``entity, relation, out_degree, in_degree, self_loops`` from ``triples(h, r, t)``: the one
    aggregation over the 2|T| occurrences; every other table is derived from it.

    The occurrences are shuffled once, by entity alone, into ``partitions`` tasks and aggregated within
    their partition: the result is hash-partitioned by entity, so :func:`entity_popularity` rolls it up
    without another shuffle. (A map-side partial aggregation would barely help: 40M occurrences make 23M
    pairs on the 20M-triple KG.) The price is that a hub's occurrences all go to one task: 1.1M rows for
    the top class at 20M triples."""
    return (
        _occurrences(triples)
        .repartition(partitions, "entity")
        .groupBy("entity", "relation")
        .agg(
            F.sum("o").cast("long").alias("out_degree"),
            F.sum("i").cast("long").alias("in_degree"),
            F.sum("l").cast("long").alias("self_loops"),
        )
    )


def entity_popularity(counts: DataFrame) -> DataFrame:
    """Per entity: ``degree`` d(e), ``in_degree``, ``out_degree``, ``self_loops`` and ``delta`` = d(e) / (2|T|),
    summed from :func:`entity_relation_counts` (d(e) = sum_r out + in; |T| = sum of ``out_degree``, one per
    triple), so the 2|T| occurrences are aggregated once, not once per table (as DuckDB's peer does)."""
    per_entity = counts.groupBy("entity").agg(*(F.sum(c).alias(c) for c in ("out_degree", "in_degree", "self_loops")))
    total = counts.agg(F.sum("out_degree").alias("_triples"))
    degree = F.col("out_degree") + F.col("in_degree")
    return per_entity.crossJoin(F.broadcast(total)).select(
        "entity",
        degree.alias("degree"),
        "in_degree",
        "out_degree",
        "self_loops",
        (degree / (2 * F.col("_triples"))).alias("delta"),
    )


def entity_relation_popularity(counts: DataFrame, entities: DataFrame, broadcast: bool = False) -> DataFrame:
    """Per (entity, relation): ``relation_degree`` = d(e=>r), ``entity_degree`` = d(e) and
    ``delta_rel_given_entity`` = d(e=>r) / d(e). ``entities`` has ``entity, degree``; ``broadcast``
    ships it to every task instead of shuffling ``counts`` by entity."""
    degrees = entities.select("entity", F.col("degree").alias("entity_degree"))
    joined = counts.join(F.broadcast(degrees) if broadcast else degrees, "entity")
    relation_degree = F.col("out_degree") + F.col("in_degree") - F.col("self_loops")
    return joined.select(
        "entity",
        "relation",
        "out_degree",
        "in_degree",
        relation_degree.alias("relation_degree"),
        "entity_degree",
        (relation_degree / F.col("entity_degree")).alias("delta_rel_given_entity"),
    )


def relation_statistics(counts: DataFrame) -> DataFrame:
    """Per relation: ``facts``, ``distinct_subjects``, ``distinct_objects``, ``functionality``,
    ``inverse_functionality``."""
    return (
        counts.groupBy("relation")
        .agg(
            F.sum("out_degree").alias("facts"),
            F.count(F.when(F.col("out_degree") > 0, 1)).alias("distinct_subjects"),
            F.count(F.when(F.col("in_degree") > 0, 1)).alias("distinct_objects"),
        )
        .withColumns(
            {
                "functionality": F.col("distinct_subjects") / F.col("facts"),
                "inverse_functionality": F.col("distinct_objects") / F.col("facts"),
            }
        )
    )


def degree_histogram(entities: DataFrame) -> DataFrame:
    """``degree, entities``: how many entities have each degree d(e) (degree >= 1)."""
    return entities.groupBy("degree").agg(F.count(F.lit(1)).alias("entities"))
