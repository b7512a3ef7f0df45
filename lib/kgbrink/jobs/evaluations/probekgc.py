"""ProbeKGC's evaluation (paper 003): the mcq question table's prompts, direct or CoT
(:mod:`kgbrink.evaluation.probekgc`), letters and log-probabilities scored by ``score-mcq``."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.jobs import JobContext
from kgbrink.evaluation import probekgc, releases
from kgbrink.jobs.evaluations.protocol import Evaluation, Run, adopt_results, parse_failures, write_quarantine


class ProbeKGC(Evaluation):
    name = "probekgc"
    inputs = (("questions", "mcq.questions"),)
    templates = {"none": ("probekgc-direct@1", "probekgc-cot@1")}

    def default_name(self, config) -> str:
        return "probekgc"

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        """The release's questions as ``mcq.questions`` rows (:func:`kgbrink.evaluation.releases.mcq_questions`),
        the degrees over its KG of the ``stats.splits`` its PROBE part records (else the setting's)."""
        probe = release.manifest["benchmarks"].get("probe", {}).get("settings", {})
        splits = probe.get("stats", {}).get("splits") or ctx.config.stats.splits
        triples = release.read(ctx, "kg_triples")
        frame = releases.mcq_questions(
            release.read(ctx, "probekgc_questions_text"),
            release.read(ctx, "probekgc_questions"),
            release.read(ctx, "kg_entities"),
            release.read(ctx, "kg_relations"),
            triples.filter(F.col("split").isin(list(splits))),
        )
        return {"questions": frame}

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        if run.release:  # staged as a questions table: score-mcq reads it
            ctx.write("questions", run.sources["questions"], run.path("questions"), table="mcq.questions")
            run.sources["questions"] = ctx.written("questions")
            run.questions_path = run.path("questions")
        run.records = run.sources["questions"]
        return probekgc.prompts(run.records, run.template)

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        sizes = run.records.select(F.col("id").alias("item_id"), F.size("options").alias("n_options"))
        parsed = ctx.persist(probekgc.predictions(answers.join(sizes, "item_id"), probekgc.strategy(run.template)))
        bad = parsed.filter(F.col("reason").isNotNull()).join(
            answers.select(F.col("item_id").alias("id"), "call_id"), "id"
        )
        good = parsed.filter(F.col("reason").isNull()).select(
            "id", "letter", "logprobs", F.lit(run.model).alias("model"), F.lit(opts.run_name).alias("run")
        )
        ctx.write("mcq_predictions", good, run.path("mcq_predictions"), table="predict.mcq_predictions")
        return write_quarantine(ctx, run, quarantine.unionByName(parse_failures(bad, "id")))

    def score(self, ctx: JobContext, run: Run, opts) -> None:
        summary = ctx.run(
            "score-mcq",
            predictions=run.path("mcq_predictions"),
            questions=run.questions_path or ctx.summary.inputs["questions"].path,
            out=run.path("scores"),
            report_dir=f"{run.files}/scores/report",
        )
        adopt_results(ctx, summary)
