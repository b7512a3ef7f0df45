"""Filtered ranks (PROBE Sec. 5.1): hand-computed queries, every quarantine reason, non-finite scores, and
a brute-force oracle on random inputs, for both plans (broadcast / shuffle) and under repartitioning."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from kgbrink.probe import ranking

SCORES = "model string, run string, h int, r int, t int, side string, candidate int, score double"
KNOWN = "h int, r int, t int"
NAN, INF = float("nan"), float("inf")
PLANS = [pytest.param(True, id="broadcast"), pytest.param(False, id="shuffle")]


def _rows(model, h, r, t, side, scored, run="r0"):
    return [(model, run, h, r, t, side, c, s) for c, s in scored]


# Test triple (0, r0, 1), asked both ways by two models. Known: the test triple itself (never filtered: it is
# the answer), (0, 0, 2) twice, (3, 0, 1), and (2, 0, 5) which matches neither query.
WORKED_KNOWN = [(0, 0, 1), (0, 0, 2), (0, 0, 2), (3, 0, 1), (2, 0, 5)]
WORKED_SCORES = [
    # m1 tail (0, 0, ?), answer 1 at 0.5: c2 (0.9) is filtered as (0, 0, 2) is known; c3 (0.7) beats it;
    # c4, c5 tie it; c6 is below.  E_i = {1, 3, 4, 5, 6}: rank = 1 + 1 + 2/2 = 3
    *_rows("m1", 0, 0, 1, "tail", [(1, 0.5), (2, 0.9), (3, 0.7), (4, 0.5), (5, 0.5), (6, 0.1)]),
    # m1 head (?, 0, 1), answer 0 at 0.2: c3 is filtered as (3, 0, 1) is known; c2 beats it.  rank 2 of 2
    *_rows("m1", 0, 0, 1, "head", [(0, 0.2), (2, 0.3), (3, 0.2)]),
    # m2 tail: answer 1 at 0.9 is beaten only by the filtered c2.  rank 1 of 5
    *_rows("m2", 0, 0, 1, "tail", [(1, 0.9), (2, 0.95), (3, 0.1), (4, 0.1), (5, 0.1), (6, 0.1)]),
    # m2 head: all three tie, c3 filtered: rank = 1 + 0 + 1/2
    *_rows("m2", 0, 0, 1, "head", [(0, 0.4), (2, 0.4), (3, 0.4)]),
]
WORKED_RANKS = [
    ("m1", "r0", 0, 0, 1, "tail", 3.0, 5),
    ("m1", "r0", 0, 0, 1, "head", 2.0, 2),
    ("m2", "r0", 0, 0, 1, "tail", 1.0, 5),
    ("m2", "r0", 0, 0, 1, "head", 1.5, 2),
]


def rank(spark, rows, known, **options):
    """``filtered_ranks`` as a caller writing both outputs uses it: outcomes computed once (materialized;
    freed with the DataFrame, no cache left in the shared session), then split."""
    outcomes = ranking.query_outcomes(
        spark.createDataFrame(rows, SCORES), spark.createDataFrame(known, KNOWN), **options
    ).localCheckpoint()
    return ranking.split_outcomes(outcomes)


# A query with non-finite scores of other candidates: answer 1 at 0.5; +inf and 0.7 beat it, 0.5 ties it,
# NaN / -inf / null never beat or tie it, and all count in E_i:  rank = 1 + 2 + 1/2 of 7
NON_FINITE = _rows("m3", 4, 0, 1, "tail", [(1, 0.5), (2, NAN), (3, INF), (4, -INF), (5, None), (6, 0.5), (7, 0.7)])
NON_FINITE_RANK = ("m3", "r0", 4, 0, 1, "tail", 3.5, 7)  # (4, 0, c) is known for no c


QUARANTINED = [
    (
        _rows("a", 0, 0, 9, "tail", [(1, 0.5), (2, 0.4)]),
        "target_not_scored",
        "true answer 9 is not among the 2 candidate rows",
    ),
    (_rows("b", 0, 0, 1, "tail", [(1, NAN), (2, 0.4)]), "non_finite_score", "true answer 1 has score NaN"),
    (_rows("c", 0, 0, 1, "tail", [(1, INF), (2, 0.4)]), "non_finite_score", "true answer 1 has score Infinity"),
    (_rows("d", 0, 0, 1, "head", [(0, -INF), (2, 0.4)]), "non_finite_score", "true answer 0 has score -Infinity"),
    (_rows("e", 0, 0, 1, "tail", [(1, None), (2, 0.4)]), "non_finite_score", "true answer 1 has score null"),
    (
        _rows("f", 0, 0, 1, "tail", [(1, 0.5), (2, 0.4), (3, 0.1), (2, 0.4)]),
        "duplicate_candidate",
        "1 duplicate candidate rows (e.g. candidate 2)",
    ),
    (
        _rows("g", 0, 0, 1, "tail", [(1, 0.5), (2, 0.4), (1, 0.5)]),
        "duplicate_candidate",
        "true answer 1 is scored 2 times",
    ),
    (_rows("h", 0, 0, 1, "left", [(1, 0.5), (2, 0.4)]), "bad_side", "side left is not head or tail"),
    (_rows("i", 0, 0, 1, None, [(1, 0.5), (2, 0.4)]), "bad_side", "side null is not head or tail"),
    (_rows("j", 0, None, 1, "tail", [(1, 0.5), (2, 0.4)]), "null_key", "model, run, h, r and t must not be null"),
    (_rows("k", 0, 0, 1, "tail", [(1, 0.5), (None, 0.4)]), "null_candidate", "1 of 2 rows have no candidate id"),
    # a duplicated filtered candidate is still a duplicate; a non-finite target wins over other problems
    (
        _rows("l", 0, 0, 1, "tail", [(1, 0.5), (2, 0.4), (2, 0.4)]),
        "duplicate_candidate",
        "1 duplicate candidate rows (e.g. candidate 2)",
    ),
    (_rows("m", 0, 0, 1, "tail", [(1, NAN), (2, 0.4), (2, 0.4)]), "non_finite_score", "true answer 1 has score NaN"),
]


@pytest.mark.parametrize("broadcast", PLANS)
def test_hand_computed_ranks_and_every_quarantine_reason(spark, broadcast):
    rows = WORKED_SCORES + NON_FINITE + [row for case, _, _ in QUARANTINED for row in case]
    ranks, quarantine = ranking.filtered_ranks(
        spark.createDataFrame(rows, SCORES), spark.createDataFrame(WORKED_KNOWN, KNOWN), broadcast_queries=broadcast
    )
    assertDataFrameEqual(ranks, [*WORKED_RANKS, NON_FINITE_RANK])
    assertDataFrameEqual(quarantine, [(*case[0][:6], reason, detail) for case, reason, detail in QUARANTINED])
    # missing_candidates needs the entity count: test_every_entity_must_be_scored_given_the_entity_count
    assert {reason for _, reason, _ in QUARANTINED} == set(ranking.QUARANTINE_REASONS) - {"missing_candidates"}
    assert ranks.dtypes == [
        *spark.createDataFrame([], SCORES).dtypes[:6],
        ("rank", "double"),
        ("num_candidates", "bigint"),
    ]
    assert quarantine.columns == list(ranking.QUARANTINE_COLUMNS) and dict(quarantine.dtypes)["reason"] == "string"


@pytest.mark.parametrize("broadcast", PLANS)
def test_without_duplicate_check_only_a_duplicated_answer_is_caught(spark, broadcast):
    # f: the unknown duplicate 2 counts twice (rank 1 + 2); both copies of the known 3 are filtered
    rows = _rows("f", 0, 0, 1, "tail", [(1, 0.5), (2, 0.6), (2, 0.6), (3, 0.9), (3, 0.9)]) + _rows(
        "g", 0, 0, 1, "tail", [(1, 0.5), (1, 0.5)]
    )
    ranks, quarantine = rank(spark, rows, [(0, 0, 3)], broadcast_queries=broadcast, check_duplicates=False)
    assertDataFrameEqual(ranks, [("f", "r0", 0, 0, 1, "tail", 3.0, 3)])
    assertDataFrameEqual(quarantine.select("model", "reason"), [("g", "duplicate_candidate")])


# |E| = 4 entities (ids 0-3), query (0, 0, ?) with answer 1 at 0.5 and nothing known but the answer
ALL_SCORED = _rows("all", 0, 0, 1, "tail", [(0, 0.9), (1, 0.5), (2, 0.1), (3, 0.6)])  # rank 1 + 2 of 4
ONE_MISSING = _rows("miss", 0, 0, 1, "tail", [(1, 0.5), (2, 0.6), (3, 0.1)])  # entity 0 not scored: 2 of 3
DUPLICATE = _rows("dup", 0, 0, 1, "tail", [(1, 0.5), (2, 0.6), (2, 0.6), (3, 0.1)])  # 4 rows, 0 missing
BOTH = _rows("both", 0, 0, 1, "tail", [(1, 0.5), (2, 0.6), (2, 0.6)])  # 3 rows: missing comes first


@pytest.mark.parametrize("broadcast", PLANS)
def test_every_entity_must_be_scored_given_the_entity_count(spark, broadcast):
    rows = ALL_SCORED + ONE_MISSING + DUPLICATE + BOTH
    known = [(0, 0, 1)]
    outcomes = ranking.query_outcomes(
        spark.createDataFrame(rows, SCORES), spark.createDataFrame(known, KNOWN), broadcast, n_entities=4
    ).localCheckpoint()
    ranks, quarantine = ranking.split_outcomes(outcomes)
    assertDataFrameEqual(ranks, [("all", "r0", 0, 0, 1, "tail", 3.0, 4)])
    assertDataFrameEqual(
        quarantine.select("model", "reason", "detail"),
        [
            ("miss", "missing_candidates", "3 candidate rows for 4 entities (at least 1 not scored)"),
            ("dup", "duplicate_candidate", "1 duplicate candidate rows (e.g. candidate 2)"),
            ("both", "missing_candidates", "3 candidate rows for 4 entities (at least 1 not scored)"),
        ],
    )
    assert outcomes.filter("reason is null").first()["unscored"] == 0
    # --partial-candidates: ranked among the candidates scored (|E_i| = 3), and reported as unscored
    partial = ranking.query_outcomes(
        spark.createDataFrame(ONE_MISSING + ALL_SCORED, SCORES),
        spark.createDataFrame(known, KNOWN),
        broadcast,
        n_entities=4,
        partial_candidates=True,
    )
    assertDataFrameEqual(
        partial.select("model", "rank", "num_candidates", "reason", "unscored"),
        [("miss", 2.0, 3, None, 1), ("all", 3.0, 4, None, 0)],
    )


# ------------------------------------------------------------------------------------------ oracle


def oracle(rows, known):
    """Brute force, one query at a time, straight from the protocol (Python's float comparisons are
    IEEE: NaN never beats or ties, +inf beats)."""
    known = set(known)
    queries = defaultdict(list)
    for *key, c, s in rows:
        queries[tuple(key)].append((c, s))
    out = {}
    for (m, run, h, r, t, side), scored in queries.items():
        answer = h if side == "head" else t
        target = [s for c, s in scored if c == answer]
        if side not in ("head", "tail"):
            out[(m, run, h, r, t, side)] = "bad_side"
        elif None in (m, run, h, r, t):
            out[(m, run, h, r, t, side)] = "null_key"
        elif any(c is None for c, _ in scored):
            out[(m, run, h, r, t, side)] = "null_candidate"
        elif not target:
            out[(m, run, h, r, t, side)] = "target_not_scored"
        elif len(target) > 1:
            out[(m, run, h, r, t, side)] = "duplicate_candidate"
        elif target[0] is None or not math.isfinite(target[0]):
            out[(m, run, h, r, t, side)] = "non_finite_score"
        elif len({c for c, _ in scored}) < len(scored):
            out[(m, run, h, r, t, side)] = "duplicate_candidate"
        else:
            s_star = target[0]
            kept = [
                (c, s) for c, s in scored if c == answer or ((c, r, t) if side == "head" else (h, r, c)) not in known
            ]
            greater = sum(1 for _, s in kept if s is not None and s > s_star)
            tied = sum(1 for c, s in kept if c != answer and s is not None and s == s_star)
            out[(m, run, h, r, t, side)] = (1 + greater + tied / 2, len(kept))
    return out


def outcomes_of(outcomes):
    got = {}
    for row in outcomes.collect():
        assert tuple(row[:6]) not in got, row
        got[tuple(row[:6])] = row.reason or (row.rank, row.num_candidates)
    return got


score_values = st.sampled_from([0.0, 0.5, 0.5, 1.0, 1.0, 2.0, NAN, INF, -INF, None])
query_keys = st.tuples(
    st.sampled_from(["m1", "m2"]),
    st.just("r0"),
    st.integers(0, 3),
    st.integers(0, 1),
    st.integers(0, 3),
    st.sampled_from(["head", "tail", "tail", "x"]),
)


@st.composite
def random_inputs(draw):
    keys = draw(st.lists(query_keys, min_size=1, max_size=12, unique=True))
    rows = []
    for key in keys:
        answer = key[2] if key[5] == "head" else key[4]
        ids = draw(st.lists(st.integers(0, 7), min_size=0, max_size=6, unique=True))
        if draw(st.integers(0, 5)) > 0 and answer not in ids:  # usually scored
            ids.append(answer)
        if draw(st.integers(0, 7)) == 0 and ids:  # sometimes a duplicate row
            ids.append(ids[0])
        rows.extend((*key, c, draw(score_values) if c != answer or draw(st.booleans()) else 1.0) for c in ids)
    known = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 1), st.integers(0, 7)), max_size=25))
    return rows, known


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=random_inputs(), partitions=st.integers(2, 5))
def test_matches_brute_force_oracle_whatever_the_partitioning(spark, data, partitions):
    """Both plans equal the oracle, on the input as created and scattered (a query's rows spread over
    partitions by candidate): the output does not depend on the partitioning."""
    rows, known = data
    scores, facts = spark.createDataFrame(rows, SCORES), spark.createDataFrame(known, KNOWN)
    expected = oracle(rows, known)
    scattered = scores.repartition(partitions, "candidate")
    assert (
        outcomes_of(ranking.query_outcomes(scattered, facts.repartition(partitions), broadcast_queries=True))
        == expected
    )
    assert outcomes_of(ranking.query_outcomes(scores, facts, broadcast_queries=False)) == expected
