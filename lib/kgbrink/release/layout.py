"""The benchmarks of a release, their configurations and what makes one change.

A configuration (a Hugging Face ``config_name``) is one table or one set of question files, stored as
``<benchmark>/<table>/<split>-0000i-of-0000n.parquet``. ``datasets.load_dataset`` reads one format per
repository (the builder is inferred from the first configuration's files), so every configuration is
Parquet; question files are also kept as JSON Lines (``<split>.jsonl``), the form the papers' scripts read. Entities and relations are named by the dataset's
keys (``Q42``, ``P31``), never by its internal ids. A benchmark changes when the versions of the dataset
tables it reads (``triples``, ``entities``, ``relations``) or the settings and inputs it is built from
change (:func:`fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.release.benchmarks import BY_NAME

BENCHMARKS = tuple(BY_NAME)  # "results" only when the dataset holds kgbrink predict's scores (release.results)
INPUT_TABLES = ("triples", "entities", "relations")


@dataclass
class Config:
    """One configuration of the release: Parquet ``files`` by split (paths relative to the release), ``rows``
    by split, ``fields`` as ``(name, Spark JSON type)``; ``jsonl``: the same rows as JSON Lines files by
    split, in the form the papers' scripts read (questions), or empty."""

    name: str
    benchmark: str
    description: str
    files: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    fields: list[tuple[str, str]] = field(default_factory=list)
    jsonl: dict[str, list[str]] = field(default_factory=dict)
    jsonl_fields: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "benchmark": self.benchmark,
            "description": self.description,
            "files": self.files,
            "rows": self.rows,
            "fields": [list(f) for f in self.fields],
            "jsonl": self.jsonl,
            "jsonl_fields": [list(f) for f in self.jsonl_fields],
        }

    @staticmethod
    def from_dict(d: dict) -> Config:
        return Config(
            d["name"],
            d["benchmark"],
            d["description"],
            d["files"],
            d["rows"],
            [tuple(f) for f in d["fields"]],
            d.get("jsonl", {}),
            [tuple(f) for f in d.get("jsonl_fields", [])],
        )


VERSION = re.compile(r"v[1-9][0-9]{0,8}")


class ManifestError(ValueError):
    """A release root's ``LATEST`` or ``release.json`` is not what a release wrote."""


def latest_version(text: str | None, where: str) -> str | None:
    """The version ``LATEST`` names (``v<n>``), None without the file; anything else fails naming it."""
    if text is None:
        return None
    name = text.strip()
    if not VERSION.fullmatch(name):
        raise ManifestError(f"{where}: expected a release version such as v3, found {name[:80]!r}")
    return name


def checked_manifest(text: str | None, where: str) -> dict:
    """The previous release's manifest, checked before it is trusted: JSON with a version number,
    benchmarks with their fingerprints, configurations whose files are safe relative names; and
    ``SHA256SUMS``-style digests are compared later. Fails naming the file and the field."""
    from kgbrink.storage.staging import StagingError, checked_name

    if text is None:
        raise ManifestError(f"{where}: missing (LATEST names a release that is not there)")
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where}: not JSON ({exc})") from None

    def need(ok: bool, field_name: str) -> None:
        if not ok:
            raise ManifestError(f"{where}: field {field_name} is missing or malformed")

    need(isinstance(manifest, dict), "(the document)")
    need(re.fullmatch(r"[1-9][0-9]{0,8}\.0\.0", str(manifest.get("version_number", ""))) is not None, "version_number")
    benchmarks = manifest.get("benchmarks")
    need(isinstance(benchmarks, dict) and all(b in BENCHMARKS for b in benchmarks), "benchmarks")
    for name, entry in benchmarks.items():
        need(isinstance(entry, dict) and isinstance(entry.get("fingerprint"), dict), f"benchmarks.{name}.fingerprint")
    configs = manifest.get("configs")
    need(isinstance(configs, list), "configs")
    for i, config in enumerate(configs):
        need(isinstance(config, dict) and config.get("benchmark") in benchmarks, f"configs[{i}].benchmark")
        for kind in ("files", "jsonl"):
            files = config.get(kind, {})
            need(isinstance(files, dict) and all(isinstance(v, list) for v in files.values()), f"configs[{i}].{kind}")
            for names in files.values():
                for file_name in names:
                    try:
                        checked_name(file_name, f"{where}: configs[{i}].{kind}")
                    except StagingError as exc:
                        raise ManifestError(str(exc)) from None
        try:
            Config.from_dict(config)
        except (KeyError, TypeError, ValueError):
            need(False, f"configs[{i}]")
    return manifest


def canonical_json(value) -> str:
    """JSON with sorted keys and no spaces: the bytes hashed and compared."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


TIMINGS = "_timings.json"  # under the release root, beside LATEST: not part of any release's files


def read_timings(text: str | None) -> dict[str, float]:
    """The seconds each benchmark took when a release last built it, from ``<root>/_timings.json``.

    Untrusted (any writer of the root): anything but a JSON object of known benchmark names to finite
    non-negative numbers gives ``{}``, an estimate left out rather than a release failed."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for name, seconds in value.items():
        number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if name not in BENCHMARKS or not number or not 0 <= seconds < float("inf"):
            return {}
        out[name] = float(seconds)
    return out


def time_left(timings: dict[str, float], todo: list[str]) -> float | None:
    """The seconds the benchmarks ``todo`` took when last built: the release's time left at those times
    (None when one of them has no time yet)."""
    if any(b not in timings for b in todo):
        return None
    return sum(timings[b] for b in todo)


def fingerprint(benchmark: str, inputs: dict[str, int], settings: dict, extra: dict | None = None) -> dict:
    """What a benchmark is built from: the dataset's input table versions, the digest of its settings
    sections (``settings``: section name -> dict) and of ``extra`` (input files, options), and the digest of
    its declared configurations (a release whose layout changed, e.g. a column added, is built again)."""
    declared = BY_NAME[benchmark]
    sections = {name: settings[name] for name in declared.sections}
    return {
        "inputs": {name: inputs[name] for name in INPUT_TABLES},
        "settings": hashlib.sha256(canonical_json({"sections": sections, "extra": extra or {}}).encode()).hexdigest(),
        "layout": hashlib.sha256(repr((declared.tables, declared.files)).encode()).hexdigest()[:16],
    }


def changed(previous: dict | None, fingerprints: dict[str, dict]) -> list[str]:
    """The benchmarks of ``fingerprints`` whose fingerprint differs from the previous release's manifest
    (all of them without one), in :data:`BENCHMARKS` order."""
    before = (previous or {}).get("benchmarks", {})
    return [b for b in BENCHMARKS if b in fingerprints and before.get(b, {}).get("fingerprint") != fingerprints[b]]


def keyed(
    frame: DataFrame,
    entities: DataFrame,
    relations: DataFrame,
    entity_columns: tuple[str, ...] = (),
    relation_columns: tuple[str, ...] = (),
) -> DataFrame:
    """``frame`` with each int id column of ``entity_columns`` / ``relation_columns`` replaced by the
    dictionary's key (``entities``, ``relations``: ``id, key``), in place; a null id stays null. An id not
    in the dictionary raises: the release never silently drops or blanks a row."""
    columns = frame.columns
    out = frame
    checks = []
    for names, dictionary in ((entity_columns, entities), (relation_columns, relations)):
        for name in names:
            alias = f"_key_{name}"
            lookup = dictionary.select(F.col("id").alias(f"_id_{name}"), F.col("key").alias(alias))
            out = out.join(lookup, out[name] == F.col(f"_id_{name}"), "left")
            checks.append((name, alias))
    for name, alias in checks:  # a filter that is always true, or fails the query naming the column
        unknown = F.col(name).isNotNull() & F.col(alias).isNull()
        message = F.concat(
            F.lit(f"release: column {name} holds an id without a dictionary key: "), F.col(name).cast("string")
        )
        out = out.where(F.when(unknown, F.raise_error(message)).otherwise(F.lit(True)))
    return out.select(*[F.col(f"_key_{c}").alias(c) if (c, f"_key_{c}") in checks else F.col(c) for c in columns])
