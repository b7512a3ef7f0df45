"""The ``score-mcq`` report (paper 003, README "Answer Confidence Quantification", "Knowledge Utilization
Analysis"): accuracy and NKD by difficulty, by topic-entity degree group (Fig. 9-11) and by fixed gold
position (Fig. 12-14), the overlap of correct answers across difficulties (the Venn diagrams), as Markdown
tables and plots (one line or bar per model and run)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kgbrink.core import figures
from kgbrink.core.markdown import table as markdown_table
from kgbrink.mcq.scoring import DIFFICULTIES, group_order

METRICS = ("accuracy", "nkd")


def _fmt(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.4f}"


def _label(row) -> str:
    return f"{row['model']}/{row['run']}"


def _ordered_difficulties(scores: pd.DataFrame) -> list[str]:
    found = set(scores["difficulty"])
    return [d for d in DIFFICULTIES if d in found] + sorted(found - set(DIFFICULTIES))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def by_difficulty_figure(scores: pd.DataFrame, path: Path) -> Path:
    """Accuracy and NKD per difficulty: grouped bars, one bar per model and run."""
    plt = _plt()
    rows = scores[scores.group_kind == "all"]
    difficulties = _ordered_difficulties(rows)
    runs = sorted({_label(r) for _, r in rows.iterrows()})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / max(1, len(runs))
    for ax, metric in zip(axes, METRICS):
        for i, name in enumerate(runs):
            part = rows[rows.apply(_label, axis=1) == name].set_index("difficulty")
            values = [part[metric].get(d) if d in part.index else None for d in difficulties]
            xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(difficulties))]
            ax.bar(xs, [0.0 if v is None or pd.isna(v) else v for v in values], width, label=name)
        ax.set_xticks(range(len(difficulties)), difficulties)
        ax.set_title("accuracy" if metric == "accuracy" else "NKD")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle("ProbeKGC: accuracy and NKD by option difficulty", fontsize=9)
    return figures.save(fig, path)


def by_group_figure(scores: pd.DataFrame, kind: str, path: Path, title: str) -> Path:
    """Accuracy (top) and NKD (bottom) per group of ``kind``, one panel per difficulty, one line per run."""
    plt = _plt()
    rows = scores[scores.group_kind == kind]
    difficulties = _ordered_difficulties(rows)
    groups = sorted(set(rows["group"]), key=group_order)
    fig, axes = plt.subplots(2, len(difficulties), figsize=(4 * len(difficulties), 6), squeeze=False)
    for col, difficulty in enumerate(difficulties):
        part = rows[rows.difficulty == difficulty]
        for name, run_rows in part.groupby(part.apply(_label, axis=1), sort=True):
            by_group = run_rows.set_index("group")
            xs = [i for i, g in enumerate(groups) if g in by_group.index]
            for row, metric in enumerate(METRICS):
                ys = [by_group.loc[groups[i], metric] for i in xs]
                axes[row][col].plot(xs, ys, marker="o", label=name)
        for row, metric in enumerate(METRICS):
            ax = axes[row][col]
            ax.set_xticks(range(len(groups)), groups, rotation=45, fontsize=7)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.set_title(f"{difficulty}: {'accuracy' if metric == 'accuracy' else 'NKD'}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return figures.save(fig, path)


def markdown(scores: pd.DataFrame, overlap: pd.DataFrame, params: dict, counts: dict) -> str:
    lines = [
        "# ProbeKGC multiple-choice scores",
        "",
        f"Questions: `{params.get('questions')}`; predictions: `{params.get('predictions')}`.",
        "",
        "NKD = 1 - exp(-KL(u || p) / K), u uniform over the K options (spec 3.C); "
        + (
            "API log-probabilities taken as given (`api_raw`, the authors' code)."
            if params.get("api_raw")
            else "log-probabilities renormalised over the options."
        )
        + f" Topic-degree groups: {params.get('degree_bins')}.",
        "",
        f"Predictions: {counts.get('predictions', 0)}, scored {counts.get('scored', 0)}, quarantined "
        f"{counts.get('quarantined', 0)}"
        + (
            " (" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.get("quarantined_by_reason", {}).items())) + ")"
            if counts.get("quarantined")
            else ""
        )
        + ".",
        "",
    ]
    if not scores.empty and scores["nkd"].isna().all():
        lines += [
            "NKD is `-` everywhere: no prediction carries the options' log-probabilities (an endpoint that "
            "returns no `logprobs`, or predictions without `logits`); accuracy needs only the letter.",
            "",
        ]
    titles = {"all": "By difficulty", "degree": "By topic-entity degree", "fixed_position": "By fixed gold position"}
    for kind, title in titles.items():
        part = scores[scores.group_kind == kind]
        if part.empty:
            continue
        lines += [f"## {title}", ""]
        lines += markdown_table(
            ["model", "run", "difficulty", "group", "n", "accuracy", "NKD"],
            (
                [r["model"], r["run"], r["difficulty"], r["group"], r["n"], _fmt(r["accuracy"]), _fmt(r["nkd"])]
                for _, r in part.iterrows()
            ),
        )
        lines.append("")
    if not overlap.empty:
        lines += [
            "## Correct answers across difficulties",
            "",
            "Queries (triple and task) by the difficulties they were answered correctly at (`-`: no prediction).",
            "",
        ]
        mark = {True: "yes", False: "no"}
        lines += markdown_table(
            ["model", "run", "easy", "medium", "hard", "queries"],
            (
                [r["model"], r["run"], *("-" if pd.isna(r[d]) else mark[bool(r[d])] for d in DIFFICULTIES), r["n"]]
                for _, r in overlap.iterrows()
            ),
        )
        lines.append("")
    return "\n".join(lines)


def write(scores: list[dict], overlap: list[dict], out_dir: Path, params: dict, counts: dict) -> list[str]:
    """``report.md`` and the plots in ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(scores, columns=["model", "run", "difficulty", "group_kind", "group", "n", "accuracy", "nkd"])
    venn = pd.DataFrame(overlap, columns=["model", "run", *DIFFICULTIES, "n"])
    files, images = [], []
    if not frame[frame.group_kind == "all"].empty:
        images.append(by_difficulty_figure(frame, out_dir / "by_difficulty.png"))
    if not frame[frame.group_kind == "degree"].empty:
        title = f"ProbeKGC: accuracy and NKD by topic-entity degree ({params.get('degree_bins')})"
        images.append(by_group_figure(frame, "degree", out_dir / "by_degree.png", title))
    if not frame[frame.group_kind == "fixed_position"].empty:
        title = "ProbeKGC: accuracy and NKD with the gold at a fixed position"
        images.append(by_group_figure(frame, "fixed_position", out_dir / "by_position.png", title))
    text = markdown(frame, venn, params, counts)
    text += "".join(f"\n![{p.stem}]({p.name})\n" for p in images)
    md = out_dir / "report.md"
    md.write_text(text)
    files.append(str(md))
    return files + [str(p) for p in images]
