"""Deterministic random choices from seeded hashes of content (spec Sec. 1.2).

Every choice is a function of (seed, content keys), never of row order or partitioning:

- ``u64(seed, *keys)`` = Spark ``xxhash64`` of the seed and the keys (signed 64-bit);
- :func:`uniform`: ``((u64 & 0x7FFF_FFFF_FFFF_FFFF) + 0.5) / 2^63`` in (0, 1);
- :func:`smallest`: exactly m rows, those with the smallest ``(u64, keys)`` (signed order), without a
  global sort: one count per top-16-bit bucket of the hash finds the bucket holding the m-th row; the rows of lower
  buckets are taken whole and that bucket's smallest fill up to m. Taking the m smallest of one order
  makes levels nested: the rows taken for m are a subset of those taken for any m' > m;
- :func:`smallest_per_key`: the same choice within each group of small groups (a window per group), for
  per-question caps.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

_MASK = 0x7FFF_FFFF_FFFF_FFFF
_BUCKET_SHIFT = 48  # u64 >> 48 (arithmetic): the top 16 bits, monotone in the signed hash


def u64(seed: int, *keys: str | Column) -> Column:
    """The seeded 64-bit hash of ``keys`` (column names or columns)."""
    return F.xxhash64(F.lit(seed), *[F.col(k) if isinstance(k, str) else k for k in keys])


def uniform(hash_column: Column) -> Column:
    """A double uniform in (0, 1) from a 64-bit hash column."""
    return (hash_column.bitwiseAND(F.lit(_MASK)).cast("double") + 0.5) / float(2**63)


def smallest(frame: DataFrame, m: int, hash_column: str, keys: list[str]) -> DataFrame:
    """The ``m`` rows of ``frame`` with the smallest ``(hash_column, *keys)`` (all rows if fewer), plus a
    column ``op_rank`` (0-based position in that order). ``keys`` must make the order unique.

    Two passes over ``frame`` (cache it if it is expensive); the bucket that holds the m-th row is ordered
    with a window over that bucket alone (a few hundred rows of a 20M-row table)."""
    if m < 0:
        raise ValueError(f"smallest: m must be >= 0, got {m}")
    bucket = F.shiftright(F.col(hash_column), _BUCKET_SHIFT).cast("int")
    counts = sorted(
        (row["b"], row["n"]) for row in frame.groupBy(bucket.alias("b")).agg(F.count("*").alias("n")).collect()
    )
    below, boundary, need = 0, None, m
    for b, n in counts:
        if need <= n:
            boundary = b
            break
        below, need = below + n, need - n
    order = [F.col(hash_column), *[F.col(k) for k in keys]]
    marked = frame.withColumn("_bucket", bucket)
    if boundary is None:  # m >= all rows
        chosen = marked
    else:
        low = marked.where(F.col("_bucket") < boundary)
        edge = marked.where(F.col("_bucket") == boundary)
        edge = edge.withColumn("_pos", F.row_number().over(Window.partitionBy("_bucket").orderBy(*order)))
        chosen = low.unionByName(edge.where(F.col("_pos") <= need).drop("_pos"))
    # op_rank = the rows of the lower buckets + the position within the bucket; the offsets travel as a
    # small broadcast table (a map literal of 65,536 buckets makes Catalyst's planning quadratic)
    offsets, acc = [], 0
    for b, n in counts:
        offsets.append((b, acc))
        acc += n
    offset_table = frame.sparkSession.createDataFrame(offsets or [(0, 0)], "_bucket int, _offset long")
    within = F.row_number().over(Window.partitionBy("_bucket").orderBy(*order)) - 1
    ranked = chosen.join(F.broadcast(offset_table), "_bucket").withColumn("op_rank", F.col("_offset") + within)
    return ranked.drop("_bucket", "_offset")


def smallest_per_key(
    frame: DataFrame, m: int | None, key: list[str], hash_column: Column, order: list[str], first: Column | None = None
) -> tuple[DataFrame, DataFrame]:
    """``(kept, counts(*key, n_before_cap, capped))``: per group of ``key`` the ``m`` rows with the smallest
    ``(hash_column, *order)`` (all rows when ``m`` is None or the group is small enough). ``order`` must make
    the order unique within a group; rows with ``first`` true come before all others (e.g. complete walks
    before partial ones). One window over the groups: for groups of up to a few million rows."""
    counts = frame.groupBy(*key).agg(F.count("*").alias("n_before_cap"))
    if m is None:
        return frame, counts.withColumn("capped", F.lit(False))
    if m < 0:
        raise ValueError(f"smallest_per_key: m must be >= 0, got {m}")
    ranks = [] if first is None else [F.desc(first)]
    window = Window.partitionBy(*key).orderBy(*ranks, hash_column, *[F.col(c) for c in order])
    kept = frame.withColumn("_pos", F.row_number().over(window)).where(F.col("_pos") <= m).drop("_pos")
    return kept, counts.withColumn("capped", F.col("n_before_cap") > m)
