"""SynthKGQA question writing (paper 002 §2 steps 1-2, App. A.1; spec 3.1-3.2): the prompt for a seed
subgraph and the parse of the model's answer into the record ``gt-questions`` validates. Pure Python:
called per row inside Spark tasks.

Record in: a ``seed-graphs`` prompt record (:func:`kgbrink.synthkgqa.seeds.prompt_records`):
``sample_id``, ``seed``, ``k``, ``nodes`` ``[{"key", "label"}]``, ``triples`` ``[[h, r, t]]`` (keys),
``flattened``; optional ``relations`` ``[{"key", "label"}]``. Relation labels come from ``relations``, else
from the ``relation_labels`` argument, else are read back from ``flattened`` (whose entity names are known),
else the key stands alone.

Prompt (App. A.1 verbatim, ``synthkgqa-write@1``): the instruction with k substituted for both "2", the
few-shot ``examples`` as user/assistant pairs (``Graph: ...`` / the five fields), then ``Graph: {Q}`` with Q
= each triple as ``label (KEY)-label (PID)-label (KEY)`` (a name without label is its key) joined by
``"; "`` as printed in A.1. :data:`A1_EXAMPLE` is A.1's printed example (for Wikidata keys, k = 2);
:func:`example` makes one from a question by key (e.g. ``gt-questions --generate``) and its text.

Parse (spec 3.2 [P]): each field from its first line-anchored ``<Label>:`` (leading spaces, a ``-``/``*``
bullet, ``**`` bold and quotes around the label tolerated); SPARQL = everything after its label, newlines
as spaces, a code fence removed, cut after the brace closing ``WHERE {``; one trailing ``,`` or ``.``
stripped from the other fields; nodes and triples split at ``;``; a triple split at ``)`` + spaces + ``-``
+ spaces, else at the ``-`` pair whose three parts resolve; an item resolves by the key in its last
``(...)`` when that is a node (or relation) of Q, else by its exact label when exactly one has it.
Reasons, the first that applies in this order (:data:`REASONS`): ``missing_field``, ``malformed_triple``
(not three parts), ``unresolved_entity``, ``unresolved_relation``, ``node_not_in_seed_graph`` (a key in
parentheses that is no node of Q), ``triple_not_in_seed_graph``, ``unsupported_sparql`` (outside
``[PREFIX ...] SELECT [DISTINCT] ?v WHERE { s p o (. | ;) ... }`` with ``wd:`` subjects/objects or
variables, ``wdt:`` predicates, no FILTER/OPTIONAL/UNION/property paths/literals; a ``SERVICE
wikibase:label {...}`` block is dropped), ``sparql_seed_mismatch`` (its ``wd:`` constants are not the
seeds, [code]). Then ``gt-questions`` applies its own (G§2.B).

Record out (``gt-questions --input``, JSON Lines by key, plus): ``id`` (``str(sample_id)`` unless given),
``seeds``, ``answer``, ``answer_subgraph`` ``[[h, r, t]]``, ``question``, ``sparql``, ``sparql_triples``
``[[s, p, o]]`` (variables ``?v``, constants and predicates as keys), ``answer_variable``, ``sample_id``,
``k``, ``truncated``, ``reason``, ``detail``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations

from kgbrink.llm import templates

FIELDS = (
    ("question", "Question"),
    ("nodes", "Nodes mentioned in the question"),
    ("answer", "Answer"),
    ("triples", "Triples used"),
    ("sparql", "SPARQL query"),
)
MISSING_FIELD = "missing_field"
MALFORMED_TRIPLE = "malformed_triple"
UNRESOLVED_ENTITY = "unresolved_entity"
UNRESOLVED_RELATION = "unresolved_relation"
NODE_NOT_IN_SEED_GRAPH = "node_not_in_seed_graph"
TRIPLE_NOT_IN_SEED_GRAPH = "triple_not_in_seed_graph"
UNSUPPORTED_SPARQL = "unsupported_sparql"
SPARQL_SEED_MISMATCH = "sparql_seed_mismatch"
REASONS = (
    MISSING_FIELD,
    MALFORMED_TRIPLE,
    UNRESOLVED_ENTITY,
    UNRESOLVED_RELATION,
    NODE_NOT_IN_SEED_GRAPH,
    TRIPLE_NOT_IN_SEED_GRAPH,
    UNSUPPORTED_SPARQL,
    SPARQL_SEED_MISMATCH,
)
SLOTS = ("k", "Q")
A1_EXAMPLE = {
    "graph": (
        "Quiaios (Q1024001)-country (P17)-Portugal (Q45); Savage Nights (Q174785)-filming location (P915)-Portugal "
        "(Q45); Quiaios (Q1024001)-located in the administrative territorial entity (P131)-Figueira da Foz "
        "(Q428459); Figueira da Foz (Q428459) - country (P17) - Portugal (Q45); Savage Nights (Q174785)-filming "
        "location (P915)-Lisbon (Q597); Portugal (Q45)-capital (P36)-Lisbon (Q597); Lisbon (Q597)-country "
        "(P17)-Portugal (Q45); Lisbon (Q597)-capital of (P1376)-Portugal (Q45); Francisco José Fernandes Costa "
        "(Q357932)-country of citizenship (P27)-Portugal (Q45); Francisco José Fernandes Costa (Q357932)-place of "
        "death (P20)-Figueira da Foz (Q428459); Francisco José Fernandes Costa (Q357932)-position held "
        "(P39)-Minister of Foreign Affairs (Q4294919); Minister of Foreign Affairs (Q4294919)-country (P17)-Portugal "
        "(Q45); Minister of Foreign Affairs (Q4294919)-applies to jurisdiction (P1001)-Portugal (Q45); Francisco "
        "José Fernandes Costa (Q357932)-occupation (P106)-politician (Q82955)"
    ),
    "question": "In which country did Francisco José Fernandes Costa die?",
    "nodes": ["Francisco José Fernandes Costa (Q357932)"],
    "answer": "Portugal (Q45)",
    "triples": [
        "Francisco José Fernandes Costa (Q357932)-place of death (P20)-Figueira da Foz (Q428459)",
        "Figueira da Foz (Q428459)-country (P17)-Portugal (Q45)",
    ],
    "sparql": "SELECT ?answer WHERE {wd:Q357932 wdt:P20 ?place . ?place wdt:P17 ?answer.}",
}
_PARENS = re.compile(r"\(([^()]*)\)\s*$")
_DASH = re.compile(r"\s*-\s*")
_AFTER_PAREN_DASH = re.compile(r"(?<=\))\s*-\s*")
_SPARQL_KEYWORDS = {
    "FILTER",
    "OPTIONAL",
    "UNION",
    "MINUS",
    "BIND",
    "VALUES",
    "SERVICE",
    "GRAPH",
    "EXISTS",
    "NOT",
    "A",
}
_VARIABLE = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")


# --- templates (built in; kgbrink.evaluation.templates gathers every paper's) ---

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
TEMPLATES: dict[str, templates.Template] = {
    "synthkgqa-write@1": templates.Template(
        "synthkgqa-write",
        1,
        (("user", SYNTHKGQA_WRITE), ("user", "Graph: {Q}")),
        ("k", "Q"),
        {"temperature": 1.0, "max_tokens": 1024},
        examples_at=1,
        source="002 §2 step 1, App. A.1 (verbatim, k substituted)",
    )
}


def _label_regex(label: str) -> re.Pattern:
    return re.compile(
        rf"^[ \t]*(?:[-*][ \t]+)?(?:\*\*)?['\"]?{re.escape(label)}['\"]?(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*(.*)$",
        re.MULTILINE,
    )


_FIELD_LINES = {name: _label_regex(label) for name, label in FIELDS}


# --- names ----------------------------------------------------------------------------------------------


def node_labels(record: Mapping) -> dict[str, str | None]:
    """``key -> label`` of the seed graph's nodes (None or "" when unlabelled)."""
    return {n["key"]: n.get("label") for n in record.get("nodes") or ()}


def named(key: str, label: str | None) -> str:
    """``label (KEY)``, or the key alone when there is no label."""
    return f"{label} ({key})" if label else key


def _from_flattened(record: Mapping, entities: Mapping[str, str]) -> dict[str, str | None]:
    """Relation labels read back from ``flattened`` (``h-r-t`` names joined by ``;``); {} when it does not
    line up with ``triples``."""
    text, pos, out = record.get("flattened") or "", 0, {}
    for h, r, t in record.get("triples") or ():
        head, tail = entities[h], entities[t]
        if not text.startswith(head + "-", pos):
            return {}
        start, j = pos + len(head) + 1, pos + len(head) + 1
        while True:
            j = text.find("-" + tail, j)
            if j < 0:
                return {}
            end = j + 1 + len(tail)
            if end == len(text) or text[end] == ";":
                break
            j += 1
        name = text[start:j]
        out.setdefault(r, name[: -len(f" ({r})")] if name.endswith(f" ({r})") else None)
        pos = end + 1
    return out


def relation_labels(record: Mapping, given: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``key -> label`` of the seed graph's relations (module docstring: where labels come from)."""
    keys = list(dict.fromkeys(t[1] for t in record.get("triples") or ()))
    if record.get("relations"):
        known = {r["key"]: r.get("label") for r in record["relations"]}
    elif given is not None:
        known = dict(given)
    else:
        entities = {k: named(k, v) for k, v in node_labels(record).items()}
        known = _from_flattened(record, entities)
    return {k: known.get(k) for k in keys}


def graph_line(record: Mapping, given: Mapping[str, str] | None = None) -> str:
    """Q as A.1 prints it: ``label (KEY)-label (PID)-label (KEY)`` joined by ``"; "``."""
    entities = node_labels(record)
    relations = relation_labels(record, given)
    return "; ".join(
        f"{named(h, entities.get(h))}-{named(r, relations.get(r))}-{named(t, entities.get(t))}"
        for h, r, t in record.get("triples") or ()
    )


# --- prompt ---------------------------------------------------------------------------------------------


def assistant_text(example: Mapping) -> str:
    """An example's answer in A.1's format (``graph, question, nodes, answer, triples, sparql``)."""
    return (
        f"Question: {example['question']},\n"
        f"Nodes mentioned in the question: {'; '.join(example['nodes'])},\n"
        f"Answer: {example['answer']},\n"
        f"Triples used: {'; '.join(example['triples'])}.\n"
        f"SPARQL query: {example['sparql']}"
    )


def example_messages(example: Mapping) -> list[dict[str, str]]:
    """The user/assistant pair of one few-shot example."""
    return [
        {"role": "user", "content": f"Graph: {example['graph']}"},
        {"role": "assistant", "content": assistant_text(example)},
    ]


def sparql_of(seeds: Sequence[str], answer: str, triples: Iterable[Sequence[str]]) -> str:
    """``SELECT ?answer WHERE {...}`` of an answer subgraph by key: seeds ``wd:``, the answer ``?answer``,
    other nodes ``?a``, ``?b``, ... in order of appearance ([code] ``check_redundant_subquery``)."""
    names: dict[str, str] = {s: f"wd:{s}" for s in seeds}
    names[answer] = "?answer"
    triples = [tuple(t) for t in triples]
    intermediates = iter("abcdefghijklmnopqrstuvwxyz")
    for h, _, t in triples:
        for node in (h, t):
            if node not in names:
                names[node] = "?" + next(intermediates)
    return "SELECT ?answer WHERE {" + " ".join(f"{names[h]} wdt:{r} {names[t]}." for h, r, t in triples) + "}"


def example(graph_record: Mapping, question: Mapping, text: str, relation_labels_given=None) -> dict:
    """A few-shot example from a seed-graph record and a question by key (``seeds``, ``answer``,
    ``answer_subgraph``) with its natural-language ``text``; the SPARQL is :func:`sparql_of`."""
    entities = node_labels(graph_record)
    relations = relation_labels(graph_record, relation_labels_given)
    subgraph = [tuple(t) for t in question["answer_subgraph"]]
    return {
        "graph": graph_line(graph_record, relation_labels_given),
        "question": text,
        "nodes": [named(s, entities.get(s)) for s in question["seeds"]],
        "answer": named(question["answer"], entities.get(question["answer"])),
        "triples": [
            f"{named(h, entities.get(h))}-{named(r, relations.get(r))}-{named(t, entities.get(t))}"
            for h, r, t in subgraph
        ],
        "sparql": sparql_of(question["seeds"], question["answer"], subgraph),
    }


def prompt(
    record: Mapping,
    template: templates.Template | str | None = None,
    *,
    k: int | None = None,
    examples: Sequence[Mapping] = (),
    relation_labels_given: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """A.1's messages for a seed-graph record (module docstring); ``k`` defaults to the record's."""
    k = int(record["k"] if k is None else k)
    shots = [m for e in examples for m in example_messages(e)]
    values = {"k": k, "Q": graph_line(record, relation_labels_given)}
    return templates.render(templates.resolve(template or "synthkgqa-write@1", TEMPLATES), values, shots)


# --- parse ----------------------------------------------------------------------------------------------


class _Sparql(ValueError):
    """A query outside the supported basic-graph-pattern subset."""


def _fields(content: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, pattern in _FIELD_LINES.items():
        match = pattern.search(content)
        if match is None:
            out[name] = None
        elif name == "sparql":
            out[name] = " ".join(content[match.start(1) :].split("\n")).strip()
        else:
            value = match.group(1).strip()
            out[name] = value[:-1].rstrip() if value.endswith((",", ".")) else value
    return out


def _strip_fence(text: str) -> str:
    text = re.sub(r"^`{3}[A-Za-z]*\s*", "", text.strip())
    return text.split("```", 1)[0].strip()


def sparql_patterns(query: str) -> tuple[str, list[list[str]]]:
    """``(answer variable, [[s, p, o]])`` of a query in the supported subset (module docstring); variables
    as ``?v``, ``wd:``/``wdt:`` terms as keys. ValueError saying why otherwise."""
    q = _strip_fence(query)
    while True:
        prefix = re.match(r"\s*PREFIX\s+[A-Za-z]*:\s*<[^<>\s]*>\s*", q, re.IGNORECASE)
        if not prefix:
            break
        q = q[prefix.end() :]
    head = re.match(r"\s*SELECT\s+(?:DISTINCT\s+)?(\?[A-Za-z_][A-Za-z0-9_]*)\s+WHERE\s*\{", q, re.IGNORECASE)
    if not head:
        raise _Sparql("not 'SELECT ?variable WHERE {...}' with one variable")
    depth, end = 1, None
    for i in range(head.end(), len(q)):
        depth += {"{": 1, "}": -1}.get(q[i], 0)
        if depth == 0:
            end = i
            break
    if end is None:
        raise _Sparql("no '}' closes the WHERE block")
    rest = q[end + 1 :].strip()
    if re.match(r"(ORDER|LIMIT|OFFSET|GROUP|HAVING|VALUES)\b", rest, re.IGNORECASE):
        raise _Sparql(f"solution modifier after the WHERE block: {rest[:40]!r}")
    body = re.sub(r"SERVICE\s+wikibase:label\s*\{[^{}]*\}", " ", q[head.end() : end], flags=re.IGNORECASE)
    if "{" in body or "}" in body:
        raise _Sparql("a nested group (FILTER, OPTIONAL, UNION, SERVICE, ...)")
    tokens: list[str] = []
    for raw in body.split():
        trail = []
        while len(raw) > 1 and raw[-1] in ".;":
            trail.insert(0, raw[-1])
            raw = raw[:-1]
        tokens += [raw, *trail]
    patterns: list[list[str]] = []
    subject, i = None, 0
    while i < len(tokens):
        if subject is None:
            subject = _term(tokens[i], "subject")
            i += 1
        if i + 1 >= len(tokens):
            raise _Sparql("an incomplete triple pattern")
        predicate, obj = _predicate(tokens[i]), _term(tokens[i + 1], "object")
        patterns.append([subject, predicate, obj])
        i += 2
        if i < len(tokens):
            if tokens[i] == ".":
                subject = None
            elif tokens[i] != ";":
                raise _Sparql(f"expected '.' or ';' after a triple pattern, got {tokens[i]!r}")
            i += 1
    if not patterns:
        raise _Sparql("no triple pattern")
    variable = head.group(1)
    if not any(variable in (s, o) for s, _, o in patterns):
        raise _Sparql(f"the selected {variable} is in no triple pattern")
    return variable, patterns


def _term(token: str, where: str) -> str:
    if token.upper() in _SPARQL_KEYWORDS or token.split("(")[0].upper() in _SPARQL_KEYWORDS:
        raise _Sparql(f"{token!r} is outside the basic graph pattern subset")
    if _VARIABLE.fullmatch(token):
        return token
    if token.startswith("wd:") and len(token) > 3:
        return token[3:]
    raise _Sparql(f"{where} {token!r} is neither a variable nor a wd: term")


def _predicate(token: str) -> str:
    if not token.startswith("wdt:") or len(token) == 4:
        raise _Sparql(f"predicate {token!r} is not a wdt: term")
    key = token[4:]
    if "/wdt:" in key or "|" in key or key.endswith(("*", "+", "?")) or key.startswith("^"):
        raise _Sparql(f"property path {token!r}")
    return key


class _Resolver:
    """Items of the model's answer to the seed graph's keys (module docstring)."""

    def __init__(self, record: Mapping, given: Mapping[str, str] | None):
        self.nodes = node_labels(record)
        self.relations = relation_labels(record, given)
        self.triples = {tuple(t) for t in record.get("triples") or ()}
        self.node_by_label = _by_label(self.nodes)
        self.relation_by_label = _by_label(self.relations)

    def entity(self, item: str) -> tuple[str | None, str | None]:
        return _resolve(item.strip(), self.nodes, self.node_by_label, UNRESOLVED_ENTITY, NODE_NOT_IN_SEED_GRAPH)

    def relation(self, item: str) -> tuple[str | None, str | None]:
        item = item.strip()
        key, problem = _resolve(item, self.relations, self.relation_by_label, UNRESOLVED_RELATION, None)
        if problem is None and key is None:  # a key in parentheses that no relation of Q has
            return _PARENS.search(item).group(1).strip(), None
        return key, problem

    def triple(self, text: str) -> tuple[tuple | None, list[tuple[str, str]]]:
        """``((h, r, t), [])`` or ``(None, [(reason, detail)])``."""
        candidates = []
        primary = _AFTER_PAREN_DASH.split(text.strip())
        if len(primary) == 3:
            candidates.append(primary)
        cuts = [m for m in _DASH.finditer(text.strip())][:20]
        stripped = text.strip()
        for a, b in combinations(cuts, 2):
            candidates.append([stripped[: a.start()], stripped[a.end() : b.start()], stripped[b.end() :]])
        if not candidates:
            return None, [(MALFORMED_TRIPLE, f"triple {text.strip()!r} is not 'head-relation-tail'")]
        first_problems = None
        for h, r, t in candidates:
            (hk, hp), (rk, rp), (tk, tp) = self.entity(h), self.relation(r), self.entity(t)
            problems = [(p, f"{item.strip()!r} in triple {stripped!r}") for p, item in ((hp, h), (rp, r), (tp, t)) if p]
            if not problems:
                return (hk, rk, tk), []
            first_problems = first_problems or problems
        return None, first_problems


def _by_label(labels: Mapping[str, str | None]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, label in labels.items():
        if label:
            out.setdefault(label.strip(), []).append(key)
    return out


def _resolve(item, labels, by_label, unresolved: str, outside: str | None) -> tuple[str | None, str | None]:
    """``(key, None)``, ``(None, reason)``, or ``(None, None)`` for a key in parentheses outside ``labels``
    when ``outside`` is None."""
    parens = _PARENS.search(item)
    if parens and parens.group(1).strip() in labels:
        return parens.group(1).strip(), None
    keys = by_label.get(item)
    if keys and len(keys) == 1:
        return keys[0], None
    if parens and parens.group(1).strip():
        return None, outside
    return None, unresolved


def _split(value: str) -> list[str]:
    return [x.strip() for x in value.split(";") if x.strip()]


def parse(
    content: str | None,
    record: Mapping,
    *,
    item_id: str | None = None,
    finish_reason: str | None = None,
    relation_labels_given: Mapping[str, str] | None = None,
) -> dict:
    """The ``gt-questions`` record of one written question, or the first reason it cannot be one (module
    docstring)."""
    fields = _fields(content or "")
    out = {
        "id": str(record["sample_id"]) if item_id is None else item_id,
        "sample_id": record.get("sample_id"),
        "k": record.get("k"),
        "question": fields["question"],
        "seeds": None,
        "answer": None,
        "answer_subgraph": None,
        "sparql": fields["sparql"],
        "sparql_triples": None,
        "answer_variable": None,
        "truncated": finish_reason == "length",
        "reason": None,
        "detail": None,
    }
    missing = [label for name, label in FIELDS if not fields[name]]
    if missing:
        return {**out, "reason": MISSING_FIELD, "detail": "missing or empty: " + ", ".join(missing)}
    resolver = _Resolver(record, relation_labels_given)
    problems: list[tuple[str, str]] = []
    seeds = []
    for item in _split(fields["nodes"]):
        key, problem = resolver.entity(item)
        seeds.append(key)
        if problem:
            problems.append((problem, f"node {item!r}"))
    answer, problem = resolver.entity(fields["answer"])
    if problem:
        problems.append((problem, f"answer {fields['answer']!r}"))
    subgraph = []
    for text in _split(fields["triples"]):
        triple, found = resolver.triple(text)
        problems += found
        if triple is not None:
            subgraph.append(list(triple))
            if triple not in resolver.triples:
                problems.append((TRIPLE_NOT_IN_SEED_GRAPH, f"triple {text!r} = {list(triple)} is not in Q"))
    if not seeds or not subgraph:
        problems.append((MISSING_FIELD, "no nodes" if not seeds else "no triples"))
    out.update(seeds=list(dict.fromkeys(s for s in seeds if s)), answer=answer, answer_subgraph=subgraph)
    try:
        variable, patterns = sparql_patterns(fields["sparql"])
        out.update(answer_variable=variable, sparql_triples=patterns)
        constants = {x for s, _, o in patterns for x in (s, o) if not x.startswith("?")}
        if not problems and constants != set(out["seeds"]):
            problems.append(
                (SPARQL_SEED_MISMATCH, f"SPARQL constants {sorted(constants)} != seeds {sorted(out['seeds'])}")
            )
    except _Sparql as e:
        problems.append((UNSUPPORTED_SPARQL, str(e)))
    if problems:
        reason, detail = min(problems, key=lambda p: REASONS.index(p[0]))
        return {**out, "reason": reason, "detail": detail}
    return out
