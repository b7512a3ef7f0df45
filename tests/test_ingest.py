"""Ingest: parsing, quarantine with exact line numbers, accounting, stable ids, failure modes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from kgbrink.cli import main
from kgbrink.core.delta import latest_version, read_table
from kgbrink.core.files import InputError, given_path, reported_path
from kgbrink.core.jobs import JobContext
from kgbrink.core.session import session_setting
from kgbrink.jobs import ingest as job
from kgbrink.kg import ingest as kg_ingest
from kgbrink.kg import ntriples


def write(path: Path, lines: list[str], compress: bool = False) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


def lines_df(spark, lines: list[str]):
    return spark.createDataFrame([(i, line) for i, line in enumerate(lines)], "row_id long, line string")


def test_wikidata5m_lines_classify_by_first_failing_check(spark):
    lines = [
        "Q1\tP31\tQ5",
        "Q1\tP31",  # 2 fields
        "Q1\tP31\tQ5\tQ6",  # 4 fields
        "Q1\t\tQ5",  # empty relation
        "X1\tP31\tQ5",  # bad head
        "Q1\tR31\tQ5",  # bad relation
        "Q1\tP31\tQ05",  # leading zero is not a Wikidata id
        "Q2\tP17\tQ30\r",  # CRLF line ending is fine
        "Q1234567890123456789\tP31\tQ5",  # 19 digits would overflow the integer codec
    ]
    parsed = kg_ingest.parse_delimited_triples(lines_df(spark, lines), kg_ingest.WIKIDATA5M)
    assertDataFrameEqual(
        parsed.select("row_id", "status", "reason", "h_key", "r_key", "t_key"),
        [
            (0, "ok", None, "Q1", "P31", "Q5"),
            (1, "quarantined", "wrong_field_count", None, None, None),
            (2, "quarantined", "wrong_field_count", None, None, None),
            (3, "quarantined", "empty_field", None, None, None),
            (4, "quarantined", "bad_entity_key", None, None, None),
            (5, "quarantined", "bad_relation_key", None, None, None),
            (6, "quarantined", "bad_entity_key", None, None, None),
            (7, "ok", None, "Q2", "P17", "Q30"),
            (8, "quarantined", "bad_entity_key", None, None, None),
        ],
    )
    details = {r["row_id"]: r["detail"] for r in parsed.filter("status = 'quarantined'").collect()}
    assert details[1] == "expected 3 fields separated by '\\t', got 2"
    assert details[6] == "field t = 'Q05' does not match Q[1-9][0-9]{0,17}"
    percent = kg_ingest.TripleFormat("x", entity_pattern="[a-z%]+")  # a % in a pattern must not break the detail text
    bad = kg_ingest.parse_delimited_triples(lines_df(spark, ["A\tr\tb"]), percent).collect()[0]
    assert bad["detail"] == "field h = 'A' does not match [a-z%]+"


def test_quoted_fields_and_column_order(spark):
    fmt = kg_ingest.TripleFormat("delimited", delimiter=",", columns=("h", "t", "r"), quote='"')
    lines = ['"7","72",aunt_of', '"7,8","72",aunt_of', '7,"7"2",aunt_of', '"",1,r']
    parsed = kg_ingest.parse_delimited_triples(lines_df(spark, lines), fmt)
    assertDataFrameEqual(
        parsed.select("row_id", "reason", "h_key", "r_key", "t_key"),
        [
            (0, None, "7", "aunt_of", "72"),
            (1, "wrong_field_count", None, None, None),  # the quote does not protect the delimiter
            (2, "bad_quoting", None, None, None),
            (3, "empty_field", None, None, None),
        ],
    )
    with pytest.raises(ValueError, match="permutation"):
        kg_ingest.TripleFormat("x", columns=("h", "h", "t"))


def test_ntriples_keep_entity_edges_and_skip_the_rest(spark):
    e, p = "<http://www.wikidata.org/entity/", "<http://www.wikidata.org/prop/direct/"
    lines = [
        f"{e}Q1> {p}P31> {e}Q5> .",
        f'{e}Q1> {p}P1082> "+8000"^^<http://www.w3.org/2001/XMLSchema#decimal> .',
        f"{e}Q1> {p}P856> <https://example.org/> .",
        f'{e}Q1> <http://www.w3.org/2000/01/rdf-schema#label> "universe \\"all\\""@en .',
        f'{e}Q1> <http://www.w3.org/2000/01/rdf-schema#label> "Universum"@de .',
        f"{e}Q1> <http://schema.org/about> {e}Q2> .",
        f"{e}P31> {p}P1647> {e}P279> .",
        "# a comment",
        "",
        f"{e}Q1> {p}P31> {e}Q5>",  # no final dot
    ]
    parsed = ntriples.parse_ntriples(lines_df(spark, lines))
    assertDataFrameEqual(
        parsed.select("row_id", "status", "reason", "h_key", "r_key", "t_key", "label_key", "label"),
        [
            (0, "ok", None, "Q1", "P31", "Q5", None, None),
            (1, "skipped", "literal_object", None, None, None, None, None),
            (2, "skipped", "non_entity_object", None, None, None, None, None),
            (3, "skipped", "label", None, None, None, "Q1", 'universe "all"'),
            (4, "skipped", "label", None, None, None, None, None),
            (5, "skipped", "other_predicate", None, None, None, None, None),
            (6, "skipped", "non_entity_subject", None, None, None, None, None),
            (7, "skipped", "blank_or_comment", None, None, None, None, None),
            (8, "skipped", "blank_or_comment", None, None, None, None, None),
            (9, "quarantined", "malformed_ntriple", None, None, None, None, None),
        ],
    )


def test_aliases_first_alias_is_label_and_a_repeated_key_keeps_its_smallest_label(spark):
    lines = ["Q1\tuniverse\tcosmos", "Q2\tEarth", "Q2\tAlpha", "Q3", "Q4\t", "X\tfoo"]
    frame = lines_df(spark, lines).withColumn("source_file", F.lit("a.txt"))
    parsed = kg_ingest.parse_aliases(frame, r"Q[1-9][0-9]*")
    assertDataFrameEqual(
        parsed.select("row_id", "status", "reason", "key", "label"),
        [
            (0, "ok", None, "Q1", "universe"),
            (1, "ok", None, "Q2", "Earth"),
            (2, "ok", None, "Q2", "Alpha"),
            (3, "quarantined", "wrong_field_count", None, None),
            (4, "quarantined", "empty_label", None, None),
            (5, "quarantined", "bad_alias_key", None, None),
        ],
    )
    assertDataFrameEqual(kg_ingest.alias_labels(parsed), [("Q1", "universe", 1), ("Q2", "Alpha", 2)])


def test_assign_ids_keeps_existing_ids_and_numbers_new_keys_in_code_order(spark):
    existing = spark.createDataFrame([(0, "Q9"), (1, "Q1")], "id int, code string")
    codes = spark.createDataFrame([("Q1",), ("Q30",), ("Q4",), ("Q30",)], "code string")
    assertDataFrameEqual(kg_ingest.assign_ids(codes, existing), [(0, "Q9"), (1, "Q1"), (2, "Q30"), (3, "Q4")])
    assertDataFrameEqual(kg_ingest.assign_ids(codes, None), [(0, "Q1"), (1, "Q30"), (2, "Q4")])
    numeric = spark.createDataFrame([(30,), (4,), (1000,)], "code long")
    assertDataFrameEqual(kg_ingest.assign_ids(numeric, None), [(0, 4), (1, 30), (2, 1000)])


@pytest.mark.parametrize("broadcast", [True, False])
def test_encode_triples_collapses_only_repeats_and_fails_on_a_code_without_id(spark, broadcast):
    good = spark.createDataFrame(
        [("train", 1, 7, 2), ("train", 1, 7, 2), ("test", 1, 7, 2), ("train", 2, 8, 1)],
        "split string, h_code long, r_code long, t_code long",
    )
    entities = spark.createDataFrame([(0, 2), (1, 1)], "id int, code long")
    relations = spark.createDataFrame([(0, 8), (1, 7)], "id int, code long")

    def encode(ents, rels):
        return kg_ingest.encode_triples(good, ents, rels, broadcast, ["train", "valid", "test"], (2, 2), 3)

    assertDataFrameEqual(encode(entities, relations), [(1, 1, 0, "train"), (1, 1, 0, "test"), (0, 0, 1, "train")])
    with pytest.raises(Exception, match=r"internal: field [ht] \(key code 2\) has no id in the entities dictionary"):
        encode(entities.filter("code != 2"), relations).collect()
    with pytest.raises(Exception, match=r"internal: field r \(key code 8\) has no id in the relations dictionary"):
        encode(entities, relations.filter("code != 8")).collect()
    # an id beyond the sizes the job passed would corrupt the packed key: it fails instead
    with pytest.raises(Exception, match=r"internal: column [ht] = 2 does not fit 1 bits"):
        kg_ingest.encode_triples(
            good, entities.withColumn("id", F.col("id") + 1), relations, broadcast, ["train", "test"], (2, 2), 3
        ).collect()


def test_prefixed_integer_codec_round_trips(spark):
    codec = kg_ingest.KeyCodec("Q")
    frame = spark.createDataFrame([("Q1",), ("Q42",), ("Q9007199254740993",)], "key string")
    back = frame.select(codec.code(F.col("key")).alias("code")).select(codec.key(F.col("code")).alias("key"))
    assertDataFrameEqual(back, frame)


# --- the job ------------------------------------------------------------------------------------

GOOD = ["Q1\tP1\tQ2", "Q2\tP1\tQ3", "Q3\tP2\tQ1", "Q1\tP2\tQ3"]


def test_accounting_and_exact_line_numbers_across_blocks_and_gzip(spark, config, tmp_path):
    # train: 2000 lines in many 1 KB blocks; bad lines at known 1-based line numbers; 5 duplicates.
    train = [f"Q{i}\tP{1 + i % 3}\tQ{i + 1}" for i in range(1, 1996)]
    bad_at = {7: "Q7\tP1", 500: "Q500\t\tQ501", 1234: "Y1\tP1\tQ2", 1999: "Q1\tP1\tQ2\tQ3"}
    for line_no, text in sorted(bad_at.items()):
        train.insert(line_no - 1, text)
    train += [train[0], train[1], train[2], train[10], train[10]]  # exact repeats
    assert len(train) == 2004
    valid = ["Q1\tP2\tQ2", "Q2\tP2\tQ3", "bad line"]  # the first one is also a train triple (line 1)
    d = tmp_path / "wd5m"
    write(d / "wikidata5m_transductive_train.txt", train)
    write(d / "wikidata5m_transductive_valid.txt.gz", valid, compress=True)
    write(d / "wikidata5m_entity.txt", ["Q1\tfirst\tone", "Q2\tsecond", "Q99999\tunused", "Q1\tzz repeated"])
    with session_setting(spark, "spark.sql.files.maxPartitionBytes", "1024"):
        summary = job.run(
            JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.01"])),
            job.IngestOptions(dataset=str(tmp_path / "ds"), input=str(d)),
        )
    c = summary.counts
    assert c["lines_per_split"] == {"train": 2004, "valid": 3}
    assert c["quarantined_by_reason"] == {"wrong_field_count": 3, "empty_field": 1, "bad_entity_key": 1}
    assert c["duplicates_per_split"] == {"train": 5, "valid": 0}
    assert (
        c["alias_lines"] == {"entity_aliases": 4}
        and c["duplicate_alias_lines"] == {"entities": 1}
        and c["unused_alias_lines"] == {"entities": 1}
    )
    assert c["kept_per_split"] == {"train": 1995, "valid": 2}
    # nothing is lost: every input line is kept, a duplicate or quarantined
    assert c["lines"] == c["kept"] + c["duplicates"] + c["quarantined"] + c["skipped"] == 2007
    quarantine = read_table(spark, str(tmp_path / "ds" / "quarantine"))
    rows = {(Path(r["source_file"]).name, r["line_number"]): (r["line"], r["reason"]) for r in quarantine.collect()}
    expected = {("wikidata5m_transductive_train.txt", n): text for n, text in bad_at.items()}
    expected[("wikidata5m_transductive_valid.txt.gz", 3)] = "bad line"
    assert {k: v[0] for k, v in rows.items()} == expected
    entities = {r["key"]: (r["id"], r["label"]) for r in read_table(spark, str(tmp_path / "ds" / "entities")).collect()}
    assert entities["Q1"] == (0, "first") and entities["Q2"][1] == "second"
    assert "Q99999" not in entities  # alias-only keys get no id
    assert sorted(i for i, _ in entities.values()) == list(range(len(entities)))
    assert c["split_overlaps"] == {"train/valid": 1}


def _ids(spark, dataset: Path, table: str) -> dict[str, int]:
    return {r["key"]: r["id"] for r in read_table(spark, str(dataset / table)).collect()}


def test_refresh_keeps_known_ids_and_appends_new_keys(spark, config, tmp_path):
    dataset = tmp_path / "ds"
    first = write(tmp_path / "v1" / "wikidata5m_transductive_train.txt", GOOD)
    job.run(JobContext(spark, config), job.IngestOptions(dataset=str(dataset), splits={"train": [first]}))
    assert _ids(spark, dataset, "entities") == {"Q1": 0, "Q2": 1, "Q3": 2}
    # the new dump drops Q3 and adds Q7, Q10 and the relation P9
    second = write(tmp_path / "v2" / "train.txt", ["Q2\tP1\tQ7", "Q10\tP9\tQ1", "Q1\tP1\tQ2"])
    summary = job.run(JobContext(spark, config), job.IngestOptions(dataset=str(dataset), splits={"train": [second]}))
    assert _ids(spark, dataset, "entities") == {
        "Q1": 0,
        "Q2": 1,
        "Q3": 2,
        "Q7": 3,
        "Q10": 4,
    }  # new keys in numeric order
    assert _ids(spark, dataset, "relations") == {"P1": 0, "P2": 1, "P9": 2}
    assert summary.counts["new_entities"] == 2 and summary.counts["new_relations"] == 1
    assert summary.outputs["triples"].version == 1  # the refresh is a new Delta version of the same table
    assertDataFrameEqual(
        read_table(spark, str(dataset / "triples")), [(1, 0, 3, "train"), (4, 2, 0, "train"), (0, 0, 1, "train")]
    )
    assertDataFrameEqual(read_table(spark, str(dataset / "triples"), version=0).filter("h = 2"), [(2, 1, 0, "train")])


def test_reingesting_the_same_dump_commits_no_version(spark, config, tmp_path):
    """Issue 28 item 5 (a). Before: every re-ingest wrote new versions of quarantine, entities, relations
    and triples, and the summary could not say that nothing changed."""
    d, dataset = tmp_path / "wd5m", tmp_path / "ds"
    write(d / "wikidata5m_transductive_train.txt", [*GOOD, "Q1\tP1"])  # one quarantined line
    write(d / "wikidata5m_entity.txt", ["Q1\tone", "Q2\ttwo"])
    names = ("quarantine", "entities", "relations", "triples")

    def ingest():
        ctx = JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.5"]))
        return job.run(ctx, job.IngestOptions(dataset=str(dataset), input=str(d)))

    first = ingest()
    assert first.counts["tables_written"] == list(names) and first.counts["triples_added_per_split"] == {"train": 4}
    versions = {name: latest_version(spark, str(dataset / name)) for name in names}
    again = ingest()
    assert {name: latest_version(spark, str(dataset / name)) for name in names} == versions
    assert {name: again.outputs[name].version for name in names} == versions
    c = again.counts
    assert (c["changed"], c["tables_written"], c["new_entities"], c["new_relations"]) == (False, [], 0, 0)
    assert (c["triples_added_per_split"], c["triples_removed_per_split"], c["kept"]) == ({"train": 0}, {"train": 0}, 4)
    assert again.outputs["entities"].rows == 3 and again.highlights["tables written"].startswith("none")
    # a label the dump changes is a change of the entities alone
    write(d / "wikidata5m_entity.txt", ["Q1\tone", "Q2\tzwei"])
    assert ingest().counts["tables_written"] == ["entities"]
    assert {r["key"]: r["label"] for r in read_table(spark, str(dataset / "entities")).collect()}["Q2"] == "zwei"


def test_a_refresh_reports_triples_added_and_removed_per_split_and_warns_of_a_missing_split(
    spark, config, tmp_path, caplog
):
    """Issue 28 item 5 (b, c). Before: a refresh summary gave only new entities and relations, and a
    split the new dump lacked vanished from the dataset without a word."""
    dataset = tmp_path / "ds"
    test = write(tmp_path / "v1" / "test.txt", ["Q3\tP1\tQ2"])
    v1 = {"train": [write(tmp_path / "v1" / "train.txt", GOOD)], "test": [test]}
    v1["valid"] = [write(tmp_path / "v1" / "valid.txt", ["Q2\tP2\tQ1"])]
    job.run(JobContext(spark, config), job.IngestOptions(dataset=str(dataset), splits=v1))
    # train loses Q1 P2 Q3 and gains two triples (one with the new Q4); test is the same; valid is gone
    train = write(tmp_path / "v2" / "train.txt", [*GOOD[:3], "Q4\tP1\tQ1", "Q2\tP2\tQ4"])
    out = tmp_path / "refresh.json"
    conf_args = ["--conf", config.source] + [a for item in config.overrides for a in ("--set", item)]
    args = ["--dataset", str(dataset), "--split", f"train={train}", "--split", f"test={test}", "--json", str(out)]
    assert main(["ingest", *conf_args, *args]) == 0
    report = json.loads(out.read_text())
    c = report["counts"]
    assert (c["new_entities"], c["new_relations"], c["kept_per_split"]) == (1, 0, {"train": 5, "test": 1})
    assert c["triples_added_per_split"] == {"train": 2, "test": 0, "valid": 0} and c["triples_added"] == 2
    assert c["triples_removed_per_split"] == {"train": 1, "test": 0, "valid": 1} and c["triples_removed"] == 2
    assert c["missing_splits"] == ["valid"] and c["changed"] is True
    warning = "split 'valid' is in the dataset but not in this dump: its 1 triples are removed (triples version 0"
    assert report["warnings"] == [warning + " keeps them)"]
    assert any(warning in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=config.tracking.uri).get_run(report["mlflow_run_id"]).data.metrics
    assert (metrics["count.triples_added_per_split.train"], metrics["count.triples_removed_per_split.valid"]) == (2, 1)
    assert (metrics["count.new_entities"], metrics["count.triples_removed"]) == (1, 2)


def test_too_many_bad_lines_fail_with_reasons_and_keep_the_quarantine(spark, config, tmp_path):
    dataset = tmp_path / "ds"
    path = write(tmp_path / "train.txt", GOOD + ["oops", "Q1\tP1"])
    with pytest.raises(
        job.IngestError,
        match=r"2 of 6 input lines \(33.3333%\) are malformed.*max_bad_fraction = 0.001.*wrong_field_count: 2",
    ):
        job.run(JobContext(spark, config), job.IngestOptions(dataset=str(dataset), splits={"train": [path]}))
    assert read_table(spark, str(dataset / "quarantine")).count() == 2
    assert not (dataset / "triples").exists()


def test_missing_and_empty_inputs_are_named(spark, config, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(InputError, match="input file is empty: .*empty.txt"):
        job.run(
            JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / "ds"), splits={"train": [str(empty)]})
        )
    with pytest.raises(InputError, match="not found: .*nope.txt"):
        job.run(
            JobContext(spark, config),
            job.IngestOptions(dataset=str(tmp_path / "ds"), splits={"train": [str(tmp_path / "nope.txt")]}),
        )
    gz_no_lines = write(tmp_path / "nolines.txt.gz", [], compress=True)
    with pytest.raises(InputError, match="has no lines: .*nolines.txt.gz"):
        job.run(
            JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / "ds"), splits={"train": [gz_no_lines]})
        )
    with pytest.raises(InputError, match="no wikidata5m_transductive_train.txt"):
        job.run(JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / "ds"), input=str(tmp_path)))


def test_reported_and_given_paths_spell_a_file_alike():
    # Spark reports files as URL-encoded URIs; users give plain paths
    assert (
        reported_path("file:/data/my%20dump%25+1.txt") == given_path("/data/my dump%+1.txt") == "/data/my dump%+1.txt"
    )
    assert reported_path("file:///data/x.txt") == given_path("file:///data/x.txt") == "/data/x.txt"
    assert reported_path("s3a://bucket/a%20b.txt") == given_path("s3a://bucket/a b.txt") == "s3a://bucket/a b.txt"


def test_file_names_that_need_url_encoding_are_read(spark, config, tmp_path):
    path = write(tmp_path / "my dump %+1" / "train 1.txt", GOOD)
    # a killed run's scratch space: no live run owns it while this run holds the writer lease (issue 28 item 6)
    (tmp_path / "ds" / "_staging" / "killed-run").mkdir(parents=True)
    summary = job.run(
        JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / "ds"), splits={"train": [path]})
    )
    assert summary.counts["kept"] == len(GOOD)
    assert not (tmp_path / "ds" / "_staging").exists()


def test_ingest_and_stats_through_a_hadoop_uri_that_is_not_local(spark, config, tmp_path):
    # viewfs:// (bundled with Hadoop) stands in for s3a://: inputs listed, read, quarantined and the Delta
    # tables written and read back through a Hadoop file system URI, never through local paths
    from kgbrink.jobs import stats

    lake = tmp_path / "lake"
    write(lake / "in" / "wikidata5m_transductive_train.txt", [*GOOD, "Q1\tP1"])
    write(lake / "in" / "wikidata5m_transductive_test.txt.gz", ["Q2\tP2\tQ3"], compress=True)
    write(lake / "in" / "wikidata5m_entity.txt", ["Q1\tone", "Q3\tthree"])
    spark.sparkContext._jsc.hadoopConfiguration().set("fs.viewfs.mounttable.kgtest.link./lake", lake.as_uri())
    dataset = "viewfs://kgtest/lake/ds"
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.5"])),
        job.IngestOptions(dataset=dataset, input="viewfs://kgtest/lake/in"),
    )
    assert (summary.counts["kept_per_split"], summary.counts["quarantined"], summary.counts["entities"]) == (
        {"train": 4, "test": 1},
        1,
        3,
    )
    assert {name: out.path for name, out in summary.outputs.items()} == {
        name: f"{dataset}/{name}" for name in ("quarantine", "entities", "relations", "triples")
    }
    quarantine = read_table(spark, f"{dataset}/quarantine").collect()
    assert [(q["source_file"], q["line_number"], q["reason"]) for q in quarantine] == [
        ("viewfs://kgtest/lake/in/wikidata5m_transductive_train.txt", 5, "wrong_field_count")
    ]
    assert sorted((r["key"], r["label"]) for r in read_table(spark, f"{dataset}/entities").collect()) == [
        ("Q1", "one"),
        ("Q2", None),
        ("Q3", "three"),
    ]
    popularity = stats.run(JobContext(spark, config), stats.StatsOptions(dataset=dataset))
    assert popularity.counts == {"triples": 4, "entities_with_triples": 3, "entity_relation_pairs": 5, "relations": 2}
    assert (lake / "ds" / "stats" / "train" / "entity_popularity" / "_delta_log").is_dir()
    assert not (lake / "ds" / "_staging").exists()  # the run's scratch space, and its empty parent, are gone


def test_probe_dictionaries_fix_ids_and_quarantine_unknown_keys(spark, config, tmp_path):
    d = tmp_path / "probe"
    write(d / "entities.dict", ["0\talice", "1\tbob", "2\tcarol"])
    write(d / "relations.dict", ["0\tknows", "1\tlikes"])
    write(d / "train.txt", ["carol\tknows\talice", "bob\tlikes\tcarol", "dave\tknows\talice", "bob\thates\talice"])
    write(d / "test.txt", ["alice\tknows\tbob"])
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.5"])),
        job.IngestOptions(dataset=str(tmp_path / "ds"), format="probe", input=str(d)),
    )
    assert summary.counts["quarantined_by_reason"] == {"unknown_entity": 1, "unknown_relation": 1}
    assertDataFrameEqual(
        read_table(spark, str(tmp_path / "ds" / "triples")), [(2, 0, 0, "train"), (1, 1, 2, "train"), (0, 0, 1, "test")]
    )
    assert _ids(spark, tmp_path / "ds", "entities") == {"alice": 0, "bob": 1, "carol": 2}
    # a refresh keeps the release's closed vocabulary: 'zed', known to the dataset but not to the dict, is unknown
    extra = write(tmp_path / "extra.txt", ["zed\tknows\talice"])
    job.run(
        JobContext(spark, config),
        job.IngestOptions(dataset=str(tmp_path / "ds"), format="delimited", splits={"train": [extra]}),
    )
    assert _ids(spark, tmp_path / "ds", "entities")["zed"] == 3
    write(d / "train.txt", ["carol\tknows\talice", "zed\tknows\talice"])
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.5"])),
        job.IngestOptions(dataset=str(tmp_path / "ds"), format="probe", input=str(d)),
    )
    assert summary.counts["quarantined_by_reason"] == {"unknown_entity": 1}
    with pytest.raises(InputError, match="--format probe needs --input"):
        job.run(
            JobContext(spark, config),
            job.IngestOptions(dataset=str(tmp_path / "ds"), format="probe", splits={"train": [str(d / "train.txt")]}),
        )
    write(d / "entities.dict", ["0\talice", "0\tbob"])
    with pytest.raises(InputError, match="entities.dict: 2 lines but 1 distinct ids"):
        job.run(
            JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / "ds2"), format="probe", input=str(d))
        )


def test_output_is_identical_whatever_the_partitioning(spark, config, tmp_path):
    lines = [f"Q{(i * 7919) % 500 + 1}\tP{i % 5 + 1}\tQ{(i * 104729) % 499 + 1}" for i in range(3000)]
    path = write(tmp_path / "train.txt", lines)
    tables = []
    for n, block in ((1, "128m"), (7, "2k")):
        with (
            session_setting(spark, "spark.sql.shuffle.partitions", str(n)),
            session_setting(spark, "spark.sql.files.maxPartitionBytes", block),
        ):
            job.run(
                JobContext(spark, config), job.IngestOptions(dataset=str(tmp_path / f"ds{n}"), splits={"train": [path]})
            )
        tables.append(
            {
                name: sorted(map(tuple, read_table(spark, str(tmp_path / f"ds{n}" / name)).collect()))
                for name in ("entities", "relations", "triples")
            }
        )
    assert tables[0] == tables[1]


def test_cli_reports_failure_on_stderr_exit_status_and_json(spark, config, tmp_path, capsys):
    out = tmp_path / "summary.json"
    conf_args = ["--conf", config.source] + [a for item in config.overrides for a in ("--set", item)]
    status = main(
        [
            "ingest",
            *conf_args,
            "--dataset",
            str(tmp_path / "ds"),
            "--split",
            f"train={tmp_path}/missing.txt",
            "--json",
            str(out),
        ]
    )
    assert status == 1
    assert "kgbrink ingest: error: InputError: input file not found" in capsys.readouterr().err
    assert json.loads(out.read_text())["status"] == "failed"
    # a failure past max_bad_fraction still reports the job's counts
    bad = write(tmp_path / "bad.txt", GOOD + ["oops"])
    assert (
        main(["ingest", *conf_args, "--dataset", str(tmp_path / "ds"), "--split", f"train={bad}", "--json", str(out)])
        == 1
    )
    report = json.loads(out.read_text())
    assert (
        report["counts"]["quarantined_by_reason"] == {"wrong_field_count": 1}
        and report["outputs"]["quarantine"]["rows"] == 1
    )
    with pytest.raises(SystemExit) as exc:
        main(["ingest", "--split", "train"])  # no '=PATH'
    assert exc.value.code == 2


def test_ntriples_job_keeps_edges_counts_skips_and_takes_labels(spark, config, tmp_path):
    e, p = "<http://www.wikidata.org/entity/", "<http://www.wikidata.org/prop/direct/"
    label = "<http://www.w3.org/2000/01/rdf-schema#label>"
    lines = [
        f"{e}Q42> {p}P31> {e}Q5> .",
        f"{e}Q42> {p}P31> {e}Q5> .",  # exact duplicate
        f"{e}Q42> {p}P69> {e}Q691283> .",
        f'{e}Q42> {label} "Douglas Adams"@en .',
        f'{e}Q42> {label} "Douglas Adams"@de .',
        f'{e}Q42> {p}P1477> "Douglas Noel Adams"@en .',
        "<broken",
    ]
    path = write(tmp_path / "truthy.nt.gz", lines, compress=True)
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.2"])),
        job.IngestOptions(dataset=str(tmp_path / "ds"), format="ntriples", splits={"train": [path]}),
    )
    c = summary.counts
    assert c["skipped_by_kind"] == {"label": 2, "literal_object": 1}
    assert c["quarantined_by_reason"] == {"malformed_ntriple": 1}
    assert (c["kept"], c["duplicates"]) == (2, 1)
    assert c["lines"] == c["kept"] + c["duplicates"] + c["quarantined"] + c["skipped"] == 7
    entities = read_table(spark, str(tmp_path / "ds" / "entities"))
    assertDataFrameEqual(entities, [(0, "Q5", None), (1, "Q42", "Douglas Adams"), (2, "Q691283", None)])
    assertDataFrameEqual(read_table(spark, str(tmp_path / "ds" / "relations")).select("key"), [("P31",), ("P69",)])


def test_generated_dirty_kg_is_accounted_for_exactly(spark, config, tmp_path):
    """The generator's manifest says how many malformed (by reason) and duplicate lines it planted."""
    from kgbrink.kg import synth

    kg = synth.generate(8000, seed=11)
    manifest = synth.write_dataset(kg, tmp_path / "kg", malformed_fraction=0.004, duplicate_fraction=0.01)
    summary = job.run(
        JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=0.01"])),
        job.IngestOptions(dataset=str(tmp_path / "ds"), input=str(tmp_path / "kg")),
    )
    c = summary.counts
    assert c["quarantined_by_reason"] == {k: v for k, v in manifest["malformed_lines"].items() if v}
    assert c["duplicates"] == manifest["duplicate_lines"] == 80
    assert c["kept_per_split"] == manifest["splits"]
    assert c["lines_per_split"]["train"] == manifest["train_file_lines"]
    assert c["entities"] == manifest["entities"] and c["relations"] == 822


def _ingest_bytes(spark, config, tmp_path, data: bytes, name: str = "kg.tsv"):
    path = tmp_path / name
    path.write_bytes(data)
    dataset = tmp_path / "ds"
    ctx = JobContext(spark, config.with_overrides(["ingest.max_bad_fraction=1"]))
    summary = job.run(ctx, job.IngestOptions(dataset=str(dataset), format="delimited", splits={"train": [str(path)]}))
    quarantine = read_table(spark, str(dataset / "quarantine")).orderBy("line_number").collect()
    return summary, [(r["line_number"], r["reason"], r["line"]) for r in quarantine]


def test_bytes_that_are_not_utf8_are_quarantined_not_merged(spark, config, tmp_path):
    """Latin-1 'café' and 'cafè' would both decode to 'caf\\ufffd' and merge into one triple."""
    data = b"caf\xe9\tP1\tQ2\ncaf\xe8\tP1\tQ2\nQ1\tP1\tQ2\ncaf\xc3\xa9\tP1\tQ2\n"
    summary, bad = _ingest_bytes(spark, config, tmp_path, data)
    assert bad == [(1, "invalid_utf8", "caf\ufffd\tP1\tQ2"), (2, "invalid_utf8", "caf\ufffd\tP1\tQ2")]
    assert summary.counts["kept"] == 2  # Q1 and the valid UTF-8 'café'
    assert summary.counts["duplicates"] == 0


def test_lines_end_at_newline_only(spark, config, tmp_path):
    """A lone \\r stays inside its line (line numbers agree with `wc -l`); \\r\\n ends a line like \\n."""
    data = b"Q1\tP1\tQ2\rQ3\tP1\tQ4\nQ5\tP1\tQ6\r\nQ7\tP1\n"
    assert data.count(b"\n") == 3
    summary, bad = _ingest_bytes(spark, config, tmp_path, data)
    assert [(n, reason) for n, reason, _ in bad] == [(1, "wrong_field_count"), (3, "wrong_field_count")]
    assert bad[1][2] == "Q7\tP1"
    assert summary.counts["kept"] == 1  # Q5 P1 Q6, without its \r


def test_a_truncated_gz_is_an_input_error_naming_the_file_and_nothing_is_written(spark, config, tmp_path):
    data = gzip.compress("".join(f"Q{i}\tP1\tQ{i + 1}\n" for i in range(20000)).encode())
    broken = tmp_path / "broken.tsv.gz"
    broken.write_bytes(data[: len(data) // 2])
    dataset = tmp_path / "ds"
    with pytest.raises(InputError, match=r"broken.tsv.gz: truncated or corrupt compressed input \(EOFException"):
        job.run(
            JobContext(spark, config),
            job.IngestOptions(dataset=str(dataset), format="delimited", splits={"train": [str(broken)]}),
        )
    assert not dataset.exists() or sorted(p.name for p in dataset.iterdir()) == []
