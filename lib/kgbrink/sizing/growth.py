"""Each job's growth between profiles of two sizes of one KG, and its figures extrapolated to a larger one.

In: two :func:`kgbrink.sizing.report.profile` documents (or merges) of the same jobs on n_small and n_large
triples, recorded with the same partitioning. Per job and figure x (task seconds W, driver seconds D, T∞,
shuffle bytes written, the most shuffle one stage read) the exponent b of x ~ n^b,
b = ln(x_large / x_small) / ln(n_large / n_small), and at n: x(n) = x_large * (n / n_large)^b (a power law
through the two measurements; n log n reads as b = 1.06 from 2M to 20M, so it cannot be told from linear).
Beyond n_large the work figures (task seconds, shuffle) grow at least linearly, b' = max(b, 1): a b under 1
is a fixed cost's share (per-task and per-stage costs at the small size), which only shrinks with n, not rows
that cost less. The wall time on N cores is estimated as max(D + W / N, T∞): the driver's gaps are serial,
the tasks share N cores, no run is faster than its critical path (a lower bound of the replay of
:mod:`kgbrink.sizing.replay`; the replay's own T(N) of the large profile is beside it).

A task's execution memory follows the rows it is given, not the KG: it is not extrapolated. With shuffle
partitions that keep a task's share of the heaviest stage at the large run's (``shuffle_partitions``: that
stage's bytes at n over ``TASK_SHUFFLE_BYTES``, AQE's default advisory partition size), an executor of c
cores needs the reserved 300 MB plus c times the large run's largest task memory over
``spark.memory.fraction`` (0.6): Spark's unified memory model (``UnifiedMemoryManager``), each of c running
tasks given up to 1/c of the execution pool.
"""

from __future__ import annotations

import math

RESERVED_BYTES = 300 << 20  # UnifiedMemoryManager's reserved system memory
MEMORY_FRACTION = 0.6  # spark.memory.fraction's default
TASK_SHUFFLE_BYTES = 64 << 20  # spark.sql.adaptive.advisoryPartitionSizeInBytes's default
FIGURES = ("task_seconds", "driver_seconds", "t_inf", "shuffle_write_bytes", "max_stage_shuffle_read_bytes")
WORK = ("task_seconds", "shuffle_write_bytes", "max_stage_shuffle_read_bytes")  # at least linear beyond n_large


def exponent(n_small: float, small: float, n_large: float, large: float) -> float | None:
    """b in x ~ n^b through (n_small, small) and (n_large, large); None where a value is not positive."""
    if n_small <= 0 or n_large <= n_small:
        raise ValueError(f"sizes must be 0 < n_small < n_large, got {n_small} and {n_large}")
    if small <= 0 or large <= 0:
        return None
    return math.log(large / small) / math.log(n_large / n_small)


def extrapolate(n_large: float, large: float, b: float | None, n: float) -> float:
    """x(n) = large * (n / n_large)^b; without an exponent (a figure zero at a size), the large value."""
    return large if b is None else large * (n / n_large) ** b


def kind(b: float | None) -> str:
    """The growth an exponent reads as: sublinear (fixed costs), linear or n log n, or superlinear."""
    if b is None:
        return "-"
    if b < 0.9:
        return "sublinear"
    return "linear / n log n" if b <= 1.15 else "superlinear"


def wall(driver: float, tasks: float, t_inf: float, cores: int) -> float:
    """Estimated wall seconds on ``cores``: max(driver + tasks / cores, t_inf)."""
    return max(driver + tasks / cores, t_inf)


def executor_memory(peak_task_bytes: float, cores_per_executor: int) -> float:
    """Bytes of heap an executor of ``cores_per_executor`` needs for tasks of ``peak_task_bytes`` each."""
    return RESERVED_BYTES + cores_per_executor * peak_task_bytes / MEMORY_FRACTION


def _jobs(document: dict) -> dict[str, dict]:
    return {row["job"]: row for row in document["jobs"]}


def size(
    small: dict,
    n_small: int,
    large: dict,
    n_large: int,
    targets: dict[str, int],
    cores: tuple[int, ...] = (32, 128),
    cores_per_executor: int = 4,
    assumed: dict[str, float] | None = None,
) -> list[dict]:
    """Per job of both documents: its exponents, growth kind (of its work, W + D) and, per named target size,
    core-hours (T1 / 3600), T∞, wall seconds on each of ``cores``, shuffle bytes, the shuffle partitions to
    set and executor memory. A job of the small document alone with an ``assumed`` exponent (measured
    otherwise, e.g. from wall times) is extrapolated from the small document with it, for every figure."""
    rows = []
    small_jobs, large_jobs = _jobs(small), _jobs(large)
    for job in sorted(set(small_jobs) & (set(large_jobs) | set(assumed or {}))):
        a = small_jobs[job]
        if job in large_jobs:
            z, n_base = large_jobs[job], n_large
            b = {f: exponent(n_small, a.get(f, 0), n_large, z.get(f, 0)) for f in FIGURES}
            work = exponent(
                n_small, a["task_seconds"] + a["driver_seconds"], n_large, z["task_seconds"] + z["driver_seconds"]
            )
        else:
            z, n_base = a, n_small
            work = assumed[job]
            b = dict.fromkeys(FIGURES, work)
        row = {
            "job": job,
            "exponents": b,
            "work_exponent": work,
            "growth": kind(work),
            "assumed": job not in large_jobs,
        }
        row["measured"] = {"t1": z["t1"], "t_inf": z["t_inf"], "predicted": z["predicted"]}
        row["at"] = {name: _at(z, n_base, n_large, b, n, cores, cores_per_executor) for name, n in targets.items()}
        rows.append(row)
    return rows


def _at(
    base: dict, n_base: int, n_large: int, b: dict, n: int, cores: tuple[int, ...], cores_per_executor: int
) -> dict:
    """The figures at n: from ``base`` (measured at n_base) with ``b`` up to n_large, then the work figures
    at least linearly."""
    x = {}
    for f in FIGURES:
        value = extrapolate(n_base, base.get(f, 0), b[f], min(n, n_large))
        beyond = max(b[f], 1.0) if f in WORK and b[f] is not None else b[f]
        x[f] = extrapolate(n_large, value, beyond, n) if n > n_large else value
    return {
        "triples": n,
        "core_hours": (x["task_seconds"] + x["driver_seconds"]) / 3600,
        "t_inf": x["t_inf"],
        "wall": {str(c): wall(x["driver_seconds"], x["task_seconds"], x["t_inf"], c) for c in cores},
        "shuffle_write_bytes": x["shuffle_write_bytes"],
        "shuffle_partitions": max(math.ceil(x["max_stage_shuffle_read_bytes"] / TASK_SHUFFLE_BYTES), 1),
        "peak_task_memory_bytes": base.get("peak_task_memory_bytes", 0),
        "executor_memory_bytes": executor_memory(base.get("peak_task_memory_bytes", 0), cores_per_executor),
    }
