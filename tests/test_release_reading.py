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
