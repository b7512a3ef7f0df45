"""The BRINK construction jobs ``remove``, ``verify`` and ``questions`` (``export`` and ``build`` are in
:mod:`kgbrink.jobs.build`).

A variant lives in ``<dataset>/variants/<name>/`` (``variant.name`` in the config): Delta tables
``groundings`` (the per-rule sample), ``complete``, ``incomplete`` (``h, r, t, split`` ids),
``removed`` (``h, r, t, rule_ids``), ``provenance`` (one row per selected grounding: the removed triple,
rule id and string, bindings, body triples), ``questions``, ``violations``; the plain-file export
(``export/``, :func:`kgbrink.jobs.build.export`) and the report (``report/``).
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import functions as F

from kgbrink.brink import questions, removal
from kgbrink.core import catalog
from kgbrink.core.delta import table_rows
from kgbrink.core.frames import checkpoint
from kgbrink.core.jobs import JobContext, job
from kgbrink.core.tracking import JobFailed, JobSummary
from kgbrink.jobs.steps.variant_options import (
    QUESTION_COUNTS_PREFIX,
    OutOptions,
    RemoveOptions,
    VariantOptions,
    open_variant,
    variant_settings,
    write_question_files,
)
from kgbrink.rules import grounding


@job("remove", "sample groundings per rule and remove their heads under BRINK's constraints", RemoveOptions, steps=4)
def remove(ctx: JobContext, opts: RemoveOptions) -> JobSummary:
    """``kgbrink remove``: sample N groundings per rule, select a conflict-free set, write the complete
    KG, the incomplete KG, the removed triples and their provenance."""
    v = open_variant(ctx, opts)
    dataset, name, rules_path = v.dataset, v.name, opts.rules
    s = variant_settings(v, from_kg=True)
    mode = opts.mode or s["mode"]
    if mode not in removal.MODES:
        raise ValueError(f"removal mode must be one of {', '.join(removal.MODES)}, got {mode!r}")
    summary = ctx.begin(
        dataset=dataset, variant=name, mode=mode, per_rule=s["per_rule"], seed=s["seed"], splits=",".join(s["splits"])
    )
    source = rules_path or catalog.path("rules", dataset=dataset)
    rules = v.rules(source)
    if not rules:
        raise JobFailed(f"{source}: the rules table is empty; nothing can be removed", summary)
    v.write(
        "rules",
        ctx.read("rules", source),
        f"rules of {source} v{summary.inputs['rules'].version}",
    )
    relation_ids = v.relation_ids()
    complete = v.read("triples").filter(F.col("split").isin(s["splits"])).select("h", "r", "t", "split")
    with ctx.step("complete"):
        v.write("complete", complete, f"splits {','.join(s['splits'])} of {dataset}")
    complete = v.read("complete")
    with ctx.step("ground"):
        try:
            sample = grounding.groundings(
                rules, complete.select("h", "r", "t"), relation_ids, s["per_rule"], s["seed"], ctx.persist
            )
        except grounding.GroundingError as e:
            raise JobFailed(f"{summary.inputs['rules'].path}: {e}", summary) from None
        v.write(
            "groundings",
            sample.withColumn("priority", removal.selection_priority()),
            f"at most {s['per_rule']} groundings per rule, seed {s['seed']}",
        )
    sample = v.read("groundings")
    with ctx.step("select"):
        reference_heads = None
        if mode == "maximal":
            selected, reference = removal.maximal_and_reference(sample)
            reference_heads = removal.removed_triples(reference).count()
        else:
            selected = removal.select_groundings(sample, mode)
        selected = selected.transform(checkpoint)
    with ctx.step("write"):
        v.write("provenance", removal.provenance(selected, rules), f"groundings selected by the {mode} rule")
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


@job("verify", "prove every removed triple of a variant still inferable in its incomplete KG", VariantOptions, steps=1)
def verify(ctx: JobContext, opts: VariantOptions) -> JobSummary:
    """``kgbrink verify``: every removed triple still inferable in the incomplete KG (Sec. 3.2); writes the
    violations table and fails when it is not empty."""
    v = open_variant(ctx, opts)
    spark, summary = ctx.spark, ctx.begin(dataset=v.dataset, variant=v.name)
    atoms = removal.rule_atoms(spark, v.rules(), v.relation_ids())
    with ctx.step("verify"):
        violations = removal.verification_violations(
            v.read("provenance"), atoms, v.read("complete"), v.read("incomplete"), v.read("removed")
        )
        found = violations.transform(checkpoint)  # written, then counted (not read back)
        v.write("violations", found, "verification of the removal")
    by_reason = {r["reason"]: r["count"] for r in found.groupBy("reason").count().collect()}
    removed = summary.inputs["removed"]
    summary.counts.update(
        removed_triples=table_rows(spark, removed.path, removed.version),
        violations=sum(by_reason.values()),
        violations_by_reason=by_reason,
    )
    if by_reason:
        example = found.orderBy("h", "r", "t").first()
        raise JobFailed(
            f"verification failed: {sum(by_reason.values())} violation(s) {by_reason}; e.g. ({example['h']}, {example['r']}, {example['t']}): {example['reason']}; see {v.path('violations')}",
            summary,
        )
    return summary


@job(
    "questions",
    "questions of a variant's removed triples: answers, downsampling, splits, renderings",
    OutOptions,
    steps=2,
)
def make_questions(ctx: JobContext, opts: OutOptions) -> JobSummary:
    """``kgbrink questions``: one question per removed triple (or per selected grounding:
    ``variant.question_unit``), completed, hub topics dropped, downsampled (Alg. 1) and split 8:1:1; the
    Delta table ``questions`` plus the JSON Lines files of the three renderings. Both question units are
    counted (``questions_by_unit``); the answer sets of both are computed in one pass."""
    v = open_variant(ctx, opts)
    s, out = variant_settings(v), opts.out
    unit = s["question_unit"]
    summary = ctx.begin(
        dataset=v.dataset,
        variant=v.name,
        tau=s["tau"],
        seed=s["seed"],
        split_ratios=",".join(map(str, s["ratios"])),
        question_unit=unit,
        max_answers=s["max_answers"],
    )
    with ctx.step("questions"):
        sources = {"removed_triple": v.read("removed"), "grounding": v.read("provenance")}
        picked = {u: questions.pick_questions(sources[u], s["seed"], u).transform(checkpoint) for u in questions.UNITS}
        keys = (
            picked["removed_triple"]
            .select(*questions.ANSWER_KEY)
            .unionByName(picked["grounding"].select(*questions.ANSWER_KEY))
        )
        answers = questions.answer_sets(keys, v.read("complete"), s["max_answers"]).transform(checkpoint)
        tallies = {u: questions.unit_tally(picked[u], answers, s["tau"]) for u in questions.UNITS}
        records, by_unit = tallies[unit][0], {u: tally for u, (_, tally) in tallies.items()}
        total = by_unit[unit]["before_downsampling"]
        if records.select("id").distinct().count() != total:
            raise JobFailed("question ids collide (64-bit hash); change variant.seed", summary)
        kept = questions.assign_splits(questions.downsample(records, s["tau"], s["seed"]), s["seed"], s["ratios"])
        counts = {
            "dropped_too_many_answers": by_unit[unit]["dropped_too_many_answers"],
            "questions_before_downsampling": total,
            "questions_by_unit": by_unit,
        }
        recorded = {**counts, "question_unit": unit, "max_answers": s["max_answers"]}
        v.write("questions", kept, QUESTION_COUNTS_PREFIX + json.dumps(recorded, sort_keys=True))
    kept = v.read("questions")
    per_split = {r["split"]: r["count"] for r in kept.groupBy("split").count().collect()}
    summary.counts.update(
        **counts,
        questions=sum(per_split.values()),
        questions_by_split={k: per_split.get(k, 0) for k in questions.SPLITS},
    )
    summary.extra["answer_counts"] = {
        "before": sorted((r["count"] for r in records.groupBy("hard_answer").count().collect()), reverse=True),
        "after": sorted((r["count"] for r in kept.groupBy("hard_answer").count().collect()), reverse=True),
    }
    with ctx.step("render"):
        files = write_question_files(v, kept, s, Path(out) if out else None)
    summary.artifacts.extend(files)
    return summary
