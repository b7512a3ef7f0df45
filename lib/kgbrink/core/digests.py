"""File digests shared by publishing (core) and staging (storage): no dependency beyond the standard library."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 8 << 20


def sha256_of(path: Path) -> str:
    """SHA-256 of a local file's bytes, as hex, read in 8 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()
