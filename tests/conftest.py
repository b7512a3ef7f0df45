"""One SparkSession for the whole test run, built by the project's own factory from conf/test.yaml.

Every path the config names (data, warehouse, checkpoints, MLflow store) is redirected into one
temporary directory for the session, so tests never touch ./data and never see each other's tables
unless they share a fixture.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from kgbrink.core.jobs import JobContext
from kgbrink.core.loader import load_config
from kgbrink.core.settings import Settings

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
def config(work_dir: Path) -> Settings:
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
            f"log_dir={work_dir}/logs",
        ],
    )


@pytest.fixture(scope="session")
def spark(config: Settings):
    from kgbrink.core.session import spark_session

    session = spark_session(config)
    yield session
    session.stop()


JOB_RUNS: list[tuple[str, int, int]] = []  # (job, persisted frames before, after) of every job run in-process


@pytest.fixture(scope="session", autouse=True)
def jobs_leave_no_persisted_frame():
    """Issue 72: every job the suite runs in this process, nested ones too, ends holding no more persisted
    frames than it began with (the JobContext releases what a job persisted): one left behind fails the
    test that ran the job, naming it. Jobs run in a release's threads (release.parallel) are checked as the
    release: the count is the whole session's."""
    import threading

    from kgbrink.core.session import cached_frames

    original = JobContext.run

    def checked(self, name, options=None, /, **values):
        if threading.current_thread() is not threading.main_thread():
            return original(self, name, options, **values)
        before = cached_frames(self.spark)
        summary = original(self, name, options, **values)
        after = cached_frames(self.spark)
        if before is not None and after is not None:
            JOB_RUNS.append((name, before, after))
            assert after <= before, f"job {name!r} left {after - before} persisted frame(s) behind"
        return summary

    JobContext.run = checked
    yield
    JobContext.run = original


@pytest.fixture(scope="session")
def reference() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference data not found at {REFERENCE}: the shared/ folder must sit beside the project")
    return REFERENCE


def _relocated(value, old: str, new: str):
    """``value`` with every path string or Path under ``old`` moved under ``new`` (tuples, lists, dicts,
    dataclasses such as a job summary, recursively)."""
    if isinstance(value, str):
        return new + value[len(old) :] if value.startswith(old) else value
    if isinstance(value, Path):
        return Path(_relocated(str(value), old, new))
    if isinstance(value, tuple | list):
        return type(value)(_relocated(v, old, new) for v in value)
    if isinstance(value, dict):
        return {k: _relocated(v, old, new) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _relocated(getattr(value, f.name), old, new) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value


def built_once(name: str, work_dir: Path, tmp_path_factory, make):
    """``make(directory)`` for a session fixture that writes everything under ``directory``.

    Alone, it runs in ``work_dir / name``. Under pytest-xdist the first worker that needs it builds it in
    a directory shared by the run's workers (under a file lock, so the others wait instead of building it
    again); every worker then gets its own copy under ``work_dir`` (tests write into these datasets, and
    two JVMs must never write one Delta table) and the value with its paths moved to that copy."""
    local = work_dir / name
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(local)
    root = tmp_path_factory.getbasetemp().parent / "shared"
    root.mkdir(exist_ok=True)
    built, done = root / name, root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(built, ignore_errors=True)
            done.write_bytes(pickle.dumps(make(built)))
        value = pickle.loads(done.read_bytes())
    shutil.copytree(built, local)
    return _relocated(value, str(built), str(local))


@pytest.fixture(scope="session")
def probe_datasets(spark, config, reference, work_dir, tmp_path_factory) -> dict[str, str]:
    """The four PROBE reference datasets ingested by kgbrink (ids from their entities/relations.dict)."""
    from kgbrink.jobs import ingest

    def make(root: Path) -> dict[str, str]:
        out = {}
        for name in PROBE_DATASETS:
            dataset = str(root / name)
            ingest.run(
                JobContext(spark, config),
                ingest.IngestOptions(dataset=dataset, format="probe", input=str(reference / "probe" / name)),
            )
            out[name] = dataset
        return out

    return built_once("probe", work_dir, tmp_path_factory, make)


@pytest.fixture(scope="session")
def family(spark, config, reference, work_dir, tmp_path_factory):
    """BRINK Family ingested and mined with BRINK's thresholds (conf/test.yaml: max_atoms 3, minhc 0.1,
    minc 0.3, minpca 0.4): ``(dataset, mine summary, AMIE3 TSV of the rules)``. Mined once per session;
    the rule tests check it and the variant tests build on it."""
    from kgbrink.jobs import ingest, mine

    def make(root: Path):
        dataset = str(root / "brink-family")
        ingest.run(
            JobContext(spark, config),
            ingest.IngestOptions(
                dataset=dataset,
                format="delimited",
                splits={"train": [str(reference / "brink-family" / "facts.tsv")]},
                quote='"',
            ),
        )
        tsv = root / "family-rules.tsv"
        summary = mine.run(JobContext(spark, config), mine.MineOptions(dataset=dataset, splits=["train"], tsv=str(tsv)))
        return dataset, summary, tsv

    return built_once("family", work_dir, tmp_path_factory, make)


@pytest.fixture(scope="session")
def synth_5000(config, work_dir, tmp_path_factory) -> Path:
    """``kgbrink synth --triples 5000`` (the config's seed) ingested through the command line, built once per
    run (CI time: tests/test_okgqa_sweep.py and tests/test_synthkgqa_paths.py each built this same dataset).
    Tests write into datasets: copy it with :func:`own_copy` first."""
    from kgbrink.cli import main

    def make(root: Path) -> Path:
        conf = ["--conf", config.source] + [a for item in config.overrides for a in ("--set", item)]
        assert main(["synth", *conf, "--out", str(root / "kg"), "--triples", "5000"]) == 0
        assert main(["ingest", *conf, "--input", str(root / "kg"), "--dataset", str(root / "ds")]) == 0
        return root / "ds"

    return built_once("synth-5000", work_dir, tmp_path_factory, make)


def conf_args(config: Settings) -> list[str]:
    """The command-line arguments that load ``config`` again: its file and its overrides."""
    return ["--conf", config.source, *[a for item in config.overrides for a in ("--set", item)]]


def own_copy(dataset: Path, tmp_path_factory, name: str) -> tuple[Path, Path]:
    """A copy of ``dataset`` of the caller's own: ``(dataset, its new base folder)``."""
    base = tmp_path_factory.mktemp(name)
    shutil.copytree(dataset, base / "ds")
    return base / "ds", base


# Tests over ~10 s on 2 cores (pytest --durations): `make test-fast` (-m "not slow and not reference") skips
# them and every test that reads ../shared/reference; CI runs everything.
SLOW = {
    "test_killed_score_run_resumes_without_redoing_or_double_counting",
    "test_four_atom_rules_equal_the_brute_force_miner",
    "test_stats_job_uses_only_the_chosen_splits",
    "test_synth_ingest_stats_through_the_cli_are_tracked_in_mlflow",
    "test_stats_notebook_executes",
    "test_maximal_selection_is_conflict_free_maximal_and_partition_independent",
    "test_answers_are_completed_in_the_question_direction",
    "test_spark_submit_in_client_mode_with_the_jars_as_the_readme_says",
    "test_score_job_on_keys_with_quarantine",
    "test_three_atom_body_supports_in_buckets_and_start_groups_equal_naive_joins",
    "test_output_is_identical_whatever_the_partitioning",
    "test_cli_score_contract",
    "test_accounting_and_exact_line_numbers_across_blocks_and_gzip",
    "test_rank_job_turns_candidate_scores_into_a_rank_file",
    "test_bucketed_supports_equal_one_pass",
    "test_refresh_keeps_known_ids_and_appends_new_keys",
    "test_ingest_and_stats_through_a_hadoop_uri_that_is_not_local",
    "test_grounding_samples_are_the_smallest_hashes_and_partition_independent",
    "test_score_job_on_parquet_with_and_without_footer_facts",
    "test_question_records_downsampling_and_private_ids_ignore_partitioning",
    "test_generated_dirty_kg_is_accounted_for_exactly",
    "test_local_and_batched_equal_networkx_on_random_multigraphs",
    "test_batched_is_partition_independent_and_flags_non_convergence",
    "test_edge_ball_equals_a_python_bfs_on_random_multigraphs",
    "test_sweep_through_the_cli_writes_tables_report_and_mlflow_run",
    "test_paper_shapes_on_the_whole_kg",
    "test_subgraphs_equal_the_networkx_oracle_on_random_kgs",
    "test_distributed_by_hand_is_partition_independent",
    "test_random_multigraphs_against_networkx",
    "test_whole_kg_scope_equals_one_scope_and_ignores_partitioning",
    "test_exact_counts_nested_levels_and_invariants",
    "test_cli_builds_questions_with_mcq_and_scores_them",
    "test_cli_contract_on_a_hand_table",
    "test_probekgc_wn_statistics_through_the_cli",
    "test_identical_questions_whatever_the_partitioning",
    "test_hand_written_kg_gives_the_hand_computed_options",
    "test_hub_build_drops_hubs_then_downsamples_as_worked_out_by_hand",
}
REFERENCE_FIXTURES = {"reference", "probe_datasets", "family", "family_build", "family_kg"}


# The files with the most test time (junit XML of `make test`, 2026-12-06), longest first. `make test` runs
# `--dist loadfile --no-loadscope-reorder`: its two workers take files in this order, so they start on the
# long files and end on short ones instead of one worker finishing a long file alone.
LONGEST_FIRST = (
    "test_release.py",
    "test_refresh.py",
    "test_okgqa_perturb.py",
    "test_scoring.py",
    "test_mining.py",
    "test_predict_okgqa.py",
    "test_predict.py",
    "test_variant.py",
    "test_mcq_build.py",
    "test_ingest.py",
    "test_okgqa_sweep.py",
    "test_cli.py",
    "test_synthkgqa_seeds.py",
    "test_synthkgqa_questions.py",
    "test_synthkgqa_generator.py",
    "test_synthkgqa_paths.py",
    "test_mcq_scoring.py",
    "test_predict_synthkgqa.py",
)

# `make test-fast` (-m fast, about 3 minutes): every test that uses no Spark session fixture and is not slow,
# and one Spark path per package (the quickest that runs one of its jobs or transformations end to end).
FAST_SPARK = {
    "test_positions_follow_the_order_from_start",  # core.frames
    "test_wikidata5m_lines_classify_by_first_failing_check",  # kg (ingest parsing)
    "test_entity_popularity_reuses_the_counts_partitioning",  # probe (statistics)
    "test_release_eps_falls_back_to_one_when_every_delta_is_zero",  # probe (scoring)
    "test_reference_mode_drops_every_head_found_in_any_sampled_body",  # brink (removal)
    "test_xxhash_equals_spark",  # graph
    "test_appendix_a4_nkd_values",  # mcq
    "test_first_step_matches_the_softmax_of_appendix_a5",  # synthkgqa
    "test_each_wrong_type_has_its_own_reason",  # okgqa
    "test_rs_swap_that_would_merge_two_triples_is_not_made",  # okgqa (perturbation)
    "test_messages_and_keys_built_by_spark_equal_pythons",  # evaluation, llm
    "test_an_id_without_a_key_fails_naming_the_column",  # release
}
SPARK_FIXTURES = {"spark", "config"}


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests stay together
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.originalname in SLOW:
            item.add_marker(pytest.mark.slow)
        if REFERENCE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.reference)
        if item.originalname in FAST_SPARK or not (SPARK_FIXTURES & fixtures or item.originalname in SLOW):
            item.add_marker(pytest.mark.fast)
