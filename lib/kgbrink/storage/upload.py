"""Staging a local directory at an S3 prefix: only what changed is uploaded, each upload checked.

:func:`stage` uploads what differs from the last manifest: files whose size or SHA-256 changed, new files,
and files whose object no longer has the ETag the manifest recorded (changed behind its back); it deletes
the objects of files the directory no longer has, then writes the new manifest. Each upload sends the
body's SHA-256 (``ChecksumAlgorithm=SHA256``), which the store verifies (per part for a multipart upload),
and the object is checked after upload: its size, and the SHA-256 the store returns: the file's, or for a
multipart upload the SHA-256 of its parts' SHA-256s (S3's composite checksum, with or without AWS's
``-<parts>`` suffix), computed here from the file. An unchanged directory writes nothing. A fetch's marker
(:data:`kgbrink.storage.manifest.MARKER`, at the top) is not a file of the directory. A corrupt manifest
does not block a stage: the prefix is restaged from its listing (``repaired``).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgbrink.storage.manifest import (
    MANIFEST,
    Changes,
    FileEntry,
    Manifest,
    StagingError,
    compare,
    drifted,
    head_object,
    local_manifest,
    object_key,
    parse_uri,
    read_manifest,
)

# Files above this size are uploaded in parts of this size (multipart; S3's minimum part is 5 MiB).
PART_BYTES = 64 << 20


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def composite_sha256(path: Path, part_bytes: int) -> tuple[str, int]:
    """S3's composite checksum of a multipart upload in parts of ``part_bytes``: base64 of the SHA-256 of
    the concatenated part SHA-256s; and the number of parts."""
    digests = []
    with open(path, "rb") as handle:
        while part := handle.read(part_bytes):
            digests.append(hashlib.sha256(part).digest())
    return _b64(hashlib.sha256(b"".join(digests)).digest()), len(digests)


def upload(client: Any, path: Path, bucket: str, key: str, entry: FileEntry) -> str:
    """Upload ``path`` with its SHA-256 sent for the store to verify; check the stored object; its ETag."""
    from boto3.s3.transfer import TransferConfig

    client.upload_file(
        str(path),
        bucket,
        key,
        ExtraArgs={"ChecksumAlgorithm": "SHA256", "Metadata": {"sha256": entry.sha256}},
        Config=TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES),
    )
    head = head_object(client, bucket, key)
    if head is None:
        raise StagingError(f"s3://{bucket}/{key} is missing right after its upload")
    problems = []
    if head["ContentLength"] != entry.size:
        problems.append(f"{head['ContentLength']} bytes stored, {entry.size} sent")
    stored = head.get("ChecksumSHA256")
    if stored:
        expected = {_b64(bytes.fromhex(entry.sha256))}
        if entry.size > PART_BYTES:  # a multipart upload: the composite checksum, as AWS or moto spell it
            composite, parts = composite_sha256(path, PART_BYTES)
            expected |= {composite, f"{composite}-{parts}"}
        if stored not in expected:
            problems.append(f"the stored SHA-256 {stored} is neither the file's nor its parts' composite")
    if head.get("Metadata", {}).get("sha256") != entry.sha256:
        problems.append("the object's sha256 metadata differs from the file's")
    if problems:
        raise StagingError(f"s3://{bucket}/{key}: {'; '.join(problems)}")
    return head["ETag"]


@dataclass
class StageResult:
    uri: str
    manifest: Manifest
    previous: Manifest | None
    changes: Changes
    drifted: list[str]
    uploaded: list[str]
    uploaded_bytes: int
    written: bool
    repaired: str | None = None  # why the staged manifest was unreadable, when the prefix was restaged

    @property
    def changed(self) -> bool:
        return self.changes.changed or bool(self.drifted) or self.repaired is not None


def stage(client: Any, directory: Path, uri: str, version: str | None = None, check_only: bool = False) -> StageResult:
    """Stage ``directory`` at ``uri`` (see the module docstring); ``check_only``: detect, write nothing."""
    bucket, prefix = parse_uri(uri)
    local = local_manifest(Path(directory), version)
    repaired = None
    try:
        previous = read_manifest(client, uri)
    except StagingError as exc:  # restaged from scratch; the prefix's other objects are removed
        previous, repaired = None, str(exc)
    changes = compare(local, previous)
    if repaired is not None:
        changes.removed = sorted(set(_listing(client, bucket, prefix)) - set(local.files) - {MANIFEST})
    # a file unchanged locally but changed in the store is uploaded again
    gone = drifted(client, uri, previous) if previous else []
    gone = [n for n in gone if n in local.files and n in changes.unchanged]
    result = StageResult(uri, local, previous, changes, gone, [], 0, False, repaired)
    if check_only or not result.changed:
        if previous is not None and not result.changed:
            result.manifest = previous  # the staged version stays the current one
        return result
    for name in sorted({*changes.added, *changes.modified, *gone}):
        entry = local.files[name]
        etag = upload(client, Path(directory) / name, bucket, object_key(prefix, name), entry)
        local.files[name] = FileEntry(name, entry.size, entry.sha256, etag)
        result.uploaded.append(name)
        result.uploaded_bytes += entry.size
    for name in changes.unchanged:
        if name not in gone and previous is not None:
            local.files[name] = previous.files[name]
    for name in changes.removed:
        client.delete_object(Bucket=bucket, Key=object_key(prefix, name))
    client.put_object(
        Bucket=bucket,
        Key=object_key(prefix, MANIFEST),
        Body=local.to_json().encode(),
        ContentType="application/json",
        ChecksumAlgorithm="SHA256",
    )
    result.written = True
    return result


def _listing(client: Any, bucket: str, prefix: str) -> list[str]:
    """The names (relative to ``prefix``) of every object under ``prefix``."""
    start = f"{prefix}/" if prefix else ""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start)
    return [o["Key"][len(start) :] for page in pages for o in page.get("Contents", [])]
