"""``kgbrink release``: every configuration loads with the Hub's loader and the Croissant reader, with the
rows the dataset holds; a second release is a no-op, a changed setting rebuilds only its benchmark, and the
files do not depend on the partitioning."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from kgbrink.core import publish
from kgbrink.core.console import Progress, clock
from kgbrink.core.jobs import JobContext
from kgbrink.jobs import ingest, release, synth
from kgbrink.release import benchmarks, layout
from kgbrink.storage import staging

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _small(config, **sections):
    """``config`` with the release's builders at test size. These tests check the release (its files,
    manifest, card, Croissant, fingerprints), which does not depend on what the builders compute, so the
    costly parts are cut (CI time): seed graphs of 4 nodes (3 sampling rounds, not 9), and OKGQA's RS and
    ED only (RR and ER on the whole KG took 3/4 of its time; tests/test_okgqa_sweep.py checks all four
    there against the per-graph definitions, and `make test-cluster` releases with all four)."""
    changes = {
        "mcq": dataclasses.replace(config.mcq, n_triples=30),
        "seed_graphs": dataclasses.replace(config.seed_graphs, n_samples=8, n_nodes=4),
        "gt_questions": dataclasses.replace(config.gt_questions, per_type=1),
        "question_graphs": dataclasses.replace(config.question_graphs, top_nodes=200, max_triples=1000),
        "perturbation": dataclasses.replace(config.perturbation, levels=[0.5, 1.0], methods=["RS", "ED"]),
    }
    changes.update(sections)
    return dataclasses.replace(config, **changes)


@pytest.fixture(scope="module")
def released(spark, config, work_dir):
    """A generated KG of 8,000 triples, ingested and released with every benchmark: ``(config, dataset,
    root, first summary, second summary)``. Rules of 2 atoms only (5 rules, among them the planted
    symmetry, inversion and hierarchy; 124 triples removed): 3-atom mining took 3/4 of the brink build here and is
    checked by tests/test_mining.py, the Family builds and `make test-cluster`'s release (CI time)."""
    base = work_dir / "release"
    small = _small(
        dataclasses.replace(config, synth=dataclasses.replace(config.synth, triples=8000, seed=11)),
        mining=dataclasses.replace(config.mining, min_initial_support=40, max_atoms=2),
    )
    synth.run(JobContext(spark, small), synth.SynthOptions(out=str(base / "kg")))
    dataset = str(base / "dataset")
    ingest.run(
        JobContext(spark, small), ingest.IngestOptions(dataset=dataset, format="wikidata5m", input=str(base / "kg"))
    )
    root = str(base / "out")
    _synthkgqa_questions(spark, small, dataset, base)
    _okgqa_questions(spark, dataset, base)
    files = _input_files(dataset)
    first = release.run(JobContext(spark, small), release.ReleaseOptions(dataset=dataset, out=root, **files))
    second = release.run(JobContext(spark, small), release.ReleaseOptions(dataset=dataset, out=root, **files))
    return small, dataset, root, first, second


def _input_files(dataset: str) -> dict:
    """The fixture's release input files (``--questions``, ``--okgqa-questions``), beside its dataset."""
    base = Path(dataset).parent
    return {"questions": str(base / "questions.jsonl"), "okgqa_questions": str(base / "okgqa.jsonl")}


def _synthkgqa_questions(spark, config, dataset: str, base: Path) -> str:
    """Questions planted in the KG (one per type) with a text each, the file ``release --questions`` reads:
    predict --release asks them (synthkgqa-answer)."""
    planted = base / "planted.jsonl"
    JobContext(spark, config).run("gt-questions", dataset=dataset, generate=True, name="planted", export=str(planted))
    records = [json.loads(line) for line in planted.read_text().splitlines()]
    target = base / "questions.jsonl"
    target.write_text(
        "".join(
            json.dumps({**r, "split": "test", "question": f"Which entity answers {r['id']}?"}) + "\n" for r in records
        )
    )
    return str(target)


def _okgqa_questions(spark, dataset: str, base: Path) -> str:
    """Three OKGQA questions on the ends of the KG's first triples (``release --okgqa-questions``)."""
    entities = {r["id"]: r["key"] for r in spark.read.format("delta").load(f"{dataset}/entities").collect()}
    triples = spark.read.format("delta").load(f"{dataset}/triples").orderBy("h", "r", "t").limit(3).collect()
    lines = [
        {
            "qid": f"q{i}",
            "entities": [entities[row["h"]], entities[row["t"]]],
            "question": f"How are {row['h']} and {row['t']} related?",
        }
        for i, row in enumerate(triples)
    ]
    target = base / "okgqa.jsonl"
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(target)


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "release.json").read_text())


def test_every_config_loads_with_the_hub_loader_and_croissant(released, tmp_path):
    import datasets
    import mlcroissant

    _, _, root, first, _ = released
    folder = Path(root) / "v1"
    assert first.extra["rebuilt"] == [b for b in layout.BENCHMARKS if b != "results"]  # no predict scores here
    manifest = _manifest(folder)
    names = {c["name"] for c in manifest["configs"]}
    assert {
        "kg_triples",
        "brink_complete",
        "brink_questions",
        "probe_entity_popularity",
        "synthkgqa_questions",
    } <= names
    assert {"synthkgqa_question_graphs", "probekgc_questions", "okgqa_perturbation_log", "okgqa_kg_similarity"} <= names
    for config in manifest["configs"]:
        # a cache of this run's own: the default one (~/.cache/huggingface) is keyed by the folder name "v1"
        # and the file names, so it handed back an earlier run's rows
        loaded = datasets.load_dataset(str(folder), config["name"], cache_dir=str(tmp_path / "hf"))
        assert {s: loaded[s].num_rows for s in loaded} == config["rows"], config["name"]
        for split in loaded:
            assert list(loaded[split].features) == [f[0] for f in config["fields"]], config["name"]
    croissant = mlcroissant.Dataset(str(folder / "croissant.json"))
    assert not croissant.metadata.issues.errors and not croissant.metadata.issues.warnings
    for config in manifest["configs"]:
        for record_set in [config["name"]] + ([config["name"] + "_jsonl"] if config["jsonl"] else []):
            records = list(croissant.records(record_set))
            if any(name == "split" for name, _ in config["fields"]):  # the rows' own split column (Table D2)
                assert len(records) == sum(config["rows"].values()), record_set
            else:  # the split from the file name
                assert dict(Counter(r[f"{record_set}/split"].decode() for r in records)) == config["rows"], record_set
    report = (folder / "report" / "report.md").read_text()
    assert "(Table 1)" in report and "(Table D2)" in report and "Statistics (ProbeKGC README)" in report
    assert (folder / "report" / "popularity.png").stat().st_size and (
        folder / "report" / "similarity.png"
    ).stat().st_size
    sums = dict(reversed(line.split("  ")) for line in (folder / "SHA256SUMS").read_text().splitlines())
    on_disk = sorted(  # not Hadoop's local .crc files
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")
    )
    assert sorted(sums) == [p for p in on_disk if p not in ("SHA256SUMS", staging.MANIFEST)]
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    # the manifest of `kgbrink stage`: every other file with its size and SHA-256 (`kgbrink fetch` reads it)
    staged = staging.Manifest.from_json((folder / staging.MANIFEST).read_text(), staging.MANIFEST)
    assert staged.version == "v1" and sorted(staged.files) == [p for p in on_disk if p != staging.MANIFEST]
    for name, entry in staged.files.items():
        data = (folder / name).read_bytes()
        assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest()), name


def test_tables_hold_the_dataset_by_key(spark, released):
    import pyarrow.parquet as parquet

    _, dataset, root, _, _ = released
    folder = Path(root) / "v1"
    triples = spark.read.format("delta").load(f"{dataset}/triples")
    entities = spark.read.format("delta").load(f"{dataset}/entities")
    relations = spark.read.format("delta").load(f"{dataset}/relations")
    key = {r["id"]: r["key"] for r in entities.collect()}
    rel = {r["id"]: r["key"] for r in relations.collect()}
    expected = {(key[r["h"]], rel[r["r"]], key[r["t"]], r["split"]) for r in triples.collect()}
    got = set()
    for split in ("train", "valid", "test"):
        for path in sorted((folder / "kg" / "triples").glob(f"{split}-*.parquet")):
            table = parquet.read_table(path).to_pylist()
            got |= {(row["h"], row["r"], row["t"], split) for row in table}
    assert got == expected
    stats = parquet.read_table(next((folder / "probe" / "entity_popularity").glob("*.parquet"))).to_pylist()
    assert sum(row["degree"] for row in stats) == 2 * triples.where(F.col("split") == "train").count()
    assert all(row["entity"] in key.values() for row in stats)


def test_predict_asks_a_release_the_prompts_of_its_dataset_and_scores_them(spark, released, work_dir):
    """kgbrink predict --release (issue 58): ProbeKGC and BRINK questions read from the published files give
    the very prompts (call ids) the dataset's tables give; a model answering the published gold scores 1.0.
    The dataset's own runs do not score (no predict/results: the other tests' releases stay as they are);
    before the tests that change the dataset's tables."""
    import pandas as pd

    from kgbrink.core.typed import ConfigError
    from kgbrink.evaluation.releases import ReleaseInputError
    from tests.llm_server import LlmServer
    from tests.test_predict_synthkgqa import writer

    small, dataset, root, first, _ = released
    folder = Path(root) / (Path(root) / "LATEST").read_text().strip()
    assert folder.name == first.extra["version"]  # the dataset's tables are still those it released
    manifest = _manifest(folder)

    def published(config: str) -> pd.DataFrame:
        (entry,) = [c for c in manifest["configs"] if c["name"] == config]
        return pd.concat(pd.read_parquet(folder / f) for files in entry["files"].values() for f in files)

    letters = {r.prompt: r.answer for r in published("probekgc_questions_text").itertuples()}
    answers = {r.question: "\n".join(r.answers) for r in published("brink_questions_text_label").itertuples()}

    def letter(body):
        return {"content": letters[body["messages"][-1]["content"]]}

    def reader(body):
        text = body["messages"][-1]["content"]
        return {"content": next(a for q, a in answers.items() if f"Question:\n{q}\n" in text)}

    def plain(body):  # an answer of the question's own words: the same text for the same prompt
        return {"content": "Answer: {" + body["messages"][-1]["content"][-40:].strip() + "}."}

    ctx = JobContext(spark, small)
    answers_kept = str(work_dir / "release" / "answers")
    okgqa_file = str(Path(dataset).parent / "okgqa.jsonl")
    with LlmServer({"letter": letter, "reader": reader, "plain": plain, "writer": writer}) as server:
        common = {"base_url": server.base_url, "score": True}
        runs = {}
        for benchmark, model, extra, own_extra in (
            ("probekgc", "letter", {}, {}),
            ("brink", "reader", {"context": "none"}, {}),
            ("synthkgqa-answer", "plain", {"context": "question_graph"}, {}),
            ("synthkgqa-answer", "plain", {"context": "sp"}, {}),
            ("okgqa", "plain", {"context": "subgraph", "score": False}, {"questions": okgqa_file}),
            ("synthkgqa", "writer", {}, {"score": True}),
        ):
            own = ctx.run(
                "predict",
                benchmark=benchmark,
                model=model,
                dataset=dataset,
                **common | extra | {"score": False} | own_extra,
                name=small.variant.name if benchmark == "brink" else "release",
            )
            runs[f"{benchmark}:{extra.get('context')}"] = (
                own,
                ctx.run(
                    "predict", benchmark=benchmark, model=model, release=root, dataset=answers_kept, **common | extra
                ),
            )
        with pytest.raises(ConfigError, match="has no OKGQA question set"):
            bare = json.loads((folder / "release.json").read_text())
            bare["configs"] = [c for c in bare["configs"] if not c["name"].startswith("okgqa_questions")]
            copy = work_dir / "release" / "bare"
            copy.mkdir(parents=True, exist_ok=True)
            (copy / "release.json").write_text(json.dumps(bare))
            ctx.run(
                "predict",
                benchmark="okgqa",
                model="plain",
                release=str(copy),
                dataset=answers_kept,
                base_url=server.base_url,
            )
        with pytest.raises(ConfigError, match="--context none only"):
            ctx.run(
                "predict",
                benchmark="brink",
                model="reader",
                release=root,
                context="oracle",
                dataset=answers_kept,
                base_url=server.base_url,
            )
    for benchmark, (own, from_release) in runs.items():
        ids = [
            {r.call_id for r in spark.read.format("delta").load(s.outputs["predict_prompts"].path).collect()}
            for s in (own, from_release)
        ]
        # OKGQA: a level-0 graph is one prompt of every method's, asked once (one call id)
        assert ids[0] == ids[1] and 0 < len(ids[0]) <= from_release.counts["prompts"], benchmark
        assert own.counts["prompts"] == from_release.counts["prompts"], benchmark
        assert from_release.params["release"] == str(folder) and "results" not in own.outputs
    for context in ("question_graph", "sp"):  # each question scored alike (a planted question's split: train)
        own, from_release = runs[f"synthkgqa-answer:{context}"]
        scored = [
            {
                r["id"]: r.asDict()
                for r in spark.read.format("delta")
                .load(s.outputs["synthkgqa_answers"].path)
                .drop("split", "run")
                .collect()
            }
            for s in (own, from_release)
        ]
        assert scored[0] == scored[1] and len(scored[0]) == own.counts["questions"] > 0, context
    # the written questions validated on the release's KG as on the dataset's: the same question set
    own, from_release = runs["synthkgqa:None"]
    sets = [
        sorted(
            tuple(r)
            for r in spark.read.format("delta")
            .load(s.extra["gt_questions"]["gt_questions"]["path"])
            .drop("id")
            .collect()
        )
        for s in (own, from_release)
    ]
    assert sets[0] == sets[1] and len(sets[0]) == own.counts["gt_questions"] > 0
    accuracy = {
        r["metric"]: r["value"] for r in runs["probekgc:None"][1].results if r["metric"].startswith("accuracy.")
    }
    assert accuracy and set(accuracy.values()) == {1.0}
    brink_scores = {r["metric"]: r["value"] for r in runs["brink:none"][1].results}
    assert brink_scores["hits_at_any"] == brink_scores["f1"] == brink_scores["hits_at_hard"] == 1.0
    with pytest.raises(ReleaseInputError, match="no config brink_questions_private"):
        broken = json.loads((folder / "release.json").read_text())
        broken["configs"] = [c for c in broken["configs"] if c["name"] != "brink_questions_private_id"]
        copy = work_dir / "release" / "broken"
        copy.mkdir(parents=True, exist_ok=True)
        (copy / "release.json").write_text(json.dumps(broken))
        ctx.run(
            "predict",
            benchmark="brink",
            model="reader",
            release=str(copy),
            scheme="private_id",
            dataset=answers_kept,
            base_url="http://127.0.0.1:9/v1",
        )


def test_a_second_release_is_a_no_op_and_a_changed_setting_rebuilds_only_its_benchmark(spark, released):
    small, dataset, root, _, second = released
    assert second.extra["version"] == "v1" and second.extra["rebuilt"] == []
    assert (Path(root) / "LATEST").read_text().strip() == "v1"
    changed = dataclasses.replace(small, mcq=dataclasses.replace(small.mcq, seed=small.mcq.seed + 1))
    timings = json.loads((Path(root) / layout.TIMINGS).read_text())
    assert sorted(timings) == sorted(b for b in layout.BENCHMARKS if b != "results") and timings["probekgc"] > 0
    shown = io.StringIO()
    third = release.run(
        JobContext(spark, changed, progress=Progress(shown)),
        release.ReleaseOptions(dataset=dataset, out=root, **_input_files(dataset)),
    )
    assert third.extra["version"] == "v2" and third.extra["rebuilt"] == ["probekgc"]
    left = f"about {clock(timings['probekgc'])} left at the times of the last release that built them"
    assert [line.strip() for line in shown.getvalue().splitlines() if "left at" in line] == [left]
    assert json.loads((Path(root) / layout.TIMINGS).read_text())["brink"] == timings["brink"]
    assert (Path(root) / "LATEST").read_text().strip() == "v2"
    v1, v2 = (_manifest(Path(root) / v) for v in ("v1", "v2"))
    assert v2["benchmarks"]["brink"]["fingerprint"] == v1["benchmarks"]["brink"]["fingerprint"]
    sums = [
        dict(reversed(line.split("  ")) for line in (Path(root) / v / "SHA256SUMS").read_text().splitlines())
        for v in ("v1", "v2")
    ]
    for name, digest in sums[0].items():
        if not name.startswith(("probekgc/", "README", "croissant", "release", "report/")):
            assert sums[1][name] == digest, name
    assert any(sums[1][n] != d for n, d in sums[0].items() if n.startswith("probekgc/questions/"))


def test_a_forced_release_elsewhere_gives_the_same_bytes(spark, released, work_dir):
    """Also when its benchmarks are built at once (release.parallel), each in its own thread and session."""
    small, dataset, root, _, _ = released
    subset = dataclasses.replace(
        small, release=dataclasses.replace(small.release, benchmarks=["kg", "probe"], parallel=2)
    )
    other = str(work_dir / "release" / "forced")
    forced = release.run(JobContext(spark, subset), release.ReleaseOptions(dataset=dataset, out=other, force=True))
    assert forced.extra["reused_from_dataset"] == []  # the statistics computed again, though current
    for benchmark in ("kg", "probe"):
        for path in sorted((Path(root) / "v1" / benchmark).rglob("*.parquet")):
            twin = Path(other) / "v1" / path.relative_to(Path(root) / "v1")
            assert twin.read_bytes() == path.read_bytes(), path


def test_a_damaged_previous_release_fails_naming_the_file(spark, released):
    small, dataset, root, _, _ = released
    latest = (Path(root) / "LATEST").read_text().strip()
    damaged = next((Path(root) / latest / "kg" / "entities").glob("*.parquet"))
    original = damaged.read_bytes()
    changed = dataclasses.replace(small, mcq=dataclasses.replace(small.mcq, seed=small.mcq.seed + 7))
    checksum = damaged.with_name(f".{damaged.name}.crc")  # the local file system's own check
    crc = checksum.read_bytes()
    try:
        damaged.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        options = release.ReleaseOptions(dataset=dataset, out=root, **_input_files(dataset))  # rebuilds probekgc
        with pytest.raises(OSError, match=f"could not copy .*{latest}/kg/entities/.*Checksum error"):
            release.run(JobContext(spark, changed), options)
        checksum.unlink()  # a store without checksums (s3a): the release's SHA-256 check finds it
        with pytest.raises(layout.ManifestError, match=f"kg/entities/.*SHA-256 is not the one .*{latest}/SHA256SUMS"):
            release.run(JobContext(spark, changed), options)
    finally:
        damaged.write_bytes(original)
        checksum.write_bytes(crc)
    assert (Path(root) / "LATEST").read_text().strip() == latest  # the failed release is not the current one


def test_the_time_left_comes_from_trusted_timings_only():
    assert layout.read_timings('{"brink": 95.2, "kg": 13}') == {"brink": 95.2, "kg": 13.0}
    assert layout.time_left({"brink": 95.2, "kg": 13.0}, ["kg", "brink"]) == 108.2
    assert layout.time_left({"brink": 95.2}, ["kg", "brink"]) is None  # kg never timed: no estimate
    assert layout.time_left({}, []) == 0
    for text in (None, "", "[1]", "{", '{"brink": -1}', '{"brink": "95"}', '{"x": 1}', '{"kg": true}', '{"kg": 1e999}'):
        assert layout.read_timings(text) == {}, text


@given(
    st.dictionaries(st.sampled_from(layout.BENCHMARKS), st.floats(0, 1e6)), st.lists(st.sampled_from(layout.BENCHMARKS))
)
def test_the_time_left_is_the_sum_of_the_known_times(timings, todo):
    assert layout.read_timings(json.dumps(timings)) == timings
    left = layout.time_left(timings, todo)
    assert left == (sum(timings[b] for b in todo) if set(todo) <= set(timings) else None)


def test_untrusted_latest_and_manifests_fail_naming_the_field(tmp_path):
    assert layout.latest_version(None, "x/LATEST") is None
    assert layout.latest_version("v12\n", "x/LATEST") == "v12"
    for text in ("../v1", "v0", "latest", ""):
        with pytest.raises(layout.ManifestError, match="x/LATEST: expected a release version"):
            layout.latest_version(text, "x/LATEST")
    good = {
        "version_number": "2.0.0",
        "benchmarks": {"kg": {"fingerprint": {}}},
        "configs": [
            {
                "name": "kg_entities",
                "benchmark": "kg",
                "description": "",
                "files": {"train": ["kg/entities/a.parquet"]},
                "rows": {"train": 1},
                "fields": [],
                "jsonl": {},
                "jsonl_fields": [],
            }
        ],
    }
    assert layout.checked_manifest(json.dumps(good), "m.json") == good
    bad = [
        ("not json", "not JSON"),
        (json.dumps({**good, "version_number": "x"}), "field version_number"),
        (json.dumps({**good, "benchmarks": {"nope": {"fingerprint": {}}}}), "field benchmarks"),
        (
            json.dumps({**good, "configs": [{**good["configs"][0], "files": {"train": ["../../etc/passwd"]}}]}),
            "'\\.\\.' segment",
        ),
        (json.dumps({**good, "configs": [{**good["configs"][0], "files": {"train": ["/abs"]}}]}), "is absolute"),
        (json.dumps({**good, "configs": [{**good["configs"][0], "benchmark": "okgqa"}]}), r"configs\[0\]\.benchmark"),
    ]
    for text, message in bad:
        with pytest.raises(layout.ManifestError, match=message):
            layout.checked_manifest(text, "m.json")
    with pytest.raises(layout.ManifestError, match="m.json: missing"):
        layout.checked_manifest(None, "m.json")


def test_an_id_without_a_key_fails_naming_the_column(spark):
    frame = spark.createDataFrame([(0, 0, 5)], "h int, r int, t int")
    entities = spark.createDataFrame([(0, "Q0")], "id int, key string")
    relations = spark.createDataFrame([(0, "P0")], "id int, key string")
    with pytest.raises(Exception, match="column t holds an id without a dictionary key: 5"):
        layout.keyed(frame, entities, relations, ("h", "t"), ("r",)).collect()
    ok = layout.keyed(frame.where("t = 0"), entities, relations, ("h", "t"), ("r",))
    assert ok.collect() == []


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.one_of(st.none(), st.integers(0, 9)), st.integers(0, 3), st.integers(0, 9), st.integers(-5, 5)),
        max_size=40,
    ),
    partitions=st.integers(1, 4),
)
def test_keyed_replaces_each_id_in_place_and_keeps_every_row(spark, rows, partitions):
    """Parallel edges, self-loops, hubs and null ids: every row once, each id column by its own key."""
    entity_keys = {i: f"Q{(i * 7) % 10}-{i}" for i in range(10)}
    relation_keys = {i: f"P{3 - i}" for i in range(4)}
    entities = spark.createDataFrame(sorted(entity_keys.items()), "id int, key string")
    relations = spark.createDataFrame(sorted(relation_keys.items()), "id int, key string")
    frame = spark.createDataFrame(rows, "h int, r int, t int, n int").repartition(partitions)
    got = layout.keyed(frame, entities, relations, ("h", "t"), ("r",))
    assert got.columns == ["h", "r", "t", "n"]
    expected = [(entity_keys.get(h), relation_keys[r], entity_keys[t], n) for h, r, t, n in rows]
    order = repr  # None sorts with the strings
    assert sorted((tuple(row) for row in got.collect()), key=order) == sorted(expected, key=order)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 30), st.sampled_from(["train", "valid", "test"]), st.text(max_size=3)), max_size=60
    ),
    shard_rows=st.integers(1, 25),
    partitions=st.integers(1, 5),
)
def test_shards_hold_every_row_once_whatever_the_partitioning(spark, tmp_path_factory, rows, shard_rows, partitions):
    import pyarrow.parquet as parquet

    frame = spark.createDataFrame(rows, "n int, split string, s string")
    written = []
    for layout_frame in (frame.coalesce(1), frame.repartition(partitions)):
        folder = tmp_path_factory.mktemp("shards")
        digests: publish.Digests = {}
        files = publish.write_shards(layout_frame, str(folder), len(rows), shard_rows, "parquet", "split", digests)
        written.append({split: [Path(f).read_bytes() for f in paths] for split, paths in files.items()})
        got = sorted(
            (row["n"], split, row["s"])
            for split, paths in files.items()
            for path in paths
            for row in parquet.read_table(path).to_pylist()
        )
        assert got == sorted(rows)
        for split, paths in files.items():
            assert [Path(p).name for p in paths] == [
                f"{split}-{i:05d}-of-{len(paths):05d}.parquet" for i in range(len(paths))
            ]
            assert len(paths) <= max(1, -(-len(rows) // shard_rows))
        # the digests recorded while writing are the files' own; with them, digests() reads no file back
        assert sorted(digests) == sorted(f for paths in files.values() for f in paths)
        for path, (digest, size) in digests.items():
            assert (digest, size) == (hashlib.sha256(Path(path).read_bytes()).hexdigest(), Path(path).stat().st_size)
            Path(path).unlink()
        names = [str(Path(f).relative_to(folder)) for f in digests]
        assert publish.digests(spark, str(folder), names, digests) == {n: digests[f"{folder}/{n}"] for n in names}
    assert written[0] == written[1]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.integers(-3, 3),
            st.sampled_from(["train", "valid", "test"]),
            st.one_of(st.none(), st.text(max_size=3)),
        ),
        min_size=1,
        max_size=40,
    ),
    partitions=st.integers(1, 4),
)
def test_a_parquet_shard_is_the_pyarrow_encoding_of_its_sorted_rows(spark, tmp_path_factory, rows, partitions):
    """The bytes are a function of the rows alone (pyarrow's encoder), not of the JVM that ran the job:
    Spark's own Parquet writer lists a column chunk's encodings in the JVM's hash order."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as parquet

    frame = spark.createDataFrame(rows, "n int, split string, s string").repartition(partitions)
    folder = tmp_path_factory.mktemp("shards")
    files = publish.write_shards(frame, str(folder), len(rows), 1000, "parquet", "split")
    assert sorted(files) == sorted({split for _, split, _ in rows})
    schema = pa.schema([("n", pa.int32()), ("s", pa.string())])
    for split, (path,) in files.items():
        # Spark's ascending order: nulls first; strings by UTF-8 bytes
        kept = sorted(
            ((n, s) for n, sp, s in rows if sp == split),
            key=lambda row: (row[0], row[1] is not None, (row[1] or "").encode()),
        )
        expected = pa.table({"n": [n for n, _ in kept], "s": [s for _, s in kept]}, schema=schema)
        sink = io.BytesIO()
        parquet.write_table(expected, sink, compression="snappy")
        assert Path(path).read_bytes() == sink.getvalue(), split


def test_table_1_counts_a_removed_triple_once_per_rule_type_of_its_rules():
    import pandas as pd

    from kgbrink.release.report import rule_types, similarity_summary

    rules = pd.DataFrame({"id": ["a", "b", "c"], "rule_type": ["symmetry", "path", "path"]})
    removed = pd.DataFrame({"rule_ids": [["a"], ["b", "c"], ["a", "b"], []]})
    table = rule_types(rules, removed)
    assert table.to_dict("records") == [
        {"rule_type": "path", "rules": 2, "removed_triples": 2},
        {"rule_type": "symmetry", "rules": 1, "removed_triples": 2},
    ]
    counted = pd.DataFrame({"rule_ids": [["a"], ["b", "c"]], "count": [3, 2]})  # distinct rule sets, counted
    assert rule_types(rules, counted)["removed_triples"].tolist() == [2, 3]
    similarity = pd.DataFrame(
        {
            "method": ["RS", "RS", "ED"],
            "level": [0.5, 0.5, 0.5],
            "seed": [1, 2, 1],
            "operations": [4, 3, 0],
            "requested": [4, 4, 0],
            "ats": [0.5, 0.7, 1.0],
            "sc2d": [0.2, 0.4, 1.0],
            "sd2": [1.0, 1.0, 0.5],
        }
    )
    summary = similarity_summary(similarity).to_dict("records")
    assert [(r["method"], r["reached"], round(r["ats"], 6), r["n_graphs"]) for r in summary] == [
        ("ED", 1.0, 1.0, 1),
        ("RS", 0.75, 0.6, 2),
    ]


def test_keyed_questions_name_answers_in_order_and_keep_null_apart_from_empty(spark):
    from kgbrink.core import catalog
    from kgbrink.evaluation.releases import gt_questions
    from kgbrink.synthkgqa.generator import keyed_questions

    schema = catalog.GT_QUESTION_COLUMNS
    edge, full = [(0, 0, 1)], [(1, 0, 0), (0, 0, 1)]
    rows = [
        ("q1", "test", "Who?", [0], 1, edge, "(1)", "1p", 1, 1, 1, 0, [1, 0], 2, True, full),
        ("q2", None, None, [0], 1, edge, "(1)", "1p", 1, 1, 1, 0, None, None, None, None),
        ("q3", "test", None, [0], 1, edge, "(1)", "1p", 1, 1, 1, 0, [], 0, False, []),
    ]
    questions = spark.createDataFrame(rows, schema)
    entities = spark.createDataFrame([(0, "Q0"), (1, "Q1")], "id int, key string")
    relations = spark.createDataFrame([(0, "P0")], "id int, key string")
    got = {r["id"]: r.asDict() for r in keyed_questions(questions, entities, relations).collect()}
    assert got["q1"]["all_answers"] == ["Q1", "Q0"] and got["q1"]["seeds"] == ["Q0"] and got["q1"]["answer"] == "Q1"
    assert got["q1"]["answer_subgraph"] == [["Q0", "P0", "Q1"]]
    assert got["q2"]["all_answers"] is None and got["q2"]["split"] is None
    assert got["q3"]["all_answers"] == []
    assert got["q1"]["question"] == "Who?" and got["q1"]["full_answer_subgraph"] == [
        ["Q1", "P0", "Q0"],
        ["Q0", "P0", "Q1"],
    ]
    assert got["q2"]["full_answer_subgraph"] is None and got["q3"]["full_answer_subgraph"] == []
    # read back by id (predict --release): every column as it was
    keyed = keyed_questions(questions, entities, relations)
    back = gt_questions(keyed, entities.withColumn("label", F.col("key")), relations)
    assert sorted(back.collect()) == sorted(questions.collect())
    # as published: a question without a split under train, marked; read back without one
    published = keyed.withColumn("no_split", F.col("split").isNull()).fillna({"split": "train"})
    back = gt_questions(published, entities, relations)
    assert sorted(back.collect()) == sorted(questions.collect())
    with pytest.raises(Exception, match="question q1 names an entity the release's KG has not: Q1"):
        gt_questions(keyed, entities.where("key = 'Q0'"), relations).collect()


def _plain(value):
    """A value as JSON-ready plain data: Spark's dict and pyarrow's list of pairs for a map alike, rows as dicts."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return sorted([[_plain(k), _plain(v)] for k, v in value.items()], key=lambda x: json.dumps(x, default=str))
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):  # pyarrow's map
            return sorted([[_plain(k), _plain(v)] for k, v in value], key=lambda x: json.dumps(x, default=str))
        return [_plain(x) for x in value]
    return value


def _content_digest(rows: list[dict]) -> str:
    """SHA-256 of the rows' sorted canonical JSON lines: equal exactly when the rows are, in any order."""
    lines = sorted(json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True, default=str) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def test_each_table_config_is_its_delta_table_by_key(spark, released):
    """Issue 57 B3: each configuration made of one Delta table holds, split by split, the rows of the table
    version the release read, ids replaced by keys: the same count and content digest, computed here from
    the Delta table and the dictionaries (not from release.json). A null or absent split is published as
    ``train`` (docs/fidelity.md)."""
    import pyarrow.parquet as parquet

    from kgbrink.core import catalog

    small, dataset, root, first, _ = released
    folder = Path(root) / "v1"
    configs = {c["name"]: c for c in _manifest(folder)["configs"]}
    entity_key = {r["id"]: r["key"] for r in spark.read.format("delta").load(f"{dataset}/entities").collect()}
    relation_key = {r["id"]: r["key"] for r in spark.read.format("delta").load(f"{dataset}/relations").collect()}
    where = {
        "kg": {},
        "brink": {"variant": small.variant.name},
        "probe": {"splits": "+".join(sorted(small.stats.splits))},
        "probekgc": {"questions": "release"},
        "synthkgqa": {"questions": "release"},
        "okgqa": {"questions": "kg"},
    }
    parts = [(declared.name, part) for declared in benchmarks.DECLARED for part in declared.tables]
    assert len(parts) == 24 and {name for name, _ in parts} == set(where)
    for name, part in parts:
        config = configs[part.config]
        assert part.config.startswith(name + "_")
        path = catalog.path(
            part.table, dataset=dataset, **where[name] | ({"questions": part.questions} if part.questions else {})
        )
        read = first.inputs[part.config]
        assert read.path == path, part.config
        table = spark.read.format("delta").option("versionAsOf", read.version).load(path)
        columns = [c for c in (part.columns or table.columns) if c != part.split]  # the split names the files
        assert [name for name, _ in config["fields"]] == columns, part.config
        expected: dict[str, list[dict]] = {}
        for row in table.collect():
            values = {c: row[c] for c in columns}
            for c in part.entity_columns:
                values[c] = None if values[c] is None else entity_key[values[c]]
            for c in part.relation_columns:
                values[c] = None if values[c] is None else relation_key[values[c]]
            split = (row[part.split] if part.split else None) or "train"
            expected.setdefault(split, []).append(values)
        got = {
            split: [r for p in paths for r in parquet.read_table(folder / p).to_pylist()]
            for split, paths in config["files"].items()
        }
        assert {s: len(rows) for s, rows in got.items()} == {s: len(rows) for s, rows in expected.items()}, part.config
        digests = {s: _content_digest(rows) for s, rows in got.items()}
        assert digests == {s: _content_digest(rows) for s, rows in expected.items()}, part.config


def _plain(value):
    """A record as its JSON text would give it: nulls dropped (a union schema adds them), numbers as floats
    (Spark's JSON reader widens a field of ints and floats to double)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def test_each_file_config_holds_the_records_of_its_json_lines_files(released):
    """Each configuration made of a builder's JSON Lines files (brink provenance and questions in three
    schemes, synthkgqa seed graphs, probekgc questions by key and by label): split by split, its Parquet
    files hold exactly the records of its ``<split>.jsonl`` file, read here line by line."""
    import pyarrow.parquet as parquet

    _, _, root, _, _ = released
    folder = Path(root) / "v1"
    declared = {part.config for benchmark in benchmarks.DECLARED for part in benchmark.files}
    configs = {c["name"]: c for c in _manifest(folder)["configs"] if c["name"] in declared}
    assert sorted(configs) == sorted(declared)
    for name, config in configs.items():
        assert config["jsonl"].keys() == config["files"].keys() != set(), name
        for split, files in config["files"].items():
            rows = [row for f in files for row in parquet.read_table(folder / f).to_pylist()]
            lines = [json.loads(x) for f in config["jsonl"][split] for x in (folder / f).read_text().splitlines()]
            assert len(rows) == len(lines) == config["rows"][split] > 0, (name, split)

            def canonical(records):
                return sorted(json.dumps(_plain(r), sort_keys=True) for r in records)

            assert canonical(rows) == canonical(lines), (name, split)


def _tables_versions(spark, dataset: str, config) -> dict:
    """The latest Delta version of the dataset's rules, its variant's tables and its statistics."""
    from kgbrink.core import catalog
    from kgbrink.core.delta import latest_version
    from kgbrink.release import reuse

    paths = {"rules": catalog.path("rules", dataset=dataset)}
    paths.update({t: catalog.path(f"variant.{t}", dataset=dataset, variant=config.variant.name) for t in reuse.TABLES})
    folder = catalog.stats_dir(dataset, config.stats.splits)
    paths.update({f"stats.{t}": f"{folder}/{t}" for t in catalog.STATS_TABLES})
    return {name: latest_version(spark, path) for name, path in paths.items()}


def _sums(folder: Path, prefixes: tuple[str, ...]) -> dict:
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ") for line in lines) if name.startswith(prefixes)}


def test_a_release_publishes_the_variant_and_statistics_the_dataset_holds_current(spark, released, work_dir):
    """Issue 59, item 4: a release into a new root mines nothing and computes no statistics when the
    dataset holds them current (here from the first release's ``build`` and ``stats``, the jobs ``kgbrink
    run`` runs): it exports the variant; its files are those of the release that built them."""
    small, dataset, root, _, _ = released
    subset = dataclasses.replace(small, release=dataclasses.replace(small.release, benchmarks=["kg", "brink", "probe"]))
    before = _tables_versions(spark, dataset, subset)
    out = work_dir / "release" / "from-dataset"
    summary = release.run(JobContext(spark, subset), release.ReleaseOptions(dataset=dataset, out=str(out)))
    assert summary.extra["rebuilt"] == ["kg", "brink", "probe"]
    assert summary.extra["reused_from_dataset"] == ["brink", "probe"] and summary.counts["reused_from_dataset"] == 2
    assert "brink, probe from the dataset's current tables" in summary.highlights["release"]
    assert _tables_versions(spark, dataset, subset) == before  # nothing mined, removed or counted again
    assert json.loads((out / layout.TIMINGS).read_text()) == {"kg": round(summary.timings["kg"], 1)}
    prefixes = ("kg/", "brink/", "probe/")
    assert _sums(out / "v1", prefixes) == _sums(Path(root) / "v1", prefixes) != {}
    built, taken = _manifest(Path(root) / "v1"), _manifest(out / "v1")
    for benchmark in ("brink", "probe"):  # fingerprint, settings and notes (the build's counts) alike
        assert taken["benchmarks"][benchmark] == built["benchmarks"][benchmark], benchmark


def test_changed_settings_or_a_rewritten_table_build_again(spark, released, work_dir):
    """A release whose settings differ from those the dataset's variant and statistics were made with
    builds them; so does one after a variant table was written since its build."""
    from kgbrink.release import reuse

    small, dataset, _, _, _ = released
    changed = dataclasses.replace(
        small,
        release=dataclasses.replace(small.release, benchmarks=["brink", "probe"]),
        variant=dataclasses.replace(small.variant, tau=0.5),
        stats=dataclasses.replace(small.stats, splits=["train", "valid"]),
    )
    before = _tables_versions(spark, dataset, small)
    out = work_dir / "release" / "changed"
    summary = release.run(JobContext(spark, changed), release.ReleaseOptions(dataset=dataset, out=str(out)))
    assert summary.extra["rebuilt"] == ["brink", "probe"] and summary.extra["reused_from_dataset"] == []
    after = _tables_versions(spark, dataset, small)
    assert after["rules"] > before["rules"] and after["questions"] > before["questions"]  # mined and built again
    stats = _tables_versions(spark, dataset, changed)
    assert all(stats[f"stats.{t}"] == 0 for t in ("entity_popularity", "degree_histogram"))  # computed for train+valid
    name = small.variant.name
    fingerprint = _manifest(out / "v1")["benchmarks"]["brink"]["fingerprint"]
    assert reuse.current_build(spark, dataset, name, fingerprint) is not None
    older = _manifest(work_dir / "release" / "from-dataset" / "v1")["benchmarks"]["brink"]["fingerprint"]
    assert reuse.current_build(spark, dataset, name, older) is None  # the variant holds tau 0.5 now
    other_triples = {
        **fingerprint,
        "inputs": {**fingerprint["inputs"], "triples": fingerprint["inputs"]["triples"] + 1},
    }
    assert reuse.current_build(spark, dataset, name, other_triples) is None
    JobContext(spark, changed).run("questions", dataset=dataset)  # a table of the variant written since its build
    assert reuse.current_build(spark, dataset, name, fingerprint) is None


def test_scored_predict_runs_are_released_as_the_results_config_with_a_leaderboard(spark, released, work_dir):
    """The dataset's predict/results (kgbrink predict) becomes the config results_scores, its rows as they
    are but the run's local folder, and the card's leaderboard; unchanged results are a no-op, a new run
    rebuilds only the results. Last in this file: it leaves no results table behind."""
    import shutil

    import pandas as pd

    from kgbrink.core import catalog
    from kgbrink.core.delta import write_table

    small, dataset, _, _, _ = released
    table = catalog.table("predict.results")
    rows = [
        ("brink", "v", "m1", None, "1", "neighbourhood/complete", "fp1", "f1", 1.0, "{}", "/local/a"),
        ("brink", "v", "m1", None, "1", "neighbourhood/incomplete", "fp2", "f1", 0.5, "{}", "/local/b"),
        (
            "okgqa",
            "qs",
            "m2",
            "j",
            "1",
            "subgraph",
            "fp3",
            "geval_correctness",
            80.0,
            '{"level":0.5,"method":"ED"}',
            "/c",
        ),
    ]
    path = table.path(dataset=dataset)
    kg_only = dataclasses.replace(small, release=dataclasses.replace(small.release, benchmarks=["kg"]))
    root = work_dir / "release" / "with-results"
    try:
        write_table(spark.createDataFrame(rows, table.schema), path)
        first = release.run(JobContext(spark, kg_only), release.ReleaseOptions(dataset=dataset, out=str(root)))
        assert first.extra["rebuilt"] == ["kg", "results"] and first.counts["rows_results_scores"] == 3
        manifest = _manifest(root / "v1")
        (config,) = [c for c in manifest["configs"] if c["benchmark"] == "results"]
        published = pd.concat(pd.read_parquet(root / "v1" / f) for f in config["files"]["train"])
        expected = [
            r[:10] for r in sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3] or "", r[5], r[4], r[9], r[6], r[7]))
        ]
        got = [tuple(None if pd.isna(v) else v for v in r) for r in published.itertuples(index=False)]
        assert got == expected and "out" not in published.columns
        card = (root / "v1" / "README.md").read_text()
        assert "## results: scores of models" in card and "config_name: results_scores" in card
        assert "| v | m1 |  | neighbourhood/incomplete | 1 |  | fp2 | 0.5000 |" in card
        assert "| qs | m2 | j | subgraph | 1 | level=0.5, method=ED | fp3 | 80.0000 |" in card
        again = release.run(JobContext(spark, kg_only), release.ReleaseOptions(dataset=dataset, out=str(root)))
        assert again.extra["rebuilt"] == [] and again.extra["version"] == "v1"
        more = [*rows, ("probekgc", "probekgc", "m3", None, "1", "none", "fp4", "accuracy.easy", 0.25, "{}", "/d")]
        write_table(spark.createDataFrame(more, table.schema), path)
        third = release.run(JobContext(spark, kg_only), release.ReleaseOptions(dataset=dataset, out=str(root)))
        assert third.extra["version"] == "v2" and third.extra["rebuilt"] == ["results"]
        assert third.counts["rows_results_scores"] == 4
    finally:
        shutil.rmtree(path, ignore_errors=True)
