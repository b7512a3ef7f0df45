"""SAFE, the Search-Augmented Factuality Evaluator (Wei et al. 2024), as OKGQA scores answers with it (paper 004
§3.3; spec 5.3): each atomic fact rated by the model after up to ``max_steps`` searches it writes itself.

Per fact: a search step shows the fact and the results so far (``N/A`` before the first) and asks for ONE
query in a markdown code block; the query is searched and its result kept; a reply without a code block ends
the searches. The final step shows all results and asks for ``[Supported]`` or ``[Not Supported]``. An
answer's SAFE score: supported / (supported + not supported) over its rated facts (spec 5.3 [P]).

The search is pluggable: ``search(query, documents, k) -> list[str]``, ``documents`` being the question's
knowledge source (its original subgraph's triples, then its references); :func:`kg_search`, BM25 over those
documents, is the default in place of SAFE's Google Search (paper 004 has no search engine to name).
"""

from __future__ import annotations

import importlib
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

from kgbrink.llm import templates

SUPPORTED, NOT_SUPPORTED = "Supported", "Not Supported"
NO_RESULT = "No good search result was found"  # a search's result when it finds nothing (SAFE's Serper wrapper)
SEARCH_SPEC = re.compile(r"^kg$|^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
Search = Callable[[str, Sequence[str], int], list[str]]

SAFE_SEARCH = (
    "Instructions:\n"
    "1. You have been given a STATEMENT and some KNOWLEDGE points.\n"
    "2. Your goal is to try to find evidence that either supports or does not support the factual accuracy of "
    "the given STATEMENT.\n"
    "3. To do this, you are allowed to issue ONE Google Search query that you think will allow you to find "
    "additional useful evidence.\n"
    "4. Your query should aim to obtain new information that does not appear in the KNOWLEDGE. This new "
    "information should be useful for determining the factual accuracy of the given STATEMENT.\n"
    "5. Format your final query by putting it in a markdown code block.\n\n"
    "KNOWLEDGE:\n{knowledge}\n\nSTATEMENT:\n{statement}"
)
SAFE_FINAL = (
    "Instructions:\n"
    "1. You have been given a STATEMENT and some KNOWLEDGE points.\n"
    "2. Determine whether the given STATEMENT is supported by the given KNOWLEDGE. The STATEMENT does not need "
    "to be explicitly supported by the KNOWLEDGE, but should be strongly implied by the KNOWLEDGE.\n"
    "3. Before showing your answer, think step-by-step and show your specific reasoning. As part of your "
    "reasoning, summarize the main points of the KNOWLEDGE.\n"
    "4. If the STATEMENT is supported by the KNOWLEDGE, be sure to show the supporting evidence.\n"
    "5. After stating your reasoning, restate the STATEMENT and then determine your final answer based on your "
    "reasoning and the STATEMENT.\n"
    f'6. Your final answer should be either "{SUPPORTED}" or "{NOT_SUPPORTED}". Wrap your final answer in '
    "square brackets.\n\n"
    "KNOWLEDGE:\n{knowledge}\n\nSTATEMENT:\n{statement}"
)
_SOURCE = "SAFE (Wei et al. 2024) rate_atomic_fact's prompts, as paper 004 §3.3 runs it; model_temp 0.1, 512 tokens"
TEMPLATES: dict[str, templates.Template] = {
    t.ref: t
    for t in (
        templates.Template(
            "okgqa-safe-search",
            1,
            (("user", SAFE_SEARCH),),
            ("knowledge", "statement"),
            {"temperature": 0.1, "max_tokens": 512},
            source=_SOURCE + " (the next search)",
        ),
        templates.Template(
            "okgqa-safe-final",
            1,
            (("user", SAFE_FINAL),),
            ("knowledge", "statement"),
            {"temperature": 0.1, "max_tokens": 512},
            source=_SOURCE + " (the final answer)",
        ),
    )
}
_CODE_BLOCK = re.compile(r"```(?:[^\S\n]*\w+[^\S\n]*\n)?(.*?)```", re.DOTALL)
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_TOKEN = re.compile(r"\w+")


def search_prompt(statement: str, results: Sequence[str]) -> list[dict[str, str]]:
    """The search step's messages: the results so far, one per line (``N/A`` before the first)."""
    values = {"knowledge": "\n".join(results) or "N/A", "statement": statement}
    return templates.render(TEMPLATES["okgqa-safe-search@1"], values)


def final_prompt(statement: str, results: Sequence[str]) -> list[dict[str, str]]:
    """The final step's messages: all the results, one per line (``N/A`` without a search)."""
    values = {"knowledge": "\n".join(results) or "N/A", "statement": statement}
    return templates.render(TEMPLATES["okgqa-safe-final@1"], values)


def query(content: str | None) -> str | None:
    """The first markdown code block's text, stripped, without a language word on its first line; None when
    there is none or it is empty."""
    match = _CODE_BLOCK.search(content or "")
    text = match.group(1).strip() if match else ""
    return text or None


def verdict(content: str | None) -> bool | None:
    """True for ``[Supported]``, False for ``[Not Supported]`` (the first square brackets, punctuation dropped,
    any case and spacing), None otherwise."""
    match = _BRACKETS.search(content or "")
    if not match:
        return None
    words = " ".join(re.sub(r"[^\w\s]", " ", match.group(1)).split()).lower()
    return {SUPPORTED.lower(): True, NOT_SUPPORTED.lower(): False}.get(words)


def bm25(query_text: str, documents: Sequence[str]) -> list[float]:
    """Each document's Okapi BM25 score for ``query_text`` (k1 = 1.5, b = 0.75, idf = ln(1 + (N - n + 0.5) /
    (n + 0.5)), lower-cased word tokens, each distinct query word once)."""
    tokens = [_TOKEN.findall(doc.lower()) for doc in documents]
    terms = set(_TOKEN.findall(query_text.lower()))
    average = (sum(len(t) for t in tokens) / len(tokens) if tokens else 0.0) or 1.0
    frequency = Counter(term for doc in tokens for term in set(doc) if term in terms)
    scores = []
    for doc in tokens:
        counts, score = Counter(doc), 0.0
        for term in terms & counts.keys():
            idf = math.log(1 + (len(tokens) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            tf = counts[term]
            score += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * len(doc) / average))
        scores.append(score)
    return scores


def kg_search(query_text: str, documents: Sequence[str], k: int) -> list[str]:
    """The ``k`` documents of highest :func:`bm25` score, best first, ties in document order; a document
    sharing no word with the query scores 0 and is left out."""
    scored = sorted((-score, position) for position, score in enumerate(bm25(query_text, documents)) if score > 0)
    return [documents[position] for _, position in scored[:k]]


def resolve_search(spec: str) -> Search:
    """The search ``spec`` names: ``kg`` (:func:`kg_search`) or ``module:function``."""
    if not SEARCH_SPEC.match(spec or ""):
        raise ValueError(f"predict.safe_search must be 'kg' or 'module:function', got {spec!r}")
    if spec == "kg":
        return kg_search
    module, _, name = spec.partition(":")
    if module.split(".")[:2] == ["kgbrink", "jobs"]:
        raise ValueError(f"predict.safe_search {spec!r}: a job module is not a search")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"predict.safe_search {spec!r}: {error}") from error
    if not callable(found):
        raise ValueError(f"predict.safe_search {spec!r} is not callable")
    return found
