"""BRINK's reader (paper 000, spec 1.1-1.2): prompts for a question record, the App. D question rewrite, and
the model's output as an ``evaluate-qa`` prediction. Pure Python: called per row inside Spark tasks.

Record in (a question line of ``questions/<scheme>/<split>.jsonl``, :func:`kgbrink.brink.questions.render_questions`,
plus the context the job joins): ``id``, ``question``, ``topic_entity``, ``hard_answer``, ``removed_triple``
``[h, r, t]``; for ``context="oracle"`` ``groundings``: ``[{"rule": AMIE3 text, "body": [[h, r, t], ...]}]``
(``provenance.jsonl`` lines of the question's removed triple, entities named in the question's scheme,
relations by label); for ``context="neighbourhood"`` ``triples``: ``[[h, r, t]]`` or ``[[h, r, t, hop]]``.

Reader prompt (spec 1.1 [P], template ``brink-reader@1``): one ``user`` message, the instruction, then
``Knowledge Triples:`` with one ``<head> <relation> <tail>`` line per triple, ``Question:``, the question and
``Topic Entity: <topic>``. Contexts: ``oracle`` (App. H, "a perfect retriever"): each rule of the question's
groundings once, in first-seen order, as ``Rule: r1(X, Z) ∧ r2(Y, Z) ⇒ r(X, Y)`` (Table 2's notation: head
variables X, Y; the others Z, W, V, ... in order of first appearance in the body), then the grounded body
triples of that rule's groundings in body order, each line once; ``neighbourhood``: the triples sorted by
hop (1 first), then by ``sha256(seed, h, r, t)``, at most ``max_triples``; ``none`` (``brink-reader-none@1``):
the question alone.

Rewrite (§3.2, App. D verbatim, ``brink-rewrite@1``): slots from the text-label record: ``entity_h``,
``predicate_T``, ``entity_t`` = ``removed_triple``, ``topic_entity``, ``answer_entity`` = ``hard_answer``
(names as they are, no quotes added). Acceptance (spec 1.1 [P]): the first non-blank output line, stripped,
must contain the topic name verbatim, must not contain the answer name (case-insensitive, not inside a
longer alphanumeric word), must end with ``?`` and must not open with a yes/no auxiliary; else the template
question is kept (``rewrite_rejected``). Other schemes replace every occurrence of the topic label.

Output (spec 1.2, App. E): a leading ``Answer:`` (any case) is stripped; a whole output matching
:data:`REFUSAL` (``i don't know``, ``unknown``, ``cannot be determined``, ``no answer``, any case, one
trailing ``.``/``!`` allowed) is a refusal: prediction ``[]``, counted in ``n_refusals``. The prediction
record is ``{"id", "prediction"}`` (``evaluate-qa``), with ``parsed`` (Alg. 3's split and ``norm`` of
:mod:`kgbrink.brink.qa_metrics`, duplicates dropped), ``refusal``, ``truncated`` (``finish_reason ==
"length"``) and ``reason`` (``empty``, ``refusal`` or None).

Failure kind (App. J, spec 1.3 [P]): a question whose hard answer is not predicted is a
``retrieval_failure`` when no grounding has its whole body in the context, else a ``reasoning_failure``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

from kgbrink.brink import qa_metrics
from kgbrink.llm import templates
from kgbrink.rules.model import parse_rule

CONTEXTS = ("oracle", "neighbourhood", "none")
DEFAULT_TEMPLATES = {"oracle": "brink-reader@1", "neighbourhood": "brink-reader@1", "none": "brink-reader-none@1"}
SLOTS = ("triples", "question", "topic_entity")
REWRITE_SLOTS = ("entity_h", "predicate_T", "entity_t", "topic_entity", "answer_entity")
RULE_VARIABLES = ("X", "Y", "Z", "W", "V", "U", "S", "R", "Q", "P")
REFUSAL = re.compile(r"^\s*(?:i don['’]t know|unknown|cannot be determined|no answer)\s*[.!]?\s*$", re.IGNORECASE)
ANSWER_PREFIX = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)
YES_NO_AUXILIARIES = ("is", "are", "was", "were", "do", "does", "did", "can", "has", "have")
EMPTY = "empty"
REFUSAL_REASON = "refusal"
REWRITE_REJECTED = "rewrite_rejected"
RETRIEVAL_FAILURE = "retrieval_failure"
REASONING_FAILURE = "reasoning_failure"


# --- templates (built in; kgbrink.evaluation.templates gathers every paper's) ---

BRINK_READER_INSTRUCTION = (
    "Based on the knowledge graph triples, please answer the given question. Please keep the answer as simple as "
    "possible and return all the possible answers as a list. Please return each answer in a new line."
)
BRINK_NONE_INSTRUCTION = (
    "Please answer the given question. Please keep the answer as simple as possible and return all the possible "
    "answers as a list. Please return each answer in a new line."
)
BRINK_REWRITE = """You are an expert in knowledge graph question generation.

Given:
Removed Triple: ({entity_h}, {predicate_T}, {entity_t})
Question Entity: {topic_entity}
Answer Entity: {answer_entity}

Write a clear, natural-language question that asks for the Answer Entity, using the given predicate and Topic Entity.

Requirements:
- Express the predicate {predicate_T} naturally (paraphrasing allowed, but preserve core meaning; e.g., "wife_of" -> "wife").
- Mention the Topic Entity {topic_entity}.
- The answer should be the Answer Entity {answer_entity}.
- Do not mention the Answer Entity {answer_entity} in the question.
- Do not ask a yes/no question.
- Output only the question as plain text.

Example:
Removed Triple: ("Alice", "wife_of", "Carol")
Question Entity: Carol
Answer Entity: Alice

Output:
Who is Carol's wife?

Now, generate the question for:
Removed Triple: ({entity_h}, {predicate_T}, {entity_t})
Question Entity: {topic_entity}
Answer Entity: {answer_entity}"""  # App. D verbatim
TEMPLATES: dict[str, templates.Template] = {
    t.ref: t
    for t in (
        templates.Template(
            "brink-reader",
            1,
            (
                (
                    "user",
                    BRINK_READER_INSTRUCTION + "\n\nKnowledge Triples:\n{triples}\n\nQuestion:\n{question}\n"
                    "Topic Entity: {topic_entity}",
                ),
            ),
            ("triples", "question", "topic_entity"),
            {"temperature": 0.0, "max_tokens": 256},
            source="000 §4.2, App. F, App. H; wording after RoG's prompt builder (spec 1.1 [P])",
        ),
        templates.Template(
            "brink-reader-none",
            1,
            (("user", BRINK_NONE_INSTRUCTION + "\n\nQuestion:\n{question}\nTopic Entity: {topic_entity}"),),
            ("question", "topic_entity"),
            {"temperature": 0.0, "max_tokens": 256},
            source="spec 1.1 [P] context none",
        ),
        templates.Template(
            "brink-rewrite",
            1,
            (("user", BRINK_REWRITE),),
            ("entity_h", "predicate_T", "entity_t", "topic_entity", "answer_entity"),
            {"temperature": 0.0, "max_tokens": 64},
            source="000 §3.2, App. D (verbatim)",
        ),
    )
}


def rule_notation(rule: str, relation_names: Mapping[str, str] | None = None) -> str:
    """An AMIE3 rule (``?a  r1  ?e  ?b  r2  ?e   => ?a  r  ?b``) in Table 2's notation
    ``r1(X, Z) ∧ r2(Y, Z) ⇒ r(X, Y)``; a text already holding ``⇒`` is returned stripped."""
    if "⇒" in rule:
        return rule.strip()
    parsed = parse_rule(rule)
    names = {parsed.head.subject: "X", parsed.head.object: "Y"}
    for atom in parsed.body:
        for v in (atom.subject, atom.object):
            if v not in names:
                if len(names) >= len(RULE_VARIABLES):
                    raise ValueError(f"rule {rule!r} has more than {len(RULE_VARIABLES)} variables")
                names[v] = RULE_VARIABLES[len(names)]
    rel = relation_names or {}

    def atom_text(a) -> str:
        return f"{rel.get(a.relation, a.relation)}({names[a.subject]}, {names[a.object]})"

    return " ∧ ".join(atom_text(a) for a in parsed.body) + " ⇒ " + atom_text(parsed.head)


def triple_line(triple: Sequence) -> str:
    """``<head> <relation> <tail>`` of ``[h, r, t]`` (a fourth element, the hop, is ignored)."""
    return f"{triple[0]} {triple[1]} {triple[2]}"


def oracle_lines(groundings: Iterable[Mapping], relation_names: Mapping[str, str] | None = None) -> list[str]:
    """Each rule once (first-seen order), then the body triples of its groundings, each line once."""
    blocks: dict[str, list[str]] = {}
    for grounding in groundings:
        block = blocks.setdefault("Rule: " + rule_notation(grounding["rule"], relation_names), [])
        for triple in grounding["body"]:
            line = triple_line(triple)
            if line not in block:
                block.append(line)
    return [line for rule, body in blocks.items() for line in (rule, *body)]


def neighbourhood_lines(triples: Iterable[Sequence], seed: int = 0, max_triples: int = 200) -> list[str]:
    """Triples ``[h, r, t]`` or ``[h, r, t, hop]`` (hop 1 when absent), by hop then seeded hash, at most
    ``max_triples``, duplicates dropped."""

    def key(triple: Sequence) -> tuple:
        hop = int(triple[3]) if len(triple) > 3 and triple[3] is not None else 1
        text = "\x1f".join(str(x) for x in (seed, triple[0], triple[1], triple[2]))
        return hop, hashlib.sha256(text.encode("utf-8")).hexdigest()

    lines: list[str] = []
    seen: set[str] = set()
    for triple in sorted(triples, key=key):
        line = triple_line(triple)
        if line not in seen:
            seen.add(line)
            lines.append(line)
        if len(lines) >= max_triples:
            break
    return lines


def prompt(
    record: Mapping,
    template: templates.Template | str | None = None,
    *,
    context: str = "oracle",
    relation_names: Mapping[str, str] | None = None,
    seed: int = 0,
    max_triples: int = 200,
) -> list[dict[str, str]]:
    """The reader's chat messages for a question record (module docstring); ``template`` defaults to
    :data:`DEFAULT_TEMPLATES` of the context; ``relation_names`` maps rule relation keys to labels."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {', '.join(CONTEXTS)}, got {context!r}")
    template = templates.resolve(template or DEFAULT_TEMPLATES[context], TEMPLATES)
    if context == "oracle":
        lines = oracle_lines(record.get("groundings") or (), relation_names)
    elif context == "neighbourhood":
        lines = neighbourhood_lines(record.get("triples") or (), seed, max_triples)
    else:
        lines = []
    values = {"triples": "\n".join(lines), "question": record["question"], "topic_entity": record["topic_entity"]}
    return templates.render(template, values)


def context_triples(record: Mapping, context: str, seed: int = 0, max_triples: int = 200) -> set[tuple]:
    """The ``(h, r, t)`` triples the prompt of ``context`` shows (for :func:`failure`)."""
    if context == "oracle":
        return {tuple(t[:3]) for g in record.get("groundings") or () for t in g["body"]}
    if context == "neighbourhood":
        shown = set(neighbourhood_lines(record.get("triples") or (), seed, max_triples))
        return {tuple(t[:3]) for t in record.get("triples") or () if triple_line(t) in shown}
    return set()


def failure(record: Mapping, shown: set[tuple], hard_hit: bool) -> str | None:
    """App. J's failure kind of a question (None when the hard answer was predicted)."""
    if hard_hit:
        return None
    for grounding in record.get("groundings") or ():
        if all(tuple(t[:3]) in shown for t in grounding["body"]):
            return REASONING_FAILURE
    return RETRIEVAL_FAILURE


def parse(
    content: str | None,
    *,
    item_id: str | int | None = None,
    scheme: str = "private_id",
    labels: qa_metrics.KnownLabels | None = None,
    finish_reason: str | None = None,
) -> dict:
    """The ``evaluate-qa`` prediction record of one output (module docstring): ``id, prediction, parsed,
    refusal, truncated, reason``."""
    truncated = finish_reason == "length"
    text = ANSWER_PREFIX.sub("", content or "", count=1).strip()
    out = {"id": item_id, "prediction": text, "parsed": [], "refusal": False, "truncated": truncated, "reason": None}
    if not text:
        out["reason"] = EMPTY
        return out
    if REFUSAL.match(text):
        out.update(prediction=[], refusal=True, reason=REFUSAL_REASON)
        return out
    parsed = (qa_metrics.norm(p) for p in qa_metrics.split_output(text, scheme, labels))
    out["parsed"] = list(dict.fromkeys(p for p in parsed if p))
    return out


def n_refusals(records: Iterable[Mapping]) -> int:
    """The refusals among parsed records."""
    return sum(1 for r in records if r.get("refusal"))


# --- App. D rewrite ----------------------------------------------------------------------------------------


def rewrite_prompt(record: Mapping, template: templates.Template | str | None = None) -> list[dict[str, str]]:
    """App. D's messages for a text-label question record (``removed_triple``, ``topic_entity``,
    ``hard_answer``)."""
    h, r, t = record["removed_triple"]
    values = {
        "entity_h": h,
        "predicate_T": r,
        "entity_t": t,
        "topic_entity": record["topic_entity"],
        "answer_entity": record["hard_answer"],
    }
    return templates.render(templates.resolve(template or "brink-rewrite@1", TEMPLATES), values)


def _mentions(text: str, name: str) -> bool:
    """``name`` occurs in ``text`` (any case) with no letter or digit right before or after it."""
    if not name.strip():
        return False
    pattern = r"(?<![^\W_])" + re.escape(name.strip()) + r"(?![^\W_])"
    return re.search(pattern, text, re.IGNORECASE) is not None


def rewrite_check(content: str | None, record: Mapping) -> dict:
    """``{"question", "rewritten", "reason", "detail"}``: the accepted rewrite, or the record's template
    ``question`` with ``reason`` ``rewrite_rejected`` and why (module docstring)."""
    topic, answer = record["topic_entity"], record["hard_answer"]
    lines = [line.strip() for line in (content or "").splitlines() if line.strip()]
    first = lines[0] if lines else ""
    words = first.split(maxsplit=1)
    if not first:
        why = "empty output"
    elif topic not in first:
        why = f"topic {topic!r} not in the question"
    elif _mentions(first, answer):
        why = f"answer {answer!r} in the question"
    elif not first.endswith("?"):
        why = "does not end with '?'"
    elif words and words[0].lower().strip(",") in YES_NO_AUXILIARIES:
        why = f"yes/no question (opens with {words[0]!r})"
    else:
        return {"question": first, "rewritten": True, "reason": None, "detail": None}
    return {"question": record["question"], "rewritten": False, "reason": REWRITE_REJECTED, "detail": why}


def in_scheme(question: str, topic_label: str, topic_name: str) -> str:
    """A rewritten text-label question for another scheme: every ``topic_label`` replaced by ``topic_name``."""
    return question.replace(topic_label, topic_name)
