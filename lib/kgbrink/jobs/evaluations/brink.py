"""BRINK's evaluation (paper 000): the reader's prompts on a variant's questions with no context, the oracle
groundings or a neighbourhood (:mod:`kgbrink.evaluation.brink`), answers scored by ``evaluate-qa``, misses
split into App. J's retrieval and reasoning failures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.brink import reader
from kgbrink.brink.questions import entity_names, relation_names
from kgbrink.core.files import write_single_file
from kgbrink.core.jobs import JobContext
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation import brink, releases
from kgbrink.evaluation.calls import call_rows
from kgbrink.jobs.evaluations import model_calls
from kgbrink.jobs.evaluations.protocol import Evaluation, Run, adopt_results, split_answers, write_quarantine


class Brink(Evaluation):
    name = "brink"
    inputs = (
        ("questions", "variant.questions"),
        ("provenance", "variant.provenance"),
        ("entities", "entities"),
        ("relations", "relations"),
    )
    templates = {
        "none": ("brink-reader-none@1",),
        "oracle": ("brink-reader@1",),
        "neighbourhood": ("brink-reader@1",),
    }
    fingerprint_settings = ("predict.max_facts", "predict.neighbourhood_hops", "variant.seed")

    def judge_template(self, opts) -> str | None:
        """App. D's rewriter, when ``--rewrite``."""
        return "brink-rewrite@1" if opts.rewrite else None

    def default_name(self, config) -> str:
        return config.variant.name

    def option_inputs(self, opts) -> tuple:
        """The KG a neighbourhood is retrieved from: the variant's complete or incomplete triples."""
        return ((opts.kg, f"variant.{opts.kg}"),) if opts.context == "neighbourhood" else ()

    def labels(self, opts) -> dict:
        """Naming, split, and the KG of a neighbourhood."""
        return {
            "scheme": opts.scheme,
            "split": opts.split,
            **({"kg": opts.kg} if opts.context == "neighbourhood" else {}),
        }

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        """The release's questions of ``--scheme`` (``--context none`` only: the release carries no reader
        context)."""
        if opts.context != "none":
            raise ConfigError(f"--release asks BRINK's questions with --context none only, not {opts.context}")
        if opts.rewrite:
            raise ConfigError("--rewrite needs the dataset's questions (their removed triples): not --release")
        return {"questions": release.read(ctx, f"brink_questions_{opts.scheme}")}

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        sources, variant = run.sources, ctx.config.variant
        if run.release:
            run.records = ctx.persist(releases.brink_records(sources["questions"], opts.split))
            return brink.prompts(run.records, "none", {}, run.template, variant.seed)
        entities = entity_names(sources["entities"], opts.scheme, variant.seed)
        relations = relation_names(sources["relations"])
        settings = ctx.config.predict
        near = None
        if opts.context == "neighbourhood":
            asked = sources["questions"].filter(F.col("split") == opts.split)
            hops, cut = settings.neighbourhood_hops, settings.max_facts
            near = brink.neighbourhoods(asked, sources[opts.kg], entities, relations, hops, cut, variant.seed)
        records = brink.records(
            sources["questions"], entities, relations, variant.templates, opts.split, sources["provenance"], near
        )
        if opts.rewrite:
            records = self._rewritten(ctx, run, opts, ctx.persist(records), relations)
        run.records = ctx.persist(records)
        by_key = sources["relations"].select("key", "id").join(relations, "id").collect()
        names = {r["key"]: r["name"] for r in by_key}
        return brink.prompts(run.records, opts.context, names, run.template, variant.seed, settings.max_facts)

    def _rewritten(self, ctx: JobContext, run: Run, opts, records: DataFrame, relations: DataFrame) -> DataFrame:
        """App. D (spec 1.1): every question rewritten by the judge's model from its text-label record, the
        rewrite checked (:func:`kgbrink.brink.reader.rewrite_check`) before it replaces the template
        question; the verdicts into ``rewrites.jsonl`` and the counts."""
        variant, sources = ctx.config.variant, run.sources
        text = records
        if opts.scheme != "text_label":  # App. D writes from labels; the rewrite is moved into the scheme
            labels = entity_names(sources["entities"], "text_label", variant.seed)
            text = ctx.persist(brink.records(sources["questions"], labels, relations, variant.templates, opts.split))
        role = replace(run.judge, role="rewrite")
        calls = ctx.persist(call_rows(brink.rewrite_prompts(text), role.model, role.params, revision=role.revision))
        ctx.summary.counts["rewrite_prompts"] = calls.count()
        ctx.summary.params["rewrite_model"] = role.model
        failed = model_calls.ask_and_count(ctx, run, role, calls)
        answered, _ = split_answers(calls, model_calls.calls(ctx, run), failed)
        checked = ctx.persist(brink.rewrites(answered.select("item_id", "content"), text, records))
        verdicts = {r["reason"]: int(r["count"]) for r in checked.groupBy("reason").count().collect()}
        ctx.summary.counts.update(
            rewrites_accepted=verdicts.pop(None, 0),
            rewrites_unanswered=verdicts.pop("no_answer", 0),
            rewrites_rejected=sum(verdicts.values()),
        )
        target = Path(run.files) / "rewrites.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_single_file(checked.orderBy("id"), target, "json", f"{run.out}/_staging_rewrites")
        ctx.summary.artifacts.append(str(target))
        asked = records.withColumn("id", F.col("id").cast("string")).drop("question")
        return asked.join(checked.select("id", "question"), "id")

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        parsed = ctx.persist(brink.predictions(answers.select("item_id", "content"), opts.scheme))
        ctx.summary.counts["refusals"] = parsed.filter("refusal").count()
        folder = Path(run.files)
        records = run.records.select("id", "question", "topic_entity", "answers", "hard_answer")
        for name, frame in (("questions", records), ("predictions", parsed.select("id", "prediction"))):
            target = folder / f"{name}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            write_single_file(frame.orderBy("id"), target, "json", f"{run.out}/_staging_{name}")
            ctx.summary.artifacts.append(str(target))
        return write_quarantine(ctx, run, quarantine)

    def score(self, ctx: JobContext, run: Run, opts) -> None:
        folder = Path(run.files)
        summary = ctx.run(
            "evaluate-qa",
            questions=[str(folder / "questions.jsonl")],
            predictions=str(folder / "predictions.jsonl"),
            scheme=opts.scheme,
            per_question=str(folder / "per_question.jsonl"),
        )
        adopt_results(ctx, summary)  # its headline scores
        ctx.summary.extra["evaluate_qa"] = {k: summary.counts.get(k) for k in sorted(summary.counts)}
        self._failures(ctx, run, opts, folder / "per_question.jsonl")

    def _failures(self, ctx: JobContext, run: Run, opts, per_question: Path) -> None:
        """App. J's split of the questions whose hard answer was missed: retrieval against reasoning
        failures, counted and as shares of the misses."""
        if "groundings" not in run.records.columns:  # a release's questions: no provenance
            return
        hard = pd.read_json(per_question, lines=True, dtype={"id": str}) if per_question.stat().st_size else None
        if hard is None or hard.empty:
            return
        frame = ctx.spark.createDataFrame(hard[["id", "hard"]].astype({"id": str, "hard": float}))
        kinds = brink.failures(run.records, frame, opts.context).groupBy("failure").count().collect()
        counts = {row["failure"]: int(row["count"]) for row in kinds}
        missed = sum(counts.values())
        for kind in (reader.RETRIEVAL_FAILURE, reader.REASONING_FAILURE):
            ctx.summary.counts[f"{kind}s"] = counts.get(kind, 0)
            share = counts.get(kind, 0) / missed if missed else None
            ctx.summary.results.append({"metric": f"{kind}s", "value": share})
