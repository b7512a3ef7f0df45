"""The release's report page: per benchmark its headline numbers and the plots its paper shows.

In: the manifest and, as pandas frames by configuration name, the release's small tables (``brink_rules``,
``brink_removed``, ``probe_degree_histogram``, ``synthkgqa_answer_types``, ``synthkgqa_sp_table_d2``,
``probekgc_statistics``, ``okgqa_kg_similarity``). Out: ``report.md`` and the figures ``popularity.png``
(PROBE: entities per degree, log-log) and ``similarity.png`` (OKGQA-P Fig. 4: ATS, SC2D, SD2 against the
level, one line per method). BRINK Table 1 counts rules and removed triples per rule type; a triple that
rules of two types infer counts for both.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kgbrink.core import figures, markdown
from kgbrink.okgqa import report as okgqa_report
from kgbrink.release.benchmarks import DECLARED


def _table(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    return markdown.table(
        columns,
        (
            [f"{v:.4f}" if isinstance(v, float) else ("-" if v is None or v != v else str(v)) for v in row]
            for row in frame[columns].itertuples(index=False)
        ),
    )


def rule_types(rules: pd.DataFrame, removed: pd.DataFrame) -> pd.DataFrame:
    """``rule_type, rules, removed_triples``: BRINK Table 1 from the rules and the removed triples' rule ids
    (``removed``: ``rule_ids``, one row per triple, or with ``count``, one row per distinct rule set)."""
    of_rule = dict(zip(rules["id"], rules["rule_type"]))
    counts = removed["count"] if "count" in removed.columns else [1] * len(removed)
    removed_by_type: dict[str, int] = {}
    for ids, n in zip(removed["rule_ids"], counts):
        for rule_type in {of_rule.get(i) for i in ids if i in of_rule}:
            removed_by_type[rule_type] = removed_by_type.get(rule_type, 0) + int(n)
    rules_by_type = rules.groupby("rule_type").size()
    return pd.DataFrame(
        [
            {"rule_type": t, "rules": int(rules_by_type[t]), "removed_triples": removed_by_type.get(t, 0)}
            for t in sorted(rules_by_type.index)
        ],
        columns=["rule_type", "rules", "removed_triples"],
    )


def similarity_summary(similarity: pd.DataFrame) -> pd.DataFrame:
    """The mean of each metric per (method, level) over seeds, with ``reached`` (made / requested operations)."""
    frame = similarity.assign(
        scope="kg", reached=similarity["operations"] / similarity["requested"].where(similarity["requested"] > 0)
    )
    frame["reached"] = frame["reached"].fillna(1.0)
    return (
        frame.groupby(["scope", "method", "level"], as_index=False)
        .agg(
            ats=("ats", "mean"),
            sc2d=("sc2d", "mean"),
            sd2=("sd2", "mean"),
            reached=("reached", "min"),
            n_graphs=("seed", "size"),
        )
        .sort_values(["method", "level"])
    )


def popularity_figure(histogram: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    rows = histogram[histogram["degree"] > 0].sort_values("degree")
    ax.loglog(rows["degree"], rows["entities"], marker=".", linestyle="none")
    ax.set_xlabel("degree d(e)")
    ax.set_ylabel("entities")
    ax.set_title("PROBE: entity popularity", fontsize=9)
    ax.grid(alpha=0.3)
    return figures.save(fig, path, metadata={"Software": None})


def write(manifest: dict, tables: dict[str, pd.DataFrame], folder: Path) -> list[Path]:
    """``report.md`` and the figures under ``folder``; the files written."""
    written = []
    lines = [f"# {manifest['name']} {manifest['version']}: report", ""]
    rows = {c["name"]: c["rows"] for c in manifest["configs"]}
    for declared in DECLARED:
        benchmark = declared.name
        if benchmark not in manifest["benchmarks"]:
            continue
        lines += [f"## {benchmark}: {declared.title}", ""]
        mine = sorted(name for name in rows if name.startswith(benchmark + "_"))
        lines += [f"- `{name}`: " + ", ".join(f"{s} {n:,}" for s, n in rows[name].items()) for name in mine]
        lines.append("")
        if benchmark == "brink" and {"brink_rules", "brink_removed"} <= set(tables):
            lines += ["Rules and removed triples by rule type (Table 1):", ""]
            lines += _table(
                rule_types(tables["brink_rules"], tables["brink_removed"]), ["rule_type", "rules", "removed_triples"]
            )
            lines.append("")
        if benchmark == "probe" and "probe_degree_histogram" in tables:
            written.append(popularity_figure(tables["probe_degree_histogram"], folder / "popularity.png"))
            lines += ["![entity popularity](popularity.png)", ""]
        if benchmark == "synthkgqa":
            if "synthkgqa_answer_types" in tables:
                types = tables["synthkgqa_answer_types"].sort_values(
                    ["graph_isomorphism", "split"], na_position="first"
                )
                lines += ["Answer types (Table A1):", ""]
                lines += _table(types, ["split", "graph_isomorphism", "dutt_label", "n_hops", "n_edges", "questions"])
                lines.append("")
            if "synthkgqa_sp_table_d2" in tables:
                lines += ["Shortest paths against ground-truth paths (Table D2):", ""]
                d2 = tables["synthkgqa_sp_table_d2"].sort_values(["split", "n_hops"])
                lines += _table(d2, ["split", "n_hops", "questions", "pct_gt_in_sp", "pct_sp_in_gt", "n_gt", "n_sp"])
                lines.append("")
        if benchmark == "probekgc" and "probekgc_statistics" in tables:
            lines += ["Statistics (ProbeKGC README):", ""]
            stats = tables["probekgc_statistics"].sort_values("difficulty")
            lines += _table(stats, ["difficulty", "entities", "relations", "triples", "options"])
            lines.append("")
        if benchmark == "okgqa" and "okgqa_kg_similarity" in tables:
            summary = similarity_summary(tables["okgqa_kg_similarity"])
            written.append(okgqa_report.figure(summary, folder / "similarity.png", "OKGQA-P Fig. 4 (kg scope)"))
            lines += ["![similarity](similarity.png)", ""]
            lines += _table(summary, ["method", "level", "reached", "ats", "sc2d", "sd2"])
            lines.append("")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.md").write_text("\n".join(lines).rstrip() + "\n")
    return [folder / "report.md", *written]
