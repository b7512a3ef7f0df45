"""``kgbrink``: one subcommand per registered job (:data:`kgbrink.core.jobs.REGISTRY`). Every subcommand
takes ``--conf`` (default conf/local.yaml or $KGBRINK_CONF), ``--set key=value`` overrides and ``--json
PATH`` (the full job summary, for schedulers); progress goes to stderr, a short summary to stdout.

Exit status: 0 on success; 1 when the job failed (reason on stderr, and in the JSON with
``"status": "failed"``); 2 for invalid usage: arguments, unknown settings, values of the wrong type.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from kgbrink.core.console import Progress, error_message, human_summary, write_trace
from kgbrink.core.jobs import REGISTRY, Job, JobContext, add_arguments, options_from, registered
from kgbrink.core.loader import load_config
from kgbrink.core.tracking import JobSummary, prepare_experiment, record_in_mlflow
from kgbrink.core.typed import ConfigError


def load_jobs() -> dict[str, Job]:
    """Every job by command name: importing :mod:`kgbrink.jobs` registers them all."""
    import kgbrink.jobs  # noqa: F401

    return registered()


# What a user does, in the order a newcomer meets it; every command is in exactly one group (tests/test_cli.py).
GROUPS = (
    ("build a dataset", ("run", "synth", "ingest", "stats", "refresh")),
    (
        "BRINK, incomplete-KG variants (paper 000)",
        ("build", "mine", "import-rules", "export-rules", "ground", "remove", "verify", "questions", "export"),
    ),
    ("PROBE, popularity-aware rank scoring (paper 001)", ("score", "rank", "reproduce-probe")),
    (
        "SynthKGQA, questions with ground-truth subgraphs (paper 002)",
        ("seed-graphs", "gt-questions", "question-graphs", "sp-analysis"),
    ),
    ("ProbeKGC, multiple-choice KG completion (paper 003)", ("mcq",)),
    (
        "OKGQA-P, KG perturbations and similarity (paper 004)",
        ("okgqa-subgraphs", "perturb", "kg-similarity", "okgqa-sweep"),
    ),
    ("evaluate a model (any OpenAI-compatible endpoint)", ("predict", "evaluate-qa", "score-mcq")),
    ("publish and operate (object storage, releases, cluster sizing)", ("release", "stage", "fetch", "profile")),
)
DESCRIPTION = (
    "Benchmarks built from Wikidata-scale knowledge graphs on Spark, and models scored on them: the benchmarks of "
    "five papers (BRINK, PROBE, SynthKGQA, ProbeKGC, OKGQA-P), published together as one release, and `predict` to "
    "ask any OpenAI-compatible endpoint their questions."
)
START = """where to start (README.md tells the rest):
  kgbrink run                  a generated sample KG into data/datasets/sample: ingest, statistics, a BRINK variant
  kgbrink release --dataset data/datasets/sample --out data/releases
                               the five benchmarks of that dataset as one release
  kgbrink predict --benchmark brink --dataset data/datasets/sample --model M --base-url URL
                               a model asked the variant's questions, its answers parsed and scored
  kgbrink COMMAND --help       a command's options; docs/configuration.md: the settings (--set KEY=VALUE)"""


def version() -> str:
    """kgbrink's installed version (pyproject.toml's when run from a checkout that is not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kgbrink")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _command_list(jobs: dict[str, Job]) -> str:
    """The commands by :data:`GROUPS`, each with its one-line help."""
    width = max(len(name) for name in jobs) + 2
    blocks = []
    for title, names in GROUPS:
        lines = [f"{title}:"] + [f"  {name:<{width}}{jobs[name].help}" for name in names if name in jobs]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_parser() -> argparse.ArgumentParser:
    jobs = load_jobs()
    parser = argparse.ArgumentParser(
        prog="kgbrink",
        usage="kgbrink [-h] [--version] COMMAND [options]",
        description=textwrap.fill(DESCRIPTION, 100),
        epilog=f"{_command_list(jobs)}\n\n{START}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kgbrink {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS)
    for job in jobs.values():
        command = sub.add_parser(job.name, description=job.help)
        command.add_argument("--conf", help="settings file (default: $KGBRINK_CONF or conf/local.yaml)")
        command.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override a setting (repeatable); the keys are in docs/configuration.md",
        )
        command.add_argument("--json", metavar="PATH", help="write the full job summary as JSON here")
        command.add_argument("--no-tracking", action="store_true", help="do not record the run in MLflow")
        add_arguments(command, job.options)
    return parser


class _NotPy4j(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _log_progress() -> None:
    """Messages of the ``kgbrink.*`` loggers on stderr: warnings, or every message at the level named by
    ``$KGBRINK_LOG_LEVEL`` (``INFO`` shows the miner's and the selection's details)."""
    # py4j's own error log (its logger, and the root logger it also writes to) repeats as a traceback what
    # reaches the job as an exception, which the trace file keeps
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    root = logging.getLogger()
    if not any(isinstance(f, _NotPy4j) for f in root.filters):
        root.addFilter(_NotPy4j())
    logger = logging.getLogger("kgbrink")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(os.environ.get("KGBRINK_LOG_LEVEL", "WARNING").upper())


def _driver_gone(config, exc: BaseException) -> str | None:
    """The one-line reason the driver JVM died under the job (an out-of-memory kill), or None. A lost
    connection to the JVM gives a dying JVM a few seconds to exit."""
    from kgbrink.core.session import driver_gone

    chain, seen = [], exc
    while seen is not None and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    lost = any(isinstance(e, (ConnectionError, EOFError)) or type(e).__name__ == "Py4JNetworkError" for e in chain)
    gone = driver_gone(str(config.spark.conf.get("spark.driver.memory", "")) or None, 5.0 if lost else 0.0)
    return gone


def _usage_error(command: str, message: str) -> int:
    print(f"kgbrink {command}: error: {message}", file=sys.stderr)
    return 2


def _unwritable(path: str) -> str | None:
    """Why the file ``path`` cannot be written (its missing parents would be created), or None: tried, not
    read from permission bits, which root passes also on a read-only mount or under /proc."""
    target = Path(path).resolve()
    existing = next((p for p in target.parents if p.exists()), None)
    if target.is_dir():
        return "it is a directory"
    if existing is None or not existing.is_dir():
        return f"{existing or target.parent} is not a directory"
    try:
        if target.exists():
            with open(target, "a"):  # appends nothing: the file is left as it is
                pass
        elif existing == target.parent:
            with open(target, "x"):
                pass
            target.unlink()
        else:
            with tempfile.TemporaryFile(dir=existing):
                pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _check_usage(args: argparse.Namespace) -> str | None:
    """Problems found before any work: an empty --dataset, a --json path that cannot be written."""
    if getattr(args, "dataset", None) is not None and not args.dataset.strip():
        return "--dataset is empty"
    problem = _unwritable(args.json) if args.json else None
    if problem:
        return f"cannot write --json {args.json} ({problem})"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_progress()
    job = REGISTRY[args.command]
    problem = _check_usage(args)
    if problem:
        return _usage_error(args.command, problem)
    try:
        config = load_config(args.conf, args.set)
    except ConfigError as exc:
        return _usage_error(args.command, str(exc))
    summary, usage = JobSummary(args.command), False
    # MLflow's import and store open in the background while the job runs
    experiment = None if args.no_tracking else prepare_experiment(config)
    try:
        options = options_from(args, job.options)
        if job.check is not None:  # before Spark starts: a usage mistake costs no session
            job.check(config, options)
        spark, startup = None, None
        if job.spark:
            from kgbrink.core.session import spark_session

            start = time.perf_counter()
            spark = spark_session(config)
            startup = round(time.perf_counter() - start, 3)
        summary = JobContext(spark, config, progress=Progress()).run(job.name, options)
        if startup is not None:
            summary.timings["spark_startup"] = startup
    except Exception as exc:  # noqa: BLE001 - every failure becomes a clear message and exit status 1
        usage = isinstance(exc, ConfigError)
        summary = getattr(exc, "summary", None) or summary
        gone = _driver_gone(config, exc) if job.spark else None
        summary.status, summary.error = "failed", gone or error_message(exc)
        trace = write_trace(exc, config.log_dir, args.command)
        print(f"kgbrink {args.command}: error: {summary.error}", file=sys.stderr)
        if trace:
            print(f"  (full trace: {trace})", file=sys.stderr)
    if not args.no_tracking:
        try:
            summary.mlflow_run_id = record_in_mlflow(config, summary, experiment)
        except Exception as exc:  # noqa: BLE001
            print(f"kgbrink {args.command}: warning: MLflow tracking failed: {exc}", file=sys.stderr)
            if summary.status == "ok":
                summary.status, summary.error = "failed", f"MLflow tracking failed: {exc}"
    written = None
    if args.json:
        try:
            summary.write_json(args.json)
            written = args.json
        except OSError as exc:
            print(f"kgbrink {args.command}: error: cannot write --json {args.json}: {exc}", file=sys.stderr)
            summary.status = "failed"
    print("\n".join(human_summary(summary, config.tracking.uri, written)))
    return 0 if summary.status == "ok" else 2 if usage else 1


if __name__ == "__main__":
    sys.exit(main())
