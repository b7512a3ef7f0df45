"""Benchmark: `kgbrink mine` (max_atoms 3, BRINK's thresholds) on the 20M-triple generated KG, checked
against the generator's planted rules, with the same pruned plan run in DuckDB side by side.

Data: the dataset ``benchmarks/out/score/ds`` (``kgbrink synth --triples 20000000 --seed 7``, ingested;
``make bench-score`` builds it, or this script does when it is missing). Rules are mined on all splits
(train + valid + test), i.e. the whole generated KG, whose planted rules the synth manifest describes
with their exact support and body size.

1. kgbrink: ``kgbrink mine`` in its own process (conf/local.yaml, ``local[2]``, no tracking) with
   wall time and the driver JVM's peak resident memory (:func:`harness.measure`).
2. DuckDB (2 threads, same machine, same run): the same algorithm as SQL over the same triples exported
   to Parquet: one-atom supports and expansion sizes, the side choice per head relation, chain supports
   expanded from the chosen side, body sizes and PCA body sizes of the candidates; AMIE's selection then
   runs on its candidates with the same Python function. Both must give the same rules and metrics.
3. The planted rules (5: symmetry, inversion, hierarchy, two compositions) must all be output with the
   manifest's support and body size on the whole KG (``kg_support``, ``kg_body_size``: all splits, as
   mined; ``support`` and ``body_size`` there are train-only).

Results go to ``benchmarks/results/mine.json``; BENCHMARKS.md quotes them.

    .venv/bin/python benchmarks/bench_mine.py [--skip-duckdb]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT / "lib"))
sys.path.insert(0, str(HERE))

from harness import load, measure

from kgbrink.rules.model import parse_rule, read_amie_tsv

DATA = HERE / "out" / "score"
OUT = HERE / "out" / "mine"
RESULTS = HERE / "results" / "mine.json"
KGBRINK = str(PROJECT / ".venv" / "bin" / "kgbrink")


def ensure_dataset(triples: int, seed: int) -> Path:
    dataset = DATA / "ds"
    if (dataset / "triples" / "_delta_log").is_dir():
        return dataset
    kg = DATA / "kg"
    subprocess.run(
        [KGBRINK, "synth", "--out", str(kg), "--triples", str(triples), "--seed", str(seed), "--no-tracking"],
        check=True,
    )
    subprocess.run(
        [KGBRINK, "ingest", "--dataset", str(dataset), "--format", "wikidata5m", "--input", str(kg), "--no-tracking"],
        check=True,
    )
    return dataset


def planted_check(rules_tsv: Path, manifest: dict) -> list[dict]:
    mined = {r.key(): r for r in read_amie_tsv(rules_tsv)}
    out = []
    for planted in manifest["planted_rules"]:
        key = parse_rule(planted["rule"]).key()
        rule = mined.get(key)
        m = rule.metrics if rule else {}
        out.append(
            {
                "rule": key,
                "type": planted["type"],
                "found": rule is not None,
                "planted_confidence": planted["planted_confidence"],
                "manifest_support": planted["kg_support"],
                "manifest_body_size": planted["kg_body_size"],
                "support": m.get("support"),
                "body_size": m.get("body_size"),
                "std_confidence": m.get("std_confidence"),
                "pca_confidence": m.get("pca_confidence"),
                "exact": rule is not None
                and (m["support"], m["body_size"]) == (planted["kg_support"], planted["kg_body_size"]),
            }
        )
    return out


def duckdb_worker(dataset: Path, out: Path, threads: int) -> None:
    """Run the DuckDB peer in this process (called as a subprocess so its peak RSS is its own)."""
    from duckdb_mine_peer import mine_dataset

    from kgbrink.core.loader import load_config
    from kgbrink.rules.model import write_amie_tsv
    from kgbrink.rules.params import MiningParams

    params = MiningParams.from_settings(load_config(PROJECT / "conf" / "local.yaml"))
    started = time.perf_counter()
    result, timings = mine_dataset(dataset, params, threads)
    write_amie_tsv(result.rules, out / "rules-duckdb.tsv")
    (out / "duckdb.json").write_text(
        json.dumps({"seconds": round(time.perf_counter() - started, 1), "counts": result.counts, "timings": timings})
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=20_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument(
        "--reuse-kgbrink",
        action="store_true",
        help="take kgbrink's figures from the last run's log and JSON (the same command, run by hand)",
    )
    parser.add_argument("--duckdb-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.duckdb_worker:
        return duckdb_worker(Path(args.duckdb_worker), OUT, threads=2)
    OUT.mkdir(parents=True, exist_ok=True)
    dataset = ensure_dataset(args.triples, args.seed)
    manifest = json.loads((DATA / "kg" / "synth_manifest.json").read_text())
    tsv, summary_json = OUT / "rules.tsv", OUT / "mine-2e7.json"
    command = [
        KGBRINK,
        "mine",
        "--dataset",
        str(dataset),
        "--rules",
        str(OUT / "rules"),
        "--tsv",
        str(tsv),
        "--json",
        str(summary_json),
        "--no-tracking",
        "--set",
        "spark.master=local[2]",
    ]
    record = {
        "machine": f"{platform.machine()}, 2 cores, 24 GiB, Java 17",
        "input_triples": manifest["triples"],
        "kgbrink_command": " ".join(command),
        "load_before": load(),
    }
    measured = OUT / "mine-2e7.measure.json"
    if args.reuse_kgbrink:
        record["kgbrink"] = json.loads(measured.read_text())
        record["kgbrink_reused_from"] = str(measured)
    else:
        record["kgbrink"] = measure(command, OUT / "mine-2e7.log")
        measured.write_text(json.dumps(record["kgbrink"]))
    record["load_after"] = load()
    summary = json.loads(summary_json.read_text())
    record["kgbrink"].update(counts=summary["counts"], timings=summary["timings"])
    record["planted"] = planted_check(tsv, manifest)
    if not args.skip_duckdb:
        record["load_before_duckdb"] = load()
        record["duckdb"] = measure([sys.executable, __file__, "--duckdb-worker", str(dataset)], OUT / "duckdb.log")
        record["duckdb"].update(json.loads((OUT / "duckdb.json").read_text()))
        spark_rules = {r.key(): r.metrics for r in read_amie_tsv(tsv)}
        duck_rules = {r.key(): r.metrics for r in read_amie_tsv(OUT / "rules-duckdb.tsv")}
        record["same_rules_and_metrics"] = spark_rules == duck_rules
        record["ratio_kgbrink_over_duckdb"] = round(record["kgbrink"]["seconds"] / record["duckdb"]["seconds"], 2)
    record["command"] = " ".join(["benchmarks/bench_mine.py", *sys.argv[1:]])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
