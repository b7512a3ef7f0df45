"""SynthKGQA answering (paper 002 §4, App. C.2, D.2; spec 3.4-3.5): the reader prompt for a question and
its context triples, the answer string of an output, EM against the answer labels, and the retrieval
metrics of Table 2. Pure Python: called per row inside Spark tasks.

Record in: ``id``, ``question``, ``triples`` ``[[h, r, t]]`` (labels; the context the job chose: ``gt`` =
answer_subgraph, ``full_gt``, ``sp``, ``question_graph``, ``retrieved``), ``answers`` (the answer labels).

Prompt (spec 3.4 [P], [code] ``tog_answer_prompt``, ``synthkgqa-answer@1``): system ``You are an AI
assistant that helps people find information.``; user ``Based on the provided evidence, ... return a single
answer only.\\nQuestion: {question}\\nKnowledge Triplets: `` + ``<h>, <r>, <t>\\n`` per triple + ``Answer: ``.
``context="none"``: [code]'s 4-shot ``io_prompt`` (``synthkgqa-io@1``).

Answer string (spec 3.5 [P]): the content of the last ``{...}`` span unless it is ``yes``/``no``, else the
whole output, stripped. ``em`` ([code] matching): both lower-cased with every space removed, equal or one
containing the other (an empty prediction matches nothing); ``em_strict``: BRINK ``norm`` of both equal
(:func:`kgbrink.brink.qa_metrics.norm`). EM Hits = [some answer matches]; EM Recall = matched answers / |A|.

Retrieval (§4, App. A.4): per question, R = the retrieved triples, G = the ground-truth triples (the full
answer subgraph): recall = |R ∩ G| / |G|, precision = |R ∩ G| / |R| (0 for an empty R), F1 = 2PR / (P + R)
(0 when both are 0); answer nodes: hits = [an answer is a node of R], recall = share of A that is;
``size`` = |R|. Triples compare exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from kgbrink.brink.qa_metrics import norm
from kgbrink.llm import templates

CONTEXTS = ("gt", "full_gt", "sp", "question_graph", "retrieved", "none")
SLOTS = ("question", "triples")
_BRACES = re.compile(r"\{([^{}]*)\}")


# --- templates (built in; kgbrink.evaluation.templates gathers every paper's) ---

SYNTHKGQA_SYSTEM = "You are an AI assistant that helps people find information."
SYNTHKGQA_READER = (
    "Based on the provided evidence, in the form of knowledge graph triples (subject, relation, object), please "
    "answer the question. Please keep the answer as simple as possible and return a single answer only.\n"
    "Question: {question}\nKnowledge Triplets: {triples}Answer: "
)
SYNTHKGQA_IO_SHOTS = (
    (
        "Question: What state is home to the university that is represented in sports by George Washington "
        "Colonials men's basketball?",
        "Answer: {Washington, D.C.}.",
    ),
    (
        "Question: Who lists Pramatha Chaudhuri as an influence and wrote Jana Gana Mana?",
        "Answer: {Bharoto Bhagyo Bidhata}.",
    ),
    ("Question: Who was the artist nominated for an award for You Drive Me Crazy?", "Answer: {Britney Spears}."),
    ("Question: What person born in Siegen influenced the work of Vincent Van Gogh?", "Answer: {Peter Paul Rubens}."),
)
TEMPLATES: dict[str, templates.Template] = {
    t.ref: t
    for t in (
        templates.Template(
            "synthkgqa-answer",
            1,
            (("system", SYNTHKGQA_SYSTEM), ("user", SYNTHKGQA_READER)),
            ("question", "triples"),
            {"temperature": 0.0, "max_tokens": 256},
            source="002 §4; [code] llm_graph_walk tog_answer_prompt (spec 3.4 [P])",
        ),
        templates.Template(
            "synthkgqa-io",
            1,
            tuple(m for q, a in SYNTHKGQA_IO_SHOTS for m in (("user", q), ("assistant", a)))
            + (("user", "Question: {question}"),),
            ("question",),
            {"temperature": 0.0, "max_tokens": 256},
            source="002 §4 LLM-only; [code] io_prompt (spec 3.4 [P])",
        ),
    )
}


def triplets(triples: Iterable[Sequence]) -> str:
    """``<h>, <r>, <t>\\n`` per triple ([code] ``tog_answer_prompt``)."""
    return "".join(f"{h}, {r}, {t}\n" for h, r, t in (tuple(x)[:3] for x in triples))


def prompt(
    record: Mapping, template: templates.Template | str | None = None, *, context: str = "gt"
) -> list[dict[str, str]]:
    """The reader's chat messages (module docstring)."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {', '.join(CONTEXTS)}, got {context!r}")
    default = "synthkgqa-io@1" if context == "none" else "synthkgqa-answer@1"
    values = {"question": record["question"], "triples": triplets(record.get("triples") or ())}
    return templates.render(templates.resolve(template or default, TEMPLATES), values)


def answer_text(content: str | None) -> str:
    """The answer string of an output (module docstring)."""
    text = content or ""
    spans = _BRACES.findall(text)
    if spans and spans[-1].strip().lower() not in ("yes", "no"):
        return spans[-1].strip()
    return text.strip()


def _squash(text: str) -> str:
    return "".join(text.lower().split())


def em(prediction: str, label: str) -> bool:
    """[code]'s match: lower case, no spaces, equal or one containing the other; empty never matches."""
    p, a = _squash(prediction), _squash(label)
    return bool(p) and bool(a) and (p in a or a in p)


def em_strict(prediction: str, label: str) -> bool:
    """BRINK ``norm`` of both equal and non-empty."""
    p = norm(prediction)
    return bool(p) and p == norm(label)


def answer_scores(content: str | None, answers: Sequence[str]) -> dict:
    """``answer, em_hits, em_recall, em_strict_hits, em_strict_recall`` of one output against the answer
    labels A."""
    answer = answer_text(content)
    out: dict = {"answer": answer}
    for name, match in (("em", em), ("em_strict", em_strict)):
        matched = sum(1 for a in answers if match(answer, a))
        out[f"{name}_hits"] = float(matched > 0)
        out[f"{name}_recall"] = matched / len(answers) if answers else 0.0
    return out


def retrieval_scores(retrieved: Iterable[Sequence], ground_truth: Iterable[Sequence], answers: Iterable) -> dict:
    """``gt_recall, gt_precision, gt_f1, answer_hits, answer_recall, size`` of one retrieval."""
    r = {tuple(t)[:3] for t in retrieved}
    g = {tuple(t)[:3] for t in ground_truth}
    a = set(answers)
    common = len(r & g)
    recall = common / len(g) if g else 0.0
    precision = common / len(r) if r else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    nodes = {x for h, _, t in r for x in (h, t)}
    found = len(a & nodes)
    return {
        "gt_recall": recall,
        "gt_precision": precision,
        "gt_f1": f1,
        "answer_hits": float(found > 0),
        "answer_recall": found / len(a) if a else 0.0,
        "size": len(r),
    }
