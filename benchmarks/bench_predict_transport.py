"""Benchmark: kgbrink.llm.client.run_calls against a local OpenAI-compatible server answering in 50 ms.

The scripted server (``python -m tests.llm_server --delay-ms 50 --model echo``) runs in its own process;
``--workers`` processes (2, as 2 Spark tasks) each run ``run_calls`` over their share of ``--prompts``
prompts (100,000) with ``--in-flight`` requests outstanding (32), appending every result to a JSON Lines
spool as a task does. Reported: the wall time from the workers' common start to the last result, against
the ideal ``prompts * delay / (workers * in_flight)``; the workers' CPU (``os.times``, user + system) per
prompt; the server's CPU per request (``/proc/<pid>/stat``); the server's counts (requests, completed
answers, largest concurrency). Results go to ``benchmarks/results/predict-transport.json`` under ``--label``.

    .venv/bin/python benchmarks/bench_predict_transport.py [--prompts 100000] [--label after]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PROJECT))

from harness import load, new_results

from tests.llm_server import LlmServerProcess

RESULTS = HERE / "results" / "predict-transport.json"
SYSTEM = "Answer the question with one entity from the knowledge graph. Reply with its label only."


def body(index: int) -> dict:
    """A benchmark-like request: a system prompt, a ~200-character question, logprobs of the first token."""
    question = f"Question {index}: which entity is linked to Q{index % 50_000} by P{index % 97} and to Q{index % 7}?"
    return {
        "model": "echo",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question * 2}],
        "temperature": 0,
        "max_tokens": 8,
        "logprobs": True,
        "top_logprobs": 5,
        "seed": 7,
    }


def worker(index: int, workers: int, prompts: int, base_url: str, in_flight: int, spool: str, start, out) -> None:
    """Ask prompts ``index, index + workers, ...``; put this process's timings and counts on ``out``."""
    from kgbrink.llm.client import EndpointConfig, RetryPolicy, run_calls

    retry = RetryPolicy(backoff_initial_s=0.05, backoff_max_s=1)
    config = EndpointConfig(base_url, in_flight=in_flight, timeout_s=30, retry=retry)
    results = 0
    with open(spool, "w", encoding="utf-8") as stream:

        def keep(result) -> None:
            nonlocal results
            results += 1
            line = {name: value for name, value in vars(result).items()}
            stream.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
            stream.flush()

        requests = ((f"{i:012d}", body(i)) for i in range(index, prompts, workers))
        start.wait()
        began, cpu = time.perf_counter(), os.times()
        stats = run_calls(config, requests, keep)
        wall, spent = time.perf_counter() - began, os.times()
    out.put(
        {
            "worker": index,
            "results": results,
            "wall_seconds": round(wall, 2),
            "cpu_seconds": round(spent.user - cpu.user + spent.system - cpu.system, 2),
            "stats": vars(stats),
        }
    )


def server_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(prompts: int, workers: int, in_flight: int, delay_ms: float) -> dict:
    context = multiprocessing.get_context("spawn")
    with (
        LlmServerProcess("--delay-ms", str(delay_ms), "--model", "echo") as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        start, out = context.Barrier(workers + 1), context.Queue()
        processes = [
            context.Process(
                target=worker,
                args=(i, workers, prompts, server.base_url, in_flight, f"{tmp}/part-{i}.jsonl", start, out),
            )
            for i in range(workers)
        ]
        for process in processes:
            process.start()
        start.wait()
        began, server_cpu = time.perf_counter(), server_cpu_seconds(server.process.pid)
        reports = [out.get() for _ in processes]
        wall = time.perf_counter() - began
        server_cpu = server_cpu_seconds(server.process.pid) - server_cpu
        for process in processes:
            process.join()
        counts = server.stats(detail=False)
    ideal = prompts * delay_ms / 1000 / (workers * in_flight)
    cpu = sum(report["cpu_seconds"] for report in reports)
    return {
        "prompts": prompts,
        "workers": workers,
        "in_flight_per_worker": in_flight,
        "delay_ms": delay_ms,
        "wall_seconds": round(wall, 2),
        "ideal_seconds": round(ideal, 2),
        "ratio_to_ideal": round(wall / ideal, 3),
        "prompts_per_second": round(prompts / wall, 1),
        "client_cpu_seconds": round(cpu, 2),
        "client_cpu_ms_per_prompt": round(cpu / prompts * 1000, 3),
        "server_cpu_seconds": round(server_cpu, 2),
        "server_cpu_ms_per_request": round(server_cpu / max(1, counts["requests"]) * 1000, 3),
        "server": {key: counts[key] for key in ("requests", "completed", "max_concurrent", "faults")},
        "by_worker": sorted(reports, key=lambda report: report["worker"]),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=32, help="per worker")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--label", default="latest")
    options = parser.parse_args()
    result = run(options.prompts, options.workers, options.in_flight, options.delay_ms)
    print(json.dumps(result, indent=2))
    recorded = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    recorded[options.label] = {**new_results(), "runs": [result]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(recorded, indent=2) + "\n")


if __name__ == "__main__":
    main()
