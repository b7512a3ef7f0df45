"""Issue 71: ``release.parallel`` builds benchmarks at once, each in its own thread and Spark session.

The builders here are stand-ins (``release.BUILDERS`` patched): what is checked is the scheduling around them
(threads that really overlap, settings kept apart, labels, the order of the configurations, frames released,
the first failure raised and the rest cancelled). That the files are the same bytes as a release built one
after another is checked on real benchmarks in test_release.py."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from kgbrink.core.jobs import JobContext, labelled
from kgbrink.core.session import cached_frames, session_setting
from kgbrink.jobs import release
from kgbrink.release import layout

PARTITIONS = "spark.sql.shuffle.partitions"


def _env(spark, config, parallel: int, tmp_path: Path) -> release._Env:
    config = dataclasses.replace(config, release=dataclasses.replace(config.release, parallel=parallel))
    ctx = JobContext(spark, config, path="release")
    opts = release.ReleaseOptions()
    return release._Env(ctx, opts, str(tmp_path / "dataset"), str(tmp_path / "v1"), tmp_path / "work")


def _plan(enabled: list[str]) -> release._Plan:
    return release._Plan({}, {}, {}, None, None, list(enabled), 1, {})


def _config(benchmark: str) -> layout.Config:
    return layout.Config(f"{benchmark}_t", benchmark, "", {"train": [f"{benchmark}.parquet"]}, {"train": 1}, [])


def test_benchmarks_build_at_once_apart_and_come_back_in_order(spark, config, tmp_path, monkeypatch):
    enabled = ["kg", "brink", "probe"]
    together = threading.Barrier(3, timeout=30)  # broken, and the test failed, unless all three run at once
    seen = {}

    def builder(benchmark: str, delay: float):
        def build(env: release._Env) -> list[layout.Config]:
            session = env.ctx.spark
            with session_setting(session, PARTITIONS, str(enabled.index(benchmark) + 5)):
                together.wait()
                frame = env.ctx.persist(session.range(10))  # kept: the thread releases it
                seen[benchmark] = {
                    "partitions": session.conf.get(PARTITIONS),
                    "rows": frame.count(),
                    "job": session.sparkContext.getLocalProperty("kgbrink.job"),
                    "step": session.sparkContext.getLocalProperty("kgbrink.step"),
                    "label": session.sparkContext.getLocalProperty("kgbrink.thread"),
                    "thread": threading.current_thread() is not threading.main_thread(),
                }
                together.wait()
            time.sleep(delay)  # the last benchmark ends first
            return [_config(benchmark), layout.Config(f"{benchmark}_empty", benchmark, "")]

        return build

    for benchmark in enabled:
        monkeypatch.setitem(release.BUILDERS, benchmark, builder(benchmark, 0.3 * (2 - enabled.index(benchmark))))
    env, before = _env(spark, config, 3, tmp_path), spark.conf.get(PARTITIONS)
    held = cached_frames(spark)
    with labelled(spark, job="release"):
        configs = release._build(env, _plan(enabled), enabled, str(tmp_path))
    assert [c.name for c in configs] == ["kg_t", "brink_t", "probe_t"]  # enabled's order, empty ones left out
    assert seen == {
        b: {"partitions": str(i + 5), "rows": 10, "job": "release", "step": b, "label": b, "thread": True}
        for i, b in enumerate(enabled)
    }
    assert spark.conf.get(PARTITIONS) == before and cached_frames(spark) == held
    assert spark.sparkContext.getLocalProperty("kgbrink.thread") is None
    assert env.notes == {b: f"Without rows, so not in this release: {b}_empty." for b in enabled}
    assert set(env.ctx.summary.timings) == set(enabled)


def test_one_at_a_time_runs_in_the_callers_thread(spark, config, tmp_path, monkeypatch):
    threads = []
    monkeypatch.setitem(release.BUILDERS, "kg", lambda env: threads.append(threading.current_thread()) or [])
    monkeypatch.setitem(release.BUILDERS, "probe", lambda env: threads.append(threading.current_thread()) or [])
    assert release._build(_env(spark, config, 1, tmp_path), _plan(["kg", "probe"]), ["kg", "probe"], "") == []
    assert threads == [threading.main_thread()] * 2


def test_the_first_failure_is_raised_and_the_others_jobs_cancelled(spark, config, tmp_path, monkeypatch):
    running, ended = threading.Event(), {}

    def long(env):
        running.set()
        try:  # hours on 2 cores unless cancelled
            env.ctx.spark.range(0, 10**12, numPartitions=4).selectExpr("sum(id % 7)").collect()
        except Exception as exc:  # noqa: BLE001
            ended["long"] = "cancelled" if "cancel" in str(exc).lower() else str(exc)
            raise
        return []

    def broken(env):
        assert running.wait(60)
        time.sleep(2)  # the long job's tasks started
        raise ValueError("a part of probe broke")

    def probe(env):  # its parts in threads of its own (as _tables'): the part's error is the release's
        return release._in_threads(env, [("fine", lambda env: []), ("broken", broken)])

    monkeypatch.setitem(release.BUILDERS, "kg", long)
    monkeypatch.setitem(release.BUILDERS, "probe", probe)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="a part of probe broke"):
        release._build(_env(spark, config, 2, tmp_path), _plan(["kg", "probe"]), ["kg", "probe"], "")
    assert ended == {"long": "cancelled"} and time.perf_counter() - started < 60
    assert spark.range(3).count() == 3  # the session works on
