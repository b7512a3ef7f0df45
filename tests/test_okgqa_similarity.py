"""KG similarity ATS / SC2D / SD2 (kgbrink.okgqa.similarity): spec App. A.3 exactly, the per-relation
definitions of paper 004 App. A.7 (numpy and networkx, dev-only) as property tests of the local versions,
and the whole-KG DataFrame versions against the local ones whatever the partitioning."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgbrink.okgqa import similarity

SCHEMA = "h int, r int, t int"
# Spec App. A.3: a=0, b=1, c=2, d=3; r=0, s=1.
A3 = [(0, 0, 1), (1, 0, 2), (0, 0, 2), (2, 0, 3), (0, 1, 3)]
A3_ED = A3[:4]  # (a, s, d) deleted: R' = {r}
A3_RS = [(0, 1, 1), (1, 0, 2), (0, 0, 2), (2, 0, 3), (0, 0, 3)]  # relations of (a, r, b) and (a, s, d) swapped
# ED: c_o = (1, 1, 1/3, 0) / 2, c_p = (1, 1, 1/3, 0): SC2D = 1 / (1 + sqrt(0.5^2 + 0.5^2 + (1/6)^2)) = 0.579212;
#     d_o = (3, 2, 3, 2) / 2, d_p = (2, 2, 3, 1): SD2 = 1 / (1 + sqrt(0.5^2 + 1^2 + 1.5^2 + 0^2)) = 0.348331.
# RS: G'^r = b-c, a-c, c-d, a-d with one triangle a-c-d; deg (a, b, c, d) = (2, 1, 3, 2), so c^r = (1, 0, 1/3, 1);
#     G'^s = a-b, c^s = 0. c_p = (0.5, 0, 1/6, 0.5), c_o - c_p = (0, 0.5, 0, -0.5): SC2D = 1 / (1 + sqrt(0.5))
#     = 0.585786. Every degree and R are kept: SD2 = 1.
EXPECTED = {"ED": (A3_ED, 0.579212, 0.348331), "RS": (A3_RS, 0.585786, 1.0)}


@st.composite
def graph_pairs(draw, nodes: int = 7, relations: int = 4):
    """(original, perturbed): random multigraphs (self-loops, repeated and reversed triples); the perturbed
    one keeps some triples, moves some to the next relation and adds new ones, so relations and nodes can
    appear or vanish."""
    triple = st.tuples(st.integers(0, nodes - 1), st.integers(0, relations - 1), st.integers(0, nodes - 1))
    original = draw(st.lists(triple, max_size=30))
    keep = draw(st.lists(st.sampled_from(["keep", "drop", "swap"]), min_size=len(original), max_size=len(original)))
    perturbed = [(h, r, t) for (h, r, t), k in zip(original, keep) if k == "keep"]
    perturbed += [(h, (r + 1) % relations, t) for (h, r, t), k in zip(original, keep) if k == "swap"]
    return original, perturbed + draw(st.lists(triple, max_size=5))


def _by_relation(triples, nodes: np.ndarray, measure) -> np.ndarray:
    """(1/|R|) sum_r v^r over the relations on some triple, v^r = measure(distinct r-triples, nodes)."""
    triples = sorted(set(triples))
    relations = sorted({r for _, r, _ in triples})
    total = np.zeros(len(nodes))
    for r in relations:
        total += measure([(h, t) for h, rr, t in triples if rr == r], nodes)
    return total / max(len(relations), 1)


def _degree(pairs, nodes: np.ndarray) -> np.ndarray:
    """d^r with numpy: in + out degree in the r-triples (a self-loop counts 2)."""
    ends = np.array(pairs, dtype=np.int64).ravel()
    return np.bincount(np.searchsorted(nodes, ends), minlength=len(nodes)).astype(float)


def _clustering(pairs, nodes: np.ndarray) -> np.ndarray:
    """c^r as the reference compute_SC2D: networkx clustering of DiGraph(r-edges).to_undirected()."""
    values = nx.clustering(nx.DiGraph(pairs).to_undirected())  # self-loops ignored, c = 0 below degree 2
    return np.array([values.get(x, 0.0) for x in nodes])


def _definition(original, perturbed, measure) -> float:
    """SD2 / SC2D straight from App. A.7: 1 / (1 + ||mean_r v^r(G) - mean_r v^r(G')||_2)."""
    nodes = np.array(sorted({x for h, _, t in original + perturbed for x in (h, t)}), dtype=np.int64)
    diff = _by_relation(original, nodes, measure) - _by_relation(perturbed, nodes, measure)
    return 1.0 / (1.0 + np.linalg.norm(diff))


@pytest.mark.parametrize("method", ["ED", "RS"])
def test_appendix_a3_local(method):
    perturbed, sc2d, sd2 = EXPECTED[method]
    frame = pd.DataFrame(perturbed, columns=["h", "r", "t"])
    assert similarity.sc2d_local(np.array(A3), frame) == pytest.approx(sc2d, abs=1e-6)
    assert similarity.sd2_local(pd.DataFrame(A3, columns=["h", "r", "t"]), np.array(perturbed)) == pytest.approx(
        sd2, abs=1e-6
    )


@pytest.mark.parametrize("method", ["ED", "RS"])
def test_appendix_a3_whole_kg(spark, method):
    perturbed, sc2d, sd2 = EXPECTED[method]
    original, perturbed = spark.createDataFrame(A3, SCHEMA), spark.createDataFrame(perturbed, SCHEMA)
    assert similarity.sc2d(original, perturbed) == pytest.approx(sc2d, abs=1e-6)
    assert similarity.sd2(original, perturbed) == pytest.approx(sd2, abs=1e-6)


def test_deleting_every_edge_and_ats(spark):
    # ED at level 1.0: G' is empty, c_p = d_p = 0. SC2D = 1 / (1 + ||c_o||) = 1 / (1 + sqrt(0.25 + 0.25 + 1/36))
    # = 0.579212 (equal to the ED value above only because there c_p = 2 c_o); SD2 = 1 / (1 + ||d_o||) =
    # 1 / (1 + sqrt(2.25 + 1 + 2.25 + 1)) = 0.281729.
    empty = np.empty((0, 3), dtype=np.int64)
    assert similarity.sc2d_local(A3, empty) == pytest.approx(0.579212, abs=1e-6)
    assert similarity.sd2_local(A3, []) == pytest.approx(0.281729, abs=1e-6)
    assert similarity.sd2_local(empty, empty) == similarity.sc2d_local(empty, empty) == 1.0
    with pytest.raises(ValueError, match=r"\(n, 3\) array"):
        similarity.sd2_local(np.array([[0, 1]]), empty)
    # ATS: (0.2 + 0.5 + 0.9) / 3 = 0.533333, the null score skipped; 0 on the empty G'.
    scored = spark.createDataFrame(
        [(0, 0, 1, 0.2), (1, 0, 2, 0.5), (0, 0, 2, 0.9), (2, 0, 3, None)], "h int, r int, t int, score double"
    )
    assert similarity.ats(scored) == pytest.approx(1.6 / 3, abs=1e-12)
    assert similarity.ats(scored.limit(0)) == 0.0


@settings(max_examples=100, deadline=None)
@given(pair=graph_pairs())
def test_local_metrics_equal_the_per_relation_definitions(pair):
    original, perturbed = pair
    # SD2 identity: mean_r d^r = d / |R| (every triple is in one G^r)
    assert similarity.sd2_local(original, perturbed) == pytest.approx(
        _definition(original, perturbed, _degree), abs=1e-12
    )
    assert similarity.sc2d_local(original, perturbed) == pytest.approx(
        _definition(original, perturbed, _clustering), abs=1e-12
    )
    assert similarity.sd2_local(original, original) == similarity.sc2d_local(original, original) == 1.0


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(1, 2**4 - 1)), max_size=40),
    hub=st.booleans(),
)
def test_clustering_of_every_bit_of_one_relation_equals_networkx(rows, hub):
    """The sweep's per-relation task (nodes numbered and edges made distinct once for every bit of ``mask``)
    against networkx's clustering of each bit's graph; self-loops, repeats and reversed rows included."""
    from kgbrink.okgqa import sweep

    if hub:  # a node joined to most others, the degree ordering's case
        rows = rows + [(0, x, 1 | (x % 3) << 1) for x in range(1, 10)]
    group = pd.DataFrame(rows or [(0, 0, 1)], columns=["h", "t", "mask"]).astype("int64")
    group["r"] = 3
    out = sweep._relation_clustering(4, None)(group).set_index("id")
    nodes = sorted(set(group.h) | set(group.t))
    for k in range(4):
        pairs = [(h, t) for h, t, m in zip(group.h, group.t, group["mask"]) if m >> k & 1]
        expected = _clustering(pairs, np.array(nodes)) if pairs else np.zeros(len(nodes))
        mine = np.array([out[f"c{k}"].get(x, 0.0) for x in nodes])
        assert np.allclose(mine, expected, rtol=0, atol=1e-15), k
        # bit for bit the one-graph function of the subgraph scope
        one_nodes, one_c = similarity.clustering_sum_local(np.array([(h, 0, t) for h, t in pairs]).reshape(-1, 3))
        assert np.array_equal(np.array([out[f"c{k}"].get(x, 0.0) for x in one_nodes]), one_c), k
        edges = np.unique([min(a, b) * 10 + max(a, b) for a, b in pairs if a != b]).astype(np.int64)
        assert np.allclose(similarity.clustering_of_edges(edges, 10), _clustering(pairs, np.arange(10)) if pairs else 0)


@settings(max_examples=60, deadline=None)
@given(
    original=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(0, 9)), max_size=30),
    seed=st.integers(0, 2**16),
)
def test_relation_swaps_keep_sd2_at_one_unless_triples_collide(original, seed):
    original = sorted(set(original))
    relations = [r for _, r, _ in original]
    np.random.default_rng(seed).shuffle(relations)
    swapped = [(h, r, t) for (h, _, t), r in zip(original, relations)]
    if len(set(swapped)) == len(original):  # no collision: same degrees, same relation set
        assert similarity.sd2_local(original, swapped) == 1.0


def test_whole_kg_equals_local_whatever_the_partitioning(spark):
    rng = np.random.default_rng(7)
    # 400 triples on 40 nodes and 5 relations (clustered: relation r links nodes within 8 of each other),
    # perturbed: 25% deleted, 10% rewired, and every triple of relation 4 deleted (|R'| = 4 < |R| = 5).
    h = rng.integers(0, 40, 400)
    original = np.stack([h, rng.integers(0, 5, 400), (h + rng.integers(0, 8, 400)) % 40], axis=1)
    kept = original[(rng.random(400) > 0.25) & (original[:, 1] != 4)].copy()
    rewired = rng.random(len(kept)) < 0.1
    kept[rewired, 2] = rng.integers(0, 40, rewired.sum())
    frames = [spark.createDataFrame(a.tolist(), SCHEMA) for a in (original, kept)]
    results = {
        n: (similarity.sc2d(*(f.repartition(n) for f in frames)), similarity.sd2(*(f.repartition(n) for f in frames)))
        for n in (1, 7)
    }
    assert results[1] == results[7]
    sc2d, sd2 = results[1]
    assert sc2d == pytest.approx(similarity.sc2d_local(original, kept), abs=1e-12) and sc2d < 1
    assert sd2 == pytest.approx(similarity.sd2_local(original, kept), abs=1e-12) and sd2 < 1
