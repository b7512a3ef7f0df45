"""The table catalog: every table kgbrink writes, with its path pattern, schema and partitioning.

The contract between steps lives here and nowhere else. :meth:`JobContext.write` looks the path it writes
up here: a catalogued table written with another schema fails the job, and its partitioning comes from
the entry; ``docs/tables.md`` is generated from it (:mod:`kgbrink.core.reference_docs`). Patterns use
``{dataset}`` (a dataset directory or URI), ``{splits}`` (the statistics' splits joined by ``+``),
``{variant}``, ``{fingerprint}`` (a score run), ``{questions}`` (a question set's name) and ``{out}`` (a
job's --out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgbrink.core import markdown

TRIPLE = "h int, r int, t int"
IDS = "struct<h: int, r: int, t: int>"
RULE_COLUMNS = (
    "id string, rule string, head_relation string, "
    "body array<struct<relation: string, subject: string, object: string>>, length int, rule_type string, "
    "support bigint, head_coverage double, std_confidence double, pca_confidence double, body_size bigint, "
    "pca_body_size bigint, functional_variable string"
)
# Paper 002's question table (spec 2.0) and the classification columns of spec 2.B / 2.C: what
# seed-graphs, question-graphs and sp-analysis read.
GT_QUESTION_COLUMNS = (
    f"id string, split string, question string, seeds array<int>, answer int, answer_subgraph array<{IDS}>, "
    "graph_isomorphism string, dutt_label string, n_hops int, n_edges int, n_seeds int, n_intermediate int, "
    f"all_answers array<int>, n_answers int, answer_in_set boolean, full_answer_subgraph array<{IDS}>"
)
GROUNDING = f"rule_id string, head {IDS}, body array<{IDS}>, bindings map<string, int>, sample_hash bigint"


@dataclass(frozen=True)
class Table:
    name: str
    pattern: str
    # Spark DDL of the columns; None where the columns follow the job's parameters (stated in ``doc``).
    schema: str | None
    writer: str
    doc: str
    partition_by: tuple[str, ...] = ()
    format: str = "delta"

    def path(self, **parts: str) -> str:
        """The table's location for the given pattern parts (``dataset=...``, ``variant=...``)."""
        return self.pattern.format(**{k: str(v).rstrip("/") for k, v in parts.items()})

    def matches(self, path: str) -> bool:
        return _regex(self.pattern).fullmatch(path.rstrip("/")) is not None


def _regex(pattern: str) -> re.Pattern:
    parts = re.split(r"(\{\w+\})", pattern)
    body = "".join(
        (".+" if p == "{dataset}" or p == "{out}" else "[^/]+") if p.startswith("{") else re.escape(p) for p in parts
    )
    return re.compile(body)


def _stats(name: str, schema: str, doc: str) -> Table:
    return Table(f"stats.{name}", f"{{dataset}}/stats/{{splits}}/{name}", schema, "stats", doc)


def _variant(name: str, schema: str, doc: str, writer: str = "remove") -> Table:
    return Table(f"variant.{name}", f"{{dataset}}/variants/{{variant}}/{name}", schema, writer, doc)


def _okgqa(name: str, schema: str | None, doc: str, writer: str, partition_by: tuple[str, ...] = ()) -> Table:
    return Table(f"okgqa.{name}", f"{{dataset}}/okgqa/{{questions}}/{name}", schema, writer, doc, partition_by)


def _mcq(name: str, schema: str | None, doc: str, writer: str, partition_by: tuple[str, ...] = ()) -> Table:
    return Table(f"mcq.{name}", f"{{dataset}}/mcq/{{questions}}/{name}", schema, writer, doc, partition_by)


SP_WRITERS = "sp-analysis, question-graphs --sp-analysis"


def _synthkgqa(name: str, schema: str | None, doc: str, writer: str, partition_by: tuple[str, ...] = ()) -> Table:
    return Table(f"synthkgqa.{name}", f"{{dataset}}/synthkgqa/{{questions}}/{name}", schema, writer, doc, partition_by)


def _score(name: str, schema: str | None, doc: str) -> Table:
    return Table(f"score.{name}", f"{{dataset}}/scores/{{fingerprint}}/{name}", schema, "score", doc)


TABLES: tuple[Table, ...] = (
    Table(
        "entities",
        "{dataset}/entities",
        "id int, key string, label string",
        "ingest",
        "entity dictionary: dense ids 0..n-1",
    ),
    Table("relations", "{dataset}/relations", "id int, key string, label string", "ingest", "relation dictionary"),
    Table(
        "triples",
        "{dataset}/triples",
        f"{TRIPLE}, split string",
        "ingest",
        "the KG as ids, a set per split",
        ("split",),
    ),
    Table(
        "changes",
        "{dataset}/changes",
        f"version_before bigint, version_after bigint, op string, {TRIPLE}, split string",
        "refresh",
        "the triples each refresh added or removed (op added, removed); a refresh is identified by the triples "
        "versions it went from and to",
    ),
    Table(
        "quarantine",
        "{dataset}/quarantine",
        "source_file string, line_number bigint, line string, reason string, detail string",
        "ingest",
        "input lines that were not ingested, with the reason",
    ),
    _stats(
        "entity_popularity",
        "entity int, degree bigint, in_degree bigint, out_degree bigint, self_loops bigint, delta double",
        "d(e) and its parts; delta = d(e) / 2|T|",
    ),
    _stats(
        "entity_relation_popularity",
        "entity int, relation int, out_degree bigint, in_degree bigint, relation_degree bigint, entity_degree bigint, "
        "delta_rel_given_entity double",
        "d(e => r) per (entity, relation) pair; delta(r|e) = d(e => r) / d(e)",
    ),
    _stats(
        "relation_statistics",
        "relation int, facts bigint, distinct_subjects bigint, distinct_objects bigint, functionality double, "
        "inverse_functionality double",
        "facts and (inverse) functionality per relation",
    ),
    _stats("degree_histogram", "degree bigint, entities bigint", "entities per degree"),
    Table("rules", "{dataset}/rules", RULE_COLUMNS, "mine, import-rules", "Horn rules with AMIE3's metrics"),
    Table(
        "groundings",
        "{dataset}/groundings",
        GROUNDING,
        "ground",
        "groundings of a rules table (all or per-rule sample)",
    ),
    _variant("rules", RULE_COLUMNS, "the rules the variant was built from (a copy)"),
    _variant(
        "groundings", f"{GROUNDING}, priority bigint", "the per-rule grounding sample with its selection priority"
    ),
    _variant("complete", f"{TRIPLE}, split string", "the complete KG (the mined splits)"),
    _variant("incomplete", f"{TRIPLE}, split string", "the complete KG without the removed triples"),
    _variant("removed", f"{TRIPLE}, rule_ids array<string>", "removed triples and the rules that infer them"),
    _variant(
        "provenance",
        f"{TRIPLE}, rule_id string, rule string, bindings map<string, int>, body array<{IDS}>, sample_hash bigint",
        "one row per selected grounding: the removed triple, its rule, bindings and body",
    ),
    _variant(
        "questions",
        "id string, h int, r int, t int, direction string, topic int, hard_answer int, answers array<int>, "
        "n_answers bigint, rule_ids array<string>, split string",
        "questions of the removed triples (or of the selected groundings): complete answers, Alg. 1 "
        "downsampling, split; the commit description holds both question units' counts (JSON)",
        "questions",
    ),
    _variant("violations", f"{TRIPLE}, reason string", "removed triples the verifier could not prove", "verify"),
    _score(
        "partials",
        None,
        "exact per-batch sums keyed by (batch_id, model, run, entity_degree, relation_degree); "
        "one column per sum of the metric grid",
    ),
    _score(
        "quarantine",
        "batch_id string, source_file string, line_number bigint, line string, reason string, detail string",
        "rank rows that were not scored, with the reason",
    ),
    _score("batches", None, "one row per finished batch (batch_id and its counts): what a rerun skips"),
    _score(
        "results", "model string, run string, metric string, alpha double, beta double, value double", "the metrics"
    ),
    _score("groups", None, "metrics per popularity group (Fig. 11): scoring.popularity_groups or _top_percent"),
    _okgqa(
        "subgraphs",
        "qid string, h int, r int, t int, ppr_h double, ppr_t double",
        "PPR-pruned k-hop question subgraphs with the PPR of both ends (paper 004 Sec. 3.1)",
        "okgqa-subgraphs",
    ),
    _okgqa(
        "subgraph_sizes",
        "qid string, n_seeds bigint, n_nodes_raw bigint, n_edges_raw bigint, n_nodes_pruned bigint, "
        "n_edges_pruned bigint, ppr_iterations int, ppr_converged boolean, hubs_not_expanded bigint, "
        "n_edges_before_cap bigint, caps_applied array<string>",
        "per question: sizes before and after PPR pruning, PPR convergence, caps applied",
        "okgqa-subgraphs",
    ),
    _okgqa(
        "quarantine",
        "source_file string, line_number bigint, qid string, entity string, reason string, detail string",
        "question lines and entity keys that were not used, with the reason",
        "okgqa-subgraphs",
    ),
    _okgqa(
        "perturbed",
        "method string, seed int, scope_key string, h int, r int, t int, split string, original boolean, "
        "levels array<double>",
        "per (method, seed) the original and its perturbed graphs in one: each triple of their union with the levels "
        "whose graph contains it (graph at level p: array_contains(levels, p)); per question subgraph "
        "(scope_key = qid) or the whole KG (questions = kg, scope_key = kg, split kept)",
        "perturb",
        ("method", "seed"),
    ),
    _okgqa(
        "perturbations",
        "method string, level double, seed int, requested bigint, operations bigint, noop bigint, skipped bigint, "
        "reached double, collisions bigint, triples bigint",
        "one row per perturbed graph: operations requested and made (reached = made / requested), no-ops, candidates "
        "skipped, collisions (0), triples left (an emptied graph has its row)",
        "perturb",
    ),
    _okgqa(
        "perturbation_log",
        "scope_key string, method string, level double, seed int, op_rank bigint, old_h int, old_r int, "
        "old_t int, new_h int, new_r int, new_t int",
        "one row per operation up to the largest level; level = the first level that applies it; new_* null for ED",
        "perturb",
        ("method",),
    ),
    _okgqa(
        "kg_similarity",
        "scope string, qid string, method string, level double, seed int, n_triples bigint, "
        "n_triples_perturbed bigint, n_relations bigint, n_relations_perturbed bigint, operations bigint, "
        "requested bigint, ats double, sc2d double, sd2 double, scorer string",
        "ATS, SC2D, SD2 of every perturbed graph against its original (paper 004 App. A.7), with the operations "
        "made and requested",
        "kg-similarity",
    ),
    _synthkgqa(
        "seed_graphs",
        "sample_id long, seed int, nodes array<int>, triples array<struct<h: int, r: int, t: int, step: int>>, "
        "n_nodes int, n_edges int, steps int, exhausted boolean",
        "seed subgraphs of paper 002 Algorithm 1 (spec 2.A): nodes in insertion order, triples with their step",
        "seed-graphs",
    ),
    _mcq(
        "questions",
        "id string, h int, r int, t int, task string, query_entity int, gold int, difficulty string, "
        "options array<int>, gold_position int, distractor_source string, fallback boolean, topic_degree bigint, "
        "text string",
        "ProbeKGC multiple-choice questions (paper 003, spec 3.A): options in A.. order, one true answer",
        "mcq",
        ("difficulty",),
    ),
    _mcq(
        "statistics",
        "difficulty string, entities bigint, relations bigint, triples bigint, options int",
        "the ProbeKGC README's statistics per difficulty (spec 3.D: entities of the triples and the options)",
        "mcq",
    ),
    _synthkgqa(
        "gt_questions",
        GT_QUESTION_COLUMNS,
        "questions with their ground-truth answer subgraph (paper 002, spec 2.0) and its isomorphism type "
        "(Table A1 identifier), Dutt label (null: N/A), hops, edges, seeds and intermediate nodes (spec 2.B); "
        "question: the record's text (null: none given, as for planted questions); all_answers, n_answers, "
        "answer_in_set, full_answer_subgraph: the tree query's answer set on the KG and the triples of all its "
        "bindings (spec 2.C; null when not computed)",
        "gt-questions",
        ("split",),
    ),
    _synthkgqa(
        "question_quarantine",
        "source_file string, line_number bigint, id string, line string, reason string, detail string",
        "question records that were not used, with the reason (spec 2.B's invalid_reason for a subgraph that "
        "is not a valid answer tree)",
        "gt-questions",
    ),
    _synthkgqa(
        "answer_types",
        "split string, graph_isomorphism string, dutt_label string, n_hops int, n_edges int, n_seeds int, "
        "questions bigint",
        "questions per split and isomorphism type (Table A1's layout)",
        "gt-questions",
    ),
    _synthkgqa(
        "question_graphs",
        "id string, split string, h int, r int, t int, is_gt boolean, on_sp boolean, source string, ppr double",
        "question-specific graphs (paper 002 App. C.1, spec 2.D): per question its triples, is_gt (in the answer "
        "subgraph), on_sp (on a shortest seed-answer path of the search graph), source (neighbourhood, "
        "sp_metapath, confounder, gt_readd: the step that kept it) and ppr (the smaller PPR of its ends; null "
        "for a re-added triple outside the search graph)",
        "question-graphs",
        ("split",),
    ),
    _synthkgqa(
        "question_graph_sizes",
        "id string, k int, mode string, n_neighbourhood bigint, n_top_nodes int, n_kept_ppr bigint, "
        "n_confounders bigint, n_sp_metapath bigint, n_gt_readded bigint, n_final bigint, "
        "caps_applied array<string>, ppr_iterations int, ppr_converged boolean",
        "per question: radius, neighbourhood and confounder triples of the search graph, top nodes left after "
        "the shrink loop, triples kept by PPR, shortest-path-metapath triples, answer-subgraph triples "
        "re-added, final triples, caps applied (name: detail), PPR iterations and convergence",
        "question-graphs",
    ),
    _synthkgqa(
        "question_graph_quarantine",
        "id string, split string, reason string, detail string",
        "questions question-graphs did not use, with the reason (missing or repeated id, no seeds, no answer, "
        "empty answer subgraph, unknown entity or relation id, no seed-answer path in the answer subgraph)",
        "question-graphs",
    ),
    _synthkgqa(
        "sp_pairs",
        "id string, split string, seed int, answer int, gt_len int, sp_len int, shortcut boolean, "
        "n_node_paths double, n_triple_paths double",
        "per (question, seed, answer): ground-truth and shortest path lengths (null: no path), shortcut, the "
        "number of shortest paths as node sequences and with parallel triples multiplying (paper 002 App. D.2)",
        SP_WRITERS,
    ),
    _synthkgqa(
        "sp_triples",
        f"id string, {TRIPLE}",
        "per question the triples on some shortest seed-answer path (distance-sum test, spec 2.E)",
        SP_WRITERS,
    ),
    _synthkgqa(
        "sp_overlap",
        "id string, split string, n_hops int, n_gt bigint, n_sp bigint, n_gt_in_sp bigint, pct_gt_in_sp double, "
        "pct_sp_in_gt double",
        "per question: answer-subgraph and shortest-path triples, their overlap and its shares (Table D2's "
        "per-question values; pct_sp_in_gt null when no shortest path exists)",
        SP_WRITERS,
    ),
    _synthkgqa(
        "sp_table_d2",
        "split string, n_hops int, questions bigint, pct_gt_in_sp double, pct_sp_in_gt double, n_gt double, "
        "n_sp double",
        "Table D2 of paper 002: the means of sp_overlap per split and hop count",
        SP_WRITERS,
    ),
    _synthkgqa(
        "sp_figure_d9",
        "split string, gt_len int, pairs bigint, reachable bigint, sp_len double, n_node_paths double, "
        "n_triple_paths double, shortcut_share double",
        "Fig. D9 of paper 002: per split and ground-truth path length the means over reachable seed-answer "
        "pairs of the shortest-path length and path counts, and the share of shortcuts",
        SP_WRITERS,
    ),
    _synthkgqa(
        "sp_quarantine",
        "id string, split string, reason string, detail string",
        "questions sp-analysis did not use, with the reason (as question_graph_quarantine)",
        SP_WRITERS,
    ),
    Table(
        "rank.ranks",
        "{out}/ranks",
        None,
        "rank",
        "filtered ranks in the rank-file format `kgbrink score` reads (Parquet, not Delta)",
        format="parquet",
    ),
    Table(
        "rank.quarantine",
        "{out}/quarantine",
        "model string, run string, h int, r int, t int, side string, reason string, detail string",
        "rank",
        "queries that were not ranked, with the reason",
    ),
    Table(
        "mcq.scores",
        "{out}/mcq_scores",
        "model string, run string, difficulty string, group_kind string, group string, n bigint, accuracy double, "
        "nkd double, n_nkd bigint",
        "score-mcq",
        "accuracy and mean NKD per difficulty and group (group_kind all, degree, fixed_position; spec 3.C); nkd over "
        "the n_nkd predictions with scores",
    ),
    Table(
        "mcq.overlap",
        "{out}/mcq_overlap",
        "model string, run string, easy boolean, medium boolean, hard boolean, n bigint",
        "score-mcq",
        "queries (triple, task) by the difficulties answered correctly (null: no prediction), the Venn counts",
    ),
    Table(
        "predict.model_calls",
        "{dataset}/predict/model_calls",
        "call_id string, model string, params string, prompt_sha256 string, status string, content string, "
        "finish_reason string, top_logprobs string, prompt_tokens bigint, completion_tokens bigint, tries int, "
        "latency_s double, http_status int, response_model string, system_fingerprint string, detail string, "
        "created_at string",
        "predict",
        "every answer of a chat-completions endpoint, keyed by call_id = SHA-256 of (model, params, prompt_sha256); "
        "status ok, empty, refused or truncated; top_logprobs: the first token's, as JSON",
    ),
    Table(
        "predict.prompts",
        "{out}/predict_prompts",
        "item_id string, messages string, prompt_sha256 string, call_id string",
        "predict",
        "the prompts of a predict run: the benchmark's item, the chat messages (canonical JSON) and their call",
    ),
    Table(
        "predict.quarantine",
        "{out}/predict_quarantine",
        "item_id string, call_id string, stage string, reason string, detail string",
        "predict",
        "items without a prediction: stage call (no answer after the tries; reason: the last try's status), answer "
        "(empty, refused, truncated) or parse (the answer did not parse; reason: the parser's)",
    ),
    Table(
        "predict.mcq_predictions",
        "{out}/mcq_predictions",
        "id string, letter string, logprobs array<double>, model string, run string",
        "predict",
        "a model's ProbeKGC predictions, the score-mcq input: the letter answered and the first token's option "
        "log-probabilities (null: not among the top 20)",
    ),
    Table(
        "predict.results",
        "{dataset}/predict/results",
        "benchmark string, name string, model string, judge_model string, run string, setting string, "
        "fingerprint string, metric string, value double, labels string, out string",
        "predict",
        "every scored predict run's results (one row per metric and labels, e.g. difficulty or method and level, "
        "as canonical JSON), replaced by a rerun of the same fingerprint: a release's results config",
    ),
    Table(
        "predict.judge_prompts",
        "{out}/judge_prompts",
        "item_id string, messages string, prompt_sha256 string, call_id string",
        "predict",
        "the judge's prompts of a predict run (okgqa: G-Eval, item_id = [answer item, criterion])",
    ),
    Table(
        "predict.okgqa_answers",
        "{out}/okgqa_answers",
        "item_id string, qid string, method string, seed int, level double, n_triples bigint, n_facts int, "
        "answer string, abstained boolean, model string, run string",
        "predict",
        "a model's OKGQA-P answers per question and graph (method, seed, level; level 0.0 the original subgraph; "
        "method none: no knowledge), the graph's triples and the facts given, abstained (spec 5.2)",
    ),
    Table(
        "predict.okgqa_scores",
        "{out}/okgqa_scores",
        "model string, judge_model string, run string, setting string, method string, seed int, level double, "
        "metric string, value double, n bigint, n_scored bigint, n_responding bigint",
        "predict",
        "G-Eval per (method, seed, level) and criterion: mean score / 10 in % over the answers the judge scored "
        "(paper 004 Sec. 3.3, App. A.3), with the answers, those scored and those not abstaining",
    ),
    Table(
        "predict.okgqa_levels",
        "{out}/okgqa_levels",
        "method string, level double, metric string, value double, drop double, seeds bigint, ats double, "
        "sc2d double, sd2 double",
        "predict",
        "OKGQA-P per method, level and metric: the score's mean over seeds, g(G) - g(G') against level 0.0, and "
        "the mean ATS, SC2D, SD2 of the level's graphs (paper 004 Sec. 3.2, Fig. 5)",
    ),
    Table(
        "predict.synthkgqa_answers",
        "{out}/synthkgqa_answers",
        "id string, split string, graph_isomorphism string, n_hops int, answer string, em_hits double, "
        "em_recall double, em_strict_hits double, em_strict_recall double, gt_recall double, gt_precision double, "
        "gt_f1 double, answer_hits double, answer_recall double, size bigint, context string, model string, "
        "run string",
        "predict",
        "a model's SynthKGQA answers per question scored (paper 002 §4, Table 2; spec 3.5): EM and EM-strict "
        "Hits and Recall against the answers' labels, the context's ground-truth-triple recall, precision and "
        "F1, answer-node Hits and Recall, and its size",
    ),
    Table(
        "predict.synthkgqa_groups",
        "{out}/synthkgqa_groups",
        "group_by string, group string, metric string, value double, n bigint, context string, model string, "
        "run string",
        "predict",
        "the SynthKGQA scores averaged per question over all questions (group_by all), per isomorphism type "
        "(graph_isomorphism) and per hop count (n_hops): Table 2, Fig. D6, D7",
    ),
    Table(
        "mcq.prediction_quarantine",
        "{out}/mcq_quarantine",
        "source_file string, line_number bigint, line string, reason string, detail string",
        "score-mcq",
        "predictions that were not scored, with the reason (line_number null for a Delta table)",
    ),
)
BY_NAME = {t.name: t for t in TABLES}


def table(name: str) -> Table:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no table '{name}' in the catalog") from None


def path(name: str, **parts: str) -> str:
    """The location of the catalogued table ``name``."""
    return table(name).path(**parts)


# The tables of one statistics folder (``kgbrink stats``), each ``stats.<name>`` in the catalog.
STATS_TABLES = ("entity_popularity", "entity_relation_popularity", "relation_statistics", "degree_histogram")


def stats_dir(dataset: str, splits: list[str]) -> str:
    """The folder of the statistics of ``dataset`` on ``splits``: ``<dataset>/stats/<split>+<split>...``."""
    return path("stats.entity_popularity", dataset=dataset, splits="+".join(sorted(splits))).rsplit("/", 1)[0]


_TRIPLES_VERSION = re.compile(r"of triples version (\d+)$")


def stats_note(splits: list[str], triples_version: int) -> str:
    """The commit message of every statistics table: its splits and the triples version it is computed from."""
    return f"stats on {'+'.join(sorted(splits))} of triples version {triples_version}"


def recorded_triples_version(description: str | None) -> int | None:
    """The triples version a :func:`stats_note` names (None: a message without one)."""
    found = _TRIPLES_VERSION.search(description or "")
    return int(found.group(1)) if found else None


def find(location: str, name: str | None = None) -> Table | None:
    """The catalog entry a location belongs to: the most specific matching pattern
    (``{dataset}/variants/{variant}/rules`` before ``{dataset}/rules``), ``name`` among equally specific."""
    found = [t for t in TABLES if t.matches(location)]
    if not found:
        return None
    return max(found, key=lambda t: (len(re.sub(r"\{(dataset|out)\}", "", t.pattern)), t.name == name))


def check_schema(entry: Table, frame) -> None:
    """Fail when ``frame`` does not have the catalogued columns and types of ``entry`` (nullability aside)."""
    if entry.schema is None:
        return
    from pyspark.sql.types import _parse_datatype_string

    declared = _parse_datatype_string(entry.schema).simpleString()
    actual = frame.schema.simpleString()
    if declared != actual:
        raise RuntimeError(f"internal: table '{entry.name}' written with {actual}; the catalog declares {declared}")


def reference_markdown() -> str:
    """The table reference (a Markdown table) of ``docs/tables.md``."""
    lines = markdown.table(
        ["table", "path", "written by", "partitioned by", "columns", "what"],
        (
            [
                t.name + ("" if t.format == "delta" else f" ({t.format})"),
                f"`{t.pattern}`",
                t.writer,
                ", ".join(t.partition_by) or "-",
                f"`{t.schema}`" if t.schema else "(see what)",
                t.doc,
            ]
            for t in TABLES
        ),
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
