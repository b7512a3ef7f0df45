"""``kgbrink``: one subcommand per job. Every subcommand takes ``--conf`` (default conf/local.yaml or
$KGBRINK_CONF), ``--set key=value`` overrides and ``--json PATH`` (the job summary for schedulers).

Exit status: 0 on success; 1 when the job failed (reason on stderr, and in the JSON with
``"status": "failed"``); 2 for invalid command-line usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable

from kgbrink.core.settings import Config, load_config
from kgbrink.core.tracking import JobSummary, record_in_mlflow


def _split_item(item: str) -> tuple[str, list[str]]:
    """``NAME=PATH[,PATH...]`` (argparse type: a malformed value exits with status 2)."""
    name, _, paths = item.partition("=")
    files = [p for p in paths.split(",") if p]
    if not name.strip() or not files:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH[,PATH...], got '{item}'")
    return name.strip(), files


def _splits(items: list[tuple[str, list[str]]] | None) -> dict[str, list[str]]:
    splits: dict[str, list[str]] = {}
    for name, files in items or []:
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


def _names(text: str | None) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]``; None stays None."""
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def _numbers(kind: type):
    """A comma-separated list of numbers (argparse type)."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got '{text}'") from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def _eps(text: str):
    if text == "release":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--eps is 'release' or a positive number, got '{text}'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--eps must be > 0, got {value}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", help="config YAML (default: $KGBRINK_CONF or conf/local.yaml)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config setting, e.g. spark.conf.spark.sql.shuffle.partitions=16",
    )
    parser.add_argument("--json", metavar="PATH", help="write the job summary as JSON here")
    parser.add_argument("--no-tracking", action="store_true", help="do not record the run in MLflow")


def _rules_command(sub, name: str, help_text: str, rules_help: str) -> argparse.ArgumentParser:
    """A subcommand on a dataset's rules table: the common options, ``--dataset`` and ``--rules``."""
    parser = sub.add_parser(name, help=help_text)
    _common(parser)
    parser.add_argument("--dataset", help="dataset directory or URI (default: config 'dataset')")
    parser.add_argument("--rules", help=rules_help)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgbrink", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    ingest = sub.add_parser("ingest", help="a KG dump into a dataset's Delta tables")
    _common(ingest)
    ingest.add_argument("--dataset", help="dataset directory or URI (default: config 'dataset')")
    ingest.add_argument("--format", default="wikidata5m", choices=["wikidata5m", "probe", "delimited", "ntriples"])
    ingest.add_argument("--input", help="directory of a wikidata5m or probe dump")
    ingest.add_argument(
        "--split",
        action="append",
        type=_split_item,
        metavar="NAME=PATH[,PATH]",
        help="triple files of a split (repeatable)",
    )
    ingest.add_argument(
        "--variant", default="transductive", choices=["transductive", "inductive"], help="Wikidata5m file set"
    )
    ingest.add_argument(
        "--delimiter",
        default="\t",
        type=_delimiter,
        help="field delimiter of delimited files (default TAB; '\\t' or 'tab' also mean TAB)",
    )
    ingest.add_argument(
        "--columns", default="h,r,t", type=_columns, help="role of each field in line order, e.g. h,t,r"
    )
    ingest.add_argument("--quote", default=None, type=_quote, help="quote character that may wrap fields, e.g. '\"'")
    ingest.add_argument("--entity-pattern", help="regex entity keys must match (wikidata5m: Q[1-9][0-9]*)")
    ingest.add_argument("--relation-pattern", help="regex relation keys must match (wikidata5m: P[1-9][0-9]*)")
    ingest.add_argument("--entity-aliases", help="alias file: key<TAB>label<TAB>alias...")
    ingest.add_argument("--relation-aliases", help="alias file for relations")
    ingest.add_argument("--label-language", default="en", help="N-Triples label language")

    stats = sub.add_parser("stats", help="entity/relation popularity statistics of a dataset")
    _common(stats)
    stats.add_argument("--dataset")
    stats.add_argument("--splits", help="comma-separated splits (default: config stats.splits)")

    synth = sub.add_parser("synth", help="generate a Wikidata5m-shaped KG in the Wikidata5m file format")
    _common(synth)
    synth.add_argument("--out", required=True, help="output directory")
    synth.add_argument("--triples", type=int, help="number of distinct triples (default: config synth.triples)")
    synth.add_argument("--seed", type=int, help="random seed (default: config synth.seed)")
    synth.add_argument("--malformed-fraction", type=float, help="share of extra malformed lines")
    synth.add_argument("--duplicate-fraction", type=float, help="share of extra exact duplicate lines")
    synth.add_argument("--gzip", action="store_true", help="write .txt.gz files")

    score = sub.add_parser("score", help="PROBE and the classic rank metrics of rank files")
    _common(score)
    score.add_argument("--ranks", required=True, help="a rank file, directory or glob")
    score.add_argument(
        "--format", choices=["parquet", "csv", "tsv", "jsonl", "probe"], help="default: from the file names"
    )
    score.add_argument("--dataset", help="dataset whose ids/keys the rank files use (default: config 'dataset')")
    score.add_argument(
        "--ids",
        choices=["id", "key"],
        help="h, r, t are integer ids or keys (default: id for probe dumps, key otherwise)",
    )
    score.add_argument(
        "--alpha", type=_numbers(float), help="PROBE alphas, e.g. 1,0.5,0,-0.5,-1 (default: config scoring.alphas)"
    )
    score.add_argument(
        "--beta", type=_numbers(float), help="PROBE betas, e.g. 0,0.2,0.4,0.6,0.8 (default: config scoring.betas)"
    )
    score.add_argument("--hits", type=_numbers(int), help="Hits@K list (default: config scoring.hits)")
    score.add_argument("--p", type=_numbers(float), help="p-MRR exponents (default: config scoring.p_values)")
    score.add_argument(
        "--eps",
        type=_eps,
        default=None,
        help="'release' (smallest non-zero delta over the scored queries; default) or a constant",
    )
    score.add_argument(
        "--groups",
        type=int,
        help="popularity groups of the Fig. 11 breakdown (default: config scoring.popularity_groups)",
    )
    score.add_argument(
        "--splits", help="splits the popularity statistics are computed on (default: config stats.splits)"
    )
    score.add_argument("--model", help="model name for files without a model column (default: the file name)")
    score.add_argument("--run", dest="run_name", help="run name for files without a run column (default: 1)")
    score.add_argument("--plots", help="write heat maps (Fig. 12) and comparison.md into this directory")

    rank = sub.add_parser("rank", help="filtered ranks (PROBE protocol) from candidate-score Parquet files")
    _common(rank)
    rank.add_argument(
        "--scores",
        required=True,
        help="candidate-score Parquet file, directory or glob (h, r, t, side, candidate, score ids)",
    )
    rank.add_argument("--dataset", help="dataset whose ids the scores use and whose triples filter the candidates")
    rank.add_argument(
        "--out", required=True, help="output directory: ranks/ (Parquet rank file) and quarantine/ (Delta)"
    )
    rank.add_argument("--filter-splits", help="splits whose triples are filtered out (default: all splits)")
    rank.add_argument("--model", help="model name for files without a model column (default: the file name)")
    rank.add_argument("--run", dest="run_name", help="run name for files without a run column (default: 1)")
    rank.add_argument(
        "--no-duplicate-check", action="store_true", help="skip the sort that detects candidates scored twice"
    )

    repro = sub.add_parser(
        "reproduce-probe", help="score the PROBE release's rank dumps and compare with the paper's Tables 4 and 5"
    )
    _common(repro)
    repro.add_argument(
        "--reference",
        default=os.environ.get("KGBRINK_REFERENCE", "../shared/reference"),
        help="the shared reference folder (default: ../shared/reference or $KGBRINK_REFERENCE)",
    )
    repro.add_argument("--out", default=None, help="work and report directory (default: <data_dir>/reproduce-probe)")

    mine = _rules_command(
        sub,
        "mine",
        "Horn rules with AMIE3's semantics into <dataset>/rules",
        "output Delta table (default: <dataset>/rules)",
    )
    mine.add_argument("--splits", help="comma-separated splits to mine on (default: config mining.splits)")
    mine.add_argument("--tsv", help="also write the rules as AMIE3 TSV here")
    mine.add_argument("--max-atoms", type=int, help="atoms per rule counting the head (AMIE -maxad): 2, 3 or 4")
    mine.add_argument("--min-head-coverage", type=float, help="AMIE -minhc")
    mine.add_argument("--min-std-confidence", type=float, help="AMIE -minc")
    mine.add_argument("--min-pca-confidence", type=float, help="AMIE -minpca")
    mine.add_argument("--min-support", type=int, help="support floor on top of head coverage")
    mine.add_argument("--min-initial-support", type=int, help="AMIE -minis: facts a head relation needs")

    import_rules = _rules_command(
        sub,
        "import-rules",
        "an AMIE3 TSV rule file into a rules Delta table",
        "output Delta table (default: <dataset>/rules)",
    )
    import_rules.add_argument("--tsv", required=True, help="AMIE3 output file (plain or .gz)")

    export_rules = _rules_command(
        sub, "export-rules", "a rules Delta table as AMIE3 TSV", "rules Delta table (default: <dataset>/rules)"
    )
    export_rules.add_argument("--tsv", required=True, help="output file")

    ground = _rules_command(
        sub,
        "ground",
        "groundings of a rules table (all, or a seeded sample per rule)",
        "rules Delta table (default: <dataset>/rules)",
    )
    ground.add_argument("--out", help="output Delta table (default: <dataset>/groundings)")
    ground.add_argument(
        "--per-rule", type=int, help="at most this many groundings per rule, by seeded hash (default: all)"
    )
    ground.add_argument("--seed", type=int, help="sampling seed (default: config grounding.seed)")
    ground.add_argument("--splits", help="comma-separated splits of the KG (default: config mining.splits)")

    remove = _rules_command(
        sub,
        "remove",
        "sample groundings per rule and remove their heads under BRINK's constraints",
        "rules Delta table (default: <dataset>/rules)",
    )
    remove.add_argument("--variant", help="variant name (default: config variant.name)")
    remove.add_argument(
        "--mode", choices=["maximal", "reference"], help="conflict resolution (default: config variant.removal_mode)"
    )
    for name, text in (
        ("verify", "prove every removed triple of a variant still inferable in its incomplete KG"),
        ("questions", "questions of a variant's removed triples: answers, downsampling, splits, renderings"),
        ("export", "a variant as plain files (TSV, AMIE3 rules, provenance, questions, data card)"),
    ):
        command = sub.add_parser(name, help=text)
        _common(command)
        command.add_argument("--dataset", help="dataset directory or URI (default: config 'dataset')")
        command.add_argument("--variant", help="variant name (default: config variant.name)")
        if name in ("questions", "export"):
            command.add_argument(
                "--out", help="output directory of the plain files (default: <dataset>/variants/<variant>/release)"
            )
    build = _rules_command(
        sub,
        "build",
        "BRINK construction end to end: mine, remove, verify, questions, export, report",
        "use this rules table instead of mining",
    )
    build.add_argument("--variant", help="variant name (default: config variant.name)")
    build.add_argument(
        "--reuse-rules", action="store_true", help="use the dataset's existing rules table instead of mining"
    )
    build.add_argument(
        "--out",
        help="local directory of the release files and report (default: <dataset>/variants/<variant>/; required for a dataset on s3a://)",
    )

    evaluate = sub.add_parser(
        "evaluate-qa", help="BRINK QA metrics (Hits@Any, P, R, F1, Hits@Hard, HHR, permissive) of predictions"
    )
    _common(evaluate)
    evaluate.add_argument(
        "--questions", required=True, action="append", help="question JSON Lines file of a release (repeatable)"
    )
    evaluate.add_argument(
        "--predictions", required=True, help='JSON Lines: {"id": ..., "prediction": "raw output" or [answers]}'
    )
    evaluate.add_argument(
        "--scheme",
        default="private_id",
        choices=["private_id", "entity_id", "text_label"],
        help="entity naming of questions and predictions",
    )
    evaluate.add_argument("--per-question", help="also write per-question scores (JSON Lines) here")

    run = sub.add_parser("run", help="the main job end to end: sample KG -> ingest -> stats -> build")
    _common(run)
    run.add_argument("--dataset")
    run.add_argument("--sample-dir", help="where the generated sample KG goes (default: <data_dir>/sample-kg)")
    return parser


def _ingest(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import ingest

    opts = ingest.IngestOptions(
        dataset=args.dataset or config.location("dataset"),
        format=args.format,
        input=args.input,
        splits=_splits(args.split),
        variant=args.variant,
        delimiter=args.delimiter,
        columns=args.columns,
        quote=args.quote,
        entity_pattern=args.entity_pattern,
        relation_pattern=args.relation_pattern,
        entity_aliases=args.entity_aliases,
        relation_aliases=args.relation_aliases,
        label_language=args.label_language,
    )
    return ingest.run(spark, config, opts)


def _stats(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import stats

    splits = _names(args.splits)
    return stats.run(spark, config, args.dataset or config.location("dataset"), splits)


def _synth(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import synth

    return synth.run(
        config, args.out, args.triples, args.seed, args.malformed_fraction, args.duplicate_fraction, args.gzip
    )


def _score(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import score
    from kgbrink.probe.scoring import MetricSpec

    spec = MetricSpec(
        alphas=tuple(args.alpha or config.get("scoring.alphas")),
        betas=tuple(args.beta or config.get("scoring.betas")),
        hits=tuple(args.hits or config.get("scoring.hits")),
        p_values=tuple(args.p or config.get("scoring.p_values")),
        eps=args.eps,
        popularity_groups=config.get("scoring.popularity_groups") if args.groups is None else args.groups,
    )
    opts = score.ScoreOptions(
        ranks=args.ranks,
        dataset=args.dataset or config.location("dataset"),
        spec=spec,
        fmt=args.format,
        id_kind=args.ids,
        model=args.model,
        run=args.run_name,
        splits=_names(args.splits),
        plots_dir=args.plots,
    )
    return score.run(spark, config, opts)


def _rank(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import rank

    opts = rank.RankOptions(
        scores=args.scores,
        dataset=args.dataset or config.location("dataset"),
        out=args.out,
        filter_splits=_names(args.filter_splits),
        model=args.model,
        run=args.run_name,
        check_duplicates=not args.no_duplicate_check,
    )
    return rank.run(spark, config, opts)


def _reproduce_probe(spark, config: Config, args) -> JobSummary:
    from pathlib import Path

    from kgbrink.probe import reference as probe_reference

    out = args.out or f"{config.location('data_dir')}/reproduce-probe"
    summary = JobSummary("reproduce-probe", params={"reference": args.reference, "out": out})
    with summary.timed("reproduce"):
        comparison = probe_reference.reproduce(spark, config, Path(args.reference), out)
    Path(out).mkdir(parents=True, exist_ok=True)
    report = Path(out) / "report.md"
    report.write_text(probe_reference.report_markdown(comparison))
    summary.artifacts.append(str(report))
    matched = int(comparison["match"].sum())
    summary.counts.update(cells=len(comparison), matched=matched)
    if matched != len(comparison):
        raise RuntimeError(f"{len(comparison) - matched} of {len(comparison)} published cells differ; see {report}")
    return summary


def _mine(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import mine

    overrides = {
        "max_atoms": args.max_atoms,
        "min_head_coverage": args.min_head_coverage,
        "min_std_confidence": args.min_std_confidence,
        "min_pca_confidence": args.min_pca_confidence,
        "min_support": args.min_support,
        "min_initial_support": args.min_initial_support,
    }
    dataset = args.dataset or config.location("dataset")
    return mine.run(spark, config, dataset, _names(args.splits), args.rules, args.tsv, overrides)


def _import_rules(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import mine

    return mine.import_rules(spark, config, args.dataset or config.location("dataset"), args.tsv, args.rules)


def _export_rules(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import mine

    return mine.export_rules(spark, config, args.dataset or config.location("dataset"), args.tsv, args.rules)


def _ground(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import ground

    dataset = args.dataset or config.location("dataset")
    return ground.run(spark, config, dataset, args.rules, args.out, args.per_rule, args.seed, _names(args.splits))


def _variant_job(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import variant

    dataset = args.dataset or config.location("dataset")
    if args.command == "remove":
        return variant.remove(spark, config, dataset, args.variant, args.rules, args.mode)
    if args.command == "verify":
        return variant.verify(spark, config, dataset, args.variant)
    if args.command == "questions":
        return variant.make_questions(spark, config, dataset, args.variant, args.out)
    if args.command == "export":
        return variant.export(spark, config, dataset, args.variant, args.out)
    return variant.build(
        spark, config, dataset, args.variant, args.rules, mine_rules=not args.reuse_rules, out=args.out
    )


def _evaluate_qa(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import evaluate_qa

    return evaluate_qa.run(args.questions, args.predictions, args.scheme, args.per_question)


def _run(spark, config: Config, args) -> JobSummary:
    from kgbrink.jobs import pipeline

    return pipeline.run(spark, config, args.dataset or config.location("dataset"), args.sample_dir)


HANDLERS: dict[str, tuple[Callable, bool]] = {
    # command: (handler, needs a SparkSession)
    "ingest": (_ingest, True),
    "stats": (_stats, True),
    "synth": (_synth, False),
    "score": (_score, True),
    "rank": (_rank, True),
    "reproduce-probe": (_reproduce_probe, True),
    "mine": (_mine, True),
    "import-rules": (_import_rules, True),
    "export-rules": (_export_rules, True),
    "ground": (_ground, True),
    "remove": (_variant_job, True),
    "verify": (_variant_job, True),
    "questions": (_variant_job, True),
    "export": (_variant_job, True),
    "build": (_variant_job, True),
    "evaluate-qa": (_evaluate_qa, False),
    "run": (_run, True),
}


def _log_progress() -> None:
    """Progress lines of the jobs (``kgbrink.*`` loggers at INFO) on stderr."""
    logger = logging.getLogger("kgbrink")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_progress()
    handler, needs_spark = HANDLERS[args.command]
    summary = JobSummary(args.command)
    config = None
    try:
        config = load_config(args.conf, args.set)
        spark = None
        if needs_spark:
            from kgbrink.core.session import spark_session

            start = time.perf_counter()
            spark = spark_session(config)
            startup = round(time.perf_counter() - start, 3)
        summary = handler(spark, config, args)
        if needs_spark:
            summary.timings["spark_startup"] = startup
    except Exception as exc:  # noqa: BLE001 - every failure becomes a clear message and exit status 1
        summary = getattr(exc, "summary", None) or summary
        summary.status, summary.error = "failed", f"{type(exc).__name__}: {exc}"
        print(f"kgbrink {args.command}: error: {summary.error}", file=sys.stderr)
    if config is not None and not args.no_tracking:
        try:
            summary.mlflow_run_id = record_in_mlflow(config, summary)
        except Exception as exc:  # noqa: BLE001
            print(f"kgbrink {args.command}: warning: MLflow tracking failed: {exc}", file=sys.stderr)
            if summary.status == "ok":
                summary.status, summary.error = "failed", f"MLflow tracking failed: {exc}"
    if args.json:
        try:
            summary.write_json(args.json)
        except OSError as exc:
            print(f"kgbrink {args.command}: error: cannot write --json {args.json}: {exc}", file=sys.stderr)
            summary.status = "failed"
    print(json.dumps(summary.as_dict(), indent=2, sort_keys=True))
    return 0 if summary.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
