"""Where things are: local paths made absolute, URIs (``s3a://...``) left as they are, and kgbrink's own
installation."""

from __future__ import annotations

import os
from pathlib import Path


def is_uri(path: str) -> bool:
    """True for ``scheme://...`` locations (s3a, hdfs, file, dbfs, ...)."""
    return "://" in str(path)


def resolve_location(path: str | None, base: Path | None = None) -> str | None:
    """Absolute local path for a relative one; URIs and None unchanged."""
    if path is None or is_uri(path):
        return path
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return str(p.resolve())


def install_root() -> Path:
    """kgbrink's installation: ``$KGBRINK_HOME``, else the project folder this package is installed from
    (a checkout or an editable install: ``<project>/lib/kgbrink``), else the working directory."""
    if os.environ.get("KGBRINK_HOME"):
        return Path(os.environ["KGBRINK_HOME"]).expanduser().resolve()
    project = Path(__file__).resolve().parents[3]
    return project if (project / "pyproject.toml").is_file() else Path.cwd()
