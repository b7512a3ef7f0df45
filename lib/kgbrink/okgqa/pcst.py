"""The Prize-Collecting Steiner Tree by Goemans and Williamson's primal-dual growth and GW pruning, unrooted,
one tree (Johnson, Minkoff and Phillips 2000; the variant of G-Retriever's ``pcst_fast`` with ``root=-1,
num_clusters=1, pruning="gw"``), for OKGQA-P's subgraph retrieval (paper 004 §4.1; spec 5.1).

Nodes are ``0 .. n-1`` with prizes p_v >= 0; edges ``(u, v)`` with costs c_e >= 0. Growth: every node starts
as an active cluster; an active cluster's moat grows at rate 1 until its moats use up its prizes (it is
deactivated), an edge between two clusters is tight when the moats on it reach its cost, and then the two
clusters merge (active if either was). Growth ends when one active cluster is left; its tree is pruned in
reverse merge order: an edge that merged two active clusters is kept, one that merged an inactive cluster B
is kept only if a kept edge already touches B, else B's side is dropped. Ties: a deactivation before a merge,
then the smaller cluster or edge index. ``pcst_fast`` breaks ties in its heaps' order, so on tied inputs the
two may pick different trees of the same growth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pcst(prizes: Sequence[float], edges: Sequence[tuple[int, int]], costs: Sequence[float]) -> tuple[list, list]:
    """``(vertices, edge_indices)`` of the pruned tree, each ascending; ``([], [])`` without nodes."""
    node_prizes = np.asarray(prizes, dtype=float).reshape(-1)
    n = len(node_prizes)
    heads = np.asarray([e[0] for e in edges], dtype=np.int64)
    tails = np.asarray([e[1] for e in edges], dtype=np.int64)
    remaining = np.asarray(costs, dtype=float).reshape(-1).copy()
    if len(remaining) != len(heads):
        raise ValueError(f"{len(edges)} edges but {len(remaining)} costs")
    if n == 0:
        return [], []
    if (node_prizes < 0).any() or not np.isfinite(node_prizes).all():
        raise ValueError("prizes must be finite and >= 0")
    if (remaining < 0).any() or not np.isfinite(remaining).all():
        raise ValueError("costs must be finite and >= 0")
    if len(heads) and (min(heads.min(), tails.min()) < 0 or max(heads.max(), tails.max()) >= n):
        raise ValueError(f"an edge names a node outside 0..{n - 1}")
    cluster_of = np.arange(n)
    merged_into = np.full(2 * n, -1)
    active = np.zeros(2 * n, dtype=bool)
    active[:n] = True
    slack = np.zeros(2 * n)  # an active cluster's prizes not yet used by its moats
    slack[:n] = node_prizes
    merges: list[tuple[int, int, int, int]] = []  # (edge, inactive cluster or -1, its node, the other node)
    clusters, alive = n, n
    while alive > 1:
        of_heads, of_tails = cluster_of[heads], cluster_of[tails]
        rate = active[of_heads].astype(float) + active[of_tails]
        growing = np.flatnonzero((of_heads != of_tails) & (rate > 0))
        running = np.flatnonzero(active[:clusters])
        to_deactivate = running[np.argmin(slack[running])]
        step = slack[to_deactivate]
        edge = -1
        if len(growing):
            times = remaining[growing] / rate[growing]
            first = int(np.argmin(times))
            if times[first] < step:
                edge, step = int(growing[first]), times[first]
        slack[running] = np.maximum(slack[running] - step, 0.0)
        remaining[growing] = np.maximum(remaining[growing] - step * rate[growing], 0.0)
        if edge < 0:
            active[to_deactivate], slack[to_deactivate] = False, 0.0
            alive -= 1
            continue
        remaining[edge] = 0.0
        a, b = int(of_heads[edge]), int(of_tails[edge])
        merged = clusters
        clusters += 1
        merged_into[a] = merged_into[b] = merged
        cluster_of[(cluster_of == a) | (cluster_of == b)] = merged
        slack[merged] = slack[a] * active[a] + slack[b] * active[b]
        if active[a] and active[b]:
            merges.append((edge, -1, int(heads[edge]), int(tails[edge])))
            alive -= 1
        elif active[a]:
            merges.append((edge, b, int(tails[edge]), int(heads[edge])))
        else:
            merges.append((edge, a, int(heads[edge]), int(tails[edge])))
        active[a] = active[b] = False
        active[merged] = True
    final = int(np.flatnonzero(active[:clusters])[0])
    good = cluster_of == final
    forest = [m for m in merges if good[heads[m[0]]]]
    return _gw_pruned(n, forest, merged_into, good)


def _gw_pruned(n: int, forest: list[tuple[int, int, int, int]], merged_into: np.ndarray, good: np.ndarray):
    """GW pruning of the final cluster's merge edges, latest first (see the module)."""
    neighbours: dict[int, list[int]] = {}
    for _, _, x, y in forest:
        neighbours.setdefault(x, []).append(y)
        neighbours.setdefault(y, []).append(x)
    necessary = np.zeros(len(merged_into), dtype=bool)
    deleted = np.zeros(n, dtype=bool)

    def mark_necessary(node: int) -> None:
        cluster = node
        while cluster != -1 and not necessary[cluster]:
            necessary[cluster] = True
            cluster = int(merged_into[cluster])

    kept = []
    for edge, inactive, inside, outside in reversed(forest):
        if deleted[inside] and deleted[outside]:
            continue
        if inactive < 0 or necessary[inactive]:
            kept.append(edge)
            mark_necessary(inside)
            mark_necessary(outside)
            continue
        deleted[inside] = True  # the inactive cluster's side of the tree, reached without the other node
        stack = [inside]
        while stack:
            for other in neighbours.get(stack.pop(), ()):
                if other != outside and not deleted[other]:
                    deleted[other] = True
                    stack.append(other)
    vertices = np.flatnonzero(good & ~deleted).tolist()
    return vertices, sorted(kept)
