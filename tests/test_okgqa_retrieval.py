"""OKGQA-P's G-retrieval on one question's graph (kgbrink.okgqa.retrieval, kgbrink.okgqa.pcst; paper 004 §4.1,
App. A.6): E6's triplets from embeddings, paths and PCST subgraphs worked out by hand, and their invariants on
random multigraphs, the PCST against the optimum by brute force (no Spark)."""

from __future__ import annotations

import itertools
import random

import networkx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.okgqa import answering, retrieval
from kgbrink.okgqa.pcst import pcst

QUESTION = [1.0, 0.0]
# cosine to QUESTION: Aristotle > Alexander_the_Great > Plato > Rome; influencedBy > wikiPageWikiLink
NODES = {"Aristotle": [1, 0.1], "Alexander_the_Great": [1, 0.3], "Plato": [1, 0.6], "Rome": [0, 1]}
RELATIONS = {"influencedBy": [1, 0.05], "wikiPageWikiLink": [1, 0.5]}


def test_e6_triplets_from_embeddings():
    """E6, k = 3: nodes 3, 2, 1 and relations 3, 2 from the cosine ranks; (Alexander_the_Great, influencedBy,
    Aristotle) = 8 before (Aristotle, wikiPageWikiLink, Plato) = 6, and E6's facts line."""
    assert retrieval.similarity_prizes(QUESTION, NODES, 3) == {"Aristotle": 3, "Alexander_the_Great": 2, "Plato": 1}
    assert retrieval.similarity_prizes(QUESTION, RELATIONS, 3) == {"influencedBy": 3, "wikiPageWikiLink": 2}
    triples = [("Aristotle", "wikiPageWikiLink", "Plato"), ("Alexander_the_Great", "influencedBy", "Aristotle")]
    found = retrieval.retrieved("triplets", triples, QUESTION, NODES, RELATIONS, 3)
    assert found == [triples[1], triples[0]]
    assert answering.facts_line(found) == (
        "('Alexander_the_Great', 'influencedBy', 'Aristotle'), ('Aristotle', 'wikiPageWikiLink', 'Plato')"
    )


def test_paths_worked_out_by_hand():
    """A -r1- B -r2- C, A -r2- D; p(A) 2, p(C) 1, p(r2) 2, p(r1) 1, cost 1, 2 edges at most. From A: A-D
    scores 2 + 0 + 2 - 1 = 3 (D has no other neighbour: kept), A-B 2 then A-B-C 2 + 1 + 2 - 1 = 4 (kept at 2
    edges). From C: C-B-A is A-B-C again (not kept twice). Best first: A-B-C (4), A-D (3)."""
    triples = [("A", "r1", "B"), ("B", "r2", "C"), ("A", "r2", "D")]
    found = retrieval.paths(triples, {"A": 2, "C": 1}, {"r2": 2, "r1": 1}, k=2, max_edges=2)
    assert found == [(4.0, (("A", "r1", "B"), ("B", "r2", "C"))), (3.0, (("A", "r2", "D"),))]
    assert retrieval.path_triples(found) == [("A", "r1", "B"), ("B", "r2", "C"), ("A", "r2", "D")]
    # greedy: A-D is popped (and kept) before A-B is extended
    assert retrieval.paths(triples, {"A": 2, "C": 1}, {"r2": 2, "r1": 1}, k=2, max_edges=2, max_paths=1) == found[1:]
    assert retrieval.paths(triples, {}, {"r2": 2}, k=2) == []  # no node with a prize: no start


def test_an_unknown_context_is_refused():
    with pytest.raises(ValueError, match="unknown retrieval context 'subgraph'"):
        retrieval.retrieved("subgraph", [("a", "r", "b")], QUESTION, {}, {}, 3)


def test_pcst_growth_and_pruning_worked_out_by_hand():
    """a -1- b -1- c. Prizes 3, 0, 3: b is deactivated at 0; at 1 a reaches inactive b (merge, a's slack 2
    left) and the same instant b-c is tight between that cluster and c, both active: one tree of all three,
    both edges kept. Prizes 1, 0, 1: at 1 a and c use up their prizes before an edge is tight (a deactivation
    wins a tie), a first, so c is the last active cluster: c alone (penalty 1 against cost 2 for the path)."""
    assert pcst([3, 0, 3], [(0, 1), (1, 2)], [1, 1]) == ([0, 1, 2], [0, 1])
    assert pcst([1, 0, 1], [(0, 1), (1, 2)], [1, 1]) == ([2], [])
    # a leaf of prize 0 joined to the tree when it was inactive is pruned: d hangs off b at cost 0
    assert pcst([3, 0, 3, 0], [(0, 1), (1, 2), (1, 3)], [1, 1, 0]) == ([0, 1, 2], [0, 1])
    # an edge between two active clusters is covered from both sides: tight at 1.5, before either prize is
    # used up at 2 (GW's tree, though c alone costs less: 2 against 3)
    assert pcst([2, 2], [(0, 1)], [3]) == ([0, 1], [0])
    # and at rate 2 all along: with isolated c used up at 1, a-b (cost 3.5) has 1.5 left, tight at 1.75 < 2
    assert pcst([2, 2, 1], [(0, 1)], [3.5]) == ([0, 1], [0])
    # merged active clusters pool their slack: a-b at 0.5 leaves 1.5 + 1.5 = 3, so ab lasts to 3.5 and b-c
    # (cost 5, covered from both sides from 0.5) is tight at 2.5
    assert pcst([2, 2, 5], [(0, 1), (1, 2)], [1, 5]) == ([0, 1, 2], [0, 1])
    # parallel edges: the cheaper one; no node, no tree
    assert pcst([2, 2], [(0, 1), (0, 1)], [3, 1]) == ([0, 1], [1])
    assert pcst([], [], []) == ([], [])
    with pytest.raises(ValueError, match="outside 0..1"):
        pcst([1, 1], [(0, 2)], [1])
    with pytest.raises(ValueError, match="costs must be finite and >= 0"):
        pcst([1, 1], [(0, 1)], [-1])


def test_pcst_subgraph_worked_out_by_hand():
    """G-Retriever's construction, C_e = 1: p(r2) = 3 > 1 makes (B, r2, C) a virtual node of prize 2 joined to
    B and C at cost 0; p(r1) = 1 makes (A, r1, B) an edge of cost 0; (C, r0, D) costs 1. Prizes A 2, D 0:
    A, B, C and the virtual node grow into one tree; D (prize 0) is pruned. So two triples, in (h, r, t) order."""
    triples = [("C", "r0", "D"), ("B", "r2", "C"), ("A", "r1", "B")]
    found = retrieval.subgraph(triples, {"A": 2}, {"r2": 3, "r1": 1})
    assert found == [("A", "r1", "B"), ("B", "r2", "C")]
    # without prizes on relations, the node of the highest prize alone: no triple
    assert retrieval.subgraph(triples, {"A": 2, "D": 1}, {}) == []
    # a self-loop of a prized relation is its own virtual node
    assert retrieval.subgraph([("A", "r2", "A"), ("A", "r0", "B")], {}, {"r2": 3}) == [("A", "r2", "A")]
    # E6's embeddings, k = 3: both triples' relations outweigh their cost, so both are kept
    e6 = [("Aristotle", "wikiPageWikiLink", "Plato"), ("Alexander_the_Great", "influencedBy", "Aristotle")]
    assert retrieval.retrieved("pcst", e6, QUESTION, NODES, RELATIONS, 3) == sorted(e6)


def _pcst_optimum(prizes, edges, costs) -> float:
    """The least cost of a tree plus the prizes it leaves out, over every node set that induces a connected
    graph (its minimum spanning tree), by brute force."""
    best = float("inf")
    for size in range(1, len(prizes) + 1):
        for chosen in itertools.combinations(range(len(prizes)), size):
            graph = networkx.MultiGraph()
            graph.add_nodes_from(chosen)
            graph.add_weighted_edges_from(
                (u, v, c) for (u, v), c in zip(edges, costs, strict=True) if u in chosen and v in chosen and u != v
            )
            if networkx.is_connected(graph):
                tree = sum(d["weight"] for *_, d in networkx.minimum_spanning_edges(graph, data=True))
                best = min(best, tree + sum(p for i, p in enumerate(prizes) if i not in chosen))
    return best


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    prizes=st.lists(st.sampled_from([0, 0, 1, 2, 3, 5]), min_size=1, max_size=7),
    draws=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([0, 0.5, 1, 1, 2, 3])), max_size=12),
)
def test_pcst_is_a_pruned_tree_within_twice_the_optimum(prizes, draws):
    """On random multigraphs (parallel edges, self-loops, zero costs): the result is a tree of the graph's
    edges spanning exactly its vertices, no leaf has prize 0 (GW pruning drops it), and its cost plus the
    prizes it leaves out is at most twice the optimum (Goemans and Williamson's bound)."""
    n = len(prizes)
    edges, costs = [(u % n, v % n) for u, v, _ in draws], [c for *_, c in draws]
    vertices, kept = pcst(prizes, edges, costs)
    tree = networkx.MultiGraph()
    tree.add_nodes_from(vertices)
    tree.add_edges_from(edges[e] for e in kept)
    assert vertices and set(tree.nodes) == set(vertices) and len(kept) == len(vertices) - 1
    assert networkx.is_connected(tree) and networkx.number_of_selfloops(tree) == 0
    if len(vertices) > 1:
        assert all(prizes[v] > 0 for v in vertices if tree.degree(v) == 1)
    value = sum(costs[e] for e in kept) + sum(p for i, p in enumerate(prizes) if i not in vertices)
    assert value <= 2 * _pcst_optimum(prizes, edges, costs) + 1e-9


@st.composite
def graphs(draw):
    """A random multigraph: triples on up to 9 nodes and 3 relations (parallel triples, self-loops and a
    hub likely), with prizes for up to k nodes and relations."""
    nodes, relations = [f"n{i}" for i in range(draw(st.integers(2, 9)))], ["r0", "r1", "r2"]
    triple = st.tuples(st.sampled_from(nodes), st.sampled_from(relations), st.sampled_from(nodes))
    triples = sorted(set(draw(st.lists(triple, min_size=1, max_size=25))))
    k = draw(st.integers(1, 5))
    node_prizes = answering.prizes(draw(st.permutations(nodes)), k)
    relation_prizes = answering.prizes(draw(st.permutations(relations)), k)
    return triples, node_prizes, relation_prizes, k


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph=graphs(), max_edges=st.integers(1, 4), max_paths=st.integers(1, 12), seed=st.integers(0, 99))
def test_invariants_on_random_multigraphs(graph, max_edges, max_paths, seed):
    """Paths: at most ``max_paths``, best first, each a walk of 1 to ``max_edges`` triples of the graph that
    visits no node twice, starting at one of the k prize nodes, scored by S(P), and no two the same triples;
    triplets: the k best by prize; the PCST subgraph: triples of the graph, one connected piece. None depends on
    the order of the triples."""
    triples, node_prizes, relation_prizes, k = graph
    shuffled = random.Random(seed).sample(triples, len(triples))
    found = retrieval.paths(triples, node_prizes, relation_prizes, k, max_edges, max_paths)
    assert found == retrieval.paths(shuffled, node_prizes, relation_prizes, k, max_edges, max_paths)
    assert len(found) <= max_paths and [s for s, _ in found] == sorted((s for s, _ in found), reverse=True)
    canonical = set()
    for score, walked in found:
        assert 1 <= len(walked) <= max_edges and set(walked) <= set(triples)
        first = walked[0]
        if len(walked) == 1:
            visited = [first[0], first[2]]
            assert first[0] in node_prizes or first[2] in node_prizes  # one end is a start
        else:
            visited = [({first[0], first[2]} - {walked[1][0], walked[1][2]}).pop()]
            assert visited[0] in node_prizes
            for h, _, t in walked:
                assert visited[-1] in (h, t)
                visited.append(t if visited[-1] == h else h)
        assert len(set(visited)) == len(visited) == len(walked) + 1
        recomputed = sum(node_prizes.get(v, 0) for v in visited)
        assert score == recomputed + sum(relation_prizes.get(r, 0) - 1 for _, r, _ in walked)
        canonical.add(min(walked, walked[::-1]))
    assert len(canonical) == len(found)
    top = answering.top_triplets(shuffled, node_prizes, relation_prizes, k)
    best = sorted(triples, key=lambda t: (-answering.triplet_prize(t, node_prizes, relation_prizes), t))[:k]
    assert top == best
    found = retrieval.subgraph(triples, node_prizes, relation_prizes)
    assert found == retrieval.subgraph(shuffled, node_prizes, relation_prizes) and set(found) <= set(triples)
    piece = networkx.MultiGraph([(h, t) for h, _, t in found])
    assert found == sorted(found) and (not found or networkx.is_connected(piece))
