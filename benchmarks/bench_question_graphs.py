"""Benchmark: SynthKGQA question-specific graphs and the shortest-path analysis (paper 002 App. C.1, D.2) on a
generated KG (the dataset of bench_okgqa.py: `kgbrink synth`, seed 7, ingested), beside networkx.

1. `kgbrink gt-questions --generate` plants Q questions of the default Table A1 types (not timed);
2. kgbrink, timed: `kgbrink question-graphs --sp-analysis` (neighbourhood, confounders, PPR, pruning,
   re-additions; and on the same search graphs sp-analysis's pairs, path counts, SP triples, Table D2,
   Fig. D9);
3. peer, in its own process: the authors' `compute_neighs_and_sp.py` on the SAME search graphs (the
   neighbourhood and the confounders, extracted by kgbrink and not timed): per question a networkx
   MultiGraph, `nx.all_shortest_paths` per seed-answer pair expanded over parallel triples (the code's
   enumeration), the walks along each shortest-path metapath (`bfs_with_rule_original`), `nx.pagerank`
   with the seeds' personalization, the top nodes, the keep-always triples and the shrink loop (its
   samples by the same seeded hashes as kgbrink, so the results can be compared). An enumeration over
   ``--max-paths`` paths or walks is cut and counted as truncated (the code would run on).

The per-question numbers are compared: triples kept by PPR, SP triples and shortest-path-metapath triples
(before their cap); mismatches are counted. The ratio is kgbrink's wall time (the job, extraction
included) over the peer's (extraction excluded).

    .venv/bin/python benchmarks/bench_question_graphs.py --triples 2000000 --questions 1000
    .venv/bin/python benchmarks/bench_question_graphs.py --triples 20000 --questions 40   # a smoke run
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

# Hubs of the generated KG reach 10^6 triples: the neighbourhoods get the caps of spec 2.D.
DEFAULT_OVERRIDES = ["question_graphs.max_expand_degree=1000", "question_graphs.max_neighbourhood_edges=50000"]


def _enumerated_paths(g, s, a, limit):
    """The code's ``compute_seed_answer_sp_paths`` for one pair: shortest node paths, each expanded over
    its parallel triples; returns (SP triples, relation sequences, node paths, truncated)."""
    import networkx as nx

    triples, rules, n_paths = set(), set(), 0
    try:
        paths = nx.all_shortest_paths(g, s, a)
        for path in paths:
            n_paths += 1
            sequences = [()]
            for x, y in zip(path, path[1:]):
                edges = list(g[x][y].values())
                triples.update(e["triple"] for e in edges)
                sequences = [q + (e["triple"][1],) for q in sequences for e in edges]
                if len(sequences) > limit:
                    return triples, rules, n_paths, True
            rules.update(sequences)
            if n_paths > limit or len(rules) > limit:
                return triples, rules, n_paths, True
    except nx.NetworkXNoPath:
        pass
    return triples, rules, n_paths, False


def _walk_triples(g, start, rule, limit):
    """The code's ``bfs_with_rule_original``: every walk from ``start`` along ``rule``; the triples of
    the complete ones, and whether the enumeration was cut at ``limit`` queued walks."""
    from collections import deque

    found, queue, queued = set(), deque([(start, ())]), 0
    while queue:
        node, used = queue.popleft()
        if len(used) == len(rule):
            found.update(used)
            continue
        if node not in g:
            continue
        for nbr in g.neighbors(node):
            for edge in g[node][nbr].values():
                if edge["triple"][1] == rule[len(used)]:
                    queue.append((nbr, used + (edge["triple"],)))
                    queued += 1
                    if queued > limit:
                        return found, True
    return found, False


def networkx_peer(task: dict) -> dict:
    """Per question, on its extracted search graph: steps 5-10 of spec 2.D with networkx (module
    docstring). Reads the Parquet parts of the search graphs one at a time."""
    import networkx as nx
    import pyarrow.parquet as pq

    cfg = task["settings"]
    questions = {q["qid"]: q for q in json.loads(Path(task["questions"]).read_text())}
    limit = task["max_paths"]
    out, truncated, seconds = {}, 0, 0.0
    for part in sorted(Path(task["graphs"]).glob("*.parquet")):
        frame = pq.read_table(part).to_pandas()
        for qid, rows in frame.groupby("qid", sort=True):
            start = time.perf_counter()
            q = questions[qid]
            triples = list(zip(rows.h.tolist(), rows.r.tolist(), rows.t.tolist()))
            hashes = dict(zip(triples, rows.hash.tolist()))
            g = nx.MultiGraph()
            g.add_nodes_from(q["seeds"])
            g.add_edges_from((h, t, {"triple": (h, r, t)}) for h, r, t in triples)
            on_sp, walks, cut = set(), set(), False
            for s in q["seeds"]:
                if s == q["answer"]:
                    continue
                sp, rules, _, cut_sp = _enumerated_paths(g, s, q["answer"], limit)
                on_sp |= sp
                cut |= cut_sp
                for rule in rules:
                    walked, cut_walk = _walk_triples(g, s, rule, limit)
                    walks |= walked
                    cut |= cut_walk
            ppr = nx.pagerank(
                g,
                alpha=cfg["alpha"],
                personalization={s: 1 for s in q["seeds"]},
                tol=cfg["tol"],
                max_iter=cfg["max_iter"],
            )
            order = sorted((n for n in ppr if ppr[n] > cfg["min_ppr"]), key=lambda n: (-round(ppr[n], 12), n))
            order = order[: cfg["top_nodes"]]
            rank = {n: i for i, n in enumerate(order)}
            gt_nodes = {x for h, _, t in q["keep_gt"] for x in (h, t)}
            by_hash = sorted(triples, key=lambda x: (hashes[x], x))
            both = {x for x in triples if x[0] in gt_nodes and x[2] in gt_nodes}
            one_end = [x for x in by_hash if (x[0] in gt_nodes) != (x[2] in gt_nodes)]
            always = both | set(
                one_end if len(both) + len(one_end) <= cfg["keep_always_cap"] else one_end[: cfg["keep_always_cap"]]
            )
            tri_rank = {x: max(rank.get(x[0], 1 << 62), rank.get(x[2], 1 << 62)) for x in triples}
            n = len(order)
            kept = {x for x in triples if tri_rank[x] < n} | always
            while len(kept) > cfg["max_triples"]:
                n = max(n - cfg["shrink_step"], 0)
                kept = {x for x in triples if tri_rank[x] < n} | always
                if n < cfg["min_top_nodes"] or n == 0:
                    kept = set([x for x in by_hash if x in kept][: cfg["max_triples"] - 2])
                    break
            capped_walks = set([x for x in by_hash if x in walks][: cfg["sp_metapath_cap"]])
            confounders = {x for x, c in zip(triples, rows.is_conf.tolist()) if c}
            final = kept | capped_walks | confounders | {tuple(x) for x in q["gt"]}
            seconds += time.perf_counter() - start
            truncated += cut
            out[qid] = {"kept": len(kept), "sp": len(on_sp), "sp_metapath": len(walks), "final": len(final), "cut": cut}
    return {
        "seconds": round(seconds, 2),
        "questions": len(out),
        "truncated": truncated,
        "per_question": out,
        "peak_rss_mb": process_peak_rss_mb(),
    }


WORKERS = {"networkx": networkx_peer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=2_000_000)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--max-paths", type=int, default=200_000, help="peer: enumeration cut (paths or walks)")
    parser.add_argument("--set", action="append", default=[], help="setting overrides (key=value)")
    parser.add_argument("--out", default=str(HERE / "out"))
    parser.add_argument("--skip-peer", action="store_true", help="kgbrink only: no extraction, no networkx")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        harness.serve_worker(WORKERS, args.worker, args.task, args.result)
        return

    from pyspark.sql import functions as F

    from kgbrink.core import catalog
    from kgbrink.core.jobs import JobContext
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session
    from kgbrink.graph.hashing import u64
    from kgbrink.jobs import gt_questions, question_graphs
    from kgbrink.synthkgqa import question_graphs as synthkgqa_question_graphs

    overrides = [*DEFAULT_OVERRIDES, *args.set]
    config = load_config("conf/local.yaml", overrides)
    out = Path(args.out)
    work = out / f"question-graphs-work-{args.triples}"
    spark = spark_session(config)
    dataset = prepare(spark, config, out, args.triples)
    types = config.gt_questions.types
    per_type = -(-args.questions // len(types))
    name = f"bench-{args.questions}"
    record = {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "triples": args.triples,
        "overrides": overrides,
        "load_before": load(),
    }
    t0 = time.perf_counter()
    planted = gt_questions.run(
        JobContext(spark, config),
        gt_questions.GtQuestionOptions(generate=True, name=name, dataset=str(dataset), per_type=per_type, split="test"),
    )
    record["questions"] = {"seconds": round(time.perf_counter() - t0, 2), "counts": planted.counts}
    print(json.dumps(record["questions"]), flush=True)
    options = question_graphs.QuestionGraphOptions(name=name, dataset=str(dataset), sp_analysis=True)
    t0 = time.perf_counter()
    qg = question_graphs.question_graphs(JobContext(spark, config), options)
    t1 = time.perf_counter()
    record["kgbrink"] = {
        "seconds": round(t1 - t0, 2),
        "question_graphs": {"seconds": round(t1 - t0, 2), "steps": qg.timings, "counts": qg.counts},
        "table_d2": qg.results,
        "jvm_peak_rss_mb": jvm_peak_rss_mb(spark),
        "load_after": load(),
    }
    print(json.dumps({k: v for k, v in record["kgbrink"].items() if k != "table_d2"}), flush=True)
    if args.skip_peer:
        harness.stop_spark(spark)
        path = HERE / "results" / f"question-graphs-{args.triples}-{args.questions}-kgbrink.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"kgbrink only ({path})")
        return

    # the peer's input: the same search graphs, extracted by kgbrink (not timed), whole questions per file
    cfg = config.question_graphs
    read = lambda table: spark.read.format("delta").load(catalog.path(table, dataset=str(dataset), questions=name))  # noqa: E731
    triples = spark.read.format("delta").load(str(dataset / "triples")).select("h", "r", "t").distinct()
    prepared, paths, _ = synthkgqa_question_graphs.prepare_questions(
        read("synthkgqa.gt_questions"),
        spark.read.format("delta").load(str(dataset / "entities")),
        spark.read.format("delta").load(str(dataset / "relations")),
    )
    prepared = prepared.localCheckpoint()
    graph, _ = synthkgqa_question_graphs.search_graph(triples, prepared, paths, cfg)
    graph = graph.withColumn("hash", u64(cfg.seed, "qid", "h", "r", "t"))
    parts = max(1, args.questions // 25)
    graph.repartition(parts, "qid").sortWithinPartitions("qid").write.mode("overwrite").parquet(str(work / "graphs"))
    rows = prepared.select(
        "qid",
        "seeds",
        "answer",
        F.transform("gt", lambda x: F.array(x["h"], x["r"], x["t"])).alias("gt"),
        F.transform("keep_gt", lambda x: F.array(x["h"], x["r"], x["t"])).alias("keep_gt"),
    ).collect()
    (work / "questions.json").write_text(
        json.dumps(
            [{**r.asDict(), "gt": [tuple(x) for x in r.gt], "keep_gt": [tuple(x) for x in r.keep_gt]} for r in rows]
        )
    )
    sizes = {r.id: r for r in read("synthkgqa.question_graph_sizes").collect()}
    sp_counts = {r.id: r["count"] for r in read("synthkgqa.sp_triples").groupBy("id").count().collect()}
    harness.stop_spark(spark)
    task = {
        "graphs": str(work / "graphs"),
        "questions": str(work / "questions.json"),
        "settings": vars(cfg),
        "max_paths": args.max_paths,
    }
    peer = harness.run_worker(Path(__file__), "networkx", task, work)
    compared = [q for q, v in peer["per_question"].items() if not v["cut"]]
    mismatch = {
        "kept_ppr": sum(peer["per_question"][q]["kept"] != sizes[q].n_kept_ppr for q in compared),
        "sp_triples": sum(peer["per_question"][q]["sp"] != sp_counts.get(q, 0) for q in compared),
        "sp_metapath": sum(
            min(peer["per_question"][q]["sp_metapath"], cfg.sp_metapath_cap) != sizes[q].n_sp_metapath for q in compared
        ),
    }
    record["networkx"] = {
        **{k: v for k, v in peer.items() if k != "per_question"},
        "compared": len(compared),
        "mismatches": mismatch,
        "load_after": load(),
    }
    record["ratio"] = round(record["kgbrink"]["seconds"] / max(peer["seconds"], 1e-9), 2)
    print(json.dumps(record["networkx"]), flush=True)
    path = HERE / "results" / f"question-graphs-{args.triples}-{args.questions}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"ratio kgbrink / networkx: {record['ratio']} ({path})")


if __name__ == "__main__":
    main()
