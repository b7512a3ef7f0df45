"""OKGQA-P's G-retrieval on one question's graph (kgbrink.okgqa.retrieval; paper 004 §4.1, App. A.6): E6's
triplets from embeddings, paths worked out by hand, and their invariants on random multigraphs (no Spark)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.okgqa import answering, retrieval

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
    with pytest.raises(ValueError, match="unknown retrieval context 'pcst'"):
        retrieval.retrieved("pcst", [("a", "r", "b")], QUESTION, {}, {}, 3)


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
    triplets: the k best by prize. None depends on the order
    of the triples."""
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
