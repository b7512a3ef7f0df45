"""Benchmark: `kgbrink build` (remove, verify, questions, export, report) with a DuckDB peer of the
removal and answer completion in the same run, checked for identical results.

Data: BRINK Family (``../shared/reference/brink-family/facts.tsv``, 17,615 triples) with its 145 rules
(the regression fixture ``tests/fixtures/rules/brink-family.tsv``, imported, not mined), and optionally
any ingested dataset with a rules table (``--dataset PATH``, e.g. ``data/datasets/sample`` after
``make run``).

1. kgbrink: ``kgbrink build --reuse-rules`` in its own process (conf/local.yaml, ``local[2]``, no
   tracking) with its wall time and peak memory (:func:`harness.measure`); per-step timings from its JSON summary.
2. DuckDB (2 threads), on the same grounding sample (the variant's ``groundings`` table) and complete KG:
   the one-pass reference selection in SQL, the maximal extension as the sequential greedy pass in
   priority order (conflict degree, the stored tie-break ``priority``, content order), which selects exactly what kgbrink's
   Luby-style rounds select; the incomplete KG (anti-join) and the answer sets of kgbrink's questions.
3. Checks: the same removed triples in both modes, the same incomplete KG size, the same answer sets.

    .venv/bin/python benchmarks/bench_build.py [--dataset data/datasets/sample --splits train,valid,test]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from duckdb_mine_peer import delta_files
from harness import load, measure

OUT = HERE / "out" / "build"
RESULTS = HERE / "results" / "build.json"
KGBRINK = str(PROJECT / ".venv" / "bin" / "kgbrink")
REFERENCE = PROJECT.parent / "shared" / "reference"


def family_dataset() -> Path:
    dataset = OUT / "family"
    if not (dataset / "rules" / "_delta_log").is_dir():
        facts = REFERENCE / "brink-family" / "facts.tsv"
        subprocess.run(
            [
                KGBRINK,
                "ingest",
                "--dataset",
                str(dataset),
                "--format",
                "delimited",
                "--split",
                f"train={facts}",
                "--quote",
                '"',
                "--no-tracking",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        rules = PROJECT / "tests" / "fixtures" / "rules" / "brink-family.tsv"
        subprocess.run(
            [KGBRINK, "import-rules", "--dataset", str(dataset), "--tsv", str(rules), "--no-tracking"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return dataset


def peer(variant: Path, threads: int) -> dict:
    """The DuckDB peer on the variant's grounding sample and complete KG; results and seconds."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")

    def files(table: str) -> str:
        return "[" + ", ".join(f"'{f}'" for f in delta_files(variant / table)) + "]"

    started = time.perf_counter()
    con.execute(
        f"CREATE TABLE g AS SELECT row_number() OVER (ORDER BY rule_id, sample_hash, head, body) AS gid, * FROM read_parquet({files('groundings')})"
    )
    con.execute(
        "CREATE TABLE edges AS SELECT DISTINCT a.gid AS a, b.gid AS b FROM g a JOIN (SELECT gid, unnest(body) AS triple FROM g) b ON a.head = b.triple WHERE a.gid <> b.gid"
    )
    reference = {
        r[0]
        for r in con.execute("SELECT gid FROM g WHERE head NOT IN (SELECT DISTINCT unnest(body) FROM g)").fetchall()
    }
    pairs = con.execute("SELECT a, b FROM edges UNION SELECT b, a FROM edges").fetchall()
    neighbours: dict[int, set[int]] = {}
    for a, b in pairs:
        neighbours.setdefault(a, set()).add(b)
    order = con.execute("SELECT gid, priority FROM g").fetchall()
    chosen, blocked = set(reference), {n for g in reference for n in neighbours.get(g, ())}
    for gid, _ in sorted(order, key=lambda row: (len(neighbours.get(row[0], ())), row[1], row[0])):
        if gid not in chosen and gid not in blocked:
            chosen.add(gid)
            blocked |= neighbours.get(gid, set())
    con.execute("CREATE TABLE chosen(gid BIGINT)")
    con.executemany("INSERT INTO chosen VALUES (?)", [(g,) for g in sorted(chosen)])
    removed = con.execute(
        "SELECT DISTINCT head.h, head.r, head.t FROM g JOIN chosen USING (gid) ORDER BY 1, 2, 3"
    ).fetchall()
    con.execute(
        "CREATE TABLE removed AS SELECT DISTINCT head.h AS h, head.r AS r, head.t AS t FROM g JOIN chosen USING (gid)"
    )
    reference_removed = con.execute(
        f"SELECT count(DISTINCT head) FROM g WHERE gid IN ({','.join(map(str, reference)) or 'NULL'})"
    ).fetchone()[0]
    complete = f"read_parquet({files('complete')})"
    incomplete = con.execute(f"SELECT count(*) FROM {complete} c ANTI JOIN removed USING (h, r, t)").fetchone()[0]
    answers = con.execute(
        f"""WITH q AS (SELECT id, direction, topic, r FROM read_parquet({files("questions")})),
                 kg AS (SELECT DISTINCT h, r, t FROM {complete})
            SELECT q.id, list_sort(list(CASE WHEN q.direction = 'forward' THEN kg.t ELSE kg.h END))
            FROM q JOIN kg ON kg.r = q.r AND ((q.direction = 'forward' AND kg.h = q.topic) OR (q.direction = 'inverse' AND kg.t = q.topic))
            GROUP BY q.id"""
    ).fetchall()
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "removed": removed,
        "reference_removed": reference_removed,
        "incomplete": incomplete,
        "answers": dict(answers),
    }


def kgbrink_answers(variant: Path) -> dict:
    import duckdb

    files = "[" + ", ".join(f"'{f}'" for f in delta_files(variant / "questions")) + "]"
    return dict(duckdb.connect().execute(f"SELECT id, answers FROM read_parquet({files})").fetchall())


def kgbrink_removed(variant: Path) -> list:
    import duckdb

    files = "[" + ", ".join(f"'{f}'" for f in delta_files(variant / "removed")) + "]"
    return duckdb.connect().execute(f"SELECT h, r, t FROM read_parquet({files}) ORDER BY 1, 2, 3").fetchall()


def bench(name: str, dataset: Path, splits: str) -> dict:
    summary_json = OUT / f"build-{name}.json"
    command = [
        KGBRINK,
        "build",
        "--dataset",
        str(dataset),
        "--reuse-rules",
        "--json",
        str(summary_json),
        "--no-tracking",
        "--set",
        "spark.master=local[2]",
        "--set",
        f"mining.splits=[{splits}]",
    ]
    record = {"dataset": str(dataset), "command": " ".join(command), "load_before": load()}
    record["kgbrink"] = measure(command, OUT / f"build-{name}.log")
    summary = json.loads(summary_json.read_text())
    record["kgbrink"]["timings"] = summary["timings"]
    record["kgbrink"]["counts"] = {k: summary["counts"][k] for k in ("remove", "verify", "questions")}
    # the peer's share of the work: selection, removed/incomplete/provenance tables, question records
    core = sum(summary["timings"][k] for k in ("remove.select", "remove.write", "questions.questions"))
    record["kgbrink"]["remove_and_questions_seconds"] = round(core, 1)
    variant = dataset / "variants" / "brink"
    duck = peer(variant, threads=2)
    remove = summary["counts"]["remove"]
    record["duckdb"] = {
        "seconds": duck["seconds"],
        "removed_triples": len(duck["removed"]),
        "reference_removed_triples": duck["reference_removed"],
        "incomplete_triples": duck["incomplete"],
    }
    record["same_removed_triples"] = [tuple(x) for x in duck["removed"]] == [tuple(x) for x in kgbrink_removed(variant)]
    record["same_reference_count"] = duck["reference_removed"] == remove["reference_removed_triples"]
    record["same_incomplete_size"] = duck["incomplete"] == remove["incomplete_triples"]
    record["same_answers"] = {k: list(v) for k, v in duck["answers"].items()} == {
        k: list(v) for k, v in kgbrink_answers(variant).items()
    }
    record["ratio_kgbrink_over_duckdb"] = round(core / duck["seconds"], 1)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="also benchmark this ingested dataset (it needs a rules table)")
    parser.add_argument("--splits", default="train,valid,test", help="KG splits of --dataset")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    records = {
        "machine": f"{platform.machine()}, 2 cores, 24 GiB, Java 17",
        "family": bench("family", family_dataset(), "train"),
    }
    if args.dataset:
        records[Path(args.dataset).name] = bench(Path(args.dataset).name, Path(args.dataset).resolve(), args.splits)
    records["command"] = " ".join(["benchmarks/bench_build.py", *sys.argv[1:]])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(records, indent=2) + "\n")
    print(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
