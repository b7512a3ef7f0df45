"""The procedural question generator of paper 002's types on a generated KG: every planted type is
recovered by the classifier, the questions do not depend on the partitioning, and `kgbrink gt-questions`
plants, exports, re-reads and classifies them through the CLI."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient
from pyspark.sql import functions as F

from kgbrink.cli import main
from kgbrink.core import catalog
from kgbrink.core.delta import read_table
from kgbrink.core.jobs import JobContext
from kgbrink.synthkgqa import answer_types, generator, questions
from tests.conftest import conf_args
from tests.test_synthkgqa_answer_types import TEMPLATES


@pytest.fixture(scope="module")
def synth_dataset(spark, config, tmp_path_factory) -> str:
    from kgbrink.jobs import ingest
    from kgbrink.kg import synth

    root = tmp_path_factory.mktemp("gtq")
    synth.write_dataset(synth.generate(6000, seed=5), root / "kg")
    ingest.run(JobContext(spark, config), ingest.IngestOptions(dataset=str(root / "ds"), input=str(root / "kg")))
    return str(root / "ds")


def _kg(spark, dataset):
    return read_table(spark, catalog.path("triples", dataset=dataset)).select("h", "r", "t")


def test_every_planted_type_is_recovered(spark, synth_dataset):
    kg = _kg(spark, synth_dataset)
    nodes = read_table(spark, catalog.path("entities", dataset=synth_dataset)).select("id")
    types = list(TEMPLATES)
    planted = generator.plant(kg, nodes, types, per_type=3, seed=7, split="test").localCheckpoint()
    framed = planted.withColumns({"source_file": F.lit("g"), "line_number": F.lit(1), "line": F.lit("")})
    valid, bad = questions.classify(framed, 6)
    assert bad.count() == 0
    in_kg, not_in_kg = questions.check_in_kg(framed, kg)
    assert not_in_kg.count() == 0 and in_kg.count() == 3 * len(TEMPLATES)
    rows = valid.collect()
    by_type = {}
    for r in rows:
        planted_type = r.id.rsplit(":", 1)[0]
        assert r.graph_isomorphism == planted_type, r
        assert r.split == "test" and r.answer not in r.seeds
        assert len({x for t in r.answer_subgraph for x in (t.h, t.t)}) == r.n_edges + 1
        by_type[planted_type] = by_type.get(planted_type, 0) + 1
    assert by_type == dict.fromkeys(types, 3)


def test_planted_questions_ignore_partitioning(spark, synth_dataset):
    kg = _kg(spark, synth_dataset)
    nodes = read_table(spark, catalog.path("entities", dataset=synth_dataset)).select("id")
    types = ["(1)", "(2)(1)", "((1)(1))", "(3)", "(2)(1)(1)"]
    runs = []
    for parts in (1, 5):
        planted = generator.plant(kg.repartition(parts), nodes.repartition(parts), types, per_type=6, seed=3)
        runs.append(sorted(planted.collect()))
    assert runs[0] == runs[1] and len(runs[0]) == 30
    other = sorted(generator.plant(kg, nodes, types, per_type=6, seed=4).collect())
    assert other != runs[0]


def test_types_are_checked():
    with pytest.raises(ValueError, match="canonical"):
        generator.shapes(["(1)(2)"])
    with pytest.raises(ValueError, match="repeated"):
        generator.shapes(["(1)", "(1)"])
    assert [s.n_edges for s in generator.shapes(["(1)", "((1)(1)(1))(2)"])] == [1, 6]
    assert answer_types.shape("((1)(1)(1))(2)").seeds == (3, 4, 5, 6)  # the (2) chain ends in node 3


def test_cli_generates_exports_and_re_ingests(spark, config, synth_dataset, tmp_path):
    args = ["gt-questions", *conf_args(config), "--dataset", synth_dataset]
    summary_path = tmp_path / "gen.json"
    export = tmp_path / "planted.jsonl"
    code = main(
        [*args, "--generate", "--per-type", "4", "--answers", "--export", str(export), "--json", str(summary_path)]
    )
    assert code == 0
    summary = json.loads(summary_path.read_text())
    types = config.gt_questions.types
    assert summary["counts"]["questions"] == 4 * len(types) and summary["counts"]["types_short"] == {}
    assert summary["counts"]["answer_not_in_set"] == 0
    run = MlflowClient(tracking_uri=config.tracking.uri).get_run(summary["mlflow_run_id"])
    assert run.data.tags["job"] == "gt-questions"
    lines = export.read_text().splitlines()
    assert len(lines) == 4 * len(types)
    record = json.loads(lines[0])
    assert set(record) == {"id", "seeds", "answer", "answer_subgraph"} and isinstance(record["answer"], str)
    planted = read_table(spark, catalog.path("synthkgqa.gt_questions", dataset=synth_dataset, questions="generated"))
    assert all(r.answer_in_set and r.n_answers >= 1 for r in planted.collect())

    # the exported file read back: the same questions, ids and classification
    summary_path = tmp_path / "read.json"
    assert main([*args, "--input", str(export), "--questions", "reread", "--json", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    assert summary["counts"]["quarantined"] == 0 and summary["counts"]["records"] == len(lines)
    reread = read_table(spark, catalog.path("synthkgqa.gt_questions", dataset=synth_dataset, questions="reread"))
    cols = ["id", "seeds", "answer", "answer_subgraph", "graph_isomorphism", "n_hops", "n_edges", "n_seeds"]
    assert sorted(reread.select(cols).collect()) == sorted(planted.select(cols).collect())
    counts = read_table(spark, catalog.path("synthkgqa.answer_types", dataset=synth_dataset, questions="reread"))
    assert {r.graph_isomorphism: r.questions for r in counts.collect()} == dict.fromkeys(types, 4)


def test_cli_fails_past_the_bad_fraction(spark, config, synth_dataset, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "seeds": ["nope"], "answer": "x", "answer_subgraph": [["nope", "P1", "x"]]}\nnot json\n'
    )
    args = ["gt-questions", *conf_args(config), "--dataset", synth_dataset, "--input", str(path), "--no-tracking"]
    assert main(args) == 1
    assert "max_bad_fraction" in capsys.readouterr().err
    bad = read_table(spark, catalog.path("synthkgqa.question_quarantine", dataset=synth_dataset, questions="bad"))
    assert sorted((r.line_number, r.reason) for r in bad.collect()) == [(1, "unknown_entity"), (2, "malformed_json")]
    assert main([*args, "--generate"]) != 0  # a file and --generate
    assert "either --input" in capsys.readouterr().err


def test_hubs_are_preselected_and_a_full_draw_covers_a_miss(spark):
    # A (0) and the hub H (1) share 1,000 parallel triples; H's only other neighbour is B (2); C (3) hangs
    # from B. A planted (2) from A must go A-H-B, and a (3) A-H-B-C: H-B is rarely among H's preselected
    # triples (64 of 1,001), so the attempt falls back to H's full incidence.
    triples = [(0, r, 1) for r in range(1000)] + [(1, 5, 2), (2, 6, 3)]
    kg = spark.createDataFrame(triples, "h int, r int, t int")
    nodes = spark.createDataFrame([(0,)], "id int")
    got = {r.id: r for r in generator.plant(kg, nodes, ["(2)", "(3)"], per_type=1, seed=11).collect()}
    assert got["(2):0"].seeds == [2] and got["(2):0"].answer == 0
    assert [(x.h, x.t) for x in got["(2):0"].answer_subgraph] == [(0, 1), (1, 2)]
    assert got["(2):0"].answer_subgraph[1].r == 5
    assert got["(3):0"].seeds == [3] and [x.t for x in got["(3):0"].answer_subgraph] == [1, 2, 3]
