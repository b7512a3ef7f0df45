"""Typed settings: one dataclass per section, defaults stated once, here.

``conf/<env>.yaml`` holds only what an environment changes; ``--set key=value`` overrides a setting on the
command line. Every value is checked against its declared type (``--set mining.splits=train`` and
``--set 'mining.splits=[train]'`` both give ``["train"]``); an unknown key names the closest valid one.
Relative local paths become absolute at load time; URIs (``s3a://...``) stay as they are. The settings
reference in ``docs/configuration.md`` is generated from these classes (:mod:`kgbrink.core.reference_docs`).
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from kgbrink.core.typed import ConfigError, coerce


def setting(default: Any, doc: str, *, path: bool | str = False):
    """A field with its documentation; ``path``: a location resolved against the working directory
    (``"install"``: against kgbrink's installation, :func:`install_root`)."""
    meta = {"doc": doc, "path": path}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def machine_memory() -> int | None:
    """This machine's memory in bytes: ``MemTotal`` (``/proc/meminfo``, else ``os.sysconf``), at most the
    memory limit of the process's cgroup (a container's); None when neither can be read."""
    total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            total = min(total, int(Path(limit).read_text().strip()))
        except (OSError, ValueError):  # no such cgroup, or "max"
            pass
    return total


def driver_memory_default(total: int | None) -> str:
    """The driver heap for a machine of ``total`` bytes: half of it in whole GiB, 1g to 16g (4g unknown)."""
    if total is None:
        return "4g"
    return f"{min(16, max(1, total // 2 // (1 << 30)))}g"


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


@dataclass
class StatsSettings:
    splits: list[str] = setting(["train"], "splits the popularity statistics are computed on")
    broadcast_entity_degrees: bool = setting(True, "join d(e) to the (entity, relation) counts by broadcast")


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


@dataclass
class McqScoringSettings:
    max_bad_fraction: float = setting(0.001, "score-mcq fails when quarantined predictions exceed this share of them")
    degree_bins: str = setting("log2", "topic-degree groups: log2 ([1,2), [2,4), ...) or quantiles (equal counts)")
    degree_groups: int = setting(4, "groups of degree_bins quantiles")
    api_raw: bool = setting(False, "logprobs as given, not renormalised (the authors' API code; spec 3.C)")


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
class EndpointSettings:
    """One model endpoint: the shape of both roles' settings, ``predict`` (the answering model) and ``judge``
    (a scorer's judge, BRINK's rewriter), where a null field is the answering model's."""

    base_url: str | None = setting(
        None,
        "OpenAI-compatible endpoint: POST <base_url>/chat/completions (vLLM, llama.cpp, Ollama); judge: null is "
        "the answering endpoint, with its key",
    )
    model: str | None = setting(
        None, "model name sent with every request (predict: null needs --model; judge: null is the answering model)"
    )
    api_key_env: str | None = setting(
        None,
        "name of the environment variable holding the API key, never the key (null: no Authorization header; "
        "judge: used with its own base_url only)",
    )
    model_revision: str | None = setting(
        None,
        "a label of the model's weights or deployment, part of every call key: a new label asks again (judge: null "
        "is the answering model's when it is the same model)",
    )
    price_prompt_per_million: float | None = setting(
        None, "price of 10^6 prompt tokens (null: no cost reported; judge: null is the answering price)"
    )
    price_completion_per_million: float | None = setting(
        None, "price of 10^6 completion tokens (judge: null is the answering price)"
    )


@dataclass
class JudgeSettings(EndpointSettings):
    """The judge's endpoint (:class:`EndpointSettings`): every field null by default, the answering one's."""


@dataclass
class PredictSettings(EndpointSettings):
    base_url: str = setting(
        "http://127.0.0.1:8000/v1",
        "OpenAI-compatible endpoint: POST <base_url>/chat/completions (vLLM, llama.cpp, Ollama)",
    )
    temperature: float | None = setting(None, "sampling temperature (null: the benchmark's default, spec 0)")
    top_p: float | None = setting(None, "nucleus sampling (null: not sent)")
    max_tokens: int | None = setting(None, "completion tokens at most (null: the benchmark's default, spec 0)")
    seed: int | None = setting(None, "the request's seed (best effort on most servers; null: not sent)")
    tasks: int = setting(2, "Spark tasks sending requests at once (the pending prompts' partitions)")
    in_flight: int = setting(16, "requests in flight per task")
    requests_per_minute: float | None = setting(None, "global limit on requests per minute, shared by the tasks")
    tokens_per_minute: float | None = setting(None, "global limit on prompt + completion tokens per minute")
    timeout_seconds: float = setting(120.0, "one request's timeout")
    max_tries: int = setting(6, "tries per prompt (429, 5xx, timeouts, dropped connections, malformed bodies)")
    backoff_seconds: float = setting(1.0, "first retry's back-off; doubled per try, full jitter, Retry-After honoured")
    backoff_max_seconds: float = setting(60.0, "longest back-off between two tries")
    max_response_mb: float = setting(
        8.0, "a response body longer than this many MiB is not read (quarantined as too_large, not retried)"
    )
    max_cost: float | None = setting(
        None,
        "stop asking once this run's answers cost this much at the prices (each task stops at its share; requests "
        "in flight finish; every answer is kept; null: no limit)",
    )
    model_change: str = setting(
        "fail",
        "a run that would reuse answers of another response model or system_fingerprint than the endpoint's now: "
        "fail (before asking the rest) or allow",
    )
    max_bad_fraction: float = setting(
        0.05, "predict fails when unanswered or unparseable prompts exceed this share of the prompts"
    )
    criteria: list[str] = setting(
        ["empowerment", "comprehensiveness", "correctness", "context_relevance"],
        "okgqa: G-Eval criteria judged, each one call per answer (paper 004 App. A.3)",
    )
    max_facts: int = setting(
        200, "okgqa, brink neighbourhood: triples given as a question's knowledge at most (content-hash order)"
    )
    factscore: bool = setting(
        False, "okgqa: FActScore too (spec 5.3): one splitter request per answer, one verifier request per fact"
    )
    factscore_gamma: float | None = setting(
        None, "okgqa FActScore's length penalty gamma (FActScore's code: 10; null: none)"
    )
    max_atomic_facts: int = setting(30, "okgqa FActScore: atomic facts verified per answer at most")
    safe: bool = setting(
        False,
        "okgqa: SAFE too (spec 5.3): FActScore's atomic facts, each rated after up to predict.safe_max_steps "
        "searches (one request each) and one final request",
    )
    safe_max_steps: int = setting(5, "okgqa SAFE: searches per atomic fact at most (SAFE's max_steps)")
    safe_results: int = setting(3, "okgqa SAFE: documents a search returns at most (SAFE's num_searches)")
    safe_search: str = setting(
        "kg",
        "okgqa SAFE's search: kg (BM25 over the question's original subgraph and references) or "
        "module:function, called as function(query, documents, k) -> list of strings",
    )
    sc_samples: int = setting(5, "okgqa --context cot_sc: CoT samples per question before the selection call")
    sc_temperature: float = setting(0.7, "okgqa --context cot_sc: the samples' temperature (spec 5.1 [P])")
    embedding_model: str = setting(
        "text-embedding-3-small",
        "okgqa --context triplets/paths/pcst: the model embedding the question, nodes and relations, asked at "
        "POST <base_url>/embeddings (paper 004 §3.3)",
    )
    retrieval_k: int = setting(
        10,
        "okgqa --context triplets/paths/pcst: prizes k .. 1 for the top k nodes and relations, k triplets (spec 5.1 [P])",
    )
    path_max_edges: int = setting(3, "okgqa --context paths: triples per path at most (App. A.6; spec 5.1 [P])")
    max_paths: int = setting(10, "okgqa --context paths: paths retrieved per question graph at most (spec 5.1 [P])")
    neighbourhood_hops: int = setting(2, "brink neighbourhood: hops around the topic entity (1 or 2; spec 1.1)")
    spool_dir: str | None = setting(
        None,
        "folder of the answers as they arrive, seen by the driver and every executor (null: <dataset>/predict/_spool "
        "for a local dataset; a dataset on object storage needs a shared file system folder here)",
        path=True,
    )


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
        for part in _key_parts(dotted):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif not isinstance(node, Mapping) and hasattr(node, part) and part not in ("source", "overrides"):
                node = getattr(node, part)
            elif default is not MISSING:
                return default
            else:
                raise ConfigError(f"{self.source}: unknown setting '{dotted}'{_closest(dotted)}")
        return node

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in TOP_LEVEL}
        for name in SECTIONS:
            section = getattr(self, name)
            out[name] = {f.name: _plain(getattr(section, f.name)) for f in fields(section)}
        return out

    def with_overrides(self, assignments: list[str]) -> Settings:
        """A copy with ``key=value`` assignments applied, each parsed by the setting's declared type."""
        values = self.as_dict()
        for item in assignments:
            _assign(values, item)
        return _build(values, self.source, [*self.overrides, *assignments], merge_spark_conf=False)

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


def _key_parts(dotted: str) -> list[str]:
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


def _closest(key: str) -> str:
    match = difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _declared(key: str) -> tuple[Any, bool]:
    """The declared type of a dotted key and whether it is a path setting."""
    parts = key.split(".")
    if len(parts) == 1 and parts[0] in TOP_LEVEL:
        return TOP_LEVEL[parts[0]][0], parts[0] in PATH_TOP_LEVEL
    if len(parts) == 2 and parts[0] in SECTIONS:
        hints = typing.get_type_hints(SECTIONS[parts[0]])
        for f in fields(SECTIONS[parts[0]]):
            if f.name == parts[1]:
                return hints[f.name], f.metadata.get("path", False)
    raise ConfigError(f"unknown setting '{key}'{_closest(key)}")


def _assign(values: dict[str, Any], item: str) -> None:
    """Apply one ``key=value`` override; the value is read as YAML, then coerced to the declared type."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' is not of the form key=value")
    key, raw = item.split("=", 1)
    parts = _key_parts(key)
    try:
        parsed = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        parsed = raw
    if parts[:2] == ["spark", "conf"] and len(parts) == 3:
        values["spark"]["conf"][parts[2]] = parsed
        return
    kind, _ = _declared(".".join(parts))
    if kind is str or (typing.get_origin(kind) in (types.UnionType, typing.Union) and str in typing.get_args(kind)):
        parsed = None if parsed is None else raw  # a name stays as written ('007' is not 7)
    elif _is_list(kind) and isinstance(parsed, str) and "," in parsed:
        parsed = [yaml.safe_load(item) if item.strip() else "" for item in parsed.split(",")]  # a,b is [a, b]
    if len(parts) == 1:
        values[parts[0]] = parsed
    else:
        values[parts[0]][parts[1]] = parsed


def _is_list(kind: Any) -> bool:
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return any(typing.get_origin(a) is list for a in typing.get_args(kind))
    return typing.get_origin(kind) is list


def _build(values: Mapping[str, Any], source: str, overrides: list[str], merge_spark_conf: bool = True) -> Settings:
    """Typed settings from a mapping of the file's values over the defaults; unknown keys are errors.
    ``merge_spark_conf``: ``spark.conf`` is a file's, merged over the defaults (not yet-merged settings)."""
    kwargs: dict[str, Any] = {}
    for key in values:
        if key not in TOP_LEVEL and key not in SECTIONS:
            raise ConfigError(f"{source}: unknown setting '{key}'{_closest(key)}")
    for key, (kind, default, _doc) in TOP_LEVEL.items():
        value = coerce(key, values.get(key, default), kind)
        if key in PATH_TOP_LEVEL and value is not None and not str(value).strip():
            raise ConfigError(f"{source}: setting '{key}' is an empty path")
        kwargs[key] = resolve_location(value) if key in PATH_TOP_LEVEL else value
    for name, cls in SECTIONS.items():
        given = values.get(name) or {}
        if not isinstance(given, Mapping):
            raise ConfigError(f"{source}: '{name}' must be a mapping of settings")
        section = cls()
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in fields(cls)}
        for key, value in given.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown setting '{name}.{key}'{_closest(f'{name}.{key}')}")
            if name == "spark" and key == "conf":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"{source}: spark.conf must be a mapping of Spark settings")
                merged = {**(section.conf if merge_spark_conf else {}), **{str(k): v for k, v in value.items()}}
                value = {k: v for k, v in merged.items() if v is not None}
            setattr(section, key, coerce(f"{name}.{key}", value, hints[key]))
        for f in fields(cls):
            if f.metadata.get("path"):
                current = getattr(section, f.name)
                if any(
                    c is not None and not str(c).strip() for c in (current if isinstance(current, list) else [current])
                ):
                    raise ConfigError(f"{source}: setting '{name}.{f.name}' is an empty path")
                base = install_root() if f.metadata["path"] == "install" else None
                resolved = (
                    [resolve_location(p, base) for p in current]
                    if isinstance(current, list)
                    else resolve_location(current, base)
                )
                setattr(section, f.name, resolved)
        kwargs[name] = section
    return _validate(Settings(**kwargs, source=source, overrides=list(overrides)))


def _validate(settings: Settings) -> Settings:
    fractions = ("ingest.max_bad_fraction", "scoring.max_bad_fraction", "okgqa_subgraph.max_bad_fraction")
    for key in (*fractions, "mcq_scoring.max_bad_fraction"):
        fraction = settings.get(key)
        if not 0 <= fraction <= 1:
            raise ConfigError(f"{settings.source}: {key} must be a number in [0, 1], got {fraction!r}")
    if settings.scoring.batch_bytes < 1:
        raise ConfigError(f"{settings.source}: scoring.batch_bytes must be a positive integer")
    for key in ("stats.splits", "mining.splits"):
        splits = settings.get(key)
        if splits is not None and (not splits or not all(s.strip() for s in splits)):
            raise ConfigError(f"{settings.source}: {key} must be a non-empty list of split names")
    if settings.spark.checkpoint not in ("local", "reliable"):
        raise ConfigError(
            f"{settings.source}: spark.checkpoint must be local or reliable, got {settings.spark.checkpoint!r}"
        )
    variant = settings.variant
    if variant.removal_mode not in ("maximal", "reference"):
        raise ConfigError(f"{settings.source}: variant.removal_mode must be maximal or reference")
    if not 0 < variant.tau <= 1:
        raise ConfigError(f"{settings.source}: variant.tau must be in (0, 1], got {variant.tau!r}")
    if variant.max_answers is not None and variant.max_answers < 1:
        raise ConfigError(f"{settings.source}: variant.max_answers must be >= 1 or null, got {variant.max_answers}")
    if variant.question_unit not in ("removed_triple", "grounding"):
        raise ConfigError(
            f"{settings.source}: variant.question_unit must be removed_triple or grounding, got {variant.question_unit!r}"
        )
    _validate_okgqa(settings)
    _validate_mcq(settings)
    return settings


def _validate_okgqa(settings: Settings) -> None:
    sub, per, src = settings.okgqa_subgraph, settings.perturbation, settings.source
    checks = [
        (sub.k >= 1, f"okgqa_subgraph.k must be >= 1, got {sub.k}"),
        (0 < sub.alpha < 1, f"okgqa_subgraph.alpha must be in (0, 1), got {sub.alpha}"),
        (sub.tol > 0 and sub.max_iter >= 1, "okgqa_subgraph.tol must be > 0 and max_iter >= 1"),
        (sub.ppr_implementation in ("local", "batched"), "okgqa_subgraph.ppr_implementation must be local or batched"),
        (bool(per.levels), "perturbation.levels must not be empty"),
        (per.scope in ("subgraphs", "kg"), f"perturbation.scope must be subgraphs or kg, got {per.scope!r}"),
        (per.scorer_model in ("transe", "distmult"), "perturbation.scorer_model must be transe or distmult"),
    ]
    checks += [(0 < level <= 1, f"perturbation.levels: {level} is outside (0, 1]") for level in per.levels]
    predict = settings.predict
    for key in ("retrieval_k", "path_max_edges", "max_paths"):
        checks.append((getattr(predict, key) >= 1, f"predict.{key} must be >= 1, got {getattr(predict, key)}"))
    checks.append((bool(predict.embedding_model.strip()), "predict.embedding_model must name a model"))
    checks.append((predict.safe_max_steps >= 0, f"predict.safe_max_steps must be >= 0, got {predict.safe_max_steps}"))
    checks.append((predict.safe_results >= 1, f"predict.safe_results must be >= 1, got {predict.safe_results}"))
    search_spec = re.fullmatch(r"kg|[A-Za-z_][\w.]*:[A-Za-z_]\w*", predict.safe_search or "")
    checks.append(
        (bool(search_spec), f"predict.safe_search must be kg or module:function, got {predict.safe_search!r}")
    )
    methods = ("RS", "RR", "ER", "ED")
    checks += [
        (m in methods, f"perturbation.methods: unknown method {m!r} (known: RS, RR, ER, ED)") for m in per.methods
    ]
    scorers = ("type_compatibility", "embeddings", "scores")
    checks.append((per.scorer in scorers, f"perturbation.scorer must be one of {', '.join(scorers)}"))
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{src}: {message}")


def _validate_mcq(settings: Settings) -> None:
    mcq, src = settings.mcq, settings.source
    known = ("easy", "medium", "hard")
    checks = [
        (mcq.n_triples >= 1, f"mcq.n_triples must be >= 1, got {mcq.n_triples}"),
        (2 <= mcq.options <= 26, f"mcq.options must be in 2..26, got {mcq.options}"),
        (mcq.easy_candidates >= 1, "mcq.easy_candidates must be >= 1"),
        (bool(mcq.difficulties), "mcq.difficulties must not be empty"),
        (mcq.hard_mode in ("scores", "embedding_neighbours"), "mcq.hard_mode must be scores or embedding_neighbours"),
        (bool(mcq.renderings), "mcq.renderings must not be empty"),
        (bool(mcq.export_formats), "mcq.export_formats must not be empty"),
    ]
    checks += [(x in ("jsonl", "json"), f"mcq.export_formats: unknown {x!r} (jsonl, json)") for x in mcq.export_formats]
    checks += [(d in known, f"mcq.difficulties: unknown {d!r} (known: easy, medium, hard)") for d in mcq.difficulties]
    checks += [
        (x in ("ids", "keys", "text"), f"mcq.renderings: unknown {x!r} (ids, keys, text)") for x in mcq.renderings
    ]
    tasks = ("head prediction", "tail prediction")
    checks += [(k in mcq.default_templates, f"mcq.default_templates needs a {k!r} template") for k in tasks]
    for relation, given in mcq.templates.items():
        ok = isinstance(given, dict) and all(isinstance(given.get(k), str) for k in tasks)
        checks.append((ok, f"mcq.templates.{relation} must map 'head prediction' and 'tail prediction' to text"))
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{src}: {message}")


def is_uri(path: str) -> bool:
    """True for ``scheme://...`` locations (s3a, hdfs, file, dbfs, ...)."""
    return "://" in str(path)


def resolve_location(path: str | None, base: Path | None = None) -> str | None:
    """Absolute local path for a relative one; URIs and None unchanged."""
    if path is None or is_uri(path):
        return path
    p = Path(os.path.expanduser(str(path)))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return str(p.resolve())


def install_root() -> Path:
    """kgbrink's installation: ``$KGBRINK_HOME``, else the project folder this package is installed from
    (a checkout or an editable install: ``<project>/lib/kgbrink``), else the working directory."""
    if os.environ.get("KGBRINK_HOME"):
        return Path(os.environ["KGBRINK_HOME"]).expanduser().resolve()
    project = Path(__file__).resolve().parents[3]
    return project if (project / "pyproject.toml").is_file() else Path.cwd()


def default_config_path() -> Path:
    """``$KGBRINK_CONF`` if set, else ``conf/local.yaml`` of the working directory, else the installation's."""
    if "KGBRINK_CONF" in os.environ:
        return Path(os.environ["KGBRINK_CONF"])
    here = Path("conf/local.yaml")
    return here if here.is_file() else install_root() / "conf" / "local.yaml"


DRIVER_MEMORY_ENV = "KGBRINK_DRIVER_MEMORY"
_JVM_SIZE = re.compile(r"[1-9][0-9]*[kmgt]?b?", re.IGNORECASE)


def environment_overrides() -> list[str]:
    """``key=value`` overrides from the environment: ``$KGBRINK_DRIVER_MEMORY`` (e.g. ``6g``) sets
    ``spark.conf.spark.driver.memory`` over every settings file; ``--set`` still wins."""
    memory = os.environ.get(DRIVER_MEMORY_ENV)
    if memory is None:
        return []
    if not _JVM_SIZE.fullmatch(memory.strip()):
        raise ConfigError(f"${DRIVER_MEMORY_ENV}={memory!r} is not a JVM memory size such as 4g or 6144m")
    return [f"spark.conf.spark.driver.memory={memory.strip()}"]


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Settings:
    """Settings of an environment file over the defaults, then :func:`environment_overrides`, then the
    ``key=value`` ``overrides``."""
    path = Path(path) if path else default_config_path()
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = _build(values, str(path), [])
    overrides = [*environment_overrides(), *(overrides or [])]
    return base.with_overrides(overrides) if overrides else base


assert all(is_dataclass(cls) for cls in SECTIONS.values())
