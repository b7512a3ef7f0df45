"""SynthKGQA's evaluation (paper 002): questions written from a seed-graphs set (A.1,
:mod:`kgbrink.evaluation.synthkgqa`), parsed, then validated by ``gt-questions``."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import publish
from kgbrink.core.files import write_single_file
from kgbrink.core.jobs import JobContext
from kgbrink.core.settings import ConfigError, is_uri
from kgbrink.core.tracking import JobFailed
from kgbrink.evaluation import synthkgqa
from kgbrink.jobs.evaluations.protocol import Evaluation, Run, parse_failures, write_quarantine
from kgbrink.synthkgqa.seeds import prompt_records


class SynthKGQA(Evaluation):
    name = "synthkgqa"
    inputs = (("seed_graphs", "synthkgqa.seed_graphs"), ("entities", "entities"), ("relations", "relations"))
    templates = {"none": ("synthkgqa-write@1",)}
    fingerprint_settings = ("seed_graphs.prompt_edges",)

    def default_name(self, config) -> str:
        return "seeds"  # seed-graphs' default --name

    def release_sources(self, ctx: JobContext, release, opts) -> dict[str, DataFrame]:
        raise ConfigError("synthkgqa needs a dataset: gt-questions validates the written questions on its KG")

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        sources, k = run.sources, ctx.config.seed_graphs.prompt_edges
        run.records = run.keep(prompt_records(sources["seed_graphs"], sources["entities"], sources["relations"], k))
        return synthkgqa.prompts(run.records, run.template)

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        parsed = run.keep(synthkgqa.written(answers.select("item_id", "content"), run.records))
        bad = parsed.filter(F.col("reason").isNotNull()).join(answers.select("item_id", "call_id"), "item_id")
        target = Path(run.files) / "written.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = synthkgqa.gt_records(parsed, run.model).orderBy("sample_id")
        write_single_file(lines, target, "json", f"{run.out}/_staging_written")
        ctx.summary.counts["written"] = parsed.filter(F.col("reason").isNull()).count()
        ctx.summary.artifacts.append(str(target))
        run.written = str(target)
        if is_uri(run.out):  # gt-questions reads it on the executors: a copy beside the tables
            run.written = f"{run.out}/written.jsonl"
            publish.copy_file(ctx.spark, str(target), run.written)
        return write_quarantine(ctx, run, quarantine.unionByName(parse_failures(bad)))

    def score(self, ctx: JobContext, run: Run, opts) -> None:
        if not ctx.summary.counts["written"]:
            raise JobFailed("no written question parsed: nothing for gt-questions", ctx.summary)
        # one set per run setting: two settings of one model never overwrite each other's questions
        questions = ctx.summary.params["questions_set"] = f"{run.name}-{_slug(run.model)}-{run.fingerprint[:8]}"
        summary = ctx.run("gt-questions", input=run.written, dataset=run.dataset, name=questions, answers=True)
        ctx.summary.counts.update(
            {f"gt_{k}": v for k, v in summary.counts.items() if isinstance(v, int) and not isinstance(v, bool)}
        )
        ctx.summary.extra["gt_questions"] = {k: v.as_dict() for k, v in summary.outputs.items()}
        ctx.summary.artifacts.extend(summary.artifacts)


def _slug(text: str) -> str:
    """A model name as a plain folder name: characters other than letters, digits, ``.``, ``_`` and ``-``
    replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).lstrip(".") or "model"
