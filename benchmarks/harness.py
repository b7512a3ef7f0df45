"""Shared benchmark plumbing: run a command as its own process tree and measure it.

``measure(command, log)`` runs ``command`` with stdout and stderr to ``log`` and returns its wall seconds
and peak memory. ``/usr/bin/time -v`` is not enough for a Spark job: the driver JVM is a grandchild that
PySpark never ``wait``s for, so ``time`` reports the Python launcher (~0.5 GB). Instead a sampler reads
``/proc`` every ``interval`` seconds, finds every descendant of the command, and keeps

- ``peak_rss_mb``: the largest ``VmHWM`` (the kernel's own high-water mark of one process's resident
  memory, so short peaks between samples are not missed) over all descendants — for a Spark job, the
  driver JVM;
- ``peak_tree_rss_mb``: the largest sum of ``VmRSS`` over the tree at one sample (a lower bound of the
  true peak of the sum);
- ``peak_process``: the command name of the process with the largest high-water mark.

``run_worker(script, kind, task, work)`` runs one engine of a side-by-side benchmark in a child process
(``script --worker kind``), so that each engine has the machine's memory to itself and its own peak RSS:
a stopped SparkSession does not give its driver JVM's heap back, and at 1e9 rows a resident 13 GB JVM
beside DuckDB's 16 GB does not fit in 24 GiB. ``serve_worker`` is the child's side.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path


def load() -> str:
    """``uptime``: benchmark records note the machine's load average at each timing."""
    return subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()


def machine() -> str:
    """Cores, CPU model, RAM and kernel, for the benchmark records."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def new_results() -> dict:
    """The head of a results file: machine, the command as run, the date, and an empty list of runs."""
    return {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "runs": [],
    }


def generated_kg(config, out: Path, size: int) -> Path:
    """``<out>/kg-<size>``: the generated KG of ``size`` triples (seed 7), generated when missing (not timed)."""
    from kgbrink.core.jobs import JobContext
    from kgbrink.jobs import synth

    kg = out / f"kg-{size}"
    if not (kg / "synth_manifest.json").is_file():
        synth.run(JobContext(None, config), synth.SynthOptions(out=str(kg), triples=size, seed=7))
    return kg


def process_peak_rss_mb() -> float:
    """This Python process's peak resident memory (its ``ru_maxrss``), MB: DuckDB's or numpy's, run in it."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def jvm_peak_rss_mb(spark) -> float:
    """The driver JVM's peak resident memory so far (its ``VmHWM``), MB."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    return round(_status_kb(pid, "VmHWM") / 1024, 1)


def stop_spark(spark) -> None:
    """Stop ``spark`` and end its driver JVM (``spark.stop()`` leaves the JVM and its heap resident), so a
    peer run after it has the machine's memory."""
    gateway = spark.sparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        proc.stdin.close()  # PySpark's JVM exits when its stdin closes
        proc.wait(timeout=120)


def run_worker(script: Path, kind: str, task: dict, work: Path, env: dict | None = None) -> dict:
    """Run ``script --worker kind`` in a child process (module docstring); the task and the answer go
    through JSON files under ``work``. Raises SystemExit when the child fails."""
    work.mkdir(parents=True, exist_ok=True)
    task_file, result_file = work / f"{kind}-task.json", work / f"{kind}-result.json"
    task_file.write_text(json.dumps(task))
    result_file.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(script), "--worker", kind, "--task", str(task_file), "--result", str(result_file)],
        check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise SystemExit(f"{kind} worker of {Path(script).name} failed (exit {proc.returncode})")
    result = json.loads(result_file.read_text())
    result["process_seconds"] = round(time.perf_counter() - start, 1)
    return result


def serve_worker(workers: dict, kind: str, task: str, result: str) -> None:
    """The child's side of :func:`run_worker`: run ``workers[kind]`` on the task file, write its answer."""
    answer = workers[kind](json.loads(Path(task).read_text()))
    Path(result).write_text(json.dumps(answer))


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return "?"


def tree_peak_mb(root: int) -> int:
    """The largest ``VmHWM`` (MB) over ``root`` and its descendants: for a process that started Spark, its
    driver JVM's peak resident memory so far."""
    return round(max(_status_kb(pid, "VmHWM") for pid in _descendants(root)) / 1024)


def measure(command: list[str], log: Path, interval: float = 1.0, env: dict | None = None) -> dict:
    """Run ``command`` (output to ``log``); wall seconds and peak memory (module docstring). Raises
    SystemExit naming the log when the command fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    peaks = {"hwm": 0, "tree": 0, "name": ""}
    with log.open("w") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                tree = 0
                for pid in _descendants(process.pid):
                    tree += _status_kb(pid, "VmRSS")
                    hwm = _status_kb(pid, "VmHWM")
                    if hwm > peaks["hwm"]:
                        peaks["hwm"], peaks["name"] = hwm, _name(pid)
                peaks["tree"] = max(peaks["tree"], tree)
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
    if code:
        raise SystemExit(f"{command[0]} failed ({code}); see {log}")
    return {
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(peaks["hwm"] / 1024),
        "peak_tree_rss_mb": round(peaks["tree"] / 1024),
        "peak_process": peaks["name"],
    }
