"""The release folder's I/O: tables as sharded Parquet or JSON Lines, copied files, text and SHA-256.

Every location is a local path or a URI of the session's Hadoop file systems (``s3a://``). A file's bytes
depend only on the rows, never on the partitioning, the JVM or lost executors: a shard is a hash bucket of
the row's content, its rows sorted, encoded by one task (a retried task encodes the whole file again).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path
from urllib.parse import unquote

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kgbrink.core.digests import sha256_of
from kgbrink.core.files import delete_path, hadoop_path, path_exists
from kgbrink.core.locations import is_uri

EXTENSIONS = {"parquet": "parquet", "json": "jsonl"}
Digests = dict[str, tuple[str, int]]  # a file (as its writer named it) -> (SHA-256 hex, bytes)
_PART = re.compile(r"part-(\d+)-")


def _orderable(frame: DataFrame) -> list[str]:
    """The columns Spark can sort by (maps cannot be ordered)."""
    return [f.name for f in frame.schema.fields if not isinstance(f.dataType, T.MapType)]


def write_shards(
    frame: DataFrame,
    directory: str,
    rows: int,
    shard_rows: int,
    fmt: str,
    split: str | None = None,
    written: Digests | None = None,
) -> dict[str, list[str]]:
    """``frame`` as ``<directory>/<split>-0000i-of-0000n.<ext>`` (Parquet or JSON Lines), one set of files
    per value of the column ``split`` (without it: split ``train``); the file paths by split. ``written``
    gets each Parquet file's digest, from the bytes the driver copies (JSON Lines files are Spark's).

    n = max(1, ceil(rows / shard_rows)) hash buckets of all the sortable columns; each is sorted by them
    and encoded by one task, in one job for all splits. Buckets a split leaves empty are not written, the
    others are numbered in order. A frame without rows gives no files. Parquet is encoded by pyarrow in
    the tasks (:func:`_parquet_files`): Spark's writer lists a column chunk's encodings in the JVM's hash
    order, so its bytes differ from one JVM to the next."""
    if fmt not in EXTENSIONS:
        raise ValueError(f"unknown release format {fmt!r} (parquet or json)")
    keys = [c for c in _orderable(frame) if c != split]
    if not keys:  # a round-robin shuffle would place rows by partitioning, not by content
        raise ValueError(f"{directory}: a release table needs a sortable column (has {frame.columns})")
    shards = max(1, -(-rows // max(1, shard_rows)))
    if split is None:
        frame = frame.withColumn("_split", F.lit("train"))
        split = "_split"
    # a shuffle even to one shard: the steps before it keep their parallelism (coalesce(1) would not)
    bucketed = frame.repartition(shards, *keys).sortWithinPartitions(split, *keys)
    if fmt == "parquet":
        return _parquet_files(bucketed, directory, split, written)
    return _json_files(bucketed, directory, split)


def _json_files(bucketed: DataFrame, directory: str, split: str) -> dict[str, list[str]]:
    """Each bucket's rows of each split as a JSON Lines file written by Spark (text: its bytes are the rows')."""
    spark = bucketed.sparkSession
    staging = f"{directory}/_staging"
    delete_path(spark, staging)
    bucketed.write.mode("overwrite").partitionBy(split).option("ignoreNullFields", "false").json(staging)
    hpath, fs = hadoop_path(spark, staging)
    out: dict[str, list[str]] = {}
    for folder in sorted(fs.listStatus(hpath), key=lambda s: s.getPath().getName()):
        name = folder.getPath().getName()
        if not folder.isDirectory() or not name.startswith(f"{split}="):
            continue
        value = unquote(name.split("=", 1)[1])
        parts = sorted(
            (int(_PART.match(s.getPath().getName()).group(1)), s.getPath())
            for s in fs.listStatus(folder.getPath())
            if _PART.match(s.getPath().getName())
        )
        for index, (_, part) in enumerate(parts):
            target = f"{directory}/{value}-{index:05d}-of-{len(parts):05d}.{EXTENSIONS['json']}"
            target_path, _ = hadoop_path(spark, target)
            fs.delete(target_path, False)
            if not fs.rename(part, target_path):
                raise OSError(f"could not move {part} to {target}")
            out.setdefault(value, []).append(target)
    delete_path(spark, staging)
    return out


NULL_SPLIT = "__HIVE_DEFAULT_PARTITION__"  # the folder name Spark's writer gives a null partition value


def _parquet_encoder(split: str):
    """The ``mapInArrow`` function of :func:`_parquet_files`: a bucket's rows (sorted by ``split`` first) as
    one Parquet file per split value, ``split, bucket, data`` (the file's bytes, snappy, pyarrow)."""

    def encode(batches):
        import io

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        bucket = TaskContext.get().partitionId()
        batches = [b for b in batches if b.num_rows]
        if not batches:  # a bucket no row hashed to
            return
        table = pa.Table.from_batches(batches)
        values = table.column(split)
        for value in pc.unique(values).to_pylist():  # in order: the rows are sorted by split
            rows = pc.is_null(values) if value is None else pc.equal(values, value)
            sink = io.BytesIO()
            pq.write_table(table.filter(rows).drop_columns([split]), sink, compression="snappy")
            yield pa.RecordBatch.from_pydict(
                {"split": [NULL_SPLIT if value is None else value], "bucket": [bucket], "data": [sink.getvalue()]},
                schema=pa.schema([("split", pa.string()), ("bucket", pa.int32()), ("data", pa.binary())]),
            )

    return encode


def _parquet_files(bucketed: DataFrame, directory: str, split: str, written: Digests | None) -> dict[str, list[str]]:
    """Each bucket's rows of each split as a Parquet file encoded by pyarrow in its task; the files' bytes
    come to the driver one bucket at a time and are copied to ``directory`` (local or s3a)."""
    spark = bucketed.sparkSession
    encoded = bucketed.mapInArrow(_parquet_encoder(split), "split string, bucket int, data binary").persist(
        StorageLevel.DISK_ONLY
    )
    try:
        made = sorted((r["split"], r["bucket"]) for r in encoded.select("split", "bucket").collect())
        numbers: dict[tuple[str, int], tuple[int, int]] = {}
        for value in sorted({v for v, _ in made}):
            buckets = [b for v, b in made if v == value]
            numbers.update({(value, b): (i, len(buckets)) for i, b in enumerate(buckets)})
        out: dict[str, list[str]] = {}
        with tempfile.TemporaryDirectory(prefix="kgbrink-shards-") as local:
            for row in encoded.toLocalIterator():
                index, count = numbers[(row["split"], row["bucket"])]
                target = f"{directory}/{row['split']}-{index:05d}-of-{count:05d}.{EXTENSIONS['parquet']}"
                staged = Path(local) / f"{row['split']}-{index}"
                staged.write_bytes(row["data"])
                copy_file(spark, str(staged), target)
                staged.unlink()
                if written is not None:
                    written[target] = (hashlib.sha256(row["data"]).hexdigest(), len(row["data"]))
                out.setdefault(row["split"], []).append(target)
    finally:
        encoded.unpersist()
    return {value: sorted(paths) for value, paths in sorted(out.items())}


def clear(spark: SparkSession, directory: str, stem: str) -> None:
    """Remove the shards ``<directory>/<stem>-*`` an earlier release wrote (their count may differ now)."""
    if not path_exists(spark, directory):
        return
    hpath, fs = hadoop_path(spark, directory)
    for status in fs.listStatus(hpath):
        if status.getPath().getName().startswith(f"{stem}-"):
            fs.delete(status.getPath(), False)


def copy_file(spark: SparkSession, source: str, target: str, written: Digests | None = None) -> None:
    """Copy one file between any two file systems of the session (local to s3a included); ``written`` gets
    the target's digest when the source is a local file (hashed here, before the copy)."""
    if written is not None and not is_uri(source):
        written[target] = (sha256_of(Path(source)), Path(source).stat().st_size)
    jvm = spark.sparkContext._jvm
    src, src_fs = hadoop_path(spark, source)
    dst, dst_fs = hadoop_path(spark, target)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    try:
        copied = jvm.org.apache.hadoop.fs.FileUtil.copy(src_fs, src, dst_fs, dst, False, True, conf)
    except Py4JJavaError as exc:  # e.g. a local file whose checksum no longer matches: damaged since written
        cause = str(exc.java_exception.toString()).splitlines()[0]
        raise OSError(f"could not copy {source} to {target}: {cause}") from None
    if not copied:
        raise OSError(f"could not copy {source} to {target}")


def write_text(spark: SparkSession, path: str, text: str, written: Digests | None = None) -> None:
    """Write ``text`` (UTF-8) as the whole file ``path``, replacing it; ``written`` gets its digest."""
    data = text.encode("utf-8")
    hpath, fs = hadoop_path(spark, path)
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    if written is not None:
        written[path] = (hashlib.sha256(data).hexdigest(), len(data))


def read_text(spark: SparkSession, path: str) -> str | None:
    """The UTF-8 text of the file ``path``, or None when it does not exist."""
    if not path_exists(spark, path):
        return None
    jvm = spark.sparkContext._jvm
    hpath, fs = hadoop_path(spark, path)
    stream = fs.open(hpath)
    try:
        out = jvm.java.io.ByteArrayOutputStream()
        jvm.org.apache.hadoop.io.IOUtils.copyBytes(stream, out, 1 << 16, False)
        return bytes(out.toByteArray()).decode("utf-8")
    finally:
        stream.close()


def digests(spark: SparkSession, directory: str, names: list[str], written: Digests | None = None) -> Digests:
    """``{name: (sha256 hex, bytes)}`` of files under ``directory``: those ``written`` holds (as
    ``<directory>/<name>``) from it, the others read back and hashed by the executors (each file whole in
    one task: the release's shards are bounded by ``release.shard_rows``)."""
    written = written or {}
    out = {name: written[f"{directory}/{name}"] for name in names if f"{directory}/{name}" in written}
    names = [name for name in names if name not in out]
    if not names:
        return out
    hpath, fs = hadoop_path(spark, directory)
    root = fs.makeQualified(hpath).toString().rstrip("/")
    paths = [f"{root}/{name}" for name in names]
    rows = (
        spark.read.format("binaryFile")
        .load(paths)
        .select("path", F.sha2("content", 256).alias("sha256"), "length")
        .collect()
    )
    by_path = {r["path"]: (r["sha256"], int(r["length"])) for r in rows}
    for name, path in zip(names, paths):
        found = by_path.get(path) or next((v for k, v in by_path.items() if k.endswith("/" + name)), None)
        if found is None:
            raise OSError(f"no digest for {path}")
        out[name] = found
    return out
