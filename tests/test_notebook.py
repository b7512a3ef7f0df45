"""The exploration notebook runs headless on a real dataset, so it cannot rot."""

from __future__ import annotations

import nbformat
import yaml
from nbclient import NotebookClient

from kgbrink.core.jobs import JobContext
from kgbrink.jobs import stats
from tests.conftest import PROJECT_ROOT


def test_stats_notebook_executes(spark, config, probe_datasets, tmp_path, monkeypatch):
    dataset = probe_datasets["family"]
    stats.run(JobContext(spark, config), stats.StatsOptions(dataset=dataset, splits=["train"]))
    # The notebook builds its own session from a config file: this run's test config, overrides applied.
    conf = tmp_path / "notebook.yaml"
    conf.write_text(yaml.safe_dump(config.as_dict()))
    monkeypatch.setenv("KGBRINK_CONF", str(conf))
    monkeypatch.setenv("KGBRINK_DATASET", dataset)
    monkeypatch.setenv("KGBRINK_FIGURES", str(tmp_path / "figures"))
    notebook = nbformat.read(PROJECT_ROOT / "notebooks" / "stats_exploration.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(PROJECT_ROOT)}}
    ).execute()
    assert (tmp_path / "figures" / "degree_distribution.png").stat().st_size > 0
    assert (tmp_path / "figures" / "popularity_lines.png").stat().st_size > 0
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "2992 entities" in outputs  # family's train.txt touches 2,992 of its 3,007 entities
    assert "\nok " in outputs or outputs.startswith("ok ")
