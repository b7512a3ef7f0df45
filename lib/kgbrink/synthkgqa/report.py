"""The ``sp-analysis`` report (paper 002 App. D.2): Table D2 per split beside the paper's published values,
the Fig. D9 table, and the Fig. D9-style plot (left: mean shortest-path length against the ground-truth
path length, with the diagonal where no shortcut exists; right: mean number of shortest paths, log scale)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kgbrink.core import figures
from kgbrink.core.markdown import table as markdown_table
from kgbrink.synthkgqa.shortest_paths import PAPER_TABLE_D2


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def figure(d9: pd.DataFrame, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    top = 1
    for split, rows in d9.sort_values("gt_len").groupby("split"):
        left.plot(rows["gt_len"], rows["sp_len"], marker="o", label=f"SP ({split})")
        right.plot(rows["gt_len"], rows["n_node_paths"], marker="o", label=f"{split}: node paths")
        right.plot(rows["gt_len"], rows["n_triple_paths"], marker="x", linestyle="--", label=f"{split}: triple paths")
        top = max(top, int(rows["gt_len"].max()))
    left.plot([0, top], [0, top], color="grey", linewidth=0.8, label="GT path length")
    left.set_xlabel("ground-truth path length")
    left.set_ylabel("mean shortest-path length")
    right.set_xlabel("ground-truth path length")
    right.set_ylabel("mean number of shortest paths")
    right.set_yscale("log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return figures.save(fig, path)


def markdown(d2: pd.DataFrame, d9: pd.DataFrame, graph: str, answers: str) -> str:
    lines = [
        "# Shortest paths against ground-truth paths (paper 002, App. D.2)",
        "",
        f"Paths searched in: `{graph}`; answers: `{answers}`. Means per question (Table D2) and per "
        "seed-answer pair (Fig. D9); the paper's Table D2 is on the GTSQA test split over ogbl-wikikg2.",
    ]
    for split, rows in d2.sort_values(["split", "n_hops"]).groupby("split"):
        lines += ["", f"## Table D2, split `{split}`", ""]
        table = []
        for row in rows.itertuples():
            paper = PAPER_TABLE_D2.get(int(row.n_hops)) if pd.notna(row.n_hops) else None
            ref = "-" if paper is None else " / ".join(f"{x:g}" for x in paper)
            table.append(
                [row.n_hops, row.questions, _fmt(row.pct_gt_in_sp, 1), _fmt(row.pct_sp_in_gt, 1), _fmt(row.n_gt)]
                + [_fmt(row.n_sp, 1), ref]
            )
        header = ["# hops", "questions", "% GT triples in SP", "% SP triples in GT", "# GT triples", "# SP triples"]
        lines += markdown_table([*header, "paper"], table)
    lines += ["", "## Fig. D9: shortest paths per ground-truth path length", ""]
    header = ["split", "GT length", "pairs", "reachable", "mean SP length", "shortcut share", "mean node paths"]
    lines += markdown_table(
        [*header, "mean triple paths"],
        (
            [row.split, row.gt_len, row.pairs, row.reachable, _fmt(row.sp_len), _fmt(row.shortcut_share)]
            + [_fmt(row.n_node_paths, 1), _fmt(row.n_triple_paths, 1)]
            for row in d9.sort_values(["split", "gt_len"]).itertuples()
        ),
    )
    return "\n".join(lines) + "\n"


def write(d2: pd.DataFrame, d9: pd.DataFrame, out_dir: Path, graph: str, answers: str) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    png = figure(d9, out_dir / "shortest_paths.png", f"Shortest vs ground-truth paths ({graph})")
    md.write_text(markdown(d2, d9, graph, answers) + "\n![shortest paths](shortest_paths.png)\n")
    return [str(md), str(png)]
