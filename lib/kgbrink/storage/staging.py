"""Dumps and releases on an object store with boto3: staging with checksums, change detection, fetching.

A staged directory is a prefix of a bucket holding the directory's files under their relative paths and a
manifest, :data:`MANIFEST`, written last: every file's size and SHA-256, the object's ETag after upload,
and the dump version. The manifest's name starts with ``_``, so Spark and Hadoop listings of the prefix
(``kgbrink ingest --input s3a://...``) skip it.

- :func:`stage` uploads what differs from the last manifest: files whose size or SHA-256 changed, new
  files, and files whose object no longer has the ETag the manifest recorded (changed behind its back);
  it deletes the objects of files the directory no longer has, then writes the new manifest. Each upload
  sends the body's SHA-256 (``ChecksumAlgorithm=SHA256``), which the store verifies (per part for a
  multipart upload), and the object is checked after upload: its size, and the SHA-256 the store
  returns: the file's, or for a multipart upload the SHA-256 of its parts' SHA-256s (S3's composite
  checksum, with or without AWS's ``-<parts>`` suffix), computed here from the file. An unchanged
  directory writes nothing.
- :func:`fetch` makes a local folder equal the staged version: every file the manifest lists is
  downloaded (or linked, when the local copy already matches) into a new folder beside it and checked
  (size and SHA-256); only when every file checked does the new folder replace the old one, so files the
  manifest no longer lists are gone and a failed fetch leaves the folder as it was.

A manifest comes from the bucket and is not trusted: a file name must be a relative POSIX path without
``.`` or ``..`` segments, backslashes, NUL or empty segments (:func:`checked_name`), and its target must
resolve inside the folder; sizes and SHA-256s must be well formed. A corrupt manifest does not block
:func:`stage`: the prefix is restaged from its listing (``repaired``).

Credentials come from boto3's usual sources (the environment first); nothing here reads or records them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "_kgbrink_manifest.json"
MANIFEST_FORMAT = 1
SCHEMES = ("s3://", "s3a://", "s3n://")
CHUNK = 8 << 20
# Files above this size are uploaded in parts of this size (multipart; S3's minimum part is 5 MiB).
PART_BYTES = 64 << 20


class StagingError(RuntimeError):
    """A staged prefix or a download that cannot be trusted: no manifest, a checksum or size mismatch."""


_SHA256 = re.compile(r"[0-9a-f]{64}")


def checked_name(name: Any, where: str) -> str:
    """``name`` if it is a safe relative file name: a non-empty POSIX path whose segments are neither empty,
    ``.`` nor ``..``, without backslash or NUL; else :class:`StagingError` naming ``where``."""
    problem = None
    if not isinstance(name, str) or not name:
        problem = "is not a non-empty string"
    elif "\x00" in name:
        problem = "contains NUL"
    elif "\\" in name:
        problem = "contains a backslash"
    elif name.startswith("/"):
        problem = "is absolute"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        problem = "has an empty, '.' or '..' segment"
    if problem:
        raise StagingError(f"{where}: file name {name!r} {problem}")
    return name


def _resolves_inside(directory: Path, name: str) -> bool:
    """Whether ``directory / name`` resolves inside ``directory`` (no symbolic link leads out)."""
    return (directory / name).resolve().is_relative_to(directory.resolve())


def _inside(directory: Path, name: str, where: str) -> Path:
    """``directory / name``, checked by :func:`_resolves_inside`."""
    if not _resolves_inside(directory, name):
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
                    raise StagingError(f"{where}, files[{number}] ({name}): size or sha256 malformed")
                if name in files:
                    raise StagingError(f"{where}, files[{number}]: {name} is listed twice")
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


def _key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def local_manifest(directory: Path, version: str | None = None) -> Manifest:
    """The manifest of every regular file under ``directory`` (recursively; a manifest file excluded).
    ``version`` defaults to the first 16 hex digits of the content digest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise StagingError(f"{directory} is not a directory")
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = checked_name(path.relative_to(directory).as_posix(), str(directory))
        if path.name == MANIFEST:
            continue
        _inside(directory, name, str(directory))
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
        body = client.get_object(Bucket=bucket, Key=_key(prefix, name))["Body"].read(limit + 1)
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
        head = _head(client, bucket, _key(prefix, name))
        if head is None or head["ContentLength"] != entry.size or (entry.etag and head["ETag"] != entry.etag):
            out.append(name)
    return out


def _head(client: Any, bucket: str, key: str) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


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
    head = _head(client, bucket, key)
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
        etag = upload(client, Path(directory) / name, bucket, _key(prefix, name), entry)
        local.files[name] = FileEntry(name, entry.size, entry.sha256, etag)
        result.uploaded.append(name)
        result.uploaded_bytes += entry.size
    for name in changes.unchanged:
        if name not in gone and previous is not None:
            local.files[name] = previous.files[name]
    for name in changes.removed:
        client.delete_object(Bucket=bucket, Key=_key(prefix, name))
    client.put_object(
        Bucket=bucket,
        Key=_key(prefix, MANIFEST),
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


@dataclass
class FetchResult:
    uri: str
    manifest: Manifest
    downloaded: list[str]
    present: list[str]
    downloaded_bytes: int
    removed: list[str] = field(default_factory=list)  # local files the manifest does not list


def fetch(client: Any, uri: str, directory: Path) -> FetchResult:
    """Make ``directory`` equal the version staged at ``uri``: every file the manifest lists, each checked
    (size and SHA-256), in a new folder beside ``directory`` (a local file that already matches is linked
    or copied, not downloaded) that replaces it once all are checked. Files the manifest does not list
    are gone afterwards; on any failure ``directory`` is left as it was."""
    bucket, prefix = parse_uri(uri)
    manifest = read_manifest(client, uri)
    if manifest is None:
        raise StagingError(f"no {MANIFEST} at {uri} (stage it with `kgbrink stage`)")
    directory = Path(directory)
    where = f"{uri.rstrip('/')}/{MANIFEST}"
    directory.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.fetch-"))
    result = FetchResult(uri, manifest, [], [], 0)
    try:
        for name, entry in sorted(manifest.files.items()):
            target = _inside(staged, name, where)
            target.parent.mkdir(parents=True, exist_ok=True)
            old = directory / name
            if (
                old.is_file()
                and _resolves_inside(directory, name)
                and old.stat().st_size == entry.size
                and sha256_of(old) == entry.sha256
            ):
                _link_or_copy(old, target)
                result.present.append(name)
                continue
            client.download_file(bucket, _key(prefix, name), str(target))
            size, digest = os.path.getsize(target), sha256_of(target)
            if (size, digest) != (entry.size, entry.sha256):
                raise StagingError(
                    f"{uri.rstrip('/')}/{name}: downloaded {size} bytes with SHA-256 {digest[:12]}..., "
                    f"the manifest says {entry.size} bytes, {entry.sha256[:12]}..."
                )
            result.downloaded.append(name)
            result.downloaded_bytes += entry.size
        if directory.is_dir():
            local = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())
            result.removed = sorted(set(local) - set(manifest.files))
        _swap(staged, directory)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return result


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _swap(new: Path, directory: Path) -> None:
    """``new`` renamed to ``directory``; an existing ``directory`` is moved aside first and removed after."""
    if not directory.exists():
        os.rename(new, directory)
        return
    aside = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.old-"))
    os.rename(directory, aside / "old")
    try:
        os.rename(new, directory)
    except OSError:
        os.rename(aside / "old", directory)
        raise
    finally:
        if directory.exists():
            shutil.rmtree(aside, ignore_errors=True)


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
