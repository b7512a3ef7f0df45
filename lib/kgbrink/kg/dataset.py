"""Facts about an ingested dataset that other steps default to."""

from __future__ import annotations

from pyspark.sql import DataFrame


def dataset_splits(triples: DataFrame) -> list[str]:
    """The splits a dataset's ``triples`` table has (its partition values), sorted: the default of every
    step that reads "all splits" (mining, grounding, variants), so a train-only dataset needs no flags."""
    return sorted(r["split"] for r in triples.select("split").distinct().collect())
