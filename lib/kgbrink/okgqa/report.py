"""The OKGQA-P sweep report: the metrics against the perturbation level, one line per method, one panel
per metric (paper 004 Fig. 4), and the summary table in Markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

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
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(summary: pd.DataFrame, scorer: str, paper_scorer: bool) -> str:
    lines = [
        "# OKGQA-P perturbation sweep",
        "",
        f"Scorer of RR and ATS: `{scorer}`"
        + ("" if paper_scorer else " (kgbrink's type-compatibility stand-in, NOT the paper's s_G: ATS and RR differ)"),
        "",
        "| scope | method | level | reached | graphs | ATS | SC2D | SD2 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary.sort_values(["scope", "method", "level"]).itertuples():
        reached = f"{row.reached:.4f}" + (" !" if row.reached < 1 else "")
        lines.append(
            f"| {row.scope} | {row.method} | {row.level:g} | {reached} | {row.n_graphs} | {row.ats:.4f} | "
            f"{row.sc2d:.4f} | {row.sd2:.4f} |"
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
