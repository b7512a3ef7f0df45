"""Benchmark: `kgbrink.probe.ranking.filtered_ranks` against the same computation in DuckDB, side by side.

Generates (seeded, numpy + pyarrow, chunked: memory stays bounded, one Parquet file per chunk)
  * ``scores/``: ``--rows`` candidate-score rows ``model, run, h, r, t, side, candidate, score``. Test
    triples are drawn at random over ``--entities`` entities and 822 relations; every test triple is asked
    as a head and a tail query by two models (``transe``, ``rotate``; run ``seed0``), and every query scores
    ``--candidates`` distinct entities including the true answer. Scores are N(0, 1) rounded to 2 decimals
    (so ties are common), the true answer's shifted by +2. Planted anomalies (``--anomaly-rate`` of the
    queries each): true answer not scored, a duplicated candidate, a NaN score of the true answer; and one
    candidate row in a million gets a NaN / +inf / -inf score.
  * ``known/``: the known triples: every test triple (once per query, so with duplicates), 0-10 known
    answers per query among its candidates (filtered away), and ``--background`` random triples.
then, in one run, each engine in its own process (one after the other, so each has the machine's memory:
a stopped SparkSession keeps its driver JVM's heap, and at 1e9 rows JVM and DuckDB together exceed 24 GiB), times
  1. kgbrink: a SparkSession from the project's factory (``--conf``, ``--set key=value`` overrides; start-up
     timed separately), ``query_outcomes`` over the Parquet files, written once as Parquet and split into
     ``ranks`` and ``quarantine`` Parquet outputs;
  2. DuckDB (same thread count, ``--duckdb-memory-limit``) doing the same computation in SQL over the same files, writing the same
     two outputs;
verifies that both give identical ranks (exact doubles) and quarantine rows, and writes
benchmarks/results/rank.json (printed as a Markdown row for BENCHMARKS.md).

    .venv/bin/python benchmarks/bench_rank.py                       # 10M rows
    .venv/bin/python benchmarks/bench_rank.py --rows 100000000
    .venv/bin/python benchmarks/bench_rank.py --rows 1000000000 --candidates 10000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import harness
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import jvm_peak_rss_mb, machine, process_peak_rss_mb

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
MODELS = ("transe", "rotate")
RUN = "seed0"
RELATIONS = 822
KEYS = ("model", "run", "h", "r", "t", "side")


# ---------------------------------------------------------------------------------------------- data


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def _coprime_strides(rng: np.random.Generator, n: int, entities: int) -> np.ndarray:
    """``n`` strides in [1, entities) coprime with ``entities``: ``(a + j * stride) % E`` are distinct for j < E."""
    strides = rng.integers(1, max(entities, 2), size=n, dtype=np.int64)
    bad = np.gcd(strides, entities) != 1
    while bad.any():
        strides[bad] = rng.integers(1, max(entities, 2), size=int(bad.sum()), dtype=np.int64)
        bad = np.gcd(strides, entities) != 1
    return strides


def _dictionary(indices: np.ndarray, values: tuple[str, ...]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(list(values)))


def generate(
    out: Path,
    rows: int,
    candidates: int,
    entities: int,
    background: int,
    anomaly_rate: float,
    seed: int,
    rows_per_file: int,
) -> dict:
    """Write ``out/scores/part-*.parquet`` and ``out/known/part-*.parquet``; return a manifest."""
    if candidates < 3 or candidates > entities:
        raise SystemExit("--candidates must be in [3, --entities]")
    shutil.rmtree(out, ignore_errors=True)
    (out / "scores").mkdir(parents=True)
    (out / "known").mkdir(parents=True)
    nm = len(MODELS)
    n_queries = max(1, round(rows / candidates))
    n_triples = math.ceil(n_queries / (2 * nm))
    trng = _rng(seed, 0)
    th = trng.integers(0, entities, n_triples, dtype=np.int64)
    tr = trng.integers(0, RELATIONS, n_triples, dtype=np.int64)
    tt = trng.integers(0, entities, n_triples, dtype=np.int64)
    per_file = max(1, rows_per_file // candidates)
    j = np.arange(candidates, dtype=np.int64)
    files = 0
    for chunk, q0 in enumerate(range(0, n_queries, per_file)):
        rng = _rng(seed, 1, chunk)
        qs = np.arange(q0, min(q0 + per_file, n_queries), dtype=np.int64)
        n = len(qs)
        tri, side, model = qs // (2 * nm), (qs // nm) % 2, qs % nm
        h, r, t = th[tri], tr[tri], tt[tri]
        answer = np.where(side == 0, h, t)
        stride = _coprime_strides(rng, n, entities)
        cand = (answer[:, None] + j[None, :] * stride[:, None]) % entities  # column 0 is the true answer
        score = np.round(rng.standard_normal((n, candidates)), 2)
        score[:, 0] += 2.0
        u = rng.random(n)
        missing, dup, nan_target = (
            u < anomaly_rate,
            (u >= anomaly_rate) & (u < 2 * anomaly_rate),
            (u >= 2 * anomaly_rate) & (u < 3 * anomaly_rate),
        )
        if candidates < entities:
            cand[missing, 0] = (answer[missing] + candidates * stride[missing]) % entities
        else:
            cand[missing, 0] = cand[missing, 1]
        cand[dup, -1] = cand[dup, -2]
        score[nan_target, 0] = np.nan
        flat = score.reshape(-1)
        odd = rng.choice(flat.size, size=min(flat.size, int(rng.binomial(flat.size, 1e-6))), replace=False)
        flat[odd] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=len(odd))
        table = pa.table(
            {
                "model": _dictionary(np.repeat(model, candidates), MODELS),
                "run": _dictionary(np.zeros(n * candidates, dtype=np.int32), (RUN,)),
                "h": np.repeat(h, candidates).astype(np.int32),
                "r": np.repeat(r, candidates).astype(np.int32),
                "t": np.repeat(t, candidates).astype(np.int32),
                "side": _dictionary(np.repeat(side, candidates), ("head", "tail")),
                "candidate": cand.reshape(-1).astype(np.int32),
                "score": flat,
            }
        )
        pq.write_table(table, out / "scores" / f"part-{chunk:05d}.parquet", row_group_size=1 << 20)
        # known answers among the candidates (0-10 per query; a position may repeat: duplicate triples)
        per_query = rng.integers(0, 11, n)
        qi = np.repeat(np.arange(n), per_query)
        c = cand[qi, rng.integers(1, candidates, len(qi))]
        kh = np.concatenate([np.where(side[qi] == 0, c, h[qi]), h])
        kt = np.concatenate([np.where(side[qi] == 0, t[qi], c), t])
        kr = np.concatenate([r[qi], r])
        pq.write_table(
            pa.table({"h": kh.astype(np.int32), "r": kr.astype(np.int32), "t": kt.astype(np.int32)}),
            out / "known" / f"part-{chunk:05d}.parquet",
        )
        files += 1
    brng = _rng(seed, 2)
    pq.write_table(
        pa.table(
            {
                "h": brng.integers(0, entities, background, dtype=np.int32),
                "r": brng.integers(0, RELATIONS, background, dtype=np.int32),
                "t": brng.integers(0, entities, background, dtype=np.int32),
            }
        ),
        out / "known" / "background.parquet",
    )
    manifest = {
        "rows": n_queries * candidates,
        "queries": n_queries,
        "candidates_per_query": candidates,
        "entities": entities,
        "score_files": files,
        "scores_bytes": sum(f.stat().st_size for f in (out / "scores").glob("*.parquet")),
        "known_rows": pq.ParquetDataset(out / "known").read(columns=["h"]).num_rows,
        "seed": seed,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# --------------------------------------------------------------------------------------------- DuckDB


def duckdb_ranks(con, data: Path, out: Path, check_duplicates: bool) -> float:
    """The same computation in DuckDB SQL (same reasons, same order, same non-finite rules); seconds."""
    scores, known = f"read_parquet('{data}/scores/*.parquet')", f"read_parquet('{data}/known/*.parquet')"
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE chk AS
        SELECT *,
          CASE WHEN side IS NULL OR side NOT IN ('head', 'tail') THEN 'bad_side'
               WHEN model IS NULL OR run IS NULL OR h IS NULL OR r IS NULL OR t IS NULL THEN 'null_key'
               WHEN n_null > 0 THEN 'null_candidate'
               WHEN n_target = 0 THEN 'target_not_scored'
               WHEN n_target > 1 THEN 'duplicate_candidate'
               WHEN s_star IS NULL OR NOT isfinite(s_star) THEN 'non_finite_score' END AS reason,
          row_number() OVER (ORDER BY model, run, h, r, t, side) AS qid
        FROM (SELECT model, run, h, r, t, side, count(*) FILTER (WHERE candidate IS NULL) AS n_null,
                     count(*) FILTER (WHERE candidate = answer) AS n_target, max(score) FILTER (WHERE candidate = answer) AS s_star,
                     any_value(answer) AS answer
              FROM (SELECT *, CASE side WHEN 'head' THEN h WHEN 'tail' THEN t END AS answer FROM {scores})
              GROUP BY ALL)""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE rem AS
        SELECT DISTINCT qid, candidate FROM (
          SELECT qid, k.h AS candidate, answer FROM chk JOIN {known} k ON chk.side = 'head' AND k.r = chk.r AND k.t = chk.t WHERE reason IS NULL
          UNION ALL
          SELECT qid, k.t, answer FROM chk JOIN {known} k ON chk.side = 'tail' AND k.h = chk.h AND k.r = chk.r WHERE reason IS NULL)
        WHERE candidate <> answer""")
    duplicates = "count(*) - count(DISTINCT candidate)" if check_duplicates else "0"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE cnt AS
        SELECT qid, {duplicates} AS dup_rows,
               count(*) FILTER (WHERE NOT known) AS num_candidates,
               count(*) FILTER (WHERE NOT known AND score > s_star AND NOT isnan(score)) AS greater,
               count(*) FILTER (WHERE NOT known AND score = s_star AND candidate <> answer) AS tied
        FROM (SELECT c.qid, s.candidate, s.score, c.s_star, c.answer, rem.qid IS NOT NULL AS known
              FROM {scores} s JOIN chk c USING (model, run, h, r, t, side)
              LEFT JOIN rem ON rem.qid = c.qid AND rem.candidate = s.candidate
              WHERE c.reason IS NULL)
        GROUP BY qid""")
    con.execute(f"""
        COPY (SELECT model, run, h, r, t, side, CAST(1 + greater + tied / 2.0 AS DOUBLE) AS rank, num_candidates
              FROM chk JOIN cnt USING (qid) WHERE reason IS NULL AND dup_rows = 0)
        TO '{out}/ranks.parquet' (FORMAT parquet)""")
    con.execute(f"""
        COPY (SELECT model, run, h, r, t, side, coalesce(reason, 'duplicate_candidate') AS reason
              FROM chk LEFT JOIN cnt USING (qid) WHERE reason IS NOT NULL OR dup_rows > 0)
        TO '{out}/quarantine.parquet' (FORMAT parquet)""")
    seconds = time.perf_counter() - start
    con.execute("DROP TABLE chk; DROP TABLE rem; DROP TABLE cnt")
    return seconds


# ---------------------------------------------------------------------------------------------- Spark


def spark_ranks(spark, data: Path, out: Path, check_duplicates: bool, broadcast_queries: bool) -> float:
    """kgbrink: outcomes once (persisted: one row per query), then ranks and quarantine as Parquet; seconds."""
    from pyspark import StorageLevel

    from kgbrink.probe.ranking import query_outcomes, split_outcomes

    start = time.perf_counter()
    scores, known = spark.read.parquet(str(data / "scores")), spark.read.parquet(str(data / "known"))
    outcomes = query_outcomes(
        scores, known, broadcast_queries=broadcast_queries, check_duplicates=check_duplicates
    ).persist(StorageLevel.MEMORY_AND_DISK)
    ranks, quarantine = split_outcomes(outcomes)
    ranks.write.mode("overwrite").parquet(str(out / "ranks"))
    quarantine.write.mode("overwrite").parquet(str(out / "quarantine"))
    seconds = time.perf_counter() - start
    outcomes.unpersist()
    return seconds


def compare(con, spark_out: Path, duck_out: Path) -> dict:
    """Row-by-row comparison of the two engines' outputs (ranks as exact doubles)."""
    keys = ", ".join(KEYS)
    rank_diff = con.execute(f"""
        SELECT count(*) FROM read_parquet('{spark_out}/ranks/*.parquet') a FULL JOIN read_parquet('{duck_out}/ranks.parquet') b USING ({keys})
        WHERE a.rank IS DISTINCT FROM b.rank OR a.num_candidates IS DISTINCT FROM b.num_candidates""").fetchone()[0]
    quarantine_diff = con.execute(f"""
        SELECT count(*) FROM read_parquet('{spark_out}/quarantine/*.parquet') a FULL JOIN read_parquet('{duck_out}/quarantine.parquet') b USING ({keys})
        WHERE a.reason IS DISTINCT FROM b.reason""").fetchone()[0]
    ranked = con.execute(
        f"SELECT count(*), avg(rank), sum(num_candidates) FROM read_parquet('{duck_out}/ranks.parquet')"
    ).fetchone()
    reasons = dict(
        con.execute(
            f"SELECT reason, count(*) FROM read_parquet('{duck_out}/quarantine.parquet') GROUP BY reason ORDER BY reason"
        ).fetchall()
    )
    return {
        "ranked_queries": ranked[0],
        "mean_rank": ranked[1],
        "sum_num_candidates": ranked[2],
        "quarantined_by_reason": reasons,
        "rank_rows_differing": rank_diff,
        "quarantine_rows_differing": quarantine_diff,
    }


# --------------------------------------------------------------------------------------------- workers


def worker_spark(task: dict) -> dict:
    """kgbrink's side, in its own process: session start-up, then each variant timed."""
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session

    t0 = time.perf_counter()
    spark = spark_session(load_config(task["conf"], task["overrides"]))
    out = {
        "spark_startup_seconds": round(time.perf_counter() - t0, 2),
        "cores": spark.sparkContext.defaultParallelism,
        "seconds": {},
    }
    for variant in task["variants"]:
        out["seconds"][variant] = spark_ranks(
            spark,
            Path(task["data"]),
            Path(task["work"]) / f"spark-{variant}",
            variant == "check_duplicates",
            task["broadcast_queries"],
        )
        print(f"spark {variant}: {out['seconds'][variant]:.1f} s", flush=True)
    out["driver_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    harness.stop_spark(spark)
    return out


def worker_duckdb(task: dict) -> dict:
    """DuckDB's side, in its own process (after the Spark worker has exited): each variant timed and compared."""
    import duckdb

    con = duckdb.connect()
    con.execute(
        f"SET threads = {task['cores']}; SET memory_limit = '{task['memory_limit']}'; SET preserve_insertion_order = false"
    )
    out = {"seconds": {}, "checks": {}}
    work = Path(task["work"])
    for variant in task["variants"]:
        out["seconds"][variant] = duckdb_ranks(
            con, Path(task["data"]), work / f"duckdb-{variant}", variant == "check_duplicates"
        )
        print(f"duckdb {variant}: {out['seconds'][variant]:.1f} s", flush=True)
        out["checks"][variant] = compare(con, work / f"spark-{variant}", work / f"duckdb-{variant}")
    con.close()
    out["peak_rss_mb"] = process_peak_rss_mb()
    return out


WORKERS = {"spark": worker_spark, "duckdb": worker_duckdb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="candidate-score rows (rounded to whole queries)")
    parser.add_argument("--candidates", type=int, default=10_000, help="candidates per query")
    parser.add_argument("--entities", type=int, default=4_594_485, help="entity ids (default: Wikidata5m's count)")
    parser.add_argument(
        "--background", type=int, default=1_000_000, help="random known triples besides the planted ones"
    )
    parser.add_argument("--anomaly-rate", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rows-per-file", type=int, default=4_000_000)
    parser.add_argument("--conf", default="conf/local.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    parser.add_argument("--out", default=str(HERE / "out"))
    parser.add_argument(
        "--shuffle-plan", action="store_true", help="broadcast_queries=False (the plan for very many queries)"
    )
    parser.add_argument("--skip-unchecked", action="store_true", help="only the default (duplicate-checked) variant")
    parser.add_argument("--duckdb-memory-limit", default="16GB")
    parser.add_argument("--results", default=str(HERE / "results" / "rank.json"), help="where the JSON results go")
    parser.add_argument("--keep-data", action="store_true", help="keep the generated data and outputs under --out")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        harness.serve_worker(WORKERS, args.worker, args.task, args.result)
        return

    work = Path(args.out) / f"rank-{args.rows}"
    data = work / "data"
    results = {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "overrides": args.set,
        "broadcast_queries": not args.shuffle_plan,
        "load_average_at_start": os.getloadavg()[0],
    }
    t0 = time.perf_counter()
    results["data"] = generate(
        data,
        args.rows,
        args.candidates,
        args.entities,
        args.background,
        args.anomaly_rate,
        args.seed,
        args.rows_per_file,
    )
    results["generate_seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(results["data"]), f"generated in {results['generate_seconds']} s", flush=True)

    variants = ("check_duplicates",) if args.skip_unchecked else ("check_duplicates", "no_duplicate_check")
    task = {"data": str(data), "work": str(work), "variants": variants}
    spark = harness.run_worker(
        Path(__file__),
        "spark",
        {**task, "conf": args.conf, "overrides": args.set, "broadcast_queries": not args.shuffle_plan},
        work / "tasks",
    )
    duck = harness.run_worker(
        Path(__file__),
        "duckdb",
        {**task, "cores": spark["cores"], "memory_limit": args.duckdb_memory_limit},
        work / "tasks",
    )
    cores, rows = spark["cores"], results["data"]["rows"]
    results.update(
        {
            "cores": cores,
            "spark_startup_seconds": spark["spark_startup_seconds"],
            "spark_driver_peak_rss_mb": spark["driver_peak_rss_mb"],
            "duckdb_process_peak_rss_mb": duck["peak_rss_mb"],
            "runs": [],
        }
    )
    for variant in variants:
        spark_s, duck_s, check = spark["seconds"][variant], duck["seconds"][variant], duck["checks"][variant]
        run = {
            "variant": variant,
            "rows": rows,
            "spark_seconds": round(spark_s, 2),
            "duckdb_seconds": round(duck_s, 2),
            "ratio": round(spark_s / duck_s, 2),
            "rows_per_s_per_core": {"spark": round(rows / spark_s / cores), "duckdb": round(rows / duck_s / cores)},
            **check,
            "identical": check["rank_rows_differing"] == 0 and check["quarantine_rows_differing"] == 0,
        }
        results["runs"].append(run)
        print(json.dumps(run), flush=True)
    results["load_average_at_end"] = os.getloadavg()[0]  # this VM is shared: > cores means another load competed
    if not args.keep_data:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(results, indent=2) + "\n")
    print(
        "\n"
        + json.dumps(
            {
                k: results[k]
                for k in ("machine", "spark_startup_seconds", "spark_driver_peak_rss_mb", "duckdb_process_peak_rss_mb")
            }
        )
    )
    print(
        "| rows | variant | Spark s | DuckDB s | ratio | Spark rows/s/core | DuckDB rows/s/core |\n|---|---|---|---|---|---|---|"
    )
    for r in results["runs"]:
        cells = [
            f"{r['rows']:,}",
            r["variant"],
            r["spark_seconds"],
            r["duckdb_seconds"],
            f"{r['ratio']}x",
            *(f"{v:,}" for v in r["rows_per_s_per_core"].values()),
        ]
        print("| " + " | ".join(map(str, cells)) + " |")
    disagreeing = [r["variant"] for r in results["runs"] if not r["identical"]]
    if disagreeing:
        raise SystemExit(f"Spark and DuckDB disagree on {disagreeing}; see {args.results}")


if __name__ == "__main__":
    main()
