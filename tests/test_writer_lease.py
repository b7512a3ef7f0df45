"""One writer per dataset (issue 28, item 1): the lease is exclusive, racing runs let exactly one win,
an ingest refuses a dataset another run writes, and a run killed between its writes is skipped by
readers and taken over (its staging folder removed) by the next ingest."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from kgbrink.core.delta import latest_version, read_table
from kgbrink.core.jobs import JobContext
from kgbrink.core.writer import (
    SCHEMA,
    DatasetBusy,
    WriterLease,
    _concurrent,
    consistent_version,
    lease_state,
    recorded_versions,
)
from kgbrink.jobs import ingest as job


def _ingest(spark, config, dataset: Path, lines: list[str], tmp_path: Path):
    source = tmp_path / f"train-{len(lines)}-{abs(hash(tuple(lines)))}.tsv"
    source.write_text("".join(line + "\n" for line in lines))
    options = job.IngestOptions(dataset=str(dataset), format="delimited", splits={"train": [str(source)]})
    return job.run(JobContext(spark, config), options)


def _kill(spark, dataset: Path) -> WriterLease:
    """The lease of a run that was killed: held, no longer renewed, its process gone."""
    killed = WriterLease(spark, str(dataset), 600).acquire()
    killed._stop_renewing()
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert killed._update(killed.owner, {"pid": dead.pid})
    return killed


def _decoded(spark, config, dataset: Path) -> set[tuple[str, str, str]]:
    """The dataset's triples as keys, through the versions a job reads."""
    ctx = JobContext(spark, config)
    ent = {r.id: r.key for r in ctx.read("entities", f"{dataset}/entities").collect()}
    rel = {r.id: r.key for r in ctx.read("relations", f"{dataset}/relations").collect()}
    return {(ent[r.h], rel[r.r], ent[r.t]) for r in ctx.read("triples", f"{dataset}/triples").collect()}


def test_the_lease_is_exclusive_until_released(spark, tmp_path):
    first = WriterLease(spark, str(tmp_path / "ds"), 60).acquire()
    with pytest.raises(DatasetBusy, match=r"is being written by another run \(host .*, pid \d+"):
        WriterLease(spark, str(tmp_path / "ds"), 60).acquire()
    first.complete({"entities": 0, "relations": 0, "triples": 0})
    second = WriterLease(spark, str(tmp_path / "ds"), 60).acquire()
    second.release()
    assert recorded_versions(spark, str(tmp_path / "ds")) == {"entities": 0, "relations": 0, "triples": 0}


def test_racing_runs_let_exactly_one_win(spark, tmp_path):
    dataset = str(tmp_path / "ds")
    WriterLease(spark, dataset, 60).acquire().complete({"entities": 0, "relations": 0, "triples": 0})
    for _ in range(3):
        leases = [WriterLease(spark, dataset, 60) for _ in range(3)]
        start, outcome = threading.Barrier(len(leases)), {}

        def take(lease, start=start, outcome=outcome):
            start.wait()
            try:
                lease.acquire()
                outcome[lease.owner] = "won"
            except DatasetBusy:
                outcome[lease.owner] = "busy"

        threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcome.values()) == ["busy", "busy", "won"]
        next(lease for lease in leases if outcome[lease.owner] == "won").release()


def test_a_lease_taken_over_cannot_complete_and_values_are_quoted(spark, tmp_path):
    """A change is made only while this run owns the lease: a run whose lease another run took records
    nothing. Strings with quotes and backslashes are stored as given."""
    dataset = str(tmp_path / "ds")
    lease = WriterLease(spark, dataset, 60).acquire()
    lease._stop_renewing()
    odd = "it's a \\host\\ `x`"
    assert lease._update(lease.owner, {"owner": "other", "host": odd}) is True
    assert lease._update(lease.owner, {"expires": 0.0}) is False
    with pytest.raises(DatasetBusy, match="the writer lease was lost; this run's writes are not recorded"):
        lease.complete({"entities": 0, "relations": 0, "triples": 0})
    row = lease_state(spark, f"{dataset}/_writer")[1]
    assert (row["owner"], row["host"], row["completed_by"]) == ("other", odd, None)


def test_an_ingest_refuses_a_dataset_another_run_writes(spark, config, tmp_path):
    dataset = tmp_path / "ds"
    _ingest(spark, config, dataset, ["a\tp\tb"], tmp_path)
    before = latest_version(spark, f"{dataset}/triples")
    other = WriterLease(spark, str(dataset), 60).acquire()
    with pytest.raises(DatasetBusy, match="is being written by another run"):
        _ingest(spark, config, dataset, ["c\tp\td"], tmp_path)
    other.release()
    assert latest_version(spark, f"{dataset}/triples") == before
    assert _decoded(spark, config, dataset) == {("a", "p", "b")}


def test_a_killed_run_is_skipped_by_readers_and_taken_over(spark, config, tmp_path):
    dataset = tmp_path / "ds"
    _ingest(spark, config, dataset, ["a\tp\tb", "b\tp\tc"], tmp_path)
    recorded = recorded_versions(spark, str(dataset))
    # a run that wrote new dictionaries (keys renumbered) and was killed before its triples
    _kill(spark, dataset)
    ids = {r.key: r.id for r in read_table(spark, f"{dataset}/entities").collect()}
    renumbered = spark.createDataFrame(
        [(0, "z", None), (1, "c", None), (2, "b", None), (3, "a", None)], "id int, key string, label string"
    )
    renumbered.write.format("delta").mode("overwrite").save(f"{dataset}/entities")
    (dataset / "_staging" / "deadbeef").mkdir(parents=True)
    (dataset / "_staging" / "deadbeef" / "part-0").write_text("x")
    assert latest_version(spark, f"{dataset}/entities") == recorded["entities"] + 1
    assert consistent_version(spark, f"{dataset}/entities") == recorded["entities"]
    assert _decoded(spark, config, dataset) == {("a", "p", "b"), ("b", "p", "c")}  # not ("c", "p", "b"), ...
    # the next ingest takes the dead run's lease, removes its staging and extends the recorded dictionaries
    summary = _ingest(spark, config, dataset, ["a\tp\tb", "c\tp\td"], tmp_path)
    assert summary.counts["new_entities"] == 1  # d: against the recorded dictionary, not the killed one
    # the triples too (issue 28 item 5 d): b p c went, c p d came
    added, removed = summary.counts["triples_added_per_split"], summary.counts["triples_removed_per_split"]
    assert (added, removed) == ({"train": 1}, {"train": 1})
    assert not (dataset / "_staging").exists()
    assert _decoded(spark, config, dataset) == {("a", "p", "b"), ("c", "p", "d")}
    latest = {r.key: r.id for r in read_table(spark, f"{dataset}/entities").collect()}
    assert set(latest) == {"a", "b", "c", "d"} and all(latest[k] == ids[k] for k in ids)


def test_a_rerun_after_a_killed_first_ingest_reports_every_key_new(spark, config, tmp_path):
    """Issue 28 item 5 (d). Before: the dictionaries of a first ingest killed before its triples were
    taken for the dataset's, so the rerun reported ``new_entities: 0`` although no ingest had completed."""
    dataset = tmp_path / "ds"
    _kill(spark, dataset)
    schema = "id int, key string, label string"
    spark.createDataFrame([(0, "a", None), (1, "b", None)], schema).write.format("delta").save(f"{dataset}/entities")
    spark.createDataFrame([(0, "p", None)], schema).write.format("delta").save(f"{dataset}/relations")
    summary = _ingest(spark, config, dataset, ["a\tp\tb", "b\tp\tc"], tmp_path)
    c = summary.counts
    assert (c["new_entities"], c["new_relations"], c["triples_added_per_split"]) == (3, 1, {"train": 2})
    assert c["tables_written"] == ["quarantine", "entities", "relations", "triples"]
    assert _decoded(spark, config, dataset) == {("a", "p", "b"), ("b", "p", "c")}


def test_latest_commit_is_read_from_the_log_as_history_gives_it(spark, tmp_path, monkeypatch):
    from delta.tables import DeltaTable

    from kgbrink.core import delta

    path = str(tmp_path / "t")
    first = delta.write_table(spark.range(3), path, description="first")
    second = delta.write_table(spark.range(5), path, description="second")
    last = DeltaTable.forPath(spark, path).history(1).collect()[0]
    assert (first.version, first.rows, second.version, second.rows) == (0, 3, 1, 5)
    assert delta.latest_version(spark, path) == last["version"] == 1
    assert delta.table_description(spark, path) == last["userMetadata"] == "second"

    def no_history(*args, **kwargs):
        raise AssertionError("history() called: the commit file was not read")

    monkeypatch.setattr(DeltaTable, "history", no_history)  # the fast path, not its fallback
    assert delta.latest_commit(spark, path) == {
        "version": 1,
        "operationMetrics": {k: str(v) for k, v in last["operationMetrics"].items()},
        "userMetadata": "second",
        "overwrote": True,
    }
    assert delta.table_rows(spark, path, 0) == 3 and delta.table_rows(spark, path, 1) == 5


@pytest.mark.parametrize(
    "message, conflict",
    [
        ("io.delta.exceptions.ProtocolChangedException: [DELTA_PROTOCOL_CHANGED] The protocol version ...", True),
        ("io.delta.exceptions.MetadataChangedException: [DELTA_METADATA_CHANGED] ...", True),
        ("io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] ...", True),
        ("[PATH_NOT_FOUND] Path does not exist: file:/x/_writer", False),
    ],
)
def test_delta_conflicts_on_a_new_table_are_a_busy_dataset_not_a_raw_error(message, conflict):
    # two ingests creating one dataset race on the lease table's first commit: the loser's error is one of these
    assert _concurrent(RuntimeError(message)) is conflict


def test_the_lease_costs_few_spark_jobs_and_readers_none(spark, tmp_path):
    """Issue 43: the state is read from the commit file; a change is one append of one row."""
    from kgbrink.core.session import spark_actions

    dataset = str(tmp_path / "ds")
    WriterLease(spark, dataset, 60).acquire().complete({"entities": 0, "relations": 0, "triples": 0})
    start = spark_actions(spark)[0]
    lease = WriterLease(spark, dataset, 60).acquire()
    acquired = spark_actions(spark)[0]
    lease.complete({"entities": 1, "relations": 2, "triples": 3})
    completed = spark_actions(spark)[0]
    assert recorded_versions(spark, dataset) == {"entities": 1, "relations": 2, "triples": 3}
    assert spark_actions(spark)[0] == completed  # reading the record launches no Spark job
    assert acquired - start <= 1 and completed - acquired <= 1, (acquired - start, completed - acquired)
    # the table is the lease's history: creation, then acquire and complete twice
    assert read_table(spark, f"{dataset}/_writer").count() == 5


def test_a_lease_table_of_an_older_kgbrink_is_read_from_its_row_and_taken_over(spark, tmp_path):
    dataset = tmp_path / "ds"
    row = [(None, None, None, 0.0, 4, 5, 6, "old-run", 1.0)]
    spark.createDataFrame(row, SCHEMA).coalesce(1).write.format("delta").save(str(dataset / "_writer"))
    assert recorded_versions(spark, str(dataset)) == {"entities": 4, "relations": 5, "triples": 6}
    lease = WriterLease(spark, str(dataset), 60).acquire()
    assert lease.previous["completed_by"] == "old-run"
    lease.complete({"entities": 7, "relations": 8, "triples": 9})
    assert recorded_versions(spark, str(dataset)) == {"entities": 7, "relations": 8, "triples": 9}


def test_a_change_that_lost_its_race_is_void_and_readers_skip_it(spark, tmp_path):
    dataset = str(tmp_path / "ds")
    first = WriterLease(spark, dataset, 60)
    first._create()
    version, state = lease_state(spark, first.path)
    assert first._change(version, {**state, "owner": "a"})
    # a second change of the same version lands after the first: it is void
    assert not first._change(version, {**state, "owner": "b"})
    latest, now = lease_state(spark, first.path)
    assert (latest, now["owner"]) == (version + 2, "a")
    # and a change built on the void version counts, on the state in force
    assert first._change(latest, {**now, "host": "h"})
    assert lease_state(spark, first.path)[1]["owner"] == "a"


def test_a_run_whose_lease_was_taken_while_it_was_stopped_says_so(spark, config, tmp_path, monkeypatch):
    """Issue 44 item 6: not a bare error on the staging files the run that took over removed."""
    dataset = tmp_path / "ds"
    taken = []

    def stopped_then_resumed(ctx, opts, ds, paths, extend, writes=None):
        path = f"{ds}/_writer"
        version, state = lease_state(spark, path)
        assert WriterLease(spark, ds, 60)._change(version, {**state, "expires": 0.0})  # time passed
        taken.append(WriterLease(spark, ds, 60).acquire())
        raise FileNotFoundError(f"{ds}/_staging/0123/triples/part-0.parquet")

    monkeypatch.setattr(job, "ingest_dump", stopped_then_resumed)
    with pytest.raises(
        DatasetBusy,
        match=r"the writer lease expired .* another run took it; this run stopped "
        r"\(FileNotFoundError: .*_staging",
    ):
        _ingest(spark, config, dataset, ["a\tp\tb"], tmp_path)
    assert lease_state(spark, f"{dataset}/_writer")[1]["owner"] == taken[0].owner  # not released by the loser
    taken[0].release()
