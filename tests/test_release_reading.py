"""Reading a published release for predict (kgbrink.evaluation.releases): the dense key numbering."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.evaluation import releases


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.text(alphabet="PQ0123456789", min_size=1, max_size=4), max_size=40), parts=st.integers(1, 5))
def test_keys_are_numbered_densely_in_key_order_whatever_the_partitioning(spark, keys, parts):
    frame = spark.createDataFrame([(k,) for k in keys], "key string").repartition(parts)
    got = {r["key"]: r["id"] for r in releases.numbered(frame).collect()}
    assert got == {key: index for index, key in enumerate(sorted(set(keys)))}
    assert releases.numbered(frame).schema["id"].dataType.simpleString() == "int"


def test_keys_read_back_by_the_released_ids_and_an_unknown_key_fails_naming_it(spark):
    """A release's dictionaries carry the dataset's ids (used as they are, not renumbered); a key the KG has
    not fails the read (by_id, mcq_questions) instead of becoming a null id."""
    import pytest

    entities = spark.createDataFrame([(7, "Q2", "two"), (3, "Q1", "one")], "id int, key string, label string")
    relations = spark.createDataFrame([(5, "P1", "p")], "id int, key string, label string")
    assert sorted(releases.dictionary(entities).collect()) == sorted(entities.collect())
    triples = spark.createDataFrame([("Q1", "P1", "Q2")], "h string, r string, t string")
    keys = {"entity_columns": ("h", "t"), "relation_columns": ("r",)}
    assert [tuple(r) for r in releases.by_id(triples, entities, relations, **keys).collect()] == [(3, 5, 7)]
    bad = spark.createDataFrame([("Q1", "P1", "Q9")], "h string, r string, t string")
    with pytest.raises(Exception, match="column t holds a key the release's KG has not: Q9"):
        releases.by_id(bad, entities, relations, **keys).collect()
    text = spark.createDataFrame([("m1", "Which?", "easy")], "id string, prompt string, split string")
    by_key = spark.createDataFrame(
        [("m1", ["Q1", "P1", "Q2"], "tail prediction", "A", "Q2", "Q9")],
        "id string, triple array<string>, task string, answer string, A string, B string",
    )
    with pytest.raises(Exception, match="question m1 names an entity the KG has not: Q9"):
        releases.mcq_questions(text, by_key, entities, relations, triples).collect()


@st.composite
def _question_sets(draw):
    """Question rows (ids) over a small KG: repeated seeds and triples (parallel edges), empty subgraphs, null
    and empty answer sets, null splits, unicode texts."""
    n_entities, n_relations = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    entity, relation = st.integers(0, n_entities - 1), st.integers(0, n_relations - 1)
    triple = st.tuples(entity, relation, entity)
    rows = []
    for index in range(draw(st.integers(1, 4))):
        full = draw(st.none() | st.lists(triple, max_size=4))
        answers = draw(st.none() | st.lists(entity, max_size=4, unique=True))
        rows.append((
            f"q{index}", draw(st.sampled_from([None, "train", "test"])), draw(st.none() | st.text(max_size=12)),
            draw(st.lists(entity, min_size=1, max_size=3)), draw(entity), draw(st.lists(triple, max_size=4)),
            "(1)", None, 1, 1, 1, 0, answers, None if answers is None else len(answers),
            draw(st.none() | st.booleans()), full,
        ))  # fmt: skip
    return n_entities, n_relations, rows


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=_question_sets())
def test_a_question_set_published_by_key_reads_back_as_it_was(spark, drawn):
    """keyed_questions (what a release publishes, a null split under train with no_split) read back by
    gt_questions is the question set row for row: order of seeds, triples and answers, null apart from empty."""
    from pyspark.sql import functions as F

    from kgbrink.core import catalog
    from kgbrink.synthkgqa.generator import keyed_questions

    n_entities, n_relations, rows = drawn
    questions = spark.createDataFrame(rows, catalog.GT_QUESTION_COLUMNS)
    entities = spark.createDataFrame(
        [(i, f"Q{i}", None) for i in range(n_entities)], "id int, key string, label string"
    )
    relations = spark.createDataFrame(
        [(i, f"P{i}", None) for i in range(n_relations)], "id int, key string, label string"
    )
    keyed = keyed_questions(questions, entities, relations)
    published = keyed.withColumn("no_split", F.col("split").isNull()).fillna({"split": "train"})
    back = releases.gt_questions(published, entities, relations)
    assert sorted(back.collect()) == sorted(questions.collect())
