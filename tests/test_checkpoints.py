"""Checkpoints (issue 42): every step cuts lineage through ``kgbrink.core.frames.checkpoint``, whose mode the
setting ``spark.checkpoint`` chooses; reliable checkpoints are files in a folder of the job's own, removed
at job end, and give the same output as local ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.delta import read_table
from kgbrink.core.frames import checkpoint, checkpoint_mode, hash_partitioned, with_positions
from kgbrink.core.jobs import JobContext
from kgbrink.core.session import job_checkpoints
from kgbrink.core.typed import ConfigError
from kgbrink.graph.components import connected_components
from tests.conftest import PROJECT_ROOT


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_no_step_cuts_lineage_but_through_the_one_helper():
    calls = re.compile(r"\.(localCheckpoint|checkpoint)\(")
    found = [
        f"{path.relative_to(PROJECT_ROOT)}:{number}"
        for path in sorted((PROJECT_ROOT / "lib").rglob("*.py"))
        if path.name != "frames.py" or path.parent.name != "core"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if calls.search(line)
    ]
    assert found == []


def test_reliable_checkpoints_are_files_of_the_job_removed_at_its_end(spark, config, tmp_path):
    base = tmp_path / "checkpoints"
    reliable = config.with_overrides(["spark.checkpoint=reliable", f"spark.checkpoint_dir={base}"])
    frame = spark.range(40).withColumn("square", F.col("id") * F.col("id"))
    assert checkpoint_mode(spark) == "local"  # outside a job
    with job_checkpoints(spark, reliable):
        assert checkpoint_mode(spark) == "reliable"
        folder = Path(spark.sparkContext.getCheckpointDir().removeprefix("file:"))
        assert folder.parent == base
        kept = checkpoint(frame.repartition(3))
        assert _files(folder) != []  # written as files, before any action on the result
        assertDataFrameEqual(kept, frame)
    assert not folder.exists() and checkpoint_mode(spark) == "local"
    # a failing job's folder goes too
    with pytest.raises(RuntimeError, match="the step failed"), job_checkpoints(spark, reliable):
        failed = Path(spark.sparkContext.getCheckpointDir().removeprefix("file:"))
        checkpoint(frame)
        raise RuntimeError("the step failed")
    assert not failed.exists() and _files(base) == []
    # local mode writes nothing there
    with job_checkpoints(spark, config.with_overrides([f"spark.checkpoint_dir={base}"])):
        assertDataFrameEqual(checkpoint(frame), frame)
    assert _files(base) == []


def test_the_mode_is_checked(config):
    with pytest.raises(ConfigError, match="spark.checkpoint must be local or reliable, got 'remote'"):
        config.with_overrides(["spark.checkpoint=remote"])


def test_steps_give_the_same_output_with_either_checkpoint(spark, config, tmp_path):
    reliable = config.with_overrides(["spark.checkpoint=reliable", f"spark.checkpoint_dir={tmp_path}/cp"])
    keys = spark.createDataFrame([(f"Q{(i * 7919) % 101}", i % 5) for i in range(101)], "key string, group int")
    triples = spark.createDataFrame([(i, 0, (i * 3) % 40) for i in range(0, 60, 2)], "h int, r int, t int")
    results = {}
    for name, chosen in (("local", config), ("reliable", reliable)):
        with job_checkpoints(spark, chosen):
            results[name] = [
                with_positions(keys, ["group", "key"], "id").collect(),
                hash_partitioned(keys, ["group"]).collect(),
                connected_components(triples, checkpoint_every=1).collect(),
            ]
    for local, reliable_rows in zip(results["local"], results["reliable"], strict=True):
        assert sorted(local) == sorted(reliable_rows)


def test_an_ingest_with_reliable_checkpoints_equals_one_with_local_ones(spark, config, tmp_path):
    from kgbrink.jobs import ingest

    facts = tmp_path / "facts.tsv"
    facts.write_text("".join(f"e{(i * 37) % 61}\tr{i % 4}\te{(i * 11) % 53}\n" for i in range(300)))
    tables = {}
    for mode in ("local", "reliable"):
        settings = config.with_overrides([f"spark.checkpoint={mode}", f"spark.checkpoint_dir={tmp_path}/cp-{mode}"])
        options = ingest.IngestOptions(dataset=str(tmp_path / mode), format="delimited", splits={"train": [str(facts)]})
        summary = ingest.run(JobContext(spark, settings), options)
        tables[mode] = {name: read_table(spark, t.path, t.version) for name, t in summary.outputs.items()}
        assert _files(tmp_path / f"cp-{mode}") == []
    assert sorted(tables["local"]) == sorted(tables["reliable"]) and "entities" in tables["local"]
    for name, frame in tables["local"].items():
        assertDataFrameEqual(tables["reliable"][name], frame)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 50)), unique=True, max_size=40),
    partitions=st.integers(1, 5),
)
def test_reliable_positions_are_ranks_whatever_the_partitioning(spark, config, tmp_path, rows, partitions):
    reliable = config.with_overrides(["spark.checkpoint=reliable", f"spark.checkpoint_dir={tmp_path}/cp"])
    frame = spark.createDataFrame(rows, "group int, key int").repartition(partitions)
    with job_checkpoints(spark, reliable):
        got = {(r["group"], r["key"]): r["n"] for r in with_positions(frame, ["group", "key"], "n").collect()}
    assert got == {row: i for i, row in enumerate(sorted(rows))}
