"""Refresh transformations: what a new dump changes in a dataset's triples (``kgbrink refresh``).

A refresh compares the new dump's encoded triples ``N`` with the triples ``O`` of the last complete
ingest, both sets of ``(h, r, t, split)`` rows. Its changes are ``N \\ O`` (op ``added``) and ``O \\ N``
(op ``removed``); per split, ``unchanged = |O ∩ N|``. An entity (relation) is **retired** when some
triple of ``O`` names it and no triple of ``N`` does: its id stays in the dictionary (ids are stable),
it just appears in no triple any more. Whether a table derived from the triples (statistics, a variant's
``complete`` KG) is current is decided by per-split fingerprints (:func:`split_fingerprints`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ADDED, REMOVED = "added", "removed"
KEY = ["h", "r", "t", "split"]
ROLES = {"entities": ("h", "t"), "relations": ("r",)}


def triple_diff(new: DataFrame, old: DataFrame) -> DataFrame:
    """``h, r, t, split, op``: the rows of ``new`` not in ``old`` (``added``) and those of ``old`` not in
    ``new`` (``removed``). One aggregation of both sets: a row is tagged 1 in ``new`` and 2 in ``old``, so
    its sum is 1 (added), 2 (removed) or 3 (in both, dropped). Both are sets (no repeated rows)."""
    tagged = new.select(*KEY, F.lit(1).alias("side")).unionByName(old.select(*KEY, F.lit(2).alias("side")))
    side = tagged.groupBy(*KEY).agg(F.sum("side").alias("side")).filter(F.col("side") < 3)
    return side.select(*KEY, F.when(F.col("side") == 1, F.lit(ADDED)).otherwise(F.lit(REMOVED)).alias("op"))


def changes_per_split(diff: DataFrame) -> DataFrame:
    """``split, added, removed`` from :func:`triple_diff` rows (splits without a change have no row)."""
    return diff.groupBy("split").agg(
        F.count(F.when(F.col("op") == ADDED, 1)).alias("added"),
        F.count(F.when(F.col("op") == REMOVED, 1)).alias("removed"),
    )


def retired(diff: DataFrame, new: DataFrame, kind: str) -> DataFrame:
    """``id``: the entities (``kind`` = ``entities``, roles h and t) or relations (role r) named by a
    removed triple of ``diff`` and by no triple of ``new`` (every split). Only the new triples that name a
    candidate are kept before the distinct, so the join is as small as the removed triples."""
    roles = ROLES[kind]
    removed = diff.filter(F.col("op") == REMOVED)
    candidates = None
    for role in roles:
        ids = removed.select(F.col(role).alias("id"))
        candidates = ids if candidates is None else candidates.unionByName(ids)
    candidates = candidates.distinct()
    present = None
    for role in roles:
        ids = new.select(F.col(role).alias("id")).join(candidates, "id", "left_semi")
        present = ids if present is None else present.unionByName(ids)
    return candidates.join(present.distinct(), "id", "left_anti")


def split_fingerprints(triples: DataFrame, splits: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """``{split: (rows, xor of the rows' 64-bit hashes)}`` of ``(h, r, t, split)`` rows (only ``splits``
    when given; a split without rows is absent). Equal fingerprints mean equal sets up to a 2^-64 chance
    (:func:`kgbrink.kg.ingest.triples_fingerprint`), whatever the order and the partitioning."""
    rows = triples if splits is None else triples.filter(F.col("split").isin(list(splits)))
    found = rows.groupBy("split").agg(F.count(F.lit(1)).alias("n"), F.bit_xor(F.xxhash64(*KEY)).alias("hash")).collect()
    return {r["split"]: (int(r["n"]), int(r["hash"])) for r in found}
