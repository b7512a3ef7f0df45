from __future__ import annotations

import json
import re

import pytest

from kgbrink.core.loader import load_config
from kgbrink.core.locations import resolve_location
from kgbrink.core.typed import ConfigError
from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize("name", ["local", "test", "cluster", "cluster-local"])
def test_shipped_configs_are_valid(name):
    config = load_config(PROJECT_ROOT / "conf" / f"{name}.yaml")
    assert config.env == name
    assert 0 < config.ingest.max_bad_fraction < 1


def test_cluster_config_points_at_object_storage_and_sizes_executors():
    config = load_config(PROJECT_ROOT / "conf" / "cluster.yaml")
    assert config.dataset.startswith("s3a://")
    assert config.spark.master is None  # left to spark-submit
    assert int(config.spark.conf["spark.executor.instances"]) > 1
    assert any("s3" in d for d in config.spark.jars_dirs)


def test_overrides_parse_yaml_scalars_and_keep_spark_keys_whole():
    config = load_config(
        PROJECT_ROOT / "conf" / "local.yaml",
        ["ingest.max_bad_fraction=0.5", "spark.conf.spark.sql.shuffle.partitions=3"],
    )
    assert config.ingest.max_bad_fraction == 0.5
    assert config.spark.conf["spark.sql.shuffle.partitions"] == 3


def test_bad_settings_are_named(tmp_path):
    with pytest.raises(ConfigError, match="max_bad_fraction"):
        load_config(PROJECT_ROOT / "conf" / "local.yaml", ["ingest.max_bad_fraction=2"])
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("env: x\ndata_dri: ./d\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'data_dri' \(did you mean 'data_dir'\?\)"):
        load_config(broken)


def test_locations_resolve_relative_paths_but_keep_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_location("data/x") == str(tmp_path / "data" / "x")
    assert resolve_location("s3a://bucket/x") == "s3a://bucket/x"


def test_set_parses_by_the_declared_type():
    conf = PROJECT_ROOT / "conf" / "local.yaml"
    bare, listed = (load_config(conf, [f"mining.splits={v}"]) for v in ("train", "[train]"))
    assert bare.mining.splits == listed.mining.splits == ["train"]
    assert load_config(conf, ["mining.splits=[train, valid]"]).mining.splits == ["train", "valid"]
    assert load_config(conf, ["mining.splits=null"]).mining.splits is None
    typed = load_config(
        conf, ["ingest.max_bad_fraction=1e-2", "mining.max_atoms=4", "stats.broadcast_entity_degrees=false"]
    )
    assert typed.ingest.max_bad_fraction == 0.01 and typed.mining.max_atoms == 4
    assert typed.stats.broadcast_entity_degrees is False
    assert load_config(conf, ["variant.name=007"]).variant.name == "007"  # a name stays as written
    assert load_config(conf, ["scoring.alphas=1"]).scoring.alphas == [1.0]
    assert load_config(conf, ["variant.max_answers=null"]).variant.max_answers is None


@pytest.mark.parametrize(
    "item, message",
    [
        ("mining.split=train", r"unknown setting 'mining.split' \(did you mean 'mining.splits'\?\)"),
        ("minig.splits=train", r"unknown setting 'minig.splits' \(did you mean 'mining.splits'\?\)"),
        ("mining.max_atoms=three", r"setting 'mining.max_atoms' must be an integer, got 'three'"),
        ("ingest.max_bad_fraction=lots", r"setting 'ingest.max_bad_fraction' must be a number, got 'lots'"),
        ("stats.broadcast_entity_degrees=maybe", r"'stats.broadcast_entity_degrees' must be true or false"),
        ("scoring.hits=[1, x]", r"'scoring.hits' must be a list of integers, got \[1, 'x'\]"),
        ("variant.tau=0", r"variant.tau must be in \(0, 1\], got 0.0"),
        ("variant.tau=1.5", r"variant.tau must be in \(0, 1\]"),
        ("variant.max_answers=0", r"variant.max_answers must be >= 1 or null, got 0"),
        ("variant.question_unit=query", r"variant.question_unit must be removed_triple or grounding"),
    ],
)
def test_unknown_keys_and_wrong_types_are_named(item, message):
    with pytest.raises(ConfigError, match=message):
        load_config(PROJECT_ROOT / "conf" / "local.yaml", [item])


@pytest.mark.parametrize("name", ["local", "test", "cluster", "cluster-local"])
def test_environment_files_hold_only_what_differs(name):
    """Every setting an environment file names differs from the declared default (defaults live once);
    ``env`` names the file's environment."""
    import yaml

    from kgbrink.core.loader import _build

    defaults = _build({}, "<defaults>", []).as_dict()
    values = yaml.safe_load((PROJECT_ROOT / "conf" / f"{name}.yaml").read_text())
    same = []
    for key, value in values.items():
        if key == "env":
            continue
        for sub, item in value.items() if isinstance(value, dict) else [(None, value)]:
            default = defaults[key] if sub is None else defaults[key][sub]
            if sub == "conf":
                # the driver heap's default depends on the machine: a file's may equal it on one
                same += [
                    f"spark.conf.{k}"
                    for k, v in item.items()
                    if default.get(k, "<unset>") == v and k != "spark.driver.memory"
                ]
            elif item == default or (isinstance(item, str) and resolve_location(item) == default):
                same.append(key if sub is None else f"{key}.{sub}")
    assert same == []


def test_overrides_keep_the_spark_keys_a_file_removes():
    cluster = load_config(PROJECT_ROOT / "conf" / "cluster.yaml")
    again = load_config(PROJECT_ROOT / "conf" / "cluster.yaml", ["variant.tau=0.1"])
    assert "spark.driver.memory" not in cluster.spark.conf and "spark.ui.enabled" not in cluster.spark.conf
    assert again.spark.conf == cluster.spark.conf
    assert again.with_overrides(["mining.max_atoms=4"]).spark.conf == cluster.spark.conf


def test_empty_paths_and_comma_lists():
    conf = PROJECT_ROOT / "conf" / "local.yaml"
    for key in ("dataset", "data_dir", "log_dir", "spark.warehouse_dir"):
        with pytest.raises(ConfigError, match=f"setting '{key}' is an empty path"):
            load_config(conf, [f"{key}="])
    assert load_config(conf, ["stats.splits=train,valid"]).stats.splits == ["train", "valid"]
    assert load_config(conf, ["scoring.hits=1,5"]).scoring.hits == [1, 5]


def test_kgbrink_runs_from_any_folder_with_the_installation_jars(tmp_path, monkeypatch):
    """From a data folder without conf/ or .cache/: the installation's conf/local.yaml, its jars, and the
    data paths under the working directory (issue 47, point 5); $KGBRINK_HOME names another installation."""
    from kgbrink.core.session import find_jars, has_jar

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KGBRINK_CONF", raising=False)
    monkeypatch.delenv("KGBRINK_HOME", raising=False)
    config = load_config()
    assert config.spark.jars_dirs == [
        str(PROJECT_ROOT / ".cache/jars/core"),
        str(PROJECT_ROOT / ".cache/jars/graphframes"),
    ]
    assert has_jar(find_jars(config.spark.jars_dirs), "delta-spark_")
    assert config.dataset == str(tmp_path / "data/datasets/sample")
    monkeypatch.setenv("KGBRINK_HOME", str(tmp_path / "elsewhere"))
    moved = load_config(PROJECT_ROOT / "conf" / "local.yaml")
    assert moved.spark.jars_dirs[0] == str(tmp_path / "elsewhere/.cache/jars/core")
    with pytest.raises(ConfigError, match="run `make jars` in kgbrink's installation"):
        from kgbrink.core.session import spark_session

        spark_session(moved)


def test_the_driver_memory_comes_from_the_environment_over_every_file_and_set_wins(monkeypatch, capsys):
    from kgbrink.cli import main

    test_yaml = PROJECT_ROOT / "conf" / "test.yaml"  # its own 4g
    monkeypatch.setenv("KGBRINK_DRIVER_MEMORY", " 6g ")
    assert load_config(test_yaml).spark.conf["spark.driver.memory"] == "6g"
    assert load_config(PROJECT_ROOT / "conf" / "local.yaml").spark.conf["spark.driver.memory"] == "6g"
    overridden = load_config(test_yaml, ["spark.conf.spark.driver.memory=3g"])
    assert overridden.spark.conf["spark.driver.memory"] == "3g"
    for bad in ("lots", "6 g", "0g", "-1g", ""):
        monkeypatch.setenv("KGBRINK_DRIVER_MEMORY", bad)
        with pytest.raises(ConfigError, match=r"\$KGBRINK_DRIVER_MEMORY=.* is not a JVM memory size"):
            load_config(test_yaml)
    assert main(["stats", "--conf", str(test_yaml), "--dataset", "x", "--no-tracking"]) == 2
    assert "$KGBRINK_DRIVER_MEMORY='' is not a JVM memory size" in capsys.readouterr().err
    monkeypatch.delenv("KGBRINK_DRIVER_MEMORY")
    assert load_config(test_yaml).spark.conf["spark.driver.memory"] == "4g"


@pytest.mark.parametrize(
    "section, values, message",
    [
        ("spark", {"checkpoint": "disk"}, "spark.checkpoint must be local or reliable, got 'disk'"),
        ("ingest", {"max_bad_fraction": -0.1}, r"ingest.max_bad_fraction must be a number in \[0, 1\]"),
        ("stats", {"splits": []}, "stats.splits must be a non-empty list of split names"),
        ("scoring", {"batch_bytes": 0}, "scoring.batch_bytes must be a positive integer"),
        ("mining", {"splits": [" "]}, "mining.splits must be a non-empty list of split names"),
        ("okgqa_subgraph", {"alpha": 1.0}, r"okgqa_subgraph.alpha must be in \(0, 1\)"),
        ("perturbation", {"methods": ["XX"]}, "perturbation.methods: unknown method 'XX'"),
        ("mcq", {"options": 27}, r"mcq.options must be in 2..26, got 27"),
        ("mcq_scoring", {"max_bad_fraction": 2.0}, r"mcq_scoring.max_bad_fraction must be a number in \[0, 1\]"),
        ("predict", {"safe_search": "web"}, "predict.safe_search must be kg or module:function, got 'web'"),
        ("release", {"parallel": 0}, "release.parallel must be at least 1, got 0"),
    ],
)
def test_each_section_checks_itself_when_made_and_the_loader_names_the_file(section, values, message):
    """A section made in code is checked as one read from a file (its __post_init__); the loader's error
    also names the file the values came from."""
    from kgbrink.core.settings import SECTIONS

    with pytest.raises(ConfigError, match=message):
        SECTIONS[section](**values)
    conf = PROJECT_ROOT / "conf" / "local.yaml"
    sets = [f"{section}.{key}={v if isinstance(v, str) else json.dumps(v)}" for key, v in values.items()]
    with pytest.raises(ConfigError, match=f"^{re.escape(str(conf))}: {message}"):
        load_config(conf, sets)
    assert SECTIONS[section]() is not None  # the defaults pass their own checks
