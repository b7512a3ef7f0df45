"""Answer-subgraph validation and isomorphism types (paper 002, spec 2.B; oracles in Appendix A.1)."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.synthkgqa import answer_types

# Appendix A.1: the reference templates (ISO_TEMPLATES) as undirected edges; seeds s*, answer ans.
TEMPLATES = {
    "(1)": "s-ans",
    "(2)": "s-a a-ans",
    "(1)(1)": "s1-ans s2-ans",
    "(2)(1)": "s1-a a-ans s2-ans",
    "((1)(1))": "s1-a s2-a a-ans",
    "(3)": "s-a a-b b-ans",
    "(2)(2)": "s1-a a-ans s2-b b-ans",
    "(3)(1)": "s1-a a-b b-ans s2-ans",
    "((2)(1))": "s1-a a-b b-ans s2-b",
    "((1)(1))(1)": "s1-a s2-a a-ans s3-ans",
    "(2(1)(1))": "s1-a s2-a a-b b-ans",
    "(1)(1)(1)": "s1-ans s2-ans s3-ans",
    "((1)(1)(1))": "s1-a s2-a s3-a a-ans",
    "(2)(2)(1)": "s1-a s2-b s3-ans ans-a ans-b",
    "((3)(1))": "s1-a s2-b a-ans b-c c-a",
    "(4)(1)": "s1-ans s2-a a-b b-c c-ans",
    "(4)": "s-a a-b b-c c-ans",
    "((1)(1))(2)": "s1-a s2-a a-ans b-ans b-s3",
    "(2)(1)(1)": "s1-ans s2-ans ans-a a-s3",
    "((2)(1)(1))": "s1-a s2-a ans-a a-b b-s3",
    "((3)(1)(1))": "s1-a s2-a ans-a a-b b-c c-s3",
    "((1)(1))(1)(1)": "s1-a s2-a ans-a ans-s3 ans-s4",
    "((2)(1))(1)": "s1-a s2-b b-a ans-a ans-s3",
    "((3)(1))(1)": "s1-a s2-c c-b b-a ans-a ans-s3",
    "((1)(1)(1))(1)": "s1-a s2-a s3-a ans-a ans-s4",
    "((1)(1)(1))(2)": "s1-a s2-a s3-a ans-a ans-b b-s4",
    "(1)(1)(1)(1)": "s1-ans s2-ans s3-ans s4-ans",
    "(1)(1)(1)(1)(1)": "s1-ans s2-ans s3-ans s4-ans s5-ans",
    "(5)": "s-a a-b b-c c-d d-ans",
}


def _template(text: str):
    edges = [tuple(e.split("-")) for e in text.split()]
    nodes = {n for e in edges for n in e}
    return sorted(n for n in nodes if n.startswith("s")), "ans", edges


def test_the_29_reference_identifiers():
    assert len(TEMPLATES) == 29
    for name, text in TEMPLATES.items():
        seeds, answer, edges = _template(text)
        verdict = answer_types.classify(seeds, answer, edges)
        assert verdict.valid, (name, verdict)
        assert verdict.type.graph_isomorphism == name
        # direction and order of the triples do not matter
        flipped = [(v, "r", u) for u, v in reversed(edges)]
        assert answer_types.classify(seeds, answer, flipped).type.graph_isomorphism == name


def test_table_a1_columns_and_dutt_labels():
    assert len(answer_types.TABLE_A1) == 27
    for name, (dutt, hops, n_edges, n_seeds) in answer_types.TABLE_A1.items():
        seeds, answer, edges = _template(TEMPLATES[name])
        t = answer_types.classify(seeds, answer, edges).type
        assert (t.dutt_label, t.n_hops, t.n_edges, t.n_seeds) == (dutt, hops, n_edges, n_seeds), name
        assert t.n_intermediate == n_edges + 1 - n_seeds - 1
    # the two reference templates without a GTSQA question have no Dutt label
    assert answer_types.classify(*_template(TEMPLATES["((3)(1)(1))"])).type.dutt_label is None
    assert answer_types.classify(*_template(TEMPLATES["((3)(1))(1)"])).type.n_hops == 4


def test_paper_examples():
    # App. A.4: Vicomte de Bragelonne (the film F joins three seeds and the answer)
    g = [
        ("F", "country of origin", "Italy"),
        ("F", "original language", "French"),
        ("F", "based on", "Vicomte"),
        ("F", "director", "Fernando Cerchio"),
    ]
    t = answer_types.classify(["Italy", "French", "Vicomte"], "Fernando Cerchio", g).type
    assert (t.graph_isomorphism, t.n_hops, t.dutt_label, t.n_intermediate) == ("((1)(1)(1))", 2, "Iso-12", 1)
    minimal = [e for e in g if e[2] in ("French", "Vicomte", "Fernando Cerchio")]
    assert (
        answer_types.classify(["French", "Vicomte"], "Fernando Cerchio", minimal).type.graph_isomorphism == "((1)(1))"
    )
    # App. A.3: guitar
    g = [
        ("Yehonatan Geffen", "child", "Aviv Geffen"),
        ("Aviv Geffen", "instrument", "guitar"),
        ("Francis Lickerish", "instrument", "guitar"),
    ]
    t = answer_types.classify(["Yehonatan Geffen", "Francis Lickerish"], "guitar", g).type
    assert (t.graph_isomorphism, t.n_hops) == ("(2)(1)", 2)
    assert answer_types.identifier(["Francis Lickerish"], "guitar", g[2:]) == "(1)"


@pytest.mark.parametrize(
    "seeds, answer, edges, reason",
    [
        ([1], 0, [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 0)], "too_many_edges"),
        ([0, 1], 0, [(1, 0)], "answer_is_seed"),
        ([1, 9], 0, [(1, 0)], "seed_not_in_graph"),
        ([1], 0, [(1, 2)], "answer_not_in_graph"),
        ([1], 0, [], "seed_not_in_graph"),
        ([], 0, [], "answer_not_in_graph"),
        ([1], 0, [(1, "r", 0), (0, "r2", 1)], "parallel_edges"),
        ([1], 0, [(1, "r", 0), (1, "r2", 0)], "parallel_edges"),
        ([1, 3], 0, [(1, 0), (3, 4)], "disconnected"),
        ([1], 0, [(1, 2), (2, 0), (0, 1)], "cycle"),
        ([1], 0, [(1, 0), (0, 0)], "cycle"),
        ([1], 0, [(1, 0), (0, 2)], "non_seed_leaf"),
        ([1], 0, [(1, 2), (2, 0), (2, 3)], "non_seed_leaf"),
        ([1, 2], 0, [(1, 2), (2, 0)], "seed_not_leaf"),
        ([], 0, [(1, 0)], "non_seed_leaf"),
    ],
)
def test_every_invalid_reason(seeds, answer, edges, reason):
    verdict = answer_types.classify(seeds, answer, edges)
    assert not verdict.valid and verdict.reason == reason and verdict.detail
    assert answer_types.invalid_reason(seeds, answer, edges) == reason


def test_reasons_in_spec_order_and_limit():
    assert answer_types.REASONS == (
        "too_many_edges",
        "answer_is_seed",
        "seed_not_in_graph",
        "answer_not_in_graph",
        "parallel_edges",
        "disconnected",
        "cycle",
        "non_seed_leaf",
        "seed_not_leaf",
    )
    # first failure wins: too many edges before the answer being a seed
    assert answer_types.invalid_reason([0], 0, [(i, i + 1) for i in range(8)]) == "too_many_edges"
    # the limit is configurable; identical triples count once
    chain = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 0)]
    assert answer_types.classify([1], 0, chain, max_edges=7).type.graph_isomorphism == "(7)"
    assert answer_types.classify([1], 0, [(1, "r", 0), (1, "r", 0)]).type.n_edges == 1
    with pytest.raises(ValueError, match="cycle"):
        answer_types.identifier([1], 0, [(1, 2), (2, 0), (0, 1)])


# --- shapes: identifiers back to trees ---


def test_shapes_round_trip_every_template():
    for name in TEMPLATES:
        s = answer_types.shape(name)
        edges = [(p, "r", c) for p, c in s.edges()]
        t = answer_types.classify(s.seeds, 0, edges, max_edges=99).type
        assert t.graph_isomorphism == name
        assert t.n_hops == max(s.depth) and t.n_edges == s.n_edges and t.n_seeds == len(s.seeds)
        assert all(p < i for i, p in enumerate(s.parent, start=1))


@pytest.mark.parametrize("bad", ["", "1", "()", "(1)(", "(1(1))", "(0)", "(1)x", "(1)(2)", "((1)(2))", "(1(1)(1))"])
def test_shape_rejects_non_identifiers(bad):
    with pytest.raises(ValueError):
        answer_types.shape(bad)


def test_shape_names_the_canonical_form():
    with pytest.raises(ValueError, match=r"'\(2\)\(1\)'"):
        answer_types.shape("(1)(2)")


# --- canonical and one-to-one ---


def _ahu(root, adjacency) -> str:
    """Brute-force canonical form of a rooted unlabelled tree (leaves = seeds, root = answer)."""

    def canon(node, parent):
        return "[" + "".join(sorted(canon(c, node) for c in adjacency[node] if c != parent)) + "]"

    return canon(root, None)


def _rooted_trees(n: int):
    """Every parent array of n nodes (node 0 the root): all rooted trees, with repeats."""
    for parent in itertools.product(*[range(i) for i in range(1, n)]):
        yield [(p, i) for i, p in enumerate(parent, start=1)]


def test_exhaustive_up_to_eight_nodes_matches_rooted_tree_counts():
    a000081 = {2: 1, 3: 2, 4: 4, 5: 9, 6: 20, 7: 48, 8: 115}
    for n, expected in a000081.items():
        by_id, by_canon = {}, {}
        for edges in _rooted_trees(n):
            adjacency = {i: [] for i in range(n)}
            for u, v in edges:
                adjacency[u].append(v)
                adjacency[v].append(u)
            seeds = [i for i in range(1, n) if len(adjacency[i]) == 1]
            ident = answer_types.classify(seeds, 0, edges, max_edges=99).type.graph_isomorphism
            canon = _ahu(0, adjacency)
            assert by_id.setdefault(ident, canon) == canon
            assert by_canon.setdefault(canon, ident) == ident
            assert answer_types.shape(ident).n_edges == n - 1
        assert len(by_id) == expected, n


_SEEN: dict[str, tuple] = {}


@st.composite
def labelled_trees(draw):
    """A random free tree on random ids, its answer node, and a relabelled, re-ordered, re-directed copy."""
    n = draw(st.integers(min_value=2, max_value=11))
    attach = [draw(st.integers(min_value=0, max_value=i - 1)) for i in range(1, n)]
    ids = draw(st.lists(st.integers(min_value=-(10**6), max_value=10**6), min_size=n, max_size=n, unique=True))
    answer = ids[draw(st.integers(min_value=0, max_value=n - 1))]
    edges = [(ids[p], draw(st.integers(0, 5)), ids[i]) for i, p in enumerate(attach, start=1)]
    rnd = random.Random(draw(st.integers(0, 2**32)))
    relabel = dict(zip(ids, rnd.sample(range(10**7, 10**7 + 10 * n), n), strict=True))
    copy = [(relabel[t], r, relabel[h]) if rnd.random() < 0.5 else (relabel[h], r, relabel[t]) for h, r, t in edges]
    rnd.shuffle(copy)
    return answer, edges, relabel[answer], copy


def _seeds(answer, edges):
    degree: dict = {}
    for h, _, t in edges:
        degree[h] = degree.get(h, 0) + 1
        degree[t] = degree.get(t, 0) + 1
    return [n for n, d in degree.items() if d == 1 and n != answer]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labelled_trees())
def test_identifier_is_canonical_and_one_to_one(tree):
    answer, edges, answer2, edges2 = tree
    t1 = answer_types.classify(_seeds(answer, edges), answer, edges, max_edges=99).type
    t2 = answer_types.classify(_seeds(answer2, edges2), answer2, edges2, max_edges=99).type
    assert t1 == t2  # canonical under relabelling, edge order and direction
    graph = nx.Graph([(h, t) for h, _, t in edges])
    nx.set_node_attributes(graph, {n: "answer" if n == answer else "other" for n in graph}, "label")
    ident = t1.graph_isomorphism
    assert t1.n_hops == nx.eccentricity(graph, answer)
    # one-to-one: trees with the same identifier are isomorphic as rooted trees, and the identifier's own
    # shape is one of them
    if ident in _SEEN:
        other, root = _SEEN[ident]
        assert nx.isomorphism.rooted_tree_isomorphism(graph, answer, other, root)
    else:
        _SEEN[ident] = (graph, answer)
    s = answer_types.shape(ident)
    canon = nx.Graph(s.edges())
    assert nx.isomorphism.rooted_tree_isomorphism(graph, answer, canon, 0)
    adjacency = {n: list(graph[n]) for n in graph}
    key = _ahu(answer, adjacency)
    for name, (g, r) in _SEEN.items():
        if name != ident:
            assert _ahu(r, {n: list(g[n]) for n in g}) != key
