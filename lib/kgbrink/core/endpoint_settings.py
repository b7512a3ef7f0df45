"""The model endpoints' settings sections, ``predict`` (the answering model) and ``judge`` (a scorer's judge):
one shape, :class:`EndpointSettings`, and the answering side's generation, rate, cost and retrieval
settings. Part of the typed settings (:mod:`kgbrink.core.settings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgbrink.core.typed import require, setting


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

    def __post_init__(self) -> None:
        search = re.fullmatch(r"kg|[A-Za-z_][\w.]*:[A-Za-z_]\w*", self.safe_search or "")
        require(
            *[
                (getattr(self, key) >= 1, f"predict.{key} must be >= 1, got {getattr(self, key)}")
                for key in ("retrieval_k", "path_max_edges", "max_paths")
            ],
            (bool(self.embedding_model.strip()), "predict.embedding_model must name a model"),
            (self.safe_max_steps >= 0, f"predict.safe_max_steps must be >= 0, got {self.safe_max_steps}"),
            (self.safe_results >= 1, f"predict.safe_results must be >= 1, got {self.safe_results}"),
            (bool(search), f"predict.safe_search must be kg or module:function, got {self.safe_search!r}"),
        )
