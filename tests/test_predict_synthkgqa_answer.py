"""kgbrink predict --benchmark synthkgqa-answer (issue 70, paper 002 §4, spec 3.4-3.5): worked example E4 through
the whole job on a hand-made KG: the question text kept by gt-questions, the full answer subgraph of its
answer set, the reader's message, EM and EM-strict, and the retrieval metrics of the gt and retrieved
contexts, each against values computed by hand."""

from __future__ import annotations

import json

import pytest

from kgbrink.cli import main
from kgbrink.core.delta import read_table, write_table
from tests.conftest import conf_args
from tests.llm_server import LlmServer

ENTITIES = [
    (0, "Q357932", "Francisco José Fernandes Costa"),
    (1, "Q428459", "Figueira da Foz"),
    (2, "Q45", "Portugal"),
    (3, "Q597", "Lisbon"),
    (4, "Q200", "La Spiaggia"),
    (5, "Q201", "Fernando Cerchio"),
    (6, "Q202", "Henri Decoin"),
    (7, "Q300", "Thing A"),
    (8, "Q301", "Thing B"),
]
RELATIONS = [(0, "P20", "place of death"), (1, "P17", "country"), (2, "P57", "director"), (3, "P31", "instance of")]
TRIPLES = [(0, 0, 1), (1, 1, 2), (3, 1, 2), (4, 2, 5), (4, 2, 6), (7, 3, 8), (8, 3, 7)]
E4_QUESTION = "In which country did Francisco José Fernandes Costa die?"
QUESTIONS = [
    {
        "id": "e4",
        "split": "test",
        "question": E4_QUESTION,
        "seeds": ["Q357932"],
        "answer": "Q45",
        "answer_subgraph": [["Q357932", "P20", "Q428459"], ["Q428459", "P17", "Q45"]],
    },
    {
        "id": "two",
        "split": "test",
        "question": "Who directed La Spiaggia?",
        "seeds": ["Q200"],
        "answer": "Q201",
        "answer_subgraph": [["Q200", "P57", "Q201"]],
    },
]
E4_MESSAGE = (
    "Based on the provided evidence, in the form of knowledge graph triples (subject, relation, object), please "
    "answer the question. Please keep the answer as simple as possible and return a single answer only.\n"
    f"Question: {E4_QUESTION}\nKnowledge Triplets: Francisco José Fernandes Costa, place of death, Figueira da "
    "Foz\nFigueira da Foz, country, Portugal\nAnswer: "
)


@pytest.fixture(scope="module")
def question_set(spark, config, work_dir) -> str:
    """The hand-made KG and its two questions ingested by gt-questions with their answer sets."""
    dataset = str(work_dir / "synthkgqa-answer")
    write_table(spark.createDataFrame(ENTITIES, "id int, key string, label string"), f"{dataset}/entities")
    write_table(spark.createDataFrame(RELATIONS, "id int, key string, label string"), f"{dataset}/relations")
    triples = spark.createDataFrame([(*t, "train") for t in TRIPLES], "h int, r int, t int, split string")
    write_table(triples, f"{dataset}/triples", ["split"])
    lines = work_dir / "synthkgqa-answer-questions.jsonl"
    lines.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUESTIONS))
    args = ["gt-questions", *conf_args(config), "--dataset", dataset, "--input", str(lines), "--name", "e4"]
    assert main([*args, "--answers"]) == 0
    return dataset


def answers(outputs: dict[str, str]):
    """A model answering each question (by its text in the last message) with ``outputs``."""

    def model(body):
        content = body["messages"][-1]["content"]
        found = [text for q, text in outputs.items() if f"Question: {q}" in content]
        assert len(found) == 1, content
        return {"content": found[0]}

    return model


def _predict(config, server, dataset, tmp_path, model, *extra, name="summary") -> dict:
    out = tmp_path / f"{name}.json"
    args = ["predict", *conf_args(config), "--benchmark", "synthkgqa-answer", "--dataset", dataset, "--name", "e4"]
    code = main([*args, "--model", model, "--base-url", server.base_url, "--json", str(out), *extra])
    doc = json.loads(out.read_text())
    assert code == 0, doc.get("error")
    return doc


SCORE_COLUMNS = (
    "em_hits",
    "em_recall",
    "em_strict_hits",
    "em_strict_recall",
    "gt_recall",
    "gt_precision",
    "gt_f1",
    "answer_hits",
    "answer_recall",
    "size",
)


def _scores(spark, doc) -> dict[str, tuple]:
    rows = read_table(spark, f"{doc['params']['out']}/synthkgqa_answers").collect()
    return {r["id"]: (r["answer"], *[round(float(r[c]), 6) for c in SCORE_COLUMNS]) for r in rows}


def test_e4_through_the_job_gt_context_em_and_groups(spark, config, question_set, tmp_path):
    """The question text and full answer subgraph kept by gt-questions; the reader's message of E4; "Portugal."
    EM 1 and EM-strict 1; "Fernando Cerchio" of the answers {Fernando Cerchio, Henri Decoin}: Hits 1, Recall
    0.5; "{Portugal (Q45)}" EM 1, EM-strict 0; the gt context's triples against the full answer subgraph."""
    questions = {r["id"]: r for r in read_table(spark, f"{question_set}/synthkgqa/e4/gt_questions").collect()}
    assert questions["e4"]["question"] == E4_QUESTION
    assert [tuple(x) for x in questions["two"]["full_answer_subgraph"]] == [(4, 2, 5), (4, 2, 6)]
    assert [tuple(x) for x in questions["e4"]["full_answer_subgraph"]] == [(0, 0, 1), (1, 1, 2)]
    bodies = []
    plain = answers({E4_QUESTION: "Portugal.", "Who directed La Spiaggia?": "Fernando Cerchio"})
    braced = answers({E4_QUESTION: "{Portugal (Q45)}", "Who directed La Spiaggia?": "The answer is {Henri Decoin}."})
    with LlmServer({"plain": lambda body: bodies.append(body) or plain(body), "braced": braced}) as server:
        doc = _predict(config, server, question_set, tmp_path, "plain")
        other = _predict(config, server, question_set, tmp_path, "braced", "--no-score", name="braced")
    e4_body = next(b for b in bodies if E4_QUESTION in b["messages"][-1]["content"])
    assert e4_body["messages"] == [
        {"role": "system", "content": "You are an AI assistant that helps people find information."},
        {"role": "user", "content": E4_MESSAGE},
    ]
    assert (e4_body["temperature"], e4_body["max_tokens"]) == (0.0, 256)
    # answer, EM hits / recall, strict hits / recall, GT recall / precision / F1, answer-node hits / recall, size
    assert _scores(spark, doc) == {
        "e4": ("Portugal.", 1, 1, 1, 1, 1, 1, 1, 1, 1, 2),
        "two": ("Fernando Cerchio", 1, 0.5, 1, 0.5, 0.5, 1, 0.666667, 1, 0.5, 1),
    }
    assert _scores(spark, other) == {
        "e4": ("Portugal (Q45)", 1, 1, 0, 0, 1, 1, 1, 1, 1, 2),
        "two": ("Henri Decoin", 1, 0.5, 1, 0.5, 0.5, 1, 0.666667, 1, 0.5, 1),
    }
    overall = {r["metric"]: r["value"] for r in doc["results"] if len(r) == 2}
    assert overall == {
        "em_hits": 1.0,
        "em_recall": 0.75,
        "em_strict_hits": 1.0,
        "em_strict_recall": 0.75,
        "gt_recall": 0.75,
        "gt_precision": 1.0,
        "gt_f1": 0.833333,
        "answer_hits": 1.0,
        "answer_recall": 0.75,
        "size": 1.5,
    }
    by_type = {(r["graph_isomorphism"], r["metric"]): r["value"] for r in doc["results"] if "graph_isomorphism" in r}
    by_hops = {(r["n_hops"], r["metric"]): r["value"] for r in doc["results"] if "n_hops" in r}
    assert by_type[("(2)", "em_recall")] == 1.0 and by_type[("(1)", "em_recall")] == 0.5
    assert by_hops[("2", "gt_f1")] == 1.0 and by_hops[("1", "gt_f1")] == 0.666667
    results = read_table(spark, f"{question_set}/predict/results").filter("model = 'plain'").collect()
    assert {r["metric"] for r in results} >= set(SCORE_COLUMNS) and {r["setting"] for r in results} == {"gt"}


def test_e4_retrieved_context_a_retrievers_file_with_bad_lines(spark, config, question_set, tmp_path):
    """E4's retrieval {t1, (Lisbon, country, Portugal), x2, x3} against the full GT {t1, t2}: recall 0.5,
    precision 0.25, F1 0.333333, answer node Hits 1, Recall 1, size 4 (x3 has a key the dataset has not: shown
    as the key); a question without a line gets no triples; a malformed line and one of an unknown question
    are quarantined with their file and line."""
    retrieved = tmp_path / "retrieved.jsonl"
    e4 = [["Q357932", "P20", "Q428459"], ["Q597", "P17", "Q45"], ["Q300", "P31", "Q301"], ["Q301", "P31", "Q999"]]
    retrieved.write_text(
        json.dumps({"id": "e4", "triples": e4}) + "\n{not json\n" + json.dumps({"id": "zz", "triples": []}) + "\n"
    )
    bodies = []
    model = answers({E4_QUESTION: "Portugal", "Who directed La Spiaggia?": "I do not know"})
    with LlmServer({"r": lambda body: bodies.append(body) or model(body)}) as server:
        extra = ["--context", "retrieved", "--retrieved", str(retrieved), "--set", "predict.max_bad_fraction=0.6"]
        doc = _predict(config, server, question_set, tmp_path, "r", *extra, "--no-score")
    assert _scores(spark, doc) == {
        "e4": ("Portugal", 1, 1, 1, 1, 0.5, 0.25, 0.333333, 1, 1, 4),
        "two": ("I do not know", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    }
    e4_text = next(b for b in bodies if E4_QUESTION in b["messages"][-1]["content"])["messages"][-1]["content"]
    assert e4_text.endswith(
        "Knowledge Triplets: Francisco José Fernandes Costa, place of death, Figueira da Foz\nLisbon, country, "
        "Portugal\nThing A, instance of, Thing B\nThing B, instance of, Q999\nAnswer: "
    )
    quarantine = read_table(spark, f"{doc['params']['out']}/predict_quarantine").orderBy("detail").collect()
    assert [(r["stage"], r["reason"], r["detail"]) for r in quarantine] == [
        ("retrieved", "malformed_json", f"{retrieved}:2: not a JSON object"),
        ("retrieved", "unknown_id", f"{retrieved}:3: no question of this id in the set"),
    ]


def test_the_llm_only_context_sends_the_four_shot_prompt_and_scores_no_retrieval(spark, config, question_set, tmp_path):
    bodies = []
    model = answers({E4_QUESTION: "Answer: {Portugal}.", "Who directed La Spiaggia?": "Henri Decoin"})
    with LlmServer({"io": lambda body: bodies.append(body) or model(body)}) as server:
        doc = _predict(config, server, question_set, tmp_path, "io", "--context", "none", "--no-score")
    messages = bodies[0]["messages"]
    assert len(messages) == 9 and [m["role"] for m in messages[:2]] == ["user", "assistant"]
    assert messages[1]["content"].startswith("Answer: ") and messages[-1]["content"].startswith("Question: ")
    assert _scores(spark, doc) == {
        "e4": ("Portugal", 1, 1, 1, 1, 0, 0, 0, 0, 0, 0),
        "two": ("Henri Decoin", 1, 0.5, 1, 0.5, 0, 0, 0, 0, 0, 0),
    }


def test_table_contexts_are_sorted_and_the_question_graph_cut_by_ppr(spark):
    from kgbrink.evaluation.synthkgqa_answers import context_triples

    questions = spark.createDataFrame([("a",), ("b",)], "id string")
    sp = spark.createDataFrame([("a", 5, 0, 1), ("a", 1, 0, 2), ("a", 1, 0, 2)], "id string, h int, r int, t int")
    graph = spark.createDataFrame(
        [("a", 9, 0, 9, None), ("a", 3, 0, 4, 0.5), ("a", 2, 0, 3, 0.5), ("a", 7, 1, 7, 0.9)],
        "id string, h int, r int, t int, ppr double",
    )
    got = {r["id"]: [tuple(x) for x in r["ids"]] for r in context_triples(questions, "sp", sp).collect()}
    assert got == {"a": [(1, 0, 2), (5, 0, 1)], "b": []}
    cut = context_triples(questions, "question_graph", graph, max_triples=3).collect()
    assert {r["id"]: [tuple(x) for x in r["ids"]] for r in cut} == {"a": [(7, 1, 7), (2, 0, 3), (3, 0, 4)], "b": []}
