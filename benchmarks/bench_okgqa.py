"""Benchmark: OKGQA-P on a generated KG (`kgbrink synth`, seed 7), each part beside its peer in one run.

1. ``subgraphs``: `kgbrink okgqa-subgraphs` for Q questions of 1-3 seeded random entities (2-hop edge ball,
   caps max_expand_degree / max_subgraph_edges, PPR, pruning at 1e-5). Peer: networkx (the papers' own
   implementation) on the same extracted edge balls: MultiDiGraph, ``nx.pagerank`` with the question's
   personalization, the same pruning; the pruned edge counts must agree with kgbrink's.
2. ``sweep``: `kgbrink okgqa-sweep --scope kg` (RS, RR, ER, ED at 0.2 .. 1.0, seed 42: perturbed KGs
   written as Delta, then ATS, SC2D, SD2 of each). Peer: DuckDB computing SD2 and SC2D (per-relation
   triangle counts by the same degree-ordered wedge join) of the same 20 perturbed KGs against the original,
   read from the Delta tables' Parquet files.

    .venv/bin/python benchmarks/bench_okgqa.py --triples 2000000 --parts subgraphs sweep
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import generated_kg, jvm_peak_rss_mb, load, machine, process_peak_rss_mb

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.session import spark_session
from kgbrink.jobs import ingest, okgqa, perturb


def prepare(spark, config, out: Path, size: int) -> Path:
    kg, dataset = generated_kg(config, out, size), out / f"okgqa-ds-{size}"
    if not (dataset / "triples" / "_delta_log").is_dir():
        ingest.run(
            JobContext(spark, config), ingest.IngestOptions(dataset=str(dataset), format="wikidata5m", input=str(kg))
        )
    return dataset


def questions_file(spark, dataset: Path, n: int, path: Path) -> Path:
    entities = spark.read.format("delta").load(str(dataset / "entities"))
    total = entities.count()
    rng = random.Random(1)
    picks = [[rng.randrange(total) for _ in range(rng.randint(1, 3))] for _ in range(n)]
    wanted = sorted({i for p in picks for i in p})
    keys = {r.id: r.key for r in entities.where(entities.id.isin(wanted)).collect()}
    path.write_text(
        "".join(json.dumps({"qid": f"q{i}", "entities": [keys[e] for e in p]}) + "\n" for i, p in enumerate(picks))
    )
    return path


def networkx_peer(spark, config, dataset: Path, questions: Path, sizes) -> dict:
    """The raw edge balls (extracted by kgbrink, not timed), then networkx PPR and pruning per question."""
    import networkx as nx
    from pyspark.sql import functions as F

    from kgbrink.core.files import read_lines
    from kgbrink.graph import khop
    from kgbrink.okgqa import questions as okgqa_questions

    cfg = config.okgqa_subgraph
    kg = spark.read.format("delta").load(str(dataset / "triples")).select("h", "r", "t")
    parsed = okgqa_questions.parse_lines(read_lines(spark, {"q": [str(questions)]}))
    seeds, _ = okgqa_questions.resolve_entities(parsed, spark.read.format("delta").load(str(dataset / "entities")))
    visited, _ = khop.expand(kg, seeds, cfg.k - 1, max_expand_degree=cfg.max_expand_degree)
    raw, _ = khop.cap_edges(khop.edge_ball(kg, visited, cfg.k), seeds, cfg.max_subgraph_edges, cfg.seed)
    edges = raw.toPandas()
    seed_sets = seeds.groupBy("qid").agg(F.collect_list("id").alias("nodes")).toPandas()
    groups = dict(tuple(edges.groupby("qid")))
    start = time.perf_counter()
    pruned_edges = {}
    for qid, nodes in zip(seed_sets.qid, seed_sets.nodes):
        g = nx.MultiDiGraph()
        g.add_nodes_from(nodes)
        part = groups.get(qid)
        if part is not None:
            g.add_edges_from(zip(part.h.tolist(), part.t.tolist()))
        ppr = nx.pagerank(g, alpha=cfg.alpha, personalization={s: 1 for s in nodes}, tol=cfg.tol, max_iter=cfg.max_iter)
        keep = {v for v, p in ppr.items() if p >= cfg.threshold}
        pruned_edges[qid] = 0 if part is None else int(sum(h in keep and t in keep for h, t in zip(part.h, part.t)))
    seconds = time.perf_counter() - start
    mismatches = sum(pruned_edges[q] != n for q, n in sizes.items())
    return {"seconds": round(seconds, 2), "raw_edges": len(edges), "pruned_edge_mismatches": mismatches}


def duckdb_peer(dataset: Path, files: dict, threads: int) -> dict:
    """SD2 and SC2D of every perturbed KG against the original in DuckDB (same definitions as kgbrink)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    start = time.perf_counter()
    con.execute(f"CREATE TABLE o AS SELECT DISTINCT h, r, t FROM read_parquet({files['original']!r})")

    def clustering(src: str, name: str) -> None:
        con.execute(f"""
        CREATE OR REPLACE TABLE {name}_e AS SELECT DISTINCT r, least(h, t) AS u, greatest(h, t) AS v FROM {src} WHERE h <> t;
        CREATE OR REPLACE TABLE {name}_d AS SELECT r, x, count(*) AS deg FROM
          (SELECT r, u AS x FROM {name}_e UNION ALL SELECT r, v FROM {name}_e) GROUP BY r, x;
        CREATE OR REPLACE TABLE {name}_o AS SELECT e.r,
            CASE WHEN (du.deg, e.u) < (dv.deg, e.v) THEN e.u ELSE e.v END AS a,
            CASE WHEN (du.deg, e.u) < (dv.deg, e.v) THEN e.v ELSE e.u END AS b
          FROM {name}_e e JOIN {name}_d du ON du.r = e.r AND du.x = e.u JOIN {name}_d dv ON dv.r = e.r AND dv.x = e.v;
        CREATE OR REPLACE TABLE {name}_c AS
          WITH w AS (SELECT o1.r, o1.a, o1.b AS b1, o2.b AS b2 FROM {name}_o o1 JOIN {name}_o o2
                     ON o1.r = o2.r AND o1.a = o2.a AND o1.b < o2.b),
               tri AS (SELECT w.* FROM w SEMI JOIN {name}_e e ON e.r = w.r AND e.u = least(w.b1, w.b2) AND e.v = greatest(w.b1, w.b2)),
               per AS (SELECT r, x, count(*) AS n FROM (SELECT r, a AS x FROM tri UNION ALL SELECT r, b1 FROM tri
                       UNION ALL SELECT r, b2 FROM tri) GROUP BY r, x)
          SELECT d.x AS node, sum(CASE WHEN d.deg >= 2 THEN 2.0 * coalesce(per.n, 0) / (d.deg * (d.deg - 1)) ELSE 0 END) AS c
          FROM {name}_d d LEFT JOIN per ON per.r = d.r AND per.x = d.x GROUP BY d.x;
        """)

    def degrees(src: str) -> str:
        return f"(SELECT x AS node, count(*) AS d FROM (SELECT h AS x FROM {src} UNION ALL SELECT t FROM {src}) GROUP BY x)"

    clustering("o", "og")
    ro = con.execute("SELECT count(DISTINCT r) FROM o").fetchone()[0]
    out = {}
    for key, (paths, level) in sorted(files["perturbed"].items()):
        con.execute(
            f"CREATE OR REPLACE TABLE p AS SELECT DISTINCT h, r, t FROM read_parquet({paths!r}) "
            f"WHERE list_contains(levels, {level!r})"
        )
        rp = max(con.execute("SELECT count(DISTINCT r) FROM p").fetchone()[0], 1)
        sd2 = con.execute(
            f"SELECT 1 / (1 + sqrt(sum(power(coalesce(a.d, 0) / {ro} - coalesce(b.d, 0) / {rp}, 2)))) "
            f"FROM {degrees('o')} a FULL OUTER JOIN {degrees('p')} b USING (node)"
        ).fetchone()[0]
        clustering("p", "pg")
        sc2d = con.execute(
            f"SELECT 1 / (1 + sqrt(sum(power(coalesce(a.c, 0) / {ro} - coalesce(b.c, 0) / {rp}, 2)))) "
            "FROM og_c a FULL OUTER JOIN pg_c b USING (node)"
        ).fetchone()[0]
        out[key] = {"sd2": sd2, "sc2d": sc2d}
    seconds = time.perf_counter() - start
    con.close()
    return {"seconds": round(seconds, 2), "metrics": out, "peak_rss_mb": process_peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=2_000_000)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--parts", nargs="+", default=["subgraphs", "sweep"], choices=["subgraphs", "sweep"])
    parser.add_argument("--methods", default=None, help="sweep: comma-separated methods (default: all four)")
    parser.add_argument("--levels", default=None, help="sweep: comma-separated levels (default: 0.2,0.4,...,1.0)")
    parser.add_argument("--set", action="append", default=[], help="setting overrides (key=value)")
    parser.add_argument("--out", default=str(HERE / "out"))
    args = parser.parse_args()
    overrides = ["okgqa_subgraph.max_expand_degree=1000", "okgqa_subgraph.max_subgraph_edges=10000", *args.set]
    config = load_config("conf/local.yaml", overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spark = spark_session(config)
    threads = spark.sparkContext.defaultParallelism
    dataset = prepare(spark, config, out, args.triples)
    record = {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "triples": args.triples,
        "overrides": overrides,
        "load_before": load(),
    }
    if "subgraphs" in args.parts:
        qfile = questions_file(spark, dataset, args.questions, out / f"okgqa-questions-{args.triples}.jsonl")
        t0 = time.perf_counter()
        s = okgqa.subgraphs(
            JobContext(spark, config), okgqa.SubgraphOptions(questions=str(qfile), dataset=str(dataset), name="bench")
        )
        seconds = time.perf_counter() - t0
        sizes = {
            r.qid: r.n_edges_pruned
            for r in spark.read.format("delta").load(str(dataset / "okgqa/bench/subgraph_sizes")).collect()
        }
        peer = networkx_peer(spark, config, dataset, qfile, sizes)
        record["subgraphs"] = {
            "seconds": round(seconds, 2),
            "steps": s.timings,
            "counts": s.counts,
            "networkx": peer,
            "ratio": round(seconds / peer["seconds"], 2),
            "load_after": load(),
        }
        print(json.dumps(record["subgraphs"]), flush=True)
    if "sweep" in args.parts:
        t0 = time.perf_counter()
        options = perturb.PerturbOptions(
            dataset=str(dataset),
            scope="kg",
            methods=args.methods.split(",") if args.methods else None,
            levels=[float(x) for x in args.levels.split(",")] if args.levels else None,
        )
        s = perturb.okgqa_sweep(JobContext(spark, config), options)
        seconds = time.perf_counter() - t0
        perturbed = spark.read.format("delta").load(str(dataset / "okgqa/kg/perturbed"))
        files = {"original": spark.read.format("delta").load(str(dataset / "triples")).inputFiles(), "perturbed": {}}
        for r in s.results:  # one graph per (method, level); the partition of (method, seed) holds every level
            part = perturbed.where(perturbed.method == r["method"])
            files["perturbed"][f"{r['method']}-{r['level']}"] = (part.inputFiles(), float(r["level"]))
        peer = duckdb_peer(dataset, files, threads)
        ours = {f"{r['method']}-{r['level']}": r for r in s.results}
        worst = max(abs(ours[k][m] - v[m]) for k, v in peer["metrics"].items() for m in ("sd2", "sc2d"))
        record["sweep"] = {
            "seconds": round(seconds, 2),
            "steps": s.timings,
            "perturb_steps": s.extra["perturb"]["timings"],
            "duckdb_seconds": peer["seconds"],
            "duckdb_peak_rss_mb": peer["peak_rss_mb"],
            "ratio": round(seconds / peer["seconds"], 2),
            "max_metric_difference": worst,
            "results": s.results,
            "load_after": load(),
        }
        print(json.dumps({k: v for k, v in record["sweep"].items() if k != "results"}), flush=True)
    record["spark_driver_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    record["python_peak_rss_mb"] = process_peak_rss_mb()
    suffix = "" if not (args.methods or args.levels) else f"-{args.methods or 'all'}-{args.levels or 'all'}"
    suffix = ("" if len(args.parts) == 2 else f"-{args.parts[0]}") + suffix
    results = HERE / "results" / f"okgqa-{args.triples}{suffix.replace(',', '+')}.json"
    results.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"written {results}")


if __name__ == "__main__":
    main()
