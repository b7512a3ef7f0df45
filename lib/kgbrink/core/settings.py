"""Typed settings: one dataclass per section, defaults stated once, here.

Each section checks its own values when it is made (its ``__post_init__``: a :class:`ConfigError` naming the
setting); :mod:`kgbrink.core.loader` reads them from a file, the environment and ``--set`` overrides. The
settings reference in ``docs/configuration.md`` is generated from these classes
(:mod:`kgbrink.core.reference_docs`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from kgbrink.core.endpoint_settings import JudgeSettings, PredictSettings
from kgbrink.core.locations import resolve_location
from kgbrink.core.machine import driver_memory_default, machine_memory
from kgbrink.core.typed import ConfigError, require, setting


def _split_names(key: str, splits: list[str] | None) -> tuple[bool, str]:
    ok = splits is None or (bool(splits) and all(s.strip() for s in splits))
    return ok, f"{key} must be a non-empty list of split names"


DRIVER_MEMORY = "half the machine's memory in whole GB, 1g to 16g"
LOCAL_SPARK_CONF = {
    "spark.driver.memory": driver_memory_default(machine_memory()),  # DRIVER_MEMORY
    "spark.sql.shuffle.partitions": 8,
    "spark.sql.adaptive.enabled": True,
    "spark.sql.adaptive.coalescePartitions.enabled": True,
    "spark.sql.files.maxPartitionBytes": "64m",
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.ui.enabled": False,
    "spark.ui.showConsoleProgress": False,
    "spark.sql.session.timeZone": "UTC",
    # a cached frame is named by its plan's text: long lineages (predict's judge round) made it gigabytes
    "spark.sql.maxPlanStringLength": 1_000_000,
    "spark.databricks.delta.snapshotPartitions": 2,
    # PySpark 4 sends every DataFrame call's Python call site to the JVM (ten py4j round trips more per call,
    # for error messages): off, a third of the driver's py4j calls (BENCHMARKS.md, "The test suite and CI")
    "spark.python.sql.dataFrameDebugging.enabled": False,
    "spark.databricks.delta.stats.skipping": True,
    "spark.databricks.delta.retentionDurationCheck.enabled": True,
}


@dataclass
class SparkSettings:
    master: str | None = setting("local[*]", "Spark master; null leaves it to spark-submit (--master yarn, k8s://...)")
    app_name: str = setting("kgbrink", "Spark application name")
    jars_dirs: list[str] = setting(
        ["./.cache/jars/core", "./.cache/jars/graphframes"],
        "folders whose *.jar files go into spark.jars (resolved by `make jars` from infra/jvm/pom.xml); "
        "relative to kgbrink's installation ($KGBRINK_HOME, else the project folder), not the working directory",
        path="install",
    )
    warehouse_dir: str = setting("./data/warehouse", "spark.sql.warehouse.dir", path=True)
    checkpoint_dir: str = setting(
        "./data/checkpoints",
        "reliable checkpoints go to a folder of their job's under it, removed at job end",
        path=True,
    )
    checkpoint: str = setting(
        "local",
        "how a step cuts lineage: local (executor blocks, lost with their executor) or reliable (files under "
        "checkpoint_dir, survive executor loss; the cluster profiles)",
    )
    event_log_dir: str | None = setting(
        None,
        "folder of Spark's event logs (local or s3a://), one plain JSON Lines file per run, read by kgbrink "
        "profile; null: none written",
        path=True,
    )
    conf: dict[str, Any] = setting(
        LOCAL_SPARK_CONF,
        "Spark settings, merged key by key over these defaults (a key set to null is removed); "
        f"spark.driver.memory: {DRIVER_MEMORY}",
    )

    def __post_init__(self) -> None:
        require(
            (
                self.checkpoint in ("local", "reliable"),
                f"spark.checkpoint must be local or reliable, got {self.checkpoint!r}",
            )
        )


@dataclass
class TrackingSettings:
    uri: str = setting("sqlite:///./data/mlflow.db", "MLflow tracking URI (SQLite file, http://..., databricks)")
    experiment: str = setting("kgbrink", "MLflow experiment of every run")
    artifact_location: str | None = setting("./data/mlflow-artifacts", "artifact store of a new experiment", path=True)


@dataclass
class IngestSettings:
    max_bad_fraction: float = setting(0.001, "fail when quarantined lines exceed this share of the input lines")
    broadcast_dictionaries: bool = setting(
        True, "join the key -> id dictionaries by broadcast (one machine, up to ~10M keys); off on a cluster"
    )
    lease_seconds: float = setting(
        600.0, "a run's writer lease on its dataset lasts this long unless renewed (every third of it)"
    )

    def __post_init__(self) -> None:
        require(
            (
                0 <= self.max_bad_fraction <= 1,
                f"ingest.max_bad_fraction must be a number in [0, 1], got {self.max_bad_fraction!r}",
            )
        )


@dataclass
class StatsSettings:
    splits: list[str] = setting(["train"], "splits the popularity statistics are computed on")
    broadcast_entity_degrees: bool = setting(True, "join d(e) to the (entity, relation) counts by broadcast")

    def __post_init__(self) -> None:
        require(_split_names("stats.splits", self.splits))


@dataclass
class ScoringSettings:
    alphas: list[float] = setting([1.0, 0.5, 0.0, -0.5, -1.0], "PROBE alphas of `kgbrink score`")
    betas: list[float] = setting([0.0, 0.2, 0.4, 0.6, 0.8], "PROBE betas")
    hits: list[int] = setting([1, 3, 10], "Hits@K")
    p_values: list[float] = setting([0.25, 0.33, 0.67], "p-MRR exponents")
    popularity_groups: int = setting(4, "equal-count popularity groups of the Fig. 11 breakdown (0: none)")
    popularity_top_percent: list[float] = setting(
        [], "the paper's Fig. 11 groups instead: cut points in % of the most popular queries, e.g. [1, 10, 50]"
    )
    strat_betas: list[float] = setting([0.5, 1.0], "strat-MRR betas (Mohamed et al. 2020; empty: none)")
    max_bad_fraction: float = setting(0.001, "fail when quarantined rank rows exceed this share of the input rows")
    parquet_statistics: bool = setting(
        True, "skip row checks that Parquet footers prove cannot fail (statistics trusted as Spark's filters do)"
    )
    batch_bytes: int = setting(1 << 30, "rank files are scored in batches of whole files up to this many bytes")
    check_duplicate_queries: bool = setting(
        True, "quarantine every row of a query given twice (duplicate_query): a scan and a shuffle of the keys"
    )
    broadcast_tables: bool = setting(True, "broadcast dictionaries and popularity tables to the rank scan")

    def __post_init__(self) -> None:
        require(
            (
                0 <= self.max_bad_fraction <= 1,
                f"scoring.max_bad_fraction must be a number in [0, 1], got {self.max_bad_fraction!r}",
            ),
            (self.batch_bytes >= 1, "scoring.batch_bytes must be a positive integer"),
        )


@dataclass
class MiningSettings:
    splits: list[str] | None = setting(None, "triples the rules are mined on (null: every split of the dataset)")
    max_atoms: int = setting(3, "atoms per rule counting the head (AMIE3 -maxad)")
    min_head_coverage: float = setting(0.1, "AMIE3 -minhc")
    min_std_confidence: float = setting(0.3, "AMIE3 -minc")
    min_pca_confidence: float = setting(0.4, "AMIE3 -minpca")
    min_support: int = setting(0, "support floor on top of head coverage (0: off)")
    min_initial_support: int = setting(100, "AMIE3 -minis: facts a head relation needs")
    recursivity_limit: int = setting(3, "a relation at most this many times per rule, head included")
    max_body_paths: int = setting(2_000_000_000, "fail instead of joining more rows for one rule shape's body sizes")
    broadcast_edges: bool = setting(False, "ship the edge table to every task for the rule joins")
    rows_per_batch: int = setting(50_000_000, "head facts of a shape above this many rows are mined in hash buckets")
    adaptive_min_edges: int = setting(1_000_000, "KGs with fewer edges are mined without adaptive query execution")

    def __post_init__(self) -> None:
        require(_split_names("mining.splits", self.splits))


@dataclass
class GroundingSettings:
    seed: int = setting(0, "seed of the per-rule grounding samples (kgbrink ground --per-rule N)")


@dataclass
class SynthSettings:
    triples: int = setting(200_000, "distinct triples of the generated sample KG (`make run`)")
    seed: int = setting(7, "seed of the generator")
    malformed_fraction: float = setting(0.0, "share of extra malformed lines")
    duplicate_fraction: float = setting(0.0, "share of extra exact duplicate lines")


@dataclass
class VariantSettings:
    name: str = setting("brink", "variant name: <dataset>/variants/<name>/")
    groundings_per_rule: int = setting(30, "groundings sampled per rule by seeded hash (BRINK Sec. 3.2)")
    seed: int = setting(0, "seed of every random choice of a build")
    removal_mode: str = setting("maximal", "maximal (kgbrink's extension) or reference (the published rule)")
    tau: float = setting(
        0.05, "Alg. 1: an answer entity keeps at most floor(tau |Q|) questions, tau in (0, 1] taken as written"
    )
    max_answers: int | None = setting(
        1000,
        "questions with more answers are dropped before Alg. 1 and counted (kgbrink's guard against hub "
        "topics, not in BRINK; null: keep every question, as the paper)",
    )
    question_unit: str = setting(
        "removed_triple",
        "what makes a question: removed_triple (one per removed triple, Sec. 3.2's text) or grounding (one per "
        "selected grounding: the reading behind BRINK Table 3, which has more questions than removed triples)",
    )
    split_ratios: list[float] = setting([0.8, 0.1, 0.1], "train : valid : test of the questions (Sec. 3.3)")
    templates: dict[str, str] = setting(
        {"forward": "What is the {relation} of {topic}?", "inverse": "Which entity has {topic} as its {relation}?"},
        "question text: forward when the topic is the head, inverse when it is the tail",
    )

    def __post_init__(self) -> None:
        require(
            (self.removal_mode in ("maximal", "reference"), "variant.removal_mode must be maximal or reference"),
            (0 < self.tau <= 1, f"variant.tau must be in (0, 1], got {self.tau!r}"),
            (
                self.max_answers is None or self.max_answers >= 1,
                f"variant.max_answers must be >= 1 or null, got {self.max_answers}",
            ),
            (
                self.question_unit in ("removed_triple", "grounding"),
                f"variant.question_unit must be removed_triple or grounding, got {self.question_unit!r}",
            ),
        )


@dataclass
class OkgqaSubgraphSettings:
    k: int = setting(2, "hops of the question subgraph's edge ball (paper 004 Sec. 3.1)")
    directed: bool = setting(True, "PPR walks follow h -> t (the authors' nx.DiGraph); false: both ways")
    collapse_parallel: bool = setting(False, "one PPR transition per ordered pair, as the authors' DiGraph")
    max_expand_degree: int | None = setting(None, "walks stop at non-seed nodes with more triples (null: no cap)")
    max_subgraph_edges: int | None = setting(None, "triples kept per question, seed triples first (null: all)")
    alpha: float = setting(0.85, "PPR damping factor (the authors' config.py)")
    tol: float = setting(1e-6, "PPR tolerance: stop at L1 change < n tol (App. A.5)")
    max_iter: int = setting(100, "PPR iterations at most (App. A.5)")
    threshold: float = setting(1e-5, "nodes with PPR below it are pruned (App. A.5)")
    ppr_implementation: str = setting("local", "local (one task per question, scipy) or batched (DataFrame rounds)")
    seed: int = setting(42, "seed of the hash order of max_subgraph_edges")
    max_bad_fraction: float = setting(0.01, "fail when quarantined question entities exceed this share")
    max_entities_per_question: int = setting(1000, "questions with more entity keys are quarantined")

    def __post_init__(self) -> None:
        require(
            (self.k >= 1, f"okgqa_subgraph.k must be >= 1, got {self.k}"),
            (0 < self.alpha < 1, f"okgqa_subgraph.alpha must be in (0, 1), got {self.alpha}"),
            (self.tol > 0 and self.max_iter >= 1, "okgqa_subgraph.tol must be > 0 and max_iter >= 1"),
            (
                self.ppr_implementation in ("local", "batched"),
                "okgqa_subgraph.ppr_implementation must be local or batched",
            ),
            (
                0 <= self.max_bad_fraction <= 1,
                f"okgqa_subgraph.max_bad_fraction must be a number in [0, 1], got {self.max_bad_fraction!r}",
            ),
        )


@dataclass
class PerturbationSettings:
    seed: int = setting(42, "seed of every perturbation choice")
    levels: list[float] = setting([0.2, 0.4, 0.6, 0.8, 1.0], "perturbation levels: shares of the triples in scope")
    methods: list[str] = setting(["RS", "RR", "ER", "ED"], "relation swap/replacement, edge rewiring/deletion")
    scope: str = setting("subgraphs", "subgraphs (each question subgraph, as the paper) or kg (the whole KG)")
    scorer: str = setting("type_compatibility", "triple scorer of RR and ATS: type_compatibility, embeddings, scores")
    scorer_model: str = setting("transe", "embeddings scorer: transe or distmult")
    gamma: float = setting(12.0, "TransE margin: s = sigmoid(gamma - ||h + r - t||)")
    max_wedges: int = setting(
        300_000_000, "fail SC2D of the kg scope when one G^r of one graph has more wedges (held by one task)"
    )

    def __post_init__(self) -> None:
        scorers = ("type_compatibility", "embeddings", "scores")
        require(
            (bool(self.levels), "perturbation.levels must not be empty"),
            (self.scope in ("subgraphs", "kg"), f"perturbation.scope must be subgraphs or kg, got {self.scope!r}"),
            (self.scorer_model in ("transe", "distmult"), "perturbation.scorer_model must be transe or distmult"),
            *[(0 < level <= 1, f"perturbation.levels: {level} is outside (0, 1]") for level in self.levels],
            *[
                (m in ("RS", "RR", "ER", "ED"), f"perturbation.methods: unknown method {m!r} (known: RS, RR, ER, ED)")
                for m in self.methods
            ],
            (self.scorer in scorers, f"perturbation.scorer must be one of {', '.join(scorers)}"),
        )


MCQ_DEFAULT_TEMPLATES = {
    "tail prediction": "What is the <relation> of <head entity>?",
    "head prediction": "Which entity has <relation> <tail entity>?",
}


@dataclass
class McqSettings:
    seed: int = setting(42, "seed of the triple sample, the distractor draws and the option order (spec 3.A)")
    n_triples: int = setting(2000, "triples sampled from mcq.split, two queries each (ProbeKGC: 2,000)")
    split: str = setting("test", "split the triples are sampled from")
    options: int = setting(4, "options per question: the gold and options - 1 distractors")
    difficulties: list[str] = setting(["easy", "medium", "hard"], "option sets built: easy, medium, hard")
    filter_splits: list[str] | None = setting(
        None, "splits whose triples are true answers no distractor may be (null: every split)"
    )
    easy_candidates: int = setting(8, "hashed draws per distractor slot and round (easy and medium pools)")
    type_relation: str | None = setting(
        None, "medium: keep pool entities sharing a type (object of this relation key, e.g. P31) with the gold"
    )
    hard_mode: str = setting("scores", "hard distractors: scores (--scores) or embedding_neighbours (--entity-vectors)")
    hard_restrict_to_medium_pool: bool = setting(False, "hard (scores): only candidates of the medium pool")
    templates: dict[str, Any] = setting(
        {}, "per relation key: {'head prediction': ..., 'tail prediction': ...} with <head entity>, <tail entity>"
    )
    default_templates: dict[str, str] = setting(
        MCQ_DEFAULT_TEMPLATES, "question templates of relations without their own (<relation>: its label)"
    )
    renderings: list[str] = setting(["ids", "keys", "text"], "JSON Lines renderings written: ids, keys, text")
    export_formats: list[str] = setting(
        ["jsonl"], "files per rendering: jsonl (JSON Lines), json (one JSON array per file, as ProbeKGC's json.load)"
    )
    position_variants: bool = setting(True, "also write the variants with the gold moved to each letter")

    def __post_init__(self) -> None:
        known, tasks = ("easy", "medium", "hard"), ("head prediction", "tail prediction")
        require(
            (self.n_triples >= 1, f"mcq.n_triples must be >= 1, got {self.n_triples}"),
            (2 <= self.options <= 26, f"mcq.options must be in 2..26, got {self.options}"),
            (self.easy_candidates >= 1, "mcq.easy_candidates must be >= 1"),
            (bool(self.difficulties), "mcq.difficulties must not be empty"),
            (
                self.hard_mode in ("scores", "embedding_neighbours"),
                "mcq.hard_mode must be scores or embedding_neighbours",
            ),
            (bool(self.renderings), "mcq.renderings must not be empty"),
            (bool(self.export_formats), "mcq.export_formats must not be empty"),
            *[
                (x in ("jsonl", "json"), f"mcq.export_formats: unknown {x!r} (jsonl, json)")
                for x in self.export_formats
            ],
            *[(d in known, f"mcq.difficulties: unknown {d!r} (known: easy, medium, hard)") for d in self.difficulties],
            *[
                (x in ("ids", "keys", "text"), f"mcq.renderings: unknown {x!r} (ids, keys, text)")
                for x in self.renderings
            ],
            *[(k in self.default_templates, f"mcq.default_templates needs a {k!r} template") for k in tasks],
            *[
                (
                    isinstance(given, dict) and all(isinstance(given.get(k), str) for k in tasks),
                    f"mcq.templates.{relation} must map 'head prediction' and 'tail prediction' to text",
                )
                for relation, given in self.templates.items()
            ],
        )


@dataclass
class McqScoringSettings:
    max_bad_fraction: float = setting(0.001, "score-mcq fails when quarantined predictions exceed this share of them")
    degree_bins: str = setting("log2", "topic-degree groups: log2 ([1,2), [2,4), ...) or quantiles (equal counts)")
    degree_groups: int = setting(4, "groups of degree_bins quantiles")
    api_raw: bool = setting(False, "logprobs as given, not renormalised (the authors' API code; spec 3.C)")

    def __post_init__(self) -> None:
        require(
            (
                0 <= self.max_bad_fraction <= 1,
                f"mcq_scoring.max_bad_fraction must be a number in [0, 1], got {self.max_bad_fraction!r}",
            )
        )


@dataclass
class SeedGraphSettings:
    seed: int = setting(1111, "seed of the start entities and every Softmax draw of Algorithm 1 (paper 002 App. A.1)")
    n_samples: int = setting(1000, "seed subgraphs sampled")
    n_nodes: int = setting(10, "node limit N_nodes (the authors' code: 10)")
    n_edges: int = setting(30, "edge limit N_edges (the authors' code: 30; the paper: typically 50 to 100)")
    degree: str = setting("edges", "d(x) of Softmax(1/d): edges (the paper) or neighbours (distinct, the code)")
    exclude_relations: list[str] = setting(
        ["P21", "P31", "P530", "P735"], "relation keys left out of the sampled graph (the authors' code)"
    )
    trim_to_edge_limit: bool = setting(False, "subsample Q to n_edges after the last step (the code; the paper keeps)")
    rejection_draws: int = setting(16, "hashed positions tried per step for a hub pivot (exact rejection sampling)")
    enumerate_below_degree: int = setting(4096, "pivots with fewer neighbours draw from their full neighbour list")
    prompt_edges: int = setting(2, "k, edges the LLM is asked to use (carried into the prompt records)")


@dataclass
class GtQuestionSettings:
    max_edges: int = setting(6, "answer subgraphs with more triples are invalid (paper 002 Sec. 3)")
    max_bad_fraction: float = setting(0.01, "fail when quarantined question records exceed this share")
    max_keys_per_question: int = setting(1000, "records with more seeds and subgraph triples are quarantined")
    max_answers: int = setting(
        10, "answer sets: questions with more answers are flagged (the code's --max-num-answers)"
    )
    seed: int = setting(1111, "seed of the procedural question generator")
    types: list[str] = setting(
        ["(1)", "(2)", "(1)(1)", "(2)(1)", "((1)(1))", "(3)", "(1)(1)(1)", "(2)(1)(1)"],
        "isomorphism types the procedural generator plants (Table A1 identifiers)",
    )
    per_type: int = setting(100, "questions the procedural generator plants per type")


@dataclass
class QuestionGraphSettings:
    mode: str = setting("directed_union", "k-hop neighbourhood: directed_union (the code) or undirected (the paper)")
    k_min: int = setting(3, "hop radius k = max(k_min, n_hops) (App. C.1)")
    mixed_step_cap: int = setting(60000, "out-then-in / in-then-out triples kept per question (directed_union)")
    max_expand_degree: int | None = setting(None, "undirected: do not expand through nodes with more triples")
    max_neighbourhood_edges: int | None = setting(None, "neighbourhood triples kept per question (null: all)")
    top_nodes: int = setting(2500, "PPR top nodes kept (App. C.1)")
    min_ppr: float = setting(1e-6, "PPR score a top node must exceed")
    max_triples: int = setting(20000, "kept triples at most before the re-additions")
    shrink_step: int = setting(100, "top nodes dropped per round while over max_triples")
    min_top_nodes: int = setting(150, "below this many top nodes, keep a hashed sample of max_triples - 2 triples")
    keep_always_cap: int = setting(7500, "triples touching GT nodes with one endpoint outside kept at most")
    metapath_cap: int = setting(650, "confounder triples per GT metapath")
    sp_metapath_cap: int = setting(7500, "shortest-path metapath triples re-added at most")
    metapath_directed: bool = setting(False, "GT metapaths keep the direction of each triple (the code drops it)")
    alpha: float = setting(0.85, "PPR damping factor (networkx default)")
    tol: float = setting(1e-6, "PPR tolerance: stop at L1 change < n tol")
    max_iter: int = setting(100, "PPR iterations at most")
    seed: int = setting(1111, "seed of the hashed samples of the caps")


@dataclass
class ShortestPathSettings:
    graph: str = setting("neighbourhood", "paths searched in the question's neighbourhood or in the full_kg")
    answers: str = setting("generated", "answer nodes: the generated answer or all answers of the query")


@dataclass
class ReleaseSettings:
    out: str = setting(
        "./data/releases", "release root: versions v1, v2, ... under it, LATEST names the current", path=True
    )
    name: str = setting("kgbrink benchmarks", "the release's pretty name (dataset card, Croissant)")
    benchmarks: list[str] = setting(
        ["kg", "brink", "probe", "synthkgqa", "probekgc", "okgqa"], "benchmarks built and published (issue 47)"
    )
    licence: str = setting("cc-by-4.0", "licence id of the card (Hugging Face's ids: cc-by-4.0, cc0-1.0, ...)")
    url: str | None = setting(None, "where the release is published (Croissant url; null: kgbrink's)")
    shard_rows: int = setting(5_000_000, "rows per Parquet or JSON Lines file at most")
    question_graphs: bool = setting(True, "synthkgqa: question-specific graphs and shortest-path tables")
    results: bool = setting(
        True, "publish the dataset's predict/results (kgbrink predict's scores) as the results config and leaderboard"
    )
    questions_per_type: int | None = setting(
        None, "synthkgqa without --questions: planted questions per type (null: gt_questions.per_type)"
    )
    parallel: int = setting(
        1,
        "benchmarks built at once, each in its own thread and Spark session (1: one after another; a cluster: "
        "6, docs/cluster.md); the files are the same bytes",
    )

    def __post_init__(self) -> None:
        require((self.parallel >= 1, f"release.parallel must be at least 1, got {self.parallel!r}"))


SECTIONS = {
    "spark": SparkSettings,
    "tracking": TrackingSettings,
    "ingest": IngestSettings,
    "stats": StatsSettings,
    "scoring": ScoringSettings,
    "mining": MiningSettings,
    "grounding": GroundingSettings,
    "synth": SynthSettings,
    "variant": VariantSettings,
    "okgqa_subgraph": OkgqaSubgraphSettings,
    "perturbation": PerturbationSettings,
    "mcq": McqSettings,
    "mcq_scoring": McqScoringSettings,
    "seed_graphs": SeedGraphSettings,
    "gt_questions": GtQuestionSettings,
    "question_graphs": QuestionGraphSettings,
    "shortest_paths": ShortestPathSettings,
    "release": ReleaseSettings,
    "predict": PredictSettings,
    "judge": JudgeSettings,
}
TOP_LEVEL = {
    "env": (str, "local", "environment name (recorded with every MLflow run)"),
    "data_dir": (str, "./data", "root of the embedded default's data (sample KG, reports)"),
    "dataset": (str | None, None, "dataset of jobs run without --dataset (null: --dataset is required)"),
    "log_dir": (str, "./data/logs", "local folder of the JVM log and the traces of failed jobs"),
}
PATH_TOP_LEVEL = {"data_dir", "dataset", "log_dir"}


@dataclass
class Settings:
    env: str
    data_dir: str
    dataset: str | None
    log_dir: str
    spark: SparkSettings
    tracking: TrackingSettings
    ingest: IngestSettings
    stats: StatsSettings
    scoring: ScoringSettings
    mining: MiningSettings
    grounding: GroundingSettings
    synth: SynthSettings
    variant: VariantSettings
    okgqa_subgraph: OkgqaSubgraphSettings
    perturbation: PerturbationSettings
    mcq: McqSettings
    mcq_scoring: McqScoringSettings
    seed_graphs: SeedGraphSettings
    gt_questions: GtQuestionSettings
    question_graphs: QuestionGraphSettings
    shortest_paths: ShortestPathSettings
    release: ReleaseSettings
    predict: PredictSettings
    judge: JudgeSettings
    source: str = "<defaults>"
    overrides: list[str] = field(default_factory=list)

    def get(self, dotted: str, default: Any = MISSING) -> Any:
        """A setting by its dotted key (``spark.conf.<key>`` names one Spark setting)."""
        node: Any = self
        for part in key_parts(dotted):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif not isinstance(node, Mapping) and hasattr(node, part) and part not in ("source", "overrides"):
                node = getattr(node, part)
            elif default is not MISSING:
                return default
            else:
                raise ConfigError(f"{self.source}: unknown setting '{dotted}'{closest(dotted)}")
        return node

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in TOP_LEVEL}
        for name in SECTIONS:
            section = getattr(self, name)
            out[name] = {f.name: _plain(getattr(section, f.name)) for f in fields(section)}
        return out

    def with_overrides(self, assignments: list[str]) -> Settings:
        """A copy with ``key=value`` assignments applied, each parsed by the setting's declared type."""
        from kgbrink.core.loader import overridden  # the loader builds Settings: imported when used

        return overridden(self, assignments)

    def require_dataset(self, given: str | None) -> str:
        """``given`` (``--dataset``) or the configured dataset; an empty value is an error."""
        if given is not None:
            if not str(given).strip():
                raise ConfigError("--dataset is empty")
            return resolve_location(given)
        if not self.dataset:
            raise ConfigError(f"no --dataset given and no 'dataset' in {self.source}")
        return self.dataset


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


def key_parts(dotted: str) -> list[str]:
    parts = dotted.strip().split(".")
    # Spark keys contain dots themselves: everything after spark.conf. is one key.
    if parts[:2] == ["spark", "conf"] and len(parts) > 2:
        return ["spark", "conf", ".".join(parts[2:])]
    return parts


def valid_keys() -> list[str]:
    keys = list(TOP_LEVEL)
    for name, cls in SECTIONS.items():
        keys.extend(f"{name}.{f.name}" for f in fields(cls))
    return keys


def closest(key: str) -> str:
    match = difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


assert all(is_dataclass(cls) for cls in SECTIONS.values())
