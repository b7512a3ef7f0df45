"""The graph model of :mod:`kgbrink.kg.synth` (its docstring states the model): the constants, the
planted rules, and numpy generators of each part of the graph, on entity indices (classes first, then
instances by popularity rank; :func:`kgbrink.kg.synth.generate` maps them to keys and splits the triples).

Parts: ``instance of`` (Zipf over class rank), the planted-rule relations (bodies on non-hub instances,
exact planted standard confidence), the generic relations (Zipf relation counts, power-law head and tail
ranks, so that a few hubs get most edges, distinct triples redrawn) and the transductive holdout. Each
part draws from its own seeded stream (:func:`component_rng`), so it does not depend on the others' draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kgbrink.graph.local import distinct

WIKIDATA5M_ENTITIES = 4_594_485
WIKIDATA5M_TRIPLES = 20_614_279 + 5_163 + 5_133
RELATIONS = 822
INSTANCE_OF = 31
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

# Seed components: SeedSequence(seed, spawn_key=(component, ...)).
SEED_ENTITY_KEYS, SEED_INSTANCE_OF, SEED_RULES, SEED_GENERIC, SEED_SPLIT, SEED_DIRTY, SEED_ALIASES = range(7)


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


def entity_count(triples: int) -> int:
    """``round(triples * 4,594,485 / 20,624,575)``."""
    return round(triples * WIKIDATA5M_ENTITIES / WIKIDATA5M_TRIPLES)


def class_count(entities: int) -> int:
    """``clip(entities // 200, 10, 1000)``."""
    return min(MAX_CLASSES, max(MIN_CLASSES, entities // ENTITIES_PER_CLASS))


def holdout_size(triples: int) -> int:
    """Triples in valid and in test each: ``max(1, round(0.00025 * triples))``."""
    return max(1, round(HOLDOUT_SHARE * triples))


def component_rng(seed: int, *component: int) -> np.random.Generator:
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
        body = distinct(_pack_pairs(*compose(*pairs(rule.body[0]), *pairs(rule.body[1]))))
    else:
        body = distinct(_pack_pairs(*pairs(rule.body[0])))
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
    return _unpack_pairs(distinct(_pack_pairs(x[keep], z[keep])))


def _with_heads(rng: np.random.Generator, confidence: float, body: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Head pairs (body orientation): ``round(c * B)`` of the ``B`` distinct body pairs ``body`` (sorted
    packed keys) plus the distinct ``noise`` pairs that are not body pairs."""
    supported = body[np.sort(rng.choice(len(body), round(confidence * len(body)), replace=False))]
    noise = distinct(noise)
    return np.concatenate([supported, noise[~_in_sorted(noise, body)]])


def planted_triples(
    rng: np.random.Generator, rule: PlantedRule, n_triples: int, n_classes: int, n_entities: int
) -> Triples:
    """Triples of ``rule``'s relations on non-hub instances (model: :mod:`kgbrink.kg.synth`)."""
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
        body = distinct(_pack_pairs(*compose(h1, t1, h2, t2)))
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


def instance_of_triples(rng: np.random.Generator, n_classes: int, n_entities: int) -> tuple[Triples, np.ndarray]:
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


def generic_triples(seed: int, n: int, first_heads: np.ndarray, n_classes: int, n_entities: int) -> Triples:
    """``n`` distinct triples of the generic relations; ``first_heads`` head one triple each."""
    if n < len(first_heads) + len(GENERIC_RELATIONS):
        raise ValueError("too few triples left for the generic relations")
    rng = component_rng(seed, SEED_GENERIC, 0)
    relations = rng.permutation(GENERIC_RELATIONS)  # by frequency rank
    weights = (np.arange(len(relations)) + 2.0) ** -RELATION_ZIPF_EXPONENT
    r = rng.permutation(np.repeat(relations, _allocate(n, weights)))
    keys = distinct(_generic_draw(rng, r, first_heads, n_classes, n_entities))
    for round_ in range(1, MAX_REDRAW_ROUNDS + 1):
        missing = n - len(keys)
        if missing == 0:
            return _unpack_triples(keys)
        rng = component_rng(seed, SEED_GENERIC, round_)
        r = rng.choice(relations, missing + missing // 10 + 16, p=weights / weights.sum())
        drawn = _generic_draw(rng, r, np.empty(0, dtype=np.int64), n_classes, n_entities)
        order = np.argsort(drawn, kind="stable")
        first = np.ones(len(drawn), dtype=bool)
        first[order[1:]] = drawn[order[1:]] != drawn[order[:-1]]
        drawn = drawn[first]  # first occurrences, in draw order
        new = np.sort(drawn[~_in_sorted(drawn, keys)][:missing])
        keys = np.insert(keys, np.searchsorted(keys, new), new)
    raise RuntimeError(f"could not draw {n} distinct generic triples in {MAX_REDRAW_ROUNDS} rounds")


def holdout_positions(triples: Triples, n_entities: int, size: int) -> np.ndarray:
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
