"""Reproduce the PROBE paper's Tables 4 and 5 from the release's rank dumps (``make reproduce-probe``).

For each dataset in ``reference/probe/`` (umls, kinship, family, wn18rr): ingest it (ids from its
dictionaries), compute the statistics on ``train.txt``, score every ``ranks/<Model>__<run>.json.gz`` with
the release's epsilon rule, average the three runs per model and compare with the published cells:
Table 4 (beta = 0; alpha = 1, 0.5, 0, -0.5, -1) and Table 5 (alpha = 1; beta = 0, 0.2, 0.4, 0.6, 0.8),
6 models x 4 datasets x 10 cells = 240, each to 4 decimals.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from kgbrink.core import markdown

DATASETS = ("wn18rr", "family", "umls", "kinship")
TABLE_LINES = ("FB15k237", "wn18rr", "YAGO3-10", "family", "umls", "kinship")
TABLE4_ALPHAS = (1.0, 0.5, 0.0, -0.5, -1.0)
TABLE5_BETAS = (0.0, 0.2, 0.4, 0.6, 0.8)
_CELL = re.compile(r"\{(-?[0-9]+\.[0-9]+)\}")


def published_cells(tables_dir: Path) -> pd.DataFrame:
    """``model, dataset, table, alpha, beta, published`` for the datasets of :data:`DATASETS`."""
    rows = []
    for table, folder, suffix in (("table4", "table4", "_tables_a.txt"), ("table5", "table5", "_tables_b.txt")):
        for file in sorted((tables_dir / folder).glob(f"*{suffix}")):
            model = file.name[: -len(suffix)]
            lines = [line for line in file.read_text().splitlines() if line.strip()]
            names = [n for n in TABLE_LINES if not (len(lines) == 5 and n == "YAGO3-10")]
            if len(lines) != len(names):
                raise ValueError(f"{file}: expected {len(names)} dataset lines, found {len(lines)}")
            for name, line in zip(names, lines):
                if name not in DATASETS:
                    continue
                values = [float(v) for v in _CELL.findall(line)]
                if len(values) != 5:
                    raise ValueError(f"{file}: line for {name} has {len(values)} cells, expected 5")
                for i, value in enumerate(values):
                    alpha, beta = (TABLE4_ALPHAS[i], 0.0) if table == "table4" else (1.0, TABLE5_BETAS[i])
                    rows.append(
                        {
                            "model": model,
                            "dataset": name,
                            "table": table,
                            "alpha": alpha,
                            "beta": beta,
                            "published": value,
                        }
                    )
    return pd.DataFrame(rows)


def compare(published: pd.DataFrame, scored: pd.DataFrame) -> pd.DataFrame:
    """Published cells joined with kgbrink's values; ``match`` when equal after rounding to 4 decimals."""
    merged = published.merge(scored, on=["model", "dataset", "alpha", "beta"], how="left")
    merged["kgbrink"] = merged["value"].round(4)
    merged["match"] = (merged["kgbrink"] - merged["published"]).abs() < 5e-9
    return merged.drop(columns="value")


def report_markdown(comparison: pd.DataFrame) -> str:
    lines = [
        f"# PROBE Tables 4 and 5 reproduced by kgbrink: {int(comparison['match'].sum())} of {len(comparison)} cells match to 4 decimals",
        "",
    ]
    lines += markdown.table(
        ["table", "dataset", "model", "alpha", "beta", "published", "kgbrink", "match"],
        (
            [r.table, r.dataset, r.model, f"{r.alpha:g}", f"{r.beta:g}", f"{r.published:.4f}", f"{r.kgbrink:.4f}"]
            + ["yes" if r.match else "NO"]
            for r in comparison.sort_values(["table", "dataset", "model", "beta", "alpha"]).itertuples()
        ),
    )
    return "\n".join(lines) + "\n"
