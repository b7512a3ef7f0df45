"""Triple scorers s_G of OKGQA-P (paper 004 Sec. 3.2 and App. A.7; spec Sec. 4.B): RR replaces a relation
by ``argmin_{r' != r} s_G(h, r', t)`` and ATS averages s_G over the perturbed triples.

The paper's s_G (Li et al., 2016) and the authors' DistilBERT classifier cannot be rebuilt offline, so the
scorer is pluggable:

- ``type_compatibility`` (default, NOT the paper's): s = sqrt(f_out(h, r) f_in(t, r)) with f_out(h, r) =
  [h is a subject of r in the original KG], f_in(t, r) = [t is an object of r]; outputs say so;
- ``embeddings``: user tables ``entity_vectors(entity, vec)``, ``relation_vectors(relation, vec)``;
  TransE s = sigmoid(gamma - ||e_h + w_r - e_t||_2) or DistMult s = sigmoid(<e_h, w_r, e_t>);
- ``scores``: a table ``(h, r, t, score)``; a needed triple missing from it is an error.

RR ties (type compatibility scores many relations 0) are broken by seeded hashes: the candidate with the
smallest ``u64(seed, "RR", scope_key, h, r, t, r')`` among the minimal scores. For type compatibility the
minimum is almost always 0, so ``draws`` seeded uniform picks among the scope's relations are tried first
and the exhaustive argmin runs only for the operations none of them settles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint
from kgbrink.graph.hashing import u64, uniform


class ScorerInputError(ValueError):
    """A scorer table lacks rows or columns it needs (the message says which and how many)."""


@dataclass
class Scorer:
    kind: str
    kg: DataFrame  # the original KG (h, r, t)
    seed: int
    model: str = "transe"
    gamma: float = 12.0
    entity_vectors: DataFrame | None = None
    relation_vectors: DataFrame | None = None
    scores: DataFrame | None = None
    draws: int = 8

    @property
    def paper_scorer(self) -> bool:
        """False for the default type-compatibility scorer, which is kgbrink's stand-in."""
        return self.kind != "type_compatibility"

    def score(self, triples: DataFrame, known: str | None = None) -> DataFrame:
        """``triples`` plus ``score`` in [0, 1]. ``known``: a boolean column true for rows that are triples of
        the original KG; type compatibility scores those 1 without a lookup (h is a subject and t an object
        of r)."""
        if self.kind == "type_compatibility":
            if known is not None:
                sure = F.coalesce(F.col(known), F.lit(False))
                return triples.where(sure).withColumn("score", F.lit(1.0)).unionByName(self.score(triples.where(~sure)))
            subj, obj = self._typed_pairs
            return (
                triples.join(subj, ["h", "r"], "left")
                .join(obj, ["t", "r"], "left")
                .withColumn("score", F.sqrt(F.coalesce("_s", F.lit(0)) * F.coalesce("_o", F.lit(0))).cast("double"))
                .drop("_s", "_o")
            )
        if self.kind == "scores":
            return _checked_join(triples, self.scores, "ATS")
        return self._embedded(triples)

    @functools.cached_property
    def _typed_pairs(self) -> tuple[DataFrame, DataFrame]:
        """The KG's distinct ``(h, r)`` (``_s`` = 1) and ``(t, r)`` (``_o`` = 1), materialized once per scorer."""
        subj = self.kg.select("h", "r").distinct().withColumn("_s", F.lit(1))
        obj = self.kg.select(F.col("t"), "r").distinct().withColumn("_o", F.lit(1))
        return checkpoint(subj), checkpoint(obj)

    def replace_relations(self, ops: DataFrame, relations: DataFrame) -> DataFrame:
        """``ops`` plus ``new_r`` = argmin over the scope's relations (``relations(scope_key, r)``) other
        than r of s(h, r', t), ties by seeded hash; null when the scope has no other relation."""
        keys = ["scope_key", "op_rank"]
        if self.kind == "type_compatibility" and self.draws > 0:  # no draws: the exhaustive argmin alone
            settled, pending = self.draw_zero_scores(ops, relations)
        else:
            settled, pending = None, ops
        # the scope's relations travel to every task (a join on scope_key alone is one task for the kg scope)
        candidates = pending.select(*keys, "h", "r", "t").join(
            F.broadcast(relations.withColumnRenamed("r", "cand")), "scope_key"
        )
        candidates = candidates.where(F.col("cand") != F.col("r"))
        scored = self.score(candidates.select(*keys, "h", F.col("cand").alias("r"), "t", F.col("r").alias("old_r")))
        tie = u64(self.seed, F.lit("RR"), "scope_key", "h", "old_r", "t", "r")
        best = scored.groupBy(*keys).agg(F.min_by("r", F.struct("score", tie.alias("tie"))).alias("new_r"))
        exhaustive = pending.join(best, keys, "left")
        return exhaustive if settled is None else settled.unionByName(exhaustive)

    def draw_zero_scores(self, ops: DataFrame, relations: DataFrame) -> tuple[DataFrame, DataFrame]:
        """Operations settled by the first seeded uniform draw of a relation r' != r with score 0, and the
        rest: draw k picks position floor(uniform(u64(seed, "RR-draw", k, scope_key, h, r, t)) n_rel) of
        the scope's relations in ascending order. s(h, r', t) = 0 iff h is no subject or t no object of r',
        so each operation meets its head's subject relations and its tail's object relations once (two
        joins of the operations), and the draws are tested in one expression."""
        rels = relations.groupBy("scope_key").agg(F.array_sort(F.collect_list("r")).alias("_rels"))
        subjects = self.kg.groupBy("h").agg(F.collect_set("r").alias("_subj"))
        objects = self.kg.groupBy("t").agg(F.collect_set("r").alias("_obj"))
        met = ops.join(F.broadcast(rels), "scope_key").join(subjects, "h", "left").join(objects, "t", "left")
        n_rel = F.size("_rels")
        new_r = F.lit(None).cast("int")
        for k in reversed(range(self.draws)):  # the first zero draw wins
            pos = F.floor(uniform(u64(self.seed, F.lit("RR-draw"), F.lit(k), "scope_key", "h", "r", "t")) * n_rel)
            cand = F.element_at("_rels", pos.cast("int") + 1)
            typed = F.coalesce(F.array_contains("_subj", cand), F.lit(False)) & F.coalesce(
                F.array_contains("_obj", cand), F.lit(False)
            )
            new_r = F.when((cand != F.col("r")) & ~typed, cand).otherwise(new_r)
        drawn = checkpoint(met.select(*ops.columns, new_r.alias("new_r")))
        return drawn.where(F.col("new_r").isNotNull()), drawn.where(F.col("new_r").isNull()).drop("new_r")

    def _embedded(self, triples: DataFrame) -> DataFrame:
        if self.entity_vectors is None or self.relation_vectors is None:
            raise ScorerInputError("the embeddings scorer needs entity_vectors and relation_vectors tables")
        ev = self.entity_vectors.select(F.col("entity"), F.col("vec").cast("array<double>"))
        rv = self.relation_vectors.select(F.col("relation").alias("r"), F.col("vec").cast("array<double>").alias("w"))
        joined = (
            triples.join(ev.withColumnRenamed("entity", "h").withColumnRenamed("vec", "eh"), "h", "left")
            .join(ev.withColumnRenamed("entity", "t").withColumnRenamed("vec", "et"), "t", "left")
            .join(rv, "r", "left")
        )
        missing = joined.where(F.col("eh").isNull() | F.col("et").isNull() | F.col("w").isNull())
        n_missing = missing.count()
        if n_missing:
            example = missing.select("h", "r", "t").first()
            raise ScorerInputError(
                f"embeddings scorer: {n_missing} triples lack an entity or relation vector "
                f"(e.g. h={example.h}, r={example.r}, t={example.t})"
            )
        if self.model == "transe":
            diff = F.zip_with(F.zip_with("eh", "w", lambda a, b: a + b), "et", lambda a, b: a - b)
            norm = F.sqrt(F.aggregate(diff, F.lit(0.0), lambda acc, x: acc + x * x))
            raw = F.lit(self.gamma) - norm
        else:
            prod = F.zip_with(F.zip_with("eh", "w", lambda a, b: a * b), "et", lambda a, b: a * b)
            raw = F.aggregate(prod, F.lit(0.0), lambda acc, x: acc + x)
        return joined.withColumn("score", 1.0 / (1.0 + F.exp(-raw))).drop("eh", "et", "w")


def _checked_join(triples: DataFrame, scores: DataFrame | None, purpose: str) -> DataFrame:
    if scores is None:
        raise ScorerInputError("the scores scorer needs a table of scored triples (h, r, t, score)")
    missing_cols = {"h", "r", "t", "score"} - set(scores.columns)
    if missing_cols:
        raise ScorerInputError(f"the scores table lacks column(s) {', '.join(sorted(missing_cols))}")
    table = scores.select("h", "r", "t", F.col("score").cast("double").alias("score")).dropDuplicates(["h", "r", "t"])
    joined = triples.join(table, ["h", "r", "t"], "left")
    n_missing = joined.where(F.col("score").isNull()).count()
    if n_missing:
        example = joined.where(F.col("score").isNull()).select("h", "r", "t").first()
        raise ScorerInputError(
            f"the scores table misses {n_missing} triples {purpose} needs (e.g. h={example.h}, r={example.r}, "
            f"t={example.t})"
        )
    return joined


def numpy_scores(eh: np.ndarray, w: np.ndarray, et: np.ndarray, model: str, gamma: float) -> np.ndarray:
    """Scores of row-aligned vectors (used by tests as the oracle of the Spark expressions)."""
    raw = gamma - np.linalg.norm(eh + w - et, axis=1) if model == "transe" else (eh * w * et).sum(axis=1)
    return 1 / (1 + np.exp(-raw))
