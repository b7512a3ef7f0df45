"""A fetched folder put in place in one step, and the leftovers of crashed fetches removed.

The swap exchanges the new folder and the old one (``renameat2(RENAME_EXCHANGE)`` on Linux,
``renamex_np(RENAME_SWAP)`` on macOS; a missing folder is created by one rename that replaces nothing), and
the old contents, now in the staging folder, are then removed. Where the file system has no exchange, the
old folder is renamed aside to ``.NAME.old-XXXXXXXX`` first and removed after (a crash between the two
renames leaves no folder; the next fetch fetches it again). Leftovers of a crashed fetch beside the folder,
folders named exactly ``.NAME.fetch-XXXXXXXX`` or ``.NAME.old-XXXXXXXX`` (eight of ``a-z0-9_``) for that
folder's NAME, hold only what a fetch downloaded or what a fetch was allowed to replace: the next fetch into
the same folder removes them. A running fetch holds a lock (``flock``) on its staging folder, and a locked
leftover is left alone.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from kgbrink.storage.manifest import StagingError


def remove_tree(path: Path) -> None:
    """``path`` and what it holds (links removed, not followed), when it is a folder."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)


try:
    import fcntl
except ImportError:  # not on Windows: no locks
    fcntl = None


def lock_folder(folder: Path) -> int:
    """An open descriptor of ``folder`` holding an exclusive ``flock`` on it (a running fetch's folder)."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    if fcntl is not None:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return descriptor


def clean_leftovers(directory: Path) -> list[str]:
    """Remove the leftovers of crashed fetches into ``directory`` beside it: folders named exactly
    ``.NAME.fetch-XXXXXXXX`` or ``.NAME.old-XXXXXXXX`` that no running fetch holds locked; their names."""
    pattern = re.compile(rf"\.{re.escape(directory.name)}\.(?:fetch|old)-[a-z0-9_]{{8}}")
    cleaned = []
    with os.scandir(directory.parent) as scan:
        leftovers = [item for item in scan if pattern.fullmatch(item.name) and item.is_dir(follow_symlinks=False)]
    for item in leftovers:
        try:
            descriptor = lock_folder(Path(item.path))
        except OSError:  # locked by a running fetch, or gone
            continue
        try:
            remove_tree(Path(item.path))
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


def swap(new: Path, directory: Path) -> None:
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
    remove_tree(aside)
