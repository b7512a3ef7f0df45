"""PROBE's release epsilon when no scored query has a non-zero popularity (issue 27, item 7: the branch of
``kgbrink.probe.scoring`` that falls back to eps = 1 when every delta is zero)."""

from __future__ import annotations

import pytest

from kgbrink.probe import scoring

POP_SCHEMA = "model string, run string, rank double, num_candidates long, entity_degree long, relation_degree long"


def test_release_eps_falls_back_to_one_when_every_delta_is_zero(spark):
    # no target has statistics (d(e) = d(e=>r) = 0, so delta(e) = delta(r|e) = 0 for all three queries): there
    # is no smallest non-zero delta, eps_e = eps_r = 1, every weight is (1 + 0)^-b (1 + 0)^-b = 1 and PROBE
    # at any beta is the plain mean of f*(r, 1) = (1/r - 1/N) / (1 - 1/N) = 1, 1/3, 0 (N = 10): 4/9 (to the
    # 2^-32 fixed point of the sums)
    rows = [("m", "1", 1.0, 10, 0, 0), ("m", "1", 2.5, 10, 0, 0), ("m", "1", 10.0, 10, 0, 0)]
    scores = scoring.score_ranks(
        spark.createDataFrame(rows, POP_SCHEMA),
        scoring.MetricSpec(alphas=(1.0,), betas=(0.0, 1.0), p_values=(), popularity_groups=0),
        total=40,
    )
    assert scores.eps[("m", "1")] == (1.0, 1.0)
    cells = {
        (r["metric"], r["alpha"], r["beta"]): r["value"]
        for r in scores.results
        if (r["model"], r["run"], r["metric"]) == ("m", "1", "probe")
    }
    assert cells[("probe", 1.0, 1.0)] == pytest.approx(4 / 9, abs=1e-9)
    assert cells[("probe", 1.0, 0.0)] == pytest.approx(4 / 9, abs=1e-9)
