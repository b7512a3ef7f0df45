"""Sizing a cluster: each job's figures extrapolated from `kgbrink profile` documents of two sizes.

Reads the profile.json of a small and a large run of the same jobs (`kgbrink profile --out DIR`), fits each
job's growth (x ~ n^b, :mod:`kgbrink.sizing.growth`) and prints, for Wikidata5m and full Wikidata (or
``--target NAME=TRIPLES``), each job's core-hours, T∞, wall time on 32 and 128 cores, shuffle written, the
shuffle partitions to set and the executor memory for 4 cores an executor; writes them to ``--json``.
``--assume JOB=B``: a job profiled at the small size only, grown as n^B (marked * in the table).

    .venv/bin/python benchmarks/size_cluster.py --small benchmarks/results/profile-release-2000000.json \\
        --small-triples 2000000 --large benchmarks/results/profile-release-20000000.json --large-triples 20000000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from kgbrink.sizing import growth, report

TARGETS = {"wikidata5m": 20_614_279, "wikidata": 1_500_000_000}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def table(rows: list[dict], targets: dict[str, int]) -> str:
    lines = []
    for name in targets:
        lines += [
            f"\n{name} ({targets[name]:,} triples)\n",
            "| job | growth (b) | core-hours | T∞ | 32 cores | 128 cores | shuffle | partitions | task memory | "
            "executor (4 cores) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            at = row["at"][name]
            b = row["work_exponent"]
            mark = "*" if row["assumed"] else ""
            lines.append(
                f"| {row['job']}{mark} | {row['growth']} ({'-' if b is None else f'{b:.2f}'}) | {at['core_hours']:.2f} "
                f"| {_hours(at['t_inf'])} | {_hours(at['wall']['32'])} | {_hours(at['wall']['128'])} "
                f"| {at['shuffle_write_bytes'] / 1e9:.1f} GB | {at['shuffle_partitions']} | {at['peak_task_memory_bytes'] / (1 << 20):.0f} MiB "
                f"| {at['executor_memory_bytes'] / (1 << 30):.1f} GiB |"
            )
    return "\n".join(lines)


def publishing(document: dict, steps: list[str]) -> dict:
    """A job row of the release's own stages (publishing) of ``steps`` (benchmarks) alone: the same
    publishing at both sizes when the runs released different benchmarks."""
    chosen = [SimpleNamespace(**s) for s in document["stages"] if s["label"] == "release" and s["step"] in steps]
    return {"job": "release (own: " + ",".join(steps) + ")", **report.figures(chosen, 0.0, ())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", required=True, help="profile.json of the smaller run")
    parser.add_argument("--small-triples", type=int, required=True)
    parser.add_argument("--large", required=True, help="profile.json of the larger run")
    parser.add_argument("--large-triples", type=int, required=True)
    parser.add_argument("--target", action="append", default=[], help="NAME=TRIPLES (default: Wikidata5m, Wikidata)")
    parser.add_argument(
        "--assume", action="append", default=[], help="JOB=B: a job of the small profile alone, grown as n^B"
    )
    parser.add_argument("--publishing", help="comma-separated benchmarks: a row of their publishing alone")
    parser.add_argument("--jobs", help="comma-separated job labels to report (default: all in both profiles)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    targets = dict(TARGETS)
    if args.target:
        targets = {name: int(n) for name, n in (t.split("=", 1) for t in args.target)}
    small, large = (json.loads(Path(p).read_text()) for p in (args.small, args.large))
    if args.publishing:
        for document in (small, large):
            document["jobs"].append(publishing(document, args.publishing.split(",")))
    assumed = {job: float(b) for job, b in (a.split("=", 1) for a in args.assume)}
    rows = growth.size(small, args.small_triples, large, args.large_triples, targets, assumed=assumed)
    if args.jobs:
        chosen = args.jobs.split(",")
        rows = [r for r in rows if r["job"] in chosen]
    print(table(rows, targets))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"command": vars(args), "targets": targets, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
