"""Horn rules as data: the rule model, AMIE3's text syntax and TSV output, BRINK's rule types.

A rule ``B_1 ^ ... ^ B_n => H`` (BRINK Sec. 3.1) is a head atom and a tuple of body atoms; an atom is
``relation(subject, object)`` over variables written ``?a``, ``?b``, ... Relations are the keys of the
source dump (``P31``, ``aunt_of``), so rules travel between datasets and tools.

AMIE3 syntax (printed and parsed): body atoms, then ``=>``, then the head, each atom as
``?x  relation  ?y`` with two spaces between all elements and three spaces before ``=>``::

    ?a  r1  ?e  ?e  r2  ?b   => ?a  r3  ?b

The canonical form (used for ids, equality between rule sets from different tools and printing) names
the head variables ``?a`` and ``?b`` and the other variables ``?e``, ``?f``, ... (AMIE's own naming), with
body atoms sorted; among renamings of the non-head variables the smallest printed rule wins. Two rules
are the same rule iff their canonical strings are equal.

Rule types (BRINK Table 1), decided on the canonical form with head ``r(?a, ?b)``:
symmetry ``r(b, a) => r(a, b)``; inversion ``r1(b, a) => r2(a, b)``; hierarchy ``r1(a, b) => r2(a, b)``;
composition ``r1(a, e) ^ r2(e, b) => r3(a, b)`` with both body atoms oriented along the chain, whatever
the relations (``r1 = r2 = r3`` is transitivity, a composition too); everything else is "other"
(other orientations of a chain, two atoms on the head's variables, longer chains, triangles).
Choice checked against BRINK Table 1 on Family: it gives 6 inversion, 56 composition, 83 other.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HEAD_VARIABLES = ("?a", "?b")
FRESH_VARIABLES = tuple(f"?{c}" for c in "efghijklmnopqrstuvwxyz")
RULE_TYPES = ("symmetry", "inversion", "hierarchy", "composition", "other")

# AMIE3's output columns (the first eight; later versions append more, which import ignores).
AMIE_COLUMNS = (
    "Rule",
    "Head Coverage",
    "Std Confidence",
    "PCA Confidence",
    "Positive Examples",
    "Body size",
    "PCA Body size",
    "Functional variable",
)
# Header spellings seen in AMIE releases, normalised (lower case, no spaces/dots/underscores) -> field.
_COLUMN_ALIASES = {
    "rule": "rule",
    "headcoverage": "head_coverage",
    "stdconfidence": "std_confidence",
    "standardconfidence": "std_confidence",
    "pcaconfidence": "pca_confidence",
    "positiveexamples": "support",
    "support": "support",
    "bodysize": "body_size",
    "pcabodysize": "pca_body_size",
    "functionalvariable": "functional_variable",
}
# AMIE 3.5 prints the functional variable as its integer code.
_AMIE_VARIABLE_CODES = {"-1": "?a", "-2": "?b"}
_REQUIRED_FIELDS = (
    "rule",
    "head_coverage",
    "std_confidence",
    "pca_confidence",
    "support",
    "body_size",
    "pca_body_size",
    "functional_variable",
)


class RuleSyntaxError(ValueError):
    """A rule string or AMIE3 TSV line that cannot be read; the message names the place."""


@dataclass(frozen=True, order=True)
class Atom:
    relation: str
    subject: str
    object: str

    def variables(self) -> tuple[str, str]:
        return (self.subject, self.object)

    def text(self) -> str:
        return f"{self.subject}  {self.relation}  {self.object}"


@dataclass(frozen=True)
class Rule:
    """``body => head``; metrics are optional (a parsed or mined rule carries them)."""

    head: Atom
    body: tuple[Atom, ...]
    metrics: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        problem = structure_problem(self)
        if problem:
            raise RuleSyntaxError(f"not a closed connected Horn rule ({problem}): {self.text()}")

    @property
    def length(self) -> int:
        """Atoms counting the head (AMIE's ``-maxad`` bound)."""
        return len(self.body) + 1

    def text(self) -> str:
        """AMIE3's printing: body atoms, three spaces, ``=>``, one space, the head."""
        return "  ".join(a.text() for a in self.body) + "   => " + self.head.text()

    def canonical(self) -> Rule:
        return _canonical(self)

    def key(self) -> str:
        """The canonical string: equal iff the rules are equal up to variable names and atom order."""
        return self.canonical().text()

    def rule_id(self) -> str:
        """Stable id: the first 16 hex digits of SHA-1 of the canonical string."""
        return hashlib.sha1(self.key().encode()).hexdigest()[:16]

    def rule_type(self) -> str:
        return rule_type(self)

    def functional_variable(self, subject_is_functional: bool) -> str:
        """AMIE3 prints the head's subject variable when the head relation's functionality is at least its
        inverse functionality, else its object variable."""
        return self.head.subject if subject_is_functional else self.head.object


def structure_problem(rule: Rule) -> str | None:
    """Why ``rule`` is not an AMIE rule (App. B: connected, closed, safe; no empty body; no body atom equal
    to the head; no repeated atom; no atom r(?x, ?x)), or None."""
    atoms = (rule.head,) + rule.body
    if not rule.body:
        return "empty body"
    for a in atoms:
        if not (a.subject.startswith("?") and a.object.startswith("?")) or len(a.subject) < 2 or len(a.object) < 2:
            return f"atom '{a.text()}' has a non-variable argument"
        if a.subject == a.object:
            return f"atom '{a.text()}' repeats a variable"
        if not a.relation:
            return "empty relation"
    if rule.head in rule.body:
        return "the body contains the head atom"
    if len(set(rule.body)) != len(rule.body):
        return "a body atom is repeated"
    counts: dict[str, int] = {}
    for a in atoms:
        for v in a.variables():
            counts[v] = counts.get(v, 0) + 1
    if any(c < 2 for c in counts.values()):
        return "not closed: a variable occurs once"
    linked = set(rule.head.variables())
    pending = list(rule.body)
    while pending:
        step = [a for a in pending if linked & set(a.variables())]
        if not step:
            return "not connected"
        for a in step:
            linked |= set(a.variables())
            pending.remove(a)
    return None


def _renamed(rule: Rule, names: dict[str, str]) -> tuple[Atom, tuple[Atom, ...]]:
    head = Atom(rule.head.relation, names[rule.head.subject], names[rule.head.object])
    body = tuple(sorted(Atom(a.relation, names[a.subject], names[a.object]) for a in rule.body))
    return head, body


def _canonical(rule: Rule) -> Rule:
    others = sorted({v for a in rule.body for v in a.variables()} - set(rule.head.variables()))
    best = None
    for order in itertools.permutations(others):
        names = {rule.head.subject: HEAD_VARIABLES[0], rule.head.object: HEAD_VARIABLES[1]}
        names.update(zip(order, FRESH_VARIABLES))
        head, body = _renamed(rule, names)
        text = "  ".join(a.text() for a in body)
        if best is None or text < best[0]:
            best = (text, head, body)
    return Rule(best[1], best[2], dict(rule.metrics))


def rule_type(rule: Rule) -> str:
    """BRINK Table 1 type of ``rule`` (see the module docstring)."""
    canonical = rule.canonical()
    a, b = HEAD_VARIABLES
    head = canonical.head
    if len(canonical.body) == 1:
        (atom,) = canonical.body
        if atom.variables() == (b, a):
            return "symmetry" if atom.relation == head.relation else "inversion"
        return "hierarchy"
    if len(canonical.body) == 2:
        first = [x for x in canonical.body if x.subject == a]
        second = [x for x in canonical.body if x.object == b]
        if len(first) == 1 and len(second) == 1 and first[0] is not second[0]:
            middle = first[0].object
            if middle not in HEAD_VARIABLES and second[0].subject == middle:
                return "composition"
    return "other"


_TRAILER = re.compile(r"^(Mining done|Total time|\d+ rules mined|Search space size)")
_VARIABLE = re.compile(r"^\?[A-Za-z0-9_]+$")


def parse_rule(text: str) -> Rule:
    """A rule in AMIE3 syntax (any whitespace between elements; relations must not contain whitespace)."""
    if text.count("=>") != 1:
        raise RuleSyntaxError(f"expected exactly one '=>' in rule: {text!r}")
    body_text, head_text = text.split("=>")

    def atoms(part: str, where: str) -> list[Atom]:
        tokens = part.split()
        if not tokens or len(tokens) % 3:
            raise RuleSyntaxError(f"the {where} of {text!r} is not a sequence of '?x relation ?y' atoms")
        out = []
        for i in range(0, len(tokens), 3):
            s, r, o = tokens[i : i + 3]
            if not (_VARIABLE.match(s) and _VARIABLE.match(o)):
                raise RuleSyntaxError(
                    f"atom '{s} {r} {o}' in {text!r}: arguments must be variables like ?a (constants are not supported)"
                )
            out.append(Atom(r, s, o))
        return out

    head = atoms(head_text, "head")
    if len(head) != 1:
        raise RuleSyntaxError(f"the head of {text!r} must be one atom")
    return Rule(head[0], tuple(atoms(body_text, "body")))


def _number(value: str, column: str, where: str) -> float:
    try:
        x = float(value.replace(",", "."))
    except ValueError:
        raise RuleSyntaxError(f"{where}: column '{column}' is not a number: {value!r}") from None
    if math.isnan(x) or x < 0:
        raise RuleSyntaxError(f"{where}: column '{column}' must be a non-negative number, got {value!r}")
    return x


def _count(value: str, column: str, where: str) -> int:
    x = _number(value, column, where)
    if x != int(x):
        raise RuleSyntaxError(f"{where}: column '{column}' must be a whole number, got {value!r}")
    return int(x)


def read_amie_tsv(path: str | Path) -> list[Rule]:
    """Rules from an AMIE3 output file: lines before the header (AMIE's log) and after the table (``Mining
    done in ...``, timings) are skipped; every line between header and the first blank line must be a rule
    row, else the error names the file and line. Duplicate rules (same canonical form) are an error. A
    ``.gz`` file is read decompressed."""
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.decode("utf-8").splitlines()
    header_at, fields = None, None
    for i, line in enumerate(lines):
        names = [_COLUMN_ALIASES.get(re.sub(r"[\s._]", "", c.lower())) for c in line.split("\t")]
        if names and names[0] == "rule" and all(f in names for f in _REQUIRED_FIELDS):
            header_at, fields = i, names
            break
    if header_at is None:
        raise RuleSyntaxError(f"{path}: no AMIE3 header line (tab-separated: {', '.join(AMIE_COLUMNS)})")
    rules, seen = [], {}
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            break
        where = f"{path}:{i + 1}"
        cells = line.split("\t")
        if len(cells) < len(_REQUIRED_FIELDS) or not cells[0].strip().startswith("?"):
            if _TRAILER.match(line):
                break
            raise RuleSyntaxError(
                f"{where}: expected {len(fields)} tab-separated columns starting with a rule, got {line!r}"
            )
        row = dict(zip(fields, cells))
        try:
            rule = parse_rule(row["rule"])
        except RuleSyntaxError as e:
            raise RuleSyntaxError(f"{where}: {e}") from None
        support = _count(row["support"], "Positive Examples", where)
        body_size = _count(row["body_size"], "Body size", where)
        pca_body_size = _count(row["pca_body_size"], "PCA Body size", where)
        head_coverage = _number(row["head_coverage"], "Head Coverage", where)
        std = _number(row["std_confidence"], "Std Confidence", where)
        pca = _number(row["pca_confidence"], "PCA Confidence", where)
        functional = _AMIE_VARIABLE_CODES.get(row["functional_variable"].strip(), row["functional_variable"].strip())
        if functional not in rule.head.variables():
            raise RuleSyntaxError(f"{where}: functional variable {functional!r} is not a head variable of the rule")
        if head_coverage > 1 or std > 1 or pca > 1:
            raise RuleSyntaxError(f"{where}: coverage and confidences must lie in [0, 1]")
        metrics = {
            "support": support,
            "head_coverage": head_coverage,
            "std_confidence": std,
            "pca_confidence": pca,
            "body_size": body_size,
            "pca_body_size": pca_body_size,
            "functional_variable": functional,
        }
        parsed = Rule(rule.head, rule.body, metrics)
        key = parsed.key()
        if key in seen:
            raise RuleSyntaxError(f"{where}: the same rule as line {seen[key]} (up to variable names and atom order)")
        seen[key] = i + 1
        rules.append(parsed)
    return rules


def _format(x: float) -> str:
    return repr(float(x))


def amie_tsv_lines(rules: Iterable[Rule]) -> list[str]:
    """AMIE3's table: the header, then one row per rule (canonical printing; functional variable renamed
    with the rule)."""
    out = ["\t".join(AMIE_COLUMNS)]
    for rule in rules:
        m = rule.metrics
        canonical = rule.canonical()
        functional = HEAD_VARIABLES[0] if m["functional_variable"] == rule.head.subject else HEAD_VARIABLES[1]
        out.append(
            "\t".join(
                [
                    canonical.text(),
                    _format(m["head_coverage"]),
                    _format(m["std_confidence"]),
                    _format(m["pca_confidence"]),
                    str(int(m["support"])),
                    str(int(m["body_size"])),
                    str(int(m["pca_body_size"])),
                    functional,
                ]
            )
        )
    return out


def write_amie_tsv(rules: Iterable[Rule], path: str | Path) -> None:
    Path(path).write_text("\n".join(amie_tsv_lines(rules)) + "\n", encoding="utf-8")


# --- rules table rows (the Delta table ``rules``) ------------------------------------------------------

RULE_TABLE_COLUMNS = (
    "id",
    "rule",
    "head_relation",
    "body",
    "length",
    "rule_type",
    "support",
    "head_coverage",
    "std_confidence",
    "pca_confidence",
    "body_size",
    "pca_body_size",
    "functional_variable",
)


def rule_row(rule: Rule) -> dict:
    """One row of the rules table for ``rule`` (canonical variables; body as a list of atoms)."""
    canonical = rule.canonical()
    m = rule.metrics
    functional = m.get("functional_variable")
    if functional is not None:
        functional = HEAD_VARIABLES[0] if functional == rule.head.subject else HEAD_VARIABLES[1]
    return {
        "id": canonical.rule_id(),
        "rule": canonical.text(),
        "head_relation": canonical.head.relation,
        "body": [{"relation": a.relation, "subject": a.subject, "object": a.object} for a in canonical.body],
        "length": canonical.length,
        "rule_type": rule_type(canonical),
        "support": m.get("support"),
        "head_coverage": m.get("head_coverage"),
        "std_confidence": m.get("std_confidence"),
        "pca_confidence": m.get("pca_confidence"),
        "body_size": m.get("body_size"),
        "pca_body_size": m.get("pca_body_size"),
        "functional_variable": functional,
    }


def rule_from_row(row) -> Rule:
    """Inverse of :func:`rule_row` (a Spark Row or a dict)."""
    get = row.asDict() if hasattr(row, "asDict") else row
    body = tuple(Atom(a["relation"], a["subject"], a["object"]) for a in get["body"])
    head = Atom(get["head_relation"], *HEAD_VARIABLES)
    metrics = {k: get[k] for k in RULE_TABLE_COLUMNS[6:]}
    return Rule(head, body, metrics)
