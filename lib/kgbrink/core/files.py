"""Input discovery and line reading: the I/O edge of ingest.

Paths are local paths or any URI the session's Hadoop file systems can read (``s3a://``, ``hdfs://``,
``file://``); ``.gz`` files are decompressed transparently by Spark's text source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kgbrink.core.locations import is_uri

SPLIT_ORDER = ("train", "valid", "test")


class InputError(ValueError):
    """An input file or directory is missing, empty or not of the expected shape."""


@dataclass
class IngestInputs:
    """The files of one dump: triple files per split, optional alias and dictionary files."""

    splits: dict[str, list[str]]
    entity_aliases: str | None = None
    relation_aliases: str | None = None
    entity_dict: str | None = None
    relation_dict: str | None = None
    all_files: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.splits or not any(self.splits.values()):
            raise InputError("no triple files given")
        self.all_files = [p for paths in self.splits.values() for p in paths]


def hadoop_path(spark: SparkSession, path: str):
    """``(org.apache.hadoop.fs.Path, FileSystem)`` of ``path`` in the session's Hadoop configuration."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def reported_path(uri: str) -> str:
    """A file as Spark and Hadoop report it (``_metadata.file_path``, listings: a URL-encoded URI such as
    ``file:/data/my%20dump.txt``) spelled as users give paths: a ``file:`` URI as its decoded local path,
    any other URI decoded (``s3a://bucket/my dump.txt``). Compare with :func:`given_path`."""
    return unquote(urlparse(uri).path) if uri.startswith("file:") else unquote(uri)


def reported_path_column(uri: Column) -> Column:
    """The column form of :func:`reported_path`: a ``file:`` URI as its decoded local path, any other URI
    decoded."""
    return F.regexp_replace(decoded_uri(uri), r"^file:(//)?", "")


def decoded_uri(uri: Column) -> Column:
    """The column form of :func:`reported_path`'s decoding: ``%XX`` escapes decoded, ``+`` kept (Spark's
    ``url_decode`` is form decoding, which would turn ``+`` into a space)."""
    return F.url_decode(F.regexp_replace(uri, r"\+", "%2B"))


def given_path(path: str) -> str:
    """A path as a user gives it (not URL-encoded), spelled as :func:`reported_path` spells files: a local
    path made absolute, a ``file:`` URI as its local path, any other URI unchanged."""
    if path.startswith("file:"):
        return urlparse(path).path
    return path if "://" in path else os.path.abspath(path)


def path_exists(spark: SparkSession, path: str) -> bool:
    hpath, fs = hadoop_path(spark, path)
    return bool(fs.exists(hpath))


def delete_path(spark: SparkSession, path: str) -> None:
    """Remove a file or directory tree (a job's staging area); no error if it is not there."""
    hpath, fs = hadoop_path(spark, path)
    fs.delete(hpath, True)


def delete_if_empty(spark: SparkSession, path: str) -> None:
    """Remove the directory ``path`` when nothing is in it (a scratch parent once its last run is done). A
    non-recursive delete, so a run that has just created its own subdirectory keeps it."""
    hpath, fs = hadoop_path(spark, path)
    if fs.exists(hpath) and not fs.listStatus(hpath):  # a file lists itself, so only an empty directory passes
        try:
            fs.delete(hpath, False)
        except Py4JJavaError:  # not empty any more: another run's scratch space
            pass


def _is_directory(spark: SparkSession, path: str) -> bool:
    hpath, fs = hadoop_path(spark, path)
    return bool(fs.getFileStatus(hpath).isDirectory())


def file_size(spark: SparkSession, path: str) -> int:
    hpath, fs = hadoop_path(spark, path)
    return int(fs.getFileStatus(hpath).getLen())


def write_parquet(frame: DataFrame, path: str, mode: str = "overwrite") -> None:
    """``frame`` as Parquet files at ``path`` (a spill, a staging folder or a Parquet table)."""
    frame.write.mode(mode).parquet(path)


def read_parquet_splits(spark: SparkSession, files: dict[str, list[str]]) -> DataFrame:
    """The Parquet files of each split (``{split: [path, ...]}``, one schema) as one frame with ``split``."""
    frames = [spark.read.parquet(*paths).withColumn("split", F.lit(split)) for split, paths in sorted(files.items())]
    if not frames:
        raise InputError("no Parquet files to read")
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def read_json_lines(spark: SparkSession, path: str, schema: str) -> DataFrame:
    """The JSON Lines files under ``path`` with ``schema``; a line that is not a whole JSON object (cut by a
    kill) is dropped."""
    frame = spark.read.schema(f"{schema}, _corrupt string").option("columnNameOfCorruptRecord", "_corrupt").json(path)
    return frame.filter(F.col("_corrupt").isNull()).drop("_corrupt")


def spill(frame: DataFrame, path: str) -> DataFrame:
    """``frame`` computed once into Parquet at ``path`` (a new folder), read back."""
    write_parquet(frame, path, mode="errorifexists")
    return frame.sparkSession.read.parquet(path)


def write_lines(frame: DataFrame, directory: str, fmt: str, partition_by: str | None = None) -> None:
    """``frame`` as ``part-*`` files of JSON Lines (``fmt`` json, Spark's: null fields left out) or text (one column)
    under ``directory`` (replaced), split into ``<partition_by>=<value>`` folders when given; the parts are
    then put together by :func:`merge_parts`."""
    writer = frame.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(partition_by)
    if fmt == "json":
        writer.json(directory)
    elif fmt == "text":
        writer.text(directory)
    else:
        raise ValueError(f"unknown line format {fmt!r} (json or text)")


def merge_parts(spark: SparkSession, directory: str, target: str) -> int:
    """Append the ``part-NNNNN-*`` files of ``directory`` (any file system the session reads: local, s3a,
    ...) in part-number order into the driver-local file ``target``; returns the bytes written. The driver
    JVM streams the bytes (Hadoop ``IOUtils``), none pass through Python. Writes ``target + ".partial"``
    and renames it, so a failure leaves no truncated ``target``."""
    jvm = spark.sparkContext._jvm
    hpath, fs = hadoop_path(spark, directory)
    parts = [s.getPath() for s in fs.listStatus(hpath) if s.getPath().getName().startswith("part-")]
    parts.sort(key=lambda part: int(part.getName().split("-")[1]))
    partial = Path(target + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    out = jvm.java.io.FileOutputStream(str(partial))
    try:
        for part in parts:
            stream = fs.open(part)
            try:
                jvm.org.apache.hadoop.io.IOUtils.copyBytes(stream, out, 1 << 24, False)
            finally:
                stream.close()
    finally:
        out.close()
    partial.replace(target)
    return Path(target).stat().st_size


def json_array_from_lines(source: str | Path, target: str | Path) -> int:
    """The JSON Lines file ``source`` (one JSON value per line) as one JSON array in ``target`` (one value
    per line between ``[`` and ``]``), written to ``target + ".partial"`` and renamed; returns the values."""
    partial = Path(str(target) + ".partial")
    count = 0
    with open(source, encoding="utf-8") as lines, open(partial, "w", encoding="utf-8") as out:
        out.write("[")
        for line in lines:
            value = line.rstrip("\n")
            if value:
                out.write(("\n" if count == 0 else ",\n") + value)
                count += 1
        out.write("\n]\n")
    partial.replace(target)
    return count


def first_existing(spark: SparkSession, candidates: list[str]) -> str | None:
    return next((c for c in candidates if path_exists(spark, c)), None)


# Root causes of a read that fails on the bytes of a compressed file (truncated or corrupt): the Java
# exception classes, Hadoop's gzip messages and zlib's (which the Java inflater passes on as they are).
_CORRUPT = re.compile(
    r"EOFException|ZipException|DataFormatException|Unexpected end of|Not in GZIP format|unknown gzip format"
    r"|CRC failure|incorrect (?:header|data|length) check|unknown compression method|too many length or distance"
    r"|invalid (?:block type|stored block|code lengths|distance|literal|bit length|window size)"
)
# How Spark names the file a read failed on (a URL-encoded URI, the sentence's full stop after it).
_FAILED_FILE = re.compile(r"while reading file (\S+?)\.?(?:\s|$)")


def corrupt_input(exc: BaseException, paths: list[str]) -> InputError | None:
    """An :class:`InputError` naming the input file a Spark read failed on, when the JVM failure is a
    truncated or corrupt compressed file; None for any other failure. The file is the one Spark's message
    names (decoded, so a name with a space matches), spelled as given in ``paths`` when it is one of them."""
    from kgbrink.core.console import java_causes

    causes = java_causes(exc)
    if not any(_CORRUPT.search(cause) for cause in causes):
        return None
    text = " ".join(causes)
    failed = {reported_path(uri) for uri in _FAILED_FILE.findall(text)}
    if failed:
        named = [p for p in paths if given_path(p) in failed] or sorted(failed)
    else:
        named = [p for p in paths if given_path(p) in text or p in text]
    where = ", ".join(named) if named else "one of " + ", ".join(paths)
    return InputError(f"{where}: truncated or corrupt compressed input ({causes[-1]})")


def subdirectories(spark: SparkSession, path: str) -> list[str]:
    """The names of the directories directly under ``path``, sorted (none when it does not exist)."""
    if not path_exists(spark, path) or not _is_directory(spark, path):
        return []
    hpath, fs = hadoop_path(spark, path)
    return sorted(s.getPath().getName() for s in fs.listStatus(hpath) if s.isDirectory())


def expand_directories(spark: SparkSession, paths: list[str]) -> list[str]:
    """``paths`` with each directory replaced by the files in it, sorted by name, so a directory of part
    files reads like those files named one by one (line numbers and quarantine rows per file). Names
    starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files beside Spark's parts) and empty files hold
    no lines and are left out; a subdirectory is refused rather than guessed at. A missing path is kept
    for :func:`require_files` to name."""
    out: list[str] = []
    for path in paths:
        if not path_exists(spark, path) or not _is_directory(spark, path):
            out.append(path)
            continue
        hpath, fs = hadoop_path(spark, path)
        entries = sorted(
            (s for s in fs.listStatus(hpath) if not s.getPath().getName().startswith((".", "_"))),
            key=lambda s: s.getPath().getName(),
        )
        nested = [s.getPath().getName() for s in entries if s.isDirectory()]
        if nested:
            raise InputError(
                f"input directory {path} holds directories ({', '.join(nested)}): only the files directly in a "
                "directory are read; name the files of its subdirectories"
            )
        files = [f"{path.rstrip('/')}/{s.getPath().getName()}" for s in entries if s.getLen() > 0]
        if not files:
            raise InputError(f"input directory has no non-empty files: {path}")
        out.extend(files)
    return out


def require_files(spark: SparkSession, paths: list[str]) -> None:
    """Every path an existing, non-empty file (a directory is refused: its files are to be named)."""
    missing = [p for p in paths if not path_exists(spark, p)]
    if missing:
        raise InputError(f"input file not found: {', '.join(missing)}")
    folders = [p for p in paths if _is_directory(spark, p)]
    if folders:
        raise InputError(
            f"input is a directory, not a file: {', '.join(folders)} (name its files, e.g. DIR/part1.tsv,DIR/part2.tsv, "
            "or give a dump directory with --input)"
        )
    empty = [p for p in paths if file_size(spark, p) == 0]
    if empty:
        raise InputError(f"input file is empty: {', '.join(empty)}")


def _plain_or_gz(spark: SparkSession, base: str) -> str | None:
    return first_existing(spark, [base, base + ".gz"])


def _split_files(spark: SparkSession, directory: str, pattern: str) -> dict[str, list[str]]:
    """The train/valid/test files (plain or .gz) named by ``pattern`` (with ``{split}``); train is required."""
    splits = {}
    for split in SPLIT_ORDER:
        found = _plain_or_gz(spark, f"{directory}/{pattern.format(split=split)}")
        if found:
            splits[split] = [found]
    if "train" not in splits:
        raise InputError(f"{directory}: no {pattern.format(split='train')}[.gz]")
    return splits


def wikidata5m_inputs(spark: SparkSession, directory: str, variant: str = "transductive") -> IngestInputs:
    """``wikidata5m_<variant>_{train,valid,test}.txt[.gz]`` and the alias files of a Wikidata5m directory."""
    if variant not in ("transductive", "inductive"):
        raise InputError(f"unknown Wikidata5m variant '{variant}' (transductive or inductive)")
    d = directory.rstrip("/")
    splits = _split_files(spark, d, f"wikidata5m_{variant}_{{split}}.txt")
    return IngestInputs(
        splits,
        entity_aliases=_plain_or_gz(spark, f"{d}/wikidata5m_entity.txt"),
        relation_aliases=_plain_or_gz(spark, f"{d}/wikidata5m_relation.txt"),
    )


def probe_inputs(spark: SparkSession, directory: str) -> IngestInputs:
    """A PROBE release dataset: ``{train,valid,test}.txt[.gz]`` with ``entities.dict`` / ``relations.dict``."""
    d = directory.rstrip("/")
    splits = _split_files(spark, d, "{split}.txt")
    entity_dict, relation_dict = f"{d}/entities.dict", f"{d}/relations.dict"
    require_files(spark, [entity_dict, relation_dict])
    return IngestInputs(splits, entity_dict=entity_dict, relation_dict=relation_dict)


def read_dictionary_lines(spark: SparkSession, path: str) -> DataFrame:
    """The lines (``value``) of a dictionary file; lines end at ``\\n`` only, as triple lines do."""
    require_files(spark, [path])
    return spark.read.option("lineSep", "\n").text(path)


def read_lines(spark: SparkSession, splits: dict[str, list[str]]) -> DataFrame:
    """One row per input line: ``split, source_file, block_start, row_id, line``.

    ``row_id`` is taken right after the scan, so within one file block (a contiguous byte range read by
    one task) the rows of the block carry consecutive ids; with the block's start offset this yields
    exact line numbers (:func:`kgbrink.core.quarantine.block_offsets`). Lines end at ``\n`` only (a
    ``\r\n`` line keeps its ``\r`` for the parsers to strip; a lone ``\r`` stays inside its line, so
    line numbers agree with ``wc -l``); ``line`` keeps the file's bytes, valid UTF-8 or not.
    """
    frames = [
        spark.read.option("lineSep", "\n")
        .text(paths)
        .select(
            F.lit(split).alias("split"),
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.col("value").alias("line"),
        )
        for split, paths in splits.items()
    ]
    lines = frames[0]
    for frame in frames[1:]:
        lines = lines.unionByName(frame)
    return lines.withColumn("row_id", F.monotonically_increasing_id())


def local_dir(location: str) -> Path:
    """A local directory for plain-file outputs; a URI is refused (pass a local --out)."""
    if is_uri(location):
        raise ValueError(f"plain-file outputs are written to a local directory; give --out for {location}")
    return Path(location)


def write_single_file(frame: DataFrame, path: Path, fmt: str, staging: str) -> None:
    """``frame`` (in its order) as one driver-local file ``path``: JSON Lines (``json``) or TAB-separated
    text of its string columns (``tsv``, no quoting: names are free of TABs and newlines).

    The tasks write one part per partition of the ordered frame under ``staging`` (a directory beside the
    variant's tables, so on a cluster the executors write to the dataset's file system, e.g. S3); a sorted
    frame's partitions are consecutive ranges of its order, and the driver appends the parts in partition
    order (:func:`merge_parts`). The bytes do not depend on the number of partitions."""
    if fmt == "json":
        frame.write.mode("overwrite").option("ignoreNullFields", "false").json(staging)
    elif fmt == "tsv":
        frame.select(
            F.concat_ws(
                "\t", *[F.regexp_replace(F.col(c).cast("string"), "[\t\r\n]", " ") for c in frame.columns]
            ).alias("line")
        ).write.mode("overwrite").text(staging)
    else:
        raise ValueError(f"unknown single-file format {fmt!r}")
    merge_parts(frame.sparkSession, staging, str(path))
    delete_path(frame.sparkSession, staging)
