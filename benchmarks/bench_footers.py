"""Benchmark: the score job's Parquet footer check (`kgbrink.probe.rankfiles.parquet_facts`) beside pyarrow.

Writes ``--files`` small rank files (1,000 rows each, seeded content) under benchmarks/out/footers/, then in
one warm SparkSession times, ``--repeat`` times each: kgbrink on the ``file:`` URIs the job lists (read by
Python), kgbrink on the same files as plain paths through the session's Hadoop file system (the route of
every non-local URI) with one reader thread and with ``FOOTER_READERS`` threads, and the peer:
``pyarrow.parquet.read_metadata`` on each local file in one Python thread. Prints the best time of each.

    .venv/bin/python benchmarks/bench_footers.py --files 2000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import machine

OUT = Path(__file__).resolve().parent / "out" / "footers"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session
    from kgbrink.probe import rankfiles

    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    paths = [OUT / f"part-{i:05d}.parquet" for i in range(args.files)]
    for path in paths:
        if not path.is_file():
            pq.write_table(
                pa.table(
                    {
                        "model": ["m"] * 1000,
                        "run": ["1"] * 1000,
                        "h": rng.integers(0, 10**6, 1000, dtype=np.int32),
                        "rank": rng.random(1000) * 100 + 1,
                    }
                ),
                path,
            )
    plain = [(str(p), p.stat().st_size, 0) for p in paths]
    uris = [("file:" + f, size, mtime) for f, size, mtime in plain]
    spark = spark_session(load_config("conf/local.yaml", ["spark.master=local[2]"]))
    threads = rankfiles.FOOTER_READERS
    local = best(lambda: rankfiles.parquet_facts(spark, uris), args.repeat)
    rankfiles.FOOTER_READERS = 1
    serial = best(lambda: rankfiles.parquet_facts(spark, plain), args.repeat)
    rankfiles.FOOTER_READERS = threads
    pooled = best(lambda: rankfiles.parquet_facts(spark, plain), args.repeat)
    arrow = best(lambda: [pq.read_metadata(p) for p in paths], args.repeat)
    spark.stop()
    print(
        json.dumps(
            {
                "machine": machine(),
                "files": args.files,
                "kgbrink_file_uris_s": local,
                "kgbrink_hadoop_1_thread_s": serial,
                f"kgbrink_hadoop_{threads}_threads_s": pooled,
                "pyarrow_read_metadata_s": arrow,
                "ratio_kgbrink_file_uris_over_pyarrow": round(local / arrow, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
