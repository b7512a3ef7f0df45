"""``kgbrink export`` (a variant as plain files) and ``kgbrink build`` (BRINK end to end: mine, remove,
verify, questions, export, report). The exported files are listed in the data card and in docs/formats.md;
every file's bytes depend only on the tables, not on the partitioning (:func:`kgbrink.core.files.write_single_file`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.brink import questions, report
from kgbrink.core import publish
from kgbrink.core.delta import table_exists
from kgbrink.core.files import local_dir, write_single_file
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.tracking import JobSummary
from kgbrink.jobs.steps.variant_options import (
    NO_KG_FILES,
    ExportOptions,
    Variant,
    VariantOptions,
    open_variant,
    question_counts,
    variant_entity_names,
    variant_settings,
    write_question_files,
)
from kgbrink.release import reuse
from kgbrink.rules.model import RULE_TYPES, write_amie_tsv


@dataclass
class BuildOptions(VariantOptions):
    rules: str | None = arg(None, "use this rules table instead of mining")
    reuse_rules: bool = arg(False, "use the dataset's existing rules table instead of mining", action="store_true")
    out: str | None = arg(
        None,
        "local directory of the exported files and report (default: <dataset>/variants/<variant>/; "
        "required for a dataset on s3a://)",
    )
    no_kg_files: bool = arg(False, NO_KG_FILES, action="store_true")


@job("export", "a variant as plain files (TSV, AMIE3 rules, provenance, questions, data card)", ExportOptions, steps=3)
def export(ctx: JobContext, opts: ExportOptions) -> JobSummary:
    """``kgbrink export``: the variant as plain files (module docstring of :mod:`kgbrink.jobs.variant`)."""
    v = open_variant(ctx, opts)
    s, out, dataset, name = variant_settings(v), opts.out, v.dataset, v.name
    summary = ctx.begin(dataset=dataset, variant=name)
    target = local_dir(out) if out else local_dir(v.root) / "export"
    target.mkdir(parents=True, exist_ok=True)
    summary.params["out"] = str(target)
    relations = questions.relation_names(v.read("relations"))
    keys = {
        r: v.read(t).select("id", F.col("key").alias("name"))
        for r, t in (("entity", "entities"), ("relation", "relations"))
    }
    written = []
    with ctx.step("kg"):
        for table in () if opts.no_kg_files else ("complete", "incomplete", "removed"):
            # one scan and de-duplication per table, rendered by keys and, for the two KGs, by two schemes
            triples = ctx.persist(v.read(table).select("h", "r", "t").distinct())
            renderings = [(target / f"{table}.tsv", keys["entity"], keys["relation"])]
            if table != "removed":
                renderings += [
                    (target / "kg" / scheme / f"{table}.tsv", variant_entity_names(v, scheme, s["seed"]), relations)
                    for scheme in ("private_id", "text_label")
                ]
            for path, entity_names, relation_names in renderings:
                rendered = questions.render_triples(triples, entity_names, relation_names).orderBy("h", "r", "t")
                write_single_file(rendered, path, "tsv", v.staging(path.relative_to(target)))
                written.append(str(path))
            ctx.unpersist(triples)
    with ctx.step("rules_and_provenance"):
        rules = v.rules()
        write_amie_tsv(rules, target / "rules.tsv")
        written.append(str(target / "rules.tsv"))
        named = _named_provenance(v.read("provenance"), keys["entity"], keys["relation"])
        write_single_file(
            named.orderBy("triple", "rule_id", "body"),
            target / "provenance.jsonl",
            "json",
            v.staging(Path("provenance.jsonl")),
        )
        written.append(str(target / "provenance.jsonl"))
    with ctx.step("questions"):
        written.extend(write_question_files(v, v.read("questions"), s, target))
    card = target / "DATA_CARD.md"
    counts = _variant_counts(v)
    card.write_text(
        report.data_card(dataset, name, s, counts, sorted(str(Path(p).relative_to(target)) for p in written))
    )
    summary.extra["variant_counts"] = counts  # the build's report shows them too
    written.append(str(card))
    summary.counts.update(files=len(written))
    summary.artifacts.append(str(card))
    return summary


def _named_provenance(provenance: DataFrame, entities: DataFrame, relations: DataFrame) -> DataFrame:
    """``triple, rule, rule_id, body``: provenance rows with entity and relation keys."""
    e = {k: entities.select(F.col("id").alias(k), F.col("name").alias(f"{k}_key")) for k in ("eh", "et")}
    rel = relations.select(F.col("id").alias("er"), F.col("name").alias("er_key"))
    body = provenance.select("h", "r", "t", "rule_id", "sample_hash", F.posexplode("body").alias("pos", "atom")).select(
        "h",
        "r",
        "t",
        "rule_id",
        "sample_hash",
        "pos",
        F.col("atom.h").alias("eh"),
        F.col("atom.r").alias("er"),
        F.col("atom.t").alias("et"),
    )
    named_body = (
        body.join(e["eh"], "eh")
        .join(rel, "er")
        .join(e["et"], "et")
        .groupBy("h", "r", "t", "rule_id", "sample_hash")
        .agg(
            F.array_sort(F.collect_list(F.struct("pos", F.array("eh_key", "er_key", "et_key").alias("triple")))).alias(
                "atoms"
            )
        )
        .select("h", "r", "t", "rule_id", "sample_hash", F.transform("atoms", lambda a: a["triple"]).alias("body"))
    )
    heads = provenance.select("h", "r", "t", "rule_id", "rule", "sample_hash")
    heads = (
        heads.join(e["eh"].withColumnRenamed("eh", "h"), "h")
        .join(rel.withColumnRenamed("er", "r"), "r")
        .join(e["et"].withColumnRenamed("et", "t"), "t")
    )
    return heads.join(named_body, ["h", "r", "t", "rule_id", "sample_hash"]).select(
        F.array("eh_key", "er_key", "et_key").alias("triple"), "rule", "rule_id", "body"
    )


VARIANT_COUNT_TABLES = ("rules", "removed", "questions", "complete", "incomplete")


def _variant_counts(v: Variant) -> dict:
    """Table 1 / Table 3 figures of the variant: rules by type, triples and questions per split."""
    rules = v.rules()
    types = {t: 0 for t in RULE_TYPES}
    for rule in rules:
        types[rule.rule_type()] += 1
    rule_type = v.spark.createDataFrame(
        [(r.rule_id(), r.rule_type()) for r in rules] or [("", "other")], "rule_id string, rule_type string"
    )
    removed = v.read("removed")
    by_type = (
        removed.select(F.explode("rule_ids").alias("rule_id"), "h", "r", "t")
        .join(rule_type, "rule_id")
        .select("rule_type", "h", "r", "t")
        .distinct()
        .groupBy("rule_type")
        .count()
        .collect()
    )
    questions_by_split = {r["split"]: r["count"] for r in v.read("questions").groupBy("split").count().collect()}
    triples = {
        t: {r["split"]: r["count"] for r in v.read(t).groupBy("split").count().collect()}
        for t in ("complete", "incomplete")
    }
    violations = v.read("violations").count() if table_exists(v.spark, v.path("violations")) else None
    return {
        "rules_by_type": types,
        "rules": len(rules),
        "removed_triples": removed.count(),
        "removed_by_rule_type": {t: next((r["count"] for r in by_type if r["rule_type"] == t), 0) for t in RULE_TYPES},
        "triples_by_split": triples,
        "questions_by_split": {k: questions_by_split.get(k, 0) for k in questions.SPLITS},
        "violations": violations,
        "question_counts": question_counts(v),
    }


def _report(
    ctx: JobContext, v: Variant, answer_counts: dict, removal_counts: dict, out: str | None, counts: dict
) -> JobSummary:
    """The build report (Markdown + PNG plots) into ``<variant>/report`` (or ``out``), as a step summary;
    ``counts``: the variant's (:func:`_variant_counts`, as ``export`` computed them)."""
    summary = JobSummary("report", params={"dataset": v.dataset, "variant": v.name})
    own = Variant(JobContext(ctx.spark, ctx.config, summary, ctx.progress), v.dataset, v.name)
    target = local_dir(out) if out else local_dir(own.root) / "report"
    summary.artifacts.extend(
        report.write_report(target, v.dataset, v.name, variant_settings(own), counts, answer_counts, removal_counts)
    )
    summary.counts.update(counts)
    return summary


@job("build", "BRINK construction end to end: mine, remove, verify, questions, export, report", BuildOptions, steps=6)
def build(ctx: JobContext, opts: BuildOptions) -> JobSummary:
    """``kgbrink build``: mine (unless ``--rules`` is given or ``--reuse-rules``) -> remove (ground) -> verify
    -> questions -> export -> report. Plain files go to ``out`` (exported files, and the report in
    ``out/report``) or, for a local dataset, into the variant directory."""
    v = open_variant(ctx, opts)
    dataset, name, out = v.dataset, v.name, opts.out
    summary = ctx.begin(dataset=dataset, variant=name, rules=opts.rules or "mined")
    common = {"dataset": dataset, "variant": name}
    steps = []
    if opts.rules is None and not opts.reuse_rules:
        with ctx.step("mine"):
            steps.append(ctx.run("mine", dataset=dataset))
    with ctx.step("remove"):
        removed = ctx.run("remove", **common, rules=opts.rules)
    steps.append(removed)
    with ctx.step("verify"):
        steps.append(ctx.run("verify", **common))
    with ctx.step("questions"):
        q = ctx.run("questions", **common, out=out)
    steps.append(q)
    with ctx.step("export"):
        exported = ctx.run("export", **common, out=out, no_kg_files=opts.no_kg_files)
    steps.append(exported)
    with ctx.step("report"):
        report_dir = f"{out}/report" if out else None
        counts = exported.extra["variant_counts"]
        reported = _report(ctx, v, q.extra["answer_counts"], removed.counts, report_dir, counts)
        # the tables the counts come from, at the versions export read
        reported.inputs.update({k: t for k, t in exported.inputs.items() if k in VARIANT_COUNT_TABLES})
        steps.append(reported)
    summary.merge_steps(steps)
    exported = Path(out) if out else Path(v.root) / "export"
    summary.highlights.update(export=str(exported), report=str(Path(steps[-1].artifacts[0])))
    summary.highlights["built"] = (
        f"{removed.counts['rules']:,} rules, {removed.counts['removed_triples']:,} triples removed, "
        f"{q.counts['questions']:,} questions"
    )
    # what `release` needs to publish this variant without building it again (kgbrink.release.reuse)
    record = reuse.build_record(ctx.config, dataset, name, summary, summary.highlights["built"], out is None)
    if opts.rules is None and not opts.reuse_rules and record is not None:
        publish.write_text(ctx.spark, reuse.record_path(dataset, name), json.dumps(record, sort_keys=True) + "\n")
    return summary
