"""The build report and the export's data card (Markdown; PNG plots with matplotlib).

Report contents (issue: BRINK construction, Sec. 5): rule counts by type (BRINK Table 1), triples and
questions per split of the complete and incomplete KG (Table 3), removed triples per rule type (a triple
counts once for each type of rule that grounds it), the questions of both question units (one per
removed triple, one per selected grounding: ``variant.question_unit``) with the hub questions dropped
before Alg. 1, the answer distribution before and after the Alg. 1 downsampling (questions per
hard-answer entity, largest first), and the verification result. The report and the data card say which
removal was used: ``reference`` is the published procedure, ``maximal`` kgbrink's extension
(docs/fidelity.md lists every deviation from the paper).
"""

from __future__ import annotations

from pathlib import Path

from kgbrink.brink.questions import SCHEMES, SPLITS, UNITS
from kgbrink.core import figures, markdown
from kgbrink.rules.model import RULE_TYPES


def _table(header: list[str], rows: list[list]) -> str:
    return "\n".join(markdown.table(header, ([f"{c:,}" if isinstance(c, int) else c for c in row] for row in rows)))


def table1(counts: dict) -> str:
    rows = [[t, counts["rules_by_type"][t], counts["removed_by_rule_type"][t]] for t in RULE_TYPES]
    rows.append(["**total**", counts["rules"], counts["removed_triples"]])
    return _table(["rule type", "rules", "removed triples"], rows)


def table3(counts: dict) -> str:
    q = counts["questions_by_split"]
    rows = []
    for kg in ("complete", "incomplete"):
        triples = sum(counts["triples_by_split"][kg].values())
        rows.append([kg, triples, *[q[s] for s in SPLITS], sum(q.values())])
    return _table(["KG", "#triples", *SPLITS, "total questions"], rows)


MODE_TEXT = {
    "reference": "`reference` removal: the published procedure (BRINK Sec. 3.2: keep a sampled grounding "
    "iff its head is in no sampled grounding's body)",
    "maximal": "`maximal` removal: kgbrink's extension, not the published procedure. It grows the published "
    "one-pass selection (`variant.removal_mode: reference`) to a maximal conflict-free set under the same two "
    "constraints of Sec. 3.2, so it removes more triples",
}
UNIT_TEXT = {
    "removed_triple": "one per removed triple (Sec. 3.2's text)",
    "grounding": "one per selected grounding (the reading behind Table 3: more questions than removed triples)",
}


def mode_text(mode: str) -> str:
    return MODE_TEXT.get(mode, f"`{mode}` removal")


def questions_section(question_counts: dict | None, removed_triples: int) -> str:
    """Both question units (Table 3 counts more questions than removed triples: Family 1.18 per removed
    triple, Wikidata5m 1.08) and the hub questions dropped before Alg. 1."""
    if not question_counts:
        return "Question counts: not recorded (questions built by an older kgbrink)."
    unit, cap = question_counts["question_unit"], question_counts["max_answers"]
    rows = []
    by_unit = question_counts["questions_by_unit"]
    for name in [u for u in UNITS if u in by_unit]:
        c = by_unit[name]
        ratio = f"{c['candidates'] / removed_triples:.3f}" if removed_triples else "-"
        label = f"**{name}** (used)" if name == unit else name
        rows.append(
            [
                label,
                c["candidates"],
                ratio,
                c["dropped_too_many_answers"],
                c["before_downsampling"],
                c["after_downsampling"],
            ]
        )
    table = _table(
        [
            "question unit",
            "candidates",
            "per removed triple",
            f"dropped: > {cap:,} answers" if cap is not None else "dropped (no answer limit)",
            "before Alg. 1",
            "after Alg. 1",
        ],
        rows,
    )
    guard = (
        f"Questions with more than {cap:,} answers (`variant.max_answers`) are dropped before Alg. 1: "
        f"{question_counts['dropped_too_many_answers']:,} here. This is kgbrink's guard against hub topics, "
        "not in the paper (`variant.max_answers: null` keeps every question)."
        if cap is not None
        else "No answer limit (`variant.max_answers: null`): every question is kept before Alg. 1, as in the paper."
    )
    return f"""Questions: {UNIT_TEXT.get(unit, unit)} (`variant.question_unit: {unit}`). BRINK Table 3 has
1.18 questions per removed triple on Family and 1.08 on Wikidata5m.

{table}

{guard}"""


def answer_plot(answer_counts: dict, path: Path) -> Path:
    """Questions per hard-answer entity (rank on x, log y), before and after downsampling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label in ("before", "after"):
        values = answer_counts.get(label) or []
        ax.plot(range(1, len(values) + 1), values, label=f"{label} downsampling ({sum(values):,} questions)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("answer entities, most frequent first")
    ax.set_ylabel("questions with this hard answer")
    ax.legend()
    return figures.save(fig, path)


def write_report(
    target: Path,
    dataset: str,
    name: str,
    settings: dict,
    counts: dict,
    answer_counts: dict,
    removal: dict | None = None,
) -> list[str]:
    """``report.md`` and ``answers.png`` in ``target``; the written paths. ``removal``: the remove job's
    counts (compares the selection with the published one-pass rule when given)."""
    plot = answer_plot(answer_counts, target / "answers.png")
    top = {k: (answer_counts.get(k) or [0])[0] for k in ("before", "after")}
    verified = (
        "not run"
        if counts["violations"] is None
        else (
            "passed: every removed triple has a grounding with its whole body in the incomplete KG"
            if counts["violations"] == 0
            else f"FAILED: {counts['violations']} violation(s)"
        )
    )
    selection = ""
    if removal and removal.get("reference_removed_triples") is not None:
        selection = (
            f"\nSelection: {removal['sampled_groundings']:,} sampled groundings; the `{settings['mode']}` selection removes "
            f"{removal['removed_triples']:,} triples, the published one-pass rule {removal['reference_removed_triples']:,} "
            f"on the same sample ({removal['more_than_reference']:+,}).\n"
        )
    text = f"""# Build report: variant `{name}` of `{dataset}`

Settings: {settings["per_rule"]} groundings per rule, removal `{settings["mode"]}`, tau {settings["tau"]},
split {":".join(f"{r:g}" for r in settings["ratios"])}, seed {settings["seed"]}, KG splits {", ".join(settings["splits"])}.

{mode_text(settings["mode"])}.
{selection}
## Rules and removed triples by type (BRINK Table 1)

{table1(counts)}

## Triples and questions (BRINK Table 3)

{table3(counts)}

{questions_section(counts.get("question_counts"), counts["removed_triples"])}

## Answer distribution (Alg. 1)

Largest number of questions sharing one hard answer: {top["before"]:,} before, {top["after"]:,} after downsampling.

![questions per answer entity]({plot.name})

## Verification

{verified}.
"""
    report = target / "report.md"
    report.write_text(text)
    return [str(report), str(plot)]


def data_card(dataset: str, name: str, settings: dict, counts: dict, files: list[str]) -> str:
    """README-style data card of an exported variant. It names the dataset by its last path component,
    not its location: the same build gives the same card wherever the dataset is stored."""
    dataset = dataset.rstrip("/").rsplit("/", 1)[-1]
    listing = "\n".join(f"- `{f}`" for f in files)
    unit = (counts.get("question_counts") or {}).get("question_unit", settings.get("question_unit", "removed_triple"))
    return f"""# BRINK-style variant `{name}` of `{dataset}`

Built by kgbrink: Horn rules mined with AMIE3 semantics, up to {settings["per_rule"]} groundings per rule
sampled by a seeded hash (seed {settings["seed"]}), their head triples removed under both constraints of
BRINK Sec. 3.2 (`{settings["mode"]}` selection), every removed triple verified to keep a grounding whose
whole body is in the incomplete KG, questions ({UNIT_TEXT.get(unit, unit)}) with their complete answer
sets, downsampled by hard answer (tau {settings["tau"]}) and split {":".join(f"{r:g}" for r in settings["ratios"])}.

{mode_text(settings["mode"])}. Every deviation from the paper is listed in kgbrink's docs/fidelity.md.

## Contents

{table3(counts)}

{table1(counts)}

{questions_section(counts.get("question_counts"), counts["removed_triples"])}

## Files

- `complete.tsv`, `incomplete.tsv`, `removed.tsv`: `head<TAB>relation<TAB>tail` with the source dump's keys.
- `rules.tsv`: the rules in AMIE3's output format.
- `provenance.jsonl`: `{{"triple": [h, r, t], "rule": ..., "rule_id": ..., "body": [[h, r, t], ...]}}`, one line
  per selected grounding of a removed triple.
- `questions/<scheme>/<split>.jsonl`: `id, split, question, topic_entity, relation, answers, hard_answer,
  removed_triple, direction, rule_ids`; schemes {", ".join(SCHEMES)} (BRINK Sec. 5.4).
- `kg/<scheme>/{{complete,incomplete}}.tsv`: the KGs with entities named by `private_id` or `text_label`
  (`entity_id` is the top-level files); relations are named by their label in every rendering.

{listing}
"""
