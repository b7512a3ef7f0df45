"""The writes of ``kgbrink refresh`` (:class:`MergeWrites`): the dictionaries and triples merged into the
dataset by Delta MERGE instead of overwritten, the triples' changes written to the ``changes`` table, and
the keys a dump no longer has counted as retired."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import latest_version, read_table, table_exists
from kgbrink.core.files import spill
from kgbrink.core.jobs import JobContext
from kgbrink.kg import ingest as kg_ingest
from kgbrink.kg import refresh


def enable_deletion_vectors(ctx: JobContext, path: str) -> None:
    """Turn on deletion vectors for the table at ``path`` (one metadata commit, only the first time): a
    MERGE then marks deleted and updated rows in a small side file instead of rewriting the data files
    that hold them."""
    ctx.set_table_property(path, "delta.enableDeletionVectors", "true")


def merge_dictionary(ctx: JobContext, name: str, path: str, table: DataFrame, rows: int, reconcile: bool) -> None:
    """MERGE the dictionary ``table`` (``id, key, label``) into the table ``name`` at ``path`` on ``key``: new
    keys inserted, a row whose id or label differs updated, the rest untouched. ``reconcile`` also deletes
    keys ``table`` lacks (left by a killed run after the version this run read). A MERGE that changes
    nothing commits nothing."""
    ctx.merge(
        name,
        path,
        table,
        "t.key = s.key",
        rows=rows,
        update_all_when="t.id <> s.id OR NOT (t.label <=> s.label)",
        insert_all=True,
        delete_missing=reconcile,
    )


def _same_row(splits: list[str] | None = None):
    same = (
        (F.col("t.h") == F.col("s.h"))
        & (F.col("t.r") == F.col("s.r"))
        & (F.col("t.t") == F.col("s.t"))
        & (F.col("t.split") == F.col("s.split"))
    )
    return same & F.col("t.split").isin(splits) if splits is not None else same


def merge_changes(ctx: JobContext, path: str, diff: DataFrame, splits: list[str], rows: int) -> None:
    """Apply :func:`kgbrink.kg.refresh.triple_diff` rows to the triples at ``path``: a ``removed`` row that
    matches is deleted, an ``added`` row that matches none is inserted. Only the files of ``splits`` (the
    splits with changes) are scanned."""
    ctx.merge(
        "triples",
        path,
        diff,
        _same_row(splits),
        rows=rows,
        delete_when=F.col("s.op") == refresh.REMOVED,
        insert_when=F.col("s.op") == refresh.ADDED,
        insert_values={c: F.col(f"s.{c}") for c in refresh.KEY},
    )


def merge_all(ctx: JobContext, path: str, triples: DataFrame, rows: int) -> None:
    """Make the triples at ``path`` the set ``triples``: rows it lacks inserted, rows not in it deleted
    (``whenNotMatchedBySource``), matching rows untouched. Used when the latest version is not the one this
    run read (a killed run wrote after it)."""
    ctx.merge("triples", path, triples, _same_row(), rows=rows, insert_all=True, delete_missing=True)


def write_changes(ctx: JobContext, path: str, diff: DataFrame, n: int, before: int, after: int) -> bool:
    """The rows of this refresh in the ``changes`` table: ``diff`` with the triples versions before and
    after. A killed attempt from the same ``before`` version is replaced (``replaceWhere``); nothing is
    committed when the table already holds exactly these rows. Returns whether a version was committed."""
    spark = ctx.spark
    rows = diff.select(
        F.lit(before).cast("long").alias("version_before"),
        F.lit(after).cast("long").alias("version_after"),
        "op",
        "h",
        "r",
        "t",
        "split",
    )
    catalog.check_schema(catalog.table("changes"), rows)
    exists = table_exists(spark, path)
    earlier = read_table(spark, path).filter(F.col("version_before") == before) if exists else None
    if earlier is not None and _same_rows(earlier, rows):
        ctx.keep("changes", path, n)
        return False
    if n == 0 and earlier is None:
        return False
    description = f"refresh of triples version {before} to {after}"
    ctx.replace_where("changes", rows.coalesce(1), path, f"version_before = {int(before)}", description, rows=n)
    return True


def _same_rows(left: DataFrame, right: DataFrame) -> bool:
    """Whether two frames hold the same multiset of rows, in one action: each row counted +1 on the left
    and -1 on the right, no row's sum may differ from 0."""
    signed = left.withColumn("_side", F.lit(1)).unionByName(right.withColumn("_side", F.lit(-1)))
    columns = [c for c in signed.columns if c != "_side"]
    return signed.groupBy(*columns).agg(F.sum("_side").alias("_n")).where(F.col("_n") != 0).isEmpty()


class MergeWrites:
    """The refresh's :class:`kgbrink.jobs.steps.ingest.Writes`: MERGE instead of overwrite, the change table,
    retired keys."""

    def __init__(self, dataset: str, after: Callable[[str], None]):
        self.dataset = dataset
        self.after = after  # called after each write with what was written (refresh.after_write)
        self.retired = {"entities": 0, "relations": 0}
        self.changes_written = False

    def dictionary(self, ctx, name, table, path, same, rows, description):
        spark = ctx.spark
        read = ctx.summary.inputs[name]
        latest = latest_version(spark, path)
        if not (same and read.version == latest):
            enable_deletion_vectors(ctx, path)
            merge_dictionary(ctx, name, path, table, rows, reconcile=read.version != latest)
        else:
            ctx.keep(name, path, rows, latest)

    def triples(self, ctx, triples, before, path, staging, description):
        spark = ctx.spark
        fingerprint = Observation("triples_fingerprint")
        triples = spill(triples.observe(fingerprint, *kg_ingest.triples_fingerprint()), f"{staging}/encoded")
        same = fingerprint.get == before.agg(*kg_ingest.triples_fingerprint()).collect()[0].asDict()
        read = ctx.summary.inputs["triples"].version
        latest = latest_version(spark, path)
        diff = spill(refresh.triple_diff(triples, before), f"{staging}/diff") if not same else None
        changes = {} if same else {r["split"]: r for r in refresh.changes_per_split(diff).collect()}
        if not same or read != latest:
            enable_deletion_vectors(ctx, path)
        rows = fingerprint.get["triples"]
        if read != latest:
            merge_all(ctx, path, triples, rows)
        elif not same:
            merge_changes(ctx, path, diff, sorted(changes), rows)
        else:
            ctx.keep("triples", path, rows, latest)
        after = ctx.summary.outputs["triples"].version
        self.after("triples")
        n = sum(r["added"] + r["removed"] for r in changes.values())
        empty = spark.createDataFrame([], "h int, r int, t int, split string, op string")
        changes_path = catalog.path("changes", dataset=self.dataset)
        self.changes_written = write_changes(ctx, changes_path, diff if diff is not None else empty, n, read, after)
        self.after("changes")
        if diff is not None:
            self.retired = {kind: refresh.retired(diff, triples, kind).count() for kind in refresh.ROLES}
        return changes

    def written(self, ctx, name):
        if name != "triples":  # the triples and the changes are reported from triples()
            self.after(name)
