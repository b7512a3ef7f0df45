"""Question-specific graphs of paper 002 (App. C.1; spec 2.D): for every question of a ``gt_questions``
table (id, split, seeds S, answer a, answer subgraph G, n_hops) a graph of at most ~30,000 triples that
still contains G, built as the authors' ``compute_neighs_and_sp.py`` does:

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
   dropped unless ``metapath_directed`` (:func:`gt_paths`);
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

Every step runs per question in one Python task (:func:`per_question`) on the whole KG's adjacency,
built once and memory-mapped by the tasks (:mod:`kgbrink.graph.adjacency`): a k-hop ball through hubs
reaches much of the KG, and its node-induced subgraph as a join is the KG's triples once per question
and part before any cap, where in memory it is a scan of the ball's adjacency lists. The seeded hashes
are Spark's ``xxhash64`` computed in numpy (:mod:`kgbrink.graph.xxhash`), so every cap keeps what the
DataFrame definitions (``khop.cap_edges``, ``hashing.smallest_per_key``, ``metapaths.walk``) keep.

Each triple is labelled ``is_gt`` (in G), ``on_sp`` (on a shortest seed-answer path in H, the distance-sum
test of :mod:`kgbrink.graph.local_paths`), ``source`` (the step that put it in the graph, first of
neighbourhood, sp_metapath, confounder, gt_readd) and ``ppr`` (the smaller PPR of its two ends: the
score that decides whether the top-node rule keeps it; null for a triple of G outside H).

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
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from kgbrink.core.frames import checkpoint
from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.core.typed import ConfigError
from kgbrink.graph import adjacency as A
from kgbrink.graph import local_metapaths as LM
from kgbrink.graph import local_paths as LP
from kgbrink.graph import xxhash as X
from kgbrink.graph.local import distinct, personalized_pagerank

MODES = ("directed_union", "undirected")
SOURCES = ("neighbourhood", "sp_metapath", "confounder", "gt_readd")
NO_SPLIT = "none"
QUARANTINE_COLUMNS = ["id", "split", "reason", "detail"]
GRAPH_COLUMNS = ["id", "split", "h", "r", "t", "is_gt", "on_sp", "source", "ppr"]
SIZE_COLUMNS = [
    "id",
    "k",
    "mode",
    "n_neighbourhood",
    "n_top_nodes",
    "n_kept_ppr",
    "n_confounders",
    "n_sp_metapath",
    "n_gt_readded",
    "n_final",
    "caps_applied",
    "ppr_iterations",
    "ppr_converged",
]
_TRIPLES = "array<struct<h: int, r: int, t: int>>"


def check_settings(cfg: QuestionGraphSettings) -> None:
    """ConfigError naming the first ``question_graphs`` setting out of its range."""
    checks = [
        (cfg.mode in MODES, f"question_graphs.mode must be one of {', '.join(MODES)}, got {cfg.mode!r}"),
        (cfg.k_min >= 1, f"question_graphs.k_min must be >= 1, got {cfg.k_min}"),
        (0 < cfg.alpha < 1, f"question_graphs.alpha must be in (0, 1), got {cfg.alpha}"),
        (cfg.tol > 0 and cfg.max_iter >= 1, "question_graphs.tol must be > 0 and max_iter >= 1"),
        (cfg.top_nodes >= 1 and cfg.min_ppr >= 0, "question_graphs.top_nodes must be >= 1 and min_ppr >= 0"),
        (cfg.max_triples >= 2 and cfg.shrink_step >= 1, "question_graphs.max_triples >= 2, shrink_step >= 1"),
        (cfg.min_top_nodes >= 0, "question_graphs.min_top_nodes must be >= 0"),
    ]
    for key in ("mixed_step_cap", "keep_always_cap", "metapath_cap", "sp_metapath_cap"):
        checks.append((getattr(cfg, key) >= 1, f"question_graphs.{key} must be >= 1"))
    for key in ("max_expand_degree", "max_neighbourhood_edges"):
        value = getattr(cfg, key)
        checks.append((value is None or value >= 1, f"question_graphs.{key} must be null or >= 1"))
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


# ---------------------------------------------------------------------------------------------------------
# ground-truth paths (plain Python per question: G has at most a few edges)


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


def gt_paths(questions: DataFrame) -> DataFrame:
    """``qid, seed, gt_len, relations, forward``: per question and distinct seed the path seed -> answer in
    ``gt`` (array of (h, r, t)); nulls when the answer is not reachable from the seed in G."""

    def run(batches):
        for frame in batches:
            rows = []
            for qid, seeds, answer, gt in zip(frame["qid"], frame["seeds"], frame["answer"], frame["gt"]):
                edges = [(int(x["h"]), int(x["r"]), int(x["t"])) for x in gt]
                for seed in sorted({int(s) for s in seeds}):
                    path = tree_path(edges, seed, int(answer))
                    rows.append(
                        (
                            qid,
                            seed,
                            None if path is None else len(path),
                            None if path is None else [p[1] for p in path],
                            None if path is None else [p[3] for p in path],
                        )
                    )
            yield pd.DataFrame(rows, columns=["qid", "seed", "gt_len", "relations", "forward"]).astype(
                {"gt_len": "Int64"}
            )

    schema = "qid string, seed int, gt_len int, relations array<int>, forward array<boolean>"
    return questions.select("qid", "seeds", "answer", "gt").mapInPandas(run, schema)


# ---------------------------------------------------------------------------------------------------------
# input: the gt_questions table, validated


def prepare_questions(
    questions: DataFrame, entities: DataFrame, relations: DataFrame
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``(prepared, paths, quarantine)`` from a ``gt_questions`` table (spec 2.0) and the dataset's
    ``entities(id)`` and ``relations(id)``.

    ``prepared``: ``qid, split, seeds (sorted distinct), answer, gt (distinct triples of answer_subgraph),
    keep_gt (of full_answer_subgraph when present, else gt), n_hops (the table's, else computed)`` and
    ``all_answers`` when the table has it;
    ``paths``: :func:`gt_paths` of the prepared questions. A question is quarantined (``id, split, reason,
    detail``) when its id is missing or repeated, seeds/answer/answer_subgraph are missing or empty, an
    id is not an entity or relation of the dataset, or a seed has no path to the answer in G."""
    missing = {"id", "seeds", "answer", "answer_subgraph"} - set(questions.columns)
    if missing:
        raise ValueError(
            f"question table lacks column(s) {', '.join(sorted(missing))}; it needs id, seeds, answer, "
            "answer_subgraph (and optionally split, n_hops, full_answer_subgraph)"
        )
    split = F.col("split").cast("string") if "split" in questions.columns else F.lit(None).cast("string")
    hops = F.col("n_hops").cast("int") if "n_hops" in questions.columns else F.lit(None).cast("int")
    full = "full_answer_subgraph" in questions.columns
    triple_null = lambda c: F.exists(c, lambda x: x.isNull() | x["h"].isNull() | x["r"].isNull() | x["t"].isNull())  # noqa: E731
    rows = questions.select(
        F.col("id").cast("string").alias("qid"),
        F.coalesce(split, F.lit(NO_SPLIT)).alias("split"),
        F.col("seeds").cast("array<int>").alias("seeds"),
        F.col("answer").cast("int").alias("answer"),
        F.col("answer_subgraph").cast(_TRIPLES).alias("gt"),
        (F.col("full_answer_subgraph") if full else F.col("answer_subgraph")).cast(_TRIPLES).alias("keep_gt"),
        hops.alias("n_hops"),
        *([F.col("all_answers").cast("array<int>").alias("all_answers")] if "all_answers" in questions.columns else []),
    )
    n_same = F.count("*").over(Window.partitionBy("qid"))
    reason = (
        F.when(F.col("qid").isNull(), F.array(F.lit("missing_id"), F.lit("id is null")))
        .when(n_same > 1, F.array(F.lit("duplicate_id"), F.format_string("%d rows share this id", n_same)))
        .when(
            F.col("seeds").isNull() | (F.size("seeds") == 0) | F.exists("seeds", lambda x: x.isNull()),
            F.array(F.lit("no_seeds"), F.lit("seeds is null, empty or holds a null")),
        )
        .when(F.col("answer").isNull(), F.array(F.lit("missing_answer"), F.lit("answer is null")))
        .when(
            F.col("gt").isNull() | (F.size("gt") == 0) | triple_null("gt"),
            F.array(F.lit("empty_answer_subgraph"), F.lit("answer_subgraph is null, empty or holds a null")),
        )
        .when(
            F.col("keep_gt").isNull() | triple_null("keep_gt"),
            F.array(F.lit("bad_full_answer_subgraph"), F.lit("full_answer_subgraph is null or holds a null")),
        )
    )
    rows = rows.withColumn("_why", reason).transform(checkpoint)
    good = rows.where(F.col("_why").isNull()).drop("_why")
    bad = rows.where(F.col("_why").isNotNull()).select(
        "qid", "split", F.col("_why")[0].alias("reason"), F.col("_why")[1].alias("detail")
    )
    nodes = good.select(
        "qid",
        F.explode(
            F.concat(
                F.transform("seeds", lambda x: F.struct(F.lit("seeds").alias("field"), x.alias("id"))),
                F.array(F.struct(F.lit("answer").alias("field"), F.col("answer").alias("id"))),
                F.transform("gt", lambda x: F.struct(F.lit("answer_subgraph").alias("field"), x["h"].alias("id"))),
                F.transform("gt", lambda x: F.struct(F.lit("answer_subgraph").alias("field"), x["t"].alias("id"))),
                F.transform(
                    "keep_gt", lambda x: F.struct(F.lit("full_answer_subgraph").alias("field"), x["h"].alias("id"))
                ),
                F.transform(
                    "keep_gt", lambda x: F.struct(F.lit("full_answer_subgraph").alias("field"), x["t"].alias("id"))
                ),
            )
        ).alias("x"),
    ).select("qid", "x.field", "x.id")
    rels = good.select(
        "qid",
        F.explode(F.concat(F.transform("gt", lambda x: x["r"]), F.transform("keep_gt", lambda x: x["r"]))).alias("id"),
    )
    unknown_nodes = (
        nodes.join(entities.select("id"), "id", "left_anti")
        .groupBy("qid")
        .agg(F.min(F.struct("field", "id")).alias("u"))
    )
    unknown_rels = rels.join(relations.select("id"), "id", "left_anti").groupBy("qid").agg(F.min("id").alias("u"))
    unknown = unknown_nodes.select(
        "qid",
        F.lit("unknown_entity").alias("reason"),
        F.format_string("%s: %d is not an entity id of the dataset", "u.field", "u.id").alias("detail"),
    ).unionByName(
        unknown_rels.select(
            "qid",
            F.lit("unknown_relation").alias("reason"),
            F.format_string("answer_subgraph: relation %d is not a relation id of the dataset", "u").alias("detail"),
        )
    )
    unknown = unknown.groupBy("qid").agg(F.min(F.struct("reason", "detail")).alias("w")).select("qid", "w.*")
    good = good.join(unknown.select("qid"), "qid", "left_anti")
    bad = bad.unionByName(
        unknown.join(rows.select("qid", "split").distinct(), "qid").select("qid", "split", "reason", "detail")
    )
    good = good.withColumn("seeds", F.array_sort(F.array_distinct("seeds")))
    good = good.withColumn("gt", F.array_sort(F.array_distinct("gt"))).withColumn(
        "keep_gt", F.array_sort(F.array_distinct("keep_gt"))
    )
    paths = gt_paths(good).transform(checkpoint)
    no_path = paths.where(F.col("gt_len").isNull()).groupBy("qid").agg(F.min("seed").alias("seed"))
    bad = bad.unionByName(
        no_path.join(good.select("qid", "split"), "qid").select(
            "qid",
            "split",
            F.lit("no_gt_path").alias("reason"),
            F.format_string("answer_subgraph has no path from seed %d to the answer", "seed").alias("detail"),
        )
    )
    good = good.join(no_path.select("qid"), "qid", "left_anti")
    paths = paths.join(no_path.select("qid"), "qid", "left_anti")
    longest = paths.groupBy("qid").agg(F.max("gt_len").alias("_hops"))
    good = good.join(longest, "qid", "left").withColumn("n_hops", F.coalesce("n_hops", "_hops")).drop("_hops")
    quarantine = bad.select(F.col("qid").alias("id"), "split", "reason", "detail")
    return good, paths, quarantine


# ---------------------------------------------------------------------------------------------------------
# steps 2-4: the search graph H, per question in memory on the KG's shared adjacency


@dataclass(frozen=True)
class SearchGraph:
    """One question's H (edge numbers of the adjacency, sorted) with its flags and the caps applied."""

    edges: np.ndarray
    in_nb: np.ndarray
    is_conf: np.ndarray
    caps: list[str]


def _order_hashes(g: A.Adjacency, edges: np.ndarray, state: int) -> np.ndarray:
    """``u64(seed, <prefix>, h, r, t)`` of ``edges`` (``state``: :func:`kgbrink.graph.xxhash.prefix`)."""
    return X.hash_columns(state, *g.triples(edges))


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


def _smallest_edges(g: A.Adjacency, edges: np.ndarray, m: int, state: int) -> np.ndarray:
    """The ``m`` edges with the smallest ``(hash, h, r, t)`` (edge numbers are in (h, r, t) order)."""
    return np.sort(edges[first_by_hash(_order_hashes(g, edges, state), (edges,), m)])


def local_neighbourhood(
    g: A.Adjacency, qid: str, seeds: np.ndarray, k: int, cfg: QuestionGraphSettings
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
        found = A.ball(g, start, k, "both", hub_cap)
        hubs = found.nodes[found.hub]
        edges = A.induced(g, found.nodes)
    else:
        parts, hubs = [], []
        for direction, back, part in (("out", "in", "out_in"), ("in", "out", "in_out")):
            found = A.ball(g, start, k, direction, hub_cap)
            hubs.append(found.nodes[found.hub])
            parts.append(A.induced(g, found.nodes))
            near = found.dist <= 1
            grown = A.neighbours(g, found.nodes[near & ~found.hub], back)
            mixed = A.induced(g, np.concatenate([found.nodes[near], grown]))
            if len(mixed) > cfg.mixed_step_cap:
                caps.append(f"mixed_step_cap: {part} {len(mixed)} triples")
                mixed = _smallest_edges(g, mixed, cfg.mixed_step_cap, X.prefix(cfg.seed, qid, part))
            parts.append(mixed)
        hubs = distinct(np.concatenate(hubs))
        edges = A.distinct(np.concatenate(parts), g.n_edges)
    if hub_cap is not None and len(hubs):
        caps.append(f"max_expand_degree: {len(hubs)} hubs")
    limit = cfg.max_neighbourhood_edges
    if limit is not None and len(edges) > limit:
        caps.append(f"max_neighbourhood_edges: {len(edges)} triples")
        member = np.zeros(g.n_nodes, dtype=bool)
        member[start] = True
        at_seed = member[g.h[edges]] | member[g.t[edges]]
        keep = at_seed.copy()
        keep[first_by_hash(_order_hashes(g, edges, X.prefix(cfg.seed, qid)), (edges,), limit, at_seed)] = True
        edges = edges[keep]
    return edges, caps


def local_walk(
    g: A.Adjacency, start: int, relations, forward, cap: int | None, state: int, directed: bool
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(edges, complete, capped)``: the triples on walks from node index ``start`` along ``relations``
    (:func:`kgbrink.graph.metapaths.walk` for one walk: a step keeps at most ``cap`` transitions, the
    smallest ``u64(seed, key, step, h, r, t, src)``, ``state`` the hash prefix of (seed, key))."""
    layers, capped = [], False
    nodes = np.array([start], dtype=np.int64)
    for i, relation in enumerate(relations, start=1):
        relation = int(relation)
        out_e = A.relation_out_edges(g, nodes, relation) if not directed or forward[i - 1] else np.zeros(0, np.int64)
        in_e = A.relation_in_edges(g, nodes, relation) if not directed or not forward[i - 1] else np.zeros(0, np.int64)
        if not directed:
            in_e = in_e[g.h[in_e] != g.t[in_e]]  # a self-loop is one step
        edge = np.concatenate([out_e, in_e])
        src = np.concatenate([g.h[out_e], g.t[in_e]]).astype(np.int64)
        dst = np.concatenate([g.t[out_e], g.h[in_e]]).astype(np.int64)
        if cap is not None and len(edge) > cap:
            capped = True
            h, r, t = g.triples(edge)
            hashes = X.hash_columns(X.extend(state, i), h, r, t, g.node_ids(src))
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


def local_confounders(g: A.Adjacency, qid: str, walks, cfg: QuestionGraphSettings) -> tuple[np.ndarray, list[str]]:
    """Step 4 for one question: ``walks`` rows (seed, relations, forward) of its GT paths of length > 0;
    the confounder edges (sorted) and the caps."""
    kept, n_capped = [], 0
    for seed, relations, forward in walks:
        index = int(g.index([seed])[0])
        if index < 0 or len(relations) == 0:
            continue
        key = X.prefix(cfg.seed, qid, int(seed))
        edges, complete, capped = local_walk(g, index, relations, forward, cfg.metapath_cap, key, cfg.metapath_directed)
        if len(edges) > cfg.metapath_cap:
            capped = True
            hashes = _order_hashes(g, edges, key)
            edges = edges[first_by_hash(hashes, (edges,), cfg.metapath_cap, complete)]
        n_capped += capped
        kept.append(edges)
    edges = distinct(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return edges, [f"metapath_cap: {n_capped} seeds"] if n_capped else []


def local_search_graph(g: A.Adjacency, qid: str, seeds, k: int, walks, cfg: QuestionGraphSettings) -> SearchGraph:
    """Steps 2-4 for one question: H = E_nb + the confounders, with the caps of both."""
    nb, nb_caps = local_neighbourhood(g, qid, seeds, k, cfg)
    conf, conf_caps = local_confounders(g, qid, walks, cfg)
    edges = distinct(np.concatenate([nb, conf]))
    return SearchGraph(edges, np.isin(edges, nb), np.isin(edges, conf), nb_caps + conf_caps)


def search_graph_of(g: A.Adjacency, row, cfg: QuestionGraphSettings) -> SearchGraph:
    """:func:`local_search_graph` of one row of :func:`search_inputs` (``qid, seeds, k, walks``)."""
    return local_search_graph(g, row["qid"], row["seeds"], int(row["k"]), _walk_rows(row["walks"]), cfg)


def _walk_rows(value) -> list[tuple[int, list[int], list[bool]]]:
    """(seed, relations, forward) of a ``walks`` value as pandas gives it (None: no walk)."""
    if value is None:
        return []
    rows = []
    for w in value:
        forward = [] if w["forward"] is None else [bool(x) for x in w["forward"]]
        rows.append((int(w["seed"]), [int(x) for x in w["relations"]], forward))
    return rows


def search_inputs(questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings) -> DataFrame:
    """``qid, seeds, k, walks`` (and the other columns of ``questions``): one row per question with its
    radius and its GT metapaths of length > 0."""
    walks = (
        paths.where(F.col("gt_len") > 0)
        .groupBy("qid")
        .agg(F.collect_list(F.struct("seed", "relations", "forward")).alias("walks"))
    )
    return questions.withColumn("k", F.greatest(F.lit(cfg.k_min), F.col("n_hops"))).join(walks, "qid", "left")


def per_question(kg: DataFrame, rows: DataFrame, fn, schema: str) -> DataFrame:
    """``fn(adjacency, row)`` (a pandas DataFrame of ``schema``) for every row of ``rows`` (one per
    question, column ``qid``), in Python tasks that share the adjacency of ``kg(h, r, t)`` (int columns);
    checkpointed. Every row is answered from its own content, so the output does not depend on the
    partitioning."""
    for column in ("h", "r", "t"):
        if kg.schema[column].dataType.simpleString() != "int":
            raise ValueError(f"per_question: the KG's column {column} must be int (the hashes are of ints)")
    shared = A.share(kg)

    def run(batches):
        g = shared.get()
        for frame in batches:
            for row in frame.to_dict("records"):
                yield fn(g, row)

    spark = rows.sparkSession
    parts = max(2, 8 * spark.sparkContext.defaultParallelism)
    try:
        return rows.repartition(parts, "qid").mapInPandas(run, schema).transform(checkpoint)
    finally:
        A.release(shared)


def neighbourhood(
    kg: DataFrame, seeds: DataFrame, limits: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(edges(qid, h, r, t), caps(qid, cap))``: E_nb of step 2 for ``seeds(qid, node)`` with the radius
    ``limits(qid, k)`` (:func:`local_neighbourhood`)."""
    rows = seeds.groupBy("qid").agg(F.collect_set("node").alias("seeds")).join(limits.select("qid", "k"), "qid")

    def fn(g, row):
        edges, caps = local_neighbourhood(g, row["qid"], row["seeds"], int(row["k"]), cfg)
        return _edge_rows(g, row["qid"], edges, caps)

    out = per_question(kg, rows, fn, _EDGE_SCHEMA)
    return out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t"), out.where(F.col("cap").isNotNull()).select(
        "qid", "cap"
    )


_EDGE_SCHEMA = "qid string, h int, r int, t int, in_nb boolean, is_conf boolean, cap string"


def _edge_rows(g, qid: str, edges: np.ndarray, caps: list[str], in_nb=None, is_conf=None) -> pd.DataFrame:
    """Rows of :data:`_EDGE_SCHEMA`: the triples of ``edges`` (cap null), then one row per cap (h null)."""
    h, r, t = g.triples(edges)
    n = len(edges)
    flags = lambda x: pd.array(np.ones(n, dtype=bool) if x is None else x, dtype="boolean")  # noqa: E731
    triples = pd.DataFrame(
        {
            "qid": qid,
            "h": pd.array(h, dtype="Int32"),
            "r": pd.array(r, dtype="Int32"),
            "t": pd.array(t, dtype="Int32"),
            "in_nb": flags(in_nb),
            "is_conf": flags(is_conf),
            "cap": pd.Series([None] * n, dtype=object),
        }
    )
    cap_rows = pd.DataFrame({"qid": [qid] * len(caps), "cap": pd.Series(caps, dtype=object)})
    return pd.concat([triples, cap_rows], ignore_index=True).astype(
        {"h": "Int32", "r": "Int32", "t": "Int32", "in_nb": "boolean", "is_conf": "boolean"}
    )


def search_graph(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(H(qid, h, r, t, in_nb, is_conf), caps(qid, cap))``: the neighbourhood and the confounders of
    the prepared ``questions`` (steps 1-4), the graph PPR and the shortest paths run on."""
    rows = search_inputs(questions, paths, cfg).select("qid", "seeds", "k", "walks")

    def fn(g, row):
        found = search_graph_of(g, row, cfg)
        return _edge_rows(g, row["qid"], found.edges, found.caps, found.in_nb, found.is_conf)

    out = per_question(kg, rows, fn, _EDGE_SCHEMA)
    graph = out.where(F.col("h").isNotNull()).select("qid", "h", "r", "t", "in_nb", "is_conf")
    return graph, out.where(F.col("cap").isNotNull()).select("qid", "cap")


# ---------------------------------------------------------------------------------------------------------
# steps 5-10: one question in memory


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
        found = LP.shortest_path_edges(h, r, t, int(s), int(answer))
        if found.distance is None or found.distance == 0:
            continue
        on_sp |= _member(h, r, t, found.edges[["h", "r", "t"]].to_numpy())
        paths = LM.shortest_path_trie(
            found.edges["h"], found.edges["r"], found.edges["t"], int(s), int(answer), cfg.metapath_directed
        )
        sp_walks |= LM.walk(h, r, t, int(s), paths, cfg.metapath_directed).complete
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


# ---------------------------------------------------------------------------------------------------------
# the job's transformation


_LOCAL_SCHEMA = (
    "qid string, h int, r int, t int, is_gt boolean, on_sp boolean, source string, ppr double, "
    "n_neighbourhood long, n_top_nodes int, n_kept_ppr long, n_confounders long, n_sp_metapath long, "
    "n_gt_readded long, n_final long, local_caps array<string>, ppr_iterations int, ppr_converged boolean"
)


def _local_rows(qid: str, got: LocalGraph) -> pd.DataFrame:
    """The triple rows and one sizes row (h null) of a question, in :data:`_LOCAL_SCHEMA`."""
    n = len(got.h)
    triples = pd.DataFrame(
        {
            "qid": qid,
            "h": pd.array(got.h, dtype="Int32"),
            "r": pd.array(got.r, dtype="Int32"),
            "t": pd.array(got.t, dtype="Int32"),
            "is_gt": pd.array(got.is_gt, dtype="boolean"),
            "on_sp": pd.array(got.on_sp, dtype="boolean"),
            "source": got.source.astype(object),
            "ppr": pd.Series(got.ppr, dtype="float64"),
        }
    )
    sizes = pd.DataFrame(
        {
            "qid": [qid],
            "n_neighbourhood": [got.n_neighbourhood],
            "n_top_nodes": [got.n_top_nodes],
            "n_kept_ppr": [got.n_kept_ppr],
            "n_confounders": [got.n_confounders],
            "n_sp_metapath": [got.n_sp_metapath],
            "n_gt_readded": [got.n_gt_readded],
            "n_final": [n],
            "local_caps": [list(got.caps)],
            "ppr_iterations": [got.ppr_iterations],
            "ppr_converged": [got.ppr_converged],
        }
    )
    out = pd.concat([triples, sizes], ignore_index=True)
    ints = {
        c: "Int64"
        for c in ("n_neighbourhood", "n_kept_ppr", "n_confounders", "n_sp_metapath", "n_gt_readded", "n_final")
    }
    out = out.astype({**ints, "n_top_nodes": "Int32", "ppr_iterations": "Int32", "ppr_converged": "boolean"})
    out["local_caps"] = pd.Series([None] * n + [list(got.caps)], dtype=object)
    return out[[f.split()[0] for f in _LOCAL_SCHEMA.split(", ")]]


def _triples(value) -> np.ndarray:
    """Rows (h, r, t) of an array<struct<h, r, t>> value as pandas gives it (a list of dicts or Rows)."""
    return np.array([(x["h"], x["r"], x["t"]) for x in value], dtype=np.int64).reshape(-1, 3)


def local_question_graph(g: A.Adjacency, row, cfg: QuestionGraphSettings) -> tuple[tuple, pd.DataFrame]:
    """Steps 1-10 for one row of :func:`search_inputs`: ``((h, r, t) of H, rows of _LOCAL_SCHEMA)``."""
    qid = row["qid"]
    found = search_graph_of(g, row, cfg)
    h, r, t = g.triples(found.edges)
    got = build_local(
        h,
        r,
        t,
        found.in_nb,
        found.is_conf,
        X.hash_columns(X.prefix(cfg.seed, qid), h, r, t),
        row["seeds"],
        int(row["answer"]),
        _triples(row["gt"]),
        _triples(row["keep_gt"]),
        cfg,
    )
    got.caps[:0] = found.caps
    return (h, r, t), _local_rows(qid, got)


GRAPH_INPUTS = ("qid", "seeds", "answer", "gt", "keep_gt", "k", "walks")


def question_graphs(
    kg: DataFrame, questions: DataFrame, paths: DataFrame, cfg: QuestionGraphSettings
) -> tuple[DataFrame, DataFrame]:
    """``(graphs(id, split, h, r, t, is_gt, on_sp, source, ppr), sizes)`` (catalog ``question_graphs``,
    ``question_graph_sizes``) of :func:`prepare_questions` output over ``kg(h, r, t)`` (distinct): steps
    1-10 per question in one task (:func:`per_question`)."""
    check_settings(cfg)
    rows = search_inputs(questions, paths, cfg).select(*GRAPH_INPUTS)
    out = per_question(kg, rows, lambda g, row: local_question_graph(g, row, cfg)[1], _LOCAL_SCHEMA)
    return graph_tables(out, questions, cfg)


def graph_tables(out: DataFrame, questions: DataFrame, cfg: QuestionGraphSettings) -> tuple[DataFrame, DataFrame]:
    """The ``question_graphs`` and ``question_graph_sizes`` tables of per-question rows of
    :data:`_LOCAL_SCHEMA` (triples: h set; sizes: n_final set; other rows are ignored)."""
    splits = questions.select("qid", "split", F.greatest(F.lit(cfg.k_min), F.col("n_hops")).alias("k"))
    graphs = (
        out.where(F.col("h").isNotNull())
        .join(splits, "qid")
        .select(F.col("qid").alias("id"), "split", "h", "r", "t", "is_gt", "on_sp", "source", "ppr")
    )
    sizes = (
        out.where(F.col("n_final").isNotNull())
        .join(splits, "qid")
        .select(
            F.col("qid").alias("id"),
            "k",
            F.lit(cfg.mode).alias("mode"),
            "n_neighbourhood",
            "n_top_nodes",
            "n_kept_ppr",
            "n_confounders",
            "n_sp_metapath",
            "n_gt_readded",
            "n_final",
            F.array_sort("local_caps").alias("caps_applied"),
            "ppr_iterations",
            "ppr_converged",
        )
    )
    return graphs, sizes
