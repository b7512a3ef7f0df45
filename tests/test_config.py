from __future__ import annotations

import pytest

from kgbrink.core.settings import ConfigError, load_config, resolve_location
from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize("name", ["local", "test", "cluster"])
def test_shipped_configs_are_valid(name):
    config = load_config(PROJECT_ROOT / "conf" / f"{name}.yaml")
    assert config.get("env") == name
    assert 0 < config.get("ingest.max_bad_fraction") < 1


def test_cluster_config_points_at_object_storage_and_sizes_executors():
    config = load_config(PROJECT_ROOT / "conf" / "cluster.yaml")
    assert config.get("dataset").startswith("s3a://")
    assert config.get("spark.master") is None  # left to spark-submit
    assert int(config.get("spark.conf")["spark.executor.instances"]) > 1
    assert any("s3" in d for d in config.get("spark.jars_dirs"))


def test_overrides_parse_yaml_scalars_and_keep_spark_keys_whole():
    config = load_config(
        PROJECT_ROOT / "conf" / "local.yaml",
        ["ingest.max_bad_fraction=0.5", "spark.conf.spark.sql.shuffle.partitions=3"],
    )
    assert config.get("ingest.max_bad_fraction") == 0.5
    assert config.get("spark.conf")["spark.sql.shuffle.partitions"] == 3


def test_bad_settings_are_named(tmp_path):
    with pytest.raises(ConfigError, match="max_bad_fraction"):
        load_config(PROJECT_ROOT / "conf" / "local.yaml", ["ingest.max_bad_fraction=2"])
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("env: x\n")
    with pytest.raises(ConfigError, match="missing setting 'data_dir'"):
        load_config(broken)


def test_locations_resolve_relative_paths_but_keep_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_location("data/x") == str(tmp_path / "data" / "x")
    assert resolve_location("s3a://bucket/x") == "s3a://bucket/x"
