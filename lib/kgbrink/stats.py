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

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def entity_relation_counts(triples: DataFrame) -> DataFrame:
    """``entity, relation, out_degree, in_degree, self_loops`` from ``triples(h, r, t)``."""
    as_head = triples.select(
        F.col("h").alias("entity"), F.col("r").alias("relation"), F.lit(1).alias("o"), F.lit(0).alias("i"), (F.col("h") == F.col("t")).cast("int").alias("l")
    )
    as_tail = triples.select(F.col("t").alias("entity"), F.col("r").alias("relation"), F.lit(0).alias("o"), F.lit(1).alias("i"), F.lit(0).alias("l"))
    return (
        as_head.unionByName(as_tail)
        .groupBy("entity", "relation")
        .agg(F.sum("o").cast("long").alias("out_degree"), F.sum("i").cast("long").alias("in_degree"), F.sum("l").cast("long").alias("self_loops"))
    )


def entity_relation_popularity(counts: DataFrame) -> DataFrame:
    """Per (entity, relation): ``relation_degree`` = d(e=>r), ``entity_degree`` = d(e) and
    ``delta_rel_given_entity`` = d(e=>r) / d(e)."""
    per_entity = Window.partitionBy("entity")
    return counts.select(
        "entity",
        "relation",
        "out_degree",
        "in_degree",
        (F.col("out_degree") + F.col("in_degree") - F.col("self_loops")).alias("relation_degree"),
        F.sum(F.col("out_degree") + F.col("in_degree")).over(per_entity).alias("entity_degree"),
    ).withColumn("delta_rel_given_entity", F.col("relation_degree") / F.col("entity_degree"))


def entity_popularity(counts: DataFrame) -> DataFrame:
    """Per entity: ``degree`` d(e), ``in_degree``, ``out_degree``, ``self_loops`` and ``delta`` = d(e) / (2|T|)."""
    per_entity = counts.groupBy("entity").agg(
        F.sum("out_degree").alias("out_degree"), F.sum("in_degree").alias("in_degree"), F.sum("self_loops").alias("self_loops")
    )
    total = counts.agg(F.sum("out_degree").alias("_triples"))
    return per_entity.crossJoin(F.broadcast(total)).select(
        "entity",
        (F.col("out_degree") + F.col("in_degree")).alias("degree"),
        "in_degree",
        "out_degree",
        "self_loops",
        ((F.col("out_degree") + F.col("in_degree")) / (2 * F.col("_triples"))).alias("delta"),
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
