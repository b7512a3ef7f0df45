"""Benchmark: `kgbrink score` (PROBE grid + MRR/Hits in one scan) against DuckDB and numpy, side by side.

Data (cached under benchmarks/out/score/, git-ignored):
  * ``kg/``, ``ds/``: a Wikidata5m-scale dataset (``kgbrink synth --triples 20000000`` with the config's seed,
    then ingest and stats on train), made once when missing;
  * ``stats-parquet/``: its ``entity_popularity`` / ``entity_relation_popularity`` Delta tables exported
    to plain Parquet for the peers;
  * ``ranks-<rows>/``: ``--rows`` rank rows as Parquet files (25M rows per file, at least 4 files),
    columns ``model`` ("bench"), ``run`` ("1"), ``h, r, t`` int (triples of the dataset's ``triples`` table,
    drawn with a seeded numpy generator), ``side`` (head/tail), ``rank`` double (heavy-tailed, multiples
    of 0.5, 1 <= rank <= num_candidates), ``num_candidates`` long (|E| minus 0-7). Generated chunk by
    chunk (bounded memory), seeded per file.

Then, in one run on the same files, each engine in its own process (so peak RSS is per engine):
  1. kgbrink (``kgbrink.jobs.score.run``; conf/local.yaml, ``spark.master=local[2]``, no tracking;
     ``<dataset>/scores`` deleted before every timed run so nothing is resumed): an untimed warm-up on 1M
     rows, then the full grid (alphas 1,0.5,0,-0.5,-1 x betas 0,0.2,0.4,0.6,0.8, Hits@1,3,10, no p-MRR,
     no popularity groups, release eps) in one batch, the one-cell spec (alpha 0.5, beta 0, Hits@10:
     no statistics join), one weighted cell (alpha 0.5, beta 0.4, Hits@10: the grid's statistics join for
     one cell), and the full grid again in ~4 batches;
  2. DuckDB (threads = Spark's cores) over the same Parquet files and the exported statistics: the same
     grid (statistics join, eps sub-query, 25 weighted sums, MR/MRR/Hits/AMRI/WMR sums) and the one cell
     (plain: no checks, one global sum), then the one cell with kgbrink's per-row work (the validity checks
     of ``validate_ranks`` and sums per (model, run));
  3. numpy on in-memory arrays, single core (BLAS pinned to 1 thread): rank, num_candidates, delta(e),
     delta(r|e) loaded first (the statistics lookup done by DuckDB, untimed), then the grid with each
     logarithm computed once per row (ln r, ln N, ln(eps_e + de) + ln(eps_r + dre)), and the one cell.
     Above ``--numpy-in-memory-rows`` the arrays are loaded file by file and only the computation is
     timed (two passes: eps, then the sums).
It checks that all agree (PROBE cells and MRR to 1e-9, to 1e-8 against DuckDB's in-order double sums, Hits exactly, the 4-batch run equal to the
1-batch run), records seconds, rows/s/core, the ratios, peak RSS and the machine load (``uptime``)
at each timing, and merges the result for that size into benchmarks/results/score.json (with a linear
extrapolation t = a + b * rows to 1e9 rows once two sizes are there).

    .venv/bin/python benchmarks/bench_score.py                          # 2e7 and 2e8 rows
    .venv/bin/python benchmarks/bench_score.py --rows 1000000000
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
from harness import jvm_peak_rss_mb, load, machine, process_peak_rss_mb

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
OUT = HERE / "out" / "score"
RESULTS = HERE / "results" / "score.json"

ALPHAS = (1.0, 0.5, 0.0, -0.5, -1.0)
BETAS = (0.0, 0.2, 0.4, 0.6, 0.8)
HITS = (1, 3, 10)
ONE_CELL = {"alphas": (0.5,), "betas": (0.0,), "hits": (10,)}
# one popularity-weighted cell: the same statistics join as the grid, so grid / this = the cost of 25 cells over 1
ONE_WEIGHTED_CELL = {"alphas": (0.5,), "betas": (0.4,), "hits": (10,)}
GRID = {"alphas": ALPHAS, "betas": BETAS, "hits": HITS}
ROWS_PER_FILE = 25_000_000
CHUNK = 1 << 21  # rows generated and written at a time (two 1M-row row groups)
TOL = 1e-9  # kgbrink (exact fixed-point sums) against numpy (pairwise double sums): 4e-12 at 1e9 rows
# DuckDB sums doubles in order, so its error grows with the row count: 1.26e-9 on a PROBE cell at 1e9 rows
TOL_DUCKDB = 1e-8


# ------------------------------------------------------------------------------------------ helpers
def sql_list(paths: list[str]) -> str:
    return "[" + ", ".join(f"'{p}'" for p in paths) + "]"


def timed(fn):
    before = load()
    start = time.perf_counter()
    value = fn()
    return value, {"seconds": round(time.perf_counter() - start, 3), "load_before": before, "load_after": load()}


# ------------------------------------------------------------------------------------- spark worker
def _spark(task: dict):
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session

    config = load_config(task["conf"], task["overrides"])
    start = time.perf_counter()
    spark = spark_session(config)
    return config, spark, round(time.perf_counter() - start, 2)


def worker_prepare(task: dict) -> dict:
    """Dataset (made when missing), the statistics as Parquet, the triples' files and the entity count."""
    from kgbrink.core.delta import latest_version, read_table
    from kgbrink.core.jobs import JobContext
    from kgbrink.jobs import ingest, stats, synth

    config, spark, startup = _spark(task)
    kg, ds, made = Path(task["kg"]), Path(task["dataset"]), {}
    if not (kg / "synth_manifest.json").is_file():
        (_, made["synth"]) = timed(
            lambda: synth.run(JobContext(None, config), synth.SynthOptions(out=str(kg), triples=task["triples"]))
        )
    if not (ds / "triples" / "_delta_log").is_dir():
        (_, made["ingest"]) = timed(
            lambda: ingest.run(
                JobContext(spark, config), ingest.IngestOptions(dataset=str(ds), format="wikidata5m", input=str(kg))
            )
        )
    stats_dir = ds / "stats" / "train"
    if not (stats_dir / "entity_relation_popularity" / "_delta_log").is_dir():
        (_, made["stats"]) = timed(
            lambda: stats.run(JobContext(spark, config), stats.StatsOptions(dataset=str(ds), splits=["train"]))
        )
    exported = Path(task["stats_parquet"])
    versions = {
        n: latest_version(spark, str(stats_dir / n)) for n in ("entity_popularity", "entity_relation_popularity")
    }
    marker = exported / "versions.json"
    if not marker.is_file() or json.loads(marker.read_text()) != versions:
        shutil.rmtree(exported, ignore_errors=True)
        columns = {
            "entity_popularity": ("entity", "delta"),
            "entity_relation_popularity": ("entity", "relation", "delta_rel_given_entity"),
        }
        for name, cols in columns.items():
            read_table(spark, str(stats_dir / name), versions[name]).select(*cols).write.parquet(str(exported / name))
        marker.write_text(json.dumps(versions))
    triples = read_table(spark, str(ds / "triples"))
    return {
        "spark_startup_seconds": startup,
        "made": made,
        "triples_files": sorted(triples.inputFiles()),
        "triples": triples.count(),
        "entities": read_table(spark, str(ds / "entities")).count(),
        "relations": read_table(spark, str(ds / "relations")).count(),
        "entity_relation_pairs": read_table(spark, str(stats_dir / "entity_relation_popularity")).count(),
        "stats_versions": versions,
    }


def _results(summary) -> dict:
    """``metric@alpha@beta`` -> value for run "1" (classic metrics keyed by name)."""
    out = {}
    for row in summary.results:
        if row["run"] != "1":
            continue
        key = row["metric"] if row["alpha"] is None else f"probe@{row['alpha']:g}@{row['beta']:g}"
        out[key] = row["value"]
    return out


def worker_spark(task: dict) -> dict:
    from kgbrink.core.jobs import JobContext
    from kgbrink.jobs import score
    from kgbrink.probe.scoring import MetricSpec

    config, spark, startup = _spark(task)
    cores = spark.sparkContext.defaultParallelism
    dataset = task["dataset"]

    def run(ranks: str, spec: dict, batch_bytes: int) -> dict:
        shutil.rmtree(Path(dataset) / "scores", ignore_errors=True)
        cfg = config.with_overrides([f"scoring.batch_bytes={batch_bytes}"])
        metric = MetricSpec(
            alphas=tuple(spec["alphas"]),
            betas=tuple(spec["betas"]),
            hits=tuple(spec["hits"]),
            p_values=(),
            eps=None,
            popularity_groups=0,
            strat_betas=(),
        )
        opts = score.ScoreOptions(ranks=ranks, dataset=dataset, spec=metric, fmt="parquet", id_kind="id")
        summary, timing = timed(lambda: score.run(JobContext(spark, cfg), opts))
        assert summary.counts["quarantined"] == 0, summary.counts
        return {
            **timing,
            "batches": summary.counts["batches"],
            "rows": summary.counts["scored"],
            "timings": summary.timings,
            "eps": summary.extra.get("eps"),
            "results": _results(summary),
        }

    out = {
        "spark_startup_seconds": startup,
        "cores": cores,
        "spark_conf": {
            k: spark.conf.get(k)
            for k in (
                "spark.master",
                "spark.driver.memory",
                "spark.sql.shuffle.partitions",
                "spark.sql.files.maxPartitionBytes",
            )
        },
    }
    out["warmup"] = run(task["warmup"], GRID, 1 << 40)
    out["grid"] = run(task["ranks"], GRID, 1 << 40)
    out["one_cell"] = run(task["ranks"], ONE_CELL, 1 << 40)
    out["one_weighted_cell"] = run(task["ranks"], ONE_WEIGHTED_CELL, 1 << 40)
    if task["batch_bytes_4"]:
        out["grid_4_batches"] = run(task["ranks"], GRID, task["batch_bytes_4"])
    shutil.rmtree(Path(dataset) / "scores", ignore_errors=True)
    if task["diagnostics"]:
        out["diagnostics"] = diagnostics(spark, task["ranks"], dataset)
    out["jvm_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    harness.stop_spark(spark)
    return out


def diagnostics(spark, ranks: str, dataset: str) -> dict:
    """Where kgbrink's time goes: the same files through parts of the job, each one Spark action
    (no validation, no Delta writes): a bare scan, the one-cell sums, the statistics join alone, the
    grid sums on joined rows."""
    from pyspark.sql import functions as F

    from kgbrink.core.delta import read_table
    from kgbrink.probe import scoring

    def spec(d: dict):
        return scoring.MetricSpec(
            alphas=tuple(d["alphas"]),
            betas=tuple(d["betas"]),
            hits=tuple(d["hits"]),
            p_values=(),
            eps=None,
            popularity_groups=0,
            strat_betas=(),
        )

    raw = spark.read.parquet(ranks)
    stats = f"{dataset}/stats/train"
    popularity = (
        read_table(spark, f"{stats}/entity_popularity"),
        read_table(spark, f"{stats}/entity_relation_popularity"),
    )
    joined = scoring.with_target_degrees(raw, *popularity, broadcast=True)
    steps = {
        "scan_sum_rank_and_num_candidates": lambda: raw.agg(F.sum("rank"), F.sum("num_candidates")).collect(),
        "one_cell_group_sums_no_validation": lambda: scoring.group_sums(raw, spec(ONE_CELL)).collect(),
        "statistics_join_only": lambda: joined.agg(F.sum("entity_degree"), F.sum("relation_degree")).collect(),
        "grid_group_sums_on_joined_rows_no_validation": lambda: scoring.group_sums(joined, spec(GRID)).collect(),
    }
    return {name: timed(fn)[1] for name, fn in steps.items()}


# ------------------------------------------------------------------------------------ duckdb worker
def _duck(threads: int):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}; SET memory_limit = '16GB'; SET preserve_insertion_order = false")
    return con


def _probe_sql(alpha: float, lr: str = "lr", ln: str = "ln_n", n: str = "n") -> str:
    if alpha == 0:
        value = f"1 - {lr} / {ln}"
    else:
        value = f"(exp({-alpha!r} * {lr}) - exp({-alpha!r} * {ln})) / (1 - exp({-alpha!r} * {ln}))"
    return f"CASE WHEN {n} > 1 THEN {value} ELSE CAST(1 AS DOUBLE) END"


def _classic_sql(hits) -> list[str]:
    return [
        "count(*) AS n",
        "sum(rank) AS rank_sum",
        "sum(1.0 / rank) AS reciprocal",
        "sum(n - 1) AS candidates_minus_one",
        "sum((n - 1) * lr) AS wmr_log",
        *[f"count(*) FILTER (WHERE rank <= {k}) AS hits_{k}" for k in hits],
    ]


def duckdb_grid_sql(files: list[str], stats: str) -> str:
    cells = [f"c{i}" for i in range(len(ALPHAS))]
    weights = [f"w{j}" for j in range(len(BETAS))]
    return f"""
    WITH q AS (
      SELECT rank, num_candidates AS n, r, CASE WHEN side = 'head' THEN h ELSE t END AS target FROM read_parquet({sql_list(files)})),
    j AS (
      SELECT q.rank, q.n, coalesce(ep.delta, 0.0) AS de, coalesce(erp.delta_rel_given_entity, 0.0) AS dre
      FROM q LEFT JOIN read_parquet('{stats}/entity_popularity/*.parquet') ep ON ep.entity = q.target
             LEFT JOIN read_parquet('{stats}/entity_relation_popularity/*.parquet') erp ON erp.entity = q.target AND erp.relation = q.r),
    eps AS (
      SELECT coalesce(min(de) FILTER (WHERE de > 0), 1.0) AS eps_e, coalesce(min(dre) FILTER (WHERE dre > 0), 1.0) AS eps_r FROM j),
    logs AS (
      SELECT rank, n, ln(rank) AS lr, ln(n) AS ln_n, ln(eps_e + de) + ln(eps_r + dre) AS lp, eps_e, eps_r FROM j CROSS JOIN eps),
    terms AS (
      SELECT rank, n, lr, eps_e, eps_r,
             {", ".join(f"{_probe_sql(a)} AS {c}" for a, c in zip(ALPHAS, cells))},
             {", ".join(("CAST(1 AS DOUBLE)" if b == 0 else f"exp({-b!r} * lp)") + f" AS {w}" for b, w in zip(BETAS, weights))}
      FROM logs)
    SELECT {", ".join(_classic_sql(HITS))},
           {", ".join(f"sum({w}) AS sw_{j}" for j, w in enumerate(weights))},
           {", ".join(f"sum({w} * {c}) AS s_{i}_{j}" for j, w in enumerate(weights) for i, c in enumerate(cells))},
           min(eps_e) AS eps_e, min(eps_r) AS eps_r
    FROM terms"""


def duckdb_one_cell_sql(files: list[str], checked_ids: tuple[int, int] | None = None) -> str:
    """The one cell. Plain: no checks, one global sum. With ``checked_ids`` = (entities, relations): kgbrink's
    per-row work, the validity checks of ``validate_ranks`` (ids in range, side, finite numbers,
    1 <= rank <= num_candidates, rank a multiple of 0.5) and sums per (model, run)."""
    keys, where, group = "", "", ""
    if checked_ids:
        n_entities, n_relations = checked_ids
        keys, group = "model, run, ", "GROUP BY model, run"
        where = f"""WHERE model IS NOT NULL AND run IS NOT NULL AND side IN ('head', 'tail') AND h BETWEEN 0 AND {n_entities - 1}
             AND t BETWEEN 0 AND {n_entities - 1} AND r BETWEEN 0 AND {n_relations - 1} AND isfinite(rank) AND num_candidates >= 1
             AND rank >= 1 AND rank <= num_candidates AND rank * 2 = floor(rank * 2)"""
    return f"""
    SELECT {keys}{", ".join(_classic_sql(ONE_CELL["hits"]))}, sum(c) AS s_0_0
    FROM (SELECT {keys}rank, n, lr, {_probe_sql(0.5)} AS c
          FROM (SELECT {keys}rank, num_candidates AS n, ln(rank) AS lr, ln(num_candidates) AS ln_n
                FROM read_parquet({sql_list(files)}) {where}))
    {group}"""


def _metrics(sums: dict, spec: dict) -> dict:
    """The sums of a peer -> the same keys as :func:`_results` (kgbrink's metric names)."""
    sums = {k: v if v is None else float(v) for k, v in sums.items()}
    n = sums["n"]
    out = {
        "mr": sums["rank_sum"] / n,
        "mrr": sums["reciprocal"] / n,
        "amri": 1 - 2 * (sums["rank_sum"] - n) / sums["candidates_minus_one"],
        "wgmr": math.exp(sums["wmr_log"] / sums["candidates_minus_one"]),
    }
    for k in spec["hits"]:
        out[f"hits@{k}"] = sums[f"hits_{k}"] / n
    for j, b in enumerate(spec["betas"]):
        total = sums.get(f"sw_{j}", n)
        for i, a in enumerate(spec["alphas"]):
            out[f"probe@{a:g}@{b:g}"] = sums[f"s_{i}_{j}"] / total
    return out


def _fetch_one(con, sql: str) -> tuple[tuple, list[str]]:
    cursor = con.execute(sql)
    return cursor.fetchone(), [d[0] for d in cursor.description]


def worker_duckdb(task: dict) -> dict:
    con = _duck(task["threads"])
    out = {"threads": task["threads"], "duckdb": __import__("duckdb").__version__}
    queries = (
        ("grid", duckdb_grid_sql(task["files"], task["stats_parquet"]), GRID),
        ("one_cell", duckdb_one_cell_sql(task["files"]), ONE_CELL),
        ("one_cell_checked", duckdb_one_cell_sql(task["files"], (task["entities"], task["relations"])), ONE_CELL),
    )
    for name, sql, spec in queries:
        (row, names), timing = timed(lambda sql=sql: _fetch_one(con, sql))
        sums = {
            k: v for k, v in zip(names, row) if k not in ("model", "run")
        }  # one (model, run) in the generated files
        out[name] = {
            **timing,
            "rows": int(sums["n"]),
            "eps": [sums.get("eps_e"), sums.get("eps_r")],
            "results": _metrics(sums, spec),
        }
    out["peak_rss_mb"] = process_peak_rss_mb()
    return out


# ------------------------------------------------------------------------------------- numpy worker
def _load_sql(files: list[str], stats: str, columns: str) -> str:
    return f"""
      SELECT {columns}
      FROM (SELECT rank, num_candidates AS n, r, CASE WHEN side = 'head' THEN h ELSE t END AS target FROM read_parquet({sql_list(files)})) q
      LEFT JOIN read_parquet('{stats}/entity_popularity/*.parquet') ep ON ep.entity = q.target
      LEFT JOIN read_parquet('{stats}/entity_relation_popularity/*.parquet') erp ON erp.entity = q.target AND erp.relation = q.r"""


def _eps_partial(de, dre) -> tuple[float, float]:
    pos_e, pos_r = de[de > 0], dre[dre > 0]
    return (float(pos_e.min()) if pos_e.size else math.inf, float(pos_r.min()) if pos_r.size else math.inf)


BLOCK = 1 << 16  # rows per numpy step (temporaries of 512 KB: cache-friendly, no mmap page faults per step)


def numpy_sums(rank, n, de, dre, eps: tuple[float, float] | None, spec: dict, acc: dict) -> None:
    """Adds the grid's (or one cell's) sums over these rows to ``acc``: ln r, ln N and
    ln(eps_e + de) + ln(eps_r + dre) once per row, two exp per (row, alpha != 0), one per (row, beta > 0)."""
    import numpy as np

    weighted = any(b != 0 for b in spec["betas"])
    for lo in range(0, len(rank), BLOCK):
        r, nn = rank[lo : lo + BLOCK], n[lo : lo + BLOCK]
        m = len(r)
        lr, ln_n = np.log(r), np.log(nn)
        single = nn == 1
        any_single = bool(single.any())
        if any_single:
            ln_n[single] = 1.0  # any non-zero value: the cell is set to 1 below
        cells = []
        tmp = np.empty(m)
        for a in spec["alphas"]:
            if a == 0:
                c = np.divide(lr, ln_n)
                np.subtract(1.0, c, out=c)
            else:
                y = np.multiply(ln_n, -a)
                np.exp(y, out=y)
                c = np.multiply(lr, -a)
                np.exp(c, out=c)
                c -= y
                np.subtract(1.0, y, out=y)
                c /= y
            if any_single:
                c[single] = 1.0
            cells.append(c)
        if weighted:
            lp = np.log(eps[0] + de[lo : lo + BLOCK])
            lp += np.log(eps[1] + dre[lo : lo + BLOCK])
        for j, b in enumerate(spec["betas"]):
            if b == 0:
                acc[f"sw_{j}"] = acc.get(f"sw_{j}", 0.0) + float(m)
                for i, c in enumerate(cells):
                    acc[f"s_{i}_{j}"] = acc.get(f"s_{i}_{j}", 0.0) + float(c.sum())
            else:
                np.multiply(lp, -b, out=tmp)
                np.exp(tmp, out=tmp)
                acc[f"sw_{j}"] = acc.get(f"sw_{j}", 0.0) + float(tmp.sum())
                for i, c in enumerate(cells):
                    acc[f"s_{i}_{j}"] = acc.get(f"s_{i}_{j}", 0.0) + float(np.dot(tmp, c))
        acc["n"] = acc.get("n", 0) + m
        acc["rank_sum"] = acc.get("rank_sum", 0.0) + float(r.sum())
        acc["reciprocal"] = acc.get("reciprocal", 0.0) + float(np.reciprocal(r, out=tmp).sum())
        np.subtract(nn, 1.0, out=tmp)
        acc["candidates_minus_one"] = acc.get("candidates_minus_one", 0.0) + float(tmp.sum())
        acc["wmr_log"] = acc.get("wmr_log", 0.0) + float(np.dot(tmp, lr))
        for k in spec["hits"]:
            acc[f"hits_{k}"] = acc.get(f"hits_{k}", 0) + int(np.count_nonzero(r <= k))


def worker_numpy(task: dict) -> dict:
    import numpy as np

    con = _duck(2)
    files, stats = task["files"], task["stats_parquet"]
    in_memory = task["rows"] <= task["in_memory_rows"]
    out = {
        "mode": "in-memory" if in_memory else "file by file (only the computation timed)",
        "grid": {},
        "one_cell": {},
    }

    def fetch(file_list: list[str], columns: str) -> dict:
        return con.execute(_load_sql(file_list, stats, columns)).fetchnumpy()

    columns = (
        "rank, CAST(n AS DOUBLE) AS n, coalesce(ep.delta, 0.0) AS de, coalesce(erp.delta_rel_given_entity, 0.0) AS dre"
    )
    if in_memory:
        start = time.perf_counter()
        arrays = {k: np.empty(task["rows"]) for k in ("rank", "n", "de", "dre")}
        pos = 0
        reader = con.execute(_load_sql(files, stats, columns)).fetch_record_batch(1 << 20)  # one join, streamed
        for batch in reader:
            m = batch.num_rows
            for k, array in arrays.items():
                array[pos : pos + m] = batch.column(k).to_numpy()
            pos += m
        assert pos == task["rows"], (pos, task["rows"])
        out["load_seconds"] = round(time.perf_counter() - start, 2)

        def grid():
            parts = [
                _eps_partial(arrays["de"][lo : lo + BLOCK], arrays["dre"][lo : lo + BLOCK])
                for lo in range(0, pos, BLOCK)
            ]
            eps = tuple(min(p[i] for p in parts) for i in (0, 1))
            eps = tuple(1.0 if math.isinf(e) else e for e in eps)
            acc = {"eps_e": eps[0], "eps_r": eps[1]}
            numpy_sums(arrays["rank"], arrays["n"], arrays["de"], arrays["dre"], eps, GRID, acc)
            return acc

        def one_cell():
            acc = {}
            numpy_sums(arrays["rank"], arrays["n"], None, None, None, ONE_CELL, acc)
            return acc

        for name, fn, spec in (("grid", grid, GRID), ("one_cell", one_cell, ONE_CELL)):
            acc, timing = timed(fn)
            out[name] = {
                **timing,
                "rows": acc["n"],
                "eps": [acc.get("eps_e"), acc.get("eps_r")],
                "results": _metrics(acc, spec),
            }
    else:
        seconds = {"grid": 0.0, "one_cell": 0.0}
        load_seconds = 0.0
        loads = {"grid": [load()], "one_cell": []}
        parts = []
        for f in files:  # pass 1: eps (needs every row before any weight)
            t0 = time.perf_counter()
            part = fetch([f], "coalesce(ep.delta, 0.0) AS de, coalesce(erp.delta_rel_given_entity, 0.0) AS dre")
            t1 = time.perf_counter()
            parts.append(_eps_partial(part["de"], part["dre"]))
            seconds["grid"] += time.perf_counter() - t1
            load_seconds += t1 - t0
        eps = tuple(min(p[i] for p in parts) for i in (0, 1))
        eps = tuple(1.0 if math.isinf(e) else e for e in eps)
        accs = {"grid": {"eps_e": eps[0], "eps_r": eps[1]}, "one_cell": {}}
        for f in files:  # pass 2: the sums
            t0 = time.perf_counter()
            part = fetch([f], columns)
            load_seconds += time.perf_counter() - t0
            for name, spec in (("grid", GRID), ("one_cell", ONE_CELL)):
                t0 = time.perf_counter()
                numpy_sums(
                    part["rank"], part["n"], part["de"], part["dre"], eps if name == "grid" else None, spec, accs[name]
                )
                seconds[name] += time.perf_counter() - t0
            del part
        loads["grid"].append(load())
        loads["one_cell"] = loads["grid"]
        out["load_seconds"] = round(load_seconds, 2)
        for name, spec in (("grid", GRID), ("one_cell", ONE_CELL)):
            acc = accs[name]
            out[name] = {
                "seconds": round(seconds[name], 3),
                "load_before": loads[name][0],
                "load_after": loads[name][1],
                "rows": acc["n"],
                "eps": [acc.get("eps_e"), acc.get("eps_r")],
                "results": _metrics(acc, spec),
            }
    out["peak_rss_mb"] = process_peak_rss_mb()
    return out


WORKERS = {"prepare": worker_prepare, "spark": worker_spark, "duckdb": worker_duckdb, "numpy": worker_numpy}


def run_worker(kind: str, task: dict, env: dict | None = None) -> dict:
    return harness.run_worker(Path(__file__), kind, task, OUT / "tasks", env)


# -------------------------------------------------------------------------------------- generation
def generate(out_dir: Path, rows: int, prep: dict, seed: int) -> dict:
    """``rows`` rank rows as Parquet files of ``min(25M, ceil(rows / 4))`` rows; reused when complete."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_file = min(ROWS_PER_FILE, -(-rows // 4))
    counts = [min(per_file, rows - lo) for lo in range(0, rows, per_file)]
    manifest = out_dir / "_manifest.json"  # "_": skipped by Spark and kgbrink
    wanted = {
        "rows": rows,
        "files": len(counts),
        "seed": seed,
        "entities": prep["entities"],
        "triples_files": prep["triples_files"],
    }
    if manifest.is_file() and {k: v for k, v in json.loads(manifest.read_text()).items() if k in wanted} == wanted:
        return json.loads(manifest.read_text())
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    start = time.perf_counter()
    from kgbrink.core.files import reported_path

    table = pa.concat_tables(
        [pq.ParquetFile(reported_path(f)).read(columns=["h", "r", "t"]) for f in prep["triples_files"]]
    )
    h, r, t = (table[c].to_numpy().astype(np.int32) for c in ("h", "r", "t"))
    del table
    n_entities = prep["entities"]
    schema = pa.schema(
        [
            ("model", pa.string()),
            ("run", pa.string()),
            ("h", pa.int32()),
            ("r", pa.int32()),
            ("t", pa.int32()),
            ("side", pa.string()),
            ("rank", pa.float64()),
            ("num_candidates", pa.int64()),
        ]
    )
    log_n_max = math.log(n_entities)
    for index, count in enumerate(counts):
        rng = np.random.default_rng([seed, index])
        with pq.ParquetWriter(out_dir / f"part-{index:05d}.parquet", schema, compression="snappy") as writer:
            for lo in range(0, count, CHUNK):
                m = min(CHUNK, count - lo)
                pick = rng.integers(0, len(h), m)
                n = n_entities - rng.integers(0, 8, m)
                # heavy tail: ln rank = u^3 ln N (30% rank 1, median ~30, a long tail up to N); 10% tie-averaged (+0.5)
                rank = np.floor(np.exp(rng.random(m) ** 3 * log_n_max))
                rank += 0.5 * (rng.random(m) < 0.1)
                rank = np.clip(rank, 1.0, n.astype(np.float64))
                side = rng.integers(0, 2, m).astype(np.int8)
                writer.write_table(
                    pa.table(
                        {
                            "model": pa.array(["bench"] * 1, pa.string()).take(np.zeros(m, np.int32)),
                            "run": pa.array(["1"], pa.string()).take(np.zeros(m, np.int32)),
                            "h": h[pick],
                            "r": r[pick],
                            "t": t[pick],
                            "side": pa.array(["head", "tail"], pa.string()).take(side),
                            "rank": rank,
                            "num_candidates": n,
                        },
                        schema=schema,
                    ),
                    row_group_size=1 << 20,
                )
    info = {
        **wanted,
        "rows_per_file": per_file,
        "bytes": sum(f.stat().st_size for f in out_dir.glob("*.parquet")),
        "generation_seconds": round(time.perf_counter() - start, 1),
    }
    manifest.write_text(json.dumps(info, indent=2))
    return info


# ---------------------------------------------------------------------------------------- checking
def compare(reference: dict, other: dict) -> dict:
    """Largest absolute difference per metric family; Hits must be equal (same counts)."""
    worst: dict[str, float] = {}
    for key, value in reference.items():
        if key not in other:
            continue
        family = key.split("@")[0]
        worst[family] = max(worst.get(family, 0.0), abs(value - other[key]))
    return worst


def check(name: str, diffs: dict) -> list[str]:
    tol = TOL_DUCKDB if "duckdb" in name else TOL
    return [
        f"{name}: {fam} differs by {d:.3g}"
        for fam, d in diffs.items()
        if (fam in ("probe", "mrr", "amri") and d > tol) or (fam == "hits" and d > 1e-15)
    ]


def per_core(rows: int, seconds: float, cores: int) -> float:
    return round(rows / seconds / cores)


def extrapolate(runs: list[dict], target: int = 1_000_000_000) -> dict | None:
    """t = a + b * rows through the two largest measured sizes, evaluated at ``target`` rows."""
    measured = sorted((r for r in runs if r["rows"] < target), key=lambda r: r["rows"])[-2:]
    if len(measured) < 2:
        return None
    (r1, r2) = measured
    out = {"from_rows": [r1["rows"], r2["rows"]], "to_rows": target, "seconds": {}}
    for label, path in (
        ("kgbrink_grid", ("kgbrink", "grid")),
        ("kgbrink_one_cell", ("kgbrink", "one_cell")),
        ("kgbrink_grid_4_batches", ("kgbrink", "grid_4_batches")),
        ("duckdb_grid", ("duckdb", "grid")),
        ("duckdb_one_cell", ("duckdb", "one_cell")),
        ("numpy_grid", ("numpy", "grid")),
        ("numpy_one_cell", ("numpy", "one_cell")),
    ):
        t1, t2 = r1[path[0]][path[1]]["seconds"], r2[path[0]][path[1]]["seconds"]
        slope = (t2 - t1) / (r2["rows"] - r1["rows"])
        fixed = t1 - slope * r1["rows"]
        out["seconds"][label] = {
            "fixed_seconds": round(fixed, 2),
            "seconds_per_1e8_rows": round(slope * 1e8, 2),
            "predicted_seconds": round(fixed + slope * target, 1),
        }
    s = out["seconds"]
    out["predicted_ratio_kgbrink_duckdb_one_cell"] = round(
        s["kgbrink_one_cell"]["predicted_seconds"] / s["duckdb_one_cell"]["predicted_seconds"], 2
    )
    out["predicted_ratio_kgbrink_grid_one_cell"] = round(
        s["kgbrink_grid"]["predicted_seconds"] / s["kgbrink_one_cell"]["predicted_seconds"], 2
    )
    return out


def bench(rows: int, args, prep: dict) -> dict:
    ranks_dir = OUT / f"ranks-{rows}"
    print(f"== {rows:,} rows: generating {ranks_dir}", flush=True)
    gen = generate(ranks_dir, rows, prep, args.seed)
    generate(OUT / "ranks-warmup", 1_000_000, prep, args.seed + 1)
    files = sorted(str(p) for p in ranks_dir.glob("*.parquet"))
    sizes = [Path(f).stat().st_size for f in files]
    batch_bytes_4 = (
        0 if args.skip_batched else max(max(sizes), int(sum(sizes) / 4 * 1.01))
    )  # ~4 batches of whole files (sizes vary a little)
    base = {
        "conf": args.conf,
        "overrides": args.set,
        "dataset": str(OUT / "ds"),
        "stats_parquet": str(OUT / "stats-parquet"),
    }
    print(f"   {len(files)} files, {gen['bytes'] / 1e9:.2f} GB; kgbrink ...", flush=True)
    spark = run_worker(
        "spark",
        {
            **base,
            "ranks": str(ranks_dir),
            "warmup": str(OUT / "ranks-warmup"),
            "batch_bytes_4": batch_bytes_4,
            "diagnostics": not args.no_diagnostics,
        },
    )
    cores = spark["cores"]
    batched = spark.get("grid_4_batches")
    print(
        f"   kgbrink grid {spark['grid']['seconds']} s, one cell {spark['one_cell']['seconds']} s, one weighted cell {spark['one_weighted_cell']['seconds']} s, 4 batches {batched and batched['seconds']} s; DuckDB ...",
        flush=True,
    )
    duck = run_worker(
        "duckdb",
        {**base, "files": files, "threads": cores, "entities": prep["entities"], "relations": prep["relations"]},
    )
    print(
        f"   DuckDB grid {duck['grid']['seconds']} s, one cell {duck['one_cell']['seconds']} s; numpy ...", flush=True
    )
    single = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    npy = run_worker(
        "numpy", {**base, "files": files, "rows": rows, "in_memory_rows": args.numpy_in_memory_rows}, env=single
    )
    print(f"   numpy grid {npy['grid']['seconds']} s, one cell {npy['one_cell']['seconds']} s", flush=True)

    problems = []
    for label, part in (
        ("kgbrink grid", spark["grid"]),
        ("kgbrink one cell", spark["one_cell"]),
        ("kgbrink one weighted cell", spark["one_weighted_cell"]),
        ("kgbrink 4 batches", batched),
        ("duckdb grid", duck["grid"]),
        ("duckdb one cell", duck["one_cell"]),
        ("duckdb one cell checked", duck["one_cell_checked"]),
        ("numpy grid", npy["grid"]),
        ("numpy one cell", npy["one_cell"]),
    ):
        if part and part["rows"] != rows:
            problems.append(f"{label}: {part['rows']} rows, expected {rows}")
    agreement = {
        "kgbrink_grid_vs_duckdb": compare(spark["grid"]["results"], duck["grid"]["results"]),
        "kgbrink_grid_vs_numpy": compare(spark["grid"]["results"], npy["grid"]["results"]),
        "duckdb_grid_vs_numpy": compare(duck["grid"]["results"], npy["grid"]["results"]),
        "kgbrink_one_cell_vs_duckdb": compare(spark["one_cell"]["results"], duck["one_cell"]["results"]),
        "kgbrink_one_cell_vs_duckdb_checked": compare(
            spark["one_cell"]["results"], duck["one_cell_checked"]["results"]
        ),
        "kgbrink_one_cell_vs_numpy": compare(spark["one_cell"]["results"], npy["one_cell"]["results"]),
        "kgbrink_grid_vs_one_cell": compare(spark["one_cell"]["results"], spark["grid"]["results"]),
        "kgbrink_grid_vs_one_weighted_cell": compare(spark["one_weighted_cell"]["results"], spark["grid"]["results"]),
    }
    if batched:
        agreement["kgbrink_4_batches_vs_1_batch"] = compare(spark["grid"]["results"], batched["results"])
    for name, diffs in agreement.items():
        problems += check(name, diffs)
    if batched and spark["grid"]["results"] != batched["results"]:
        problems.append("kgbrink: 4 batches differ from 1 batch")
    eps = {"kgbrink": spark["grid"]["eps"], "duckdb": duck["grid"]["eps"], "numpy": npy["grid"]["eps"]}
    k_eps = eps["kgbrink"][0]
    if not (
        k_eps["eps_entity"] == duck["grid"]["eps"][0] == npy["grid"]["eps"][0]
        and k_eps["eps_relation"] == duck["grid"]["eps"][1] == npy["grid"]["eps"][1]
    ):
        problems.append(f"eps differ: {eps}")

    def figures(part: dict, c: int) -> dict:
        return {k: v for k, v in part.items() if k != "results"} | {
            "cores": c,
            "rows_per_s_per_core": per_core(rows, part["seconds"], c),
        }

    run = {
        "rows": rows,
        "files": len(files),
        "rows_per_file": gen["rows_per_file"],
        "bytes": gen["bytes"],
        "generation_seconds": gen.get("generation_seconds"),
        "kgbrink": {
            "spark_startup_seconds": spark["spark_startup_seconds"],
            "spark_conf": spark["spark_conf"],
            "warmup_1e6_rows": figures(spark["warmup"], cores) | {"rows": 1_000_000},
            "grid": figures(spark["grid"], cores),
            "one_cell": figures(spark["one_cell"], cores),
            "one_weighted_cell": figures(spark["one_weighted_cell"], cores),
            "grid_4_batches": figures(batched, cores) | {"batch_bytes": batch_bytes_4}
            if batched
            else "not run (--skip-batched)",
            "diagnostics_untimed_parts": spark.get("diagnostics"),
            "jvm_peak_rss_mb": spark["jvm_peak_rss_mb"],
            "worker_process_seconds": spark["process_seconds"],
        },
        "duckdb": {
            "version": duck["duckdb"],
            "threads": duck["threads"],
            "grid": figures(duck["grid"], cores),
            "one_cell": figures(duck["one_cell"], cores),
            "one_cell_checked_grouped": figures(duck["one_cell_checked"], cores),
            "peak_rss_mb": duck["peak_rss_mb"],
        },
        "numpy": {
            "mode": npy["mode"],
            "load_seconds_untimed": npy["load_seconds"],
            "grid": figures(npy["grid"], 1),
            "one_cell": figures(npy["one_cell"], 1),
            "peak_rss_mb": npy["peak_rss_mb"],
        },
        "ratios": {
            "kgbrink_over_duckdb_one_cell_per_core": round(
                spark["one_cell"]["seconds"] / duck["one_cell"]["seconds"], 2
            ),
            "kgbrink_over_duckdb_one_cell_checked_grouped_per_core": round(
                spark["one_cell"]["seconds"] / duck["one_cell_checked"]["seconds"], 2
            ),
            "kgbrink_over_duckdb_grid_per_core": round(spark["grid"]["seconds"] / duck["grid"]["seconds"], 2),
            "kgbrink_grid_over_one_cell": round(spark["grid"]["seconds"] / spark["one_cell"]["seconds"], 2),
            "kgbrink_grid_over_one_weighted_cell": round(
                spark["grid"]["seconds"] / spark["one_weighted_cell"]["seconds"], 2
            ),
            "kgbrink_4_batches_over_1_batch": round(batched["seconds"] / spark["grid"]["seconds"], 2)
            if batched
            else None,
            "duckdb_grid_over_one_cell": round(duck["grid"]["seconds"] / duck["one_cell"]["seconds"], 2),
            "kgbrink_per_core_over_numpy_grid": round(spark["grid"]["seconds"] * cores / npy["grid"]["seconds"], 2),
            "kgbrink_per_core_over_numpy_one_cell": round(
                spark["one_cell"]["seconds"] * cores / npy["one_cell"]["seconds"], 2
            ),
        },
        "targets": {
            "kgbrink_duckdb_one_cell_per_core_at_most_3x": spark["one_cell"]["seconds"]
            <= 3 * duck["one_cell"]["seconds"],
            "kgbrink_grid_at_most_5x_one_cell": spark["grid"]["seconds"] <= 5 * spark["one_cell"]["seconds"],
        },
        "eps": eps,
        "agreement_max_abs_diff": agreement,
        "values": {
            "kgbrink_grid": spark["grid"]["results"],
            "kgbrink_one_cell": spark["one_cell"]["results"],
            "kgbrink_one_weighted_cell": spark["one_weighted_cell"]["results"],
        },
        "problems": problems,
    }
    return run


def markdown(results: dict) -> str:
    lines = [
        (
            "| rows | files (GB) | kgbrink grid s | grid, 4 batches s | kgbrink 1 cell s | kgbrink 1 weighted cell s | DuckDB grid s | DuckDB 1 cell s | numpy grid s "
            "| numpy 1 cell s | 1 cell kgbrink/DuckDB | kgbrink grid/1 cell | kgbrink grid/1 weighted cell |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        k, d, n = r["kgbrink"], r["duckdb"], r["numpy"]
        batched = k["grid_4_batches"]["seconds"] if isinstance(k["grid_4_batches"], dict) else float("nan")
        weighted = k.get("one_weighted_cell", {}).get("seconds", float("nan"))
        lines.append(
            f"| {r['rows']:,} | {r['files']} ({r['bytes'] / 1e9:.1f}) | {k['grid']['seconds']:.1f} | {batched:.1f} | {k['one_cell']['seconds']:.1f} | {weighted:.1f} "
            f"| {d['grid']['seconds']:.1f} | {d['one_cell']['seconds']:.1f} | {n['grid']['seconds']:.1f} | {n['one_cell']['seconds']:.1f} "
            f"| {r['ratios']['kgbrink_over_duckdb_one_cell_per_core']}x | {r['ratios']['kgbrink_grid_over_one_cell']}x | {r['ratios'].get('kgbrink_grid_over_one_weighted_cell', '-')}x |"
        )
    lines += [
        "",
        "| rows | rows/s/core: kgbrink grid | kgbrink 1 cell | DuckDB grid | DuckDB 1 cell | numpy grid | numpy 1 cell |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        k, d, n = r["kgbrink"], r["duckdb"], r["numpy"]
        lines.append(
            f"| {r['rows']:,} | {k['grid']['rows_per_s_per_core']:,} | {k['one_cell']['rows_per_s_per_core']:,} | {d['grid']['rows_per_s_per_core']:,} "
            f"| {d['one_cell']['rows_per_s_per_core']:,} | {n['grid']['rows_per_s_per_core']:,} | {n['one_cell']['rows_per_s_per_core']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000_000, 200_000_000])
    parser.add_argument("--triples", type=int, default=20_000_000, help="size of the generated KG (made once)")
    parser.add_argument("--seed", type=int, default=11, help="seed of the rank rows")
    parser.add_argument("--conf", default="conf/local.yaml")
    parser.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="config overrides (default: spark.master=local[2])",
    )
    parser.add_argument(
        "--numpy-in-memory-rows", type=int, default=250_000_000, help="above this, numpy works file by file"
    )
    parser.add_argument(
        "--no-diagnostics", action="store_true", help="skip the Spark break-down runs (scan, join, sums alone)"
    )
    parser.add_argument(
        "--skip-batched", action="store_true", help="skip the ~4-batch grid run (the 1-batch grid and one cell only)"
    )
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        harness.serve_worker(WORKERS, args.worker, args.task, args.result)
        return
    args.set = args.set if args.set is not None else ["spark.master=local[2]"]
    os.chdir(PROJECT)
    OUT.mkdir(parents=True, exist_ok=True)
    prep = run_worker(
        "prepare",
        {
            "conf": args.conf,
            "overrides": args.set,
            "kg": str(OUT / "kg"),
            "dataset": str(OUT / "ds"),
            "stats_parquet": str(OUT / "stats-parquet"),
            "triples": args.triples,
        },
    )
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": []}
    results.update(
        {
            "machine": machine(),
            "command": " ".join([".venv/bin/python", "benchmarks/bench_score.py", *sys.argv[1:]]),
            "config": {"conf": args.conf, "overrides": args.set, "tracking": "off (library call)"},
            "dataset": {k: prep[k] for k in ("triples", "entities", "relations", "entity_relation_pairs")}
            | {"kg": f"kgbrink synth --triples {args.triples}", "made_now": prep["made"]},
            "spark_startup_seconds": prep["spark_startup_seconds"],
        }
    )
    for rows in args.rows:
        run = bench(rows, args, prep)
        run["date"] = time.strftime("%Y-%m-%d %H:%M")
        run["machine"] = machine()  # the VM's CPU type changes between sessions
        run["command"] = results["command"]
        results["runs"] = sorted([r for r in results["runs"] if r["rows"] != rows] + [run], key=lambda r: r["rows"])
        results["extrapolation_1e9"] = extrapolate(results["runs"])
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps({k: run[k] for k in ("rows", "ratios", "targets", "problems")}, indent=1), flush=True)
    print(f"\nmachine: {results['machine']}")
    print(markdown(results))
    if results.get("extrapolation_1e9"):
        print(json.dumps(results["extrapolation_1e9"], indent=1))
    problems = [p for r in results["runs"] for p in r["problems"]]
    if problems:
        raise SystemExit("disagreement: " + "; ".join(problems))


if __name__ == "__main__":
    main()
