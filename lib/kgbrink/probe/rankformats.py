"""Rank file formats: detection from the file name, listing, and reading into one shape (the rank row of
:mod:`kgbrink.probe.rankfiles`, still untyped, plus provenance).

Formats: ``parquet``; ``csv`` / ``tsv`` (a header line naming the columns, no quoting); ``jsonl`` (one
object per line); ``probe``: the PROBE release's per-query dumps ``<Model>__<run>.json[.gz]``, one JSON
list of ``[[h, r, t], side, rank, p_rel_given_known, p_known, filtered_count]`` whose ids are those of the
dataset's ``entities.dict`` / ``relations.dict`` and whose |E_i| = (number of entities) - filtered_count.

:func:`read_ranks` gives string- or number-typed columns plus provenance (``source_file`` and either
``line_number`` or the block coordinates that yield it, and ``_skip`` for header and blank lines), for
:func:`kgbrink.probe.rankfiles.validate_ranks` to type and check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core.files import decoded_uri, hadoop_path, read_lines

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
        first = spark.read.option("lineSep", "\n").text(file).head()  # lines as read_lines splits them
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
