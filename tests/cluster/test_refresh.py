"""``kgbrink refresh`` on the cluster (issue 26): a changed dump (about 1% of the sample's triples removed,
42 added) merged into the sample pipeline's dataset with exact change counts and stable ids, its statistics
recomputed and what else depends on it reported stale (``--no-rebuild``: the rebuild and the rescore are
the build and score jobs, which tests/cluster/test_pipeline.py runs on the cluster, and tests/test_refresh.py
decides them); the same dump again is a no-op. It changes that dataset: it runs after every test that reads
it (tests/cluster/conftest.py, ORDER)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.cluster.jobs import CLUSTER_CONF, KGBRINK, LOCAL_MODE, run, run_local, submit
from tests.cluster.sample_pipeline import DATASET

DUMP_V2 = "s3a://kgbrink/dumps/sample-v2"


NEW_ENTITIES = [f"Q99{i:04d}" for i in range(1, 11)]
SPLITS = ("train", "valid", "test")


def _dropped(line: str) -> bool:
    return hashlib.sha256(line.encode()).digest()[0] < 3  # about 1.2% of the lines


def _keys(lines) -> tuple[set[str], set[str]]:
    parts = [line.split("\t") for line in lines]
    return {p[0] for p in parts} | {p[2] for p in parts}, {p[1] for p in parts}


@pytest.fixture(scope="module")
def dump_v2(run_dir, sample) -> dict:
    """The sample with about 1% of its triples removed (``_dropped``) and 42 added, all of 10 new entities:
    4 train triples of each and a test triple of the first two; staged to the bucket with boto3."""
    target = run_dir / "sample-v2"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(sample, target)
    old = {s: (sample / f"wikidata5m_transductive_{s}.txt").read_text().splitlines() for s in SPLITS}
    relations = sorted({line.split("\t")[1] for line in old["train"][:200]})[:5]
    tails = [line.split("\t")[2] for line in old["train"][:10]]
    added = {
        "train": [f"{e}\t{r}\t{tails[i]}" for i, e in enumerate(NEW_ENTITIES) for r in relations[:4]],
        "valid": [],
        "test": [f"{e}\t{relations[4]}\t{tails[0]}" for e in NEW_ENTITIES[:2]],
    }
    new = {s: [x for x in old[s] if not _dropped(x)] + added[s] for s in SPLITS}
    for split, lines in new.items():
        (target / f"wikidata5m_transductive_{split}.txt").write_text("".join(x + "\n" for x in lines))
    summary = run_dir / "stage-v2.json"
    args = ["--conf", CLUSTER_CONF, "--input", str(target), "--to", DUMP_V2, "--json", str(summary)]
    run([KGBRINK, "stage", *args], run_dir, "stage-v2")
    removed = {s: [x for x in old[s] if _dropped(x)] for s in SPLITS}
    return {"old": old, "new": new, "added": added, "removed": removed, "stage": json.loads(summary.read_text())}


def _refresh(run_dir: Path, name: str, local: bool = False) -> dict:
    """``kgbrink refresh`` of DUMP_V2 into the pipeline's dataset by spark-submit on the cluster, or (``local``)
    by this process's local-mode Spark (:func:`run_local`) on the same s3a dataset; its summary."""
    summary = run_dir / f"{name}.json"
    args = ["--format", "wikidata5m", "--input", DUMP_V2 + "/", "--dataset", DATASET]
    args += ["--out", str(run_dir / "refresh-export"), "--no-rebuild", "--json", str(summary)]
    if local:
        run_local([["refresh", *LOCAL_MODE, *args]], run_dir, name)
    else:
        submit(run_dir, "refresh", args, name)
    return json.loads(summary.read_text())


@pytest.fixture(scope="module")
def refreshed(run_dir, pipelines, dump_v2) -> dict:
    """The changed dump refreshed into the cluster's dataset, then the same dump again: a no-op decided from
    what the tables on s3a hold, run in local mode (CI time)."""
    first = _refresh(run_dir, "refresh-cluster")
    return {"first": first, "again": _refresh(run_dir, "refresh-again", local=True)}


def _by_key(spark, table: str, version: int) -> dict[str, int]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(table)
    return {r["key"]: r["id"] for r in frame.select("key", "id").collect()}


def test_a_refresh_on_the_cluster_merges_the_changed_dump(stack, run_dir, dump_v2, refreshed, reader):
    done = refreshed["first"]
    assert dump_v2["stage"]["changed"] is True
    assert done["status"] == "ok" and done["counts"]["changed"] is True
    counts = done["counts"]
    # the change counts, exactly: what the dump added and removed per split
    added = {s: len(dump_v2["added"][s]) for s in SPLITS}
    removed = {s: len(dump_v2["removed"][s]) for s in SPLITS}
    assert added["train"] == 40 and added["test"] == 2 and sum(removed.values()) > 100
    assert counts["triples_added_per_split"] == added
    assert counts["triples_removed_per_split"] == removed
    unchanged = {s: len(dump_v2["old"][s]) - removed[s] for s in SPLITS}
    assert counts["triples_unchanged_per_split"] == unchanged
    # new and retired keys: the ten new entities; what only removed triples used
    entities_v2, relations_v2 = _keys(x for s in SPLITS for x in dump_v2["new"][s])
    gone_entities, gone_relations = _keys(x for s in SPLITS for x in dump_v2["removed"][s])
    assert counts["new_entities"] == len(NEW_ENTITIES) and counts["new_relations"] == 0
    assert counts["retired_entities"] == len(gone_entities - entities_v2)
    assert counts["retired_relations"] == len(gone_relations - relations_v2)
    # known keys keep their ids; the new keys are numbered after them
    versions = counts["versions"]
    path = f"{DATASET}/entities"
    before = _by_key(reader, path, versions["before"]["entities"])
    after = _by_key(reader, path, versions["after"]["entities"])
    assert {k: after[k] for k in before} == before
    assert sorted(set(after) - set(before)) == NEW_ENTITIES
    assert min(after[k] for k in NEW_ENTITIES) > max(before.values())
    # the merged triples are the new dump's
    triples = reader.read.format("delta").option("versionAsOf", versions["after"]["triples"])
    triples = triples.load(f"{DATASET}/triples")
    names = {i: k for k, i in after.items()}
    relation_names = {i: k for k, i in _by_key(reader, f"{DATASET}/relations", versions["after"]["relations"]).items()}
    merged = {
        (f"{names[r['h']]}\t{relation_names[r['r']]}\t{names[r['t']]}", r["split"])
        for r in triples.select("h", "r", "t", "split").collect()
    }
    assert merged == {(x, s) for s in SPLITS for x in dump_v2["new"][s]}
    # downstream: statistics recomputed; the variant and the score run reported stale, neither run again
    acted = {(d["kind"], d["name"]): d["action"] for d in done["downstream"]}
    assert {a for (kind, _), a in acted.items() if kind == "stats"} == {"recompute"}
    assert acted[("variant", "brink")] == "stale"
    assert [a for (kind, _), a in acted.items() if kind == "score"] == ["stale"]
    assert done["counts"]["variants_rebuilt"] == 0 and not (run_dir / "refresh-export").exists()


def test_the_same_dump_again_is_a_no_op_that_says_so(refreshed):
    first, again = refreshed["first"], refreshed["again"]
    assert again["status"] == "ok" and again["counts"]["changed"] is False
    assert again["counts"]["triples_added"] == again["counts"]["triples_removed"] == 0
    # the statistics are current; the variant and the score run still stale (nothing rebuilt them)
    acted = {(d["kind"], d["name"]): d["action"] for d in again["downstream"]}
    assert acted == {k: "skip" if k[0] == "stats" else "stale" for k in acted} and ("variant", "brink") in acted
    assert again["counts"]["versions"]["before"] == again["counts"]["versions"]["after"]
    assert again["counts"]["versions"]["after"] == first["counts"]["versions"]["after"]
