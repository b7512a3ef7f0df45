"""Lean jobs (issue 43): every job summary counts the Spark jobs and stages it launched and the Delta
commits it made; Delta commits happen in ``kgbrink.core`` alone, so none escapes the count."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.core.console import human_summary
from kgbrink.core.jobs import REGISTRY, Job, JobContext
from kgbrink.core.tracking import JobSummary
from tests.conftest import PROJECT_ROOT


def test_a_job_counts_its_spark_jobs_stages_and_delta_commits(spark, config, tmp_path, monkeypatch):
    table = str(tmp_path / "table")

    def body(ctx, options):
        with ctx.step("actions"):
            ctx.spark.range(10).count()
            five = ctx.spark.range(5)
            five.groupBy((five.id % 2).alias("odd")).count().collect()
        with ctx.step("writes"):
            ctx.write("table", ctx.spark.range(3), table)
            ctx.write("table", ctx.spark.range(4), table)
        return ctx.summary

    monkeypatch.setitem(REGISTRY, "counted", Job("counted", "", object, body))
    context = spark.sparkContext
    context.setJobGroup("kgbrink-test-actions", "counted")
    try:
        summary = JobContext(spark, config).run("counted", None)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    ids = tracker.getJobIdsForGroup("kgbrink-test-actions")
    stages = {stage for job in ids for stage in tracker.getJobInfo(job).stageIds}
    actions = summary.actions
    assert actions["spark_jobs"] == len(ids) > 2
    assert actions["spark_stages"] == len(stages)
    assert actions["delta_commits"] == 2 == len(list((tmp_path / "table" / "_delta_log").glob("*.json")))
    by_step = actions["by_step"]
    assert by_step["writes"]["delta_commits"] == 2 and by_step["actions"]["delta_commits"] == 0
    assert sum(step["spark_jobs"] for step in by_step.values()) == actions["spark_jobs"]
    assert summary.as_dict()["actions"] == actions
    line = f"  spark: {len(ids)} jobs, {len(stages)} stages, 2 Delta commits"
    assert line in human_summary(summary, None, None)


def test_delta_commits_are_made_in_core_alone():
    writes = re.compile(r'format\("delta"\)|DeltaTable|saveAsTable|insertInto|\b(UPDATE|ALTER TABLE|DELETE FROM)\s')
    found = [
        f"{path.relative_to(PROJECT_ROOT)}:{number}"
        for path in sorted((PROJECT_ROOT / "lib" / "kgbrink").rglob("*.py"))
        if path.parent.name != "core"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if writes.search(line)
    ]
    assert found == []


def test_table_rows_come_from_an_overwrite_commit_and_are_counted_otherwise(spark, tmp_path):
    from kgbrink.core.delta import replace_where, table_rows, write_table

    path = str(tmp_path / "t")
    six = spark.range(6)
    write_table(six.withColumn("part", six.id % 2), path)
    replaced = replace_where(spark.createDataFrame([(10, 0)], "id long, part long"), path, "part = 0")
    assert table_rows(spark, path, 0) == 6
    assert table_rows(spark, path, replaced.version) == 4  # counted: the commit wrote 1 of the 4 rows


def test_a_table_just_written_is_read_back_from_its_files_as_delta_reads_it(spark, config, tmp_path):
    from pyspark.testing import assertDataFrameEqual

    from kgbrink.core.delta import read_table
    from kgbrink.core.session import spark_actions

    ctx = JobContext(spark, config)
    frame = spark.createDataFrame(
        [(i, f"k{i}", None if i % 3 else 0.5) for i in range(40)], "id int, key string, x double"
    )
    ctx.write("table", frame.repartition(3), str(tmp_path / "table"))
    ctx.write("table", frame.filter("id < 7").repartition(2), str(tmp_path / "table"))
    ctx.write("empty", frame.limit(0), str(tmp_path / "empty"))
    ctx.write("renamed", frame.withColumnRenamed("id", "number"), str(tmp_path / "renamed"))
    start = spark_actions(spark)[0]
    back = ctx.written("table")
    assert spark_actions(spark)[0] == start  # no Delta snapshot is rebuilt
    assert back.schema == read_table(spark, str(tmp_path / "table")).schema
    assertDataFrameEqual(back, read_table(spark, str(tmp_path / "table")))
    assert sorted(r.id for r in back.collect()) == list(range(7))
    assert ctx.written("empty").count() == 0 and ctx.written("empty").schema == frame.schema
    assert ctx.written("renamed").columns == ["number", "key", "x"] and ctx.written("renamed").count() == 40


def test_a_table_with_column_mapping_is_read_through_delta(spark, tmp_path):
    from kgbrink.core.delta import read_table, version_files, write_table

    path = str(tmp_path / "mapped")
    write_table(spark.createDataFrame([(1, "a")], "id int, key string"), path)
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN key TO name")
    written = spark.createDataFrame([(2, "b")], "id int, name string").write.format("delta")
    written.mode("overwrite").save(path)
    latest = 3
    assert version_files(spark, path, latest) is None  # physical column names are not the table's
    assert [tuple(r) for r in read_table(spark, path).collect()] == [(2, "b")]


_ROWS = st.lists(
    st.tuples(st.integers(-3, 3), st.one_of(st.none(), st.text(alphabet="ab\t\n é", max_size=3))), max_size=12
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.tuples(_ROWS, st.integers(1, 4), st.booleans()), min_size=1, max_size=3))
def test_every_version_reads_as_delta_reads_it_whatever_the_writes(spark, tmp_path_factory, writes):
    """Overwrites (empty, repeated rows, several files) and replaceWhere versions, read through
    ``read_table``, equal Delta's own reading of the same version."""
    from pyspark.testing import assertDataFrameEqual

    from kgbrink.core.delta import read_table, replace_where, write_table

    path = str(tmp_path_factory.mktemp("versions") / "t")
    versions = []
    for rows, partitions, replace in writes:
        frame = spark.createDataFrame(rows, "k int, v string").repartition(partitions)
        if replace:
            written = replace_where(frame.filter("k >= 0"), path, "k >= 0")
        else:
            written = write_table(frame, path)
        # an empty overwrite of an empty table commits nothing: the version read is the one before
        versions.append(written.version)
    assert versions == sorted(versions)
    for version in versions:
        delta = spark.read.format("delta").option("versionAsOf", version).load(path)
        ours = read_table(spark, path, version)
        assert ours.schema == delta.schema
        assertDataFrameEqual(ours, delta)


def test_human_summary_shows_every_count_and_warning():
    summary = JobSummary("mcq", counts={f"count_{i}": i * 1000 for i in range(14)} | {"flag": True})
    summary.extra["warnings"] = ["RS at level 1 reached 0.5000"]
    lines = human_summary(summary, None, None)
    text = "\n".join(lines)
    assert all(f"count_{i} {i * 1000:,}" in text for i in range(14)) and "flag" not in text
    assert all(len(line) <= 100 for line in lines)
    assert "  warning: RS at level 1 reached 0.5000" in lines
    assert not any("driver peak" in line for line in lines)  # no figure measured: no line
    summary.memory = {"driver_peak_rss_mb": 812, "driver_peak_heap_mb": 4096, "driver_jvm_peak_rss_mb": 4987}
    assert "  driver peak: JVM heap 4,096 MB, JVM resident 4,987 MB, Python 812 MB" in human_summary(
        summary, None, None
    )


def test_a_count_with_a_breakdown_shows_its_kinds_commonest_first():
    counts = {"kept": 9, "skipped": 3, "skipped_by_kind": {"literal": 1, "blank_or_comment": 2}}
    counts |= {"quarantined": 1, "quarantined_by_reason": {"bad_iri": 1}, "dropped": 0, "dropped_by_kind": {}}
    text = "\n".join(human_summary(JobSummary("ingest", counts=counts), None, None))
    assert "skipped 3 (blank_or_comment: 2, literal: 1)" in text and "quarantined 1 (bad_iri: 1)" in text
    assert "kept 9," in text and "dropped 0" in text and "dropped 0 (" not in text


def test_headline_scores_keep_the_line_naming_the_tables_written():
    from kgbrink.core.delta import TableVersion

    summary = JobSummary("score", outputs={"results": TableVersion("/d/scores/results", 3, 10)})
    summary.highlights["scores"] = "MRR 0.500"
    lines = human_summary(summary, None, None)
    assert "  scores: MRR 0.500" in lines and "  wrote: /d/scores/results (1 table)" in lines
    summary.highlights["report"] = "/d/report.md"
    assert not any(line.startswith("  wrote:") for line in human_summary(summary, None, None))


def test_stage_progress_gives_percent_and_time_left_at_the_watched_pace():
    from kgbrink.core.console import stage_line

    assert stage_line(0, 0) == "0/0 tasks"
    assert stage_line(3, 12) == "3/12 tasks (25%)"  # no pace yet: no estimate
    assert stage_line(6, 12, done_since=3, seconds=30.0) == "6/12 tasks (50%, about 1m00s left)"
    assert stage_line(12, 12, done_since=6, seconds=10.0) == "12/12 tasks (100%)"


def test_nested_steps_report_each_stage_once_from_the_innermost(monkeypatch):
    """A job run by a step of another: both steps watch the same stages; the inner one alone reports."""
    import io
    import time
    from types import SimpleNamespace

    from kgbrink.core import console

    stage = SimpleNamespace(stageId=1, numTasks=4, numCompletedTasks=1)
    tracker = SimpleNamespace(getActiveStageIds=lambda: [1], getStageInfo=lambda _: stage)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    monkeypatch.setattr(console, "STAGE_REPORT_SECONDS", 0.02)
    stream = io.StringIO()
    top = console.Progress(stream).child(1)  # the job the command line started: depth 0
    with top.step("outer", spark):
        time.sleep(0.2)
        before = stream.getvalue().splitlines()
        with top.child(1).step("inner", spark):
            time.sleep(0.3)
            during = stream.getvalue().splitlines()[len(before) :]
        time.sleep(0.2)
        after = stream.getvalue().splitlines()[len(before) + len(during) :]
    outer = [line for line in before if line.startswith("  ... ")]
    inner = [line for line in during if line.startswith("    ... ")]
    assert len(outer) >= 3 and len(inner) >= 3
    # each line names its step: a new stage is not mistaken for a regression of the last one
    assert all(line.startswith("  ... outer, ") for line in outer) and all("... inner, " in x for x in inner)
    # the outer watcher at most finishes a report it began as the inner step started
    assert sum(line.startswith("  ... ") for line in during) <= 1
    assert any(line.startswith("  ... ") for line in after)  # and reports again once it ended
    assert not top.watchers


def test_the_context_releases_what_a_job_persisted_when_it_ends_failed_or_not(spark, config, monkeypatch):
    """Issue 72: a job persists through ctx.persist and never unpersists by hand; what it still holds is
    released when it ends (a nested job's when it ends, before its parent goes on), also when it fails.
    ctx.unpersist gives a frame's memory back earlier."""
    from kgbrink.core.session import cached_frames

    seen = {}

    def inner(ctx, options):
        ctx.persist(ctx.spark.range(7)).count()
        seen["inner"] = cached_frames(ctx.spark)
        return ctx.summary

    def outer(ctx, options):
        early = ctx.persist(ctx.spark.range(3))
        ctx.persist(ctx.spark.range(5)).count()
        ctx.unpersist(early)
        for size in (11, 12, 13):  # a loop's rounds, each released by hand as the next one is kept
            round_ = ctx.persist(ctx.spark.range(size))
            if size < 13:
                round_.unpersist()
        seen["held"] = len(ctx.cached)  # range(5) and the last round, not the rounds released
        ctx.unpersist(round_)
        seen["outer"] = cached_frames(ctx.spark)
        ctx.run("inner", object())
        seen["after inner"] = cached_frames(ctx.spark)
        if options == "fail":
            raise RuntimeError("failed")
        return ctx.summary

    monkeypatch.setitem(REGISTRY, "inner", Job("inner", "", object, inner))
    monkeypatch.setitem(REGISTRY, "outer", Job("outer", "", object, outer))
    start = cached_frames(spark)
    JobContext(spark, config).run("outer", object())
    assert seen == {"held": 2, "outer": start + 1, "inner": start + 2, "after inner": start + 1}
    assert cached_frames(spark) == start
    try:
        JobContext(spark, config).run("outer", "fail")
    except RuntimeError:
        pass
    assert cached_frames(spark) == start
