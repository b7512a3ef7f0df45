"""The options of ``kgbrink ingest`` (with their command-line form) and what they resolve to: the input
files per split and the triple format of the dump."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pyspark.sql import SparkSession

from kgbrink.core.files import IngestInputs, InputError, expand_directories, probe_inputs, wikidata5m_inputs
from kgbrink.core.jobs import arg
from kgbrink.kg import ingest

FORMATS = ("wikidata5m", "probe", "delimited", "ntriples")


def _split_item(item: str) -> tuple[str, list[str]]:
    """``NAME=PATH[,PATH...]`` (argparse type: a malformed value exits with status 2)."""
    name, _, paths = item.partition("=")
    files = [p for p in paths.split(",") if p]
    if not name.strip() or not files:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH[,PATH...], got '{item}'")
    return name.strip(), files


def _splits(items: list[tuple[str, list[str]]]) -> dict[str, list[str]]:
    splits: dict[str, list[str]] = {}
    for name, files in items:
        splits.setdefault(name, []).extend(files)
    return splits


def _delimiter(text: str) -> str:
    """One delimiter; ``\\t`` may be written as the two characters backslash and t."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(text, text)
    if not value:
        raise argparse.ArgumentTypeError("the delimiter must not be empty")
    return value


def _quote(text: str) -> str:
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"the quote must be one character, got {text!r}")
    return text


def _columns(text: str) -> str:
    if sorted(c.strip() for c in text.split(",")) != ["h", "r", "t"]:
        raise argparse.ArgumentTypeError(f"columns must be a permutation of h,r,t, got '{text}'")
    return text


@dataclass
class IngestOptions:
    dataset: str | None = arg(None, "dataset directory or URI (default: setting 'dataset')")
    format: str = arg("wikidata5m", "input format", choices=["wikidata5m", "probe", "delimited", "ntriples"])
    input: str | None = arg(None, "directory of a wikidata5m or probe dump")
    splits: dict[str, list[str]] = arg(
        help="triple files of a split, or directories of them (repeatable)",
        flag="--split",
        factory=dict,
        action="append",
        type=_split_item,
        metavar="NAME=PATH[,PATH]",
        convert=_splits,
    )
    variant: str = arg("transductive", "Wikidata5m file set", choices=["transductive", "inductive"])
    delimiter: str = arg(
        "\t", "field delimiter of delimited files (default TAB; '\\t' or 'tab' also mean TAB)", type=_delimiter
    )
    columns: str = arg("h,r,t", "role of each field in line order, e.g. h,t,r", type=_columns)
    quote: str | None = arg(None, "quote character that may wrap fields, e.g. '\"'", type=_quote)
    entity_pattern: str | None = arg(None, "regex entity keys must match (wikidata5m: Q[1-9][0-9]*)")
    relation_pattern: str | None = arg(None, "regex relation keys must match (wikidata5m: P[1-9][0-9]*)")
    entity_aliases: str | None = arg(None, "alias file: key<TAB>label<TAB>alias...")
    relation_aliases: str | None = arg(None, "alias file for relations")
    label_language: str = arg("en", "N-Triples label language")


def resolve_inputs(spark: SparkSession, opts: IngestOptions) -> IngestInputs:
    """The files of the dump: ``--input``'s, with any ``--split`` added or replacing a split (a ``--split``
    directory stands for its files, :func:`kgbrink.core.files.expand_directories`)."""
    if opts.format not in FORMATS:
        raise InputError(f"unknown format '{opts.format}' (one of {', '.join(FORMATS)})")
    given = {name: expand_directories(spark, paths) for name, paths in opts.splits.items()}
    if opts.format == "wikidata5m" and opts.input:
        inputs = wikidata5m_inputs(spark, opts.input, opts.variant)
    elif opts.format == "probe" and opts.input:
        inputs = probe_inputs(spark, opts.input)
    elif opts.input:
        raise InputError(f"--input DIR is for wikidata5m and probe; give {opts.format} files with --split NAME=PATH")
    else:
        inputs = IngestInputs(given)
    if opts.input and given:
        inputs = IngestInputs(
            {**inputs.splits, **given},
            inputs.entity_aliases,
            inputs.relation_aliases,
            inputs.entity_dict,
            inputs.relation_dict,
        )
    if opts.format == "ntriples" and opts.entity_aliases:
        raise InputError(
            "N-Triples entity labels come from the dump's rdfs:label lines; --entity-aliases is not used with --format ntriples"
        )
    inputs.entity_aliases = opts.entity_aliases or inputs.entity_aliases
    inputs.relation_aliases = opts.relation_aliases or inputs.relation_aliases
    return inputs


def triple_format(opts: IngestOptions) -> ingest.TripleFormat:
    """The line layout and key rules of ``opts.format``, with any pattern the user overrides.

    Wikidata keys travel as integers (:class:`kgbrink.kg.ingest.KeyCodec`) unless a custom pattern makes
    that mapping unsafe.
    """
    base = {"wikidata5m": ingest.WIKIDATA5M, "ntriples": ingest.NTRIPLES}.get(opts.format, ingest.PROBE)
    custom = bool(opts.entity_pattern or opts.relation_pattern)
    return ingest.TripleFormat(
        opts.format,
        delimiter=opts.delimiter,
        columns=tuple(c.strip() for c in opts.columns.split(",")),
        quote=opts.quote,
        entity_pattern=opts.entity_pattern or base.entity_pattern,
        relation_pattern=opts.relation_pattern or base.relation_pattern,
        entity_codec=ingest.STRING_KEYS if custom else base.entity_codec,
        relation_codec=ingest.STRING_KEYS if custom else base.relation_codec,
    )
