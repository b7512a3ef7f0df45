"""``kgbrink stage`` and ``kgbrink fetch``: dumps, a variant's exported files and releases to and from an S3 bucket with boto3
(:mod:`kgbrink.storage.staging`: checksummed uploads, a manifest of sizes, SHA-256s and the dump version,
change detection against the last manifest).

The S3 endpoint, region and addressing style are the S3A settings of the same environment file
(``spark.conf.spark.hadoop.fs.s3a.endpoint``, ``...endpoint.region``, ``...path.style.access``), so boto3
and Spark reach the same store; credentials come from the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.locations import is_uri
from kgbrink.core.settings import Settings
from kgbrink.core.tracking import JobSummary
from kgbrink.core.typed import ConfigError
from kgbrink.release import layout
from kgbrink.storage import staging

S3A = "spark.hadoop.fs.s3a."


def client_for(config: Settings):
    """The boto3 client of the store the environment's S3A settings name (AWS itself when none)."""
    conf = config.spark.conf
    path_style = str(conf.get(S3A + "path.style.access", "false")).lower() == "true"
    return staging.s3_client(conf.get(S3A + "endpoint"), conf.get(S3A + "endpoint.region"), path_style)


def export_uri(config: Settings, dataset: str | None, variant: str | None) -> str:
    """``<dataset>/variants/<variant>/export``: where a variant's exported files are staged."""
    return f"{config.require_dataset(dataset).rstrip('/')}/variants/{variant or config.variant.name}/export"


def _location(config: Settings, given: str | None, dataset: str | None, variant: str | None, flag: str) -> str:
    if given and variant:
        raise ConfigError(f"give {flag} or --variant, not both")
    uri = given if given else export_uri(config, dataset, variant) if variant else None
    if not uri:
        raise ConfigError(f"{flag} (an s3:// or s3a:// location) or --variant is required")
    try:
        staging.parse_uri(uri)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from exc
    return uri


def release_version(client, uri: str) -> str:
    """``uri`` itself when it is staged (has a manifest); for a release root without one, the version its
    ``LATEST`` names (``kgbrink release`` writes the manifest into each version)."""
    if staging.read_manifest(client, uri) is not None:
        return uri
    latest = staging.read_object(client, uri, "LATEST", limit=256)
    if latest is None:
        return uri
    where = f"{uri.rstrip('/')}/LATEST"
    return f"{uri.rstrip('/')}/{layout.latest_version(latest.decode('utf-8', 'replace'), where)}"


@dataclass
class StageOptions:
    input: str | None = arg(None, "local directory to stage (a dump, or a variant's export)", required=True)
    to: str | None = arg(None, "destination s3:// or s3a:// prefix (or --variant)")
    variant: str | None = arg(None, "stage an export to <dataset>/variants/<variant>/export instead of --to")
    dataset: str | None = arg(None, "dataset of --variant (default: setting 'dataset')")
    dump_version: str | None = arg(None, "version recorded in the manifest (default: the content digest's start)")
    check: bool = arg(False, "only report whether the directory differs from the staged manifest", action="store_true")


@job("stage", "upload a dump or a variant's export to S3 with checksums and a manifest", StageOptions, spark=False)
def run_stage(ctx: JobContext, opts: StageOptions) -> JobSummary:
    config = ctx.config
    if not opts.input or is_uri(opts.input):
        raise ConfigError(f"--input must be a local directory, got {opts.input!r}")
    uri = _location(config, opts.to, opts.dataset, opts.variant, "--to")
    summary = ctx.begin(input=str(Path(opts.input).resolve()), to=uri, check=bool(opts.check))
    with ctx.step("stage"):
        result = staging.stage(client_for(config), Path(opts.input), uri, opts.dump_version, check_only=opts.check)
    changes = result.changes
    summary.counts.update(
        files=len(result.manifest.files)
        if not opts.check
        else len(changes.added) + len(changes.modified) + len(changes.unchanged),
        added=len(changes.added),
        modified=len(changes.modified),
        removed=len(changes.removed),
        unchanged=len(changes.unchanged),
        drifted=len(result.drifted),
        uploaded=len(result.uploaded),
        uploaded_bytes=result.uploaded_bytes,
    )
    summary.extra.update(
        changed=result.changed,
        manifest=f"{uri.rstrip('/')}/{staging.MANIFEST}",
        dump_version=result.manifest.version,
        previous_version=result.previous.version if result.previous else None,
        repaired=result.repaired,
        changes={
            "added": changes.added,
            "modified": changes.modified,
            "removed": changes.removed,
            "drifted": result.drifted,
        },
    )
    version = staging.printable(result.manifest.version, 200)  # the staged manifest's, when unchanged
    summary.params["dump_version"] = version
    state = "changed" if result.changed else "unchanged"
    summary.highlights.update(staged=f"{uri} ({state}, version {version})")
    if result.repaired:
        summary.highlights.update(repaired=f"the staged manifest was unreadable and is rewritten ({result.repaired})")
    return summary


@dataclass
class FetchOptions:
    source: str | None = arg(
        None, "s3:// or s3a:// prefix staged by `kgbrink stage`, or a release root (its LATEST)", flag="--from"
    )
    variant: str | None = arg(None, "fetch the export of <dataset>/variants/<variant>/export instead of --from")
    dataset: str | None = arg(None, "dataset of --variant (default: setting 'dataset')")
    out: str | None = arg(
        None,
        "local directory the files go to: new, empty, or written by an earlier fetch of the same location",
        required=True,
    )
    replace: bool = arg(
        False,
        "replace --out even if no earlier fetch of this location wrote it or it holds other files "
        "(they are deleted); never a file or a symbolic link",
        action="store_true",
    )


@job(
    "fetch",
    "download the files of a staged dump, export or release, each checked against its manifest",
    FetchOptions,
    spark=False,
)
def run_fetch(ctx: JobContext, opts: FetchOptions) -> JobSummary:
    config = ctx.config
    if not opts.out or is_uri(opts.out):
        raise ConfigError(f"--out must be a local directory, got {opts.out!r}")
    client = client_for(config)
    location = _location(config, opts.source, opts.dataset, opts.variant, "--from")
    uri = release_version(client, location)
    summary = ctx.begin(source=uri, out=str(Path(opts.out).absolute()), replace=bool(opts.replace))
    with ctx.step("fetch"):
        result = staging.fetch(client, uri, Path(opts.out), replace=bool(opts.replace), source=location)
    summary.counts.update(
        files=len(result.manifest.files),
        downloaded=len(result.downloaded),
        present=len(result.present),
        removed=len(result.removed),
        downloaded_bytes=result.downloaded_bytes,
    )
    # the version comes from the bucket: printed escaped (the JSON summary escapes it by itself)
    version = staging.printable(result.manifest.version, 200)
    summary.extra.update(
        dump_version=result.manifest.version, removed=result.removed, replaced=result.replaced, cleaned=result.cleaned
    )
    summary.params["dump_version"] = version
    summary.highlights.update(fetched=f"{opts.out} (version {version})")
    if result.removed:
        summary.highlights.update(removed=f"{len(result.removed):,} files the manifest does not list")
    return summary
