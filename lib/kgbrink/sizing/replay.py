"""What a recorded run would take on N cores: its tasks replayed stage by stage on N slots.

Stages in: an :class:`~kgbrink.sizing.eventlog.Application`'s. Per stage (in the order its first task
launched): its tasks' durations (every attempt; by default its CPU time, deserialisation's and its Python
workers' included: on the recorded machine the task threads shared the cores with the driver, so a task's
wall time holds its wait for a core, which a cluster's dedicated executor cores do not have; ``wall``:
finish - launch), the driver's gap before it (the time in the run's span, first Spark job submitted to last
completed, when no task ran, given to the stage whose task ended it; what follows the last task is the
tail). Then, with d the task durations:

- T1 (work) = sum of all d + all gaps + tail;
- T∞ (critical path) = the longest path through the stages' dependencies, a stage weighing its gap plus its
  longest task, a Spark job starting after the jobs that had completed when it was submitted (jobs that
  overlapped, as adaptive execution's shuffle stages, side by side; a driver thread's, as a parallel
  release's benchmarks, after those of its own thread, of the threads that forked it and of those it
  forked), plus the tail;
- T(N) = sum over stages of (gap + the stage's makespan on N slots, its tasks given in launch order each to
  the slot free first) + tail.

T(N) never rises with N (a list schedule of independent tasks in a fixed order on more slots starts each
task no later), and T1/N <= T(N), T∞ <= T(N). Stages run one after another in the replay, so stages the
recorded run overlapped are counted in sequence (T(recorded cores) can exceed the measured time, and T(N) of
a run whose threads overlapped is an upper bound).
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass, field

from kgbrink.sizing.eventlog import Application, Stage

CORES = (2, 8, 32, 128)
ONE_TASK_ROWS = 1_000_000  # a stage of one task over more input rows will not scale
SKEW_RATIO = 5.0  # longest task over the median
SKEW_FLOOR_SECONDS = 1.0  # shorter longest tasks are noise, not skew
COLLECT_BYTES = 16 << 20  # results sent to the driver (about 100k rows of 160 bytes)


@dataclass
class StageProfile:
    """One stage's figures: tasks, rows and bytes in and out, task seconds, longest and median task, the
    driver's gap before it, its largest task's execution memory and its spill, and its flags (``one_task``,
    ``skew``, ``collect``)."""

    id: int
    job: int
    label: str
    step: str
    name: str
    parents: tuple[int, ...]
    durations: list[float]
    gap: float
    input_rows: int
    input_bytes: int
    shuffle_read_rows: int
    shuffle_read_bytes: int
    shuffle_write_rows: int
    shuffle_write_bytes: int
    result_bytes: int
    peak_task_memory_bytes: int = 0  # the most execution memory one task held
    spilled_bytes: int = 0
    flags: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return len(self.durations)

    @property
    def task_seconds(self) -> float:
        return sum(self.durations)

    @property
    def longest(self) -> float:
        return max(self.durations)

    @property
    def median(self) -> float:
        return statistics.median(self.durations)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "durations"}
        out.update(
            parents=list(self.parents),
            tasks=self.tasks,
            task_seconds=round(self.task_seconds, 3),
            longest=round(self.longest, 3),
            median=round(self.median, 3),
            gap=round(self.gap, 3),
        )
        return out


def _flags(stage: Stage, durations: list[float], rows_in: int, result_bytes: int) -> list[str]:
    flags = []
    if len(durations) == 1 and rows_in > ONE_TASK_ROWS:
        flags.append(f"one_task: one task over {rows_in:,} input rows")
    longest, median = max(durations), statistics.median(durations)
    if longest >= SKEW_FLOOR_SECONDS and longest > SKEW_RATIO * median:
        flags.append(f"skew: longest task {longest:.1f} s > {SKEW_RATIO:g}x the median {median:.2f} s")
    if result_bytes > COLLECT_BYTES:
        # a broadcast exchange collects on Spark's thread pool: its stage is named by the pool's frame
        kind = "broadcast" if "withThreadLocalCaptured" in stage.name else "collect"
        flags.append(f"{kind}: {result_bytes / (1 << 20):.0f} MiB of results to the driver")
    return flags


BASES = ("cpu", "wall")


def stages(
    app: Application, basis: str = "cpu", task_overhead: float = 0.0
) -> tuple[list[StageProfile], float, tuple[int, int]]:
    """The application's stage profiles in replay order, the tail gap (seconds) and the span (ms). A task
    lasts its CPU time (``basis`` cpu; its wall time where none is recorded) or its wall time (wall), plus
    ``task_overhead`` seconds: what a cluster's executors add to every task (docs/cluster.md measures it)."""
    if basis not in BASES:
        raise ValueError(f"basis must be one of {', '.join(BASES)}, got {basis!r}")
    if task_overhead < 0:
        raise ValueError(f"task_overhead must be >= 0 seconds, got {task_overhead}")
    ordered = sorted(app.stages.values(), key=lambda s: (min(t.launch for t in s.tasks), s.id))
    tasks = sorted((t for s in ordered for t in s.tasks), key=lambda t: (t.launch, t.finish))
    submitted = [start for start, _ in app.jobs.values()]
    ends = [end for _, end in app.jobs.values() if end is not None] + [t.finish for t in tasks]
    start = min([*submitted, *(t.launch for t in tasks[:1])], default=0)
    end = max(ends, default=start)
    gaps: dict[int, float] = {}
    covered = start
    for task in tasks:
        if task.launch > covered:
            gaps[task.stage] = gaps.get(task.stage, 0.0) + (task.launch - covered) / 1000.0
        covered = max(covered, task.finish)
    tail = max(end - covered, 0) / 1000.0
    out = []
    for stage in ordered:
        attempts = sorted(stage.tasks, key=lambda t: (t.launch, t.index))
        durations = [(t.cpu_seconds if basis == "cpu" else t.seconds) + task_overhead for t in attempts]
        rows_in = sum(t.rows_in for t in attempts)
        result_bytes = sum(t.result_bytes for t in attempts if t.result_task)
        out.append(
            StageProfile(
                stage.id,
                stage.job,
                stage.label,
                stage.step,
                stage.name,
                stage.parents,
                durations,
                gaps.get(stage.id, 0.0),
                sum(t.input_rows for t in attempts),
                sum(t.input_bytes for t in attempts),
                sum(t.shuffle_read_rows for t in attempts),
                sum(t.shuffle_read_bytes for t in attempts),
                sum(t.shuffle_write_rows for t in attempts),
                sum(t.shuffle_write_bytes for t in attempts),
                result_bytes,
                max(t.peak_memory_bytes for t in attempts),
                sum(t.spilled_bytes for t in attempts),
                _flags(stage, durations, rows_in, result_bytes),
            )
        )
    return out, tail, (start, end)


def makespan(durations: list[float], cores: int) -> float:
    """The time ``durations`` (in order) take on ``cores`` slots, each to the slot free first."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if len(durations) <= cores:
        return max(durations, default=0.0)
    slots = [0.0] * cores
    end = 0.0
    for duration in durations:
        finish = heapq.heappop(slots) + duration
        end = max(end, finish)
        heapq.heappush(slots, finish)
    return end


def predicted(profiles: list[StageProfile], tail: float, cores: int) -> float:
    """T(N): the stages one after another, each its gap plus its makespan on ``cores`` slots, then the tail."""
    return sum(p.gap + makespan(p.durations, cores) for p in profiles) + tail


def work(profiles: list[StageProfile], tail: float) -> float:
    """T1: every task's time and every driver gap."""
    return sum(p.task_seconds + p.gap for p in profiles) + tail


def _related(one: str, other: str) -> bool:
    """Whether a job of thread ``one`` orders one of ``other``: the same thread, or one forked the other
    (``""`` the driver's forks every thread; ``brink`` forks ``brink/brink_removed``)."""
    return one == other or not one or not other or other.startswith(one + "/") or one.startswith(other + "/")


def critical_path(
    profiles: list[StageProfile],
    tail: float,
    jobs: dict[int, tuple[int, int | None]] | None = None,
    threads: dict[int, str] | None = None,
) -> float:
    """T∞: the longest path through the stages (gap plus longest task each) and their parents, plus the tail.
    With the Spark jobs' recorded ``(submitted, completed)`` ms, a job starts when every job that completed
    before it was submitted has ended (the driver's order) and a stage follows its parents in any job: jobs
    that overlapped (adaptive execution's concurrent shuffle stages) run side by side. With ``threads`` (a
    job's ``kgbrink.thread`` label, ``a/b`` a thread ``a`` forked; "" the driver's own), a job waits only for
    the jobs of its own thread, of the threads that forked it and of those it forked (:func:`_related`):
    sibling threads run side by side, and a thread's next job joins those it forked. Without ``jobs``, each
    job's longest path, summed (the jobs one after another)."""
    by_job: dict[int, list[StageProfile]] = {}
    for profile in profiles:  # replay order: a parent that ran launched before its child
        by_job.setdefault(profile.job, []).append(profile)
    if jobs is None:
        by_id = {p.id: p for p in profiles}
        longest: dict[int, float] = {}
        for profile in profiles:
            before = [longest[q] for q in profile.parents if q in longest and by_id[q].job == profile.job]
            longest[profile.id] = max(before, default=0.0) + profile.gap + profile.longest
        return sum(max(longest[p.id] for p in chosen) for chosen in by_job.values()) + tail
    threads = threads or {}
    order = sorted(by_job, key=lambda j: (jobs.get(j, (0, None))[0], j))
    ended = sorted((jobs[j][1], j) for j in order if j in jobs and jobs[j][1] is not None)
    finish: dict[int, float] = {}  # a job's end in the model
    done: dict[int, float] = {}  # a stage's end in the model
    ready_of: dict[str, float] = {}  # the latest end of each thread's jobs completed so far
    next_ended = 0
    for job in order:
        submitted = jobs.get(job, (0, None))[0]
        while next_ended < len(ended) and ended[next_ended][0] <= submitted:
            other = threads.get(ended[next_ended][1], "")
            ready_of[other] = max(ready_of.get(other, 0.0), finish.get(ended[next_ended][1], 0.0))
            next_ended += 1
        thread = threads.get(job, "")
        ready = max((end for label, end in ready_of.items() if _related(label, thread)), default=0.0)
        end = ready
        for profile in by_job[job]:
            start = max([ready, *(done[q] for q in profile.parents if q in done)])
            done[profile.id] = start + profile.gap + profile.longest
            end = max(end, done[profile.id])
        finish[job] = end
    return max(finish.values(), default=0.0) + tail
