"""The steps of ``kgbrink ingest`` (parse, quarantine, dictionaries, encoding, writes), shared by the
``ingest`` and ``refresh`` jobs: :func:`ingest_dump` runs them, :class:`TableWrites` overwrites the tables
(``refresh`` merges instead, :mod:`kgbrink.jobs.refresh`). A module of no job: the job modules import it,
never each other.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core import quarantine as core_quarantine
from kgbrink.core.delta import (
    latest_version,
    table_exists,
    table_path,
)
from kgbrink.core.files import (
    IngestInputs,
    InputError,
    corrupt_input,
    delete_if_empty,
    delete_path,
    given_path,
    read_dictionary_lines,
    read_lines,
    reported_path,
    require_files,
    spill,
)
from kgbrink.core.frames import tasks_for
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import JobSummary, fail_past_bad_fraction
from kgbrink.core.writer import RECORDED
from kgbrink.jobs.ingest_options import IngestOptions, resolve_inputs, triple_format
from kgbrink.kg import ingest, ntriples

log = logging.getLogger(__name__)


class IngestError(RuntimeError):
    """The dump is unusable: too many bad lines, or ids that contradict the dataset.

    When raised with the job's summary (any argument), the CLI reports that summary (counts by reason, the
    quarantine table's version) with the failure.
    """

    def __init__(self, *args):
        self.summary = next((a for a in args if isinstance(a, JobSummary)), None)
        super().__init__(*(a for a in args if not isinstance(a, JobSummary)))


def _merged(seed: DataFrame, existing: DataFrame | None, what: str) -> DataFrame:
    try:
        return ingest.merge_dictionaries(seed, existing, what)
    except ingest.DictionaryConflict as exc:
        raise IngestError(str(exc)) from None


def _parsed_sources(spark: SparkSession, opts: IngestOptions, inputs: IngestInputs, vocab) -> DataFrame:
    """Parsed triple lines (N-Triples lines also carry ``label_key, label``)."""
    lines = read_lines(spark, inputs.splits)
    if opts.format == "ntriples":
        return ntriples.parse_ntriples(lines, opts.label_language)
    parsed = ingest.parse_delimited_triples(lines, triple_format(opts))
    return ingest.check_vocabulary(parsed, *vocab) if vocab is not None else parsed


def _parsed_aliases(spark: SparkSession, path: str | None, key_pattern: str, source: str) -> DataFrame | None:
    if not path:
        return None
    require_files(spark, [path])
    return ingest.parse_aliases(read_lines(spark, {source: [path]}), key_pattern)


def _with_codes(dictionary: DataFrame | None, codec: ingest.KeyCodec) -> DataFrame | None:
    """A ``key``-keyed dictionary with the ``code`` its keys travel as (None stays None)."""
    return dictionary.withColumn("code", codec.code(F.col("key"))) if dictionary is not None else None


# What later steps need of a parsed line. The text is parsed once into a Parquet staging area under the
# dataset (``_staging/<uuid>``, deleted at the end); every later step reads the staged columns, and the
# raw lines are re-read only when there are quarantined lines to write. Staging beats Spark's in-memory
# cache here: building the columnar cache costs more than writing and re-reading Parquet.
LINE_STATE = ["split", "source_file", "block_start", "row_id", "status", "reason"]


def ingest_dump(
    ctx: JobContext,
    opts: IngestOptions,
    ds: str,
    paths: dict[str, str],
    extend: bool,
    writes: TableWrites | None = None,
) -> JobSummary:
    """The ingest's steps into ``ds`` while its writer lease is held: parse, quarantine, dictionaries,
    triples, counts. ``extend``: the dataset has a complete ingest whose dictionaries are extended and whose
    triples are replaced. ``writes`` turns each computed table into a version (ingest's own
    :class:`TableWrites` by default; ``kgbrink refresh`` merges, :mod:`kgbrink.jobs.refresh`)."""
    spark = ctx.spark
    writes = writes or TableWrites()
    # the lease is held: staging folders left by killed runs belong to no live run
    delete_path(spark, table_path(ds, "_staging"))
    with ctx.step("resolve_inputs"):
        inputs = resolve_inputs(spark, opts)
        require_files(spark, inputs.all_files)
    # The dictionaries being extended and the triples being replaced, pinned to the last complete
    # ingest's versions: the refresh is reported against them (a killed run's later versions are not).
    previous: dict[str, DataFrame | None] = dict.fromkeys(RECORDED)
    for name in RECORDED:
        if extend and table_exists(spark, paths[name]):
            previous[name] = ctx.read(name, paths[name])
    vocab = ids_seed = None
    if inputs.entity_dict:
        # The release's dictionaries close the vocabulary; merged with the dataset's they give the ids.
        vocab = tuple(
            ingest.parse_dictionary(read_dictionary_lines(spark, p), p)
            for p in (inputs.entity_dict, inputs.relation_dict)
        )
        ids_seed = (
            _merged(vocab[0], previous["entities"], "entity"),
            _merged(vocab[1], previous["relations"], "relation"),
        )
    elif opts.format == "probe":
        raise InputError(
            "--format probe needs --input DIR with entities.dict and relations.dict (they fix ids and the vocabulary)"
        )
    fmt = triple_format(opts)
    parsed = _parsed_sources(spark, opts, inputs, vocab)
    aliases = {
        "entities": _parsed_aliases(spark, inputs.entity_aliases, fmt.entity_pattern, "entity_aliases"),
        "relations": _parsed_aliases(spark, inputs.relation_aliases, fmt.relation_pattern, "relation_aliases"),
    }
    staging = table_path(ds, f"_staging/{uuid.uuid4().hex}")

    def stage(frame: DataFrame, name: str) -> DataFrame:
        return spill(frame, f"{staging}/{name}")

    try:
        try:
            with ctx.step("parse_and_count_lines"):
                codecs = {"entities": fmt.entity_codec, "relations": fmt.relation_codec}
                label_columns = []
                if "label_key" in parsed.columns:
                    label_columns = [fmt.entity_codec.code(F.col("label_key")).alias("label_code"), "label"]
                triples_state = stage(
                    parsed.select(
                        *LINE_STATE,
                        *(
                            codecs[kind].code(F.col(f"{role}_key")).alias(f"{role}_code")
                            for role, kind in (("h", "entities"), ("r", "relations"), ("t", "entities"))
                        ),
                        *label_columns,
                    ),
                    "triples",
                )
                alias_state = {
                    k: stage(a.select(*LINE_STATE, codecs[k].code(F.col("key")).alias("code"), "label"), k)
                    for k, a in aliases.items()
                    if a is not None
                }
                nt_labels = None
                if label_columns:
                    nt_labels = triples_state.filter(F.col("label_code").isNotNull()).select(
                        F.col("label_code").alias("code"), "label", F.lit(core_quarantine.OK).alias("status")
                    )
                counts = [
                    row
                    for frame in [triples_state, *alias_state.values()]
                    for row in core_quarantine.line_counts(frame).collect()
                ]
        except Py4JJavaError as exc:
            aliases_given = [p for p in (inputs.entity_aliases, inputs.relation_aliases) if p]
            corrupt = corrupt_input(exc, [*inputs.all_files, *aliases_given])
            if corrupt is None:
                raise
            raise corrupt from exc  # the log file keeps the JVM trace
        state = _Parsed(
            inputs, paths, previous, ids_seed, parsed, aliases, nt_labels, triples_state, alias_state, counts, staging
        )
        return _write_dataset(ctx, opts, fmt, state, writes)
    finally:
        delete_path(spark, staging)
        delete_if_empty(spark, table_path(ds, "_staging"))


@dataclass
class _Parsed:
    """What the parse step hands to the writes: inputs, table paths, the pinned dictionaries, parsed frames."""

    inputs: IngestInputs
    paths: dict[str, str]
    previous: dict[str, DataFrame | None]
    ids_seed: tuple | None
    parsed: DataFrame
    aliases: dict
    nt_labels: DataFrame | None
    triples_state: DataFrame
    alias_state: dict
    counts: list
    staging: str


def _keep_or_write(ctx: JobContext, name: str, frame: DataFrame, path: str, same: bool, rows: int, description: str):
    """Write ``frame`` as a new version of the table ``name`` unless ``same`` (it holds exactly the rows of
    the version this run read) and that version is still the latest: then no commit is made and the
    output is that version. A version read that is not the latest (a killed run wrote after it) is
    written again, so the latest version is the consistent one again."""
    read = ctx.summary.inputs[name]
    if same and read.version == latest_version(ctx.spark, path):
        ctx.keep(name, path, rows, read.version)
    else:
        ctx.write(name, frame, path, description=description)


class TableWrites:
    """How the ingest's steps turn the tables they computed into Delta versions: ``kgbrink ingest``
    overwrites a table as one new version unless it would not change (:func:`_keep_or_write`).
    :meth:`written` is called once each table's step is done (``kgbrink refresh`` uses it to stop a run
    between two writes in its tests)."""

    def dictionary(
        self, ctx: JobContext, name: str, table: DataFrame, path: str, same: bool, rows: int, description: str
    ) -> None:
        """The staged dictionary ``table`` (``id, key, label``: the read version's keys and the new ones)."""
        _keep_or_write(ctx, name, table, path, same, rows, description)

    def triples(
        self, ctx: JobContext, triples: DataFrame, before: DataFrame, path: str, staging: str, description: str
    ) -> dict:
        """The encoded triples of a dump replacing ``before`` (the read version); returns the changes per
        split (``split -> row with added, removed``; empty when the set is the same)."""
        fingerprint = Observation("triples_fingerprint")
        triples = spill(triples.observe(fingerprint, *ingest.triples_fingerprint()), f"{staging}/encoded")
        same = fingerprint.get == before.agg(*ingest.triples_fingerprint()).collect()[0].asDict()
        changes = {} if same else {r["split"]: r for r in ingest.triple_changes(triples, before).collect()}
        partitions = int(ctx.spark.conf.get("spark.sql.shuffle.partitions"))
        rows = fingerprint.get["triples"]
        _keep_or_write(ctx, "triples", triples.coalesce(partitions), path, same, rows, description)
        return changes

    def written(self, ctx: JobContext, name: str) -> None:
        """``name``'s step is done (its version is in ``ctx.summary.outputs``)."""


def _write_dataset(
    ctx: JobContext, opts: IngestOptions, fmt: ingest.TripleFormat, state: _Parsed, writes: TableWrites
) -> JobSummary:
    spark, config, summary = ctx.spark, ctx.config, ctx.summary
    inputs, paths, previous, ids_seed = state.inputs, state.paths, state.previous, state.ids_seed
    parsed, aliases, nt_labels, counts = state.parsed, state.aliases, state.nt_labels, state.counts
    triples_state, alias_state = state.triples_state, state.alias_state
    seen_files = {reported_path(row["source_file"]) for row in counts}
    unread = [p for p in inputs.all_files if given_path(p) not in seen_files]
    if unread:
        raise InputError(f"input file has no lines: {', '.join(unread)}")
    triple_splits = list(inputs.splits)
    tally = ingest.line_tally([r for r in counts if r["split"] in triple_splits])
    alias_tally = ingest.line_tally([r for r in counts if r["split"] not in triple_splits])
    total_lines = sum(tally["lines"].values())
    bad_lines = sum(tally["quarantined"].values())
    all_lines = total_lines + sum(alias_tally["lines"].values())
    all_bad = bad_lines + sum(alias_tally["quarantined"].values())

    with ctx.step("write_quarantine"):
        quarantine = spark.createDataFrame([], catalog.table("quarantine").schema)
        if all_bad:
            offsets = core_quarantine.block_offsets(
                spark.createDataFrame(counts, schema=core_quarantine.line_counts(triples_state).schema)
            )
            for frame in [parsed, *(a for a in aliases.values() if a is not None)]:
                quarantine = quarantine.unionByName(core_quarantine.quarantine_rows(frame, offsets))
        quarantine = quarantine.coalesce(1)
        before = ctx.read("quarantine", paths["quarantine"]) if table_exists(spark, paths["quarantine"]) else None
        if before is None or before.count() != all_bad:
            ctx.write("quarantine", quarantine, paths["quarantine"], description="ingest quarantine")
        else:
            quarantine = spill(quarantine, f"{state.staging}/quarantine_table") if all_bad else quarantine
            same = not all_bad or quarantine.subtract(before).isEmpty()
            _keep_or_write(ctx, "quarantine", quarantine, paths["quarantine"], same, all_bad, "ingest quarantine")
        if summary.outputs["quarantine"].rows not in (None, all_bad):
            raise IngestError(
                f"internal: {all_bad} lines were classified as malformed but {summary.outputs['quarantine'].rows} reached the quarantine table"
            )
    writes.written(ctx, "quarantine")
    fraction = all_bad / all_lines if all_lines else 0.0
    max_fraction = float(config.ingest.max_bad_fraction)
    summary.counts.update(
        lines=total_lines,
        lines_per_split={s: tally["lines"][s] for s in triple_splits},
        quarantined=bad_lines,
        quarantined_by_reason=dict(tally["quarantined"]),
        skipped=sum(tally["skipped"].values()),
        skipped_by_kind=dict(tally["skipped"]),
        alias_lines=dict(alias_tally["lines"]),
        alias_quarantined_by_reason=dict(alias_tally["quarantined"]),
        bad_fraction=fraction,
    )
    fail_past_bad_fraction(
        summary,
        dict(tally["quarantined"] + alias_tally["quarantined"]),
        all_lines,
        max_fraction,
        "ingest.max_bad_fraction",
        "input lines",
        f"nothing was written but the quarantine table {paths['quarantine']}",
        verb="({share}) are malformed",
        error=IngestError,
    )

    good = triples_state.filter(F.col("status") == core_quarantine.OK)
    broadcast = bool(config.ingest.broadcast_dictionaries)
    previous_rows = {name: previous[name].count() if previous[name] is not None else None for name in previous}
    shuffle_partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    # tasks for the two de-duplications of nearly distinct rows: the entity codes and the encoded triples
    partitions = tasks_for(sum(tally["ok"].values()), ingest.TRIPLES_PER_DEDUPLICATION_TASK, shuffle_partitions)
    with ctx.step("dictionaries"):
        dictionaries = {}
        duplicate_alias_lines, unused_alias_lines = {}, {}
        # entity codes are nearly distinct (de-duplicated in small tasks); relation codes are few
        for name, roles, seed, codec, dedup_tasks in (
            ("entities", ("h", "t"), ids_seed[0] if ids_seed else None, fmt.entity_codec, partitions),
            ("relations", ("r",), ids_seed[1] if ids_seed else None, fmt.relation_codec, None),
        ):
            codes = good.select(F.col(f"{roles[0]}_code").alias("code"))
            for role in roles[1:]:
                codes = codes.unionByName(good.select(F.col(f"{role}_code").alias("code")))
            ids = ingest.assign_ids(
                codes, _with_codes(seed if seed is not None else previous[name], codec), dedup_tasks
            )
            label_lines = nt_labels if (name == "entities" and nt_labels is not None) else alias_state.get(name)
            labels = None
            if label_lines is not None:
                labels = ingest.alias_labels(label_lines, "code").persist(StorageLevel.MEMORY_AND_DISK)
                given = labels.agg(F.count(F.lit(1)).alias("keys"), F.sum("lines").alias("lines")).collect()[0]
            # the label lines of keys that get an id, and the keys, counted while the table is written
            used = Observation(f"{name}_label_lines")
            table = ingest.with_labels(ids, codec, labels, _with_codes(previous[name], codec))
            observed = [F.sum("label_lines").alias("lines"), F.count(F.lit(1)).alias("rows")]
            if previous[name] is None:
                # written, then read back to encode the triples: a checkpoint instead holds the table in
                # memory, +4.5 GB of driver at 20M in local mode for no gain (benchmarks/journal.md, 11-28)
                written = table.observe(used, *observed).drop("label_lines")
                ctx.write(name, written, paths[name], description=f"ingest {opts.format}")
                table = ctx.written(name)
            else:
                table = table.observe(used, *observed).drop("label_lines")
                table = spill(table, f"{state.staging}/{name}_table")
                rows = used.get["rows"]
                # known keys keep their ids and labels unless the dump gives labels: then only a diff tells
                same = rows == previous_rows[name] and (labels is None or table.subtract(previous[name]).isEmpty())
                writes.dictionary(ctx, name, table, paths[name], same, rows, f"ingest {opts.format}")
            if labels is not None:
                labels.unpersist()
                # alias lines that label no key: repeats of a labelled key, and the lines of keys without an id (in no triple)
                duplicate_alias_lines[name] = (given["lines"] or 0) - given["keys"]
                unused_alias_lines[name] = (given["lines"] or 0) - (used.get["lines"] or 0)
            # the staged or written table holds every code of the dump (a merged table may hold more)
            dictionaries[name] = table.select("id", codec.code(F.col("key")).alias("code"))
            writes.written(ctx, name)
        new_keys = {name: summary.outputs[name].rows - (previous_rows[name] or 0) for name in ("entities", "relations")}

    with ctx.step("encode_and_write_triples"):
        sizes = (summary.outputs["entities"].rows, summary.outputs["relations"].rows)
        triples = ingest.encode_triples(
            good, dictionaries["entities"], dictionaries["relations"], broadcast, triple_splits, sizes, partitions
        )
        before, changes, written = previous["triples"], None, None
        if before is None:
            # The small de-duplication tasks' output is written by as many tasks as any other shuffle makes.
            ctx.write("triples", triples.coalesce(shuffle_partitions), paths["triples"], f"ingest {opts.format}")
        else:
            # a refresh: staged, compared by fingerprint with the triples it replaces, diffed when they differ
            changes = writes.triples(ctx, triples, before, paths["triples"], state.staging, f"ingest {opts.format}")
        writes.written(ctx, "triples")

    with ctx.step("verify_counts"):
        written = written if written is not None else ctx.written("triples")
        kept = {r["split"]: r["n"] for r in written.groupBy("split").agg(F.count(F.lit(1)).alias("n")).collect()}
        overlaps = {
            f"{r['split_a']}/{r['split_b']}": r["shared_triples"] for r in ingest.split_overlaps(written).collect()
        }
    duplicates = {split: tally["ok"][split] - kept.get(split, 0) for split in triple_splits}
    # the refresh against the last complete ingest (a first ingest adds every triple)
    missing = sorted(set(changes or {}) - set(triple_splits))
    if changes is None:
        added, removed = {s: kept.get(s, 0) for s in triple_splits}, dict.fromkeys(triple_splits, 0)
    else:
        added = {s: changes[s]["added"] if s in changes else 0 for s in [*triple_splits, *missing]}
        removed = {s: changes[s]["removed"] if s in changes else 0 for s in [*triple_splits, *missing]}
    for split in missing:
        warning = (
            f"split '{split}' is in the dataset but not in this dump: its {removed[split]} triples are removed "
            f"(triples version {summary.inputs['triples'].version} keeps them)"
        )
        log.warning(warning)
        summary.extra.setdefault("warnings", []).append(warning)
    tables_written = [
        name
        for name in ("quarantine", "entities", "relations", "triples")
        if name not in summary.inputs or summary.outputs[name].version != summary.inputs[name].version
    ]
    summary.highlights["tables written"] = ", ".join(tables_written) or "none (the dataset already holds this dump)"
    summary.counts.update(
        kept=sum(kept.values()),
        kept_per_split=kept,
        duplicates=sum(duplicates.values()),
        duplicates_per_split=duplicates,
        duplicate_alias_lines=duplicate_alias_lines,
        unused_alias_lines=unused_alias_lines,
        split_overlaps=overlaps,
        entities=summary.outputs["entities"].rows,
        relations=summary.outputs["relations"].rows,
        new_entities=new_keys["entities"],
        new_relations=new_keys["relations"],
        triples_added=sum(added.values()),
        triples_added_per_split=added,
        triples_removed=sum(removed.values()),
        triples_removed_per_split=removed,
        missing_splits=missing,
        changed=bool(tables_written),
        tables_written=tables_written,
    )
    return summary
