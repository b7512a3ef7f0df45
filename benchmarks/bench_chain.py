"""Benchmark: the whole BRINK chain (ingest -> stats -> mine -> remove -> verify -> questions -> export ->
report) on the 20M-triple generated KG, run twice with different partitioning, outputs compared byte for
byte (issue 5's acceptance: under 90 minutes on this 2-core machine, identical across partition counts).

Data: the generated KG ``benchmarks/out/kg-20000000`` (``kgbrink synth --triples 20000000 --seed 7``;
generated here when missing, not timed). Each run is ``kgbrink run`` on a fresh dataset directory with
``local[2]`` and its own ``spark.sql.shuffle.partitions`` and ``spark.sql.files.maxPartitionBytes`` (so
both the scans and the shuffles are cut differently), measured with :func:`harness.measure` (wall time,
driver JVM peak memory); per-step timings come from the run's JSON summary.

Identity check: SHA-256 of every file of the two exports (``complete/incomplete/removed.tsv``,
``rules.tsv``, ``provenance.jsonl``, the question files and KG renderings of the three schemes, the data
card) and of the report (Markdown and plot); Markdown files name the dataset directory and are compared
with that path replaced. The engines this chain is made of are compared with DuckDB by ``bench_ingest_stats.py``,
``bench_mine.py`` and ``bench_build.py``.

Results go to ``benchmarks/results/chain-<triples>.json`` (written after every run); BENCHMARKS.md quotes them.

    .venv/bin/python benchmarks/bench_chain.py [--partitions 8:64m 3:16m] [--triples 20000000]

Runs of other partitionings already in the results file are kept and compared, so the two 70-minute runs
can be made one at a time (``--partitions 8:64m``, later ``--partitions 3:16m``). ``--reexport SPEC``
times ``kgbrink export --out`` alone on the dataset of run SPEC (the code as it is now) and compares the
files with that run's export (key ``reexport`` of the results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from harness import load, measure

OUT = HERE / "out" / "chain"
KGBRINK = str(PROJECT / ".venv" / "bin" / "kgbrink")


def ensure_kg(triples: int, seed: int) -> Path:
    kg = HERE / "out" / f"kg-{triples}"
    manifest = kg / "synth_manifest.json"
    if not manifest.is_file() or json.loads(manifest.read_text()).get("seed") != seed:
        subprocess.run(
            [
                KGBRINK,
                "synth",
                "--out",
                str(kg),
                "--triples",
                str(triples),
                "--seed",
                str(seed),
                "--no-tracking",
            ],
            check=True,
        )
    return kg


def digests(root: Path, dataset: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (relative path -> hex); Markdown files (data card, report)
    with the dataset path replaced by a placeholder."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".md":
            data = data.replace(str(dataset).encode(), b"<dataset>")
        out[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


def chain(kg: Path, triples: int, seed: int, shuffle_partitions: int, max_partition_bytes: str) -> dict:
    work = OUT / str(triples) / f"p{shuffle_partitions}-{max_partition_bytes}"
    dataset = work / "ds"
    shutil.rmtree(work, ignore_errors=True)
    summary_json = work / "run.json"
    command = [
        KGBRINK,
        "run",
        "--dataset",
        str(dataset),
        "--sample-dir",
        str(kg),
        "--json",
        str(summary_json),
        "--no-tracking",
        "--set",
        "spark.master=local[2]",
        "--set",
        f"synth.triples={triples}",
        "--set",
        f"synth.seed={seed}",
        "--set",
        f"spark.conf.spark.sql.shuffle.partitions={shuffle_partitions}",
        "--set",
        f"spark.conf.spark.sql.files.maxPartitionBytes={max_partition_bytes}",
    ]
    record = {"command": " ".join(command), "load_before": load()}
    record.update(measure(command, work / "run.log"))
    record["load_after"] = load()
    summary = json.loads(summary_json.read_text())
    record["timings"] = summary["timings"]
    record["counts"] = summary["counts"]
    variant = dataset / "variants" / "brink"
    record["digests"] = {
        **{f"export/{k}": v for k, v in digests(variant / "export", dataset).items()},
        **{f"report/{k}": v for k, v in digests(variant / "report", dataset).items()},
    }
    return record


def reexport(triples: int, spec: str, shuffle_partitions: int) -> dict:
    """``kgbrink export --out`` again on the dataset of the run ``spec`` (the export step alone, with the
    code as it is now and ``shuffle_partitions``), its files compared with that run's export."""
    shuffle, max_bytes = spec.split(":")
    work = OUT / str(triples) / f"p{shuffle}-{max_bytes}"
    dataset, out = work / "ds", work / "reexport"
    shutil.rmtree(out, ignore_errors=True)
    summary_json = work / "reexport.json"
    command = [
        KGBRINK,
        "export",
        "--dataset",
        str(dataset),
        "--out",
        str(out),
        "--json",
        str(summary_json),
        "--no-tracking",
        "--set",
        "spark.master=local[2]",
        "--set",
        f"spark.conf.spark.sql.shuffle.partitions={shuffle_partitions}",
    ]
    record = {"command": " ".join(command), "load_before": load()}
    record.update(measure(command, work / "reexport.log"))
    record["load_after"] = load()
    record["timings"] = json.loads(summary_json.read_text())["timings"]
    exported = digests(dataset / "variants" / "brink" / "export", dataset)
    again = digests(out, dataset)
    record["files_compared"] = len(exported)
    record["identical_to_the_run"] = exported == again
    record["differing_files"] = sorted(k for k in set(exported) | set(again) if exported.get(k) != again.get(k))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=20_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--partitions",
        nargs="+",
        default=["8:64m", "3:16m"],
        help="SHUFFLE_PARTITIONS:MAX_PARTITION_BYTES per run",
    )
    parser.add_argument(
        "--reexport",
        metavar="SPEC",
        help="only time `kgbrink export` again on the dataset of the run SPEC (e.g. 3:16m) and compare its files with that run's export",
    )
    parser.add_argument("--reexport-partitions", type=int, default=8, help="shuffle partitions of the re-export")
    args = parser.parse_args()
    results = HERE / "results" / f"chain-{args.triples}.json"
    if args.reexport:
        record = json.loads(results.read_text())
        record.setdefault("reexport", {})[args.reexport] = reexport(
            args.triples, args.reexport, args.reexport_partitions
        )
        results.write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record["reexport"][args.reexport], indent=2))
        return
    kg = ensure_kg(args.triples, args.seed)
    record = {
        "machine": f"{platform.machine()}, 2 cores, 24 GiB, Java 17",
        "input_triples": args.triples,
        "command": " ".join(["benchmarks/bench_chain.py", *sys.argv[1:]]),
        "runs": {},
    }
    results.parent.mkdir(parents=True, exist_ok=True)
    if results.is_file():  # runs of other partitionings from an earlier invocation stay and are compared
        earlier = json.loads(results.read_text())["runs"]
        record["runs"] = {k: v for k, v in earlier.items() if k not in args.partitions}
    for spec in args.partitions:
        shuffle, max_bytes = spec.split(":")
        record["runs"][spec] = chain(kg, args.triples, args.seed, int(shuffle), max_bytes)
        print(
            json.dumps(
                {k: v for k, v in record["runs"][spec].items() if k != "digests"},
                indent=2,
            ),
            flush=True,
        )
        first, *others = (run["digests"] for run in record["runs"].values())
        record["files_compared"] = len(first)
        record["identical"] = all(other == first for other in others) if others else None
        record["differing_files"] = sorted(
            {k for other in others for k in set(first) | set(other) if first.get(k) != other.get(k)}
        )
        results.write_text(
            json.dumps(record, indent=2) + "\n"
        )  # after every run: a long benchmark keeps its finished part
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
