"""The CLI contract: subcommands, --json summaries, MLflow tracking of every run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from kgbrink.cli import build_parser, main
from tests.conftest import PROJECT_ROOT


def _conf_args(config) -> list[str]:
    return ["--conf", config.source] + [a for item in config.overrides for a in ("--set", item)]


def test_synth_ingest_stats_through_the_cli_are_tracked_in_mlflow(spark, config, tmp_path, capsys):
    kg, dataset = tmp_path / "kg", tmp_path / "ds"
    assert (
        main(
            [
                "synth",
                *_conf_args(config),
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
                *_conf_args(config),
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
    assert main(["stats", *_conf_args(config), "--dataset", str(dataset), "--json", str(tmp_path / "stats.json")]) == 0
    capsys.readouterr()
    ingest = json.loads((tmp_path / "ingest.json").read_text())
    manifest = json.loads((kg / "synth_manifest.json").read_text())
    assert ingest["status"] == "ok"
    assert ingest["counts"]["kept_per_split"] == manifest["splits"]
    assert ingest["outputs"]["triples"] == {"path": f"{dataset}/triples", "rows": 6000, "version": 0}
    assert {"spark_startup", "parse_and_count_lines", "encode_and_write_triples"} <= set(ingest["timings"])

    client = MlflowClient(tracking_uri=config.get("tracking.uri"))
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
    # jobs/<name>.py (jobs/run_pipeline.py for `run`) passes its arguments to that subcommand
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in sub.choices:
        entry = PROJECT_ROOT / "jobs" / ("run_pipeline.py" if command == "run" else command.replace("-", "_") + ".py")
        assert entry.is_file() and f'main(["{command}", *sys.argv[1:]])' in entry.read_text(), entry
