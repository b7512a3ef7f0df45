"""Sizing from Spark's event log (issue 71): the replay on hand-made logs against hand-computed times (a
chain of stages, a skewed stage, a driver gap), the flags, bad logs named, and the bounds on any log
(T(N) never rises with N, never below T∞ nor T1/N), and the growth between two sizes. A real log is read in
tests/test_smoke.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.sizing import eventlog, growth, replay, report


def _job(
    job: int, at: float, stages: list[tuple[int, list[int]]], label: str = "build", step: str = "", thread: str = ""
) -> dict:
    infos = [{"Stage ID": s, "Stage Name": f"stage {s}", "Parent IDs": parents} for s, parents in stages]
    properties = {"kgbrink.job": label, "kgbrink.step": step} | ({"kgbrink.thread": thread} if thread else {})
    return {"Event": "SparkListenerJobStart", "Job ID": job, "Submission Time": int(at * 1000),
            "Stage Infos": infos, "Stage IDs": [s for s, _ in stages], "Properties": properties}  # fmt: skip


def _end(job: int, at: float) -> dict:
    return {"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": int(at * 1000)}


def _task(
    stage: int, index: int, start: float, end: float, rows: int = 0, result: int = 0, kind="ShuffleMapTask", cpu=None,
    memory: int = 0, spilled: int = 0, python=None,
):  # fmt: skip
    accumulables = [] if python is None else [{"ID": 7, "Name": "time to execute Python code", "Update": python}]
    metrics = {"Input Metrics": {"Records Read": rows, "Bytes Read": 8 * rows}, "Result Size": result}
    metrics |= {"Peak Execution Memory": memory, "Disk Bytes Spilled": spilled, "Memory Bytes Spilled": 3 * spilled}
    if cpu is not None:  # ns, split between the run and its deserialisation
        metrics |= {"Executor CPU Time": int(cpu * 0.9e9), "Executor Deserialize CPU Time": int(cpu * 0.1e9)}
    return {
        "Event": "SparkListenerTaskEnd", "Stage ID": stage, "Stage Attempt ID": 0, "Task Type": kind,
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {"Index": index, "Launch Time": int(start * 1000), "Finish Time": int(end * 1000),
                      "Accumulables": accumulables},
        "Task Metrics": metrics,
    }  # fmt: skip


def _log(tmp_path: Path, events: list[dict], name: str = "app-1") -> Path:
    path = tmp_path / name
    head = {"Event": "SparkListenerLogStart", "Spark Version": "4.1.0"}
    path.write_text("".join(json.dumps(e) + "\n" for e in [head, *events]))
    return path


def _chain(tmp_path: Path) -> Path:
    """Stages 0 -> 1 -> 2 on 2 cores: 4 tasks of 2 s, 2 of 3 s, 1 of 1 s; the driver 0.5, 0.5, 0.2 s before
    them and 0.3 s after."""
    events = [_job(0, 0.0, [(0, []), (1, [0]), (2, [1])])]
    events += [_task(0, i, 0.5 + 2 * (i // 2), 2.5 + 2 * (i // 2)) for i in range(4)]
    events += [_task(1, i, 5.0, 8.0) for i in range(2)] + [_task(2, 0, 8.2, 9.2, kind="ResultTask"), _end(0, 9.5)]
    return _log(tmp_path, events)


def test_a_chain_of_stages_replays_to_the_hand_computed_times(tmp_path):
    app = eventlog.read(_chain(tmp_path))
    profiles, tail, span = replay.stages(app)
    assert [p.id for p in profiles] == [0, 1, 2] and [p.gap for p in profiles] == [0.5, 0.5, pytest.approx(0.2)]
    assert tail == pytest.approx(0.3) and span == (0, 9500)
    assert replay.work(profiles, tail) == pytest.approx(8 + 6 + 1 + 1.5)  # T1
    assert replay.critical_path(profiles, tail) == pytest.approx(2.5 + 3.5 + 1.2 + 0.3)  # T∞
    expected = {1: 16.5, 2: 9.5, 8: 7.5, 128: 7.5}  # T(2) is the measured 9.5 s
    assert {n: replay.predicted(profiles, tail, n) for n in expected} == pytest.approx(expected)
    document = report.profile(app, (1, 2, 8, 128))
    assert document["measured"] == 9.5 and document["jobs"][0]["job"] == "build" and not document["stages"][0]["flags"]


def test_a_rolling_log_folder_reads_as_its_single_file(tmp_path):
    """Spark 4's default: ``eventlog_v2_<app>/events_<n>_<app>`` files in order, ``appstatus_<app>`` (with
    ``.inprogress`` while the run lasts)."""
    lines = _chain(tmp_path).read_text().splitlines(keepends=True)
    folder = tmp_path / "logs" / "eventlog_v2_local-1"
    folder.mkdir(parents=True)
    for n, (start, end) in enumerate(((0, 3), (3, 6), (6, len(lines))), 1):
        (folder / f"events_{n}_local-1").write_text("".join(lines[start:end]))
    (folder / "appstatus_local-1").write_text("")
    assert eventlog.log_files(tmp_path / "logs") == [folder]
    one, rolled = eventlog.read(tmp_path / "app-1"), eventlog.read(folder)
    assert rolled.stages == one.stages and rolled.jobs == one.jobs and rolled.complete
    (folder / "appstatus_local-1").rename(folder / "appstatus_local-1.inprogress")
    assert not eventlog.read(folder).complete


def test_a_task_lasts_its_cpu_time_unless_told_its_wall_time(tmp_path):
    """Two tasks of 4 s wall that needed 1.5 s and 2.5 s of a core (they waited for one): on one core 4 s of
    CPU, 8 s of wall time; a task without CPU time lasts its wall time."""
    events = [_job(0, 0.0, [(0, [])]), _task(0, 0, 0.0, 4.0, cpu=1.5), _task(0, 1, 0.0, 4.0, cpu=2.5)]
    events += [_task(0, 2, 4.0, 5.0), _end(0, 5.0)]
    app = eventlog.read(_log(tmp_path, events))
    by_cpu, by_wall = replay.stages(app), replay.stages(app, "wall")
    assert by_cpu[0][0].durations == pytest.approx([1.5, 2.5, 1.0]) and by_wall[0][0].durations == [4.0, 4.0, 1.0]
    assert replay.predicted(*by_cpu[:2], 1) == pytest.approx(5.0) and replay.predicted(*by_wall[:2], 1) == 9.0
    with pytest.raises(ValueError, match="basis must be one of cpu, wall"):
        replay.stages(app, "gpu")


def test_jobs_that_overlapped_run_side_by_side_on_the_critical_path(tmp_path):
    """Adaptive execution's two shuffle stages as two concurrent jobs (2 s and 3 s), then a job whose stage
    reads both (1 s, after 0.2 s of the driver): T∞ is max(2, 3) + 1.2, the measured span, not 2 + 3 + 1.2;
    the replay still counts the stages in sequence."""
    events = [_job(0, 0.0, [(0, [])]), _job(1, 0.0, [(1, [])]), _task(0, 0, 0.0, 2.0), _end(0, 2.0)]
    events += [_task(1, 0, 0.0, 3.0), _end(1, 3.0), _job(2, 3.2, [(0, []), (1, []), (2, [0, 1])])]
    events += [_task(2, 0, 3.2, 4.2, kind="ResultTask"), _end(2, 4.2)]
    app = eventlog.read(_log(tmp_path, events))
    profiles, tail, span = replay.stages(app)
    assert [p.parents for p in profiles] == [(), (), (0, 1)] and span == (0, 4200)
    assert replay.critical_path(profiles, tail, app.jobs) == pytest.approx(4.2)
    assert replay.critical_path(profiles, tail) == pytest.approx(6.2)  # without the jobs' times
    assert replay.predicted(profiles, tail, 8) == pytest.approx(6.2)
    assert report.profile(app, (2,))["total"]["t_inf"] == pytest.approx(4.2)


def test_a_pandas_udf_task_costs_its_python_workers_time_beside_the_jvms(tmp_path):
    """A task of 3 s wall, 0.5 s of JVM CPU, whose Python worker executed 2 s (as the string Spark writes):
    2.5 s of cores; a non-number fails naming the line."""
    events = [_job(0, 0.0, [(0, [])]), _task(0, 0, 0.0, 3.0, cpu=0.5, python="2000"), _end(0, 3.0)]
    assert replay.stages(eventlog.read(_log(tmp_path, events)))[0][0].durations == pytest.approx([2.5])
    events[1]["Task Info"]["Accumulables"][0]["Update"] = "fast"
    with pytest.raises(eventlog.EventLogError, match="line 3: 'time to execute Python code' is 'fast', not a number"):
        eventlog.read(_log(tmp_path, events, "bad"))


def test_a_task_overhead_is_added_to_every_task_of_the_replay(tmp_path):
    """The chain with 0.25 s more a task (a cluster's executor-side cost): T1 gains 7 x 0.25; on 2 slots
    stage 0's 4 tasks are 2 rounds of 2.25 s, stage 1's one of 3.25 s, stage 2's 1.25 s; the gaps stay."""
    app = eventlog.read(_chain(tmp_path))
    profiles, tail, _ = replay.stages(app, "wall", task_overhead=0.25)
    assert replay.work(profiles, tail) == pytest.approx(16.5 + 7 * 0.25)
    assert replay.predicted(profiles, tail, 2) == pytest.approx(0.5 + 4.5 + 0.5 + 3.25 + 0.2 + 1.25 + 0.3)
    assert replay.critical_path(profiles, tail) == pytest.approx(7.5 + 3 * 0.25)
    assert report.profile(app, (2,), "wall", 0.25)["task_overhead"] == 0.25
    with pytest.raises(ValueError, match="task_overhead must be >= 0"):
        replay.stages(app, "wall", task_overhead=-1)


def test_a_skewed_stage_is_flagged_and_bounds_its_replay(tmp_path):
    """Nine 1 s tasks then one of 12 s: on 2 slots the long one starts at 4 s (16 s); on 8 at 1 s (13 s)."""
    events = [_job(0, 0.0, [(0, [])])] + [_task(0, i, i // 2, i // 2 + 1) for i in range(9)]
    events += [_task(0, 9, 4.0, 16.0), _end(0, 16.0)]
    profiles, tail, _ = replay.stages(eventlog.read(_log(tmp_path, events)))
    assert [replay.predicted(profiles, tail, n) for n in (2, 8, 32)] == [16.0, 13.0, 12.0]
    assert profiles[0].flags == ["skew: longest task 12.0 s > 5x the median 1.00 s"]


def test_a_driver_gap_between_jobs_is_time_no_core_removes(tmp_path):
    events = [_job(0, 0.0, [(0, [])]), _task(0, 0, 0.0, 1.0), _end(0, 1.0)]
    events += [_job(1, 6.0, [(1, [])], step="collect"), _task(1, 0, 6.1, 7.1), _end(1, 7.2)]
    profiles, tail, _ = replay.stages(eventlog.read(_log(tmp_path, events)))
    assert profiles[1].gap == pytest.approx(5.1) and tail == pytest.approx(0.1)
    for n in (1, 2, 128):
        assert replay.predicted(profiles, tail, n) == pytest.approx(7.2)
    assert replay.critical_path(profiles, tail) == pytest.approx(7.2) == replay.work(profiles, tail)


def test_one_task_over_a_million_rows_and_a_large_collect_are_flagged(tmp_path):
    events = [_job(0, 0.0, [(0, []), (1, [0])], label="release/okgqa")]
    events[0]["Stage Infos"][1]["Stage Name"] = "collect at publish.py:140"
    events += [_task(0, 0, 0.0, 3.0, rows=2_000_000), _task(1, 0, 3.0, 4.0, result=20 << 20, kind="ResultTask")]
    document = report.profile(eventlog.read(_log(tmp_path, [*events, _end(0, 4.0)])), (2,))
    flags = {s["id"]: s["flags"] for s in document["stages"]}
    assert flags == {
        0: ["one_task: one task over 2,000,000 input rows"],
        1: ["collect: 20 MiB of results to the driver"],
    }
    assert [row["job"] for row in document["jobs"]] == ["release", "release/okgqa"]
    broadcast = [_job(0, 0.0, [(0, [])])] + [_task(0, 0, 0.0, 1.0, result=17 << 20, kind="ResultTask"), _end(0, 1.0)]
    broadcast[0]["Stage Infos"][0]["Stage Name"] = "$anonfun$withThreadLocalCaptured$1 at CompletableFuture.java:1768"
    stage = report.profile(eventlog.read(_log(tmp_path, broadcast, "b")), (2,))["stages"][0]
    assert stage["flags"] == ["broadcast: 17 MiB of results to the driver"]
    text = report.text(document)
    assert "stages that will not scale: 2" in text and "one_task" in text


def test_bad_logs_are_named_with_their_line(tmp_path):
    good = json.dumps(_job(0, 0.0, [(0, [])]))
    cases = {
        "not-json": ([good, "{oops"], "line 3: not JSON"),
        "no-launch": ([good, json.dumps({"Event": "SparkListenerTaskEnd", "Stage ID": 0, "Task Info": {}})],
                      "line 3: SparkListenerTaskEnd without 'Launch Time'"),
        "unknown-stage": ([good, json.dumps(_task(7, 0, 0, 1))], "a task of stage 7, which no job started"),
        "text-time": ([json.dumps({**_job(0, 0.0, [(0, [])]), "Submission Time": "soon"})],
                      "'Submission Time' is 'soon', not an integer"),
    }  # fmt: skip
    for name, (lines, message) in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps({"Event": "SparkListenerLogStart"}) + "\n" + "\n".join(lines) + "\n")
        with pytest.raises(eventlog.EventLogError, match=message):
            eventlog.read(path)
    with pytest.raises(eventlog.EventLogError, match="compressed event log"):
        eventlog.read(tmp_path / "app-2.zstd")
    nested = tmp_path / "null-info"
    nested.write_text(good + "\n" + json.dumps({**_task(0, 0, 0, 1), "Task Info": None}) + "\n")
    with pytest.raises(
        eventlog.EventLogError,
        match="line 2: SparkListenerTaskEnd whose Task Info or Task Metrics is not a JSON object",
    ):
        eventlog.read(nested)
    # jobs that ran no task: nothing to replay, a span of their own
    idle = _log(tmp_path, [_job(0, 1000.0, [(0, [])]), _end(0, 1002.5)], "idle")
    profiles, tail, span = replay.stages(eventlog.read(idle))
    assert profiles == [] and span == (1_000_000, 1_002_500) and tail == 2.5
    # a log still being written: read as far as its last whole line
    cut = tmp_path / "app-3.inprogress"
    cut.write_text(good + "\n" + json.dumps(_task(0, 0, 0, 1)) + "\n" + '{"Event": "SparkListenerTa')
    app = eventlog.read(cut)
    assert not app.complete and len(app.stages[0].tasks) == 1


def test_a_threads_jobs_wait_for_their_own_thread_and_the_drivers_only(tmp_path):
    """A parallel release: the driver's job (1 s), then threads a (2 s) and b (1 s, then 1.5 s after the
    driver's 0.5 s), then the driver's last job (0.5 s). b's second job was submitted after a's first had
    ended (the cores were busy), but does not wait for it: T∞ 1 + 1 + 0.5 + 1.5 + 0.5 = 4.5, not the 5.5 of
    the jobs in their recorded order."""
    events = [_job(0, 0.0, [(0, [])]), _task(0, 0, 0.0, 1.0), _end(0, 1.0)]
    events += [_job(1, 1.0, [(1, [])], thread="a"), _job(2, 1.0, [(2, [])], thread="b")]
    events += [_task(2, 0, 1.0, 2.0), _end(2, 2.0), _task(1, 0, 1.0, 3.0), _end(1, 3.0)]
    events += [_job(3, 3.5, [(3, [])], thread="b"), _task(3, 0, 3.5, 5.0), _end(3, 5.0)]
    events += [_job(4, 5.0, [(4, [])]), _task(4, 0, 5.0, 5.5, kind="ResultTask"), _end(4, 5.5)]
    app = eventlog.read(_log(tmp_path, events))
    assert app.threads == {0: "", 1: "a", 2: "b", 3: "b", 4: ""}
    profiles, tail, _ = replay.stages(app)
    assert replay.critical_path(profiles, tail, app.jobs, app.threads) == pytest.approx(4.5)
    assert replay.critical_path(profiles, tail, app.jobs) == pytest.approx(5.5)
    assert report.profile(app, (2,))["total"]["t_inf"] == pytest.approx(4.5)
    # a thread b forked waits for b's jobs, not a's; one a forked waits for a's
    forked = {**app.threads, 3: "b/x"}
    assert replay.critical_path(profiles, tail, app.jobs, forked) == pytest.approx(4.5)
    forked = {**app.threads, 3: "a/x"}
    assert replay.critical_path(profiles, tail, app.jobs, forked) == pytest.approx(5.5)


@st.composite
def _logs(draw):
    """A run of Spark jobs, each a chain or fan-in of stages with random task times and launch offsets, a job
    submitted before the one before it ended now and then (adaptive execution's concurrent jobs)."""
    events, clock, stage = [], 0.0, 0
    for job in range(draw(st.integers(1, 3))):
        clock = max(clock + draw(st.floats(-2, 2)), 0.0)
        stages = []
        for _ in range(draw(st.integers(1, 4))):
            parents = draw(st.lists(st.sampled_from([s for s, _ in stages]), max_size=2, unique=True)) if stages else []
            stages.append((stage, parents))
            stage += 1
        events.append(_job(job, clock, stages))
        for s, _ in stages:
            clock += draw(st.floats(0, 1))
            durations = draw(st.lists(st.floats(0.001, 5), min_size=1, max_size=12))
            slots = [clock, clock]
            for index, duration in enumerate(durations):
                start = min(slots)
                slots[slots.index(start)] = start + duration
                events.append(_task(s, index, start, start + duration))
            clock = max(slots)
        clock += draw(st.floats(0, 1))
        events.append(_end(job, clock))
    return events


@settings(max_examples=60, deadline=None)
@given(events=_logs(), small=st.integers(1, 16), more=st.integers(0, 64))
def test_predicted_time_never_rises_with_cores_nor_falls_below_its_bounds(tmp_path_factory, events, small, more):
    app = eventlog.read(_log(tmp_path_factory.mktemp("logs"), events))
    profiles, tail, _ = replay.stages(app)
    fewer, larger = replay.predicted(profiles, tail, small), replay.predicted(profiles, tail, small + more)
    assert larger <= fewer + 1e-9
    t_inf = replay.critical_path(profiles, tail, app.jobs)
    assert t_inf <= replay.critical_path(profiles, tail) + 1e-9  # overlapping jobs only shorten it
    labels = ("", "a", "b", "a/x", "a/y", "b/x")
    threads = {job: labels[job * 7 % len(labels)] for job in app.jobs}  # jobs in driver threads and their forks
    assert replay.critical_path(profiles, tail, app.jobs, threads) <= t_inf + 1e-9  # threads only shorten it
    for cores, value in ((small, fewer), (small + more, larger)):
        assert value >= t_inf - 1e-9
        assert value >= replay.work(profiles, tail) / cores - 1e-9


def test_a_jobs_largest_task_memory_and_its_spill_are_reported_and_merged(tmp_path):
    mib = 1 << 20
    first = [_job(0, 0.0, [(0, []), (1, [0])], label="release/brink")]
    first += [_task(0, 0, 0.0, 1.0, memory=64 * mib, spilled=5 * mib), _task(0, 1, 0.0, 1.0, memory=200 * mib)]
    first += [_task(1, 0, 1.0, 2.0, memory=16 * mib, spilled=7 * mib, kind="ResultTask"), _end(0, 2.0)]
    second = [_job(0, 0.0, [(0, [])], label="release/brink"), _task(0, 0, 0.0, 1.0, memory=300 * mib), _end(0, 1.0)]
    documents = [
        report.profile(eventlog.read(_log(tmp_path, e, f"app-{i}")), (2,)) for i, e in enumerate([first, second])
    ]
    brink = {row["job"]: row for row in documents[0]["jobs"]}["release/brink"]
    assert brink["peak_task_memory_bytes"] == 200 * mib and brink["spilled_bytes"] == 12 * mib  # on disk, not in memory
    assert [s["peak_task_memory_bytes"] for s in documents[0]["stages"]] == [200 * mib, 16 * mib]
    merged = {row["job"]: row for row in report.merge(documents)["jobs"]}["release/brink"]
    assert merged["peak_task_memory_bytes"] == 300 * mib and merged["spilled_bytes"] == 12 * mib
    assert "task MB" in report.text(documents[0]) and "     200      0.01" in report.text(documents[0])


def test_kgbrink_profile_writes_its_report_and_names_a_missing_log(config, tmp_path):
    from kgbrink.cli import main
    from tests.conftest import conf_args

    _chain(tmp_path)
    out, summary = tmp_path / "report", tmp_path / "summary.json"
    args = ["profile", *conf_args(config), "--logs", str(tmp_path), "--cores", "1,2,8", "--out", str(out)]
    assert main([*args, "--json", str(summary)]) == 0
    doc = json.loads(summary.read_text())
    predicted = {r["cores"]: r["value"] for r in doc["results"] if r["metric"] == "predicted_seconds"}
    assert predicted == {1: 16.5, 2: 9.5, 8: 7.5} and doc["counts"]["tasks"] == 7
    assert json.loads((out / "profile.json").read_text())["total"]["t_inf"] == 7.5
    assert "2 cores 9.5 s" in (out / "profile.txt").read_text() and (out / "profile.png").stat().st_size > 0
    empty = tmp_path / "none"
    empty.mkdir()
    assert main(["profile", *conf_args(config), "--logs", str(empty), "--json", str(summary)]) != 0
    assert "no event log in the folder" in json.loads(summary.read_text())["error"]
    assert main(["profile", *conf_args(config), "--logs", "s3a://bucket/events", "--json", str(summary)]) == 2
    assert "profile reads a local folder" in json.loads(summary.read_text())["error"]


def _document(jobs: dict[str, tuple[float, float, float, int, int]]) -> dict:
    """A profile document of jobs (task s, driver s, T∞, shuffle bytes, largest task's memory)."""
    rows = []
    for job, (tasks, driver, t_inf, shuffle, memory) in jobs.items():
        rows.append({"job": job, "task_seconds": tasks, "driver_seconds": driver, "t1": tasks + driver, "t_inf": t_inf,
                     "shuffle_write_bytes": shuffle, "max_stage_shuffle_read_bytes": shuffle // 4,
                     "peak_task_memory_bytes": memory, "predicted": {}})  # fmt: skip
    return {"jobs": rows}


def test_growth_extrapolates_each_figure_through_both_sizes_as_worked_out_by_hand():
    mib = 1 << 20
    small = _document({"mine": (100.0, 10.0, 20.0, 10**9, 100 * mib), "only-small": (1.0, 1.0, 1.0, 1, 1)})
    large = _document({"mine": (1000.0, 10.0, 40.0, 10**10, 150 * mib)})
    (row,) = growth.size(small, 10**6, large, 10**7, {"big": 10**8}, cores=(32, 128), cores_per_executor=4)
    assert row["job"] == "mine" and row["exponents"]["task_seconds"] == pytest.approx(1.0)
    assert row["exponents"]["driver_seconds"] == pytest.approx(0.0)
    assert row["exponents"]["t_inf"] == pytest.approx(math.log10(2))
    assert row["work_exponent"] == pytest.approx(math.log10(1010 / 110)) and row["growth"] == "linear / n log n"
    at = row["at"]["big"]
    assert at["core_hours"] == pytest.approx(10_010 / 3600) and at["t_inf"] == pytest.approx(80.0)
    assert at["wall"] == pytest.approx({"32": 10 + 10_000 / 32, "128": 88.125})  # 10 + 78.125 beats T∞ 80
    assert at["shuffle_write_bytes"] == pytest.approx(10**11) and at["peak_task_memory_bytes"] == 150 * mib
    assert at["shuffle_partitions"] == math.ceil(10**11 / 4 / (64 * mib))  # 373: a stage of 25 GB in 64 MiB tasks
    assert at["executor_memory_bytes"] == pytest.approx(300 * mib + 4 * 150 * mib / 0.6)  # the large run's task
    assert growth.kind(0.5) == "sublinear" and growth.kind(1.24) == "superlinear" and growth.kind(None) == "-"
    with pytest.raises(ValueError, match="0 < n_small < n_large"):
        growth.exponent(10, 1.0, 10, 2.0)
    rows = growth.size(small, 10**6, large, 10**7, {"big": 10**8}, assumed={"only-small": 0.5})
    assumed = {r["job"]: r for r in rows}["only-small"]  # from the small run, b = 0.5 for every figure
    assert assumed["assumed"] and assumed["at"]["big"]["t_inf"] == pytest.approx(10.0)
    # b = 0.5 up to the large size (10x: 1 -> 3.16 s), then the tasks at least linearly (10x more: 31.6 s)
    assert assumed["at"]["big"]["core_hours"] == pytest.approx((10**0.5 * 10 + 10) / 3600)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1e3, 1e8), st.floats(1.5, 100.0), st.floats(1e-3, 1e5), st.floats(1e-3, 1e5), st.floats(1.0, 1e3),
    st.floats(0.0, 1e4), st.floats(0.0, 1e6), st.floats(0.0, 1e4),
)  # fmt: skip
def test_a_power_law_goes_through_both_measurements_and_wall_never_rises_with_cores(
    n_small, ratio, small, large, scale, driver, tasks, t_inf
):
    n_large = n_small * ratio
    b = growth.exponent(n_small, small, n_large, large)
    assert growth.extrapolate(n_large, large, b, n_small) == pytest.approx(small, rel=1e-6)
    assert growth.extrapolate(n_large, large, b, n_large) == pytest.approx(large)
    rises = growth.extrapolate(n_large, large, b, n_large * scale) >= large * (1 - 1e-9)
    assert rises or (b < 0 and scale > 1)  # a figure falls with size only when it fell between the two
    walls = [growth.wall(driver, tasks, t_inf, cores) for cores in (1, 2, 8, 32, 128)]
    assert walls == sorted(walls, reverse=True) and min(walls) >= max(t_inf, driver)
