"""The built-in templates of every paper, gathered from beside each parser (``TEMPLATES`` of
:mod:`kgbrink.brink.reader`, :mod:`kgbrink.mcq.answering`, :mod:`kgbrink.synthkgqa.writing`,
:mod:`kgbrink.synthkgqa.answering`, :mod:`kgbrink.okgqa.answering`, :mod:`kgbrink.okgqa.safe`):
``name@version`` references, looked up by ``predict --template`` and the judges."""

from __future__ import annotations

from pathlib import Path

from kgbrink.brink import reader
from kgbrink.llm import templates
from kgbrink.mcq import answering as mcq_answering
from kgbrink.okgqa import answering as okgqa_answering
from kgbrink.okgqa import safe as okgqa_safe
from kgbrink.synthkgqa import answering as synthkgqa_answering
from kgbrink.synthkgqa import writing

BUILTINS: dict[str, templates.Template] = {
    **reader.TEMPLATES,
    **mcq_answering.TEMPLATES,
    **writing.TEMPLATES,
    **synthkgqa_answering.TEMPLATES,
    **okgqa_answering.TEMPLATES,
    **okgqa_safe.TEMPLATES,
}


def names() -> list[str]:
    """The references ``name@version`` of the built-in templates."""
    return sorted(BUILTINS)


def builtin(ref: str) -> templates.Template:
    """The built-in template ``name@version``, or the latest version of ``name``."""
    return templates.builtin(ref, BUILTINS)


def resolve(spec: str | Path | templates.Template) -> templates.Template:
    """A template given as itself, a built-in reference, or a JSON / YAML file path."""
    return templates.resolve(spec, BUILTINS)
