"""``kgbrink stage`` of the make-run sample to the S3 server: a manifest of every file, and a second stage
that sees no change."""

from __future__ import annotations

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
