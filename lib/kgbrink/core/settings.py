"""Settings per environment, read from ``conf/<env>.yaml``.

A config is a nested mapping; jobs read it through :class:`Config`, which resolves dotted keys, applies
``--set key=value`` overrides from the command line and turns relative local paths into absolute ones
(URIs with a scheme such as ``s3a://`` are left as they are).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REQUIRED_KEYS = (
    "env",
    "data_dir",
    "dataset",
    "spark.app_name",
    "spark.jars_dirs",
    "spark.warehouse_dir",
    "spark.checkpoint_dir",
    "spark.conf",
    "tracking.uri",
    "tracking.experiment",
    "ingest.max_bad_fraction",
    "ingest.broadcast_dictionaries",
    "stats.splits",
    "stats.broadcast_entity_degrees",
    "scoring.alphas",
    "scoring.betas",
    "scoring.hits",
    "scoring.p_values",
    "scoring.popularity_groups",
    "scoring.max_bad_fraction",
    "scoring.batch_bytes",
    "scoring.broadcast_tables",
    "mining.splits",
    "variant.name",
    "variant.groundings_per_rule",
    "variant.seed",
    "variant.removal_mode",
    "variant.tau",
    "variant.split_ratios",
    "variant.templates",
    "variant.max_answers",
    "mining.max_atoms",
    "mining.min_head_coverage",
    "mining.min_std_confidence",
    "mining.min_pca_confidence",
    "mining.min_support",
    "mining.min_initial_support",
    "mining.recursivity_limit",
    "mining.max_body_paths",
    "mining.broadcast_edges",
    "mining.rows_per_batch",
    "mining.adaptive_min_edges",
    "grounding.seed",
)


class ConfigError(ValueError):
    """A config file is missing, malformed, or lacks a required setting."""


_MISSING = object()


def is_uri(path: str) -> bool:
    """True for ``scheme://...`` locations (s3a, hdfs, file, dbfs, ...)."""
    return "://" in str(path)


def resolve_location(path: str, base: Path | None = None) -> str:
    """Absolute local path for a relative one; URIs unchanged."""
    if path is None or is_uri(path):
        return path
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return str(p.resolve())


@dataclass
class Config:
    values: dict[str, Any]
    source: str = "<dict>"
    overrides: list[str] = field(default_factory=list)

    def get(self, dotted: str, default: Any = _MISSING) -> Any:
        node: Any = self.values
        for part in dotted.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif default is _MISSING:
                raise ConfigError(f"{self.source}: missing setting '{dotted}'")
            else:
                return default
        return node

    def location(self, dotted: str) -> str:
        """A path-valued setting, resolved (see :func:`resolve_location`)."""
        return resolve_location(self.get(dotted))

    def with_overrides(self, assignments: list[str]) -> Config:
        """Copy with ``a.b.c=value`` assignments applied; values are parsed as YAML scalars."""
        values = copy.deepcopy(self.values)
        for item in assignments:
            if "=" not in item:
                raise ConfigError(f"override '{item}' is not of the form key=value")
            key, raw = item.split("=", 1)
            node = values
            parts = key.strip().split(".")
            # Spark keys contain dots themselves: everything after spark.conf. is one key.
            if parts[:2] == ["spark", "conf"] and len(parts) > 2:
                parts = ["spark", "conf", ".".join(parts[2:])]
            for part in parts[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise ConfigError(f"override '{item}': '{part}' is not a section")
            node[parts[-1]] = yaml.safe_load(raw)
        return Config(values, self.source, [*self.overrides, *assignments])

    def validate(self) -> Config:
        for key in REQUIRED_KEYS:
            self.get(key)
        for key in ("ingest.max_bad_fraction", "scoring.max_bad_fraction"):
            fraction = self.get(key)
            if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
                raise ConfigError(f"{self.source}: {key} must be a number in [0, 1], got {fraction!r}")
        batch = self.get("scoring.batch_bytes")
        if not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"{self.source}: scoring.batch_bytes must be a positive integer, got {batch!r}")
        if not isinstance(self.get("spark.conf"), Mapping):
            raise ConfigError(f"{self.source}: spark.conf must be a mapping of Spark settings")
        splits = self.get("stats.splits")
        if not isinstance(splits, list) or not splits or not all(isinstance(s, str) for s in splits):
            raise ConfigError(f"{self.source}: stats.splits must be a non-empty list of split names")
        return self


def default_config_path() -> Path:
    """``$KGBRINK_CONF`` if set, else ``conf/local.yaml`` of the working directory."""
    return Path(os.environ.get("KGBRINK_CONF", "conf/local.yaml"))


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read and validate a YAML config; ``overrides`` are ``key=value`` strings."""
    path = Path(path) if path else default_config_path()
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return Config(values, str(path)).with_overrides(overrides or []).validate()
