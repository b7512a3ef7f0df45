"""``kgbrink release`` on the local stack (issue 47): a small generated KG staged and ingested on s3a,
released by spark-submit into a release root on s3a, worker 2 killed inside three of its builders, then
fetched with ``kgbrink fetch`` (the release's manifest, every file checked); the same KG ingested and
released in local mode on local files gives the same files byte for byte, and a second release (local mode,
same root) is a no-op.

Its own dataset: it runs in any order (``make test-cluster``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kgbrink.storage import staging
from tests.cluster.jobs import CLUSTER_CONF, KGBRINK, LOCAL_MODE, killed_in_steps, run, run_local, set_args

DUMP = "s3a://kgbrink/dumps/release-kg"
DATASET = "s3a://kgbrink/datasets/release-kg"
ROOT_URI = "s3a://kgbrink/releases/release-kg"
# The release's builders at test size (tests/test_release.py's settings) on a 5,000-triple KG, OKGQA-P with
# all four methods, seed graphs of 10 nodes. Rules of 2 atoms (CI time): 3-atom mining runs on the cluster
# in test_pipeline.py's build.
SMALL = [
    "mcq.n_triples=30",
    "seed_graphs.n_samples=8",
    "gt_questions.per_type=1",
    "question_graphs.top_nodes=200",
    "question_graphs.max_triples=1000",
    "perturbation.levels=[0.5,1.0]",
    "mining.min_initial_support=30",
    "mining.max_atoms=2",
]
SETTINGS = set_args(SMALL)
# Worker 2 and its executors are SIGKILLed inside these steps of the cluster's release, each once a
# checkpoint of the step was written (``killed_in_steps``): the seed graphs' sample (synthkgqa), the
# options (probekgc) and the perturbations (okgqa), the checkpointing steps of the seed-graphs, mcq and
# okgqa-sweep jobs, whose builders the release runs.
RELEASE_KILLS = (("sample", True), ("options", True), ("perturb", True))


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")  # not Hadoop's local .crc files
    }


@pytest.fixture(scope="module")
def released(stack, run_dir) -> dict:
    """The KG staged and ingested on s3a, and ingested into a local folder as well (one local-mode process,
    seconds apart: the release's date is its triples' commit day); released by spark-submit on the cluster,
    worker 2 killed inside the steps of RELEASE_KILLS; then in one local-mode process: the release again (a
    no-op decided from the release root and the dataset on s3a), its fetch, and the local dataset released
    into a local root (local files: no s3a writes)."""
    kg = run_dir / "suite-kg"
    synth = ["synth", "--conf", "conf/local.yaml", "--set", "synth.triples=5000", "--set", "synth.seed=11"]
    run([KGBRINK, *synth, "--out", str(kg), "--no-tracking"], run_dir, "suite-synth")
    run([KGBRINK, "stage", "--conf", CLUSTER_CONF, "--input", str(kg), "--to", DUMP], run_dir, "suite-stage")
    local_dataset = str(run_dir / "suite-local-datasets" / DATASET.rsplit("/", 1)[1])  # the same dataset name
    ingests = [
        ["ingest", *LOCAL_MODE, "--format", "wikidata5m", "--input", DUMP + "/", "--dataset", DATASET],
        ["ingest", *LOCAL_MODE, "--format", "wikidata5m", "--input", str(kg), "--dataset", local_dataset],
    ]
    run_local(ingests, run_dir, "suite-ingests")  # what the test is about is the release on the cluster
    summaries = {name: run_dir / f"suite-{name}.json" for name in ("cluster", "again", "fetch", "local")}
    args = ["--dataset", DATASET, "--out", ROOT_URI, *SETTINGS]
    killed_in_steps(stack, run_dir, "release", args, "suite-cluster", RELEASE_KILLS)  # its summary: suite-cluster.json
    fetched, local_root = run_dir / "suite-fetched", run_dir / "suite-local"
    fetch = ["fetch", "--conf", CLUSTER_CONF, "--from", ROOT_URI, "--out", str(fetched)]
    local = ["release", *LOCAL_MODE, *SETTINGS, "--dataset", local_dataset, "--out", str(local_root)]
    after = [
        ["release", *LOCAL_MODE, *args, "--json", str(summaries["again"])],
        [*fetch, "--json", str(summaries["fetch"])],
        [*local, "--json", str(summaries["local"])],
    ]
    run_local(after, run_dir, "suite-local")
    out = {name: json.loads(path.read_text()) for name, path in summaries.items()}
    out["fetched"], out["local_folder"] = fetched, local_root / out["local"]["version"]
    return out


def test_a_release_on_the_cluster_with_a_worker_killed_in_three_builders_equals_the_local_mode_release(stack, released):
    """Also the seed graphs, ProbeKGC questions and OKGQA-P perturbations built on a cluster that lost an
    executor inside their checkpointing steps: the same counts and files, byte for byte, as local mode's."""
    cluster, local = released["cluster"], released["local"]
    assert cluster["status"] == "ok" and cluster["version"] == "v1"
    assert cluster["rebuilt"] == local["rebuilt"] == ["kg", "brink", "probe", "synthkgqa", "probekgc", "okgqa"]
    assert cluster["counts"] == local["counts"]
    built = ("synthkgqa/seed_graphs/train.jsonl", "probekgc/questions/easy.jsonl", "okgqa/perturbations/")
    fetched, expected = _files(released["fetched"]), _files(released["local_folder"])
    manifest = expected.pop(staging.MANIFEST)  # fetch keeps the files a manifest lists, not the manifest
    assert len(fetched) > 30 and fetched.keys() == expected.keys()
    assert [n for n in fetched if fetched[n] != expected[n]] == []
    assert all(any(name.startswith(prefix) for name in fetched) for prefix in built)
    # the fetch read the release's manifest (LATEST -> v1), the local release's byte for byte
    assert released["fetch"]["params"]["source"] == f"{ROOT_URI}/v1"
    client = staging.s3_client(stack.s3_endpoint, "us-east-1", path_style=True)
    staged = staging.read_object(client, f"{ROOT_URI}/v1", staging.MANIFEST)
    assert hashlib.sha256(staged).hexdigest() == manifest
    assert released["fetch"]["counts"]["files"] == len(fetched)


def test_a_second_release_of_the_same_dataset_is_a_no_op(released):
    again = released["again"]
    assert again["status"] == "ok" and again["version"] == "v1"
    assert again["rebuilt"] == [] and again["counts"]["rebuilt"] == 0
