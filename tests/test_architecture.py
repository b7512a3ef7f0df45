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


def _offenders(check) -> dict[str, list[str]]:
    """What ``check`` finds in each module outside ``kgbrink.core``, by module."""
    found = {str(p.relative_to(PACKAGE)): check(ast.parse(p.read_text())) for p in _outside_core()}
    return {name: hits for name, hits in found.items() if hits}


def test_no_delta_write_outside_core():
    assert _offenders(_delta_writes) == {}, "write through JobContext (ctx.write, ctx.replace_where, ctx.merge, ...)"


def test_the_check_sees_a_write():
    source = 'from kgbrink.core.delta import merge\ndf.write.format("delta").save(p)\nspark.sql("ALTER TABLE x")\n'
    assert sorted(_delta_writes(ast.parse(source))) == sorted(["import merge", '.format("delta")', "'ALTER TABLE x'"])


def _file_writes_and_recordings(tree: ast.AST) -> list[str]:
    """Spark's DataFrame writers (``x.write.<...>``, ``writeStream``) and outputs recorded by hand
    (``<summary>.outputs[name] = ...``) in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "write":
                found.append(f".write.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr == "writeStream":
            found.append(".writeStream")
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                    if target.value.attr == "outputs":
                        found.append(".outputs[...] =")
    return found


def test_files_are_written_and_outputs_recorded_only_in_core():
    assert _offenders(_file_writes_and_recordings) == {}, (
        "write through ctx (write_files, keep, ...) or kgbrink.core.files (spill, write_lines)"
    )


def test_the_file_write_check_sees_a_writer_and_a_recording():
    source = 'df.write.mode("overwrite").parquet(p)\nsummary.outputs["x"] = v\nstream.write(b"")\nf.write_text("")\n'
    assert sorted(_file_writes_and_recordings(ast.parse(source))) == [".outputs[...] =", ".write.mode"]


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


# A job reads its inputs, calls one domain function per step, writes through ctx and summarises (issue 46):
# its body, decorator and docstring included, fits on a screen; longer work is a named helper or domain code.
JOB_LINES = 70


def _job_lengths(tree: ast.AST) -> dict[str, int]:
    """The lines of each function a module registers with ``@job(...)``, decorators included."""
    return {
        node.name: node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "job" for d in node.decorator_list)
    }


def test_every_job_body_is_short():
    long = {
        f"{path.stem}.{name}": lines
        for path in sorted((PACKAGE / "jobs").glob("*.py"))
        for name, lines in _job_lengths(ast.parse(path.read_text())).items()
        if lines > JOB_LINES
    }
    assert long == {}, f"a job's run at most {JOB_LINES} lines: move its work into helpers or the domain packages"


def test_the_length_check_counts_the_decorator_and_sees_a_long_job():
    source = (
        '@job(\n    "x",\n)\ndef run(ctx, opts):\n' + "    pass\n" * (JOB_LINES - 3) + "\ndef helper():\n    pass\n"
    )
    assert _job_lengths(ast.parse(source)) == {"run": JOB_LINES + 1}
