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

import gzip
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

WIKIDATA5M_ENTITIES = 4_594_485
WIKIDATA5M_TRIPLES = 20_614_279 + 5_163 + 5_133
RELATIONS = 822
INSTANCE_OF = 31
MIN_TRIPLES = 5_000
ENTITY_BITS = 27  # entity indices < 2^27 in the packed (r, h, t) keys

ENTITIES_PER_CLASS = 200
MIN_CLASSES, MAX_CLASSES = 10, 1000
TYPED_SHARE = 0.9
CLASS_ZIPF_EXPONENT = 1.3
RELATION_ZIPF_EXPONENT = 1.5
HEAD_EXPONENT = 0.6
TAIL_EXPONENT = 0.9
HUB_SHARE = 0.01
HOLDOUT_SHARE = 0.00025
MIN_RULE_UNITS = 100
HEAD_NOISE_SHARE = 0.2
SECOND_LINK_SHARE = 0.2  # compositions: share of ?a with a second ?b
LINKED_MIDDLE_SHARE = 0.9  # compositions: share of ?b with a ?c
MAX_REDRAW_ROUNDS = 50
LINES_PER_WRITE = 1 << 21

MODEL_PARAMETERS = {
    "entities_per_triple": WIKIDATA5M_ENTITIES / WIKIDATA5M_TRIPLES,
    "entities_per_class": ENTITIES_PER_CLASS,
    "classes_range": [MIN_CLASSES, MAX_CLASSES],
    "typed_share": TYPED_SHARE,
    "class_zipf_exponent": CLASS_ZIPF_EXPONENT,
    "relation_zipf_exponent": RELATION_ZIPF_EXPONENT,
    "head_exponent": HEAD_EXPONENT,
    "tail_exponent": TAIL_EXPONENT,
    "hub_share": HUB_SHARE,
    "holdout_share": HOLDOUT_SHARE,
    "min_rule_units": MIN_RULE_UNITS,
    "head_noise_share": HEAD_NOISE_SHARE,
    "second_link_share": SECOND_LINK_SHARE,
    "linked_middle_share": LINKED_MIDDLE_SHARE,
}

SPLITS = ("train", "valid", "test")
MALFORMED_REASONS = ("wrong_field_count", "empty_field", "bad_entity_key", "bad_relation_key")
# Each line has one defect, so the precedence (field count, empty field, keys of h, r, t) names one reason.
MALFORMED_TEMPLATES = {
    "wrong_field_count": ("Q{h}\tP{r}", "Q{h}\tP{r}\tQ{t}\tQ{h}", "Q{h}\tP{r}\tQ{t}\tQ{t}"),
    "empty_field": ("\tP{r}\tQ{t}", "Q{h}\t\tQ{t}", "Q{h}\tP{r}\t"),
    "bad_entity_key": ("X{h}\tP{r}\tQ{t}", "Q0{h}\tP{r}\tQ{t}", "Q{h}\tP{r}\tq{t}", "Q{h}\tP{r}\tQ0"),
    "bad_relation_key": ("Q{h}\tR{r}\tQ{t}", "Q{h}\tP0{r}\tQ{t}", "Q{h}\tp{r}\tQ{t}", "Q{h}\tP{r}a\tQ{t}"),
}

# Seed components: SeedSequence(seed, spawn_key=(component, ...)).
_ENTITY_KEYS, _INSTANCE_OF, _RULES, _GENERIC, _SPLIT, _DIRTY, _ALIASES = range(7)


@dataclass(frozen=True)
class PlantedRule:
    kind: str  # symmetry | inversion | hierarchy | composition
    body: tuple[int, ...]  # relation numbers of the body atoms
    head: int
    confidence: float
    units_per_triple: float  # body pairs (compositions: ?a entities) per generated triple

    @property
    def amie(self) -> str:
        """The rule in AMIE3 syntax: atoms ``?x  P1  ?y`` joined by two spaces, three before ``=>``."""
        if self.kind == "composition":
            body, head = f"?a  P{self.body[0]}  ?b  ?b  P{self.body[1]}  ?c", f"?a  P{self.head}  ?c"
        else:
            body = f"?a  P{self.body[0]}  ?b"
            head = f"?a  P{self.head}  ?b" if self.kind == "hierarchy" else f"?b  P{self.head}  ?a"
        return f"{body}   => {head}"


PLANTED_RULES = (
    PlantedRule("symmetry", (26,), 26, 0.9, 0.004),
    PlantedRule("inversion", (527,), 361, 0.8, 0.006),
    PlantedRule("hierarchy", (50,), 170, 0.7, 0.006),
    PlantedRule("composition", (19, 17), 27, 0.85, 0.01),
    PlantedRule("composition", (108, 159), 551, 0.65, 0.008),
)
RELATION_NAMES = {
    31: ("instance of", "is a", "type"),
    26: ("spouse", "husband", "wife"),
    527: ("has part", "contains"),
    361: ("part of",),
    50: ("author", "writer"),
    170: ("creator", "maker"),
    19: ("place of birth", "birthplace"),
    17: ("country",),
    27: ("country of citizenship", "citizenship", "nationality"),
    108: ("employer", "works for"),
    159: ("headquarters location", "HQ"),
    551: ("residence", "lives in"),
}
GENERIC_RELATIONS = np.array([p for p in range(1, RELATIONS + 1) if p not in RELATION_NAMES], dtype=np.int32)


@dataclass
class Triples:
    """Parallel arrays: entity numbers ``h``, ``t`` (``Q<n>``) or indices, relation numbers ``r`` (``P<n>``)."""

    h: np.ndarray
    r: np.ndarray
    t: np.ndarray

    def __len__(self) -> int:
        return len(self.h)

    def take(self, index: np.ndarray) -> Triples:
        return Triples(self.h[index], self.r[index], self.t[index])

    @staticmethod
    def concat(parts: list[Triples]) -> Triples:
        return Triples(*(np.concatenate([getattr(p, a) for p in parts]).astype(np.int32) for a in "hrt"))


@dataclass
class SyntheticKG:
    seed: int
    triples: int  # distinct triples over all splits
    entities: int
    classes: np.ndarray  # entity numbers of the classes, by class rank
    splits: dict[str, Triples]


def entity_count(triples: int) -> int:
    """``round(triples * 4,594,485 / 20,624,575)``."""
    return round(triples * WIKIDATA5M_ENTITIES / WIKIDATA5M_TRIPLES)


def class_count(entities: int) -> int:
    """``clip(entities // 200, 10, 1000)``."""
    return min(MAX_CLASSES, max(MIN_CLASSES, entities // ENTITIES_PER_CLASS))


def holdout_size(triples: int) -> int:
    """Triples in valid and in test each: ``max(1, round(0.00025 * triples))``."""
    return max(1, round(HOLDOUT_SHARE * triples))


def _rng(seed: int, *component: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=component))


def _power_law_ranks(rng: np.random.Generator, n: int, exponent: float, size: int) -> np.ndarray:
    """Ranks in [0, n): ``floor(x) - 1`` with ``x = (1 + u((n + 1)^(1-a) - 1))^(1/(1-a))``, density ∝ x^-a."""
    b = 1.0 - exponent
    x = (1.0 + rng.random(size) * ((n + 1.0) ** b - 1.0)) ** (1.0 / b)
    return np.minimum(x.astype(np.int64) - 1, n - 1)


def _pack_pairs(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    return (x.astype(np.int64) << 32) | z.astype(np.int64)


def _unpack_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return keys >> 32, keys & 0xFFFFFFFF


def _pack_triples(r: np.ndarray, h: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``r << 54 | h << 27 | t`` (uint64)."""
    return (
        (r.astype(np.uint64) << np.uint64(2 * ENTITY_BITS))
        | (h.astype(np.uint64) << np.uint64(ENTITY_BITS))
        | t.astype(np.uint64)
    )


def _unpack_triples(keys: np.ndarray) -> Triples:
    mask = np.uint64((1 << ENTITY_BITS) - 1)
    return Triples(
        (keys >> np.uint64(ENTITY_BITS) & mask).astype(np.int32),
        (keys >> np.uint64(2 * ENTITY_BITS)).astype(np.int32),
        (keys & mask).astype(np.int32),
    )


def _distinct(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort-based: faster than ``np.unique``'s hashing for integer keys)."""
    keys = np.sort(keys)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def _in_sorted(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Membership of ``values`` in the sorted array ``sorted_keys``."""
    if len(sorted_keys) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def compose(h1: np.ndarray, t1: np.ndarray, h2: np.ndarray, t2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ``(a, c)`` with ``(a, b)`` in the first and ``(b, c)`` in the second pair list (with repeats)."""
    order = np.argsort(h2, kind="stable")
    h2, t2 = h2[order], t2[order]
    lo, hi = np.searchsorted(h2, t1, "left"), np.searchsorted(h2, t1, "right")
    matches = hi - lo
    starts = np.repeat(lo - (np.cumsum(matches) - matches), matches)
    return np.repeat(h1, matches), t2[starts + np.arange(matches.sum())]


def rule_statistics(train: Triples, rule: PlantedRule) -> tuple[int, int]:
    """(support, body size) of ``rule`` on ``train`` (or any triples), AMIE's standard confidence being support / body size.

    Body size = number of distinct (x, z) satisfying the body atoms; support = those for which the head
    atom is a triple: ``r2(x, z)`` for hierarchy and composition, ``r2(z, x)`` for symmetry and inversion.
    """

    def pairs(relation: int) -> tuple[np.ndarray, np.ndarray]:
        mask = train.r == relation
        return train.h[mask], train.t[mask]

    if rule.kind == "composition":
        body = _distinct(_pack_pairs(*compose(*pairs(rule.body[0]), *pairs(rule.body[1]))))
    else:
        body = _distinct(_pack_pairs(*pairs(rule.body[0])))
    head_h, head_t = pairs(rule.head)
    head = _pack_pairs(head_h, head_t) if rule.kind in ("hierarchy", "composition") else _pack_pairs(head_t, head_h)
    return int(np.isin(body, head).sum()), len(body)


def _distinct_pairs(
    rng: np.random.Generator, size: int, lo: int, hi: int, unordered: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """About ``size`` distinct pairs (x, z), x != z, uniform over ``[lo, hi)``; ``unordered``: x < z."""
    x, z = rng.integers(lo, hi, size), rng.integers(lo, hi, size)
    if unordered:
        x, z = np.minimum(x, z), np.maximum(x, z)
    keep = x != z
    return _unpack_pairs(_distinct(_pack_pairs(x[keep], z[keep])))


def _with_heads(rng: np.random.Generator, confidence: float, body: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Head pairs (body orientation): ``round(c * B)`` of the ``B`` distinct body pairs ``body`` (sorted
    packed keys) plus the distinct ``noise`` pairs that are not body pairs."""
    supported = body[np.sort(rng.choice(len(body), round(confidence * len(body)), replace=False))]
    noise = _distinct(noise)
    return np.concatenate([supported, noise[~_in_sorted(noise, body)]])


def _planted(rng: np.random.Generator, rule: PlantedRule, n_triples: int, n_classes: int, n_entities: int) -> Triples:
    """Triples of ``rule``'s relations on non-hub instances (see the module docstring)."""
    units = max(MIN_RULE_UNITS, round(rule.units_per_triple * n_triples))
    lo = n_classes + math.ceil(HUB_SHARE * (n_entities - n_classes))
    if rule.kind == "symmetry":
        x, z = _distinct_pairs(rng, units, lo, n_entities, unordered=True)
        both = np.zeros(len(x), dtype=bool)
        q = rule.confidence / (2.0 - rule.confidence)
        both[rng.choice(len(x), round(q * len(x)), replace=False)] = True
        flip = (rng.random(len(x)) < 0.5) & ~both  # one-way pairs: random direction
        h = np.concatenate([np.where(flip, z, x), z[both]])
        t = np.concatenate([np.where(flip, x, z), x[both]])
        return Triples(h, np.full(len(h), rule.head), t)
    if rule.kind == "composition":
        n_middle = max(2, units // 4)
        n_far = max(2, units // 40)
        roles = lo + rng.choice(n_entities - lo, units + n_middle + n_far, replace=False)
        near, middle, far = roles[:units], roles[units : units + n_middle], roles[units + n_middle :]
        second = rng.random(units) < SECOND_LINK_SHARE
        first_b = _power_law_ranks(rng, n_middle, 0.5, units)
        second_b = (first_b[second] + 1 + rng.integers(0, n_middle - 1, second.sum())) % n_middle
        h1 = np.concatenate([near, near[second]])
        t1 = middle[np.concatenate([first_b, second_b])]
        linked = rng.random(n_middle) < LINKED_MIDDLE_SHARE
        h2, t2 = middle[linked], far[_power_law_ranks(rng, n_far, 0.8, linked.sum())]
        body = _distinct(_pack_pairs(*compose(h1, t1, h2, t2)))
        n_noise = round(HEAD_NOISE_SHARE * len(body))
        noise = _pack_pairs(rng.choice(near, n_noise), rng.choice(far, n_noise))
        head_x, head_z = _unpack_pairs(_with_heads(rng, rule.confidence, body, noise))
        return Triples.concat(
            [
                Triples(h1, np.full(len(h1), rule.body[0]), t1),
                Triples(h2, np.full(len(h2), rule.body[1]), t2),
                Triples(head_x, np.full(len(head_x), rule.head), head_z),
            ]
        )
    x, z = _distinct_pairs(rng, units, lo, n_entities)
    body = _pack_pairs(x, z)
    noise = _pack_pairs(*_distinct_pairs(rng, round(HEAD_NOISE_SHARE * len(body)), lo, n_entities))
    head_x, head_z = _unpack_pairs(_with_heads(rng, rule.confidence, body, noise))
    if rule.kind == "inversion":
        head_x, head_z = head_z, head_x
    return Triples.concat(
        [Triples(x, np.full(len(x), rule.body[0]), z), Triples(head_x, np.full(len(head_x), rule.head), head_z)]
    )


def _instance_of(rng: np.random.Generator, n_classes: int, n_entities: int) -> tuple[Triples, np.ndarray]:
    """(P31 triples, untyped instances): a random 90 % of the instances get one class each."""
    instances = n_classes + rng.permutation(n_entities - n_classes)
    n_typed = round(TYPED_SHARE * len(instances))
    weights = np.arange(1, n_classes + 1, dtype=np.float64) ** -CLASS_ZIPF_EXPONENT
    classes = np.concatenate(
        [np.arange(n_classes), rng.choice(n_classes, n_typed - n_classes, p=weights / weights.sum())]
    )
    typed = instances[:n_typed]
    return Triples(typed, np.full(n_typed, INSTANCE_OF), classes), instances[n_typed:]


def _allocate(total: int, weights: np.ndarray) -> np.ndarray:
    """Counts >= 1 summing to ``total``, ``1 + (total - n) * w / sum(w)`` rounded by largest remainder."""
    share = (total - len(weights)) * weights / weights.sum()
    counts = 1 + np.floor(share).astype(np.int64)
    counts[np.argsort(np.floor(share) - share, kind="stable")[: total - counts.sum()]] += 1
    return counts


def _generic_draw(
    rng: np.random.Generator, r: np.ndarray, first_heads: np.ndarray, n_classes: int, n_entities: int
) -> np.ndarray:
    """Packed keys of triples with relations ``r``, heads ``first_heads`` then power-law heads, power-law
    tails; self-loops shifted to the next instance."""
    n_instances = n_entities - n_classes
    h = n_classes + _power_law_ranks(rng, n_instances, HEAD_EXPONENT, len(r))
    h[: len(first_heads)] = first_heads
    t = n_classes + _power_law_ranks(rng, n_instances, TAIL_EXPONENT, len(r))
    loop = h == t
    t[loop] = n_classes + (t[loop] - n_classes + 1) % n_instances
    return _pack_triples(r, h, t)


def _generic(seed: int, n: int, first_heads: np.ndarray, n_classes: int, n_entities: int) -> Triples:
    """``n`` distinct triples of the generic relations; ``first_heads`` head one triple each."""
    if n < len(first_heads) + len(GENERIC_RELATIONS):
        raise ValueError("too few triples left for the generic relations")
    rng = _rng(seed, _GENERIC, 0)
    relations = rng.permutation(GENERIC_RELATIONS)  # by frequency rank
    weights = (np.arange(len(relations)) + 2.0) ** -RELATION_ZIPF_EXPONENT
    r = rng.permutation(np.repeat(relations, _allocate(n, weights)))
    keys = _distinct(_generic_draw(rng, r, first_heads, n_classes, n_entities))
    for round_ in range(1, MAX_REDRAW_ROUNDS + 1):
        missing = n - len(keys)
        if missing == 0:
            return _unpack_triples(keys)
        rng = _rng(seed, _GENERIC, round_)
        r = rng.choice(relations, missing + missing // 10 + 16, p=weights / weights.sum())
        drawn = _generic_draw(rng, r, np.empty(0, dtype=np.int64), n_classes, n_entities)
        order = np.argsort(drawn, kind="stable")
        first = np.ones(len(drawn), dtype=bool)
        first[order[1:]] = drawn[order[1:]] != drawn[order[:-1]]
        drawn = drawn[first]  # first occurrences, in draw order
        new = np.sort(drawn[~_in_sorted(drawn, keys)][:missing])
        keys = np.insert(keys, np.searchsorted(keys, new), new)
    raise RuntimeError(f"could not draw {n} distinct generic triples in {MAX_REDRAW_ROUNDS} rounds")


def _holdout(triples: Triples, n_entities: int, size: int) -> np.ndarray:
    """Positions of the first ``size`` triples (in order) whose removal leaves every entity and relation
    with at least one remaining triple."""
    entity_degree = np.bincount(triples.h, minlength=n_entities + 1) + np.bincount(triples.t, minlength=n_entities + 1)
    relation_degree = np.bincount(triples.r, minlength=RELATIONS + 1)
    chosen: list[int] = []
    block = 4096
    for start in range(0, len(triples), block):
        rows = zip(*(getattr(triples, a)[start : start + block].tolist() for a in "hrt"))
        for position, (h, r, t) in enumerate(rows, start):
            if entity_degree[h] > 1 and entity_degree[t] > 1 and relation_degree[r] > 1:
                entity_degree[h] -= 1
                entity_degree[t] -= 1
                relation_degree[r] -= 1
                chosen.append(position)
                if len(chosen) == size:
                    return np.array(chosen, dtype=np.int64)
    raise ValueError(f"cannot hold out {size} triples and keep every entity and relation in train")


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
    instance_of, untyped = _instance_of(_rng(seed, _INSTANCE_OF), n_classes, n_entities)
    parts = [instance_of]
    parts += [
        _planted(_rng(seed, _RULES, i), rule, triples, n_classes, n_entities) for i, rule in enumerate(PLANTED_RULES)
    ]
    parts.append(_generic(seed, triples - sum(map(len, parts)), untyped, n_classes, n_entities))
    everything = Triples.concat(parts)
    del parts
    entity_number = (1 + _rng(seed, _ENTITY_KEYS).permutation(n_entities)).astype(np.int32)
    everything.h, everything.t = entity_number[everything.h], entity_number[everything.t]
    everything = everything.take(_rng(seed, _SPLIT).permutation(triples))
    n_holdout = holdout_size(triples)
    held = _holdout(everything, n_entities, 2 * n_holdout)
    in_train = np.ones(triples, dtype=bool)
    in_train[held] = False
    splits = {
        "train": everything.take(in_train),
        "valid": everything.take(held[:n_holdout]),
        "test": everything.take(held[n_holdout:]),
    }
    return SyntheticKG(seed, triples, n_entities, entity_number[:n_classes], splits)


def _triple_lines(triples: Triples) -> pa.Array:
    """``Q<h>\\tP<r>\\tQ<t>\\n`` per triple."""
    h, r, t = (pc.cast(pa.array(getattr(triples, a)), pa.string()) for a in "hrt")
    return pc.binary_join_element_wise("Q", h, "\tP", r, "\tQ", t, "\n", "")


def _write_lines(stream: BinaryIO, lines: pa.Array) -> None:
    """Write the concatenated values of a string array: its data buffer from the first to the last offset."""
    if len(lines) == 0:
        return
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=4 * lines.offset)
    stream.write(memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]])


@contextmanager
def _output(path: Path, compress: bool) -> Iterator[BinaryIO]:
    """``path`` opened for writing; gzip level 6 without name and mtime (reproducible bytes) if ``compress``."""
    with open(path, "wb") as raw:
        if compress:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0) as stream:
                yield stream
        else:
            yield raw


def _dirty_lines(
    rng: np.random.Generator, train: Triples, n_duplicates: int, n_malformed: int
) -> tuple[pa.Array, dict[str, int]]:
    """(repeats of random train lines and malformed lines built from random train triples, shuffled
    together; malformed lines per reason). Reasons are uniform, templates uniform within a reason."""
    duplicates = _triple_lines(train.take(rng.integers(0, len(train), n_duplicates)))
    reasons = rng.integers(0, len(MALFORMED_REASONS), n_malformed)
    variants = rng.random(n_malformed)
    sources = train.take(rng.integers(0, len(train), n_malformed))
    malformed = []
    for reason, variant, h, r, t in zip(
        reasons.tolist(), variants.tolist(), sources.h.tolist(), sources.r.tolist(), sources.t.tolist()
    ):
        templates = MALFORMED_TEMPLATES[MALFORMED_REASONS[reason]]
        malformed.append(templates[int(variant * len(templates))].format(h=h, r=r, t=t) + "\n")
    lines = pa.concat_arrays([duplicates, pa.array(malformed, pa.string())])
    per_reason = {name: int((reasons == i).sum()) for i, name in enumerate(MALFORMED_REASONS)}
    return lines.take(rng.permutation(len(lines))), per_reason


def _write_train(stream: BinaryIO, train: Triples, dirty: pa.Array, positions: np.ndarray) -> None:
    """The train triples in order, with ``dirty[k]`` as line ``positions[k]`` (0-based, sorted)."""
    total = len(train) + len(dirty)
    for start in range(0, total, LINES_PER_WRITE):
        stop = min(start + LINES_PER_WRITE, total)
        lo, hi = np.searchsorted(positions, [start, stop])
        lines = _triple_lines(train.take(slice(start - lo, stop - hi)))
        if hi > lo:
            is_dirty = np.zeros(stop - start, dtype=bool)
            is_dirty[positions[lo:hi] - start] = True
            order = np.empty(stop - start, dtype=np.int64)
            order[~is_dirty] = np.arange(len(lines))
            order[is_dirty] = len(lines) + np.arange(hi - lo)
            lines = pa.concat_arrays([lines, dirty.slice(lo, hi - lo)]).take(order)
        _write_lines(stream, lines)


def _write_entities(stream: BinaryIO, rng: np.random.Generator, n_entities: int, classes: np.ndarray) -> None:
    """``Q<n>\\t<label>[\\t<label> alias 1[\\t<label> alias 2]]\\n`` for n = 1..E; label ``class <n>`` or
    ``entity <n>``, 0-2 extra aliases (uniform)."""
    is_class = np.zeros(n_entities + 1, dtype=bool)
    is_class[classes] = True
    n_aliases = rng.integers(0, 3, n_entities + 1)
    for start in range(1, n_entities + 1, LINES_PER_WRITE):
        stop = min(start + LINES_PER_WRITE, n_entities + 1)
        numbers = pc.cast(pa.array(np.arange(start, stop, dtype=np.int32)), pa.string())
        labels = pc.binary_join_element_wise(
            pc.if_else(pa.array(is_class[start:stop]), "class", "entity"), numbers, " "
        )
        aliases = [
            pc.if_else(
                pa.array(n_aliases[start:stop] >= j), pc.binary_join_element_wise("\t", labels, f" alias {j}", ""), ""
            )
            for j in (1, 2)
        ]
        _write_lines(stream, pc.binary_join_element_wise("Q", numbers, "\t", labels, *aliases, "\n", ""))


def _relation_lines(rng: np.random.Generator) -> str:
    """``P<n>\\t<label>[\\t<alias>...]\\n`` for n = 1..822: the names of RELATION_NAMES, else ``property <n>``
    with 0-2 extra aliases (uniform)."""
    n_aliases = rng.integers(0, 3, RELATIONS + 1)
    lines = []
    for p in range(1, RELATIONS + 1):
        names = RELATION_NAMES.get(p) or (
            f"property {p}",
            *(f"property {p} alias {j}" for j in range(1, n_aliases[p] + 1)),
        )
        lines.append("\t".join((f"P{p}", *names)) + "\n")
    return "".join(lines)


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
    rng = _rng(kg.seed, _DIRTY)
    n_duplicates = round(duplicate_fraction * kg.triples)
    dirty, malformed = _dirty_lines(rng, train, n_duplicates, round(malformed_fraction * kg.triples))
    train_file_lines = len(train) + len(dirty)
    positions = np.sort(rng.choice(train_file_lines, len(dirty), replace=False))
    with _output(out / files["train"], compress) as stream:
        _write_train(stream, train, dirty, positions)
    for split in ("valid", "test"):
        with _output(out / files[split], compress) as stream:
            _write_lines(stream, _triple_lines(kg.splits[split]))
    with _output(out / files["entity"], compress) as stream:
        _write_entities(stream, _rng(kg.seed, _ALIASES, 0), kg.entities, kg.classes)
    with _output(out / files["relation"], compress) as stream:
        stream.write(_relation_lines(_rng(kg.seed, _ALIASES, 1)).encode())

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
