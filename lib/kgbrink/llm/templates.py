"""Versioned chat-prompt templates (issue 58, spec 0): the built-in templates of each paper and a user's own.

A :class:`Template` is ``name``, ``version`` and ``messages``: ``(role, text)`` pairs, ``role`` one of
``system``, ``user``, ``assistant``. ``slots`` declares the placeholder names: :func:`render` replaces a
token ``{name}`` only when ``name`` is a declared slot, in one pass, so braces in values (JSON, SPARQL)
and undeclared ``{...}`` text in a template stay as they are, and a value is never substituted again.
``examples_at`` is the message index where few-shot messages given to :func:`render` are spliced in
(default: before the last message). ``params`` are the template's default sampling settings (spec 0's
table), ``source`` the paper section its text comes from.

Its reference is ``name@version``; :func:`digest` is the SHA-256 of its canonical JSON
(:func:`as_dict`, sorted keys, no spaces, UTF-8), recorded with every run.

A user's template is a JSON or YAML file (:func:`load`): an object with ``name``, ``version``,
``messages`` (a list of ``{"role", "content"}``) and ``slots``; optional ``params`` (scalars),
``examples_at``, ``description`` and ``source``. The file is untrusted: it is checked for size, types,
roles, slot names and declared slots that no message uses, and a :class:`TemplateError` names the file
and the field.

Built-in templates (:func:`builtin`, :func:`names`): ``brink-reader@1``, ``brink-reader-none@1``,
``brink-rewrite@1`` (paper 000 spec 1.1, App. D), ``probekgc-direct@1``, ``probekgc-cot@1`` (paper 003
spec 4.1; the system text is :data:`kgbrink.mcq.render.SYSTEM_PROMPT`, imported when first built),
``synthkgqa-write@1`` (paper 002 App. A.1), ``synthkgqa-answer@1``, ``synthkgqa-io@1`` (spec 3.4),
``okgqa-answer@1``, ``okgqa-baseline@1`` (paper 004 App. A.1.1, spec 5.1), ``okgqa-sc-select@1`` (spec
5.1, [code] wording) and ``okgqa-geval@1`` (App. A.3).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("system", "user", "assistant")
SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
SLOT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
MAX_FILE_BYTES = 1 << 20
MAX_MESSAGES = 64
MAX_MESSAGE_CHARS = 100_000
MAX_SLOTS = 32
MAX_PARAMS = 32
FILE_FIELDS = ("name", "version", "messages", "slots", "params", "examples_at", "description", "source")


class TemplateError(ValueError):
    """A template that cannot be used: the message names the file (or template) and the field."""


@dataclass(frozen=True)
class Template:
    """A versioned chat template (module docstring)."""

    name: str
    version: int
    messages: tuple[tuple[str, str], ...]
    slots: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    examples_at: int | None = None
    description: str = ""
    source: str = ""

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def as_dict(template: Template) -> dict:
    """The template as plain JSON data (the file form, ``messages`` as ``{"role", "content"}`` objects)."""
    return {
        "name": template.name,
        "version": template.version,
        "messages": [{"role": r, "content": c} for r, c in template.messages],
        "slots": list(template.slots),
        "params": dict(template.params),
        "examples_at": template.examples_at,
        "description": template.description,
        "source": template.source,
    }


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces and UTF-8 text: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(template: Template) -> str:
    """SHA-256 (hex) of the template's canonical JSON."""
    return hashlib.sha256(canonical_json(as_dict(template)).encode("utf-8")).hexdigest()


def used_slots(text: str) -> set[str]:
    """The names of every ``{name}`` token of ``text`` (declared or not)."""
    return set(SLOT.findall(text))


def fill(text: str, slots: Sequence[str], values: Mapping[str, Any]) -> str:
    """``text`` with each ``{name}`` of a declared slot replaced by ``str(values[name])``, in one pass."""
    declared = set(slots)

    def replace(match: re.Match) -> str:
        name = match.group(1)
        return str(values[name]) if name in declared else match.group(0)

    return SLOT.sub(replace, text)


def render(
    template: Template, values: Mapping[str, Any], examples: Sequence[Mapping[str, str]] = ()
) -> list[dict[str, str]]:
    """Chat messages ``[{"role", "content"}]`` of ``template`` with its slots filled from ``values``
    (extra values are ignored; a missing or None one is a :class:`TemplateError`) and the few-shot
    ``examples`` (messages, taken as they are) spliced in at ``examples_at``."""
    missing = [s for s in template.slots if values.get(s) is None]
    if missing:
        raise TemplateError(f"template {template.ref}: no value for slot(s) {', '.join(missing)}")
    messages = [{"role": r, "content": fill(t, template.slots, values)} for r, t in template.messages]
    if examples:
        at = len(messages) - 1 if template.examples_at is None else template.examples_at
        messages[at:at] = [{"role": m["role"], "content": m["content"]} for m in examples]
    return messages


def check_slots(template: Template, available: Sequence[str]) -> None:
    """TemplateError when ``template`` declares a slot the caller cannot fill (check on the driver before
    the prompts are built in tasks)."""
    unknown = [s for s in template.slots if s not in available]
    if unknown:
        raise TemplateError(
            f"template {template.ref}: slot(s) {', '.join(unknown)} cannot be filled here "
            f"(available: {', '.join(available)})"
        )


# --- user templates ---------------------------------------------------------------------------------------


def validate(data: Any, where: str) -> Template:
    """A :class:`Template` from the plain data of a template file; :class:`TemplateError` naming ``where``
    and the field otherwise."""

    def fail(fieldname: str, problem: str) -> TemplateError:
        return TemplateError(f"{where}: {fieldname}: {problem}")

    if not isinstance(data, dict):
        raise fail("(top level)", f"must be an object, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in FILE_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(FILE_FIELDS)})")
    for required in ("name", "version", "messages", "slots"):
        if required not in data:
            raise fail(required, "missing")
    name, version = data["name"], data["version"]
    if not isinstance(name, str) or not NAME.match(name):
        raise fail("name", f"must match {NAME.pattern}, got {name!r}")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 1_000_000:
        raise fail("version", f"must be an integer 1..1000000, got {version!r}")
    slots = data["slots"]
    if not isinstance(slots, list) or len(slots) > MAX_SLOTS:
        raise fail("slots", f"must be a list of at most {MAX_SLOTS} names")
    for i, slot in enumerate(slots):
        if not isinstance(slot, str) or not SLOT_NAME.match(slot):
            raise fail(f"slots[{i}]", f"must match {SLOT_NAME.pattern}, got {slot!r}")
    if len(set(slots)) != len(slots):
        raise fail("slots", "a slot is declared twice")
    raw = data["messages"]
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        raise fail("messages", f"must be a list of 1..{MAX_MESSAGES} messages")
    messages = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise fail(f"messages[{i}]", 'must be an object with exactly "role" and "content"')
        role, content = message["role"], message["content"]
        if role not in ROLES:
            raise fail(f"messages[{i}].role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str) or not content.strip():
            raise fail(f"messages[{i}].content", "must be non-empty text")
        if len(content) > MAX_MESSAGE_CHARS:
            raise fail(f"messages[{i}].content", f"{len(content)} characters > {MAX_MESSAGE_CHARS}")
        messages.append((role, content))
    used = set().union(*(used_slots(c) for _, c in messages))
    unused = [s for s in slots if s not in used]
    if unused:
        raise fail("slots", f"declared but used by no message: {', '.join(unused)}")
    params = data.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict) or len(params) > MAX_PARAMS:
        raise fail("params", f"must be an object of at most {MAX_PARAMS} settings")
    for key, value in params.items():
        if not isinstance(key, str) or not SLOT_NAME.match(key):
            raise fail("params", f"setting name {key!r} is not a plain name")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise fail(f"params.{key}", f"must be a number, text, true/false or null, got {type(value).__name__}")
    at = data.get("examples_at")
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= len(messages)):
        raise fail("examples_at", f"must be a message index 0..{len(messages)}, got {at!r}")
    texts = {}
    for key in ("description", "source"):
        value = data.get(key, "")
        if not isinstance(value, str) or len(value) > 10_000:
            raise fail(key, "must be text of at most 10000 characters")
        texts[key] = value
    return Template(name, version, tuple(messages), tuple(slots), dict(params), at, **texts)


def load(path: str | Path) -> Template:
    """A user's template from a ``.json``, ``.yaml`` or ``.yml`` file (module docstring)."""
    path = Path(path)
    where = str(path)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise TemplateError(f"{where}: (file): must end in .json, .yaml or .yml")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TemplateError(f"{where}: (file): cannot be read ({e.strerror})") from None
    if size > MAX_FILE_BYTES:
        raise TemplateError(f"{where}: (file): {size} bytes > {MAX_FILE_BYTES}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TemplateError(f"{where}: (file): not UTF-8 (byte {e.start + 1})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TemplateError(f"{where}: (file): not JSON ({e.msg} at line {e.lineno})") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise TemplateError(f"{where}: (file): not YAML{at}") from None
    return validate(data, where)


# --- built-in templates -----------------------------------------------------------------------------------

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
PROBEKGC_COT_INSTRUCTION = (
    'Reasoning step by step based on the provided context. Finish the reasoning with the format "**The answer is '
    '<ID>.**", where <ID> is the option ID {option_ids}.'
)
SYNTHKGQA_WRITE = (
    "Based on the provided set of knowledge graph triples, please generate a question that requires combining the "
    "information in exactly {k} of the provided triples for answering. The answer should correspond to exactly one "
    "node in the provided graph, be unique and not ambiguous. Make sure that all {k} of the selected triples are "
    "required for answering the question and that they involve multiple different entities. Respond only with\n"
    "- 'Question:' the generated question,\n"
    "- 'Nodes mentioned in the question:' a semicolon-separated list of the nodes that are explicitly mentioned in "
    "the question,\n"
    "- 'Answer:' the node corresponding to the correct answer with its QID,\n"
    "- 'Triples used:' a semicolon-separated list of the triples used for answering the question,\n"
    "- 'SPARQL query:' a SPARQL query to return all answers of the question from the Wikidata knowledge base."
)
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


def _probekgc(name: str) -> Template:
    from kgbrink.mcq.render import SYSTEM_PROMPT

    if name == "probekgc-direct":
        return Template(
            name,
            1,
            (("system", SYSTEM_PROMPT), ("user", "{prompt}")),
            ("prompt",),
            {"temperature": 0.0, "max_tokens": 16, "logprobs": True, "top_logprobs": 20},
            source="003 [code] prompt_hub.question_prompt (spec 4.1)",
        )
    return Template(
        name,
        1,
        (("system", SYSTEM_PROMPT), ("user", "{question_block}\n\n" + PROBEKGC_COT_INSTRUCTION)),
        ("question_block", "option_ids"),
        {"temperature": 0.0, "max_tokens": 1024},
        source="003 'Knowledge Enhancement Evaluation', [code] prompt_hub use_cot (spec 4.1)",
    )


def _geval() -> Template:
    return Template(
        "okgqa-geval",
        1,
        (("system", GEVAL_SYSTEM), ("user", GEVAL_USER)),
        ("criterion", "input", "actual_output", "retrieval_context"),
        {"temperature": 0.0, "max_tokens": 1024},
        source="004 App. A.3 (system, criteria); user message [P] spec 5.3",
    )


_BUILDERS: dict[str, Callable[[], Template]] = {
    "brink-reader@1": lambda: Template(
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
    "brink-reader-none@1": lambda: Template(
        "brink-reader-none",
        1,
        (("user", BRINK_NONE_INSTRUCTION + "\n\nQuestion:\n{question}\nTopic Entity: {topic_entity}"),),
        ("question", "topic_entity"),
        {"temperature": 0.0, "max_tokens": 256},
        source="spec 1.1 [P] context none",
    ),
    "brink-rewrite@1": lambda: Template(
        "brink-rewrite",
        1,
        (("user", BRINK_REWRITE),),
        ("entity_h", "predicate_T", "entity_t", "topic_entity", "answer_entity"),
        {"temperature": 0.0, "max_tokens": 64},
        source="000 §3.2, App. D (verbatim)",
    ),
    "probekgc-direct@1": lambda: _probekgc("probekgc-direct"),
    "probekgc-cot@1": lambda: _probekgc("probekgc-cot"),
    "synthkgqa-write@1": lambda: Template(
        "synthkgqa-write",
        1,
        (("user", SYNTHKGQA_WRITE), ("user", "Graph: {Q}")),
        ("k", "Q"),
        {"temperature": 1.0, "max_tokens": 1024},
        examples_at=1,
        source="002 §2 step 1, App. A.1 (verbatim, k substituted)",
    ),
    "synthkgqa-answer@1": lambda: Template(
        "synthkgqa-answer",
        1,
        (("system", SYNTHKGQA_SYSTEM), ("user", SYNTHKGQA_READER)),
        ("question", "triples"),
        {"temperature": 0.0, "max_tokens": 256},
        source="002 §4; [code] llm_graph_walk tog_answer_prompt (spec 3.4 [P])",
    ),
    "synthkgqa-io@1": lambda: Template(
        "synthkgqa-io",
        1,
        tuple(m for q, a in SYNTHKGQA_IO_SHOTS for m in (("user", q), ("assistant", a)))
        + (("user", "Question: {question}"),),
        ("question",),
        {"temperature": 0.0, "max_tokens": 256},
        source="002 §4 LLM-only; [code] io_prompt (spec 3.4 [P])",
    ),
    "okgqa-answer@1": lambda: Template(
        "okgqa-answer",
        1,
        (("system", OKGQA_SYSTEM), ("user", OKGQA_USER)),
        ("Question", "Retrieved-knowledge"),
        {"temperature": 0.0, "max_tokens": 1024},
        examples_at=1,
        source="004 App. A.1.1 (verbatim; Example 1 as a user/assistant pair, spec 5.1 [P])",
    ),
    "okgqa-baseline@1": lambda: Template(
        "okgqa-baseline",
        1,
        (("system", OKGQA_SYSTEM), ("user", OKGQA_BASELINE_USER)),
        ("Question",),
        {"temperature": 0.0, "max_tokens": 1024},
        examples_at=1,
        source="004 App. A.1.1 without the facts line (spec 5.1 [P] baselines)",
    ),
    "okgqa-sc-select@1": lambda: Template(
        "okgqa-sc-select",
        1,
        (("user", OKGQA_SC_SELECT),),
        ("question", "answers"),
        {"temperature": 0.0, "max_tokens": 1024},
        source="004 §5.1 CoT + SC; [code] select_most_consistent_response (spec 5.1 [P])",
    ),
    "okgqa-geval@1": _geval,
    "okgqa-facts@1": lambda: Template(
        "okgqa-facts",
        1,
        (("user", OKGQA_FACTS),),
        ("answer",),
        {"temperature": 0.0, "max_tokens": 1024},
        source="004 §3.3 FActScore's atomic facts; [P] FActScore's 'Please breakdown the following sentence into "
        "independent facts' on the whole answer, one request per answer",
    ),
    "okgqa-verify@1": lambda: Template(
        "okgqa-verify",
        1,
        (("user", OKGQA_VERIFY),),
        ("topic", "context", "fact"),
        {"temperature": 0.0, "max_tokens": 16},
        source="004 §3.3 FActScore; [code] FActScore factscorer.py's retrieval + ChatGPT prompt (topic = question)",
    ),
}


def names() -> list[str]:
    """The references ``name@version`` of the built-in templates."""
    return sorted(_BUILDERS)


def builtin(ref: str) -> Template:
    """The built-in template ``name@version``, or the latest version of ``name``."""
    if ref in _BUILDERS:
        return _BUILDERS[ref]()
    versions = sorted((int(r.split("@")[1]), r) for r in _BUILDERS if r.split("@")[0] == ref)
    if not versions:
        raise TemplateError(f"no built-in template {ref!r} (known: {', '.join(names())})")
    return _BUILDERS[versions[-1][1]]()


def builtin_ref(spec: str | Path | Template) -> bool:
    """``spec`` names a built-in template (``name`` or ``name@version``), not a file or a Template."""
    return isinstance(spec, str) and not spec.lower().endswith((".json", ".yaml", ".yml"))


def resolve(spec: str | Path | Template) -> Template:
    """A template given as itself, a built-in reference, or a ``.json`` / ``.yaml`` / ``.yml`` file path."""
    if isinstance(spec, Template):
        return spec
    text = str(spec)
    if not builtin_ref(spec):
        return load(text)
    return builtin(text)
