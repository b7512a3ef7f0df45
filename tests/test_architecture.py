"""The layering of ``lib/kgbrink`` (docs/architecture.md): only ``kgbrink.core`` writes tables."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lib" / "kgbrink"
# kgbrink.core.delta's commits: every one outside core goes through JobContext (which records it)
WRITES = {"write_table", "replace_where", "merge", "set_table_property"}


def _outside_core() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "core")


def _delta_writes(tree: ast.AST) -> list[str]:
    """The Delta write calls and imports of a module: the names it imports from kgbrink.core.delta's
    writes, ``DeltaTable``, ``.format("delta")`` writers, ``saveAsTable`` / ``insertInto`` and DDL/DML text."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("kgbrink.core.delta", "delta.tables", "delta"):
            found += [f"import {a.name}" for a in node.names if a.name in WRITES | {"DeltaTable", "tables"}]
        elif isinstance(node, ast.Attribute) and node.attr in {"DeltaTable", "saveAsTable", "insertInto"}:
            found.append(node.attr)
        elif isinstance(node, ast.Attribute) and node.attr in WRITES and isinstance(node.value, ast.Name):
            if node.value.id == "delta":
                found.append(f"delta.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            if any(isinstance(a, ast.Constant) and a.value == "delta" for a in node.args):
                found.append('.format("delta")')
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.upper()
            if any(k in text for k in ("ALTER TABLE", "MERGE INTO", "DELETE FROM", "UPDATE DELTA.")):
                found.append(repr(node.value[:40]))
    return found


def test_no_delta_write_outside_core():
    offenders = {}
    for path in _outside_core():
        found = _delta_writes(ast.parse(path.read_text()))
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert offenders == {}, "write through JobContext (ctx.write, ctx.replace_where, ctx.merge, ...)"


def test_the_check_sees_a_write():
    source = 'from kgbrink.core.delta import merge\ndf.write.format("delta").save(p)\nspark.sql("ALTER TABLE x")\n'
    assert sorted(_delta_writes(ast.parse(source))) == sorted(["import merge", '.format("delta")', "'ALTER TABLE x'"])


def _registers_a_job(tree: ast.AST) -> bool:
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "job"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
    )


def _imported_job_package_modules(tree: ast.AST) -> set[str]:
    """The modules of ``kgbrink.jobs`` a module imports, anywhere in it (function bodies too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kgbrink.jobs":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kgbrink.jobs."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("kgbrink.jobs.")}
    return found


def test_jobs_compose_through_ctx_run_and_never_import_each_other():
    folder = PACKAGE / "jobs"
    trees = {p.stem: ast.parse(p.read_text()) for p in folder.glob("*.py") if p.stem != "__init__"}
    job_modules = {name for name, tree in trees.items() if _registers_a_job(tree)}
    assert {"ingest", "refresh", "build", "variant", "score", "pipeline"} <= job_modules
    offenders = {
        name: sorted(_imported_job_package_modules(tree) & job_modules - {name})
        for name, tree in trees.items()
        if _imported_job_package_modules(tree) & job_modules - {name}
    }
    assert offenders == {}, "run another job by name: ctx.run('<job>', **options)"


def test_the_import_check_sees_an_import_inside_a_function():
    tree = ast.parse("def f():\n    from kgbrink.jobs import score\n    import kgbrink.jobs.build\n")
    assert _imported_job_package_modules(tree) == {"score", "build"}


def test_a_job_runs_another_with_options_or_values_not_both():
    import pytest

    from kgbrink.cli import load_jobs
    from kgbrink.core.jobs import JobContext

    stats = load_jobs()["stats"].options
    with pytest.raises(TypeError, match="options or values"):
        JobContext(None, None).run("stats", stats(), dataset="d")
