"""Figures and tables of a score run: the alpha x beta heat map per model (PROBE paper, Fig. 12) and the
model-comparison table with min-max normalisation per (alpha, beta) cell (Sec. 5.4)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kgbrink.core import figures, markdown
from kgbrink.probe.scoring import min_max_by_cell


def heatmap(cells: pd.DataFrame, model: str, path: Path) -> Path:
    """One model's grid: x = alpha (descending sharpness left to right as in Fig. 12: -1 .. 1), y = beta;
    colour = the min-max normalised score across models, text = the PROBE score (mean over runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = cells[cells["model"] == model]
    alphas = sorted(mine["alpha"].unique())
    betas = sorted(mine["beta"].unique())
    colour = mine.pivot(index="beta", columns="alpha", values="normalised").reindex(index=betas, columns=alphas)
    value = mine.pivot(index="beta", columns="alpha", values="value").reindex(index=betas, columns=alphas)
    fig, ax = plt.subplots(figsize=(1.1 * len(alphas) + 1.5, 0.8 * len(betas) + 1.2))
    image = ax.imshow(colour.to_numpy(dtype=float), origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(alphas)), [f"{a:g}" for a in alphas])
    ax.set_yticks(range(len(betas)), [f"{b:g}" for b in betas])
    ax.set_xlabel("alpha (predictive sharpness)")
    ax.set_ylabel("beta (popularity-bias robustness)")
    ax.set_title(f"PROBE: {model}")
    for (i, j), v in pd.DataFrame(value.to_numpy()).stack().items():
        ax.text(
            j,
            i,
            f"{v:.3f}",
            ha="center",
            va="center",
            color="white" if colour.iloc[i, j] < 0.6 else "black",
            fontsize=8,
        )
    fig.colorbar(image, ax=ax, label="min-max normalised across models")
    return figures.save(fig, path)


def comparison_markdown(cells: pd.DataFrame) -> str:
    """Models x (alpha, beta) cells, each ``score (normalised)``."""
    cells = cells.assign(cell=[f"a={a:g} b={b:g}" for a, b in zip(cells["alpha"], cells["beta"])])
    order = list(dict.fromkeys(cells.sort_values(["beta", "alpha"], ascending=[True, False])["cell"]))
    table = cells.pivot(index="model", columns="cell", values="value")[order]
    norm = cells.pivot(index="model", columns="cell", values="normalised")[order]
    lines = markdown.table(
        ["model", *order],
        ([model, *(f"{table.loc[model, c]:.4f} ({norm.loc[model, c]:.2f})" for c in order)] for model in table.index),
    )
    return "\n".join(lines) + "\n"


def write_all(results: pd.DataFrame, out_dir: Path) -> list[str]:
    """``heatmap_<model>.png`` per model and ``comparison.md``; returns the written paths."""
    cells = min_max_by_cell(results)
    if cells.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        str(heatmap(cells, model, out_dir / f"heatmap_{_safe(model)}.png")) for model in sorted(cells["model"].unique())
    ]
    table = out_dir / "comparison.md"
    table.write_text(comparison_markdown(cells))
    return [*written, str(table)]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
