"""kgbrink's scheduled refresh as an Apache Airflow DAG: stage -> refresh -> release + score.

- ``stage``: ``kgbrink stage`` uploads the local dump directory to the bucket (checksums, a manifest);
- ``refresh``: ``jobs/refresh.py --no-rebuild`` merges the staged dump into the dataset by Delta MERGE and
  recomputes the statistics; the variants and score runs it finds stale are left to the next tasks;
- ``changed``: short-circuits the rest when the refresh was a no-op (``"changed": false``, nothing stale);
- ``release``: ``jobs/release.py`` builds the benchmarks whose inputs changed (the BRINK variant among
  them) into the next version of the release on the bucket, with its manifest (``kgbrink fetch --from``
  the release root downloads it checked);
- ``score``: ``jobs/score.py`` scores the rank files again on the new tables.

The Spark jobs run by spark-submit in client mode on this worker, from a kgbrink checkout that has its
virtualenv, ``.cache/jars`` (``make jars JAR_PROFILES=s3``) and ``kgbrink.zip`` (docs/scheduling.md). Every
task writes its job's ``--json`` summary and prints it as its last line, so it is the task's XCom
``return_value``. A failed task is retried: a refresh, release or score that is run again resumes or
starts its version again (nothing is published twice).

Settings: each of ``DEFAULTS`` is taken from the run's config ("Trigger DAG w/ config"), else the Airflow
Variable ``kgbrink_<name>``, else the default here. Nothing here is a credential: the S3 keys (and any
MLflow token) come from the worker's environment, as for every kgbrink job.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG, Param

DEFAULTS = {
    "project_dir": "/opt/kgbrink",  # the checkout: jobs/, kgbrink.zip, .venv, .cache/jars
    "conf": "conf/cluster.yaml",  # settings file, relative to project_dir
    "master": "yarn",  # spark-submit --master: yarn, k8s://https://HOST:PORT, spark://HOST:7077
    "driver_memory": "8g",
    "dump_dir": "/data/dumps/wikidata5m",  # the new dump, a local directory on this worker
    "dump_uri": "s3a://my-kg-bucket/kgbrink/dumps/wikidata5m",  # where stage puts it and refresh reads it
    "format": "wikidata5m",
    "dataset": "s3a://my-kg-bucket/kgbrink/datasets/wikidata5m",
    "release": "s3a://my-kg-bucket/kgbrink/releases/wikidata5m",  # the release root: v1, v2, ..., LATEST
    "ranks": "s3a://my-kg-bucket/kgbrink/ranks/",  # the rank files score reads
}


def setting(name: str, prefix: bool = False) -> str:
    """Jinja for one setting, shell-quoted: the run's config, else Variable ``kgbrink_<name>``, else the param
    (``prefix``: as a directory prefix, ending in one ``/``)."""
    value = f"((dag_run.conf or {{}}).get('{name}') or var.value.get('kgbrink_{name}', params.{name}))"
    if prefix:
        value = f"({value}.rstrip('/') ~ '/')"
    return f"{{{{ {value} | sh }}}}"


# Every task: cd to the checkout, a temporary JSON summary, the job's own output on stderr (the task log),
# the summary as the last line of stdout (the XCom).
PROLOGUE = f"""set -euo pipefail
cd {setting("project_dir")}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
"""
EPILOGUE = '\n.venv/bin/python -m json.tool --compact "$summary"\n'
JARS = "JARS=$(ls .cache/jars/{core,graphframes,s3}/*.jar 2>/dev/null | paste -sd, || true)\n"


def kgbrink(job: str, options: str) -> str:
    """The bash command of a task running ``kgbrink <job>`` (no Spark)."""
    return f'{PROLOGUE}.venv/bin/kgbrink {job} --conf {setting("conf")} --json "$summary" {options} >&2{EPILOGUE}'


def spark_submit(job: str, options: str) -> str:
    """The bash command of a task running ``jobs/<job>.py`` by spark-submit in client mode."""
    submit = (
        f".venv/bin/spark-submit --master {setting('master')} --deploy-mode client"
        f' --driver-memory {setting("driver_memory")} --jars "$JARS" --py-files kgbrink.zip'
    )
    return f'{PROLOGUE}{JARS}{submit} jobs/{job}.py --conf {setting("conf")} --json "$summary" {options} >&2{EPILOGUE}'


def refresh_changed(ti) -> bool:
    """Go on to release and score when the refresh changed the dataset or found the variant or a score run
    stale (a rebuild an earlier run began); a no-op refresh short-circuits them."""
    summary = ti.xcom_pull(task_ids="refresh")
    summary = json.loads(summary) if isinstance(summary, str) else summary
    if summary.get("status", "ok") != "ok":
        raise ValueError(f"the refresh summary says {summary.get('status')!r}: {summary.get('error')}")
    stale = [d for d in summary.get("downstream", []) if d.get("action") == "stale"]
    return bool(summary["changed"] or stale)


with DAG(
    dag_id="kgbrink_refresh",
    description="kgbrink: stage a new dump, refresh the dataset by Delta MERGE, release the benchmarks, score again",
    schedule="0 3 * * 1",  # Mondays 03:00 UTC
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={
        "retries": 2,
        "retry_delay": timedelta(minutes=10),
        "retry_exponential_backoff": True,
        "execution_timeout": timedelta(hours=12),
    },
    params={name: Param(value, type="string") for name, value in DEFAULTS.items()},
    user_defined_filters={"sh": shlex.quote},
    tags=["kgbrink"],
    doc_md=__doc__,
) as dag:
    stage = BashOperator(
        task_id="stage",
        bash_command=kgbrink("stage", f"--input {setting('dump_dir')} --to {setting('dump_uri')}"),
    )
    refresh = BashOperator(
        task_id="refresh",
        bash_command=spark_submit(
            "refresh",
            f"--dataset {setting('dataset')} --format {setting('format')} --input {setting('dump_uri', prefix=True)}"
            " --no-rebuild",
        ),
    )
    changed = ShortCircuitOperator(task_id="changed", python_callable=refresh_changed)
    release = BashOperator(
        task_id="release",
        bash_command=spark_submit("release", f"--dataset {setting('dataset')} --out {setting('release')}"),
    )
    score = BashOperator(
        task_id="score",
        bash_command=spark_submit("score", f"--dataset {setting('dataset')} --ranks {setting('ranks')}"),
    )
    stage >> refresh >> changed >> [release, score]
