"""Deterministic generator of a knowledge graph shaped like Wikidata5m, in the Wikidata5m file format.

Model, for ``N`` distinct triples over all splits and a seed ``s``:

* Entities: ``E = round(N * 4,594,485 / 20,624,575)`` (Wikidata5m's entities per triple). The first
  ``C = clip(E // 200, 10, 1000)`` are classes, the other ``E - C`` instances are ranked by popularity;
  keys ``Q1..QE`` are a seeded permutation of these indices.
* Relations: exactly 822, keys ``P1..P822``.
  ``P31`` (instance of) links a random 90 % of the instances to one class each: class ``k`` gets one
  instance for every ``k``, the remaining tails are Zipf over class rank, ``P(k) ∝ (k + 1)^-1.3``
  (top class ≈ 28 % of P31, ≈ 1.1M instances at 20M triples).
  11 relations carry the planted rules below. The other 810 are "generic": counts ``∝ (rank + 2)^-1.5``
  (rank = seeded order; at least 1 each), head and tail ranks drawn from the continuous power law
  ``x^-a`` on ``[1, n + 1)``, floored (``a = 0.6`` for heads, ``0.9`` for tails: at 20M triples the top
  instance has in-degree ≈ 280k, the top out-degree ≈ 9k), self-loops shifted to the next instance,
  duplicates redrawn. The 10 % untyped instances are the heads of generic triples, so every entity occurs.
* Planted rules (AMIE3 syntax, planted standard confidence ``c``; sizes per triple ``N``):
  symmetry ``?a P26 ?b => ?b P26 ?a`` (c = 0.9, 0.004 N pairs), inversion
  ``?a P527 ?b => ?b P361 ?a`` (0.8, 0.006 N), hierarchy ``?a P50 ?b => ?a P170 ?b`` (0.7, 0.006 N),
  compositions ``?a P19 ?b ?b P17 ?c => ?a P27 ?c`` (0.85, 0.01 N) and
  ``?a P108 ?b ?b P159 ?c => ?a P551 ?c`` (0.65, 0.008 N); at least 100 units each.
  Bodies use non-hub instances (outside the top 1 % popularity ranks); in a composition 20 % of the ``?a``
  have a second ``?b`` and 90 % of the ``?b`` have one ``?c``. Of the ``B`` distinct body pairs
  exactly ``round(c * B)`` get the head fact (symmetry: ``round(q * M)`` of ``M`` pairs are emitted in
  both directions, ``q = c / (2 - c)``, so that ``2qM / (M + qM) = c``), and extra head-only facts
  (20 % of ``B``) never complete a body pair: before the split, standard confidence
  ``support / B = round(c * B) / B``.
* Splits: valid and test hold ``max(1, round(0.00025 N))`` triples each, taken in a seeded random
  order, skipping triples whose removal would leave an entity or relation without a train triple
  (transductive).
* Dirty lines: ``round(f * N)`` malformed lines (reasons drawn uniformly) and ``round(g * N)`` exact
  repeats of train lines go to seeded positions of the train file.
* Randomness: one ``numpy.random.Generator`` per component, seeded with
  ``SeedSequence(s, spawn_key=(component, ...))``; same arguments give byte-identical files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgbrink.kg.synth_files import (
    dirty_lines,
    open_output,
    relation_lines,
    triple_lines,
    write_entities,
    write_lines,
    write_train,
)
from kgbrink.kg.synth_graph import (
    ENTITY_BITS,
    MODEL_PARAMETERS,
    PLANTED_RULES,
    SEED_ALIASES,
    SEED_DIRTY,
    SEED_ENTITY_KEYS,
    SEED_INSTANCE_OF,
    SEED_RULES,
    SEED_SPLIT,
    Triples,
    class_count,
    component_rng,
    entity_count,
    generic_triples,
    holdout_positions,
    holdout_size,
    instance_of_triples,
    planted_triples,
    rule_statistics,
)

MIN_TRIPLES = 5_000
SPLITS = ("train", "valid", "test")


@dataclass
class SyntheticKG:
    seed: int
    triples: int  # distinct triples over all splits
    entities: int
    classes: np.ndarray  # entity numbers of the classes, by class rank
    splits: dict[str, Triples]


def generate(triples: int, seed: int) -> SyntheticKG:
    """The ``triples`` distinct triples of the model (module docstring), split into train/valid/test."""
    if triples < MIN_TRIPLES:
        raise ValueError(f"triples must be at least {MIN_TRIPLES}, got {triples}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    n_entities = entity_count(triples)
    if n_entities >= 1 << ENTITY_BITS:
        raise ValueError(f"triples={triples} needs {n_entities} entities, more than 2^{ENTITY_BITS}")
    n_classes = class_count(n_entities)
    instance_of, untyped = instance_of_triples(component_rng(seed, SEED_INSTANCE_OF), n_classes, n_entities)
    parts = [instance_of]
    parts += [
        planted_triples(component_rng(seed, SEED_RULES, i), rule, triples, n_classes, n_entities)
        for i, rule in enumerate(PLANTED_RULES)
    ]
    parts.append(generic_triples(seed, triples - sum(map(len, parts)), untyped, n_classes, n_entities))
    everything = Triples.concat(parts)
    del parts
    entity_number = (1 + component_rng(seed, SEED_ENTITY_KEYS).permutation(n_entities)).astype(np.int32)
    everything.h, everything.t = entity_number[everything.h], entity_number[everything.t]
    everything = everything.take(component_rng(seed, SEED_SPLIT).permutation(triples))
    n_holdout = holdout_size(triples)
    held = holdout_positions(everything, n_entities, 2 * n_holdout)
    in_train = np.ones(triples, dtype=bool)
    in_train[held] = False
    splits = {
        "train": everything.take(in_train),
        "valid": everything.take(held[:n_holdout]),
        "test": everything.take(held[n_holdout:]),
    }
    return SyntheticKG(seed, triples, n_entities, entity_number[:n_classes], splits)


def write_dataset(
    kg: SyntheticKG,
    out: str | Path,
    malformed_fraction: float = 0.0,
    duplicate_fraction: float = 0.0,
    compress: bool = False,
) -> dict:
    """Write ``kg`` in the Wikidata5m format (``.txt.gz`` instead of ``.txt`` if ``compress``) and
    ``synth_manifest.json`` into ``out``; returns the manifest.

    The train file gets ``round(malformed_fraction * kg.triples)`` malformed lines and
    ``round(duplicate_fraction * kg.triples)`` repeated train lines at seeded positions.
    """
    for name, fraction in (("malformed_fraction", malformed_fraction), ("duplicate_fraction", duplicate_fraction)):
        if not 0 <= fraction <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {fraction}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".txt.gz" if compress else ".txt"
    files = {split: f"wikidata5m_transductive_{split}{suffix}" for split in SPLITS}
    files |= {"entity": f"wikidata5m_entity{suffix}", "relation": f"wikidata5m_relation{suffix}"}
    train = kg.splits["train"]
    rng = component_rng(kg.seed, SEED_DIRTY)
    n_duplicates = round(duplicate_fraction * kg.triples)
    dirty, malformed = dirty_lines(rng, train, n_duplicates, round(malformed_fraction * kg.triples))
    train_file_lines = len(train) + len(dirty)
    positions = np.sort(rng.choice(train_file_lines, len(dirty), replace=False))
    with open_output(out / files["train"], compress) as stream:
        write_train(stream, train, dirty, positions)
    for split in ("valid", "test"):
        with open_output(out / files[split], compress) as stream:
            write_lines(stream, triple_lines(kg.splits[split]))
    with open_output(out / files["entity"], compress) as stream:
        write_entities(stream, component_rng(kg.seed, SEED_ALIASES, 0), kg.entities, kg.classes)
    with open_output(out / files["relation"], compress) as stream:
        stream.write(relation_lines(component_rng(kg.seed, SEED_ALIASES, 1)).encode())

    in_degree = np.bincount(train.t, minlength=kg.entities + 1)
    top_class = int(kg.classes[np.argmax(in_degree[kg.classes])])
    whole = Triples.concat([kg.splits[split] for split in SPLITS])
    rules = []
    for rule in PLANTED_RULES:
        support, body_size = rule_statistics(train, rule)
        kg_support, kg_body_size = rule_statistics(whole, rule)
        rules.append(
            {
                "rule": rule.amie,
                "type": rule.kind,
                "head_relation": f"P{rule.head}",
                "body_relations": [f"P{p}" for p in rule.body],
                "planted_confidence": rule.confidence,
                "support": support,
                "body_size": body_size,
                "std_confidence": round(support / body_size, 6),
                # on all splits: what `kgbrink mine` (mining.splits) and AMIE3 on the whole KG count
                "kg_support": kg_support,
                "kg_body_size": kg_body_size,
            }
        )
    manifest = {
        "seed": kg.seed,
        "triples": kg.triples,
        "entities": kg.entities,
        "classes": len(kg.classes),
        "relations": int(np.count_nonzero(np.bincount(train.r))),
        "splits": {split: len(kg.splits[split]) for split in SPLITS},
        "train_file_lines": train_file_lines,
        "malformed_fraction": malformed_fraction,
        "duplicate_fraction": duplicate_fraction,
        "malformed_lines": malformed,
        "duplicate_lines": n_duplicates,
        "top_class": {"key": f"Q{top_class}", "in_degree": int(in_degree[top_class])},
        "planted_rules": rules,
        "model": MODEL_PARAMETERS,
        "files": list(files.values()),
    }
    (out / "synth_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
