"""Perturbations RS/RR/ER/ED: exact counts per level, nesting, method invariants, partitioning."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pyspark.sql import functions as F

from kgbrink.okgqa import perturb as P
from kgbrink.okgqa.scorers import Scorer, ScorerInputError, numpy_scores

LEVELS = [0.2, 0.4, 0.6, 0.8, 1.0]


@pytest.fixture(scope="module")
def kg_rows():
    rng = random.Random(11)
    return sorted({(rng.randrange(40), rng.randrange(5), rng.randrange(40)) for _ in range(157)})


@pytest.fixture(scope="module")
def scoped(spark, kg_rows):
    # three question subgraphs (overlapping slices of the KG) and the whole KG as scope "kg"
    rows = [(f"q{i}", h, r, t) for i in range(3) for h, r, t in kg_rows[i * 30 : i * 30 + 61 + i]]
    return spark.createDataFrame(rows, "scope_key string, h int, r int, t int").cache()


def _scorer(spark, kg_rows, seed=5):
    return Scorer("type_compatibility", spark.createDataFrame(kg_rows, "h int, r int, t int"), seed)


@pytest.mark.parametrize("method", P.METHODS)
def test_exact_counts_nested_levels_and_invariants(spark, scoped, kg_rows, method):
    changed = P.perturbation(scoped, method, LEVELS, 3, False, _scorer(spark, kg_rows), 8).toPandas()
    sizes = scoped.groupBy("scope_key").count().toPandas().set_index("scope_key")["count"]
    for q, n in sizes.items():
        ops = changed[changed.scope_key == q]
        assert sorted(ops.op_rank) == list(range(len(ops)))
        previous = set()
        for level in LEVELS:
            upto = ops[ops.level <= level]
            m = int(level * n + 1e-9)
            assert len(upto) == (2 * (m // 2) if method == "RS" else m), (q, level)
            triples = set(zip(upto.h, upto.r, upto.t))
            assert previous <= triples  # nested
            previous = triples
    if method == "RS":
        # each pair exchanges its relations: the relation multiset of the pairs is unchanged
        pairs = changed.assign(pair=changed.op_rank // 2).groupby(["scope_key", "pair"])
        for _, pair in pairs:
            assert sorted(pair.r) == sorted(pair.new_r) and len(pair) == 2
        assert ((changed.new_r == changed.r) == changed.noop).all()
    if method == "ER":
        scope = scoped.toPandas()
        for q, group in changed.groupby("scope_key"):
            edges = scope[scope.scope_key == q]
            near = {(h, t) for h, t in zip(edges.h, edges.t)} | {(t, h) for h, t in zip(edges.h, edges.t)}
            nodes = set(edges.h) | set(edges.t)
            for row in group.itertuples():
                assert (row.new_h, row.new_r) == (row.h, row.r)
                if not row.noop:
                    assert row.new_t != row.h and (row.h, row.new_t) not in near and row.new_t in nodes
    if method == "ED":
        assert changed.new_h.isna().all()
    if method == "RR":
        subj = {(h, r) for h, r, _ in kg_rows}
        obj = {(t, r) for _, r, t in kg_rows}
        scope = scoped.toPandas()
        for row in changed.itertuples():
            rels = set(scope[scope.scope_key == row.scope_key].r) - {row.r}
            best = min(float((row.h, c) in subj and (row.t, c) in obj) for c in rels)
            assert row.new_r in rels and float((row.h, row.new_r) in subj and (row.t, row.new_r) in obj) == best


@pytest.mark.parametrize("method", P.METHODS)
def test_all_levels_in_one_pass_equal_the_per_level_definition(spark, scoped, kg_rows, method):
    changed = P.perturbation(scoped, method, LEVELS, 3, False, _scorer(spark, kg_rows)).localCheckpoint()
    nested = P.nested_graphs(scoped, changed, LEVELS, method).cache()
    together = P.per_level(nested).toPandas()
    for level in LEVELS:
        one = sorted(map(tuple, P.apply_level(scoped, changed, level).collect()))
        got = together[together.level == level]
        assert sorted(zip(got.scope_key, got.h, got.r, got.t)) == one
        assert sorted(map(tuple, P.at_level(nested, level).select("scope_key", "h", "r", "t").collect())) == one
    original = nested.where("original").select("scope_key", "h", "r", "t")
    assert sorted(map(tuple, original.collect())) == sorted(map(tuple, scoped.collect()))
    # one row per triple of the union, at most two per operation
    assert nested.count() == nested.select("scope_key", "h", "r", "t").distinct().count() <= 2 * scoped.count()


def test_ed_at_level_one_empties_the_graph_and_rs_collisions_are_counted(spark, scoped, kg_rows):
    changed = P.perturbation(scoped, "ED", LEVELS, 3, False).cache()
    assert P.apply_level(scoped, changed, 1.0).count() == 0
    # a graph with two parallel triples (0, a, 1), (0, b, 1): swapping their relations is a no-op on the set
    two = spark.createDataFrame([("k", 0, 0, 1), ("k", 0, 1, 1)], "scope_key string, h int, r int, t int")
    swapped = P.apply_level(two, P.perturbation(two, "RS", [1.0], 1, False), 1.0)
    assert sorted(map(tuple, swapped.collect())) == [("k", 0, 0, 1), ("k", 0, 1, 1)]


@pytest.mark.parametrize("method", ["RS", "ER", "ED"])
def test_whole_kg_scope_equals_one_scope_and_ignores_partitioning(spark, kg_rows, method):
    kg = spark.createDataFrame([("kg", *row) for row in kg_rows], "scope_key string, h int, r int, t int")
    cols = ["scope_key", "op_rank", "level", "h", "r", "t", "new_h", "new_r", "new_t"]
    as_scope = P.perturbation(kg.repartition(1), method, LEVELS, 9, False).select(*cols).toPandas()
    whole = P.perturbation(kg.repartition(5), method, LEVELS, 9, True).select(*cols).toPandas()
    key = ["op_rank"]
    assert as_scope.sort_values(key).reset_index(drop=True).equals(whole.sort_values(key).reset_index(drop=True))


def test_levels_and_methods_are_checked(spark, scoped):
    with pytest.raises(ValueError, match="outside"):
        P.perturbation(scoped, "ED", [0.0, 0.5], 1, False)
    with pytest.raises(ValueError, match="unknown perturbation method 'XX'"):
        P.perturbation(scoped, "XX", [0.5], 1, False)


def test_log_rows_name_the_first_level(spark, scoped):
    log = P.log_rows(P.perturbation(scoped, "ED", LEVELS, 3, False), "ED", 3)
    assert log.columns == P.LOG_COLUMNS
    first = log.where((F.col("scope_key") == "q0") & (F.col("op_rank") == 0)).first()
    assert first.level == 0.2 and first.new_h is None


@pytest.mark.parametrize("model", ["transe", "distmult"])
def test_embeddings_scorer_scores_and_replaces_by_the_numpy_formula(spark, model):
    rng = np.random.default_rng(4)
    ent, rel = rng.normal(size=(6, 3)), rng.normal(size=(4, 3))
    ev = spark.createDataFrame([(i, v.tolist()) for i, v in enumerate(ent)], "entity int, vec array<float>")
    rv = spark.createDataFrame([(i, v.tolist()) for i, v in enumerate(rel)], "relation int, vec array<float>")
    kg_rows = [(0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 3, 4), (4, 0, 5)]
    kg = spark.createDataFrame(kg_rows, "h int, r int, t int")
    scorer = Scorer("embeddings", kg, 1, model, 12.0, ev, rv)
    f32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731  (the vectors are stored as float)
    got = scorer.score(kg).orderBy("h").toPandas()
    h, r, t = (np.array([row[i] for row in kg_rows]) for i in range(3))
    expected = numpy_scores(f32(ent[h]), f32(rel[r]), f32(ent[t]), model, 12.0)
    assert np.allclose(got.score, expected, atol=1e-9)
    scoped = kg.withColumn("scope_key", F.lit("kg"))
    changed = P.perturbation(scoped, "RR", [1.0], 1, True, scorer).toPandas()
    for row in changed.itertuples():
        others = [c for c in range(4) if c != row.r]
        s = numpy_scores(f32(ent[[row.h] * 3]), f32(rel[others]), f32(ent[[row.t] * 3]), model, 12.0)
        assert row.new_r == others[int(np.argmin(s))]
    missing = Scorer("embeddings", kg, 1, model, 12.0, ev.where("entity < 5"), rv)
    with pytest.raises(ScorerInputError, match="1 triples lack an entity or relation vector"):
        missing.score(kg)
