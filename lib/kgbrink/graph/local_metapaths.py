"""Metapath walks on ONE small extracted graph in memory (spec Sec. 1.3 tier 2, Sec. 2.D step 8), the local
counterpart of :mod:`kgbrink.graph.metapaths`, for a whole SET of metapaths at once.

A set of metapaths (relation sequences) is a trie: node 0 is the empty prefix, every other node a prefix
one label longer than its parent, ``terminal`` where a metapath ends. A step label is the relation r
(direction dropped, the reference code's ``t[1] % n_rels``) or, with ``directed``, ``2 r + 1`` for a
triple followed h -> t and ``2 r`` for one followed t -> h.

- :func:`trie`: the trie of given metapaths;
- :func:`shortest_path_trie`: the trie of the metapaths of all shortest s-a paths of the undirected
  multigraph (paper 002 App. C.1 as the authors' code re-adds "triples on SP metapaths"), built along the
  shortest-path DAG (ds(u) + 1 + da(v) = D) layer by layer as (trie node, graph node) states, so paths are
  never enumerated: a prefix reaches a DAG node at depth d, and every DAG path continues to a;
- :func:`walk`: the triples on walks from a start node that follow some metapath of a trie, as states
  (trie node, graph node): forward from (root, start), then backward from the terminal states; a triple is
  on a *complete* walk when it joins a forward-reachable state to one from which a terminal state is
  reachable. Walks may revisit nodes; a self-loop is one step (the reference's ``bfs_with_rule_original``
  on a networkx MultiGraph, without its enumeration of every walk).

Everything is vectorised with numpy and pandas merges; ids are relabelled to 0..n-1 (:func:`kgbrink.graph.local.relabel`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse import csgraph

from kgbrink.graph.local import distinct, relabel


@dataclass(frozen=True)
class Trie:
    """Trie node i has ``parent[i]`` (-1 for the root 0), the ``label`` of the step into it (-1 for the
    root), its ``depth`` and whether a metapath ends there (``terminal``)."""

    parent: np.ndarray
    label: np.ndarray
    depth: np.ndarray
    terminal: np.ndarray

    def paths(self) -> list[tuple[int, ...]]:
        """The metapaths, sorted."""
        out = []
        for node in np.flatnonzero(self.terminal):
            labels, x = [], int(node)
            while x > 0:
                labels.append(int(self.label[x]))
                x = int(self.parent[x])
            out.append(tuple(reversed(labels)))
        return sorted(out)


def _empty_trie(terminal_root: bool = False) -> Trie:
    one = np.array([-1], dtype=np.int64)
    return Trie(one, one.copy(), np.zeros(1, dtype=np.int64), np.array([terminal_root]))


def step_labels(r: np.ndarray, forward: bool | np.ndarray, directed: bool) -> np.ndarray:
    """The step label of relation ``r`` followed h -> t (``forward``) or t -> h."""
    r = np.asarray(r, dtype=np.int64)
    return 2 * r + np.asarray(forward, dtype=np.int64) if directed else r


def trie(metapaths: Iterable[Sequence[int]]) -> Trie:
    """The trie of ``metapaths`` (sequences of step labels)."""
    parent, label, depth, terminal = [-1], [-1], [0], [False]
    index: dict[tuple[int, int], int] = {}
    for path in metapaths:
        node = 0
        for x in path:
            child = index.get((node, int(x)))
            if child is None:
                child = len(parent)
                index[(node, int(x))] = child
                parent.append(node)
                label.append(int(x))
                depth.append(depth[node] + 1)
                terminal.append(False)
            node = child
        terminal[node] = True
    as_int = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return Trie(as_int(parent), as_int(label), as_int(depth), np.array(terminal))


def _moves(hi: np.ndarray, r: np.ndarray, ti: np.ndarray, directed: bool) -> pd.DataFrame:
    """``src, dst, label, idx``: each triple idx stepped h -> t and t -> h (a self-loop once unless
    ``directed``)."""
    idx = np.arange(len(hi))
    back = np.ones(len(hi), dtype=bool) if directed else hi != ti
    return pd.DataFrame(
        {
            "src": np.concatenate([hi, ti[back]]),
            "dst": np.concatenate([ti, hi[back]]),
            "label": np.concatenate([step_labels(r, True, directed), step_labels(r[back], False, directed)]),
            "idx": np.concatenate([idx, idx[back]]),
        }
    )


@dataclass(frozen=True)
class Walk:
    """Masks over the input triples: on a complete walk, and stepped along by some (partial) walk."""

    complete: np.ndarray
    reached: np.ndarray


def walk(h, r, t, start: int, paths: Trie, directed: bool = False) -> Walk:
    """The triples (rows of ``h, r, t``) on walks from ``start`` following a metapath of ``paths``."""
    h, r, t = (np.asarray(a, dtype=np.int64).ravel() for a in (h, r, t))
    complete, reached = np.zeros(len(h), dtype=bool), np.zeros(len(h), dtype=bool)
    if len(h) == 0 or not paths.terminal[1:].any():
        return Walk(complete, reached)
    ids, (hi, ti, si) = relabel(h, t, np.array([start], dtype=np.int64))
    n = len(ids) + 1
    moves = _moves(hi, r, ti, directed)
    children = pd.DataFrame(
        {"trie": paths.parent[1:], "label": paths.label[1:], "child": np.arange(1, len(paths.parent))}
    )
    states = pd.DataFrame({"trie": np.zeros(1, dtype=np.int64), "id": si})  # (trie node, graph vertex)
    layers = []
    for _ in range(int(paths.depth.max())):
        step = states.merge(children, on="trie").merge(moves, left_on=["id", "label"], right_on=["src", "label"])
        if step.empty:
            break
        layers.append(step[["trie", "src", "child", "dst", "idx"]])
        states = step[["child", "dst"]].drop_duplicates().set_axis(["trie", "id"], axis=1)
    terminal = paths.terminal
    alive = np.zeros(0, dtype=np.int64)  # states (trie * n + vertex) of the layer below that reach a terminal
    for step in reversed(layers):
        target = step["child"].to_numpy() * n + step["dst"].to_numpy()
        ok = terminal[step["child"].to_numpy()] | np.isin(target, alive)
        reached[step["idx"].to_numpy()] = True
        complete[step["idx"].to_numpy()[ok]] = True
        alive = distinct(step["trie"].to_numpy()[ok] * n + step["src"].to_numpy()[ok])
    return Walk(complete, reached)


def shortest_path_trie(h, r, t, s: int, a: int, directed: bool = False) -> Trie:
    """The trie of the metapaths of the shortest s-a paths in the undirected multigraph of ``h, r, t``
    (self-loops are never on one); unreachable: no metapath; s == a: the empty metapath."""
    h, r, t = (np.asarray(x, dtype=np.int64).ravel() for x in (h, r, t))
    if s == a:
        return _empty_trie(terminal_root=True)
    ids, (hi, ti, ends) = relabel(h, t, np.array([s, a], dtype=np.int64))
    n = len(ids)
    step = hi != ti
    one_way = sparse.csr_matrix((np.ones(int(step.sum())), (hi[step], ti[step])), shape=(n, n))
    ds, da = csgraph.shortest_path(one_way + one_way.T, directed=False, unweighted=True, indices=ends)
    distance = ds[ends[1]]
    if not np.isfinite(distance):
        return _empty_trie()
    moves = _moves(hi[step], r[step], ti[step], directed)
    dag = moves[ds[moves["src"].to_numpy()] + 1 + da[moves["dst"].to_numpy()] == distance]
    parent, label, depth = [np.array([-1])], [np.array([-1])], [np.array([0])]
    states = pd.DataFrame({"trie": np.zeros(1, dtype=np.int64), "id": ends[:1]})  # (trie node, graph vertex)
    size = 1
    for d in range(1, int(distance) + 1):
        grown = states.merge(dag, left_on="id", right_on="src")
        prefixes = grown[["trie", "label"]].drop_duplicates().sort_values(["trie", "label"], ignore_index=True)
        prefixes["child"] = np.arange(size, size + len(prefixes))
        parent.append(prefixes["trie"].to_numpy())
        label.append(prefixes["label"].to_numpy())
        depth.append(np.full(len(prefixes), d))
        size += len(prefixes)
        states = grown.merge(prefixes, on=["trie", "label"])[["child", "dst"]].drop_duplicates()
        states = states.set_axis(["trie", "id"], axis=1)
    depths = np.concatenate(depth).astype(np.int64)
    return Trie(
        np.concatenate(parent).astype(np.int64),
        np.concatenate(label).astype(np.int64),
        depths,
        depths == int(distance),
    )
