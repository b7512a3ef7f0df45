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

from kgbrink.rules.model import RULE_TABLE_COLUMNS

BENCHMARKS = ("kg", "brink", "probe", "synthkgqa", "probekgc", "okgqa", "results")
# "results" is released only when the dataset holds kgbrink predict's scores (release.results)
INPUT_TABLES = ("triples", "entities", "relations")

# The settings sections each benchmark is built from (its fingerprint's settings part).
SECTIONS = {
    "kg": (),
    "brink": ("mining", "variant"),
    "probe": ("stats",),
    "synthkgqa": ("seed_graphs", "gt_questions", "question_graphs", "shortest_paths"),
    "probekgc": ("mcq",),
    "okgqa": ("perturbation",),
    "results": (),
}

TITLES = {
    "kg": "the knowledge graph the benchmarks are built from",
    "brink": "BRINK incomplete-KG variant: complete and incomplete KGs, rules, provenance, questions",
    "probe": "PROBE popularity statistics: entity and entity-relation popularity, relation statistics",
    "synthkgqa": "SynthKGQA seed subgraphs, questions with ground-truth subgraphs, question-specific graphs",
    "probekgc": "ProbeKGC multiple-choice KG completion questions (easy, medium, hard options)",
    "okgqa": "OKGQA-P perturbations of the whole KG (RS, RR, ER, ED) and their structural similarity",
    "results": "scores of models on these benchmarks (kgbrink predict), one row per run, metric and labels",
}

CITATIONS = {
    "brink": (
        "@misc{zhou2025brink,\n  title={What Breaks Knowledge Graph based RAG? Benchmarking and Empirical Insights "
        "into Reasoning under Incomplete Knowledge},\n  author={Zhou, Dongzhuoran and Zhu, Yuqicheng and Wang, Xiaxia "
        "and Zhou, Hongkuan and He, Yuan and Chen, Jiaoyan and Staab, Steffen and Kharlamov, Evgeny},\n  year={2025}\n}"
    ),
    "probe": (
        "@misc{moon2026probe,\n  title={Generalized Rank-based Evaluation for Knowledge Graph Completion: "
        "Perspectives, Framework, and Analyses},\n  author={Moon, Sooho and Kang, Jian and Ko, Yunyong},\n"
        "  year={2026},\n  eprint={2606.08921},\n  archivePrefix={arXiv}\n}"
    ),
    "synthkgqa": (
        "@misc{cattaneo2025synthkgqa,\n  title={Ground-Truth Subgraphs for Better Training and Evaluation of "
        "Knowledge Graph Augmented LLMs},\n  author={Cattaneo, Alberto and Luschi, Carlo and Justus, Daniel},\n"
        "  year={2025}\n}"
    ),
    "probekgc": (
        "@misc{probekgc2025,\n  title={Are LLMs Really Knowledgeable for Knowledge Graph Completion?},\n"
        "  year={2025}\n}"
    ),
    "okgqa": (
        "@misc{sui2025okgqa,\n  title={Can Knowledge Graphs Make Large Language Models More Trustworthy? An "
        "Empirical Study over Open-ended Question Answering},\n  author={Sui, Yuan and Hooi, Bryan},\n"
        "  year={2025}\n}"
    ),
}


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
    sections (``settings``: section name -> dict) and of ``extra`` (input files, options)."""
    sections = {name: settings[name] for name in SECTIONS[benchmark]}
    return {
        "inputs": {name: inputs[name] for name in INPUT_TABLES},
        "settings": hashlib.sha256(canonical_json({"sections": sections, "extra": extra or {}}).encode()).hexdigest(),
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


@dataclass(frozen=True)
class TablePart:
    """A configuration made of one Delta table: ``table`` (a catalog name) under the location ``where``
    (``dataset``, ``variant``, ``stats``, ``mcq``, ``synthkgqa``, ``okgqa``: the job names the path parts),
    its ``columns`` (all: None) with ids replaced by keys, one file set per value of ``split``."""

    config: str
    benchmark: str
    table: str
    where: str
    description: str
    columns: tuple[str, ...] | None = None
    entity_columns: tuple[str, ...] = ()
    relation_columns: tuple[str, ...] = ()
    split: str | None = None
    jsonl: bool = False


@dataclass(frozen=True)
class FilePart:
    """A configuration made of JSON Lines files a builder exported: ``files`` maps each split to the file's
    path relative to the benchmark's export folder."""

    config: str
    benchmark: str
    description: str
    files: tuple[tuple[str, str], ...]


TRIPLE = ("h", "r", "t")
TABLE_PARTS = (
    TablePart(
        "kg_triples",
        "kg",
        "triples",
        "dataset",
        "the KG's triples by split",
        ("h", "r", "t", "split"),
        ("h", "t"),
        ("r",),
        "split",
    ),
    TablePart("kg_entities", "kg", "entities", "dataset", "entity keys and labels", ("key", "label")),
    TablePart("kg_relations", "kg", "relations", "dataset", "relation keys and labels", ("key", "label")),
    TablePart(
        "brink_complete",
        "brink",
        "variant.complete",
        "variant",
        "the complete KG by split",
        None,
        ("h", "t"),
        ("r",),
        "split",
    ),
    TablePart(
        "brink_incomplete",
        "brink",
        "variant.incomplete",
        "variant",
        "the incomplete KG (removed triples left out) by split",
        None,
        ("h", "t"),
        ("r",),
        "split",
    ),
    TablePart(
        "brink_removed",
        "brink",
        "variant.removed",
        "variant",
        "the removed triples and the rules that infer them",
        None,
        ("h", "t"),
        ("r",),
    ),
    TablePart(
        "brink_rules",
        "brink",
        "variant.rules",
        "variant",
        "the Horn rules with AMIE3's metrics",
        tuple(c for c in RULE_TABLE_COLUMNS if c != "body"),  # the body is in the rule's text
    ),
    TablePart(
        "probe_entity_popularity",
        "probe",
        "stats.entity_popularity",
        "stats",
        "d(e) and its parts; delta = d(e) / 2|T| (PROBE Sec. 4)",
        None,
        ("entity",),
    ),
    TablePart(
        "probe_entity_relation_popularity",
        "probe",
        "stats.entity_relation_popularity",
        "stats",
        "d(e => r) and delta(r|e) per (entity, relation)",
        None,
        ("entity",),
        ("relation",),
    ),
    TablePart(
        "probe_relation_statistics",
        "probe",
        "stats.relation_statistics",
        "stats",
        "facts and (inverse) functionality per relation",
        None,
        (),
        ("relation",),
    ),
    TablePart("probe_degree_histogram", "probe", "stats.degree_histogram", "stats", "entities per degree"),
    TablePart(
        "synthkgqa_question_graphs",
        "synthkgqa",
        "synthkgqa.question_graphs",
        "synthkgqa",
        "question-specific graphs (App. C.1): per question its triples",
        None,
        ("h", "t"),
        ("r",),
        "split",
    ),
    TablePart(
        "synthkgqa_question_graph_sizes",
        "synthkgqa",
        "synthkgqa.question_graph_sizes",
        "synthkgqa",
        "per question the graph's size after each step",
    ),
    TablePart(
        "synthkgqa_answer_types",
        "synthkgqa",
        "synthkgqa.answer_types",
        "synthkgqa",
        "questions per split and isomorphism type (Table A1)",
    ),
    TablePart(
        "synthkgqa_sp_table_d2",
        "synthkgqa",
        "synthkgqa.sp_table_d2",
        "synthkgqa",
        "shortest paths against ground-truth paths (Table D2)",
    ),
    TablePart(
        "synthkgqa_sp_figure_d9",
        "synthkgqa",
        "synthkgqa.sp_figure_d9",
        "synthkgqa",
        "shortest-path lengths and counts by ground-truth length (Fig. D9)",
    ),
    TablePart(
        "probekgc_statistics",
        "probekgc",
        "mcq.statistics",
        "mcq",
        "entities, relations, triples and options per difficulty",
    ),
    TablePart(
        "okgqa_perturbation_log",
        "okgqa",
        "okgqa.perturbation_log",
        "okgqa",
        "every operation: old and new triple, the first level that applies it (graph at level p: the KG without the old, with the new triples of levels <= p)",
        ("method", "seed", "level", "op_rank", "old_h", "old_r", "old_t", "new_h", "new_r", "new_t"),
        ("old_h", "old_t", "new_h", "new_t"),
        ("old_r", "new_r"),
    ),
    TablePart(
        "okgqa_perturbations",
        "okgqa",
        "okgqa.perturbations",
        "okgqa",
        "per (method, level, seed) the operations requested and made",
    ),
    TablePart(
        "okgqa_kg_similarity",
        "okgqa",
        "okgqa.kg_similarity",
        "okgqa",
        "ATS, SC2D, SD2 of each perturbed KG (App. A.7, Fig. 4)",
    ),
)
SPLITS3 = tuple((s, f"{s}.jsonl") for s in ("train", "valid", "test"))
FILE_PARTS = (
    FilePart(
        "brink_provenance",
        "brink",
        "one record per selected grounding: triple, rule, body",
        (("train", "provenance.jsonl"),),
    ),
    FilePart(
        "brink_questions",
        "brink",
        "questions by entity key (Sec. 5.4 entity_id)",
        tuple((s, f"questions/entity_id/{f}") for s, f in SPLITS3),
    ),
    FilePart(
        "brink_questions_text_label",
        "brink",
        "questions by entity label (Sec. 5.4 text_label)",
        tuple((s, f"questions/text_label/{f}") for s, f in SPLITS3),
    ),
    FilePart(
        "brink_questions_private_id",
        "brink",
        "questions by private id (Sec. 5.4 private_id)",
        tuple((s, f"questions/private_id/{f}") for s, f in SPLITS3),
    ),
    FilePart(
        "synthkgqa_seed_graphs",
        "synthkgqa",
        "seed subgraphs (Algorithm 1) as LLM prompt records",
        (("train", "prompts.jsonl"),),
    ),
    FilePart(
        "probekgc_questions",
        "probekgc",
        "multiple-choice questions by key, one split per option difficulty",
        (("easy", "keys/test_simple.jsonl"), ("medium", "keys/test_medium.jsonl"), ("hard", "keys/test_hard.jsonl")),
    ),
    FilePart(
        "probekgc_questions_text",
        "probekgc",
        "multiple-choice questions by label",
        (("easy", "text/test_simple.jsonl"), ("medium", "text/test_medium.jsonl"), ("hard", "text/test_hard.jsonl")),
    ),
)
