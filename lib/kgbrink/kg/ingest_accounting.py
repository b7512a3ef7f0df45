"""The ingest's accounting, on collected counts (no Spark): lines per split and reason, the triples kept,
duplicated, added and removed per split, the splits a dump no longer has, and the tables a run wrote."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from kgbrink.core.quarantine import OK, QUARANTINED


def line_tally(counts) -> dict:
    """``lines``, ``ok`` (by split), ``quarantined``, ``skipped`` (by reason): the summary counts of the
    collected :func:`kgbrink.core.quarantine.line_counts` rows."""
    out: dict = {"lines": defaultdict(int), "ok": defaultdict(int), "quarantined": Counter(), "skipped": Counter()}
    for row in counts:
        out["lines"][row["split"]] += row["lines"]
        if row["status"] == OK:
            out["ok"][row["split"]] += row["lines"]
        elif row["status"] == QUARANTINED:
            out["quarantined"][row["reason"]] += row["lines"]
        else:
            out["skipped"][row["reason"]] += row["lines"]
    return out


@dataclass(frozen=True)
class LineTally:
    """The lines of a dump: ``triples`` the :func:`line_tally` of the triple splits' rows (in ``splits``
    order), ``aliases`` that of the alias files' rows (their split is ``entity_aliases`` /
    ``relation_aliases``)."""

    splits: tuple[str, ...]
    triples: dict
    aliases: dict

    @classmethod
    def of(cls, counts, splits) -> LineTally:
        """The tally of collected ``line_counts`` rows (``split, status, reason, lines``)."""
        splits = tuple(splits)
        return cls(
            splits,
            line_tally([r for r in counts if r["split"] in splits]),
            line_tally([r for r in counts if r["split"] not in splits]),
        )

    @property
    def lines(self) -> int:
        return sum(self.triples["lines"].values())

    @property
    def all_lines(self) -> int:
        """Triple and alias lines."""
        return self.lines + sum(self.aliases["lines"].values())

    @property
    def bad_by_reason(self) -> dict[str, int]:
        """Quarantined triple and alias lines per reason."""
        return dict(self.triples["quarantined"] + self.aliases["quarantined"])

    @property
    def all_bad(self) -> int:
        return sum(self.triples["quarantined"].values()) + sum(self.aliases["quarantined"].values())

    @property
    def good(self) -> int:
        """Triple lines parsed and kept for encoding."""
        return sum(self.triples["ok"].values())

    def counts(self) -> dict:
        """The summary's line counts: ``lines``, ``lines_per_split``, ``quarantined`` (triple lines) and
        by reason, ``skipped`` by kind, the alias files' lines and quarantined lines, ``bad_fraction`` (of
        all lines, 0 when there are none)."""
        triples = self.triples
        return {
            "lines": self.lines,
            "lines_per_split": {s: triples["lines"][s] for s in self.splits},
            "quarantined": sum(triples["quarantined"].values()),
            "quarantined_by_reason": dict(triples["quarantined"]),
            "skipped": sum(triples["skipped"].values()),
            "skipped_by_kind": dict(triples["skipped"]),
            "alias_lines": dict(self.aliases["lines"]),
            "alias_quarantined_by_reason": dict(self.aliases["quarantined"]),
            "bad_fraction": self.all_bad / self.all_lines if self.all_lines else 0.0,
        }

    def duplicates(self, kept: dict[str, int]) -> dict[str, int]:
        """Per split: good lines that are no triple of their own (``kept`` triples per split)."""
        return {split: self.triples["ok"][split] - kept.get(split, 0) for split in self.splits}


@dataclass(frozen=True)
class SplitChanges:
    """The triples added and removed per split against the last complete ingest; ``missing``: the splits
    the dataset had and the dump has not (they come after the dump's splits in ``added`` / ``removed``)."""

    added: dict[str, int]
    removed: dict[str, int]
    missing: list[str]

    @classmethod
    def of(cls, splits, kept: dict[str, int], changes: dict | None) -> SplitChanges:
        """``changes`` (split -> ``added, removed``, empty when the triples are the same) of a refresh; None
        for a first ingest, which adds every ``kept`` triple."""
        if changes is None:
            return cls({s: kept.get(s, 0) for s in splits}, dict.fromkeys(splits, 0), [])
        missing = sorted(set(changes) - set(splits))
        every = [*splits, *missing]
        added = {s: changes[s]["added"] if s in changes else 0 for s in every}
        removed = {s: changes[s]["removed"] if s in changes else 0 for s in every}
        return cls(added, removed, missing)

    def warnings(self, triples_version: int | None) -> list[str]:
        """One warning per missing split: its triples are removed, ``triples_version`` keeps them."""
        return [
            f"split '{split}' is in the dataset but not in this dump: its {self.removed[split]} triples are removed "
            f"(triples version {triples_version} keeps them)"
            for split in self.missing
        ]

    def unchanged(self, kept: dict[str, int]) -> dict[str, int]:
        """Per split: the kept triples that were there before (kept less added)."""
        return {s: kept.get(s, 0) - self.added[s] for s in self.added}


def tables_written(read: dict[str, int], written: dict[str, int], names) -> list[str]:
    """The tables among ``names`` whose output version (``written``) is not the version read (``read``,
    absent for a table that did not exist)."""
    return [name for name in names if name not in read or written[name] != read[name]]
