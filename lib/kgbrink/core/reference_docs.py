"""The generated parts of ``docs/``: the job reference (from the registry's options), the settings
reference (from the settings dataclasses) and the table reference (from the catalog).

``python -m kgbrink.core.reference_docs`` rewrites them; ``tests/test_docs.py`` fails when one is stale.
A generated section of a hand-written page sits between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``.
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path

from kgbrink.core import catalog, settings
from kgbrink.core.typed import type_name

DOCS = Path(__file__).resolve().parents[3] / "docs"


COMMON = ("help", "conf", "set", "json", "no_tracking")


def settings_reference() -> str:
    """The settings reference (Markdown table per section) generated from the dataclasses."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, (kind, default, doc) in settings.TOP_LEVEL.items():
        lines.append(f"| `{key}` | {type_name(kind)} | `{default}` | {doc} |")
    for name, cls in settings.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()
            shown = "see `LOCAL_SPARK_CONF`" if isinstance(default, dict) and name == "spark" else f"`{default}`"
            lines.append(f"| `{name}.{f.name}` | {type_name(hints[f.name])} | {shown} | {f.metadata['doc']} |")
    return "\n".join(lines) + "\n"


def jobs_reference() -> str:
    from kgbrink.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = []
    for name, command in sub.choices.items():
        lines += [f"## `kgbrink {name}`", "", command.description or "", "", "| option | meaning |", "|---|---|"]
        for action in command._actions:
            if not action.option_strings or action.dest in COMMON:
                continue
            flag = ", ".join(action.option_strings)
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
            required = " Required." if action.required else ""
            text = (action.help or "").replace("|", "\\|")
            lines.append(f"| `{flag}{metavar}` | {text}{choices}{required} |")
        lines.append("")
    return "\n".join(lines)


GENERATED = {
    "jobs": jobs_reference,
    "settings": settings_reference,
    "tables": catalog.reference_markdown,
}
PAGES = {"jobs": "jobs.md", "settings": "configuration.md", "tables": "tables.md"}
_BLOCK = "<!-- generated: {name} -->\n{body}<!-- end generated -->"


def render(page: str) -> str:
    """``page``'s text with every generated section replaced by the current reference."""
    text = page
    for name, make in GENERATED.items():
        pattern = re.compile(
            re.escape(f"<!-- generated: {name} -->") + r".*?" + re.escape("<!-- end generated -->"), re.S
        )
        body = make().rstrip("\n") + "\n"
        text = pattern.sub(lambda _m, n=name, b=body: _BLOCK.format(name=n, body=b), text)
    return text


def stale(docs: Path = DOCS) -> list[str]:
    """The pages whose generated sections are missing or out of date."""
    out = []
    for name, page in PAGES.items():
        path = docs / page
        text = path.read_text() if path.is_file() else ""
        if f"<!-- generated: {name} -->" not in text or render(text) != text:
            out.append(str(path))
    return out


def main() -> int:
    for path in sorted({DOCS / p for p in PAGES.values()}):
        if path.is_file():
            path.write_text(render(path.read_text()))
    missing = stale()
    if missing:
        print("no generated section in: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
