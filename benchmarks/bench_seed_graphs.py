"""Benchmark: `kgbrink seed-graphs` (paper 002 Algorithm 1) on a generated KG beside a numpy peer.

kgbrink samples S seed subgraphs in lock-step on Spark (the dataset of bench_okgqa.py: `kgbrink synth`,
seed 7, ingested). Peer, in its own process: the authors' approach -- the whole KG in memory, one sample
after the other -- with numpy: a CSR of the distinct undirected neighbours and of the non-loop triples by
endpoint pair, then Algorithm 1 per sample in Python (exact Softmax(1/d) draws with numpy's generator).
Both use the same settings and excluded relations; the distributions are compared by mean nodes, mean triples and exhausted share.

    .venv/bin/python benchmarks/bench_seed_graphs.py --triples 20000000 --samples 10000
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


def numpy_peer(task: dict) -> dict:
    """Algorithm 1 for ``samples`` start nodes, the KG held in numpy arrays (CSR by node)."""
    import numpy as np
    import pyarrow.dataset as ds

    t0 = time.perf_counter()
    table = ds.dataset(task["files"], format="parquet").to_table(columns=["h", "r", "t"])
    h, r, t = (table.column(c).to_numpy().astype(np.int64) for c in ("h", "r", "t"))
    keep = ~np.isin(r, task["exclude"])
    h, r, t = h[keep], r[keep], t[keep]
    eb, rb = int(max(h.max(), t.max())).bit_length(), int(r.max()).bit_length()  # id bits (eb + eb + rb < 63)
    emask = (1 << eb) - 1
    key = np.unique((h << (eb + rb)) | (r << eb) | t)  # distinct triples
    h, r, t = key >> (eb + rb), (key >> eb) & ((1 << rb) - 1), key & emask
    n = int(max(h.max(), t.max())) + 1
    degree = np.bincount(h, minlength=n) + np.bincount(t, minlength=n)
    loop = h == t
    a, b = np.concatenate([h[~loop], t[~loop]]), np.concatenate([t[~loop], h[~loop]])
    pair = np.unique((a << eb) | b)
    src, dst = pair >> eb, pair & emask
    start = np.searchsorted(src, np.arange(n + 1))
    n_nbrs = np.diff(start)
    d = degree if task["degree"] == "edges" else n_nbrs
    # triples by unordered endpoint pair, for Q
    u, v = np.minimum(h[~loop], t[~loop]), np.maximum(h[~loop], t[~loop])
    pkey = (u << eb) | v
    order = np.argsort(pkey, kind="stable")
    pkey_sorted = pkey[order]
    build = time.perf_counter() - t0

    rng = np.random.default_rng(task["seed"])
    nodes_with_triples = np.flatnonzero(degree > 0)
    n_nodes, n_edges = task["n_nodes"], task["n_edges"]
    sizes, edges, exhausted = [], [], 0
    t1 = time.perf_counter()
    for s in rng.choice(nodes_with_triples, size=task["samples"]):
        nodes, in_set, q = [int(s)], {int(s)}, 0
        while len(nodes) < n_nodes and q < n_edges:
            members = np.fromiter(in_set, np.int64)
            valid = [x for x in nodes if n_nbrs[x] > np.isin(dst[start[x] : start[x + 1]], members).sum()]
            if not valid:
                exhausted += 1
                break
            w = np.exp(1.0 / d[valid])
            z = valid[rng.choice(len(valid), p=w / w.sum())]
            nb = dst[start[z] : start[z + 1]]
            cand = nb[~np.isin(nb, members)]
            w = np.exp(1.0 / d[cand])
            new = int(cand[rng.choice(len(cand), p=w / w.sum())])
            for y in nodes:
                k = (min(new, y) << eb) | max(new, y)
                q += int(np.searchsorted(pkey_sorted, k, "right") - np.searchsorted(pkey_sorted, k, "left"))
            nodes.append(new)
            in_set.add(new)
        sizes.append(len(nodes))
        edges.append(q)
    sample = time.perf_counter() - t1
    return {
        "seconds": round(build + sample, 2),
        "build_seconds": round(build, 2),
        "sample_seconds": round(sample, 2),
        "mean_nodes": float(np.mean(sizes)),
        "mean_edges": float(np.mean(edges)),
        "exhausted": exhausted,
        "peak_rss_mb": process_peak_rss_mb(),
    }


WORKERS = {"numpy": numpy_peer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=2_000_000)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--set", action="append", default=[], help="setting overrides (key=value)")
    parser.add_argument("--out", default=str(HERE / "out"))
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
    from kgbrink.jobs import seed_graphs

    config = load_config("conf/local.yaml", args.set)
    out = Path(args.out)
    spark = spark_session(config)
    dataset = prepare(spark, config, out, args.triples)
    cfg = config.seed_graphs
    record = {
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "triples": args.triples,
        "samples": args.samples,
        "settings": {k: v for k, v in vars(cfg).items()},
        "load_before": load(),
    }
    t0 = time.perf_counter()
    s = seed_graphs.run(
        JobContext(spark, config),
        seed_graphs.SeedGraphOptions(dataset=str(dataset), name="bench", n_samples=args.samples),
    )
    seconds = time.perf_counter() - t0
    record["kgbrink"] = {
        "seconds": round(seconds, 2),
        "steps": s.timings,
        "counts": s.counts,
        "mean_nodes": s.extra["mean_nodes"],
        "mean_edges": s.extra["mean_edges"],
        "jvm_peak_rss_mb": jvm_peak_rss_mb(spark),
        "load_after": load(),
    }
    print(json.dumps(record["kgbrink"]), flush=True)
    files = [f.removeprefix("file:") for f in spark.read.format("delta").load(str(dataset / "triples")).inputFiles()]
    relations = spark.read.format("delta").load(str(dataset / "relations"))
    exclude = [r.id for r in relations.where(relations.key.isin(cfg.exclude_relations)).collect()]
    harness.stop_spark(spark)
    task = {
        "files": files,
        "samples": args.samples,
        "seed": cfg.seed,
        "n_nodes": cfg.n_nodes,
        "n_edges": cfg.n_edges,
        "degree": cfg.degree,
        "exclude": exclude,
    }
    record["numpy"] = harness.run_worker(Path(__file__), "numpy", task, out / "seed-graphs-work")
    record["numpy"]["load_after"] = load()
    record["ratio"] = round(seconds / record["numpy"]["seconds"], 2)
    print(json.dumps(record["numpy"]), flush=True)
    path = HERE / "results" / f"seed-graphs-{args.triples}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"ratio kgbrink / numpy: {record['ratio']} ({path})")


if __name__ == "__main__":
    main()
