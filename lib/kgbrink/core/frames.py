"""Small composable DataFrame functions shared by the domain steps."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core.session import CHECKPOINT_MODE, session_setting

_INDEX_BITS = 33  # monotonically_increasing_id() = (partition index << 33) + row index within the partition


def checkpoint(frame: DataFrame, eager: bool = True) -> DataFrame:
    """``frame`` materialized with its lineage cut, as the running job's ``spark.checkpoint`` setting says
    (:func:`kgbrink.core.session.job_checkpoints`): ``reliable`` writes it as files under the job's
    checkpoint folder, so it outlives the executors that computed it; ``local`` (also outside a job) keeps
    its blocks on those executors, faster but lost with them. The one place a step cuts lineage."""
    if checkpoint_mode(frame.sparkSession) == "reliable":
        return frame.checkpoint(eager)
    return frame.localCheckpoint(eager)


def checkpoint_mode(spark) -> str:
    """``reliable`` or ``local``: how :func:`checkpoint` cuts lineage in the running job."""
    return spark.conf.get(CHECKPOINT_MODE, "local")


def with_positions(frame: DataFrame, order: list[str | Column], column: str, start: int = 0) -> DataFrame:
    """``frame`` plus ``column`` (long): ``start`` + the row's 0-based position in the order ``order``, a
    dense numbering that depends only on the content. ``order`` must be unique per row (end it with a key),
    otherwise tied rows are numbered in an arbitrary order.

    Unlike ``row_number()`` over an unpartitioned window, which moves every row into one task, the rows
    are range-partitioned by ``order`` and sorted within their range; a row's position is the number of
    rows in the ranges before it (one count per range reaches the driver) plus its index in its range
    (``monotonically_increasing_id`` taken right after the sort). The numbered rows are checkpointed
    (:func:`checkpoint`), so the counts and the positions come from one computation; recomputed, a range
    gives the same rows in the same order (the order is total), so the same positions."""
    mark = "_kgbrink_mid"
    numbered = (
        frame.repartitionByRange(*order).sortWithinPartitions(*order).withColumn(mark, F.monotonically_increasing_id())
    )
    numbered = checkpoint(numbered)
    part = F.shiftright(F.col(mark), _INDEX_BITS)
    counts = sorted((row[0], row[1]) for row in numbered.groupBy(part.alias("part")).count().collect())
    pairs, offset = [], start
    for index, count in counts:
        pairs += [F.lit(index), F.lit(offset).cast("long")]
        offset += count
    before = F.create_map(*pairs)[part] if pairs else F.lit(start).cast("long")
    within = F.col(mark).bitwiseAND(F.lit((1 << _INDEX_BITS) - 1))
    return numbered.select(*frame.columns, (before + within).alias(column))


def tasks_for(rows: int, rows_per_task: int, minimum: int) -> int:
    """How many tasks give each about ``rows_per_task`` of ``rows`` rows, at least ``minimum`` (the
    session's shuffle partitions)."""
    return max(minimum, -(-rows // rows_per_task))


def distinct_in_tasks(frame: DataFrame, partitions: int) -> DataFrame:
    """The distinct rows of ``frame``, hashed into ``partitions`` tasks first. For rows that are nearly all
    distinct this beats Spark's default plan: its map-side partial aggregation cannot shrink them, and each
    task's hash table stays cache-sized (40M entity codes -> 4.45M at 20M triples: 7 s against 12-13 s).
    Rows with few distinct values want the default plan instead."""
    return frame.repartition(partitions, *frame.columns).distinct()


def distinct_packed(frame: DataFrame, bits: dict[str, int], partitions: int) -> DataFrame:
    """The distinct rows of ``frame``, whose columns are the non-negative ints named in ``bits`` (column ->
    bits it needs). When the widths add up to at most 63 the rows travel as one packed long (the first
    column in the highest bits): one 8-byte key to hash, shuffle and compare instead of a row of columns.
    Otherwise the columns travel as they are. Either way they are de-duplicated in ``partitions`` tasks
    (:func:`distinct_in_tasks`). A value that does not fit its width (or is null) fails the query."""
    names = list(bits)
    if sum(bits.values()) > 63:
        return distinct_in_tasks(frame.select(*names), partitions)
    shifts, offset = {}, 0
    for name in reversed(names):
        shifts[name], offset = offset, offset + bits[name]
    key = F.lit(0).cast("long")
    for name in names:
        value = F.col(name).cast("long")
        too_wide = value.isNull() | (value < 0) | (value >= F.lit(1 << bits[name]))
        fail = F.raise_error(
            F.format_string(f"internal: column {name} = %s does not fit {bits[name]} bits", F.col(name))
        )
        key = key.bitwiseOR(F.shiftleft(F.when(too_wide, fail).otherwise(value), shifts[name]))
    keys = distinct_in_tasks(frame.select(key.alias("_packed")), partitions)
    return keys.select(
        *(
            F.shiftright(F.col("_packed"), shifts[n]).bitwiseAND(F.lit((1 << bits[n]) - 1)).cast("int").alias(n)
            for n in names
        )
    )


def hash_partitioned(frame: DataFrame, on: list[str] | None = None) -> DataFrame:
    """``frame`` checkpointed with its hash partitioning (the session's shuffle partitions) recorded, so a
    join on the partitioning columns shuffles only its other side. Without ``on``: the distinct rows
    (:func:`distinct_in_tasks`), partitioned on all columns; with ``on``: the rows as they are, partitioned
    on those columns. The checkpoint runs with adaptive execution off: with it on, Spark 4.2 records no
    partitioning for a checkpoint and every later join shuffles the rows again."""
    spark = frame.sparkSession
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    with session_setting(spark, "spark.sql.adaptive.enabled", "false"):
        parted = distinct_in_tasks(frame, n) if on is None else frame.repartition(n, *on)
        return checkpoint(parted)


SPREAD_MAX = 1024  # tasks a hot key's matches are spread over, at most


def spread_join(
    left: DataFrame, right: DataFrame, keys: list[str], output_rows_per_task: int, spread_max: int = SPREAD_MAX
) -> DataFrame:
    """``left.join(right, keys)`` (inner), its rows the same, with each hot key's matches spread over several
    tasks: a key with n_left x n_right > ``output_rows_per_task`` matches gets s = min(ceil(n_left x n_right
    / output_rows_per_task), ``spread_max``) salts; the larger side's rows of that key take one salt each
    (a hash of the row's content), the other side's are copied to every salt, and the join is on the keys and
    the salt. A hub key (an entity with a million facts of one relation) is then joined in s tasks instead of
    one; other keys keep salt 0. The hot keys come to the driver (one row each)."""
    spark = left.sparkSession
    n_left = left.groupBy(*keys).agg(F.count("*").alias("_n_left"))
    n_right = right.groupBy(*keys).agg(F.count("*").alias("_n_right"))
    product = F.col("_n_left") * F.col("_n_right")
    hot = (
        n_left.join(n_right, keys)
        .where(product > output_rows_per_task)
        .select(
            *keys,
            F.least(F.ceil(product / output_rows_per_task), F.lit(spread_max)).cast("int").alias("_spread"),
            (F.col("_n_left") >= F.col("_n_right")).alias("_split_left"),
        )
        .collect()
    )
    if not hot:
        return left.join(right, keys)
    schema = left.select(*keys).schema.add("_spread", T.IntegerType()).add("_split_left", T.BooleanType())
    spread = F.broadcast(spark.createDataFrame(hot, schema))

    def salted(frame: DataFrame, split: Column) -> DataFrame:
        content = F.xxhash64(*[F.col(c) for c in frame.columns])
        salts = (
            F.when(F.col("_spread").isNull(), F.array(F.lit(0)))
            .when(split, F.array(F.pmod(content, F.col("_spread")).cast("int")))
            .otherwise(F.sequence(F.lit(0), F.col("_spread") - 1))
        )
        return frame.join(spread, keys, "left").withColumn("_salt", F.explode(salts)).drop("_spread", "_split_left")

    joined = salted(left, F.col("_split_left")).join(salted(right, ~F.col("_split_left")), [*keys, "_salt"])
    return joined.drop("_salt")
