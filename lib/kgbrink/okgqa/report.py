"""The OKGQA-P sweep report: the metrics against the perturbation level, one line per method, one panel
per metric (paper 004 Fig. 4), and the summary table in Markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kgbrink.core import figures
from kgbrink.core.markdown import table as markdown_table

METRICS = ("ats", "sc2d", "sd2")


def figure(summary: pd.DataFrame, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharex=True)
    for ax, metric in zip(axes, METRICS):
        for method, rows in summary.sort_values("level").groupby("method"):
            line = ax.plot(rows["level"], rows[metric], marker="o", label=method)[0]
            # a level the method could not reach on this KG: a hollow marker at the level asked for
            short = rows[rows["reached"] < 1]
            if len(short):
                ax.plot(short["level"], short[metric], "o", mfc="white", mec=line.get_color(), ms=9, zorder=3)
        ax.set_title(metric.upper())
        ax.set_xlabel("perturbation level")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend()
    if (summary["reached"] < 1).any():
        title += "\nhollow: level not reached (see report.md)"
    fig.suptitle(title, fontsize=9)
    return figures.save(fig, path)


def markdown(summary: pd.DataFrame, scorer: str, paper_scorer: bool) -> str:
    lines = [
        "# OKGQA-P perturbation sweep",
        "",
        f"Scorer of RR and ATS: `{scorer}`"
        + ("" if paper_scorer else " (kgbrink's type-compatibility stand-in, NOT the paper's s_G: ATS and RR differ)"),
        "",
    ]
    lines += markdown_table(
        ["scope", "method", "level", "reached", "graphs", "ATS", "SC2D", "SD2"],
        (
            [row.scope, row.method, f"{row.level:g}", f"{row.reached:.4f}" + (" !" if row.reached < 1 else "")]
            + [row.n_graphs, f"{row.ats:.4f}", f"{row.sc2d:.4f}", f"{row.sd2:.4f}"]
            for row in summary.sort_values(["scope", "method", "level"]).itertuples()
        ),
    )
    short = summary[summary["reached"] < 1]
    if len(short):
        lines += [
            "",
            "Levels marked `!` were not reached: every candidate was taken and fewer operations could be made "
            "than the level asks (RS/RR: the others would create a triple the graph already holds; ER: no free "
            "target left). The row's metrics are those of the graph with the operations made; `reached` = "
            "operations made / requested. Levels short:",
            "",
            *[
                f"- {row.method} {row.level:g} ({row.scope}): {row.operations:,} of {row.requested:,} operations, "
                f"{row.short_graphs} of {row.n_graphs} graphs short"
                for row in short.itertuples()
            ],
        ]
    return "\n".join(lines) + "\n"


def write(summary: pd.DataFrame, out_dir: Path, scorer: str, paper_scorer: bool) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    png = figure(summary, out_dir / "similarity.png", f"OKGQA-P: KG similarity against perturbation level ({scorer})")
    md.write_text(markdown(summary, scorer, paper_scorer) + "\n![similarity](similarity.png)\n")
    return [str(md), str(png)]


def answers_figure(levels: pd.DataFrame, path: Path, title: str) -> Path:
    """Paper 004 Fig. 5's view: per metric (a panel) the score against the perturbation level, one line per
    method; the last panel the drop g(G) - g(G') against SD2. ``levels``: rows of ``okgqa_levels``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted(levels["metric"].unique())
    fig, axes = plt.subplots(1, len(metrics) + 1, figsize=(3.4 * (len(metrics) + 1), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for method, rows in levels[levels["metric"] == metric].sort_values("level").groupby("method"):
            ax.plot(rows["level"], rows["value"], marker="o", label=method)
        ax.set_title(metric)
        ax.set_xlabel("perturbation level")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("score (%)")
    axes[0][0].legend()
    ax = axes[0][-1]
    for method, rows in levels[levels["sd2"].notna()].groupby("method"):
        ax.plot(rows["sd2"], rows["drop"], "o", label=method)
    ax.set_title("g(G) - g(G') against SD2")
    ax.set_xlabel("SD2")
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    return figures.save(fig, path)


def answers_markdown(levels: pd.DataFrame, heading: str) -> str:
    """The ``okgqa_levels`` rows as a Markdown table (a blank cell: not measured)."""

    def cell(value, digits: int) -> str:
        return "" if pd.isna(value) else f"{value:.{digits}f}"

    lines = [
        f"# {heading}",
        "",
    ]
    lines += markdown_table(
        ["method", "level", "metric", "score (%)", "g(G) - g(G')", "seeds", "ATS", "SC2D", "SD2"],
        (
            [row.method, f"{row.level:g}", row.metric, cell(row.value, 2), cell(row.drop, 2), row.seeds]
            + [cell(row.ats, 4), cell(row.sc2d, 4), cell(row.sd2, 4)]
            for row in levels.sort_values(["metric", "method", "level"]).itertuples()
        ),
    )
    return "\n".join(lines) + "\n"
