"""Rank files in every supported format, read into one shape and validated row by row.

A rank row is one query: ``h, r, t`` (entity/relation ids or keys of an ingested dataset), ``side``
(``head``/``h``: the head is missing, query (?, r, t); ``tail``/``t``: query (h, r, ?)), ``rank``
(filtered rank of the true entity; tie-averaged ranks are multiples of 0.5), ``num_candidates`` (|E_i|,
candidates left after filtering, the true entity included) and optional ``model``, ``run``.

Formats: ``parquet``; ``csv`` / ``tsv`` (a header line naming the columns, no quoting); ``jsonl`` (one
object per line); ``probe``: the PROBE release's per-query dumps ``<Model>__<run>.json[.gz]``, one JSON
list of ``[[h, r, t], side, rank, p_rel_given_known, p_known, filtered_count]`` whose ids are those of the
dataset's ``entities.dict`` / ``relations.dict`` and whose |E_i| = (number of entities) - filtered_count.

:func:`read_ranks` gives string- or number-typed columns plus provenance (``source_file`` and either
``line_number`` or the block coordinates that yield it, and ``_skip`` for header and blank lines);
:func:`validate_ranks` types them and sets
``reason``/``detail`` on bad rows (quarantine) instead of dropping or guessing.
"""

from __future__ import annotations

import re
import struct
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core.files import decoded_uri, hadoop_path, read_lines, reported_path

FORMATS = ("parquet", "csv", "tsv", "jsonl", "probe")
REQUIRED = ("h", "r", "t", "side", "rank", "num_candidates")
OPTIONAL = ("model", "run")
EXTENSIONS = {
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "probe",
}

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

HEAD, TAIL = "head", "tail"
SIDES = {HEAD: HEAD, "h": HEAD, TAIL: TAIL, "t": TAIL}

_ID = r"^[0-9]{1,9}$"


class RankFileError(ValueError):
    """A rank input that cannot be read at all (wrong columns, unknown format): names the file."""


def format_of(path: str) -> str:
    """The format implied by a file name (``.gz`` ignored)."""
    name = path.lower().removesuffix(".gz")
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    raise RankFileError(f"{path}: cannot tell the rank file format from the name; pass --format ({', '.join(FORMATS)})")


def list_rank_files(spark: SparkSession, path: str, fmt: str | None) -> list[tuple[str, int, int]]:
    """``(file, size, modification time)`` of the input: a file, a directory (recursively; hidden and
    ``_``-prefixed names skipped; only files of ``fmt`` when given) or a glob. Sorted by path."""
    hpath, fs = hadoop_path(spark, path)
    statuses = fs.globStatus(hpath) or []
    files: list[tuple[str, int, int]] = []
    pending = list(statuses)
    while pending:
        status = pending.pop()
        name = status.getPath().getName()
        if name.startswith((".", "_")):
            continue
        if status.isDirectory():
            pending.extend(fs.listStatus(status.getPath()))
        else:
            file = status.getPath().toString()
            if fmt is None or status in statuses or _matches(file, fmt):
                files.append((file, int(status.getLen()), int(status.getModificationTime())))
    if not files:
        raise RankFileError(f"{path}: no rank files found")
    return sorted(files)


def _matches(file: str, fmt: str) -> bool:
    try:
        return format_of(file) == fmt
    except RankFileError:
        return False


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


@dataclass(frozen=True)
class ReadOptions:
    """How to read: ``fmt`` (None: from the file names), ``model``/``run`` for files without those
    columns (default: the file name stem and ``1``), ``n_entities`` (PROBE dumps: |E| of the dataset)."""

    fmt: str | None = None
    model: str | None = None
    run: str | None = None
    n_entities: int | None = None


def read_ranks(spark: SparkSession, files: list[str], opts: ReadOptions) -> DataFrame:
    """Rank rows of ``files`` (all of one format) with provenance columns; see the module docstring."""
    fmt = opts.fmt or format_of(files[0])
    if fmt not in FORMATS:
        raise RankFileError(f"unknown rank file format '{fmt}' (one of {', '.join(FORMATS)})")
    if fmt == "parquet":
        frame = _read_parquet(spark, files)
    elif fmt == "probe":
        frame = _read_probe(spark, files, opts.n_entities)
    else:
        frame = _read_text(spark, files, fmt)
    return with_model_and_run(frame, F.col("source_file"), opts.model, opts.run)


def with_model_and_run(frame: DataFrame, source_file: Column, model: str | None, run: str | None) -> DataFrame:
    """``model`` / ``run`` as strings: the file's column where present and not null, else ``model``
    (default: the file name without extensions, URL-decoded as users spell it) and ``run`` (default ``1``)."""
    stem = F.regexp_extract(decoded_uri(source_file), r"([^/]+?)(\.[A-Za-z0-9]+)*(\.gz)?$", 1)
    defaults = {"model": F.lit(model) if model else stem, "run": F.lit(run or "1")}
    return frame.withColumns(
        {c: F.coalesce(F.col(c).cast("string"), defaults[c]) if c in frame.columns else defaults[c] for c in OPTIONAL}
    )


def _read_parquet(spark: SparkSession, files: list[str]) -> DataFrame:
    frame = spark.read.parquet(*files)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise RankFileError(
            f"{files[0]}: missing column(s) {', '.join(missing)} (has {', '.join(frame.columns)}); a rank file needs {', '.join(REQUIRED)}"
        )
    columns = [c for c in (*REQUIRED, *OPTIONAL) if c in frame.columns]
    return frame.select(
        *columns,
        F.col("_metadata.file_path").alias("source_file"),
        (F.col("_metadata.row_index") + 1).alias("line_number"),
        F.to_json(F.struct(*columns)).alias("line"),
    )


def _read_text(spark: SparkSession, files: list[str], fmt: str) -> DataFrame:
    lines = read_lines(spark, {"ranks": files}).withColumn("line", F.regexp_replace("line", "\r$", ""))
    if fmt == "jsonl":
        schema = T.StructType([T.StructField(c, T.StringType()) for c in (*REQUIRED, *OPTIONAL)])
        parsed = lines.withColumn("_record", F.from_json("line", schema, {"mode": "PERMISSIVE"}))
        fields = {c: F.col("_record")[c] for c in (*REQUIRED, *OPTIONAL)}
        malformed = F.col("_record").isNull() & (F.trim("line") != "")
        return parsed.select(
            "split",
            "source_file",
            "block_start",
            "row_id",
            "line",
            *[v.alias(k) for k, v in fields.items()],
            malformed.alias("_malformed"),
            (F.trim("line") == "").alias("_skip"),
        )
    delimiter = "," if fmt == "csv" else "\t"
    header = _header(spark, files, delimiter)
    cells = F.split("line", re.escape(delimiter), -1)
    fields = {c: F.trim(F.get(cells, header.index(c))) for c in (*REQUIRED, *OPTIONAL) if c in header}
    return lines.select(
        "split",
        "source_file",
        "block_start",
        "row_id",
        "line",
        *[v.alias(k) for k, v in fields.items()],
        (F.size(cells) != len(header)).alias("_malformed"),
        ((F.col("line") == delimiter.join(header)) | (F.trim("line") == "")).alias("_skip"),
    )


def _header(spark: SparkSession, files: list[str], delimiter: str) -> list[str]:
    """The header of every file (must all agree and name the required columns)."""
    header: list[str] | None = None
    for file in files:
        first = spark.read.text(file).head()
        names = [c.strip() for c in first[0].rstrip("\r").split(delimiter)] if first else []
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise RankFileError(
                f"{file}: line 1 must be a header naming {', '.join(REQUIRED)}; missing {', '.join(missing)} (got {names})"
            )
        if header is not None and names != header:
            raise RankFileError(f"{file}: header {names} differs from {files[0]}'s {header}")
        header = names
    return header or []


def _read_probe(spark: SparkSession, files: list[str], n_entities: int | None) -> DataFrame:
    if not n_entities:
        raise RankFileError("PROBE rank dumps need the dataset's entity count (|E_i| = |E| - filtered_count)")
    whole = spark.read.text(files, wholetext=True).select(F.col("_metadata.file_path").alias("source_file"), "value")
    records = whole.select(
        "source_file", F.posexplode(F.from_json("value", "array<array<string>>")).alias("_pos", "_rec")
    )
    triple = F.from_json(F.get("_rec", 0), "array<string>")
    dump_name = r"([^/]+?)__(.+?)\.json(\.gz)?$"
    file_name = decoded_uri(F.col("source_file"))
    name = F.regexp_extract(file_name, dump_name, 0)
    well_formed = (F.size("_rec") == 6) & (F.size(triple) == 3)
    filtered = F.get("_rec", 5).try_cast("long")
    return records.select(
        "source_file",
        (F.col("_pos") + 1).alias("line_number"),
        F.to_json("_rec").alias("line"),
        F.when(name != "", F.regexp_extract(file_name, dump_name, 1)).alias("model"),
        F.when(name != "", F.regexp_extract(file_name, dump_name, 2)).alias("run"),
        F.get(triple, 0).alias("h"),
        F.get(triple, 1).alias("r"),
        F.get(triple, 2).alias("t"),
        F.get("_rec", 1).alias("side"),
        F.get("_rec", 2).alias("rank"),
        (F.lit(n_entities) - filtered).cast("string").alias("num_candidates"),
        (~well_formed).alias("_malformed"),
        F.lit(False).alias("_skip"),
    )


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
    malformed record, missing field, bad number, bad side, num_candidates < 1 or not integral, rank < 1,
    rank > num_candidates, rank not a multiple of 0.5, unknown entity, unknown relation. An integer id
    column that ``facts`` (see :func:`parquet_facts`) prove non-null and within its id range in every row
    is not checked row by row, so the scan need not read it.
    """
    schema = {f.name: f.dataType for f in raw.schema.fields}
    frame = raw
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
