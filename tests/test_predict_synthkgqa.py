"""kgbrink predict --benchmark synthkgqa (issue 58, paper 002 §2): questions written from seed subgraphs by
a scripted writer on 127.0.0.1, parsed (spec 3.2) and validated by gt-questions. The writer asks for the
first triple of its graph (a one-hop question); the expected questions are read off the seed graphs here."""

from __future__ import annotations

import json
import re

import pytest

from kgbrink.cli import main
from kgbrink.core.delta import read_table
from tests.conftest import conf_args, own_copy
from tests.llm_server import LlmServer

N_SAMPLES = 6
TRIPLE = re.compile(r"^(.*) \(([^()]+)\)-(.*) \(([^()]+)\)-(.*) \(([^()]+)\)$")


@pytest.fixture(scope="module")
def seeded(spark, config, synth_5000, tmp_path_factory):
    dataset, _ = own_copy(synth_5000, tmp_path_factory, "predict-synthkgqa")
    args = ["seed-graphs", *conf_args(config), "--dataset", str(dataset), "--name", "sg"]
    assert main([*args, "--n-samples", str(N_SAMPLES), "--seed", "5"]) == 0
    return dataset


def _first_triple(body) -> re.Match:
    graph = body["messages"][-1]["content"].removeprefix("Graph: ")
    return TRIPLE.match(graph.split("; ")[0])


def writer(body):
    """A.1's five fields for the graph's first triple: "what is <r> of <h>?", answer t."""
    h, hk, r, rk, t, tk = _first_triple(body).groups()
    return {
        "content": f"Question: What is the {r} of {h}?,\nNodes mentioned in the question: {h} ({hk}),\n"
        f"Answer: {t} ({tk}),\nTriples used: {h} ({hk})-{r} ({rk})-{t} ({tk}).\n"
        f"SPARQL query: SELECT ?answer WHERE {{wd:{hk} wdt:{rk} ?answer.}}"
    }


def sloppy(body):
    """The same, but its answer is a node outside the seed graph."""
    return {"content": re.sub(r"(?m)^Answer: .*$", "Answer: Atlantis (Q0),", writer(body)["content"])}


def test_written_questions_are_parsed_and_validated_by_gt_questions(spark, config, seeded, tmp_path):
    dataset = seeded
    graphs = {r.sample_id: r for r in read_table(spark, f"{dataset}/synthkgqa/sg/seed_graphs").collect()}
    keys = {
        kind: {r.id: r.key for r in read_table(spark, f"{dataset}/{kind}").collect()}
        for kind in ("entities", "relations")
    }
    with LlmServer({"writer": writer, "sloppy": sloppy}) as server:
        docs = {}
        for model in ("writer", "sloppy"):
            out = tmp_path / f"{model}.json"
            args = ["predict", *conf_args(config), "--benchmark", "synthkgqa", "--dataset", str(dataset)]
            args += ["--name", "sg", "--model", model, "--base-url", server.base_url, "--json", str(out)]
            code = main([*args, "--set", "predict.max_bad_fraction=1.0"])
            docs[model] = json.loads(out.read_text())
            assert code == (0 if model == "writer" else 1), docs[model].get("error")
        assert server.stats()["requests"] == 2 * N_SAMPLES
    doc = docs["writer"]
    assert doc["counts"]["prompts"] == doc["counts"]["written"] == N_SAMPLES
    # the written questions: the first triple of each seed graph, by key
    expected = {}
    for sample_id, graph in graphs.items():
        first = min(graph.triples, key=lambda q: q.step) if graph.triples else None
        expected[str(sample_id)] = [keys["entities"][first.h], keys["relations"][first.r], keys["entities"][first.t]]
    written = [json.loads(line) for line in open(next(a for a in doc["artifacts"] if a.endswith("written.jsonl")))]
    assert {w["id"]: w["answer_subgraph"] for w in written} == {k: [v] for k, v in expected.items()}
    assert all(w["writer_model"] == "writer" and w["k"] == 2 for w in written)
    assert doc["params"]["questions_set"] == f"sg-writer-{doc['params']['fingerprint'][:8]}"
    questions = read_table(spark, f"{dataset}/synthkgqa/{doc['params']['questions_set']}/gt_questions").collect()
    quarantined = doc["counts"].get("gt_quarantined", 0)
    assert len(questions) + quarantined == N_SAMPLES and len(questions) >= N_SAMPLES - 1
    for q in questions:
        assert q.n_hops == 1 and q.answer_in_set, q
    # the sloppy writer's answers name a node outside the graph: each quarantined with the parser's reason
    assert "no written question parsed" in docs["sloppy"]["error"]
    out = docs["sloppy"]["outputs"]["predict_quarantine"]["path"]
    assert {r.reason for r in read_table(spark, out).collect()} == {"node_not_in_seed_graph"}
