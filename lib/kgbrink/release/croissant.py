"""``croissant.json``: the release as Croissant 1.0 metadata (MLCommons; NeurIPS Datasets and Benchmarks).

Distribution: one ``cr:FileObject`` per file with its SHA-256 and size, and one ``cr:FileSet`` per
configuration (its shards, by glob). Record sets: one per configuration, a field per column typed from the
Spark schema (``string`` -> ``sc:Text``, integers -> ``sc:Integer``, ``double`` -> ``sc:Float``,
``boolean`` -> ``sc:Boolean``; an array is a ``repeated`` field of its element type, an array of structs
has a sub-field per struct field) and ``split``, taken from the file name.
"""

from __future__ import annotations

from kgbrink.release.benchmarks import BY_NAME
from kgbrink.release.card import _glob
from kgbrink.release.layout import Config

CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
ENCODINGS = {"parquet": "application/x-parquet", "json": "application/jsonlines"}
SCALARS = {
    "string": "sc:Text",
    "integer": "sc:Integer",
    "long": "sc:Integer",
    "short": "sc:Integer",
    "byte": "sc:Integer",
    "double": "sc:Float",
    "float": "sc:Float",
    "boolean": "sc:Boolean",
}
LICENCES = {
    "cc-by-4.0": "https://creativecommons.org/licenses/by/4.0/",
    "cc-by-sa-4.0": "https://creativecommons.org/licenses/by-sa/4.0/",
    "cc0-1.0": "https://creativecommons.org/publicdomain/zero/1.0/",
    "mit": "https://opensource.org/licenses/MIT",
    "apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0",
}


def _field(
    record: str, file_set: str, name: str, spark_type, column: str | None = None, path: str | None = None
) -> dict:
    """A Croissant field for a column of Spark JSON type ``spark_type``."""
    out = {"@type": "cr:Field", "@id": f"{record}/{path or name}", "name": name}
    element = spark_type
    if isinstance(spark_type, dict) and spark_type.get("type") == "array":
        out["repeated"] = True
        element = spark_type["elementType"]
        while isinstance(element, dict) and element.get("type") == "array":
            element = element["elementType"]
    source = {"fileSet": {"@id": file_set}, "extract": {"column": column or name}}
    if isinstance(element, dict) and element.get("type") == "struct":
        out["subField"] = [
            {
                **_field(record, file_set, sub["name"], sub["type"], column or name, f"{path or name}/{sub['name']}"),
                "source": {**source, "transform": {"jsonPath": sub["name"]}},
            }
            for sub in element["fields"]
        ]
        return out
    out["dataType"] = SCALARS.get(element, "sc:Text")
    out["source"] = source if path is None else {**source, "transform": {"jsonPath": name}}
    return out


def _file_set(name: str, fmt: str, files: dict[str, list[str]]) -> dict:
    return {
        "@type": "cr:FileSet",
        "@id": name,
        "name": name,
        "encodingFormat": ENCODINGS[fmt],
        "includes": [_glob(fs) for fs in files.values() if fs],
    }


def _record_set(name: str, description: str, file_set: str, fields: list) -> dict:
    typed = [_field(name, file_set, column, spark_type) for column, spark_type in fields]
    if all(column != "split" for column, _ in fields):  # question records may carry their own split
        typed.append(
            {
                "@type": "cr:Field",
                "@id": f"{name}/split",
                "name": "split",
                "dataType": "sc:Text",
                "source": {
                    "fileSet": {"@id": file_set},
                    "extract": {"fileProperty": "filename"},
                    "transform": {"regex": r"^(.*?)(?:-\d+-of-\d+)?\.[a-z]+$"},
                },
            }
        )
    return {"@type": "cr:RecordSet", "@id": name, "name": name, "description": description, "field": typed}


def metadata(manifest: dict, digests: dict[str, tuple[str, int]]) -> dict:
    """The Croissant document of a release manifest; ``digests``: file -> (sha256, bytes)."""
    configs = [Config.from_dict(c) for c in manifest["configs"]]
    formats = {f: "parquet" for c in configs for fs in c.files.values() for f in fs}
    formats.update({f: "json" for c in configs for fs in c.jsonl.values() for f in fs})
    distribution = [
        {
            "@type": "cr:FileObject",
            "@id": name,
            "name": name,
            "contentUrl": name,
            "encodingFormat": ENCODINGS[formats[name]],
            "contentSize": f"{digests[name][1]} B",
            "sha256": digests[name][0],
        }
        for name in sorted(formats)
    ]
    record_sets = []
    for c in configs:
        distribution.append(_file_set(f"files/{c.name}", "parquet", c.files))
        record_sets.append(_record_set(c.name, c.description, f"files/{c.name}", c.fields))
        if c.jsonl:
            distribution.append(_file_set(f"files/{c.name}_jsonl", "json", c.jsonl))
            record_sets.append(
                _record_set(f"{c.name}_jsonl", f"{c.description} (JSON Lines)", f"files/{c.name}_jsonl", c.jsonl_fields)
            )
    cited = [BY_NAME[b].citation for b in manifest["benchmarks"] if BY_NAME[b].citation]
    return {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "name": manifest["name"],
        "description": f"kgbrink release {manifest['version']} of the dataset {manifest['dataset_name']}: "
        + ", ".join(manifest["benchmarks"]),
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "citeAs": "\n\n".join(cited) or manifest["name"],
        "datePublished": manifest["date"],
        "license": LICENCES.get(manifest["licence"], manifest["licence"]),
        "url": manifest.get("url") or "https://github.com/kgbrink/kgbrink",
        "version": manifest["version_number"],
        "distribution": distribution,
        "recordSet": record_sets,
    }
