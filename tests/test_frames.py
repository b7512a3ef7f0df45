"""Shared DataFrame functions: dense positions in a total order without a single-partition window."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.frames import distinct_packed, hash_partitioned, spread_join, tasks_for, with_positions
from kgbrink.core.session import session_setting


def test_positions_follow_the_order_from_start(spark):
    frame = spark.createDataFrame([("c", 1), ("a", 2), ("d", 3), ("b", 1)], "key string, group int")
    expected = spark.createDataFrame(
        [("a", 2, 10), ("b", 1, 11), ("c", 1, 12), ("d", 3, 13)], "key string, group int, position long"
    )
    assertDataFrameEqual(with_positions(frame, ["key"], "position", start=10), expected)
    # a compound order: group first, then key
    by_group = {r["key"]: r["n"] for r in with_positions(frame, ["group", "key"], "n").collect()}
    assert by_group == {"b": 0, "c": 1, "a": 2, "d": 3}
    descending = {r["key"]: r["n"] for r in with_positions(frame, [F.col("key").desc()], "n").collect()}
    assert descending == {"d": 0, "c": 1, "b": 2, "a": 3}


def test_positions_of_an_empty_frame(spark):
    empty = spark.createDataFrame([], "key string")
    assert with_positions(empty, ["key"], "position").collect() == []


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.integers(-1000, 1000), unique=True, max_size=60),
    partitions=st.integers(1, 6),
    shuffle=st.integers(1, 9),
)
def test_positions_are_ranks_whatever_the_partitioning(spark, keys, partitions, shuffle):
    frame = spark.createDataFrame([(k,) for k in keys], "key int").repartition(partitions)
    with session_setting(spark, "spark.sql.shuffle.partitions", str(shuffle)):
        got = {r["key"]: r["position"] for r in with_positions(frame, [F.xxhash64("key"), "key"], "position").collect()}
    hashes = {
        r["key"]: r["h"]
        for r in spark.createDataFrame([(k,) for k in keys], "key int")
        .select("key", F.xxhash64("key").alias("h"))
        .collect()
    }
    assert got == {k: i for i, k in enumerate(sorted(keys, key=lambda k: (hashes[k], k)))}


def test_distinct_packed_drops_repeats_packed_or_not(spark):
    frame = spark.createDataFrame([(1, 5, 3), (1, 5, 3), (0, 5, 3), (1, 4, 3), (1, 5, 2)], "a int, b int, c int")
    expected = [(1, 5, 3), (0, 5, 3), (1, 4, 3), (1, 5, 2)]
    assertDataFrameEqual(distinct_packed(frame, {"a": 1, "b": 3, "c": 2}, 4), expected)  # 6 bits: one long
    assertDataFrameEqual(distinct_packed(frame, {"a": 1, "b": 31, "c": 32}, 4), expected)  # 64 bits: as columns
    # a value wider than its width (or negative) fails instead of colliding with another row
    with pytest.raises(Exception, match=r"internal: column b = [45] does not fit 2 bits"):
        distinct_packed(frame, {"a": 1, "b": 2, "c": 2}, 4).collect()
    with pytest.raises(Exception, match=r"internal: column c = null does not fit 2 bits"):
        distinct_packed(
            spark.createDataFrame([(0, 0, None)], "a int, b int, c int"), {"a": 1, "b": 2, "c": 2}, 2
        ).collect()
    # exactly 63 bits: the first column reaches the highest bit below the sign bit
    top = 2**31 - 1
    edge = spark.createDataFrame([(1, top, top), (0, 0, 0), (1, top, top), (1, 0, top)], "a int, b int, c int")
    assertDataFrameEqual(distinct_packed(edge, {"a": 1, "b": 31, "c": 31}, 3), [(1, top, top), (0, 0, 0), (1, 0, top)])
    with pytest.raises(Exception, match=r"internal: column a = -1 does not fit 1 bits"):
        distinct_packed(
            spark.createDataFrame([(-1, 0, 0)], "a int, b int, c int"), {"a": 1, "b": 1, "c": 1}, 2
        ).collect()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**20 - 1), st.integers(0, 7)), max_size=80),
    partitions=st.integers(1, 5),
    wide=st.booleans(),
)
def test_distinct_packed_is_the_set_of_rows(spark, rows, partitions, wide):
    frame = spark.createDataFrame(rows + rows[: len(rows) // 2], "a int, b int, c int").repartition(3)
    bits = {"a": 2, "b": 40 if wide else 20, "c": 30 if wide else 3}
    got = sorted(tuple(r) for r in distinct_packed(frame, bits, partitions).collect())
    assert got == sorted(set(rows))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    left=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 2, None]), st.integers(0, 1), st.integers(0, 9)), max_size=40),
    right=st.lists(st.tuples(st.sampled_from([0, 0, 0, 0, 1, 3]), st.integers(0, 1), st.integers(0, 9)), max_size=60),
    per_task=st.sampled_from([1, 2, 5, 10**9]),
    spread_max=st.integers(1, 7),
)
def test_spread_join_is_the_join_whatever_the_spread(spark, left, right, per_task, spread_max):
    """Hub keys (0: most rows of both sides), repeated rows, null keys: the rows of the plain join, each once."""
    lefts = spark.createDataFrame(left, "x int, r int, a int").repartition(2)
    rights = spark.createDataFrame(right, "x int, r int, b int").repartition(3)
    got = sorted(tuple(r) for r in spread_join(lefts, rights, ["x", "r"], per_task, spread_max).collect())
    assert got == sorted((x, r, a, b) for x, r, a in left for y, s, b in right if x is not None and (x, r) == (y, s))


def test_a_hub_keys_matches_are_spread_over_tasks(spark):
    """One key with 40 x 50 matches at 100 a task: 20 salts, no task holds more than a quarter of them."""
    lefts = spark.createDataFrame([(0, 0, a) for a in range(40)] + [(1, 0, 0)], "x int, r int, a int")
    rights = spark.createDataFrame([(0, 0, b) for b in range(50)] + [(1, 0, 1)], "x int, r int, b int")
    joined = spread_join(lefts, rights, ["x", "r"], 100).groupBy(F.spark_partition_id().alias("task")).count()
    with (
        session_setting(spark, "spark.sql.adaptive.enabled", "false"),
        session_setting(spark, "spark.sql.shuffle.partitions", "64"),
    ):
        counts = [r["count"] for r in joined.collect()]
    assert sum(counts) == 40 * 50 + 1 and max(counts) <= 2000 // 4


def test_tasks_for_rows():
    assert tasks_for(20_000_000, 200_000, 8) == 100
    assert tasks_for(20_000_001, 200_000, 8) == 101  # a partial task counts
    assert tasks_for(1_000, 200_000, 8) == 8  # never fewer than the session's shuffle partitions
    assert tasks_for(20_000_000, 625_000, 200) == 200


def _final_exchanges(frame) -> int:
    """Shuffles in the plan that ran (adaptive execution prints the final plan before the initial one)."""
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return plan.split("Initial Plan")[0].count("Exchange hashpartitioning")


def test_hash_partitioned_rows_are_not_shuffled_again_by_a_join_on_their_columns(spark):
    rows = spark.createDataFrame([(1, 2, 3), (1, 2, 3), (4, 5, 6), (7, 8, 9)], "h int, r int, t int")
    other = spark.createDataFrame([(1, 2, 3, "a"), (2, 2, 2, "b"), (7, 8, 9, "c")], "h int, r int, t int, x string")
    adaptive = session_setting(spark, "spark.sql.adaptive.enabled", "true")  # as outside tests (conf/test.yaml)
    with adaptive, session_setting(spark, "spark.sql.autoBroadcastJoinThreshold", "-1"):
        known = hash_partitioned(rows)
        assertDataFrameEqual(known, [(1, 2, 3), (4, 5, 6), (7, 8, 9)])
        kept = other.join(known, ["h", "r", "t"], "left_anti")
        assertDataFrameEqual(kept, [(2, 2, 2, "b")])
        assert _final_exchanges(kept) == 1  # the other side only
        plain = other.join(rows.distinct().localCheckpoint(), ["h", "r", "t"], "left_anti")
        assertDataFrameEqual(plain, [(2, 2, 2, "b")])
        assert _final_exchanges(plain) == 2  # what the checkpoint alone gives: both sides
        assert spark.conf.get("spark.sql.adaptive.enabled") == "true"  # restored after the checkpoint


def test_hash_partitioned_on_some_columns_keeps_every_row_and_serves_joins_on_them(spark):
    index = spark.createDataFrame([(0, 10), (1, 11), (2, 10), (3, 12)], "gpos long, entity int")
    draws = spark.createDataFrame([(7, 2), (8, 0), (9, 2), (9, 5)], "qid int, gpos long")
    with session_setting(spark, "spark.sql.autoBroadcastJoinThreshold", "-1"):
        parted = hash_partitioned(index, ["gpos"])
        assertDataFrameEqual(parted, index)  # no distinct: duplicate entities stay
        joined = draws.join(parted, "gpos")
        assertDataFrameEqual(joined.select("qid", "entity"), [(7, 10), (8, 10), (9, 10)])
        assert _final_exchanges(joined) == 1
