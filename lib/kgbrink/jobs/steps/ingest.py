"""The steps of one ingest of a dump into a dataset, shared by ``kgbrink ingest`` and ``kgbrink refresh``:
:class:`DumpIngest` runs them in order, one method per step, each returning what the next needs;
:class:`Writes` is how a computed table becomes a Delta version (:class:`OverwriteWrites` here, ``refresh``'s
:class:`kgbrink.jobs.steps.refresh_merge.MergeWrites`). The accounting is :mod:`kgbrink.kg.ingest_accounting`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Protocol

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, Row, SparkSession
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core import quarantine as core_quarantine
from kgbrink.core.delta import latest_version, table_exists, table_path
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
from kgbrink.jobs.steps.ingest_options import IngestOptions, resolve_inputs, triple_format
from kgbrink.kg import ingest, ntriples
from kgbrink.kg.ingest_accounting import LineTally, SplitChanges, tables_written

log = logging.getLogger(__name__)

# What later steps need of a parsed line. The text is parsed once into a Parquet staging area under the
# dataset (``_staging/<uuid>``, deleted at the end); every later step reads the staged columns, and the
# raw lines are re-read only when there are quarantined lines to write. Staging beats Spark's in-memory
# cache here: building the columnar cache costs more than writing and re-reading Parquet.
LINE_STATE = ["split", "source_file", "block_start", "row_id", "status", "reason"]
DICTIONARIES = ("entities", "relations")
TABLES = ("quarantine", "entities", "relations", "triples")


class IngestError(RuntimeError):
    """The dump is unusable: too many bad lines, or ids that contradict the dataset.

    When raised with the job's summary (any argument), the CLI reports that summary (counts by reason, the
    quarantine table's version) with the failure.
    """

    def __init__(self, *args):
        self.summary = next((a for a in args if isinstance(a, JobSummary)), None)
        super().__init__(*(a for a in args if not isinstance(a, JobSummary)))


class Writes(Protocol):
    """How the ingest's steps turn the tables they computed into Delta versions."""

    def dictionary(
        self, ctx: JobContext, name: str, table: DataFrame, path: str, same: bool, rows: int, description: str
    ) -> None:
        """The staged dictionary ``table`` (``id, key, label``: the read version's keys and the new ones);
        ``same``: it holds exactly the read version's ``rows`` rows."""

    def triples(
        self, ctx: JobContext, triples: DataFrame, before: DataFrame, path: str, staging: str, description: str
    ) -> dict:
        """The encoded triples of a dump replacing ``before`` (the read version); returns the changes per
        split (``split -> row with added, removed``; empty when the set is the same)."""

    def written(self, ctx: JobContext, name: str) -> None:
        """``name``'s step is done (its version is in ``ctx.summary.outputs``)."""


def keep_or_write(ctx: JobContext, name: str, frame: DataFrame, path: str, same: bool, rows: int, description: str):
    """Write ``frame`` as a new version of the table ``name`` unless ``same`` (it holds exactly the rows of
    the version this run read) and that version is still the latest: then no commit is made and the
    output is that version. A version read that is not the latest (a killed run wrote after it) is
    written again, so the latest version is the consistent one again."""
    read = ctx.summary.inputs[name]
    if same and read.version == latest_version(ctx.spark, path):
        ctx.keep(name, path, rows, read.version)
    else:
        ctx.write(name, frame, path, description=description)


class OverwriteWrites:
    """``kgbrink ingest``'s :class:`Writes`: a table is overwritten as one new version unless it would not
    change (:func:`keep_or_write`)."""

    def dictionary(self, ctx, name, table, path, same, rows, description) -> None:
        keep_or_write(ctx, name, table, path, same, rows, description)

    def triples(self, ctx, triples, before, path, staging, description) -> dict:
        fingerprint = Observation("triples_fingerprint")
        triples = spill(triples.observe(fingerprint, *ingest.triples_fingerprint()), f"{staging}/encoded")
        same = fingerprint.get == before.agg(*ingest.triples_fingerprint()).collect()[0].asDict()
        changes = {} if same else {r["split"]: r for r in ingest.triple_changes(triples, before).collect()}
        partitions = int(ctx.spark.conf.get("spark.sql.shuffle.partitions"))
        rows = fingerprint.get["triples"]
        keep_or_write(ctx, "triples", triples.coalesce(partitions), path, same, rows, description)
        return changes

    def written(self, ctx, name) -> None:
        pass


@dataclass(frozen=True)
class Pinned:
    """The dictionaries being extended and the triples being replaced, read at the last complete ingest's
    versions (None: no such table, or a first ingest); the refresh is reported against them."""

    tables: dict[str, DataFrame | None]

    def rows(self) -> dict[str, int | None]:
        return {name: frame.count() if frame is not None else None for name, frame in self.tables.items()}


@dataclass(frozen=True)
class Vocabulary:
    """A release's dictionaries (``--format probe``): ``closed`` the ``(entities, relations)`` that close the
    vocabulary, ``ids`` the same merged with the dataset's, which give the ids; None for the other formats."""

    closed: tuple[DataFrame, DataFrame] | None = None
    ids: tuple[DataFrame, DataFrame] | None = None


@dataclass(frozen=True)
class ParsedLines:
    """The parse step's result: the parsed frames (re-read only for the quarantine's lines), their staged
    line state with codes (``triples``; alias files in ``aliases_staged``), N-Triples' label lines, and the
    collected ``line_counts`` rows with their :class:`LineTally`."""

    lines: DataFrame
    aliases: dict[str, DataFrame | None]
    triples: DataFrame
    aliases_staged: dict[str, DataFrame]
    labels: DataFrame | None
    counts: list[Row]
    tally: LineTally


@dataclass(frozen=True)
class Dictionaries:
    """The dictionaries step's result: per dictionary ``id, code`` of every code of the dump, the new keys,
    and the alias lines that label no key (repeats, and lines of keys in no triple)."""

    codes: dict[str, DataFrame]
    new_keys: dict[str, int]
    duplicate_alias_lines: dict[str, int]
    unused_alias_lines: dict[str, int]


@dataclass(frozen=True)
class TripleCounts:
    """The verify step's result: triples kept per split, the triples each pair of splits shares, and the
    changes against the last complete ingest."""

    kept: dict[str, int]
    overlaps: dict[str, int]
    changes: SplitChanges


def ingest_dump(
    ctx: JobContext, opts: IngestOptions, ds: str, paths: dict[str, str], extend: bool, writes: Writes | None = None
) -> JobSummary:
    """The ingest's steps into ``ds`` while its writer lease is held (:class:`DumpIngest`)."""
    return DumpIngest(ctx, opts, ds, paths, extend, writes or OverwriteWrites()).run()


class DumpIngest:
    """One ingest of the dump ``opts`` names into the dataset ``dataset`` (its tables at ``paths``): parse,
    quarantine, dictionaries, triples, counts. ``extend``: the dataset has a complete ingest whose
    dictionaries are extended and whose triples are replaced; ``writes`` turns each computed table into a
    version. The writer lease is held by the caller."""

    def __init__(
        self, ctx: JobContext, opts: IngestOptions, dataset: str, paths: dict[str, str], extend: bool, writes: Writes
    ):
        self.ctx, self.spark, self.summary = ctx, ctx.spark, ctx.summary
        self.opts, self.dataset, self.paths, self.extend, self.writes = opts, dataset, paths, extend, writes
        self.format = triple_format(opts)
        self.codecs = {"entities": self.format.entity_codec, "relations": self.format.relation_codec}
        self.staging = table_path(dataset, f"_staging/{uuid.uuid4().hex}")
        self.description = f"ingest {opts.format}"

    def run(self) -> JobSummary:
        """Every step in order; the staging folder is removed whatever happens."""
        # the lease is held: staging folders left by killed runs belong to no live run
        delete_path(self.spark, table_path(self.dataset, "_staging"))
        inputs = self.resolve_inputs()
        pinned = self.pinned_tables()
        vocabulary = self.vocabulary(inputs, pinned)
        try:
            parsed = self.parse_and_count_lines(inputs, vocabulary)
            self.write_quarantine(parsed)
            self.check_bad_lines(parsed.tally)
            dictionaries = self.dictionaries(parsed, pinned, vocabulary)
            changes = self.encode_and_write_triples(parsed, dictionaries, pinned)
            self.summarise(parsed.tally, dictionaries, self.verify_counts(parsed.tally, changes))
            return self.summary
        finally:
            delete_path(self.spark, self.staging)
            delete_if_empty(self.spark, table_path(self.dataset, "_staging"))

    def resolve_inputs(self) -> IngestInputs:
        """The dump's files per split (and its dictionaries and alias files), each required to exist."""
        with self.ctx.step("resolve_inputs"):
            inputs = resolve_inputs(self.spark, self.opts)
            require_files(self.spark, inputs.all_files)
        return inputs

    def pinned_tables(self) -> Pinned:
        """The last complete ingest's dictionaries and triples (a killed run's later versions are not)."""
        tables: dict[str, DataFrame | None] = dict.fromkeys(RECORDED)
        for name in RECORDED:
            if self.extend and table_exists(self.spark, self.paths[name]):
                tables[name] = self.ctx.read(name, self.paths[name])
        return Pinned(tables)

    def vocabulary(self, inputs: IngestInputs, pinned: Pinned) -> Vocabulary:
        """The release's dictionaries, when the dump has them, merged with the dataset's."""
        if not inputs.entity_dict:
            if self.opts.format == "probe":
                raise InputError(
                    "--format probe needs --input DIR with entities.dict and relations.dict (they fix ids and the vocabulary)"
                )
            return Vocabulary()
        closed = tuple(
            ingest.parse_dictionary(read_dictionary_lines(self.spark, p), p)
            for p in (inputs.entity_dict, inputs.relation_dict)
        )
        ids = (
            _merged(closed[0], pinned.tables["entities"], "entity"),
            _merged(closed[1], pinned.tables["relations"], "relation"),
        )
        return Vocabulary(closed, ids)

    def parse_and_count_lines(self, inputs: IngestInputs, vocabulary: Vocabulary) -> ParsedLines:
        """Every line parsed once and staged with its codes; the lines counted per file, block and status."""
        lines = _parsed_sources(self.spark, self.opts, inputs, vocabulary.closed)
        fmt = self.format
        aliases = {
            "entities": _parsed_aliases(self.spark, inputs.entity_aliases, fmt.entity_pattern, "entity_aliases"),
            "relations": _parsed_aliases(self.spark, inputs.relation_aliases, fmt.relation_pattern, "relation_aliases"),
        }
        try:
            with self.ctx.step("parse_and_count_lines"):
                label_columns = []
                if "label_key" in lines.columns:
                    label_columns = [fmt.entity_codec.code(F.col("label_key")).alias("label_code"), "label"]
                codes = (
                    self.codecs[kind].code(F.col(f"{role}_key")).alias(f"{role}_code")
                    for role, kind in (("h", "entities"), ("r", "relations"), ("t", "entities"))
                )
                triples = self._stage(lines.select(*LINE_STATE, *codes, *label_columns), "triples")
                staged = {
                    k: self._stage(a.select(*LINE_STATE, self.codecs[k].code(F.col("key")).alias("code"), "label"), k)
                    for k, a in aliases.items()
                    if a is not None
                }
                labels = None
                if label_columns:
                    labels = triples.filter(F.col("label_code").isNotNull()).select(
                        F.col("label_code").alias("code"), "label", F.lit(core_quarantine.OK).alias("status")
                    )
                counts = [
                    row for frame in [triples, *staged.values()] for row in core_quarantine.line_counts(frame).collect()
                ]
        except Py4JJavaError as exc:
            aliases_given = [p for p in (inputs.entity_aliases, inputs.relation_aliases) if p]
            corrupt = corrupt_input(exc, [*inputs.all_files, *aliases_given])
            if corrupt is None:
                raise
            raise corrupt from exc  # the log file keeps the JVM trace
        seen_files = {reported_path(row["source_file"]) for row in counts}
        unread = [p for p in inputs.all_files if given_path(p) not in seen_files]
        if unread:
            raise InputError(f"input file has no lines: {', '.join(unread)}")
        tally = LineTally.of(counts, inputs.splits)
        return ParsedLines(lines, aliases, triples, staged, labels, counts, tally)

    def write_quarantine(self, parsed: ParsedLines) -> None:
        """The quarantined lines with their line numbers and reasons, a new version only when they differ."""
        ctx, spark, path, all_bad = self.ctx, self.spark, self.paths["quarantine"], parsed.tally.all_bad
        with ctx.step("write_quarantine"):
            quarantine = spark.createDataFrame([], catalog.table("quarantine").schema)
            if all_bad:
                offsets = core_quarantine.block_offsets(
                    spark.createDataFrame(parsed.counts, schema=core_quarantine.line_counts(parsed.triples).schema)
                )
                for frame in [parsed.lines, *(a for a in parsed.aliases.values() if a is not None)]:
                    quarantine = quarantine.unionByName(core_quarantine.quarantine_rows(frame, offsets))
            quarantine = quarantine.coalesce(1)
            before = ctx.read("quarantine", path) if table_exists(spark, path) else None
            if before is None or before.count() != all_bad:
                ctx.write("quarantine", quarantine, path, description="ingest quarantine")
            else:
                quarantine = self._stage(quarantine, "quarantine_table") if all_bad else quarantine
                same = not all_bad or quarantine.subtract(before).isEmpty()
                keep_or_write(ctx, "quarantine", quarantine, path, same, all_bad, "ingest quarantine")
            if self.summary.outputs["quarantine"].rows not in (None, all_bad):
                raise IngestError(
                    f"internal: {all_bad} lines were classified as malformed but {self.summary.outputs['quarantine'].rows} reached the quarantine table"
                )
        self.writes.written(ctx, "quarantine")

    def check_bad_lines(self, tally: LineTally) -> None:
        """The line counts into the summary; fail past ``ingest.max_bad_fraction`` of malformed lines."""
        self.summary.counts.update(tally.counts())
        fail_past_bad_fraction(
            self.summary,
            tally.bad_by_reason,
            tally.all_lines,
            float(self.ctx.config.ingest.max_bad_fraction),
            "ingest.max_bad_fraction",
            "input lines",
            f"nothing was written but the quarantine table {self.paths['quarantine']}",
            verb="({share}) are malformed",
            error=IngestError,
        )

    def dictionaries(self, parsed: ParsedLines, pinned: Pinned, vocabulary: Vocabulary) -> Dictionaries:
        """Entities and relations: known keys keep their ids, new keys are numbered after them (entity codes
        are nearly distinct, de-duplicated in small tasks; relation codes are few)."""
        previous_rows = pinned.rows()
        with self.ctx.step("dictionaries"):
            codes, duplicate, unused = {}, {}, {}
            for index, (name, roles) in enumerate((("entities", ("h", "t")), ("relations", ("r",)))):
                seed = vocabulary.ids[index] if vocabulary.ids else None
                tasks = self._dedup_tasks(parsed.tally) if name == "entities" else None
                label_lines = parsed.labels if name == "entities" and parsed.labels is not None else None
                label_lines = label_lines if label_lines is not None else parsed.aliases_staged.get(name)
                table, lines = self._dictionary(name, roles, parsed, pinned, seed, tasks, label_lines, previous_rows)
                if lines is not None:
                    duplicate[name], unused[name] = lines
                # the staged or written table holds every code of the dump (a merged table may hold more)
                codes[name] = table.select("id", self.codecs[name].code(F.col("key")).alias("code"))
                self.writes.written(self.ctx, name)
            outputs = self.summary.outputs
            new_keys = {name: outputs[name].rows - (previous_rows[name] or 0) for name in DICTIONARIES}
        return Dictionaries(codes, new_keys, duplicate, unused)

    def _dictionary(self, name, roles, parsed, pinned, seed, tasks, label_lines, previous_rows):
        """One dictionary written (first ingest) or staged and handed to the writes; returns the table and,
        when the dump labels keys, (alias lines repeating a labelled key, alias lines labelling no key)."""
        good = parsed.triples.filter(F.col("status") == core_quarantine.OK)
        codec, previous = self.codecs[name], pinned.tables[name]
        codes = good.select(F.col(f"{roles[0]}_code").alias("code"))
        for role in roles[1:]:
            codes = codes.unionByName(good.select(F.col(f"{role}_code").alias("code")))
        ids = ingest.assign_ids(codes, _with_codes(seed if seed is not None else previous, codec), tasks)
        labels = None
        if label_lines is not None:
            labels = self.ctx.persist(ingest.alias_labels(label_lines, "code"), StorageLevel.MEMORY_AND_DISK)
            given = labels.agg(F.count(F.lit(1)).alias("keys"), F.sum("lines").alias("lines")).collect()[0]
        # the label lines of keys that get an id, and the keys, counted while the table is written
        used = Observation(f"{name}_label_lines")
        table = ingest.with_labels(ids, codec, labels, _with_codes(previous, codec))
        table = table.observe(used, F.sum("label_lines").alias("lines"), F.count(F.lit(1)).alias("rows"))
        table = table.drop("label_lines")
        if previous is None:
            # written, then read back to encode the triples: a checkpoint instead holds the table in
            # memory, +4.5 GB of driver at 20M in local mode for no gain (benchmarks/journal.md, 11-28)
            self.ctx.write(name, table, self.paths[name], description=self.description)
            table = self.ctx.written(name)
        else:
            table = self._stage(table, f"{name}_table")
            rows = used.get["rows"]
            # known keys keep their ids and labels unless the dump gives labels: then only a diff tells
            same = rows == previous_rows[name] and (labels is None or table.subtract(previous).isEmpty())
            self.writes.dictionary(self.ctx, name, table, self.paths[name], same, rows, self.description)
        if labels is None:
            return table, None
        self.ctx.unpersist(labels)
        # alias lines that label no key: repeats of a labelled key, and the lines of keys without an id (in no triple)
        return table, ((given["lines"] or 0) - given["keys"], (given["lines"] or 0) - (used.get["lines"] or 0))

    def encode_and_write_triples(self, parsed: ParsedLines, dictionaries: Dictionaries, pinned: Pinned) -> dict | None:
        """The good lines encoded to ids, de-duplicated and written (a first ingest) or handed to the writes
        with the triples they replace; returns the writes' changes per split (None for a first ingest)."""
        good = parsed.triples.filter(F.col("status") == core_quarantine.OK)
        shuffle_partitions = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
        path, before, changes = self.paths["triples"], pinned.tables["triples"], None
        with self.ctx.step("encode_and_write_triples"):
            sizes = (self.summary.outputs["entities"].rows, self.summary.outputs["relations"].rows)
            triples = ingest.encode_triples(
                good,
                dictionaries.codes["entities"],
                dictionaries.codes["relations"],
                bool(self.ctx.config.ingest.broadcast_dictionaries),
                list(parsed.tally.splits),
                sizes,
                self._dedup_tasks(parsed.tally),
            )
            if before is None:
                # The small de-duplication tasks' output is written by as many tasks as any other shuffle makes.
                self.ctx.write("triples", triples.coalesce(shuffle_partitions), path, self.description)
            else:
                # a refresh: staged, compared by fingerprint with the triples it replaces, diffed when they differ
                changes = self.writes.triples(self.ctx, triples, before, path, self.staging, self.description)
            self.writes.written(self.ctx, "triples")
        return changes

    def verify_counts(self, tally: LineTally, changes: dict | None) -> TripleCounts:
        """The written triples counted per split and per pair of splits, read back."""
        with self.ctx.step("verify_counts"):
            written = self.ctx.written("triples")
            kept = {r["split"]: r["n"] for r in written.groupBy("split").agg(F.count(F.lit(1)).alias("n")).collect()}
            overlaps = {
                f"{r['split_a']}/{r['split_b']}": r["shared_triples"] for r in ingest.split_overlaps(written).collect()
            }
        return TripleCounts(kept, overlaps, SplitChanges.of(tally.splits, kept, changes))

    def summarise(self, tally: LineTally, dictionaries: Dictionaries, triples: TripleCounts) -> None:
        """The triples' and dictionaries' counts, the tables written and a warning per split the dump lost."""
        summary, changes = self.summary, triples.changes
        for warning in changes.warnings(summary.inputs["triples"].version if changes.missing else None):
            log.warning(warning)
            summary.extra.setdefault("warnings", []).append(warning)
        read = {name: summary.inputs[name].version for name in TABLES if name in summary.inputs}
        written = tables_written(read, {name: summary.outputs[name].version for name in TABLES}, TABLES)
        summary.highlights["tables written"] = ", ".join(written) or "none (the dataset already holds this dump)"
        duplicates = tally.duplicates(triples.kept)
        summary.counts.update(
            kept=sum(triples.kept.values()),
            kept_per_split=triples.kept,
            duplicates=sum(duplicates.values()),
            duplicates_per_split=duplicates,
            duplicate_alias_lines=dictionaries.duplicate_alias_lines,
            unused_alias_lines=dictionaries.unused_alias_lines,
            split_overlaps=triples.overlaps,
            entities=summary.outputs["entities"].rows,
            relations=summary.outputs["relations"].rows,
            new_entities=dictionaries.new_keys["entities"],
            new_relations=dictionaries.new_keys["relations"],
            triples_added=sum(changes.added.values()),
            triples_added_per_split=changes.added,
            triples_removed=sum(changes.removed.values()),
            triples_removed_per_split=changes.removed,
            missing_splits=changes.missing,
            changed=bool(written),
            tables_written=written,
        )

    def _stage(self, frame: DataFrame, name: str) -> DataFrame:
        return spill(frame, f"{self.staging}/{name}")

    def _dedup_tasks(self, tally: LineTally) -> int:
        """Tasks for the two de-duplications of nearly distinct rows: the entity codes and the encoded triples."""
        shuffle_partitions = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
        return tasks_for(tally.good, ingest.TRIPLES_PER_DEDUPLICATION_TASK, shuffle_partitions)


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
