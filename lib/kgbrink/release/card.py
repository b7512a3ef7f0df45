"""The dataset card: ``README.md`` with the YAML header the Hugging Face Hub reads.

Header: ``license``, ``pretty_name``, ``tags`` and ``configs`` (per configuration its ``data_files`` by
split, as globs of the shard names); body: what each benchmark is, its configurations with rows per split
and fields, the dataset's input table versions, the build settings and the citations. Everything comes
from the manifest, so the card's bytes are a function of the release's content.
"""

from __future__ import annotations

import yaml

from kgbrink.release.layout import BENCHMARKS, CITATIONS, TITLES, Config


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


def header(name: str, licence: str, configs: list[Config]) -> dict:
    return {
        "license": licence,
        "pretty_name": name,
        "tags": ["knowledge-graph", "kgbrink"],
        "configs": [
            {
                "config_name": c.name,
                "data_files": [{"split": split, "path": _glob(files)} for split, files in c.files.items() if files],
            }
            for c in configs
        ],
    }


def dataset_card(manifest: dict) -> str:
    """The card's text from a release manifest (``release.json``'s content)."""
    configs = [Config.from_dict(c) for c in manifest["configs"]]
    head = yaml.safe_dump(header(manifest["name"], manifest["licence"], configs), sort_keys=False, width=1000)
    lines = ["---", head.rstrip(), "---", "", f"# {manifest['name']} ({manifest['version']})", ""]
    lines += [
        f"Built by kgbrink from the dataset `{manifest['dataset_name']}`: triples, entities and relations at "
        + ", ".join(f"{k} version {v}" for k, v in manifest["inputs"].items())
        + ". Entities and relations are named by the dataset's keys. Load a configuration with "
        "`datasets.load_dataset(<this folder or repository>, <config name>)`; `croissant.json` describes "
        "every file (SHA-256) and field, and `SHA256SUMS` lists every file's digest.",
        "",
    ]
    for benchmark in BENCHMARKS:
        entry = manifest["benchmarks"].get(benchmark)
        if entry is None:
            continue
        lines += [f"## {benchmark}: {TITLES[benchmark]}", ""]
        lines += ["| config | splits (rows) | fields |", "|---|---|---|"]
        for c in configs:
            if c.benchmark != benchmark:
                continue
            splits = ", ".join(f"{s} ({c.rows.get(s, 0):,})" for s in c.files)
            fields = ", ".join(f"`{n}` {_simple(t)}" for n, t in c.fields)
            also = " (also as JSON Lines: `<split>.jsonl`)" if c.jsonl else ""
            lines.append(f"| `{c.name}`{also} | {splits} | {fields} |")
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
        if benchmark in CITATIONS:
            lines += ["Cite:", "", "```bibtex", CITATIONS[benchmark], "```", ""]
    return "\n".join(lines).rstrip() + "\n"
