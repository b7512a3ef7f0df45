"""The reports' figures written as PNG files: the tail every plot of kgbrink shares."""

from __future__ import annotations

from pathlib import Path


def save(fig, path: Path, **options) -> Path:
    """``fig`` laid out tightly, written to ``path`` (its folder made) at 110 dpi with matplotlib's
    ``savefig`` ``options``, then closed; returns ``path``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, **options)
    plt.close(fig)
    return path
