"""The CLI contract: subcommands, --json summaries, MLflow tracking of every run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from kgbrink.cli import build_parser, main
from tests.conftest import JOB_RUNS, PROJECT_ROOT, conf_args


def test_synth_ingest_stats_through_the_cli_are_tracked_in_mlflow(spark, config, tmp_path, capsys):
    kg, dataset = tmp_path / "kg", tmp_path / "ds"
    assert (
        main(
            [
                "synth",
                *conf_args(config),
                "--out",
                str(kg),
                "--triples",
                "6000",
                "--json",
                str(tmp_path / "synth.json"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "ingest",
                *conf_args(config),
                "--input",
                str(kg),
                "--dataset",
                str(dataset),
                "--json",
                str(tmp_path / "ingest.json"),
            ]
        )
        == 0
    )
    assert main(["stats", *conf_args(config), "--dataset", str(dataset), "--json", str(tmp_path / "stats.json")]) == 0
    capsys.readouterr()
    ingest = json.loads((tmp_path / "ingest.json").read_text())
    manifest = json.loads((kg / "synth_manifest.json").read_text())
    assert ingest["status"] == "ok"
    assert ingest["counts"]["kept_per_split"] == manifest["splits"]
    assert ingest["outputs"]["triples"] == {"path": f"{dataset}/triples", "rows": 6000, "version": 0}
    assert {"spark_startup", "parse_and_count_lines", "encode_and_write_triples"} <= set(ingest["timings"])

    client = MlflowClient(tracking_uri=config.tracking.uri)
    run = client.get_run(ingest["mlflow_run_id"])
    assert run.data.tags["job"] == "ingest" and run.data.tags["status"] == "ok"
    assert run.data.params["output.triples.path"] == f"{dataset}/triples"
    assert run.data.params["output.triples.version"] == "0"
    assert run.data.params["format"] == "wikidata5m"
    assert run.data.metrics["count.kept"] == 6000
    assert run.data.metrics["rows.triples"] == 6000
    stats = json.loads((tmp_path / "stats.json").read_text())
    stats_run = client.get_run(stats["mlflow_run_id"])
    assert stats_run.data.params["input.triples.version"] == "0"
    assert stats_run.data.metrics["count.triples"] == manifest["splits"]["train"]
    artifact = client.download_artifacts(stats["mlflow_run_id"], "summary.json", str(tmp_path))
    assert json.loads(Path(artifact).read_text())["job"] == "stats"


def test_bad_usage_exits_2(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["ingest", "--format", "csv"])
    assert exc.value.code == 2


def test_every_subcommand_has_a_spark_submit_entry_point():
    # jobs/<entry>.py passes its arguments to that subcommand; spark-submit puts jobs/ first on sys.path, so an
    # entry named like a standard module (jobs/profile.py) would shadow it (cProfile imports profile)
    import sys

    from kgbrink.cli import load_jobs
    from kgbrink.core.jobs import REGISTRY

    load_jobs()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in sub.choices:
        entry = PROJECT_ROOT / "jobs" / REGISTRY[command].entry_point
        assert entry.is_file() and f'main(["{command}", *sys.argv[1:]])' in entry.read_text(), entry
    for entry in (PROJECT_ROOT / "jobs").glob("*.py"):
        assert entry.stem not in sys.stdlib_module_names, f"{entry} shadows the standard module {entry.stem}"


def test_the_help_groups_every_command_by_what_a_user_does_and_says_where_to_start(capsys):
    """Each command in exactly one group; the groups in the help in their order, each command once under its
    group with its one-line help; the five papers and `predict` named; where to start last."""
    from kgbrink.cli import GROUPS, load_jobs

    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(load_jobs()) and len(grouped) == len(set(grouped))
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    positions = [text.index(f"\n{title}:\n") for title, _ in GROUPS]
    assert positions == sorted(positions) and text.rstrip().splitlines()[-1].lstrip().startswith("kgbrink COMMAND")
    for (title, names), start, end in zip(GROUPS, positions, [*positions[1:], text.index("where to start")]):
        for name in names:
            line = f"\n  {name} "
            assert text.count(line) == 1 and start < text.index(line) < end, (title, name)
            assert load_jobs()[name].help in text
    words = " ".join(text.split())
    for paper in ("BRINK", "PROBE", "SynthKGQA", "ProbeKGC", "OKGQA-P", "`predict`", "OpenAI-compatible"):
        assert paper in words, paper


def test_a_set_name_is_name_and_a_file_is_questions_and_the_old_spelling_still_works_with_a_warning(capsys):
    """Issue 73: ``--questions`` is a file (okgqa-subgraphs, predict, evaluate-qa, release, score-mcq) and a
    question set is ``--name`` (gt-questions, question-graphs, sp-analysis, okgqa-sweep, okgqa-subgraphs,
    mcq, seed-graphs); the old ``--questions SET`` is accepted for one release and said to be deprecated."""
    from kgbrink.cli import load_jobs
    from kgbrink.core.jobs import options_from

    parser, jobs = build_parser(), load_jobs()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("gt-questions", "question-graphs", "sp-analysis", "okgqa-sweep", "okgqa-subgraphs", "mcq"):
        flags = {s: a for a in sub.choices[command]._actions for s in a.option_strings}
        assert flags["--name"].dest == "name" and "set" in flags["--name"].help, command
    for command in ("okgqa-subgraphs", "predict", "evaluate-qa", "release", "score-mcq"):
        flags = {s: a for a in sub.choices[command]._actions for s in a.option_strings}
        assert flags["--questions"].dest == "questions" and flags["--questions"].help != argparse.SUPPRESS, command
    for command in ("gt-questions", "question-graphs", "sp-analysis", "okgqa-sweep"):
        old = options_from(parser.parse_args([command, "--questions", "qs"]), jobs[command].options)
        assert old.name == "qs" and not hasattr(old, "questions"), command
        warned = capsys.readouterr().err
        assert warned.count("warning: --questions is deprecated for this command, use --name") == 1, command
        assert options_from(parser.parse_args([command, "--name", "qs"]), jobs[command].options).name == "qs"
        assert capsys.readouterr().err == ""
        assert "--questions" not in sub.choices[command].format_help()  # hidden from the help


def test_every_option_with_a_plain_default_names_it_in_its_help():
    """``predict --split`` (test), ``--scheme`` (text_label), ``mcq --name`` (probekgc), ...: each option whose
    field has a text or number default says it in ``--help``."""
    from dataclasses import fields

    from kgbrink.cli import load_jobs

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    checked = 0
    for name, job in load_jobs().items():
        helps = {a.dest: a.help or "" for a in sub.choices[name]._actions if a.help != argparse.SUPPRESS}
        for f in fields(job.options):
            default = f.default
            if not f.metadata.get("cli") or isinstance(default, bool) or not isinstance(default, str | int | float):
                continue
            if default == "" or f.metadata["argparse"].get("action"):
                continue
            given = f.metadata["help"] or ""
            if "default" not in given.lower():  # else the help's own words name it ("default TAB")
                assert helps[f.name] == f"{given} (default: {default})", (name, f.name)
            assert "default" in helps[f.name].lower(), (name, f.name)
            checked += 1
    assert checked >= 20
    predict = {a.dest: a.help for a in sub.choices["predict"]._actions}
    assert predict["split"].endswith("(default: test)") and predict["scheme"].endswith("(default: text_label)")


def test_version_is_the_installed_packages(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_text()
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"kgbrink {version('kgbrink')}"
    assert f'\nversion = "{version("kgbrink")}"\n' in pyproject


def test_build_on_a_train_only_dataset_needs_no_flags(spark, config, family, tmp_path, capsys):
    """The README's delimited example ingests one split; `kgbrink build --dataset D` mines, removes and
    exports it with no other flag (the mining splits default to the dataset's splits)."""
    import shutil

    dataset = tmp_path / "family"
    for table in ("entities", "relations", "triples", "quarantine"):
        shutil.copytree(Path(family[0]) / table, dataset / table)
    assert main(["build", *conf_args(config), "--dataset", str(dataset), "--json", str(tmp_path / "b.json")]) == 0
    summary = json.loads((tmp_path / "b.json").read_text())
    assert summary["params"]["dataset"] == str(dataset)
    assert summary["counts"]["mine"]["rules"] == 145
    assert summary["highlights"]["export"] == str(dataset / "variants" / "brink" / "export")
    out = capsys.readouterr().out
    assert f"export: {dataset}/variants/brink/export" in out and "report:" in out


def test_run_again_on_the_same_dump_reuses_the_statistics_and_the_variant(spark, config, synth_5000, tmp_path):
    """Issue 73 item 8: `kgbrink run` again with nothing changed ingests nothing, reuses the statistics and
    the variant (no table but the writer lease's gets a version) and says so; other settings or other
    table versions are not reused."""
    from kgbrink.core.delta import latest_version
    from kgbrink.release import reuse

    dataset = tmp_path / "ds"
    kg = synth_5000.parent / "kg"  # the session's `synth --triples 5000`
    args = ["run", *conf_args(config), "--dataset", str(dataset), "--input", str(kg), "--no-tracking"]
    args += ["--set", "mining.max_atoms=2"]
    summaries, versions, start = [], [], len(JOB_RUNS)
    for n in range(2):
        assert main([*args, "--json", str(tmp_path / f"{n}.json")]) == 0
        summaries.append(json.loads((tmp_path / f"{n}.json").read_text()))
        logs = sorted(p.parent.parent for p in dataset.rglob("_delta_log/00000000000000000000.json"))
        versions.append({str(p.relative_to(dataset)): latest_version(spark, str(p)) for p in logs})
    first, again = summaries
    # issue 72: every job of the pipeline ended holding no frame it persisted (JOB_RUNS: tests/conftest.py)
    runs = JOB_RUNS[start:]
    assert {"run", "ingest", "stats", "build"} <= {name for name, _, _ in runs}
    assert [(name, after - before) for name, before, after in runs if after != before] == []
    assert first["counts"]["reused"] == [] and "ingest" not in first["highlights"]
    assert {"variants/brink/complete", "stats/train/entity_popularity", "triples", "_writer"} <= set(versions[0])
    assert again["counts"]["reused"] == ["stats", "build"]
    assert versions[1] == {**versions[0], "_writer": versions[0]["_writer"] + 2}  # the lease taken and given back
    assert again["highlights"]["ingest"] == "no change: the dataset already holds this dump"
    assert again["highlights"]["reused"].startswith("stats and the brink variant, already computed")
    for key in ("export", "report", "built"):
        assert again["highlights"][key] == first["highlights"][key], key
    assert Path(again["highlights"]["report"]).is_file()
    inputs = {name: versions[0][name] for name in ("triples", "entities", "relations")}
    run_config = config.with_overrides(["mining.max_atoms=2"])
    assert reuse.current_build_in_variant(spark, run_config, str(dataset), inputs) is not None
    other = run_config.with_overrides(["mining.min_initial_support=3"])
    assert reuse.current_build_in_variant(spark, other, str(dataset), inputs) is None
    assert reuse.current_build_in_variant(spark, run_config, str(dataset), {**inputs, "triples": 99}) is None


@pytest.mark.parametrize(
    "settings, message",
    [
        (["minig.splits=train"], "unknown setting 'minig.splits' (did you mean 'mining.splits'?)"),
        (["mining.max_atoms=three"], "setting 'mining.max_atoms' must be an integer, got 'three'"),
    ],
)
def test_unknown_settings_and_wrong_types_exit_2(config, settings, message, capsys):
    args = [a for s in settings for a in ("--set", s)]
    assert main(["mine", *conf_args(config), *args, "--no-tracking"]) == 2
    assert message in capsys.readouterr().err


def test_empty_dataset_and_unwritable_json_exit_2_before_any_work(config, tmp_path, capsys):
    assert main(["stats", *conf_args(config), "--dataset", "", "--no-tracking"]) == 2
    assert "--dataset is empty" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["stats", *conf_args(config), "--json", str(blocked / "x.json"), "--no-tracking"]) == 2
    assert "cannot write --json" in capsys.readouterr().err


def test_a_jvm_failure_names_the_file_and_cause_without_a_stack_trace(spark, config, tmp_path, capsys):
    """A truncated .gz input: the message names the file and the cause; the trace goes to a log file."""
    import gzip

    data = gzip.compress(("".join(f"Q{i}\tP1\tQ{i + 1}\n" for i in range(20000))).encode())
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(data[: len(data) // 2])
    args = ["ingest", *conf_args(config), "--format", "delimited", "--split", f"train={broken}"]
    assert main([*args, "--dataset", str(tmp_path / "ds"), "--no-tracking", "--json", str(tmp_path / "s.json")]) == 1
    err = capsys.readouterr().err
    message = next(line for line in err.splitlines() if line.startswith("kgbrink ingest: error:"))
    assert "broken.txt.gz" in message and "EOFException" in message, err
    assert "Traceback" not in err and "\tat " not in err and "Py4JJavaError" not in message
    trace = Path(err.split("(full trace: ")[1].split(")")[0])
    assert "Py4JJavaError" in trace.read_text()
    assert json.loads((tmp_path / "s.json").read_text())["status"] == "failed"


def test_a_driver_killed_by_the_os_says_so_in_one_line(config, tmp_path):
    """The driver JVM SIGKILLed under a running job, as the kernel's out-of-memory killer does: exit 1, one
    error line that says so and names the memory setting, no Python or py4j traceback on stderr."""
    import signal
    import subprocess
    import sys

    import psutil

    lines = "".join(f"Q{i}\tP{i % 7}\tQ{(i * 31) % 5000}\n" for i in range(50_000))
    (tmp_path / "kg.tsv").write_text(lines)
    command = [sys.executable, "-m", "kgbrink.cli", "ingest", *conf_args(config), "--format", "delimited"]
    command += ["--split", f"train={tmp_path / 'kg.tsv'}", "--dataset", str(tmp_path / "ds"), "--no-tracking"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    for line in process.stderr:  # the first progress line: the job runs on the JVM
        err.append(line)
        if line.startswith("[1/"):
            break
    java = [c for c in psutil.Process(process.pid).children(recursive=True) if "java" in c.name()]
    assert java, "".join(err)
    for child in java:
        child.send_signal(signal.SIGKILL)
    out, rest = process.communicate(timeout=120)
    err = "".join(err) + rest
    assert process.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("kgbrink ingest: error:")]
    assert len(errors) == 1 and "killed by SIGKILL" in errors[0] and "spark.driver.memory (now 4g)" in errors[0], err
    assert "Traceback" not in err and "py4j" not in err.lower(), err
    assert "incubator" not in err, err  # the JVM's notice at start (kgbrink.core.session.relay_stderr)


def test_the_jvms_standard_error_reaches_ours_without_the_incubator_notice(tmp_path):
    import io

    from kgbrink.core.session import relay_stderr

    lines = [b"WARNING: Using incubator modules: jdk.incubator.vector\n", b"Exception in thread main\n", b"x" * 70000]
    with open(tmp_path / "err", "wb") as target:
        relay_stderr(io.BytesIO(b"".join(lines)), target.fileno())
    assert (tmp_path / "err").read_bytes() == b"".join(lines[1:])


def test_a_file_on_object_storage_is_named_in_the_run_not_uploaded(config, tmp_path):
    from kgbrink.core.tracking import JobSummary, record_in_mlflow

    report = tmp_path / "report.md"
    report.write_text("# report\n")
    summary = JobSummary(job="release")
    summary.artifacts += [str(report), "s3a://bucket/releases/v1/README.md"]
    run_id = record_in_mlflow(config, summary)
    client = MlflowClient(tracking_uri=config.tracking.uri)
    assert [a.path for a in client.list_artifacts(run_id, "plots")] == ["plots/report.md"]
    logged = json.loads(Path(client.download_artifacts(run_id, "summary.json", str(tmp_path))).read_text())
    assert logged["artifacts"] == [str(report), "s3a://bucket/releases/v1/README.md"]


def test_usage_mistakes_fail_before_spark_starts(config, tmp_path, monkeypatch, capsys):
    """predict without a model, stats on a folder that holds no dataset: exit 2 and one line naming what to
    do, the Spark session never asked for (it would fail the test here)."""
    from kgbrink.core import session

    def no_spark(*args, **kwargs):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(session, "spark_session", no_spark)
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {
        ("predict", "--benchmark", "probekgc"): "error: ConfigError: no model: pass --model or set predict.model",
        ("predict", "--benchmark", "probekgc", "--model", "m", "--template", "nope@1"): "no built-in template",
        ("stats", "--dataset", str(empty)): f"{empty} holds no dataset (no triples table): make one with `kgbrink "
        f"ingest --format wikidata5m --input DUMP --dataset {empty}`, or `kgbrink run` for the sample",
    }
    for args, expected in cases.items():
        capsys.readouterr()
        assert main([*args, *conf_args(config), "--no-tracking"]) == 2
        assert expected in capsys.readouterr().err
