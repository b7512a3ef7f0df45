"""Staging dumps and releases with boto3 (kgbrink.storage.staging, `kgbrink stage` / `kgbrink fetch`),
against moto's in-process S3 (mock_aws). Expected digests are SHA-256s of the literal bytes, as published
for b"abc" (FIPS 180-2, Appendix B.1) and b"" (the empty message)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# moto is a dev dependency (pyproject.toml): imported plainly, so a missing one fails every test here
# instead of silently skipping the fetch and stage security tests (issue 57, B5)
from moto import mock_aws

from kgbrink.cli import main
from kgbrink.core.loader import load_config
from kgbrink.jobs.stage import client_for
from kgbrink.storage import download, staging, swap, upload
from kgbrink.storage.staging import MANIFEST, MARKER, FileEntry, Manifest, StagingError
from tests.conftest import PROJECT_ROOT

SHA_ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
SHA_EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
BUCKET = "dumps"


@pytest.fixture(scope="module")
def _mocked_s3():
    """One in-process S3 and client for the module (a boto3 client takes ~0.1 s to make)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            patch.delenv(key, raising=False)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        with mock_aws() as mock:
            yield mock, staging.s3_client(region="us-east-1")


@pytest.fixture
def s3(_mocked_s3):
    """The client, on a store that holds one empty bucket, BUCKET."""
    mock, client = _mocked_s3
    mock.reset()
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def dump(tmp_path) -> Path:
    directory = tmp_path / "dump"
    (directory / "sub").mkdir(parents=True)
    (directory / "train.txt").write_bytes(b"abc")
    (directory / "empty.txt").write_bytes(b"")
    (directory / "sub" / "valid.txt").write_bytes(b"Q1\tP1\tQ2\n")
    return directory


def _object(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _put(client, prefix: str, files: dict[str, bytes], version: str = "v1", sizes: dict[str, int] | None = None):
    """``files`` as objects under ``prefix`` and a manifest listing them (``sizes`` and SHA-256s of the
    bytes given, unless ``sizes`` says otherwise): a bucket as anyone may fill it."""
    entries = {}
    for name, data in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
        entries[name] = FileEntry(name, (sizes or {}).get(name, len(data)), hashlib.sha256(data).hexdigest())
    body = Manifest(version, entries).to_json().encode()
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST}", Body=body)


def _tree(folder: Path) -> dict[str, object]:
    """Everything under ``folder``, links not followed: files' bytes, links' targets, empty folders."""
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            key = path.relative_to(folder).as_posix()
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            elif path.is_file():
                out[key] = path.read_bytes()
            elif not any(path.iterdir()):
                out[key] = "empty folder"
    return out


def test_parse_uri_accepts_s3_s3a_s3n_and_refuses_others():
    assert staging.parse_uri("s3a://b/dumps/w5m/") == ("b", "dumps/w5m")
    assert staging.parse_uri("s3://b") == ("b", "")
    assert staging.parse_uri("s3n://b/x") == ("b", "x")
    for bad in ("/local/dir", "http://b/x", "s3a:///x"):
        with pytest.raises(ValueError):
            staging.parse_uri(bad)


def test_local_manifest_sizes_and_sha256(dump):
    (dump / MANIFEST).write_text("{}")  # an old manifest in the directory is not a file of the dump
    manifest = staging.local_manifest(dump)
    assert {n: (e.size, e.sha256) for n, e in manifest.files.items()} == {
        "empty.txt": (0, SHA_EMPTY),
        "sub/valid.txt": (9, hashlib.sha256(b"Q1\tP1\tQ2\n").hexdigest()),
        "train.txt": (3, SHA_ABC),
    }
    lines = f"empty.txt\t0\t{SHA_EMPTY}\nsub/valid.txt\t9\t{manifest.files['sub/valid.txt'].sha256}\ntrain.txt\t3\t{SHA_ABC}\n"
    assert manifest.content_digest() == hashlib.sha256(lines.encode()).hexdigest()
    assert manifest.version == manifest.content_digest()[:16]
    assert staging.local_manifest(dump, "2026-11-01").version == "2026-11-01"


def test_stage_uploads_with_checksums_and_writes_the_manifest_last(s3, dump):
    result = staging.stage(s3, dump, f"s3a://{BUCKET}/w5m/", "v1")
    assert result.changed and result.written
    assert result.uploaded == ["empty.txt", "sub/valid.txt", "train.txt"] and result.uploaded_bytes == 12
    assert _object(s3, "w5m/train.txt") == b"abc" and _object(s3, "w5m/sub/valid.txt") == b"Q1\tP1\tQ2\n"
    head = s3.head_object(Bucket=BUCKET, Key="w5m/train.txt", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == base64.b64encode(bytes.fromhex(SHA_ABC)).decode()
    assert head["Metadata"]["sha256"] == SHA_ABC
    body = json.loads(_object(s3, f"w5m/{MANIFEST}"))
    assert body["version"] == "v1" and body["format"] == 1
    assert [(f["name"], f["size"], f["sha256"]) for f in body["files"]] == [
        ("empty.txt", 0, SHA_EMPTY),
        ("sub/valid.txt", 9, hashlib.sha256(b"Q1\tP1\tQ2\n").hexdigest()),
        ("train.txt", 3, SHA_ABC),
    ]
    assert body["files"][2]["etag"] == head["ETag"]


def test_a_multipart_upload_is_checked_against_its_parts_composite_sha256(s3, tmp_path, monkeypatch):
    """Above PART_BYTES a file goes up in parts; the store keeps the SHA-256 of the parts' SHA-256s (moto
    without AWS's "-<parts>" suffix), which the upload checks, and a fetch gets the same bytes back."""
    monkeypatch.setattr(upload, "PART_BYTES", 5 << 20)
    directory = tmp_path / "big"
    directory.mkdir()
    parts = [bytes([i]) * (5 << 20) for i in (1, 2)] + [b"tail"]
    (directory / "train.txt").write_bytes(b"".join(parts))
    result = staging.stage(s3, directory, f"s3://{BUCKET}/big", "v1")
    head = s3.head_object(Bucket=BUCKET, Key="big/train.txt", ChecksumMode="ENABLED")
    composite = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()
    assert head["ChecksumSHA256"].split("-")[0] == base64.b64encode(composite).decode()
    assert staging.composite_sha256(directory / "train.txt", 5 << 20) == (base64.b64encode(composite).decode(), 3)
    assert result.manifest.files["train.txt"].etag == head["ETag"] and head["ETag"].endswith('-3"')
    fetched = staging.fetch(s3, f"s3://{BUCKET}/big", tmp_path / "back")
    assert fetched.downloaded == ["train.txt"] and (tmp_path / "back" / "train.txt").read_bytes() == b"".join(parts)


def test_a_stored_checksum_that_matches_nothing_fails_the_upload(s3, tmp_path, monkeypatch):
    directory = tmp_path / "one"
    directory.mkdir()
    (directory / "train.txt").write_bytes(b"abc")
    real_head = upload.head_object
    monkeypatch.setattr(
        upload, "head_object", lambda *a: {**real_head(*a), "ChecksumSHA256": base64.b64encode(b"x" * 32).decode()}
    )
    with pytest.raises(staging.StagingError, match="train.txt: the stored SHA-256 .* is neither the file's"):
        staging.stage(s3, directory, f"s3://{BUCKET}/one", "v1")


def test_an_unchanged_dump_writes_nothing(s3, dump):
    staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v1")
    before = s3.head_object(Bucket=BUCKET, Key=f"w5m/{MANIFEST}")["ETag"]
    again = staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v2")
    assert not again.changed and not again.written and again.uploaded == []
    assert again.manifest.version == "v1"  # the staged version stays current
    assert s3.head_object(Bucket=BUCKET, Key=f"w5m/{MANIFEST}")["ETag"] == before


def test_added_modified_and_removed_files_are_staged_and_counted(s3, dump):
    staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v1")
    (dump / "train.txt").write_bytes(b"abd")  # same size, other bytes
    (dump / "empty.txt").unlink()
    (dump / "test.txt").write_bytes(b"x")
    check = staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v2", check_only=True)
    assert check.changed and not check.written and check.uploaded == []
    assert _object(s3, "w5m/train.txt") == b"abc"  # a check uploads nothing
    result = staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v2")
    changes = result.changes
    assert (changes.added, changes.modified, changes.removed, changes.unchanged) == (
        ["test.txt"],
        ["train.txt"],
        ["empty.txt"],
        ["sub/valid.txt"],
    )
    assert result.uploaded == ["test.txt", "train.txt"] and result.uploaded_bytes == 4
    assert _object(s3, "w5m/train.txt") == b"abd"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="w5m/")["Contents"]}
    assert keys == {"w5m/sub/valid.txt", "w5m/test.txt", "w5m/train.txt", f"w5m/{MANIFEST}"}
    assert staging.read_manifest(s3, f"s3://{BUCKET}/w5m").version == "v2"


def test_an_object_changed_behind_the_manifest_is_detected_by_etag_and_restaged(s3, dump):
    staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v1")
    s3.put_object(Bucket=BUCKET, Key="w5m/train.txt", Body=b"xyz")  # same size: only the ETag tells
    result = staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v1")
    assert result.drifted == ["train.txt"] and result.changed and result.uploaded == ["train.txt"]
    assert _object(s3, "w5m/train.txt") == b"abc"
    assert not staging.stage(s3, dump, f"s3://{BUCKET}/w5m", "v1").changed


def test_upload_refuses_an_object_that_is_not_the_file(s3, dump, monkeypatch):
    entry = FileEntry("train.txt", 3, SHA_ABC)
    real = s3.upload_file

    def corrupting(path, bucket, key, ExtraArgs=None, Config=None):  # noqa: N803 - boto3's names
        other = dump / "other"
        other.write_bytes(b"abcd")
        real(str(other), bucket, key, ExtraArgs={**ExtraArgs, "Metadata": {}}, Config=Config)

    monkeypatch.setattr(s3, "upload_file", corrupting)
    with pytest.raises(StagingError, match=r"s3://dumps/w5m/train\.txt: 4 bytes stored, 3 sent; .*sha256 metadata"):
        staging.upload(s3, dump / "train.txt", BUCKET, "w5m/train.txt", entry)


def test_fetch_checks_every_file_and_keeps_matching_ones(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3a://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    first = staging.fetch(s3, f"s3a://{BUCKET}/rel/", out)
    assert first.downloaded == ["empty.txt", "sub/valid.txt", "train.txt"] and first.downloaded_bytes == 12
    assert (out / "train.txt").read_bytes() == b"abc" and (out / "sub/valid.txt").read_bytes() == b"Q1\tP1\tQ2\n"
    (out / "train.txt").write_bytes(b"zzz")
    second = staging.fetch(s3, f"s3a://{BUCKET}/rel", out)
    assert second.downloaded == ["train.txt"] and second.present == ["empty.txt", "sub/valid.txt"]
    assert (out / "train.txt").read_bytes() == b"abc"


def test_fetch_refuses_a_corrupt_object_and_leaves_the_folder_as_it_was(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    s3.put_object(Bucket=BUCKET, Key="rel/train.txt", Body=b"abd")
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.txt").write_bytes(b"old")
    with pytest.raises(
        StagingError,
        match=r"rel/train\.txt: downloaded 3 bytes with SHA-256 .* the manifest says 3 bytes, ba7816bf8f01",
    ):
        staging.fetch(s3, f"s3://{BUCKET}/rel", out, replace=True)
    # nothing of the new version is in place (empty.txt and sub/valid.txt were fetched before the failure),
    # and nothing temporary is left beside the folder
    assert [p.relative_to(out).as_posix() for p in out.rglob("*")] == ["train.txt"]
    assert (out / "train.txt").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]


def test_fetch_makes_the_folder_equal_the_staged_version(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    first = staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    assert not first.replaced and first.removed == []
    marker = json.loads((out / MARKER).read_text())
    assert marker["uri"] == marker["source"] == f"s3://{BUCKET}/rel"
    assert marker["files"] == ["empty.txt", "sub/valid.txt", "train.txt"] and marker["version"] == "r1"
    (dump / "sub" / "valid.txt").unlink()  # a split the new version no longer has
    (dump / "train.txt").write_bytes(b"abcd")
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r2")
    (out / "empty.txt").write_bytes(b"edited")  # a fetched file, changed: the fetch restores it
    again = staging.fetch(s3, f"s3a://{BUCKET}/rel/", out)  # the same prefix, spelled otherwise
    assert again.downloaded == ["empty.txt", "train.txt"] and again.present == [] and again.replaced
    assert again.removed == ["sub/valid.txt"]
    assert _tree(out) == {"empty.txt": b"", "train.txt": b"abcd", MARKER: (out / MARKER).read_bytes()}
    assert json.loads((out / MARKER).read_text())["files"] == ["empty.txt", "train.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]
    # a staged directory that was fetched does not stage the marker
    assert MARKER not in staging.local_manifest(out).files


def test_fetch_refuses_a_folder_no_fetch_wrote_and_keeps_the_users_files(s3, dump, tmp_path):
    """Issue 57, A1: ``--out .`` or a typo names a folder of the user's; nothing in it is deleted unless
    ``replace`` (``--replace``) says so."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    work = tmp_path / "work"
    (work / "chapter").mkdir(parents=True)
    (work / "thesis.tex").write_bytes(b"years of work")
    (work / "chapter" / "one.tex").write_bytes(b"more")
    (work / "drafts").mkdir()  # an empty folder is the user's too
    with pytest.raises(
        StagingError, match=r"--out .*/work holds files no fetch wrote \('chapter/one\.tex', 'drafts/', "
    ):
        staging.fetch(s3, f"s3://{BUCKET}/rel", work)
    assert _tree(work) == {"chapter/one.tex": b"more", "drafts": "empty folder", "thesis.tex": b"years of work"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "work"]  # nothing downloaded beside it
    with pytest.raises(StagingError, match="give --replace to replace the folder"):
        staging.fetch(s3, f"s3://{BUCKET}/rel", tmp_path / "work" / "chapter" / "..")  # the same folder
    replaced = staging.fetch(s3, f"s3://{BUCKET}/rel", work, replace=True)
    assert replaced.replaced and replaced.removed == ["chapter/one.tex", "thesis.tex"]
    assert sorted(_tree(work)) == [MARKER, "empty.txt", "sub/valid.txt", "train.txt"]


def test_a_large_folder_of_the_users_is_refused_after_a_look_at_a_few_files(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    home = tmp_path / "home"
    for number in range(40):
        (home / f"d{number}").mkdir(parents=True)
        (home / f"d{number}" / "notes.txt").write_text("mine")
    with pytest.raises(StagingError, match=r"holds files no fetch wrote \(('d\d+/notes\.txt', ){5}\.\.\.\) and no "):
        staging.fetch(s3, f"s3://{BUCKET}/rel", home)
    assert len(_tree(home)) == 40


def test_fetch_refuses_files_the_user_added_to_a_fetched_folder(s3, dump, tmp_path):
    """A fetched folder is the fetch's, but a file the user put in it is theirs: refused and kept unless
    ``replace``; so is the folder of another location's fetch."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    (out / "sub" / "notes.txt").write_text("mine")
    with pytest.raises(StagingError, match=r"holds files its last fetch did not write \('sub/notes\.txt'\)"):
        staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    assert (out / "sub" / "notes.txt").read_text() == "mine"
    (out / "sub" / "notes.txt").unlink()
    staging.stage(s3, dump, f"s3://{BUCKET}/other", "o1")
    with pytest.raises(StagingError, match=r"holds a fetch of s3://dumps/rel \(its \.kgbrink-fetch\.json\), not of"):
        staging.fetch(s3, f"s3://{BUCKET}/other", out)
    assert json.loads((out / MARKER).read_text())["uri"] == f"s3://{BUCKET}/rel"
    assert staging.fetch(s3, f"s3://{BUCKET}/other", out, replace=True).present == sorted(
        staging.local_manifest(dump).files
    )


@pytest.mark.parametrize("replace", [False, True])
def test_fetch_never_deletes_a_file_or_a_link_at_out(s3, dump, tmp_path, replace):
    """Issue 57, A1: a regular file at ``--out`` is refused and kept, also with ``replace``; so is a symbolic
    link (to a folder of the user's, or to a fetched one), and what it points to is untouched."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"keep me")
    with pytest.raises(StagingError, match=r"--out .*mine\.txt is a file, not a folder: a fetch never deletes it"):
        staging.fetch(s3, f"s3://{BUCKET}/rel", mine, replace=replace)
    assert mine.read_bytes() == b"keep me"
    folder, fetched = tmp_path / "folder", tmp_path / "fetched"
    folder.mkdir()
    (folder / "data.txt").write_bytes(b"user data")
    staging.fetch(s3, f"s3://{BUCKET}/rel", fetched)
    for target in (folder, fetched):
        link = tmp_path / "link"
        link.symlink_to(target)
        before = _tree(target)
        with pytest.raises(StagingError, match=r"--out .*/link is a symbolic link: a fetch replaces only a folder"):
            staging.fetch(s3, f"s3://{BUCKET}/rel", link, replace=replace)
        assert link.is_symlink() and os.readlink(link) == str(target) and _tree(target) == before
        link.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "fetched", "folder", "mine.txt"]


def _manifest_with(name: str) -> str:
    entry = {"name": name, "size": 3, "sha256": SHA_ABC}
    return json.dumps({"format": 1, "version": "v", "files": [entry]})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x", "'..' segment"),
        ("a/../../x", "'..' segment"),
        ("/tmp/x", "is absolute"),
        ("a\\..\\x", "backslash"),
        ("a\x00b", "NUL"),
        ("a\x1b[2Jb\nc", "control or format character U+001B"),  # issue 57, A4: a terminal escape, a newline
        ("a/b\r", "control or format character U+000D"),
        ("a\x85b", "control or format character U+0085"),  # C1: NEL
        ("evil\u202etxt.exe", "control or format character U+202E"),  # a right-to-left override
        ("a\u2028b", "control or format character U+2028"),  # the line separator
        ("a//b", "empty"),
        ("./a", "'.'"),
        ("", "not a non-empty string"),
        (7, "not a non-empty string"),
    ],
)
def test_fetch_refuses_a_manifest_name_that_leaves_the_folder(s3, tmp_path, name, why):
    s3.put_object(Bucket=BUCKET, Key="evil/_kgbrink_manifest.json", Body=_manifest_with(name).encode())
    s3.put_object(Bucket=BUCKET, Key="evil/x", Body=b"abc")
    out = tmp_path / "deep" / "out"
    with pytest.raises(
        StagingError, match=r"evil/_kgbrink_manifest\.json, files\[1\]: file name .*" + re.escape(why)
    ) as refused:
        staging.fetch(s3, f"s3://{BUCKET}/evil", out)
    assert str(refused.value).isprintable()  # the name is shown escaped
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_fetch_refuses_a_name_through_a_symbolic_link_out_of_the_folder(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "valid.txt").write_bytes(b"Q1\tP1\tQ2\n")
    out.mkdir()
    (out / "sub").symlink_to(elsewhere)
    result = staging.fetch(s3, f"s3://{BUCKET}/rel", out, replace=True)
    # the matching file behind the link is not taken as present; the folder gets a real sub/ folder
    assert result.downloaded == ["empty.txt", "sub/valid.txt", "train.txt"] and result.removed == ["sub"]
    assert not (out / "sub").is_symlink() and (elsewhere / "valid.txt").exists()


def test_stage_refuses_a_file_that_links_out_of_the_folder(s3, dump, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("key")
    (dump / "link.txt").symlink_to(secret)
    with pytest.raises(StagingError, match=r"'link\.txt' resolves to .*secret, outside"):
        staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


def test_stage_repairs_a_prefix_whose_manifest_is_corrupt(s3, dump):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    s3.put_object(Bucket=BUCKET, Key="rel/_kgbrink_manifest.json", Body=b'{"files": [}')
    s3.put_object(Bucket=BUCKET, Key="rel/stale.txt", Body=b"old split")
    result = staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    assert result.repaired and "not a kgbrink manifest" in result.repaired and result.changed
    assert result.changes.removed == ["stale.txt"] and sorted(result.uploaded) == sorted(result.manifest.files)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == ["rel/_kgbrink_manifest.json", "rel/empty.txt", "rel/sub/valid.txt", "rel/train.txt"]
    assert staging.read_manifest(s3, f"s3://{BUCKET}/rel").files == result.manifest.files
    assert not staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1").changed


def test_fetch_without_a_manifest_is_an_error(s3, tmp_path):
    with pytest.raises(StagingError, match=r"no _kgbrink_manifest\.json at s3://dumps/nothing"):
        staging.fetch(s3, f"s3://{BUCKET}/nothing", tmp_path)


def test_a_manifest_whose_digest_does_not_match_its_files_is_refused():
    text = Manifest("v", {"a": FileEntry("a", 3, SHA_ABC)}).to_json().replace('"size": 3', '"size": 4')
    with pytest.raises(StagingError, match="content_sha256 does not match"):
        Manifest.from_json(text, "m.json")


NAMES = st.sampled_from([f"f{i}" for i in range(8)])
FILES = st.dictionaries(NAMES, st.tuples(st.integers(0, 3), st.sampled_from([SHA_ABC, SHA_EMPTY])), max_size=8)


@settings(max_examples=200, deadline=None)
@given(old=FILES, new=FILES)
def test_compare_partitions_the_names(old, new):
    def manifest(files):
        return Manifest("v", {n: FileEntry(n, size, sha) for n, (size, sha) in files.items()})

    changes = staging.compare(manifest(new), manifest(old))
    assert sorted(changes.added + changes.modified + changes.unchanged) == sorted(new)
    assert changes.removed == sorted(set(old) - set(new))
    assert changes.added == sorted(set(new) - set(old))
    assert changes.unchanged == sorted(n for n in new if old.get(n) == new[n])
    assert changes.changed == (old != new)
    assert Manifest.from_json(manifest(new).to_json(), "m").files == manifest(new).files


def test_the_s3a_settings_name_the_boto3_endpoint():
    config = load_config(PROJECT_ROOT / "conf" / "cluster-local.yaml")
    client = client_for(config)
    assert client.meta.endpoint_url == "http://127.0.0.1:9000"
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.s3["addressing_style"] == "path"


def _cli(config, *args) -> int:
    conf = ["--conf", config.source] + [a for item in config.overrides for a in ("--set", item)]
    return main([args[0], *conf, "--no-tracking", *args[1:]])


def test_stage_and_fetch_through_the_cli(s3, config, dump, tmp_path, capsys):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert (
        _cli(
            config,
            "stage",
            "--input",
            str(dump),
            "--to",
            f"s3a://{BUCKET}/w5m",
            "--dump-version",
            "d1",
            "--json",
            str(first),
        )
        == 0
    )
    summary = json.loads(first.read_text())
    assert summary["changed"] is True and summary["dump_version"] == "d1" and summary["previous_version"] is None
    assert summary["counts"]["uploaded"] == 3 and summary["counts"]["uploaded_bytes"] == 12
    assert summary["manifest"] == f"s3a://{BUCKET}/w5m/{MANIFEST}"
    assert (
        _cli(config, "stage", "--input", str(dump), "--to", f"s3a://{BUCKET}/w5m", "--check", "--json", str(second))
        == 0
    )
    again = json.loads(second.read_text())
    assert again["changed"] is False and again["counts"]["uploaded"] == 0 and again["dump_version"] == "d1"
    # a variant's export: <dataset>/variants/<name>/export
    dataset = f"s3a://{BUCKET}/datasets/sample"
    assert _cli(config, "stage", "--input", str(dump), "--variant", "brink", "--dataset", dataset) == 0
    assert staging.read_manifest(s3, f"{dataset}/variants/brink/export") is not None
    out = tmp_path / "export"
    assert _cli(config, "fetch", "--variant", "brink", "--dataset", dataset, "--out", str(out)) == 0
    assert (out / "train.txt").read_bytes() == b"abc"
    assert "fetched:" in capsys.readouterr().out


def test_fetch_from_a_release_root_takes_the_version_latest_names(s3, config, dump, tmp_path, capsys):
    root = f"s3a://{BUCKET}/releases/w5m"
    staging.stage(s3, dump, f"{root}/v2", "v2")
    s3.put_object(Bucket=BUCKET, Key="releases/w5m/LATEST", Body=b"v2\n")
    summary = tmp_path / "fetch.json"
    assert _cli(config, "fetch", "--from", root, "--out", str(tmp_path / "r"), "--json", str(summary)) == 0
    assert json.loads(summary.read_text())["params"]["source"] == f"{root}/v2"
    assert (tmp_path / "r" / "sub" / "valid.txt").read_bytes() == b"Q1\tP1\tQ2\n"
    # the next version: the folder, a fetch of the root, is the fetch's to replace
    (dump / "train.txt").write_bytes(b"abcd")
    staging.stage(s3, dump, f"{root}/v3", "v3")
    s3.put_object(Bucket=BUCKET, Key="releases/w5m/LATEST", Body=b"v3\n")
    assert _cli(config, "fetch", "--from", root, "--out", str(tmp_path / "r"), "--json", str(summary)) == 0
    assert json.loads(summary.read_text())["params"]["source"] == f"{root}/v3"
    assert (tmp_path / "r" / "train.txt").read_bytes() == b"abcd"
    s3.put_object(Bucket=BUCKET, Key="releases/w5m/LATEST", Body=b"../../etc\n")  # untrusted: checked
    assert _cli(config, "fetch", "--from", root, "--out", str(tmp_path / "r")) == 1
    assert "releases/w5m/LATEST: expected a release version such as v3" in capsys.readouterr().err
    assert (tmp_path / "r" / "train.txt").read_bytes() == b"abcd"  # left as it was


def test_stage_usage_errors_exit_2(s3, config, dump, capsys):
    assert _cli(config, "stage", "--input", str(dump), "--to", "http://elsewhere/x") == 2
    assert "--to: not an S3 location" in capsys.readouterr().err
    assert _cli(config, "stage", "--input", str(dump)) == 2
    assert _cli(config, "stage", "--input", str(dump), "--to", f"s3://{BUCKET}/x", "--variant", "v") == 2
    assert _cli(config, "fetch", "--from", f"s3://{BUCKET}/none", "--out", str(dump)) == 1  # no manifest: failed
    assert "no _kgbrink_manifest.json" in capsys.readouterr().err


SEGMENTS = st.sampled_from(["a", "b.txt", "..", ".", "", "c\\d", "e\x00", "sub", "/", "f\x1bg", "h\u202ei", "\u00e9"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=5), absolute=st.booleans())
def test_a_name_that_passes_the_check_stays_inside_any_folder(tmp_path_factory, parts, absolute):
    name = ("/" if absolute else "") + "/".join(parts)
    folder = tmp_path_factory.getbasetemp() / "inside"
    try:
        staging.checked_name(name, "m.json")
    except StagingError as error:
        assert str(error).startswith("m.json: file name ")
        return
    assert not absolute and ".." not in parts and "\x00" not in name and "\\" not in name
    assert "\x1b" not in name and "\u202e" not in name
    assert (folder / name).resolve().is_relative_to(folder.resolve())


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["a", "a/b"], r"'a' is a file, and 'a/b' needs a folder of that name$"),
        (["A", "a"], r"'A' and 'a' are the same file on a case-insensitive file system"),
        (["Stra\u00dfe", "strasse"], r"'Stra\\xdfe' and 'strasse' are the same file"),  # casefold: ß is ss
        (["caf\u00e9", "cafe\u0301"], r"'cafe\\u0301' and 'caf\\xe9' are the same file"),  # NFD and NFC
        (["A/x", "a/y"], r"'A/x' and 'a/y' are the same folder on a case-insensitive file system \('A', 'a'\)"),
        (["a", "A/b"], r"'a' is a file, and 'A/b' needs a folder of that name \(up to case\)"),
        ([".KGBRINK-fetch.json"], r"'.KGBRINK-fetch.json' takes the name of fetch's marker"),
    ],
)
def test_entries_one_file_system_takes_for_the_same_file_are_refused(s3, tmp_path, names, message):
    """Issue 57, A5: ``a`` and ``a/b`` ended in a raw FileExistsError; ``A`` and ``a`` overwrote each other
    on a case-insensitive file system. Both are StagingErrors naming the two entries, before any download."""
    _put(s3, "clash", {name: b"abc" for name in names})
    with pytest.raises(StagingError, match=r"clash/_kgbrink_manifest\.json: " + message):
        staging.fetch(s3, f"s3://{BUCKET}/clash", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_manifest_with_more_files_than_a_fetch_takes_is_refused(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_FILES", 2)
    _put(s3, "many", {"a": b"", "b": b"", "c": b""})
    with pytest.raises(
        StagingError, match=r"many/_kgbrink_manifest\.json: lists 3 files, more than a fetch takes \(2\)"
    ):
        staging.fetch(s3, f"s3://{BUCKET}/many", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def largest_written(monkeypatch) -> list[int]:
    """The size of the largest file each removed staging folder held (spying on shutil.rmtree)."""
    sizes: list[int] = []
    real = shutil.rmtree

    def spy(path, *args, **kwargs):
        sizes.append(max((p.stat().st_size for p in Path(path).rglob("*") if p.is_file()), default=0))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", spy)
    return sizes


def test_an_object_longer_than_its_manifest_entry_is_not_downloaded(s3, tmp_path, largest_written):
    """Issue 57, A3: a 1-byte entry backed by a 1 MiB object wrote the whole MiB before the size was
    compared; the object's length is checked first, and nothing of it is written."""
    _put(s3, "big", {"a.txt": b"x", "b.txt": b"y" * (1 << 20)}, sizes={"b.txt": 1})
    with pytest.raises(StagingError, match=r"big/b\.txt: the object has 1048576 bytes, the manifest says 1; not"):
        staging.fetch(s3, f"s3://{BUCKET}/big", tmp_path / "out")
    assert largest_written == [1]  # a.txt; b.txt not even started
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_download_that_outgrows_its_manifest_entry_is_stopped(s3, tmp_path, monkeypatch, largest_written):
    """An object whose length a store misreports (or that grows between the two requests) is streamed in
    chunks and stopped as soon as it outgrows the manifest's size: at most one chunk more is read, and
    no byte past the size is written."""
    _put(s3, "liar", {"b.txt": b"y" * (1 << 20)}, sizes={"b.txt": 10})
    real_head = download.head_object
    monkeypatch.setattr(download, "head_object", lambda *a: {**real_head(*a), "ContentLength": 10})
    monkeypatch.setattr(download, "CHUNK", 4096)
    read = []
    real_get = s3.get_object

    def counted(**kwargs):
        response = real_get(**kwargs)
        body = response["Body"]

        class Body:
            def read(self, amount=None):
                block = body.read(amount)
                read.append((kwargs["Key"], len(block)))
                return block

            def close(self):
                body.close()

        return {**response, "Body": Body()}

    monkeypatch.setattr(s3, "get_object", counted)
    with pytest.raises(StagingError, match=r"liar/b\.txt: the object outgrows the 10 bytes the manifest says; down"):
        staging.fetch(s3, f"s3://{BUCKET}/liar", tmp_path / "out")
    assert sum(n for key, n in read if key == "liar/b.txt") <= 4096 and largest_written == [0]
    assert list(tmp_path.iterdir()) == []


def test_the_leftovers_of_a_crashed_fetch_are_removed_by_the_next(s3, dump, tmp_path):
    """Issue 57, A2: the staging and set-aside folders of a fetch that died beside ``--out`` are removed
    by the next fetch into it, and nothing else: other names, other folders' leftovers, links."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    leftovers = [".out.fetch-abc_1234", ".out.old-zz99xy00"]
    kept = [".out.fetch-mine", ".out.fetch-abc_12345", ".other.fetch-abc_1234", ".out.old-ABCD1234", "out.fetch-x"]
    for name in leftovers + kept:
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "file").write_bytes(b"data")
    (tmp_path / ".out.fetch-link0000").symlink_to(tmp_path / ".out.fetch-mine")
    result = staging.fetch(s3, f"s3://{BUCKET}/rel", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["dump", "out", ".out.fetch-link0000", *kept])
    assert all((tmp_path / name / "sub" / "file").read_bytes() == b"data" for name in kept)
    assert result.cleaned == leftovers


def test_a_running_fetchs_folder_is_not_a_leftover(s3, dump, tmp_path):
    """A name the leftover pattern takes (8 characters after ``fetch-``): only the lock keeps it."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    running, crashed = tmp_path / ".out.fetch-running1", tmp_path / ".out.fetch-crashed1"
    running.mkdir()
    crashed.mkdir()
    lock = swap.lock_folder(running)
    try:
        assert staging.fetch(s3, f"s3://{BUCKET}/rel", tmp_path / "out").cleaned == [crashed.name]
        assert running.is_dir() and not crashed.exists()
    finally:
        os.close(lock)


def test_a_file_added_to_out_during_the_download_stops_the_swap(s3, dump, tmp_path, monkeypatch):
    """The check of ``--out`` is made again just before the swap: a file of the user's that appeared
    there meanwhile is kept, and the staged version is not put in place."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    (dump / "train.txt").write_bytes(b"abcd")
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r2")
    real_download = download.download_object

    def download_while_the_user_writes(*args):
        (out / "notes.txt").write_bytes(b"mine")
        real_download(*args)

    monkeypatch.setattr(download, "download_object", download_while_the_user_writes)
    with pytest.raises(StagingError, match="notes.txt"):
        staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    assert (out / "notes.txt").read_bytes() == b"mine" and (out / "train.txt").read_bytes() == b"abc"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]


def test_out_turned_into_a_link_at_the_swap_is_put_back(tmp_path):
    """``--out`` replaced by a link after the last check: the exchange is undone, the link and what it
    points to are left as they were, and the staged folder stays where it was."""
    new, target, out = tmp_path / "new", tmp_path / "elsewhere", tmp_path / "out"
    new.mkdir()
    (new / "a.txt").write_bytes(b"new")
    target.mkdir()
    (target / "b.txt").write_bytes(b"theirs")
    out.symlink_to(target)
    with pytest.raises(StagingError, match="changed during the fetch"):
        swap.swap(new, out)
    assert out.is_symlink() and os.readlink(out) == str(target) and (target / "b.txt").read_bytes() == b"theirs"
    assert new.is_dir() and not new.is_symlink() and (new / "a.txt").read_bytes() == b"new"


class Crash(BaseException):
    """The process killed at this point: no ``except OSError`` and no clean-up runs."""


@pytest.mark.parametrize("exchange", [True, False])
def test_a_fetch_killed_during_the_swap_is_finished_by_the_next(s3, dump, tmp_path, monkeypatch, exchange):
    """Killed right after the exchange (the old contents still in the staging folder), or between the two
    renames of a file system without one (no ``--out`` at all): the next fetch makes ``--out`` the
    staged version and removes what the killed one left."""
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    (dump / "train.txt").write_bytes(b"abcd")
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r2")
    with monkeypatch.context() as patch:
        patch.setattr(shutil, "rmtree", lambda *args, **kwargs: None)  # killed: nothing is cleaned up
        real_rename2, real_rename = swap._rename2, os.rename

        def exchanged_then_killed(source, target, exchange):
            assert real_rename2(source, target, exchange)
            raise Crash

        def no_exchange(source, target, exchange):
            return False

        def killed_after_setting_aside(source, target):
            if ".out.old-" not in str(target):
                raise Crash
            real_rename(source, target)

        patch.setattr(swap, "_rename2", exchanged_then_killed if exchange else no_exchange)
        if not exchange:
            patch.setattr(os, "rename", killed_after_setting_aside)
        with pytest.raises(Crash):
            staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out."))
    assert len(left) == (1 if exchange else 2) and out.exists() == exchange
    result = staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]
    assert result.cleaned == left and (out / "train.txt").read_bytes() == b"abcd"


def test_without_an_atomic_exchange_the_old_folder_is_set_aside_and_removed(s3, dump, tmp_path, monkeypatch):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    (out / "train.txt").write_bytes(b"zzz")
    monkeypatch.setattr(swap, "_rename2", lambda *a, **k: False)
    assert staging.fetch(s3, f"s3://{BUCKET}/rel", out).downloaded == ["train.txt"]
    assert (out / "train.txt").read_bytes() == b"abc" and sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]


def test_untrusted_versions_are_printed_escaped(s3, config, dump, tmp_path, capsys):
    """Issue 57, A4: the manifest's version comes from the bucket and is shown escaped, by fetch and by a
    stage that keeps the staged version; the CLI's --replace allows replacing a folder of the user's."""
    _put(s3, "esc", {"a.txt": b"abc"}, version="v\x1b[2J\n1\u202e")
    out, summary = tmp_path / "out", tmp_path / "fetch.json"
    assert _cli(config, "fetch", "--from", f"s3://{BUCKET}/esc", "--out", str(out), "--json", str(summary)) == 0
    printed = capsys.readouterr().out
    assert "(version v\\x1b[2J\\n1\\u202e)" in printed
    assert "\x1b" not in printed and "\u202e" not in printed
    body = json.loads(summary.read_text())
    assert body["dump_version"] == "v\x1b[2J\n1\u202e"  # the JSON summary: exact, escaped by JSON
    assert body["params"]["dump_version"] == "v\\x1b[2J\\n1\\u202e"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.txt").write_text("mine")
    assert _cli(config, "fetch", "--from", f"s3://{BUCKET}/esc", "--out", str(mine)) == 1
    assert "give --replace to replace the folder" in capsys.readouterr().err and (mine / "mine.txt").exists()
    args = ["--from", f"s3://{BUCKET}/esc", "--out", str(mine), "--replace", "--json", str(summary)]
    assert _cli(config, "fetch", *args) == 0
    body = json.loads(summary.read_text())
    assert body["removed"] == ["mine.txt"] and body["replaced"] and body["params"]["replace"] is True
    assert staging.printable("a\\b\x00\u00e9", 2) == "a\\\\..."
    staging.stage(s3, dump, f"s3://{BUCKET}/esc2", "w\x1b]0;pwned\x07")
    assert _cli(config, "stage", "--input", str(dump), "--to", f"s3://{BUCKET}/esc2") == 0
    printed = capsys.readouterr().out
    assert "unchanged, version w\\x1b]0;pwned\\x07)" in printed and "\x1b" not in printed


SAFE_NAMES = st.lists(st.sampled_from(["a", "b", "A", "c.txt"]), min_size=1, max_size=3).map("/".join)
STATES = ["absent", "empty", "fetched", "fetched+user file", "fetched elsewhere", "user files", "file", "link"]
PREFIXES = itertools.count()


def _clashes(names) -> bool:
    """Whether two of ``names`` are one file or folder up to case, or a file is another's folder: an
    oracle independent of staging.check_layout (names here are ASCII)."""
    spellings: dict[str, set[tuple[str, bool]]] = {}
    for name in names:
        parts = name.split("/")
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            spellings.setdefault(path.lower(), set()).add((path, depth == len(parts)))
    return any(len(found) > 1 for found in spellings.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.dictionaries(SAFE_NAMES, st.binary(max_size=4), min_size=1, max_size=4),
    state=st.sampled_from(STATES),
    replace=st.booleans(),
)
def test_a_fetch_makes_the_folder_the_manifest_or_changes_nothing(s3, tmp_path_factory, files, state, replace):
    """For any manifest and any folder at ``--out``: either the fetch succeeds and the folder holds exactly
    the manifest's files (and the marker), or it is a StagingError and every file, link and folder there
    and beside it is as it was. It succeeds exactly when the names can share a folder, ``--out`` is a
    folder (or nothing) and it is empty, the same location's fetch, or ``replace`` is given."""
    root = tmp_path_factory.mktemp("prop")
    prefix = f"prop{next(PREFIXES)}"
    out = root / "out"
    if state.startswith("fetched"):  # an earlier version of the same prefix, or another prefix
        earlier = f"{prefix}-elsewhere" if state == "fetched elsewhere" else prefix
        _put(s3, earlier, {"a": b"old", "old/x.txt": b"old"})
        staging.fetch(s3, f"s3://{BUCKET}/{earlier}", out)
        if state == "fetched+user file":
            (out / "old" / "mine.txt").write_bytes(b"mine")
    elif state == "empty":
        out.mkdir()
    elif state == "user files":
        (out / "a").mkdir(parents=True)
        (out / "a" / "b").write_bytes(b"mine")
    elif state == "file":
        out.write_bytes(b"mine")
    elif state == "link":
        (root / "target").mkdir()
        (root / "target" / "a").write_bytes(b"mine")
        out.symlink_to(root / "target")
    _put(s3, prefix, files)
    before = _tree(root)
    allowed = state in ("absent", "empty", "fetched") or (replace and state not in ("file", "link"))
    try:
        staging.fetch(s3, f"s3://{BUCKET}/{prefix}", out, replace=replace)
    except StagingError:
        assert _tree(root) == before
        assert not allowed or _clashes(files)
        return
    assert allowed and not _clashes(files)
    assert {**files, MARKER: (out / MARKER).read_bytes()} == _tree(out)
    assert sorted(p.name for p in root.iterdir()) == ["out"]
