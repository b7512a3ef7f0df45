"""Benchmark: `kgbrink ingest` of a generated dump from object storage (s3a, the local stack's S3 server)
against the same ingest from local files, in one Spark session (issue 26).

Needs the stack (`make cluster-up`; its credentials in the environment: `set -a; . data/cluster/aws.env`).
For each size, in one run:
  1. the dump (kgbrink synth, seed 7, cached under benchmarks/out/) staged to ``s3a://<bucket>/bench/kg-<n>``
     with boto3 (`kgbrink stage`: SHA-256 of every file, upload, manifest), timed;
  2. ingest from the local files into a local dataset;
  3. ingest from s3a into a dataset on s3a (everything on object storage, as a cluster would run it);
the same Spark settings for both (conf/cluster-local.yaml with ``spark.master=local[2]``: the s3a
connector and Delta's S3 log store), the same counts checked, the ratio s3a / local recorded. Results go to
benchmarks/results/s3a_ingest.json.

    .venv/bin/python benchmarks/bench_s3a_ingest.py --sizes 20000000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import generated_kg, jvm_peak_rss_mb, new_results

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.session import spark_session
from kgbrink.jobs import ingest
from kgbrink.storage import staging


def _stack():
    spec = importlib.util.spec_from_file_location("kgbrink_cluster_stack", ROOT / "infra/cluster/stack.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    layout = module.Layout()
    health = module.healthy(layout)
    if not health.get("s3"):
        sys.exit(f"the stack's S3 server is not up ({health}): `make cluster-up` first")
    return layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000_000])
    parser.add_argument("--conf", default="conf/cluster-local.yaml")
    parser.add_argument("--set", action="append", default=[], help="extra settings (key=value)")
    parser.add_argument("--out", default=str(HERE / "out"))
    args = parser.parse_args()
    layout = _stack()
    overrides = ["spark.master=local[2]", "spark.conf.spark.driver.memory=8g", *args.set]
    config = load_config(ROOT / args.conf, overrides)
    out = Path(args.out)
    client = staging.s3_client(layout.s3_endpoint, "us-east-1", path_style=True)
    results = new_results()
    start = time.perf_counter()
    spark = spark_session(config)
    results["spark_startup_seconds"] = round(time.perf_counter() - start, 2)
    for size in args.sizes:
        kg = generated_kg(config, out, size)
        dump = f"s3a://{layout.bucket}/bench/kg-{size}"
        t0 = time.perf_counter()
        staged = staging.stage(client, kg, dump)
        stage_seconds = time.perf_counter() - t0

        local_dataset = out / f"ds-s3a-bench-{size}"
        shutil.rmtree(local_dataset, ignore_errors=True)
        runs = {}
        for mode, source, dataset in (
            ("local", str(kg), str(local_dataset)),
            ("s3a", dump + "/", f"s3a://{layout.bucket}/bench/ds-{size}-{int(time.time())}"),
        ):
            t0 = time.perf_counter()
            summary = ingest.run(
                JobContext(spark, config), ingest.IngestOptions(dataset=dataset, format="wikidata5m", input=source)
            )
            runs[mode] = {
                "seconds": round(time.perf_counter() - t0, 2),
                "steps": summary.timings,
                "counts": summary.counts,
            }
            print(mode, runs[mode]["seconds"], flush=True)
        assert runs["local"]["counts"]["kept"] == runs["s3a"]["counts"]["kept"]
        assert runs["local"]["counts"]["entities"] == runs["s3a"]["counts"]["entities"]
        run = {
            "triples": size,
            "input_bytes": staged.manifest.total_bytes,
            "stage_seconds": round(stage_seconds, 2),
            "uploaded_bytes": staged.uploaded_bytes,
            "local": {k: v for k, v in runs["local"].items() if k != "counts"},
            "s3a": {k: v for k, v in runs["s3a"].items() if k != "counts"},
            "kept": runs["local"]["counts"]["kept"],
            "ratio_s3a_over_local": round(runs["s3a"]["seconds"] / runs["local"]["seconds"], 2),
        }
        results["runs"].append(run)
        print(json.dumps(run), flush=True)
    results["spark_driver_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    spark.stop()
    target = HERE / "results" / "s3a_ingest.json"
    target.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
