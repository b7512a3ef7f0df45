"""Spark's ``xxhash64`` in numpy, bit for bit: the seeded hashes of :mod:`kgbrink.graph.hashing` computed in
memory (per-question work in a Python task), so that a choice made there is the one the DataFrame version
makes.

Spark hashes the columns of ``xxhash64(c1, c2, ...)`` in turn, each with the previous result as its seed
(42 for the first): an int with XXH64 of its 4 little-endian bytes, a long of its 8, a string of its UTF-8
bytes (standard XXH64), a struct field by field, a boolean as the int 0 / 1; a null leaves the running
hash unchanged. :func:`prefix` runs the hash over the columns that hold one value per question (the
seed literal, the question id, ...) in Python, :func:`hash_columns` over int columns with numpy, giving
the signed 64-bit values Spark returns.
"""

from __future__ import annotations

import numpy as np

_M = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5
SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * P2) & _M, 31) * P1) & _M


def _avalanche(h: int) -> int:
    h ^= h >> 33
    h = (h * P2) & _M
    h ^= h >> 29
    h = (h * P3) & _M
    return h ^ (h >> 32)


def xxh64_bytes(data: bytes, seed: int) -> int:
    """Standard XXH64 of ``data`` (unsigned 64-bit), as Spark's ``XXH64.hashUnsafeBytes``."""
    seed &= _M
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & _M, (seed + P2) & _M, seed, (seed - P1) & _M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j : i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * P1 + P4) & _M
    else:
        h = (seed + P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i : i + 8], "little")), 27) * P1 + P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i : i + 4], "little") * P1) & _M), 23) * P2 + P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & _M), 11) * P1) & _M
        i += 1
    return _avalanche(h)


def _hash_int(value: int, seed: int) -> int:
    """Spark's ``hashInt``: XXH64 of the int's 4 little-endian bytes (unsigned)."""
    return xxh64_bytes((int(value) & 0xFFFFFFFF).to_bytes(4, "little"), seed)


def prefix(seed: int, *scalars: int | str) -> int:
    """The running hash (unsigned) after ``F.lit(seed)`` and columns holding one value on every row: a
    Python int is an int column, a str a string column (a struct of them is its fields in turn)."""
    return extend(_hash_int(seed, SPARK_SEED), *scalars)


def extend(state: int, *scalars: int | str) -> int:
    """``state`` (a :func:`prefix`) continued with more one-value columns."""
    for value in scalars:
        if isinstance(value, str):
            state = xxh64_bytes(value.encode("utf-8"), state)
        else:
            state = _hash_int(value, state)
    return state


def hash_columns(state: int, *columns: np.ndarray) -> np.ndarray:
    """Spark's ``xxhash64`` (signed, int64) of int columns after the :func:`prefix` ``state``: ``u64(seed,
    qid, "h", "r", "t")`` is ``hash_columns(prefix(seed, qid), h, r, t)``. Computed in blocks of
    :data:`BLOCK` rows with in-place operations: the dozen passes per column stay in cache."""
    n = len(columns[0])
    out = np.empty(n, dtype=np.uint64)
    m = min(n, BLOCK)
    v, w = np.empty(m, dtype=np.uint64), np.empty(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for lo in range(0, n, BLOCK):
            hi = min(n, lo + BLOCK)
            h, v_, w_ = out[lo:hi], v[: hi - lo], w[: hi - lo]
            h.fill(state & _M)
            for values in columns:
                _hash_int_into(np.asarray(values[lo:hi]), h, v_, w_)
    return out.view(np.int64)


BLOCK = 1 << 16


def _hash_int_into(values: np.ndarray, h: np.ndarray, v: np.ndarray, w: np.ndarray) -> None:
    """``h = hashInt(values, seed h)`` (:func:`_hash_int`) in place; ``v``, ``w``: scratch arrays."""
    np.copyto(v, values.astype(np.int32, copy=False).view(np.uint32), casting="unsafe")
    np.multiply(v, np.uint64(P1), out=v)
    np.add(h, np.uint64((P5 + 4) & _M), out=h)
    np.bitwise_xor(h, v, out=h)
    np.left_shift(h, np.uint64(23), out=v)  # rotl 23
    np.right_shift(h, np.uint64(41), out=h)
    np.bitwise_or(h, v, out=h)
    np.multiply(h, np.uint64(P2), out=h)
    np.add(h, np.uint64(P3), out=h)
    for shift, prime in ((33, P2), (29, P3), (32, None)):  # avalanche
        np.right_shift(h, np.uint64(shift), out=w)
        np.bitwise_xor(h, w, out=h)
        if prime is not None:
            np.multiply(h, np.uint64(prime), out=h)
