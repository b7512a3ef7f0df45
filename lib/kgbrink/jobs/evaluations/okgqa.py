"""OKGQA-P's evaluation (paper 004): a question set's subgraphs at each perturbation level as knowledge
(:mod:`kgbrink.evaluation.okgqa`), the answers judged by G-Eval through the same model-call step, scores per
level beside the KG similarity (Fig. 5), with a report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.files import read_lines, require_files
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import fail_past_bad_fraction
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation import okgqa, okgqa_safe, releases
from kgbrink.evaluation.calls import call_rows
from kgbrink.jobs.evaluations import model_calls
from kgbrink.jobs.evaluations.inputs import ReleaseInput
from kgbrink.jobs.evaluations.protocol import (
    QUARANTINE,
    Evaluation,
    Role,
    Run,
    checked_lines,
    judge_params,
    split_answers,
    unparsed,
    without_input_lines,
    write_quarantine,
)
from kgbrink.okgqa import report as okgqa_report
from kgbrink.okgqa import retrieval, safe


class OKGQA(Evaluation):
    name = "okgqa"
    inputs = (
        ("perturbed", "okgqa.perturbed"),
        ("perturbations", "okgqa.perturbations"),
        ("entities", "entities"),
        ("relations", "relations"),
    )
    optional = (("kg_similarity", "okgqa.kg_similarity"),)
    # cot: the zero-shot baseline with "Let's think step by step."; cot_sc: predict.sc_samples of it at
    # predict.sc_temperature, then one call selecting the commonest answer (spec 5.1 [P])
    templates = {
        "subgraph": ("okgqa-answer@1",),
        okgqa.NO_CONTEXT: ("okgqa-baseline@1",),
        "cot": ("okgqa-baseline@1",),
        "cot_sc": ("okgqa-sc-select@1",),
        # FS-T, FS-P and FS-SG (spec 5.1): the subgraph's triples, paths or PCST retrieved by embeddings
        "triplets": ("okgqa-answer@1",),
        "paths": ("okgqa-answer@1",),
        "pcst": ("okgqa-answer@1",),
    }
    fingerprint_settings = (
        "predict.max_facts",
        "predict.criteria",
        "predict.factscore",
        "predict.factscore_gamma",
        "predict.max_atomic_facts",
        "predict.sc_samples",
        "predict.sc_temperature",
        "predict.embedding_model",
        "predict.retrieval_k",
        "predict.path_max_edges",
        "predict.max_paths",
        "predict.safe",
        "predict.safe_max_steps",
        "predict.safe_results",
        "predict.safe_search",
    )
    judge = "okgqa-geval@1"

    def default_name(self, config) -> str:
        raise ConfigError("--name is required with --benchmark okgqa: the question set of okgqa-subgraphs")

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        """The release's question set (``release --okgqa-questions``): its perturbed subgraphs read back by
        the dataset's ids, their perturbations and similarity, the dictionaries."""
        if not releases.has_config(release.manifest, "okgqa_questions_perturbed"):
            raise ConfigError(
                f"{release.where}: the release has no OKGQA question set (kgbrink release --okgqa-questions)"
            )
        entities, relations = release.dictionaries(ctx)
        keys = {"entity_columns": ("h", "t"), "relation_columns": ("r",), "where": release.where}
        perturbed = releases.by_id(
            release.read(ctx, "okgqa_questions_perturbed").drop("split"), entities, relations, **keys
        )
        sources = {
            "perturbed": perturbed,
            "perturbations": release.read(ctx, "okgqa_questions_perturbations").drop("split"),
            "entities": entities,
            "relations": relations,
        }
        if releases.has_config(release.manifest, "okgqa_questions_similarity"):
            sources["kg_similarity"] = release.read(ctx, "okgqa_questions_similarity").drop("split")
        return sources

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        if not opts.questions and run.release:  # the question texts the release carries
            opts = replace(opts, questions=ReleaseInput.open(ctx, run.release).jsonl("okgqa_questions")[0])
        if not opts.questions:
            raise ConfigError('--questions is required with --benchmark okgqa: JSON Lines {"qid", "question"}')
        if ctx.config.predict.safe:
            try:  # before anything is asked: a search that cannot be imported
                safe.resolve_search(ctx.config.predict.safe_search)
            except ValueError as error:
                raise ConfigError(str(error)) from error
        perturbed = run.sources["perturbed"]
        texts = question_texts(ctx, run, opts.questions, perturbed.select(F.col("scope_key").alias("qid")))
        with_graph = opts.context == "subgraph" or opts.context in retrieval.CONTEXTS
        graphs = okgqa.level_graphs(perturbed, run.sources["perturbations"]) if with_graph else None
        sources = run.sources
        retrieved = None
        if opts.context in retrieval.CONTEXTS:
            retrieved, texts = self._retrieve(ctx, run, graphs, texts, opts.context)
        records = okgqa.records(
            graphs, texts, sources["entities"], sources["relations"], ctx.config.predict.max_facts, retrieved
        )
        run.records = ctx.persist(records)
        if opts.context == "cot_sc":
            return self._self_consistency(ctx, run, opts.limit)
        # no --template: each record's own (a question whose subgraph is empty gets the zero-shot baseline)
        return okgqa.prompts(run.records, run.template if opts.template else None, cot=opts.context == "cot")

    def _retrieve(
        self, ctx: JobContext, run: Run, graphs: DataFrame, texts: DataFrame, context: str
    ) -> tuple[DataFrame, DataFrame]:
        """FS-T, FS-P and FS-SG's retrieval (spec 5.1): the questions and their graphs' node and relation names
        embedded by ``predict.embedding_model`` at the answering endpoint's ``/embeddings`` (one text per
        request, kept in ``model_calls`` as every answer is), then each graph's triplets, paths or PCST
        (:func:`kgbrink.evaluation.okgqa.retrieved_facts`). A text without a vector is quarantined (stage
        ``embed_call``): a question without one is not asked, a node or relation without one gets no prize.
        Returns the facts and the question texts that have a vector."""
        settings, sources = ctx.config.predict, run.sources
        # lineage cut at each frame used more than once: the question texts' parsing would be planned anew in
        # every use, and the plans of the joins below grew past the driver's memory
        texts = checkpoint(texts)
        asked = graphs.join(texts.select("qid"), "qid")
        named = checkpoint(okgqa.named_triples(asked, sources["entities"], sources["relations"]))
        endpoint = replace(run.answering.endpoint, api="embeddings")
        role = Role("embed", settings.embedding_model, {"encoding_format": "float"}, endpoint)
        items = okgqa.embedding_items(named, texts)
        calls = ctx.persist(call_rows(items, role.model, role.params, field="input"))
        ctx.summary.counts["embed_texts"] = calls.count()
        failed = model_calls.ask_and_count(ctx, run, role, calls)
        answered, bad = split_answers(calls, model_calls.calls(ctx, run), failed)
        bad = ctx.persist(bad.withColumn("stage", F.concat(F.lit("embed_"), F.col("stage"))))
        by_reason = {r["reason"]: int(r["count"]) for r in bad.groupBy("reason").count().collect()}
        ctx.summary.counts["embed_failed"] = sum(by_reason.values())
        fail_past_bad_fraction(
            ctx.summary,
            by_reason,
            ctx.summary.counts["embed_texts"],
            float(settings.max_bad_fraction),
            "predict.max_bad_fraction",
            "texts to embed",
            f"see {run.path(QUARANTINE)}",
        )
        run.texts.quarantine = ctx.persist(run.texts.quarantine.unionByName(bad))
        for reason, n in by_reason.items():  # weighed against the texts here, not against the prompts
            run.texts.counts[reason] = run.texts.counts.get(reason, 0) + n
        embedded = checkpoint(okgqa.vectors(answered))
        with_vector = checkpoint(texts.join(embedded.select(F.col("text").alias("question")), "question", "left_semi"))
        ctx.summary.counts["questions_without_vector"] = texts.count() - with_vector.count()
        similarity = okgqa.similarities(named, with_vector, embedded)
        k, edges, paths = int(settings.retrieval_k), int(settings.path_max_edges), int(settings.max_paths)
        return checkpoint(okgqa.retrieved_facts(named, similarity, context, k, edges, paths)), with_vector

    def _self_consistency(self, ctx: JobContext, run: Run, limit: int | None) -> DataFrame:
        """CoT + SC's first round: ``predict.sc_samples`` samples of each question's CoT prompt at
        ``predict.sc_temperature`` (the sample's index in its call key), asked here; returns the selection
        prompts over each question's sampled answers, in sample order (a question without any is
        quarantined, stage ``sample``); ``limit``: the first questions by item id, as the selections are cut."""
        settings, summary = ctx.config.predict, ctx.summary
        if limit is not None:
            run.records = ctx.persist(run.records.orderBy("item_id").limit(int(limit)))
        base = okgqa.prompts(run.records, None, cot=True)
        each = base.select(
            F.col("item_id").alias("question_item"),
            "messages",
            F.explode(F.sequence(F.lit(0), F.lit(int(settings.sc_samples) - 1))).alias("sample"),
        ).withColumn("item_id", F.to_json(F.array("question_item", F.col("sample").cast("string"))))
        params = {**judge_params("okgqa-baseline@1", settings), "temperature": float(settings.sc_temperature)}
        role = replace(run.answering, role="sample", params=params)
        items = each.select("item_id", "messages", "sample")
        calls = ctx.persist(call_rows(items, role.model, params, None, role.revision))
        summary.counts["sample_prompts"] = calls.count()
        failed = model_calls.ask_and_count(ctx, run, role, calls)
        answered, _ = split_answers(calls, model_calls.calls(ctx, run), failed)
        got = answered.join(each.select("item_id", "question_item", "sample"), "item_id")
        ordered = F.array_sort(F.collect_list(F.struct("sample", "content")))
        samples = ctx.persist(
            got.groupBy(F.col("question_item").alias("item_id")).agg(
                F.transform(ordered, lambda x: x["content"]).alias("answers")
            )
        )
        none = run.records.select("item_id").join(samples.select("item_id"), "item_id", "left_anti")
        unsampled = none.select(
            "item_id",
            F.lit(None).cast("string").alias("call_id"),
            F.lit("sample").alias("stage"),
            F.lit("no_sample").alias("reason"),
            F.lit("no sampled answer to select from").alias("detail"),
        )
        run.texts.quarantine = ctx.persist(run.texts.quarantine.unionByName(unsampled))
        summary.counts["questions_without_samples"] = none.count()
        return okgqa.sc_prompts(run.records, samples)

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        parsed = okgqa.answers(answers.select("item_id", "content"))
        n_facts = F.when(F.col("facts").isNull(), 0).otherwise(F.size("facts")).alias("n_facts")
        columns = ("item_id", "qid", "method", "seed", "level", "n_triples", n_facts, "answer", "abstained")
        labels = (F.lit(run.model).alias("model"), F.lit(opts.run_name).alias("run"))
        table = run.records.join(parsed, "item_id").select(*columns, *labels)
        ctx.write("okgqa_answers", table, run.path("okgqa_answers"), table="predict.okgqa_answers")
        row = ctx.written("okgqa_answers").agg(F.count("*"), F.sum(F.col("abstained").cast("int"))).first()
        ctx.summary.counts.update(answers=int(row[0]), abstained=int(row[1] or 0))
        by_reason = write_quarantine(ctx, run, quarantine.unionByName(run.texts.quarantine))
        return without_input_lines(by_reason, run)

    def score(self, ctx: JobContext, run: Run, opts) -> None:
        settings, summary = ctx.config.predict, ctx.summary
        judge = run.judge
        answers = ctx.written("okgqa_answers")
        judged, judge_bad = self._judged(ctx, run, judge, answers)
        labels = {"model": run.model, "judge_model": judge.model, "run": opts.run_name, "setting": opts.context}
        summary.params.update(judge_model=judge.model, judge_base_url=judge.endpoint.base_url)
        judgements = judged.select("answer_id", "criterion", "score")
        rows = okgqa.scores(answers, judgements, list(settings.criteria), labels)
        asked = summary.counts["judge_prompts"] + summary.counts["prompts"]
        if settings.factscore or settings.safe:
            facts, split_bad, split_asked = self._atomic_facts(ctx, run, judge, answers)
            sources = self._knowledge(ctx, run)
            asked += split_asked
            scorers = [self._factscore] if settings.factscore else []
            scorers += [self._safe] if settings.safe else []
            for scorer in scorers:
                more_rows, more_bad, more_asked = scorer(ctx, run, judge, answers, facts, sources, labels)
                rows = rows.unionByName(more_rows)
                split_bad = {k: split_bad.get(k, 0) + more_bad.get(k, 0) for k in {*split_bad, *more_bad}}
                asked += more_asked
            judge_bad = {k: judge_bad.get(k, 0) + split_bad.get(k, 0) for k in {*judge_bad, *split_bad}}
        ctx.write("okgqa_scores", rows, run.path("okgqa_scores"), table="predict.okgqa_scores")
        similarity = run.sources.get("kg_similarity")
        levels = okgqa.levels(ctx.written("okgqa_scores"), similarity, answers)
        ctx.write("okgqa_levels", levels, run.path("okgqa_levels"), table="predict.okgqa_levels")
        self._report(ctx, run, ctx.written("okgqa_levels").toPandas(), judge.model, opts.context)
        fail_past_bad_fraction(
            summary,
            judge_bad,
            asked,
            float(settings.max_bad_fraction),
            "predict.max_bad_fraction",
            "prompts and judge prompts",
            f"see {run.path(QUARANTINE)}",
        )

    def _atomic_facts(self, ctx: JobContext, run: Run, judge: Role, answers: DataFrame) -> tuple[DataFrame, dict, int]:
        """FActScore's split (spec 5.3), shared with SAFE: each answer that does not abstain split into at most
        ``predict.max_atomic_facts`` atomic facts by the judge's model; returns ``item_id, facts`` per answer,
        the bad calls by reason (quarantined, stage ``facts_*``) and the prompts asked."""
        settings, summary = ctx.config.predict, ctx.summary
        facts_role = replace(judge, role="facts", params=judge_params("okgqa-facts@1", settings))
        split = ctx.persist(
            call_rows(okgqa.fact_prompts(answers), facts_role.model, facts_role.params, revision=facts_role.revision)
        )
        summary.counts["facts_prompts"] = split.count()
        failed = model_calls.ask_and_count(ctx, run, facts_role, split)
        answered, bad = split_answers(split, model_calls.calls(ctx, run), failed)
        facts = ctx.persist(okgqa.atomic_facts(answered.select("item_id", "content"), int(settings.max_atomic_facts)))
        summary.counts["atomic_facts"] = int(facts.select(F.sum(F.size("facts"))).first()[0] or 0)
        return facts, self._quarantined(ctx, run, bad, "facts_"), summary.counts["facts_prompts"]

    def _knowledge(self, ctx: JobContext, run: Run) -> DataFrame:
        """``qid, knowledge, references, question``: the knowledge source of FActScore and SAFE, each question's
        original subgraph (level 0.0, at most ``predict.max_facts`` triples) and its references."""
        graphs = okgqa.level_graphs(run.sources["perturbed"], run.sources["perturbations"]).filter("level = 0.0")
        at_zero = okgqa.records(
            graphs, run.texts.good, run.sources["entities"], run.sources["relations"], ctx.config.predict.max_facts
        )
        return ctx.persist(okgqa.knowledge(at_zero))

    def _quarantined(self, ctx: JobContext, run: Run, bad: DataFrame, prefix: str) -> dict[str, int]:
        """``bad`` (quarantine rows) written with the run's quarantine, its stage prefixed; its count by reason."""
        bad = ctx.persist(bad.withColumn("stage", F.concat(F.lit(prefix), F.col("stage"))))
        write_quarantine(ctx, run, bad.unionByName(ctx.written(QUARANTINE)))
        return {r["reason"]: int(r["count"]) for r in bad.groupBy("reason").count().collect()}

    def _factscore(
        self, ctx: JobContext, run: Run, judge: Role, answers: DataFrame, facts: DataFrame, sources, labels: dict
    ) -> tuple[DataFrame, dict, int]:
        """FActScore (spec 5.3) by the judge's model and endpoint: each atomic fact verified against its
        question's knowledge source; returns the ``factscore`` rows of ``okgqa_scores``, the bad calls by
        reason (quarantined) and the prompts asked."""
        settings, summary = ctx.config.predict, ctx.summary
        verify_role = replace(judge, role="verify", params=judge_params("okgqa-verify@1", settings))
        items = ctx.persist(okgqa.verify_prompts(facts, answers.select("item_id", "qid"), sources))
        check = ctx.persist(
            call_rows(
                items.select("item_id", "messages"), verify_role.model, verify_role.params, revision=judge.revision
            )
        )
        summary.counts["verify_prompts"] = check.count()
        failed = model_calls.ask_and_count(ctx, run, verify_role, check)
        verified, bad = split_answers(check, model_calls.calls(ctx, run), failed)
        verdicts = okgqa.verdicts(verified.select("item_id", "content")).join(
            items.select("item_id", "answer_id"), "item_id"
        )
        summary.counts["supported_facts"] = verdicts.filter("supported").count()
        rows = okgqa.factscore_rows(answers, verdicts, settings.factscore_gamma, labels)
        return rows, self._quarantined(ctx, run, bad, "verify_"), summary.counts["verify_prompts"]

    def _safe(
        self, ctx: JobContext, run: Run, judge: Role, answers: DataFrame, facts: DataFrame, sources, labels: dict
    ) -> tuple[DataFrame, dict, int]:
        """SAFE (spec 5.3; :mod:`kgbrink.okgqa.safe`) by the judge's model and endpoint: up to
        ``predict.safe_max_steps`` search rounds for the facts still searching, each query answered by
        ``predict.safe_search`` over the question's knowledge source, then one final rating per fact; returns
        the ``safe`` rows, the bad calls and unrated facts by reason (quarantined) and the prompts asked."""
        settings, summary = ctx.config.predict, ctx.summary
        search_params = judge_params("okgqa-safe-search@1", settings)
        final_role = replace(judge, role="safe_final", params=judge_params("okgqa-safe-final@1", settings))
        state = ctx.persist(okgqa_safe.facts_state(facts, answers.select("item_id", "qid"), sources))
        search_bad, asked = None, 0
        for step in range(int(settings.safe_max_steps)):
            # a role per round: each round's requests, tokens and cost are counted apart
            search_role = replace(judge, role=f"safe_search_{step + 1}", params=search_params)
            prompts = ctx.persist(
                call_rows(
                    okgqa_safe.search_prompts(state), search_role.model, search_role.params, revision=judge.revision
                )
            )
            n_prompts = prompts.count()
            if n_prompts == 0:
                break
            asked += n_prompts
            failed = model_calls.ask_and_count(ctx, run, search_role, prompts)
            answered, round_bad = split_answers(prompts, model_calls.calls(ctx, run), failed)
            search_bad = round_bad if search_bad is None else search_bad.unionByName(round_bad)
            state = ctx.persist(
                checkpoint(okgqa_safe.searched(state, answered, settings.safe_search, int(settings.safe_results)))
            )
            summary.counts[f"safe_searching_after_{step + 1}"] = state.filter("searching").count()
        summary.counts["safe_search_prompts"] = asked
        items = ctx.persist(okgqa_safe.final_prompts(state))
        final = ctx.persist(
            call_rows(items.select("item_id", "messages"), final_role.model, final_role.params, revision=judge.revision)
        )
        summary.counts["safe_final_prompts"] = final.count()
        failed = model_calls.ask_and_count(ctx, run, final_role, final)
        rated, final_bad = split_answers(final, model_calls.calls(ctx, run), failed)
        verdicts = ctx.persist(okgqa_safe.verdicts(rated.select("item_id", "content")))
        final_bad = final_bad.unionByName(
            unparsed(verdicts, final, "supported", "no_verdict", "no [Supported] or [Not Supported]")
        )
        supported = verdicts.filter(F.col("supported").isNotNull()).join(
            items.select("item_id", "answer_id"), "item_id"
        )
        summary.counts["safe_supported"] = supported.filter("supported").count()
        bad = final_bad.withColumn("stage", F.concat(F.lit("final_"), "stage"))
        if search_bad is not None:
            bad = bad.unionByName(search_bad.withColumn("stage", F.concat(F.lit("search_"), "stage")))
        by_reason = self._quarantined(ctx, run, bad, "safe_")
        rows = okgqa_safe.safe_rows(answers, supported, labels)
        return rows, by_reason, asked + summary.counts["safe_final_prompts"]

    def _judged(self, ctx: JobContext, run: Run, judge: Role, answers: DataFrame) -> tuple[DataFrame, dict]:
        """The judge asked about every answer and criterion; returns its parsed ``score`` per ``answer_id,
        criterion`` and the judge's bad calls and unparsed judgements per reason (quarantined with the
        answers')."""
        settings, summary = ctx.config.predict, ctx.summary
        texts = run.records.select("item_id", "question", "references")
        items = ctx.persist(okgqa.judge_prompts(answers.join(texts, "item_id"), list(settings.criteria)))
        prompts = ctx.persist(
            call_rows(items.select("item_id", "messages"), judge.model, judge.params, revision=judge.revision)
        )
        ctx.write("judge_prompts", prompts.drop("body"), run.path("judge_prompts"), table="predict.judge_prompts")
        summary.counts["judge_prompts"] = prompts.count()
        failed = model_calls.ask_and_count(ctx, run, judge, prompts)
        answered, bad_calls = split_answers(prompts, model_calls.calls(ctx, run), failed)
        judged = ctx.persist(
            okgqa.judged(answered.select("item_id", "content")).join(items.drop("messages"), "item_id")
        )
        unscored = unparsed(judged, prompts, "score", "no_score", "no 'Score: n' line with 0 <= n <= 10")
        bad = bad_calls.unionByName(unscored).withColumn("stage", F.concat(F.lit("judge_"), F.col("stage")))
        if QUARANTINE in summary.outputs:
            bad = bad.unionByName(ctx.written(QUARANTINE))
        return judged, without_input_lines(write_quarantine(ctx, run, bad), run)

    def _report(self, ctx: JobContext, run: Run, table: pd.DataFrame, judge_model: str, setting: str) -> None:
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
        folder = Path(run.files) / "report"
        heading = f"OKGQA-P: {run.model} judged by {judge_model} (setting {setting})"
        ctx.summary.artifacts.append(str(okgqa_report.answers_figure(table, folder / "answers.png", heading)))
        (folder / "report.md").write_text(okgqa_report.answers_markdown(table, heading) + "\n![answers](answers.png)\n")
        ctx.summary.artifacts.append(str(folder / "report.md"))


def question_texts(ctx: JobContext, run: Run, path: str, qids: DataFrame) -> DataFrame:
    """The good question texts (``qid, question, references``) of the questions in ``qids``
    (:func:`protocol.checked_lines`: a text of another question is ``unknown_qid``)."""
    require_files(ctx.spark, [path])
    parsed = ctx.persist(okgqa.question_texts(read_lines(ctx.spark, {"questions": [path]})))
    unknown = ("unknown_qid", "no subgraph of this qid in the set")
    good = checked_lines(
        ctx, run, path, parsed, qids, "qid", ("question", "references"), "questions", unknown, "question lines"
    )
    n_good, n_set = good.count(), qids.distinct().count()
    ctx.summary.counts.update(question_texts=n_good, questions_without_text=n_set - n_good)
    return good
