"""``kgbrink ingest``: a dump (Wikidata5m, PROBE, delimited, N-Triples) into a dataset's Delta tables.

Writes ``entities(id, key, label)``, ``relations(id, key, label)``, ``triples(h, r, t, split)``
(partitioned by split) and ``quarantine(source_file, line_number, line, reason, detail)``. Re-ingesting a
new dump into an existing dataset keeps every known key's id (scheduled refreshes rely on it) and
replaces ``triples`` with the new dump as a new Delta version. A table whose content would not change
gets no new version, and the summary reports the refresh against the last complete ingest: the triples
added and removed per split, the new keys, and a warning for each split the new dump no longer has.
The steps are :mod:`kgbrink.jobs.steps.ingest`, which ``kgbrink refresh`` runs too, merging the tables
instead of overwriting them.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from kgbrink.core import catalog
from kgbrink.core.jobs import JobContext, job
from kgbrink.core.tracking import JobSummary
from kgbrink.core.writer import RECORDED, WriterLease
from kgbrink.jobs.steps.ingest import IngestError as IngestError
from kgbrink.jobs.steps.ingest import ingest_dump
from kgbrink.jobs.steps.ingest_options import IngestOptions as IngestOptions


@job("ingest", "a KG dump into a dataset's Delta tables", IngestOptions, steps=6)
def run(ctx: JobContext, opts: IngestOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    given = opts.dataset
    opts = replace(opts, dataset=config.require_dataset(opts.dataset))
    ctx.begin(**{k: v for k, v in asdict(opts).items() if v not in (None, {}, "")})
    # the tables below are overwritten: say where, above all when the dataset is the configured default
    default = "" if given is not None else f" (no --dataset: the setting 'dataset' of {config.source})"
    ctx.progress.note(f"ingest into {opts.dataset}{default}")
    ds = opts.dataset
    paths = {name: catalog.path(name, dataset=ds) for name in ("entities", "relations", "triples", "quarantine")}
    lease = WriterLease(spark, ds, config.ingest.lease_seconds).acquire()
    # a writer table without a complete ingest: the tables there are a killed first run's, not a dataset
    extend = lease.created or lease.previous["completed_by"] is not None
    try:
        summary = ingest_dump(ctx, opts, ds, paths, extend)
    except BaseException as exc:
        lease.fail(exc)
        raise
    lease.complete({name: summary.outputs[name].version for name in RECORDED})
    return summary
