"""``kgbrink predict`` on the local stack (issue 58): ProbeKGC questions of a small KG on s3a, asked from the
cluster's executors of a scripted OpenAI-compatible server on 127.0.0.1 (tests/llm_server.py), worker 2
killed inside the ask step. Every prompt gets its answer into model_calls; only the requests in flight when
the worker died are asked again; a second run asks nothing. Its own dataset: runs in any order."""

from __future__ import annotations

import json

import pytest

from kgbrink.core.delta import read_table
from tests.cluster.jobs import CLUSTER_CONF, KGBRINK, LOCAL_MODE, killed_in_steps, run, run_local
from tests.llm_server import LlmServerProcess

DUMP = "s3a://kgbrink/dumps/predict-kg"
DATASET = "s3a://kgbrink/datasets/predict-kg"
IN_FLIGHT, TASKS = 2, 2


@pytest.fixture(scope="module")
def questions(stack, run_dir, reader) -> int:
    """A 5,000-triple KG staged, ingested and turned into ProbeKGC questions on s3a by a local-mode Spark (what
    the test is about is predict on the cluster): their count."""
    kg = run_dir / "predict-kg"
    synth = ["synth", "--conf", "conf/local.yaml", "--set", "synth.triples=5000", "--set", "synth.seed=13"]
    run([KGBRINK, *synth, "--out", str(kg), "--no-tracking"], run_dir, "predict-synth")
    run([KGBRINK, "stage", "--conf", CLUSTER_CONF, "--input", str(kg), "--to", DUMP], run_dir, "predict-stage")
    ingest = ["ingest", *LOCAL_MODE, "--format", "wikidata5m", "--input", DUMP + "/", "--dataset", DATASET]
    mcq = ["mcq", *LOCAL_MODE, "--dataset", DATASET, "--n-triples", "40", "--seed", "7", "--difficulties", "easy"]
    mcq += ["--set", "mcq.split=train", "--out", str(run_dir / "predict-mcq")]
    run_local([ingest, mcq], run_dir, "predict-ingest-mcq")
    return read_table(reader, f"{DATASET}/mcq/probekgc/questions").count()


def test_predict_on_the_cluster_survives_a_killed_worker_and_a_rerun_asks_nothing(stack, run_dir, questions, reader):
    settings = {
        "predict.spool_dir": str(run_dir / "predict-spool"),  # every executor sees it: one machine
        "predict.tasks": TASKS,
        "predict.in_flight": IN_FLIGHT,
        "predict.backoff_seconds": 0.05,
    }
    with LlmServerProcess("--delay-ms", "500", "--model", "letter") as server:
        args = ["--benchmark", "probekgc", "--dataset", DATASET, "--model", "letter", "--base-url", server.base_url]
        args += [word for key, value in settings.items() for word in ("--set", f"{key}={value}")]
        # killed once both tasks have their requests in flight (a task per one-core worker) and answers came
        flying = IN_FLIGHT * (TASKS - 1) + 1

        def asking() -> bool:
            now = server.stats(detail=False)
            return now["concurrent"] >= flying and now["completed"] >= IN_FLIGHT * TASKS

        done = killed_in_steps(stack, run_dir, "predict", args, "predict-kill", (("ask", False),), asking)
        stats = server.stats()
        summary = run_dir / "predict-again.json"
        # the rerun finds every answer in model_calls on s3a: local mode suffices (CI time)
        run_local([["predict", *LOCAL_MODE, *args, "--json", str(summary)]], run_dir, "predict-again")
        again = json.loads(summary.read_text())
        assert server.stats()["requests"] == stats["requests"]
    assert done["status"] == "ok" and done["counts"]["prompts"] == questions >= 40
    # the dataset is on s3a: the plain files (the score report) go to the driver's data_dir
    assert "/predict/probekgc/probekgc/" in done["params"]["files"] and "://" not in done["params"]["files"]
    completed = [p["completed"] for p in stats["by_prompt"].values()]
    assert len(completed) == done["counts"]["distinct_prompts"] and min(completed) >= 1
    # a prompt answered twice was in flight on worker 2 when it died: at most its task's in-flight requests;
    # those in flight were asked again by the task's next attempt
    assert sum(completed) - len(completed) <= IN_FLIGHT
    assert max(p["requests"] for p in stats["by_prompt"].values()) >= 2
    calls = read_table(reader, f"{DATASET}/predict/model_calls").filter("model = 'letter'")
    assert calls.count() == calls.select("call_id").distinct().count() == len(completed)
    assert again["counts"]["asked"] == 0 and again["results"] == done["results"]
    assert any(r["metric"] == "accuracy.easy" for r in done["results"])
