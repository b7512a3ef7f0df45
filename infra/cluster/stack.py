"""The local cluster stack: a Spark standalone master and two workers, an S3 server and an MLflow server.

``python infra/cluster/stack.py up|down|status`` (``make cluster-up`` / ``make cluster-down``). Every
process is a separate OS process started in a session of its own (``start_new_session``): its PID, which
is also its process group id, goes to ``<state>/pids/<name>.pid`` with its start time, and ``down`` stops
that process group (a worker's executors, the MLflow server's workers) by that PID, never by name. A PID
file whose process is gone or whose start time differs (the PID was reused) is removed without a signal.

- S3: moto's server (``moto_server``) on 127.0.0.1, with the bucket created by boto3;
- MLflow: ``mlflow server`` with a SQLite backend under the state folder and artifacts proxied to
  ``s3://<bucket>/mlflow-artifacts``;
- Spark: ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` from the jars of the
  installed pyspark (``SPARK_HOME`` is the pyspark package), every address 127.0.0.1
  (``SPARK_LOCAL_IP`` and ``--host``), each worker with few cores and little memory.

Each service is checked healthy before anything uses it (a TCP probe, then an HTTP probe, with timeouts;
the MLflow server starts while Spark does); ``up`` fails naming the service and its log when one does not
come up, and leaves stopping to ``down``.
Every log is under ``<state>/logs``. The S3 credentials come from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``; when unset, ``up`` draws random ones into ``<state>/aws.env`` (mode 0600,
``export`` lines to source). They reach the workers (and so the executors) and the MLflow server through
the environment only, never a command line or a settings file.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Layout:
    """Where the stack keeps its state, and its ports (each overridable by environment variable)."""

    state: Path = field(default_factory=lambda: Path(os.environ.get("KGBRINK_CLUSTER_DIR", ROOT / "data/cluster")))
    venv: Path = field(
        default_factory=lambda: Path(os.environ.get("KGBRINK_CLUSTER_VENV", ROOT / ".cache/cluster-venv"))
    )
    bucket: str = field(default_factory=lambda: os.environ.get("KGBRINK_CLUSTER_BUCKET", "kgbrink"))
    s3_port: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_S3_PORT", "9000")))
    mlflow_port: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_MLFLOW_PORT", "5000")))
    master_port: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_SPARK_MASTER_PORT", "7077")))
    master_ui_port: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_SPARK_MASTER_UI_PORT", "8080")))
    workers: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_SPARK_WORKERS", "2")))
    worker_cores: int = field(default_factory=lambda: int(os.environ.get("KGBRINK_SPARK_WORKER_CORES", "1")))
    worker_memory: str = field(default_factory=lambda: os.environ.get("KGBRINK_SPARK_WORKER_MEMORY", "3g"))

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def s3_endpoint(self) -> str:
        return f"http://{HOST}:{self.s3_port}"

    @property
    def mlflow_uri(self) -> str:
        return f"http://{HOST}:{self.mlflow_port}"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def worker_ports(self, index: int) -> tuple[int, int]:
        """(RPC port, web UI port) of worker ``index`` (1-based): after the master's."""
        return self.master_port + index, self.master_ui_port + index


class StackError(RuntimeError):
    pass


# --- processes ------------------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]


def _pid_file(layout: Layout, name: str) -> Path:
    return layout.pids / f"{name}.pid"


def running(layout: Layout, name: str) -> int | None:
    """The PID of service ``name`` when the process its PID file names is still the one started."""
    path = _pid_file(layout, name)
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    pid = int(record["pid"])
    return pid if _start_time(pid) == record["start_time"] else None


def start(layout: Layout, name: str, command: list[str], env: dict[str, str]) -> int:
    """Start ``command`` in a new session (its own process group), output to ``<logs>/<name>.log``."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.pids.mkdir(parents=True, exist_ok=True)
    log = open(layout.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it open
    log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
    log.flush()
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    log.close()
    started = _start_time(process.pid)
    _pid_file(layout, name).write_text(json.dumps({"pid": process.pid, "start_time": started, "command": command}))
    return process.pid


def stop(layout: Layout, name: str, timeout: float = 30.0) -> str:
    """Stop service ``name``'s process group by the PID it was started with: SIGTERM, SIGKILL after
    ``timeout`` seconds. Returns what was done."""
    path = _pid_file(layout, name)
    if not path.is_file():
        return "not started"
    pid = running(layout, name)
    if pid is None:
        path.unlink()
        return "already gone"
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _group_alive(pid):
        time.sleep(0.2)
    outcome = "stopped"
    if _group_alive(pid):
        _signal_group(pid, signal.SIGKILL)
        outcome = "killed"
        while _group_alive(pid):
            time.sleep(0.1)
    _reap(pid)
    path.unlink()
    return outcome


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is alive (zombies excluded)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields_ = stat[stat.rindex(")") + 2 :].split()
        if int(fields_[2]) == pgid and fields_[0] != "Z":
            return True
    return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def group_pids(pgid: int) -> list[int]:
    """Every live process of process group ``pgid`` (a service and the processes it started)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            fields_ = stat[stat.rindex(")") + 2 :].split()
            if int(fields_[2]) == pgid and fields_[0] != "Z":
                out.append(int(proc.name))
    return sorted(out)


# --- health checks ------------------------------------------------------------------------------------


def port_open(port: int, host: str = HOST, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until(what: str, check, timeout: float, layout: Layout, log: str, pid: int | None = None) -> None:
    """Poll ``check()`` until true; fail naming ``what`` and its log after ``timeout`` seconds or when the
    process ``pid`` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):
            pass
        if pid is not None and _start_time(pid) is None:
            raise StackError(f"{what} exited during start-up; see {layout.logs / log}")
        time.sleep(0.5)
    raise StackError(f"{what} not healthy after {timeout:.0f} s; see {layout.logs / log}")


def _master_state(layout: Layout) -> dict:
    status, body = http_get(f"http://{HOST}:{layout.master_ui_port}/json/", timeout=3)
    return json.loads(body) if status == 200 else {}


def alive_workers(layout: Layout) -> int:
    state = _master_state(layout)
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


# --- the services ---------------------------------------------------------------------------------------


def credentials(layout: Layout) -> dict[str, str]:
    """The stack's S3 credentials: the environment's, else those of ``<state>/aws.env``, else new random
    ones written there (mode 0600)."""
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        return {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    path = layout.state / "aws.env"
    if not path.is_file():
        layout.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"export AWS_ACCESS_KEY_ID=kgbrink{secrets.token_hex(6)}\n")
            out.write(f"export AWS_SECRET_ACCESS_KEY={secrets.token_hex(20)}\n")
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip()
    return values


def base_env(layout: Layout, creds: dict[str, str]) -> dict[str, str]:
    """The environment of every service: loopback addresses, no calls to metadata endpoints or telemetry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SPARK_", "PYSPARK_"))}
    env.update(creds)
    env.update(
        SPARK_LOCAL_IP=HOST,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        MLFLOW_DISABLE_TELEMETRY="true",
        DO_NOT_TRACK="true",
        PYSPARK_PYTHON=str(ROOT / ".venv/bin/python"),
    )
    return env


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else shutil.which("java")
    if not java:
        raise StackError("no java on PATH (Java 17 is needed, as for pyspark)")
    return str(java)


def start_s3(layout: Layout, env: dict[str, str]) -> None:
    server = layout.venv / "bin/moto_server"
    if not server.exists():
        raise StackError(f"{server} is missing: run `make cluster-venv`")
    pid = start(layout, "s3", [str(server), "-H", HOST, "-p", str(layout.s3_port)], env)
    wait_until("S3 (moto)", lambda: http_get(layout.s3_endpoint + "/")[0] == 200, 60, layout, "s3.log", pid)
    import boto3  # the main venv's (a declared dependency)

    client = boto3.client(
        "s3",
        endpoint_url=layout.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if layout.bucket not in names:
        client.create_bucket(Bucket=layout.bucket)


def start_mlflow(layout: Layout, env: dict[str, str]) -> int:
    """Start the MLflow server; :func:`wait_for_mlflow` checks it (it starts while Spark does)."""
    server = layout.venv / "bin/mlflow"
    if not server.exists():
        raise StackError(f"{server} is missing: run `make cluster-venv`")
    layout.state.mkdir(parents=True, exist_ok=True)
    command = [
        str(server), "server",
        "--host", HOST, "--port", str(layout.mlflow_port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{layout.state / 'mlflow.db'}",
        "--artifacts-destination", f"s3://{layout.bucket}/mlflow-artifacts",
    ]  # fmt: skip
    return start(layout, "mlflow", command, {**env, "MLFLOW_S3_ENDPOINT_URL": layout.s3_endpoint})


def wait_for_mlflow(layout: Layout, pid: int) -> None:
    ok = lambda: http_get(layout.mlflow_uri + "/health")[0] == 200  # noqa: E731
    wait_until("MLflow server", ok, 240, layout, "mlflow.log", pid)


def _spark_command(layout: Layout, main_class: str, args: list[str]) -> list[str]:
    classpath = f"{spark_home() / 'jars'}/*"
    return [
        _java(), "-cp", classpath, "-Xmx512m",
        "-Dspark.master.rest.enabled=false",  # no REST submission server (port 6066)
        # A worker is dropped after this long without a heartbeat (default 60 s, which a starved 2-core
        # machine can miss; a killed worker is noticed at once by its closed connection).
        "-Dspark.worker.timeout=300",
        main_class, *args,
    ]  # fmt: skip


def start_spark(layout: Layout, env: dict[str, str]) -> None:
    env = _spark_env(env)
    master = _spark_command(
        layout,
        "org.apache.spark.deploy.master.Master",
        ["--host", HOST, "--port", str(layout.master_port), "--webui-port", str(layout.master_ui_port)],
    )
    pid = start(layout, "spark-master", master, env)
    ok = lambda: port_open(layout.master_port) and _master_state(layout).get("status") == "ALIVE"  # noqa: E731
    wait_until("Spark master", ok, 90, layout, "spark-master.log", pid)
    for index in range(1, layout.workers + 1):
        start_worker(layout, index, env)
    ok = lambda: alive_workers(layout) == layout.workers  # noqa: E731
    wait_until(f"{layout.workers} Spark workers", ok, 90, layout, "spark-worker-*.log")


def start_worker(layout: Layout, index: int, env: dict[str, str]) -> int:
    """Start worker ``index`` (1-based) of the master; its executors run in ``<state>/work/worker-<index>``."""
    rpc, ui = layout.worker_ports(index)
    work = layout.state / "work" / f"worker-{index}"
    work.mkdir(parents=True, exist_ok=True)
    args = [
        "--host", HOST, "--port", str(rpc), "--webui-port", str(ui),
        "--cores", str(layout.worker_cores), "--memory", layout.worker_memory,
        "--work-dir", str(work), layout.master_url,
    ]  # fmt: skip
    command = _spark_command(layout, "org.apache.spark.deploy.worker.Worker", args)
    return start(layout, f"spark-worker-{index}", command, _spark_env(env))


def _spark_env(env: dict[str, str]) -> dict[str, str]:
    # The worker builds each executor's command line with Spark's launcher, which needs the Scala version
    # (a distribution's load-spark-env.sh sets it; pyspark's jars are Scala 2.13).
    return {**env, "SPARK_HOME": str(spark_home()), "SPARK_SCALA_VERSION": "2.13"}


def kill_worker(layout: Layout, index: int) -> int:
    """SIGKILL worker ``index`` and its executors (its process group) at once, as a machine failure would;
    its PID file is removed. Returns the killed PID."""
    name = f"spark-worker-{index}"
    pid = running(layout, name)
    if pid is None:
        raise StackError(f"{name} is not running")
    _signal_group(pid, signal.SIGKILL)
    while _group_alive(pid):
        time.sleep(0.1)
    _reap(pid)
    _pid_file(layout, name).unlink()
    return pid


def restart_worker(layout: Layout, index: int) -> int:
    """Start worker ``index`` again (after :func:`kill_worker`) once the master has dropped it, and wait until
    the master has every worker (a worker re-registering at an address the master still holds is refused)."""
    dropped = lambda: alive_workers(layout) < layout.workers  # noqa: E731
    wait_until(f"the master dropping Spark worker {index}", dropped, 120, layout, "spark-master.log")
    env = base_env(layout, credentials(layout))
    pid = start_worker(layout, index, env)
    ok = lambda: alive_workers(layout) == layout.workers  # noqa: E731
    wait_until(f"Spark worker {index}", ok, 120, layout, f"spark-worker-{index}.log", pid)
    return pid


SERVICES = ("s3", "mlflow", "spark-master")  # workers: spark-worker-<n>


def service_names(layout: Layout) -> list[str]:
    """Every service's name in start order (workers after the master)."""
    return [*SERVICES, *(f"spark-worker-{i}" for i in range(1, layout.workers + 1))]


def healthy(layout: Layout) -> dict[str, bool]:
    """Each service's health as ``up`` checks it."""
    checks = {
        "s3": lambda: http_get(layout.s3_endpoint + "/", timeout=3)[0] == 200,
        "mlflow": lambda: http_get(layout.mlflow_uri + "/health", timeout=3)[0] == 200,
        "spark-master": lambda: _master_state(layout).get("status") == "ALIVE",
    }
    out = {}
    for name in service_names(layout):
        check = checks.get(name, lambda: alive_workers(layout) == layout.workers)
        try:
            out[name] = running(layout, name) is not None and bool(check())
        except (OSError, ValueError):
            out[name] = False
    return out


def up(layout: Layout) -> dict:
    started = time.monotonic()
    if any(running(layout, name) for name in service_names(layout)):
        status = healthy(layout)
        if all(status.values()):
            return {"status": "already up", **info(layout)}
        raise StackError(f"a partial stack is running ({status}): run `make cluster-down` first")
    busy = [p for p in _ports(layout) if port_open(p)]
    if busy:
        raise StackError(f"port(s) {busy} on {HOST} are already in use")
    for stale in layout.pids.glob("*.pid") if layout.pids.is_dir() else []:
        stale.unlink()
    env = base_env(layout, credentials(layout))
    start_s3(layout, env)
    mlflow = start_mlflow(layout, env)  # slow to import: checked once Spark is up
    start_spark(layout, env)
    wait_for_mlflow(layout, mlflow)
    return {"status": "up", "seconds": round(time.monotonic() - started, 1), **info(layout)}


def _ports(layout: Layout) -> list[int]:
    ports = [layout.s3_port, layout.mlflow_port, layout.master_port, layout.master_ui_port]
    for index in range(1, layout.workers + 1):
        ports.extend(layout.worker_ports(index))
    return ports


def down(layout: Layout) -> dict:
    """Stop every service that has a PID file, workers first."""
    done = {}
    names = service_names(layout)
    extra = sorted(p.stem for p in layout.pids.glob("*.pid")) if layout.pids.is_dir() else []
    for name in [*reversed(names), *(n for n in extra if n not in names)]:
        done[name] = stop(layout, name)
    return {"status": "down", "services": done}


def info(layout: Layout) -> dict:
    return {
        "spark_master": layout.master_url,
        "s3_endpoint": layout.s3_endpoint,
        "bucket": layout.bucket,
        "mlflow": layout.mlflow_uri,
        "logs": str(layout.logs),
        "pids": {name: running(layout, name) for name in service_names(layout)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    layout = Layout()
    try:
        if args.action == "up":
            result = up(layout)
        elif args.action == "down":
            result = down(layout)
        else:
            result = {"healthy": healthy(layout), **info(layout)}
    except StackError as exc:
        print(f"cluster {args.action}: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    if args.action == "status":
        return 0 if all(result["healthy"].values()) else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
