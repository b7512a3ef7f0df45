"""Ingest transformations: parse triple lines, quarantine bad ones, encode keys as stable dense ids.

Accounting (asserted by the tests): every input line ends up in exactly one of
``kept`` (a distinct triple of its split), ``duplicate`` (an exact repeat of a kept triple in the same
split), ``quarantined`` (malformed, with a reason code and a detail) or ``skipped`` (N-Triples lines that
are well-formed but not entity-to-entity edges: literals, other IRIs, labels, comments).

Ids are dense integers starting at 0 and **stable** across refreshes: keys already in the dataset keep
their id; new keys get ``max(id) + 1, ...`` in key order (deterministic, whatever the partitioning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kgbrink.core.files import InputError
from kgbrink.core.frames import distinct_in_tasks, distinct_packed, with_positions
from kgbrink.core.quarantine import OK, QUARANTINED

# Quarantine reason codes.
WRONG_FIELD_COUNT = "wrong_field_count"
EMPTY_FIELD = "empty_field"
BAD_QUOTING = "bad_quoting"
BAD_ENTITY_KEY = "bad_entity_key"
BAD_RELATION_KEY = "bad_relation_key"
UNKNOWN_ENTITY = "unknown_entity"
UNKNOWN_RELATION = "unknown_relation"
MALFORMED_NTRIPLE = "malformed_ntriple"
EMPTY_LABEL = "empty_label"
BAD_ALIAS_KEY = "bad_alias_key"
INVALID_UTF8 = "invalid_utf8"


@dataclass(frozen=True)
class KeyCodec:
    """How keys travel through the heavy steps (distinct, id assignment, joins, de-duplication).

    ``prefix=None``: as the key strings themselves. ``prefix="Q"``: keys are ``Q`` + a positive decimal
    integer without leading zeros (Wikidata ids, validated by the format's pattern), carried as that
    integer: distinct/join/sort on longs instead of strings, several times faster at Wikidata scale.
    The mapping is exact both ways, so the tables still hold the key strings. New ids are assigned in
    code order: numeric order for prefixed integers, string order otherwise.
    """

    prefix: str | None = None

    def code(self, key: Column) -> Column:
        if self.prefix is None:
            return key
        return key.substr(F.lit(len(self.prefix) + 1), F.length(key)).cast("long")

    def key(self, code: Column) -> Column:
        if self.prefix is None:
            return code
        return F.concat(F.lit(self.prefix), code.cast("string"))

    @property
    def code_type(self) -> str:
        return "string" if self.prefix is None else "long"


STRING_KEYS = KeyCodec()


@dataclass(frozen=True)
class TripleFormat:
    """How a delimited triple line is laid out.

    ``columns`` names the role of each field in line order (a permutation of h, r, t). ``quote``, when
    set, may wrap any field (``"12"``); a field may not contain the delimiter. Keys must fully match
    ``entity_pattern`` / ``relation_pattern`` (Java regex).
    """

    name: str
    delimiter: str = "\t"
    columns: tuple[str, str, str] = ("h", "r", "t")
    quote: str | None = None
    entity_pattern: str = r"\S+"
    relation_pattern: str = r"\S+"
    entity_codec: KeyCodec = STRING_KEYS
    relation_codec: KeyCodec = STRING_KEYS

    def __post_init__(self) -> None:
        if sorted(self.columns) != ["h", "r", "t"]:
            raise ValueError(f"columns must be a permutation of h,r,t, got {','.join(self.columns)}")
        if not self.delimiter:
            raise ValueError("delimiter must not be empty")
        if self.quote is not None and len(self.quote) != 1:
            raise ValueError(f"quote must be one character, got {self.quote!r}")


# At most 18 digits: every such id fits the 64-bit integer KeyCodec carries it as (a longer one is
# quarantined as a bad key instead of overflowing).
WIKIDATA_ENTITY_KEY, WIKIDATA_RELATION_KEY = r"Q[1-9][0-9]{0,17}", r"P[1-9][0-9]{0,17}"
WIKIDATA5M = TripleFormat(
    "wikidata5m",
    entity_pattern=WIKIDATA_ENTITY_KEY,
    relation_pattern=WIKIDATA_RELATION_KEY,
    entity_codec=KeyCodec("Q"),
    relation_codec=KeyCodec("P"),
)
# Wikidata truthy N-Triples yield the same Q/P keys (parse_ntriples extracts them).
NTRIPLES = replace(WIKIDATA5M, name="ntriples")
PROBE = TripleFormat("probe")


def utf8_check() -> tuple[Column, str, Column]:
    """The first check of every line: its bytes are UTF-8 (Latin-1 keys would otherwise be decoded to the
    same replacement characters and merge)."""
    return ~F.is_valid_utf8(F.col("line")), INVALID_UTF8, F.lit("the line is not valid UTF-8")


def strip_cr(line: Column) -> Column:
    """A line without its Windows line-ending ``\\r`` (cheaper than a regex on every line)."""
    return F.when(line.endswith("\r"), line.substr(F.lit(1), F.length(line) - 1)).otherwise(line)


def _unquote(field: Column, quote: str | None) -> tuple[Column, Column]:
    """(value without surrounding quotes, True if the quoting is broken)."""
    if quote is None:
        return field, F.lit(False)
    q = re.escape(quote)
    wrapped = field.rlike(f"(?s)^{q}.*{q}\\z") & (F.length(field) >= 2)
    inner = F.when(wrapped, field.substr(F.lit(2), F.length(field) - 2)).otherwise(field)
    broken = inner.contains(quote)
    return inner, broken


def parse_delimited_triples(lines: DataFrame, fmt: TripleFormat) -> DataFrame:
    """Add ``h_key, r_key, t_key, status, reason, detail`` to ``lines`` (column ``line``).

    ``status`` is ``ok`` or ``quarantined``; a quarantined line has a reason code and a human detail.
    """
    delimiter = re.escape(fmt.delimiter)
    parsed = lines.withColumn("_fields", F.split(strip_cr(F.col("line")), delimiter, -1))
    n_fields = F.size("_fields")
    raw = {role: F.col("_fields")[i] for i, role in enumerate(fmt.columns)}
    keys, broken = {}, {}
    for role in ("h", "r", "t"):
        keys[role], broken[role] = _unquote(raw[role], fmt.quote)
    checks: list[tuple[Column, str, Column]] = [
        utf8_check(),
        (
            n_fields != 3,
            WRONG_FIELD_COUNT,
            F.format_string("expected 3 fields separated by %s, got %d", F.lit(repr(fmt.delimiter)), n_fields),
        ),
    ]
    for role in ("h", "r", "t"):
        checks.append(
            (
                broken[role],
                BAD_QUOTING,
                F.format_string(f"field {role} has unbalanced %s quotes: %s", F.lit(fmt.quote), raw[role]),
            )
        )
    for role in ("h", "r", "t"):
        checks.append((keys[role] == "", EMPTY_FIELD, F.lit(f"field {role} is empty")))
    for role, code, pattern in (
        ("h", BAD_ENTITY_KEY, fmt.entity_pattern),
        ("r", BAD_RELATION_KEY, fmt.relation_pattern),
        ("t", BAD_ENTITY_KEY, fmt.entity_pattern),
    ):
        checks.append(
            (
                ~keys[role].rlike(f"^(?:{pattern})\\z"),
                code,
                F.format_string(f"field {role} = '%s' does not match %s", keys[role], F.lit(pattern)),
            )
        )
    return _classify(parsed, checks, keys).drop("_fields")


def _classify(df: DataFrame, checks: list[tuple[Column, str, Column]], keys: dict[str, Column]) -> DataFrame:
    """Apply ordered (condition, reason, detail) checks: the first failing check names the reason."""
    reason = F.lit(None).cast("string")
    detail = F.lit(None).cast("string")
    for condition, code, text in reversed(checks):
        reason = F.when(condition, F.lit(code)).otherwise(reason)
        detail = F.when(condition, text).otherwise(detail)
    out = df.withColumns({"reason": reason, "detail": detail})
    good = F.col("reason").isNull()
    return out.withColumns(
        {
            "status": F.when(good, F.lit(OK)).otherwise(F.lit(QUARANTINED)),
            **{f"{role}_key": F.when(good, key) for role, key in keys.items()},
        }
    )


def parse_aliases(lines: DataFrame, key_pattern: str = r"\S+") -> DataFrame:
    """Alias files (``key<TAB>alias1<TAB>alias2...``; the first alias is the label).

    Adds ``key, label, status, reason, detail``; malformed lines are quarantined. A key listed on several
    lines is resolved by :func:`alias_labels`.
    """
    fields = F.split(strip_cr(F.col("line")), "\t", -1)
    key, label = fields[0], F.trim(fields[1])
    checks = [
        utf8_check(),
        (F.size(fields) < 2, WRONG_FIELD_COUNT, F.lit("expected a key and at least one alias, TAB-separated")),
        (
            ~key.rlike(f"^(?:{key_pattern})\\z"),
            BAD_ALIAS_KEY,
            F.format_string("key '%s' does not match %s", key, F.lit(key_pattern)),
        ),
        (label == "", EMPTY_LABEL, F.lit("first alias (the label) is empty")),
    ]
    parsed = _classify(lines, checks, {"alias": key}).withColumnRenamed("alias_key", "key")
    return parsed.withColumn("label", F.when(F.col("status") == OK, label))


def alias_labels(aliases: DataFrame, key: str = "key") -> DataFrame:
    """``<key>, label, lines`` from parsed alias lines with status ok. A key listed on several lines gets
    its smallest label (deterministic whatever the line order); ``lines - 1`` of its lines are unused
    and counted as ``duplicate_alias_lines`` by the ingest job."""
    return (
        aliases.filter(F.col("status") == OK)
        .groupBy(key)
        .agg(F.min("label").alias("label"), F.count(F.lit(1)).alias("lines"))
    )


def check_vocabulary(parsed: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """Quarantine parsed triples whose keys are not in a closed vocabulary (``key`` columns)."""
    ent = entities.select(F.col("key").alias("_ekey")).withColumn("_e", F.lit(True))
    rel = relations.select(F.col("key").alias("_rkey")).withColumn("_r", F.lit(True))
    joined = (
        parsed.join(F.broadcast(ent.withColumnRenamed("_e", "_h")), F.col("h_key") == F.col("_ekey"), "left")
        .drop("_ekey")
        .join(F.broadcast(ent.withColumnRenamed("_e", "_t")), F.col("t_key") == F.col("_ekey"), "left")
        .drop("_ekey")
        .join(F.broadcast(rel), F.col("r_key") == F.col("_rkey"), "left")
        .drop("_rkey")
    )
    ok = F.col("status") == OK
    unknown_h, unknown_t, unknown_r = ok & F.col("_h").isNull(), ok & F.col("_t").isNull(), ok & F.col("_r").isNull()
    bad = unknown_h | unknown_t | unknown_r
    return joined.withColumns(
        {
            "status": F.when(bad, F.lit(QUARANTINED)).otherwise(F.col("status")),
            "reason": F.when(unknown_h | unknown_t, F.lit(UNKNOWN_ENTITY))
            .when(unknown_r, F.lit(UNKNOWN_RELATION))
            .otherwise(F.col("reason")),
            "detail": F.when(unknown_h, F.format_string("entity '%s' is not in the entity dictionary", F.col("h_key")))
            .when(unknown_t, F.format_string("entity '%s' is not in the entity dictionary", F.col("t_key")))
            .when(unknown_r, F.format_string("relation '%s' is not in the relation dictionary", F.col("r_key")))
            .otherwise(F.col("detail")),
            **{c: F.when(~bad, F.col(c)) for c in ("h_key", "r_key", "t_key")},
        }
    ).drop("_h", "_t", "_r")


# Triples per task when the triples or their entity codes are de-duplicated: 100 tasks at 20M triples,
# whose hash tables stay cache-sized (64-200 tasks measured alike; 8 and 400 slower; benchmarks/journal.md).
TRIPLES_PER_DEDUPLICATION_TASK = 200_000


def assign_ids(codes: DataFrame, existing: DataFrame | None, partitions: int | None = None) -> DataFrame:
    """Dictionary ``(id, code)`` covering ``existing`` plus every new code of ``codes`` (column ``code``).

    Existing ids are kept; new codes are numbered ``max(existing id) + 1, ...`` in code order (see
    :class:`KeyCodec`), so the result does not depend on partitioning. ``partitions``: the codes are
    mostly distinct (entities), so they are de-duplicated in that many tasks (:func:`distinct_in_tasks`);
    None keeps Spark's map-side partial de-duplication, right for few distinct codes (relations).
    """
    code = codes.select("code")
    distinct = distinct_in_tasks(code, partitions) if partitions else code.distinct()
    if existing is None:
        known = distinct.sparkSession.createDataFrame(
            [], f"id int, code {codes.schema['code'].dataType.simpleString()}"
        )
    else:
        known = existing.select(F.col("id").cast("int"), "code")
    new = distinct.join(known, "code", "left_anti")
    start = known.agg(F.coalesce(F.max("id") + 1, F.lit(0)).alias("start"))
    numbered = with_positions(new, ["code"], "_n")
    return known.unionByName(
        numbered.crossJoin(F.broadcast(start)).select((F.col("start") + F.col("_n")).cast("int").alias("id"), "code")
    )


def with_labels(
    dictionary: DataFrame, codec: KeyCodec, labels: DataFrame | None, previous: DataFrame | None
) -> DataFrame:
    """``(id, key, label, label_lines)`` from ``(id, code)``: the dump's label where it gives one
    (``labels``: ``code, label, lines`` from :func:`alias_labels`), else the previous one (``previous``:
    ``code, label``), else null. ``label_lines`` is the number of the dump's label lines of the key (0
    without), so the job counts the alias lines no key uses without another join."""
    out = dictionary
    for frame, name in ((previous, "_old"), (labels, "_new")):
        if frame is not None and "label" in frame.columns:
            lines = [F.col("lines").alias("_lines")] if name == "_new" else []
            out = out.join(frame.select("code", F.col("label").alias(name), *lines), "code", "left")
        else:
            out = out.withColumn(name, F.lit(None).cast("string"))
    used = F.coalesce(F.col("_lines"), F.lit(0)).cast("long") if "_lines" in out.columns else F.lit(0).cast("long")
    return out.select(
        "id",
        codec.key(F.col("code")).alias("key"),
        F.coalesce("_new", "_old").alias("label"),
        used.alias("label_lines"),
    )


def encode_triples(
    good: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    broadcast: bool,
    splits: list[str],
    sizes: tuple[int, int],
    partitions: int,
) -> DataFrame:
    """Distinct ``(h, r, t, split)`` ids for ``good(split, h_code, r_code, t_code)`` given the
    ``(id, code)`` dictionaries; exact repeats within a split collapse, and nothing else removes a row:
    a code missing from its dictionary fails the job (the dictionaries are built from these codes, so it
    would be a bug) instead of an inner join dropping the line, which the job would count as a duplicate.

    ``splits`` lists every split of ``good``; ``sizes`` = (entity ids, relation ids) bounds the ids, so a
    triple packs into ``2 * bits(entities) + bits(relations) + bits(splits)`` bits (58 for Wikidata5m) and
    is de-duplicated as one long (:func:`kgbrink.core.frames.distinct_packed`) in ``partitions`` tasks."""
    hint = F.broadcast if broadcast else (lambda df: df)
    encoded = good.select("split", "h_code", "r_code", "t_code")
    ids = []
    for role, dictionary, name in (
        ("h", entities, "entities"),
        ("r", relations, "relations"),
        ("t", entities, "entities"),
    ):
        encoded = encoded.join(
            hint(dictionary.select(F.col("id").alias(role), F.col("code").alias(f"{role}_code"))),
            f"{role}_code",
            "left",
        )
        missing = F.format_string(
            f"internal: field {role} (key code %s) has no id in the {name} dictionary", F.col(f"{role}_code")
        )
        ids.append(F.when(F.col(role).isNull(), F.raise_error(missing)).otherwise(F.col(role)).alias(role))
    names = F.array(*(F.lit(s) for s in splits))
    indexed = encoded.select((F.array_position(names, F.col("split")) - 1).cast("int").alias("split"), *ids)
    entity_bits, relation_bits = (max(1, (n - 1).bit_length()) for n in sizes)
    bits = {"split": max(1, (len(splits) - 1).bit_length()), "h": entity_bits, "r": relation_bits, "t": entity_bits}
    unique = distinct_packed(indexed, bits, partitions)
    return unique.select("h", "r", "t", F.element_at(names, F.col("split") + 1).alias("split"))


def split_overlaps(triples: DataFrame) -> DataFrame:
    """Triples shared by two splits: ``(split_a, split_b, shared_triples)`` with split_a = train for
    train/valid and train/test leakage, and every other pair once. Only non-train rows are joined
    (small in every benchmark; AQE turns the join into a broadcast)."""
    order = F.create_map(*[F.lit(x) for kv in (("train", 0), ("valid", 1), ("test", 2)) for x in kv])

    def rank(c):
        return F.coalesce(order[F.col(c)], F.lit(9))

    held_out = triples.filter(F.col("split") != "train").select("h", "r", "t", F.col("split").alias("split_b"))
    every = triples.select("h", "r", "t", F.col("split").alias("split_a"))
    return (
        held_out.join(every, ["h", "r", "t"])
        .filter(
            (rank("split_a") < rank("split_b"))
            | ((rank("split_a") == rank("split_b")) & (F.col("split_a") < F.col("split_b")))
        )
        .groupBy("split_a", "split_b")
        .agg(F.count(F.lit(1)).alias("shared_triples"))
    )


def triples_fingerprint() -> list[Column]:
    """Aggregates that identify a set of ``(h, r, t, split)`` rows whatever their order and partitioning:
    its size and the XOR of the rows' 64-bit hashes. Two different sets agree with a chance of about
    2^-64, so a refresh compares fingerprints, two scans, before diffing the triples (a shuffle of both)."""
    return [
        F.count(F.lit(1)).alias("triples"),
        F.coalesce(F.bit_xor(F.xxhash64("h", "r", "t", "split")), F.lit(0).cast("long")).alias("hash"),
    ]


def triple_changes(new: DataFrame, old: DataFrame) -> DataFrame:
    """Per split of either set: ``split, added, removed``, the triples of ``new`` not in ``old`` and those
    of ``old`` not in ``new`` (both sets of ``(h, r, t, split)``). One aggregation of the two: a triple is
    tagged 1 in ``new`` and 2 in ``old``, so its sum is 1 (added), 2 (removed) or 3 (kept)."""
    columns = ["h", "r", "t", "split"]
    tagged = new.select(*columns, F.lit(1).alias("side")).unionByName(old.select(*columns, F.lit(2).alias("side")))
    side = tagged.groupBy(*columns).agg(F.sum("side").alias("side"))
    return side.groupBy("split").agg(
        F.count(F.when(F.col("side") == 1, 1)).alias("added"),
        F.count(F.when(F.col("side") == 2, 1)).alias("removed"),
    )


class DictionaryConflict(ValueError):
    """A given dictionary maps a key or an id of the dataset's dictionary another way."""


def parse_dictionary(lines: DataFrame, path: str) -> DataFrame:
    """``id, key``: a PROBE-style ``id<TAB>key`` dictionary from its ``lines`` (``value``; read by
    :func:`kgbrink.core.files.read_dictionary_lines`), validated: UTF-8, well-formed, unique, dense ids from
    0; ``InputError`` naming ``path`` otherwise. Lines end at ``\\n`` only, so a lone ``\\r`` does not make
    two entries, and a Latin-1 key is refused rather than stored with U+FFFD in it."""
    fields = F.split(F.regexp_replace("value", "\r$", ""), "\t", -1)
    raw = lines.select(
        F.col("value").alias("line"),
        fields[0].alias("id_text"),
        F.trim(fields[1]).alias("key"),
        F.size(fields).alias("n"),
    )
    parsed = raw.withColumn("id", F.when(F.col("id_text").rlike(r"^[0-9]+\z"), F.col("id_text").cast("int")))
    not_utf8 = ~F.is_valid_utf8("line")
    malformed = (F.col("n") != 2) | F.col("id").isNull() | (F.trim("key") == "")
    checks = parsed.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(not_utf8.cast("int")).alias("not_utf8"),
        F.first(F.when(not_utf8, F.make_valid_utf8("line")), ignorenulls=True).alias("not_utf8_example"),
        F.sum(malformed.cast("int")).alias("malformed"),
        F.first(F.when(malformed, F.col("line")), ignorenulls=True).alias("example"),
        F.countDistinct("id").alias("ids"),
        F.countDistinct("key").alias("keys"),
        F.min("id").alias("min_id"),
        F.max("id").alias("max_id"),
    ).collect()[0]
    problems = []
    if checks["not_utf8"]:
        problems.append(f"{checks['not_utf8']} lines are not valid UTF-8, e.g. {checks['not_utf8_example']!r}")
    elif checks["malformed"]:
        problems.append(f"{checks['malformed']} malformed lines (expected 'id<TAB>key'), e.g. {checks['example']!r}")
    elif checks["ids"] != checks["rows"] or checks["keys"] != checks["rows"]:
        problems.append(f"{checks['rows']} lines but {checks['ids']} distinct ids and {checks['keys']} distinct keys")
    elif checks["rows"] and (checks["min_id"] != 0 or checks["max_id"] != checks["rows"] - 1):
        problems.append(
            f"ids are not dense from 0 (min {checks['min_id']}, max {checks['max_id']}, {checks['rows']} lines)"
        )
    if not checks["rows"]:
        problems.append("no entries")
    if problems:
        raise InputError(f"{path}: {'; '.join(problems)}")
    return parsed.select("id", "key")


def merge_dictionaries(seed: DataFrame, existing: DataFrame | None, what: str) -> DataFrame:
    """The union of a given dictionary and the dataset's; any key or id mapped two ways is an error."""
    if existing is None:
        return seed
    both = seed.select("id", "key").unionByName(existing.select("id", "key")).distinct()
    clash = both.groupBy("key").agg(F.countDistinct("id").alias("n")).filter("n > 1").limit(5).collect()
    clash += both.groupBy("id").agg(F.countDistinct("key").alias("n")).filter("n > 1").limit(5).collect()
    if clash:
        raise DictionaryConflict(
            f"the {what} dictionary contradicts the dataset's existing ids (e.g. {clash[:3]}); ingest into a new dataset"
        )
    return both
