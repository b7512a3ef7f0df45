"""``kgbrink reproduce-probe``: score the PROBE release's rank dumps and compare with the paper's Tables 4
and 5 (the published cells and the comparison are :mod:`kgbrink.probe.reference`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kgbrink.core.delta import table_exists
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.probe.reference import (
    DATASETS,
    TABLE4_ALPHAS,
    TABLE5_BETAS,
    compare,
    published_cells,
    report_markdown,
)
from kgbrink.probe.scoring import MEAN_RUN, MetricSpec


def score_dataset(ctx: JobContext, reference: Path, name: str, dataset_dir: str) -> pd.DataFrame:
    """PROBE grid (mean over runs) of one dataset's rank dumps, statistics from its ``train.txt``."""
    if not table_exists(ctx.spark, f"{dataset_dir}/triples"):
        ctx.run("ingest", dataset=dataset_dir, format="probe", input=str(reference / "probe" / name))
    spec = MetricSpec(
        alphas=TABLE4_ALPHAS,
        betas=TABLE5_BETAS,
        hits=(1, 3, 10),
        p_values=(),
        eps=None,
        popularity_groups=0,
        strat_betas=(),
    )
    ranks = str(reference / "probe" / name / "ranks")
    scored = ctx.run("score", ranks=ranks, dataset=dataset_dir, spec=spec, fmt="probe", splits=["train"])
    frame = pd.DataFrame(scored.results)
    frame = frame[(frame["run"] == MEAN_RUN) & (frame["metric"] == "probe")]
    return frame.assign(dataset=name)[["model", "dataset", "alpha", "beta", "value"]]


def reproduce(ctx: JobContext, reference: Path, work_dir: str, datasets: dict[str, str] | None = None) -> pd.DataFrame:
    """All published cells of :data:`DATASETS` with kgbrink's values. ``datasets`` maps a dataset name to
    an already ingested dataset directory (default: ``<work_dir>/<name>``, ingested when missing)."""
    published = published_cells(reference / "probe" / "tables")
    scored = pd.concat(
        [score_dataset(ctx, reference, name, (datasets or {}).get(name, f"{work_dir}/{name}")) for name in DATASETS],
        ignore_index=True,
    )
    return compare(published, scored)


@dataclass
class ReproduceOptions:
    reference: str = arg(
        os.environ.get("KGBRINK_REFERENCE", "../shared/reference"),
        "the shared reference folder (default: ../shared/reference or $KGBRINK_REFERENCE)",
    )
    out: str | None = arg(None, "work and report directory (default: <data_dir>/reproduce-probe)")


@job(
    "reproduce-probe",
    "score the PROBE release's rank dumps and compare with the paper's Tables 4 and 5",
    ReproduceOptions,
    steps=1,
)
def run(ctx: JobContext, opts: ReproduceOptions) -> JobSummary:
    out = opts.out or f"{ctx.config.data_dir}/reproduce-probe"
    summary = ctx.begin(reference=opts.reference, out=out)
    with ctx.step("reproduce"):
        comparison = reproduce(ctx, Path(opts.reference), out)
    Path(out).mkdir(parents=True, exist_ok=True)
    report = Path(out) / "report.md"
    report.write_text(report_markdown(comparison))
    summary.artifacts.append(str(report))
    summary.highlights["report"] = str(report)
    matched = int(comparison["match"].sum())
    summary.counts.update(cells=len(comparison), matched=matched)
    if matched != len(comparison):
        raise JobFailed(
            f"{len(comparison) - matched} of {len(comparison)} published cells differ; see {report}", summary
        )
    return summary
