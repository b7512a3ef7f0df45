"""Benchmark: is `kgbrink profile`'s replay right? (issue 71, item 2) The `make run` pipeline (`kgbrink run`:
ingest -> stats -> build) on a generated KG, run three times in a row as its own process:

1. ``local[2]`` with the event log on: profiled, predicting T(1) and T(2);
2. ``local[1]`` with the event log on: its measured span (first Spark job to last) is what T(1) predicted;
3. ``local[2]`` with the event log off: the cost of writing the log (run 1's wall time over this one's).

Errors are reported on the Spark span (the log's first job submitted to its last completed), and on the
process's wall time (JVM start and the Python driver's work outside Spark jobs included, which the log
cannot see). Results: ``benchmarks/results/profile-<triples>.json``.

    .venv/bin/python benchmarks/bench_profile.py --triples 500000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import load, measure, new_results

from kgbrink.sizing import eventlog, report

KGBRINK = str(PROJECT / ".venv" / "bin" / "kgbrink")


def pipeline(work: Path, triples: int, master: str, events: Path | None) -> dict:
    """``kgbrink run`` on a fresh dataset; its wall time, memory and summary timings."""
    shutil.rmtree(work, ignore_errors=True)
    command = [KGBRINK, "run", "--dataset", str(work / "dataset"), "--sample-dir", str(work.parent / f"kg-{triples}")]
    command += ["--json", str(work / "run.json"), "--no-tracking", "--set", f"spark.master={master}"]
    command += ["--set", f"synth.triples={triples}", "--set", "synth.seed=7"]
    if events is not None:
        shutil.rmtree(events, ignore_errors=True)
        command += ["--set", f"spark.event_log_dir={events}"]
    record = {"command": " ".join(command), "load_before": load(), **measure(command, work / "run.log")}
    record["load_after"] = load()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, default=500_000)
    parser.add_argument("--out", default=str(HERE / "out" / "profile"))
    args = parser.parse_args()
    out = Path(args.out)
    results = new_results() | {"triples": args.triples}
    target = HERE / "results" / f"profile-{args.triples}.json"
    runs = {}
    for name, master, logged in (
        ("two", "local[2]", True),
        ("one", "local[1]", True),
        ("two_unlogged", "local[2]", False),
    ):
        events = out / f"events-{name}" if logged else None
        runs[name] = pipeline(out / name, args.triples, master, events)
        if events is not None:
            for basis in ("cpu", "wall"):
                apps = [eventlog.read(p) for p in eventlog.log_files(events)]
                document = report.merge([report.profile(app, (1, 2, 8, 32, 128), basis) for app in apps])
                runs[name][f"profile_{basis}"] = {k: document[k] for k in ("measured", "total", "jobs")}
        print(name, json.dumps({k: v for k, v in runs[name].items() if k != "profile"}), flush=True)
        results["runs"] = runs
        target.write_text(json.dumps(results, indent=1) + "\n")
    check = {
        "wall_1": runs["one"]["seconds"],
        "event_log_cost": round(runs["two"]["seconds"] / runs["two_unlogged"]["seconds"] - 1, 3),
    }
    for basis in ("cpu", "wall"):
        two, one = runs["two"][f"profile_{basis}"], runs["one"][f"profile_{basis}"]
        predicted_one = two["total"]["predicted"]["1"]
        outside = runs["two"]["seconds"] - two["measured"]  # JVM start, the driver's work outside Spark jobs
        check[basis] = {
            "predicted_1_from_2": predicted_one,
            "measured_span_1": one["measured"],
            "error_span_1": round(predicted_one / one["measured"] - 1, 3),
            "replay_2_vs_its_span": round(two["total"]["predicted"]["2"] / two["measured"] - 1, 3),
            "error_wall_1": round((predicted_one + outside) / runs["one"]["seconds"] - 1, 3),
            "t1_two": two["total"]["t1"],
            "t_inf_two": two["total"]["t_inf"],
            "predicted_from_two": two["total"]["predicted"],
        }
    results["check"] = check
    target.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(check, indent=1))


if __name__ == "__main__":
    main()
