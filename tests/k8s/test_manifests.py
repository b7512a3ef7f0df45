"""The Kubernetes manifests of infra/k8s/ (make test-k8s, in the Airflow venv): every object against the
Kubernetes OpenAPI schemas kubernetes-validate bundles (strict: an unknown field, e.g. a typo, fails), the
objects' references to each other, the RBAC Spark on Kubernetes needs, the CronJob's spark-submit line (the
entry point, its options, the settings file mounted from the ConfigMap), and no literal credential.

What this machine cannot check (no Kubernetes API server, no image): admission (quotas, policies), that the
image exists and runs, and a real run of the CronJob."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from tests.scheduling import PROJECT_ROOT, job_options, literal_secrets, options_given, stub_calls, stub_project

K8S = PROJECT_ROOT / "infra/k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
# The oldest Kubernetes with every field used (CronJob timeZone: 1.27; Job podFailurePolicy GA: 1.31) and the
# newest kubernetes-validate has schemas for.
VERSIONS = ["1.31.0", kubernetes_validate.utils.latest_version()]
NAMESPACE = "kgbrink"
SECRET = "kgbrink-s3"
IMAGE_PLACEHOLDER = "REGISTRY/kgbrink:VERSION"


def _objects() -> list[dict]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


OBJECTS = _objects()


def _one(kind: str) -> dict:
    found = [o for o in OBJECTS if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def _pod_spec() -> dict:
    return _one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def _script() -> str:
    (container,) = _pod_spec()["containers"]
    assert container["command"] == ["/bin/bash", "-c"]
    (script,) = container["args"]
    return script


def _commands(script: str) -> list[list[str]]:
    """The script's simple commands as argv lists (continuation lines joined)."""
    joined = script.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def test_there_are_the_expected_objects():
    assert len(MANIFESTS) >= 4
    kinds = sorted(o["kind"] for o in OBJECTS)
    assert kinds == ["ConfigMap", "CronJob", "Namespace", "Role", "RoleBinding", "ServiceAccount"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_for_kubernetes(path, version):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is not None:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["spec"].update(concurrencyPolicyy="Forbid"),  # a misspelt field
        lambda c: c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0].update(args="x"),  # a type
        lambda c: c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0].pop("name"),  # required
    ],
    ids=["typo", "wrong-type", "missing-required"],
)
def test_the_validation_catches_a_broken_manifest(mutate):
    broken = copy.deepcopy(_one("CronJob"))
    mutate(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_objects_are_in_the_namespace_the_manifests_create():
    assert _one("Namespace")["metadata"]["name"] == NAMESPACE
    for o in OBJECTS:
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]["name"]


def test_role_grants_what_spark_on_kubernetes_needs():
    """The driver creates, watches and deletes executor pods; services and configmaps for what it serves."""
    granted = {
        (resource, verb)
        for rule in _one("Role")["rules"]
        if rule["apiGroups"] == [""]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for resource in ("pods", "services", "configmaps"):
        for verb in ("create", "delete", "get", "list", "watch"):
            assert (resource, verb) in granted, (resource, verb)
    binding, account, role = _one("RoleBinding"), _one("ServiceAccount"), _one("Role")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert _pod_spec()["serviceAccountName"] == account["metadata"]["name"]


def test_cronjob_schedule_and_policies():
    spec = _one("CronJob")["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["schedule"] == "0 3 * * 1"
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] >= 1  # a failed refresh is retried; a rerun resumes
    # bad usage (exit 2) is not retried
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [2]
    assert rule["onExitCodes"]["containerName"] == _pod_spec()["containers"][0]["name"]
    assert _pod_spec()["restartPolicy"] == "Never"


def test_configmap_is_conf_cluster_yaml_mounted_where_the_job_reads_it():
    configmap = _one("ConfigMap")
    assert configmap["data"] == {"cluster.yaml": (PROJECT_ROOT / "conf/cluster.yaml").read_text()}
    settings = yaml.safe_load(configmap["data"]["cluster.yaml"])
    assert settings["spark"]["master"] is None  # left to spark-submit's --master k8s://...
    (volume,) = [v for v in _pod_spec()["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    (mount,) = [m for m in _pod_spec()["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    refresh = _spark_submit()[1]
    assert refresh[refresh.index("--conf") + 1] == f"{mount['mountPath']}/cluster.yaml"


def _spark_submit() -> tuple[list[str], list[str]]:
    """The spark-submit of the script's ``submit`` function: its own arguments and the job's (from the
    entry point ``jobs/$job.py``)."""
    (argv,) = [c for c in _commands(_script()) if c and c[0].endswith("spark-submit")]
    (entry,) = [i for i, word in enumerate(argv) if word.startswith("jobs/")]
    return argv[: entry + 1], argv[entry:]


def _submitted() -> dict[str, list[str]]:
    """The script's ``submit JOB ARGS...`` calls: the job's arguments by job."""
    calls = [c for c in _commands(_script()) if c and c[0] == "submit"]
    assert len({c[1] for c in calls}) == len(calls)
    return {c[1]: c[2:] for c in calls}


def test_spark_submit_runs_the_jobs_on_kubernetes():
    submit, job = _spark_submit()
    assert submit[0] == ".venv/bin/spark-submit"
    flags = dict(zip(submit[1::2], submit[2::2]))
    assert flags["--master"].startswith("k8s://https://")
    assert flags["--deploy-mode"] == "client"
    assert flags["--py-files"] == "kgbrink.zip"
    conf = dict(v.split("=", 1) for k, v in zip(submit[1::2], submit[2::2]) if k == "--conf")
    for key in (
        "spark.kubernetes.namespace",
        "spark.kubernetes.container.image",
        "spark.kubernetes.driver.pod.name",
        "spark.driver.host",
    ):
        assert key in conf, key
    assert job[:2] == ["jobs/$job.py", "--conf"] and job[3:] == ["--json", "data/$job.json", "$@"]
    calls = _submitted()
    assert list(calls) == ["refresh", "release", "score"]
    for name, args in calls.items():
        assert (PROJECT_ROOT / "jobs" / f"{name}.py").is_file()
        unknown = set(options_given(args)) - job_options(name)
        assert not unknown, f"options kgbrink {name} does not take: {unknown}"
    assert "--no-rebuild" in calls["refresh"]  # the variant is rebuilt by the release, once
    for flag in ("--dataset", "--format", "--input"):
        assert flag in calls["refresh"], flag
    assert calls["release"] == ["--dataset", "$KGBRINK_DATASET", "--out", "$KGBRINK_RELEASE"]
    assert calls["score"] == ["--dataset", "$KGBRINK_DATASET", "--ranks", "$KGBRINK_RANKS"]


def test_script_is_valid_bash():
    subprocess.run(["bash", "-n", "-c", _script()], check=True)


def _run_script(tmp_path, changed: bool) -> tuple[subprocess.CompletedProcess, list[list[str]], dict]:
    """The script against stub spark-submit and kgbrink; the refresh stub changes the dataset or not."""
    project = stub_project(tmp_path, sys.executable)
    (project / "data").mkdir()
    env = {
        **{e["name"]: e["value"] for e in _pod_spec()["containers"][0]["env"] if "value" in e},
        "POD_IP": "10.0.0.7",
        "POD_NAME": "kgbrink-refresh-123",
        "POD_NAMESPACE": NAMESPACE,
        "PATH": os.environ["PATH"],
        **({"KGBRINK_STUB_CHANGED": "1"} if changed else {}),
    }
    result = subprocess.run(["bash", "-c", _script()], cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["job"] == "refresh"
    return result, stub_calls(project), env


def test_script_runs_refresh_then_release_and_score_after_a_change(tmp_path):
    _, calls, env = _run_script(tmp_path, changed=True)
    assert [next(a for a in c if a.startswith("jobs/")) for c in calls] == [
        "jobs/refresh.py",
        "jobs/release.py",
        "jobs/score.py",
    ]
    refresh, release, score = calls
    submit_flags = dict(zip(refresh[0::2], refresh[1::2]))
    assert submit_flags["--jars"] == ".cache/jars/core/delta-spark.jar,.cache/jars/s3/hadoop-aws.jar"
    assert "spark.kubernetes.driver.pod.name=kgbrink-refresh-123" in refresh
    assert "spark.driver.host=10.0.0.7" in refresh
    assert f"spark.kubernetes.container.image={IMAGE_PLACEHOLDER}" in refresh
    assert "spark.kubernetes.executor.podNamePrefix=kgbrink-release" in release
    assert refresh[refresh.index("--dataset") + 1] == env["KGBRINK_DATASET"]
    assert release[release.index("--out") + 1] == env["KGBRINK_RELEASE"]
    assert release[release.index("--json") + 1] == "data/release.json"
    assert score[score.index("--ranks") + 1] == env["KGBRINK_RANKS"]


def test_script_stops_after_a_no_op_refresh(tmp_path):
    _, calls, _ = _run_script(tmp_path, changed=False)
    assert [next(a for a in c if a.startswith("jobs/")) for c in calls] == ["jobs/refresh.py"]


def test_executor_image_is_the_pods_image():
    (container,) = _pod_spec()["containers"]
    assert container["image"] == IMAGE_PLACEHOLDER
    env = {e["name"]: e for e in container["env"]}
    assert env["KGBRINK_IMAGE"]["value"] == container["image"]


def test_credentials_come_from_the_secret_only():
    (container,) = _pod_spec()["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"] == {"secretKeyRef": {"name": SECRET, "key": name}}
    credential = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.I)
    for e in container["env"]:
        if credential.search(e["name"]) and e["name"] != "AWS_EC2_METADATA_DISABLED":
            assert "secretKeyRef" in e.get("valueFrom", {}), e["name"]
    # the executors get them from the same Secret
    submit, _ = _spark_submit()
    refs = {
        value.split("=", 1)[0].rsplit(".", 1)[1]: value.split("=", 1)[1]
        for value in submit
        if value.startswith("spark.kubernetes.executor.secretKeyRef.")
    }
    assert refs == {name: f"{SECRET}:{name}" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    assert "Secret" not in {o["kind"] for o in OBJECTS}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_no_manifest_holds_a_literal_credential(path):
    assert literal_secrets(path.read_text()) == []


@pytest.mark.parametrize(
    "planted",
    [
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "--conf spark.hadoop.fs.s3a.secret.key=abc",
        "AWS_SECRET_ACCESS_KEY=abc",
    ],
)
def test_the_credential_scan_finds_a_planted_one(planted):
    text = (K8S / "30-cronjob.yaml").read_text().replace("REGISTRY/kgbrink:VERSION", planted, 1)
    assert literal_secrets(text)
    # and as a Secret object
    assert literal_secrets(f"apiVersion: v1\nkind: Secret\nstringData:\n  password: {planted}\n")
