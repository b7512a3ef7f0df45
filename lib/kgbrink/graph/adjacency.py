"""A whole KG as a compressed sparse row adjacency in memory-mapped numpy files, for per-question graph
work in Python tasks (k-hop balls, induced subgraphs, relation steps) without a shuffle per hop.

:func:`share` collects the distinct triples once on the driver, sorts them and writes the arrays to a
directory the tasks can read: in local mode the driver's own directory, on a cluster a copy per executor
(an uncompressed zip of it, ``SparkContext.addArchive``: Spark adds no local directory outside local mode). :func:`load` maps them read-only, once per Python worker process; the
operating system shares the pages between the workers.

Nodes are indices 0..n-1 (the ids themselves when they are small non-negative integers, else their
sorted distinct values, ``ids``). Edge e is the e-th distinct triple in (h, r, t) order, so a set of
edges is a set of integers and sorting it sorts the triples. Arrays:

- ``out_ptr``, ``h``, ``r``, ``t``: edges e in ``out_ptr[u] .. out_ptr[u + 1]`` have head u, sorted by
  (r, t) within;
- ``in_ptr``, ``in_edge``: positions ``in_ptr[v] .. in_ptr[v + 1]`` of ``in_edge`` are the edges with
  tail v, sorted by (r, h) within;
- ``degree``: triple endpoints at the node (a self-loop counts twice), as :func:`kgbrink.graph.views.degrees`.

The per-question operations below take and return node indices and edge numbers.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.graph.local import distinct as sorted_distinct
from kgbrink.graph.local import pack_rows, relabel, unique_triples

ARRAYS = ("out_ptr", "h", "r", "t", "in_ptr", "in_edge", "degree", "ids")
_LOADED: dict[str, Adjacency] = {}


@dataclass(frozen=True)
class Adjacency:
    out_ptr: np.ndarray
    h: np.ndarray
    r: np.ndarray
    t: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray
    degree: np.ndarray
    ids: np.ndarray | None  # index -> id; None when they are equal

    @property
    def n_nodes(self) -> int:
        return len(self.out_ptr) - 1

    @property
    def n_edges(self) -> int:
        return len(self.h)

    def index(self, ids) -> np.ndarray:
        """Node indices of ``ids`` (int64); -1 for an id on no triple."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if self.ids is None:
            return np.where((ids >= 0) & (ids < self.n_nodes), ids, -1)
        if len(self.ids) == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids).clip(0, len(self.ids) - 1)
        return np.where(self.ids[pos] == ids, pos, -1)

    def node_ids(self, index: np.ndarray) -> np.ndarray:
        """The ids of node indices (int64)."""
        index = np.asarray(index, dtype=np.int64)
        return index if self.ids is None else self.ids[index]

    def triples(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(h, r, t)`` ids (int64) of edge numbers."""
        edges = np.asarray(edges, dtype=np.int64)
        return self.node_ids(self.h[edges]), self.r[edges].astype(np.int64), self.node_ids(self.t[edges])


def from_arrays(h: np.ndarray, r: np.ndarray, t: np.ndarray) -> Adjacency:
    """The adjacency of triples given as id arrays (duplicates dropped)."""
    h, r, t = (np.asarray(x, dtype=np.int64).ravel() for x in (h, r, t))
    ids = None
    high = int(max(h.max(initial=-1), t.max(initial=-1)))
    low = int(min(h.min(initial=0), t.min(initial=0)))
    if low < 0 or high >= 4 * len(h) + 1024:  # sparse or negative ids: number the distinct ones
        ids, (h, t) = relabel(h, t)
        high = len(ids) - 1
    n = high + 1
    h, r, t = unique_triples(h, r, t)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(h, minlength=n), out=out_ptr[1:])
    by_tail = pack_rows(t, r, h)
    in_edge = (np.argsort(by_tail[0]) if by_tail is not None else np.lexsort((h, r, t))).astype(np.int64)
    in_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(t, minlength=n), out=in_ptr[1:])
    small = np.int32 if n < 2**31 and len(h) < 2**31 else np.int64
    rel = np.int32 if r.max(initial=0) < 2**31 and r.min(initial=0) >= -(2**31) else np.int64
    degree = (np.diff(out_ptr) + np.diff(in_ptr)).astype(small)
    return Adjacency(
        out_ptr, h.astype(small), r.astype(rel), t.astype(small), in_ptr, in_edge.astype(small), degree, ids
    )


def save(adjacency: Adjacency, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ARRAYS:
        value = getattr(adjacency, name)
        if value is not None:
            np.save(directory / f"{name}.npy", value)
    (directory / "done.json").write_text(json.dumps({"ids": adjacency.ids is not None}))


def load(directory: str) -> Adjacency:
    """The adjacency saved in ``directory``, memory-mapped, once per process."""
    if directory not in _LOADED:
        for other in list(_LOADED)[:-1]:  # a worker process keeps the last two (a job's and the previous)
            del _LOADED[other]
        path = Path(directory)
        meta = json.loads((path / "done.json").read_text())
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode="r") for name in ARRAYS if name != "ids" or meta["ids"]}
        _LOADED[directory] = Adjacency(**{"ids": None, **arrays})
    return _LOADED[directory]


@dataclass(frozen=True)
class Shared:
    """Where tasks find a shared adjacency: a local directory, or an archive added to the SparkContext
    (unpacked by each executor into the folder ``SparkFiles.get(spark_file)``)."""

    directory: str
    spark_file: str | None

    def get(self) -> Adjacency:
        if self.spark_file is None:
            return load(self.directory)
        from pyspark import SparkFiles

        return load(SparkFiles.get(self.spark_file))


def share(kg: DataFrame, work_dir: str | None = None) -> Shared:
    """Collect ``kg(h, r, t)`` to the driver, build its adjacency and make it readable by the tasks."""
    spark = kg.sparkSession
    table = kg.select(F.col("h").cast("long"), F.col("r").cast("long"), F.col("t").cast("long")).toArrow()
    columns = [table.column(c).to_numpy() for c in ("h", "r", "t")]
    adjacency = from_arrays(*columns)
    del table, columns
    name = f"kgbrink-adjacency-{uuid.uuid4().hex}"
    directory = Path(work_dir or tempfile.gettempdir()) / name
    save(adjacency, directory)
    _LOADED[str(directory)] = adjacency  # the driver's own calls need no reload
    if spark.sparkContext.master.startswith("local"):
        return Shared(str(directory), None)
    archive = directory.with_name(f"{name}.zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as packed:  # stored: the arrays are memory-mapped
        for path in sorted(directory.iterdir()):
            packed.write(path, path.name)
    spark.sparkContext.addArchive(str(archive))
    return Shared(str(directory), archive.name)


def release(shared: Shared) -> None:
    """Forget the driver's copy (tasks of a finished job no longer need it). On a cluster the archive
    stays for the application's life: an executor that joins later fetches it from the driver."""
    _LOADED.pop(shared.directory, None)
    shutil.rmtree(shared.directory, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# per-question operations (node and edge indices)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenated integer ranges ``starts[i] .. ends[i]`` (int64)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lengths)


def out_edges(g: Adjacency, nodes: np.ndarray) -> np.ndarray:
    """Edge numbers of the triples with their head among ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    return _ranges(g.out_ptr[nodes], g.out_ptr[nodes + 1])


def in_edges(g: Adjacency, nodes: np.ndarray) -> np.ndarray:
    """Edge numbers of the triples with their tail among ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    return g.in_edge[_ranges(g.in_ptr[nodes], g.in_ptr[nodes + 1])].astype(np.int64)


def neighbours(g: Adjacency, nodes: np.ndarray, direction: str) -> np.ndarray:
    """The nodes one step from ``nodes`` along h -> t ('out'), against it ('in') or either ('both'),
    with repeats."""
    parts = []
    if direction in ("out", "both"):
        parts.append(g.t[out_edges(g, nodes)])
    if direction in ("in", "both"):
        parts.append(g.h[in_edges(g, nodes)])
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Ball:
    """The nodes a BFS visited (sorted indices), their distances and whether each is a hub (visited, not
    expanded)."""

    nodes: np.ndarray
    dist: np.ndarray
    hub: np.ndarray


def ball(g: Adjacency, seeds: np.ndarray, k: int, direction: str, max_expand_degree: int | None) -> Ball:
    """BFS from ``seeds`` to distance ``k`` along ``direction``; a non-seed node with more than
    ``max_expand_degree`` triples is visited but not expanded (:func:`kgbrink.graph.khop.expand`)."""
    seeds = sorted_distinct(np.asarray(seeds, dtype=np.int64))
    seen = np.zeros(g.n_nodes, dtype=bool)
    seen[seeds] = True
    nodes, dists, hubs = [seeds], [np.zeros(len(seeds), dtype=np.int64)], [np.zeros(len(seeds), dtype=bool)]
    frontier = seeds
    degree = None if max_expand_degree is None else g.degree
    for step in range(1, k + 1):
        if len(frontier) == 0:
            break
        reached = neighbours(g, frontier, direction)
        new = distinct(reached[~seen[reached]], g.n_nodes)
        seen[new] = True
        hub = np.zeros(len(new), dtype=bool) if degree is None else degree[new] > max_expand_degree
        nodes.append(new)
        dists.append(np.full(len(new), step, dtype=np.int64))
        hubs.append(hub)
        frontier = new[~hub]
    nodes_, dist, hub = np.concatenate(nodes), np.concatenate(dists), np.concatenate(hubs)
    order = np.argsort(nodes_, kind="stable")
    return Ball(nodes_[order], dist[order], hub[order])


def distinct(values: np.ndarray, n: int) -> np.ndarray:
    """The sorted distinct values of indices (node or edge numbers) below ``n``: a sort when few, a mask
    scan when many (``np.unique`` of 10^7 edge numbers takes seconds, the mask a tenth of one)."""
    if len(values) < n // 32:
        return sorted_distinct(values)
    mask = np.zeros(n, dtype=bool)
    mask[values] = True
    return np.flatnonzero(mask)


def induced(g: Adjacency, nodes: np.ndarray) -> np.ndarray:
    """Edge numbers (sorted) of the triples with both ends among ``nodes``: scanned from the side with
    fewer triples (heads' out-lists or tails' in-lists), or all triples when both sides hold most of them."""
    nodes = distinct(np.asarray(nodes, dtype=np.int64), g.n_nodes)
    member = np.zeros(g.n_nodes, dtype=bool)
    member[nodes] = True
    n_out = int((g.out_ptr[nodes + 1] - g.out_ptr[nodes]).sum())
    n_in = int((g.in_ptr[nodes + 1] - g.in_ptr[nodes]).sum())
    if min(n_out, n_in) > g.n_edges // 4:  # most of the KG: one scan of all triples beats gathering lists
        return np.flatnonzero(member[g.h] & member[g.t])
    if n_out <= n_in:
        edges = out_edges(g, nodes)
        edges = edges[member[g.t[edges]]]
    else:
        edges = in_edges(g, nodes)
        edges = distinct(edges[member[g.h[edges]]], g.n_edges)
    return edges


def _lower_bound(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, target: int) -> np.ndarray:
    """Per i the first position p in ``lo[i] .. hi[i]`` with ``values[p] >= target`` (``values`` sorted in
    each range): a vectorised binary search."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        below = np.zeros(len(lo), dtype=bool)
        below[open_] = values[mid[open_]] < target
        lo = np.where(open_ & below, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)


def relation_out_edges(g: Adjacency, nodes: np.ndarray, relation: int) -> np.ndarray:
    """Edge numbers of the triples (u, relation, x) for u in ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    lo, hi = g.out_ptr[nodes], g.out_ptr[nodes + 1]
    return _ranges(_lower_bound(g.r, lo, hi, relation), _lower_bound(g.r, lo, hi, relation + 1))


def relation_in_edges(g: Adjacency, nodes: np.ndarray, relation: int) -> np.ndarray:
    """Edge numbers of the triples (x, relation, u) for u in ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    lo, hi = g.in_ptr[nodes], g.in_ptr[nodes + 1]
    rel = _InRelations(g)
    positions = _ranges(_lower_bound(rel, lo, hi, relation), _lower_bound(rel, lo, hi, relation + 1))
    return g.in_edge[positions].astype(np.int64)


class _InRelations:
    """``g.r[g.in_edge[p]]`` indexed by positions p (the relations of the in-lists, without an array)."""

    def __init__(self, g: Adjacency):
        self.g = g

    def __getitem__(self, positions):
        return self.g.r[self.g.in_edge[positions]]
