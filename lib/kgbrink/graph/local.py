"""Per-question graph algorithms on one extracted subgraph in memory, with numpy and scipy.sparse (spec
Sec. 1.3 tier 2), called through ``applyInPandas``: the papers' reference code runs networkx on the same
subgraphs; these follow its semantics without Python loops over nodes or edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array, by a sort: numpy 2.3's ``np.unique`` hashes integers,
    10-25 times slower than a sort when most values are distinct (ids, edge numbers)."""
    values = np.sort(np.asarray(values).ravel())
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if len(values) else values


def relabel(*id_arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted distinct ids of all arrays and each array mapped to 0..n-1 in that order."""
    nodes = distinct(np.concatenate([np.asarray(a, dtype=np.int64) for a in id_arrays]))
    return nodes, [np.searchsorted(nodes, np.asarray(a, dtype=np.int64)) for a in id_arrays]


def unique_triples(h: np.ndarray, r: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``h, r, t`` sorted by (h, r, t), as ``np.unique(axis=0)`` gives them: one sort of
    the rows packed into 63-bit keys when their ranges fit (a Wikidata5m-size KG does), else a lexsort
    and a neighbour comparison."""
    keys = pack_rows(h, r, t)
    if keys is not None:
        return unpack_rows(distinct(keys[0]), *keys[1])
    order = np.lexsort((t, r, h))
    h, r, t = h[order], r[order], t[order]
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = (h[1:] != h[:-1]) | (r[1:] != r[:-1]) | (t[1:] != t[:-1])
    return h[keep], r[keep], t[keep]


def pack_rows(*columns: np.ndarray) -> tuple[np.ndarray, tuple] | None:
    """``(keys, layout)``: int64 keys that order as the rows of the integer ``columns`` (first most
    significant), each column offset by its minimum; None when the bits needed exceed 63."""
    lows, widths = [], []
    for c in columns:
        low = int(c.min()) if len(c) else 0
        lows.append(low)
        widths.append(max(1, (int(c.max()) - low).bit_length()) if len(c) else 1)
    if sum(widths) > 63:
        return None
    keys = np.zeros(len(columns[0]), dtype=np.int64)
    for c, low, width in zip(columns, lows, widths):
        keys <<= width
        keys |= np.asarray(c, dtype=np.int64) - low
    return keys, (tuple(lows), tuple(widths))


def unpack_rows(keys: np.ndarray, lows: tuple, widths: tuple) -> tuple[np.ndarray, ...]:
    """The columns of :func:`pack_rows` keys (int64)."""
    out, shift = [], 0
    for low, width in zip(reversed(lows), reversed(widths)):
        out.append(((keys >> shift) & ((1 << width) - 1)) + low)
        shift += width
    return tuple(reversed(out))


@dataclass(frozen=True)
class PageRank:
    """A PPR vector over ``nodes`` (sorted ids), with the iterations run and whether L1 < n tol was met."""

    nodes: np.ndarray
    scores: np.ndarray
    iterations: int
    converged: bool


def personalized_pagerank(
    src: np.ndarray,
    dst: np.ndarray,
    seeds: np.ndarray,
    nodes: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    alpha: float = 0.85,
    tol: float = 1e-6,
    max_iter: int = 100,
) -> PageRank:
    """networkx ``pagerank`` with personalization 1 on ``seeds`` (normalised to 1/|S|), on the directed
    multigraph ``src -> dst`` (pass both directions for an undirected graph):

        x0 = 1/n;  x <- alpha (x P + (sum of x over dangling nodes) s) + (1 - alpha) s

    with P[u, v] = w(u, v) / W(u) (parallel edges add their weights), stopping when ||x - x_last||_1 <
    n tol. Unlike networkx, non-convergence after ``max_iter`` is not an error: ``converged`` is false
    and the last iterate is returned. ``nodes`` adds vertices without edges (the seeds are always in)."""
    src, dst, seeds = (np.asarray(a, dtype=np.int64) for a in (src, dst, seeds))
    extra = np.asarray(nodes if nodes is not None else [], dtype=np.int64)
    ids, (s_idx, d_idx, seed_idx, _) = relabel(src, dst, seeds, extra)
    n = len(ids)
    if n == 0:
        return PageRank(ids, np.zeros(0), 0, True)
    w = np.ones(len(src)) if weight is None else np.asarray(weight, dtype=float)
    adj = sparse.csr_matrix((w, (s_idx, d_idx)), shape=(n, n))
    adj.sum_duplicates()  # parallel edges add up; sorted indices make the sums independent of row order
    out_weight = np.asarray(adj.sum(axis=1)).ravel()
    dangling = out_weight == 0
    inv = np.divide(1.0, out_weight, out=np.zeros(n), where=~dangling)
    transition_t = (sparse.diags(inv) @ adj).T.tocsr()  # x P computed as P^T x
    s = np.bincount(distinct(seed_idx), minlength=n).astype(float)
    s /= s.sum()
    x = np.full(n, 1.0 / n)
    for iteration in range(1, max_iter + 1):
        last = x
        x = alpha * (transition_t @ last + last[dangling].sum() * s) + (1 - alpha) * s
        if np.abs(x - last).sum() < n * tol:
            return PageRank(ids, x, iteration, True)
    return PageRank(ids, x, max_iter, False)
