"""The session the factory builds can use Delta (write, read, time travel) and GraphFrames."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.session import DELTA_SETTINGS, find_jars, has_jar, require_driver_class
from kgbrink.core.typed import ConfigError
from kgbrink.sizing import eventlog, report
from tests.conftest import PROJECT_ROOT


def test_delta_write_read_and_time_travel(spark, work_dir):
    path = str(work_dir / "smoke_delta")
    spark.createDataFrame([(1, "a"), (2, "b")], "id int, key string").write.format("delta").save(path)
    spark.createDataFrame([(3, "c")], "id int, key string").write.format("delta").mode("overwrite").save(path)
    assertDataFrameEqual(spark.read.format("delta").load(path), [(3, "c")])
    assertDataFrameEqual(spark.read.format("delta").option("versionAsOf", 0).load(path), [(1, "a"), (2, "b")])


def test_session_has_jars_from_local_cache_only(spark, config):
    jars = spark.conf.get("spark.jars").split(",")
    assert has_jar(jars, "delta-spark_4.2_2.13-4.4.0")
    assert jars == find_jars(config.spark.jars_dirs)
    assert spark.conf.get("spark.jars.packages", "") == ""  # nothing resolved through Ivy at start-up


GRAPHFRAMES_JARS = has_jar(find_jars(["./.cache/jars/graphframes"]), "graphframes-spark4")


@pytest.mark.skipif(
    not GRAPHFRAMES_JARS,
    reason="GraphFrames jars (io.graphframes:graphframes-spark4_2.13) are not in the Maven repository this machine "
    "reaches; `make jars` resolves them where they are (docs/configuration.md, 'GraphFrames')",
)
def test_graphframes_connected_components(spark):
    from graphframes import GraphFrame

    vertices = spark.createDataFrame([(i,) for i in range(6)], "id long")
    edges = spark.createDataFrame([(0, 1), (1, 2), (3, 4)], "src long, dst long")
    components = GraphFrame(vertices, edges).connectedComponents(algorithm="graphframes")
    groups = sorted(
        sorted(r["ids"])
        for r in components.groupBy("component")
        .agg({"id": "collect_list"})
        .withColumnRenamed("collect_list(id)", "ids")
        .collect()
    )
    assert groups == [[0, 1, 2], [3, 4], [5]]


def test_a_driver_jvm_without_the_jars_is_named(spark):
    with pytest.raises(ConfigError, match=r"cannot load io\.delta\.NoSuchClass: .* pass them: --jars a\.jar,b\.jar"):
        require_driver_class(spark, "io.delta.NoSuchClass", ["a.jar", "b.jar"])
    require_driver_class(spark, DELTA_SETTINGS["spark.sql.extensions"], [])


def test_spark_submit_in_client_mode_with_the_jars_as_the_readme_says(config, tmp_path):
    # spark-submit starts the driver JVM before the factory runs, so the jars go on its command line
    script = tmp_path / "job.py"
    # with an event log (issue 71): its stages labelled, read back by kgbrink profile
    events = tmp_path / "events"
    script.write_text(
        "import sys\nfrom kgbrink.core.loader import load_config\nfrom kgbrink.core.session import spark_session\n"
        "from kgbrink.core.jobs import labelled\n"
        f"spark = spark_session(load_config({config.source!r}, ['spark.master=null', 'spark.event_log_dir={events}']))\n"
        "with labelled(spark, job='smoke', step='write'):\n"
        "    spark.range(3).write.format('delta').save(sys.argv[1])\n"
        "print('rows', spark.read.format('delta').option('versionAsOf', 0).load(sys.argv[1]).count())\n"
        "spark.stop()\n"
    )
    jars = ",".join(find_jars(config.spark.jars_dirs))
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }  # kgbrink is installed in the venv
    submit = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        "local[1]",
        "--deploy-mode",
        "client",
        "--driver-memory",
        "1g",
    ]
    done = subprocess.run(
        [*submit, "--jars", jars, str(script), str(tmp_path / "table")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=300,
    )
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    (log,) = eventlog.log_files(events)
    app = eventlog.read(log)
    assert app.complete and app.spark_version.startswith("4.") and app.jobs
    labels = {(stage.label, stage.step) for stage in app.stages.values()}
    assert ("smoke", "write") in labels and ("", "") in labels  # the count: outside the labelled block
    document = report.profile(app, (1, 2, 8))
    assert 0 < document["total"]["t_inf"] <= document["total"]["predicted"]["8"] <= document["total"]["predicted"]["1"]
    assert document["total"]["tasks"] == sum(len(stage.tasks) for stage in app.stages.values()) > 0
    assert {row["job"] for row in document["jobs"]} == {"smoke", report.UNLABELLED}
