"""Question-specific graphs of paper 002, one question in memory (App. C.1; spec 2.D), as the authors'
``compute_neighs_and_sp.py`` builds them, on the whole KG's shared adjacency (:mod:`kgbrink.graph.adjacency`):

1. radius k = max(k_min, n_hops) (n_hops: the table's, else the longest seed-answer path in G);
2. neighbourhood E_nb (:func:`local_neighbourhood`), ``directed_union`` (the code's ``get_in_out_neigh_edges``):
   the node-induced subgraphs of the k-hop out-ball and of the k-hop in-ball of S, plus "out-then-in", the
   node-induced subgraph of the 1-hop in-ball of X_out = S and its out-neighbours, and "in-then-out" from
   X_in, each of these two kept to ``mixed_step_cap`` triples (uniform: the smallest seeded hashes); or
   ``undirected`` (the paper's text): the node-induced subgraph of the undirected k-ball. In both modes a
   non-seed node with more than ``max_expand_degree`` triples is visited but not expanded, and the triples
   at a seed are kept, then the smallest hashes up to ``max_neighbourhood_edges`` in all (a hub seed's
   triples all stay, as in ``khop.cap_edges``);
3. GT metapaths: per seed s the relation sequence of the path s -> a in G (a tree: one path), direction
   dropped unless ``metapath_directed`` (:func:`kgbrink.synthkgqa.question_graphs.gt_paths`);
4. confounders: the triples on walks from s in the whole KG that follow that metapath
   (:func:`local_walk`, :func:`kgbrink.graph.metapaths.walk` for one walk; at most ``metapath_cap`` per
   seed, triples of complete walks first, then of partial walks, each by smallest hash, as the code tops
   up ``bfs_with_rule_original`` with ``bfs_with_rule``); the search graph H = E_nb + confounders;
5. - 10. (:func:`build_local`): PPR on the undirected
   multigraph H (personalization 1/|S| on the seeds, networkx semantics, :mod:`kgbrink.graph.local`); the
   ``top_nodes`` highest-PPR nodes with score > ``min_ppr`` (scores to 12 decimals, ties by node id); keep
   the triples of H with both ends among them plus every triple touching a node of G (beyond
   ``keep_always_cap`` triples with one end outside G, only the smallest hashes of those); while more than
   ``max_triples`` are kept, drop
   the ``shrink_step`` lowest top nodes, and below ``min_top_nodes`` (or at none) keep a hashed sample of
   ``max_triples - 2``; re-add the triples of H on walks from each seed following a metapath of a shortest
   seed-answer path in H (:func:`kgbrink.graph.local_metapaths.shortest_path_trie`; at most
   ``sp_metapath_cap``, smallest hashes) and the confounders; re-add every triple of G still missing.

The seeded hashes are Spark's ``xxhash64`` computed in numpy (:mod:`kgbrink.graph.xxhash`), so every cap
keeps what the DataFrame definitions (``khop.cap_edges``, ``hashing.smallest_per_key``, ``metapaths.walk``)
keep.

Decisions where the paper and the code leave room (spec 2.H; docs/jobs.md lists them):
- randomness (the code's ``np.random``) is the smallest ``u64(seed, qid, h, r, t)``; the code's
  "first 7,500 in triple-id order" of ``keep_always_cap`` is hash order too (kgbrink has no triple ids);
- G's nodes for the keep-always rule are those of ``full_answer_subgraph`` when the table has it, else of
  ``answer_subgraph`` (the catalogued table does not carry the full subgraph);
- ``on_sp`` is true membership in H for every triple (the code gives re-added G triples 0);
- below ``min_top_nodes`` the sample is ``min(kept, max_triples - 2)`` triples (the code fails when fewer
  are kept); the SP-metapath sample is without replacement (the code draws with replacement);
- a seed isolated in H is still a PPR node (networkx would drop it from the personalization);
- H for PPR, ``on_sp`` and the SP metapaths is E_nb with the confounders (the code's ``nx_g``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.graph import adjacency as graph_adjacency
from kgbrink.graph import local_metapaths, local_paths, xxhash
from kgbrink.graph.local import distinct, personalized_pagerank


def tree_path(edges, s: int, a: int) -> list[tuple[int, int, int, bool]] | None:
    """The path s -> a in the undirected graph of ``edges`` (h, r, t) as (h, r, t, forward) steps, forward
    when the triple is followed h -> t; None when a is not reachable (BFS: the shortest one)."""
    adjacency: dict[int, list[tuple[int, tuple[int, int, int, bool]]]] = {}
    for h, r, t in edges:
        adjacency.setdefault(h, []).append((t, (h, r, t, True)))
        adjacency.setdefault(t, []).append((h, (h, r, t, False)))
    previous: dict[int, tuple[int, tuple] | None] = {s: None}
    queue = deque([s])
    while queue:
        node = queue.popleft()
        if node == a:
            break
        for nbr, step in sorted(adjacency.get(node, [])):
            if nbr not in previous:
                previous[nbr] = (node, step)
                queue.append(nbr)
    if a not in previous:
        return None
    steps, node = [], a
    while previous[node] is not None:
        node, step = previous[node]
        steps.append(step)
    return list(reversed(steps))


@dataclass(frozen=True)
class SearchGraph:
    """One question's H (edge numbers of the adjacency, sorted) with its flags and the caps applied."""

    edges: np.ndarray
    in_nb: np.ndarray
    is_conf: np.ndarray
    caps: list[str]


def _order_hashes(g: graph_adjacency.Adjacency, edges: np.ndarray, state: int) -> np.ndarray:
    """``u64(seed, <prefix>, h, r, t)`` of ``edges`` (``state``: :func:`kgbrink.graph.xxhash.prefix`)."""
    return xxhash.hash_columns(state, *g.triples(edges))


def first_by_hash(hashes: np.ndarray, ties: tuple, m: int, first: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``m`` rows first in the order (``first`` true before false, then ``hashes``, then
    ``ties``, the last of them most significant as in ``np.lexsort``), in that order. Only the rows up to
    the m-th hash are sorted (``np.partition`` finds it): a cap over a hub's millions of rows is a
    linear pass."""
    if first is not None:
        ahead, rest = np.flatnonzero(first), np.flatnonzero(~first)
        head = ahead[first_by_hash(hashes[ahead], tuple(x[ahead] for x in ties), m)]
        tail = rest[first_by_hash(hashes[rest], tuple(x[rest] for x in ties), m - len(head))]
        return np.concatenate([head, tail])
    m = min(m, len(hashes))
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.arange(len(hashes))
    if len(hashes) > 4 * m:
        rows = np.flatnonzero(hashes <= np.partition(hashes, m - 1)[m - 1])
    return rows[np.lexsort((*(x[rows] for x in ties), hashes[rows]))][:m]


def _smallest_edges(g: graph_adjacency.Adjacency, edges: np.ndarray, m: int, state: int) -> np.ndarray:
    """The ``m`` edges with the smallest ``(hash, h, r, t)`` (edge numbers are in (h, r, t) order)."""
    return np.sort(edges[first_by_hash(_order_hashes(g, edges, state), (edges,), m)])


def local_neighbourhood(
    g: graph_adjacency.Adjacency, qid: str, seeds: np.ndarray, k: int, cfg: QuestionGraphSettings
) -> tuple[np.ndarray, list[str]]:
    """E_nb of step 2 for one question (edge numbers, sorted) and its caps (module docstring).

    ``directed_union``: the node-induced triples of the out-ball, of the in-ball and of the two mixed node
    sets (S and its out- (in-) neighbours, the non-hubs among them grown one step against (along) the
    triples), the mixed ones kept to ``mixed_step_cap`` by ``u64(seed, (qid, part), h, r, t)``."""
    ids = distinct(np.asarray(seeds, dtype=np.int64))
    index = g.index(ids)
    start = index[index >= 0]
    hub_cap = cfg.max_expand_degree
    caps = []
    if cfg.mode == "undirected":
        found = graph_adjacency.ball(g, start, k, "both", hub_cap)
        hubs = found.nodes[found.hub]
        edges = graph_adjacency.induced(g, found.nodes)
    else:
        parts, hubs = [], []
        for direction, back, part in (("out", "in", "out_in"), ("in", "out", "in_out")):
            found = graph_adjacency.ball(g, start, k, direction, hub_cap)
            hubs.append(found.nodes[found.hub])
            parts.append(graph_adjacency.induced(g, found.nodes))
            near = found.dist <= 1
            grown = graph_adjacency.neighbours(g, found.nodes[near & ~found.hub], back)
            mixed = graph_adjacency.induced(g, np.concatenate([found.nodes[near], grown]))
            if len(mixed) > cfg.mixed_step_cap:
                caps.append(f"mixed_step_cap: {part} {len(mixed)} triples")
                mixed = _smallest_edges(g, mixed, cfg.mixed_step_cap, xxhash.prefix(cfg.seed, qid, part))
            parts.append(mixed)
        hubs = distinct(np.concatenate(hubs))
        edges = graph_adjacency.distinct(np.concatenate(parts), g.n_edges)
    if hub_cap is not None and len(hubs):
        caps.append(f"max_expand_degree: {len(hubs)} hubs")
    limit = cfg.max_neighbourhood_edges
    if limit is not None and len(edges) > limit:
        caps.append(f"max_neighbourhood_edges: {len(edges)} triples")
        member = np.zeros(g.n_nodes, dtype=bool)
        member[start] = True
        at_seed = member[g.h[edges]] | member[g.t[edges]]
        keep = at_seed.copy()
        keep[first_by_hash(_order_hashes(g, edges, xxhash.prefix(cfg.seed, qid)), (edges,), limit, at_seed)] = True
        edges = edges[keep]
    return edges, caps


def local_walk(
    g: graph_adjacency.Adjacency, start: int, relations, forward, cap: int | None, state: int, directed: bool
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(edges, complete, capped)``: the triples on walks from node index ``start`` along ``relations``
    (:func:`kgbrink.graph.metapaths.walk` for one walk: a step keeps at most ``cap`` transitions, the
    smallest ``u64(seed, key, step, h, r, t, src)``, ``state`` the hash prefix of (seed, key))."""
    layers, capped = [], False
    nodes = np.array([start], dtype=np.int64)
    for i, relation in enumerate(relations, start=1):
        relation = int(relation)
        out_e = (
            graph_adjacency.relation_out_edges(g, nodes, relation)
            if not directed or forward[i - 1]
            else np.zeros(0, np.int64)
        )
        in_e = (
            graph_adjacency.relation_in_edges(g, nodes, relation)
            if not directed or not forward[i - 1]
            else np.zeros(0, np.int64)
        )
        if not directed:
            in_e = in_e[g.h[in_e] != g.t[in_e]]  # a self-loop is one step
        edge = np.concatenate([out_e, in_e])
        src = np.concatenate([g.h[out_e], g.t[in_e]]).astype(np.int64)
        dst = np.concatenate([g.t[out_e], g.h[in_e]]).astype(np.int64)
        if cap is not None and len(edge) > cap:
            capped = True
            h, r, t = g.triples(edge)
            hashes = xxhash.hash_columns(xxhash.extend(state, i), h, r, t, g.node_ids(src))
            chosen = first_by_hash(hashes, (src, edge), cap)
            edge, src, dst = edge[chosen], src[chosen], dst[chosen]
        layers.append((edge, src, dst))
        nodes = distinct(dst)
    edges, complete, alive = [], [], None
    for edge, src, dst in reversed(layers):
        alive = distinct(dst) if alive is None else alive
        done = np.isin(dst, alive)
        alive = distinct(src[done])
        edges.append(edge)
        complete.append(done)
    if not edges:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), capped
    edges, complete = np.concatenate(edges), np.concatenate(complete)
    order = np.lexsort((~complete, edges))  # per edge: complete first
    edges, complete = edges[order], complete[order]
    first = np.concatenate([[True], edges[1:] != edges[:-1]])
    return edges[first], complete[first], capped


def local_confounders(
    g: graph_adjacency.Adjacency, qid: str, walks, cfg: QuestionGraphSettings
) -> tuple[np.ndarray, list[str]]:
    """Step 4 for one question: ``walks`` rows (seed, relations, forward) of its GT paths of length > 0;
    the confounder edges (sorted) and the caps."""
    kept, n_capped = [], 0
    for seed, relations, forward in walks:
        index = int(g.index([seed])[0])
        if index < 0 or len(relations) == 0:
            continue
        key = xxhash.prefix(cfg.seed, qid, int(seed))
        edges, complete, capped = local_walk(g, index, relations, forward, cfg.metapath_cap, key, cfg.metapath_directed)
        if len(edges) > cfg.metapath_cap:
            capped = True
            hashes = _order_hashes(g, edges, key)
            edges = edges[first_by_hash(hashes, (edges,), cfg.metapath_cap, complete)]
        n_capped += capped
        kept.append(edges)
    edges = distinct(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return edges, [f"metapath_cap: {n_capped} seeds"] if n_capped else []


def local_search_graph(
    g: graph_adjacency.Adjacency, qid: str, seeds, k: int, walks, cfg: QuestionGraphSettings
) -> SearchGraph:
    """Steps 2-4 for one question: H = E_nb + the confounders, with the caps of both."""
    nb, nb_caps = local_neighbourhood(g, qid, seeds, k, cfg)
    conf, conf_caps = local_confounders(g, qid, walks, cfg)
    edges = distinct(np.concatenate([nb, conf]))
    return SearchGraph(edges, np.isin(edges, nb), np.isin(edges, conf), nb_caps + conf_caps)


@dataclass
class LocalGraph:
    """One question's graph (``h, r, t, is_gt, on_sp, source, ppr``; ppr NaN where null) and its sizes."""

    h: np.ndarray
    r: np.ndarray
    t: np.ndarray
    is_gt: np.ndarray
    on_sp: np.ndarray
    source: np.ndarray
    ppr: np.ndarray
    n_neighbourhood: int
    n_confounders: int
    n_top_nodes: int
    n_kept_ppr: int
    n_sp_metapath: int
    n_gt_readded: int
    ppr_iterations: int
    ppr_converged: bool
    caps: list[str] = field(default_factory=list)


def _member(h, r, t, other) -> np.ndarray:
    """Mask of the triples ``h, r, t`` found among ``other`` (rows of 3)."""
    left = pd.DataFrame({"h": h, "r": r, "t": t})
    right = pd.DataFrame(np.asarray(other, dtype=np.int64).reshape(-1, 3), columns=["h", "r", "t"])
    right = right.drop_duplicates().assign(_m=True)
    return left.merge(right, how="left", on=["h", "r", "t"])["_m"].notna().to_numpy()


def _smallest(mask: np.ndarray, order: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` entries of ``mask`` first in ``order`` (a permutation of the rows)."""
    chosen = order[mask[order]][:m]
    out = np.zeros(len(mask), dtype=bool)
    out[chosen] = True
    return out


def build_local(
    h,
    r,
    t,
    in_nb,
    is_conf,
    hashes,
    seeds,
    answer: int,
    gt,
    keep_gt,
    cfg: QuestionGraphSettings,
) -> LocalGraph:
    """Steps 5-10 for one question: H = triples ``h, r, t`` (distinct) with their ``in_nb`` / ``is_conf``
    flags and seeded ``hashes``; ``gt`` and ``keep_gt`` rows of (h, r, t) (module docstring)."""
    h, r, t, hashes = (np.asarray(x, dtype=np.int64).ravel() for x in (h, r, t, hashes))
    in_nb, is_conf = np.asarray(in_nb, dtype=bool).ravel(), np.asarray(is_conf, dtype=bool).ravel()
    sort = np.lexsort((t, r, h))  # row order of the group is not fixed: every result is of sorted input
    h, r, t, hashes, in_nb, is_conf = (x[sort] for x in (h, r, t, hashes, in_nb, is_conf))
    by_hash = np.lexsort((t, r, h, hashes))
    seeds = distinct(np.asarray(seeds, dtype=np.int64))
    gt = np.asarray(gt, dtype=np.int64).reshape(-1, 3)
    keep_gt = np.asarray(keep_gt, dtype=np.int64).reshape(-1, 3)
    caps: list[str] = []
    # shortest seed-answer paths in H and the walks along their metapaths (step 8's re-added triples)
    on_sp = np.zeros(len(h), dtype=bool)
    sp_walks = np.zeros(len(h), dtype=bool)
    for s in seeds:
        found = local_paths.shortest_path_edges(h, r, t, int(s), int(answer))
        if found.distance is None or found.distance == 0:
            continue
        on_sp |= _member(h, r, t, found.edges[["h", "r", "t"]].to_numpy())
        paths = local_metapaths.shortest_path_trie(
            found.edges["h"], found.edges["r"], found.edges["t"], int(s), int(answer), cfg.metapath_directed
        )
        sp_walks |= local_metapaths.walk(h, r, t, int(s), paths, cfg.metapath_directed).complete
    if sp_walks.sum() > cfg.sp_metapath_cap:
        caps.append(f"sp_metapath_cap: {int(sp_walks.sum())} triples")
        sp_walks = _smallest(sp_walks, by_hash, cfg.sp_metapath_cap)
    # step 5: PPR on the undirected multigraph H (both directions per triple, a self-loop once)
    loop = h == t
    ppr = personalized_pagerank(
        np.concatenate([h, t[~loop]]),
        np.concatenate([t, h[~loop]]),
        seeds,
        alpha=cfg.alpha,
        tol=cfg.tol,
        max_iter=cfg.max_iter,
    )
    # step 6: top nodes by score (to 12 decimals, so that symmetric nodes tie exactly), ties by id
    ranked = np.lexsort((ppr.nodes, -np.round(ppr.scores, 12)))
    ranked = ranked[ppr.scores[ranked] > cfg.min_ppr][: cfg.top_nodes]
    position = np.full(len(ppr.nodes), np.iinfo(np.int64).max)
    position[ranked] = np.arange(len(ranked))
    hi, ti = np.searchsorted(ppr.nodes, h), np.searchsorted(ppr.nodes, t)
    rank = np.maximum(position[hi], position[ti])  # a triple needs both ends among the top N: rank < N
    # step 7: keep-always triples (touching G's nodes), the top-node rule, the shrink loop
    gt_nodes = distinct(keep_gt[:, [0, 2]])
    touch_h, touch_t = np.isin(h, gt_nodes), np.isin(t, gt_nodes)
    keep_always = touch_h | touch_t
    one_end = keep_always & ~(touch_h & touch_t)
    if keep_always.sum() > cfg.keep_always_cap:
        caps.append(f"keep_always_cap: {int(one_end.sum())} triples with one end in G")
        keep_always = (touch_h & touch_t) | _smallest(one_end, by_hash, cfg.keep_always_cap)
    n_top = len(ranked)
    kept = (rank < n_top) | keep_always
    while kept.sum() > cfg.max_triples:
        n_top = max(n_top - cfg.shrink_step, 0)
        kept = (rank < n_top) | keep_always
        if n_top < cfg.min_top_nodes or n_top == 0:  # (at 0 nothing is left to drop)
            caps.append(f"min_top_nodes: sampled {min(int(kept.sum()), cfg.max_triples - 2)} of {int(kept.sum())}")
            kept = _smallest(kept, by_hash, cfg.max_triples - 2)
            break
    if n_top < len(ranked):
        caps.append(f"max_triples: {n_top} of {len(ranked)} top nodes")
    # steps 8-10: re-additions and labels
    final = kept | sp_walks | is_conf
    source = np.where(kept, "neighbourhood", np.where(sp_walks, "sp_metapath", "confounder")).astype(object)
    gt_in_h = _member(h, r, t, gt)
    readd = gt_in_h & ~final
    source[readd] = "gt_readd"
    final |= readd
    scores = np.minimum(ppr.scores[hi], ppr.scores[ti])
    outside = gt[~_member(gt[:, 0], gt[:, 1], gt[:, 2], np.column_stack([h, r, t]))] if len(gt) else gt
    outside = np.unique(outside, axis=0)
    return LocalGraph(
        h=np.concatenate([h[final], outside[:, 0]]),
        r=np.concatenate([r[final], outside[:, 1]]),
        t=np.concatenate([t[final], outside[:, 2]]),
        is_gt=np.concatenate([gt_in_h[final], np.ones(len(outside), dtype=bool)]),
        on_sp=np.concatenate([on_sp[final], np.zeros(len(outside), dtype=bool)]),
        source=np.concatenate([source[final], np.full(len(outside), "gt_readd", dtype=object)]),
        ppr=np.concatenate([scores[final], np.full(len(outside), np.nan)]),
        n_neighbourhood=int(in_nb.sum()),
        n_confounders=int(is_conf.sum()),
        n_top_nodes=n_top,
        n_kept_ppr=int(kept.sum()),
        n_sp_metapath=int(sp_walks.sum()),
        n_gt_readded=int(readd.sum()) + len(outside),
        ppr_iterations=ppr.iterations,
        ppr_converged=ppr.converged,
        caps=caps,
    )
