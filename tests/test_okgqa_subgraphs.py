"""OKGQA question subgraphs: a networkx oracle of the paper's definition, caps, and the CLI end to end."""

from __future__ import annotations

import json
import random

import networkx as nx
import pytest
from mlflow.tracking import MlflowClient
from pyspark.sql import functions as F

from kgbrink.cli import main
from kgbrink.core.settings import OkgqaSubgraphSettings
from kgbrink.okgqa.subgraphs import question_subgraphs
from tests.conftest import conf_args


def _oracle(triples, seeds, collapse):
    """The paper's subgraph with networkx: every triple incident to a seed or a seed's neighbour, PPR
    on the directed graph of the ball (MultiDiGraph: a triple adds weight 1; DiGraph when collapsed),
    personalization 1 on the seeds, nodes below 1e-5 pruned, triples kept with both ends kept."""
    near = set(seeds) | {x for h, _, t in triples for x in (h, t) if h in seeds or t in seeds}
    ball = {(h, r, t) for h, r, t in triples if h in near or t in near}
    g = nx.DiGraph() if collapse else nx.MultiDiGraph()
    g.add_nodes_from(seeds)
    g.add_edges_from((h, t) for h, _, t in ball)
    ppr = nx.pagerank(g, alpha=0.85, personalization={s: 1 for s in seeds}, tol=1e-6, max_iter=100)
    return {(h, r, t): (ppr[h], ppr[t]) for h, r, t in ball if ppr[h] >= 1e-5 and ppr[t] >= 1e-5}, len(ball)


@pytest.mark.parametrize("collapse", [False, True])
def test_subgraphs_equal_the_networkx_oracle_on_random_kgs(spark, collapse):
    rng = random.Random(5 + collapse)
    # one KG with hubs and a sparse tail, so that pruning removes something: 0..4 are hubs
    triples = {
        (rng.choice([rng.randrange(5), rng.randrange(400)]), rng.randrange(4), rng.randrange(400)) for _ in range(1500)
    }
    questions = {f"q{i}": sorted({rng.randrange(400) for _ in range(rng.randint(1, 3))}) for i in range(25)}
    kg = spark.createDataFrame(sorted(triples), "h int, r int, t int")
    seeds = spark.createDataFrame([(q, s) for q, ss in questions.items() for s in ss], "qid string, id int")
    cfg = OkgqaSubgraphSettings(collapse_parallel=collapse)
    pruned, sizes = question_subgraphs(kg.repartition(3), seeds, cfg)
    got = {}
    for row in pruned.collect():
        got.setdefault(row.qid, {})[(row.h, row.r, row.t)] = (row.ppr_h, row.ppr_t)
    size_rows = {row.qid: row for row in sizes.collect()}
    pruned_any = False
    for q, ss in questions.items():
        expected, n_raw = _oracle(triples, ss, collapse)
        assert got.get(q, {}).keys() == expected.keys(), q
        for key, (ph, pt) in expected.items():
            assert got[q][key] == pytest.approx((ph, pt), abs=1e-9)
        assert size_rows[q].n_edges_raw == n_raw and size_rows[q].n_edges_pruned == len(expected)
        assert size_rows[q].ppr_converged and size_rows[q].caps_applied == []
        pruned_any |= len(expected) < n_raw
    assert pruned_any


def test_caps_are_applied_and_recorded(spark):
    # 0 - 1 - {10..29} and 1 is a hub of degree 21: with max_expand_degree 5, q's ball stops at 1
    kg = spark.createDataFrame([(0, 0, 1)] + [(1, 1, n) for n in range(10, 30)], "h int, r int, t int")
    seeds = spark.createDataFrame([("q", 0), ("p", 1)], "qid string, id int")
    cfg = OkgqaSubgraphSettings(max_expand_degree=5, max_subgraph_edges=8)
    pruned, sizes = question_subgraphs(kg, seeds, cfg)
    rows = {r.qid: r for r in sizes.collect()}
    assert (rows["q"].n_edges_raw, rows["q"].hubs_not_expanded, rows["q"].caps_applied) == (
        1,
        1,
        ["max_expand_degree: 1 hubs"],
    )
    # p's seed is the hub itself: expanded, then capped; its 21 triples are all incident to the seed, so
    # all are kept (seed triples are never dropped) and the cap is still recorded
    assert rows["p"].n_edges_before_cap == 21 and rows["p"].caps_applied == ["max_subgraph_edges: 21 edges"]
    assert pruned.where("qid = 'q'").count() == 1


@pytest.fixture(scope="module")
def umls_questions(tmp_path_factory, reference):
    keys = [line.split("\t")[1].strip() for line in (reference / "probe" / "umls" / "entities.dict").open()]
    path = tmp_path_factory.mktemp("okgqa") / "umls-questions.jsonl"
    rng = random.Random(3)
    lines = [json.dumps({"qid": f"q{i}", "entities": rng.sample(keys, 2)}) for i in range(40)]
    lines[5] = json.dumps({"qid": "q5", "entities": [keys[0], "no_such_entity"]})  # line 6: one unknown key
    lines.insert(10, "{not json")  # line 11
    lines.append(json.dumps({"qid": "q1", "entities": [keys[1]]}))  # line 42: a repeated qid
    lines.append(json.dumps({"id": 7, "entities": [keys[2]]}))  # line 43: numeric id
    path.write_text("\n".join(lines) + "\n\n")
    return path


def test_okgqa_subgraphs_cli_on_umls_quarantines_and_tracks(spark, config, probe_datasets, umls_questions, tmp_path):
    dataset = probe_datasets["umls"]
    args = ["okgqa-subgraphs", *conf_args(config), "--dataset", dataset, "--questions", str(umls_questions)]
    assert main([*args, "--json", str(tmp_path / "fail.json")]) != 0  # 3 bad of 84 keys > 1%
    assert main([*args, "--set", "okgqa_subgraph.max_bad_fraction=0.05", "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["counts"]["questions"] == 41 and summary["counts"]["subgraphs"] == 41
    assert {k: v for k, v in summary["counts"].items() if k.startswith("quarantined_")} == {
        "quarantined_duplicate_qid": 1,
        "quarantined_malformed_json": 1,
        "quarantined_unknown_entity": 1,
    }
    bad = spark.read.format("delta").load(f"{dataset}/okgqa/umls-questions/quarantine")
    assert sorted((r.line_number, r.reason, r.entity) for r in bad.collect()) == [
        (6, "unknown_entity", "no_such_entity"),
        (11, "malformed_json", None),
        (42, "duplicate_qid", None),
    ]
    sizes = spark.read.format("delta").load(f"{dataset}/okgqa/umls-questions/subgraph_sizes")
    assert sizes.where(F.col("n_edges_pruned") > F.col("n_edges_raw")).count() == 0
    assert sizes.where("qid = '7'").count() == 1
    run = MlflowClient(tracking_uri=config.tracking.uri).get_run(summary["mlflow_run_id"])
    assert run.data.tags["job"] == "okgqa-subgraphs" and run.data.metrics["count.subgraphs"] == 41
