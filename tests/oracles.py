"""Independent oracles the tests share: plain-Python and networkx recomputations of what kgbrink's graph code
computes on DataFrames and arrays (networkx is a dev-only dependency)."""

from __future__ import annotations

from collections import deque

import networkx as nx
import numpy as np

from kgbrink.graph import local_metapaths


def ball(triples, seeds, k, direction, cap, degree):
    """``{node: (dist, hub)}`` of a BFS from ``seeds`` along h -> t ('out'), t -> h ('in') or both, a
    non-seed node of degree > cap visited but not expanded (khop.expand's rule)."""
    nbrs = {}
    for h, _, t in triples:
        if h != t:
            if direction in ("out", "both"):
                nbrs.setdefault(h, set()).add(t)
            if direction in ("in", "both"):
                nbrs.setdefault(t, set()).add(h)
    hub = lambda n: n not in seeds and cap is not None and degree.get(n, 0) > cap  # noqa: E731
    seen, queue = {s: 0 for s in seeds}, deque(seeds)
    while queue:
        node = queue.popleft()
        if seen[node] == k or hub(node):
            continue
        for nbr in nbrs.get(node, ()):
            if nbr not in seen:
                seen[nbr] = seen[node] + 1
                queue.append(nbr)
    return {n: (d, hub(n)) for n, d in seen.items()}


def enumerate_walks(triples, start, paths, directed):
    """``(complete, reached)`` triple indices by enumerating every walk (the reference code's
    ``bfs_with_rule_original`` / ``bfs_with_rule`` on a networkx MultiGraph)."""
    complete, reached = set(), set()
    for path in paths:
        frontier = [(start, [])]
        for label in path:
            grown = []
            for node, used in frontier:
                for i, (h, r, t) in enumerate(triples):
                    ways = [(t, True)] if h == node else []
                    if t == node and (directed or h != t):
                        ways.append((h, False))
                    for nbr, forward in ways:
                        if local_metapaths.step_labels(np.array([r]), forward, directed)[0] == label:
                            grown.append((nbr, used + [i]))
                            reached.add(i)
            frontier = grown
        complete.update(i for _, used in frontier for i in used)
    return complete, reached


def networkx_metapaths(triples, s, a):
    """The relation sequences of ``nx.all_shortest_paths`` on the MultiGraph, every parallel triple."""
    g = nx.MultiGraph()
    g.add_nodes_from([s, a])
    g.add_edges_from((h, t, {"r": r}) for h, r, t in triples)
    try:
        paths = list(nx.all_shortest_paths(g, s, a))
    except nx.NetworkXNoPath:
        return []
    found = set()
    for path in paths:
        sequences = [()]
        for x, y in zip(path, path[1:]):
            sequences = [q + (d["r"],) for q in sequences for d in g[x][y].values()]
        found.update(sequences)
    return sorted(found)
