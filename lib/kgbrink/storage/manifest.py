"""A staged directory's manifest and the object-store calls the stage and the fetch share.

The manifest, :data:`MANIFEST`, is written last at the top of a staged prefix: every file's size and SHA-256,
the object's ETag after upload, and the dump version. Its name starts with ``_``, so Spark and Hadoop
listings of the prefix (``kgbrink ingest --input s3a://...``) skip it.

A manifest comes from the bucket and is not trusted: a file name must be a relative POSIX path without
``.`` or ``..`` segments, backslashes, empty segments, or control, format or line/paragraph separator
characters (Unicode categories Cc, Cf, Zl, Zp, and lone surrogates; NUL among them)
(:func:`checked_name`), and its target must resolve inside the folder; sizes and SHA-256s must be well
formed. Untrusted strings (the manifest's version, file names) are printed escaped (:func:`printable`).
Credentials come from boto3's usual sources (the environment first); nothing here reads or records them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kgbrink.core.digests import sha256_of

MANIFEST = "_kgbrink_manifest.json"
MANIFEST_FORMAT = 1
# What a fetch leaves in its folder (kgbrink.storage.download): not a file of the staged directory.
MARKER = ".kgbrink-fetch.json"
SCHEMES = ("s3://", "s3a://", "s3n://")


class StagingError(RuntimeError):
    """A staged prefix or a download that cannot be trusted: no manifest, a checksum or size mismatch."""


_SHA256 = re.compile(r"[0-9a-f]{64}")
# Unicode categories refused in a file name: controls (C0, DEL, C1: escape sequences, newlines), format
# characters (bidirectional overrides, zero-width ones), line and paragraph separators, lone surrogates.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(text: Any, limit: int | None = None) -> str:
    """``text`` safe to print: each character that is not printable (controls, format characters,
    separators but the space) escaped as ``\\xNN``/``\\uNNNN``, a backslash doubled; the rest as is.
    With ``limit``, at most that many characters of ``text`` are shown, then ``...``."""
    text = str(text)
    shown = text if limit is None or len(text) <= limit else text[:limit]
    out = "".join(
        "\\\\" if c == "\\" else c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in shown
    )
    return out + ("..." if shown is not text else "")


def checked_name(name: Any, where: str) -> str:
    """``name`` if it is a safe relative file name: a non-empty POSIX path whose segments are neither empty,
    ``.`` nor ``..``, without backslash, NUL or other characters of :data:`UNSAFE_CATEGORIES`; else
    :class:`StagingError` naming ``where`` and the name (escaped)."""
    problem = None
    if not isinstance(name, str) or not name:
        problem = "is not a non-empty string"
    elif "\x00" in name:
        problem = "contains NUL"
    elif unsafe := [c for c in name if unicodedata.category(c) in UNSAFE_CATEGORIES]:
        problem = f"contains the control or format character U+{ord(unsafe[0]):04X}"
    elif "\\" in name:
        problem = "contains a backslash"
    elif name.startswith("/"):
        problem = "is absolute"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        problem = "has an empty, '.' or '..' segment"
    if problem:
        raise StagingError(f"{where}: file name {name!r} {problem}")
    return name


def resolves_inside(directory: Path, name: str) -> bool:
    """Whether ``directory / name`` resolves inside ``directory`` (no symbolic link leads out)."""
    return (directory / name).resolve().is_relative_to(directory.resolve())


def inside(directory: Path, name: str, where: str) -> Path:
    """``directory / name``, checked by :func:`resolves_inside`."""
    if not resolves_inside(directory, name):
        raise StagingError(
            f"{where}: {name!r} resolves to {(directory / name).resolve()}, outside {directory.resolve()}"
        )
    return directory / name


@dataclass(frozen=True)
class FileEntry:
    """One file of a manifest: its path relative to the staged directory, bytes and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str
    etag: str | None = None


@dataclass
class Manifest:
    version: str
    files: dict[str, FileEntry]
    created: str = ""
    format: int = MANIFEST_FORMAT

    def content_digest(self) -> str:
        """SHA-256 over the sorted ``name<TAB>size<TAB>sha256`` lines: equal exactly when the files are."""
        lines = "".join(f"{e.name}\t{e.size}\t{e.sha256}\n" for e in sorted(self.files.values(), key=lambda e: e.name))
        return hashlib.sha256(lines.encode()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files.values())

    def to_json(self) -> str:
        files = [asdict(self.files[name]) for name in sorted(self.files)]
        body = {
            "format": self.format,
            "version": self.version,
            "created": self.created,
            "content_sha256": self.content_digest(),
            "files": files,
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            body = json.loads(text)
            files = {}
            for number, f in enumerate(body["files"], 1):
                name = checked_name(f["name"], f"{where}, files[{number}]")
                size, digest = f["size"], f["sha256"]
                if type(size) is not int or size < 0 or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                    raise StagingError(f"{where}, files[{number}] ({name!r}): size or sha256 malformed")
                if name in files:
                    raise StagingError(f"{where}, files[{number}]: {name!r} is listed twice")
                files[name] = FileEntry(name, size, digest, f.get("etag"))
            manifest = cls(str(body["version"]), files, body.get("created", ""), int(body.get("format", 1)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StagingError(f"{where}: not a kgbrink manifest ({exc!r})") from exc
        if body.get("content_sha256") not in (None, manifest.content_digest()):
            raise StagingError(f"{where}: content_sha256 does not match its file list")
        return manifest


@dataclass
class Changes:
    """How a directory differs from a manifest (names sorted)."""

    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.modified or self.removed)


def parse_uri(uri: str) -> tuple[str, str]:
    """``s3a://bucket/some/prefix/`` -> ``("bucket", "some/prefix")`` (also ``s3://``, ``s3n://``)."""
    scheme = next((s for s in SCHEMES if uri.startswith(s)), None)
    if scheme is None:
        raise ValueError(f"not an S3 location: {uri!r} (expected s3://, s3a:// or s3n://bucket/prefix)")
    bucket, _, prefix = uri[len(scheme) :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, prefix.strip("/")


def object_key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def local_manifest(directory: Path, version: str | None = None) -> Manifest:
    """The manifest of every regular file under ``directory`` (recursively; a manifest file and a fetch's
    marker at the top excluded).
    ``version`` defaults to the first 16 hex digits of the content digest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StagingError(f"{directory} is not a directory")
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = checked_name(path.relative_to(directory).as_posix(), str(directory))
        if path.name == MANIFEST or name == MARKER:
            continue
        inside(directory, name, str(directory))
        files[name] = FileEntry(name, path.stat().st_size, sha256_of(path))
    if not files:
        raise StagingError(f"{directory} has no files")
    manifest = Manifest("", files, _now())
    manifest.version = version or manifest.content_digest()[:16]
    return manifest


def compare(local: Manifest, last: Manifest | None) -> Changes:
    """Which files of ``local`` are new, modified (size or SHA-256) or unchanged against ``last``, and
    which of ``last`` are gone."""
    before = last.files if last else {}
    out = Changes()
    for name, entry in sorted(local.files.items()):
        old = before.get(name)
        if old is None:
            out.added.append(name)
        elif (old.size, old.sha256) != (entry.size, entry.sha256):
            out.modified.append(name)
        else:
            out.unchanged.append(name)
    out.removed = sorted(set(before) - set(local.files))
    return out


def read_object(client: Any, uri: str, name: str, limit: int = 64 << 20) -> bytes | None:
    """The bytes of the object ``name`` under ``uri`` (at most ``limit``), or None when there is none."""
    bucket, prefix = parse_uri(uri)
    try:
        body = client.get_object(Bucket=bucket, Key=object_key(prefix, name))["Body"].read(limit + 1)
    except client.exceptions.NoSuchKey:
        return None
    if len(body) > limit:
        raise StagingError(f"{uri.rstrip('/')}/{name}: larger than {limit} bytes, not a kgbrink file")
    return body


def read_manifest(client: Any, uri: str) -> Manifest | None:
    """The manifest staged at ``uri``, or None when there is none."""
    body = read_object(client, uri, MANIFEST)
    if body is None:
        return None
    return Manifest.from_json(body.decode("utf-8", "replace"), f"{uri.rstrip('/')}/{MANIFEST}")


def drifted(client: Any, uri: str, manifest: Manifest) -> list[str]:
    """Files of ``manifest`` whose object is missing or no longer has the recorded ETag and size."""
    bucket, prefix = parse_uri(uri)
    out = []
    for name, entry in sorted(manifest.files.items()):
        head = head_object(client, bucket, object_key(prefix, name))
        if head is None or head["ContentLength"] != entry.size or (entry.etag and head["ETag"] != entry.etag):
            out.append(name)
    return out


def head_object(client: Any, bucket: str, key: str) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def s3_client(endpoint_url: str | None = None, region: str | None = None, path_style: bool = False):
    """A boto3 S3 client; an explicit endpoint (an S3-compatible store) never asks the EC2 metadata
    service for credentials: they must come from the environment or the AWS config files."""
    import boto3
    from botocore.config import Config

    if endpoint_url:
        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    config = Config(s3={"addressing_style": "path" if path_style else "auto"}, retries={"max_attempts": 5})
    return boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region or None, config=config)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
