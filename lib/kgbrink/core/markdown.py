"""Markdown tables of the reports, cards and journals: one form everywhere."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A table's lines: ``| a | b |``, the separator ``|---|---|``, then one line per row, each cell as
    ``str`` (format numbers before; a cell's ``|`` is not escaped)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines
