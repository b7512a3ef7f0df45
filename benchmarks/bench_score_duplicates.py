"""Benchmark: what the duplicate-query check (``scoring.check_duplicate_queries``, issue 44) costs `kgbrink
score`, with DuckDB finding the same repeats beside it.

Data (under benchmarks/out/score-duplicates/, git-ignored): ``--rows`` rank rows as Parquet files of 5M
rows, the triples drawn from the dataset's ``triples`` table with a seeded numpy generator, every query
once (as many runs of one model as needed) except ``--repeats`` rows that repeat an earlier query. The dataset is ``make run``'s sample
(``./data/datasets/sample``) unless ``--dataset`` names another (its tables read as files: a dataset
written once).

Each timing is ``kgbrink score`` as its own process (conf/local.yaml, no tracking, the score folder
deleted first), alternating check on / off ``--rounds`` times; DuckDB (threads 2) counts the repeats
of the same files with ``GROUP BY model, run, h, r, t, side HAVING count(*) > 1``. Results go to
``benchmarks/results/score-duplicates.json``.

    .venv/bin/python benchmarks/bench_score_duplicates.py [--rows 10000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import load, measure, new_results  # noqa: E402

ROWS_PER_FILE = 5_000_000


def rank_files(dataset: Path, out: Path, rows: int, repeats: int, seed: int) -> tuple[Path, int]:
    """``rows`` rank rows as Parquet under ``out`` (made once); the number of distinct entities."""
    folder = out / f"ranks-{rows}-{repeats}"
    entities = sum(pq.read_metadata(p).num_rows for p in (dataset / "entities").glob("*.parquet"))
    if (folder / "_done").exists():
        return folder, entities
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    files = sorted((dataset / "triples").rglob("*.parquet"))
    triples = pa.concat_tables(pq.ParquetFile(p).read(columns=["h", "r", "t"]) for p in files)
    h, r, t = (triples[c].to_numpy().astype(np.int64) for c in ("h", "r", "t"))
    _, first = np.unique((h << 42) | (r << 21) | t, return_index=True)  # distinct triples (ids < 2^21)
    h, r, t = h[first], r[first], t[first]
    rng = np.random.default_rng(seed)
    # distinct queries: (run, triple, side) in a seeded order, as many runs as needed; then `repeats`
    # copies of earlier rows in place of the last ones
    per_run = 2 * len(h)
    picks = np.concatenate([rng.permutation(per_run) + k * per_run for k in range(-(-rows // per_run))])[:rows]
    picks[rows - repeats :] = rng.choice(picks[: rows - repeats], size=repeats, replace=False)
    for start in range(0, rows, ROWS_PER_FILE):
        chunk = picks[start : start + ROWS_PER_FILE]
        run, query = chunk // per_run, chunk % per_run
        index, side = query // 2, query % 2
        n = np.full(len(chunk), entities, dtype=np.int64)
        rank = np.minimum(np.floor(rng.pareto(1.0, len(chunk)) * 2 + 2) / 2, n).astype(np.float64)
        table = pa.table(
            {
                "model": pa.array(["bench"] * len(chunk)),
                "run": pa.array((run + 1).astype(str)),
                "h": h[index].astype(np.int32),
                "r": r[index].astype(np.int32),
                "t": t[index].astype(np.int32),
                "side": pa.array(np.where(side == 0, "head", "tail")),
                "rank": rank,
                "num_candidates": n,
            }
        )
        pq.write_table(table, folder / f"part-{start // ROWS_PER_FILE:03d}.parquet")
    (folder / "_done").write_text("")
    return folder, entities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dataset", default="data/datasets/sample")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    dataset = (PROJECT / args.dataset).resolve()
    out = HERE / "out" / "score-duplicates"
    folder, _ = rank_files(dataset, out, args.rows, args.repeats, args.seed)
    results = new_results()
    kgbrink = [str(PROJECT / ".venv" / "bin" / "kgbrink")]
    for round_number in range(args.rounds):
        for check in (True, False):
            shutil.rmtree(dataset / "scores", ignore_errors=True)
            summary = out / "summary.json"
            command = [
                *kgbrink,
                "score",
                "--conf",
                "conf/local.yaml",
                "--no-tracking",
                "--dataset",
                str(dataset),
                "--ranks",
                str(folder),
                "--ids",
                "id",
                "--set",
                f"scoring.check_duplicate_queries={str(check).lower()}",
                "--set",
                "scoring.max_bad_fraction=0.01",
                "--json",
                str(summary),
            ]
            measured = measure(command, out / f"score-{check}.log")
            counts = json.loads(summary.read_text())["counts"]
            results["runs"].append(
                {
                    "engine": "kgbrink",
                    "check_duplicate_queries": check,
                    "round": round_number,
                    "rows": args.rows,
                    "wall_seconds": round(measured["seconds"], 1),
                    "quarantined_by_reason": counts.get("quarantined_by_reason"),
                    "load": load(),
                }
            )
            print(results["runs"][-1], flush=True)
        started = time.perf_counter()
        connection = duckdb.connect()
        connection.execute("SET threads = 2")
        found = connection.execute(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM read_parquet(?) "
            "GROUP BY model, run, h, r, t, side HAVING count(*) > 1)",
            [str(folder / "*.parquet")],
        ).fetchone()[0]
        results["runs"].append(
            {
                "engine": "duckdb",
                "round": round_number,
                "rows": args.rows,
                "seconds": round(time.perf_counter() - started, 2),
                "repeats_found": int(found),
                "load": load(),
            }
        )
        print(results["runs"][-1], flush=True)
    target = HERE / "results" / "score-duplicates.json"
    target.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
