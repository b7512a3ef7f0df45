"""The Airflow DAG infra/airflow/kgbrink_refresh_dag.py (make test-airflow, in the Airflow venv): loaded by
Airflow's DagBag without import errors; its tasks, their chain, retries and schedule; the bash commands
rendered with the DAG's own Jinja environment (settings from a run's config, an Airflow Variable or the
defaults; shell-quoted) name the right entry points and options; each command run against stub
spark-submit / kgbrink executables prints its job's JSON summary as its last line (the XCom); and the
short-circuit stops release and score after a no-op refresh."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.models import DagBag

from tests.scheduling import PROJECT_ROOT, job_options, literal_secrets, options_given, stub_calls, stub_project

DAG_DIR = PROJECT_ROOT / "infra/airflow"
DAG_ID = "kgbrink_refresh"
CHAIN = {
    "stage": {"refresh"},
    "refresh": {"changed"},
    "changed": {"release", "score"},
    "release": set(),
    "score": set(),
}
# task -> (executable, job): the spark-submit entry point jobs/<job>.py, or the kgbrink subcommand
JOBS = {
    "stage": (".venv/bin/kgbrink", "stage"),
    "refresh": (".venv/bin/spark-submit", "refresh"),
    "release": (".venv/bin/spark-submit", "release"),
    "score": (".venv/bin/spark-submit", "score"),
}


@pytest.fixture(scope="module")
def dagbag():
    # Airflow 3.3's DagBag has no include_examples (the examples are a DAG bundle of their own, off here by
    # AIRFLOW__CORE__LOAD_EXAMPLES, tests/airflow/conftest.py); Airflow 2 and 3.0-3.2 take it.
    examples = {"include_examples": False} if "include_examples" in inspect.signature(DagBag).parameters else {}
    return DagBag(dag_folder=str(DAG_DIR), **examples)


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags[DAG_ID]  # not get_dag(): that asks the metadata database


class Variables:
    """``var.value`` of a template context, from a dict instead of Airflow's store."""

    def __init__(self, values: dict[str, str]):
        self.values = values

    def get(self, name, default=None):
        return self.values.get(name, default)


def render(dag, task_id: str, conf: dict | None = None, variables: dict | None = None) -> str:
    """The task's bash command as Airflow renders it for a run with ``conf`` and these Variables."""
    task = dag.get_task(task_id)
    params = {name: dag.params[name] for name in dag.params}
    params.update(conf or {})  # a run's config overrides the params (Airflow's dag_run_conf_overrides_params)
    context = {
        "params": params,
        "dag_run": SimpleNamespace(conf=conf or {}),
        "var": SimpleNamespace(value=Variables(variables or {})),
    }
    return task.render_template(task.bash_command, context, task.get_template_env())


def invocation(script: str, executable: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith(executable + " ")]
    return shlex.split(line)


def job_argv(dag, task_id: str, **kwargs) -> tuple[list[str], list[str]]:
    """(spark-submit's or kgbrink's own arguments, the job's arguments) of a task's rendered command."""
    executable, job = JOBS[task_id]
    argv = invocation(render(dag, task_id, **kwargs), executable)
    assert argv[-1] == ">&2"  # the job's human summary goes to the log, not to the XCom
    argv = argv[:-1]
    if executable.endswith("kgbrink"):
        assert argv[1] == job
        return argv[:2], argv[2:]
    (entry,) = [i for i, word in enumerate(argv) if word.startswith("jobs/")]
    assert argv[entry] == f"jobs/{job}.py" and (PROJECT_ROOT / argv[entry]).is_file()
    return argv[: entry + 1], argv[entry + 1 :]


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_dagbag_loads_the_dag_without_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == [DAG_ID]


def test_tasks_and_chain(dag):
    assert {t.task_id: set(t.downstream_task_ids) for t in dag.tasks} == CHAIN
    assert type(dag.get_task("changed")).__name__ == "ShortCircuitOperator"
    for task_id in JOBS:
        assert type(dag.get_task(task_id)).__name__ == "BashOperator"


def test_schedule_retries_and_runs(dag):
    assert dag.schedule == "0 3 * * 1"
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    for task in dag.tasks:
        assert task.retries == 2, task.task_id
        assert task.retry_delay == timedelta(minutes=10)
        assert task.retry_exponential_backoff
        assert task.do_xcom_push


def test_commands_name_the_entry_points_and_their_options(dag):
    for task_id, (_, job) in JOBS.items():
        submit, args = job_argv(dag, task_id)
        unknown = set(options_given(args)) - job_options(job)
        assert not unknown, f"{task_id}: options kgbrink {job} does not take: {unknown}"
        assert option(args, "--conf") == "conf/cluster.yaml"
        assert option(args, "--json") == "$summary"
        if submit[0].endswith("spark-submit"):
            assert option(submit, "--master") == "yarn"
            assert option(submit, "--deploy-mode") == "client"
            assert option(submit, "--py-files") == "kgbrink.zip"
            assert option(submit, "--jars") == "$JARS"
    dataset = "s3a://my-kg-bucket/kgbrink/datasets/wikidata5m"
    _, stage = job_argv(dag, "stage")
    assert option(stage, "--to") == "s3a://my-kg-bucket/kgbrink/dumps/wikidata5m"
    _, refresh = job_argv(dag, "refresh")
    assert option(refresh, "--input") == "s3a://my-kg-bucket/kgbrink/dumps/wikidata5m/"
    assert option(refresh, "--dataset") == dataset and option(refresh, "--format") == "wikidata5m"
    assert "--no-rebuild" in refresh  # the variant (in the release) and score are this DAG's own tasks
    _, release = job_argv(dag, "release")
    assert option(release, "--dataset") == dataset
    assert option(release, "--out") == "s3a://my-kg-bucket/kgbrink/releases/wikidata5m"
    _, score = job_argv(dag, "score")
    assert option(score, "--ranks") == "s3a://my-kg-bucket/kgbrink/ranks/"


def test_settings_come_from_the_run_then_a_variable_then_the_default(dag):
    _, args = job_argv(dag, "refresh", variables={"kgbrink_dataset": "s3a://b/var", "kgbrink_conf": "conf/x.yaml"})
    assert option(args, "--dataset") == "s3a://b/var" and option(args, "--conf") == "conf/x.yaml"
    _, args = job_argv(
        dag,
        "refresh",
        conf={"dataset": "s3a://b/run", "dump_uri": "s3a://b/d//"},
        variables={"kgbrink_dataset": "s3a://b/var"},
    )
    assert option(args, "--dataset") == "s3a://b/run"
    assert option(args, "--input") == "s3a://b/d/"
    submit, _ = job_argv(dag, "score", variables={"kgbrink_master": "k8s://https://k8s.example:443"})
    assert option(submit, "--master") == "k8s://https://k8s.example:443"


def test_settings_are_shell_quoted(dag):
    hostile = "s3a://b/x; touch /tmp/pwned $(id)"
    _, args = job_argv(dag, "release", conf={"dataset": hostile})
    assert option(args, "--dataset") == hostile


def test_rendered_commands_are_valid_bash_without_credentials(dag):
    for task_id in JOBS:
        script = render(dag, task_id)
        subprocess.run(["bash", "-n", "-c", script], check=True)
        assert literal_secrets(script) == []
    assert literal_secrets((DAG_DIR / "kgbrink_refresh_dag.py").read_text()) == []


@pytest.fixture
def project(tmp_path):
    return stub_project(tmp_path, sys.executable)


def run_task(dag, task_id: str, project: Path) -> str:
    script = render(dag, task_id, conf={"project_dir": str(project)})
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**os.environ}, check=False)
    assert result.returncode == 0, result.stderr
    assert "human summary on stdout" in result.stderr
    return result.stdout.splitlines()[-1]


def test_each_task_prints_its_json_summary_as_its_xcom(dag, project):
    for task_id, (_, job) in JOBS.items():
        xcom = run_task(dag, task_id, project)
        assert json.loads(xcom)["job"] == job
    calls = stub_calls(project)
    assert [call[0] if call[0] == "stage" else next(a for a in call if a.startswith("jobs/")) for call in calls] == [
        "stage",
        "jobs/refresh.py",
        "jobs/release.py",
        "jobs/score.py",
    ]
    # the jars spark-submit gets: those there are (here no GraphFrames), comma-separated
    assert option(calls[1], "--jars") == ".cache/jars/core/delta-spark.jar,.cache/jars/s3/hadoop-aws.jar"


class TaskInstance:
    """``ti`` of a callable's context: xcom_pull returns the refresh task's XCom."""

    def __init__(self, value):
        self.value = value

    def xcom_pull(self, task_ids):
        assert task_ids == "refresh"
        return self.value


def refresh_summary(changed: bool, actions: list[str], status: str = "ok") -> str:
    downstream = [{"kind": "variant", "name": f"v{i}", "action": a, "reason": "..."} for i, a in enumerate(actions)]
    return json.dumps({"job": "refresh", "status": status, "changed": changed, "downstream": downstream})


def test_short_circuit_after_a_no_op_refresh(dag, project):
    go_on = dag.get_task("changed").python_callable
    assert go_on(ti=TaskInstance(refresh_summary(False, ["skip", "skip"]))) is False
    assert go_on(ti=TaskInstance(refresh_summary(False, []))) is False
    assert go_on(ti=TaskInstance(refresh_summary(True, ["stale", "skip"]))) is True
    assert go_on(ti=TaskInstance(refresh_summary(True, []))) is True
    # nothing merged, but a variant an earlier run left stale: release and score again
    assert go_on(ti=TaskInstance(refresh_summary(False, ["stale"]))) is True
    # the XCom as the refresh task pushes it: the stub's no-op refresh
    assert go_on(ti=TaskInstance(run_task(dag, "refresh", project))) is False
    with pytest.raises(ValueError, match="failed"):
        go_on(ti=TaskInstance(refresh_summary(True, [], status="failed")))


def test_short_circuit_skips_everything_after_it(dag):
    task = dag.get_task("changed")
    assert task.ignore_downstream_trigger_rules is True
    assert {t.task_id for t in task.get_flat_relatives(upstream=False)} == {"release", "score"}


@pytest.fixture(scope="module")
def metadata_db():
    """Airflow's metadata database (SQLite, tests/airflow/conftest.py), for dag.test()."""
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)


def states(run) -> dict[str, str]:
    return {
        ti.task_id: str(ti.state.value if hasattr(ti.state, "value") else ti.state) for ti in run.get_task_instances()
    }


def test_dag_runs_in_airflow_and_skips_release_and_score_after_a_no_op_refresh(dag, project, metadata_db, monkeypatch):
    """A whole run by Airflow itself (dag.test(): its task runner, templates, XCom, skips) against the stubs."""
    monkeypatch.delenv("KGBRINK_STUB_CHANGED", raising=False)
    run = dag.test(run_conf={"project_dir": str(project)})
    assert str(run.state) in ("success", "DagRunState.SUCCESS")
    assert states(run) == {
        "stage": "success",
        "refresh": "success",
        "changed": "success",
        "release": "skipped",
        "score": "skipped",
    }
    assert [call[0] if call[0] == "stage" else call[call.index("--py-files") + 2] for call in stub_calls(project)] == [
        "stage",
        "jobs/refresh.py",
    ]


def test_dag_runs_in_airflow_through_release_and_score_after_a_change(dag, project, metadata_db, monkeypatch):
    from airflow.models import Variable

    monkeypatch.setenv("KGBRINK_STUB_CHANGED", "1")
    Variable.set("kgbrink_release", "s3a://b/releases/weekly")
    try:
        run = dag.test(run_conf={"project_dir": str(project)})
    finally:
        Variable.delete("kgbrink_release")
    assert set(states(run).values()) == {"success"}
    calls = stub_calls(project)
    release = next(call for call in calls if "jobs/release.py" in call)
    assert option(release, "--out") == "s3a://b/releases/weekly"  # from the Airflow Variable
    assert len(calls) == len(JOBS)
