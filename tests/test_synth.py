"""``kgbrink synth``: hand-checkable invariants of the generated files, re-derived here from the files
themselves (own parser, own malformed-line classifier, own rule evaluation). No Spark."""

from __future__ import annotations

import gzip
import json
import math
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.core.jobs import JobContext
from kgbrink.jobs import synth as synth_job
from kgbrink.kg import synth

ENTITY = re.compile(r"Q[1-9][0-9]*")
RELATION = re.compile(r"P[1-9][0-9]*")
TRIPLE_LINE = re.compile(r"Q[1-9][0-9]*\tP[1-9][0-9]*\tQ[1-9][0-9]*")
AMIE_ATOM = r"\?[a-z]  P[1-9][0-9]*  \?[a-z]"
AMIE_RULE = re.compile(rf"{AMIE_ATOM}(?:  {AMIE_ATOM})*   => {AMIE_ATOM}")
FILES = (
    "wikidata5m_transductive_train.txt",
    "wikidata5m_transductive_valid.txt",
    "wikidata5m_transductive_test.txt",
    "wikidata5m_entity.txt",
    "wikidata5m_relation.txt",
)
SPLIT_FILES = {"train": FILES[0], "valid": FILES[1], "test": FILES[2]}


def malformed_reason(line: str) -> str | None:
    """The ingest's precedence: field count, then an empty field, then the keys of h, r, t in order."""
    fields = line.split("\t")
    if len(fields) != 3:
        return "wrong_field_count"
    if any(f.strip() == "" for f in fields):
        return "empty_field"
    h, r, t = (f.strip() for f in fields)
    if not ENTITY.fullmatch(h):
        return "bad_entity_key"
    if not RELATION.fullmatch(r):
        return "bad_relation_key"
    if not ENTITY.fullmatch(t):
        return "bad_entity_key"
    return None


def read_lines(path: Path) -> list[str]:
    text = path.read_text()
    assert text.endswith("\n")
    return text[:-1].split("\n")


def read_dataset(directory: Path) -> dict:
    """Lines of the five files, the triples of each split and the malformed lines of train."""
    lines = {split: read_lines(directory / name) for split, name in SPLIT_FILES.items()}
    train_ok = [line for line in lines["train"] if malformed_reason(line) is None]
    return {
        "lines": lines,
        "train_ok": train_ok,
        "malformed": [line for line in lines["train"] if malformed_reason(line) is not None],
        "triples": {
            "train": {tuple(line.split("\t")) for line in train_ok},
            "valid": [tuple(line.split("\t")) for line in lines["valid"]],
            "test": [tuple(line.split("\t")) for line in lines["test"]],
        },
        "entities": read_lines(directory / "wikidata5m_entity.txt"),
        "relations": read_lines(directory / "wikidata5m_relation.txt"),
        "manifest": json.loads((directory / "synth_manifest.json").read_text()),
    }


def evaluate_rule(rule: str, triples: set[tuple[str, str, str]]) -> tuple[int, int]:
    """(support, body size) of an AMIE3 rule: body size = distinct (X, Y) bindings of the head atom's
    variables satisfying the body; support = those for which the head atom is a triple."""
    body_text, head_text = rule.split("   => ")
    tokens = body_text.split("  ")
    body = [tokens[i : i + 3] for i in range(0, len(tokens), 3)]
    head_x, head_r, head_y = head_text.split("  ")
    pairs = defaultdict(set)
    for h, r, t in triples:
        pairs[r].add((h, t))
    bindings = [{body[0][0]: h, body[0][2]: t} for h, t in pairs[body[0][1]]]
    for x, relation, y in body[1:]:  # each further atom shares its first variable with earlier ones
        out_of = defaultdict(list)
        for h, t in pairs[relation]:
            out_of[h].append(t)
        bindings = [{**b, y: t} for b in bindings for t in out_of[b[x]]]
    body_pairs = {(b[head_x], b[head_y]) for b in bindings}
    return len(body_pairs & pairs[head_r]), len(body_pairs)


def rule_tolerance(confidence: float, body_size: int) -> float:
    """Three binomial standard errors: 3 * sqrt(c (1 - c) / B)."""
    return 3 * math.sqrt(confidence * (1 - confidence) / body_size)


def check_dataset(directory: Path, triples: int, malformed_fraction: float, duplicate_fraction: float) -> dict:
    """All invariants that hold for any arguments; returns the parsed dataset."""
    data = read_dataset(directory)
    manifest, lines, split_triples = data["manifest"], data["lines"], data["triples"]
    assert manifest["files"] == list(FILES)
    # Format: every line of valid/test and every non-malformed train line is a triple line.
    for line in lines["valid"] + lines["test"] + data["train_ok"]:
        assert TRIPLE_LINE.fullmatch(line), line
    # Counts.
    assert manifest["triples"] == triples
    assert len(lines["train"]) == manifest["train_file_lines"]
    assert len(lines["valid"]) == len(lines["test"]) == max(1, round(0.00025 * triples))
    assert manifest["splits"] == {
        "train": len(split_triples["train"]),
        "valid": len(lines["valid"]),
        "test": len(lines["test"]),
    }
    assert sum(manifest["splits"].values()) == triples
    assert (
        len(data["train_ok"]) - len(split_triples["train"])
        == manifest["duplicate_lines"]
        == round(duplicate_fraction * triples)
    )
    reasons = Counter(malformed_reason(line) for line in data["malformed"])
    assert dict(reasons) == {k: v for k, v in manifest["malformed_lines"].items() if v}
    assert sum(manifest["malformed_lines"].values()) == round(malformed_fraction * triples)
    assert manifest["train_file_lines"] == manifest["splits"]["train"] + manifest["duplicate_lines"] + sum(
        manifest["malformed_lines"].values()
    )
    # Distinct within and across splits.
    valid, test = set(split_triples["valid"]), set(split_triples["test"])
    assert len(valid) == len(split_triples["valid"]) and len(test) == len(split_triples["test"])
    assert not (valid & test) and not (valid & split_triples["train"]) and not (test & split_triples["train"])
    # Transductive; entity and relation files list exactly the train entities and relations.
    train_entities = {e for h, _, t in split_triples["train"] for e in (h, t)}
    train_relations = {r for _, r, _ in split_triples["train"]}
    for h, r, t in valid | test:
        assert h in train_entities and t in train_entities and r in train_relations
    entity_keys = [line.split("\t")[0] for line in data["entities"]]
    relation_keys = [line.split("\t")[0] for line in data["relations"]]
    assert len(entity_keys) == len(set(entity_keys)) == manifest["entities"] == synth.entity_count(triples)
    assert set(entity_keys) == train_entities
    assert len(relation_keys) == manifest["relations"] == 822
    assert set(relation_keys) == train_relations
    for line, pattern in [(line, ENTITY) for line in data["entities"]] + [
        (line, RELATION) for line in data["relations"]
    ]:
        key, *names = line.split("\t")
        assert pattern.fullmatch(key) and 1 <= len(names) <= 3 and all(names), line
    # Planted rules: manifest values recomputed from the train file; exact construction on all triples.
    everything = split_triples["train"] | valid | test
    for rule in manifest["planted_rules"]:
        assert AMIE_RULE.fullmatch(rule["rule"]), rule["rule"]
        support, body_size = evaluate_rule(rule["rule"], split_triples["train"])
        assert (rule["support"], rule["body_size"]) == (support, body_size), rule
        assert rule["std_confidence"] == pytest.approx(support / body_size, abs=1e-6)
        c = rule["planted_confidence"]
        assert 0.6 <= c <= 0.95
        assert abs(rule["std_confidence"] - c) <= rule_tolerance(c, body_size), rule
        support_all, body_all = evaluate_rule(rule["rule"], everything)
        assert (rule["kg_support"], rule["kg_body_size"]) == (support_all, body_all), rule
        if rule["type"] == "symmetry":  # k two-way pairs of M: support 2k, body M + k, k = round(q M)
            k = support_all // 2
            assert support_all == 2 * k and k == round(c / (2 - c) * (body_all - k))
        else:
            assert support_all == round(c * body_all)
    return data


@pytest.fixture(scope="module")
def generated(config, tmp_path_factory) -> tuple[Path, synth_job.JobSummary]:
    """The job with conf/test.yaml defaults (20,000 triples, seed 7) and 1 % malformed, 1 % duplicate lines."""
    out = tmp_path_factory.mktemp("synth") / "kg"
    options = synth_job.SynthOptions(out=str(out), malformed_fraction=0.01, duplicate_fraction=0.01)
    summary = synth_job.run(JobContext(None, config), options)
    return out, summary


def test_dataset_invariants(generated, config):
    out, summary = generated
    data = check_dataset(out, config.synth.triples, 0.01, 0.01)
    manifest = data["manifest"]
    assert manifest["seed"] == config.synth.seed
    assert summary.counts["lines"] == {split: len(lines) for split, lines in data["lines"].items()}
    assert summary.counts["triples"] == manifest["splits"]
    assert summary.counts["malformed_lines"] == manifest["malformed_lines"]
    assert summary.counts["duplicate_lines"] == manifest["duplicate_lines"] == 200
    assert summary.counts["entities"] == manifest["entities"] and summary.counts["relations"] == 822
    assert summary.counts["top_class_in_degree"] == manifest["top_class"]["in_degree"]
    assert all(count > 0 for count in manifest["malformed_lines"].values())
    assert {"generate", "write"} <= set(summary.timings)


def test_malformed_lines_have_one_defect(generated):
    """A malformed line with three non-empty fields has exactly one bad key, so no order could name two."""
    for line in read_dataset(generated[0])["malformed"]:
        fields = line.split("\t")
        if len(fields) == 3 and all(fields):
            patterns = (ENTITY, RELATION, ENTITY)
            assert sum(not p.fullmatch(f) for p, f in zip(patterns, fields)) == 1, line
        elif len(fields) == 3:
            assert sum(f == "" for f in fields) == 1, line
        else:
            assert len(fields) in (2, 4) and all(fields), line


def test_top_class_dominates_instance_of(generated):
    data = read_dataset(generated[0])
    train, manifest = data["triples"]["train"], data["manifest"]
    p31 = Counter(t for _, r, t in train if r == "P31")
    in_degree = Counter(t for _, _, t in train)
    top, count = p31.most_common(1)[0]
    assert manifest["top_class"] == {"key": top, "in_degree": in_degree[top]}
    assert in_degree.most_common(1)[0][0] == top
    assert 0.2 <= count / sum(p31.values()) <= 0.5
    assert len(p31) == manifest["classes"]
    typed = {h for h, r, _ in train if r == "P31"}
    assert len(typed) == pytest.approx(0.9 * (manifest["entities"] - manifest["classes"]), rel=0.01)


def test_heavy_tails(generated):
    train = read_dataset(generated[0])["triples"]["train"]
    relation_counts = sorted(Counter(r for _, r, _ in train).values(), reverse=True)
    assert sum(relation_counts[:10]) > 0.5 * len(train)
    assert relation_counts[0] > 100 * relation_counts[len(relation_counts) // 2]
    degrees = sorted(Counter(e for h, _, t in train for e in (h, t)).values(), reverse=True)
    assert degrees[0] > 100 * degrees[len(degrees) // 2]


def test_same_seed_same_bytes_other_seed_other_files(tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        kg = synth.generate(6000, seed)
        synth.write_dataset(kg, tmp_path / name, 0.02, 0.02)
        runs[name] = {f: (tmp_path / name / f).read_bytes() for f in (*FILES, "synth_manifest.json")}
    assert runs["a"] == runs["b"]
    assert runs["a"]["wikidata5m_transductive_train.txt"] != runs["c"]["wikidata5m_transductive_train.txt"]
    assert runs["a"]["wikidata5m_entity.txt"] != runs["c"]["wikidata5m_entity.txt"]


def test_gzip_files_hold_the_same_lines(tmp_path):
    kg = synth.generate(5000, 11)
    plain = synth.write_dataset(kg, tmp_path / "plain", 0.01, 0.01)
    packed = [synth.write_dataset(kg, tmp_path / name, 0.01, 0.01, compress=True) for name in ("gz1", "gz2")]
    assert packed[0]["files"] == [f + ".gz" for f in FILES]
    assert {k: v for k, v in packed[0].items() if k != "files"} == {k: v for k, v in plain.items() if k != "files"}
    for name in FILES:
        compressed = (tmp_path / "gz1" / f"{name}.gz").read_bytes()
        assert compressed == (tmp_path / "gz2" / f"{name}.gz").read_bytes()
        assert gzip.decompress(compressed) == (tmp_path / "plain" / name).read_bytes()


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="at least"):
        synth.generate(synth.MIN_TRIPLES - 1, 1)
    with pytest.raises(ValueError, match="malformed_fraction"):
        synth.write_dataset(synth.generate(synth.MIN_TRIPLES, 1), tmp_path, malformed_fraction=1.5)


@settings(max_examples=4, deadline=None)
@given(
    triples=st.integers(synth.MIN_TRIPLES, 9_000),
    seed=st.integers(0, 2**32 - 1),
    malformed_fraction=st.sampled_from([0.0, 0.003, 0.05]),
    duplicate_fraction=st.sampled_from([0.0, 0.004, 0.05]),
)
def test_invariants_hold_for_any_arguments(triples, seed, malformed_fraction, duplicate_fraction):
    with tempfile.TemporaryDirectory() as directory:
        synth.write_dataset(synth.generate(triples, seed), directory, malformed_fraction, duplicate_fraction)
        check_dataset(Path(directory), triples, malformed_fraction, duplicate_fraction)
