"""Mine the real reference KGs with BRINK's thresholds; write the rules as regression fixtures and record
times and rule counts.

KGs: BRINK Family (``../shared/reference/brink-family/facts.tsv``) and the PROBE datasets umls, kinship,
family, wn18rr (train + valid + test). Each is ingested into ``benchmarks/out/mine/<name>`` and mined with
``-minhc 0.1 -minc 0.3 -minpca 0.4`` at each ``--max-atoms``; the rules of every run go to
``tests/fixtures/rules/<name>[-maxad4].tsv`` (AMIE3 format, gzipped above 1 MB; the test suite compares Family's against a
fresh mining run) and the figures to ``benchmarks/results/mine_reference.json``.

    .venv/bin/python benchmarks/mine_reference.py --max-atoms 3 4
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT / "lib"))
sys.path.insert(0, str(HERE))

from harness import load, tree_peak_mb

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.session import spark_session
from kgbrink.jobs import ingest, mine

FIXTURES = PROJECT / "tests" / "fixtures" / "rules"
RESULTS = HERE / "results" / "mine_reference.json"
OUT = HERE / "out" / "mine"
BRINK = {"min_head_coverage": 0.1, "min_std_confidence": 0.3, "min_pca_confidence": 0.4}


def ingest_options(name: str, reference: Path, dataset: str) -> ingest.IngestOptions:
    if name == "brink-family":
        return ingest.IngestOptions(
            dataset=dataset,
            format="delimited",
            splits={"train": [str(reference / "brink-family" / "facts.tsv")]},
            quote='"',
        )
    return ingest.IngestOptions(
        dataset=dataset, format="probe", input=str(reference / "probe" / name.removeprefix("probe-"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=str(PROJECT.parent / "shared" / "reference"))
    parser.add_argument("--datasets", default="brink-family,probe-umls,probe-kinship,probe-family,probe-wn18rr")
    parser.add_argument("--max-atoms", type=int, nargs="+", default=[3])
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    args = parser.parse_args()
    config = load_config(PROJECT / "conf" / "local.yaml", ["spark.master=local[2]", f"data_dir={OUT}/data", *args.set])
    spark = spark_session(config)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in args.datasets.split(","):
        dataset = str(OUT / name)
        ingest.run(JobContext(spark, config), ingest_options(name, Path(args.reference), dataset))
        splits = ["train"] if name == "brink-family" else ["train", "valid", "test"]
        for max_atoms in args.max_atoms:
            suffix = "" if max_atoms == 3 else f"-maxad{max_atoms}"
            tsv = FIXTURES / f"{name}{suffix}.tsv"
            started = time.perf_counter()
            options = mine.MineOptions(
                dataset=dataset,
                splits=splits,
                rules=f"{dataset}/rules{suffix}",
                tsv=str(tsv),
                **{**BRINK, "max_atoms": max_atoms},
            )
            summary = mine.run(JobContext(spark, config), options)
            seconds = round(time.perf_counter() - started, 1)
            if tsv.stat().st_size > 1 << 20:  # big rule sets are kept gzipped (read_amie_tsv reads .gz)
                Path(f"{tsv}.gz").write_bytes(gzip.compress(tsv.read_bytes(), mtime=0))
                tsv.unlink()
            results[f"{name}{suffix}"] = {
                "dataset": name,
                "max_atoms": max_atoms,
                "thresholds": BRINK,
                "splits": splits,
                "facts": summary.counts["facts"],
                "relations": summary.counts["relations"],
                "candidates": summary.counts["candidates"],
                "rules": summary.counts["rules"],
                "rules_by_type": summary.counts["rules_by_type"],
                "seconds": seconds,
                # the session's driver JVM, a child of this process: its high-water mark since the session began
                "peak_rss_jvm_so_far_mb": tree_peak_mb(os.getpid()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "load": load(),
                "command": "benchmarks/mine_reference.py --max-atoms " + " ".join(map(str, args.max_atoms)),
            }
            print(json.dumps(results[f"{name}{suffix}"]), flush=True)
            RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
