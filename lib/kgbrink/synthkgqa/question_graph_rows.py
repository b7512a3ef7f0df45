"""The rows of the per-question tasks of :mod:`kgbrink.synthkgqa.question_graphs`: a task's input row
(a pandas record of ``qid, seeds, k, walks, answer, gt, keep_gt``) to the numpy algorithm of
:mod:`kgbrink.synthkgqa.question_graph_local`, and its result back to rows of the tasks' schemas
(:data:`EDGE_SCHEMA`, :data:`LOCAL_SCHEMA`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kgbrink.core.settings import QuestionGraphSettings
from kgbrink.graph import adjacency as graph_adjacency
from kgbrink.graph import xxhash
from kgbrink.synthkgqa.question_graph_local import LocalGraph, SearchGraph, build_local, local_search_graph


def search_graph_of(g: graph_adjacency.Adjacency, row, cfg: QuestionGraphSettings) -> SearchGraph:
    """:func:`local_search_graph` of one row of :func:`kgbrink.synthkgqa.question_graphs.search_inputs`
    (``qid, seeds, k, walks``)."""
    return local_search_graph(g, row["qid"], row["seeds"], int(row["k"]), walk_rows(row["walks"]), cfg)


def walk_rows(value) -> list[tuple[int, list[int], list[bool]]]:
    """(seed, relations, forward) of a ``walks`` value as pandas gives it (None: no walk)."""
    if value is None:
        return []
    rows = []
    for w in value:
        forward = [] if w["forward"] is None else [bool(x) for x in w["forward"]]
        rows.append((int(w["seed"]), [int(x) for x in w["relations"]], forward))
    return rows


EDGE_SCHEMA = "qid string, h int, r int, t int, in_nb boolean, is_conf boolean, cap string"


def edge_rows(g, qid: str, edges: np.ndarray, caps: list[str], in_nb=None, is_conf=None) -> pd.DataFrame:
    """Rows of :data:`EDGE_SCHEMA`: the triples of ``edges`` (cap null), then one row per cap (h null)."""
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


LOCAL_SCHEMA = (
    "qid string, h int, r int, t int, is_gt boolean, on_sp boolean, source string, ppr double, "
    "n_neighbourhood long, n_top_nodes int, n_kept_ppr long, n_confounders long, n_sp_metapath long, "
    "n_gt_readded long, n_final long, local_caps array<string>, ppr_iterations int, ppr_converged boolean"
)


def local_rows(qid: str, got: LocalGraph) -> pd.DataFrame:
    """The triple rows and one sizes row (h null) of a question, in :data:`LOCAL_SCHEMA`."""
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
    return out[[f.split()[0] for f in LOCAL_SCHEMA.split(", ")]]


def triple_rows(value) -> np.ndarray:
    """Rows (h, r, t) of an array<struct<h, r, t>> value as pandas gives it (a list of dicts or Rows)."""
    return np.array([(x["h"], x["r"], x["t"]) for x in value], dtype=np.int64).reshape(-1, 3)


def local_question_graph(g: graph_adjacency.Adjacency, row, cfg: QuestionGraphSettings) -> tuple[tuple, pd.DataFrame]:
    """Steps 1-10 for one row of :func:`kgbrink.synthkgqa.question_graphs.search_inputs`: ``((h, r, t) of
    H, rows of LOCAL_SCHEMA)``."""
    qid = row["qid"]
    found = search_graph_of(g, row, cfg)
    h, r, t = g.triples(found.edges)
    got = build_local(
        h,
        r,
        t,
        found.in_nb,
        found.is_conf,
        xxhash.hash_columns(xxhash.prefix(cfg.seed, qid), h, r, t),
        row["seeds"],
        int(row["answer"]),
        triple_rows(row["gt"]),
        triple_rows(row["keep_gt"]),
        cfg,
    )
    got.caps[:0] = found.caps
    return (h, r, t), local_rows(qid, got)
