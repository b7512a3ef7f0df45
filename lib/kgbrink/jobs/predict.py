"""``kgbrink predict``: a benchmark's prompts sent to an OpenAI-compatible chat-completions endpoint, every
answer kept, parsed the paper's way and scored (issue 58; ``../shared/specs/model-evaluation.md``).

Inputs: the benchmark's questions in the dataset (ProbeKGC: ``mcq/<name>/questions``; BRINK: the variant
``<name>``'s questions, provenance and dictionaries). Every request is a row of ``predict/model_calls``
keyed by ``call_id`` = SHA-256 of (model, request parameters, prompt SHA-256): a prompt whose key has a
row is never asked again (a rerun asks nothing; a new model or setting asks only what it lacks), and
answers reach a spool file as they arrive (:mod:`kgbrink.llm.spool`), so a killed run or a lost executor
asks no answered prompt twice. Prompts whose call failed (after ``predict.max_tries``) or whose answer did
not parse go to ``predict_quarantine`` with the reason; past ``predict.max_bad_fraction`` the job fails.
The parsed answers go to the benchmark's scorer (``score-mcq``, ``evaluate-qa``). Output under ``--out``
(default ``<dataset>/predict/<benchmark>/<name>/<fingerprint>``): ``predict_prompts``, the parsed
predictions, ``predict_quarantine`` and the scorer's tables and report.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import pandas as pd
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.brink import reader
from kgbrink.brink.questions import entity_names, relation_names
from kgbrink.core import catalog, publish
from kgbrink.core.delta import table_exists
from kgbrink.core.files import (
    delete_path,
    read_json_lines,
    read_lines,
    read_parquet_splits,
    require_files,
    write_single_file,
)
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.settings import ConfigError, is_uri
from kgbrink.core.tracking import JobFailed, JobSummary, fail_past_bad_fraction
from kgbrink.evaluation import brink, okgqa, probekgc, releases, synthkgqa
from kgbrink.evaluation.calls import call_rows, canonical
from kgbrink.llm import spool
from kgbrink.llm.client import EndpointConfig
from kgbrink.okgqa import report as okgqa_report
from kgbrink.release import layout
from kgbrink.synthkgqa.seeds import prompt_records

CALLS = "model_calls"


QUARANTINE = "predict_quarantine"


def _params(defaults: dict, settings) -> dict:
    """The request's parameters: the benchmark's defaults, then the settings that are set."""
    params = dict(defaults)
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        value = getattr(settings, key)
        if value is not None:
            params[key] = value
    return params


def _answers(prompts: DataFrame, calls: DataFrame | None, failed: DataFrame | None) -> tuple[DataFrame, DataFrame]:
    """``(answers, quarantine)``: the prompts (``item_id, call_id``) with an ``ok`` answer and its
    ``content, top_logprobs``; the others as quarantine rows (stage ``call``: no answer, the last try's
    status as the reason; stage ``answer``: an empty, refused or truncated answer)."""
    spark = prompts.sparkSession
    keys = prompts.select("item_id", "call_id")
    if calls is None:
        calls = spark.createDataFrame([], catalog.table("predict.model_calls").schema)
    got = keys.join(calls.select("call_id", "status", "content", "top_logprobs", "detail"), "call_id", "left")
    if failed is None:
        failed = spark.createDataFrame([], "call_id string, last struct<status: string, detail: string>")
    missing = got.filter(F.col("status").isNull()).select("item_id", "call_id").join(failed, "call_id", "left")
    call_rows_ = missing.select(
        "item_id",
        "call_id",
        F.lit("call").alias("stage"),
        F.coalesce(F.col("last.status"), F.lit("no_answer")).alias("reason"),
        F.col("last.detail").alias("detail"),
    )
    refused = got.filter(F.col("status").isNotNull() & (F.col("status") != "ok")).select(
        "item_id", "call_id", F.lit("answer").alias("stage"), F.col("status").alias("reason"), "detail"
    )
    return got.filter(F.col("status") == "ok"), call_rows_.unionByName(refused)


@dataclass(frozen=True)
class _ProbeKGC:
    """ProbeKGC: the mcq question table's prompts, letters and log-probabilities for score-mcq."""

    inputs: tuple = (("questions", "mcq.questions"),)
    optional: tuple = ()
    contexts: tuple = ("none",)

    def default_name(self, config) -> str:
        return "probekgc"

    def params(self, settings) -> dict:
        return _params(probekgc.DEFAULT_PARAMS, settings)

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

    def prompts(self, ctx: JobContext, work, opts) -> DataFrame:
        if work.release:  # staged as a questions table: score-mcq reads it
            ctx.write("questions", work.sources["questions"], work.path("questions"), table="mcq.questions")
            work.sources["questions"] = ctx.written("questions")
            work.state["questions_path"] = work.path("questions")
        return probekgc.prompts(work.sources["questions"])

    def parse_and_write(self, ctx: JobContext, work, prompts, calls, failed, opts) -> dict[str, int]:
        answers, quarantine = _answers(prompts, calls, failed)
        sizes = work.sources["questions"].select(F.col("id").alias("item_id"), F.size("options").alias("n_options"))
        parsed = probekgc.predictions(answers.join(sizes, "item_id")).cache()
        bad = parsed.filter(F.col("reason").isNotNull()).join(
            answers.select(F.col("item_id").alias("id"), "call_id"), "id"
        )
        quarantine = quarantine.unionByName(
            bad.select(F.col("id").alias("item_id"), "call_id", F.lit("parse").alias("stage"), "reason", "detail")
        )
        good = parsed.filter(F.col("reason").isNull()).select(
            "id", "letter", "logprobs", F.lit(work.model).alias("model"), F.lit(opts.run_name).alias("run")
        )
        ctx.write("mcq_predictions", good, work.path("mcq_predictions"), table="predict.mcq_predictions")
        by_reason = _write_quarantine(ctx, work, quarantine)
        parsed.unpersist()
        return by_reason

    def score(self, ctx: JobContext, work, opts) -> None:
        summary = ctx.run(
            "score-mcq",
            predictions=work.path("mcq_predictions"),
            questions=work.state.get("questions_path") or ctx.summary.inputs["questions"].path,
            out=work.path("scores"),
            report_dir=f"{work.files}/scores/report",
        )
        ctx.summary.results.extend(summary.results)
        ctx.summary.highlights.update(summary.highlights)
        ctx.summary.artifacts.extend(summary.artifacts)


def _write_quarantine(ctx: JobContext, work, quarantine: DataFrame) -> dict[str, int]:
    """The quarantine rows written (an empty table when there are none: no stale rows of an earlier run in
    the folder), counted by reason from the table written (its plan is long: not cached)."""
    ctx.write(QUARANTINE, quarantine, work.path(QUARANTINE), table="predict.quarantine")
    written = ctx.written(QUARANTINE)
    by_reason = {r["reason"]: int(r["count"]) for r in written.groupBy("reason").count().collect()}
    ctx.summary.counts.update(quarantined=sum(by_reason.values()), quarantined_by_reason=by_reason)
    return by_reason


@dataclass(frozen=True)
class _Brink:
    """BRINK: the reader's prompts on a variant's questions, its answers scored by evaluate-qa."""

    inputs: tuple = (
        ("questions", "variant.questions"),
        ("provenance", "variant.provenance"),
        ("entities", "entities"),
        ("relations", "relations"),
    )
    optional: tuple = ()
    contexts: tuple = ("none", "oracle", "neighbourhood")

    def default_name(self, config) -> str:
        return config.variant.name

    def option_inputs(self, opts) -> tuple:
        """The KG a neighbourhood is retrieved from: the variant's complete or incomplete triples."""
        return ((opts.kg, f"variant.{opts.kg}"),) if opts.context == "neighbourhood" else ()

    def prompt_choices(self, opts) -> dict:
        """The options that shape the prompts, for the summary: naming, split, and the KG of a neighbourhood."""
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
        return {"questions": release.read(ctx, f"brink_questions_{opts.scheme}")}

    def params(self, settings) -> dict:
        return _params(brink.DEFAULT_PARAMS, settings)

    def prompts(self, ctx: JobContext, work, opts) -> DataFrame:
        sources, variant = work.sources, ctx.config.variant
        if work.release:
            work.state["records"] = releases.brink_records(sources["questions"], opts.split).cache()
            return brink.prompts(work.state["records"], "none", {}, opts.template, variant.seed)
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
        work.state["records"] = records.cache()
        by_key = sources["relations"].select("key", "id").join(relations, "id").collect()
        names = {r["key"]: r["name"] for r in by_key}
        return brink.prompts(
            work.state["records"], opts.context, names, opts.template, variant.seed, settings.max_facts
        )

    def parse_and_write(self, ctx: JobContext, work, prompts, calls, failed, opts) -> dict[str, int]:
        answers, quarantine = _answers(prompts, calls, failed)
        parsed = brink.predictions(answers.select("item_id", "content"), opts.scheme).cache()
        ctx.summary.counts["refusals"] = parsed.filter("refusal").count()
        folder = Path(work.files)
        records = work.state["records"].select("id", "question", "topic_entity", "answers", "hard_answer")
        for name, frame in (("questions", records), ("predictions", parsed.select("id", "prediction"))):
            target = folder / f"{name}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            write_single_file(frame.orderBy("id"), target, "json", f"{work.out}/_staging_{name}")
            ctx.summary.artifacts.append(str(target))
        by_reason = _write_quarantine(ctx, work, quarantine)
        parsed.unpersist()
        return by_reason

    def score(self, ctx: JobContext, work, opts) -> None:
        folder = Path(work.files)
        summary = ctx.run(
            "evaluate-qa",
            questions=[str(folder / "questions.jsonl")],
            predictions=str(folder / "predictions.jsonl"),
            scheme=opts.scheme,
            per_question=str(folder / "per_question.jsonl"),
        )
        ctx.summary.results.extend(summary.results)
        ctx.summary.highlights.update(summary.highlights)  # its headline scores
        ctx.summary.artifacts.extend(summary.artifacts)
        ctx.summary.extra["evaluate_qa"] = {k: summary.counts.get(k) for k in sorted(summary.counts)}
        self._failures(ctx, work, opts, folder / "per_question.jsonl")

    def _failures(self, ctx: JobContext, work, opts, per_question: Path) -> None:
        """App. J's split of the questions whose hard answer was missed: retrieval against reasoning
        failures, counted and as shares of the misses."""
        if "groundings" not in work.state["records"].columns:  # a release's questions: no provenance
            return
        hard = pd.read_json(per_question, lines=True, dtype={"id": str}) if per_question.stat().st_size else None
        if hard is None or hard.empty:
            return
        frame = ctx.spark.createDataFrame(hard[["id", "hard"]].astype({"id": str, "hard": float}))
        kinds = brink.failures(work.state["records"], frame, opts.context).groupBy("failure").count().collect()
        counts = {row["failure"]: int(row["count"]) for row in kinds}
        missed = sum(counts.values())
        for kind in (reader.RETRIEVAL_FAILURE, reader.REASONING_FAILURE):
            ctx.summary.counts[f"{kind}s"] = counts.get(kind, 0)
            share = counts.get(kind, 0) / missed if missed else None
            ctx.summary.results.append({"metric": f"{kind}s", "value": share})


@dataclass(frozen=True)
class _OKGQA:
    """OKGQA-P: a question set's subgraphs at each perturbation level as knowledge, answers judged by G-Eval."""

    inputs: tuple = (
        ("perturbed", "okgqa.perturbed"),
        ("perturbations", "okgqa.perturbations"),
        ("entities", "entities"),
        ("relations", "relations"),
    )
    optional: tuple = (("kg_similarity", "okgqa.kg_similarity"),)
    contexts: tuple = ("subgraph", okgqa.NO_CONTEXT)

    def default_name(self, config) -> str:
        raise ConfigError("--name is required with --benchmark okgqa: the question set of okgqa-subgraphs")

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        raise ConfigError("okgqa needs a dataset: a release carries the KG scope only, no question subgraphs")

    def params(self, settings) -> dict:
        return _params(okgqa.DEFAULT_PARAMS, settings)

    def prompts(self, ctx: JobContext, work, opts) -> DataFrame:
        if not opts.questions:
            raise ConfigError('--questions is required with --benchmark okgqa: JSON Lines {"qid", "question"}')
        perturbed = work.sources["perturbed"]
        texts = _question_texts(ctx, work, opts.questions, perturbed.select(F.col("scope_key").alias("qid")))
        graphs = (
            None if opts.context == okgqa.NO_CONTEXT else okgqa.level_graphs(perturbed, work.sources["perturbations"])
        )
        settings = ctx.config.predict
        sources = work.sources
        records = okgqa.records(graphs, texts, sources["entities"], sources["relations"], settings.max_facts)
        work.state["records"] = records.cache()
        return okgqa.prompts(work.state["records"], opts.template)

    def parse_and_write(self, ctx: JobContext, work, prompts, calls, failed, opts) -> dict[str, int]:
        answered, quarantine = _answers(prompts, calls, failed)
        parsed = okgqa.answers(answered.select("item_id", "content"))
        records = work.state["records"]
        n_facts = F.when(F.col("facts").isNull(), 0).otherwise(F.size("facts")).alias("n_facts")
        table = records.join(parsed, "item_id").select(
            "item_id",
            "qid",
            "method",
            "seed",
            "level",
            "n_triples",
            n_facts,
            "answer",
            "abstained",
            F.lit(work.model).alias("model"),
            F.lit(opts.run_name).alias("run"),
        )
        ctx.write("okgqa_answers", table, work.path("okgqa_answers"), table="predict.okgqa_answers")
        row = ctx.written("okgqa_answers").agg(F.count("*"), F.sum(F.col("abstained").cast("int"))).first()
        ctx.summary.counts.update(answers=int(row[0]), abstained=int(row[1] or 0))
        by_reason = _write_quarantine(ctx, work, quarantine.unionByName(work.state["text_quarantine"]))
        # bad question lines were weighed against the lines already (_question_texts), not the prompts
        texts = work.state["text_counts"]
        return {k: n - texts.get(k, 0) for k, n in by_reason.items() if n > texts.get(k, 0)}

    def score(self, ctx: JobContext, work, opts) -> None:
        settings, summary = ctx.config.predict, ctx.summary
        judge = replace(
            work,
            model=opts.judge_model or settings.judge_model or work.model,
            params=dict(okgqa.JUDGE_PARAMS),
            endpoint=_endpoint(settings, opts.base_url, work.tasks, opts.judge_base_url or settings.judge_base_url),
        )
        if settings.seed is not None:
            judge.params["seed"] = settings.seed
        answers = ctx.written("okgqa_answers")
        judged, judge_bad, cached = self._judged(ctx, work, judge, answers)
        labels = {"model": work.model, "judge_model": judge.model, "run": opts.run_name, "setting": opts.context}
        summary.params.update(judge_model=judge.model, judge_base_url=judge.endpoint.base_url)
        judgements = judged.select("answer_id", "criterion", "score")
        rows = okgqa.scores(answers, judgements, list(settings.criteria), labels)
        ctx.write("okgqa_scores", rows, work.path("okgqa_scores"), table="predict.okgqa_scores")
        similarity = work.sources.get("kg_similarity")
        levels = okgqa.levels(ctx.written("okgqa_scores"), similarity, answers)
        ctx.write("okgqa_levels", levels, work.path("okgqa_levels"), table="predict.okgqa_levels")
        self._report(ctx, work, ctx.written("okgqa_levels").toPandas(), judge.model, opts.context)
        for frame in cached:
            frame.unpersist()
        fail_past_bad_fraction(
            summary,
            judge_bad,
            summary.counts["judge_prompts"] + summary.counts["prompts"],
            float(settings.max_bad_fraction),
            "predict.max_bad_fraction",
            "prompts and judge prompts",
            f"see {work.path(QUARANTINE)}",
        )

    def _judged(self, ctx: JobContext, work, judge, answers: DataFrame) -> tuple[DataFrame, dict, list]:
        """The judge asked about every answer and criterion; returns its parsed ``score`` per ``answer_id,
        criterion``, the judge's bad calls and unparsed judgements per reason (quarantined with the
        answers'), and the frames cached on the way."""
        settings, summary = ctx.config.predict, ctx.summary
        texts = work.state["records"].select("item_id", "question", "references")
        items = okgqa.judge_prompts(answers.join(texts, "item_id"), list(settings.criteria)).cache()
        prompts = call_rows(items.select("item_id", "messages"), judge.model, judge.params).cache()
        ctx.write("judge_prompts", prompts.drop("body"), work.path("judge_prompts"), table="predict.judge_prompts")
        summary.counts["judge_prompts"] = prompts.count()
        failed = _ask(ctx, judge, prompts, prefix="judge_")
        _usage(ctx, judge, prompts, prefix="judge_")
        answered, bad_calls = _answers(prompts, _calls(ctx, judge), failed)
        judged = okgqa.judged(answered.select("item_id", "content")).join(items.drop("messages"), "item_id").cache()
        unscored = judged.filter(F.col("score").isNull()).join(prompts.select("item_id", "call_id"), "item_id")
        bad = bad_calls.unionByName(
            unscored.select(
                "item_id",
                "call_id",
                F.lit("parse").alias("stage"),
                F.lit("no_score").alias("reason"),
                F.lit("no 'Score: n' line with 0 <= n <= 10").alias("detail"),
            )
        ).withColumn("stage", F.concat(F.lit("judge_"), F.col("stage")))
        if QUARANTINE in summary.outputs:
            bad = bad.unionByName(ctx.written(QUARANTINE))
        by_reason = _write_quarantine(ctx, work, bad)
        texts = work.state["text_counts"]
        judge_bad = {k: n - texts.get(k, 0) for k, n in by_reason.items() if n > texts.get(k, 0)}
        return judged, judge_bad, [judged, items, prompts, *([failed] if failed is not None else [])]

    def _report(self, ctx: JobContext, work, table: pd.DataFrame, judge_model: str, setting: str) -> None:
        """The per-level scores into the summary's results, a figure and ``report.md`` in the files folder."""
        for row in table.sort_values(["metric", "method", "level"]).itertuples():
            for suffix, value in (("", row.value), (".drop", row.drop)):
                ctx.summary.results.append(
                    {
                        "metric": row.metric + suffix,
                        "method": row.method,
                        "level": row.level,
                        "value": None if pd.isna(value) else round(float(value), 6),
                    }
                )
        folder = Path(work.files) / "report"
        heading = f"OKGQA-P: {work.model} judged by {judge_model} (setting {setting})"
        ctx.summary.artifacts.append(str(okgqa_report.answers_figure(table, folder / "answers.png", heading)))
        (folder / "report.md").write_text(okgqa_report.answers_markdown(table, heading) + "\n![answers](answers.png)\n")
        ctx.summary.artifacts.append(str(folder / "report.md"))


@dataclass(frozen=True)
class _SynthKGQA:
    """SynthKGQA: questions written from a seed-graphs set, parsed, then validated by gt-questions."""

    inputs: tuple = (("seed_graphs", "synthkgqa.seed_graphs"), ("entities", "entities"), ("relations", "relations"))
    optional: tuple = ()
    contexts: tuple = ("none",)

    def default_name(self, config) -> str:
        return "seeds"  # seed-graphs' default --name

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        raise ConfigError("synthkgqa needs a dataset: gt-questions validates the written questions on its KG")

    def params(self, settings) -> dict:
        return _params(synthkgqa.DEFAULT_PARAMS, settings)

    def prompts(self, ctx: JobContext, work, opts) -> DataFrame:
        sources, k = work.sources, ctx.config.seed_graphs.prompt_edges
        records = prompt_records(sources["seed_graphs"], sources["entities"], sources["relations"], k)
        work.state["records"] = records.cache()
        return synthkgqa.prompts(work.state["records"], opts.template)

    def parse_and_write(self, ctx: JobContext, work, prompts, calls, failed, opts) -> dict[str, int]:
        answers, quarantine = _answers(prompts, calls, failed)
        parsed = synthkgqa.written(answers.select("item_id", "content"), work.state["records"]).cache()
        bad = parsed.filter(F.col("reason").isNotNull()).join(answers.select("item_id", "call_id"), "item_id")
        quarantine = quarantine.unionByName(
            bad.select("item_id", "call_id", F.lit("parse").alias("stage"), "reason", "detail")
        )
        target = Path(work.files) / "written.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = synthkgqa.gt_records(parsed, work.model).orderBy("sample_id")
        write_single_file(lines, target, "json", f"{work.out}/_staging_written")
        ctx.summary.counts["written"] = parsed.filter(F.col("reason").isNull()).count()
        ctx.summary.artifacts.append(str(target))
        work.state["written"] = str(target)
        if is_uri(work.out):  # gt-questions reads it on the executors: a copy beside the tables
            work.state["written"] = f"{work.out}/written.jsonl"
            publish.copy_file(ctx.spark, str(target), work.state["written"])
        by_reason = _write_quarantine(ctx, work, quarantine)
        parsed.unpersist()
        return by_reason

    def score(self, ctx: JobContext, work, opts) -> None:
        if not ctx.summary.counts["written"]:
            raise JobFailed("no written question parsed: nothing for gt-questions", ctx.summary)
        # one set per run setting: two settings of one model never overwrite each other's questions
        questions = ctx.summary.params["questions_set"] = f"{work.name}-{_slug(work.model)}-{work.fingerprint[:8]}"
        summary = ctx.run(
            "gt-questions", input=work.state["written"], dataset=work.dataset, name=questions, answers=True
        )
        ctx.summary.counts.update(
            {f"gt_{k}": v for k, v in summary.counts.items() if isinstance(v, int) and not isinstance(v, bool)}
        )
        ctx.summary.extra["gt_questions"] = {k: v.as_dict() for k, v in summary.outputs.items()}
        ctx.summary.artifacts.extend(summary.artifacts)


def _slug(text: str) -> str:
    """A model name as a plain folder name: characters other than letters, digits, ``.``, ``_`` and ``-``
    replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).lstrip(".") or "model"


def _question_texts(ctx: JobContext, work, path: str, qids: DataFrame) -> DataFrame:
    """The good question texts (``qid, question, references``) of the questions in ``qids``; bad lines, and
    texts of questions the set has not, kept in ``work.state["text_quarantine"]``; fails when the bad lines
    exceed ``predict.max_bad_fraction`` of the lines (a text of another question, ``unknown_qid``, is not
    weighed: one question file may serve several sets)."""
    require_files(ctx.spark, [path])
    parsed = okgqa.question_texts(read_lines(ctx.spark, {"questions": [path]})).cache()
    work.state["text_lines"] = parsed
    known = qids.distinct().withColumn("_known", F.lit(True))
    parsed = parsed.join(known, "qid", "left").withColumns(
        {
            "reason": F.when(F.col("reason").isNull() & F.col("_known").isNull(), F.lit("unknown_qid")).otherwise(
                F.col("reason")
            ),
            "detail": F.when(
                F.col("detail").isNull() & F.col("_known").isNull(), F.lit("no subgraph of this qid in the set")
            ).otherwise(F.col("detail")),
        }
    )
    bad = parsed.filter(F.col("reason").isNotNull())
    where = F.concat(F.col("source_file"), F.lit(":"), F.col("line_number").cast("string"), F.lit(": "))
    work.state["text_quarantine"] = bad.select(
        F.col("qid").alias("item_id"),
        F.lit(None).cast("string").alias("call_id"),
        F.lit("questions").alias("stage"),
        "reason",
        F.concat(where, F.coalesce("detail", F.lit(""))).alias("detail"),
    ).cache()
    counts = {r["reason"]: int(r["count"]) for r in bad.groupBy("reason").count().collect()}
    work.state["text_counts"] = counts
    good = parsed.filter(F.col("reason").isNull()).select("qid", "question", "references").cache()
    work.state["texts"] = good
    n_good, n_set = good.count(), known.count()
    ctx.summary.counts.update(question_texts=n_good, questions_without_text=n_set - n_good)
    weighed = {k: n for k, n in counts.items() if k != "unknown_qid"}
    fail_past_bad_fraction(
        ctx.summary,
        weighed,
        n_good + sum(weighed.values()),
        float(ctx.config.predict.max_bad_fraction),
        "predict.max_bad_fraction",
        "question lines",
        f"bad lines of {path}",
        source=path,
    )
    return good


BENCHMARKS = {"brink": _Brink(), "okgqa": _OKGQA(), "probekgc": _ProbeKGC(), "synthkgqa": _SynthKGQA()}


@dataclass
class PredictOptions:
    benchmark: str = arg(None, "benchmark whose prompts are asked", required=True, choices=sorted(BENCHMARKS))
    dataset: str | None = arg(None, "dataset (default: setting 'dataset'; with --release: where answers are kept)")
    release: str | None = arg(
        None,
        "a release (kgbrink release's root, one version, or a fetched copy) whose questions are asked instead of "
        "a dataset's: probekgc, brink (--context none)",
    )
    name: str | None = arg(
        None,
        "question set (probekgc: kgbrink mcq --name, default probekgc; brink: the variant, default variant.name; "
        "okgqa: okgqa-subgraphs --name; synthkgqa: seed-graphs --name, default seeds)",
    )
    model: str | None = arg(None, "model name sent to the endpoint (default: setting predict.model)")
    base_url: str | None = arg(None, "endpoint, e.g. http://127.0.0.1:8000/v1 (default: setting predict.base_url)")
    template: str | None = arg(None, "prompt template: a built-in name (name@version) or a YAML/JSON file")
    scheme: str = arg("text_label", "brink: entity naming", choices=["private_id", "entity_id", "text_label"])
    context: str | None = arg(
        None,
        "knowledge given with a question: brink none (default), oracle or neighbourhood; okgqa subgraph "
        "(default) or none",
        choices=["none", "oracle", "neighbourhood", "subgraph"],
    )
    kg: str = arg("incomplete", "brink neighbourhood: the KG it is retrieved from", choices=["complete", "incomplete"])
    questions: str | None = arg(None, 'okgqa: question texts, JSON Lines {"qid", "question", "references"?}')
    judge_model: str | None = arg(None, "okgqa: the G-Eval judge's model (default: setting predict.judge_model)")
    judge_base_url: str | None = arg(
        None, "okgqa: the judge's endpoint (default: setting predict.judge_base_url, else the answering one)"
    )
    split: str = arg("test", "brink: question split asked")
    limit: int | None = arg(None, "ask only the first N prompts (by item id)", type=int)
    run_name: str = arg("1", "run label of the predictions (score-mcq's run)", flag="--run")
    out: str | None = arg(None, "output folder (default: <dataset>/predict/<benchmark>/<name>/<fingerprint>)")
    files: str | None = arg(
        None,
        "local folder of the plain files (JSON Lines, reports; default: the output folder when it is local, else "
        "<data_dir>/predict/<benchmark>/<name>/<fingerprint>)",
    )
    score: bool = arg(True, "skip the scorer", flag="--no-score", action="store_false")


@dataclass
class _Work:
    dataset: str
    benchmark: str
    name: str
    model: str
    params: dict
    endpoint: EndpointConfig
    tasks: int
    out: str
    spool_dir: str
    fingerprint: str = ""
    files: str = ""  # a local folder: the plain files
    sources: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)  # what a benchmark's steps pass on
    release: str = ""  # the release folder read instead of a dataset

    def path(self, table: str) -> str:
        return f"{self.out}/{table}"


def _digest(value) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:16]


def _file_digest(ctx: JobContext, path: str) -> str:
    """SHA-256 of a file's bytes (local or on object storage)."""
    require_files(ctx.spark, [path])
    row = ctx.spark.read.format("binaryFile").load(path).select(F.sha2("content", 256).alias("d")).first()
    return row["d"]


def _endpoint(settings, base_url: str | None, tasks: int, judge_url: str | None = None) -> EndpointConfig:
    """The endpoint of the settings (``judge_url``: okgqa's judge there, with ``judge_api_key_env``'s key,
    never the answering endpoint's), each global rate limit split evenly among the tasks."""

    def share(limit):
        return None if limit is None else float(limit) / tasks

    if judge_url:
        key_env, key_setting = settings.judge_api_key_env, "predict.judge_api_key_env"
    else:
        key_env, key_setting = settings.api_key_env, "predict.api_key_env"
    if key_env and not os.environ.get(key_env):
        raise ConfigError(f"{key_setting} names {key_env}, which is not set in the environment")
    return EndpointConfig(
        base_url=(judge_url or base_url or settings.base_url).rstrip("/"),
        api_key_env=key_env,
        timeout_s=float(settings.timeout_seconds),
        max_tries=int(settings.max_tries),
        backoff_initial_s=float(settings.backoff_seconds),
        backoff_max_s=float(settings.backoff_max_seconds),
        in_flight=int(settings.in_flight),
        requests_per_minute=share(settings.requests_per_minute),
        tokens_per_minute=share(settings.tokens_per_minute),
    )


def _open(ctx: JobContext, opts: PredictOptions) -> _Work:
    """Settings checked, the benchmark's inputs pinned, the output folder named by their fingerprint."""
    settings = ctx.config.predict
    benchmark = BENCHMARKS[opts.benchmark]
    model = _checked(settings, benchmark, opts)
    release = _Release.open(ctx, opts.release) if opts.release else None
    if release is not None and opts.benchmark not in release.manifest["benchmarks"]:
        raise ConfigError(f"{release.where}: the release has no {opts.benchmark} benchmark")
    dataset = opts.dataset or ctx.config.data_dir if release else ctx.config.require_dataset(opts.dataset)
    name = opts.name or (
        f"release-{release.manifest.get('version', 'v')}" if release else benchmark.default_name(ctx.config)
    )
    params = benchmark.params(settings)
    endpoint = _endpoint(settings, opts.base_url, settings.tasks)
    if opts.benchmark == "okgqa" and opts.score:  # a missing judge key fails before anything is asked
        _endpoint(settings, opts.base_url, settings.tasks, opts.judge_base_url or settings.judge_base_url)
    summary = ctx.begin(
        benchmark=opts.benchmark,
        dataset=dataset,
        name=name,
        model=model,
        base_url=endpoint.base_url,
        api_key_env=settings.api_key_env,
        params=params,
        template=opts.template,
        limit=opts.limit,
        release=release.folder if release else None,
        context=opts.context,
        **_prompt_choices(benchmark, opts),
    )
    if release is not None:
        sources = benchmark.release_sources(ctx, release, opts)
    else:
        sources = _pinned_sources(ctx, benchmark, opts, dataset, name)
    fingerprint = _fingerprint(ctx, opts, release, model, params)
    out = (opts.out or f"{dataset}/predict/{opts.benchmark}/{name}/{fingerprint}").rstrip("/")
    spool_dir = settings.spool_dir or f"{dataset}/predict/_spool"
    if is_uri(spool_dir):
        raise ConfigError(f"predict.spool_dir must be a file system folder every executor sees, not {spool_dir}")
    files = opts.files or (
        out if not is_uri(out) else f"{ctx.config.data_dir}/predict/{opts.benchmark}/{name}/{fingerprint}"
    )
    if is_uri(files):
        raise ConfigError(f"--files must be a local folder, not {files}")
    summary.params.update(out=out, fingerprint=fingerprint, files=files)
    return _Work(
        dataset, opts.benchmark, name, model, params, endpoint, settings.tasks, out, spool_dir, fingerprint, files,
        sources, release=release.folder if release else "",
    )  # fmt: skip


def _checked(settings, benchmark, opts: PredictOptions) -> str:
    """The model asked, once the settings and ``--context`` are checked (``--context`` defaulted)."""
    model = opts.model or settings.model
    if not model:
        raise ConfigError("no model: pass --model or set predict.model")
    if settings.tasks < 1 or settings.in_flight < 1 or settings.max_tries < 1:
        raise ConfigError("predict.tasks, predict.in_flight and predict.max_tries must be >= 1")
    if opts.context is None:
        opts.context = benchmark.contexts[0]
    if opts.context not in benchmark.contexts:
        raise ConfigError(f"--context {opts.context} is not one of {opts.benchmark}'s: {', '.join(benchmark.contexts)}")
    return model


def _pinned_sources(ctx: JobContext, benchmark, opts: PredictOptions, dataset: str, name: str) -> dict:
    """The benchmark's tables in ``dataset`` read pinned: its inputs and those its options name (each
    required), then its optional ones where they exist."""
    option_inputs = getattr(benchmark, "option_inputs", lambda _: ())(opts)
    sources = {}
    for required, inputs in ((True, benchmark.inputs), (True, option_inputs), (False, benchmark.optional)):
        for source, table in inputs:
            path = catalog.table(table).path(dataset=dataset, questions=name, variant=name)
            if table_exists(ctx.spark, path):
                sources[source] = ctx.read(source, path)
            elif required:
                message = f"no {source} table at {path}: build the {opts.benchmark} benchmark first"
                raise JobFailed(message, ctx.summary)
    return sources


def _fingerprint(ctx: JobContext, opts: PredictOptions, release, model: str, params: dict) -> str:
    """What the answers depend on: the pinned inputs (or the release), the model and its parameters, the
    options and settings that shape the prompts, the judge."""
    settings = ctx.config.predict
    return _digest(
        {
            "inputs": {k: v.as_dict() for k, v in ctx.summary.inputs.items()},
            "release": release.identity(opts.benchmark) if release else None,
            "model": model,
            "params": params,
            "options": {
                k: getattr(opts, k) for k in ("template", "scheme", "context", "kg", "split", "limit", "run_name")
            },
            "settings": {k: getattr(settings, k) for k in ("max_facts", "neighbourhood_hops", "criteria")},
            "judge": {"model": opts.judge_model or settings.judge_model or model, "params": okgqa.JUDGE_PARAMS},
            "prompt_edges": ctx.config.seed_graphs.prompt_edges,
            "questions": _file_digest(ctx, opts.questions) if opts.questions else None,
        }
    )


@dataclass(frozen=True)
class _Release:
    """A release read as predict's input: its folder (a root's ``LATEST`` version, or the version given)
    and its checked ``release.json``."""

    folder: str
    manifest: dict

    @property
    def where(self) -> str:
        return f"{self.folder}/release.json"

    @classmethod
    def open(cls, ctx: JobContext, location: str) -> _Release:
        location = location.rstrip("/")
        latest = layout.latest_version(publish.read_text(ctx.spark, f"{location}/LATEST"), f"{location}/LATEST")
        folder = f"{location}/{latest}" if latest else location
        where = f"{folder}/release.json"
        text = publish.read_text(ctx.spark, where)
        if text is None:
            raise ConfigError(f"--release {location}: no release.json (not a kgbrink release)")
        return cls(folder, layout.checked_manifest(text, where))

    def identity(self, benchmark: str) -> dict:
        """What a run's fingerprint takes from the release: its version and the benchmark's fingerprint."""
        return {
            "version_number": self.manifest["version_number"],
            "benchmark": self.manifest["benchmarks"][benchmark]["fingerprint"],
        }

    def read(self, ctx: JobContext, config: str) -> DataFrame:
        """The Parquet files of the config ``config``, with ``split``."""
        files = releases.config_files(self.manifest, config, self.where)
        paths = {split: [f"{self.folder}/{name}" for name in names] for split, names in files.items()}
        return read_parquet_splits(ctx.spark, paths)


def _calls_path(work: _Work) -> str:
    return f"{work.dataset}/predict/{CALLS}"


def _fold(ctx: JobContext, work: _Work, folder: str) -> DataFrame:
    """The spool files under ``folder`` into ``model_calls`` (a call id's first answer kept); the rows of the
    calls that got no answer (the last try's result of each) are returned for the quarantine."""
    rows = read_json_lines(ctx.spark, folder, spool.SCHEMA)
    rows = rows.cache()
    answered = rows.filter("answered").drop("answered").dropDuplicates(["call_id"])
    columns = [c.split()[0] for c in catalog.table("predict.model_calls").schema.split(", ")]
    answered = answered.select(*columns)
    path = _calls_path(work)
    if table_exists(ctx.spark, path):
        ctx.merge(CALLS, path, answered, "t.call_id = s.call_id", insert_all=True)
    elif answered.limit(1).count():
        ctx.write(CALLS, answered, path, "answers of chat-completions endpoints", table="predict.model_calls")
    failed = rows.join(answered.select("call_id"), "call_id", "left_anti")
    failed = failed.groupBy("call_id").agg(F.max_by(F.struct("status", "detail"), "tries").alias("last")).cache()
    failed.count()
    rows.unpersist()
    return failed


def _prompt_choices(benchmark, opts: PredictOptions) -> dict:
    """The benchmark's options that shape its prompts (its ``prompt_choices``; none declared: none)."""
    return getattr(benchmark, "prompt_choices", lambda _: {})(opts)


def _quarantined_example(ctx: JobContext, reason: str) -> str | None:
    """The detail of one quarantined item with ``reason`` (the first by item id), for the failure message."""
    if QUARANTINE not in ctx.summary.outputs:
        return None
    rows = ctx.written(QUARANTINE).where(F.col("reason") == reason).orderBy("item_id").select("detail").take(1)
    return rows[0]["detail"] if rows else None


def _recover(ctx: JobContext, work: _Work) -> int:
    """Spools of earlier runs that ended before folding them (killed) folded into ``model_calls``."""
    root = Path(work.spool_dir)
    left = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    for folder in left:
        if any(folder.glob("*.jsonl")):
            _fold(ctx, work, str(folder)).unpersist()
        delete_path(ctx.spark, str(folder))
    return len(left)


def _ask(ctx: JobContext, work: _Work, prompts: DataFrame, prefix: str = "") -> DataFrame | None:
    """Ask the prompts ``model_calls`` has no answer for, from ``work.tasks`` tasks, counted in the summary
    under ``prefix`` (``judge_``: the judge's round); the calls left unanswered (``call_id, last``) or None
    when nothing was asked."""
    summary = ctx.summary
    path = _calls_path(work)
    distinct = prompts.select("call_id", "body", "prompt_sha256").dropDuplicates(["call_id"])
    if table_exists(ctx.spark, path):
        distinct = distinct.join(ctx.read(CALLS, path).select("call_id"), "call_id", "left_anti")
    pending = distinct.repartition(work.tasks, "call_id").sortWithinPartitions("call_id")
    pending = pending.withColumns({"model": F.lit(work.model), "params": F.lit(canonical(work.params))}).cache()
    n_pending = pending.count()
    summary.counts[f"{prefix}asked"] = n_pending
    for key in ("requests", "retries", "prompt_tokens", "completion_tokens", "skipped", "rate_limit_wait_s"):
        summary.counts[prefix + key] = 0
    if n_pending == 0:
        pending.unpersist()
        return None
    folder = f"{work.spool_dir}/{uuid.uuid4().hex}"
    Path(folder).mkdir(parents=True, exist_ok=True)
    key = os.environ.get(work.endpoint.api_key_env) if work.endpoint.api_key_env else None
    task = partial(_ask_task, endpoint=work.endpoint, folder=folder, api_key=spool.Secret(key) if key else None)
    stats = pending.rdd.mapPartitionsWithIndex(task).collect()
    pending.unpersist()
    for key in ("requests", "retries", "prompt_tokens", "completion_tokens", "skipped"):
        summary.counts[prefix + key] = sum(int(s.get(key) or 0) for s in stats)
    summary.counts[f"{prefix}rate_limit_wait_s"] = round(sum(float(s.get("waited_s") or 0) for s in stats), 3)
    failed = _fold(ctx, work, folder)  # cached and counted: the spool folder goes next
    delete_path(ctx.spark, folder)
    return failed


def _ask_task(partition: int, rows, *, endpoint: EndpointConfig, folder: str, api_key: spool.Secret | None):
    """One task's share of the pending prompts (runs on an executor)."""
    attempt = TaskContext.get().attemptNumber() if TaskContext.get() else 0
    rows = (r.asDict() for r in rows)
    return spool.ask_partition(partition, rows, endpoint=endpoint, folder=folder, attempt=attempt, api_key=api_key)


def _calls(ctx: JobContext, work: _Work) -> DataFrame | None:
    """``model_calls`` as this run left it: the version it wrote, else the one it read, else None."""
    if CALLS in ctx.summary.outputs:
        return ctx.written(CALLS)
    path = _calls_path(work)
    return ctx.read(CALLS, path) if table_exists(ctx.spark, path) else None


def _usage(ctx: JobContext, work: _Work, prompts: DataFrame, prefix: str = "") -> None:
    """Token sums over the answers this run's prompts use (``answer_*``; ``judge_answer_*`` for the judge's
    round), and their cost at the price settings (``cost.answers``, ``cost.this_run``: what this run asked;
    ``cost.judge_*`` at the judge's prices)."""
    calls = _calls(ctx, work)
    if calls is None:
        return
    used = prompts.select("call_id").distinct().join(calls, "call_id")
    row = used.agg(F.sum("prompt_tokens").alias("p"), F.sum("completion_tokens").alias("c")).first()
    p_tokens, c_tokens = int(row["p"] or 0), int(row["c"] or 0)
    counts = ctx.summary.counts
    counts.update({f"{prefix}answer_prompt_tokens": p_tokens, f"{prefix}answer_completion_tokens": c_tokens})
    settings = ctx.config.predict
    prompt_price, completion_price = settings.price_prompt_per_million, settings.price_completion_per_million
    if prefix:
        prompt_price = coalesce(settings.judge_price_prompt_per_million, prompt_price)
        completion_price = coalesce(settings.judge_price_completion_per_million, completion_price)
    if prompt_price is not None or completion_price is not None:

        def cost(prompt_tokens: int, completion_tokens: int) -> float:
            paid = prompt_tokens * float(prompt_price or 0) + completion_tokens * float(completion_price or 0)
            return round(paid / 1e6, 6)

        asked = cost(counts.get(f"{prefix}prompt_tokens", 0), counts.get(f"{prefix}completion_tokens", 0))
        ctx.summary.results.extend(
            [
                {"metric": f"cost.{prefix}answers", "value": cost(p_tokens, c_tokens)},
                {"metric": f"cost.{prefix}this_run", "value": asked},
            ]
        )


def coalesce(*values):
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


@job(
    "predict",
    "a benchmark's prompts to an OpenAI-compatible endpoint, answers kept, parsed and scored",
    PredictOptions,
    steps=5,
)
def run(ctx: JobContext, opts: PredictOptions) -> JobSummary:
    work = _open(ctx, opts)
    try:
        return _steps(ctx, work, opts)
    finally:  # every frame a step cached, whether the job ended or failed
        for value in work.state.values():
            if isinstance(value, DataFrame):
                value.unpersist()


def _steps(ctx: JobContext, work: _Work, opts: PredictOptions) -> JobSummary:
    summary, benchmark = ctx.summary, BENCHMARKS[opts.benchmark]
    with ctx.step("prompts"):
        items = benchmark.prompts(ctx, work, opts)
        prompts = work.state["prompts"] = call_rows(items, work.model, work.params, opts.limit).cache()
        ctx.write("predict_prompts", prompts.drop("body"), work.path("predict_prompts"), table="predict.prompts")
        summary.counts.update(prompts=prompts.count(), distinct_prompts=prompts.select("call_id").distinct().count())
    with ctx.step("recover"):
        summary.counts["spools_recovered"] = _recover(ctx, work)
    with ctx.step("ask"):
        failed = work.state["failed"] = _ask(ctx, work, prompts)
    _usage(ctx, work, prompts)
    with ctx.step("parse"):
        calls = _calls(ctx, work)
        bad = benchmark.parse_and_write(ctx, work, prompts, calls, failed, opts)
        total = summary.counts["prompts"]
        fail_past_bad_fraction(
            summary,
            bad,
            total,
            float(ctx.config.predict.max_bad_fraction),
            "predict.max_bad_fraction",
            "prompts",
            f"see {work.path(QUARANTINE)}",
            example=partial(_quarantined_example, ctx),
        )
    if opts.score:
        with ctx.step("score"):
            benchmark.score(ctx, work, opts)
        _record_results(ctx, work, opts)
    return summary


_COLUMNS = ("metric", "value", "model", "run")  # a result's keys the results table has columns for


def _record_results(ctx: JobContext, work: _Work, opts: PredictOptions) -> None:
    """The run's scores into ``<dataset>/predict/results`` (replacing an earlier run with its fingerprint):
    what a release's results config carries."""
    judge = ctx.summary.params.get("judge_model")
    # the options that make runs of one setting differ, as labels (the neighbourhood's KG is in the setting)
    options = {k: v for k, v in _prompt_choices(BENCHMARKS[work.benchmark], opts).items() if k != "kg"}
    options.update({k: getattr(opts, k) for k in ("template", "limit") if getattr(opts, k) is not None})
    rows = [
        (
            work.benchmark,
            work.name,
            work.model,
            judge,
            opts.run_name,
            f"{opts.context}/{opts.kg}" if opts.context == "neighbourhood" else opts.context,
            work.fingerprint,
            str(result["metric"]),
            None if result.get("value") is None else float(result["value"]),
            canonical({**options, **{k: v for k, v in result.items() if k not in _COLUMNS and v is not None}}),
            work.out,
        )
        for result in ctx.summary.results
        if isinstance(result.get("value"), (int, float, type(None)))
        and "metric" in result
        and not str(result["metric"]).startswith("cost.")  # the run's bill, not a score
    ]
    if not rows:
        return
    table = catalog.table("predict.results")
    frame = ctx.spark.createDataFrame(rows, table.schema)
    path = table.path(dataset=work.dataset)
    ctx.replace_where("results", frame, path, f"fingerprint = '{work.fingerprint}'", "a model's scores per run")
