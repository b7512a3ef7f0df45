"""AMIE3's mining parameters, whose defaults are the ``mining`` settings' (:class:`kgbrink.core.settings.MiningSettings`).

AMIE3's command-line names: ``max_atoms`` -maxad, ``min_head_coverage`` -minhc, ``min_std_confidence``
-minc, ``min_pca_confidence`` -minpca, ``min_support`` -mins (AMIE3 applies it only with -pm support),
``min_initial_support`` -minis (Lajus et al. 2020). ``broadcast_edges``, ``rows_per_batch`` and
``adaptive_min_edges`` only change how the work is executed, never its result.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from kgbrink.core.settings import MiningSettings, Settings


class MiningError(RuntimeError):
    """The mining job cannot go on (bad parameters, or a join that would not finish)."""


def _default(name: str):
    """The default of the setting ``mining.<name>``."""
    found = next(f for f in fields(MiningSettings) if f.name == name)
    if found.default is MISSING:
        raise TypeError(f"mining.{name} has no plain default")
    return found.default


@dataclass(frozen=True)
class MiningParams:
    """AMIE3's parameters; the defaults are the settings' (one place: ``kgbrink.core.settings``)."""

    max_atoms: int = _default("max_atoms")
    min_head_coverage: float = _default("min_head_coverage")
    min_std_confidence: float = _default("min_std_confidence")
    min_pca_confidence: float = _default("min_pca_confidence")
    min_support: int = _default("min_support")
    min_initial_support: int = _default("min_initial_support")
    recursivity_limit: int = _default("recursivity_limit")
    max_body_paths: int = _default("max_body_paths")
    broadcast_edges: bool = _default("broadcast_edges")
    rows_per_batch: int = _default("rows_per_batch")
    adaptive_min_edges: int = _default("adaptive_min_edges")

    @classmethod
    def from_settings(cls, settings: Settings, overrides: dict | None = None) -> MiningParams:
        """The ``mining.*`` settings, with the non-None ``overrides`` (command-line flags) on top; validated."""
        values = {f.name: settings.get(f"mining.{f.name}") for f in fields(cls)}
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls(**values).validate()

    def validate(self) -> MiningParams:
        problems = []
        if not 2 <= self.max_atoms <= 4:
            problems.append(f"max_atoms must be 2, 3 or 4, got {self.max_atoms}")
        for name in ("min_head_coverage", "min_std_confidence", "min_pca_confidence"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                problems.append(f"{name} must lie in [0, 1], got {value}")
        for name in (
            "min_support",
            "min_initial_support",
            "recursivity_limit",
            "max_body_paths",
            "rows_per_batch",
            "adaptive_min_edges",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name != "min_support" else 0):
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if problems:
            raise MiningError("invalid mining parameters: " + "; ".join(problems))
        return self
