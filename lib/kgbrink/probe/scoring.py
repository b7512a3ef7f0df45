"""Rank-based KGC metrics from rank rows: PROBE (Moon, Kang, Ko; papers/001, Sec. 3) and the classic ones.

A rank row is one query: ``model, run, h, r, t, side, rank, num_candidates`` (filtered, tie-averaged
rank of the true entity among |E_i| = ``num_candidates`` candidates; Sec. 5.1 "Evaluation protocol").

Definitions (n queries; r_i rank; N_i = |E_i|; C_i = N_i - 1 other candidates):

- PROBE (Eq. 2-5): f*(r, a) = (r^-a - N^-a) / (1 - N^-a) for a != 0 and 1 - ln r / ln N for a = 0 (the
  limit); N = 1 (the true entity is the only candidate) scores 1, the optimum. Weights
  w = (eps_e + delta(e))^-b * (eps_r + delta(r|e))^-b, normalised: score = sum(w f*) / sum(w).
- MR = mean r; MRR = mean 1/r; Hits@K = share of r <= K (a tie-averaged 2.5 counts for K = 3).
- p-MRR (Yang, Lin, Zhang 2022, "Rethinking KG evaluation under the open-world assumption"; their
  released code takes ``mean(1 / rank^p)``): mean r^-p. Named ``p-mrr@<p>``.
- AMRI (Berrendorf et al. 2020): 1 - (MR - 1) / (E[MR] - 1) with E[MR] = mean (N_i + 1) / 2, i.e.
  1 - 2 sum(r_i - 1) / sum(N_i - 1); undefined (null) when every N_i = 1.
- WGMR, the weighted geometric mean rank of Tiwari, Bansal, Rivero 2021 ("Revisiting the evaluation
  protocol of KGC methods for link prediction"; the authors' code ``Evaluator.py``, metric 'mrh'), each
  rank weighted by the size of its corrupted candidate set: exp(sum C_i ln r_i / sum C_i); lower is
  better; null when every C_i = 0. Named ``wgmr`` (it was ``wmr`` before the normalised metric below).
- WMR (PROBE Sec. 2 and Table 2: "WMR-bar", Tiwari et al.'s WMR normalised; fixed optimum, fixed
  pessimum, anti-monotone, candidate-size aware): WGMR rescaled between its optimum 1 (every r_i = 1) and
  its pessimum WGMR_max = exp(sum C_i ln N_i / sum C_i) (every r_i = N_i) in log space, where a
  geometric mean is an arithmetic one: WMR = 1 - ln WGMR / ln WGMR_max = 1 - sum C_i ln r_i / sum C_i
  ln N_i, i.e. the (C_i ln N_i)-weighted mean of f*(r_i, 0). 1 is best, 0 worst; null when every
  N_i = 1. Tiwari et al.'s own normalisation could not be read (see docs/fidelity.md); this is the
  rescaling PROBE's Eq. 2 applies to its own transform, and it has the four properties of Table 2.
- Strat-MRR (Mohamed, Parambath, Kaoudi, Aboulnaga 2020, "Popularity agnostic evaluation of knowledge
  graph embeddings", cited in PROBE Sec. 2 as assigning weights to test triples by popularity): the
  popularity-stratified estimator of the MRR (after Steck 2011's popularity-stratified recall): each
  query weighted by N_e^-beta, N_e the number of triples of its missing entity e on the statistics'
  splits (d(e); an entity never seen there counts once), strat-MRR = sum N_e^-beta / r_i / sum N_e^-beta.
  beta = 0 is the MRR; larger beta weighs rare targets more. Named ``strat-mrr@<beta>``. Mohamed et
  al.'s text could not be read (see docs/fidelity.md): the entity-stratified form above is kgbrink's
  reading of their definition, and their relation-stratified variant is not computed.

Queries whose missing entity has no statistics on the chosen splits (it never occurs there) get
delta(e) = delta(r|e) = 0: they are the least popular queries and weigh (eps_e * eps_r)^-b, as in the
PROBE release. Unknown ids are rejected before (quarantine), never scored.

How: One scan computes everything. Each row contributes to integer sums grouped by
``(model, run, entity_degree, relation_degree)``: d(e) and d(e=>r) of the query's MISSING entity e on the
statistics' splits (Eq. 3; ``h`` for a head query, ``t`` for a tail query), from which delta(e) =
d(e) / (2|T|) and delta(r|e) = d(e=>r) / d(e) follow per group (:func:`with_deltas`; the same double
divisions as :mod:`kgbrink.kg.stats`, so bit-identical to its tables). A query's PROBE weight depends on
nothing else, so every (alpha, beta) cell, the release's epsilon (smallest non-zero delta over the
scored queries) and the popularity groups of Fig. 11 follow exactly from these group sums on the
driver: the alpha-dependent part is summed per row, the beta-dependent part per group. Per row the
logarithms ln r and ln |E_i| are computed once, and each alpha costs two ``exp`` (r^-alpha and
|E_i|^-alpha, none for alpha = 0), computed once in a projection before the aggregate. Grouping by
integer degrees rather than by the double deltas spares Spark the per-row normalisation of floating-point
keys.

Sums are exact integers (fixed point: values in [0, 1] times 2^32, ln r times 2^24, 2r, |E_i| - 1), so
the result does not depend on partitioning or task order. Limits: at most ~2e9 queries per group and
batch (a Spark long overflow past that fails loudly under ANSI mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.probe.rankfiles import HEAD

UNIT_SCALE = 2**32  # fixed point for values in [0, 1]
LOG_SCALE = 2**24  # fixed point for ln r (ln r <= 22 for r < 4e9)
LOW_BITS = 2**32

GROUP_KEYS = ("model", "run", "entity_degree", "relation_degree")
# Version of the partial sums' layout, part of a score run's fingerprint: a run never resumes from
# partials of another layout (2: grouped by degrees instead of deltas; 3: sum C ln N for WMR).
SUMS_FORMAT = 3
KEY_TYPES = {"model": "string", "run": "string", "entity_degree": "long", "relation_degree": "long"}


@dataclass(frozen=True)
class MetricSpec:
    """What to compute. ``eps`` None is the PROBE release's rule (smallest non-zero delta over the
    scored queries, per model and run, separately for delta(e) and delta(r|e)); a number sets both."""

    alphas: tuple[float, ...] = (1.0, 0.5, 0.0, -0.5, -1.0)
    betas: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8)
    hits: tuple[int, ...] = (1, 3, 10)
    p_values: tuple[float, ...] = (0.25, 0.33, 0.67)
    eps: float | None = None
    popularity_groups: int = 4
    popularity_top_percent: tuple[float, ...] = ()
    strat_betas: tuple[float, ...] = (0.5, 1.0)

    def __post_init__(self) -> None:
        if not self.alphas:
            raise ValueError("at least one alpha is required")
        if not self.betas or any(b < 0 for b in self.betas):
            raise ValueError(f"betas must be a non-empty list of numbers >= 0, got {list(self.betas)}")
        if any(int(k) != k or k < 1 for k in self.hits):
            raise ValueError(f"hits K must be positive integers, got {list(self.hits)}")
        if any(p <= 0 for p in self.p_values):
            raise ValueError(f"p-MRR exponents must be > 0, got {list(self.p_values)}")
        if self.eps is not None and not self.eps > 0:
            raise ValueError(f"eps must be > 0 (or the release rule), got {self.eps}")
        if self.popularity_groups < 0:
            raise ValueError("popularity_groups must be >= 0")
        cuts = list(self.popularity_top_percent)
        if any(not 0 < c < 100 for c in cuts) or cuts != sorted(set(cuts)):
            raise ValueError(f"popularity_top_percent must be increasing percentages in (0, 100), got {cuts}")
        if any(b < 0 for b in self.strat_betas):
            raise ValueError(f"strat-MRR betas must be >= 0, got {list(self.strat_betas)}")

    @property
    def group_count(self) -> int:
        """Popularity groups of the breakdown: one per ``popularity_top_percent`` cut plus the rest, else
        ``popularity_groups`` equal-count groups (0: no breakdown)."""
        return len(self.popularity_top_percent) + 1 if self.popularity_top_percent else self.popularity_groups

    @property
    def needs_popularity(self) -> bool:
        """Whether the scan must join the statistics (some beta > 0, strat-MRR, or popularity groups)."""
        return any(b != 0 for b in self.betas) or bool(self.strat_betas) or self.group_count > 0

    def as_params(self) -> dict:
        return {
            "alphas": list(self.alphas),
            "betas": list(self.betas),
            "hits": list(self.hits),
            "p_values": list(self.p_values),
            "eps": "release" if self.eps is None else self.eps,
            "popularity_groups": self.popularity_groups,
            "popularity_top_percent": list(self.popularity_top_percent),
            "strat_betas": list(self.strat_betas),
        }


def pair_key(entity: Column, relation: Column) -> Column:
    """(entity, relation) ids packed in one long, entity * 2^32 + relation (ids are ints >= 0): a broadcast
    join on one long key probes Spark's long-keyed hash map instead of hashing and byte-comparing a
    two-column key row."""
    return entity.cast("long") * F.lit(1 << 32) + relation.cast("long")


def with_target_degrees(
    ranks: DataFrame, entity_popularity: DataFrame, entity_relation_popularity: DataFrame, broadcast: bool
) -> DataFrame:
    """Adds ``entity_degree`` = d(e) and ``relation_degree`` = d(e=>r) of the missing entity e (0 without
    statistics: e never occurs on the statistics' splits, or never with relation r).

    ``ranks`` has int ``h, r, t`` and ``side`` in {head, tail}; the statistics tables are those of
    :mod:`kgbrink.kg.stats`."""
    entities = entity_popularity.select(F.col("entity").alias("_target"), F.col("degree").alias("_d"))
    pairs = entity_relation_popularity.select(
        pair_key(F.col("entity"), F.col("relation")).alias("_pair"), F.col("relation_degree").alias("_dr")
    )
    if broadcast:
        entities, pairs = F.broadcast(entities), F.broadcast(pairs)
    target = F.when(F.col("side") == HEAD, F.col("h")).otherwise(F.col("t"))
    return (
        ranks.withColumn("_target", target)
        .withColumn("_pair", pair_key(F.col("_target"), F.col("r")))
        .join(entities, "_target", "left")
        .join(pairs, "_pair", "left")
        .withColumn("entity_degree", F.coalesce("_d", F.lit(0).cast("long")))
        .withColumn("relation_degree", F.coalesce("_dr", F.lit(0).cast("long")))
        .drop("_target", "_pair", "_d", "_dr")
    )


def total_degree(entity_popularity: DataFrame) -> int:
    """2|T| = sum of d(e) over the statistics' entities (every triple counts once for its head and once for
    its tail): the denominator of delta(e)."""
    return int(entity_popularity.agg(F.sum("degree")).first()[0] or 0)


def with_deltas(sums: DataFrame, total: int | None) -> DataFrame:
    """Adds ``delta_e`` = d(e) / (2|T|) and ``delta_re`` = d(e=>r) / d(e) (Sec. 3.3) to group sums keyed by
    degrees (:func:`group_sums`); ``total`` = 2|T| (:func:`total_degree`). Both are 0 for a target without
    statistics (d(e) = 0, also when the statistics are empty, ``total`` 0), and null when the sums carry no
    degrees (no popularity needed, ``total`` None)."""
    degree, relation_degree = F.col("entity_degree"), F.col("relation_degree")
    if total is None:
        return sums.withColumns({"delta_e": F.lit(None).cast("double"), "delta_re": F.lit(None).cast("double")})
    zero = F.lit(0.0)
    return sums.withColumns(
        {
            "delta_e": F.when(degree > 0, degree / F.lit(total)).otherwise(zero),
            "delta_re": F.when(degree > 0, relation_degree / degree).otherwise(zero),
        }
    )


def _fixed(value: Column, scale: int = UNIT_SCALE) -> Column:
    """round(value * scale) as a long, for value >= 0 (half up; no BigDecimal rounding per row)."""
    return (value * F.lit(float(scale)) + F.lit(0.5)).cast("long")


def _power(log_x: Column, exponent: float) -> Column:
    """x^exponent from ln x (one exp; none for exponent 0)."""
    return F.lit(1.0) if exponent == 0 else F.exp(F.lit(float(exponent)) * log_x)


def probe_transform(
    rank_term: Column, n_term: Column, log_rank: Column, log_n: Column, n: Column, alpha: float
) -> Column:
    """f*(r, alpha) of Eq. 2 from r^-alpha and N^-alpha (``rank_term``, ``n_term``, computed once per row by
    :func:`group_sums`); the alpha -> 0 limit 1 - ln r / ln N from the logarithms; 1 when N = 1; null when N
    is null (a row :func:`group_sums` must not count)."""
    value = F.lit(1.0) - log_rank / log_n if alpha == 0 else (rank_term - n_term) / (F.lit(1.0) - n_term)
    return F.when(n > 1, value).when(n == 1, F.lit(1.0))


def group_sums(ranks: DataFrame, spec: MetricSpec, constants: dict[str, str] | None = None) -> DataFrame:
    """Exact integer sums per ``(model, run, entity_degree, relation_degree)`` over rank rows.

    ``ranks`` has ``model, run, rank double, num_candidates long`` and, when ``spec.needs_popularity``,
    ``entity_degree, relation_degree`` (see :func:`with_target_degrees`); otherwise those keys are null. Rows with a
    ``check`` code (validated rows, see :func:`kgbrink.probe.rankfiles.validate_ranks`) add nothing to the sums
    and are only counted (``quarantined``; a group of only such rows has ``n`` = 0), so one scan scores the
    good rows and tells whether there are bad ones without grouping by the reason (the per-reason tally
    is the quarantine table's). ``constants``: ``model``/``run`` values every row is known to have (e.g. from
    :func:`kgbrink.probe.rankfiles.parquet_facts`); with them and no popularity keys the sums are one global
    aggregate (no hash table per row: 40% less time than grouping by a literal in Spark 4.2).
    Columns: ``n`` (good rows), ``quarantined``, ``rank2`` (sum 2r), ``reciprocal`` (sum 1/r, fixed point),
    ``candidates_minus_one`` (sum N - 1), ``wmr_hi, wmr_lo`` (sum (N - 1) round(ln r 2^24), split in 32-bit
    halves), ``wmr_max_hi, wmr_max_lo`` (the same of ln N), ``hits`` (per K), ``probe`` (sum f* per alpha,
    fixed point), ``pmrr`` (sum r^-p per p, fixed point).
    """
    rank, n = F.col("rank"), F.col("num_candidates")
    checked = "check" in ranks.columns
    if checked:  # null rank and N on bad rows: every sum below skips them (nulls propagate, sum ignores them)
        rank, n = F.when(F.col("check").isNull(), rank), F.when(F.col("check").isNull(), n)
    fixed = {**(constants or {}), **({} if spec.needs_popularity else {"entity_degree": None, "relation_degree": None})}
    keys = [k for k in GROUP_KEYS if k not in fixed]
    frame = ranks.select(
        *keys,
        *(["check"] if checked else []),
        rank.alias("rank"),
        n.alias("num_candidates"),
        F.log(rank).alias("_lr"),
        F.log(n.cast("double")).alias("_ln"),
    )
    lr, ln = F.col("_lr"), F.col("_ln")
    # r^-alpha and N^-alpha once per row: inside the aggregate's null-guarded branches Spark evaluates a
    # repeated N^-alpha twice (12 exp per row for the default grid instead of 8)
    frame = frame.withColumns(
        {f"_{x}_power{i}": _power(log, -a) for i, a in enumerate(spec.alphas) for x, log in (("rank", lr), ("n", ln))}
    )
    rank, n = F.col("rank"), F.col("num_candidates")
    wmr_term = (n - 1) * _fixed(lr, LOG_SCALE)
    wmr_max_term = (n - 1) * _fixed(ln, LOG_SCALE)
    aggregates = [
        F.count(rank).alias("n"),
        (F.count("check") if checked else F.lit(0).cast("long")).alias("quarantined"),
        F.sum((rank * 2).cast("long")).alias("rank2"),
        F.sum(_fixed(F.lit(1.0) / rank)).alias("reciprocal"),
        F.sum(n - 1).alias("candidates_minus_one"),
        F.sum(F.shiftright(wmr_term, 32)).alias("wmr_hi"),
        F.sum(wmr_term.bitwiseAND(F.lit(LOW_BITS - 1))).alias("wmr_lo"),
        F.sum(F.shiftright(wmr_max_term, 32)).alias("wmr_max_hi"),
        F.sum(wmr_max_term.bitwiseAND(F.lit(LOW_BITS - 1))).alias("wmr_max_lo"),
        F.array(*[F.sum((rank <= k).cast("long")) for k in spec.hits] or [F.lit(0).cast("long")]).alias("hits"),
        F.array(
            *[
                F.sum(_fixed(probe_transform(F.col(f"_rank_power{i}"), F.col(f"_n_power{i}"), lr, ln, n, a)))
                for i, a in enumerate(spec.alphas)
            ]
        ).alias("probe"),
        F.array(*[F.sum(_fixed(_power(lr, -p))) for p in spec.p_values] or [F.lit(0).cast("long")]).alias("pmrr"),
    ]
    sums = frame.groupBy(*keys).agg(*aggregates) if keys else frame.agg(*aggregates)
    return sums.select(
        *[F.lit(fixed[k]).cast(KEY_TYPES[k]).alias(k) if k in fixed else k for k in GROUP_KEYS],
        *[a for a in sums.columns if a not in GROUP_KEYS],
    )


SUM_COLUMNS = ("n", "rank2", "reciprocal", "candidates_minus_one", "wmr_hi", "wmr_lo", "wmr_max_hi", "wmr_max_lo")
ARRAY_COLUMNS = ("hits", "probe", "pmrr")


def merge_group_sums(partials: DataFrame, spec: MetricSpec) -> DataFrame:
    """Adds up group sums of several batches (same keys): exact, so any order gives the same result."""
    sizes = {"hits": max(1, len(spec.hits)), "probe": len(spec.alphas), "pmrr": max(1, len(spec.p_values))}
    arrays = [F.array(*[F.sum(F.col(c)[i]) for i in range(sizes[c])]).alias(c) for c in ARRAY_COLUMNS]
    return partials.groupBy(*GROUP_KEYS).agg(*[F.sum(c).alias(c) for c in SUM_COLUMNS], *arrays)


@dataclass
class Scores:
    """Finished metrics: ``results`` rows ``model, run, metric, alpha, beta, value`` (run ``mean``: the
    mean over a model's runs), ``groups`` rows of the popularity breakdown and the epsilons used."""

    results: list[dict] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    eps: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.results, columns=["model", "run", "metric", "alpha", "beta", "value"])


def _release_eps(values: np.ndarray) -> float:
    nonzero = values[values > 0]
    return float(nonzero.min()) if nonzero.size else 1.0


def _exact(values: np.ndarray, scale: int = 1) -> float:
    """An exact integer sum (Python ints), divided by the fixed-point scale."""
    return sum(int(v) for v in values) / scale


def finish(sums: pd.DataFrame, spec: MetricSpec) -> Scores:
    """Metric values from merged group sums with their deltas (pandas, one row per group; see
    :func:`group_sums`, :func:`with_deltas`).

    Per (model, run): eps (release rule or constant), weights per group, every (alpha, beta) PROBE
    cell, the classic metrics, strat-MRR per beta, and the popularity groups (:func:`_popularity_groups`).
    Sums over groups use ``math.fsum`` in key order, so the result is exact-rounded and deterministic.
    """
    out = Scores()
    if sums.empty:
        return out
    sums = sums.sort_values(["model", "run", "delta_e", "delta_re"], na_position="first", kind="mergesort")
    for (model, run), g in sums.groupby(["model", "run"], sort=True):
        n = _exact(g["n"].to_numpy())
        if n == 0:
            continue
        rows: list[tuple] = []
        # groups x alphas; exact integers converted once (deterministic), summed with fsum below
        probe = np.array([list(arr) for arr in g["probe"]], dtype=np.float64) / UNIT_SCALE
        counts = g["n"].to_numpy(dtype=np.float64)
        if spec.needs_popularity:
            de, dre = g["delta_e"].to_numpy(dtype=np.float64), g["delta_re"].to_numpy(dtype=np.float64)
            eps_e = spec.eps if spec.eps is not None else _release_eps(de)
            eps_r = spec.eps if spec.eps is not None else _release_eps(dre)
            popularity = (eps_e + de) * (eps_r + dre)
            out.eps[(model, run)] = (eps_e, eps_r)
        for beta in spec.betas:
            weights = np.ones(len(g)) if beta == 0 else popularity ** (-beta)
            total = math.fsum(weights * counts)
            for i, alpha in enumerate(spec.alphas):
                cell = math.fsum(weights * probe[:, i])
                rows.append(("probe", alpha, beta, cell / total))
        rank2, cm1 = _exact(g["rank2"].to_numpy()), _exact(g["candidates_minus_one"].to_numpy())
        rows.append(("mr", None, None, rank2 / 2 / n))
        rows.append(("mrr", None, None, _exact(g["reciprocal"].to_numpy(), UNIT_SCALE) / n))
        for i, k in enumerate(spec.hits):
            rows.append((f"hits@{k}", None, None, _exact(np.array([a[i] for a in g["hits"]])) / n))
        for i, p in enumerate(spec.p_values):
            rows.append((f"p-mrr@{p:g}", None, None, _exact(np.array([a[i] for a in g["pmrr"]]), UNIT_SCALE) / n))
        rows.append(("amri", None, None, 1 - (rank2 - 2 * n) / cm1 if cm1 else None))
        log_rank = _split_sum(g, "wmr") / LOG_SCALE  # sum C_i ln r_i
        log_worst = _split_sum(g, "wmr_max") / LOG_SCALE  # sum C_i ln N_i
        rows.append(("wgmr", None, None, math.exp(log_rank / cm1) if cm1 else None))
        rows.append(("wmr", None, None, 1 - log_rank / log_worst if log_worst else None))
        if spec.strat_betas:
            # N_e = d(e) of the missing entity, at least 1 (an entity unseen on the statistics' splits)
            frequency = np.maximum(g["entity_degree"].to_numpy(dtype=np.float64), 1.0)
            reciprocal = g["reciprocal"].to_numpy(dtype=np.float64) / UNIT_SCALE
            for beta in spec.strat_betas:
                weights = frequency ** (-beta)
                value = math.fsum(weights * reciprocal) / math.fsum(weights * counts)
                rows.append((f"strat-mrr@{beta:g}", None, None, value))
        out.results.extend(
            {"model": model, "run": run, "metric": m, "alpha": a, "beta": b, "value": v} for m, a, b, v in rows
        )
        if spec.group_count:
            out.groups.extend(_popularity_groups(model, run, g, popularity, spec))
    out.results.extend(_mean_over_runs(out.results))
    return out


def _split_sum(g: pd.DataFrame, name: str) -> int:
    """An exact sum kept in 32-bit halves ``<name>_hi``, ``<name>_lo`` (see :func:`group_sums`)."""
    return sum(int(v) for v in g[f"{name}_hi"]) * LOW_BITS + sum(int(v) for v in g[f"{name}_lo"])


def popularity_buckets(counts: np.ndarray, spec: MetricSpec) -> np.ndarray:
    """The 0-based popularity group of each tie group of queries, given their ``counts`` from the most to
    the least popular (Fig. 11; ties, one group key, stay together).

    With ``spec.popularity_top_percent`` = (c_1, ..., c_k), the paper's "top x%" groups (Sec. 5.3: "Top
    0.34%" is the most popular group): a tie group's top percentage is p = 100 * (queries at least as
    popular) / (all queries), and it falls in group j when c_j-1 < p <= c_j (c_0 = 0, c_k+1 = 100), so
    every query of group "top c_j%" is among the c_j% most popular. Compared exactly (the percentages as
    the decimals written). Otherwise ``spec.popularity_groups`` = G equal-count groups: group
    floor(G * (queries more popular) / total), capped at G - 1."""
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if spec.popularity_top_percent:
        cuts = [Fraction(str(c)) for c in spec.popularity_top_percent]
        through = np.cumsum(counts)
        return np.array([sum(1 for c in cuts if 100 * int(t) > c * total) for t in through], dtype=np.int64)
    groups = spec.popularity_groups
    before = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.minimum(groups - 1, (before * groups) // max(total, 1))


def _popularity_groups(model: str, run: str, g: pd.DataFrame, popularity: np.ndarray, spec: MetricSpec) -> list[dict]:
    """Metrics per popularity group: queries ordered from the most to the least popular by
    (eps_e + delta_e)(eps_r + delta_re), the order of the PROBE weights for every beta > 0, and cut by
    :func:`popularity_buckets`. ``top_percent_from`` / ``top_percent_to``: the share of all queries (in %)
    more popular than the group, and at least as popular as its least popular query. Empty groups are
    left out."""
    order = np.argsort(-popularity, kind="mergesort")
    counts = g["n"].to_numpy(dtype=np.int64)[order]
    total = int(counts.sum())
    bucket = popularity_buckets(counts, spec)
    rows = g.iloc[order].assign(_bucket=bucket, _popularity=popularity[order], _through=np.cumsum(counts))
    out = []
    for b, part in rows.groupby("_bucket", sort=True):
        n = int(part["n"].sum())
        if n == 0:
            continue
        through = int(part["_through"].max())
        record = {
            "model": model,
            "run": run,
            "group": int(b) + 1,
            "queries": n,
            "share": n / total,
            "top_percent_from": 100 * (through - n) / total,
            "top_percent_to": 100 * through / total,
            "popularity_max": float(part["_popularity"].max()),
            "popularity_min": float(part["_popularity"].min()),
            "mr": _exact(part["rank2"].to_numpy()) / 2 / n,
            "mrr": _exact(part["reciprocal"].to_numpy(), UNIT_SCALE) / n,
        }
        for i, k in enumerate(spec.hits):
            record[f"hits@{k}"] = _exact(np.array([a[i] for a in part["hits"]])) / n
        for i, alpha in enumerate(spec.alphas):
            record[f"probe@{alpha:g}"] = _exact(np.array([a[i] for a in part["probe"]]), UNIT_SCALE) / n
        out.append(record)
    return out


MEAN_RUN = "mean"


def _mean_over_runs(results: list[dict]) -> list[dict]:
    """Per model and metric cell, the mean over the model's runs (run ``mean``), as the paper's tables."""
    frame = pd.DataFrame(results)
    if frame.empty:
        return []
    keys = ["model", "metric", "alpha", "beta"]
    frame[["alpha", "beta"]] = frame[["alpha", "beta"]].astype(float)
    means = frame.groupby(keys, dropna=False, sort=True)["value"].mean().reset_index()
    return [
        {
            "model": r.model,
            "run": MEAN_RUN,
            "metric": r.metric,
            "alpha": None if math.isnan(r.alpha) else r.alpha,
            "beta": None if math.isnan(r.beta) else r.beta,
            "value": None if pd.isna(r.value) else float(r.value),
        }
        for r in means.itertuples()
    ]


def min_max_by_cell(results: pd.DataFrame, metric: str = "probe") -> pd.DataFrame:
    """Model comparison (Fig. 12): per (alpha, beta) cell, each model's mean-over-runs score min-max
    normalised across models to [0, 1] (1 = best in that cell; every model 1 when all are equal)."""
    cells = results[(results["run"] == MEAN_RUN) & (results["metric"] == metric)][
        ["model", "alpha", "beta", "value"]
    ].copy()
    grouped = cells.groupby(["alpha", "beta"])["value"]
    low, high = grouped.transform("min"), grouped.transform("max")
    spread = (high - low).where(high > low)
    cells["normalised"] = ((cells["value"] - low) / spread).fillna(1.0)
    return cells.sort_values(["model", "beta", "alpha"], ascending=[True, True, False]).reset_index(drop=True)


def score_ranks(ranks: DataFrame, spec: MetricSpec, total: int | None = None) -> Scores:
    """All metrics of valid rank rows held in one DataFrame (no batching; see ``kgbrink.jobs.score``);
    ``total`` = 2|T| when the rows carry degrees (:func:`with_deltas`)."""
    return finish(with_deltas(group_sums(ranks, spec), total).toPandas(), spec)
