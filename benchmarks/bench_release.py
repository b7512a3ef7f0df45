"""Benchmark: `kgbrink release` of every benchmark on a generated KG (`kgbrink synth`, seed 7), with the time
of each benchmark's step and the driver's peak memory; beside it, the peer DuckDB publishing the `kg`
configurations (triples by split with keys, entities, relations: the same joins, Parquet by split) from
the dataset's Delta files, and Python's hashlib hashing the release's files.

    .venv/bin/python benchmarks/bench_release.py --triples 2000000
    .venv/bin/python benchmarks/bench_release.py --triples 20000000 --set release.benchmarks=kg,brink,probe

A subset of benchmarks (``release.benchmarks``) writes its own results file, ``release-<triples>-<subset>.json``.

The question graphs run with the caps of bench_question_graphs.py (``DEFAULT_OVERRIDES``): without them a
3-hop ball of a generated KG's hub reaches most of the graph, for every one of the 800 planted questions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import generated_kg, jvm_peak_rss_mb, load, machine, new_results, process_peak_rss_mb

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.session import spark_session
from kgbrink.core.settings import ReleaseSettings
from kgbrink.jobs import ingest, release

DEFAULT_OVERRIDES = ["question_graphs.max_expand_degree=1000", "question_graphs.max_neighbourhood_edges=50000"]


def delta_files(spark, path: Path) -> list[str]:
    """The Parquet files of the Delta table's latest version."""
    return sorted(spark.read.format("delta").load(str(path)).inputFiles())


def duckdb_kg(spark, dataset: Path, out: Path) -> dict:
    import duckdb

    files = {name: delta_files(spark, dataset / name) for name in ("triples", "entities", "relations")}
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    start = time.perf_counter()
    for name, paths in files.items():
        con.execute(f"create view {name} as select * from read_parquet({[p.replace('file:', '') for p in paths]})")
    for split in ("train", "valid", "test"):
        con.execute(
            f"""copy (select eh.key as h, rr.key as r, et.key as t from triples
                join entities eh on eh.id = triples.h join relations rr on rr.id = triples.r
                join entities et on et.id = triples.t where split = '{split}' order by h, r, t)
                to '{out}/{split}.parquet' (format parquet)"""
        )
    for name in ("entities", "relations"):
        con.execute(f"copy (select key, label from {name} order by key) to '{out}/{name}.parquet' (format parquet)")
    return {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": process_peak_rss_mb()}


def hash_files(folder: Path) -> dict:
    start = time.perf_counter()
    total = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            total += path.stat().st_size
            hashlib.sha256(path.read_bytes()).hexdigest()
    return {"seconds": round(time.perf_counter() - start, 1), "bytes": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--triples", type=int, default=2_000_000)
    parser.add_argument("--out", default=str(HERE / "out"))
    parser.add_argument("--set", action="append", default=[], help="setting overrides, e.g. mcq.n_triples=500")
    args = parser.parse_args()
    out = Path(args.out)
    settings = [*DEFAULT_OVERRIDES, *args.set]
    config = load_config(HERE.parent / "conf" / "local.yaml", settings)
    kg = generated_kg(config, out, args.triples)
    spark = spark_session(config)
    dataset = out / f"release-ds-{args.triples}"
    if not (dataset / "triples" / "_delta_log").is_dir():
        ingest.run(
            JobContext(spark, config), ingest.IngestOptions(dataset=str(dataset), format="wikidata5m", input=str(kg))
        )
    root = out / f"release-{args.triples}"
    results = new_results()
    load_before = load()
    start = time.perf_counter()
    summary = release.run(
        JobContext(spark, config), release.ReleaseOptions(dataset=str(dataset), out=str(root), force=True)
    )
    seconds = round(time.perf_counter() - start, 1)
    driver_peak = jvm_peak_rss_mb(spark)
    folder = root / summary.extra["version"]
    peer = duckdb_kg(spark, dataset, out / f"release-duckdb-{args.triples}")
    hashed = hash_files(folder)
    run = {
        "triples": args.triples,
        "seconds": seconds,
        "by_benchmark": {k: round(v, 1) for k, v in summary.timings.items()},
        "driver_peak_rss_mb": driver_peak,
        "rows": {k: v for k, v in summary.counts.items() if k.startswith("rows_")},
        "files": summary.counts.get("files"),
        "release_bytes": hashed["bytes"],
        "duckdb_kg_seconds": peer["seconds"],
        "duckdb_peak_rss_mb": peer["peak_rss_mb"],
        "hashlib_seconds": hashed["seconds"],
        "spark_jobs": summary.actions.get("jobs"),
        "load_before": load_before,
        "load_after": load(),
        "machine": machine(),
        "settings": settings,
    }
    results["runs"].append(run)
    part = (
        "" if config.release.benchmarks == ReleaseSettings().benchmarks else "-" + "-".join(config.release.benchmarks)
    )
    target = HERE / "results" / f"release-{args.triples}{part}.json"
    target.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
