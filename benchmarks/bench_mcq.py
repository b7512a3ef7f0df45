"""Benchmark: `kgbrink mcq` (paper 003, ProbeKGC) at scale beside a DuckDB peer doing the same selection.

Input: the generated KG of bench_okgqa.py (`kgbrink synth`, seed 7, ingested) and a candidate-score file
(Parquet, ``h, r, t, side, candidate, score``) with ``--candidates`` rows per query of the sampled triples
(each query's gold among them, the rest uniform ids, scores from seeded hashes; made once, not timed).
kgbrink builds ``--queries`` questions (``--queries / 2`` triples of ``train``) at all three difficulties.

Peer, in its own process: DuckDB on the same Delta files and score file, the same selection in SQL: the
triples with the smallest hashes, true answers from every split, easy draws uniform over the ids, medium
draws from the answer-side pools numbered densely, hard = the best-scored candidates that are no true
answer, short queries filled from easy draws, options ordered by hash, written to Parquet. DuckDB's hash
differs from Spark's, so the easy and medium draws differ. The peer samples triples by its own hash (timed) but asks its questions of kgbrink's
sample (the triples the score file was made for), so that the hard options (no ties in the generated
scores) can be compared question by question, by a second DuckDB query after both runs (not timed).

    .venv/bin/python benchmarks/bench_mcq.py --triples 20000000 --queries 1000000 --candidates 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness
from bench_okgqa import prepare
from harness import jvm_peak_rss_mb, load, machine, process_peak_rss_mb

NEED = 3  # distractors per question (4 options)
DRAWS = 8 * NEED  # draws per round (mcq.easy_candidates x slots), as kgbrink


def make_scores(
    spark, dataset: Path, path: Path, sample: Path, n_triples: int, split: str, candidates: int, seed: int
) -> None:
    """The candidate-score file: for each query of the ``n_triples`` triples kgbrink samples, the gold and
    ``candidates - 1`` hashed entity ids, scores uniform from hashes (Parquet, 16 files); and ``sample``,
    those triples (the peer's questions)."""
    from pyspark.sql import functions as F

    from kgbrink.graph.hashing import u64, uniform
    from kgbrink.mcq import options

    triples = spark.read.format("delta").load(str(dataset / "triples"))
    n_entities = spark.read.format("delta").load(str(dataset / "entities")).count()
    sampled = options.sample_triples(triples.where(F.col("split") == split), n_triples, seed).localCheckpoint()
    sampled.select("h", "r", "t").coalesce(1).write.mode("overwrite").parquet(str(sample))
    queries = options.queries(sampled).select("h", "r", "t", "side", "qid", "gold")
    rows = queries.select("*", F.explode(F.sequence(F.lit(0), F.lit(candidates - 1))).alias("j"))
    drawn = F.pmod(u64(1, "qid", "j"), F.lit(n_entities)).cast("int")
    rows = rows.select(
        "h",
        "r",
        "t",
        "side",
        F.when(F.col("j") == 0, F.col("gold")).otherwise(drawn).alias("candidate"),
        uniform(u64(2, "qid", "j")).alias("score"),
    )
    rows.repartition(16).write.mode("overwrite").parquet(str(path))


def duckdb_peer(task: dict) -> dict:
    """The selection of `kgbrink mcq` in DuckDB SQL (module docstring); questions to Parquet."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = 2; SET memory_limit = '{task['memory']}'; SET preserve_insertion_order = false")
    con.execute(f"SET temp_directory = '{task['work']}/duckdb-tmp'")
    seed, n, ne, split = task["seed"], task["n_triples"], task["n_entities"], task["split"]
    files = ", ".join(f"'{f}'" for f in task["files"])
    steps: dict[str, float] = {}
    t0 = time.perf_counter()

    def step(name: str, *sql: str) -> None:
        start = time.perf_counter()
        for statement in sql:
            con.execute(statement)
        steps[name] = round(time.perf_counter() - start, 2)

    # The peer's own hashed sample is timed (its cost), but the questions are asked of kgbrink's sample
    # (task["sample"], the triples the score file was made for), so that the hard options are comparable.
    step(
        "sample",
        f"CREATE TABLE tr AS SELECT h, r, t, split FROM read_parquet([{files}])",
        "CREATE TABLE kg AS SELECT DISTINCT h, r, t FROM tr",
        f"""CREATE TABLE own_sample AS SELECT h, r, t FROM (SELECT DISTINCT h, r, t FROM tr
              WHERE split = '{split}' AND h <> t) ORDER BY hash({seed}, h, r, t), h, r, t LIMIT {n}""",
        f"""CREATE TABLE sampled AS SELECT h, r, t, row_number() OVER (ORDER BY h, r, t) AS k
              FROM read_parquet('{task["sample"]}/*.parquet')""",
        """CREATE TABLE q AS
             SELECT k * 2 AS qid, h, r, t, 'tail' AS side, h AS qe, t AS gold FROM sampled
             UNION ALL SELECT k * 2 + 1, h, r, t, 'head', t, h FROM sampled""",
    )
    # A candidate x (joined to its query q) is excluded when it is the gold, the query entity or a known
    # answer: never listed per query (a hub's head query has 10^6 answers), an anti-join on the triple.
    valid = """x.entity <> x.gold AND x.entity <> x.qe AND NOT EXISTS (SELECT 1 FROM kg
                 WHERE kg.r = x.r AND kg.h = CASE WHEN x.side = 'tail' THEN x.h ELSE x.entity END
                   AND kg.t = CASE WHEN x.side = 'tail' THEN x.entity ELSE x.t END)"""

    def draw(tag: str, requests: str, index: str | None, out: str, blocked: str | None = None) -> None:
        """``out``(qid, entity, d): per request (qid, start, size, need) the first ``need`` distinct
        entities neither excluded nor in ``blocked`` of hashed draws in rounds of DRAWS (three rounds, then the whole range
        in hash order)."""
        con.execute(f"CREATE TABLE {out} (qid BIGINT, entity INTEGER, d UBIGINT)")
        con.execute(f"CREATE TABLE pend AS SELECT * FROM ({requests}) WHERE need > 0")
        for rnd in range(4):
            if con.execute("SELECT count(*) FROM pend").fetchone()[0] == 0:
                break
            if rnd < 3:
                u = f"(hash({seed}, '{tag}', qid, j) >> 11) / 9007199254740992.0"
                cand = f"""SELECT qid, need, start + floor({u} * size)::BIGINT AS gpos, j::UBIGINT AS d
                           FROM (SELECT *, unnest(range({rnd * DRAWS}, {(rnd + 1) * DRAWS})) AS j FROM pend)"""
            else:  # the few still short: the whole range, in hash order after every draw number
                cand = """SELECT qid, need, gpos, NULL::UBIGINT AS d
                          FROM (SELECT *, unnest(range(start, start + size)) AS gpos FROM pend)"""
            ent = "c.gpos::INTEGER AS entity" if index is None else "ix.entity"
            no_block = f"AND NOT EXISTS (SELECT 1 FROM {blocked} b WHERE b.qid = x.qid AND b.entity = x.entity)"
            no_block = no_block if blocked else ""
            join = "" if index is None else f"JOIN {index} ix ON ix.gpos = c.gpos"
            con.execute(
                f"""INSERT INTO {out}
                  SELECT qid, entity, d FROM (
                    SELECT qid, entity, min(coalesce(d, 1000 + (hash({seed}, '{tag}', qid, entity) >> 2))) AS d,
                           any_value(need) AS need
                    FROM (SELECT c.qid, c.need, c.d, {ent}, q.h, q.r, q.t, q.side, q.gold, q.qe
                          FROM ({cand}) c JOIN q ON q.qid = c.qid {join}) x
                    WHERE {valid} {no_block}
                      AND NOT EXISTS (SELECT 1 FROM {out} o WHERE o.qid = x.qid AND o.entity = x.entity)
                    GROUP BY qid, entity)
                  QUALIFY row_number() OVER (PARTITION BY qid ORDER BY d, entity) <= need"""
            )
            con.execute(
                f"""CREATE OR REPLACE TABLE pend AS SELECT p.qid, p.start, p.size, p.need - coalesce(g.n, 0) AS need
                    FROM pend p LEFT JOIN (SELECT qid, count(*) AS n FROM {out} GROUP BY qid) g USING (qid)
                    WHERE p.need - coalesce(g.n, 0) > 0"""
            )
        con.execute("DROP TABLE pend")

    def fill(tag: str, chosen: str) -> None:
        """Top ``chosen`` up to NEED per query with easy draws distinct from the chosen ones."""
        con.execute(f"CREATE TABLE blk AS SELECT qid, entity FROM {chosen}")
        draw(
            f"{tag}-fill",
            f"""SELECT q.qid, 0 AS start, {ne} AS size, {NEED} - coalesce(c.n, 0) AS need FROM q
                LEFT JOIN (SELECT qid, count(*) AS n FROM {chosen} GROUP BY qid) c USING (qid)""",
            None,
            f"{chosen}_fill",
            "blk",
        )
        con.execute("DROP TABLE blk")
        con.execute(f"INSERT INTO {chosen} SELECT qid, entity, d + 4611686018427387904 FROM {chosen}_fill")

    start = time.perf_counter()
    draw("easy", f"SELECT qid, 0 AS start, {ne} AS size, {NEED} AS need FROM q", None, "easy")
    steps["easy"] = round(time.perf_counter() - start, 2)

    start = time.perf_counter()
    con.execute(
        """CREATE TABLE pools AS SELECT r, side, entity, row_number() OVER (ORDER BY r, side, entity) - 1 AS gpos
           FROM (SELECT DISTINCT r, 'tail' AS side, t AS entity FROM kg
                 UNION SELECT DISTINCT r, 'head', h FROM kg)"""
    )
    # excluded entities in the pool: the known answers counted once per (h, r) / (r, t), then the gold and
    # the query entity when they are not answers themselves
    con.execute(
        """CREATE TABLE inside AS SELECT qid, sum(n) AS n FROM (
             SELECT q.qid, a.n FROM q JOIN (SELECT kg.h, kg.r, count(*) AS n FROM kg
                 JOIN pools p ON p.side = 'tail' AND p.r = kg.r AND p.entity = kg.t GROUP BY ALL) a
               ON q.side = 'tail' AND a.h = q.h AND a.r = q.r
             UNION ALL SELECT q.qid, a.n FROM q JOIN (SELECT kg.r, kg.t, count(*) AS n FROM kg
                 JOIN pools p ON p.side = 'head' AND p.r = kg.r AND p.entity = kg.h GROUP BY ALL) a
               ON q.side = 'head' AND a.r = q.r AND a.t = q.t
             UNION ALL SELECT q.qid, 1 FROM q LEFT JOIN kg k ON k.h = q.h AND k.r = q.r AND k.t = q.t
               JOIN pools p ON p.r = q.r AND p.side = q.side AND p.entity = q.gold WHERE k.h IS NULL
             UNION ALL SELECT q.qid, 1 FROM q LEFT JOIN kg k ON k.h = q.qe AND k.r = q.r AND k.t = q.qe
               JOIN pools p ON p.r = q.r AND p.side = q.side AND p.entity = q.qe WHERE k.h IS NULL
           ) GROUP BY qid"""
    )
    con.execute(
        f"""CREATE TABLE mreq AS
            SELECT q.qid, b.start, b.size, least({NEED}, b.size - coalesce(i.n, 0)) AS need
            FROM q JOIN (SELECT r, side, min(gpos) AS start, count(*) AS size FROM pools GROUP BY r, side) b
              USING (r, side)
            LEFT JOIN inside i USING (qid)"""
    )
    steps["medium_requests"] = round(time.perf_counter() - start, 2)
    draw("medium", "SELECT * FROM mreq", "pools", "medium")
    steps["medium_draws"] = round(time.perf_counter() - start, 2) - steps["medium_requests"]
    fill("medium", "medium")
    steps["medium"] = round(time.perf_counter() - start, 2)

    start = time.perf_counter()
    con.execute(
        f"""CREATE TABLE hard AS SELECT qid, entity, d FROM (
              SELECT qid, entity,
                     (row_number() OVER (PARTITION BY qid ORDER BY score DESC, entity) - 1)::UBIGINT AS d
              FROM (SELECT q.qid, q.h, q.r, q.t, q.side, q.gold, q.qe, s.candidate AS entity, max(s.score) AS score
                    FROM read_parquet('{task["scores"]}/*.parquet') s
                    JOIN q ON q.h = s.h AND q.r = s.r AND q.t = s.t AND q.side = s.side
                    WHERE s.candidate BETWEEN 0 AND {ne - 1} AND NOT isnan(s.score)
                    GROUP BY ALL) x
              WHERE {valid})
            WHERE d < {NEED}"""
    )
    fill("hard", "hard")
    steps["hard"] = round(time.perf_counter() - start, 2)

    start = time.perf_counter()
    con.execute(
        f"""COPY (
              SELECT q.qid, q.h, q.r, q.t, q.side, x.difficulty,
                     list(e ORDER BY hash({seed}, q.qid, x.difficulty, e)) AS options
              FROM q JOIN (
                SELECT qid, 'easy' AS difficulty, entity AS e FROM easy
                UNION ALL SELECT qid, 'medium', entity FROM medium
                UNION ALL SELECT qid, 'hard', entity FROM hard
                UNION ALL SELECT qid, d.difficulty, gold FROM q, (VALUES ('easy'), ('medium'), ('hard')) d(difficulty)
              ) x USING (qid)
              GROUP BY ALL
            ) TO '{task["work"]}/duckdb-questions.parquet' (FORMAT parquet)"""
    )
    steps["assemble"] = round(time.perf_counter() - start, 2)
    seconds = time.perf_counter() - t0
    counts = dict(
        con.execute(
            f"""SELECT difficulty, count(*) FILTER (WHERE len(options) = {NEED + 1}) FROM
                read_parquet('{task["work"]}/duckdb-questions.parquet') GROUP BY ALL"""
        ).fetchall()
    )
    fills = dict(
        con.execute(
            """SELECT 'medium', count(DISTINCT qid) FROM medium_fill
               UNION ALL SELECT 'hard', count(DISTINCT qid) FROM hard_fill"""
        ).fetchall()
    )
    return {
        "seconds": round(seconds, 2),
        "steps": steps,
        "complete": counts,
        "queries_with_fill": fills,
        "peak_rss_mb": process_peak_rss_mb(),
    }


def compare(task: dict) -> dict:
    """Sampled triples and hard options of the two engines, question by question (DuckDB, not timed)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    files = ", ".join(f"'{f}'" for f in task["questions_files"])
    con.execute(
        f"""CREATE TABLE k AS SELECT h, r, t, task, difficulty, list_sort(options) AS opts
            FROM read_parquet([{files}])"""
    )
    con.execute(
        f"""CREATE TABLE d AS SELECT h, r, t, CASE side WHEN 'tail' THEN 'tail prediction' ELSE 'head prediction'
            END AS task, difficulty, list_sort(options) AS opts
            FROM read_parquet('{task["work"]}/duckdb-questions.parquet')"""
    )
    same_triples = con.execute(
        """SELECT count(*) FROM (SELECT DISTINCT h, r, t FROM k) JOIN (SELECT DISTINCT h, r, t FROM d)
           USING (h, r, t)"""
    ).fetchone()[0]
    hard = con.execute(
        """SELECT count(*), count(*) FILTER (WHERE k.opts = d.opts) FROM k JOIN d USING (h, r, t, task, difficulty)
           WHERE difficulty = 'hard'"""
    ).fetchone()
    return {"common_triples": same_triples, "hard_compared": hard[0], "hard_identical": hard[1]}


WORKERS = {"duckdb": duckdb_peer, "compare": compare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=2_000_000, help="generated KG size")
    parser.add_argument("--queries", type=int, default=100_000, help="questions per difficulty (2 per triple)")
    parser.add_argument("--candidates", type=int, default=100, help="candidate-score rows per query")
    parser.add_argument("--split", default="train", help="split the triples are sampled from")
    parser.add_argument("--duckdb-memory", default="16GB")
    parser.add_argument("--set", action="append", default=[], help="setting overrides (key=value)")
    parser.add_argument("--out", default=str(HERE / "out"))
    parser.add_argument("--skip-kgbrink", action="store_true", help="peer only (questions of an earlier run)")
    parser.add_argument("--prepare-only", action="store_true", help="make the KG and the score file, then stop")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        harness.serve_worker(WORKERS, args.worker, args.task, args.result)
        return

    from kgbrink.core.jobs import JobContext
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session
    from kgbrink.jobs import mcq

    n_triples = args.queries // 2
    config = load_config("conf/local.yaml", [f"mcq.split={args.split}", f"mcq.n_triples={n_triples}", *args.set])
    out = Path(args.out)
    work = out / f"mcq-work-{args.triples}-{args.queries}"
    work.mkdir(parents=True, exist_ok=True)
    spark = spark_session(config)
    dataset = prepare(spark, config, out, args.triples)
    scores = out / f"mcq-scores-{args.triples}-{args.queries}-{args.candidates}"
    sample = out / f"mcq-sample-{args.triples}-{args.queries}"
    t0 = time.perf_counter()
    if not (scores / "_SUCCESS").is_file() or not (sample / "_SUCCESS").is_file():
        make_scores(spark, dataset, scores, sample, n_triples, args.split, args.candidates, config.mcq.seed)
    score_rows = spark.read.parquet(str(scores)).count()
    record = {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "triples": args.triples,
        "queries": 2 * n_triples,
        "score_rows": score_rows,
        "score_file_mb": round(sum(f.stat().st_size for f in scores.glob("*.parquet")) / 2**20),
        "scores_seconds_untimed": round(time.perf_counter() - t0, 1),
        "load_before": load(),
    }
    print(json.dumps(record), flush=True)
    if args.prepare_only:
        return
    name = f"bench{args.queries}"
    path = HERE / "results" / f"mcq-{args.triples}-{args.queries}.json"
    earlier = json.loads(path.read_text()).get("kgbrink") if args.skip_kgbrink and path.is_file() else None
    if earlier:  # the kgbrink figures of the run whose questions the peer checks
        record["kgbrink"] = earlier
    if not args.skip_kgbrink:
        t0 = time.perf_counter()
        s = mcq.run(
            JobContext(spark, config),
            mcq.McqOptions(dataset=str(dataset), name=name, scores=str(scores), out=str(work / "export")),
        )
        seconds = time.perf_counter() - t0
        selection = sum(v for k, v in s.timings.items() if k != "export")
        record["kgbrink"] = {
            "seconds": round(seconds, 2),
            "selection_seconds": round(selection, 2),
            "steps": s.timings,
            "counts": s.counts,
            "jvm_peak_rss_mb": jvm_peak_rss_mb(spark),
            "load_after": load(),
        }
        print(json.dumps(record["kgbrink"]), flush=True)
    questions = spark.read.format("delta").load(str(dataset / "mcq" / name / "questions"))
    questions_files = [f.removeprefix("file:") for f in questions.inputFiles()]
    files = [f.removeprefix("file:") for f in spark.read.format("delta").load(str(dataset / "triples")).inputFiles()]
    n_entities = spark.read.format("delta").load(str(dataset / "entities")).count()
    harness.stop_spark(spark)
    task = {
        "files": files,
        "scores": str(scores),
        "sample": str(sample),
        "seed": config.mcq.seed,
        "n_triples": n_triples,
        "n_entities": n_entities,
        "split": args.split,
        "memory": args.duckdb_memory,
        "work": str(work),
    }
    record["duckdb"] = harness.run_worker(Path(__file__), "duckdb", task, work)
    record["duckdb"]["load_after"] = load()
    print(json.dumps(record["duckdb"]), flush=True)
    record["agreement"] = harness.run_worker(
        Path(__file__), "compare", {**task, "questions_files": questions_files}, work
    )
    if "kgbrink" in record:
        record["ratio"] = round(record["kgbrink"]["seconds"] / record["duckdb"]["seconds"], 2)
        record["ratio_selection"] = round(record["kgbrink"]["selection_seconds"] / record["duckdb"]["seconds"], 2)
    print(json.dumps(record["agreement"]), flush=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"ratio kgbrink / duckdb: {record.get('ratio')} (selection {record.get('ratio_selection')}) ({path})")


if __name__ == "__main__":
    main()
