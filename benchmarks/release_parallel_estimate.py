"""T∞ of a release built one after another, estimated as if built with ``release.parallel``.

Reads a release's event log (``spark.event_log_dir``), gives each Spark job its benchmark as its thread (the
release's own stages by their step, a sub-job's by the builder that runs it) and replays the critical path
with those threads (:func:`kgbrink.sizing.replay.critical_path`): the benchmarks side by side, their driver
gaps as recorded one after another (an upper bound: a benchmark's tables are then still one after another).
Prints and writes (``--json``) T∞ as recorded, as if parallel, and each benchmark's own chain.

    .venv/bin/python benchmarks/release_parallel_estimate.py benchmarks/out/events-release-2M-p128 \\
        --json benchmarks/results/release-parallel-estimate-2000000.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kgbrink.sizing import eventlog, replay

BUILDER_JOBS = {  # the jobs each release builder runs (kgbrink.jobs.release.BUILDERS)
    "build": "brink",
    "export": "brink",
    "stats": "probe",
    "seed-graphs": "synthkgqa",
    "gt-questions": "synthkgqa",
    "question-graphs": "synthkgqa",
    "mcq": "probekgc",
    "okgqa-sweep": "okgqa",
    "okgqa-subgraphs": "okgqa",
}


def benchmark_threads(app: eventlog.Application) -> dict[int, str]:
    """Each Spark job's benchmark ("" for the release's plan and description)."""
    threads: dict[int, str] = {}
    for stage in app.stages.values():
        parts = stage.label.split("/")
        if parts[0] == "release" and len(parts) > 1:
            threads[stage.job] = BUILDER_JOBS[parts[1]]
        elif stage.label == "release" and stage.step not in ("", "describe"):
            threads[stage.job] = stage.step
        else:
            threads.setdefault(stage.job, "")
    return threads


def estimate(path: Path) -> dict:
    app = eventlog.read(path)
    profiles, tail, _ = replay.stages(app)
    threads = benchmark_threads(app)
    chains = {}
    for benchmark in sorted({t for t in threads.values() if t}):
        chosen = [p for p in profiles if threads.get(p.job) == benchmark]
        chains[benchmark] = round(replay.critical_path(chosen, 0.0, app.jobs), 1)
    return {
        "log": str(path),
        "t_inf_recorded": round(replay.critical_path(profiles, tail, app.jobs), 1),
        "t_inf_as_if_parallel": round(replay.critical_path(profiles, tail, app.jobs, threads), 1),
        "chains": chains,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", help="a release's event log folder (spark.event_log_dir)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = [estimate(path) for path in eventlog.log_files(args.logs)]
    for result in results:
        print(
            f"{result['log']}: T∞ {result['t_inf_recorded'] / 60:.1f} min one after another, "
            f"{result['t_inf_as_if_parallel'] / 60:.1f} min as if parallel; chains (s): {result['chains']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
