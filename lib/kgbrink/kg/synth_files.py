"""The Wikidata5m file format, written for :func:`kgbrink.kg.synth.write_dataset`: triple lines
``Q<h>\\tP<r>\\tQ<t>``, the entity and relation files (``Q<n>`` / ``P<n>``, a label and 0-2 aliases), and
the train file's dirty lines (exact repeats, and malformed lines with one defect each). Lines are Arrow
string arrays written buffer by buffer, ``LINES_PER_WRITE`` at a time; gzip output has no file name and
mtime 0, so the same arguments give the same bytes.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kgbrink.kg.synth_graph import RELATION_NAMES, RELATIONS, Triples

LINES_PER_WRITE = 1 << 21

MALFORMED_REASONS = ("wrong_field_count", "empty_field", "bad_entity_key", "bad_relation_key")
# Each line has one defect, so the precedence (field count, empty field, keys of h, r, t) names one reason.
MALFORMED_TEMPLATES = {
    "wrong_field_count": ("Q{h}\tP{r}", "Q{h}\tP{r}\tQ{t}\tQ{h}", "Q{h}\tP{r}\tQ{t}\tQ{t}"),
    "empty_field": ("\tP{r}\tQ{t}", "Q{h}\t\tQ{t}", "Q{h}\tP{r}\t"),
    "bad_entity_key": ("X{h}\tP{r}\tQ{t}", "Q0{h}\tP{r}\tQ{t}", "Q{h}\tP{r}\tq{t}", "Q{h}\tP{r}\tQ0"),
    "bad_relation_key": ("Q{h}\tR{r}\tQ{t}", "Q{h}\tP0{r}\tQ{t}", "Q{h}\tp{r}\tQ{t}", "Q{h}\tP{r}a\tQ{t}"),
}


def triple_lines(triples: Triples) -> pa.Array:
    """``Q<h>\\tP<r>\\tQ<t>\\n`` per triple."""
    h, r, t = (pc.cast(pa.array(getattr(triples, a)), pa.string()) for a in "hrt")
    return pc.binary_join_element_wise("Q", h, "\tP", r, "\tQ", t, "\n", "")


def write_lines(stream: BinaryIO, lines: pa.Array) -> None:
    """Write the concatenated values of a string array: its data buffer from the first to the last offset."""
    if len(lines) == 0:
        return
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=4 * lines.offset)
    stream.write(memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]])


@contextmanager
def open_output(path: Path, compress: bool) -> Iterator[BinaryIO]:
    """``path`` opened for writing; gzip level 6 without name and mtime (reproducible bytes) if ``compress``."""
    with open(path, "wb") as raw:
        if compress:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0) as stream:
                yield stream
        else:
            yield raw


def dirty_lines(
    rng: np.random.Generator, train: Triples, n_duplicates: int, n_malformed: int
) -> tuple[pa.Array, dict[str, int]]:
    """(repeats of random train lines and malformed lines built from random train triples, shuffled
    together; malformed lines per reason). Reasons are uniform, templates uniform within a reason."""
    duplicates = triple_lines(train.take(rng.integers(0, len(train), n_duplicates)))
    reasons = rng.integers(0, len(MALFORMED_REASONS), n_malformed)
    variants = rng.random(n_malformed)
    sources = train.take(rng.integers(0, len(train), n_malformed))
    malformed = []
    for reason, variant, h, r, t in zip(
        reasons.tolist(), variants.tolist(), sources.h.tolist(), sources.r.tolist(), sources.t.tolist()
    ):
        templates = MALFORMED_TEMPLATES[MALFORMED_REASONS[reason]]
        malformed.append(templates[int(variant * len(templates))].format(h=h, r=r, t=t) + "\n")
    lines = pa.concat_arrays([duplicates, pa.array(malformed, pa.string())])
    per_reason = {name: int((reasons == i).sum()) for i, name in enumerate(MALFORMED_REASONS)}
    return lines.take(rng.permutation(len(lines))), per_reason


def write_train(stream: BinaryIO, train: Triples, dirty: pa.Array, positions: np.ndarray) -> None:
    """The train triples in order, with ``dirty[k]`` as line ``positions[k]`` (0-based, sorted)."""
    total = len(train) + len(dirty)
    for start in range(0, total, LINES_PER_WRITE):
        stop = min(start + LINES_PER_WRITE, total)
        lo, hi = np.searchsorted(positions, [start, stop])
        lines = triple_lines(train.take(slice(start - lo, stop - hi)))
        if hi > lo:
            is_dirty = np.zeros(stop - start, dtype=bool)
            is_dirty[positions[lo:hi] - start] = True
            order = np.empty(stop - start, dtype=np.int64)
            order[~is_dirty] = np.arange(len(lines))
            order[is_dirty] = len(lines) + np.arange(hi - lo)
            lines = pa.concat_arrays([lines, dirty.slice(lo, hi - lo)]).take(order)
        write_lines(stream, lines)


def write_entities(stream: BinaryIO, rng: np.random.Generator, n_entities: int, classes: np.ndarray) -> None:
    """``Q<n>\\t<label>[\\t<label> alias 1[\\t<label> alias 2]]\\n`` for n = 1..E; label ``class <n>`` or
    ``entity <n>``, 0-2 extra aliases (uniform)."""
    is_class = np.zeros(n_entities + 1, dtype=bool)
    is_class[classes] = True
    n_aliases = rng.integers(0, 3, n_entities + 1)
    for start in range(1, n_entities + 1, LINES_PER_WRITE):
        stop = min(start + LINES_PER_WRITE, n_entities + 1)
        numbers = pc.cast(pa.array(np.arange(start, stop, dtype=np.int32)), pa.string())
        labels = pc.binary_join_element_wise(
            pc.if_else(pa.array(is_class[start:stop]), "class", "entity"), numbers, " "
        )
        aliases = [
            pc.if_else(
                pa.array(n_aliases[start:stop] >= j), pc.binary_join_element_wise("\t", labels, f" alias {j}", ""), ""
            )
            for j in (1, 2)
        ]
        write_lines(stream, pc.binary_join_element_wise("Q", numbers, "\t", labels, *aliases, "\n", ""))


def relation_lines(rng: np.random.Generator) -> str:
    """``P<n>\\t<label>[\\t<alias>...]\\n`` for n = 1..822: the names of RELATION_NAMES, else ``property <n>``
    with 0-2 extra aliases (uniform)."""
    n_aliases = rng.integers(0, 3, RELATIONS + 1)
    lines = []
    for p in range(1, RELATIONS + 1):
        names = RELATION_NAMES.get(p) or (
            f"property {p}",
            *(f"property {p} alias {j}" for j in range(1, n_aliases[p] + 1)),
        )
        lines.append("\t".join((f"P{p}", *names)) + "\n")
    return "".join(lines)
