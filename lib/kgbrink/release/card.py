"""The dataset card: ``README.md`` with the YAML header the Hugging Face Hub reads.

Header: ``license``, ``pretty_name``, ``tags`` and ``configs`` (per configuration its ``data_files`` by
split, as globs of the shard names); body: what each benchmark is, its configurations with rows per split
and fields, the dataset's input table versions, the build settings and the citations. Everything comes
from the manifest, so the card's bytes are a function of the release's content.
"""

from __future__ import annotations

import yaml
from huggingface_hub import DatasetCardData

from kgbrink.core import markdown
from kgbrink.release.benchmarks import DECLARED
from kgbrink.release.layout import Config


def _glob(files: list[str]) -> str:
    """The one glob matching a split's shards ``<dir>/<split>-0000i-of-0000n.<ext>``."""
    first = files[0]
    directory, _, name = first.rpartition("/")
    stem = name.split("-", 1)[0] if "-of-" in name else name.rsplit(".", 1)[0]
    ext = name.rsplit(".", 1)[1]
    return f"{directory}/{stem}-*.{ext}" if "-of-" in name else first


def _simple(spark_type) -> str:
    """A Spark JSON type as its short name: ``string``, ``array<string>``, ``struct<key,label>``."""
    if isinstance(spark_type, str):
        return spark_type
    if spark_type.get("type") == "array":
        return f"array<{_simple(spark_type['elementType'])}>"
    if spark_type.get("type") == "struct":
        return "struct<" + ",".join(f["name"] for f in spark_type["fields"]) + ">"
    return str(spark_type.get("type"))


def header(name: str, licence: str, configs: list[Config]) -> DatasetCardData:
    """The card's YAML header: licence, name, tags and each configuration's ``data_files`` by split."""
    return DatasetCardData(
        license=licence,
        pretty_name=name,
        tags=["knowledge-graph", "kgbrink"],
        configs=[
            {
                "config_name": c.name,
                "data_files": [{"split": split, "path": _glob(files)} for split, files in c.files.items() if files],
            }
            for c in configs
        ],
    )


def dataset_card(manifest: dict) -> str:
    """The card's text from a release manifest (``release.json``'s content)."""
    configs = [Config.from_dict(c) for c in manifest["configs"]]
    head = header(manifest["name"], manifest["licence"], configs).to_yaml()
    lines = ["---", head, "---", "", f"# {manifest['name']} ({manifest['version']})", ""]
    lines += [
        f"Built by kgbrink from the dataset `{manifest['dataset_name']}`: triples, entities and relations at "
        + ", ".join(f"{k} version {v}" for k, v in manifest["inputs"].items())
        + ". Entities and relations are named by the dataset's keys. Load a configuration with "
        "`datasets.load_dataset(<this folder or repository>, <config name>)`; `croissant.json` describes "
        "every file (SHA-256) and field, and `SHA256SUMS` lists every file's digest.",
        "",
    ]
    for declared in DECLARED:
        benchmark, entry = declared.name, manifest["benchmarks"].get(declared.name)
        if entry is None:
            continue
        lines += [f"## {benchmark}: {declared.title}", ""]
        lines += markdown.table(
            ["config", "splits (rows)", "fields"],
            (
                [
                    f"`{c.name}`" + (" (also as JSON Lines: `<split>.jsonl`)" if c.jsonl else ""),
                    ", ".join(f"{s} ({c.rows.get(s, 0):,})" for s in c.files),
                    ", ".join(f"`{n}` {_simple(t)}" for n, t in c.fields),
                ]
                for c in configs
                if c.benchmark == benchmark
            ),
        )
        lines.append("")
        notes = entry.get("notes")
        if notes:
            lines += [notes, ""]
        if entry.get("settings"):
            lines += [
                "Built with:",
                "",
                "```yaml",
                yaml.safe_dump(entry["settings"], sort_keys=True).rstrip(),
                "```",
                "",
            ]
        if declared.citation:
            lines += ["Cite:", "", "```bibtex", declared.citation, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
