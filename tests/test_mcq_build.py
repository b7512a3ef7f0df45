"""``kgbrink mcq`` (paper 003, spec 3.A and 3.D): hand-computed options on a small KG, the invariants on a
random KG, partition independence, the ProbeKGC-WN statistics on the shared WN18RR, the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import functions as F

from kgbrink.cli import main
from kgbrink.core.loader import load_config
from kgbrink.core.settings import MCQ_DEFAULT_TEMPLATES
from kgbrink.core.typed import ConfigError
from kgbrink.mcq import options as mcq_options
from kgbrink.mcq import render
from tests.conftest import PROJECT_ROOT, conf_args, own_copy

SEED = 42
# the hand-written KG: relations likes = 0, rare = 1, P31 = 2; entities 0..11
TRAIN = [(0, 0, 1), (0, 0, 2), (5, 0, 6), (7, 0, 8), (4, 0, 6), (9, 0, 10), (11, 0, 2), (6, 1, 7), (5, 1, 5)]
TRAIN += [(3, 2, 11), (6, 2, 11)]
VALID = [(5, 0, 2)]
TEST = [(0, 0, 3), (9, 1, 5)]
N_ENTITIES = 12
# candidate scores (h, r, t, side, candidate, score) of the query (0, likes, ?) and (?, likes, 3)
NAN = float("nan")
SCORES = [(0, 0, 3, "tail", c, s) for c, s in [(1, 0.99), (0, 0.95), (3, 0.9), (6, 0.8), (5, 0.1), (5, 0.75)]]
SCORES += [(0, 0, 3, "tail", c, s) for c, s in [(8, 0.7), (4, 0.6), (7, NAN), (9, 0.2)]]
SCORES += [(0, 0, 3, "head", c, s) for c, s in [(3, 0.99), (2, 0.5), (4, 0.5), (6, 0.5), (9, 0.5), (1, 0.4)]]
SCORES += [(7, 0, 8, "tail", 11, 0.9)]  # a query that was not sampled
SCORE_SCHEMA = "h int, r int, t int, side string, candidate int, score double"


def _triples(spark, splits: dict[str, list[tuple]]):
    rows = [(*t, s) for s, ts in splits.items() for t in ts]
    return spark.createDataFrame(rows, "h int, r int, t int, split string")


def _build(spark, triples, plan, scores=None, n=10, vectors=None, n_entities=N_ENTITIES):
    """The pipeline of the job on in-memory tables: sample, queries, exclusions (all splits), degrees and
    pools (train), the questions."""
    kg = triples.where("split = 'train'").select("h", "r", "t")
    sampled = mcq_options.sample_triples(triples.where("split = 'test'"), n, plan.seed)
    queries = mcq_options.queries(sampled).localCheckpoint()
    excluded = mcq_options.excluded_entities(queries, triples)
    degrees = mcq_options.topic_degrees(kg, queries)
    return mcq_options.build(queries, excluded, degrees, kg, n_entities, plan, scores, vectors).toPandas()


def _one(frame: pd.DataFrame, h, r, t, task, difficulty) -> pd.Series:
    rows = frame[(frame.h == h) & (frame.r == r) & (frame.t == t) & (frame.task == task)]
    rows = rows[rows.difficulty == difficulty]
    assert len(rows) == 1
    return rows.iloc[0]


def test_hand_written_kg_gives_the_hand_computed_options(spark):
    triples = _triples(spark, {"train": TRAIN, "valid": VALID, "test": TEST})
    scores = spark.createDataFrame(SCORES, SCORE_SCHEMA)
    q = _build(spark, triples, mcq_options.Plan(["easy", "medium", "hard"], seed=SEED), scores)
    assert len(q) == 2 * 2 * 3 and q.complete.all()
    # (0, likes, ?), gold 3: true answers 1, 2 (train), 3; the query entity 0. Hard: 1 (true), 0 (query),
    # 3 (gold) and 7 (NaN) are out; 5 keeps its best score 0.75 -> 6 (0.8), 5 (0.75), 8 (0.7)
    hard = _one(q, 0, 0, 3, "tail prediction", "hard")
    assert set(hard.options) == {3, 6, 5, 8} and hard.options[hard.gold_position] == 3
    assert (hard.distractor_source, hard.fallback, hard.query_entity, hard.gold) == ("scores", False, 0, 3)
    assert hard.id.endswith("-tail-hard") and hard.topic_degree == 2  # (0,likes,1), (0,likes,2)
    # (?, likes, 3), gold 0: 3 is the query entity; 2, 4, 6, 9 tie at 0.5 -> the 3 smallest
    # u64(seed, "hard", qid, e) (checked with Spark's xxhash64 itself)
    head = _one(q, 0, 0, 3, "head prediction", "hard")
    qid = head.id.rsplit("-", 1)[0]
    hashes = spark.sql(
        "select " + ", ".join(f"xxhash64({SEED}, 'hard', '{qid}', {e}) as e{e}" for e in (2, 4, 6, 9))
    ).first()
    tied = sorted((2, 4, 6, 9), key=lambda e: hashes[f"e{e}"])[:3]
    assert set(head.options) == {0, *tied} and head.topic_degree == 1  # (3, P31, 11)
    # medium of (0, likes, ?): objects of likes in train {1, 2, 6, 8, 10} minus true answers -> 6, 8, 10
    medium = _one(q, 0, 0, 3, "tail prediction", "medium")
    assert set(medium.options) == {3, 6, 8, 10}
    assert (medium.distractor_source, medium.fallback) == ("relation_pool", False)
    # medium of (?, likes, 3): subjects of likes {0, 4, 5, 7, 9, 11} minus 0 (gold) -> three of 4, 5, 7, 9, 11
    medium = _one(q, 0, 0, 3, "head prediction", "medium")
    assert set(medium.options) - {0} <= {4, 5, 7, 9, 11} and not medium.fallback
    # (9, rare, ?), gold 5: the pool {7, 5} minus 5 leaves 7: 7 plus two uniform distractors
    rare = _one(q, 9, 1, 5, "tail prediction", "medium")
    assert 7 in rare.options and (rare.distractor_source, rare.fallback) == ("relation_pool", True)
    assert rare.topic_degree == 1  # (9, likes, 10)
    assert _one(q, 9, 1, 5, "head prediction", "medium").topic_degree == 2  # (5,likes,6), self-loop (5,rare,5) once
    # no scores for (9, rare, 5): all three hard distractors from the easy procedure
    unscored = _one(q, 9, 1, 5, "tail prediction", "hard")
    assert (unscored.distractor_source, unscored.fallback) == ("uniform", True)
    easy = q[q.difficulty == "easy"]
    assert (easy.distractor_source == "uniform").all() and not easy.fallback.any()
    _check_invariants(q, TRAIN + VALID + TEST)


def test_hard_restricted_to_the_medium_pool_and_typed_medium_pools(spark):
    triples = _triples(spark, {"train": TRAIN, "valid": VALID, "test": TEST})
    scores = spark.createDataFrame(SCORES, SCORE_SCHEMA)
    plan = mcq_options.Plan(["medium", "hard"], seed=SEED, type_relation=2, restrict_to_medium_pool=True)
    q = _build(spark, triples, plan, scores)
    # pool {1, 2, 6, 8, 10}: of the scored candidates only 6 (0.8) and 8 (0.7) -> one easy fill
    hard = _one(q, 0, 0, 3, "tail prediction", "hard")
    assert {6, 8, 3} <= set(hard.options) and (hard.distractor_source, hard.fallback) == ("scores", True)
    # gold 3 has type 11; the typed pool P(likes, tail, 11) = {6} is too small: the untyped pool
    medium = _one(q, 0, 0, 3, "tail prediction", "medium")
    assert set(medium.options) == {3, 6, 8, 10} and medium.distractor_source == "relation_pool"


def test_errors_name_what_is_missing(spark):
    triples = _triples(spark, {"train": TRAIN, "test": TEST})
    with pytest.raises(ValueError, match="needs a candidate-score table"):
        _build(spark, triples, mcq_options.Plan(["hard"], seed=SEED))
    with pytest.raises(ValueError, match="needs entity vectors"):
        _build(spark, triples, mcq_options.Plan(["hard"], seed=SEED, hard_mode="embedding_neighbours"))


def test_embedding_neighbours_are_the_nearest_wrong_entities(spark):
    triples = _triples(spark, {"train": TRAIN, "valid": VALID, "test": TEST})
    # entity e at (e, 0); entity 4 has no vector
    vectors = spark.createDataFrame(
        [(e, [float(e), 0.0]) for e in range(N_ENTITIES) if e != 4], "entity int, vec array<float>"
    )
    q = _build(spark, triples, mcq_options.Plan(["hard"], seed=SEED, hard_mode="embedding_neighbours"), vectors=vectors)
    # gold 3 of (0, likes, ?): nearest 2 (true), 4 (no vector), 1 (true), 5, 0 (query), 6 -> 5, 6, 7
    assert set(_one(q, 0, 0, 3, "tail prediction", "hard").options) == {3, 5, 6, 7}
    # gold 0 of (?, likes, 3): 1, 2 (d 1, 2), 3 is the query entity, 4 has no vector -> 1, 2, 5
    row = _one(q, 0, 0, 3, "head prediction", "hard")
    assert set(row.options) == {0, 1, 2, 5} and row.distractor_source == "embedding"


def _random_kg(seed: int = 3):
    rng = random.Random(seed)
    n, types = 300, [290, 291, 292, 293, 294]
    triples = set()
    while len(triples) < 2400:
        r = rng.randrange(3)
        triples.add((rng.randrange(280), r, rng.randrange(280) if r < 2 else rng.randrange(2)))
    triples = sorted(triples)
    rng.shuffle(triples)
    splits = {"train": triples[:2000], "valid": triples[2000:2150], "test": triples[2150:]}
    splits["train"] += [(e, 3, t) for e in range(280) for t in rng.sample(types, rng.randrange(1, 3))]
    scores = [
        (h, r, t, side, c, rng.random())
        for h, r, t in splits["test"]
        for side in ("head", "tail")
        for c in rng.sample(range(n), 25)
    ]
    return n, splits, scores


def _check_invariants(q: pd.DataFrame, known: list[tuple]) -> None:
    """Options distinct, the gold at gold_position and the only true answer (against every split), the
    query entity never an option."""
    tails, heads = {}, {}
    for h, r, t in known:
        tails.setdefault((h, r), set()).add(t)
        heads.setdefault((r, t), set()).add(h)
    for row in q.itertuples():
        options = list(row.options)
        assert len(options) == 4 and len(set(options)) == 4, row.id
        assert options[row.gold_position] == row.gold and row.gold != row.query_entity, row.id
        assert row.query_entity not in options, row.id
        truth = tails[(row.h, row.r)] if row.task == "tail prediction" else heads[(row.r, row.t)]
        assert sum(o in truth for o in options) == 1, row.id


def test_invariants_fallbacks_and_typed_pools_on_a_random_kg(spark):
    n, splits, score_rows = _random_kg()
    triples = _triples(spark, splits)
    scores = spark.createDataFrame(score_rows, SCORE_SCHEMA)
    plan = mcq_options.Plan(["easy", "medium", "hard"], seed=7, type_relation=3)
    q = _build(spark, triples, plan, scores, n=150, n_entities=n)
    assert len(q) == 150 * 2 * 3 and q.complete.all()
    known = [t for ts in splits.values() for t in ts]
    _check_invariants(q, known)
    train = splits["train"]
    pool = {}
    for h, r, t in train:
        pool.setdefault((r, "tail"), set()).add(t)
        pool.setdefault((r, "head"), set()).add(h)
    types = {}
    for h, r, t in train:
        if r == 3:
            types.setdefault(h, set()).add(t)
    tails, heads = {}, {}
    for h, r, t in known:
        tails.setdefault((h, r), set()).add(t)
        heads.setdefault((r, t), set()).add(h)
    medium = q[q.difficulty == "medium"]
    typed_used = 0
    for row in medium.itertuples():
        side = "tail" if row.task == "tail prediction" else "head"
        excluded = (tails[(row.h, row.r)] if side == "tail" else heads[(row.r, row.t)]) | {row.query_entity}
        valid = pool.get((row.r, side), set()) - excluded
        distractors = set(row.options) - {row.gold}
        typed_valid = {ty: {e for e in valid if ty in types.get(e, ())} for ty in types.get(row.gold, ())}
        if row.distractor_source == "relation_type_pool":
            typed_used += 1
            assert not row.fallback and all(types.get(e, set()) & types[row.gold] for e in distractors), row.id
            assert distractors <= valid
        else:
            assert all(len(v) < 3 for v in typed_valid.values()), row.id
            assert row.fallback == (len(valid) < 3), row.id
            if not row.fallback:
                assert row.distractor_source == "relation_pool" and distractors <= valid, row.id
            else:
                assert valid <= distractors, row.id  # every valid pool entry is used before the fill
    # relation 2's tails are 0 or 1: its tail queries have at most one valid pool entry
    assert medium[(medium.r == 2) & (medium.task == "tail prediction")].fallback.all()
    assert typed_used > 0 and medium.fallback.any() and not medium.fallback.all()
    # hard: the 3 best-scored valid candidates
    by_query = {}
    for h, r, t, side, c, s in score_rows:
        by_query.setdefault((h, r, t, side), {})[c] = max(s, by_query.get((h, r, t, side), {}).get(c, -1))
    for row in q[q.difficulty == "hard"].itertuples():
        side = "tail" if row.task == "tail prediction" else "head"
        excluded = (tails[(row.h, row.r)] if side == "tail" else heads[(row.r, row.t)]) | {row.query_entity}
        ranked = sorted(
            (c for c in by_query[(row.h, row.r, row.t, side)] if c not in excluded),
            key=lambda c: -by_query[(row.h, row.r, row.t, side)][c],
        )
        assert set(row.options) - {row.gold} == set(ranked[:3]) and not row.fallback, row.id


def test_draw_batches_and_the_hard_shortlist_do_not_change_the_options(spark, monkeypatch):
    """The draws in one batch per round, and the hard candidates checked in full, give the same options as
    the growing batches and the 16-candidate shortlist (its second pass forced here with ``first=1``)."""
    n, splits, score_rows = _random_kg(9)
    triples = _triples(spark, splits)
    scores = spark.createDataFrame(score_rows, SCORE_SCHEMA)
    plan = mcq_options.Plan(["easy", "medium", "hard"], seed=5, type_relation=3)
    hard = mcq_options.hard_from_scores
    one_batch = lambda total, per_round: [(lo, lo + per_round) for lo in range(0, total, per_round)]  # noqa: E731
    results = []
    for batches, first in ((mcq_options._batches, 16), (one_batch, 1)):
        monkeypatch.setattr(mcq_options, "_batches", batches)
        monkeypatch.setattr(mcq_options, "hard_from_scores", lambda *a, _f=first, **k: hard(*a, **k, first=_f))
        q = _build(spark, triples, plan, scores, n=60, n_entities=n)
        results.append(q.assign(options=q.options.map(list)).sort_values("id").reset_index(drop=True))
    pd.testing.assert_frame_equal(results[0], results[1])
    assert len(results[0]) == 60 * 2 * 3


def test_identical_questions_whatever_the_partitioning(spark):
    n, splits, score_rows = _random_kg(5)
    plan = mcq_options.Plan(["easy", "medium", "hard"], seed=11, type_relation=3)
    results = []
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        for parts in (1, 7):
            spark.conf.set("spark.sql.shuffle.partitions", str(parts + 2))
            triples = _triples(spark, splits).repartition(parts)
            scores = spark.createDataFrame(score_rows, SCORE_SCHEMA).repartition(parts)
            q = _build(spark, triples, plan, scores, n=120, n_entities=n)
            results.append(q.assign(options=q.options.map(list)).sort_values("id").reset_index(drop=True))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    pd.testing.assert_frame_equal(results[0], results[1])


def test_position_variants_and_prompt_text(spark):
    frame = spark.createDataFrame(
        [("q1", 10, 20, 30, "tail prediction", [5, 6, 7, 8], 2, "h", "likes", "t", ["a", "b", "gold", "d"])],
        "id string, h int, r int, t int, task string, options array<int>, gold_position int, h_name string, "
        "r_name string, t_name string, option_names array<string>",
    )
    frame = frame.withColumns(
        {
            "head_template": F.lit("Who likes <tail entity>?"),
            "tail_template": F.lit("What does <head entity> <relation>?"),
        }
    )
    for p, expected in enumerate([[7, 6, 5, 8], [5, 7, 6, 8], [5, 6, 7, 8], [5, 6, 8, 7]]):
        row = render.fixed_position(frame, p).first()
        assert list(row.options) == expected and row.gold_position == p and row.option_names[p] == "gold"
    record = render.records(frame, "text", 4).first().asDict()
    assert record["answer"] == "C" and [record[x] for x in "ABCD"] == ["a", "b", "gold", "d"]
    assert record["prompt"] == (
        "The incomplete triple is:\n(h, likes, <mask>)\n\nComplete the triple by answering the following "
        "question:\nWhat does h likes?\nA. a\nB. b\nC. gold\nD. d\n\nReply with the correct option ID (A/B/C/D). "
        "Do not reply any other words."
    )
    assert record["system"] == render.SYSTEM_PROMPT and record["triple"] == ["h", "likes", "t"]
    # the generic template with a label ending in "of": one "of" (docs/fidelity.md, 003 generic template)
    generic = frame.withColumns(
        {f"{side}_template": F.lit(MCQ_DEFAULT_TEMPLATES[f"{side} prediction"]) for side in ("head", "tail")}
    )
    for label, question in [
        ("instance of", "What is the instance of h?"),
        ("Part Of", "What is the Part Of h?"),
        ("offers", "What is the offers of h?"),
    ]:
        named = generic.withColumn("r_name", F.lit(label))
        assert f"question:\n{question}\nA. " in render.records(named, "text", 4).first()["prompt"], label
        head = named.withColumn("task", F.lit("head prediction"))
        assert f"question:\nWhich entity has {label} t?\nA. " in render.records(head, "text", 4).first()["prompt"]


def test_mcq_settings_are_checked():
    conf = PROJECT_ROOT / "conf" / "test.yaml"
    assert load_config(conf).mcq.n_triples == 2000
    for bad, message in [
        ("mcq.difficulties=easy,tricky", "unknown 'tricky'"),
        ("mcq.hard_mode=transe", "scores or embedding_neighbours"),
        ("mcq.options=1", "2..26"),
        ("mcq.templates={P1: {head prediction: x}}", "mcq.templates.P1"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(conf, [bad])


@pytest.fixture(scope="module")
def wn18rr(probe_datasets, tmp_path_factory) -> Path:
    """The session's WN18RR (tests/conftest.py, ``probe_datasets``), copied: the mcq job writes into it."""
    return own_copy(Path(probe_datasets["wn18rr"]), tmp_path_factory, "mcq")[0]


def test_probekgc_wn_statistics_through_the_cli(spark, config, wn18rr, tmp_path):
    triples = spark.read.format("delta").load(str(wn18rr / "triples"))
    # a popularity "model": every query scores the 30 entities of largest train degree by their degree
    ends = triples.where("split = 'train'").select(F.explode(F.array("h", "t")).alias("candidate"))
    top = (
        ends.groupBy("candidate").agg(F.count("*").cast("double").alias("score")).orderBy(F.desc("score"), "candidate")
    )
    top = top.limit(30)
    queries = triples.where("split = 'test'").crossJoin(spark.createDataFrame([("head",), ("tail",)], "side string"))
    queries.select("h", "r", "t", "side").crossJoin(top).write.parquet(str(tmp_path / "scores"))
    out = tmp_path / "export"
    args = ["mcq", *conf_args(config), "--dataset", str(wn18rr), "--scores", str(tmp_path / "scores")]
    args += ["--set", "mcq.export_formats=jsonl,json"]
    assert main([*args, "--out", str(out), "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    # WN18RR has no labels: the text rendering shows its numeric keys, and the summary says so
    assert (
        "0 of 40,943 entities have a label" in summary["warnings"][0] and "--entity-aliases" in summary["warnings"][0]
    )
    stats = {r["difficulty"]: r for r in summary["results"]}
    assert summary["counts"]["triples"] == 2000 and summary["counts"]["queries"] == 4000
    assert all(stats[d]["relations"] == 11 and stats[d]["triples"] == 2000 and stats[d]["options"] == 4 for d in stats)
    assert abs(stats["easy"]["entities"] - 13_040) <= 150, stats["easy"]
    assert stats["medium"]["entities"] < stats["easy"]["entities"]
    assert stats["hard"]["entities"] < stats["medium"]["entities"]
    # exactly one true answer among the options, against every split
    questions = spark.read.format("delta").load(str(wn18rr / "mcq" / "probekgc" / "questions"))
    assert questions.count() == 12_000
    opts = questions.select("id", "h", "r", "t", "task", F.explode("options").alias("o"))
    tail = opts.where("task = 'tail prediction'").join(
        triples.select("h", "r", F.col("t").alias("o")), ["h", "r", "o"], "left_semi"
    )
    head = opts.where("task = 'head prediction'").join(
        triples.select(F.col("h").alias("o"), "r", "t"), ["o", "r", "t"], "left_semi"
    )
    true_counts = tail.unionByName(head).groupBy("id").count()
    assert true_counts.count() == 12_000 and true_counts.where("count != 1").count() == 0
    # the files: ProbeKGC's names and shape (keys), the gold moved to each letter in the variants
    lines = (out / "keys" / "test_hard.jsonl").read_text().splitlines()
    assert len(lines) == 4000
    # the layout ProbeKGC's scripts read (json.load of one array) holds the same records
    assert json.loads((out / "keys" / "test_hard.json").read_text()) == [json.loads(x) for x in lines]
    first = json.loads(lines[0])
    assert list(first)[:7] == ["id", "triple", "task", "A", "B", "C", "D"] and len(first["triple"][0]) == 8
    for letter in "ABCD":
        fixed = [
            json.loads(x) for x in (out / "text" / f"fixed_{letter}" / "test_simple.jsonl").read_text().splitlines()
        ]
        assert len(fixed) == 4000 and all(r["answer"] == letter == r["fixed_position"] for r in fixed)
    text = json.loads((out / "text" / "test_medium.jsonl").read_text().splitlines()[0])
    assert text["prompt"].startswith("The incomplete triple is:\n(") and text["system"] == render.SYSTEM_PROMPT
    ids = json.loads((out / "ids" / "test_simple.jsonl").read_text().splitlines()[0])
    assert isinstance(ids["A"], int)


def test_hard_without_scores_is_a_clear_error(config, wn18rr, capsys):
    args = ["mcq", *conf_args(config), "--dataset", str(wn18rr), "--difficulties", "easy,hard", "--no-tracking"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "the hard difficulty needs model scores: --scores" in err and "--difficulties easy,medium" in err


def test_by_default_mcq_builds_what_runs_without_a_model_and_says_so(config, wn18rr, tmp_path, capsys):
    """No --difficulties, --scores or --entity-vectors: easy and medium, a warning naming --scores."""
    out = tmp_path / "s.json"
    args = ["mcq", *conf_args(config), "--dataset", str(wn18rr), "--name", "plain", "--n-triples", "20"]
    assert main([*args, "--out", str(tmp_path / "files"), "--no-tracking", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["params"]["mcq.difficulties"] == "easy,medium" and "--scores" in doc["warnings"][0]
    assert "questions_hard" not in doc["counts"] and doc["counts"]["queries"] == 40
    assert "warning: no hard options" in capsys.readouterr().out
    assert not list((tmp_path / "files").rglob("*hard*"))
