"""The release's benchmarks declared once (kgbrink.release.benchmarks) and the card's header written with
the Hub's DatasetCardData: no Spark."""

from __future__ import annotations

from huggingface_hub import DatasetCard

from kgbrink.jobs import release
from kgbrink.release import benchmarks, card, layout


def test_every_declared_benchmark_has_one_builder_and_names_its_configurations():
    names = [declared.name for declared in benchmarks.DECLARED]
    assert names == list(layout.BENCHMARKS) == list(release.BUILDERS)
    configs = [part.config for d in benchmarks.DECLARED for part in (*d.tables, *d.files)]
    assert len(configs) == len(set(configs)) == 32
    for declared in benchmarks.DECLARED:
        for part in (*declared.tables, *declared.files):
            assert part.config.startswith(declared.name + "_"), part.config
        shown = {part.config for part in declared.tables}
        assert set(declared.report_tables) <= shown, declared.name


def _manifest(name: str) -> dict:
    files = {"train": ["kg/triples/train-00000-of-00002.parquet", "kg/triples/train-00001-of-00002.parquet"]}
    config = layout.Config("kg_triples", "kg", "the KG's triples", files, {"train": 7}, [("h", "string")])
    return {
        "name": name,
        "version": "v1",
        "licence": "cc-by-4.0",
        "dataset_name": "sample",
        "inputs": {"triples": 0},
        "benchmarks": {"kg": {"fingerprint": {}, "settings": {}, "notes": ""}},
        "configs": [config.as_dict()],
    }


def test_the_card_header_is_what_the_hub_reads_back():
    text = card.dataset_card(_manifest("kgbrink release"))
    assert text.startswith(
        "---\nlicense: cc-by-4.0\npretty_name: kgbrink release\ntags:\n- knowledge-graph\n- kgbrink\nconfigs:\n"
        "- config_name: kg_triples\n  data_files:\n  - split: train\n    path: kg/triples/train-*.parquet\n---\n"
    )
    data = DatasetCard(text).data
    assert data.license == "cc-by-4.0" and data.pretty_name == "kgbrink release"
    assert data.configs == [
        {"config_name": "kg_triples", "data_files": [{"split": "train", "path": "kg/triples/train-*.parquet"}]}
    ]


def test_a_name_the_yaml_must_quote_reads_back_unchanged():
    name = "KG: 'brink' # v2 — ünïcode, and a name long enough to pass the eighty columns of a YAML line"
    assert DatasetCard(card.dataset_card(_manifest(name))).data.pretty_name == name
