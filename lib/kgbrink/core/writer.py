"""One writer per dataset, and the table versions that belong together (issue 28).

A dataset's ``_writer`` Delta table records the lease's state: the run holding the dataset's writer lease
(``owner``, ``host``, ``pid``, ``expires``) and the record of the last complete ingest: the versions of
``entities``, ``relations`` and ``triples`` it wrote together. Each change appends one row, the new
state, in one commit whose ``userMetadata`` (a JSON object) repeats the state with the version it
``follows`` and a ``token``; so the table is also the lease's history.

- The state is read from the latest commit file, without a Spark job. A change is a compare-and-set: it
  appends on top of the version it read, and it counts only when it became the very next version
  (``follows == version - 1``); a commit that lost a race to that version is void, and readers take the
  state before it. Delta's log gives every version to exactly one commit (local files, HDFS, s3a with
  Delta's S3 log store), so of two runs changing the same version exactly one wins. Renewing and
  completing change the state only while this run is its ``owner``: another owner means the lease was lost.
- A lease is free when nobody holds it, when it expired (its holder renews it every third of
  ``seconds`` while it runs), or when its holder ran on this host and that process is gone (killed).
- Readers read the recorded versions (:func:`consistent_version`): a dictionary or triples version
  written after them by a run that never completed is skipped, so decoded triples never pair one run's
  dictionaries with another run's ids.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import PurePosixPath

from pyspark.sql import SparkSession

from kgbrink.core.delta import (
    commit_info,
    committed,
    latest_commit,
    latest_version,
    read_table,
    table_description,
    table_exists,
    table_path,
)
from kgbrink.core.files import delete_if_empty, delete_path

RECORDED = ("entities", "relations", "triples")
SCHEMA = (
    "owner string, host string, pid int, expires double, entities long, relations long, triples long, "
    "completed_by string, completed_at double"
)
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


FREE = {"owner": None, "host": None, "pid": None, "expires": 0.0, **dict.fromkeys(RECORDED)}
FREE.update(completed_by=None, completed_at=None)


def _decoded(metadata: str | None) -> dict | None:
    """The lease change a commit's ``userMetadata`` records (None: not a lease commit)."""
    try:
        record = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    if not isinstance(record, dict) or "token" not in record:
        return None
    return {key: record.get(key) for key in (*FREE, "token", "follows")}


def lease_state(spark: SparkSession, path: str) -> tuple[int, dict]:
    """The lease table's latest version and the state in force there (``FREE``'s keys and the ``token`` of
    the change that set it): the latest valid change's, skipping void ones."""
    latest = version = latest_commit(spark, path)["version"]
    while True:
        change = _decoded(commit_info(spark, path, version)["userMetadata"])
        if change is None:  # written by a kgbrink that kept the state as the table's one row, by UPDATE
            rows = read_table(spark, path, version).collect()
            return int(latest), {**FREE, **(rows[0].asDict() if rows else {}), "token": None}
        if version == 0 or change["follows"] == version - 1:
            return int(latest), {key: change[key] for key in (*FREE, "token")}
        version -= 1


def recorded_versions(spark: SparkSession, dataset: str) -> dict[str, int] | None:
    """The versions of the last complete ingest of ``dataset`` (None: no record, e.g. an older dataset)."""
    path = table_path(dataset, "_writer")
    if not table_exists(spark, path):
        return None
    state = lease_state(spark, path)[1]
    if state["completed_by"] is None:
        return None
    return {name: int(state[name]) for name in RECORDED if state[name] is not None}


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
        self.previous: dict | None = None
        self._stop = threading.Event()
        self._lost: str | None = None
        self._thread: threading.Thread | None = None
        self.created = False

    # -- the state ----------------------------------------------------------------------------------
    def _create(self) -> None:
        if table_exists(self.spark, self.path):
            return
        try:
            self._write(FREE, None, "errorifexists")
            self.created = True
        except Exception:  # noqa: BLE001 - another run created it first: read theirs
            if not table_exists(self.spark, self.path):
                raise

    def _write(self, state: dict, follows: int | None, mode: str = "append") -> str:
        """Append ``state`` as one row and one commit following version ``follows``; its token."""
        token = uuid.uuid4().hex
        record = {key: state.get(key) for key in FREE}
        change = json.dumps({**record, "follows": follows, "token": token}, sort_keys=True)
        row = self.spark.createDataFrame([tuple(record.values())], SCHEMA).coalesce(1)
        row.write.format("delta").mode(mode).option("userMetadata", change).save(self.path)
        committed()
        return token

    def _change(self, version: int, state: dict) -> bool:
        """Record ``state`` as the version after ``version`` (compare-and-set); whether it won."""
        try:
            token = self._write(state, version)
        except Exception as exc:  # noqa: BLE001 - Delta refused the commit: a concurrent change won
            if not _concurrent(exc):
                raise
            return False
        change = _decoded(commit_info(self.spark, self.path, version + 1)["userMetadata"])
        return change is not None and change["follows"] == version and change["token"] == token

    def _update(self, owner: str | None, values: dict) -> bool:
        """Set ``values`` while the lease's ``owner`` is ``owner``; False once another owner holds it."""
        for _ in range(8):
            version, state = lease_state(self.spark, self.path)
            if state["owner"] != owner:
                return False
            if self._change(version, {**state, **values}):
                return True
        return False

    # -- lifecycle ----------------------------------------------------------------------------------
    def acquire(self) -> WriterLease:
        self._create()
        version, state = lease_state(self.spark, self.path)
        now = time.time()
        if state["owner"] is not None and state["expires"] >= now:
            if state["host"] != socket.gethostname() or _alive(state["pid"]):
                raise DatasetBusy(
                    f"{self.dataset} is being written by another run (host {state['host']}, pid {state['pid']}, "
                    f"lease until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(state['expires']))}); "
                    "wait for it to finish, or stop it"
                )
        self.previous = state
        mine = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "expires": now + self.seconds}
        if not self._change(version, {**state, **mine}):
            raise DatasetBusy(f"another run took the writer lease of {self.dataset} at the same moment")
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.owner[:8]}", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                if not self._update(self.owner, {"expires": time.time() + self.seconds}):
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
        if self._lost is None and self._update(self.owner, values):
            return
        raise DatasetBusy(
            f"{self.dataset}: {self._lost or 'the writer lease was lost'}; this run's writes are not recorded "
            "and readers keep the last complete ingest's versions"
        )

    def lost(self) -> str | None:
        """Why this run no longer holds the lease (None: it does, or the state cannot be read)."""
        if self._lost is not None:
            return self._lost
        try:
            owner = lease_state(self.spark, self.path)[1]["owner"]
        except Exception:  # noqa: BLE001 - no state to read: nothing to say
            return None
        if owner != self.owner:
            return "the writer lease expired (this run was stopped or too slow to renew it) and another run took it"
        return None

    def fail(self, exc: BaseException) -> None:
        """Release after ``exc`` stopped the run; when the lease was lost on the way, raise
        :class:`DatasetBusy` saying so (what failed is then another run's doing, e.g. its removal of
        this run's staging files)."""
        lost = self.lost()
        self.release()
        if lost is not None and not isinstance(exc, DatasetBusy):
            raise DatasetBusy(
                f"{self.dataset}: {lost}; this run stopped ({type(exc).__name__}: {exc}) and wrote nothing that "
                "readers use; run it again"
            ) from exc

    def release(self) -> None:
        """Give the lease up without recording anything (a failed run). A lease table this run created
        for a dataset that never had a complete ingest is removed, so a failed first run leaves nothing."""
        self._stop_renewing()
        try:
            state = lease_state(self.spark, self.path)[1] if self.created else None
            if state is not None and state["completed_by"] is None and state["owner"] == self.owner:
                delete_path(self.spark, self.path)
                delete_if_empty(self.spark, self.dataset)
            else:
                self._update(self.owner, {"owner": None, "host": None, "pid": None})
        except Exception as exc:  # noqa: BLE001 - it expires anyway
            from kgbrink.core.session import driver_gone

            level = logging.DEBUG if driver_gone() else logging.WARNING  # a dead JVM is reported once, by the CLI
            log.log(level, "releasing the writer lease of %s failed: %s", self.dataset, exc)

    def __enter__(self) -> WriterLease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        if self._thread is not None and not self._stop.is_set():
            self.release()


def statistics_triples_version(spark: SparkSession, dataset: str, splits: list[str]) -> int:
    """The version of ``triples`` the dataset's current statistics on ``splits`` were computed from (the
    stats job writes it into every table's commit message), so readers can join statistics to the same triples."""
    from kgbrink.core import catalog

    folder = catalog.stats_dir(dataset, splits)
    found = catalog.recorded_triples_version(table_description(spark, f"{folder}/entity_popularity"))
    if found is None:
        raise ValueError(
            f"the statistics under {folder} do not record their triples version (run `kgbrink stats` again)"
        )
    return found
