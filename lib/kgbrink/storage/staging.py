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
  directory writes nothing. A fetch's marker (:data:`MARKER`, at the top) is not a file of the directory.
- :func:`fetch` makes a local folder equal the staged version: every file the manifest lists is
  downloaded (or linked, when the local copy already matches) into a new folder beside it,
  ``.NAME.fetch-XXXXXXXX``, and checked (size and SHA-256); only when every file checked does the new
  folder replace the old one, so files the manifest no longer lists are gone and a failed fetch leaves
  the folder as it was.

What a fetch may replace (nothing of the user's disappears unless they asked for it: ``replace=True``,
``kgbrink fetch --replace``):

- The new folder holds the fetch's marker :data:`MARKER` (``.kgbrink-fetch.json``: the location fetched,
  the location asked for, when that was a release root whose ``LATEST`` named it, the version, the
  content digest and the names of the files it wrote). The name starts with ``.``, so listings that skip
  hidden files (Hadoop's ``.crc``) skip it too.
- An existing folder is replaced only when it is empty, or when its marker names the same bucket and
  prefix (either location) and it holds nothing but what that fetch wrote: the marker's files (modified
  or not: a fetch restores them) and their folders. Anything else in it (a file, link or empty folder the
  marker does not list), a marker of another location, or no marker at all is a :class:`StagingError`
  naming the folder and ``--replace``, before anything is downloaded (and checked again just before the
  swap). With ``replace`` the folder is replaced whatever it holds. ``removed`` names the files of a
  folder that was really replaced that the manifest does not list.
- A regular file, a symbolic link (to anything) or any other non-folder at ``--out`` is refused, also
  with ``replace``: it is never deleted, nor what a link points to.
- The swap is one step: the new folder and the old one are exchanged (``renameat2(RENAME_EXCHANGE)`` on
  Linux, ``renamex_np(RENAME_SWAP)`` on macOS; a missing folder is created by one rename that replaces
  nothing), and the old contents, now in the staging folder, are then removed. Where the file system
  has no exchange, the old folder is renamed aside to ``.NAME.old-XXXXXXXX`` first and removed after
  (a crash between the two renames leaves no folder; the next fetch fetches it again).
- Leftovers of a crashed fetch beside the folder, folders named exactly ``.NAME.fetch-XXXXXXXX`` or
  ``.NAME.old-XXXXXXXX`` (eight of ``a-z0-9_``) for that folder's NAME, hold only what a fetch downloaded
  or what a fetch was allowed to replace: the next fetch into the same folder removes them (``cleaned``).
  A running fetch holds a lock (``flock``) on its staging folder, and a locked leftover is left alone.

A manifest comes from the bucket and is not trusted: a file name must be a relative POSIX path without
``.`` or ``..`` segments, backslashes, empty segments, or control, format or line/paragraph separator
characters (Unicode categories Cc, Cf, Zl, Zp, and lone surrogates; NUL among them)
(:func:`checked_name`), and its target must resolve inside the folder; sizes and SHA-256s must be well
formed. A corrupt manifest does not block :func:`stage`: the prefix is restaged from its listing
(``repaired``). For :func:`fetch` a manifest must also list at most :data:`MAX_FILES` files, none named
like the marker, and no two names that one file system would take for the same file or folder: a file
that is another entry's folder (``a``, ``a/b``), or names equal up to case or Unicode normalisation
(``A``, ``a``: one would overwrite the other on a case-insensitive file system) (:func:`check_layout`).
An object is checked before it is downloaded (its length must be the manifest's size) and streamed
into its file, counted and hashed as it comes: a download stops as soon as it outgrows the manifest's
size, so a hostile bucket writes at most the sizes its manifest declares. Untrusted strings (the
manifest's version, file names) are printed escaped (:func:`printable`, ``repr``).

Credentials come from boto3's usual sources (the environment first); nothing here reads or records them.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kgbrink.core.digests import sha256_of

MANIFEST = "_kgbrink_manifest.json"
MANIFEST_FORMAT = 1
# What a fetch leaves in its folder: the location and the files it wrote (see the module docstring).
MARKER = ".kgbrink-fetch.json"
MARKER_FORMAT = 1
# The most files a manifest may list for a fetch, and the most bytes of a marker read back.
MAX_FILES = 100_000
MARKER_BYTES = 64 << 20
SCHEMES = ("s3://", "s3a://", "s3n://")
CHUNK = 8 << 20
# Files above this size are uploaded in parts of this size (multipart; S3's minimum part is 5 MiB).
PART_BYTES = 64 << 20


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


def _key(prefix: str, name: str) -> str:
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
    removed: list[str] = field(default_factory=list)  # files of the replaced folder the manifest does not list
    replaced: bool = False  # whether a folder was there and is replaced
    cleaned: list[str] = field(default_factory=list)  # leftovers of crashed fetches removed beside the folder


def _fold(name: str) -> str:
    """``name`` as a case- and normalisation-insensitive file system compares it (canonical caseless)."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def check_layout(manifest: Manifest, where: str) -> None:
    """:class:`StagingError` naming ``where`` and the entries, unless ``manifest`` can be fetched into one
    folder on any file system: at most :data:`MAX_FILES` files, none at the marker's name (up to case),
    no file that is another entry's folder (``a``, ``a/b``), no two files or folders equal up to case or
    Unicode normalisation (``A``, ``a``; ``A/x``, ``a/y``)."""
    if len(manifest.files) > MAX_FILES:
        raise StagingError(f"{where}: lists {len(manifest.files):,} files, more than a fetch takes ({MAX_FILES:,})")
    seen: dict[str, tuple[str, bool, str]] = {_fold(MARKER): (MARKER, True, MARKER)}
    for name in sorted(manifest.files):
        parts = name.split("/")
        for depth in range(1, len(parts) + 1):
            path, is_file = "/".join(parts[:depth]), depth == len(parts)
            other_path, other_is_file, other = seen.setdefault(_fold(path), (path, is_file, name))
            if other == name or (other_path == path and not is_file and not other_is_file):
                continue
            # names shown with ascii(): names equal up to Unicode normalisation look alike otherwise
            if other == MARKER:
                raise StagingError(f"{where}: {ascii(name)} takes the name of fetch's marker {MARKER}")
            if is_file != other_is_file:
                file, folder = (other, name) if other_is_file else (name, other)
                raise StagingError(
                    f"{where}: {ascii(file)} is a file, and {ascii(folder)} needs a folder of that name"
                    + ("" if other_path == path else " (up to case)")
                )
            raise StagingError(
                f"{where}: {ascii(other)} and {ascii(name)} are the same {'file' if is_file else 'folder'} "
                f"on a case-insensitive file system ({ascii(other_path)}, {ascii(path)})"
            )


def fetch(client: Any, uri: str, directory: Path, replace: bool = False, source: str | None = None) -> FetchResult:
    """Make ``directory`` equal the version staged at ``uri``: every file the manifest lists, each checked
    (size and SHA-256), in a new folder beside ``directory`` (a local file that already matches is linked
    or copied, not downloaded) that replaces it in one step once all are checked. Files the manifest does
    not list are gone afterwards; on any failure ``directory`` is left as it was.

    ``directory`` must be absent, empty, or a folder an earlier fetch of the same location wrote and that
    holds nothing else (its :data:`MARKER`); ``replace`` allows any folder, never a file or a link.
    ``source``: the location asked for, when ``uri`` is the version a release root's ``LATEST`` names
    (recorded in the marker: a later fetch of the root replaces the folder). See the module docstring."""
    bucket, prefix = parse_uri(uri)
    source = source or uri
    locations = {parse_uri(source), (bucket, prefix)}
    manifest = read_manifest(client, uri)
    if manifest is None:
        raise StagingError(f"no {MANIFEST} at {uri} (stage it with `kgbrink stage`)")
    where = f"{uri.rstrip('/')}/{MANIFEST}"
    check_layout(manifest, where)
    directory = _folder_path(directory)
    _replaceable(directory, locations, replace)  # before anything is downloaded
    directory.parent.mkdir(parents=True, exist_ok=True)
    result = FetchResult(uri, manifest, [], [], 0, cleaned=_clean_leftovers(directory))
    staged = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.fetch-"))
    lock = None
    try:
        lock = _lock(staged)  # a fetch into the same folder meanwhile leaves it alone
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
            _download(client, bucket, _key(prefix, name), target, entry, f"{uri.rstrip('/')}/{printable(name)}")
            result.downloaded.append(name)
            result.downloaded_bytes += entry.size
        _write_marker(staged, manifest, uri, source)
        before = _replaceable(directory, locations, replace)  # again: it may have changed meanwhile
        if before is not None:
            listed = set(manifest.files) | {MARKER}
            result.removed = sorted(n for n in before if not n.endswith("/") and n not in listed)
            result.replaced = True
        _swap(staged, directory)
    finally:
        _remove_tree(staged)  # after a swap: the old contents
        if lock is not None:
            os.close(lock)
    return result


def _folder_path(directory: Path) -> Path:
    """``directory`` absolute, its last component kept (a link there is refused, not followed)."""
    path = Path(os.path.abspath(directory))
    if not path.name:
        raise StagingError(f"--out {directory}: not a folder a fetch can replace")
    return path


def _replaceable(directory: Path, locations: set[tuple[str, str]], replace: bool) -> list[str] | None:
    """The entries of ``directory`` (:func:`_entries`), None when there is none, if a fetch of one of
    ``locations`` may replace it (see the module docstring); else :class:`StagingError`."""
    try:
        mode = os.lstat(directory).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        raise StagingError(
            f"--out {directory} is a symbolic link: a fetch replaces only a folder, never a link (nor what it "
            "points to), also with --replace; give the folder itself or a new path"
        )
    if not stat.S_ISDIR(mode):
        raise StagingError(
            f"--out {directory} is a file, not a folder: a fetch never deletes it, also with --replace; "
            "give a folder or a new path"
        )
    if replace:
        return _entries(directory)
    marker = _read_marker(directory)
    if marker is None:  # only a few entries looked at: --out may be a home folder
        if not (entries := _entries(directory, limit=_SHOWN)):
            return entries
        why = f"holds files no fetch wrote ({_some(entries)}) and no {MARKER}"
    elif not marker.locations & locations:
        why = f"holds a fetch of {printable(marker.source, 300)} (its {MARKER}), not of this location"
    else:
        entries = _entries(directory)
        owned = marker.files | {MARKER} | _folders(marker.files)
        if not (theirs := [n for n in entries if n not in owned]):
            return entries
        why = f"holds files its last fetch did not write ({_some(theirs)})"
    raise StagingError(
        f"--out {directory} {why}: nothing was changed; give --replace to replace the folder and delete what it holds"
    )


def _folders(names: set[str]) -> set[str]:
    """The folders (with a trailing ``/``) that hold ``names``: ``a/b/c`` -> ``a/``, ``a/b/``."""
    out = set()
    for name in names:
        parts = name.split("/")[:-1]
        out.update("/".join(parts[: depth + 1]) + "/" for depth in range(len(parts)))
    return out


_SHOWN = 5  # entries an error names


def _some(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")


def _entries(directory: Path, limit: int | None = None) -> list[str]:
    """What ``directory`` holds, sorted: the relative names of everything but folders (files, links to
    anything: links are not followed), and of empty folders with a trailing ``/``. With ``limit``, the
    walk stops once it found more than ``limit``."""
    out, folders = [], [(str(directory), "")]
    while folders and (limit is None or len(out) <= limit):
        folder, prefix = folders.pop()
        with os.scandir(folder) as scan:
            items = list(scan)
        if not items and prefix:
            out.append(prefix)
        for item in items:
            if item.is_dir(follow_symlinks=False):
                folders.append((item.path, f"{prefix}{item.name}/"))
            else:
                out.append(prefix + item.name)
    return sorted(out)


class _Marker(NamedTuple):
    locations: set[tuple[str, str]]  # (bucket, prefix) of the location fetched and of the one asked for
    source: str
    files: set[str]


def _read_marker(directory: Path) -> _Marker | None:
    """The locations, source and file names of the marker in ``directory``; None when there is no
    readable one (a link, not a regular file, too large, not a marker)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(directory / MARKER, flags)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            text = handle.read(MARKER_BYTES + 1)
        if len(text) > MARKER_BYTES:
            return None
        body = json.loads(text)
        if body["kgbrink_fetch"] != MARKER_FORMAT:
            return None
        files = body["files"]
        if not all(isinstance(n, str) for n in files):
            return None
        return _Marker({parse_uri(body["source"]), parse_uri(body["uri"])}, body["source"], set(files))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_marker(folder: Path, manifest: Manifest, uri: str, source: str) -> None:
    body = {
        "kgbrink_fetch": MARKER_FORMAT,
        "source": source,
        "uri": uri,
        "version": manifest.version,
        "content_sha256": manifest.content_digest(),
        "files": sorted(manifest.files),
    }
    with open(folder / MARKER, "x") as handle:
        handle.write(json.dumps(body, indent=1) + "\n")


def _download(client: Any, bucket: str, key: str, target: Path, entry: FileEntry, where: str) -> None:
    """The object into ``target`` (a new file), streamed, counted and hashed: its length is checked first,
    and the download stops before more than the manifest's size is written."""
    head = _head(client, bucket, key)
    if head is None:
        raise StagingError(f"{where}: no such object, the manifest lists it")
    if head["ContentLength"] != entry.size:
        raise StagingError(
            f"{where}: the object has {head['ContentLength']} bytes, the manifest says {entry.size}; not downloaded"
        )
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    digest, size = hashlib.sha256(), 0
    try:
        with open(target, "xb") as out:
            while block := body.read(CHUNK):
                size += len(block)
                if size > entry.size:
                    raise StagingError(
                        f"{where}: the object outgrows the {entry.size} bytes the manifest says; download stopped"
                    )
                digest.update(block)
                out.write(block)
    finally:
        body.close()
    if (size, digest.hexdigest()) != (entry.size, entry.sha256):
        raise StagingError(
            f"{where}: downloaded {size} bytes with SHA-256 {digest.hexdigest()[:12]}..., "
            f"the manifest says {entry.size} bytes, {entry.sha256[:12]}..."
        )


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _remove_tree(path: Path) -> None:
    """``path`` and what it holds (links removed, not followed), when it is a folder."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)


try:
    import fcntl
except ImportError:  # not on Windows: no locks
    fcntl = None


def _lock(folder: Path) -> int:
    """An open descriptor of ``folder`` holding an exclusive ``flock`` on it (a running fetch's folder)."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    if fcntl is not None:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return descriptor


def _clean_leftovers(directory: Path) -> list[str]:
    """Remove the leftovers of crashed fetches into ``directory`` beside it: folders named exactly
    ``.NAME.fetch-XXXXXXXX`` or ``.NAME.old-XXXXXXXX`` that no running fetch holds locked; their names."""
    pattern = re.compile(rf"\.{re.escape(directory.name)}\.(?:fetch|old)-[a-z0-9_]{{8}}")
    cleaned = []
    with os.scandir(directory.parent) as scan:
        leftovers = [item for item in scan if pattern.fullmatch(item.name) and item.is_dir(follow_symlinks=False)]
    for item in leftovers:
        try:
            descriptor = _lock(Path(item.path))
        except OSError:  # locked by a running fetch, or gone
            continue
        try:
            _remove_tree(Path(item.path))
            cleaned.append(item.name)
        finally:
            os.close(descriptor)
    return sorted(cleaned)


_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCHANGE = -100, 1, 2  # linux/fcntl.h, linux/fs.h
_RENAME_SWAP, _RENAME_EXCL = 2, 4  # macOS stdio.h


@functools.cache
def _libc(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


def _rename2(source: Path, target: Path, exchange: bool) -> bool:
    """One atomic rename of ``source`` to ``target``: exchanging the two when ``exchange``, else failing
    when ``target`` exists (``FileExistsError``). False where the system or file system has neither."""
    if sys.platform.startswith("linux") and (call := _libc("renameat2")) is not None:
        flag = _RENAME_EXCHANGE if exchange else _RENAME_NOREPLACE
        done = call(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), ctypes.c_uint(flag))
    elif sys.platform == "darwin" and (call := _libc("renamex_np")) is not None:
        flag = _RENAME_SWAP if exchange else _RENAME_EXCL
        done = call(os.fsencode(source), os.fsencode(target), ctypes.c_uint(flag))
    else:
        return False
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))


def _swap(new: Path, directory: Path) -> None:
    """Put the folder ``new`` at ``directory`` in one step: a missing ``directory`` by a rename that
    replaces nothing; an existing one is exchanged with ``new`` (which then holds the old contents, for
    the caller to remove). Without an atomic exchange: ``directory`` renamed aside to
    ``.NAME.old-XXXXXXXX``, ``new`` renamed to it, and the old folder removed (put back if that fails)."""
    if not os.path.lexists(directory):
        try:
            if not _rename2(new, directory, exchange=False):
                os.rename(new, directory)  # onto at most an empty folder made meanwhile
        except FileExistsError as exc:
            raise StagingError(f"--out {directory} appeared during the fetch: fetch again") from exc
        return
    if _rename2(new, directory, exchange=True):
        if not stat.S_ISDIR(os.lstat(new).st_mode):  # not the folder checked before: put it back
            _rename2(new, directory, exchange=True)
            raise StagingError(f"--out {directory} changed during the fetch into a file or link: left as it is")
        return
    aside = directory.parent / f".{directory.name}.old-{secrets.token_hex(4)}"
    os.rename(directory, aside)
    try:
        os.rename(new, directory)
    except OSError:
        os.rename(aside, directory)
        raise
    _remove_tree(aside)


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
