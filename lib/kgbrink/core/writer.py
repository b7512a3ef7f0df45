"""One writer per dataset, and the table versions that belong together (issue 28).

A dataset's ``_writer`` Delta table holds one row: the run holding the dataset's writer lease (``owner``,
``host``, ``pid``, ``expires``) and the record of the last complete ingest: the versions of ``entities``,
``relations`` and ``triples`` it wrote together.

- Acquiring is a compare-and-set on that row: it is read, then updated only where ``owner`` and
  ``expires`` are still what was read; the UPDATE's count of affected rows says whether it won. Two runs
  racing both rewrite the row's one file; Delta commits one and refuses the other (a
  concurrent-modification error), so exactly one wins. This is the same guarantee the dataset's tables
  rely on (local files, HDFS, s3a with Delta's S3 log store). Renewing and completing update only where
  this run is still the ``owner``: no affected row means the lease was lost.
- A lease is free when nobody holds it, when it expired (its holder renews it every third of
  ``seconds`` while it runs), or when its holder ran on this host and that process is gone (killed).
- Readers read the recorded versions (:func:`consistent_version`): a dictionary or triples version
  written after them by a run that never completed is skipped, so decoded triples never pair one run's
  dictionaries with another run's ids.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from pathlib import PurePosixPath

from pyspark.sql import SparkSession

from kgbrink.core.delta import latest_version, table_exists, table_path
from kgbrink.core.files import delete_if_empty, delete_path

RECORDED = ("entities", "relations", "triples")
SCHEMA = (
    "owner string, host string, pid int, expires double, entities long, relations long, triples long, "
    "completed_by string, completed_at double"
)
TYPES = dict(field.split(" ") for field in SCHEMA.split(", "))
log = logging.getLogger(__name__)


class DatasetBusy(RuntimeError):
    """Another run holds the dataset's writer lease, or took it while this run was writing."""


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _literal(value, sql_type: str) -> str:
    """``value`` as a Spark SQL literal of ``sql_type`` (a column type of :data:`SCHEMA`)."""
    if value is None:
        return f"CAST(NULL AS {sql_type.upper()})"
    if sql_type == "string":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if sql_type == "double":
        return repr(float(value)) + "D"
    return f"CAST({int(value)} AS {sql_type.upper()})"


# Delta's conflict exceptions that are not named Concurrent*: two runs creating one table race on its
# first commit and the loser sees the protocol (or metadata) the winner wrote.
_CONFLICTS = (
    "ProtocolChangedException",
    "MetadataChangedException",
    "DELTA_PROTOCOL_CHANGED",
    "DELTA_METADATA_CHANGED",
)


def _concurrent(exc: Exception) -> bool:
    """Whether Delta refused a commit because another one got in first."""
    text = f"{type(exc).__name__} {exc}"
    return "Concurrent" in text or any(name in text for name in _CONFLICTS)


def _row(spark: SparkSession, path: str):
    rows = spark.read.format("delta").load(path).collect()
    return rows[0] if rows else None


def recorded_versions(spark: SparkSession, dataset: str) -> dict[str, int] | None:
    """The versions of the last complete ingest of ``dataset`` (None: no record, e.g. an older dataset)."""
    path = table_path(dataset, "_writer")
    if not table_exists(spark, path):
        return None
    row = _row(spark, path)
    if row is None or row["completed_by"] is None:
        return None
    return {name: row[name] for name in RECORDED if row[name] is not None}


def consistent_version(spark: SparkSession, path: str, records: dict | None = None) -> int:
    """The version of the table at ``path`` to read: the recorded one for a dataset's entities,
    relations and triples (a later version is an unfinished write, skipped with a warning),
    else the latest. ``records``: a cache of :func:`recorded_versions` by dataset (one job's reads)."""
    latest = latest_version(spark, path)
    name = PurePosixPath(path.rstrip("/")).name
    if name not in RECORDED:
        return latest
    dataset = path.rstrip("/")[: -len(name) - 1]
    records = {} if records is None else records
    if dataset not in records:
        records[dataset] = recorded_versions(spark, dataset)
    record = records[dataset]
    if not record or name not in record or record[name] >= latest:
        return latest
    log.warning(
        "%s: versions %d..%d were written by a run that did not complete; reading version %d (the last "
        "complete ingest)",
        path,
        record[name] + 1,
        latest,
        record[name],
    )
    return record[name]


class WriterLease:
    """The writer lease of ``dataset`` for one run: ``with WriterLease(spark, ds, seconds) as lease:``
    acquires (or raises :class:`DatasetBusy`), renews while the block runs, and releases at the end;
    :meth:`complete` records the versions written together and releases in the same commit."""

    def __init__(self, spark: SparkSession, dataset: str, seconds: float):
        self.spark, self.dataset, self.seconds = spark, dataset, float(seconds)
        self.path = table_path(dataset, "_writer")
        self.owner = uuid.uuid4().hex
        self.previous = None
        self._stop = threading.Event()
        self._lost: str | None = None
        self._thread: threading.Thread | None = None
        self.created = False

    # -- the row ------------------------------------------------------------------------------------
    def _create(self) -> None:
        if table_exists(self.spark, self.path):
            return
        empty = [(None, None, None, 0.0, None, None, None, None, None)]
        try:
            self.spark.createDataFrame(empty, SCHEMA).coalesce(1).write.format("delta").mode("errorifexists").save(
                self.path
            )
            self.created = True
        except Exception:  # noqa: BLE001 - another run created it first: read theirs
            if not table_exists(self.spark, self.path):
                raise

    def _set_where(self, where: dict, values: dict) -> int:
        """``UPDATE`` the row to ``values`` where every column of ``where`` is (null-safely) equal to its
        value; the number of rows it changed (0 or 1). Delta's Python ``update`` returns no count; SQL does."""
        assignments = ", ".join(f"{k} = {_literal(v, TYPES[k])}" for k, v in values.items())
        condition = " AND ".join(f"{k} <=> {_literal(v, TYPES[k])}" for k, v in where.items())
        table = "delta.`" + self.path.replace("`", "``") + "`"
        rows = self.spark.sql(f"UPDATE {table} SET {assignments} WHERE {condition}").collect()
        return int(rows[0][0]) if rows else 0

    # -- lifecycle ----------------------------------------------------------------------------------
    def acquire(self) -> WriterLease:
        self._create()
        row = _row(self.spark, self.path)
        now = time.time()
        if row["owner"] is not None and row["expires"] >= now:
            if row["host"] != socket.gethostname() or _alive(row["pid"]):
                raise DatasetBusy(
                    f"{self.dataset} is being written by another run (host {row['host']}, pid {row['pid']}, "
                    f"lease until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(row['expires']))}); "
                    "wait for it to finish, or stop it"
                )
        self.previous = row
        mine = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "expires": now + self.seconds}
        try:
            won = self._set_where({"owner": row["owner"], "expires": row["expires"]}, mine)
        except Exception as exc:  # noqa: BLE001 - Delta refused the commit: a concurrent run won
            if not _concurrent(exc):
                raise
            won = 0
        if won != 1:
            raise DatasetBusy(f"another run took the writer lease of {self.dataset} at the same moment")
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.owner[:8]}", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                if self._set_where({"owner": self.owner}, {"expires": time.time() + self.seconds}) != 1:
                    self._lost = "the lease expired and another run took it"
                    return
            except Exception as exc:  # noqa: BLE001 - a failed renewal is retried; the expiry decides
                log.warning("renewing the writer lease of %s failed: %s", self.dataset, exc)

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def complete(self, versions: dict[str, int]) -> None:
        """Record ``versions`` as the dataset's consistent state and release, in one commit; raises
        :class:`DatasetBusy` when the lease was lost on the way (the writes may mix with another run's)."""
        self._stop_renewing()
        values = {name: int(versions[name]) for name in RECORDED}
        values.update(owner=None, host=None, pid=None, completed_by=self.owner, completed_at=time.time())
        if self._lost is None:
            try:
                if self._set_where({"owner": self.owner}, values) == 1:
                    return
            except Exception as exc:  # noqa: BLE001 - a concurrent commit: another run took the lease
                if not _concurrent(exc):
                    raise
        raise DatasetBusy(
            f"{self.dataset}: {self._lost or 'the writer lease was lost'}; this run's writes are not recorded "
            "and readers keep the last complete ingest's versions"
        )

    def release(self) -> None:
        """Give the lease up without recording anything (a failed run). A lease table this run created
        for a dataset that never had a complete ingest is removed, so a failed first run leaves nothing."""
        self._stop_renewing()
        try:
            row = _row(self.spark, self.path) if self.created else None
            if row is not None and row["completed_by"] is None and row["owner"] == self.owner:
                delete_path(self.spark, self.path)
                delete_if_empty(self.spark, self.dataset)
            else:
                self._set_where({"owner": self.owner}, {"owner": None, "host": None, "pid": None})
        except Exception as exc:  # noqa: BLE001 - it expires anyway
            log.warning("releasing the writer lease of %s failed: %s", self.dataset, exc)

    def __enter__(self) -> WriterLease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        if self._thread is not None and not self._stop.is_set():
            self.release()
