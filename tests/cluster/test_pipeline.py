"""The distributed path on the local stack (issue 26): the make-run sample's ``kgbrink run`` (ingest ->
stats -> build) and ``score`` by spark-submit on the 2-worker standalone cluster, with the Delta tables on s3a
and tracking on the MLflow server (the ``pipelines`` fixture, tests/cluster/conftest.py), give every table
of a local-mode run and its exported files byte for byte although a worker was killed inside four of their
steps."""

from __future__ import annotations

from tests.cluster.jobs import file_digests, same_tables
from tests.cluster.sample_pipeline import DATASET, step_outputs


def test_the_pipeline_and_its_scores_on_the_cluster_equal_local_mode(stack, run_dir, pipelines, reader):
    """The cluster's run and score, each surviving killed workers (``_killed_in_steps``), give local mode's
    counts, tables and exported files."""
    cluster, local = pipelines["cluster"], pipelines["local"]
    for job in ("run", "score"):
        assert cluster[job]["status"] == local[job]["status"] == "ok"
        assert cluster[job]["counts"] == local[job]["counts"], job
    assert all(o["path"].startswith(DATASET + "/") for o in cluster["run"]["outputs"].values())
    compared = []
    for step in ("ingest", "stats", "build"):
        outputs, expected = step_outputs(cluster["run"], step), step_outputs(local["run"], step)
        compared += same_tables(reader, outputs, expected, run_dir / "exported" / step)
    assert {"entities", "triples", "entity_popularity", "mine.rules", "remove.removed"} <= set(compared)
    assert {"questions.questions", "remove.complete", "remove.incomplete"} <= set(compared)
    # the exported files, byte for byte; the build report names where the dataset is, and only that differs
    exported = {mode: run_dir / f"export-{mode}" for mode in ("cluster", "local")}
    files = {mode: file_digests(folder) for mode, folder in exported.items()}
    report = "report/report.md"
    assert sorted(files["cluster"]) == sorted(files["local"]) and "DATA_CARD.md" in files["local"]
    differ = sorted(name for name, digest in files["cluster"].items() if files["local"][name] != digest)
    assert differ in ([], [report]), differ
    texts = [(exported[m] / report).read_text() for m in ("cluster", "local")]
    assert texts[0].replace(DATASET, "DATASET") == texts[1].replace(local["run"]["params"]["dataset"], "DATASET")
    # the scores: same results, and the same results table
    assert cluster["score"]["counts"]["scored"] == 20  # 5 valid and 5 test triples, both sides
    assert same_tables(reader, cluster["score"]["outputs"], local["score"]["outputs"], run_dir / "exported" / "score")
