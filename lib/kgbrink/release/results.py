"""A release's results config: models' scores on the benchmarks (``<dataset>/predict/results``, written by
``kgbrink predict``), and the card's leaderboard of them, as the Hub shows a model index's results.

Rows in: ``benchmark, name, model, judge_model, run, setting, fingerprint, metric, value, labels``. The
leaderboard (:func:`leaderboard`): per benchmark one Markdown table, a row per (set, model, judge, setting,
run, labels, fingerprint: the run's first 8 hex digits), a column per metric (sorted; at most :data:`MAX_COLUMNS`, the others named below), values to
4 decimals.
"""

from __future__ import annotations

import json
import unicodedata
from collections import defaultdict

from kgbrink.core import markdown

MAX_COLUMNS = 8
ORDER = ["benchmark", "name", "model", "judge_model", "setting", "run", "labels", "fingerprint", "metric"]


def cell(value) -> str:
    """A table cell's text: line breaks and other control or format characters (Unicode categories C*, Zl,
    Zp) as spaces, then backslashes and pipes escaped (GitHub Markdown), so any name stays in its cell."""
    text = "".join(
        " " if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") else c for c in str(value)
    )
    return text.replace("\\", "\\\\").replace("|", "\\|")


def _labels(text: str) -> str:
    """A run's labels (canonical JSON) as ``k=v, ...``; text that is not a JSON object as it is."""
    try:
        labels = json.loads(text or "{}")
    except ValueError:
        return text
    return ", ".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else text


def leaderboard(rows: list[dict]) -> str:
    """The leaderboard's Markdown (empty text without rows)."""
    by_benchmark: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_benchmark[row["benchmark"]].append(row)
    lines: list[str] = []
    for benchmark in sorted(by_benchmark):
        group = by_benchmark[benchmark]
        metrics = sorted({r["metric"] for r in group})
        shown, hidden = metrics[:MAX_COLUMNS], metrics[MAX_COLUMNS:]
        cells: dict[tuple, dict] = defaultdict(dict)
        for r in group:
            key = tuple(r[k] or "" for k in ("name", "model", "judge_model", "setting", "run", "labels", "fingerprint"))
            cells[key][r["metric"]] = r["value"]
        lines += [f"Scores on {cell(benchmark)}:", ""]
        rows = []
        for key in sorted(cells):
            values = ["" if cells[key].get(m) is None else f"{cells[key][m]:.4f}" for m in shown]
            rows.append([*map(cell, [*key[:5], _labels(key[5]), key[6][:8]]), *values])
        header = ["set", "model", "judge", "setting", "run", "labels", "id", *map(cell, shown)]
        lines += markdown.table(header, rows)
        if hidden:
            lines += ["", f"Further metrics in the config: {cell(', '.join(hidden))}."]
        lines.append("")
    return "\n".join(lines).rstrip()
