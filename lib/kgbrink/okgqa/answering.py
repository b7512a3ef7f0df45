"""OKGQA answering and judging (paper 004 §3.3, §4.1, §5.1, App. A.1.1, A.3; spec 5.1-5.3): retrieval
prizes and triplets, the A.1.1 prompt, abstention, and the judges' prompt and scores. Pure Python: called
per row inside Spark tasks.

Record in: ``qid`` (or ``id``), ``question``; ``facts`` ``[[h, r, t]]`` (names: :func:`entity_name`; the
triplets, or the triples of the paths or of the subgraph, the job retrieved) or absent/None for the
baselines without knowledge.

Retrieval (§4.1; spec 5.1 [P] k = 10, prizes per relation type): nodes and relations ranked by cosine
similarity to the question (:func:`rank`, ties by name), prize p = max(0, k - rank + 1) (rank 1-based, so
the top k get k .. 1, the rest 0); a triplet's prize is p(h) + p(r) + p(t); :func:`top_triplets` keeps the
n with the highest total prize (ties by ``(h, r, t)``).

Prompt (App. A.1.1 verbatim, ``okgqa-answer@1``): ``system`` = the System Instruction; Example 1 as a
user/assistant pair (:data:`EXAMPLE_1`, its 14 triples and answer paragraph as the paper prints them),
then the caller's other few-shots, then ``Question: {Question}\\nBelow are the facts that might be relevant
to answer the question: {Retrieved-knowledge}\\nAnswer:``. The facts line (:func:`facts_line`): each triple
as a Python-style tuple of quoted names (``repr``), joined by ``", "``. Baselines (``okgqa-baseline@1``,
records without ``facts``): the same without the facts line, zero-shot unless ``examples`` are given (4-shot:
Example 1 without its facts and three of the caller's). CoT appends `` Let's think step by step.`` to the
last user message. Self-consistency selects among samples with ``okgqa-sc-select@1`` ([code] wording).

Output (spec 5.2): free text. :func:`parse` marks an abstention provisionally: an empty output, or one of at
most 200 characters opening with a declining phrase (:data:`ABSTENTION`); FActScore's own abstention is an
answer with no atomic facts (:func:`factscore` None).

Judges (spec 5.3): G-Eval (``okgqa-geval@1``: App. A.3's System Instruction, one of :data:`CRITERIA`
verbatim, then 'Input', 'Actual Output', 'Retrieval Context' and ``Score: <integer 0-10>``); the last
``Score: n`` line with 0 <= n <= 10 is the score (None otherwise); a metric is the mean score / 10 in %.
FActScore = supported / total atomic facts, times exp(1 - gamma / total) when gamma is given and total <
gamma (FActScore's length penalty); total 0 is an abstention (None), left out of the mean and counted in
``pct_responding``. Atomic facts (``okgqa-facts@1``): the lines of the splitter's output that start with a
bullet (``-``, ``*``, ``•``) or a number (``1.``, ``2)``), stripped of it; a verdict
(``okgqa-verify@1``, FActScore's prompt with the question as its topic and ``Title: ...\nText: ...``
passages: the original subgraph's triples, then the references) is read by FActScore's [code] rule
(:func:`is_supported`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from kgbrink.llm import templates

CRITERIA = {
    "empowerment": (
        "Empowerment Criteria: Evaluate whether the 'Actual Output' can help the reader understand the topic and "
        "make informed decisions regarding the 'Input'. A response with high empowerment provides accurate "
        "information and explanations that enhance the reader's understanding. When evaluating empowerment, "
        "consider the relevance of the information provided in the 'Actual Output' to the 'Input' and the "
        "'Retrieval Context'."
    ),
    "comprehensiveness": (
        "Comprehensiveness Criteria: Evalute the extent to which the 'Actual Output' covers all aspects and "
        "details of the question 'Input'. A comprehensive answer should thoroughly address every part of the "
        "question, leaving no important points unaddressed. When evaluating comprehensiveness, consider the "
        "relevance of the information provided in the 'Actual Output' to the 'Input' and the 'Retrieval Context'."
    ),
    "correctness": (
        "Correctness Criteria: Measure how clearly and specifically the 'Actual output' responds to the question "
        "'input'. A highly direct response stays focused on the question, providing clear and unambiguous "
        "information. When evaluating correctness, consider the relevance of the information provided in the "
        "'Actual Output' to the 'Input' and the 'Retrieval Context'."
    ),
    "context_relevance": (
        "Context Relevance Criteria: Evaluate the extent to which the 'Actual output' incorporates relevant "
        "information from the 'Retrieval Context'. This includes assessing whether the output adheres to the "
        "thematic, factual, and situational specifics presented in the 'Retrieval Context'. Relevant responses not "
        "only address the direct query but also align closely with the contextual elements provided, ensuring a "
        "seamless and coherent transition between the 'Retrieval Context' and the 'Actual Output'. The most "
        "contextually relevant responses demonstrate an understanding and appropriate reflection of the given "
        "circumstances, historical facts, or conceptual background, thereby contributing to the overall accuracy "
        "and utility of the information provided."
    ),
}
EXAMPLE_1 = {
    "question": (
        "How do you think blockchain technology can be applied to secure online voting systems? Please provide "
        "specific suggestions?"
    ),
    "facts": [
        ("Bitcoin", "wikiPageWikiLink", "Bill_Gates"),
        ("Bitcoin", "wikiPageWikiLink", "Non-fungible_token"),
        ("Decentralized_application", "wikiPageWikiLink", "Cardano_(blockchain_platform)"),
        ("Non-fungible_token", "wikiPageWikiLink", "Decentralized_application"),
        ("Hyperledger", "wikiPageWikiLink", "Blockchain"),
        ("Blockchain", "implementations", "Bitcoin"),
        ("Blockchain", "currencyName", "Litecoin"),
        ("Thing", "type", "Privacy_and_blockchain"),
        ("Thing", "type", "Saraju_Mohanty"),
        ("Thing", "type", "Blockchain"),
        ("Thing", "type", "Satoshi_Nakamoto"),
        ("Thing", "type", "Pseudonym"),
        ("Thing", "type", "Metaverse"),
        ("Thing", "type", "PricewaterhouseCoopers"),
    ],
    "answer": (
        "Blockchain technology can significantly enhance the security of online voting systems through its "
        "decentralized, transparent, and immutable nature. By distributing data across multiple nodes, blockchain "
        "eliminates single points of failure, reducing the risk of hacking or vote tampering. The system allows for "
        "verifiable, yet anonymous, vote recording through cryptographic methods, ensuring voter privacy while "
        "preventing fraud such as double voting. Additionally, once recorded, votes cannot be altered, safeguarding "
        "election integrity. Smart contracts can further automate the voting process, enabling instant and accurate "
        "tallying, while the system's resilience to cyberattacks like DDoS ensures uninterrupted functionality."
    ),
}
SLOTS = ("Question", "Retrieved-knowledge")
COT_SUFFIX = " Let's think step by step."
ABSTENTION = re.compile(
    r"^\s*(?:i\s+(?:do\s+not|don['’]t)\s+know|i\s+(?:cannot|can['’]t|am\s+unable\s+to|am\s+not\s+able\s+to)\s+"
    r"(?:answer|help|provide|determine)|(?:i['’]m|i\s+am)\s+(?:sorry|unable)|sorry,\s+i|no\s+answer)",
    re.IGNORECASE,
)
ABSTENTION_MAX_CHARS = 200
ABSTAINED = "abstained"
_SCORE = re.compile(r"^\s*\**\s*Score\s*\**\s*:\s*\**\s*(\d+)\s*(?:/\s*10)?\s*\**\s*$", re.IGNORECASE | re.MULTILINE)


# --- retrieval ------------------------------------------------------------------------------------------


# --- templates (built in; kgbrink.evaluation.templates gathers every paper's) ---

OKGQA_SYSTEM = (
    "You are a helpful assistant designed to answer the users' open-ended questions. Your task is to provide "
    "accurate, concise, and useful information to foster understanding and solve problems. Whether the questions "
    "relate to complex scientific concepts, historical events, practical advice, or everyday life, your goal is to "
    "assist by offering thoughtful and informative responses."
)
OKGQA_USER = (
    "Question: {Question}\nBelow are the facts that might be relevant to answer the question: {Retrieved-knowledge}\n"
    "Answer:"
)
OKGQA_BASELINE_USER = "Question: {Question}\nAnswer:"
OKGQA_SC_SELECT = (
    "Based on the given open-ended questions, and the generated answers, please take the most commonly occuring "
    "answer as your final output. Only give your output without any other explanation.\nQuersion:\n{question}\n\n"
    "Generated Answers:\n{answers}\n\nAnswer:\n"
)
GEVAL_SYSTEM = (
    "You are a helpful assistant designed to evaluate the quality of the response to a query. Your task is to rate "
    "the response on one metric defined as below:\n{criterion}"
)
GEVAL_USER = (
    "Input: {input}\n\nActual Output: {actual_output}\n\nRetrieval Context: {retrieval_context}\n\n"
    "First write the evaluation steps for the metric above, then apply them to the 'Actual Output'. "
    "End with one line 'Score: <integer 0-10>'."
)
OKGQA_FACTS = (
    "Please breakdown the following text into independent facts. Write each fact on its own line, starting "
    'with "- ".\n\nText: {answer}'
)
OKGQA_VERIFY = (
    "Answer the question about {topic} based on the given context.\n\n{context}Input: {fact} True or False?\nOutput:"
)
TEMPLATES: dict[str, templates.Template] = {
    t.ref: t
    for t in (
        templates.Template(
            "okgqa-answer",
            1,
            (("system", OKGQA_SYSTEM), ("user", OKGQA_USER)),
            ("Question", "Retrieved-knowledge"),
            {"temperature": 0.0, "max_tokens": 1024},
            examples_at=1,
            source="004 App. A.1.1 (verbatim; Example 1 as a user/assistant pair, spec 5.1 [P])",
        ),
        templates.Template(
            "okgqa-baseline",
            1,
            (("system", OKGQA_SYSTEM), ("user", OKGQA_BASELINE_USER)),
            ("Question",),
            {"temperature": 0.0, "max_tokens": 1024},
            examples_at=1,
            source="004 App. A.1.1 without the facts line (spec 5.1 [P] baselines)",
        ),
        templates.Template(
            "okgqa-sc-select",
            1,
            (("user", OKGQA_SC_SELECT),),
            ("question", "answers"),
            {"temperature": 0.0, "max_tokens": 1024},
            source="004 §5.1 CoT + SC; [code] select_most_consistent_response (spec 5.1 [P])",
        ),
        templates.Template(
            "okgqa-geval",
            1,
            (("system", GEVAL_SYSTEM), ("user", GEVAL_USER)),
            ("criterion", "input", "actual_output", "retrieval_context"),
            {"temperature": 0.0, "max_tokens": 1024},
            source="004 App. A.3 (system, criteria); user message [P] spec 5.3",
        ),
        templates.Template(
            "okgqa-facts",
            1,
            (("user", OKGQA_FACTS),),
            ("answer",),
            {"temperature": 0.0, "max_tokens": 1024},
            source="004 §3.3 FActScore's atomic facts; [P] FActScore's 'Please breakdown the following sentence into "
            "independent facts' on the whole answer, one request per answer",
        ),
        templates.Template(
            "okgqa-verify",
            1,
            (("user", OKGQA_VERIFY),),
            ("topic", "context", "fact"),
            {"temperature": 0.0, "max_tokens": 16},
            source="004 §3.3 FActScore; [code] FActScore factscorer.py's retrieval + ChatGPT prompt (topic = question)",
        ),
    )
}


def entity_name(label: str | None, key: str) -> str:
    """A DBpedia-style name: the label with ``_`` for spaces, else the key."""
    return label.strip().replace(" ", "_") if label and label.strip() else key


def cosine(u: Sequence[float], v: Sequence[float]) -> float:
    """Cosine similarity (0 for a zero vector)."""
    dot = sum(a * b for a, b in zip(u, v, strict=True))
    nu, nv = math.sqrt(sum(a * a for a in u)), math.sqrt(sum(b * b for b in v))
    return dot / (nu * nv) if nu and nv else 0.0


def rank(similarities: Mapping[str, float]) -> list[str]:
    """Items by decreasing similarity, ties by name."""
    return sorted(similarities, key=lambda item: (-similarities[item], item))


def prizes(ranked: Sequence[str], k: int) -> dict[str, int]:
    """p = max(0, k - rank + 1) of the first k distinct items (rank 1-based); the others are absent (0)."""
    out: dict[str, int] = {}
    for item in ranked:
        if len(out) >= k:
            break
        if item not in out:
            out[item] = k - len(out)
    return out


def triplet_prize(triple: Sequence[str], node_prizes: Mapping[str, int], relation_prizes: Mapping[str, int]) -> int:
    """p(h) + p(r) + p(t)."""
    h, r, t = triple[:3]
    return node_prizes.get(h, 0) + relation_prizes.get(r, 0) + node_prizes.get(t, 0)


def top_triplets(
    triples: Iterable[Sequence[str]], node_prizes: Mapping[str, int], relation_prizes: Mapping[str, int], n: int
) -> list[tuple[str, str, str]]:
    """The ``n`` distinct triples with the highest total prize (ties by ``(h, r, t)``)."""
    distinct = {tuple(t[:3]) for t in triples}
    ordered = sorted(distinct, key=lambda t: (-triplet_prize(t, node_prizes, relation_prizes), t))
    return ordered[:n]


def fact(triple: Sequence[str]) -> str:
    """``('h', 'r', 't')``: a Python-style tuple of the quoted names."""
    return "(" + ", ".join(repr(str(x)) for x in triple[:3]) + ")"


def facts_line(triples: Iterable[Sequence[str]]) -> str:
    """The triples as A.1.1's ``{Retrieved-knowledge}``."""
    return ", ".join(fact(t) for t in triples)


# --- prompt ---------------------------------------------------------------------------------------------


def example_messages(example: Mapping, template: templates.Template) -> list[dict[str, str]]:
    """One few-shot example (``question``, ``facts``, ``answer``) as the template's last message filled in,
    then the answer as the assistant's."""
    role, text = template.messages[-1]
    values = {"Question": example["question"], "Retrieved-knowledge": facts_line(example.get("facts") or ())}
    return [
        {"role": role, "content": templates.fill(text, template.slots, values)},
        {"role": "assistant", "content": example["answer"]},
    ]


def prompt(
    record: Mapping,
    template: templates.Template | str | None = None,
    *,
    examples: Sequence[Mapping] | None = None,
    cot: bool = False,
) -> list[dict[str, str]]:
    """A.1.1's messages for a question record (module docstring); ``examples`` default: Example 1 with
    knowledge, none without."""
    with_facts = record.get("facts") is not None
    template = templates.resolve(template or ("okgqa-answer@1" if with_facts else "okgqa-baseline@1"), TEMPLATES)
    if examples is None:
        examples = [EXAMPLE_1] if with_facts else []
    shots = [m for e in examples for m in example_messages(e, template)]
    values = {"Question": record["question"], "Retrieved-knowledge": facts_line(record.get("facts") or ())}
    messages = templates.render(template, values, shots)
    if cot:
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + COT_SUFFIX}
    return messages


def sc_select_prompt(
    question: str, answers: Sequence[str], template: templates.Template | str | None = None
) -> list[dict[str, str]]:
    """The self-consistency selection call over sampled ``answers`` ([code]: ``Answer\\n: {a}\\n`` each)."""
    values = {"question": question, "answers": "".join(f"Answer\n: {a}\n" for a in answers)}
    return templates.render(templates.resolve(template or "okgqa-sc-select@1", TEMPLATES), values)


def parse(content: str | None, *, finish_reason: str | None = None) -> dict:
    """``answer, abstained, truncated, reason`` (``abstained`` or None) of one output."""
    text = (content or "").strip()
    abstained = not text or (len(text) <= ABSTENTION_MAX_CHARS and ABSTENTION.match(text) is not None)
    return {
        "answer": text,
        "abstained": abstained,
        "truncated": finish_reason == "length",
        "reason": ABSTAINED if abstained else None,
    }


# --- judges ---------------------------------------------------------------------------------------------


def geval_prompt(
    record: Mapping, criterion: str, template: templates.Template | str | None = None
) -> list[dict[str, str]]:
    """The G-Eval judge's messages: ``criterion`` a key of :data:`CRITERIA`; record ``question``,
    ``answer``, ``passages`` (the Wikipedia passages, joined by blank lines)."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    values = {
        "criterion": CRITERIA[criterion],
        "input": record["question"],
        "actual_output": record["answer"],
        "retrieval_context": "\n\n".join(record.get("passages") or ()),
    }
    return templates.render(templates.resolve(template or "okgqa-geval@1", TEMPLATES), values)


def geval_score(content: str | None) -> int | None:
    """The last ``Score: n`` line's n (0..10), or None."""
    scores = [int(m) for m in _SCORE.findall(content or "")]
    return scores[-1] if scores and 0 <= scores[-1] <= 10 else None


def geval_percent(scores: Iterable[int | None]) -> float | None:
    """Mean score / 10 in % over the parsed scores (None when there is none)."""
    given = [s for s in scores if s is not None]
    return 100.0 * sum(given) / (10 * len(given)) if given else None


_FACT_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")
_NEGATIONS = ("not", "cannot", "unknown", "information")


def atomic_facts(content: str | None, limit: int | None = None) -> list[str]:
    """The atomic facts of a splitter's output: its bulleted or numbered lines, stripped, each once, in
    order; at most ``limit``."""
    facts = []
    for line in (content or "").splitlines():
        match = _FACT_LINE.match(line)
        if match and match.group(1) not in facts:
            facts.append(match.group(1))
    return facts[:limit] if limit is not None else facts


def verify_context(knowledge: Iterable[Sequence[str]], references: Iterable[str] = ()) -> str:
    """FActScore's passages: ``Title: knowledge graph\nText: <facts line>\n\n`` (when there are triples), then
    ``Title: reference i\nText: <passage>\n\n`` per reference."""
    passages = []
    triples = list(knowledge)
    if triples:
        passages.append(("knowledge graph", facts_line(triples)))
    passages += [(f"reference {i}", text) for i, text in enumerate(references, 1)]
    return "".join(f"Title: {title}\nText: {text}\n\n" for title, text in passages)


def verify_prompt(
    question: str, fact_text: str, context: str, template: templates.Template | str | None = None
) -> list[dict[str, str]]:
    """FActScore's verification messages of one atomic fact (``context``: :func:`verify_context`)."""
    values = {"topic": question, "context": context, "fact": fact_text}
    return templates.render(templates.resolve(template or "okgqa-verify@1", TEMPLATES), values)


def facts_prompt(answer: str, template: templates.Template | str | None = None) -> list[dict[str, str]]:
    """The splitter's messages of one answer."""
    return templates.render(templates.resolve(template or "okgqa-facts@1", TEMPLATES), {"answer": answer})


def is_supported(content: str | None) -> bool:
    """FActScore's [code] reading of a verdict: "true" without "false" (or the later of both) is supported;
    with neither, supported unless a word of it is "not", "cannot", "unknown" or "information"."""
    text = (content or "").lower()
    if "true" in text or "false" in text:
        if "true" in text and "false" not in text:
            return True
        if "false" in text and "true" not in text:
            return False
        return text.index("true") > text.index("false")
    words = re.sub(r"[^\w\s]", " ", text).split()
    return all(word not in words for word in _NEGATIONS)


def factscore(supported: int, total: int, gamma: float | None = None) -> float | None:
    """supported / total, with the length penalty exp(1 - gamma / total) when total < gamma; None for 0 facts."""
    if total <= 0:
        return None
    score = supported / total
    if gamma is not None and total < gamma:
        score *= math.exp(1 - gamma / total)
    return score


def factscore_summary(scores: Iterable[float | None]) -> dict:
    """``factscore`` (mean over responding answers), ``n``, ``n_responding``, ``pct_responding``."""
    scores = list(scores)
    given = [s for s in scores if s is not None]
    return {
        "factscore": sum(given) / len(given) if given else None,
        "n": len(scores),
        "n_responding": len(given),
        "pct_responding": 100.0 * len(given) / len(scores) if scores else None,
    }
