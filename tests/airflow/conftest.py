"""tests/airflow runs in the Airflow venv (make test-airflow): Airflow's home (the airflow.cfg it writes) in
.cache/airflow-home, a new SQLite metadata database there for each session, the DAG folder infra/airflow/, no
example DAGs. Set before Airflow is first imported."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
HOME = PROJECT_ROOT / ".cache/airflow-home"
HOME.mkdir(parents=True, exist_ok=True)
(HOME / "airflow.db").unlink(missing_ok=True)
os.environ["AIRFLOW_HOME"] = str(HOME)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{HOME / 'airflow.db'}"
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(PROJECT_ROOT / "infra/airflow")
