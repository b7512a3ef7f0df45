"""kgbrink predict --benchmark okgqa (issue 58, paper 004): a question's subgraph at each perturbation level
as the facts, answers judged by G-Eval, against a real OpenAI-compatible server on 127.0.0.1. The scripted
answerer recites the facts it is given; the scripted judge scores the share of the recited facts that are in
the question's original subgraph: the scores per level are computed here again from the perturbed table."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections import Counter, defaultdict

import pytest

from kgbrink.cli import main
from kgbrink.core.delta import read_table
from kgbrink.core.jobs import JobContext
from kgbrink.evaluation import okgqa as okgqa_evaluation
from kgbrink.okgqa import safe
from kgbrink.okgqa.answering import entity_name
from tests.conftest import conf_args, own_copy
from tests.llm_server import LlmServer

FACTS = re.compile(r"Below are the facts that might be relevant to answer the question: (.*)\nAnswer:$", re.S)
OUTPUT = re.compile(r"Actual Output: (.*?)\n\nRetrieval Context:", re.S)
INPUT = re.compile(r"^Input: (.*?)\n\nActual Output:", re.S)
N_QUESTIONS = 4


@pytest.fixture(scope="module")
def okgqa_dataset(spark, config, synth_5000, tmp_path_factory):
    """synth 5000 ingested; 4 questions of 2 entities each; their subgraphs swept by RR and ED at 0.5 and 1.0."""
    dataset, base = own_copy(synth_5000, tmp_path_factory, "predict-okgqa")
    keys = [r.key for r in read_table(spark, f"{dataset}/entities").orderBy("id").limit(40).collect()]
    entity_sets = base / "qs.jsonl"
    entity_sets.write_text(
        "".join(json.dumps({"qid": f"q{i}", "entities": keys[10 * i : 10 * i + 2]}) + "\n" for i in range(N_QUESTIONS))
    )
    conf = conf_args(config)
    assert main(["okgqa-subgraphs", *conf, "--dataset", str(dataset), "--questions", str(entity_sets)]) == 0
    sweep = ["okgqa-sweep", *conf, "--dataset", str(dataset), "--scope", "subgraphs", "--name", "qs"]
    sweep += ["--methods", "RR,ED", "--seeds", "1", "--levels", "0.5,1.0", "--report-dir", str(base / "sweep")]
    assert main(sweep) == 0
    texts = base / "texts.jsonl"
    texts.write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "question": f"What links the entities of question {i}?", "references": []})
            + "\n"
            for i in range(N_QUESTIONS)
        )
    )
    return dataset, texts


def _graphs(spark, dataset) -> dict:
    """``{(qid, method, seed, level): {name triples}}`` from the perturbed table, level 0.0 the original."""
    names = {
        kind: {r.id: entity_name(r.label, r.key) for r in read_table(spark, f"{dataset}/{kind}").collect()}
        for kind in ("entities", "relations")
    }
    graphs = defaultdict(set)
    for row in read_table(spark, f"{dataset}/okgqa/qs/perturbed").collect():
        triple = (names["entities"][row.h], names["relations"][row.r], names["entities"][row.t])
        key = (row.scope_key, row.method, row.seed)
        if row.original:
            graphs[(*key, 0.0)].add(triple)
        for level in row.levels:
            graphs[(*key, level)].add(triple)
    # a graph the perturbation emptied (ED at 1.0) has no row but one in perturbations
    made = read_table(spark, f"{dataset}/okgqa/qs/perturbations").collect()
    for qid, method, seed, _ in list(graphs):
        for row in made:
            if (row.method, row.seed) == (method, seed):
                graphs[(qid, method, seed, row.level)] |= set()
    return graphs


def _models(originals: dict[str, set]) -> dict:
    """reciter: the facts line it is given (no facts: "I don't know."); judge: 10 x the share of the recited
    facts that are in the question's original subgraph, rounded (none recited: 0)."""

    def reciter(body):
        found = FACTS.search(body["messages"][-1]["content"])
        return {"content": found[1] if found and found[1] else "I don't know."}

    def judge(body):
        text = body["messages"][-1]["content"]
        qid = "q" + INPUT.search(text)[1].rsplit(" ", 1)[1].rstrip("?")
        try:
            facts = ast.literal_eval("[" + OUTPUT.search(text)[1] + "]")
        except (ValueError, SyntaxError):
            facts = []
        score = round(10 * sum(f in originals[qid] for f in facts) / len(facts)) if facts else 0
        return {"content": f"Steps: count the facts.\nScore: {score}"}

    return {"reciter": reciter, "judge": judge}


def _predict(config, server, dataset, texts, tmp_path, *extra, name="summary") -> tuple[int, dict]:
    out = tmp_path / f"{name}.json"
    args = ["predict", *conf_args(config), "--benchmark", "okgqa", "--dataset", str(dataset), "--name", "qs"]
    args += ["--questions", str(texts), "--model", "reciter", "--judge-model", "judge", "--base-url", server.base_url]
    code = main([*args, "--set", "predict.criteria=[correctness]", "--json", str(out), *extra])
    return code, json.loads(out.read_text())


def test_scores_per_level_equal_the_recomputed_ones_and_a_rerun_asks_nothing(spark, config, okgqa_dataset, tmp_path):
    dataset, texts = okgqa_dataset
    graphs = _graphs(spark, dataset)
    originals = {qid: g for (qid, method, seed, level), g in graphs.items() if level == 0.0}
    with LlmServer(_models(originals)) as server:
        code, doc = _predict(config, server, dataset, texts, tmp_path, "--set", "predict.max_facts=100000")
        assert code == 0, doc.get("error")
        # level 0.0 is the same prompt for RR and ED: asked once
        keys = {(q, m, s, lv) for (q, m, s, lv) in graphs}
        assert doc["counts"]["prompts"] == len(keys)
        assert doc["counts"]["asked"] == len({(q, lv) if lv == 0.0 else (q, m, lv) for (q, m, s, lv) in keys})
        requests = server.stats()["requests"]
        again = _predict(config, server, dataset, texts, tmp_path, "--set", "predict.max_facts=100000", name="again")
        assert again[0] == 0 and again[1]["counts"]["asked"] == again[1]["counts"]["judge_asked"] == 0
        assert server.stats()["requests"] == requests
    expected = defaultdict(list)
    for (qid, method, seed, level), triples in graphs.items():
        share = len(triples & originals[qid]) / len(triples) if triples else 0.0
        expected[(method, seed, level)].append(10.0 * round(10 * share) if triples else 0.0)
    scores = {
        (r.method, r.seed, r.level): r
        for r in read_table(spark, doc["outputs"]["okgqa_scores"]["path"]).collect()
        if r.metric == "geval_correctness"
    }
    assert set(scores) == set(expected)
    for key, values in expected.items():
        assert scores[key].value == pytest.approx(sum(values) / len(values), abs=1e-9), key
        assert scores[key].n == scores[key].n_scored == N_QUESTIONS
    # ED keeps only original triples (100) until it empties the graph (the reciter abstains)
    assert scores[("ED", 1, 0.5)].value == 100.0 and scores[("ED", 1, 1.0)].value == 0.0
    assert scores[("ED", 1, 1.0)].n_responding == 0 and scores[("RR", 1, 0.0)].value == 100.0
    assert scores[("RR", 1, 1.0)].value < 100.0
    levels = {(r.method, r.level): r for r in read_table(spark, doc["outputs"]["okgqa_levels"]["path"]).collect()}
    similarity = read_table(spark, f"{dataset}/okgqa/qs/kg_similarity").filter("qid is not null").toPandas()
    for (method, level), row in levels.items():
        assert row.drop == pytest.approx(100.0 - row.value, abs=1e-9)
        if level == 0.0:
            assert row.sd2 is None
        else:
            mean = similarity[(similarity.method == method) & (similarity.level == level)].sd2.mean()
            assert row.sd2 == pytest.approx(mean, abs=1e-12)
    results = read_table(spark, f"{dataset}/predict/results").filter("metric = 'geval_correctness'").collect()
    labelled = {(r.metric, json.loads(r.labels)["method"], json.loads(r.labels)["level"]): r for r in results}
    assert labelled[("geval_correctness", "ED", 1.0)].value == 0.0 and len(labelled) == len(levels) == len(results)
    assert {r.judge_model for r in results} == {"judge"}
    report = next(a for a in doc["artifacts"] if a.endswith("report.md"))
    assert "| ED | 1 | geval_correctness | 0.00 | 100.00 |" in open(report).read()
    assert any(a.endswith("answers.png") for a in doc["artifacts"])


def test_no_context_asks_each_question_once_and_bad_lines_are_quarantined_or_fail(
    spark, config, okgqa_dataset, tmp_path
):
    dataset, texts = okgqa_dataset
    bad = tmp_path / "bad.jsonl"
    lines = texts.read_text().splitlines()
    bad.write_text("\n".join([*lines, '{"qid": "q9", "question": "unknown?"}', "{not json", lines[0]]) + "\n")
    with LlmServer(_models({})) as server:
        code, doc = _predict(config, server, dataset, bad, tmp_path, "--context", "none")
        assert code == 1 and "question lines" in doc["error"] and "bad.jsonl" in doc["error"]
        assert server.stats()["requests"] == 0
        tolerant = ["--context", "none", "--set", "predict.max_bad_fraction=0.5", "--no-score"]
        code, doc = _predict(config, server, dataset, bad, tmp_path, *tolerant, name="tolerant")
        assert code == 0, doc.get("error")
        assert doc["counts"]["prompts"] == doc["counts"]["asked"] == N_QUESTIONS
        quarantine = read_table(spark, doc["outputs"]["predict_quarantine"]["path"]).collect()
        reasons = {r.reason: r.detail for r in quarantine}
        assert set(reasons) == {"unknown_qid", "malformed_json", "duplicate_qid"}
        assert reasons["malformed_json"].startswith(f"{bad}:6: ")
        prompts = read_table(spark, doc["outputs"]["predict_prompts"]["path"]).collect()
        assert all("Below are the facts" not in json.loads(p.messages)[-1]["content"] for p in prompts)
        answers = read_table(spark, doc["outputs"]["okgqa_answers"]["path"]).collect()
        assert {(a.method, a.level, a.n_facts, a.abstained) for a in answers} == {("none", 0.0, 0, True)}
        # a cap on the facts: the first max_facts in content-hash order, the graph's size kept beside it
        code, doc = _predict(config, server, dataset, texts, tmp_path, "--set", "predict.max_facts=3", "--no-score")
        assert code == 0, doc.get("error")
        answers = read_table(spark, doc["outputs"]["okgqa_answers"]["path"]).collect()
        assert all(a.n_facts == min(a.n_triples, 3) for a in answers) and any(a.n_triples > 3 for a in answers)


def test_a_judge_at_its_own_endpoint_gets_its_own_key_and_its_tokens_are_counted_apart(
    spark, config, okgqa_dataset, tmp_path, monkeypatch
):
    dataset, texts = okgqa_dataset
    # a question file that serves a larger set too: its other questions are no bad lines
    more = tmp_path / "more.jsonl"
    more.write_text(texts.read_text() + json.dumps({"qid": "q99", "question": "Another set's?"}) + "\n")
    texts = more
    secret = "sk-judge-" + "7" * 24
    models = _models({f"q{i}": set() for i in range(N_QUESTIONS)})
    # models of their own names: nothing cached by the other tests' runs
    answering = {"own-reciter": models["reciter"]}
    judging = {"own-judge": models["judge"]}
    prices = ["--set", "predict.price_prompt_per_million=1000000", "--set", "predict.price_completion_per_million=0"]
    prices += [
        "--set",
        "judge.price_prompt_per_million=0",
        "--set",
        "judge.price_completion_per_million=1000000",
    ]
    with LlmServer(answering) as answerer, LlmServer(judging, api_key=secret) as judge:
        own = ["--context", "none", "--judge-base-url", judge.base_url, "--set", "judge.api_key_env=JUDGE_KEY"]
        own += ["--model", "own-reciter", "--judge-model", "own-judge"]
        code, doc = _predict(config, answerer, dataset, texts, tmp_path, *own, name="unset")
        assert code == 2 and "judge.api_key_env names JUDGE_KEY" in doc["error"]
        assert answerer.stats()["requests"] == judge.stats()["requests"] == 0
        monkeypatch.setenv("JUDGE_KEY", secret)
        code, doc = _predict(config, answerer, dataset, texts, tmp_path, *own, *prices)
        assert code == 0, doc.get("error")
        answers, judged = answerer.stats(), judge.stats()
    counts = doc["counts"]
    # unknown models are 404s: each server saw only its own model, the judge every time with the key
    assert answers["requests"] == answers["completed"] == counts["asked"] == counts["requests"] == N_QUESTIONS
    assert answers["auth"] == {"ok": 0, "missing": 0, "wrong": 0}
    assert judged["requests"] == counts["judge_asked"] == counts["judge_requests"] == counts["judge_prompts"]
    assert judged["auth"] == {"ok": judged["requests"] + 1, "missing": 0, "wrong": 0}  # and the probe of /models
    assert doc["params"]["judge_base_url"] == judge.base_url and doc["params"]["base_url"] == answerer.base_url
    # each round's tokens are what its server sent (usage: characters / 4), each at its own price
    assert answers["usage"]["prompt_tokens"] > 0 and judged["usage"]["completion_tokens"] > 0
    for prefix, usage in (("", answers["usage"]), ("judge_", judged["usage"])):
        assert counts[f"{prefix}prompt_tokens"] == usage["prompt_tokens"]
        assert counts[f"{prefix}completion_tokens"] == usage["completion_tokens"]
    costs = {r["metric"]: r["value"] for r in doc["results"] if r["metric"].startswith("cost.")}
    # this run asked every answer and every judgement: the answers' cost is this run's
    assert costs == {
        "cost.answers": answers["usage"]["prompt_tokens"],
        "cost.this_run": answers["usage"]["prompt_tokens"],
        "cost.judge_answers": judged["usage"]["completion_tokens"],
        "cost.judge_this_run": judged["usage"]["completion_tokens"],
    }
    assert secret not in json.dumps(doc)
    quarantine = read_table(spark, doc["outputs"]["predict_quarantine"]["path"]).collect()
    assert [(r.item_id, r.reason) for r in quarantine] == [("q99", "unknown_qid")]


STATEMENT = re.compile(r"\n\nKNOWLEDGE:\n(.*)\n\nSTATEMENT:\n(.*)$", re.S)


def _factscore_models(originals: dict[str, set], asked: Counter) -> dict:
    """answerer: "answer A" (q0), "answer B" (q1), abstains (q2); splitter: 8 facts of A, 2 of B; verifier: A's
    facts 1-6 true, 7-8 false, B's fact 1 true, fact 2 "not supported" (FActScore's [code] rule: false); the
    G-Eval judge: 5. SAFE: a fact of A searches once (the head name of q0's first original triple), B's fact 1
    twice (q1's first triple's head, then its tail), B's fact 2 once for a word no document has; the rating: A's facts 1-5 and B's fact 1
    supported when the knowledge shown is the search's (lines of the question's original subgraph naming the
    query), A's 6-8 not supported, B's fact 2 no label. ``asked`` counts the requests by kind."""
    first = {qid: sorted(originals[qid])[0] for qid in ("q0", "q1")}

    def answerer(body):
        qid = re.search(r"question (\d)\?", body["messages"][-1]["content"])[1]
        return {"content": {"0": "answer A", "1": "answer B"}.get(qid, "I don't know.")}

    def safe_judge(text: str) -> str:
        knowledge, fact = STATEMENT.search(text).groups()
        qid = "q0" if fact.startswith("A") else "q1"
        if "issue ONE Google Search query" in text:
            asked["safe_search"] += 1
            asked[fact] += 1  # the round: each round's prompt differs (its knowledge), so is asked once
            searches = 1 if fact.startswith("A") else {"B fact 1": 2, "B fact 2": 1}.get(fact, 0)
            if fact == "B fact 2" and asked[fact] == 2:
                assert knowledge == safe.NO_RESULT, knowledge  # its query found nothing, and says so
            if asked[fact] > searches:
                return "I have enough knowledge."
            name = "zzzqqq" if fact == "B fact 2" else first[qid][0] if asked[fact] == 1 else first[qid][2]
            return f"Next search:\n```\n{name}\n```"
        asked["safe_final"] += 1
        if fact == "B fact 2":
            assert knowledge == safe.NO_RESULT, knowledge
            return "I cannot tell."
        shown = [ast.literal_eval(line) for line in knowledge.splitlines()]
        ok = 1 <= len(shown) <= 6 and all(t in originals[qid] for t in shown) and first[qid][0] in shown[0]
        supported = ok and (fact in {f"A fact {i}" for i in range(1, 6)} or fact == "B fact 1")
        return "Reasoning... so [Supported]." if supported else "Therefore: [Not Supported]"

    def judge(body):
        text = body["messages"][-1]["content"]
        if text.startswith("Instructions:"):
            return {"content": safe_judge(text)}
        if text.startswith("Please breakdown"):
            which, n = ("A", 8) if text.endswith("answer A") else ("B", 2)
            return {"content": "Facts:\n" + "".join(f"- {which} fact {i}\n" for i in range(1, n + 1))}
        if "True or False?" in text:
            assert "Title: knowledge graph\nText: ('" in text  # the original subgraph as the knowledge source
            fact = re.search(r"Input: (.*) True or False\?", text)[1]
            verdict = {"A fact 7": "False", "A fact 8": "False.", "B fact 2": "The fact is not supported."}
            return {"content": verdict.get(fact, "True")}
        return {"content": "Score: 5"}

    return {"answerer": answerer, "fs-judge": judge}


def test_factscore_as_worked_example_e6_and_safe_by_kg_search(spark, config, okgqa_dataset, tmp_path):
    """E6: 8 atomic facts, 6 supported -> 0.75; with 0.5 for a second answer and a third abstaining: mean
    0.625, 66.7% responding; gamma 10: 0.75 exp(1 - 10/8) = 0.584101 (and 0.5 exp(1 - 10/2) for the second).
    Each answer split once, each fact verified once, counted as the judge's rounds. SAFE on the same facts
    (searches by the default KG search): A 5/8, B 1/1 (its fact 2 unrated, quarantined): 81.25%; 10 + 10 + 1
    search requests (a round for the facts still searching), 10 final ones."""
    dataset, texts = okgqa_dataset
    originals = {k[0]: g for k, g in _graphs(spark, dataset).items() if k[3] == 0.0}
    asked = Counter()
    with LlmServer(_factscore_models(originals, asked)) as server:
        args = ["predict", *conf_args(config), "--benchmark", "okgqa", "--dataset", str(dataset), "--name", "qs"]
        args += ["--questions", str(texts), "--model", "answerer", "--judge-model", "fs-judge"]
        args += ["--base-url", server.base_url, "--context", "none", "--limit", "3"]
        args += ["--set", "predict.criteria=[correctness]", "--set", "predict.factscore=true"]
        args += ["--set", "predict.factscore_gamma=null", "--set", "predict.safe=true"]
        args += ["--set", "predict.max_facts=100000"]  # the whole original subgraph as SAFE's documents
        out = tmp_path / "plain.json"
        assert main([*args, "--json", str(out)]) == 0
        doc = json.loads(out.read_text())
    counts = doc["counts"]
    assert (counts["facts_prompts"], counts["atomic_facts"], counts["verify_prompts"]) == (2, 10, 10)
    assert (counts["facts_asked"], counts["verify_asked"], counts["supported_facts"]) == (2, 10, 7)
    rows = {r.metric: r for r in read_table(spark, doc["outputs"]["okgqa_scores"]["path"]).collect()}
    assert (rows["factscore"].n, rows["factscore"].n_scored, rows["factscore"].n_responding) == (3, 2, 2)
    assert rows["factscore"].value == pytest.approx(62.5, abs=1e-9)
    results = {r["metric"]: r["value"] for r in doc["results"] if r.get("level") == 0.0}
    assert results["factscore"] == 62.5 and results["geval_correctness"] == 50.0
    # SAFE: rounds of 10, 9 and 1 facts still searching, one rating per fact, from the server's own count
    assert (counts["safe_search_prompts"], counts["safe_final_prompts"], counts["safe_supported"]) == (21, 10, 6)
    assert [counts[f"safe_searching_after_{i}"] for i in (1, 2, 3)] == [10, 1, 0]
    assert (asked["safe_search"], asked["safe_final"], asked["B fact 1"], asked["B fact 2"]) == (21, 10, 3, 2)
    assert [counts[f"safe_search_{i}_asked"] for i in (1, 2, 3)] == [10, 10, 1]  # each round counted apart
    assert (rows["safe"].n, rows["safe"].n_scored, rows["safe"].value) == (3, 2, pytest.approx(81.25, abs=1e-9))
    assert results["safe"] == 81.25
    quarantine = read_table(spark, doc["outputs"]["predict_quarantine"]["path"]).collect()
    assert [(r.stage, r.reason) for r in quarantine] == [("safe_final_parse", "no_verdict")]
    # gamma 10 on the same verdicts (the job's function, without a second run)
    answers = spark.createDataFrame(
        [("a", "none", 0, 0.0), ("b", "none", 0, 0.0), ("c", "none", 0, 0.0)],
        "item_id string, method string, seed int, level double",
    )
    verified = spark.createDataFrame(
        [("a", i < 6) for i in range(8)] + [("b", True), ("b", False)], "answer_id string, supported boolean"
    )
    labels = dict.fromkeys(("model", "judge_model", "run", "setting"), "x")
    penalised = okgqa_evaluation.factscore_rows(answers, verified, 10.0, labels).first()
    expected = 50 * (0.75 * math.exp(1 - 10 / 8) + 0.5 * math.exp(1 - 10 / 2))
    assert penalised.value == pytest.approx(expected, abs=1e-9) and round(0.75 * math.exp(1 - 10 / 8), 6) == 0.584101


def test_cot_and_self_consistency_sample_then_select_the_commonest_answer(spark, config, okgqa_dataset, tmp_path):
    """cot: the zero-shot prompt with "Let's think step by step."; cot_sc: 5 samples of it at temperature 0.7
    (each sample's index in its key: five requests of one prompt), then one selection call listing them in
    sample order; the selected answer is the run's answer. A rerun asks nothing."""
    from kgbrink.evaluation import calls

    dataset, texts = okgqa_dataset
    seen = defaultdict(int)
    bodies = []

    def model(body):
        bodies.append(body)
        text = body["messages"][-1]["content"]
        if text.endswith("Let's think step by step."):
            key = text
            seen[key] += 1
            return {"content": ["Paris", "Paris", "Lyon", "Paris", "Nice"][(seen[key] - 1) % 5]}
        if text.startswith("Based on the given open-ended questions"):
            answers = re.findall(r"Answer\n: (.*)\n", text)
            return {"content": max(sorted(set(answers)), key=answers.count)}
        return {"content": "Score: 5"}

    with LlmServer({"sc": model}) as server:
        args = ["predict", *conf_args(config), "--benchmark", "okgqa", "--dataset", str(dataset), "--name", "qs"]
        args += ["--questions", str(texts), "--model", "sc", "--base-url", server.base_url, "--limit", "2"]
        args += ["--set", "predict.criteria=[correctness]", "--no-score"]
        docs = {}
        for context in ("cot", "cot_sc", "cot_sc"):
            out = tmp_path / f"{context}.json"
            assert main([*args, "--context", context, "--json", str(out)]) == 0
            docs.setdefault(context, []).append(json.loads(out.read_text()))
    cot = [b for b in bodies if b["messages"][-1]["content"].endswith("Let's think step by step.")]
    assert all(b["temperature"] == 0.7 for b in cot[2:]) and cot[0]["temperature"] == 0.0  # cot's own 2 first
    first, again = docs["cot_sc"]
    assert first["counts"]["sample_prompts"] == 2 * 5 and first["counts"]["sample_asked"] == 2 * 5
    assert first["counts"]["prompts"] == 2 and first["counts"]["asked"] == 2  # the selections (--limit 2)
    assert again["counts"]["sample_asked"] == again["counts"]["asked"] == 0
    selections = [b for b in bodies if b["messages"][-1]["content"].startswith("Based on the given")]
    assert len(selections) == 2 and all(
        len(re.findall("Answer\n: ", b["messages"][-1]["content"])) == 5 for b in selections
    )
    answers = read_table(spark, f"{first['params']['out']}/okgqa_answers").collect()
    assert [r.answer for r in answers] == ["Paris", "Paris"]
    # a sample's key is its prompt's with the sample's index
    sha = hashlib.sha256(b"[]").hexdigest()
    keyed = calls.call_rows(
        spark.createDataFrame([("i", "[]", 3)], "item_id string, messages string, sample int"), "m", {}
    )
    assert keyed.first()["call_id"] == calls.call_id("m", {}, sha, sample=3) != calls.call_id("m", {}, sha)


def test_triplets_paths_and_pcst_retrieved_by_embeddings_equal_the_python_retrieval(
    spark, config, okgqa_dataset, tmp_path
):
    """FS-T, FS-P and FS-SG (spec 5.1): the question and every node and relation name of its graphs embedded
    once (the scripted model's hashed vectors), then each graph's triplets, paths or PCST: the reciter's answer (the
    facts line it got) equals :func:`kgbrink.okgqa.retrieval.by_similarity` on the perturbed table read
    here (nodes and relations by id). A name whose embedding never comes is quarantined and gets no prize;
    a question whose text never gets one is not asked. A rerun asks only those two texts again."""
    from kgbrink.okgqa import answering as okgqa_answering
    from kgbrink.okgqa import retrieval
    from tests.llm_server import hashed_embedding

    dataset, texts = okgqa_dataset
    names = {
        kind: {r.id: entity_name(r.label, r.key) for r in read_table(spark, f"{dataset}/{kind}").collect()}
        for kind in ("entities", "relations")
    }
    perturbed = read_table(spark, f"{dataset}/okgqa/qs/perturbed").collect()
    graphs = defaultdict(set)
    for row in perturbed:
        for level in ([0.0] if row.original else []) + list(row.levels):
            graphs[(row.scope_key, row.method, row.seed, level)].add((str(row.h), str(row.r), str(row.t)))
    emptied = set(_graphs(spark, dataset)) - set(graphs)  # ED at 1.0: no triple, the baseline prompt
    silent_name = sorted(names["entities"][int(t[0])] for g in graphs.values() for t in g)[0]
    questions = {f"q{i}": f"What links the entities of question {i}?" for i in range(N_QUESTIONS)}
    silent_question = questions["q3"]

    def embed(body):
        if silent_name in body["input"] or silent_question in body["input"]:
            return {"raw": {"data": []}}  # never a vector: malformed on every try
        return {"embeddings": [hashed_embedding(text) for text in body["input"]]}

    def expected(context: str, key) -> str:
        triples = sorted(graphs[key])
        q = hashed_embedding(questions[key[0]])
        nodes = {x: names["entities"][int(x)] for h, _, t in triples for x in (h, t)}
        sims = {x: okgqa_answering.cosine(q, hashed_embedding(n)) for x, n in nodes.items() if n != silent_name}
        relations = {
            r: okgqa_answering.cosine(q, hashed_embedding(names["relations"][int(r)]))
            for _, r, _ in triples
            if names["relations"][int(r)] != silent_name
        }
        found = retrieval.by_similarity(context, triples, sims, relations, 10, 3, 10)
        named = [
            (names["entities"][int(h)], names["relations"][int(r)], names["entities"][int(t)]) for h, r, t in found
        ]
        return okgqa_answering.facts_line(named) if named else "I don't know."

    models = {"reciter": _models({})["reciter"], "embed": embed}
    with LlmServer(models) as server:
        docs = {}
        for context in ("triplets", "paths", "paths", "pcst"):
            code, doc = _predict(
                config, server, dataset, texts, tmp_path, "--context", context, "--no-score",
                "--set", "predict.embedding_model=embed", "--set", "predict.max_tries=2", name=context,
            )  # fmt: skip
            assert code == 0, doc.get("error")
            docs.setdefault(context, []).append(doc)
    first, again = docs["paths"]
    n_texts = len(set(questions.values()) | {n for g in graphs.values() for t in g for n in _names_of(t, names)})
    assert docs["triplets"][0]["counts"]["embed_texts"] == n_texts
    assert docs["triplets"][0]["counts"]["embed_asked"] == n_texts and first["counts"]["embed_asked"] == 2
    # the two texts without a vector are asked again by every run, nothing else is
    assert again["counts"]["embed_asked"] == 2 and again["counts"]["asked"] == 0
    assert docs["triplets"][0]["counts"]["questions_without_vector"] == 1
    assert docs["pcst"][0]["counts"]["embed_asked"] == 2
    for context, doc in (("triplets", docs["triplets"][0]), ("paths", first), ("pcst", docs["pcst"][0])):
        quarantine = read_table(spark, doc["outputs"]["predict_quarantine"]["path"]).collect()
        assert {(r.item_id, r.stage, r.reason) for r in quarantine} == {
            (silent_name, "embed_call", "malformed_response"),
            (silent_question, "embed_call", "malformed_response"),
        }, context
        answers = read_table(spark, doc["outputs"]["okgqa_answers"]["path"]).collect()
        got = {(r.qid, r.method, r.seed, r.level): r.answer for r in answers}
        asked = {key for key in graphs if key[0] != "q3"}
        assert set(got) == asked | {key for key in emptied if key[0] != "q3"}, context
        for key in asked:
            assert got[key] == expected(context, key), (context, key)
        assert sum(got[key] != "I don't know." for key in asked) > len(asked) / 2, context  # facts retrieved
        assert all(got[key] == "I don't know." for key in emptied if key[0] != "q3")


def _names_of(triple, names) -> list[str]:
    h, r, t = triple
    return [names["entities"][int(h)], names["relations"][int(r)], names["entities"][int(t)]]


def test_e6_through_the_job_facts_line_and_geval(spark, config, tmp_path):
    """E6 end to end on its own graph (Alexander_the_Great -influencedBy-> Aristotle -wikiPageWikiLink->
    Plato, ingested; the question's subgraph built and swept): FS-T with k = 3 and E6's embeddings asks with
    E6's facts line, (Alexander_the_Great, influencedBy, Aristotle) = 8 before (Aristotle, wikiPageWikiLink,
    Plato) = 6; the judge's "Score: 7" is 70%."""
    from kgbrink.jobs import ingest
    from tests.test_okgqa_retrieval import NODES, QUESTION, RELATIONS

    facts = tmp_path / "e6.tsv"
    facts.write_text("Alexander_the_Great\tinfluencedBy\tAristotle\nAristotle\twikiPageWikiLink\tPlato\n")
    dataset = str(tmp_path / "e6")
    options = ingest.IngestOptions(dataset=dataset, format="delimited", splits={"train": [str(facts)]})
    ingest.run(JobContext(spark, config), options)
    conf = conf_args(config)
    entity_sets, texts = tmp_path / "qs.jsonl", tmp_path / "texts.jsonl"
    # PPR walks h -> t: from Alexander_the_Great both triples are reached (from Aristotle only one)
    entity_sets.write_text(json.dumps({"qid": "e6", "entities": ["Alexander_the_Great"]}) + "\n")
    question = "Who influenced Alexander the Great?"
    texts.write_text(json.dumps({"qid": "e6", "question": question}) + "\n")
    assert main(["okgqa-subgraphs", *conf, "--dataset", dataset, "--questions", str(entity_sets)]) == 0
    sweep = ["okgqa-sweep", *conf, "--dataset", dataset, "--scope", "subgraphs", "--name", "qs", "--methods", "ED"]
    assert main([*sweep, "--seeds", "1", "--levels", "0.5", "--report-dir", str(tmp_path / "sweep")]) == 0
    vectors = {question: QUESTION, **NODES, **RELATIONS}
    asked = []

    def reciter(body):
        asked.append(body["messages"][-1]["content"])
        return {"content": "Aristotle influenced Alexander the Great."}

    models = {
        "reciter": reciter,
        "judge": lambda body: {"content": "Steps: read the answer.\nScore: 7"},
        "embed": lambda body: {"embeddings": [vectors.get(text, [0.0, 1.0]) for text in body["input"]]},
    }
    with LlmServer(models) as server:
        code, doc = _predict(
            config, server, dataset, texts, tmp_path, "--context", "triplets",
            "--set", "predict.embedding_model=embed", "--set", "predict.retrieval_k=3",
        )  # fmt: skip
    assert code == 0, doc.get("error")
    line = (
        "Below are the facts that might be relevant to answer the question: ('Alexander_the_Great', 'influencedBy', "
        "'Aristotle'), ('Aristotle', 'wikiPageWikiLink', 'Plato')\n"
    )
    assert sum(line in prompt for prompt in asked) == 1  # level 0.0; the perturbed graph's line is another
    results = {r["metric"]: r["value"] for r in doc["results"] if r.get("level") == 0.0}
    assert results["geval_correctness"] == pytest.approx(70.0, abs=1e-6)
