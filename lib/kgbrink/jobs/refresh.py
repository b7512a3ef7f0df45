"""``kgbrink refresh``: a new dump into an existing dataset by Delta MERGE, then what depends on it.

The dump is parsed, checked and encoded exactly as by ``kgbrink ingest`` (:class:`kgbrink.jobs.steps.ingest.DumpIngest`,
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

import re
from dataclasses import asdict, dataclass, replace

from kgbrink.core import catalog
from kgbrink.core.delta import table_description, table_exists
from kgbrink.core.files import delete_path, hadoop_path
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobSummary
from kgbrink.core.writer import RECORDED, WriterLease
from kgbrink.jobs.steps.ingest import ingest_dump
from kgbrink.jobs.steps.ingest_options import IngestOptions
from kgbrink.jobs.steps.refresh_decisions import (
    PENDING,
    RefreshError,
    rules_for_rebuild,
    score_decisions,
    stats_decisions,
    variant_decisions,
)
from kgbrink.jobs.steps.refresh_merge import MergeWrites
from kgbrink.kg.ingest_accounting import SplitChanges
from kgbrink.probe import runs as score_runs


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
    writes = MergeWrites(ds, lambda name: after_write(name))  # looked up per call: tests replace it
    try:
        legacy = lease.created and table_exists(spark, paths["triples"])  # a dataset from before the lease
        if lease.previous["completed_by"] is None and not legacy:
            raise RefreshError(f"{ds} has no complete ingest to refresh: run `kgbrink ingest` into it first", summary)
        ingest_dump(ctx, opts, ds, paths, True, writes)
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
    unchanged = SplitChanges(added, removed, c["missing_splits"]).unchanged(kept)
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
