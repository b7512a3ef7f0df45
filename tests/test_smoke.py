"""The session the factory builds can use Delta (write, read, time travel) and GraphFrames."""

from __future__ import annotations

import pytest
from kgbrink.session import find_jars, has_jar
from pyspark.testing import assertDataFrameEqual


def test_delta_write_read_and_time_travel(spark, work_dir):
    path = str(work_dir / "smoke_delta")
    spark.createDataFrame([(1, "a"), (2, "b")], "id int, key string").write.format("delta").save(path)
    spark.createDataFrame([(3, "c")], "id int, key string").write.format("delta").mode("overwrite").save(path)
    assertDataFrameEqual(spark.read.format("delta").load(path), [(3, "c")])
    assertDataFrameEqual(spark.read.format("delta").option("versionAsOf", 0).load(path), [(1, "a"), (2, "b")])


def test_session_has_jars_from_local_cache_only(spark, config):
    jars = spark.conf.get("spark.jars").split(",")
    assert has_jar(jars, "delta-spark_4.2_2.13-4.4.0")
    assert jars == find_jars(config.get("spark.jars_dirs"))
    assert spark.conf.get("spark.jars.packages", "") == ""  # nothing resolved through Ivy at start-up


GRAPHFRAMES_JARS = has_jar(find_jars(["./.cache/jars/graphframes"]), "graphframes-spark4")


@pytest.mark.skipif(
    not GRAPHFRAMES_JARS,
    reason="GraphFrames jars (io.graphframes:graphframes-spark4_2.13) are not in the Maven repository this machine "
    "reaches; `make jars` resolves them where they are (README, 'GraphFrames')",
)
def test_graphframes_connected_components(spark):
    from graphframes import GraphFrame

    vertices = spark.createDataFrame([(i,) for i in range(6)], "id long")
    edges = spark.createDataFrame([(0, 1), (1, 2), (3, 4)], "src long, dst long")
    components = GraphFrame(vertices, edges).connectedComponents(algorithm="graphframes")
    groups = sorted(sorted(r["ids"]) for r in components.groupBy("component").agg({"id": "collect_list"}).withColumnRenamed("collect_list(id)", "ids").collect())
    assert groups == [[0, 1, 2], [3, 4], [5]]
