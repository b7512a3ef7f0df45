"""One SparkSession for the whole test run, built by the project's own factory from conf/test.yaml.

Every path the config names (data, warehouse, checkpoints, MLflow store) is redirected into one
temporary directory for the session, so tests never touch ./data and never see each other's tables
unless they share a fixture.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kgbrink.core.settings import Config, load_config

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _reference_dir() -> Path:
    """The shared reference data: $KGBRINK_REFERENCE, else ``shared/reference`` beside the project, else
    beside the checkout this clone was made from (a CI clone in a scratch directory of a local checkout)."""
    if "KGBRINK_REFERENCE" in os.environ:
        return Path(os.environ["KGBRINK_REFERENCE"])
    beside = PROJECT_ROOT.parent / "shared" / "reference"
    if beside.is_dir():
        return beside
    origin = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "remote", "get-url", "origin"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if origin and Path(origin).is_dir():
        return Path(origin).resolve().parent / "shared" / "reference"
    return beside


REFERENCE = _reference_dir()
PROBE_DATASETS = ("umls", "kinship", "family", "wn18rr")


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kgbrink")


@pytest.fixture(scope="session")
def config(work_dir: Path) -> Config:
    os.chdir(PROJECT_ROOT)
    return load_config(
        PROJECT_ROOT / "conf" / "test.yaml",
        [
            f"data_dir={work_dir}/data",
            f"dataset={work_dir}/data/datasets/sample",
            f"spark.warehouse_dir={work_dir}/warehouse",
            f"spark.checkpoint_dir={work_dir}/checkpoints",
            f"tracking.uri=sqlite:///{work_dir}/mlflow.db",
            f"tracking.artifact_location={work_dir}/mlflow-artifacts",
        ],
    )


@pytest.fixture(scope="session")
def spark(config: Config):
    from kgbrink.core.session import spark_session

    session = spark_session(config)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference data not found at {REFERENCE}: the shared/ folder must sit beside the project")
    return REFERENCE


@pytest.fixture(scope="session")
def probe_datasets(spark, config, reference, work_dir) -> dict[str, str]:
    """The four PROBE reference datasets ingested by kgbrink (ids from their entities/relations.dict)."""
    from kgbrink.jobs import ingest

    out = {}
    for name in PROBE_DATASETS:
        dataset = str(work_dir / "probe" / name)
        ingest.run(
            spark, config, ingest.IngestOptions(dataset=dataset, format="probe", input=str(reference / "probe" / name))
        )
        out[name] = dataset
    return out


@pytest.fixture(scope="session")
def family(spark, config, reference, work_dir):
    """BRINK Family ingested and mined with BRINK's thresholds (conf/test.yaml: max_atoms 3, minhc 0.1,
    minc 0.3, minpca 0.4): ``(dataset, mine summary, AMIE3 TSV of the rules)``. Mined once per session;
    the rule tests check it and the variant tests build on it."""
    from kgbrink.jobs import ingest, mine

    dataset = str(work_dir / "brink-family")
    ingest.run(
        spark,
        config,
        ingest.IngestOptions(
            dataset=dataset,
            format="delimited",
            splits={"train": [str(reference / "brink-family" / "facts.tsv")]},
            quote='"',
        ),
    )
    tsv = work_dir / "family-rules.tsv"
    summary = mine.run(spark, config, dataset, splits=["train"], tsv=str(tsv))
    return dataset, summary, tsv
