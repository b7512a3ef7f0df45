"""Benchmark: ``kgbrink predict`` end to end against a local OpenAI-compatible server answering in 50 ms.

A dataset holding only ``mcq/probekgc/questions`` (``--prompts`` ProbeKGC-shaped questions, 4 options) is
asked by ``kgbrink predict --benchmark probekgc`` with ``predict.tasks`` 2 x ``predict.in_flight`` 32 (64 in
flight) against ``python -m tests.llm_server --delay-ms 50 --model letter`` in its own process; then the
same command again, which asks nothing (the cache). The peer is the transport alone on the same prompts
count (``bench_predict_transport.run``: 2 processes x 32 in flight, no Spark): the job's overhead is the
difference. Reported: wall seconds of each, the ideal ``prompts * 0.05 / 64``, the ratios, and kgbrink's
overhead per prompt. Results go to ``benchmarks/results/predict.json`` under ``--label``.

    .venv/bin/python benchmarks/bench_predict.py [--prompts 100000] [--label latest]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(PROJECT))

import bench_predict_transport
from harness import load, new_results

from tests.llm_server import LlmServerProcess

RESULTS = HERE / "results" / "predict.json"
SCHEMA = (
    "id string, h int, r int, t int, task string, query_entity int, gold int, difficulty string, "
    "options array<int>, gold_position int, distractor_source string, fallback boolean, topic_degree bigint, "
    "text string"
)


def questions(spark, dataset: str, n: int) -> None:
    """``n`` questions of ~400 characters, ids ``q<i>``, difficulties in turn, as ``kgbrink mcq`` writes them."""
    from pyspark.sql import functions as F

    from kgbrink.core.delta import write_table

    text = F.format_string(
        "The incomplete triple is:\n(Q%d, P%d, <mask>)\n\nComplete the triple by answering the following question:"
        "\nWhat is the P%d of Q%d?\nA. Q%d\nB. Q%d\nC. Q%d\nD. Q%d\n\nReply with the correct option ID (A/B/C/D). "
        "Do not reply any other words.",
        "i", F.col("i") % 97, F.col("i") % 97, "i", "i", F.col("i") + 1, F.col("i") + 2, F.col("i") + 3,
    )  # fmt: skip
    difficulty = F.element_at(
        F.array(*[F.lit(d) for d in ("easy", "medium", "hard")]), (F.col("i") % 3 + 1).cast("int")
    )
    frame = spark.range(n).select(F.col("id").cast("int").alias("i")).select(
        F.concat(F.lit("q"), F.col("i").cast("string")).alias("id"),
        F.col("i").alias("h"), (F.col("i") % 97).cast("int").alias("r"), F.col("i").alias("t"),
        F.lit("tail prediction").alias("task"), F.col("i").alias("query_entity"), F.col("i").alias("gold"),
        difficulty.alias("difficulty"), F.array("i", F.col("i") + 1, F.col("i") + 2, F.col("i") + 3).alias("options"),
        F.lit(0).alias("gold_position"), F.lit("bench").alias("distractor_source"), F.lit(False).alias("fallback"),
        (F.col("i") % 50 + 1).cast("long").alias("topic_degree"), text.alias("text"),
    )  # fmt: skip
    write_table(frame, f"{dataset}/mcq/probekgc/questions", ["difficulty"])


def predict(base_url: str, dataset: str, work: str, name: str) -> tuple[float, dict]:
    from kgbrink.cli import main

    summary = f"{work}/{name}.json"
    sets = ["predict.tasks=2", "predict.in_flight=32", "predict.backoff_seconds=0.05", "predict.max_bad_fraction=0.01"]
    sets += [f"tracking.uri=sqlite:///{work}/mlflow.db", f"tracking.artifact_location={work}/mlflow-artifacts"]
    args = ["predict", "--conf", "conf/local.yaml", "--benchmark", "probekgc", "--dataset", dataset]
    args += ["--model", "letter", "--base-url", base_url, "--json", summary]
    for item in sets:
        args += ["--set", item]
    began = time.perf_counter()
    code = main(args)
    seconds = time.perf_counter() - began
    doc = json.loads(Path(summary).read_text())
    if code != 0:
        raise SystemExit(f"predict failed: {doc.get('error')}")
    return seconds, doc


def run(prompts: int) -> dict:
    from kgbrink.core.loader import load_config
    from kgbrink.core.session import spark_session

    (PROJECT / "data").mkdir(exist_ok=True)  # a clean clone has none yet
    with tempfile.TemporaryDirectory(dir=PROJECT / "data") as work:
        spark = spark_session(load_config(PROJECT / "conf" / "local.yaml"))
        dataset = f"{work}/dataset"
        questions(spark, dataset, prompts)
        with LlmServerProcess("--delay-ms", "50", "--model", "letter") as server:
            first, doc = predict(server.base_url, dataset, work, "first")
            again, cached = predict(server.base_url, dataset, work, "again")
            served = server.stats(detail=False)
        transport = bench_predict_transport.run(prompts, 2, 32, 50.0)
    ideal = prompts * 0.05 / 64
    return {
        "prompts": prompts,
        "in_flight": "2 tasks x 32",
        "predict_seconds": round(first, 2),
        "predict_steps": doc["timings"],
        "rerun_seconds": round(again, 2),
        "rerun_asked": cached["counts"]["asked"],
        "ideal_seconds": round(ideal, 2),
        "ratio_to_ideal": round(first / ideal, 3),
        "transport_seconds": transport["wall_seconds"],
        "transport_ratio_to_ideal": transport["ratio_to_ideal"],
        "overhead_ms_per_prompt": round((first - transport["wall_seconds"]) / prompts * 1000, 3),
        "server": {key: served[key] for key in ("requests", "completed", "max_concurrent")},
        "counts": {k: doc["counts"][k] for k in ("prompts", "asked", "requests", "retries", "quarantined")},
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=100_000)
    parser.add_argument("--label", default="latest")
    options = parser.parse_args()
    result = run(options.prompts)
    print(json.dumps(result, indent=2))
    recorded = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    recorded[options.label] = {**new_results(), "runs": [result]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(recorded, indent=2) + "\n")


if __name__ == "__main__":
    main()
