"""``kgbrink stage`` of the make-run sample to the S3 server: a manifest of every file, and a second stage
that sees no change; the clusters' S3A file system renames as Spark's reliable checkpoints expect."""

from __future__ import annotations

import pytest

from kgbrink.storage import staging
from tests.cluster.sample_pipeline import DUMP


def test_the_sample_is_staged_with_a_manifest_and_a_second_stage_sees_no_change(stack, sample, staged):
    first, again = staged["first"], staged["again"]
    files = sorted(p.relative_to(sample).as_posix() for p in sample.rglob("*") if p.is_file())
    assert first["status"] == "ok" and first["changed"] is True
    assert first["counts"]["uploaded"] == len(files) and first["counts"]["added"] == len(files)
    assert again["changed"] is False and again["counts"]["uploaded"] == 0
    assert again["dump_version"] == first["dump_version"]
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    manifest = staging.read_manifest(client, DUMP)
    assert sorted(manifest.files) == files
    for name in files:
        assert manifest.files[name].sha256 == staging.sha256_of(sample / name)


def test_a_rename_onto_an_existing_s3a_file_returns_false_as_on_hdfs(stack, reader):
    """Spark's reliable checkpoint renames a partition's temporary file into place and, when the rename returns
    false because the file is there (a retried task whose first attempt renamed it, then lost its executor),
    keeps that file. S3A throws instead (HADOOP-13823) and failed every retry: the clusters' fs.s3a.impl,
    RenameSafeS3AFileSystem, returns false like HDFS; plain S3A, asked the same, still throws."""
    jvm = reader._jvm
    conf = reader._jsc.hadoopConfiguration()
    base = jvm.org.apache.hadoop.fs.Path(f"s3a://{stack.bucket}/rename-check")

    def written(fs, name: str, text: str):
        path = jvm.org.apache.hadoop.fs.Path(base, name)
        stream = fs.create(path, True)
        stream.write(bytearray(text.encode()))
        stream.close()
        return path

    fs = base.getFileSystem(conf)
    assert fs.getClass().getName() == "org.kgbrink.hadoop.RenameSafeS3AFileSystem"
    first, target = written(fs, "attempt-2", "second attempt"), written(fs, "part-00000", "first attempt")
    assert fs.rename(first, target) is False
    stream = fs.open(target)
    assert bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)) == b"first attempt"
    stream.close()
    assert fs.rename(first, jvm.org.apache.hadoop.fs.Path(base, "part-00001")) is True  # other renames as before
    plain_conf = jvm.org.apache.hadoop.conf.Configuration(conf)
    plain_conf.set("fs.s3a.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
    plain = jvm.org.apache.hadoop.fs.FileSystem.newInstance(base.toUri(), plain_conf)
    again = written(plain, "attempt-3", "third attempt")
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        plain.rename(again, target)
    plain.close()
    fs.delete(base, True)
