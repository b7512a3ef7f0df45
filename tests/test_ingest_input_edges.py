"""Ingest at the edges of its input: broken compressed files, directories given as split paths, the bytes
of dictionary lines, and the command line's checks before any work (issue 28)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kgbrink.core.delta import read_table
from kgbrink.core.files import InputError, reported_path
from kgbrink.core.jobs import JobContext
from kgbrink.jobs import ingest as job
from tests.conftest import conf_args

# 20,000 lines compress to more than the gzip reader's first buffer, so a cut shows mid-stream.
GZ = gzip.compress("".join(f"Q{i}\tP1\tQ{i + 1}\n" for i in range(20000)).encode())


def _fails_naming(spark, config, dataset: Path, message: str, **options) -> None:
    """The ingest fails with an InputError matching ``message`` and leaves nothing in ``dataset``."""
    with pytest.raises(InputError, match=message):
        job.run(JobContext(spark, config), job.IngestOptions(dataset=str(dataset), **options))
    assert not dataset.exists() or sorted(p.name for p in dataset.iterdir()) == []


# --- item 4: truncated or corrupt .gz --------------------------------------------------------------


def test_broken_gz_files_are_input_errors_naming_the_file(spark, config, tmp_path):
    """Before: a name with a space, or a broken alias file, ended in a TypeError inside the error handling
    (Spark's URL-encoded URI was compared with a Column); a CRC failure or corrupt deflate data was a raw
    Py4JJavaError."""
    good = tmp_path / "good.tsv"
    good.write_text("Q1\tP1\tQ2\n")
    spaced = tmp_path / "my dump.tsv.gz"
    spaced.write_bytes(GZ[: len(GZ) // 2])
    _fails_naming(
        spark,
        config,
        tmp_path / "ds1",
        r"^\S+/my dump.tsv.gz: truncated or corrupt compressed input \(EOFException",
        format="delimited",
        splits={"train": [str(good), str(spaced)]},
    )
    aliases = tmp_path / "aliases.txt.gz"
    aliases.write_bytes(gzip.compress("".join(f"Q{i}\tname {i}\n" for i in range(20000)).encode())[:3000])
    _fails_naming(
        spark,
        config,
        tmp_path / "ds2",
        r"^\S+/aliases.txt.gz: truncated or corrupt compressed input \(EOFException",
        splits={"train": [str(good)]},
        entity_aliases=str(aliases),
    )
    crc = bytearray(GZ)
    crc[-6] ^= 0xFF  # the CRC-32 in the gzip trailer no longer matches the data
    bad_crc = tmp_path / "crc.tsv.gz"
    bad_crc.write_bytes(bytes(crc))
    _fails_naming(
        spark,
        config,
        tmp_path / "ds3",
        r"^\S+/crc.tsv.gz: truncated or corrupt compressed input \(IOException: gzip stream CRC failure\)",
        format="delimited",
        splits={"train": [str(bad_crc)]},
    )
    flipped = bytearray(GZ)
    flipped[100] ^= 0xFF  # inside the deflate data: zlib's own message ('invalid distance too far back')
    bad_data = tmp_path / "data.tsv.gz"
    bad_data.write_bytes(bytes(flipped))
    _fails_naming(
        spark,
        config,
        tmp_path / "ds4",
        r"^\S+/data.tsv.gz: truncated or corrupt compressed input \(IOException: invalid ",
        format="delimited",
        splits={"train": [str(bad_data)]},
    )


# --- item 4: a directory as a --split path -------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_a_split_directory_reads_its_files_with_line_numbers_per_file(spark, config, tmp_path):
    """Before: refused. Now its files are read (hidden, ``_`` and empty files left out)."""
    parts = tmp_path / "parts"
    _write(parts / "b.tsv", b"Q3\tP1\tQ4\nbad\n")
    _write(parts / "a.tsv", b"bad line\nQ1\tP1\tQ2\n")
    _write(parts / "c.tsv.gz", gzip.compress(b"Q5\tP1\tQ6\nQ1\tP1\tQ2\n"))
    _write(parts / "_SUCCESS", b"")
    _write(parts / ".a.tsv.crc", b"not a triple line")
    _write(parts / "empty.tsv", b"")
    dataset = tmp_path / "ds"
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=1"])),
        job.IngestOptions(dataset=str(dataset), format="delimited", splits={"train": [str(parts)]}),
    )
    c = summary.counts
    # 2 + 2 + 2 lines; 'Q1 P1 Q2' of c.tsv.gz repeats a.tsv's; one bad line in a.tsv and one in b.tsv
    assert (c["lines"], c["kept"], c["duplicates"], c["quarantined"]) == (6, 3, 1, 2)
    quarantine = read_table(spark, str(dataset / "quarantine")).collect()
    rows = sorted((reported_path(r["source_file"]), r["line_number"], r["line"], r["reason"]) for r in quarantine)
    assert rows == [
        (str(parts / "a.tsv"), 1, "bad line", "wrong_field_count"),
        (str(parts / "b.tsv"), 2, "bad", "wrong_field_count"),
    ]


def test_a_split_directory_with_subdirectories_or_no_lines_is_refused(spark, config, tmp_path):
    nested = tmp_path / "nested"
    _write(nested / "a.tsv", b"Q1\tP1\tQ2\n")
    _write(nested / "more" / "b.tsv", b"Q2\tP1\tQ3\n")
    _fails_naming(
        spark,
        config,
        tmp_path / "ds1",
        r"input directory \S+/nested holds directories \(more\): only the files directly in a directory are read",
        format="delimited",
        splits={"train": [str(nested)]},
    )
    hollow = tmp_path / "hollow"
    _write(hollow / "_SUCCESS", b"")
    _write(hollow / "empty.tsv", b"")
    _fails_naming(
        spark,
        config,
        tmp_path / "ds2",
        r"input directory has no non-empty files: \S+/hollow",
        format="delimited",
        splits={"train": [str(hollow)]},
    )


# --- items 2 and 3: the bytes and line ends of PROBE dictionaries ------------------------------------


def _dictionary(spark, path: str):
    from kgbrink.core.files import read_dictionary_lines
    from kgbrink.kg.ingest import parse_dictionary

    return parse_dictionary(read_dictionary_lines(spark, path), path)


def test_dictionary_lines_end_at_newline_and_must_be_utf8(spark, tmp_path):
    """Before: a lone \\r made two entries of one line, and a Latin-1 key was stored as 'caf\\ufffd'."""
    crlf = tmp_path / "crlf.dict"
    crlf.write_bytes(b"0\talice\r\n1\tbob\r\n")
    assert sorted(tuple(r) for r in _dictionary(spark, str(crlf)).collect()) == [(0, "alice"), (1, "bob")]
    lone_cr = tmp_path / "cr.dict"
    lone_cr.write_bytes(b"0\tknows\r1\tlikes\n")
    with pytest.raises(InputError, match=r"cr.dict: 1 malformed lines \(expected 'id<TAB>key'\), e.g. '0\\tknows\\r1"):
        _dictionary(spark, str(lone_cr))
    latin1 = tmp_path / "latin1.dict"
    latin1.write_bytes(b"0\talice\n1\tcaf\xe9\n")
    with pytest.raises(InputError, match="latin1.dict: 1 lines are not valid UTF-8, e.g. '1\\\\tcaf\ufffd'"):
        _dictionary(spark, str(latin1))


# --- item 7: the command line ----------------------------------------------------------------------


def test_json_path_is_tried_not_inferred_from_permission_bits(tmp_path):
    """The check leaves no trace: an existing file keeps its bytes, a probe file and missing parents
    are not left behind."""
    from kgbrink.cli import _unwritable

    kept = tmp_path / "kept.json"
    kept.write_text("old")
    assert _unwritable(str(kept)) is None and kept.read_text() == "old"
    assert _unwritable(str(tmp_path / "new.json")) is None and not (tmp_path / "new.json").exists()
    assert _unwritable(str(tmp_path / "a" / "b" / "s.json")) is None and not (tmp_path / "a").exists()
    assert _unwritable(str(tmp_path)) == "it is a directory"
    assert _unwritable(str(kept / "s.json")) == f"{kept} is not a directory"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_json_where_no_file_can_be_created_is_refused_before_any_work(config, capsys):
    """Before: the check read permission bits, which root passes for /proc, so the job ran to its end and
    only then failed to write the summary."""
    from kgbrink.cli import main

    assert main(["stats", *conf_args(config), "--json", "/proc/kgbrink-summary.json", "--no-tracking"]) == 2
    assert "error: cannot write --json /proc/kgbrink-summary.json (" in capsys.readouterr().err


def test_ingest_says_which_dataset_it_writes_also_the_configured_default(spark, config, tmp_path, capsys):
    """Before: nothing said which dataset a run was overwriting until it succeeded ('wrote: ...'), and
    a run without --dataset took the configured default silently. The inputs are missing here, so the
    runs fail at once: the dataset is still named, before the work and in the summary."""
    from kgbrink.cli import main

    dataset = tmp_path / "default-ds"
    args = ["ingest", *conf_args(config), "--set", f"dataset={dataset}", "--format", "delimited"]
    args += ["--split", f"train={tmp_path / 'missing.tsv'}", "--no-tracking"]
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert f"ingest into {dataset} (no --dataset: the setting 'dataset' of {config.source})\n" in err
    assert f"  dataset: {dataset}" in out.splitlines()
    assert main([*args, "--dataset", str(tmp_path / "given")]) == 1
    out, err = capsys.readouterr()
    assert f"ingest into {tmp_path / 'given'}\n" in err and f"  dataset: {tmp_path / 'given'}" in out.splitlines()
