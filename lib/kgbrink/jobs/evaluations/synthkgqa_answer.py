"""SynthKGQA answering (paper 002 §4, Table 2; spec 3.4-3.5): a question set's questions asked with a context's
triples (:mod:`kgbrink.evaluation.synthkgqa_answers`), each answer scored by EM against the answers' labels
and the context by its ground-truth triples and answer nodes, averaged per isomorphism type and hop count."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core.files import read_lines, require_files
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import JobFailed
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation import releases, synthkgqa_answers
from kgbrink.jobs.evaluations.protocol import Evaluation, Run, checked_lines, without_input_lines, write_quarantine

READER = ("synthkgqa-answer@1",)
TABLES = {
    "sp": ("sp_triples", "synthkgqa.sp_triples"),
    "question_graph": ("question_graphs", "synthkgqa.question_graphs"),
}
RELEASED = {"sp": "synthkgqa_sp_triples", "question_graph": "synthkgqa_question_graphs"}


class SynthKGQAAnswer(Evaluation):
    name = "synthkgqa-answer"
    released_as = "synthkgqa"
    inputs = (("questions", "synthkgqa.gt_questions"), ("entities", "entities"), ("relations", "relations"))
    templates = {
        "gt": READER,
        "full_gt": READER,
        "sp": READER,
        "question_graph": READER,
        "retrieved": READER,
        "none": ("synthkgqa-io@1",),
    }
    fingerprint_settings = ("predict.max_facts",)

    def option_inputs(self, opts) -> tuple:
        """The table a context reads: ``sp`` the set's shortest-path triples, ``question_graph`` its graphs."""
        return (TABLES[opts.context],) if opts.context in TABLES else ()

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        """The release's question set (``synthkgqa_questions`` by key, read back by the dataset's ids:
        :func:`kgbrink.evaluation.releases.gt_questions`), its dictionaries and the table the context reads."""
        entities, relations = release.dictionaries(ctx)
        questions = releases.gt_questions(release.read(ctx, "synthkgqa_questions"), entities, relations, release.where)
        sources = {"questions": questions, "entities": entities, "relations": relations}
        if opts.context in RELEASED:
            table = release.read(ctx, RELEASED[opts.context])
            keys = {"entity_columns": ("h", "t"), "relation_columns": ("r",), "where": release.where}
            sources[TABLES[opts.context][0]] = releases.by_id(table, entities, relations, **keys)
        return sources

    def labels(self, opts) -> dict:
        return {"split": opts.split} if opts.split != "all" else {}

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        questions = run.sources["questions"]
        if opts.split != "all":  # a question without a split (a planted set) is in every split
            questions = questions.filter((F.col("split") == opts.split) | F.col("split").isNull())
        counts = questions.agg(F.count("*"), F.count(F.when(F.trim("question") != "", 1))).first()
        ctx.summary.counts.update(questions=int(counts[0]), questions_without_text=int(counts[0] - counts[1]))
        if not counts[1]:
            raise JobFailed(
                f"no question of set {run.name} (split {opts.split}) has a text: give gt-questions --input records "
                "with 'question' (predict --benchmark synthkgqa writes them)",
                ctx.summary,
            )
        retrieved = None
        if opts.context == "retrieved":
            if not opts.retrieved:
                raise ConfigError('--retrieved is required with --context retrieved: JSON Lines {"id", "triples"}')
            retrieved = _retrieved(ctx, run, opts.retrieved, questions.select("id"))
        table = run.sources.get(TABLES.get(opts.context, ("",))[0])
        shown = synthkgqa_answers.context_triples(questions, opts.context, table, ctx.config.predict.max_facts)
        records = synthkgqa_answers.records(
            questions, run.sources["entities"], run.sources["relations"], shown, retrieved
        )
        run.records = ctx.persist(records)
        return synthkgqa_answers.prompts(run.records, run.template, opts.context)

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        scored = synthkgqa_answers.scores(answers, run.records).withColumns(
            {"context": F.lit(opts.context), "model": F.lit(run.model), "run": F.lit(opts.run_name)}
        )
        ctx.write("synthkgqa_answers", scored, run.path("synthkgqa_answers"), table="predict.synthkgqa_answers")
        ctx.summary.counts["answers"] = ctx.written("synthkgqa_answers").count()
        extra = run.texts.quarantine if run.texts else None
        by_reason = write_quarantine(ctx, run, quarantine if extra is None else quarantine.unionByName(extra))
        return without_input_lines(by_reason, run)

    def score(self, ctx: JobContext, run: Run, opts) -> None:
        labels = {"context": F.lit(opts.context), "model": F.lit(run.model), "run": F.lit(opts.run_name)}
        table = synthkgqa_answers.groups(ctx.written("synthkgqa_answers")).withColumns(labels)
        ctx.write("synthkgqa_groups", table, run.path("synthkgqa_groups"), table="predict.synthkgqa_groups")
        rows = ctx.written("synthkgqa_groups").orderBy("group_by", "group", "metric").collect()
        for row in rows:
            result = {"metric": row["metric"], "value": None if row["value"] is None else round(row["value"], 6)}
            if row["group_by"] != "all":
                result[row["group_by"]] = row["group"]
            ctx.summary.results.append(result)
        overall = {r["metric"]: r["value"] for r in rows if r["group_by"] == "all"}
        if overall:
            ctx.summary.highlights["em_hits"] = f"{100 * overall['em_hits']:.2f}% EM Hits, {opts.context} context"


def _retrieved(ctx: JobContext, run: Run, path: str, asked: DataFrame) -> DataFrame:
    """A retriever's good lines (``id, triples``) of the questions asked (:func:`protocol.checked_lines`: a
    line of another question is ``unknown_id``)."""
    require_files(ctx.spark, [path])
    parsed = ctx.persist(synthkgqa_answers.retrieved_lines(read_lines(ctx.spark, {"retrieved": [path]})))
    unknown = ("unknown_id", "no question of this id in the set")
    good = checked_lines(ctx, run, path, parsed, asked, "id", ("triples",), "retrieved", unknown, "retrieved lines")
    ctx.summary.counts.update(retrieved_lines=good.count())
    return good
