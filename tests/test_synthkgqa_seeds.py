"""Algorithm 1 of paper 002 (seed subgraphs): exact draw probabilities against an independent enumeration
of the algorithm's distribution, exhaustion, induced subgraphs, determinism (spec 2.A, App. A.5)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

from kgbrink.cli import main
from kgbrink.synthkgqa.seeds import Plan, sampling_graph, seed_graphs
from tests.conftest import conf_args

# A.5: s with neighbours x (degree 1) and y (degree 3: s, a, b)
A5 = [(0, 0, 1), (0, 0, 2), (2, 1, 3), (4, 1, 2)]
S, X, Y = 0, 1, 2
CHI2_1DF_P001 = 10.83


def _triples(spark, rows):
    return spark.createDataFrame(rows, "h int, r int, t int")


def _start(spark, node, n):
    return spark.range(n).select(F.col("id").alias("sample_id"), F.lit(node).cast("int").alias("seed"))


def _exact_distribution(rows, start, n_nodes, n_edges, degree="edges"):
    """P(final node sequence) of Algorithm 1 from ``start`` by enumerating every branch (float)."""
    nbrs, deg, pairs = {}, Counter(), Counter()
    for h, _, t in set(rows):
        deg[h] += 1
        deg[t] += 1
        if h != t:
            nbrs.setdefault(h, set()).add(t)
            nbrs.setdefault(t, set()).add(h)
            pairs[frozenset((h, t))] += 1
    d = (lambda x: deg[x]) if degree == "edges" else (lambda x: len(nbrs[x]))
    out = Counter()

    def walk(nodes, edges, p):
        if len(nodes) >= n_nodes or edges >= n_edges:
            out[tuple(nodes)] += p
            return
        valid = [x for x in nodes if nbrs.get(x, set()) - set(nodes)]
        if not valid:
            out[tuple(nodes)] += p
            return
        zw = {x: math.exp(1 / d(x)) for x in valid}
        for z, wz in zw.items():
            new = sorted(nbrs[z] - set(nodes))
            nw = {n: math.exp(1 / d(n)) for n in new}
            for n, wn in nw.items():
                added = sum(pairs[frozenset((n, y))] for y in nodes)
                walk([*nodes, n], edges + added, p * wz / sum(zw.values()) * wn / sum(nw.values()))

    walk([start], 0, 1.0)
    return out


def _chi_square(observed: Counter, expected: dict, n: int) -> tuple[float, int]:
    assert set(observed) <= set(expected), set(observed) - set(expected)
    stat = sum((observed.get(k, 0) - n * p) ** 2 / (n * p) for k, p in expected.items())
    return stat, len(expected) - 1


# chi-square critical values at p = 0.001 for small degrees of freedom
CHI2_P001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88, 10: 29.59}


def _check_against_exact(spark, rows, start, plan, samples):
    graph = sampling_graph(_triples(spark, rows), plan)
    out = seed_graphs(graph, plan, _start(spark, start, samples)).collect()
    graph.unpersist()
    observed = Counter(tuple(r["nodes"]) for r in out)
    expected = _exact_distribution(rows, start, plan.n_nodes, plan.n_edges, plan.degree)
    assert sum(expected.values()) == pytest.approx(1.0)
    # merge the rare outcomes so every cell expects >= 5 samples
    rare = {k for k, p in expected.items() if p * samples < 5}
    exp = {k: p for k, p in expected.items() if k not in rare}
    obs = Counter({k: v for k, v in observed.items() if k not in rare})
    if rare:
        exp["rare"] = sum(expected[k] for k in rare)
        obs["rare"] = sum(v for k, v in observed.items() if k in rare)
    stat, dof = _chi_square(obs, exp, samples)
    assert stat < CHI2_P001[min(dof, 10)] if dof <= 10 else stat < dof + 3.1 * math.sqrt(2 * dof), (stat, dof)
    return out


def test_first_step_matches_the_softmax_of_appendix_a5(spark):
    plan = Plan(n_samples=10_000, n_nodes=2, n_edges=30)
    graph = sampling_graph(_triples(spark, A5), plan)
    out = seed_graphs(graph, plan, _start(spark, S, 10_000)).collect()
    n_x = sum(1 for r in out if r["nodes"] == [S, X])
    assert {tuple(r["nodes"]) for r in out} == {(S, X), (S, Y)}
    p = math.exp(1) / (math.exp(1) + math.exp(1 / 3))
    assert p == pytest.approx(0.660756, abs=1e-6)
    stat = (n_x - 1e4 * p) ** 2 / (1e4 * p) + (1e4 - n_x - 1e4 * (1 - p)) ** 2 / (1e4 * (1 - p))
    assert stat < CHI2_1DF_P001, (n_x, stat)
    # each sample's Q: the one triple between s and its new node, added at step 1
    by_node = {r["nodes"][1]: [tuple(q) for q in r["triples"]] for r in out}
    assert by_node == {X: [(0, 0, 1, 1)], Y: [(0, 0, 2, 1)]}


def _random_multigraph(seed, n=7, m=13):
    rng = random.Random(seed)
    rows = {(rng.randrange(n), rng.randrange(3), rng.randrange(n)) for _ in range(m)}
    rows |= {(i, 0, i + 1) for i in range(n - 1)}  # connected
    return sorted(rows)


@pytest.mark.parametrize(
    ("mode", "plan"),
    [
        ("enumerate", Plan(n_samples=4000, n_nodes=4, n_edges=30, seed=3)),
        # every pivot a hub: rejection draws, and with 2 draws the enumerated fallback too
        ("rejection", Plan(n_samples=4000, n_nodes=4, n_edges=30, seed=4, enumerate_below_degree=0, rejection_draws=2)),
        ("neighbours", Plan(n_samples=4000, n_nodes=4, n_edges=5, seed=5, degree="neighbours")),
    ],
)
def test_whole_samples_follow_the_exact_distribution(spark, mode, plan):
    rows = _random_multigraph(11)
    out = _check_against_exact(spark, rows, 0, plan, plan.n_samples)
    kg = set(rows)
    for r in out:
        nodes = r["nodes"]
        assert len(set(nodes)) == len(nodes)
        induced = sorted((h, rr, t) for h, rr, t in kg if h in nodes and t in nodes and h != t)
        assert sorted((q["h"], q["r"], q["t"]) for q in r["triples"]) == induced
        # the step of a triple is the later of its endpoints' insertion steps
        assert all(q["step"] == max(nodes.index(q["h"]), nodes.index(q["t"])) for q in r["triples"])


def test_a_small_component_exhausts_and_the_limits_stop_sampling(spark):
    rows = [(0, 0, 1), (1, 0, 2), (2, 1, 0), (5, 0, 6), (6, 0, 7), (7, 0, 8), (8, 0, 9)]
    plan = Plan(n_samples=2, n_nodes=10, n_edges=30)
    graph = sampling_graph(_triples(spark, rows), plan)
    start = spark.createDataFrame([(0, 0), (1, 5)], "sample_id long, seed int")
    out = {r["sample_id"]: r for r in seed_graphs(graph, plan, start).collect()}
    assert out[0]["exhausted"] and sorted(out[0]["nodes"]) == [0, 1, 2] and out[0]["n_edges"] == 3
    assert out[0]["steps"] == 2
    assert out[1]["exhausted"] and sorted(out[1]["nodes"]) == [5, 6, 7, 8, 9] and out[1]["n_edges"] == 4
    # the edge limit is tested before each step only: Q may overshoot it (the paper), or be trimmed (the code)
    dense = [(0, r, 1) for r in range(5)] + [(1, r, 2) for r in range(5)]
    graph = sampling_graph(_triples(spark, dense), plan)
    start = spark.createDataFrame([(0, 0)], "sample_id long, seed int")
    kept = seed_graphs(graph, Plan(n_samples=1, n_nodes=10, n_edges=3), start).first()
    assert (kept["n_nodes"], kept["n_edges"], kept["exhausted"]) == (2, 5, False)
    trimmed = seed_graphs(graph, Plan(n_samples=1, n_nodes=10, n_edges=3, trim_to_edge_limit=True), start).first()
    assert trimmed["n_edges"] == 3 and set(map(tuple, trimmed["triples"])) <= set(map(tuple, kept["triples"]))


def test_samples_are_identical_whatever_the_partitioning(spark):
    rows = _random_multigraph(5, n=40, m=120)
    plan = Plan(n_samples=200, n_nodes=4, n_edges=12, seed=9, enumerate_below_degree=3)
    results = []
    for parts in (1, 7):
        triples = _triples(spark, rows).repartition(parts)
        graph = sampling_graph(triples, plan)
        results.append(sorted(tuple(r) for r in seed_graphs(graph, plan).collect()))
        graph.unpersist()
    assert results[0] == results[1]
    assert len(results[0]) == 200 and len({r[1] for r in results[0]}) > 20


def test_the_exact_oracle_is_a_distribution():
    # the enumeration itself, on A.5 with two steps, by hand: after s-x, only s has new neighbours (y)
    out = _exact_distribution(A5, S, 3, 30)
    p = math.exp(1) / (math.exp(1) + math.exp(1 / 3))
    assert out[(S, X, Y)] == pytest.approx(p)
    assert sum(v for k, v in out.items() if k[:2] == (S, Y)) == pytest.approx(1 - p)


def test_seed_graphs_cli_on_umls_writes_the_table_and_prompts(spark, config, probe_datasets, tmp_path):
    dataset = probe_datasets["umls"]
    out = tmp_path / "prompts.jsonl"
    args = ["seed-graphs", *conf_args(config), "--dataset", dataset, "--n-samples", "50", "--seed", "3"]
    assert main([*args, "--set", "seed_graphs.n_nodes=5", "--out", str(out), "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["counts"]["samples"] == 50 and summary["counts"]["exhausted"] == 0
    assert summary["exclude_relations_not_in_dataset"] == ["P21", "P31", "P530", "P735"]
    graphs = spark.read.format("delta").load(f"{dataset}/synthkgqa/seeds/seed_graphs")
    assert graphs.where("n_nodes != 5").count() == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["sample_id"] for r in records] == list(range(50))
    first = graphs.where("sample_id = 0").first()
    rec = records[0]
    assert len(rec["nodes"]) == 5 and len(rec["triples"]) == first["n_edges"] == len(rec["flattened"].split(";"))
    assert rec["k"] == 2 and all(len(t) == 3 for t in rec["triples"])
    # the names come from the dictionaries: label (KEY), the key alone where a label is missing
    relations = {r["key"] for r in spark.read.format("delta").load(f"{dataset}/relations").collect()}
    assert all(t[1] in relations for t in rec["triples"])


def test_a_rerun_with_the_same_inputs_keeps_the_set_and_a_changed_setting_samples_again(
    spark, config, probe_datasets, tmp_path
):
    """Issue 59: the table's commit message records what the samples depend on; the same again is kept (no
    new version, the same prompt bytes), prompt_edges only rewrites the prompts, a sampling setting or
    ``--force`` samples again."""
    dataset = probe_datasets["umls"]
    base = ["seed-graphs", *conf_args(config), "--dataset", dataset, "--name", "reuse", "--seed", "5"]
    base += ["--set", "seed_graphs.n_nodes=4"]

    def once(tag: str, *extra: str) -> tuple[bytes, dict]:
        out, summary = tmp_path / f"{tag}.jsonl", tmp_path / f"{tag}.json"
        assert main([*base, *extra, "--out", str(out), "--json", str(summary)]) == 0
        return out.read_bytes(), json.loads(summary.read_text())

    first_prompts, first = once("first", "--n-samples", "20")
    again_prompts, again = once("again", "--n-samples", "20")
    version = first["outputs"]["seed_graphs"]["version"]
    path = f"{dataset}/synthkgqa/reuse/seed_graphs"
    assert "reused" not in first and again["reused"].startswith(f"{path} version {version}:")
    assert again["outputs"]["seed_graphs"]["version"] == version and again_prompts == first_prompts
    assert again["counts"]["samples"] == first["counts"]["samples"] == 20
    edges_prompts, edges = once("edges", "--n-samples", "20", "--set", "seed_graphs.prompt_edges=3")
    assert "reused" in edges and edges_prompts != first_prompts
    _, more = once("more", "--n-samples", "21")
    forced_prompts, forced = once("forced", "--n-samples", "21", "--force")
    assert "reused" not in more and more["outputs"]["seed_graphs"]["version"] == version + 1
    assert "reused" not in forced and forced["outputs"]["seed_graphs"]["version"] == version + 2
    assert more["counts"]["samples"] == forced["counts"]["samples"] == 21
    # another name sampled from the same inputs and settings: the set is copied, not sampled again
    mine = base[: base.index("--name") + 1] + ["other", *base[base.index("--name") + 2 :]]
    out, record = tmp_path / "other.jsonl", tmp_path / "other.json"
    assert main([*mine, "--n-samples", "21", "--out", str(out), "--json", str(record)]) == 0
    copied = json.loads(record.read_text())
    assert copied["reused"].startswith(f"{path} version {version + 2}:") and copied["reused"].endswith("copied")
    assert out.read_bytes() == forced_prompts and "graph" not in copied["timings"]
