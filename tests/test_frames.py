"""Shared DataFrame functions: dense positions in a total order without a single-partition window."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kgbrink.frames import with_positions
from kgbrink.session import session_setting
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual


def test_positions_follow_the_order_from_start(spark):
    frame = spark.createDataFrame([("c", 1), ("a", 2), ("d", 3), ("b", 1)], "key string, group int")
    expected = spark.createDataFrame([("a", 2, 10), ("b", 1, 11), ("c", 1, 12), ("d", 3, 13)], "key string, group int, position long")
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
@given(keys=st.lists(st.integers(-1000, 1000), unique=True, max_size=60), partitions=st.integers(1, 6), shuffle=st.integers(1, 9))
def test_positions_are_ranks_whatever_the_partitioning(spark, keys, partitions, shuffle):
    frame = spark.createDataFrame([(k,) for k in keys], "key int").repartition(partitions)
    with session_setting(spark, "spark.sql.shuffle.partitions", str(shuffle)):
        got = {r["key"]: r["position"] for r in with_positions(frame, [F.xxhash64("key"), "key"], "position").collect()}
    hashes = {r["key"]: r["h"] for r in spark.createDataFrame([(k,) for k in keys], "key int").select("key", F.xxhash64("key").alias("h")).collect()}
    assert got == {k: i for i, k in enumerate(sorted(keys, key=lambda k: (hashes[k], k)))}
