"""KG similarity between an original KG G and a perturbed G' (paper 004 App. A.7, spec Sec. 4.C):

    ATS  = mean of s_G(h, r, t) over the triples of G'   (0 when G' is empty)
    SC2D = 1 - x / (x + 1) = 1 / (1 + x),  x = ||c_o - c_p||_2,  c_o = C / |R|,  c_p = C' / |R'|
    SD2  = 1 / (1 + ||d_o - d_p||_2),                            d_o = d / |R|,  d_p = d' / |R'|

Conventions of the reference code (``compute_SC2D``, ``compute_SD2``): triples are a set (a repeated row
counts once); R (R') = the relations on at least one triple of G (G'), self-loops included; a graph
without triples has the zero vector; vectors are indexed by the union of the nodes of G and G' (absent
entries are 0). C(x) = sum_r c_r(x) is the networkx clustering of x in the simple undirected G^r, summed
over r (:mod:`kgbrink.graph.triangles`). The per-relation mean degree sum_r deg^r(x) / |R| (deg^r = in +
out degree in the r-triples) equals d(x) / |R| with d(x) the triple endpoints at x (a self-loop twice),
because every triple is in exactly one G^r: SD2 is one degree aggregation per graph.

Consequences (spec 4.C): relation swapping (RS) keeps every degree and the relation set, so SD2 = 1 by the
formula (not the "similar decrease" of the paper's prose; only a swap that collides with an existing
triple can lower it). Removing the last triple of a relation changes |R'| and rescales every entry of
c_p and d_p, so SC2D and SD2 can drop sharply while the structure barely changed (spec App. A.3: deleting
the one s-triple of a 5-triple KG gives SD2 = 0.348).

Scopes: :func:`ats`, :func:`sc2d`, :func:`sd2` for the whole KG as DataFrames, with sums over nodes as
exact decimals (partition-independent); :func:`sc2d_local`, :func:`sd2_local` for one question subgraph in
numpy/scipy.sparse, for ``applyInPandas``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from scipy import sparse

from kgbrink.graph.triangles import ordered_sum, relation_triangles

# ---------------------------------------------------------------------------------------------------------
# Whole KG (DataFrames)


def relation_counts(original: DataFrame, perturbed: DataFrame) -> tuple[int, int]:
    """(|R|, |R'|): the relations that occur on at least one triple of each graph (one small job)."""
    counts = dict(_tagged(original, perturbed, "r").select("side", "r").distinct().groupBy("side").count().collect())
    return counts.get(0, 0), counts.get(1, 0)


def _tagged(original: DataFrame, perturbed: DataFrame, *columns: str) -> DataFrame:
    """``side`` (0 for G, 1 for G') and ``columns`` of both frames in one."""
    return original.select(F.lit(0).alias("side"), *columns).unionByName(
        perturbed.select(F.lit(1).alias("side"), *columns)
    )


def sd2(original: DataFrame, perturbed: DataFrame) -> float:
    """SD2 of ``triples(h, r, t)`` frames by the degree identity, d and d' counted in one aggregation. With
    ro = max(|R|, 1), rp = max(|R'|, 1): d_o - d_p = (d rp - d' ro) / (ro rp), and the squared numerators
    are integers, summed exactly."""
    ro, rp = (max(n, 1) for n in relation_counts(original, perturbed))
    both = _tagged(original, perturbed, "h", "r", "t").distinct()
    ends = both.select("side", F.explode(F.array("h", "t")).alias("id"))  # a self-loop twice
    side = F.col("side")
    degrees = ends.groupBy("id").agg(
        F.count(F.when(side == 0, 1)).alias("d"), F.count(F.when(side == 1, 1)).alias("dp")
    )
    diff = (F.col("d") * rp - F.col("dp") * ro).cast("decimal(20,0)")
    squares = degrees.agg(F.sum(diff * diff).alias("s")).first()["s"]
    return 1.0 / (1.0 + math.sqrt(int(squares or 0)) / (ro * rp))


def sc2d(original: DataFrame, perturbed: DataFrame, max_wedges: int | None = None) -> float:
    """SC2D of ``triples(h, r, t)`` frames from the per-relation triangle counts of both graphs in one
    pass: node x of G becomes 2x and of G' 2x + 1, so each G^r of the union is the disjoint union of the two
    G^r. ``max_wedges`` caps the wedges of both together (:func:`kgbrink.graph.triangles.relation_triangles`)."""
    ro, rp = (max(n, 1) for n in relation_counts(original, perturbed))
    tag = F.col("side").cast("long")
    both = _tagged(original, perturbed, "h", "r", "t").select(
        (F.col("h").cast("long") * 2 + tag).alias("h"), "r", (F.col("t").cast("long") * 2 + tag).alias("t")
    )
    per_relation = relation_triangles(both, max_wedges)
    is_original = F.col("id").bitwiseAND(1) == 0
    per_node = per_relation.groupBy(F.shiftright("id", 1).alias("id")).agg(
        ordered_sum(F.when(is_original, F.col("clustering"))).alias("co"),
        ordered_sum(F.when(~is_original, F.col("clustering"))).alias("cp"),
    )
    diff = F.col("co") / ro - F.col("cp") / rp
    # each square is in [0, 1] (C(x) <= |R|); decimal addition is exact, so the order of the rows is moot
    squares = per_node.agg(F.sum((diff * diff).cast("decimal(38,24)")).alias("s")).first()["s"]
    return 1.0 / (1.0 + math.sqrt(float(squares or 0)))


def ats(scored_perturbed: DataFrame) -> float:
    """ATS: the mean ``score`` over the rows of ``scored_perturbed`` (one per triple of G', scored by s_G;
    null scores are skipped), 0 when there is none. Summed as exact decimals."""
    row = scored_perturbed.agg(
        F.sum(F.col("score").cast("decimal(38,24)")).alias("s"), F.count("score").alias("n")
    ).first()
    return float(row["s"] / row["n"]) if row["n"] else 0.0


# ---------------------------------------------------------------------------------------------------------
# One question subgraph (numpy / scipy.sparse)


def _rows(triples: pd.DataFrame | np.ndarray) -> np.ndarray:
    """The rows of a pandas frame with ``h, r, t`` columns or an (n, 3) integer array, as int64."""
    if isinstance(triples, pd.DataFrame):
        return triples[["h", "r", "t"]].to_numpy(dtype=np.int64)
    array = np.asarray(triples, dtype=np.int64)
    if array.size == 0:
        array = array.reshape(0, 3)
    if array.ndim != 2 or array.shape[1] != 3:
        raise ValueError(f"expected an (n, 3) array of (h, r, t) rows, got shape {array.shape}")
    return array


def _triple_array(triples: pd.DataFrame | np.ndarray) -> np.ndarray:
    """The distinct rows (sorted) of :func:`_rows`."""
    return np.unique(_rows(triples), axis=0)


def _distinct_pairs(relation: np.ndarray, low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
    """The distinct (relation, low, high) rows, sorted, of index arrays (relation < its count, low and high
    < n): one 1-D sort of a packed key when it fits in 63 bits, else a row sort."""
    n_relations = int(relation.max()) + 1 if len(relation) else 1
    if n_relations * n * n < 2**63:
        keys = np.unique((relation * n + low) * n + high)
        return np.stack([keys // (n * n), keys // n % n, keys % n], axis=1)
    return np.unique(np.stack([relation, low, high], axis=1), axis=0)


def _n_relations(triples: np.ndarray) -> int:
    return max(len(np.unique(triples[:, 1])), 1)


def clustering_sum_local(
    triples: pd.DataFrame | np.ndarray, max_wedges: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, C)``: C(x) = sum_r c_r(x) for the sorted nodes of the G^r (as ``triangles.clustering_sum``).

    All G^r at once as one block-diagonal graph on the (r, x) pairs (:func:`_clustering_of_keys`)."""
    t = _rows(triples)
    t = t[t[:, 0] != t[:, 2]]
    low, high = np.minimum(t[:, 0], t[:, 2]), np.maximum(t[:, 0], t[:, 2])
    nodes = np.unique(np.concatenate([low, high]))
    if len(t) == 0:
        return nodes, np.zeros(0)
    _, relation = np.unique(t[:, 1], return_inverse=True)
    n = len(nodes)
    pairs = _distinct_pairs(relation, np.searchsorted(nodes, low), np.searchsorted(nodes, high), n)
    keys, index = np.unique(
        np.concatenate([pairs[:, 0] * n + pairs[:, 1], pairs[:, 0] * n + pairs[:, 2]]), return_inverse=True
    )
    c = _clustering_of_keys(index[: len(pairs)], index[len(pairs) :], len(keys), max_wedges)
    return nodes, np.bincount(keys % n, weights=c, minlength=n)


def clustering_of_edges(edges: np.ndarray, n: int, max_wedges: int | None = None) -> np.ndarray:
    """c(x) for x in range(n) of the simple undirected graph whose edges are the distinct packed keys
    ``edges`` = low * n + high (low < high < n): several graphs on one numbering of their nodes (the levels
    of :mod:`kgbrink.okgqa.sweep`). Equals :func:`clustering_sum_local` of one relation, at its nodes."""
    edges = np.asarray(edges, dtype=np.int64)
    if len(edges) == 0:
        return np.zeros(n)
    return _clustering_of_keys(edges // n, edges % n, n, max_wedges)


def clustering_of_bits(
    h: np.ndarray, t: np.ndarray, mask: np.ndarray, width: int, max_wedges: int | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(nodes, [c_0 .. c_{width-1}])``: c_k(x) at the sorted ``nodes`` of the simple undirected graph of
    one relation's rows (``h, t``) whose ``mask`` has bit k (:func:`clustering_of_edges`); the nodes are
    numbered and the edges made distinct once for every bit."""
    nodes, index = np.unique(np.concatenate([h, t]), return_inverse=True)
    n = len(nodes)
    low, high = np.minimum(index[: len(h)], index[len(h) :]), np.maximum(index[: len(h)], index[len(h) :])
    edge = low != high  # a self-loop is no edge of the simple graph
    edges, edge_of_row = np.unique(low[edge] * n + high[edge], return_inverse=True)
    per_bit = []
    for k in range(width):
        present = np.zeros(len(edges), dtype=bool)
        present[edge_of_row[(mask[edge] >> k) & 1 == 1]] = True
        per_bit.append(clustering_of_edges(edges[present], n, max_wedges))
    return nodes, per_bit


def _clustering_of_keys(i: np.ndarray, j: np.ndarray, m: int, max_wedges: int | None) -> np.ndarray:
    """c per vertex 0..m-1 of the simple graph with the distinct edges (i, j), i != j (a vertex without an
    edge has c = 0). Its edges are oriented low -> high by (degree, index), L. A triangle a < b < c (in
    that order) is one entry (a, c) of (L L) o L and one entry (b, c) of (L^T L) o L, which count it for a
    and c, and for b. Degree ordering keeps both products small around hubs, unlike A^3: they have at most
    sum C(outdeg, 2) entries (the wedges), and with ``max_wedges`` a ``ValueError`` is raised before the
    products when that is over the cap."""
    degree = np.bincount(i, minlength=m) + np.bincount(j, minlength=m)
    rank = np.empty(m, dtype=np.int64)
    rank[np.lexsort((np.arange(m), degree))] = np.arange(m)
    low, high = np.where(rank[i] < rank[j], i, j), np.where(rank[i] < rank[j], j, i)
    if max_wedges is not None:
        out = np.bincount(low, minlength=m)
        wedges = int((out * (out - 1) // 2).sum())
        if wedges > max_wedges:
            raise ValueError(f"clustering: {wedges:,} wedges, over max_wedges={max_wedges:,}")
    lower = sparse.csr_matrix((np.ones(len(low)), (low, high)), shape=(m, m))
    ends = (lower @ lower).multiply(lower)  # (a, c): triangles with lowest a and highest c
    middles = (lower.T @ lower).multiply(lower)  # (b, c): triangles with middle b and highest c
    tri = np.asarray(ends.sum(axis=1)).ravel() + np.asarray(ends.sum(axis=0)).ravel()
    tri += np.asarray(middles.sum(axis=1)).ravel()
    pairs_possible = degree * (degree - 1)
    return np.divide(2.0 * tri, pairs_possible, out=np.zeros(m), where=degree >= 2)


def sc2d_local(original: pd.DataFrame | np.ndarray, perturbed: pd.DataFrame | np.ndarray) -> float:
    """SC2D of two triple sets held in memory (pandas ``h, r, t`` frames or (n, 3) arrays)."""
    o, p = _triple_array(original), _triple_array(perturbed)
    nodes_o, c_o = clustering_sum_local(o)
    nodes_p, c_p = clustering_sum_local(p)
    nodes = np.union1d(nodes_o, nodes_p)
    diff = np.zeros(len(nodes))
    diff[np.searchsorted(nodes, nodes_o)] += c_o / _n_relations(o)
    diff[np.searchsorted(nodes, nodes_p)] -= c_p / _n_relations(p)
    return 1.0 / (1.0 + float(np.linalg.norm(diff)))


def sd2_local(original: pd.DataFrame | np.ndarray, perturbed: pd.DataFrame | np.ndarray) -> float:
    """SD2 of two triple sets held in memory, by the degree identity."""
    o, p = _triple_array(original), _triple_array(perturbed)
    nodes = np.unique(np.concatenate([o[:, [0, 2]].ravel(), p[:, [0, 2]].ravel()]))

    def degree(t: np.ndarray) -> np.ndarray:
        return np.bincount(np.searchsorted(nodes, t[:, [0, 2]].ravel()), minlength=len(nodes))

    diff = degree(o) / _n_relations(o) - degree(p) / _n_relations(p)
    return 1.0 / (1.0 + float(np.linalg.norm(diff)))
