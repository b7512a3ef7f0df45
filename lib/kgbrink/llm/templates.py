"""Versioned chat-prompt templates (issue 58, spec 0): what a template is, how it is rendered, and a user's own.

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

Each paper's built-in templates live beside its parser (``TEMPLATES`` of :mod:`kgbrink.brink.reader`,
:mod:`kgbrink.mcq.answering`, :mod:`kgbrink.synthkgqa.writing`, :mod:`kgbrink.synthkgqa.answering`,
:mod:`kgbrink.okgqa.answering`); :mod:`kgbrink.evaluation.templates` gathers them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
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


def builtin(ref: str, builtins: Mapping[str, Template]) -> Template:
    """The template ``name@version`` of ``builtins``, or the latest version of ``name``."""
    if ref in builtins:
        return builtins[ref]
    versions = sorted((int(r.split("@")[1]), r) for r in builtins if r.split("@")[0] == ref)
    if not versions:
        raise TemplateError(f"no built-in template {ref!r} (known: {', '.join(sorted(builtins))})")
    return builtins[versions[-1][1]]


def builtin_ref(spec: str | Path | Template) -> bool:
    """``spec`` names a built-in template (``name`` or ``name@version``), not a file or a Template."""
    return isinstance(spec, str) and not spec.lower().endswith((".json", ".yaml", ".yml"))


def resolve(spec: str | Path | Template, builtins: Mapping[str, Template]) -> Template:
    """A template given as itself, a reference to one of ``builtins``, or a ``.json`` / ``.yaml`` / ``.yml``
    file path."""
    if isinstance(spec, Template):
        return spec
    if not builtin_ref(spec):
        return load(str(spec))
    return builtin(str(spec), builtins)
