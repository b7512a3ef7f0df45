"""The benchmark jobs (mcq, seed-graphs, okgqa-sweep) on the cluster's sample dataset survive worker 2
killed inside their checkpointing step with the outputs of the same job in local mode."""

from __future__ import annotations

import matplotlib.image
import pytest

from tests.cluster.jobs import file_digests, killed_in_steps, same_tables
from tests.cluster.sample_pipeline import BENCHMARK_JOBS, DATASET, benchmark_args


def _outputs(summary: dict) -> dict:
    """A summary's output tables, with those of the ``perturb`` job an ``okgqa-sweep`` ran."""
    nested = summary.get("perturb", {}).get("outputs", {})
    return {**summary["outputs"], **{f"perturb.{k}": v for k, v in nested.items()}}


@pytest.mark.parametrize("job", sorted(BENCHMARK_JOBS))
def test_benchmark_jobs_survive_a_killed_worker_with_identical_output(stack, run_dir, pipelines, reader, job):
    """mcq, seed-graphs and okgqa-sweep on the cluster's dataset, worker 2 killed inside their
    checkpointing step, against the same job in local mode on the local run's dataset: the same counts,
    results, tables and files (mcq's JSON Lines, seed-graphs' prompt records)."""
    _, step = BENCHMARK_JOBS[job]
    name = job.replace("_", "-")
    cluster_args = [*benchmark_args(job, run_dir, "cluster"), "--dataset", DATASET]
    done = killed_in_steps(stack, run_dir, job, cluster_args, f"{name}-kill", ((step, True),))
    expected = pipelines["local"][job]
    assert done["counts"] == expected["counts"] and done.get("results") == expected.get("results")
    compared = same_tables(reader, _outputs(done), _outputs(expected), run_dir / "exported" / name)
    assert compared
    out = {mode: run_dir / f"{name}-{mode}" for mode in ("cluster", "local")}
    files = {mode: file_digests(folder) for mode, folder in out.items()}
    assert files["cluster"].keys() == files["local"].keys() and files["cluster"]
    for path, digest in files["cluster"].items():  # a plot's pixels; every other file's bytes
        if path.endswith(".png"):
            pixels = [matplotlib.image.imread(out[mode] / path) for mode in ("cluster", "local")]
            assert pixels[0].shape == pixels[1].shape and (pixels[0] == pixels[1]).all(), path
        else:
            assert digest == files["local"][path], path
