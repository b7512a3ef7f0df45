"""``kgbrink refresh`` (issue 26, item 4): a new dump merged into a dataset, with hand-computed changes.

One dataset is built once (module fixture): dump V1 ingested, statistics on train and on valid, a variant
built from train with an imported rule, one score run. Dump V2 is then refreshed into it, and the tests
check that refresh (ids, exact change counts and rows, files not rewritten, statistics, variant and score
run redone), then the same dump again (a no-op) and V3, which changes only the valid split. A copy of the
dataset taken before V2 is refreshed with V2 again, stopped after each kind of write in turn (a dictionary
merge, the triples merge, the change rows, the record, statistics, inside the variant's build, the score
run), and must end equal to it.

V1 (ids in key order: x1 0, x2 1, x3 2, y1 3, y2 4, y3 5, z 6; p 0, q 1, r 2, u 3):
    train  x1 p y1, x1 q y1, x2 p y2, x2 q y2, x3 p y3, x3 q y3, y1 r z, z u x1
    valid  x1 r z
    test   y2 r z
V2: train loses x3 p y3, x3 q y3, z u x1 and gains x4 p y4, x4 q y4, y4 s z; test loses y2 r z and gains
x2 r z; valid is the same. So: train +3 -3 (5 unchanged), valid +0 -0 (1), test +1 -1 (0); new keys
x4 = 7, y4 = 8 (key order), s = 4; retired: x3 and y3 (in no V2 triple; z, x1 and y2 still are) and u.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.cli import main
from kgbrink.core import catalog
from kgbrink.core.delta import description, latest_version, read_table, table_description, table_exists
from kgbrink.core.jobs import REGISTRY, JobContext
from kgbrink.core.session import session_setting
from kgbrink.core.writer import WriterLease, consistent_version
from kgbrink.jobs import build, ingest, mine, refresh, score, stats
from kgbrink.kg import refresh as kg_refresh
from kgbrink.probe import runs as score_runs
from kgbrink.rules.model import AMIE_COLUMNS

V1 = {
    "train": ["x1 p y1", "x1 q y1", "x2 p y2", "x2 q y2", "x3 p y3", "x3 q y3", "y1 r z", "z u x1"],
    "valid": ["x1 r z"],
    "test": ["y2 r z"],
}
V2 = {
    "train": ["x1 p y1", "x1 q y1", "x2 p y2", "x2 q y2", "x4 p y4", "x4 q y4", "y1 r z", "y4 s z"],
    "valid": ["x1 r z"],
    "test": ["x2 r z"],
}
V3 = {**V2, "valid": ["x1 r z", "x2 r y1"]}
E = {"x1": 0, "x2": 1, "x3": 2, "y1": 3, "y2": 4, "y3": 5, "z": 6, "x4": 7, "y4": 8}
P = {"p": 0, "q": 1, "r": 2, "u": 3, "s": 4}
RANKS = [
    "h\tr\tt\tside\trank\tnum_candidates",
    "x1\tq\ty1\ttail\t1\t7",
    "x2\tq\ty2\thead\t2\t7",
    "y1\tr\tz\ttail\t1\t7",
]
SETTINGS = ["mining.splits=[train]"]


def ids(triple: str, split: str) -> tuple:
    h, r, t = triple.split()
    return (E[h], P[r], E[t], split)


def dump(root: Path, version: dict[str, list[str]]) -> dict[str, list[str]]:
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, lines in version.items():
        path = root / f"{split}.tsv"
        path.write_text("".join(line.replace(" ", "\t") + "\n" for line in lines))
        files[split] = [str(path)]
    return files


def run_refresh(spark, config, dataset: Path, splits: dict, **options):
    opts = refresh.RefreshOptions(dataset=str(dataset), format="delimited", splits=splits, **options)
    return refresh.run(JobContext(spark, config), opts)


def decisions(summary) -> dict[tuple[str, str], str]:
    return {(d["kind"], d["name"]): d["action"] for d in summary.extra["downstream"]}


def versions(spark, dataset: Path) -> dict[str, int]:
    """The latest version of every Delta table under ``dataset`` but the writer lease's."""
    tables = [log.parent for log in sorted(dataset.rglob("_delta_log")) if log.parent.name != "_writer"]
    return {str(table.relative_to(dataset)): latest_version(spark, str(table)) for table in tables}


def files_by_row(spark, table: Path, version: int | None = None) -> dict[tuple, str]:
    """``(h, r, t, split) -> the data file holding it`` in ``version`` (default: the latest) of ``table``."""
    frame = read_table(spark, str(table), version).select(*kg_refresh.KEY, F.col("_metadata.file_name"))
    return {tuple(r[:4]): r[4] for r in frame.collect()}


@pytest.fixture(scope="module")
def world(spark, config, work_dir):
    conf = config.with_overrides(SETTINGS)
    root = work_dir / "refresh"
    dataset = root / "ds"
    v1, v2 = dump(root / "v1", V1), dump(root / "v2", V2)
    ingest.run(JobContext(spark, conf), ingest.IngestOptions(dataset=str(dataset), format="delimited", splits=v1))
    for splits in (["train"], ["valid"]):
        stats.run(JobContext(spark, conf), stats.StatsOptions(dataset=str(dataset), splits=splits))
    rules = root / "rules.tsv"
    rules.write_text("\t".join(AMIE_COLUMNS) + "\n" + "?a  p  ?b   => ?a  q  ?b\t1\t1\t1\t1\t1\t1\t?a\n")
    mine.import_rules(JobContext(spark, conf), mine.ImportRulesOptions(tsv=str(rules), dataset=str(dataset)))
    build.build(JobContext(spark, conf), build.BuildOptions(dataset=str(dataset), reuse_rules=True))
    (root / "ranks.tsv").write_text("\n".join(RANKS) + "\n")
    score.run(JobContext(spark, conf), score.ScoreOptions(ranks=str(root / "ranks.tsv"), dataset=str(dataset)))
    shutil.copytree(dataset, root / "base")  # refreshed again, killed after every write
    summary = run_refresh(spark, conf, dataset, v2)
    shutil.copytree(dataset, root / "after_v2")
    return {"conf": conf, "root": root, "dataset": dataset, "v2": v2, "summary": summary}


@pytest.mark.slow
def test_known_keys_keep_their_ids_and_new_keys_are_numbered_after_them(spark, world):
    ds = world["root"] / "after_v2"
    entities = {r["key"]: r["id"] for r in read_table(spark, str(ds / "entities")).collect()}
    relations = {r["key"]: r["id"] for r in read_table(spark, str(ds / "relations")).collect()}
    assert entities == E and relations == P  # x3, y3 and u are retired, not forgotten
    assertDataFrameEqual(
        read_table(spark, str(ds / "triples")), [ids(t, split) for split, lines in V2.items() for t in lines]
    )
    # the dataset of V1 is still there, by time travel
    v1 = read_table(spark, str(ds / "triples"), world["summary"].counts["versions"]["before"]["triples"])
    assertDataFrameEqual(v1, [ids(t, split) for split, lines in V1.items() for t in lines])


@pytest.mark.slow
def test_change_counts_and_rows_are_exact(spark, world):
    summary = world["summary"]
    c = summary.counts
    assert c["triples_added_per_split"] == {"train": 3, "valid": 0, "test": 1}
    assert c["triples_removed_per_split"] == {"train": 3, "valid": 0, "test": 1}
    assert c["triples_unchanged_per_split"] == {"train": 5, "valid": 1, "test": 0}
    assert (c["triples_added"], c["triples_removed"], c["triples_unchanged"]) == (4, 4, 6)
    assert (c["new_entities"], c["new_relations"], c["retired_entities"], c["retired_relations"]) == (2, 1, 2, 1)
    assert c["changed"] is True and summary.extra["changed"] is True and c["triples_changed"] is True
    before, after = c["versions"]["before"]["triples"], c["versions"]["after"]["triples"]
    assert after > before == 0
    added = [("x4 p y4", "train"), ("x4 q y4", "train"), ("y4 s z", "train"), ("x2 r z", "test")]
    removed = [("x3 p y3", "train"), ("x3 q y3", "train"), ("z u x1", "train"), ("y2 r z", "test")]
    expected = [(before, after, "added", *ids(t, s)) for t, s in added]
    expected += [(before, after, "removed", *ids(t, s)) for t, s in removed]
    assertDataFrameEqual(read_table(spark, str(world["root"] / "after_v2" / "changes")), expected)


@pytest.mark.slow
def test_unchanged_rows_are_not_rewritten(spark, world):
    """Every row in both versions is read from the same data file before and after (deleted rows are
    marked by deletion vectors; a file is dropped only when all its rows are gone), and the MERGE copied
    no row."""
    ds, before = world["root"] / "after_v2", world["summary"].counts["versions"]["before"]["triples"]
    rows_then, rows_now = files_by_row(spark, ds / "triples", before), files_by_row(spark, ds / "triples")
    kept = rows_then.keys() & rows_now.keys()
    assert len(kept) == 6 and all(rows_then[row] == rows_now[row] for row in kept)
    merges = [
        h for h in DeltaTable.forPath(spark, str(ds / "triples")).history().collect() if h["operation"] == "MERGE"
    ]
    assert len(merges) == 1
    metrics = merges[0]["operationMetrics"]
    assert (metrics["numTargetRowsCopied"], metrics["numTargetRowsInserted"], metrics["numTargetRowsDeleted"]) == (
        "0",
        "4",
        "4",
    )


@pytest.mark.slow
def test_statistics_variant_and_score_redone_only_where_their_inputs_changed(spark, world):
    summary, ds = world["summary"], world["root"] / "after_v2"
    after = summary.counts["versions"]["after"]["triples"]
    acted = decisions(summary)
    assert acted[("stats", "train")] == "recompute" and acted[("stats", "valid")] == "skip"
    assert acted[("variant", "brink")] == "rebuild"
    assert [a for (kind, _), a in acted.items() if kind == "score"] == ["rescore"]
    assert (summary.counts["stats_recomputed"], summary.counts["variants_rebuilt"], summary.counts["scores_rerun"]) == (
        1,
        1,
        1,
    )
    for table in catalog.STATS_TABLES:
        assert table_description(spark, str(ds / "stats" / "train" / table)).endswith(f"of triples version {after}")
        assert table_description(spark, str(ds / "stats" / "valid" / table)).endswith("of triples version 0")
    # the variant is V2's: its complete KG is V2's train split, and x4 q y4 can be removed now
    assertDataFrameEqual(
        read_table(spark, str(ds / "variants" / "brink" / "complete")), [ids(t, "train") for t in V2["train"]]
    )
    removed = read_table(spark, str(ds / "variants" / "brink" / "removed")).select("h", "r", "t")
    assertDataFrameEqual(
        removed, [ids(f"{x} q {y}", "train")[:3] for x, y in (("x1", "y1"), ("x2", "y2"), ("x4", "y4"))]
    )
    # the score run again, in a run directory of its own: x1, y1 (7 candidates) and z keep their ids
    work = next(d for d in summary.extra["downstream"] if d["kind"] == "score")["work_dir"]
    record = score_runs.parse(description(spark, str(ds / "scores" / Path(work).name / "results")))
    assert record["inputs"]["entity_popularity"]["version"] == latest_version(
        spark, str(ds / "stats" / "train" / "entity_popularity")
    )
    results = read_table(spark, work + "/results").filter(F.col("metric") == "mrr")
    assert results.select("value").first()[0] == pytest.approx((1 + 1 / 2 + 1) / 3)


@pytest.mark.slow
def test_the_same_dump_again_is_a_no_op_that_says_so(spark, world, tmp_path):
    dataset, conf = world["dataset"], world["conf"]
    before = versions(spark, dataset)
    out = tmp_path / "again.json"
    conf_args = ["--conf", conf.source] + [a for item in conf.overrides for a in ("--set", item)]
    splits = [a for s, files in world["v2"].items() for a in ("--split", f"{s}={files[0]}")]
    args = ["refresh", *conf_args, "--dataset", str(dataset), "--format", "delimited", *splits, "--json", str(out)]
    assert main([*args, "--no-tracking"]) == 0
    report = json.loads(out.read_text())
    assert report["changed"] is False and report["counts"]["changed"] is False and report["status"] == "ok"
    assert report["counts"]["tables_written"] == [] and report["counts"]["triples_added"] == 0
    assert {d["action"] for d in report["downstream"]} == {"skip"}
    assert versions(spark, dataset) == before  # no table got a new version


@pytest.mark.slow
def test_a_change_in_one_split_redoes_only_what_reads_that_split(spark, world):
    dataset, conf = world["dataset"], world["conf"]
    summary = run_refresh(spark, conf, dataset, dump(world["root"] / "v3", V3))
    c = summary.counts
    assert (c["triples_added_per_split"], c["triples_removed_per_split"]) == (
        {"train": 0, "valid": 1, "test": 0},
        {"train": 0, "valid": 0, "test": 0},
    )
    assert (c["new_entities"], c["new_relations"], c["retired_entities"]) == (0, 0, 0)
    acted = decisions(summary)
    assert acted[("stats", "valid")] == "recompute" and acted[("stats", "train")] == "skip"
    assert acted[("variant", "brink")] == "skip"  # built from train only
    assert [a for (kind, _), a in acted.items() if kind == "score"] == ["skip"]  # entities and train stats as read
    reasons = {(d["kind"], d["name"]): d["reason"] for d in summary.extra["downstream"]}
    assert "are those of version" in reasons[("stats", "train")]


class Killed(Exception):
    """A refresh stopped after a write (as if its process were killed there)."""


def _kill_at(monkeypatch, point: str) -> list[WriterLease]:
    """Stop the next refresh after the write ``point``, leaving its writer lease held (not released) as a
    killed process would; returns the leases it held, for :func:`_dead`."""
    held: list[WriterLease] = []

    def stop(name):
        if name == point or (point.endswith(":") and name.startswith(point)):
            raise Killed(name)

    def keep(lease):
        lease._stop_renewing()
        held.append(lease)

    monkeypatch.setattr(refresh, "after_write", stop)
    monkeypatch.setattr(WriterLease, "release", keep)
    if point == "variant:brink:questions":  # inside the build, after `remove` wrote its tables
        broken = dataclasses.replace(REGISTRY["questions"], run=lambda ctx, opts: stop(point))
        monkeypatch.setitem(REGISTRY, "questions", broken)
    return held


def _dead(spark, held: list[WriterLease]) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    for lease in held:
        lease._update(lease.owner, {"pid": dead.pid})


def _tables(dataset: Path) -> list[str]:
    skip = ("_writer", "scores")
    return sorted(
        str(log.parent.relative_to(dataset))
        for log in dataset.rglob("_delta_log")
        if not str(log.parent.relative_to(dataset)).startswith(skip)
    )


@pytest.mark.slow
def test_a_refresh_killed_after_any_write_leaves_v1_readable_and_a_rerun_converges(spark, world, monkeypatch):
    """Stopped after each write in turn (each rerun starting from what the previous one left), then run
    to the end with other shuffle partitions: every table equals the uninterrupted refresh's."""
    conf, base = world["conf"], world["root"] / "base"
    v1 = {ids(t, s) for s, lines in V1.items() for t in lines}
    points = ["entities", "triples", "changes", "record", "stats:train", "variant:brink:questions", "score:"]
    for point in points:
        with monkeypatch.context() as m:
            held = _kill_at(m, point)
            with pytest.raises(Killed):
                run_refresh(spark, conf, base, world["v2"])
        _dead(spark, held)
        recorded = consistent_version(spark, str(base / "triples"))
        if point in points[:3]:  # before the record moved: readers still see V1
            assert {tuple(r) for r in read_table(spark, str(base / "triples"), recorded).collect()} == v1
    with session_setting(spark, "spark.sql.shuffle.partitions", "7"):
        final = run_refresh(spark, conf, base, world["v2"])
    assert final.counts["triples_added"] == 0  # the killed runs had merged V2 already
    done = world["root"] / "after_v2"
    assert _tables(base) == _tables(done)
    for table in _tables(done):
        assertDataFrameEqual(read_table(spark, str(base / table)), read_table(spark, str(done / table)))
    for name in ("complete.tsv", "incomplete.tsv", "removed.tsv", "provenance.jsonl"):
        release = Path("variants/brink/export") / name
        assert (base / release).read_bytes() == (done / release).read_bytes()

    # the score run of each: the same results
    def current_results(dataset):
        runs = [d for d in (dataset / "scores").iterdir() if table_exists(spark, str(d / "results"))]
        newest = max(
            runs, key=lambda d: score_runs.parse(description(spark, f"{d}/results"))["inputs"]["entities"]["version"]
        )
        return read_table(spark, str(newest / "results"))

    assertDataFrameEqual(current_results(base), current_results(done))
    assert not (base / "variants" / "brink" / refresh.PENDING).exists()


def test_refreshing_a_dataset_without_a_complete_ingest_fails_and_leaves_nothing(spark, config, tmp_path):
    with pytest.raises(refresh.RefreshError, match="no complete ingest to refresh"):
        run_refresh(spark, config, tmp_path / "none", dump(tmp_path / "v1", V1))
    assert not (tmp_path / "none").exists()


def test_rules_of_a_rebuild_are_got_as_the_variant_got_them():
    ds, old = "/d/new", "/d/old"
    mined, imported = "kgbrink mine on train", "imported from rules.tsv"
    assert refresh.rules_for_rebuild(f"rules of {ds}/rules v3", ds, ds, mined) == {}
    assert refresh.rules_for_rebuild(f"rules of {old}/rules v3", old, ds, imported) == {"reuse_rules": True}
    assert refresh.rules_for_rebuild("rules of /elsewhere/rules v0", ds, ds, mined) == {"rules": "/elsewhere/rules"}
    assert refresh.rules_for_rebuild(None, None, ds, imported) == {}
