"""Filtered ranks of the true answers from candidate scores (PROBE evaluation protocol).

Protocol (PROBE paper, Sec. 5.1 "Evaluation protocol", after Sun et al. 2020; filtered setting of Bordes
et al. 2013): a query is ``(model, run, h, r, t, side)``; side ``head`` asks ``(?, r, t)`` (true answer
``h``), side ``tail`` asks ``(h, r, ?)`` (true answer ``t``). From the scored candidates of a query every
candidate ``c`` other than the true answer whose triple is known (``(c, r, t)`` resp. ``(h, r, c)`` in
``known``) is removed (filtered setting). With ``s*`` the true answer's score, over the remaining
candidates ``E_i``::

    rank = 1 + #{c : score(c) > s*} + #{c != answer : score(c) == s*} / 2     (the tied group's mean rank)
    num_candidates = |E_i|                                                  (true answer included)

Non-finite scores follow IEEE-754 comparisons (as ``scores > s*`` in numpy / PyTorch): a candidate scored
``+inf`` beats a finite ``s*``; ``-inf``, ``NaN`` and null never beat or tie it (Spark orders NaN above
every number, so this is enforced explicitly). Such candidates still count in ``num_candidates``. A model
can therefore hide competitors by scoring them NaN; callers who want that penalised map NaN to ``+inf``
before ranking.

Queries that cannot be ranked are quarantined with the first applicable reason, in this order:
``bad_side`` (side not ``head``/``tail``), ``null_key`` (null model, run, h, r or t), ``null_candidate``
(a row without a candidate id), ``target_not_scored`` (no row for the true answer),
``duplicate_candidate`` (the true answer scored twice), ``non_finite_score`` (``s*`` is NaN, +-inf or
null), ``missing_candidates`` (given the entity count |E|: fewer candidate rows than entities, so some
entity was not scored and |E_i| would shrink; PROBE Sec. 3.1 ranks every e' in E), ``duplicate_candidate``
(another candidate scored twice; only with ``check_duplicates``). Candidate ids are entity ids in
[0, |E|), so once duplicates are excluded, |E| rows mean every entity was scored; without the duplicate
check a duplicate can hide a missing entity. Every query of the input is in exactly one of ``ranks`` and
``quarantine``.

Scale (candidate rows: billions, e.g. 10^4 queries x 4.6M entities or 10^5 queries x 10^4 candidates;
queries and known answers per query: small). The candidate rows are read twice and shuffled at most once:

1. One pass with partial aggregation gives one row per query (row count, target rows, ``s*``): the
   checks above. Only per-query partial sums are shuffled. This per-query table gets a ``qid`` and is
   checkpointed because three later steps read it.
2. Known answers per query: the valid queries joined with ``known``, which is scanned once (each triple
   is looked up as a head answer on ``(r, t)`` and as a tail answer on ``(h, r)``), de-duplicated.
3. Second pass. With ``broadcast_queries`` (one machine, up to ~10^6 queries): the valid queries
   (``qid``, ``s*``, answer) and their known answers are broadcast-joined to the candidate rows, which
   become narrow rows ``(qid, candidate, outcome bits)``. With ``check_duplicates`` these are shuffled
   once by ``qid`` and sorted by candidate (a duplicate equals the row before it). Without it only
   per-query partial counts are shuffled. Without ``broadcast_queries`` (very many queries): the
   candidate rows and the known-answer markers are unioned and shuffled once by query (the join with
   the valid queries), sorted by ``(candidate, marker first)``. A row is filtered when the last marker
   before it names its candidate.
4. One aggregation per query turns the flags into the counts. In the shuffle plan it reuses that
   partitioning.

All counts are integers and the rank is computed from them, so results do not depend on partitioning.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kgbrink.core.frames import checkpoint

QUERY_KEYS = ("model", "run", "h", "r", "t", "side")
SIDES = ("head", "tail")
QUARANTINE_REASONS = (
    "bad_side",
    "null_key",
    "null_candidate",
    "target_not_scored",
    "duplicate_candidate",
    "non_finite_score",
    "missing_candidates",
)
RANK_COLUMNS = (*QUERY_KEYS, "rank", "num_candidates")
QUARANTINE_COLUMNS = (*QUERY_KEYS, "reason", "detail")

_KEYS = list(QUERY_KEYS)
_INF = float("inf")


def true_answer() -> Column:
    """The entity a query asks for: ``h`` for side ``head``, ``t`` for side ``tail``, else null."""
    return F.when(F.col("side") == "head", F.col("h")).when(F.col("side") == "tail", F.col("t"))


def query_summary(scores: DataFrame) -> DataFrame:
    """One row per query of ``scores``: ``_rows``, ``_null_candidates``, ``_target_rows``, ``_s_star``
    (the true answer's score, from its only row) and ``_answer``. Partial aggregation: the candidate
    rows themselves are not shuffled."""
    is_target = F.col("candidate") == true_answer()
    summary = scores.groupBy(*_KEYS).agg(
        F.count(F.lit(1)).alias("_rows"),
        F.count(F.when(F.col("candidate").isNull(), 1)).alias("_null_candidates"),
        F.count(F.when(is_target, 1)).alias("_target_rows"),
        F.max(F.when(is_target, F.col("score"))).alias("_s_star"),
    )
    return summary.withColumn("_answer", true_answer())


def _precheck(summary: DataFrame, n_entities: int | None = None) -> DataFrame:
    """``summary`` with ``reason`` / ``detail`` for the checks that need no second pass (null when valid);
    ``missing_candidates`` only when ``n_entities`` is given."""
    s_star = F.col("_s_star")
    finite = s_star.isNotNull() & ~F.isnan(s_star) & (F.abs(s_star) != _INF)
    null_key = (
        F.col("model").isNull()
        | F.col("run").isNull()
        | F.col("h").isNull()
        | F.col("r").isNull()
        | F.col("t").isNull()
    )
    checks = [
        (
            ~F.coalesce(F.col("side").isin(*SIDES), F.lit(False)),
            "bad_side",
            F.format_string("side %s is not head or tail", F.coalesce(F.col("side"), F.lit("null"))),
        ),
        (null_key, "null_key", F.lit("model, run, h, r and t must not be null")),
        (
            F.col("_null_candidates") > 0,
            "null_candidate",
            F.format_string("%d of %d rows have no candidate id", "_null_candidates", "_rows"),
        ),
        (
            F.col("_target_rows") == 0,
            "target_not_scored",
            F.format_string("true answer %d is not among the %d candidate rows", "_answer", "_rows"),
        ),
        (
            F.col("_target_rows") > 1,
            "duplicate_candidate",
            F.format_string("true answer %d is scored %d times", "_answer", "_target_rows"),
        ),
        (
            ~finite,
            "non_finite_score",
            F.format_string(
                "true answer %d has score %s", F.col("_answer"), F.coalesce(s_star.cast("string"), F.lit("null"))
            ),
        ),
    ]
    if n_entities is not None:
        checks.append(
            (
                F.col("_rows") < F.lit(n_entities),
                "missing_candidates",
                F.format_string(
                    "%d candidate rows for %d entities (at least %d not scored)",
                    "_rows",
                    F.lit(n_entities),
                    F.lit(n_entities) - F.col("_rows"),
                ),
            )
        )
    reason, detail = F, F
    for condition, code, text in checks:
        reason = reason.when(condition, F.lit(code))
        detail = detail.when(condition, text)
    return summary.withColumns({"reason": reason, "detail": detail})


def known_answers(queries: DataFrame, known: DataFrame, broadcast: bool) -> DataFrame:
    """``(*keys, candidate)``: the distinct candidates other than the true answer that form a known
    triple with a query (``(c, r, t)`` for side head, ``(h, r, c)`` for side tail). ``queries`` has the
    query keys, ``_answer`` and any extra key columns to carry (e.g. ``_qid``). One scan of ``known``:
    each triple is looked up once as a head answer (key ``(r, t)``) and once as a tail answer (``(h, r)``)."""
    hint = F.broadcast if broadcast else (lambda frame: frame)
    head = F.col("side") == "head"
    lookup = queries.withColumns(
        {
            "_head": head,
            "_k1": F.when(head, F.col("r")).otherwise(F.col("h")),
            "_k2": F.when(head, F.col("t")).otherwise(F.col("r")),
        }
    )
    as_answer = F.explode(
        F.array(
            F.struct(
                F.lit(True).alias("_head"),
                F.col("r").alias("_k1"),
                F.col("t").alias("_k2"),
                F.col("h").alias("candidate"),
            ),
            F.struct(
                F.lit(False).alias("_head"),
                F.col("h").alias("_k1"),
                F.col("r").alias("_k2"),
                F.col("t").alias("candidate"),
            ),
        )
    )
    facts = known.select(as_answer.alias("_f")).select("_f.*")
    keys = [c for c in queries.columns if c != "_answer"]
    return (
        hint(lookup)
        .join(facts, ["_head", "_k1", "_k2"])
        .filter(F.col("candidate") != F.col("_answer"))
        .select(*keys, "candidate")
        .distinct()
    )


def _beats() -> Column:
    """The candidate's score is above ``s*`` (IEEE: NaN never is, Spark alone would say NaN > x; a null
    score never is)."""
    return F.coalesce((F.col("score") > F.col("_s_star")) & ~F.isnan("score"), F.lit(False))


def _ties() -> Column:
    """A candidate other than the true answer with score exactly ``s*`` (never NaN or null: ``s*`` is finite)."""
    return F.coalesce((F.col("score") == F.col("_s_star")) & (F.col("candidate") != F.col("_answer")), F.lit(False))


def _counts(rows: DataFrame, *by: str) -> DataFrame:
    """One aggregation per query over candidate rows carrying the booleans ``_kept`` (not filtered),
    ``_beats``, ``_ties`` and ``_dup``: the duplicate rows, ``num_candidates`` = |E_i| and the counts
    that make the rank."""
    kept = F.col("_kept")
    return rows.groupBy(*by).agg(
        F.count(F.when(F.col("_dup"), 1)).alias("_dup_rows"),
        F.min(F.when(F.col("_dup"), F.col("candidate"))).alias("_dup_example"),
        F.count(F.when(kept, 1)).alias("num_candidates"),
        F.count(F.when(kept & F.col("_beats"), 1)).alias("_greater"),
        F.count(F.when(kept & F.col("_ties"), 1)).alias("_tied"),
    )


def _counts_broadcast(scores: DataFrame, valid: DataFrame, known: DataFrame, check_duplicates: bool) -> DataFrame:
    """Counts per ``_qid``; per-query tables broadcast, candidate rows shuffled at most once (by qid),
    as narrow rows ``(_qid, candidate, bits)`` with the outcome of each row packed in ``bits``."""
    queries = valid.select(*_KEYS, "_qid", "_answer", "_s_star")
    removed = known_answers(queries.select(*_KEYS, "_qid", "_answer"), known, True).select(
        "_qid", "candidate", F.lit(True).alias("_known")
    )
    kept = F.col("_known").isNull()
    bits = kept.cast("int") + 2 * (kept & _beats()).cast("int") + 4 * (kept & _ties()).cast("int")
    rows = (
        scores.select(*_KEYS, "candidate", "score")
        .join(F.broadcast(queries), _KEYS)
        .join(F.broadcast(removed), ["_qid", "candidate"], "left")
        .select("_qid", "candidate", bits.alias("_bits"))
    )
    if check_duplicates:
        dup = F.coalesce(
            F.lag("candidate").over(Window.partitionBy("_qid").orderBy("candidate")) == F.col("candidate"), F.lit(False)
        )
    else:
        dup = F.lit(False)
    flags = {
        "_kept": F.col("_bits").bitwiseAND(1) != 0,
        "_beats": F.col("_bits").bitwiseAND(2) != 0,
        "_ties": F.col("_bits").bitwiseAND(4) != 0,
    }
    return _counts(rows.withColumn("_dup", dup).withColumns(flags), "_qid")


def _counts_shuffle(scores: DataFrame, valid: DataFrame, known: DataFrame, check_duplicates: bool) -> DataFrame:
    """Counts per query key without broadcasts: candidate rows and known-answer markers are shuffled
    once by query (the join with ``valid``), then sorted by ``(candidate, marker first)``; a row is
    filtered when the last marker before it names its candidate, a duplicate when it repeats the row
    before it."""
    queries = valid.select(*_KEYS, "_answer", "_s_star")
    markers = known_answers(queries.select(*_KEYS, "_answer"), known, False).select(
        *_KEYS, "candidate", F.lit(None).cast("double").alias("score"), F.lit(0).alias("_kind")
    )
    rows = (
        scores.select(*_KEYS, "candidate", "score", F.lit(1).alias("_kind")).unionByName(markers).join(queries, _KEYS)
    )
    window = Window.partitionBy(*_KEYS).orderBy("candidate", "_kind")
    last_marker = F.last(F.when(F.col("_kind") == 0, F.col("candidate")), ignorenulls=True).over(
        window.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    repeat = F.coalesce(
        (F.lag("candidate").over(window) == F.col("candidate")) & (F.lag("_kind").over(window) == 1), F.lit(False)
    )
    flagged = rows.withColumns(
        {
            "_kept": ~F.coalesce(last_marker == F.col("candidate"), F.lit(False)),
            "_dup": repeat if check_duplicates else F.lit(False),
            "_beats": _beats(),
            "_ties": _ties(),
        }
    )
    return _counts(flagged.filter(F.col("_kind") == 1), *_KEYS)


def query_outcomes(
    scores: DataFrame,
    known: DataFrame,
    broadcast_queries: bool = True,
    check_duplicates: bool = True,
    n_entities: int | None = None,
    partial_candidates: bool = False,
) -> DataFrame:
    """One row per query of ``scores``: ``model, run, h, r, t, side, rank, num_candidates, reason,
    detail, unscored``; ``rank`` / ``num_candidates`` are set when ``reason`` is null (PROBE Sec. 5.1:
    filtered setting, ties get the mean rank of their group). See the module docstring for the plan.

    ``n_entities`` (|E|, the dataset's entity count): every entity must be scored; a query with fewer
    candidate rows is quarantined as ``missing_candidates``, unless ``partial_candidates``, which ranks it
    among the candidates it has (|E_i| shrinks) and only reports it: ``unscored`` = |E| - candidate rows of
    a ranked query (null without ``n_entities``).

    ``scores``: ``model, run, h, r, t, side, candidate, score``; ``known``: ``h, r, t`` (a set; duplicates
    allowed). ``broadcast_queries``: broadcast the per-query tables (right up to ~10^6 queries); else
    shuffle joins. ``check_duplicates``: detect candidates scored twice in a query (one sort of the
    candidate rows); without it only a duplicated true answer is detected and other duplicates count
    twice. Persist the result when writing both ``ranks`` and ``quarantine`` (:func:`split_outcomes`).

    The per-query table (one row per query, with a ``_qid``) is checkpointed here
    (:func:`kgbrink.core.frames.checkpoint`): it feeds the known-answer join, the second pass and the result, and
    without that barrier Spark re-scans the candidate rows for each of them.
    """
    # Query ids are assigned while materializing, so every consumer sees the same ids.
    checked = (
        _precheck(query_summary(scores), None if partial_candidates else n_entities)
        .withColumn("_qid", F.monotonically_increasing_id())
        .transform(checkpoint)
    )
    valid = checked.filter(F.col("reason").isNull())
    if broadcast_queries:
        outcome = checked.join(F.broadcast(_counts_broadcast(scores, valid, known, check_duplicates)), "_qid", "left")
    else:
        outcome = checked.join(_counts_shuffle(scores, valid, known, check_duplicates), _KEYS, "left")
    duplicate = F.col("reason").isNull() & (F.col("_dup_rows") > 0)
    reason = F.when(duplicate, F.lit("duplicate_candidate")).otherwise(F.col("reason"))
    detail = F.when(
        duplicate, F.format_string("%d duplicate candidate rows (e.g. candidate %d)", "_dup_rows", "_dup_example")
    ).otherwise(F.col("detail"))
    ranked = reason.isNull()
    unscored = F.greatest(F.lit(n_entities) - F.col("_rows"), F.lit(0)) if n_entities is not None else F.lit(None)
    return outcome.select(
        *_KEYS,
        F.when(ranked, 1 + F.col("_greater") + F.col("_tied") / 2.0).cast("double").alias("rank"),
        F.when(ranked, F.col("num_candidates")).cast("long").alias("num_candidates"),
        reason.alias("reason"),
        detail.alias("detail"),
        F.when(ranked, unscored).cast("long").alias("unscored"),
    )


SCORE_COLUMNS = ("h", "r", "t", "side", "candidate", "score")


def candidate_scores(named: DataFrame, n_entities: int, n_relations: int) -> DataFrame:
    """``model, run, h, r, t, side, candidate, score`` of candidate-score rows (the columns of
    ``SCORE_COLUMNS`` with ``model`` and ``run``): ids outside ``0..n-1`` become null (quarantined as
    ``null_key`` / ``null_candidate`` by :func:`query_outcomes`), ``side`` trimmed and lower-cased."""

    def in_range(column: str, n: int) -> Column:
        return F.when(F.col(column).between(0, n - 1), F.col(column).cast("int"))

    return named.select(
        "model",
        "run",
        in_range("h", n_entities).alias("h"),
        in_range("r", n_relations).alias("r"),
        in_range("t", n_entities).alias("t"),
        F.lower(F.trim(F.col("side").cast("string"))).alias("side"),
        in_range("candidate", n_entities).alias("candidate"),
        F.col("score").cast("double").alias("score"),
    )


def outcome_counts(outcomes: DataFrame) -> tuple[int, dict[str, int], int]:
    """``(ranked, quarantined by reason, partial)`` of :func:`query_outcomes`: ``partial`` counts the
    queries ranked over fewer than all entities (``--partial-candidates``) or quarantined for it."""
    by_reason = outcomes.groupBy("reason").agg(
        F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("unscored") > 0, 1)).alias("partial")
    )
    tally, partial = {}, 0
    for row in by_reason.collect():
        tally[row["reason"]] = int(row["n"])
        partial += int(row["partial"])
    ranked = tally.pop(None, 0)
    return ranked, tally, partial + tally.get("missing_candidates", 0)


def split_outcomes(outcomes: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(ranks, quarantine)`` from :func:`query_outcomes`."""
    ranks = outcomes.filter(F.col("reason").isNull()).select(*RANK_COLUMNS)
    quarantine = outcomes.filter(F.col("reason").isNotNull()).select(*QUARANTINE_COLUMNS)
    return ranks, quarantine


def filtered_ranks(
    scores: DataFrame, known: DataFrame, broadcast_queries: bool = True, check_duplicates: bool = True
) -> tuple[DataFrame, DataFrame]:
    """Filtered ranks of the true answers (PROBE Sec. 5.1) and the quarantined queries.

    Returns ``ranks`` (``model, run, h, r, t, side, rank double, num_candidates long``, one row per valid
    query) and ``quarantine`` (``model, run, h, r, t, side, reason, detail``, one row per rejected query).
    Both derive from :func:`query_outcomes`; a caller computing both should persist that instead.
    """
    return split_outcomes(query_outcomes(scores, known, broadcast_queries, check_duplicates))
