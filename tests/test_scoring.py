"""Rank metrics: the paper's worked examples, hand-computed PROBE cells, validation and quarantine, the
score job (keys, eps policies, popularity groups, determinism, resume after a kill), the CLI contract
and the 240 published cells of PROBE's Tables 4 and 5."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.cli import main
from kgbrink.core.delta import read_table
from kgbrink.core.jobs import JobContext
from kgbrink.jobs import ingest, reproduce_probe, score
from kgbrink.probe import plots, rankfiles, scoring
from tests.conftest import PROJECT_ROOT

RANK_SCHEMA = "model string, run string, rank double, num_candidates long"
NO_POPULARITY = {"betas": (0.0,), "popularity_groups": 0, "strat_betas": ()}


def _values(scores: scoring.Scores, model: str, run: str = "1") -> dict:
    return {
        (r["metric"], r["alpha"], r["beta"]): r["value"]
        for r in scores.results
        if r["model"] == model and r["run"] == run
    }


def test_paper_worked_example_mrr_and_hits(spark):
    # PROBE paper, Sec. 1: model A ranks [1, 2, 50], model B [2, 2, 5]: MRR 0.51 vs 0.40, Hits@5 2/3 vs 1.
    rows = [("A", "1", r, 100) for r in (1.0, 2.0, 50.0)] + [("B", "1", r, 100) for r in (2.0, 2.0, 5.0)]
    scores = scoring.score_ranks(
        spark.createDataFrame(rows, RANK_SCHEMA),
        scoring.MetricSpec(alphas=(1.0,), hits=(5,), p_values=(), **NO_POPULARITY),
    )
    a, b = _values(scores, "A"), _values(scores, "B")
    assert round(a[("mrr", None, None)], 2) == 0.51 and round(b[("mrr", None, None)], 2) == 0.40
    assert a[("mrr", None, None)] == pytest.approx((1 + 1 / 2 + 1 / 50) / 3, abs=1e-9)
    assert a[("hits@5", None, None)] == pytest.approx(2 / 3) and b[("hits@5", None, None)] == 1.0


def test_classic_metrics_and_probe_transform_by_hand(spark):
    # ranks 1, 2.5, 10 among N = 10 candidates each
    rows = [("m", "1", r, 10) for r in (1.0, 2.5, 10.0)]
    spec = scoring.MetricSpec(alphas=(1.0, 0.0, -1.0), hits=(1, 3), p_values=(0.5,), **NO_POPULARITY)
    v = _values(scoring.score_ranks(spark.createDataFrame(rows, RANK_SCHEMA), spec), "m")
    # f*(r, 1) = (1/r - 1/10) / (1 - 1/10): 1, 1/3, 0
    assert v[("probe", 1.0, 0.0)] == pytest.approx(4 / 9, abs=1e-9)
    # alpha -> 0: 1 - ln r / ln 10: 1, 1 - log10(2.5), 0
    assert v[("probe", 0.0, 0.0)] == pytest.approx((1 + 1 - math.log10(2.5)) / 3, abs=1e-9)
    # alpha = -1: (N - r) / (N - 1): 1, 7.5/9, 0
    assert v[("probe", -1.0, 0.0)] == pytest.approx((1 + 7.5 / 9) / 3, abs=1e-9)
    assert v[("mr", None, None)] == 4.5
    assert v[("mrr", None, None)] == pytest.approx(0.5, abs=1e-9)
    assert v[("hits@1", None, None)] == pytest.approx(1 / 3) and v[("hits@3", None, None)] == pytest.approx(2 / 3)
    assert v[("p-mrr@0.5", None, None)] == pytest.approx((1 + 2.5**-0.5 + 10**-0.5) / 3, abs=1e-9)
    assert v[("amri", None, None)] == pytest.approx(1 - 21 / 27, abs=1e-9)  # 1 - 2 * (0 + 1.5 + 9) / 27
    assert v[("wgmr", None, None)] == pytest.approx(25 ** (1 / 3), abs=1e-6)  # exp((ln 1 + ln 2.5 + ln 10) / 3)
    # normalised: 1 - 9 (ln 1 + ln 2.5 + ln 10) / (3 * 9 ln 10) = 1 - log10(25) / 3
    assert v[("wmr", None, None)] == pytest.approx(1 - math.log10(25) / 3, abs=1e-7)


def test_amri_and_wmr_with_different_candidate_counts(spark):
    rows = [("m", "1", 1.0, 100), ("m", "1", 2.5, 10), ("m", "1", 50.0, 100)]
    # the same queries answered at rank 1 (model best) and last (model last): WMR's fixed optimum and pessimum
    extremes = [(model, "1", rank, n) for *_, n in rows for model, rank in (("best", 1.0), ("last", float(n)))]
    scores = scoring.score_ranks(
        spark.createDataFrame(rows + extremes, RANK_SCHEMA),
        scoring.MetricSpec(alphas=(1.0,), p_values=(), **NO_POPULARITY),
    )
    v = _values(scores, "m")
    assert v[("amri", None, None)] == pytest.approx(1 - 16.8333333333 / 34.5, abs=1e-9)
    # weights C_i = N_i - 1 = 99, 9, 99 (Tiwari et al.'s corrupted candidate set)
    assert v[("wgmr", None, None)] == pytest.approx(math.exp((9 * math.log(2.5) + 99 * math.log(50)) / 207), abs=1e-6)
    # WMR = 1 - sum C ln r / sum C ln N = 1 - (9 ln 2.5 + 99 ln 50) / (99 ln 100 + 9 ln 10 + 99 ln 100)
    worst = 198 * math.log(100) + 9 * math.log(10)
    assert v[("wmr", None, None)] == pytest.approx(1 - (9 * math.log(2.5) + 99 * math.log(50)) / worst, abs=1e-7)
    assert _values(scores, "best")[("wmr", None, None)] == 1.0 and _values(scores, "last")[("wmr", None, None)] == 0.0


def test_single_candidate_scores_the_optimum_and_amri_is_undefined(spark):
    v = _values(
        scoring.score_ranks(
            spark.createDataFrame([("m", "1", 1.0, 1)], RANK_SCHEMA), scoring.MetricSpec(p_values=(), **NO_POPULARITY)
        ),
        "m",
    )
    assert all(v[("probe", a, 0.0)] == 1.0 for a in (1.0, 0.5, 0.0, -0.5, -1.0))
    assert v[("amri", None, None)] is None and v[("wmr", None, None)] is None and v[("wgmr", None, None)] is None


POP_SCHEMA = "model string, run string, rank double, num_candidates long, entity_degree long, relation_degree long"


def test_probe_weights_eps_and_unseen_targets_by_hand(spark):
    # (rank, N, d(e), d(e=>r)) with 2|T| = 40: delta(e), delta(r|e) = (0.5, 0.5), (0.1, 0.25); the last
    # query's target has no statistics (delta 0)
    rows = [("m", "1", 1.0, 10, 20, 10), ("m", "1", 2.5, 10, 4, 1), ("m", "1", 10.0, 10, 0, 0)]
    frame = spark.createDataFrame(rows, POP_SCHEMA)
    release = scoring.score_ranks(
        frame, scoring.MetricSpec(alphas=(1.0,), betas=(0.0, 1.0), p_values=(), popularity_groups=0), total=40
    )
    # eps_e = 0.1, eps_r = 0.25: w = 1/(0.6*0.75) = 20/9, 1/(0.2*0.5) = 10, 1/(0.1*0.25) = 40; f* = 1, 1/3, 0
    assert _values(release, "m")[("probe", 1.0, 1.0)] == pytest.approx(5 / 47, abs=1e-9)
    assert _values(release, "m")[("probe", 1.0, 0.0)] == pytest.approx(4 / 9, abs=1e-9)
    assert release.eps[("m", "1")] == (0.1, 0.25)
    constant = scoring.score_ranks(
        frame, scoring.MetricSpec(alphas=(1.0,), betas=(1.0,), p_values=(), eps=0.5, popularity_groups=0), total=40
    )
    # w = 1, 1/(0.6*0.75) = 20/9, 1/(0.5*0.5) = 4
    assert _values(constant, "m")[("probe", 1.0, 1.0)] == pytest.approx(47 / 195, abs=1e-9)


@pytest.mark.parametrize("broadcast", [True, False])
def test_target_degrees_and_their_deltas_by_hand(spark, broadcast):
    from kgbrink.kg import stats

    # train: (0 r0 1), (0 r0 2), (1 r1 2); 2|T| = 6; d(0) = 2, d(1) = 2, d(2) = 2; entity 3 has no statistics
    triples = spark.createDataFrame([(0, 0, 1), (0, 0, 2), (1, 1, 2)], "h int, r int, t int")
    counts = stats.entity_relation_counts(triples, 4)
    entities = stats.entity_popularity(counts)
    pairs = stats.entity_relation_popularity(counts, entities)
    ranks = spark.createDataFrame(
        [(0, 0, 1, "head"), (0, 0, 1, "tail"), (1, 0, 2, "tail"), (0, 1, 1, "head"), (3, 0, 1, "head")],
        "h int, r int, t int, side string",
    )
    degrees = scoring.with_target_degrees(ranks, entities, pairs, broadcast=broadcast)
    # missing entity 0 with r0: d = 2, d(e=>r) = 2; 1 with r0: 2, 1; 2 with r0: 2, 1; 0 with r1: never -> 2, 0; 3: 0, 0
    expected = [
        (0, 0, 1, "head", 2, 2),
        (0, 0, 1, "tail", 2, 1),
        (1, 0, 2, "tail", 2, 1),
        (0, 1, 1, "head", 2, 0),
        (3, 0, 1, "head", 0, 0),
    ]
    assertDataFrameEqual(
        degrees,
        spark.createDataFrame(expected, "h int, r int, t int, side string, entity_degree long, relation_degree long"),
    )
    assert scoring.total_degree(entities) == 6
    deltas = scoring.with_deltas(
        spark.createDataFrame([(2, 2), (2, 1), (2, 0), (0, 0)], "entity_degree long, relation_degree long"), 6
    )
    assert [tuple(r) for r in deltas.collect()] == [
        (2, 2, 1 / 3, 1.0),
        (2, 1, 1 / 3, 0.5),
        (2, 0, 1 / 3, 0.0),
        (0, 0, 0.0, 0.0),
    ]
    # bit-identical to the statistics tables' own deltas (the same double divisions)
    joined = scoring.with_deltas(pairs, 6).join(entities.select("entity", "delta"), "entity")
    assert (
        joined.count() == 5
        and joined.filter(
            (F.col("delta_e") != F.col("delta")) | (F.col("delta_re") != F.col("delta_rel_given_entity"))
        ).count()
        == 0
    )


def test_popularity_groups_split_queries_from_most_to_least_popular(spark):
    # 2|T| = 10: delta(e), delta(r|e) = (0.2, 0.5), (0.3, 1.0), (0, 0), (0.4, 0.5)
    rows = [("m", "1", 1.0, 4, 2, 1), ("m", "1", 2.0, 4, 3, 3), ("m", "1", 3.0, 5, 0, 0), ("m", "1", 1.5, 3, 4, 2)]
    scores = scoring.score_ranks(
        spark.createDataFrame(rows, POP_SCHEMA),
        scoring.MetricSpec(alphas=(1.0,), betas=(0.0,), p_values=(), popularity_groups=2),
        total=10,
    )
    # popularity (eps_e + de)(eps_r + dre) with eps 0.2 / 0.5: 0.4, 0.75, 0.1, 0.6 -> groups {q2, q4}, {q1, q3}
    groups = {g["group"]: g for g in scores.groups}
    assert (
        groups[1]["queries"] == 2
        and groups[1]["mr"] == 1.75
        and groups[1]["mrr"] == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-9)
    )
    assert (
        groups[2]["queries"] == 2
        and groups[2]["mr"] == 2.0
        and groups[2]["mrr"] == pytest.approx((1 + 1 / 3) / 2, abs=1e-9)
    )
    assert groups[1]["popularity_max"] == pytest.approx(0.75) and groups[2]["popularity_min"] == pytest.approx(0.1)


def test_strat_mrr_weights_each_query_by_its_target_frequency(spark):
    # (rank, N, d(e), d(e=>r)): the missing entities occur 4, 1 and 0 times (0 counts as 1)
    rows = [("m", "1", 1.0, 10, 4, 1), ("m", "1", 2.0, 10, 1, 1), ("m", "1", 4.0, 10, 0, 0)]
    spec = scoring.MetricSpec(
        alphas=(1.0,), betas=(0.0,), p_values=(), popularity_groups=0, strat_betas=(0.0, 0.5, 1.0)
    )
    v = _values(scoring.score_ranks(spark.createDataFrame(rows, POP_SCHEMA), spec, total=10), "m")
    assert v[("strat-mrr@0", None, None)] == pytest.approx(v[("mrr", None, None)], abs=1e-12)
    assert v[("mrr", None, None)] == pytest.approx((1 + 1 / 2 + 1 / 4) / 3, abs=1e-9)
    # beta 0.5: weights 1/2, 1, 1 -> (1/2 + 1/2 + 1/4) / (5/2); beta 1: weights 1/4, 1, 1 -> 1 / (9/4)
    assert v[("strat-mrr@0.5", None, None)] == pytest.approx(0.5, abs=1e-9)
    assert v[("strat-mrr@1", None, None)] == pytest.approx(4 / 9, abs=1e-9)


def test_popularity_buckets_top_percent_and_equal_count_by_hand():
    top = scoring.MetricSpec(popularity_top_percent=(0.34, 1.0, 50.0))
    # 300 queries in tie groups of 1, 1, 1, 148, 149: top percentages 1/3, 2/3, 1, 50.33, 100
    assert scoring.popularity_buckets(np.array([1, 1, 1, 148, 149]), top).tolist() == [0, 1, 1, 3, 3]
    # exactly on a cut belongs to it (29 of 100 queries is "top 29%"; 0.29 * 100 is 28.999... in floats)
    assert scoring.popularity_buckets(
        np.array([29, 71]), scoring.MetricSpec(popularity_top_percent=(29,))
    ).tolist() == [0, 1]
    # equal-count: floor(G * queries before / total), ties kept together
    assert scoring.popularity_buckets(np.array([2, 1, 1]), scoring.MetricSpec(popularity_groups=2)).tolist() == [
        0,
        1,
        1,
    ]
    assert scoring.MetricSpec(popularity_top_percent=(1, 10)).group_count == 3
    for bad in ((0,), (10, 5), (50, 50), (100,)):
        with pytest.raises(ValueError, match="popularity_top_percent"):
            scoring.MetricSpec(popularity_top_percent=bad)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=30).filter(lambda c: sum(c) > 0),
    cuts=st.lists(st.integers(1, 99), min_size=1, max_size=4, unique=True).map(sorted),
)
def test_top_percent_groups_hold_exactly_the_queries_within_their_cut(counts, cuts):
    bucket = scoring.popularity_buckets(np.array(counts), scoring.MetricSpec(popularity_top_percent=tuple(cuts)))
    total, through = sum(counts), np.cumsum(counts)
    bounds = [0, *cuts, 100]
    for b, t, c in zip(bucket.tolist(), through.tolist(), counts):
        # the share at least as popular lies in (bounds[b], bounds[b + 1]], exactly (empty key groups:
        # rows that were all quarantined, reported nowhere)
        assert c == 0 or bounds[b] * total < 100 * t <= bounds[b + 1] * total
    assert bucket.tolist() == sorted(bucket.tolist())


def test_top_percent_groups_of_scored_queries(spark):
    # 10 queries, d(e) = d(e=>r) (delta(r|e) = 1), the 3rd and 4th tied: top 10% holds q1, top 35% q2
    # only (the tie reaches 40%), the rest is the third group
    degrees = [10, 9, 8, 8, 6, 5, 4, 3, 2, 1]
    rows = [("m", "1", float(min(i + 1, 3)), 10, d, d) for i, d in enumerate(degrees)]
    spec = scoring.MetricSpec(alphas=(1.0,), betas=(0.0,), p_values=(), popularity_top_percent=(10, 35), strat_betas=())
    groups = scoring.score_ranks(spark.createDataFrame(rows, POP_SCHEMA), spec, total=100).groups
    assert [(g["group"], g["queries"], g["top_percent_from"], g["top_percent_to"], g["mr"]) for g in groups] == [
        (1, 1, 0.0, 10.0, 1.0),
        (2, 1, 10.0, 20.0, 2.0),
        (3, 8, 20.0, 100.0, 3.0),
    ]


def test_results_do_not_depend_on_partitioning(spark):
    import numpy as np

    rng = np.random.default_rng(3)
    n = rng.integers(2, 5000, 4000)
    degrees = rng.integers(0, 4, len(n))
    rows = [
        (
            "m",
            str(i % 3),
            float(np.floor(rng.uniform(1, k)) + 0.5 * (i % 2)) if k > 2 else 1.0,
            int(k),
            int(d),
            int(rng.integers(0, d + 1)),
        )
        for i, (k, d) in enumerate(zip(n, degrees))
    ]
    frame = spark.createDataFrame(rows, POP_SCHEMA)
    spec = scoring.MetricSpec()
    one = scoring.score_ranks(frame.coalesce(1), spec, total=10)
    many = scoring.score_ranks(frame.repartition(7, "entity_degree"), spec, total=10)
    assert one.results == many.results and one.groups == many.groups


def test_rows_with_a_check_code_are_counted_not_scored(spark):
    # rank 1 of N = 1 on a bad row would score f* = 1 if its nulled N fell through to the N = 1 branch
    ranks = spark.createDataFrame(
        [("m", "1", 1.0, 4, None), ("m", "1", 2.0, 4, None), ("m", "1", 1.0, 1, 3), ("bad", "1", 1.0, 1, 7)],
        f"{RANK_SCHEMA}, check int",
    )
    spec = scoring.MetricSpec(alphas=(1.0, 0.0), hits=(1,), p_values=(), **NO_POPULARITY)
    sums = scoring.group_sums(ranks, spec)
    # f*(1, 1) = 1, f*(2, 1) = (1/2 - 1/4) / (1 - 1/4) = 1/3; f*(1, 0) = 1, f*(2, 0) = 1 - ln 2 / ln 4 = 1/2 (times 2^32, rounded)
    assertDataFrameEqual(
        sums.select("model", "n", "quarantined", "rank2", "candidates_minus_one", "hits", "probe"),
        [("m", 2, 1, 6, 6, [1], [2**32 + 1431655765, 2**32 + 2**31]), ("bad", 0, 1, None, None, [None], [None, None])],
    )
    # one known (model, run): one global aggregate, same sums; no rows: one row of n = 0
    one_model = ranks.filter("model = 'm'")
    assertDataFrameEqual(
        scoring.group_sums(one_model, spec, {"model": "m", "run": "1"}), scoring.group_sums(one_model, spec)
    )
    assert scoring.group_sums(one_model.limit(0), spec, {"model": "m", "run": "1"}).collect()[0]["n"] == 0


def test_spec_rejects_bad_parameters():
    with pytest.raises(ValueError, match="betas"):
        scoring.MetricSpec(betas=(-0.2,))
    with pytest.raises(ValueError, match="hits"):
        scoring.MetricSpec(hits=(0,))
    with pytest.raises(ValueError, match="eps"):
        scoring.MetricSpec(eps=0.0)


def test_min_max_normalisation_per_cell_and_heat_maps(tmp_path):
    results = pd.DataFrame(
        [
            {"model": m, "run": "mean", "metric": "probe", "alpha": a, "beta": b, "value": v}
            for m, a, b, v in [
                ("A", 1.0, 0.0, 0.5),
                ("B", 1.0, 0.0, 0.3),
                ("C", 1.0, 0.0, 0.4),
                ("A", 0.0, 0.0, 0.2),
                ("B", 0.0, 0.0, 0.2),
                ("C", 0.0, 0.0, 0.2),
            ]
        ]
    )
    cells = scoring.min_max_by_cell(results).set_index(["model", "alpha"])["normalised"]
    assert cells[("A", 1.0)] == 1.0 and cells[("B", 1.0)] == 0.0 and cells[("C", 1.0)] == pytest.approx(0.5)
    assert cells[("A", 0.0)] == cells[("B", 0.0)] == 1.0  # a cell where all models tie
    written = plots.write_all(results, tmp_path)
    assert sorted(Path(p).name for p in written) == ["comparison.md", "heatmap_A.png", "heatmap_B.png", "heatmap_C.png"]
    assert Path(written[0]).read_bytes()[:4] == b"\x89PNG"
    assert "| A | 0.5000 (1.00) | 0.2000 (1.00) |" in (tmp_path / "comparison.md").read_text()


# --- the score job on a small ingested dataset --------------------------------------------------

TRAIN = "a\tr0\tb\na\tr0\tc\nb\tr1\tc\nc\tr1\tc\nd\tr0\ta\n"
GOOD = ["a,r0,b,tail,1,4", "a,r0,b,head,2,4", "e,r1,a,head,3,5", "c,r1,c,tail,1.5,3"]
BAD = [
    ("x,r0,b,tail,1,4", "unknown_entity"),
    ("a,r0,b,sideways,1,4", "bad_side"),
    ("a,r0,b,tail,0,4", "rank_below_one"),
    ("a,r0,b,tail,5,4", "rank_above_num_candidates"),
    ("a,r0,b,tail,1.3,4", "rank_not_half_integer"),
    ("a,r0,b,tail,abc,4", "bad_number"),
    ("a,r9,b,tail,1,4", "unknown_relation"),
    ("a,r0,b,tail,1", "malformed_record"),
    ("a,r0,,tail,1,4", "missing_field"),
]


@pytest.fixture(scope="module")
def small_dataset(spark, config, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("score_ds")
    (root / "train.tsv").write_text(TRAIN)
    (root / "test.tsv").write_text("e\tr1\ta\n")
    dataset = str(root / "ds")
    ingest.run(
        JobContext(spark, config),
        ingest.IngestOptions(
            dataset=dataset,
            format="delimited",
            splits={"train": [str(root / "train.tsv")], "test": [str(root / "test.tsv")]},
        ),
    )
    return dataset


def _hand_spec(**kw) -> scoring.MetricSpec:
    return scoring.MetricSpec(
        **{"alphas": (1.0,), "betas": (0.0, 1.0), "hits": (1, 3), "p_values": (), "popularity_groups": 2, **kw}
    )


def test_side_spellings_are_normalised_and_others_quarantined(spark):
    raw = spark.createDataFrame(
        [("m", "1", 0, 0, 1, side, 1.0, 3) for side in ("head", "tail", "h", " T ", "HEAD", "Tail", "t", "left", "")],
        "model string, run string, h int, r int, t int, side string, rank double, num_candidates long",
    )
    empty = spark.createDataFrame([], "id int, key string")
    checked = rankfiles.validate_ranks(raw, empty, empty, "id", n_entities=3, n_relations=1)
    assert [(r["side"], r["reason"]) for r in checked.collect()] == [
        *[
            ("head", None),
            ("tail", None),
            ("head", None),
            ("tail", None),
            ("head", None),
            ("tail", None),
            ("tail", None),
        ],
        (None, "bad_side"),
        (None, "missing_field"),
    ]


def test_model_and_run_from_file_names_that_need_url_encoding(spark, tmp_path):
    # Spark reports "my model+v2 %1.tsv" as ".../my%20model+v2%20%251.tsv"; the model is named as the user named the file
    (tmp_path / "my model+v2 %1.tsv").write_text("h\tr\tt\tside\trank\tnum_candidates\na\tr0\tb\ttail\t1\t4\n")
    (tmp_path / "Tuck ER+1__run %2.json").write_text('[[[0,1,2],"h",1.0,0.5,0.01,3]]')
    delimited = rankfiles.read_ranks(spark, [str(tmp_path / "my model+v2 %1.tsv")], rankfiles.ReadOptions()).filter(
        ~F.col("_skip")
    )  # not the header
    probe = rankfiles.read_ranks(
        spark, [str(tmp_path / "Tuck ER+1__run %2.json")], rankfiles.ReadOptions(fmt="probe", n_entities=10)
    )
    assert [
        (r["model"], r["run"]) for r in delimited.select("model", "run").union(probe.select("model", "run")).collect()
    ] == [("my model+v2 %1", "1"), ("Tuck ER+1", "run %2")]


def test_a_probe_dump_with_a_malformed_record_is_scored_and_its_quarantine_catalogued(
    spark, config, small_dataset, tmp_path
):
    """A PROBE dump's bad record reaches the quarantine table with its position as the catalogued long."""
    dump = tmp_path / "probe-dump"
    dump.mkdir()
    (dump / "m__1.json").write_text('[[[0,0,1],"h",1.0,0,0,0], [[0,0,1],"t",2.0,0,0,0], [[0,0],"t",1.0,0,0,0]]')
    opts = score.ScoreOptions(ranks=str(dump), dataset=small_dataset, spec=_hand_spec(), fmt="probe")
    summary = score.run(JobContext(spark, config.with_overrides(["scoring.max_bad_fraction=0.5"])), opts)
    assert summary.counts["scored"] == 2 and summary.counts["quarantined"] == 1
    table = summary.outputs["quarantine"]
    quarantined = read_table(spark, table.path, table.version)
    assert dict(quarantined.dtypes)["line_number"] == "bigint"
    assert [(r["line_number"], r["reason"]) for r in quarantined.collect()] == [(3, rankfiles.MALFORMED_RECORD)]


def test_score_job_on_keys_with_quarantine(spark, config, small_dataset, tmp_path):
    ranks = tmp_path / "ranks.csv"
    ranks.write_text("h,r,t,side,rank,num_candidates\n" + "\n".join(GOOD + [line for line, _ in BAD]) + "\n")
    strict = score.ScoreOptions(ranks=str(ranks), dataset=small_dataset, spec=_hand_spec(), model="hand")
    with pytest.raises(score.ScoreError, match=r"9 of 13 rank rows quarantined"):
        score.run(JobContext(spark, config), strict)
    summary = score.run(JobContext(spark, config.with_overrides(["scoring.max_bad_fraction=0.9"])), strict)
    assert summary.counts["scored"] == 4 and summary.counts["quarantined"] == 9
    assert summary.counts["quarantined_by_reason"] == {
        "unknown_entity": 1,
        "bad_side": 1,
        "rank_below_one": 1,
        "rank_above_num_candidates": 1,
        "rank_not_half_integer": 1,
        "bad_number": 1,
        "unknown_relation": 1,
        "malformed_record": 1,
        "missing_field": 1,
    }
    assert summary.counts["batches_skipped"] == 1  # the failed run had finished its only batch
    quarantine = read_table(spark, summary.outputs["quarantine"].path).orderBy("line_number").collect()
    assert [(q["line_number"], q["reason"]) for q in quarantine] == [
        (6 + i, reason) for i, (_, reason) in enumerate(BAD)
    ]
    assert (
        quarantine[0]["source_file"].endswith("ranks.csv")
        and quarantine[0]["line"] == BAD[0][0]
        and "'x'" in quarantine[0]["detail"]
    )
    v = {(r["metric"], r["alpha"], r["beta"]): r["value"] for r in summary.results if r["run"] == "1"}
    # missing entities b, a, e (no train statistics: delta 0), c; eps_e = 0.2, eps_r = 0.5; f*(r, 1) = 1, 1/3, 1/6, 1/2
    assert v[("probe", 1.0, 0.0)] == pytest.approx(0.5, abs=1e-9)
    assert v[("probe", 1.0, 1.0)] == pytest.approx(98 / 279, abs=1e-9)
    assert v[("mr", None, None)] == 1.875 and v[("mrr", None, None)] == pytest.approx(0.625, abs=1e-9)
    assert v[("hits@1", None, None)] == 0.25 and v[("hits@3", None, None)] == 1.0
    assert v[("amri", None, None)] == pytest.approx(5 / 12, abs=1e-9)
    assert summary.extra["eps"] == [{"model": "hand", "run": "1", "eps_entity": 0.2, "eps_relation": 0.5}]
    assert [g["queries"] for g in summary.extra["groups"]] == [2, 2]
    stored = read_table(spark, summary.outputs["results"].path)
    assert stored.filter("metric = 'probe' and run = 'mean'").count() == 2


def test_num_candidates_above_the_entities_are_quarantined_not_overflowed(spark, config, small_dataset, tmp_path):
    # 5 entities: |E_i| = 6 cannot be; 10^12 overflowed Spark's long sums; 10^7 moved WMR without a word
    over = ["a,r0,b,tail,1,6", "a,r0,c,tail,2,10000000", "b,r1,c,head,1,1000000000000"]
    ranks, alone = tmp_path / "ranks.csv", tmp_path / "alone.csv"
    ranks.write_text("h,r,t,side,rank,num_candidates\n" + "\n".join(GOOD + over) + "\n")
    alone.write_text("h,r,t,side,rank,num_candidates\n" + "\n".join(GOOD) + "\n")
    lenient = config.with_overrides(["scoring.max_bad_fraction=0.5"])
    summary = score.run(
        JobContext(spark, lenient),
        score.ScoreOptions(ranks=str(ranks), dataset=small_dataset, spec=_hand_spec(), model="hand"),
    )
    assert summary.counts["scored"] == 4 and summary.counts["quarantined_by_reason"] == {"bad_num_candidates": 3}
    quarantine = read_table(spark, summary.outputs["quarantine"].path).orderBy("line_number").collect()
    assert [q["detail"] for q in quarantine] == [
        f"num_candidates {n} is more than the dataset's 5 entities" for n in ("6.0", "1.0E7", "1.0E12")
    ]
    clean = score.run(
        JobContext(spark, config),
        score.ScoreOptions(ranks=str(alone), dataset=small_dataset, spec=_hand_spec(), model="hand"),
    )
    assert summary.results == clean.results


def _write_rank_parquet(
    path: Path,
    rows: list[tuple],
    columns: tuple[str, ...] = ("model", "run", "h", "r", "t", "side", "rank", "num_candidates"),
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "model": pa.string(),
        "run": pa.string(),
        "h": pa.int32(),
        "r": pa.int32(),
        "t": pa.int32(),
        "side": pa.string(),
        "rank": pa.float64(),
        "num_candidates": pa.int64(),
    }
    pq.write_table(
        pa.table({c: pa.array([row[i] for row in rows], types[c]) for i, c in enumerate(columns)}),
        path,
        row_group_size=2,
    )


@pytest.mark.parametrize("through_hadoop", [False, True])
def test_parquet_footers_prove_nulls_ranges_and_constants(spark, tmp_path, through_hadoop):
    def listed(path):
        # listed files are file: URIs, read by Python; the same files as plain paths go through Hadoop's file system
        files = rankfiles.list_rank_files(spark, str(path), "parquet")
        return [(f.removeprefix("file:"), size, mtime) for f, size, mtime in files] if through_hadoop else files

    _write_rank_parquet(
        tmp_path / "a.parquet",
        [("m", "1", 0, 0, 1, "tail", 1.0, 4), ("m", "1", 3, 1, 1, "head", 2.0, 4), ("m", "1", 2, 1, 1, "tail", 1.0, 4)],
    )
    _write_rank_parquet(
        tmp_path / "b.parquet",
        [("m", 5, 0, 1, "head", 1.5, 3), ("m", None, 1, 1, "tail", 1.0, 3)],
        ("model", "h", "r", "t", "side", "rank", "num_candidates"),
    )
    facts = rankfiles.parquet_facts(spark, listed(tmp_path))
    # h has a null in b's second row group; b has no run column; rank is floating point (no range)
    assert facts.no_nulls == {"model", "r", "t", "side", "rank", "num_candidates"}
    assert facts.ranges == {
        "model": ("m", "m"),
        "h": (0, 5),
        "r": (0, 1),
        "t": (1, 1),
        "side": ("head", "tail"),
        "num_candidates": (3, 4),
    }
    assert facts.constant("model") == "m" and facts.constant("run") is None and facts.constant("side") is None
    assert (
        facts.within("r", 0, 1)
        and not facts.within("r", 1, 1)
        and not facts.within("h", 0, 9)
        and not facts.within("model", 0, 9)
    )
    (tmp_path / "c.parquet").write_bytes(b"not parquet")
    with pytest.raises(rankfiles.RankFileError, match=r"c\.parquet: not a Parquet file"):
        rankfiles.parquet_facts(spark, listed(tmp_path / "c.parquet"))


def test_checks_the_footers_prove_are_not_run_row_by_row(spark):
    raw = spark.createDataFrame(
        [("m", "1", 7, 0, 1, "tail", 1.0, 4)],
        "model string, run string, h int, r int, t int, side string, rank double, num_candidates long",
    )
    empty = spark.createDataFrame([], "id int, key string")
    lying = rankfiles.ParquetFacts(frozenset({"h", "r", "t"}), {"h": (0, 4), "r": (0, 1), "t": (0, 4)})
    assert rankfiles.validate_ranks(raw, empty, empty, "id", 5, 2).first()["reason"] == "unknown_entity"
    assert rankfiles.validate_ranks(raw, empty, empty, "id", 5, 2, facts=lying).first()["reason"] is None


def test_score_job_on_parquet_with_and_without_footer_facts(spark, config, small_dataset, tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    _write_rank_parquet(
        ranks / "part-0.parquet", [("P", "1", 0, 0, 1, "tail", 1.0, 4), ("P", "1", 2, 1, 3, "head", 2.0, 4)]
    )
    # the dataset has 5 entities (ids 0-4): h = 5 is unknown, a null t is a missing field
    _write_rank_parquet(
        ranks / "part-1.parquet",
        [
            ("P", "1", 4, 1, 0, "tail", 1.5, 3),
            ("P", "1", 5, 0, 1, "tail", 1.0, 4),
            ("P", "1", 1, 0, None, "tail", 1.0, 4),
        ],
    )
    spec = scoring.MetricSpec(alphas=(1.0,), hits=(1,), p_values=(), **NO_POPULARITY)
    runs = {}
    for trust in ("true", "false"):
        cfg = config.with_overrides(["scoring.max_bad_fraction=0.5", f"scoring.parquet_statistics={trust}"])
        runs[trust] = score.run(
            JobContext(spark, cfg),
            score.ScoreOptions(ranks=str(ranks), dataset=small_dataset, fmt="parquet", id_kind="id", spec=spec),
        )
    on, off = runs["true"], runs["false"]
    assert on.counts["scored"] == 3 and on.counts["quarantined_by_reason"] == {"unknown_entity": 1, "missing_field": 1}
    assert on.results == off.results and on.counts["quarantined_by_reason"] == off.counts["quarantined_by_reason"]
    v = _values(scoring.Scores(on.results), "P")
    assert (
        v[("mr", None, None)] == 1.5
        and v[("mrr", None, None)] == pytest.approx((1 + 1 / 2 + 1 / 1.5) / 3, abs=1e-9)
        and v[("hits@1", None, None)] == pytest.approx(1 / 3)
    )
    quarantine = read_table(spark, on.outputs["quarantine"].path).orderBy("line_number").collect()
    assert [(Path(q["source_file"]).name, q["line_number"], q["reason"]) for q in quarantine] == [
        ("part-1.parquet", 2, "unknown_entity"),
        ("part-1.parquet", 3, "missing_field"),
    ]


def test_cli_score_contract(spark, config, small_dataset, tmp_path, capsys):
    ranks = tmp_path / "ranks.jsonl"
    ranks.write_text(
        "\n".join(
            json.dumps(
                dict(zip(["h", "r", "t", "side", "rank", "num_candidates"], line.split(",")), model="M", run="7")
            )
            for line in GOOD
        )
        + "\n"
    )
    out = tmp_path / "score.json"
    args = ["--conf", config.source, *[a for item in config.overrides for a in ("--set", item)]]
    code = main(
        [
            "score",
            *args,
            "--ranks",
            str(ranks),
            "--dataset",
            small_dataset,
            "--alpha",
            "1,0",
            "--beta",
            "0,1",
            "--hits",
            "1,3",
            "--strat-beta",
            "0,1",
            "--top-percent",
            "50",
            "--json",
            str(out),
            "--plots",
            str(tmp_path / "plots"),
        ]
    )
    capsys.readouterr()
    assert code == 0
    doc = json.loads(out.read_text())
    probe = {(r["alpha"], r["beta"]): r["value"] for r in doc["results"] if r["metric"] == "probe" and r["run"] == "7"}
    assert set(probe) == {(1.0, 0.0), (1.0, 1.0), (0.0, 0.0), (0.0, 1.0)} and probe[(1.0, 0.0)] == pytest.approx(
        0.5, abs=1e-9
    )
    classic = {r["metric"] for r in doc["results"] if r["alpha"] is None}
    assert {"mr", "mrr", "hits@1", "hits@3", "amri", "wmr", "wgmr", "strat-mrr@0", "strat-mrr@1"} <= classic
    values = {r["metric"]: r["value"] for r in doc["results"] if r["alpha"] is None and r["run"] == "7"}
    assert values["strat-mrr@0"] == pytest.approx(values["mrr"], abs=1e-12)
    # --top-percent 50: the two most popular of the four queries (all keys distinct), then the other two
    assert [(g["group"], g["queries"], g["top_percent_to"]) for g in doc["groups"]] == [(1, 2, 50.0), (2, 2, 100.0)]
    assert all({"model", "run", "metric", "alpha", "beta", "value"} <= set(r) for r in doc["results"])
    assert (tmp_path / "plots" / "heatmap_M.png").exists()
    # the summary prints MRR, the largest Hits@K and PROBE at the first alpha and beta (one run: its mean)
    assert doc["highlights"]["scores"] == (
        f"MRR {values['mrr']:.3f}, Hits@3 {values['hits@3']:.3f}, PROBE(alpha 1, beta 0) 0.500"
    )


def test_killed_score_run_resumes_without_redoing_or_double_counting(spark, config, small_dataset, tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i in range(4):  # 4 runs of one model, a file each; each becomes its own batch below
        (ranks / f"part{i:02d}.csv").write_text(
            "h,r,t,side,rank,num_candidates,model,run\n" + "\n".join(f"{g},M,{i + 1}" for g in GOOD) + "\n"
        )
    overrides = [*config.overrides, "scoring.batch_bytes=1"]
    cmd = [
        sys.executable,
        "-m",
        "kgbrink.cli",
        "score",
        "--conf",
        config.source,
        *[a for item in overrides for a in ("--set", item)],
        "--no-tracking",
        "--ranks",
        str(ranks),
        "--dataset",
        small_dataset,
        "--alpha",
        "1",
        "--beta",
        "0,1",
        "--hits",
        "1,3",
    ]
    scores = Path(small_dataset) / "scores"
    earlier = set(scores.glob("*"))  # work dirs of other tests on this dataset
    proc = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    done = 0
    while time.time() < deadline and proc.poll() is None:
        done = sum(len(list(w.glob("batches/_delta_log/*.json"))) for w in set(scores.glob("*")) - earlier)
        if done >= 1:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    proc.wait()
    assert 1 <= done < 4, f"the run was not killed half-way (batches done: {done}, exit {proc.returncode})"
    # the spec the CLI built from its arguments and the config defaults
    spec = scoring.MetricSpec(
        alphas=(1.0,),
        betas=(0.0, 1.0),
        hits=(1, 3),
        p_values=tuple(config.scoring.p_values),
        popularity_groups=config.scoring.popularity_groups,
        popularity_top_percent=tuple(config.scoring.popularity_top_percent),
        strat_betas=tuple(config.scoring.strat_betas),
    )
    resumed = score.run(
        JobContext(spark, config.with_overrides(["scoring.batch_bytes=1"])),
        score.ScoreOptions(ranks=str(ranks), dataset=small_dataset, spec=spec),
    )
    assert (
        resumed.counts["batches"] == 4 and resumed.counts["batches_skipped"] >= done and resumed.counts["scored"] == 16
    )
    one_batch = score.run(
        JobContext(spark, config), score.ScoreOptions(ranks=str(ranks), dataset=small_dataset, spec=spec)
    )
    assert one_batch.counts["batches"] == 1 and one_batch.results == resumed.results


def test_probe_tables_4_and_5_are_reproduced(spark, config, reference, probe_datasets, tmp_path):
    comparison = reproduce_probe.reproduce(JobContext(spark, config), reference, str(tmp_path), datasets=probe_datasets)
    assert len(comparison) == 240
    assert comparison["match"].all(), comparison[~comparison["match"]].head(10).to_string()


def test_rank_job_turns_candidate_scores_into_a_rank_file(spark, config, small_dataset, tmp_path):
    from kgbrink.jobs import rank

    ids = {r["key"]: r["id"] for r in read_table(spark, f"{small_dataset}/entities").collect()}
    rel = {r["key"]: r["id"] for r in read_table(spark, f"{small_dataset}/relations").collect()}
    q1 = {"a": 0.9, "b": 0.5, "c": 0.8, "d": 0.5, "e": 0.1}  # (a, r0, ?): c is filtered (a r0 c known), d ties b
    q2 = {"a": 0.2, "b": 0.3, "c": 0.4, "d": 0.1, "e": 0.35}  # (?, r1, a): only c beats e
    q4 = {"a": 0.6, "b": 0.5, "c": 0.9, "d": 0.1}  # (?, r1, c): e not scored; c filtered (c r1 c known)
    rows = [("M", ids["a"], rel["r0"], ids["b"], "tail", ids[c], s) for c, s in q1.items()]
    rows += [("M", ids["e"], rel["r1"], ids["a"], "head", ids[c], s) for c, s in q2.items()]
    rows += [("M", ids["a"], rel["r0"], ids["b"], "head", ids["b"], 0.3)]  # the true head a is not scored
    rows += [("M", ids["b"], rel["r1"], ids["c"], "head", ids[c], s) for c, s in q4.items()]
    spark.createDataFrame(
        rows, "model string, h int, r int, t int, side string, candidate int, score double"
    ).write.parquet(str(tmp_path / "scores"))
    opts = rank.RankOptions(scores=str(tmp_path / "scores"), dataset=small_dataset, out=str(tmp_path / "out"))
    with pytest.raises(score.ScoreError, match="2 of 4 queries quarantined") as failed:
        rank.run(JobContext(spark, config), opts)
    counts = failed.value.summary.counts
    assert counts["quarantined_by_reason"] == {"target_not_scored": 1, "missing_candidates": 1}
    assert counts["queries_with_missing_candidates"] == 1
    opts.partial_candidates = True
    summary = rank.run(JobContext(spark, config.with_overrides(["scoring.max_bad_fraction=0.5"])), opts)
    assert summary.counts["ranked"] == 3 and summary.counts["quarantined_by_reason"] == {"target_not_scored": 1}
    assert summary.counts["queries_with_missing_candidates"] == 1
    got = sorted(
        (r["side"], r["rank"], r["num_candidates"])
        for r in spark.read.parquet(str(tmp_path / "out" / "ranks")).collect()
    )
    assert got == [("head", 2.0, 3), ("head", 2.0, 5), ("tail", 2.5, 4)]  # q4: a beats b among a, b, d
    scored = score.run(
        JobContext(spark, config),
        score.ScoreOptions(
            ranks=str(tmp_path / "out" / "ranks"), dataset=small_dataset, fmt="parquet", id_kind="id", spec=_hand_spec()
        ),
    )
    mrr = [r["value"] for r in scored.results if r["metric"] == "mrr" and r["run"] == "1"]
    assert mrr == [pytest.approx((1 / 2.5 + 1 / 2 + 1 / 2) / 3, abs=1e-9)]


@settings(max_examples=5, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.5, 1e6]), st.sampled_from([0, 1, 3, 7, 8, 10**7, 10**12, 2**62])),
        min_size=1,
        max_size=12,
    ),
    n_entities=st.sampled_from([7, 100, 2**31 - 1]),
)
def test_rank_rows_pass_only_with_a_possible_candidate_count(spark, rows, n_entities):
    # hostile num_candidates: a row passes exactly when 1 <= rank <= N <= |E| and rank is a half-integer
    raw = spark.createDataFrame(
        [("m", "1", 0, 0, 1, "tail", rank, n) for rank, n in rows],
        "model string, run string, h int, r int, t int, side string, rank double, num_candidates long",
    )
    empty = spark.createDataFrame([], "id int, key string")
    checked = rankfiles.validate_ranks(raw, empty, empty, "id", n_entities=n_entities, n_relations=1)
    reasons = [r["reason"] for r in checked.collect()]
    passes = [1 <= rank <= n <= n_entities and rank * 2 == int(rank * 2) for rank, n in rows]
    assert [r is None for r in reasons] == passes
    assert [r == "bad_num_candidates" for r in reasons] == [n < 1 or n > n_entities for _, n in rows]


@settings(max_examples=8, deadline=None)
@given(
    queries=st.lists(
        st.tuples(st.sampled_from(["m", "n"]), st.integers(0, 2), st.sampled_from(["head", "tail"])),
        min_size=1,
        max_size=15,
    ),
    batches=st.integers(1, 3),
    packed=st.booleans(),
)
def test_every_copy_of_a_repeated_query_is_a_duplicate_whatever_the_batches(spark, queries, batches, packed):
    # the repeats are found over all rows, then each batch of rows is marked: the same rows in any batching
    rows = [(m, "1", h, 0, 1, side, 1.0, 5, f"f{i % batches}", i) for i, (m, h, side) in enumerate(queries)]
    raw = spark.createDataFrame(
        rows,
        "model string, run string, h int, r int, t int, side string, rank double, num_candidates long, "
        "source_file string, line_number long",
    )
    empty = spark.createDataFrame([], "id int, key string")

    def checked(frame):
        return rankfiles.validate_ranks(frame, empty, empty, "id", n_entities=7, n_relations=1)

    repeated = rankfiles.repeated_queries(checked(raw), *((7, 1) if packed else ()))
    got = {}
    for batch in range(batches):
        marked = rankfiles.mark_duplicate_queries(
            checked(raw.where(F.col("source_file") == f"f{batch}")), repeated, True
        )
        got.update({(r["source_file"], r["line_number"]): r["reason"] for r in marked.collect()})
    copies = {}
    for m, _, h, _, _, side, *_ in rows:
        copies[(m, h, side)] = copies.get((m, h, side), 0) + 1
    expected = {(row[8], row[9]): "duplicate_query" if copies[(row[0], row[2], row[5])] > 1 else None for row in rows}
    assert got == expected
