"""Distances, shortest-path triples and path counts on ONE small extracted graph in memory (spec Sec. 1.3
tier 2, Sec. 2.E, 5.3.2), with the definitions of :mod:`kgbrink.graph.paths`:

- the graph is the multigraph of the distinct triples ``h, r, t``, undirected unless ``directed``;
  self-loops are never steps and never on a shortest path;
- ds, da = BFS distances from s and a (``csgraph.shortest_path(unweighted=True)``), D = ds(a);
- triple (u, r, v) is on a shortest path iff ds(u) + 1 + da(v) = D or ds(v) + 1 + da(u) = D;
- sigma(s) = 1, sigma on layer d = (A sigma restricted to layer d - 1) restricted to layer d, one sparse
  matrix-vector product per layer; A[u, v] = number of triples between u and v ('triples', parallel
  triples multiply) or 1 ('nodes', as ``nx.all_shortest_paths``); the number of shortest paths is sigma(a).

Ids are relabelled to 0..n-1 (:func:`kgbrink.graph.local.relabel`); no Python loop runs over nodes or triples.
:func:`shortest_paths_per_group` runs :func:`shortest_path_edges` per pair through ``applyInPandas``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from scipy import sparse
from scipy.sparse import csgraph

from kgbrink.core.frames import checkpoint
from kgbrink.graph.local import relabel, unique_triples

COUNTS = ("triples", "nodes")


def _int64(values) -> np.ndarray:
    """A flat int64 array of ``values`` (numpy arrays, pandas Series or lists)."""
    return np.asarray(values, dtype=np.int64).ravel()


def bfs_distances(
    h: np.ndarray, t: np.ndarray, sources: np.ndarray, max_dist: int | None = None, directed: bool = False
) -> pd.DataFrame:
    """``id, dist`` (sorted by id): BFS distance from the nearest of ``sources`` for the nodes within
    ``max_dist`` (all reachable ones when None). One BFS from a virtual node joined to every source."""
    h, t, sources = _int64(h), _int64(t), _int64(sources)
    ids, (hi, ti, si) = relabel(h, t, sources)
    n = len(ids)
    step = hi != ti
    rows = np.concatenate([hi[step], np.full(len(si), n)])
    cols = np.concatenate([ti[step], si])
    adj = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n + 1, n + 1))
    dist = csgraph.shortest_path(adj, directed=directed, unweighted=True, indices=n)[:n] - 1
    reached = np.isfinite(dist) & (dist <= (np.inf if max_dist is None else max_dist))
    return pd.DataFrame({"id": ids[reached], "dist": dist[reached].astype(np.int64)})


@dataclass(frozen=True)
class ShortestPaths:
    """One pair's result: ``distance`` (None if unreachable), ``n_paths`` (a double), the sizes of the
    shortest-path node and triple sets and ``edges`` (``h, r, t``, sorted) on some shortest path."""

    distance: int | None
    n_paths: float
    n_sp_nodes: int
    n_sp_triples: int
    edges: pd.DataFrame


def shortest_path_edges(
    h: np.ndarray, r: np.ndarray, t: np.ndarray, s: int, a: int, count: str = "triples"
) -> ShortestPaths:
    """The shortest s-a paths of the undirected multigraph of the distinct triples (module docstring)."""
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}")
    h, r, t = unique_triples(_int64(h), _int64(r), _int64(t))
    ids, (hi, ti, ends) = relabel(h, t, np.array([s, a], dtype=np.int64))
    n = len(ids)
    step = hi != ti
    one_way = sparse.csr_matrix((np.ones(int(step.sum())), (hi[step], ti[step])), shape=(n, n))
    adj = (one_way + one_way.T).tocsr()  # duplicates summed: the triples between u and v, either direction
    if count == "nodes":
        adj.data[:] = 1.0
    ds, da = csgraph.shortest_path(adj, directed=False, unweighted=True, indices=ends)
    distance = ds[ends[1]]
    if not np.isfinite(distance):
        return ShortestPaths(None, 0.0, 0, 0, pd.DataFrame({"h": h[:0], "r": r[:0], "t": t[:0]}))
    sigma = np.zeros(n)
    sigma[ends[0]] = 1.0
    for d in range(1, int(distance) + 1):
        layer = ds == d
        sigma[layer] = (adj @ np.where(ds == d - 1, sigma, 0.0))[layer]
    on_path = (ds[hi] + 1 + da[ti] == distance) | (ds[ti] + 1 + da[hi] == distance)
    edges = pd.DataFrame({"h": h[on_path], "r": r[on_path], "t": t[on_path]})
    n_nodes = int(np.count_nonzero(ds + da == distance))
    return ShortestPaths(int(distance), float(sigma[ends[1]]), n_nodes, len(edges), edges)


def shortest_paths_per_group(frame: DataFrame, pairs: DataFrame, count: str = "triples") -> tuple[DataFrame, DataFrame]:
    """:func:`shortest_path_edges` for every ``pairs(pair_id, s, a)`` (one row per pair_id) on its own graph
    ``frame(pair_id, h, r, t)``, one pair per task (cogrouped ``applyInPandas``). Returns the outputs of
    :func:`kgbrink.graph.paths.shortest_path_edges`: ``edges(pair_id, h, r, t)`` and ``summary(pair_id,
    distance, n_paths, n_sp_nodes, n_sp_triples)``; pairs without triples are answered too."""
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, got {count!r}")
    types = {c: frame.schema[c].dataType.simpleString() for c in ("pair_id", "h", "r", "t")}
    schema = (
        f"pair_id {types['pair_id']}, h {types['h']}, r {types['r']}, t {types['t']}, "
        "distance int, n_paths double, n_sp_nodes long, n_sp_triples long"
    )
    columns = ["pair_id", "h", "r", "t", "distance", "n_paths", "n_sp_nodes", "n_sp_triples"]

    def run(key, graph: pd.DataFrame, pair: pd.DataFrame) -> pd.DataFrame:
        if pair.empty:
            return pd.DataFrame(columns=columns)
        got = shortest_path_edges(graph["h"], graph["r"], graph["t"], pair["s"].iloc[0], pair["a"].iloc[0], count)
        edges = got.edges.astype("Int64").assign(pair_id=key[0])
        summary = pd.DataFrame(
            {
                "pair_id": [key[0]],
                "distance": pd.array([got.distance], dtype="Int64"),
                "n_paths": [got.n_paths],
                "n_sp_nodes": [got.n_sp_nodes],
                "n_sp_triples": [got.n_sp_triples],
            }
        )
        out = pd.concat([summary, edges], ignore_index=True)[columns]
        return out.astype({c: "Int64" for c in ("h", "r", "t", "distance", "n_sp_nodes", "n_sp_triples")})

    key = F.col("pair_id").alias("pair_id")  # new attributes: ``frame`` may derive from ``pairs``
    out = (
        frame.select(key, "h", "r", "t")
        .groupBy("pair_id")
        .cogroup(pairs.select(key, "s", "a").groupBy("pair_id"))
        .applyInPandas(run, schema)
        .transform(checkpoint)
    )
    edges = out.where(F.col("h").isNotNull()).select("pair_id", "h", "r", "t")
    summary = out.where(F.col("h").isNull()).select("pair_id", "distance", "n_paths", "n_sp_nodes", "n_sp_triples")
    return edges, summary
