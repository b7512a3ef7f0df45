"""Popularity statistics: hand-computed values, invariants, and the PROBE release's stored values."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from kgbrink.core.delta import read_table
from kgbrink.core.jobs import JobContext
from kgbrink.core.writer import statistics_triples_version
from kgbrink.jobs import stats as job
from kgbrink.kg import stats
from tests import graphs
from tests.conftest import PROBE_DATASETS

# graphs.POPULARITY: e0 -r0-> e1, e0 -r0-> e2, e1 -r1-> e2, e2 -r1-> e2 (self-loop), e3 -r0-> e0;  |T| = 5


@pytest.fixture(scope="module")
def hand_triples(spark):
    return spark.createDataFrame(graphs.POPULARITY, "h int, r int, t int")


@pytest.fixture(scope="module")
def hand_counts(hand_triples):
    return stats.entity_relation_counts(hand_triples, 3).cache()


def test_entity_popularity_by_hand(hand_counts):
    # d(e2) = in 3 (t2, t3, t4) + out 1 (t4): the self-loop counts for head and tail. delta = d / 10.
    assertDataFrameEqual(
        stats.entity_popularity(hand_counts),
        [(0, 3, 1, 2, 0, 0.3), (1, 2, 1, 1, 0, 0.2), (2, 4, 3, 1, 1, 0.4), (3, 1, 0, 1, 0, 0.1)],
    )


@pytest.mark.parametrize("broadcast", [False, True])
def test_entity_relation_popularity_by_hand(hand_counts, broadcast):
    # columns: entity, relation, out, in, d(e=>r), d(e), delta(r|e); the self-loop counts once in d(e2=>r1)
    assertDataFrameEqual(
        stats.entity_relation_popularity(hand_counts, stats.entity_popularity(hand_counts), broadcast),
        [
            (0, 0, 2, 1, 3, 3, 1.0),
            (1, 0, 0, 1, 1, 2, 0.5),
            (1, 1, 1, 0, 1, 2, 0.5),
            (2, 0, 0, 1, 1, 4, 0.25),
            (2, 1, 1, 2, 2, 4, 0.5),
            (3, 0, 1, 0, 1, 1, 1.0),
        ],
    )


def test_entity_popularity_reuses_the_counts_partitioning(hand_triples):
    # The occurrences are shuffled once, by entity; the roll-up to entities adds no shuffle by entity.
    plan = (
        stats.entity_popularity(stats.entity_relation_counts(hand_triples, 3))
        ._jdf.queryExecution()
        .executedPlan()
        .toString()
    )
    added = [
        line for line in plan.splitlines() if "Exchange hashpartitioning" in line and "REPARTITION_BY_NUM" not in line
    ]
    assert "Exchange hashpartitioning(entity" in plan and not added, plan


def test_relation_statistics_by_hand(hand_counts):
    # r0: facts 3, subjects {0, 3}, objects {0, 1, 2};  r1: facts 2, subjects {1, 2}, objects {2}
    assertDataFrameEqual(stats.relation_statistics(hand_counts), [(0, 3, 2, 3, 2 / 3, 1.0), (1, 2, 2, 1, 1.0, 0.5)])


def test_degree_histogram_by_hand(hand_counts):
    assertDataFrameEqual(stats.degree_histogram(stats.entity_popularity(hand_counts)), [(1, 1), (2, 1), (3, 1), (4, 1)])


triple_lists = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 6)), min_size=1, max_size=25, unique=True
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(triples=triple_lists)
def test_popularity_invariants(spark, triples):
    frame = spark.createDataFrame(triples, "h int, r int, t int")
    counts = stats.entity_relation_counts(frame, 5).cache()
    entities = stats.entity_popularity(counts).toPandas()
    pairs = stats.entity_relation_popularity(counts, stats.entity_popularity(counts)).toPandas()
    relations = stats.relation_statistics(counts).toPandas()
    assert entities["delta"].sum() == pytest.approx(1.0)
    assert entities["degree"].sum() == 2 * len(triples)
    loops = {e: sum(1 for h, _, t in triples if h == t == e) for e in entities["entity"]}
    per_entity = pairs.groupby("entity")["delta_rel_given_entity"].sum()
    degree = entities.set_index("entity")["degree"]
    for e, total in per_entity.items():
        assert total == pytest.approx(1 - loops[e] / degree[e])
    assert ((relations["functionality"] > 0) & (relations["functionality"] <= 1)).all()
    assert relations["facts"].sum() == len(triples)
    counts.unpersist()


def test_stats_job_uses_only_the_chosen_splits(spark, config, tmp_path):
    from kgbrink.jobs import ingest

    train = tmp_path / "train.txt"
    train.write_text("Q1\tP1\tQ2\nQ2\tP1\tQ3\n")
    valid = tmp_path / "valid.txt"
    valid.write_text("Q3\tP2\tQ1\n")
    dataset = str(tmp_path / "ds")
    ingest.run(
        JobContext(spark, config),
        ingest.IngestOptions(dataset=dataset, splits={"train": [str(train)], "valid": [str(valid)]}),
    )
    summary = job.run(JobContext(spark, config), job.StatsOptions(dataset=dataset))
    assert summary.counts["triples"] == 2
    both = job.run(JobContext(spark, config), job.StatsOptions(dataset=dataset, splits=["valid", "train"]))
    assert both.counts["triples"] == 3 and both.outputs["entity_popularity"].path.endswith(
        "stats/train+valid/entity_popularity"
    )
    with pytest.raises(ValueError, match="split\\(s\\) tset not in"):
        job.run(JobContext(spark, config), job.StatsOptions(dataset=dataset, splits=["tset"]))
    # a later ingest makes triples version 1; the statistics still name the version 0 they were computed from
    ingest.run(JobContext(spark, config), ingest.IngestOptions(dataset=dataset, splits={"train": [str(valid)]}))
    assert (
        statistics_triples_version(spark, dataset, ["train"]),
        statistics_triples_version(spark, dataset, ["train", "valid"]),
    ) == (0, 0)


def _rank_records(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("name", PROBE_DATASETS)
def test_delta_equals_probe_release_values_for_every_query(spark, config, probe_datasets, reference, name):
    """p_known / p_rel_given_known in the release's rank files are delta(e) / delta(r|e) of the KNOWN
    entity of each query (t for a head query, h for a tail query), on train.txt."""
    summary = job.run(JobContext(spark, config), job.StatsOptions(dataset=probe_datasets[name], splits=["train"]))
    entity = (
        read_table(spark, summary.outputs["entity_popularity"].path)
        .select("entity", "delta")
        .toPandas()
        .set_index("entity")["delta"]
    )
    pairs = (
        read_table(spark, summary.outputs["entity_relation_popularity"].path)
        .select("entity", "relation", "delta_rel_given_entity")
        .toPandas()
    )
    pair = pairs.set_index(["entity", "relation"])["delta_rel_given_entity"]
    files = sorted((reference / "probe" / name / "ranks").glob("*.json.gz"))
    assert len(files) == 18
    checked = 0
    for path in files:
        records = _rank_records(path)
        known = np.array([t if side == "h" else h for (h, r, t), side, *_ in records])
        relation = np.array([r for (h, r, t), *_ in records])
        p_rel = np.array([rec[3] for rec in records])
        p_known = np.array([rec[4] for rec in records])
        ours_e = entity.reindex(known).fillna(0.0).to_numpy()  # entities absent from train: delta 0
        ours_r = pair.reindex(list(zip(known, relation))).fillna(0.0).to_numpy()
        assert np.abs(ours_e - p_known).max() <= 1e-12, path.name
        assert np.abs(ours_r - p_rel).max() <= 1e-12, path.name
        checked += len(records)
    assert checked > 0
