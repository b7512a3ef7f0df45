"""Scoring of multiple-choice predictions: accuracy and NKD (paper 003, spec 3.C; [code] ``accuracy.py``).

A prediction answers one question of the ``mcq.questions`` table (K options, letters A.. in option
order): ``id``, and either ``letter`` or ``logits`` / ``logprobs`` (K values in letter order), optionally
``fixed_position`` (a position-bias variant: the gold was moved to that letter) and ``model`` / ``run``.

Per prediction:

- log-probabilities lp: ``log_softmax(logits)`` [code ``get_log_probs_from_pt``, T = 1]; ``logprobs`` are
  renormalised the same way (default) or taken as given (``api_raw``, [code ``get_log_probs_from_jsonl``]);
  a null log-probability (a letter outside the API's top-20) is :data:`MISSING_LOGPROB` = -1e5 as there;
- prediction = argmax of the given scores, ties to the earliest letter; a ``letter`` is taken as it is;
- correct = [prediction = gold position], or [prediction = P] for a variant with fixed position P [code];
- KL(u || p) = sum_i u_i (ln u_i - lp_i) = -ln K - mean(lp), u uniform; NKD = 1 - exp(-KL / K) (the code's
  ``KLDivLoss`` averaged over the K options), KL clamped at 0 against rounding, so NKD is in [0, 1]; the
  direction is KL(prior || model). A letter-only prediction has no NKD (null).

Aggregates are exact integer sums (NKD in fixed point 2^-32) per ``(model, run, difficulty, group_kind,
group)``: the result does not depend on partitioning or task order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core import quarantine
from kgbrink.core.delta import read_table, table_exists
from kgbrink.probe.rankformats import RankFileError, list_rank_files, with_model_and_run

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MISSING_LOGPROB = -1e5  # [code get_log_probs_from_jsonl]: a letter not among the API's top log-probabilities
NKD_SCALE = 2**32  # fixed point of the NKD sums
DIFFICULTIES = ("easy", "medium", "hard")
GROUP_KINDS = ("all", "degree", "fixed_position")
FORMATS = ("jsonl", "parquet", "delta")

# Quarantine reasons, in the order they are checked (a bad row gets the first that applies).
MALFORMED_RECORD = "malformed_record"
MISSING_ID = "missing_id"
MISSING_PREDICTION = "missing_prediction"
CONFLICTING_SCORES = "conflicting_scores"
UNKNOWN_ID = "unknown_id"
BAD_FIXED_POSITION = "bad_fixed_position"
WRONG_OPTION_COUNT = "wrong_option_count"
NON_FINITE_SCORE = "non_finite_score"
LOGPROB_ABOVE_ZERO = "logprob_above_zero"
UNKNOWN_LETTER = "unknown_letter"
DUPLICATE_ID = "duplicate_id"
REASONS = (
    MALFORMED_RECORD,
    MISSING_ID,
    MISSING_PREDICTION,
    CONFLICTING_SCORES,
    UNKNOWN_ID,
    BAD_FIXED_POSITION,
    WRONG_OPTION_COUNT,
    NON_FINITE_SCORE,
    LOGPROB_ABOVE_ZERO,
    UNKNOWN_LETTER,
    DUPLICATE_ID,
)

FIELDS = T.StructType(
    [
        T.StructField("id", T.StringType()),
        T.StructField("letter", T.StringType()),
        T.StructField("logits", T.ArrayType(T.DoubleType())),
        T.StructField("logprobs", T.ArrayType(T.DoubleType())),
        T.StructField("fixed_position", T.StringType()),
        T.StructField("model", T.StringType()),
        T.StructField("run", T.StringType()),
    ]
)
SCORE_FIELDS = ("logits", "logprobs")
QUESTION_COLUMNS = ("id", "h", "r", "t", "task", "difficulty", "options", "gold_position", "topic_degree")


class PredictionFileError(ValueError):
    """A predictions input that cannot be read at all (no files, wrong column types): names the input."""


# ---------------------------------------------------------------------------------------------- per row


def log_softmax(scores: Column) -> Column:
    """x_i - (m + ln sum_j exp(x_j - m)), m = max x: log-probabilities of ``scores`` (array<double>)."""
    top = F.array_max(scores)
    total = F.aggregate(scores, F.lit(0.0), lambda acc, x: acc + F.exp(x - top))
    norm = top + F.log(total)
    return F.transform(scores, lambda x: x - norm)


def kl_uniform(log_p: Column) -> Column:
    """KL(u || p) = sum_i (1/K)(ln(1/K) - lp_i) = -ln K - mean(lp), at least 0 (spec 3.C)."""
    k = F.size(log_p).cast("double")
    total = F.aggregate(log_p, F.lit(0.0), lambda acc, x: acc + x)
    return F.greatest(-F.log(k) - total / k, F.lit(0.0))


def nkd(log_p: Column) -> Column:
    """NKD = 1 - exp(-KL(u || p) / K) of log-probabilities ``log_p`` (spec 3.C, App. A.4)."""
    return F.lit(1.0) - F.exp(-kl_uniform(log_p) / F.size(log_p).cast("double"))


def nkd_of(scores: Column, kind: str, api_raw: bool = False) -> Column:
    """NKD of ``logits`` or ``logprobs`` (nulls in logprobs: -1e5); ``api_raw`` keeps logprobs unnormalised."""
    if kind not in SCORE_FIELDS:
        raise ValueError(f"kind must be logits or logprobs, got {kind!r}")
    if kind == "logprobs":
        scores = F.transform(scores, lambda x: F.coalesce(x, F.lit(MISSING_LOGPROB)))
    return nkd(scores if kind == "logprobs" and api_raw else log_softmax(scores))


def argmax_first(scores: Column) -> Column:
    """0-based index of the largest value, the earliest on ties."""
    return (F.array_position(scores, F.array_max(scores)) - 1).cast("int")


def letter_index(letter: Column) -> Column:
    """A..Z (trimmed, any case) -> 0..25; null for anything else."""
    text = F.upper(F.trim(letter))
    return F.when((F.length(text) == 1) & text.between("A", "Z"), (F.ascii(text) - 65).cast("int"))


def letter_of(index: Column) -> Column:
    """0..25 -> A..Z."""
    return F.element_at(F.array(*[F.lit(c) for c in LETTERS]), index + 1)


def log2_group(degree: Column) -> Column:
    """The log2 bin of a degree as ``[lo,hi)``: [1,2), [2,4), ...; [0,1) for 0 (exact: bit length)."""
    bits = F.length(F.bin(degree)).cast("int")
    low = F.pow(F.lit(2.0), bits - 1).cast("long")  # exact: a power of 2
    label = F.concat(F.lit("["), low.cast("string"), F.lit(","), (low * 2).cast("string"), F.lit(")"))
    return F.when(degree.isNull(), F.lit("unknown")).when(degree <= 0, F.lit("[0,1)")).otherwise(label)


def quantile_groups(histogram: list[tuple[int, int]], groups: int) -> dict[int, str]:
    """Degree -> group label ``[lo,hi]`` (inclusive): the questions ordered by degree, cut into ``groups``
    groups of about equal count, equal degrees together: a degree whose first question has ``before``
    questions ahead of it is in group floor(before G / N) (the rule of PROBE's popularity groups).
    ``histogram``: (degree, questions)."""
    if groups < 1:
        raise ValueError(f"degree groups must be >= 1, got {groups}")
    histogram = sorted((d, n) for d, n in histogram if d is not None)
    total = sum(n for _, n in histogram)
    index, before = {}, 0
    for degree, n in histogram:
        index[degree] = min(groups - 1, before * groups // total)
        before += n
    bounds: dict[int, list[int]] = {}
    for degree, g in index.items():
        bounds.setdefault(g, []).append(degree)
    return {d: f"[{min(bounds[g])},{max(bounds[g])}]" for d, g in index.items()}


def group_order(label: str) -> tuple:
    """Sort key of a group label: ``all``, degree bins by their lower bound, letters."""
    found = re.match(r"\[(\d+),", label or "")
    return (0, int(found.group(1)), "") if found else (1, 0, label or "")


# ------------------------------------------------------------------------------------------------ input


def _delta(spark: SparkSession, path: str) -> bool:
    try:
        return table_exists(spark, path)
    except Exception:  # a glob or a file: not a table
        return False


def detect_format(spark: SparkSession, path: str, fmt: str | None) -> tuple[str, list[tuple[str, int, int]]]:
    """The predictions' format and files ``(file, size, modification time)`` (none for a Delta table):
    ``delta`` for a Delta table, ``parquet`` when every file is ``.parquet``, else ``jsonl``."""
    if fmt == "delta" or (fmt is None and _delta(spark, path)):
        if not _delta(spark, path):
            raise PredictionFileError(f"{path}: not a Delta table")
        return "delta", []
    try:
        files = list_rank_files(spark, path, fmt)
    except RankFileError:
        raise PredictionFileError(f"{path}: no prediction files found") from None
    if fmt is None:
        fmt = "parquet" if all(f.lower().endswith(".parquet") for f, _, _ in files) else "jsonl"
    return fmt, files


def read_predictions(
    spark: SparkSession,
    path: str,
    fmt: str,
    files: list[str],
    model: str | None,
    run: str | None,
    table: DataFrame | None = None,
) -> DataFrame:
    """Prediction rows with the :data:`FIELDS` and provenance: ``source_file``, ``line`` and either
    ``line_number`` (tables; null for Delta) or the block coordinates of :mod:`kgbrink.core.quarantine`
    (JSON Lines); ``_malformed`` and ``_skip`` (blank lines). ``table``: the Delta table as already read."""
    if fmt == "jsonl":
        lines = spark.read.option("lineSep", "\n").text(files)
        lines = lines.select(
            F.lit("predictions").alias("split"),
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.regexp_replace("value", "\r$", "").alias("line"),
        ).withColumn("row_id", F.monotonically_increasing_id())
        schema = T.StructType([*FIELDS.fields, T.StructField("_corrupt", T.StringType())])
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
        record = F.from_json("line", schema, options)
        parsed = lines.withColumn("_record", record)
        blank = F.trim("line") == ""
        frame = parsed.select(
            "split",
            "source_file",
            "block_start",
            "row_id",
            "line",
            *[F.col("_record")[f.name].alias(f.name) for f in FIELDS.fields],
            (~blank & (F.col("_record").isNull() | F.col("_record")["_corrupt"].isNotNull())).alias("_malformed"),
            blank.alias("_skip"),
        )
    elif fmt in ("parquet", "delta"):
        if table is None:
            table = read_table(spark, path) if fmt == "delta" else spark.read.parquet(*files)
        frame = _typed_table(table, path, fmt == "delta")
    else:
        raise PredictionFileError(f"unknown predictions format {fmt!r} (one of {', '.join(FORMATS)})")
    return with_model_and_run(frame, F.col("source_file"), model, run)


def _typed_table(table: DataFrame, path: str, delta: bool) -> DataFrame:
    """A table's prediction columns cast to :data:`FIELDS`; provenance: Parquet file and row (1-based),
    for a Delta table its path (no line: the ``line`` column, the row as JSON, identifies it)."""
    types = {f.name: f.dataType for f in table.schema.fields}
    if "id" not in types:
        raise PredictionFileError(f"{path}: no 'id' column (has {', '.join(types)})")
    if not any(c in types for c in ("letter", *SCORE_FIELDS)):
        raise PredictionFileError(f"{path}: needs a 'letter', 'logits' or 'logprobs' column")
    for c in SCORE_FIELDS:
        if c in types and not (isinstance(types[c], T.ArrayType) and isinstance(types[c].elementType, T.NumericType)):
            raise PredictionFileError(
                f"{path}: column '{c}' must be an array of numbers, not {types[c].simpleString()}"
            )
    present = [f.name for f in FIELDS.fields if f.name in types]
    cols = {
        f.name: (F.col(f.name) if f.name in types else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in FIELDS.fields
    }
    source = F.lit(path) if delta else F.col("_metadata.file_path")
    line_number = F.lit(None).cast("long") if delta else F.col("_metadata.row_index") + 1
    return table.select(
        *cols.values(),
        source.alias("source_file"),
        line_number.alias("line_number"),
        F.to_json(F.struct(*present)).alias("line"),
        F.lit(False).alias("_malformed"),
        F.lit(False).alias("_skip"),
    )


def question_columns(questions: DataFrame, source: str) -> DataFrame:
    """The columns scoring needs from an ``mcq.questions`` table, checked."""
    missing = [c for c in QUESTION_COLUMNS if c not in questions.columns]
    if missing:
        raise PredictionFileError(f"{source}: not a questions table (no {', '.join(missing)})")
    return questions.select(*QUESTION_COLUMNS)


# ------------------------------------------------------------------------------------------- validation


def _first(checks: list[tuple[Column, str, Column]]) -> tuple[Column, Column]:
    """``reason``, ``detail`` of the first true condition (null conditions are false)."""
    reason, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for cond, code, text in reversed(checks):
        hit = F.coalesce(cond, F.lit(False))
        reason, detail = F.when(hit, F.lit(code)).otherwise(reason), F.when(hit, text).otherwise(detail)
    return reason, detail


def validate(predictions: DataFrame, questions: DataFrame) -> DataFrame:
    """Predictions joined to their questions, with ``reason`` / ``detail`` (null on good rows) from the
    checks of :data:`REASONS` in order; ``duplicate_id`` marks every copy of a (model, run, id,
    fixed_position) seen more than once among the rows passing the other checks. Adds ``_qid, _k,
    _fixed`` (fixed letter index), ``_letter`` (letter index) and the question columns."""
    q = questions.select(
        F.col("id").alias("_qid"),
        "h",
        "r",
        "t",
        "task",
        "difficulty",
        F.size("options").alias("_k"),
        "gold_position",
        "topic_degree",
    )
    rows = predictions.filter(~F.col("_skip")).withColumn("_id", F.trim("id"))
    frame = rows.join(q, F.col("_id") == F.col("_qid"), "left")
    letter, fixed = F.col("letter"), F.col("fixed_position")
    frame = frame.withColumns({"_letter": letter_index(letter), "_fixed": letter_index(fixed)})
    logits, logprobs = F.col("logits"), F.col("logprobs")
    scores = F.coalesce(logits, logprobs)
    k = F.col("_k")
    non_finite = F.exists(scores, lambda x: F.isnan(x) | (F.abs(x) == F.lit(float("inf"))))
    null_logit = F.exists(logits, lambda x: x.isNull())
    checks = [
        (F.col("_malformed"), MALFORMED_RECORD, F.lit("not a JSON object with the prediction fields and types")),
        (F.col("_id").isNull() | (F.col("_id") == ""), MISSING_ID, F.lit("no 'id'")),
        (
            letter.isNull() & logits.isNull() & logprobs.isNull(),
            MISSING_PREDICTION,
            F.lit("none of 'letter', 'logits', 'logprobs'"),
        ),
        (logits.isNotNull() & logprobs.isNotNull(), CONFLICTING_SCORES, F.lit("both 'logits' and 'logprobs'")),
        (F.col("_qid").isNull(), UNKNOWN_ID, F.format_string("no question with id '%s'", F.col("_id"))),
        (
            fixed.isNotNull() & (F.col("_fixed").isNull() | (F.col("_fixed") >= k)),
            BAD_FIXED_POSITION,
            F.format_string("fixed_position '%s' is not a letter of the %d options", fixed, k),
        ),
        (
            scores.isNotNull() & (F.size(scores) != k),
            WRONG_OPTION_COUNT,
            F.format_string("%d scores for %d options", F.size(scores), k),
        ),
        (
            non_finite | null_logit,
            NON_FINITE_SCORE,
            F.format_string("a score is NaN, infinite or (logits) null: %s", F.to_json(scores)),
        ),
        (
            F.exists(logprobs, lambda x: x > 0),
            LOGPROB_ABOVE_ZERO,
            F.format_string("a log-probability is > 0: %s", F.to_json(logprobs)),
        ),
        (
            letter.isNotNull() & (F.col("_letter").isNull() | (F.col("_letter") >= k)),
            UNKNOWN_LETTER,
            F.format_string("letter '%s' is not one of the %d option letters", letter, k),
        ),
    ]
    reason, detail = _first(checks)
    frame = frame.withColumns({"reason": reason, "detail": detail})
    fixed_key = F.coalesce(F.col("_fixed"), F.lit(-1))
    ok = F.col("reason").isNull()
    copies = F.count(F.lit(1)).over(Window.partitionBy("model", "run", "_id", fixed_key, ok))
    frame = frame.withColumn("_copies", F.when(ok, copies))
    duplicate = F.col("_copies") > 1
    where = F.when(fixed.isNotNull(), F.format_string(" (fixed position %s)", F.upper(F.trim(fixed)))).otherwise("")
    return frame.withColumns(
        {
            "reason": F.when(duplicate, F.lit(DUPLICATE_ID)).otherwise(F.col("reason")),
            "detail": F.when(
                duplicate,
                F.format_string(
                    "id '%s'%s appears %d times for model %s, run %s",
                    F.col("_id"),
                    where,
                    F.col("_copies"),
                    F.col("model"),
                    F.col("run"),
                ),
            ).otherwise(F.col("detail")),
        }
    ).drop("_copies")


def quarantine_rows(checked: DataFrame, predictions: DataFrame) -> DataFrame:
    """Bad rows as ``source_file, line_number, line, reason, detail``: line numbers directly for tables,
    from block offsets for JSON Lines (``predictions``: all rows, blank lines included, for the offsets)."""
    if "line_number" in checked.columns:
        return checked.filter(F.col("reason").isNotNull()).select(
            "source_file", "line_number", "line", "reason", "detail"
        )
    status = F.when(F.col("reason").isNotNull(), F.lit(quarantine.QUARANTINED)).otherwise(F.lit(quarantine.OK))
    bad = checked.withColumn("status", status).select(
        "split", "source_file", "block_start", "row_id", "line", "status", "reason", "detail"
    )
    blank = predictions.filter(F.col("_skip")).select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        "line",
        F.lit(quarantine.SKIPPED).alias("status"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("string").alias("detail"),
    )
    state = bad.unionByName(blank)
    counts = quarantine.line_counts(state)
    counts = checked.sparkSession.createDataFrame(counts.collect(), schema=counts.schema)
    return quarantine.quarantine_rows(state, quarantine.block_offsets(counts))


# -------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Grouping:
    """Topic-degree groups: ``log2`` bins or equal-count ``quantiles`` (``mapping``: degree -> label)."""

    kind: str = "log2"
    mapping: dict[int, str] | None = None

    def column(self, spark: SparkSession, frame: DataFrame) -> DataFrame:
        """``frame`` plus ``degree_group``."""
        if self.kind == "log2":
            return frame.withColumn("degree_group", log2_group(F.col("topic_degree")))
        rows = sorted((self.mapping or {}).items())
        table = spark.createDataFrame(rows, "topic_degree long, degree_group string")
        out = frame.join(F.broadcast(table), "topic_degree", "left")
        return out.withColumn("degree_group", F.coalesce("degree_group", F.lit("unknown")))


def degree_grouping(questions: DataFrame, kind: str, groups: int) -> Grouping:
    """The grouping of the questions' topic degrees; quantiles over the distinct (h, r, t, task) queries."""
    if kind == "log2":
        return Grouping("log2")
    if kind != "quantiles":
        raise ValueError(f"degree bins must be log2 or quantiles, got {kind!r}")
    queries = questions.select("h", "r", "t", "task", "topic_degree").distinct()
    histogram = [(r[0], r[1]) for r in queries.groupBy("topic_degree").count().collect()]
    return Grouping("quantiles", quantile_groups(histogram, groups) if histogram else {})


def scored(good: DataFrame, api_raw: bool) -> DataFrame:
    """Per good prediction: ``pred`` (0-based letter), ``gold``, ``correct``, ``nkd`` (null for letters),
    ``nkd_fixed`` (round(NKD 2^32)) and ``letter_disagrees`` (a letter given beside scores, not their argmax)."""
    logits, logprobs = F.col("logits"), F.col("logprobs")
    filled = F.when(
        logprobs.isNotNull(), F.transform(logprobs, lambda x: F.coalesce(x, F.lit(MISSING_LOGPROB)))
    ).otherwise(logits)
    frame = good.withColumn("_scores", filled)
    s = F.col("_scores")
    raw = logprobs.isNotNull() & F.lit(bool(api_raw))
    log_p = F.when(raw, s).otherwise(log_softmax(s))
    pred = F.when(s.isNotNull(), argmax_first(s)).otherwise(F.col("_letter"))
    frame = frame.withColumns(
        {
            "pred": pred,
            "gold": F.coalesce(F.col("_fixed"), F.col("gold_position")),
            "nkd": F.when(s.isNotNull(), nkd(log_p)),
        }
    )
    return frame.withColumns(
        {
            "correct": F.col("pred") == F.col("gold"),
            "nkd_fixed": (F.col("nkd") * F.lit(float(NKD_SCALE)) + F.lit(0.5)).cast("long"),
            "letter_disagrees": F.col("_letter").isNotNull() & s.isNotNull() & (F.col("_letter") != F.col("pred")),
        }
    )


def group_sums(rows: DataFrame) -> DataFrame:
    """Exact sums per ``(model, run, difficulty, group_kind, group)`` of scored rows with ``degree_group``:
    ``n``, ``correct``, ``nkd_sum`` (fixed point), ``n_nkd``. Predictions without a fixed position count in
    ``all`` and their degree group; those with one only in ``fixed_position`` (group = the letter)."""
    fixed = F.col("_fixed")
    keys = F.when(
        fixed.isNull(),
        F.array(
            F.struct(F.lit("all").alias("kind"), F.lit("all").alias("group")),
            F.struct(F.lit("degree").alias("kind"), F.col("degree_group").alias("group")),
        ),
    ).otherwise(F.array(F.struct(F.lit("fixed_position").alias("kind"), letter_of(fixed).alias("group"))))
    exploded = rows.select("model", "run", "difficulty", F.explode(keys).alias("g"), "correct", "nkd_fixed")
    return exploded.groupBy(
        "model", "run", "difficulty", F.col("g.kind").alias("group_kind"), F.col("g.group").alias("group")
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.col("correct").cast("long")).alias("correct"),
        F.sum("nkd_fixed").alias("nkd_sum"),
        F.count("nkd_fixed").alias("n_nkd"),
    )


def finish(sums: list[dict]) -> list[dict]:
    """``mcq_scores`` rows from collected :func:`group_sums`: accuracy = correct / n, nkd = mean NKD over
    the predictions with scores (null without), sorted by model, run, difficulty, kind and group."""
    out = []
    for s in sums:
        n, n_nkd = int(s["n"]), int(s["n_nkd"])
        out.append(
            {
                "model": s["model"],
                "run": s["run"],
                "difficulty": s["difficulty"],
                "group_kind": s["group_kind"],
                "group": s["group"],
                "n": n,
                "accuracy": int(s["correct"]) / n,
                "nkd": int(s["nkd_sum"]) / NKD_SCALE / n_nkd if n_nkd else None,
                "n_nkd": n_nkd,
            }
        )

    def key(r: dict) -> tuple:
        rank = DIFFICULTIES.index(r["difficulty"]) if r["difficulty"] in DIFFICULTIES else len(DIFFICULTIES)
        return (
            r["model"],
            r["run"],
            rank,
            r["difficulty"],
            GROUP_KINDS.index(r["group_kind"]),
            group_order(r["group"]),
        )

    return sorted(out, key=key)


def overlap(rows: DataFrame) -> DataFrame:
    """Venn counts per (model, run): the (h, r, t, task) queries by whether they were answered correctly
    at each difficulty (null: no scored prediction at that difficulty); predictions without a fixed position."""
    per_query = (
        rows.filter(F.col("_fixed").isNull())
        .groupBy("model", "run", "h", "r", "t", "task")
        .agg(*[F.max(F.when(F.col("difficulty") == d, F.col("correct").cast("int"))).alias(d) for d in DIFFICULTIES])
    )
    return (
        per_query.groupBy("model", "run", *DIFFICULTIES)
        .agg(F.count(F.lit(1)).alias("n"))
        .select("model", "run", *[F.col(d).cast("boolean").alias(d) for d in DIFFICULTIES], "n")
    )


def answer_counts(rows: DataFrame) -> list:
    """Per ``model, run`` of the scored rows: ``answered`` (predictions of the questions, not of their
    fixed-position variants), ``letters`` (predictions without scores) and ``disagree`` (letters that
    disagree with the scores given beside them)."""
    return (
        rows.groupBy("model", "run")
        .agg(
            F.count(F.when(F.col("_fixed").isNull(), 1)).alias("answered"),
            F.count(F.when(F.col("nkd").isNull(), 1)).alias("letters"),
            F.count(F.when(F.col("letter_disagrees"), 1)).alias("disagree"),
        )
        .orderBy("model", "run")
        .collect()
    )


def headline_results(scores: list[dict]) -> list[dict]:
    """The summary's ``results``: accuracy and NKD per model, run and difficulty over all questions
    (``metric`` ``accuracy.<difficulty>`` / ``nkd.<difficulty>``; an NKD without scored rows left out)."""
    return [
        {
            "model": r["model"],
            "run": r["run"],
            "metric": f"{m}.{r['difficulty']}",
            "alpha": None,
            "beta": None,
            "value": r[m],
        }
        for r in scores
        if r["group_kind"] == "all"
        for m in ("accuracy", "nkd")
        if r[m] is not None
    ]
