"""Memory (issue 59, item 5): the driver heap's default comes from the machine's memory, the generated
reference never shows a machine's figure, and every job summary carries the driver's peak memory."""

from __future__ import annotations

import json

from kgbrink.core import machine, reference_docs, settings
from kgbrink.core.jobs import REGISTRY, Job, JobContext
from kgbrink.core.tracking import JobSummary

GIB = 1 << 30


def test_the_driver_heap_is_half_the_machine_in_whole_gb_from_1_to_16():
    assert machine.driver_memory_default(24_683_792 * 1024) == "11g"  # this 2-core machine: 23.5 GiB
    assert machine.driver_memory_default(16 * GIB) == "8g"
    assert machine.driver_memory_default(9 * GIB - 1) == "4g"
    assert machine.driver_memory_default(GIB) == "1g"  # at least 1g
    assert machine.driver_memory_default(256 * GIB) == "16g"  # at most 16g
    assert machine.driver_memory_default(None) == "4g"  # memory unknown
    total = machine.machine_memory()
    assert total is not None and total > 0
    assert settings.LOCAL_SPARK_CONF["spark.driver.memory"] == machine.driver_memory_default(total)


def test_the_generated_reference_names_the_rule_not_this_machines_figure():
    reference = reference_docs.settings_reference()
    assert settings.DRIVER_MEMORY in reference
    assert f"`{settings.LOCAL_SPARK_CONF['spark.driver.memory']}`" not in reference
    assert "driver.memory" not in reference.replace(f"spark.driver.memory: {settings.DRIVER_MEMORY}", "")


def test_every_summary_carries_the_drivers_peak_memory(spark, config, monkeypatch):
    def outer(ctx, options):
        ctx.spark.range(1000).count()
        ctx.run("inner", None)
        return ctx.summary

    monkeypatch.setitem(REGISTRY, "outer", Job("outer", "", object, outer))
    monkeypatch.setitem(REGISTRY, "inner", Job("inner", "", object, lambda ctx, options: ctx.summary))
    summary = JobContext(spark, config).run("outer", None)
    memory = summary.memory
    names = ["driver_jvm_peak_rss_mb", "driver_peak_heap_mb", "driver_peak_old_gen_mb", "driver_peak_rss_mb"]
    assert sorted(memory) == names
    assert all(isinstance(v, int) and v > 0 for v in memory.values()), memory
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() >> 20
    assert memory["driver_peak_old_gen_mb"] <= memory["driver_peak_heap_mb"] <= heap  # at most the heap's size
    assert json.loads(json.dumps(summary.as_dict()))["memory"] == memory
    without = JobContext(None, config).run("inner", None)  # no session: the Python process's peak alone
    assert list(without.memory) == ["driver_peak_rss_mb"] and without.memory["driver_peak_rss_mb"] > 0
    assert "memory" not in JobSummary("x").as_dict()
