"""Check: the OKGQA-P perturbations of a real KG keep each method's invariant (issue 45), in pandas.

Ingests a PROBE dump (default: ../shared/reference/probe/umls, where 57% of the triples share their pair
of entities with another relation), runs `kgbrink okgqa-sweep --scope kg` (RS, RR, ER, ED), then reads the
`perturbed` table (Spark reads the Delta tables) and checks per method and level in pandas:

- RS: every node's in- and out-degree and every relation's count as in the input, SD2 = 1;
- RS, RR, ER: |T'| = |T|; ED: |T'| = |T| - operations;
- ER: no (h, new tail) twice, no new tail in the head's 1-hop neighbourhood of the input;
- every triple no operation touched keeps its input split, and every level's split sizes equal the input's
  (ED: minus the removed triples).

Prints one line per (method, level): operations requested and made, reached, and the checks.

    .venv/bin/python benchmarks/check_perturb_invariants.py --kg ../shared/reference/probe/umls
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kg", default=str(PROJECT.parent / "shared" / "reference" / "probe" / "umls"))
    parser.add_argument("--levels", default="0.2,0.5,1.0")
    parser.add_argument("--seed", default="42")
    parser.add_argument("--out", default=str(HERE / "out" / "perturb-check"))
    args = parser.parse_args()
    from kgbrink.cli import main as kgbrink

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    dataset = out / "ds"
    common = ["--conf", str(PROJECT / "conf" / "local.yaml"), "--no-tracking"]
    assert kgbrink(["ingest", *common, "--format", "probe", "--input", args.kg, "--dataset", str(dataset)]) == 0
    start = time.perf_counter()
    sweep = [
        "okgqa-sweep",
        *common,
        "--dataset",
        str(dataset),
        "--scope",
        "kg",
        "--levels",
        args.levels,
        "--seeds",
        args.seed,
        "--report-dir",
        str(out / "report"),
        "--json",
        str(out / "sweep.json"),
    ]
    assert kgbrink(sweep) == 0
    seconds = time.perf_counter() - start
    summary = json.loads((out / "sweep.json").read_text())
    counts = {(r["method"], r["level"]): r for r in summary["perturb"]["results"]}
    similarity = {(r["method"], r["level"]): r for r in summary["results"]}
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    read = lambda path: spark.read.format("delta").load(str(path)).toPandas()  # noqa: E731
    triples = read(dataset / "triples")
    perturbed = read(dataset / "okgqa" / "kg" / "perturbed")
    log = read(dataset / "okgqa" / "kg" / "perturbation_log")
    original = triples.groupby(["h", "r", "t"], as_index=False)["split"].min()
    splits = {(h, r, t): s for h, r, t, s in zip(original.h, original.r, original.t, original.split)}
    near = set(zip(original.h, original.t)) | set(zip(original.t, original.h))
    failures = 0
    print(f"{args.kg}: {len(original):,} triples; sweep {seconds:.1f} s")
    for (method, level), row in sorted(counts.items()):
        graph = perturbed[(perturbed.method == method) & perturbed.levels.apply(lambda lv, p=level: p in list(lv))]
        ops = log[(log.method == method) & (log.level <= level)]
        touched = set(zip(ops.old_h, ops.old_r, ops.old_t))
        checks = {
            "size": len(graph) == len(original) - (len(ops) if method == "ED" else 0),
            "unique": not graph.duplicated(["h", "r", "t"]).any(),
            "untouched_split": all(
                splits[(h, r, t)] == s
                for h, r, t, s in zip(graph.h, graph.r, graph.t, graph.split)
                if (h, r, t) in splits and (h, r, t) not in touched
            ),
        }
        if method != "ED":
            checks["split_sizes"] = Counter(graph.split) == Counter(original.split)
        if method == "RS":
            checks["degrees"] = all(Counter(graph[c]) == Counter(original[c]) for c in ("h", "r", "t"))
            checks["sd2"] = similarity[(method, level)]["sd2"] == 1.0
        if method == "ER":
            checks["distinct_targets"] = not ops.duplicated(["old_h", "new_t"]).any()
            checks["outside_n1"] = all((h, t) not in near and h != t for h, t in zip(ops.old_h, ops.new_t))
        failed = [name for name, ok in checks.items() if not ok]
        failures += len(failed)
        print(
            f"{method} {level:g}: {row['operations']:,} of {row['requested']:,} operations (reached "
            f"{row['reached']:.4f}, skipped {row['skipped']:,}, noop {row['noop']:,}), |T'| {row['triples']:,}, "
            f"SD2 {similarity[(method, level)]['sd2']:.4f}: "
            + ("all checks hold" if not failed else f"FAILED {failed}")
        )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
