"""SynthKGQA's evaluation (paper 002): questions written from a seed-graphs set (A.1,
:mod:`kgbrink.evaluation.synthkgqa`), parsed, then validated by ``gt-questions`` on the dataset's KG (with
``--release``: the release's KG, written as a dataset under the run's folder)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog, publish
from kgbrink.core.files import write_single_file
from kgbrink.core.jobs import JobContext
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobFailed
from kgbrink.evaluation import releases, synthkgqa
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
        """The release's seed-graph prompt records (``synthkgqa_seed_graphs``, built with the release's
        ``seed_graphs.prompt_edges``) and its KG by the dataset's ids, on which gt-questions validates."""
        entities, relations = release.dictionaries(ctx)
        keys = {"entity_columns": ("h", "t"), "relation_columns": ("r",), "where": release.where}
        triples = releases.by_id(release.read(ctx, "kg_triples"), entities, relations, **keys)
        records = release.read(ctx, "synthkgqa_seed_graphs").select(*synthkgqa.RECORD_FIELDS)
        return {"records": records, "entities": entities, "relations": relations, "triples": triples}

    def prompts(self, ctx: JobContext, run: Run, opts) -> DataFrame:
        sources, k = run.sources, ctx.config.seed_graphs.prompt_edges
        if run.release:
            run.records = ctx.persist(sources["records"])
        else:
            run.records = ctx.persist(
                prompt_records(sources["seed_graphs"], sources["entities"], sources["relations"], k)
            )
        return synthkgqa.prompts(run.records, run.template)

    def _release_kg(self, ctx: JobContext, run: Run) -> str:
        """The release's KG written as a dataset (``entities``, ``relations``, ``triples`` with the dataset's
        ids) under the run's folder, for gt-questions; its folder."""
        kg = f"{run.out}/kg"
        for table in ("entities", "relations", "triples"):
            frame = run.sources[table]
            columns = ("h", "r", "t", "split") if table == "triples" else ("id", "key", "label")
            ctx.write(f"release_{table}", frame.select(*columns), catalog.path(table, dataset=kg), table=table)
        return kg

    def parse(self, ctx: JobContext, run: Run, answers: DataFrame, quarantine: DataFrame, opts) -> dict[str, int]:
        parsed = ctx.persist(synthkgqa.written(answers.select("item_id", "content"), run.records))
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
        dataset = self._release_kg(ctx, run) if run.release else run.dataset
        summary = ctx.run("gt-questions", input=run.written, dataset=dataset, name=questions, answers=True)
        ctx.summary.counts.update(
            {f"gt_{k}": v for k, v in summary.counts.items() if isinstance(v, int) and not isinstance(v, bool)}
        )
        ctx.summary.extra["gt_questions"] = {k: v.as_dict() for k, v in summary.outputs.items()}
        ctx.summary.artifacts.extend(summary.artifacts)


def _slug(text: str) -> str:
    """A model name as a plain folder name: characters other than letters, digits, ``.``, ``_`` and ``-``
    replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).lstrip(".") or "model"
