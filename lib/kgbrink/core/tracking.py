"""Job summaries and their MLflow tracking.

Every job returns a :class:`JobSummary`: counts, output tables with their Delta versions, timings. The CLI
prints it, writes it as JSON with ``--json`` and records it in MLflow (params, metrics, the summary as an
artifact). MLflow runs against the store named by ``tracking.uri`` (a local SQLite file by default).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgbrink.core.delta import TableVersion
from kgbrink.core.locations import is_uri, resolve_location
from kgbrink.core.settings import Settings


@dataclass
class JobSummary:
    job: str
    params: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, TableVersion] = field(default_factory=dict)
    outputs: dict[str, TableVersion] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    error: str | None = None
    mlflow_run_id: str | None = None
    # Metric records of scoring jobs (model, run, metric, alpha, beta, value); other job-specific output.
    results: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Files (plots, reports) logged as MLflow artifacts.
    artifacts: list[str] = field(default_factory=list)
    # The Spark jobs and stages the job launched and the Delta commits it made, in all and by step.
    actions: dict[str, Any] = field(default_factory=dict)
    # What a person looks at first (release directory, report): shown in the human summary.
    highlights: dict[str, str] = field(default_factory=dict)
    # The driver's peak memory in MB when the job ended (kgbrink.core.session.driver_memory).
    memory: dict[str, int] = field(default_factory=dict)

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Record the wall time of ``step`` in seconds under ``timings``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[step] = round(time.perf_counter() - start, 3)

    def merge_steps(self, steps: list[JobSummary]) -> None:
        """Counts, timings, inputs, outputs and artifacts of the sub-jobs' ``steps`` under their job names."""
        for step in steps:
            self.counts[step.job] = step.counts
            self.timings.update({f"{step.job}.{k}": v for k, v in step.timings.items()})
            self.inputs.update({f"{step.job}.{k}": v for k, v in step.inputs.items()})
            self.outputs.update({f"{step.job}.{k}": v for k, v in step.outputs.items()})
            self.artifacts.extend(step.artifacts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "error": self.error,
            "params": self.params,
            "counts": self.counts,
            "inputs": {k: v.as_dict() for k, v in self.inputs.items()},
            "outputs": {k: v.as_dict() for k, v in self.outputs.items()},
            "timings": self.timings,
            **({"actions": self.actions} if self.actions else {}),
            **({"memory": self.memory} if self.memory else {}),
            "mlflow_run_id": self.mlflow_run_id,
            **({"results": self.results} if self.results else {}),
            **self.extra,
            **({"artifacts": self.artifacts} if self.artifacts else {}),
            **({"highlights": self.highlights} if self.highlights else {}),
        }

    def write_json(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n")


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = value


def _metric_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . / and spaces.
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)


def prepare_experiment(config: Settings) -> Future:
    """``config``'s MLflow experiment made ready in a background thread (importing MLflow and opening its
    store take seconds) while the job runs: a future of :func:`_experiment`'s result."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="mlflow-experiment")
    try:
        return pool.submit(_experiment, config)
    finally:
        pool.shutdown(wait=False)


def _experiment(config: Settings) -> tuple[Any, str]:
    """The ``mlflow`` module, tracking ``config``'s store, and the id of ``config``'s experiment."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    # After the import: MLflow sets its own loggers to INFO when it is imported.
    for name in ("alembic", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)

    uri = config.tracking.uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        # Relative SQLite paths are relative to the working directory: make that explicit.
        db = resolve_location(uri[len("sqlite:///") :])
        Path(db).parent.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{db}"
    mlflow.set_tracking_uri(uri)
    name = config.tracking.experiment
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        artifacts = config.tracking.artifact_location
        if artifacts and not is_uri(artifacts):
            artifacts = Path(resolve_location(artifacts)).as_uri()
        return mlflow, mlflow.create_experiment(name, artifact_location=artifacts)
    return mlflow, experiment.experiment_id


def record_in_mlflow(config: Settings, summary: JobSummary, experiment: Future | None = None) -> str:
    """Log ``summary`` as one MLflow run (in ``experiment``, prepared while the job ran, when given); returns
    its run id."""
    mlflow, experiment_id = experiment.result() if experiment is not None else _experiment(config)
    with mlflow.start_run(experiment_id=experiment_id, run_name=summary.job) as run:
        mlflow.set_tags({"job": summary.job, "status": summary.status, "env": config.env})
        params: dict[str, Any] = {}
        _flatten("", summary.params, params)
        for role, tables in (("input", summary.inputs), ("output", summary.outputs)):
            for name_, table in tables.items():
                params[f"{role}.{name_}.path"] = table.path
                params[f"{role}.{name_}.version"] = table.version
        mlflow.log_params({_metric_key(k): str(v)[:6000] for k, v in params.items()})
        metrics: dict[str, Any] = {}
        _flatten("count", summary.counts, metrics)
        _flatten("seconds", summary.timings, metrics)
        _flatten("actions", {k: v for k, v in summary.actions.items() if k != "by_step"}, metrics)
        _flatten("memory", summary.memory, metrics)
        for name_, table in summary.outputs.items():
            if table.rows is not None:
                metrics[f"rows.{name_}"] = table.rows
        for record in summary.results:
            if record.get("value") is not None:
                cell = "".join(f".{k}={record[k]:g}" for k in ("alpha", "beta") if record.get(k) is not None)
                prefix = "".join(f"{record[k]}." for k in ("model", "run") if record.get(k) is not None)
                metrics[f"{prefix}{record['metric']}{cell}"] = record["value"]
        mlflow.log_metrics(
            {
                _metric_key(k): float(v)
                for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
        )
        for artifact in summary.artifacts:
            if not is_uri(artifact):  # a file on object storage is named in summary.json, not copied
                mlflow.log_artifact(artifact, "plots")
        mlflow.log_dict(summary.as_dict(), "summary.json")
        return run.info.run_id


class JobFailed(RuntimeError):
    """A job stopped on a data problem; ``summary`` holds what was counted before it stopped."""

    def __init__(self, message: str, summary: JobSummary):
        super().__init__(message)
        self.summary = summary


def fail_past_bad_fraction(
    summary: JobSummary,
    by_reason: dict,
    total: int,
    limit: float,
    setting: str,
    what: str,
    where: str,
    *,
    verb: str = "quarantined",
    source: str = "",
    error: type[Exception] = JobFailed,
    example: Callable[[str], str | None] | None = None,
) -> None:
    """The quarantine threshold of every job: raise ``error(message, summary)`` when the quarantined
    ``by_reason`` counts exceed ``limit`` (the setting named ``setting``) of ``total`` rows; the message
    names ``source``, the counts, ``verb`` (``{share}`` in it is the bad share), the top reasons, one
    ``example`` of the commonest (its detail, asked only when failing) and ``where`` the quarantine is ("see
    <path>", or what was and was not written)."""
    bad = sum(by_reason.values())
    if bad <= limit * total:
        return
    ranked = sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
    top = ", ".join(f"{k}: {v}" for k, v in ranked[:5])
    share = f"{bad / max(total, 1):.4%}"
    prefix = f"{source}: " if source else ""
    message = f"{prefix}{bad} of {total} {what} {verb.format(share=share)} (> {setting} = {limit:g}; {top}); {where}"
    detail = example(ranked[0][0]) if example else None
    if detail:
        message += f"; e.g. {ranked[0][0]}: {detail}"
    raise error(message, summary)
