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
- :func:`fetch` downloads every file a manifest lists, checks its size and SHA-256 before moving it into
  place, and skips local files that already match.

Credentials come from boto3's usual sources (the environment first); nothing here reads or records them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
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
            files = {f["name"]: FileEntry(f["name"], int(f["size"]), f["sha256"], f.get("etag")) for f in body["files"]}
            manifest = cls(str(body["version"]), files, body.get("created", ""), int(body.get("format", 1)))
        except (ValueError, KeyError, TypeError) as exc:
            raise StagingError(f"{where}: not a kgbrink manifest ({exc})") from exc
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
        name = path.relative_to(directory).as_posix()
        if path.name == MANIFEST:
            continue
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


def read_manifest(client: Any, uri: str) -> Manifest | None:
    """The manifest staged at ``uri``, or None when there is none."""
    bucket, prefix = parse_uri(uri)
    try:
        body = client.get_object(Bucket=bucket, Key=_key(prefix, MANIFEST))["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return Manifest.from_json(body.decode(), f"{uri.rstrip('/')}/{MANIFEST}")


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

    @property
    def changed(self) -> bool:
        return self.changes.changed or bool(self.drifted)


def stage(client: Any, directory: Path, uri: str, version: str | None = None, check_only: bool = False) -> StageResult:
    """Stage ``directory`` at ``uri`` (see the module docstring); ``check_only``: detect, write nothing."""
    bucket, prefix = parse_uri(uri)
    local = local_manifest(Path(directory), version)
    previous = read_manifest(client, uri)
    changes = compare(local, previous)
    # a file unchanged locally but changed in the store is uploaded again
    gone = drifted(client, uri, previous) if previous else []
    gone = [n for n in gone if n in local.files and n in changes.unchanged]
    result = StageResult(uri, local, previous, changes, gone, [], 0, False)
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


@dataclass
class FetchResult:
    uri: str
    manifest: Manifest
    downloaded: list[str]
    present: list[str]
    downloaded_bytes: int


def fetch(client: Any, uri: str, directory: Path) -> FetchResult:
    """Download every file the manifest at ``uri`` lists into ``directory``, each checked (size and
    SHA-256) before it replaces a local file; local files that already match are kept."""
    bucket, prefix = parse_uri(uri)
    manifest = read_manifest(client, uri)
    if manifest is None:
        raise StagingError(f"no {MANIFEST} at {uri} (stage it with `kgbrink stage`)")
    directory = Path(directory)
    result = FetchResult(uri, manifest, [], [], 0)
    for name, entry in sorted(manifest.files.items()):
        target = directory / name
        if target.is_file() and target.stat().st_size == entry.size and sha256_of(target) == entry.sha256:
            result.present.append(name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        os.close(fd)
        try:
            client.download_file(bucket, _key(prefix, name), temporary)
            size, digest = os.path.getsize(temporary), sha256_of(Path(temporary))
            if (size, digest) != (entry.size, entry.sha256):
                raise StagingError(
                    f"{uri.rstrip('/')}/{name}: downloaded {size} bytes with SHA-256 {digest[:12]}..., "
                    f"the manifest says {entry.size} bytes, {entry.sha256[:12]}..."
                )
            os.replace(temporary, target)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        result.downloaded.append(name)
        result.downloaded_bytes += entry.size
    return result


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
