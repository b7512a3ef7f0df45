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
            ax.plot(rows["level"], rows[metric], marker="o", label=method)
        ax.set_title(metric.upper())
        ax.set_xlabel("perturbation level")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend()
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
        "| scope | method | level | graphs | ATS | SC2D | SD2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary.sort_values(["scope", "method", "level"]).itertuples():
        lines.append(
            f"| {row.scope} | {row.method} | {row.level:g} | {row.n_graphs} | {row.ats:.4f} | {row.sc2d:.4f} | "
            f"{row.sd2:.4f} |"
        )
    return "\n".join(lines) + "\n"


def write(summary: pd.DataFrame, out_dir: Path, scorer: str, paper_scorer: bool) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    png = figure(summary, out_dir / "similarity.png", f"OKGQA-P: KG similarity against perturbation level ({scorer})")
    md.write_text(markdown(summary, scorer, paper_scorer) + "\n![similarity](similarity.png)\n")
    return [str(md), str(png)]
