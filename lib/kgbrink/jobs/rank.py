"""``kgbrink rank``: filtered ranks from candidate-score files (PROBE protocol), as a rank file for ``score``.

Input: Parquet files with ``h, r, t, side, candidate, score`` (integer ids of the dataset; ``side`` head or
tail) and optional ``model``, ``run`` (else ``--model`` / the file name, and ``--run`` / ``1``). The known
triples of ``--filter-splits`` (default: every split of the dataset, as the PROBE protocol filters with
train + valid + test) are removed from each query's candidates (:mod:`kgbrink.probe.ranking`).

Ids outside the dataset's dense ranges are treated as missing: a query with such an ``h``, ``r`` or ``t``
is quarantined as ``null_key``, one with such a candidate as ``null_candidate``. Every entity of the
dataset must be scored for every query (PROBE ranks all of E; |E_i| is |E| minus the filtered known
answers): a query with fewer candidate rows than entities is quarantined as ``missing_candidates``, or,
with ``--partial-candidates`` (models that score a restricted candidate set), ranked among the candidates
it has and counted in ``queries_with_missing_candidates``. Output under ``--out``: ``ranks`` (Parquet:
``model, run, h, r, t, side, rank, num_candidates``) and ``quarantine`` (Delta).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, arg, job, names
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.probe import ranking
from kgbrink.probe.rankfiles import list_rank_files, with_model_and_run


@dataclass
class RankOptions:
    scores: str = arg(
        None,
        "candidate-score Parquet file, directory or glob (h, r, t, side, candidate, score ids)",
        required=True,
    )
    dataset: str | None = arg(None, "dataset whose ids the scores use and whose triples filter the candidates")
    out: str = arg(None, "output directory: ranks/ (Parquet rank file) and quarantine/ (Delta)", required=True)
    filter_splits: list[str] | None = arg(
        None, "splits whose triples are filtered out (default: all splits)", convert=names
    )
    model: str | None = arg(None, "model name for files without a model column (default: the file name)")
    run: str | None = arg(None, "run name for files without a run column (default: 1)", flag="--run")
    check_duplicates: bool = arg(
        True,
        "skip the sort that detects candidates scored twice",
        flag="--no-duplicate-check",
        action="store_false",
        convert=bool,
    )
    partial_candidates: bool = arg(
        False,
        "rank queries that do not score every entity among the candidates they score (default: quarantine)",
        flag="--partial-candidates",
        action="store_true",
        convert=bool,
    )


@job("rank", "filtered ranks (PROBE protocol) from candidate-score Parquet files", RankOptions, steps=1)
def run(ctx: JobContext, opts: RankOptions) -> JobSummary:
    spark, config = ctx.spark, ctx.config
    dataset = config.require_dataset(opts.dataset)
    files = [f for f, _, _ in list_rank_files(spark, opts.scores, "parquet")]
    summary = ctx.begin(
        scores=opts.scores,
        dataset=dataset,
        out=opts.out,
        check_duplicates=opts.check_duplicates,
        partial_candidates=opts.partial_candidates,
    )
    tables = {
        name: ctx.read(name, catalog.path(name, dataset=dataset)) for name in ("entities", "relations", "triples")
    }
    n_entities, n_relations = tables["entities"].count(), tables["relations"].count()
    triples = tables["triples"]
    if opts.filter_splits:
        triples = triples.filter(F.col("split").isin(opts.filter_splits))
    summary.params["filter_splits"] = ",".join(opts.filter_splits or ["all"])

    raw = spark.read.parquet(*files)
    missing = [c for c in ranking.SCORE_COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"{files[0]}: missing column(s) {', '.join(missing)} (has {', '.join(raw.columns)})")
    named = with_model_and_run(raw, F.col("_metadata.file_path"), opts.model, opts.run)
    scores = ranking.candidate_scores(named, n_entities, n_relations)
    with ctx.step("rank"):
        outcomes = ranking.query_outcomes(
            scores,
            triples.select("h", "r", "t"),
            bool(config.scoring.broadcast_tables),
            opts.check_duplicates,
            n_entities=n_entities,
            partial_candidates=opts.partial_candidates,
        )
        outcomes = outcomes.transform(checkpoint)
        ranks, quarantine = ranking.split_outcomes(outcomes)
        ctx.write_files("ranks", ranks, f"{opts.out}/ranks", table="rank.ranks")
        ctx.write("quarantine", quarantine, f"{opts.out}/quarantine", f"rank {opts.scores}", table="rank.quarantine")
    ranked, tally, partial = ranking.outcome_counts(outcomes)
    bad = sum(tally.values())
    summary.counts.update(
        score_files=len(files),
        queries=ranked + bad,
        ranked=ranked,
        quarantined=bad,
        quarantined_by_reason=tally,
        queries_with_missing_candidates=partial,
    )
    summary.extra["ranks_path"] = f"{opts.out}/ranks"
    if ranked + bad == 0:
        raise JobFailed("no queries", summary)
    limit = float(config.scoring.max_bad_fraction)
    fail_past_bad_fraction(
        summary, tally, ranked + bad, limit, "scoring.max_bad_fraction", "queries", f"see {opts.out}/quarantine"
    )
    return summary
