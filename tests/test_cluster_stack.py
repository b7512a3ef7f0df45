"""The cluster stack's process handling (infra/cluster/stack.py) on harmless processes: a service is stopped
by the PID it was started with, with everything it started; a PID file whose process is gone or whose PID
now names another process is removed without a signal; ``down`` stops what the PID files name. The stack
itself (Spark, S3, MLflow) is tested by tests/cluster (make test-cluster)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location("kgbrink_stack_under_test", PROJECT_ROOT / "infra/cluster/stack.py")
stack = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stack
_spec.loader.exec_module(stack)

# a parent that starts a child and both sleep: the child must go with the parent's group
TREE = [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"]


@pytest.fixture
def layout(tmp_path):
    return stack.Layout(state=tmp_path / "cluster")


def _alive(pid: int) -> bool:
    return stack._start_time(pid) is not None and "Z" not in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1][:3]


def test_stop_ends_the_process_group_started_and_removes_its_pid_file(layout):
    pid = stack.start(layout, "svc", TREE, dict(os.environ))
    deadline = time.monotonic() + 20
    while len(stack.group_pids(pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    members = stack.group_pids(pid)
    assert pid in members and len(members) == 2  # the parent and its child
    record = json.loads((layout.pids / "svc.pid").read_text())
    assert record["pid"] == pid and record["start_time"] == stack._start_time(pid)
    assert stack.running(layout, "svc") == pid
    assert "--- " in (layout.logs / "svc.log").read_text()
    assert stack.stop(layout, "svc") == "stopped"
    assert not any(_alive(p) for p in members)
    assert not (layout.pids / "svc.pid").exists()
    assert stack.stop(layout, "svc") == "not started"


def test_a_pid_file_naming_another_process_is_removed_without_a_signal(layout):
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        layout.pids.mkdir(parents=True)
        # the PID is the bystander's, the start time is not: the recorded process is gone, the PID reused
        record = {"pid": bystander.pid, "start_time": "1", "command": ["gone"]}
        (layout.pids / "old.pid").write_text(json.dumps(record))
        assert stack.running(layout, "old") is None
        assert stack.stop(layout, "old") == "already gone"
        assert bystander.poll() is None  # not signalled
        assert not (layout.pids / "old.pid").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_down_stops_every_service_with_a_pid_file_workers_first(layout):
    names = ["s3", "spark-master", "spark-worker-1"]
    pids = {name: stack.start(layout, name, ["sleep", "60"], dict(os.environ)) for name in names}
    result = stack.down(layout)
    assert list(result["services"]) == ["spark-worker-2", "spark-worker-1", "spark-master", "mlflow", "s3"]
    assert {k: v for k, v in result["services"].items() if v != "not started"} == dict.fromkeys(
        ["spark-worker-1", "spark-master", "s3"], "stopped"
    )
    assert not any(_alive(pid) for pid in pids.values())
    assert list(layout.pids.glob("*.pid")) == []


def test_kill_worker_kills_at_once_and_a_missing_worker_is_named(layout):
    pid = stack.start(layout, "spark-worker-2", TREE, dict(os.environ))
    assert stack.kill_worker(layout, 2) == pid
    assert not _alive(pid) and stack.running(layout, "spark-worker-2") is None
    with pytest.raises(stack.StackError, match="spark-worker-2 is not running"):
        stack.kill_worker(layout, 2)


def test_up_refuses_busy_ports_and_a_missing_server_venv(layout, tmp_path, monkeypatch):
    import socket

    ports = {k: _free_port() for k in ("s3_port", "mlflow_port", "master_port", "master_ui_port")}
    free = stack.Layout(state=tmp_path / "novenv", venv=tmp_path / "none", workers=0, **ports)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = dataclasses.replace(free, state=tmp_path / "busy", s3_port=taken.getsockname()[1])
        with pytest.raises(stack.StackError, match=rf"port\(s\) \[{busy.s3_port}\] on 127.0.0.1 are already in use"):
            stack.up(busy)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    with pytest.raises(stack.StackError, match=r"moto_server is missing: run `make cluster-venv`"):
        stack.up(free)
    # the drawn credentials are in a file only its owner reads
    env_file = free.state / "aws.env"
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert env_file.read_text().count("export AWS_") == 2


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
