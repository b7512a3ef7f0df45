"""Benchmark: `kgbrink ingest` and `kgbrink stats` against the same work in DuckDB, side by side.

For each size: generate the KG once (kgbrink synth, seed 7, cached under benchmarks/out/), then in one run
  1. start the SparkSession from conf/local.yaml (timed separately: Spark's start-up),
  2. kgbrink ingest (Wikidata5m format, alias files included) and kgbrink stats (train),
  3. the DuckDB peer (benchmarks/duckdb_peer.py) on the same files with the same thread count,
and record wall times, the ratio Spark / DuckDB, and the peak resident memory of the Spark driver JVM and
of this process (DuckDB runs in it). Results go to benchmarks/results/ingest_stats.json and are printed as
a Markdown table for BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_ingest_stats.py --sizes 2000000 20000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import duckdb_peer
from harness import generated_kg, jvm_peak_rss_mb, new_results, process_peak_rss_mb

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.session import spark_session
from kgbrink.jobs import ingest, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000_000, 20_000_000])
    parser.add_argument("--conf", default="conf/local.yaml")
    parser.add_argument("--out", default=str(HERE / "out"))
    args = parser.parse_args()
    config = load_config(args.conf)
    out = Path(args.out)
    results = new_results()

    start = time.perf_counter()
    spark = spark_session(config)
    results["spark_startup_seconds"] = round(time.perf_counter() - start, 2)
    threads = spark.sparkContext.defaultParallelism
    for size in args.sizes:
        kg = generated_kg(config, out, size)
        dataset = out / f"ds-{size}"
        shutil.rmtree(dataset, ignore_errors=True)
        t0 = time.perf_counter()
        ingest_summary = ingest.run(
            JobContext(spark, config), ingest.IngestOptions(dataset=str(dataset), format="wikidata5m", input=str(kg))
        )
        spark_ingest = time.perf_counter() - t0
        t0 = time.perf_counter()
        stats_summary = stats.run(JobContext(spark, config), stats.StatsOptions(dataset=str(dataset), splits=["train"]))
        spark_stats = time.perf_counter() - t0

        peer_dir = out / f"duckdb-{size}"
        shutil.rmtree(peer_dir, ignore_errors=True)
        con = duckdb_peer.connect(threads)
        duck_ingest = duckdb_peer.ingest(con, str(kg), str(peer_dir))
        duck_stats = duckdb_peer.stats(con, str(peer_dir), str(peer_dir / "stats"))
        con.close()
        assert duck_ingest["kept"] == ingest_summary.counts["kept"], (duck_ingest, ingest_summary.counts)
        assert duck_stats["entity_relation_pairs"] == stats_summary.outputs["entity_relation_popularity"].rows
        run = {
            "triples": size,
            "input_bytes": sum(f.stat().st_size for f in kg.glob("wikidata5m_*")),
            "spark": {
                "ingest_seconds": round(spark_ingest, 2),
                "stats_seconds": round(spark_stats, 2),
                "ingest_steps": ingest_summary.timings,
                "stats_steps": stats_summary.timings,
            },
            "duckdb": {
                "ingest_seconds": round(duck_ingest["seconds"], 2),
                "stats_seconds": round(duck_stats["seconds"], 2),
                "threads": threads,
            },
            "ratio": {
                "ingest": round(spark_ingest / duck_ingest["seconds"], 2),
                "stats": round(spark_stats / duck_stats["seconds"], 2),
            },
            "entities": ingest_summary.counts["entities"],
            "entity_relation_pairs": duck_stats["entity_relation_pairs"],
        }
        results["runs"].append(run)
        print(json.dumps(run), flush=True)
    results["spark_driver_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    results["python_process_peak_rss_mb"] = process_peak_rss_mb()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "ingest_stats.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"\nmachine: {results['machine']}; Spark start-up {results['spark_startup_seconds']} s; "
        f"driver JVM peak RSS {results['spark_driver_peak_rss_mb']} MB; python+DuckDB peak RSS {results['python_process_peak_rss_mb']} MB"
    )
    print("| triples | Spark ingest s | DuckDB ingest s | ratio | Spark stats s | DuckDB stats s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in results["runs"]:
        print(
            f"| {r['triples']:,} | {r['spark']['ingest_seconds']} | {r['duckdb']['ingest_seconds']} | {r['ratio']['ingest']}x "
            f"| {r['spark']['stats_seconds']} | {r['duckdb']['stats_seconds']} | {r['ratio']['stats']}x |"
        )


if __name__ == "__main__":
    main()
