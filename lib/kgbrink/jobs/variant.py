"""The BRINK construction jobs: ``remove``, ``verify``, ``questions``, ``export`` and ``build`` (all of them
plus ``mine`` and the report).

A variant lives in ``<dataset>/variants/<name>/`` (``variant.name`` in the config): Delta tables
``groundings`` (the per-rule sample), ``complete``, ``incomplete`` (``h, r, t, split`` ids),
``removed`` (``h, r, t, rule_ids``), ``provenance`` (one row per selected grounding: the removed triple,
rule id and string, bindings, body triples), ``questions``, ``violations``; the plain-file release
(``release/``, :func:`export`) and the report (``report/``).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kgbrink.brink import questions, removal, report
from kgbrink.core.delta import (
    TableVersion,
    latest_version,
    read_table,
    table_exists,
    table_path,
    write_table,
)
from kgbrink.core.files import delete_path, merge_parts
from kgbrink.core.settings import Config, is_uri
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.jobs.mine import read_rules
from kgbrink.rules import grounding
from kgbrink.rules.model import RULE_TYPES, Rule, write_amie_tsv

VARIANT_TABLES = ("rules", "groundings", "complete", "incomplete", "removed", "provenance", "questions", "violations")


def variant_dir(dataset: str, name: str) -> str:
    return table_path(dataset, f"variants/{name}")


class Variant:
    """Table locations and reads of one variant, recording the Delta version of every input read."""

    def __init__(self, spark: SparkSession, dataset: str, name: str, summary: JobSummary):
        self.spark, self.dataset, self.name, self.summary = spark, dataset, name, summary
        self.root = variant_dir(dataset, name)
        self.names: dict[str, DataFrame] = {}

    def path(self, table: str) -> str:
        return table_path(self.root, table) if table in VARIANT_TABLES else table_path(self.dataset, table)

    def read(self, table: str, path: str | None = None) -> DataFrame:
        path = path or self.path(table)
        if table not in self.summary.inputs:
            self.summary.inputs[table] = TableVersion(path, latest_version(self.spark, path))
        return read_table(self.spark, path, self.summary.inputs[table].version)

    def write(self, table: str, frame: DataFrame, description: str) -> TableVersion:
        self.summary.outputs[table] = write_table(frame, self.path(table), description=description)
        return self.summary.outputs[table]

    def staging(self, relative: Path | None = None) -> str:
        """Where the tasks write the parts of a plain file (``relative``: its path in the release) before
        the driver merges them; the whole staging area without ``relative``."""
        return table_path(self.root, "_staging" + (f"/{relative.as_posix()}" if relative else ""))

    def relation_ids(self) -> dict[str, int]:
        return {r["key"]: r["id"] for r in self.read("relations").select("id", "key").collect()}

    def rules(self, source: str | None = None) -> list[Rule]:
        """The variant's rules (its copy written by ``remove``), or the rules table at ``source``."""
        path = source or self.path("rules")
        self.read("rules", path)
        return read_rules(self.spark, path, self.summary.inputs["rules"].version)


def _settings(config: Config) -> dict:
    return {
        "per_rule": int(config.get("variant.groundings_per_rule")),
        "seed": int(config.get("variant.seed")),
        "mode": config.get("variant.removal_mode"),
        "tau": float(config.get("variant.tau")),
        "ratios": tuple(float(x) for x in config.get("variant.split_ratios")),
        "templates": dict(config.get("variant.templates")),
        "max_answers": int(config.get("variant.max_answers")),
        "splits": sorted(config.get("mining.splits")),
    }


def remove(
    spark: SparkSession,
    config: Config,
    dataset: str,
    name: str | None = None,
    rules_path: str | None = None,
    mode: str | None = None,
) -> JobSummary:
    """``kgbrink remove``: sample N groundings per rule, select a conflict-free set, write the complete
    KG, the incomplete KG, the removed triples and their provenance."""
    s = _settings(config)
    name = name or config.get("variant.name")
    mode = mode or s["mode"]
    if mode not in removal.MODES:
        raise ValueError(f"removal mode must be one of {', '.join(removal.MODES)}, got {mode!r}")
    summary = JobSummary(
        "remove",
        params={
            "dataset": dataset,
            "variant": name,
            "mode": mode,
            "per_rule": s["per_rule"],
            "seed": s["seed"],
            "splits": ",".join(s["splits"]),
        },
    )
    v = Variant(spark, dataset, name, summary)
    source = rules_path or table_path(dataset, "rules")
    rules = v.rules(source)
    if not rules:
        raise JobFailed(f"{source}: the rules table is empty; nothing can be removed", summary)
    v.write(
        "rules",
        read_table(spark, source, summary.inputs["rules"].version),
        f"rules of {source} v{summary.inputs['rules'].version}",
    )
    relation_ids = v.relation_ids()
    complete = v.read("triples").filter(F.col("split").isin(s["splits"])).select("h", "r", "t", "split")
    with summary.timed("complete"):
        v.write("complete", complete, f"splits {','.join(s['splits'])} of {dataset}")
    complete = v.read("complete")
    with summary.timed("ground"):
        try:
            sample = grounding.groundings(rules, complete.select("h", "r", "t"), relation_ids, s["per_rule"], s["seed"])
        except grounding.GroundingError as e:
            raise JobFailed(f"{summary.inputs['rules'].path}: {e}", summary) from None
        v.write(
            "groundings",
            sample.withColumn("priority", removal.selection_priority()),
            f"at most {s['per_rule']} groundings per rule, seed {s['seed']}",
        )
    sample = v.read("groundings")
    with summary.timed("select"):
        reference_heads = None
        if mode == "maximal":
            selected, reference = removal.maximal_and_reference(sample)
            reference_heads = removal.removed_triples(reference).count()
        else:
            selected = removal.select_groundings(sample, mode)
        selected = selected.localCheckpoint()
    rule_strings = spark.createDataFrame([(r.rule_id(), r.text()) for r in rules], "rule_id string, rule string")
    provenance = selected.select(
        F.col("head.h").alias("h"),
        F.col("head.r").alias("r"),
        F.col("head.t").alias("t"),
        "rule_id",
        "bindings",
        "body",
        "sample_hash",
    ).join(rule_strings, "rule_id")
    with summary.timed("write"):
        v.write(
            "provenance",
            provenance.select("h", "r", "t", "rule_id", "rule", "bindings", "body", "sample_hash"),
            f"groundings selected by the {mode} rule",
        )
        removed = v.write("removed", removal.removed_triples(selected), "removed triples")
        v.write(
            "incomplete", removal.incomplete_kg(complete, v.read("removed")), "complete KG without the removed triples"
        )
    removed_count = removed.rows if removed.rows is not None else v.read("removed").count()
    summary.counts.update(
        rules=len(rules),
        sampled_groundings=summary.outputs["groundings"].rows,
        selected_groundings=summary.outputs["provenance"].rows,
        removed_triples=removed_count,
        complete_triples=summary.outputs["complete"].rows,
        incomplete_triples=summary.outputs["incomplete"].rows,
    )
    if reference_heads is not None:
        summary.counts.update(
            reference_removed_triples=reference_heads, more_than_reference=removed_count - reference_heads
        )
    return summary


def verify(spark: SparkSession, config: Config, dataset: str, name: str | None = None) -> JobSummary:
    """``kgbrink verify``: every removed triple still inferable in the incomplete KG (Sec. 3.2); writes the
    violations table and fails when it is not empty."""
    name = name or config.get("variant.name")
    summary = JobSummary("verify", params={"dataset": dataset, "variant": name})
    v = Variant(spark, dataset, name, summary)
    atoms = removal.rule_atoms(spark, v.rules(), v.relation_ids())
    with summary.timed("verify"):
        violations = removal.verification_violations(
            v.read("provenance"), atoms, v.read("complete"), v.read("incomplete"), v.read("removed")
        )
        v.write("violations", violations, "verification of the removal")
    found = v.read("violations")
    by_reason = {r["reason"]: r["count"] for r in found.groupBy("reason").count().collect()}
    summary.counts.update(
        removed_triples=v.read("removed").count(), violations=sum(by_reason.values()), violations_by_reason=by_reason
    )
    if by_reason:
        example = found.orderBy("h", "r", "t").first()
        raise JobFailed(
            f"verification failed: {sum(by_reason.values())} violation(s) {by_reason}; e.g. ({example['h']}, {example['r']}, {example['t']}): {example['reason']}; see {v.path('violations')}",
            summary,
        )
    return summary


def make_questions(
    spark: SparkSession, config: Config, dataset: str, name: str | None = None, out: str | None = None
) -> JobSummary:
    """``kgbrink questions``: one question per removed triple, completed, downsampled (Alg. 1) and split
    8:1:1; the Delta table ``questions`` plus the JSON Lines files of the three renderings."""
    s = _settings(config)
    name = name or config.get("variant.name")
    summary = JobSummary(
        "questions",
        params={
            "dataset": dataset,
            "variant": name,
            "tau": s["tau"],
            "seed": s["seed"],
            "split_ratios": ",".join(map(str, s["ratios"])),
        },
    )
    v = Variant(spark, dataset, name, summary)
    with summary.timed("questions"):
        records = questions.question_records(
            v.read("removed"), v.read("complete"), s["seed"], s["max_answers"]
        ).localCheckpoint()
        too_many = records.filter(F.col("answers").isNull()).count()
        records = records.filter(F.col("answers").isNotNull()).localCheckpoint()
        total = records.count()
        if records.select("id").distinct().count() != total:
            raise JobFailed("question ids collide (64-bit hash); change variant.seed", summary)
        kept = questions.assign_splits(questions.downsample(records, s["tau"], s["seed"]), s["seed"], s["ratios"])
        v.write("questions", kept, f"questions, tau {s['tau']}, seed {s['seed']}")
    kept = v.read("questions")
    per_split = {r["split"]: r["count"] for r in kept.groupBy("split").count().collect()}
    summary.counts.update(
        dropped_too_many_answers=too_many,
        questions_before_downsampling=total,
        questions=sum(per_split.values()),
        questions_by_split={k: per_split.get(k, 0) for k in questions.SPLITS},
    )
    summary.extra["answer_counts"] = {
        "before": sorted((r["count"] for r in records.groupBy("hard_answer").count().collect()), reverse=True),
        "after": sorted((r["count"] for r in kept.groupBy("hard_answer").count().collect()), reverse=True),
    }
    with summary.timed("render"):
        files = write_question_files(v, kept, s, Path(out) if out else None)
    summary.artifacts.extend(files)
    return summary


def _names(v: Variant, scheme: str, seed: int) -> DataFrame:
    """Entity names of ``scheme``, computed once per job (the private-id permutation sorts all entities)."""
    if scheme not in v.names:
        v.names[scheme] = questions.entity_names(v.read("entities"), scheme, seed).localCheckpoint()
    return v.names[scheme]


def write_question_files(v: Variant, kept: DataFrame, s: dict, out: Path | None) -> list[str]:
    """``<out>/questions/<scheme>/<split>.jsonl`` for the three schemes (default out: the variant's release)."""
    out = out or _local(v.root) / "release"
    relations = questions.relation_names(v.read("relations"))
    written = []
    for scheme in questions.SCHEMES:
        rendered = questions.render_questions(
            kept, _names(v, scheme, s["seed"]), relations, s["templates"]
        ).localCheckpoint()
        for split in questions.SPLITS:
            path = out / "questions" / scheme / f"{split}.jsonl"
            write_single_file(
                rendered.filter(F.col("split") == split).orderBy("id"), path, "json", v.staging(path.relative_to(out))
            )
            written.append(str(path))
    delete_path(v.spark, v.staging())
    return written


def _local(location: str) -> Path:
    if is_uri(location):
        raise ValueError(f"plain-file outputs are written to a local directory; give --out for {location}")
    return Path(location)


def write_single_file(frame: DataFrame, path: Path, fmt: str, staging: str) -> None:
    """``frame`` (in its order) as one driver-local file ``path``: JSON Lines (``json``) or TAB-separated
    text of its string columns (``tsv``, no quoting: names are free of TABs and newlines).

    The tasks write one part per partition of the ordered frame under ``staging`` (a directory beside the
    variant's tables, so on a cluster the executors write to the dataset's file system, e.g. S3); a sorted
    frame's partitions are consecutive ranges of its order, and the driver appends the parts in partition
    order (:func:`kgbrink.core.files.merge_parts`). The bytes do not depend on the number of partitions."""
    if fmt == "json":
        frame.write.mode("overwrite").option("ignoreNullFields", "false").json(staging)
    elif fmt == "tsv":
        frame.select(
            F.concat_ws(
                "\t", *[F.regexp_replace(F.col(c).cast("string"), "[\t\r\n]", " ") for c in frame.columns]
            ).alias("line")
        ).write.mode("overwrite").text(staging)
    else:
        raise ValueError(f"unknown single-file format {fmt!r}")
    merge_parts(frame.sparkSession, staging, str(path))
    delete_path(frame.sparkSession, staging)


def export(
    spark: SparkSession, config: Config, dataset: str, name: str | None = None, out: str | None = None
) -> JobSummary:
    """``kgbrink export``: the variant as plain files (module docstring of :mod:`kgbrink.jobs.variant`)."""
    s = _settings(config)
    name = name or config.get("variant.name")
    summary = JobSummary("export", params={"dataset": dataset, "variant": name})
    v = Variant(spark, dataset, name, summary)
    target = _local(out) if out else _local(v.root) / "release"
    summary.params["out"] = str(target)
    relations = questions.relation_names(v.read("relations"))
    keys = {
        r: v.read(t).select("id", F.col("key").alias("name"))
        for r, t in (("entity", "entities"), ("relation", "relations"))
    }
    written = []
    with summary.timed("kg"):
        for table in ("complete", "incomplete", "removed"):
            # one scan and de-duplication per table, rendered by keys and, for the two KGs, by two schemes
            triples = v.read(table).select("h", "r", "t").distinct().persist()
            renderings = [(target / f"{table}.tsv", keys["entity"], keys["relation"])]
            if table != "removed":
                renderings += [
                    (target / "kg" / scheme / f"{table}.tsv", _names(v, scheme, s["seed"]), relations)
                    for scheme in ("private_id", "text_label")
                ]
            for path, entity_names, relation_names in renderings:
                rendered = questions.render_triples(triples, entity_names, relation_names).orderBy("h", "r", "t")
                write_single_file(rendered, path, "tsv", v.staging(path.relative_to(target)))
                written.append(str(path))
            triples.unpersist()
    with summary.timed("rules_and_provenance"):
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
    with summary.timed("questions"):
        written.extend(write_question_files(v, v.read("questions"), s, target))
    card = target / "DATA_CARD.md"
    card.write_text(
        report.data_card(
            dataset, name, s, _variant_counts(v), sorted(str(Path(p).relative_to(target)) for p in written)
        )
    )
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
    }


def write_report(
    spark: SparkSession,
    config: Config,
    dataset: str,
    name: str,
    answer_counts: dict,
    removal_counts: dict | None = None,
    out: str | None = None,
) -> JobSummary:
    """The build report (Markdown + PNG plots) into ``<variant>/report`` (or ``out``)."""
    summary = JobSummary("report", params={"dataset": dataset, "variant": name})
    v = Variant(spark, dataset, name, summary)
    target = _local(out) if out else _local(v.root) / "report"
    counts = _variant_counts(v)
    summary.artifacts.extend(
        report.write_report(target, dataset, name, _settings(config), counts, answer_counts, removal_counts)
    )
    summary.counts.update(counts)
    return summary


def build(
    spark: SparkSession,
    config: Config,
    dataset: str,
    name: str | None = None,
    rules_path: str | None = None,
    mine_rules: bool = True,
    out: str | None = None,
) -> JobSummary:
    """``kgbrink build``: mine (unless ``rules_path`` is given or ``mine_rules`` is off) -> remove (ground)
    -> verify -> questions -> export -> report. Plain files go to ``out`` (release files, and the report
    in ``out/report``) or, for a local dataset, into the variant directory."""
    from kgbrink.jobs import mine

    name = name or config.get("variant.name")
    summary = JobSummary("build", params={"dataset": dataset, "variant": name, "rules": rules_path or "mined"})
    steps = []
    if rules_path is None and mine_rules:
        steps.append(mine.run(spark, config, dataset))
    removed = remove(spark, config, dataset, name, rules_path)
    steps.append(removed)
    steps.append(verify(spark, config, dataset, name))
    q = make_questions(spark, config, dataset, name, out)
    steps.append(q)
    steps.append(export(spark, config, dataset, name, out))
    steps.append(
        write_report(
            spark, config, dataset, name, q.extra["answer_counts"], removed.counts, f"{out}/report" if out else None
        )
    )
    merge_steps(summary, steps)
    return summary


def merge_steps(summary: JobSummary, steps: list[JobSummary]) -> None:
    """Counts, timings, inputs, outputs and artifacts of ``steps`` under their job names."""
    for step in steps:
        summary.counts[step.job] = step.counts
        summary.timings.update({f"{step.job}.{k}": v for k, v in step.timings.items()})
        summary.inputs.update({f"{step.job}.{k}": v for k, v in step.inputs.items()})
        summary.outputs.update({f"{step.job}.{k}": v for k, v in step.outputs.items()})
        summary.artifacts.extend(step.artifacts)
