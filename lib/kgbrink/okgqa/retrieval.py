"""OKGQA-P's G-retrieval on one question's graph (paper 004 §4.1, App. A.6; spec 5.1): prizes from the cosine
similarity of the question's embedding to the nodes' and relation types', then triplets or paths.

Triples are ``(h, r, t)`` names. Prizes (:func:`similarity_prizes`): the top k items by similarity (ties
by name) get k .. 1, the rest 0, so p = max(0, k - rank + 1), nodes and relation types ranked apart.
Edge cost C_e = 1. Every function is deterministic: its result depends on the set of triples, not on their
order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from kgbrink.okgqa.answering import cosine, prizes, rank, top_triplets
from kgbrink.okgqa.pcst import pcst

Triple = tuple[str, str, str]

# FS-T, FS-P, FS-SG (spec 5.3); "pcst" because predict's context "subgraph" is the whole question subgraph
CONTEXTS = ("triplets", "paths", "pcst")


def similarity_prizes(question: Sequence[float], vectors: Mapping[str, Sequence[float]], k: int) -> dict[str, int]:
    """Each item of ``vectors`` among the k most similar to ``question`` with its prize (k for the most
    similar), by cosine similarity, ties by name (:func:`kgbrink.okgqa.answering.rank`)."""
    return prizes(rank({item: cosine(question, vector) for item, vector in vectors.items()}), k)


def paths(
    triples: Iterable[Triple],
    node_prizes: Mapping[str, int],
    relation_prizes: Mapping[str, int],
    k: int,
    max_edges: int = 3,
    max_paths: int = 10,
    cost: float = 1.0,
    max_pops: int = 100_000,
) -> list[tuple[float, tuple[Triple, ...]]]:
    """Path retrieval (§4.1, App. A.6): ``(score, triples)`` of at most ``max_paths`` paths, best first.

    From the k highest-prize nodes, a priority queue pops the path of highest S(P) = Σ p_v + Σ p_e -
    Σ c_e (ties: the smaller triple sequence) and extends it by every triple joining its last node to a
    node not on it (triples are walked either way; a self-loop never extends a path). A path of
    ``max_edges`` triples, or one no triple extends, is kept unless the same triples were kept in the other
    direction; the search ends with ``max_paths`` paths, an empty queue or ``max_pops`` pops."""
    adjacency: dict[str, list[tuple[Triple, str]]] = {}
    for triple in sorted({tuple(t[:3]) for t in triples}):
        h, _, t = triple
        if h != t:
            adjacency.setdefault(h, []).append((triple, t))
            adjacency.setdefault(t, []).append((triple, h))
    starts = [node for node in rank(dict(node_prizes)) if node in adjacency][:k]
    queue = [(-float(node_prizes[node]), (), (node,)) for node in starts]
    heapq.heapify(queue)
    kept: list[tuple[float, tuple[Triple, ...]]] = []
    seen: set[tuple[Triple, ...]] = set()
    pops = 0
    while queue and len(kept) < max_paths and pops < max_pops:
        negative, walked, nodes = heapq.heappop(queue)
        pops += 1
        steps = [(triple, other) for triple, other in adjacency[nodes[-1]] if other not in nodes]
        if len(walked) == max_edges or not steps:
            canonical = min(walked, walked[::-1])
            if walked and canonical not in seen:
                seen.add(canonical)
                kept.append((-negative, walked))
            continue
        for triple, other in steps:
            gain = node_prizes.get(other, 0) + relation_prizes.get(triple[1], 0) - cost
            heapq.heappush(queue, (negative - gain, (*walked, triple), (*nodes, other)))
    return sorted(kept, key=lambda found: (-found[0], found[1]))


def path_triples(found: Sequence[tuple[float, tuple[Triple, ...]]]) -> list[Triple]:
    """The distinct triples of retrieved paths, path by path, each in path order (the facts rendered)."""
    return list(dict.fromkeys(triple for _, walked in found for triple in walked))


def subgraph(
    triples: Iterable[Triple], node_prizes: Mapping[str, int], relation_prizes: Mapping[str, int], cost: float = 1.0
) -> list[Triple]:
    """Subgraph retrieval (§4.1; spec 5.1): the triples of the Prize-Collecting Steiner Tree
    (:func:`kgbrink.okgqa.pcst.pcst`), in (h, r, t) order.

    G-Retriever's construction (``retrieval_via_pcst``): a triple whose relation's prize p_e is at most C_e is
    an edge of cost C_e - p_e; one with p_e > C_e becomes a virtual node of prize p_e - C_e joined to h and t
    by edges of cost 0. The result is the tree's real edges and the triples of its virtual nodes."""
    distinct = sorted({tuple(t[:3]) for t in triples})
    names = sorted({node for h, _, t in distinct for node in (h, t)})
    index = {name: i for i, name in enumerate(names)}
    node_values = [float(node_prizes.get(name, 0)) for name in names]
    edges, costs, owner = [], [], []  # owner: the triple each edge stands for, or None for a virtual edge
    virtual: list[Triple] = []
    for triple in distinct:
        h, r, t = triple
        prize = float(relation_prizes.get(r, 0))
        if prize <= cost:
            edges.append((index[h], index[t]))
            costs.append(cost - prize)
            owner.append(triple)
            continue
        node = len(names) + len(virtual)
        virtual.append(triple)
        node_values.append(prize - cost)
        edges += [(index[h], node), (node, index[t])]
        costs += [0.0, 0.0]
        owner += [None, None]
    vertices, kept = pcst(node_values, edges, costs)
    chosen = {owner[e] for e in kept if owner[e] is not None}
    chosen |= {virtual[v - len(names)] for v in vertices if v >= len(names)}
    return sorted(chosen)


def retrieved(
    context: str,
    triples: Sequence[Triple],
    question: Sequence[float],
    node_vectors: Mapping[str, Sequence[float]],
    relation_vectors: Mapping[str, Sequence[float]],
    k: int,
    max_edges: int = 3,
    max_paths: int = 10,
) -> list[Triple]:
    """The triples ``context`` (:data:`CONTEXTS`) retrieves from ``triples`` for ``question``, in the order
    they are shown: triplets by prize, paths path by path, a subgraph in (h, r, t) order."""
    node_similarities = {node: cosine(question, vector) for node, vector in node_vectors.items()}
    relation_similarities = {relation: cosine(question, vector) for relation, vector in relation_vectors.items()}
    return by_similarity(context, triples, node_similarities, relation_similarities, k, max_edges, max_paths)


def by_similarity(
    context: str,
    triples: Sequence[Triple],
    node_similarities: Mapping[str, float],
    relation_similarities: Mapping[str, float],
    k: int,
    max_edges: int = 3,
    max_paths: int = 10,
) -> list[Triple]:
    """:func:`retrieved` from the question's cosine similarity to each node and relation."""
    node_prizes = prizes(rank(node_similarities), k)
    relation_prizes = prizes(rank(relation_similarities), k)
    if context == "triplets":  # the k distinct triples of highest p(h) + p(r) + p(t), ties by (h, r, t)
        return top_triplets(triples, node_prizes, relation_prizes, k)
    if context == "paths":
        return path_triples(paths(triples, node_prizes, relation_prizes, k, max_edges, max_paths))
    if context == "pcst":
        return subgraph(triples, node_prizes, relation_prizes)
    raise ValueError(f"unknown retrieval context {context!r} (known: {', '.join(CONTEXTS)})")
