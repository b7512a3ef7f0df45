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
