"""What each benchmark of a release is, declared once (as a ``datasets`` builder carries one ``DatasetInfo``
and its configs): its title and citation (card, Croissant), the settings sections its fingerprint covers,
where its tables are, its configurations (Delta tables and exported JSON Lines files) and those its report
shows. ``kgbrink release`` builds each with the builder of the same name (:data:`kgbrink.jobs.release.BUILDERS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kgbrink.rules.model import RULE_TABLE_COLUMNS

NAME = "release"  # the question-set and mcq names the release's builders write under


@dataclass(frozen=True)
class TablePart:
    """A configuration made of one Delta table: ``table`` (a catalog name) at its benchmark's location, its
    ``columns`` (all: None) with the ids of ``entity_columns`` / ``relation_columns`` replaced by keys, one
    file set per value of the column ``split`` (one ``train`` set: None), also as JSON Lines when ``jsonl``;
    ``questions``: the question set it is read from instead of its benchmark's location's."""

    config: str
    table: str
    description: str
    columns: tuple[str, ...] | None = None
    entity_columns: tuple[str, ...] = ()
    relation_columns: tuple[str, ...] = ()
    split: str | None = None
    jsonl: bool = False
    questions: str | None = None  # the question set it is read from, when not its benchmark's location's


@dataclass(frozen=True)
class FilePart:
    """A configuration made of JSON Lines files a builder exported: ``files`` maps each split to the file's
    path relative to the benchmark's export folder."""

    config: str
    description: str
    files: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of a release. ``sections``: the settings sections it is built from (its fingerprint's
    settings part); ``location``: the catalog path parts of its tables, from the settings; ``tables`` and
    ``files``: its configurations in release order; ``report_tables``: those the release's report reads."""

    name: str
    title: str
    citation: str | None = None
    sections: tuple[str, ...] = ()
    location: Callable[[object], dict[str, str]] = lambda settings: {}
    tables: tuple[TablePart, ...] = ()
    files: tuple[FilePart, ...] = ()
    report_tables: tuple[str, ...] = ()


TRIPLE_KEYS = {"entity_columns": ("h", "t"), "relation_columns": ("r",)}
SPLITS3 = tuple((s, f"{s}.jsonl") for s in ("train", "valid", "test"))
MCQ_FILES = (("easy", "test_simple.jsonl"), ("medium", "test_medium.jsonl"), ("hard", "test_hard.jsonl"))


def _under(folder: str, files: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``(split, file)`` pairs with each file under ``folder`` of the export."""
    return tuple((split, f"{folder}/{name}") for split, name in files)


KG = Benchmark(
    "kg",
    "the knowledge graph the benchmarks are built from",
    tables=(
        TablePart(
            "kg_triples", "triples", "the KG's triples by split", columns=("h", "r", "t", "split"), split="split",
            **TRIPLE_KEYS,
        ),
        # the dataset's ids beside the keys: predict --release reads the questions with the ids the dataset's
        # own runs had, so their prompts (ordered by id in places) are the same
        TablePart("kg_entities", "entities", "entity keys, labels and dataset ids", columns=("id", "key", "label")),
        TablePart("kg_relations", "relations", "relation keys, labels and dataset ids", columns=("id", "key", "label")),
    ),
)  # fmt: skip

BRINK = Benchmark(
    "brink",
    "BRINK incomplete-KG variant: complete and incomplete KGs, rules, provenance, questions",
    citation=(
        "@misc{zhou2025brink,\n  title={What Breaks Knowledge Graph based RAG? Benchmarking and Empirical Insights "
        "into Reasoning under Incomplete Knowledge},\n  author={Zhou, Dongzhuoran and Zhu, Yuqicheng and Wang, Xiaxia "
        "and Zhou, Hongkuan and He, Yuan and Chen, Jiaoyan and Staab, Steffen and Kharlamov, Evgeny},\n  year={2025}\n}"
    ),
    sections=("mining", "variant"),
    location=lambda settings: {"variant": settings.variant.name},
    tables=(
        TablePart("brink_complete", "variant.complete", "the complete KG by split", split="split", **TRIPLE_KEYS),
        TablePart(
            "brink_incomplete", "variant.incomplete", "the incomplete KG (removed triples left out) by split",
            split="split", **TRIPLE_KEYS,
        ),
        TablePart("brink_removed", "variant.removed", "the removed triples and the rules that infer them", **TRIPLE_KEYS),
        TablePart(
            "brink_rules", "variant.rules", "the Horn rules with AMIE3's metrics",
            columns=tuple(c for c in RULE_TABLE_COLUMNS if c != "body"),  # the body is in the rule's text
        ),
    ),
    files=(
        FilePart(
            "brink_provenance", "one record per selected grounding: triple, rule, body", (("train", "provenance.jsonl"),)
        ),
        FilePart(
            "brink_questions", "questions by entity key (Sec. 5.4 entity_id)",
            _under("questions/entity_id", SPLITS3),
        ),
        FilePart(
            "brink_questions_text_label", "questions by entity label (Sec. 5.4 text_label)",
            _under("questions/text_label", SPLITS3),
        ),
        FilePart(
            "brink_questions_private_id", "questions by private id (Sec. 5.4 private_id)",
            _under("questions/private_id", SPLITS3),
        ),
    ),
    report_tables=("brink_rules", "brink_removed"),
)  # fmt: skip

PROBE = Benchmark(
    "probe",
    "PROBE popularity statistics: entity and entity-relation popularity, relation statistics",
    citation=(
        "@misc{moon2026probe,\n  title={Generalized Rank-based Evaluation for Knowledge Graph Completion: "
        "Perspectives, Framework, and Analyses},\n  author={Moon, Sooho and Kang, Jian and Ko, Yunyong},\n"
        "  year={2026},\n  eprint={2606.08921},\n  archivePrefix={arXiv}\n}"
    ),
    sections=("stats",),
    location=lambda settings: {"splits": "+".join(sorted(settings.stats.splits))},
    tables=(
        TablePart(
            "probe_entity_popularity", "stats.entity_popularity",
            "d(e) and its parts; delta = d(e) / 2|T| (PROBE Sec. 4)", entity_columns=("entity",),
        ),
        TablePart(
            "probe_entity_relation_popularity", "stats.entity_relation_popularity",
            "d(e => r) and delta(r|e) per (entity, relation)", entity_columns=("entity",),
            relation_columns=("relation",),
        ),
        TablePart(
            "probe_relation_statistics", "stats.relation_statistics",
            "facts and (inverse) functionality per relation", relation_columns=("relation",),
        ),
        TablePart("probe_degree_histogram", "stats.degree_histogram", "entities per degree"),
    ),
    report_tables=("probe_degree_histogram",),
)  # fmt: skip

SYNTHKGQA = Benchmark(
    "synthkgqa",
    "SynthKGQA seed subgraphs, questions with ground-truth subgraphs, question-specific graphs",
    citation=(
        "@misc{cattaneo2025synthkgqa,\n  title={Ground-Truth Subgraphs for Better Training and Evaluation of "
        "Knowledge Graph Augmented LLMs},\n  author={Cattaneo, Alberto and Luschi, Carlo and Justus, Daniel},\n"
        "  year={2025}\n}"
    ),
    sections=("seed_graphs", "gt_questions", "question_graphs", "shortest_paths"),
    location=lambda settings: {"questions": NAME},
    tables=(
        TablePart(
            "synthkgqa_question_graphs", "synthkgqa.question_graphs",
            "question-specific graphs (App. C.1): per question its triples", split="split", **TRIPLE_KEYS,
        ),
        TablePart(
            "synthkgqa_question_graph_sizes", "synthkgqa.question_graph_sizes",
            "per question the graph's size after each step",
        ),
        TablePart(
            "synthkgqa_answer_types", "synthkgqa.answer_types", "questions per split and isomorphism type (Table A1)"
        ),
        TablePart(
            "synthkgqa_sp_table_d2", "synthkgqa.sp_table_d2", "shortest paths against ground-truth paths (Table D2)"
        ),
        TablePart(
            "synthkgqa_sp_figure_d9", "synthkgqa.sp_figure_d9",
            "shortest-path lengths and counts by ground-truth length (Fig. D9)",
        ),
        TablePart(
            "synthkgqa_sp_triples", "synthkgqa.sp_triples",
            "per question the triples on some shortest seed-answer path (spec 2.E)", **TRIPLE_KEYS,
        ),
    ),
    files=(
        FilePart(
            "synthkgqa_seed_graphs", "seed subgraphs (Algorithm 1) as LLM prompt records", (("train", "prompts.jsonl"),)
        ),
    ),
    report_tables=("synthkgqa_answer_types", "synthkgqa_sp_table_d2"),
)  # fmt: skip

PROBEKGC = Benchmark(
    "probekgc",
    "ProbeKGC multiple-choice KG completion questions (easy, medium, hard options)",
    citation=(
        "@misc{probekgc2025,\n  title={Are LLMs Really Knowledgeable for Knowledge Graph Completion?},\n"
        "  year={2025}\n}"
    ),
    sections=("mcq",),
    location=lambda settings: {"questions": NAME},
    tables=(
        TablePart("probekgc_statistics", "mcq.statistics", "entities, relations, triples and options per difficulty"),
    ),
    files=(
        FilePart(
            "probekgc_questions", "multiple-choice questions by key, one split per option difficulty",
            _under("keys", MCQ_FILES),
        ),
        FilePart(
            "probekgc_questions_text", "multiple-choice questions by label",
            _under("text", MCQ_FILES),
        ),
    ),
    report_tables=("probekgc_statistics",),
)  # fmt: skip

OKGQA = Benchmark(
    "okgqa",
    "OKGQA-P perturbations (RS, RR, ER, ED) of the whole KG and of a question set's subgraphs, their similarity",
    citation=(
        "@misc{sui2025okgqa,\n  title={Can Knowledge Graphs Make Large Language Models More Trustworthy? An "
        "Empirical Study over Open-ended Question Answering},\n  author={Sui, Yuan and Hooi, Bryan},\n"
        "  year={2025}\n}"
    ),
    sections=("perturbation", "okgqa_subgraph"),
    location=lambda settings: {"questions": "kg"},
    tables=(
        TablePart(
            "okgqa_perturbation_log", "okgqa.perturbation_log",
            "every operation: old and new triple, the first level that applies it (graph at level p: the KG "
            "without the old, with the new triples of levels <= p)",
            columns=("method", "seed", "level", "op_rank", "old_h", "old_r", "old_t", "new_h", "new_r", "new_t"),
            entity_columns=("old_h", "old_t", "new_h", "new_t"), relation_columns=("old_r", "new_r"),
        ),
        TablePart(
            "okgqa_perturbations", "okgqa.perturbations", "per (method, level, seed) the operations requested and made"
        ),
        TablePart(
            "okgqa_kg_similarity", "okgqa.kg_similarity", "ATS, SC2D, SD2 of each perturbed KG (App. A.7, Fig. 4)"
        ),
        # the question set (release --okgqa-questions): each question's subgraph and its perturbed graphs
        TablePart(
            "okgqa_questions_perturbed", "okgqa.perturbed",
            "per question (scope_key = qid), method and seed the union of its subgraph and perturbed subgraphs, "
            "each triple with the levels whose graph holds it",
            columns=("method", "seed", "scope_key", "h", "r", "t", "original", "levels"), questions=NAME,
            **TRIPLE_KEYS,
        ),
        TablePart(
            "okgqa_questions_perturbations", "okgqa.perturbations",
            "per (method, level, seed) the operations requested and made on the question subgraphs", questions=NAME,
        ),
        TablePart(
            "okgqa_questions_similarity", "okgqa.kg_similarity",
            "ATS, SC2D, SD2 of the perturbed question subgraphs (Fig. 5's x-axes)", questions=NAME,
        ),
    ),
    files=(
        FilePart("okgqa_questions", "the questions: qid, entities by key, text, references", (("train", "questions.jsonl"),)),
    ),
    report_tables=("okgqa_kg_similarity",),
)  # fmt: skip

# released only when the dataset holds kgbrink predict's scores (release.results); its one configuration
# is the scores table as it is, published by its builder
RESULTS = Benchmark(
    "results", "scores of models on these benchmarks (kgbrink predict), one row per run, metric and labels"
)

DECLARED = (KG, BRINK, PROBE, SYNTHKGQA, PROBEKGC, OKGQA, RESULTS)
BY_NAME = {benchmark.name: benchmark for benchmark in DECLARED}
