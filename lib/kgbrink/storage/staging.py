"""Dumps and releases on an object store with boto3: staging with checksums, change detection, fetching.

The public door of :mod:`kgbrink.storage`, one module per idea behind it, as ``s3transfer`` splits upload
from download:

- :mod:`kgbrink.storage.manifest`: a staged prefix's manifest (every file's size, SHA-256 and ETag), read
  from an untrusted bucket and checked, and the object-store calls the others share;
- :mod:`kgbrink.storage.upload`: :func:`stage` uploads what differs from the last manifest, each upload
  checked by the store and after it;
- :mod:`kgbrink.storage.download`: :func:`fetch` makes a local folder equal a staged version, every file
  checked before the folder is replaced, and never a folder of the user's unless asked;
- :mod:`kgbrink.storage.swap`: the one-step exchange of the fetched folder and the old one, and the
  removal of crashed fetches' leftovers.
"""

from __future__ import annotations

from kgbrink.core.digests import sha256_of
from kgbrink.storage.download import MAX_FILES, FetchResult, check_layout, fetch
from kgbrink.storage.manifest import (
    MANIFEST,
    MARKER,
    Changes,
    FileEntry,
    Manifest,
    StagingError,
    checked_name,
    compare,
    local_manifest,
    parse_uri,
    printable,
    read_manifest,
    read_object,
    s3_client,
)
from kgbrink.storage.upload import PART_BYTES, StageResult, composite_sha256, stage, upload

__all__ = [
    "MANIFEST",
    "MARKER",
    "MAX_FILES",
    "PART_BYTES",
    "Changes",
    "FetchResult",
    "FileEntry",
    "Manifest",
    "StageResult",
    "StagingError",
    "check_layout",
    "checked_name",
    "compare",
    "composite_sha256",
    "fetch",
    "local_manifest",
    "parse_uri",
    "printable",
    "read_manifest",
    "read_object",
    "s3_client",
    "sha256_of",
    "stage",
    "upload",
]
