"""Staging dumps and releases with boto3 (kgbrink.storage.staging, `kgbrink stage` / `kgbrink fetch`),
against moto's in-process S3 (mock_aws). Expected digests are SHA-256s of the literal bytes, as published
for b"abc" (FIPS 180-2, Appendix B.1) and b"" (the empty message)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

moto = pytest.importorskip("moto", reason="moto is a dev dependency (pyproject.toml)")
from moto import mock_aws  # noqa: E402

from kgbrink.cli import main  # noqa: E402
from kgbrink.core.settings import load_config  # noqa: E402
from kgbrink.jobs.stage import client_for  # noqa: E402
from kgbrink.storage import staging  # noqa: E402
from kgbrink.storage.staging import MANIFEST, FileEntry, Manifest, StagingError  # noqa: E402
from tests.conftest import PROJECT_ROOT  # noqa: E402

SHA_ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
SHA_EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
BUCKET = "dumps"


@pytest.fixture
def s3(monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = staging.s3_client(region="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


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
    monkeypatch.setattr(staging, "PART_BYTES", 5 << 20)
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
    real_head = staging._head
    monkeypatch.setattr(
        staging, "_head", lambda *a: {**real_head(*a), "ChecksumSHA256": base64.b64encode(b"x" * 32).decode()}
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
        staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    # nothing of the new version is in place (empty.txt and sub/valid.txt were fetched before the failure),
    # and nothing temporary is left beside the folder
    assert [p.relative_to(out).as_posix() for p in out.rglob("*")] == ["train.txt"]
    assert (out / "train.txt").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]


def test_fetch_makes_the_folder_equal_the_staged_version(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out = tmp_path / "out"
    staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    (dump / "sub" / "valid.txt").unlink()  # a split the new version no longer has
    (dump / "train.txt").write_bytes(b"abcd")
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r2")
    (out / "notes.txt").write_text("mine")
    again = staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    assert again.downloaded == ["train.txt"] and again.present == ["empty.txt"]
    assert again.removed == ["notes.txt", "sub/valid.txt"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == ["empty.txt", "train.txt"]
    assert (out / "train.txt").read_bytes() == b"abcd"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "out"]


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
    with pytest.raises(StagingError, match=r"evil/_kgbrink_manifest\.json, files\[1\]: file name .*" + re.escape(why)):
        staging.fetch(s3, f"s3://{BUCKET}/evil", out)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_fetch_refuses_a_name_through_a_symbolic_link_out_of_the_folder(s3, dump, tmp_path):
    staging.stage(s3, dump, f"s3://{BUCKET}/rel", "r1")
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "valid.txt").write_bytes(b"Q1\tP1\tQ2\n")
    out.mkdir()
    (out / "sub").symlink_to(elsewhere)
    result = staging.fetch(s3, f"s3://{BUCKET}/rel", out)
    # the matching file behind the link is not taken as present; the folder gets a real sub/ folder
    assert result.downloaded == ["empty.txt", "sub/valid.txt", "train.txt"]
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
    # a variant's release: <dataset>/variants/<name>/release
    dataset = f"s3a://{BUCKET}/datasets/sample"
    assert _cli(config, "stage", "--input", str(dump), "--variant", "brink", "--dataset", dataset) == 0
    assert staging.read_manifest(s3, f"{dataset}/variants/brink/release") is not None
    out = tmp_path / "release"
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
    s3.put_object(Bucket=BUCKET, Key="releases/w5m/LATEST", Body=b"../../etc\n")  # untrusted: checked
    assert _cli(config, "fetch", "--from", root, "--out", str(tmp_path / "r")) == 1
    assert "releases/w5m/LATEST: expected a release version such as v3" in capsys.readouterr().err
    assert (tmp_path / "r" / "train.txt").read_bytes() == b"abc"  # left as it was


def test_stage_usage_errors_exit_2(s3, config, dump, capsys):
    assert _cli(config, "stage", "--input", str(dump), "--to", "http://elsewhere/x") == 2
    assert "--to: not an S3 location" in capsys.readouterr().err
    assert _cli(config, "stage", "--input", str(dump)) == 2
    assert _cli(config, "stage", "--input", str(dump), "--to", f"s3://{BUCKET}/x", "--variant", "v") == 2
    assert _cli(config, "fetch", "--from", f"s3://{BUCKET}/none", "--out", str(dump)) == 1  # no manifest: failed
    assert "no _kgbrink_manifest.json" in capsys.readouterr().err


SEGMENTS = st.sampled_from(["a", "b.txt", "..", ".", "", "c\\d", "e\x00", "sub", "/"])


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
    assert (folder / name).resolve().is_relative_to(folder.resolve())
