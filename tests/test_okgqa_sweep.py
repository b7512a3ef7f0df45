"""perturb + kg-similarity: Appendix A.3 through the sweep, paper-shape checks, CLI end to end."""

from __future__ import annotations

import json
from functools import reduce

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.cli import main
from kgbrink.okgqa import perturb as okgqa_perturb
from kgbrink.okgqa import similarity as okgqa_similarity
from kgbrink.okgqa import sweep
from kgbrink.okgqa.scorers import Scorer
from tests.conftest import conf_args, own_copy

# spec App. A.3: G = {(a,r,b), (b,r,c), (a,r,c), (c,r,d), (a,s,d)} with a..d = 0..3, r = 0, s = 1
A3 = [(0, 0, 1), (1, 0, 2), (0, 0, 2), (2, 0, 3), (0, 1, 3)]


def test_appendix_a3_through_subgraph_similarity(spark):
    original = spark.createDataFrame([("q", *t) for t in A3], "scope_key string, h int, r int, t int")
    ed = [t for t in A3 if t != (0, 1, 3)]
    rs = [(0, 1, 1), (1, 0, 2), (0, 0, 2), (2, 0, 3), (0, 0, 3)]
    perturbed = spark.createDataFrame(
        [("ED", 0.2, 1, "q", *t) for t in ed] + [("RS", 0.4, 1, "q", *t) for t in rs],
        "method string, level double, seed int, scope_key string, h int, r int, t int",
    )
    scorer = Scorer("type_compatibility", spark.createDataFrame(A3, "h int, r int, t int"), 1)
    rows = {
        r.method: r
        for r in sweep.subgraph_similarity(original, perturbed, [("ED", 0.2, 1), ("RS", 0.4, 1)], scorer).collect()
    }
    assert rows["ED"].sc2d == pytest.approx(0.579212, abs=1e-6) and rows["ED"].sd2 == pytest.approx(0.348331, abs=1e-6)
    assert rows["RS"].sc2d == pytest.approx(0.585786, abs=1e-6) and rows["RS"].sd2 == 1.0
    # type compatibility (subjects of r: a, b, c; objects of r: b, c, d; of s: a and d): every ED triple is
    # original (score 1); of RS's, (a,s,b) scores 0 (b is no object of s) and (a,r,d) scores 1: ATS = 4/5
    assert rows["ED"].ats == 1.0 and rows["RS"].ats == pytest.approx(4 / 5)
    assert (rows["ED"].n_relations, rows["ED"].n_relations_perturbed) == (2, 1)


def test_paper_shapes_on_the_whole_kg(spark):
    triples = (
        spark.range(600)
        .select(
            (F.col("id") % 97).cast("int").alias("h"),
            (F.col("id") % 7).cast("int").alias("r"),
            ((F.col("id") * 31 + 5) % 101).cast("int").alias("t"),
        )
        .distinct()
    )
    # a few self-loops and reversed duplicates, which G^r drops
    extra = spark.createDataFrame([(3, 1, 3), (8, 2, 8), (44, 0, 3), (3, 0, 44)], "h int, r int, t int")
    # cached (CI time): every method, level and oracle below reads it again
    triples = triples.unionByName(extra).distinct().cache()
    n_triples = triples.count()
    scoped = triples.withColumn("scope_key", F.lit("kg"))
    scorer = Scorer("type_compatibility", triples, 4)
    levels = [0.5, 1.0]
    nested, graphs = [], {}
    for method in okgqa_perturb.METHODS:
        changed = okgqa_perturb.perturbation(scoped, method, levels, 4, True, scorer).changed
        one = okgqa_perturb.nested_graphs(scoped, changed, levels, method)
        nested.append(one.select(F.lit(method).alias("method"), F.lit(4).alias("seed"), *one.columns))
        for level in levels:
            graphs[(method, level)] = okgqa_perturb.apply_level(scoped, changed, level).select("h", "r", "t").cache()
    combos = [(m, lv, 4) for m in okgqa_perturb.METHODS for lv in levels]
    table = sweep.kg_similarity(spark, reduce(DataFrame.unionByName, nested).repartition(3), combos, scorer, None)
    rows = {(r.method, r.level): r for r in table.collect()}
    assert rows[("ED", 1.0)].ats == 0.0 and rows[("ED", 1.0)].n_triples_perturbed == 0
    assert rows[("ED", 1.0)].sc2d == pytest.approx(1.0 / (1.0 + _norm_of_clustering(triples)), abs=1e-12)
    assert rows[("ED", 0.5)].sd2 > rows[("ED", 1.0)].sd2
    # RS keeps every degree and relation: SD2 = 1; no method but ED changes the number of triples
    assert rows[("RS", 0.5)].sd2 == rows[("RS", 1.0)].sd2 == 1.0
    for method in ("RS", "RR", "ER"):
        assert all(rows[(method, level)].n_triples_perturbed == rows[(method, level)].n_triples for level in levels)
    # every level of the one-pass table equals the per-graph definitions of okgqa.similarity
    for (method, level), graph in graphs.items():
        row = rows[(method, level)]
        assert (row.n_triples, row.n_triples_perturbed) == (n_triples, graph.count())
        assert row.sd2 == pytest.approx(okgqa_similarity.sd2(triples, graph), abs=1e-12), (method, level)
        assert row.sc2d == pytest.approx(okgqa_similarity.sc2d(triples, graph), abs=1e-12), (method, level)
        assert row.ats == pytest.approx(okgqa_similarity.ats(scorer.score(graph)), abs=1e-12), (method, level)


def _norm_of_clustering(triples) -> float:
    """||C / |R| ||_2 of a graph against the empty one (spec 4.C: SC2D = 1 / (1 + ||c_o||))."""
    frame = triples.toPandas()
    _, c = okgqa_similarity.clustering_sum_local(frame)
    return float(np.linalg.norm(c / frame.r.nunique()))


@pytest.fixture(scope="module")
def small_dataset(spark, config, synth_5000, tmp_path_factory):
    dataset, base = own_copy(synth_5000, tmp_path_factory, "okgqa-sweep")  # synth --triples 5000, ingested
    keys = [r.key for r in spark.read.format("delta").load(f"{dataset}/entities").orderBy("id").limit(30).collect()]
    questions = base / "qs.jsonl"
    questions.write_text(
        "".join(json.dumps({"qid": f"q{i}", "entities": keys[i : i + 2]}) + "\n" for i in range(0, 24, 2))
    )
    assert main(["okgqa-subgraphs", *conf_args(config), "--dataset", str(dataset), "--questions", str(questions)]) == 0
    return dataset, base


@pytest.mark.parametrize("scope", ["subgraphs", "kg"])
def test_sweep_through_the_cli_writes_tables_report_and_mlflow_run(spark, config, small_dataset, scope, tmp_path):
    dataset, base = small_dataset
    # subgraphs: every method at two levels and two seeds; kg: RS and ED (the whole-KG SC2D costs a
    # triangle count per graph)
    args = ["okgqa-sweep", *conf_args(config), "--dataset", str(dataset), "--scope", scope, "--name", "qs"]
    methods = ("RS", "RR", "ER", "ED") if scope == "subgraphs" else ("RS", "ED")
    seeds = (1, 2) if scope == "subgraphs" else (1,)
    args += ["--methods", ",".join(methods), "--seeds", ",".join(map(str, seeds))]
    args += [
        "--levels",
        "0.5,1.0",
        "--report-dir",
        str(tmp_path / "report"),
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert main(args) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["params"]["dataset"] == summary["perturb"]["params"]["dataset"] == str(dataset)
    means = {(r["method"], r["level"]): r for r in summary["results"]}
    assert set(means) == {(m, lv) for m in methods for lv in (0.5, 1.0)}
    assert means[("ED", 1.0)]["ats"] == 0.0 and means[("RS", 1.0)]["sd2"] == pytest.approx(1.0, abs=0.02)
    perturb = summary["perturb"]
    ops = {(r["method"], r["level"], r["seed"]): r for r in perturb["results"]}
    n = perturb["counts"]["triples_in_scope"]
    if scope == "kg":
        assert ops[("ED", 0.5, 1)]["operations"] == n // 2 and ops[("ED", 1.0, 1)]["triples"] == 0
    for row in ops.values():
        assert row["collisions"] == 0 and row["operations"] <= row["requested"]
        assert row["reached"] == pytest.approx(row["operations"] / row["requested"])
        assert row["triples"] == n - (row["operations"] if row["method"] == "ED" else 0)
    # the similarity rows carry the operations of their graph, and the report the level reached
    similarity = spark.read.format("delta").load(
        str(dataset / "okgqa" / ("kg" if scope == "kg" else "qs") / "kg_similarity")
    )
    made = similarity.groupBy("method", "level", "seed").agg(
        F.sum("operations").alias("o"), F.sum("requested").alias("q")
    )
    for row in made.collect():
        assert (row.o, row.q) == (
            ops[(row.method, row.level, row.seed)]["operations"],
            ops[(row.method, row.level, row.seed)]["requested"],
        )
    assert "| reached |" in (tmp_path / "report" / "report.md").read_text()
    assert (tmp_path / "report" / "similarity.png").stat().st_size > 10_000
    assert "NOT the paper's s_G" in (tmp_path / "report" / "report.md").read_text()
    root = dataset / "okgqa" / ("kg" if scope == "kg" else "qs")
    log = spark.read.format("delta").load(str(root / "perturbation_log"))
    assert log.where("method = 'ED'").count() == sum(ops[("ED", 1.0, s)]["operations"] for s in seeds)
    run = MlflowClient(tracking_uri=config.tracking.uri).get_run(summary["mlflow_run_id"])
    assert run.data.tags["job"] == "okgqa-sweep"


def test_bad_levels_methods_and_missing_scorer_rows_are_clear_errors(spark, config, small_dataset, tmp_path, capsys):
    dataset, base = small_dataset
    common = ["perturb", *conf_args(config), "--dataset", str(dataset), "--scope", "kg"]
    assert main([*common, "--levels", "0.5,1.5"]) == 2
    assert "1.5 is outside (0, 1]" in capsys.readouterr().err
    assert main([*common, "--methods", "RS,XX"]) == 2
    assert "unknown method 'XX'" in capsys.readouterr().err
    scores = tmp_path / "scores"
    spark.createDataFrame([(0, 0, 0, 0.5)], "h int, r int, t int, score double").write.parquet(str(scores))
    with_scores = [
        *common,
        "--methods",
        "RR",
        "--levels",
        "0.5",
        "--scores",
        str(scores),
        "--set",
        "perturbation.scorer=scores",
    ]
    assert main(with_scores) == 1
    assert "the scores table misses" in capsys.readouterr().err


def test_similarity_of_a_perturbed_table_made_from_other_splits_fails_naming_both(config, small_dataset, capsys):
    """kg-similarity's KG and scorer must be the original perturb used (its splits, its triples version):
    the perturbed table's description records them."""
    dataset, _ = small_dataset
    common = [*conf_args(config), "--dataset", str(dataset), "--scope", "kg", "--methods", "ED", "--levels", "0.5"]
    assert main(["perturb", *common]) == 0
    capsys.readouterr()
    assert main(["kg-similarity", *common, "--splits", "train"]) == 1
    error = capsys.readouterr().err
    assert "holds 'perturbed kg on test+train+valid of triples version" in error
    assert "this run reads 'perturbed kg on train of triples version" in error
    assert main(["kg-similarity", *common]) == 0


def test_report_marks_a_level_not_reached(tmp_path):
    import pandas as pd

    from kgbrink.okgqa import report

    columns = "scope method level n_graphs ats sc2d sd2 operations requested short_graphs reached".split()
    means = pd.DataFrame(
        [("kg", "RS", 0.5, 1, 0.9, 0.8, 1.0, 50, 50, 0, 1.0), ("kg", "RS", 1.0, 1, 0.8, 0.7, 1.0, 85, 100, 1, 0.85)],
        columns=columns,
    )
    files = report.write(means, tmp_path, "type_compatibility", False)
    text = (tmp_path / "report.md").read_text()
    assert "| kg | RS | 1 | 0.8500 ! | 1 |" in text and "| kg | RS | 0.5 | 1.0000 | 1 |" in text
    assert "- RS 1 (kg): 85 of 100 operations, 1 of 1 graphs short" in text
    assert len(files) == 2 and (tmp_path / "similarity.png").stat().st_size > 10_000
