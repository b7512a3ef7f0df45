"""Rank files in every supported format, read into one shape and validated row by row.

A rank row is one query: ``h, r, t`` (entity/relation ids or keys of an ingested dataset), ``side``
(``head``/``h``: the head is missing, query (?, r, t); ``tail``/``t``: query (h, r, ?)), ``rank``
(filtered rank of the true entity; tie-averaged ranks are multiples of 0.5), ``num_candidates`` (|E_i|,
candidates left after filtering, the true entity included) and optional ``model``, ``run``.

The formats and their reading (:func:`read_ranks`, :func:`list_rank_files`, ...) are in
:mod:`kgbrink.probe.rankformats`; the jobs use them through this module. Here :func:`validate_ranks` types
the rows and sets ``reason``/``detail`` on bad rows (quarantine) instead of dropping or guessing, and
:func:`parquet_facts` reads what the Parquet footers prove about every row, so that a proven column needs
no row-by-row check.
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core import quarantine
from kgbrink.core.files import hadoop_path, reported_path
from kgbrink.probe.rankformats import (  # noqa: F401 (the score and rank jobs read these through this module)
    OPTIONAL,
    REQUIRED,
    RankFileError,
    ReadOptions,
    format_of,
    list_rank_files,
    read_ranks,
    with_model_and_run,
)

MALFORMED_RECORD = "malformed_record"
MISSING_FIELD = "missing_field"
BAD_NUMBER = "bad_number"
BAD_SIDE = "bad_side"
BAD_NUM_CANDIDATES = "bad_num_candidates"
RANK_BELOW_ONE = "rank_below_one"
RANK_ABOVE_CANDIDATES = "rank_above_num_candidates"
RANK_NOT_HALF_INTEGER = "rank_not_half_integer"
UNKNOWN_ENTITY = "unknown_entity"
UNKNOWN_RELATION = "unknown_relation"
DUPLICATE_QUERY = "duplicate_query"
DUPLICATE_CHECK = 1000  # the ``check`` of a duplicate_query row: after every check of validate_ranks

HEAD, TAIL = "head", "tail"
SIDES = {HEAD: HEAD, "h": HEAD, TAIL: TAIL, "t": TAIL}

_ID = r"^[0-9]{1,9}\z"


@dataclass(frozen=True)
class ParquetFacts:
    """What the footers of a batch's Parquet files prove about every row, from the column statistics
    (trusted as Spark's own row-group filtering trusts them): ``no_nulls``, the columns present in every
    file with a null count of 0 in every row group; ``ranges``, column -> (min, max) over all row groups,
    for integer and string columns with statistics in every row group of every file (not floating point:
    min/max skip NaN)."""

    no_nulls: frozenset[str] = frozenset()
    ranges: dict[str, tuple] = field(default_factory=dict)

    def constant(self, column: str) -> str | None:
        """The one value every row has in a string or integer ``column``, as a string, or None."""
        low, high = self.ranges.get(column, (None, None))
        return str(low) if column in self.no_nulls and isinstance(low, (str, int)) and low == high else None

    def constants(self, columns: tuple[str, ...]) -> dict[str, str]:
        """Column -> its one value, for those of ``columns`` that have one."""
        return {c: v for c in columns if (v := self.constant(c)) is not None}

    def within(self, column: str, low: int, high: int) -> bool:
        """Whether every row has an integer ``column`` in [low, high]."""
        lo, hi = self.ranges.get(column, (None, None))
        return column in self.no_nulls and isinstance(lo, int) and low <= lo and hi <= high


_FACT_TYPES = ("INT32", "INT64", "BYTE_ARRAY")


# footers read at a time: through Hadoop's file system each read is a few py4j calls (~2.6 ms per file on
# local disk) and, on an object store, network round trips, so they overlap in threads
FOOTER_READERS = 16


def parquet_facts(spark: SparkSession, files: list[tuple[str, int, int]]) -> ParquetFacts:
    """:class:`ParquetFacts` of ``(file, size, mtime)`` Parquet files (no data page is read), their
    footers read ``FOOTER_READERS`` at a time; the facts do not depend on the order."""
    with ThreadPoolExecutor(max_workers=FOOTER_READERS) as pool:
        per_file = list(pool.map(lambda f: _footer_facts(spark, f[0], f[1]), files))
    no_nulls = frozenset.intersection(*(nulls for nulls, _ in per_file))
    common = set.intersection(*(set(ranges) for _, ranges in per_file))
    ranges = {
        c: (min(r[c][0] for _, r in per_file), max(r[c][1] for _, r in per_file))
        for c in common
        if len({type(r[c][0]) for _, r in per_file}) == 1
    }
    return ParquetFacts(no_nulls, ranges)


class _HadoopStream:
    """A Hadoop input stream with the ``seek`` / ``read`` / ``close`` of a Python binary file."""

    def __init__(self, spark: SparkSession, file: str):
        hpath, fs = hadoop_path(spark, file)
        self.stream = fs.open(hpath)

    def seek(self, position: int) -> None:
        self.stream.seek(position)

    def read(self, n: int) -> bytes:
        return bytes(self.stream.readNBytes(n))

    def close(self) -> None:
        self.stream.close()


def _footer_facts(spark: SparkSession, file: str, size: int) -> tuple[frozenset[str], dict[str, tuple]]:
    """One file's columns without nulls and (min, max) per column, from its footer, parsed by pyarrow. A
    ``file:`` URI is read by Python directly (2,000 footers: 0.6 s against 3.6 s through py4j); any other
    path through the session's Hadoop file system (any URI Spark reads, with the session's credentials)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    local = file.startswith("file:")
    with open(reported_path(file), "rb") if local else closing(_HadoopStream(spark, file)) as stream:
        stream.seek(max(size - 8, 0))
        tail = stream.read(8)
        length = struct.unpack("<i", tail[:4])[0] if len(tail) == 8 else -1
        if tail[4:] != b"PAR1" or not 0 < length <= size - 12:
            raise RankFileError(f"{file}: not a Parquet file (no footer)")
        stream.seek(size - 8 - length)
        footer = stream.read(length)
    meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))
    columns = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    no_nulls, bounded, ranges = set(columns), set(columns), {}
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for name, j in columns.items():
            stats = group.column(j).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                no_nulls.discard(name)
            if stats is None or not stats.has_min_max or stats.physical_type not in _FACT_TYPES:
                bounded.discard(name)
            elif name in bounded:
                lo, hi = ranges.get(name, (stats.min, stats.max))
                ranges[name] = (min(lo, stats.min), max(hi, stats.max))
    return frozenset(no_nulls), {c: ranges[c] for c in bounded if c in ranges}


def _integral(column: Column, dtype: T.DataType, pattern: str = _ID) -> Column:
    """An int id from an integral column, or from a string of digits (else null)."""
    if isinstance(dtype, (T.IntegerType, T.LongType, T.ShortType, T.ByteType)):
        return F.when(column.between(0, 2**31 - 1), column.cast("int"))
    text = F.trim(column.cast("string"))
    return F.when(text.rlike(pattern), text.cast("int"))


def validate_ranks(
    raw: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    id_kind: str = "id",
    n_entities: int | None = None,
    n_relations: int | None = None,
    broadcast: bool = True,
    facts: ParquetFacts | None = None,
) -> DataFrame:
    """Typed rank rows with ``check`` (int index of the first failing check), ``reason`` and ``detail``
    (all null on good rows).

    ``id_kind`` ``id``: h, r, t are the dataset's integer ids, checked against the dense id ranges
    [0, n_entities) and [0, n_relations) (no join); ``key``: they are keys (e.g. Q42), mapped through
    ``entities``/``relations`` (``id, key``). The first failing check gives the reason, in this order:
    malformed record, missing field, bad number, bad side, num_candidates < 1 or not integral,
    num_candidates above ``n_entities`` (|E_i| counts entities; without ``n_entities``, above 2^31 - 1, so
    no sum overflows), rank < 1, rank > num_candidates, rank not a multiple of 0.5, unknown entity,
    unknown relation. An integer id column that ``facts`` (see :func:`parquet_facts`) prove non-null and
    within its id range in every row is not checked row by row, so the scan need not read it.
    """
    schema = {f.name: f.dataType for f in raw.schema.fields}
    frame = raw
    most_candidates = n_entities if n_entities else (1 << 31) - 1
    proven: set[str] = set()
    if id_kind == "id":
        frame = frame.withColumns({f"_{c}": _integral(F.col(c), schema[c]) for c in ("h", "r", "t")})
        limits = {"h": n_entities, "r": n_relations, "t": n_entities}
        proven = {c for c, n in limits.items() if facts and n and facts.within(c, 0, n - 1)}
        known_h, known_r, known_t = (
            F.lit(True) if c in proven else F.col(f"_{c}") < F.lit(n) for c, n in limits.items()
        )
    elif id_kind == "key":
        ents = entities.select(F.col("key").alias("_k"), F.col("id").alias("_id"))
        rels = relations.select(F.col("key").alias("_r_key"), F.col("id").alias("_r"))
        if broadcast:
            ents, rels = F.broadcast(ents), F.broadcast(rels)
        for c in ("h", "t"):
            frame = frame.withColumn(f"_{c}_key", F.trim(F.col(c).cast("string"))).join(
                ents.withColumnsRenamed({"_k": f"_{c}_key", "_id": f"_{c}"}), f"_{c}_key", "left"
            )
        frame = frame.withColumn("_r_key", F.trim(F.col("r").cast("string"))).join(rels, "_r_key", "left")
        known_h, known_t, known_r = F.col("_h").isNotNull(), F.col("_t").isNotNull(), F.col("_r").isNotNull()
    else:
        raise ValueError(f"id_kind must be 'id' or 'key', got '{id_kind}'")

    rank = (
        F.col("rank").try_cast("double") if isinstance(schema["rank"], T.StringType) else F.col("rank").cast("double")
    )
    n_text = (
        F.col("num_candidates").try_cast("double")
        if isinstance(schema["num_candidates"], T.StringType)
        else F.col("num_candidates").cast("double")
    )
    raw_side = F.col("side").cast("string")
    side_map = F.create_map(*[F.lit(x) for pair in SIDES.items() for x in pair])
    # exact "head"/"tail" first: lower() and trim() copy the string, the map lookup compares it 4 times
    side = (
        F.when(raw_side == HEAD, F.lit(HEAD))
        .when(raw_side == TAIL, F.lit(TAIL))
        .otherwise(side_map[F.lower(F.trim(raw_side))])
    )
    frame = frame.withColumns({"_rank": rank, "_n": n_text, "_side": side})

    def blank(c: str) -> Column:
        return (
            F.col(c).isNull() | (F.trim(F.col(c).cast("string")) == "")
            if isinstance(schema[c], T.StringType)
            else F.col(c).isNull()
        )

    missing = [(F.lit(False) if c in proven else blank(c), c) for c in REQUIRED]
    malformed = F.col("_malformed") if "_malformed" in frame.columns else F.lit(False)
    finite = (
        ~F.isnan("_rank")
        & ~F.isnan("_n")
        & (F.abs("_rank") < F.lit(float("inf")))
        & (F.abs("_n") < F.lit(float("inf")))
    )
    # (condition, reason, detail), in order: a bad row's ``check`` is the index of its first failing check
    checks: list[tuple[Column, str, Column]] = [
        (malformed, MALFORMED_RECORD, F.lit("the record does not have the expected fields"))
    ]
    checks += [(cond, MISSING_FIELD, F.lit(f"field '{c}' is empty or absent")) for cond, c in missing]
    checks += [
        (
            F.col("_rank").isNull() | F.col("_n").isNull() | ~finite,
            BAD_NUMBER,
            F.format_string(
                "rank '%s' or num_candidates '%s' is not a finite number",
                F.col("rank").cast("string"),
                F.col("num_candidates").cast("string"),
            ),
        ),
        (
            F.col("_side").isNull(),
            BAD_SIDE,
            F.format_string("side '%s' is not head/h or tail/t", F.col("side").cast("string")),
        ),
        (
            (F.col("_n") < 1) | (F.col("_n") != F.floor("_n")),
            BAD_NUM_CANDIDATES,
            F.format_string("num_candidates %s is not an integer >= 1", F.col("_n").cast("string")),
        ),
        (
            F.col("_n") > F.lit(most_candidates),
            BAD_NUM_CANDIDATES,
            F.format_string(
                f"num_candidates %s is more than the dataset's {most_candidates} entities", F.col("_n").cast("string")
            ),
        ),
        (F.col("_rank") < 1, RANK_BELOW_ONE, F.format_string("rank %s < 1", F.col("_rank").cast("string"))),
        (
            F.col("_rank") > F.col("_n"),
            RANK_ABOVE_CANDIDATES,
            F.format_string(
                "rank %s > num_candidates %s", F.col("_rank").cast("string"), F.col("_n").cast("long").cast("string")
            ),
        ),
        (
            F.col("_rank") * 2 != F.floor(F.col("_rank") * 2),
            RANK_NOT_HALF_INTEGER,
            F.format_string("rank %s is not a multiple of 0.5 (a tie-averaged rank)", F.col("_rank").cast("string")),
        ),
        (
            F.coalesce(~known_h, F.lit(True)),
            UNKNOWN_ENTITY,
            F.format_string("head '%s' is not an entity of the dataset", F.col("h").cast("string")),
        ),
        (
            F.coalesce(~known_t, F.lit(True)),
            UNKNOWN_ENTITY,
            F.format_string("tail '%s' is not an entity of the dataset", F.col("t").cast("string")),
        ),
        (
            F.coalesce(~known_r, F.lit(True)),
            UNKNOWN_RELATION,
            F.format_string("relation '%s' is not a relation of the dataset", F.col("r").cast("string")),
        ),
    ]
    check: Column = F.lit(None).cast("int")
    for index, (cond, _, _) in reversed(list(enumerate(checks))):
        check = F.when(cond, F.lit(index).cast("int")).otherwise(check)
    frame = frame.withColumn("check", check)
    reason, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for index, (_, code, text) in enumerate(checks):
        reason = F.when(F.col("check") == index, F.lit(code)).otherwise(reason)
        detail = F.when(F.col("check") == index, text).otherwise(detail)
    provenance = [
        c
        for c in ("split", "source_file", "block_start", "row_id", "line_number", "line", "_skip")
        if c in frame.columns
    ]
    return frame.select(
        "model",
        "run",
        F.col("_h").alias("h"),
        F.col("_r").alias("r"),
        F.col("_t").alias("t"),
        F.col("_side").alias("side"),
        F.col("_rank").alias("rank"),
        F.col("_n").cast("long").alias("num_candidates"),
        "check",
        reason.alias("reason"),
        detail.alias("detail"),
        *provenance,
    )


QUERY = ("model", "run", "h", "r", "t", "side")


def repeated_queries(checked: DataFrame, n_entities: int | None = None, n_relations: int | None = None) -> DataFrame:
    """``model, run, h, r, t, side, copies``: each query that two or more good rows of ``checked``
    (:func:`validate_ranks` output over every rank file) give. One shuffle of the good rows' keys; with
    the id ranges known (ids below ``n_entities`` / ``n_relations``), h, r, t and side travel packed in
    one long."""
    good = checked.where(F.col("check").isNull())
    if "_skip" in checked.columns:
        good = good.where(~F.col("_skip"))
    bits = [max(1, (n - 1).bit_length()) if n else 64 for n in (n_entities, n_relations, n_entities)]
    if sum(bits) + 1 > 63:
        counted = good.groupBy(*QUERY).agg(F.count(F.lit(1)).alias("copies"))
        return counted.where(F.col("copies") > 1)
    shifts = {"h": bits[1] + bits[2] + 1, "r": bits[2] + 1, "t": 1}
    packed = reduce(
        Column.bitwiseOR,
        [F.shiftleft(F.col(c).cast("long"), shift) for c, shift in shifts.items()],
        (F.col("side") == TAIL).cast("long"),
    )
    counted = good.groupBy("model", "run", packed.alias("_query")).agg(F.count(F.lit(1)).alias("copies"))
    query = F.col("_query")
    return counted.where(F.col("copies") > 1).select(
        "model",
        "run",
        *[
            F.shiftright(query, shift).bitwiseAND(F.lit((1 << width) - 1)).cast("int").alias(c)
            for (c, shift), width in zip(shifts.items(), bits, strict=True)
        ],
        F.when(query.bitwiseAND(F.lit(1)) == 1, F.lit(TAIL)).otherwise(F.lit(HEAD)).alias("side"),
        "copies",
    )


def mark_duplicate_queries(checked: DataFrame, repeated: DataFrame, broadcast: bool) -> DataFrame:
    """``checked`` with every good row of a query of ``repeated`` (:func:`repeated_queries`) marked
    ``duplicate_query``: which copy is meant is unknown, and a query given twice would weigh twice in every
    mean. Rows in, rows out (a left join on the query)."""
    copies = repeated.select(*QUERY, F.col("copies").alias("_copies"))
    joined = checked.join(F.broadcast(copies) if broadcast else copies, list(QUERY), "left")
    repeat = F.col("check").isNull() & F.col("_copies").isNotNull()
    if "_skip" in checked.columns:
        repeat = repeat & ~F.col("_skip")
    detail = F.format_string("the query (model, run, h, r, t, side) is given by %d rows", F.col("_copies"))
    return joined.withColumns(
        {
            "check": F.when(repeat, F.lit(DUPLICATE_CHECK)).otherwise(F.col("check")),
            "reason": F.when(repeat, F.lit(DUPLICATE_QUERY)).otherwise(F.col("reason")),
            "detail": F.when(repeat, detail).otherwise(F.col("detail")),
        }
    ).select(*checked.columns)


def batches_of(files: list[tuple[str, int, int]], batch_bytes: int) -> list[list[tuple[str, int, int]]]:
    """Consecutive files grouped up to ``batch_bytes`` (a larger file is a batch of its own)."""
    out: list[list[tuple[str, int, int]]] = []
    size = 0
    for file in files:
        if not out or size + file[1] > batch_bytes:
            out.append([])
            size = 0
        out[-1].append(file)
        size += file[1]
    return out


def row_status(checked: DataFrame) -> DataFrame:
    """``checked`` (:func:`validate_ranks`) with ``status``: skipped, quarantined or ok."""
    skip = F.col("_skip") if "_skip" in checked.columns else F.lit(False)
    return checked.withColumn(
        "status",
        F.when(skip, F.lit(quarantine.SKIPPED))
        .when(F.col("reason").isNotNull(), F.lit(quarantine.QUARANTINED))
        .otherwise(F.lit(quarantine.OK)),
    )


def quarantine_of(checked: DataFrame, batch_id: str) -> DataFrame:
    """``batch_id, source_file, line_number, line, reason, detail``: the bad rows of ``checked`` with file
    and line (directly for Parquet and PROBE dumps, from block offsets for text files)."""
    if "line_number" in checked.columns:
        bad = checked.filter(F.col("reason").isNotNull()).select(
            "source_file", F.col("line_number").cast("long").alias("line_number"), "line", "reason", "detail"
        )  # a PROBE dump's positions are ints, the catalogued column a long
    else:
        state = row_status(checked)
        counts = checked.sparkSession.createDataFrame(
            quarantine.line_counts(state).collect(), schema=quarantine.line_counts(state).schema
        )
        bad = quarantine.quarantine_rows(state, quarantine.block_offsets(counts))
    return bad.select(F.lit(batch_id).alias("batch_id"), "*")
