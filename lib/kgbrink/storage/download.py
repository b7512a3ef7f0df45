"""Fetching a staged version into a local folder: every file checked, then one swap.

:func:`fetch` makes a local folder equal the staged version: every file the manifest lists is downloaded (or
linked, when the local copy already matches) into a new folder beside it, ``.NAME.fetch-XXXXXXXX``, and
checked (size and SHA-256); only when every file checked does the new folder replace the old one
(:mod:`kgbrink.storage.swap`), so files the manifest no longer lists are gone and a failed fetch leaves the
folder as it was.

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

A manifest to fetch must also list at most :data:`MAX_FILES` files, none named like the marker, and no two
names that one file system would take for the same file or folder: a file that is another entry's folder
(``a``, ``a/b``), or names equal up to case or Unicode normalisation (``A``, ``a``: one would overwrite the
other on a case-insensitive file system) (:func:`check_layout`). An object is checked before it is
downloaded (its length must be the manifest's size) and streamed into its file, counted and hashed as it
comes: a download stops as soon as it outgrows the manifest's size, so a hostile bucket writes at most the
sizes its manifest declares.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kgbrink.core.digests import sha256_of
from kgbrink.storage.manifest import (
    MANIFEST,
    MARKER,
    FileEntry,
    Manifest,
    StagingError,
    head_object,
    inside,
    object_key,
    parse_uri,
    printable,
    read_manifest,
    resolves_inside,
)
from kgbrink.storage.swap import clean_leftovers, lock_folder, remove_tree, swap

MARKER_FORMAT = 1
# The most files a manifest may list for a fetch, and the most bytes of a marker read back.
MAX_FILES = 100_000
MARKER_BYTES = 64 << 20
CHUNK = 8 << 20


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
    result = FetchResult(uri, manifest, [], [], 0, cleaned=clean_leftovers(directory))
    staged = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.fetch-"))
    lock = None
    try:
        lock = lock_folder(staged)  # a fetch into the same folder meanwhile leaves it alone
        for name, entry in sorted(manifest.files.items()):
            target = inside(staged, name, where)
            target.parent.mkdir(parents=True, exist_ok=True)
            old = directory / name
            if (
                old.is_file()
                and resolves_inside(directory, name)
                and old.stat().st_size == entry.size
                and sha256_of(old) == entry.sha256
            ):
                _link_or_copy(old, target)
                result.present.append(name)
                continue
            download_object(
                client, bucket, object_key(prefix, name), target, entry, f"{uri.rstrip('/')}/{printable(name)}"
            )
            result.downloaded.append(name)
            result.downloaded_bytes += entry.size
        _write_marker(staged, manifest, uri, source)
        before = _replaceable(directory, locations, replace)  # again: it may have changed meanwhile
        if before is not None:
            listed = set(manifest.files) | {MARKER}
            result.removed = sorted(n for n in before if not n.endswith("/") and n not in listed)
            result.replaced = True
        swap(staged, directory)
    finally:
        remove_tree(staged)  # after a swap: the old contents
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


def download_object(client: Any, bucket: str, key: str, target: Path, entry: FileEntry, where: str) -> None:
    """The object into ``target`` (a new file), streamed, counted and hashed: its length is checked first,
    and the download stops before more than the manifest's size is written."""
    head = head_object(client, bucket, key)
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
