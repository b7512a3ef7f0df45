"""``kgbrink refresh``: a new dump into an existing dataset by Delta MERGE, then what depends on it.

The dump is parsed, checked and encoded exactly as by ``kgbrink ingest`` (:func:`kgbrink.jobs.ingest_steps.ingest_dump`,
same quarantine, accounting and stable ids), under the dataset's writer lease. The tables are not
overwritten but merged (:class:`MergeWrites`): a dictionary gains its new keys (and changed labels); the
triples lose the removed rows and gain the added ones, so unchanged rows are never rewritten (deletion
vectors mark deleted rows; the data files of unchanged rows stay as they are). The triples' changes go to
the ``changes`` table; the last complete ingest's record then moves to the merged versions.

Then, each only when an input it depends on changed (``docs/jobs.md``, refresh):

- statistics ``stats/<splits>``: recomputed when the triples of those splits differ from the version the
  statistics record (per-split fingerprints, :func:`kgbrink.kg.refresh.split_fingerprints`);
- variants ``variants/<name>``: rebuilt (``kgbrink build``) when their ``complete`` KG differs from the
  dataset's triples of their splits, or a rebuild an earlier refresh began did not finish;
- score runs ``scores/<fingerprint>``: scored again (``kgbrink score`` with the recorded options) when no run
  with the same options has read the current versions of the tables it reads.

Every step is idempotent and decided from what the tables hold, not from what the last run did, so a
refresh killed anywhere leaves the previous versions readable and a rerun with the same dump converges to
the tables of an uninterrupted run. The same dump a second time changes nothing (``changed: false``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.delta import (
    TableVersion,
    description,
    latest_version,
    read_table,
    table_description,
    table_exists,
    table_path,
)
from kgbrink.core.files import delete_path, hadoop_path, path_exists
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.core.writer import RECORDED, WriterLease, consistent_version
from kgbrink.jobs import ingest_steps
from kgbrink.jobs.ingest_options import IngestOptions
from kgbrink.kg import ingest as kg_ingest
from kgbrink.kg import refresh
from kgbrink.probe import runs as score_runs

# A variant whose rebuild began and has not finished carries this marker file (removed when ``build`` ends).
PENDING = "_refresh_pending"


def after_write(name: str) -> None:
    """Called after each write of a refresh, with what was written: ``quarantine``, ``entities``,
    ``relations``, ``triples``, ``changes``, ``record`` (the last complete ingest moved), then
    ``stats:<splits>``, ``variant:<name>``, ``score:<fingerprint>``. Does nothing: the tests replace it
    to stop a refresh after any write and check that a rerun converges."""


@dataclass
class RefreshOptions(IngestOptions):
    variants: list[str] | None = arg(
        None, "variants to keep current, comma-separated (default: every variant of the dataset)", convert=names
    )
    no_rebuild: bool = arg(
        False, "do not rebuild variants or score again; only report which are stale", action="store_true"
    )
    out: str | None = arg(
        None,
        "local directory for the plain files of rebuilt variants, one subdirectory per variant "
        "(default: each variant's directory; required for a dataset on s3a://)",
    )


class RefreshError(JobFailed):
    """The dataset cannot be refreshed (no complete ingest, an unknown variant)."""


def _stage(frame: DataFrame, path: str) -> DataFrame:
    frame.write.parquet(path)
    return frame.sparkSession.read.parquet(path)


def enable_deletion_vectors(ctx: JobContext, path: str) -> None:
    """Turn on deletion vectors for the table at ``path`` (one metadata commit, only the first time): a
    MERGE then marks deleted and updated rows in a small side file instead of rewriting the data files
    that hold them."""
    ctx.set_table_property(path, "delta.enableDeletionVectors", "true")


def merge_dictionary(ctx: JobContext, path: str, table: DataFrame, reconcile: bool) -> None:
    """MERGE the dictionary ``table`` (``id, key, label``) into the table at ``path`` on ``key``: new keys
    inserted, a row whose id or label differs updated, the rest untouched. ``reconcile`` also deletes keys
    ``table`` lacks (left by a killed run after the version this run read). A MERGE that changes nothing
    commits nothing."""
    ctx.merge(
        path,
        table,
        "t.key = s.key",
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


def merge_changes(ctx: JobContext, path: str, diff: DataFrame, splits: list[str]) -> None:
    """Apply :func:`kgbrink.kg.refresh.triple_diff` rows to the triples at ``path``: a ``removed`` row that
    matches is deleted, an ``added`` row that matches none is inserted. Only the files of ``splits`` (the
    splits with changes) are scanned."""
    ctx.merge(
        path,
        diff,
        _same_row(splits),
        delete_when=F.col("s.op") == refresh.REMOVED,
        insert_when=F.col("s.op") == refresh.ADDED,
        insert_values={c: F.col(f"s.{c}") for c in refresh.KEY},
    )


def merge_all(ctx: JobContext, path: str, triples: DataFrame) -> None:
    """Make the triples at ``path`` the set ``triples``: rows it lacks inserted, rows not in it deleted
    (``whenNotMatchedBySource``), matching rows untouched. Used when the latest version is not the one this
    run read (a killed run wrote after it)."""
    ctx.merge(path, triples, _same_row(), insert_all=True, delete_missing=True)


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
        ctx.summary.outputs["changes"] = TableVersion(path, latest_version(spark, path), n)
        return False
    if n == 0 and earlier is None:
        return False
    description = f"refresh of triples version {before} to {after}"
    ctx.replace_where(rows.coalesce(1), path, f"version_before = {int(before)}", description, name="changes", rows=n)
    return True


def _same_rows(left: DataFrame, right: DataFrame) -> bool:
    """Whether two frames hold the same multiset of rows, in one action: each row counted +1 on the left
    and -1 on the right, no row's sum may differ from 0."""
    signed = left.withColumn("_side", F.lit(1)).unionByName(right.withColumn("_side", F.lit(-1)))
    columns = [c for c in signed.columns if c != "_side"]
    return signed.groupBy(*columns).agg(F.sum("_side").alias("_n")).where(F.col("_n") != 0).isEmpty()


class MergeWrites(ingest_steps.TableWrites):
    """The refresh's writes: MERGE instead of overwrite, the change table, retired keys."""

    def __init__(self, dataset: str):
        self.dataset = dataset
        self.retired = {"entities": 0, "relations": 0}
        self.changes_written = False

    def dictionary(self, ctx, name, table, path, same, rows, description):
        spark = ctx.spark
        read = ctx.summary.inputs[name]
        latest = latest_version(spark, path)
        if not (same and read.version == latest):
            enable_deletion_vectors(ctx, path)
            merge_dictionary(ctx, path, table, reconcile=read.version != latest)
        ctx.summary.outputs[name] = TableVersion(path, latest_version(spark, path), rows)

    def triples(self, ctx, triples, before, path, staging, description):
        spark = ctx.spark
        fingerprint = Observation("triples_fingerprint")
        triples = _stage(triples.observe(fingerprint, *kg_ingest.triples_fingerprint()), f"{staging}/encoded")
        same = fingerprint.get == before.agg(*kg_ingest.triples_fingerprint()).collect()[0].asDict()
        read = ctx.summary.inputs["triples"].version
        latest = latest_version(spark, path)
        diff = _stage(refresh.triple_diff(triples, before), f"{staging}/diff") if not same else None
        changes = {} if same else {r["split"]: r for r in refresh.changes_per_split(diff).collect()}
        if not same or read != latest:
            enable_deletion_vectors(ctx, path)
        if read != latest:
            merge_all(ctx, path, triples)
        elif not same:
            merge_changes(ctx, path, diff, sorted(changes))
        after = latest_version(spark, path)
        ctx.summary.outputs["triples"] = TableVersion(path, after, fingerprint.get["triples"])
        after_write("triples")
        n = sum(r["added"] + r["removed"] for r in changes.values())
        empty = spark.createDataFrame([], "h int, r int, t int, split string, op string")
        changes_path = catalog.path("changes", dataset=self.dataset)
        self.changes_written = write_changes(ctx, changes_path, diff if diff is not None else empty, n, read, after)
        after_write("changes")
        if diff is not None:
            self.retired = {kind: refresh.retired(diff, triples, kind).count() for kind in refresh.ROLES}
        return changes

    def written(self, ctx, name):
        if name != "triples":  # the triples and the changes are reported from triples()
            after_write(name)


# --- what depends on the triples -------------------------------------------------------------------------


def _subdirectories(spark, path: str) -> list[str]:
    if not path_exists(spark, path):
        return []
    hpath, fs = hadoop_path(spark, path)
    return sorted(s.getPath().getName() for s in fs.listStatus(hpath) if s.isDirectory())


def _decision(kind: str, name: str, action: str, reason: str, **extra) -> dict:
    return {"kind": kind, "name": name, "action": action, "reason": reason, **extra}


def _differing_splits(old: dict, new: dict, splits: list[str]) -> list[str]:
    return [s for s in splits if old.get(s) != new.get(s)]


def stats_decisions(ctx: JobContext, dataset: str, current: int) -> list[dict]:
    """Each statistics set of ``dataset`` and whether it is current: its four tables record one triples
    version whose triples of its splits equal those of version ``current``."""
    spark = ctx.spark
    triples_path = catalog.path("triples", dataset=dataset)
    now = refresh.split_fingerprints(read_table(spark, triples_path, current))
    out = []
    for name in _subdirectories(spark, table_path(dataset, "stats")):
        splits = sorted(name.split("+"))
        where = catalog.stats_dir(dataset, splits)

        def decide(action: str, reason: str, name=name, splits=splits) -> None:
            out.append(_decision("stats", name, action, reason, splits=splits))

        versions = {
            catalog.recorded_triples_version(table_description(spark, f"{where}/{t}"))
            if table_exists(spark, f"{where}/{t}")
            else None
            for t in catalog.STATS_TABLES
        }
        missing = [s for s in splits if s not in now]
        if missing:
            decide("stale", f"split(s) {', '.join(missing)} are no longer in the dataset")
            continue
        if len(versions) != 1 or None in versions:
            decide("recompute", "its tables do not all record one triples version (an unfinished run)")
            continue
        version = versions.pop()
        if version == current:
            decide("skip", f"computed from the current triples version {current}")
            continue
        try:
            then = refresh.split_fingerprints(read_table(spark, triples_path, version), splits)
        except Exception:  # noqa: BLE001 - the version is gone (vacuumed): recompute
            then = {}
        changed = _differing_splits(then, now, splits)
        if changed:
            decide("recompute", f"the triples of {', '.join(changed)} changed since version {version}")
        else:
            decide("skip", f"the triples of {'+'.join(splits)} are those of version {version}, their source")
    return out


def _variant_splits(ctx: JobContext, complete: str, now: dict) -> list[str]:
    """The splits a variant is built from, as :meth:`kgbrink.jobs.variant_options.Variant.splits` reads them."""
    if ctx.config.mining.splits:
        return sorted(ctx.config.mining.splits)
    found = re.match(r"splits (\S+) of ", table_description(ctx.spark, complete) or "")
    return sorted(found.group(1).split(",")) if found else sorted(now)


def rules_for_rebuild(variant_rules: str | None, built_in: str | None, dataset: str, dataset_rules: str | None) -> dict:
    """``build`` options that give a rebuilt variant its rules the way it got them. ``variant_rules``: the
    commit message of the variant's rules copy (``rules of SOURCE vN``); ``built_in``: the dataset the
    variant was built in (its ``complete`` table's message); ``dataset_rules``: the commit message of
    ``dataset``'s rules table. Rules from the dataset's own rules table (also when the dataset was copied
    elsewhere since) are mined again when ``mine`` wrote them (they depend on the triples) and reused when
    imported; another rules table is used as it is; unknown provenance means mining, ``build``'s default."""
    found = re.match(r"rules of (\S+) v\d+$", variant_rules or "")
    source = found.group(1).rstrip("/") if found else None
    own = {catalog.path("rules", dataset=d) for d in (dataset, built_in) if d}
    if source is not None and source not in own:
        return {"rules": source}
    if source is not None and dataset_rules is not None and not dataset_rules.startswith("kgbrink mine"):
        return {"reuse_rules": True}
    return {}


def variant_decisions(ctx: JobContext, dataset: str, current: int, wanted: list[str] | None) -> list[dict]:
    """Each variant of ``dataset`` (``wanted`` only, when given) and whether it is current: no unfinished
    rebuild, and its ``complete`` KG equal to the triples of its splits in version ``current``."""
    spark = ctx.spark
    found = [
        name
        for name in _subdirectories(spark, table_path(dataset, "variants"))
        if table_exists(spark, catalog.path("variant.complete", dataset=dataset, variant=name))
    ]
    unknown = sorted(set(wanted or []) - set(found))
    if unknown:
        raise RefreshError(
            f"no variant {', '.join(unknown)} in {dataset} (has: {', '.join(found) or 'none'})", ctx.summary
        )
    now = refresh.split_fingerprints(read_table(spark, catalog.path("triples", dataset=dataset), current))
    out = []
    for name in wanted or found:
        complete = catalog.path("variant.complete", dataset=dataset, variant=name)
        splits = _variant_splits(ctx, complete, now)
        marker = f"{complete.rsplit('/', 1)[0]}/{PENDING}"
        if path_exists(spark, marker):
            out.append(_decision("variant", name, "rebuild", "a rebuild an earlier refresh began did not finish"))
            continue
        built = refresh.split_fingerprints(read_table(spark, complete), splits)
        changed = _differing_splits(built, now, splits)
        if changed:
            out.append(_decision("variant", name, "rebuild", f"the triples of {', '.join(changed)} changed"))
        else:
            out.append(_decision("variant", name, "skip", f"its KG ({'+'.join(splits)}) is the current triples"))
    return out


def _score_key(record: dict) -> str:
    asked = {k: v for k, v in record.items() if k != "inputs"}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


def _input_path(dataset: str, name: str, record: dict) -> str:
    """Where a score run's input ``name`` is in ``dataset`` now: the dataset's tables by their catalogued
    place (so a dataset copied elsewhere still finds its own), any other table where the run read it."""
    if name in RECORDED:
        return catalog.path(name, dataset=dataset)
    if name in catalog.STATS_TABLES:
        return f"{catalog.stats_dir(dataset, record['splits'])}/{name}"
    return record["inputs"][name]["path"]


def _current_version(spark, name: str, path: str) -> int | None:
    if not table_exists(spark, path):
        return None
    return consistent_version(spark, path) if name in RECORDED else latest_version(spark, path)


def score_decisions(ctx: JobContext, dataset: str) -> list[dict]:
    """Each score run of ``dataset`` grouped by what it was asked (its recorded options) and whether the
    group is current: some run of it read the current versions of every table it read."""
    spark = ctx.spark
    groups: dict[str, list[tuple[str, dict]]] = {}
    for work in _subdirectories(spark, table_path(dataset, "scores")):
        results = table_path(dataset, f"scores/{work}/results")
        record = score_runs.parse(description(spark, results))
        if record is not None:
            groups.setdefault(_score_key(record), []).append((work, record))
    out = []
    for key, runs in sorted(groups.items()):
        stale = {}
        for work, record in runs:
            stale[work] = [
                name
                for name, table in record["inputs"].items()
                if _current_version(spark, name, _input_path(dataset, name, record)) != table["version"]
            ]
        current = [work for work, names_ in stale.items() if not names_]
        record = runs[0][1]
        what = f"{record['ranks']} ({record['format']}, splits {'+'.join(record['splits'])})"
        if current:
            out.append(_decision("score", key, "skip", f"run {current[0]} read the current tables", ranks=what))
        else:
            work, latest = runs[-1]
            reason = f"{', '.join(stale[work])} changed since run {work}"
            out.append(_decision("score", key, "rescore", reason, ranks=what, record=latest))
    return out


def _rebuild_variant(ctx: JobContext, opts: RefreshOptions, dataset: str, name: str, mined: bool) -> JobSummary:
    spark = ctx.spark
    root = catalog.path("variant.complete", dataset=dataset, variant=name).rsplit("/", 1)[0]
    marker = f"{root}/{PENDING}"
    hpath, fs = hadoop_path(spark, marker)
    fs.create(hpath, True).close()

    def message(path: str) -> str | None:
        return table_description(spark, path) if table_exists(spark, path) else None

    built_in = re.match(r"splits \S+ of (\S+)$", message(f"{root}/complete") or "")
    rules = rules_for_rebuild(
        message(f"{root}/rules"),
        built_in.group(1) if built_in else None,
        dataset,
        message(catalog.path("rules", dataset=dataset)),
    )
    if not rules and mined:  # mined once per refresh: the next variant uses the rules just mined
        rules = {"reuse_rules": True}
    out = f"{opts.out.rstrip('/')}/{name}" if opts.out else None
    built = ctx.run("build", dataset=dataset, variant=name, out=out, **rules)
    delete_path(spark, marker)
    return built


def _downstream(ctx: JobContext, opts: RefreshOptions, dataset: str, current: int) -> list[dict]:
    decisions = []
    with ctx.step("statistics"):
        for d in stats_decisions(ctx, dataset, current):
            decisions.append(d)
            if d["action"] == "recompute":
                done = ctx.run("stats", dataset=dataset, splits=d["splits"])
                d["outputs"] = {k: v.version for k, v in done.outputs.items()}
                after_write(f"stats:{d['name']}")
    with ctx.step("variants"):
        mined = False
        for d in variant_decisions(ctx, dataset, current, opts.variants):
            decisions.append(d)
            if d["action"] != "rebuild":
                continue
            if opts.no_rebuild:
                d["action"], d["reason"] = "stale", d["reason"] + " (not rebuilt: --no-rebuild)"
                continue
            built = _rebuild_variant(ctx, opts, dataset, d["name"], mined)
            mined = mined or "mine" in built.counts
            d["counts"] = {k: built.counts[k] for k in ("remove", "questions") if k in built.counts}
            after_write(f"variant:{d['name']}")
    with ctx.step("scores"):
        for d in score_decisions(ctx, dataset):
            decisions.append(d)
            record = d.pop("record", None)
            if d["action"] != "rescore":
                continue
            if opts.no_rebuild:
                d["action"], d["reason"] = "stale", d["reason"] + " (not scored again: --no-rebuild)"
                continue
            scored = ctx.run(
                "score",
                ranks=record["ranks"],
                dataset=dataset,
                spec=score_runs.spec_from_record(record),
                fmt=record["format"],
                id_kind=record["ids"],
                model=record["model"],
                run=record["run"],
                splits=record["splits"],
            )
            d["work_dir"] = scored.params["work_dir"]
            after_write(f"score:{d['name']}")
    return decisions


# --- the job -------------------------------------------------------------------------------------------


@job(
    "refresh",
    "a new dump into an existing dataset by Delta MERGE; statistics, variants and scores kept current",
    RefreshOptions,
    steps=10,
)
def run(ctx: JobContext, opts: RefreshOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    opts = replace(opts, dataset=config.require_dataset(opts.dataset))
    ds = opts.dataset
    summary = ctx.begin(**{k: v for k, v in asdict(opts).items() if v not in (None, {}, "", False)})
    ctx.progress.note(f"refresh {ds}")
    paths = {name: catalog.path(name, dataset=ds) for name in ("entities", "relations", "triples", "quarantine")}
    lease = WriterLease(spark, ds, config.ingest.lease_seconds).acquire()
    writes = MergeWrites(ds)
    try:
        legacy = lease.created and table_exists(spark, paths["triples"])  # a dataset from before the lease
        if lease.previous["completed_by"] is None and not legacy:
            raise RefreshError(f"{ds} has no complete ingest to refresh: run `kgbrink ingest` into it first", summary)
        ingest_steps.ingest_dump(ctx, opts, ds, paths, True, writes)
        with ctx.step("record"):
            lease.complete({name: summary.outputs[name].version for name in RECORDED})
    except BaseException as exc:
        lease.fail(exc)
        raise
    after_write("record")
    _refresh_counts(summary, writes)
    # the downstream steps hold the lease too: no other refresh changes the triples under them
    lease = WriterLease(spark, ds, config.ingest.lease_seconds).acquire()
    try:
        decisions = _downstream(ctx, opts, ds, summary.outputs["triples"].version)
    finally:
        lease.release()
    summary.extra["downstream"] = decisions
    acted = [d for d in decisions if d["action"] not in ("skip", "stale")]
    summary.counts.update(
        stats_recomputed=sum(d["action"] == "recompute" for d in decisions if d["kind"] == "stats"),
        variants_rebuilt=sum(d["action"] == "rebuild" for d in decisions if d["kind"] == "variant"),
        scores_rerun=sum(d["action"] == "rescore" for d in decisions if d["kind"] == "score"),
        stale=sum(d["action"] == "stale" for d in decisions),
    )
    changed = summary.counts["changed"] or bool(acted)
    summary.counts["changed"] = summary.extra["changed"] = changed
    summary.highlights["downstream"] = (
        "; ".join(f"{d['kind']} {d['name']}: {d['action']}" for d in decisions) or "no statistics, variants or scores"
    )
    return summary


def _refresh_counts(summary: JobSummary, writes: MergeWrites) -> None:
    """The refresh's own counts beside the ingest's: unchanged triples per split, retired keys, versions."""
    c = summary.counts
    added, removed, kept = c["triples_added_per_split"], c["triples_removed_per_split"], c["kept_per_split"]
    unchanged = {s: kept.get(s, 0) - added[s] for s in added}
    versions = {
        "before": {name: summary.inputs[name].version for name in RECORDED},
        "after": {name: summary.outputs[name].version for name in RECORDED},
    }
    triples_changed = bool(c["triples_added"] or c["triples_removed"])
    c.update(
        triples_changed=triples_changed,
        triples_unchanged=sum(unchanged.values()),
        triples_unchanged_per_split=unchanged,
        retired_entities=writes.retired["entities"],
        retired_relations=writes.retired["relations"],
        versions=versions,
    )
    if writes.changes_written:
        c["tables_written"] = [*c["tables_written"], "changes"]
        c["changed"] = True
    per_split = ", ".join(f"{s} +{added[s]:,} -{removed[s]:,}" for s in added if added[s] or removed[s])
    summary.highlights["refresh"] = (
        f"triples {per_split}; {c['new_entities']:,} new and {c['retired_entities']:,} retired entities"
        if triples_changed
        else "the triples are unchanged"
    )
