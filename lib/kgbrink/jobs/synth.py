"""``kgbrink synth``: a Wikidata5m-shaped knowledge graph in the Wikidata5m file format (model in
:mod:`kgbrink.kg.synth`), with ``synth_manifest.json`` describing what was generated."""

from __future__ import annotations

from pathlib import Path

from kgbrink.core.settings import Config, is_uri
from kgbrink.core.tracking import JobSummary
from kgbrink.kg import synth


def run(
    config: Config,
    out: str,
    triples: int | None,
    seed: int | None,
    malformed_fraction: float | None,
    duplicate_fraction: float | None,
    gzip: bool,
) -> JobSummary:
    """Generate and write the graph into the local directory ``out``; None arguments take ``synth.*`` settings."""
    if is_uri(out):
        raise ValueError(f"synth writes local files; got the URI {out}")
    params = {
        "out": str(Path(out).resolve()),
        "triples": int(config.get("synth.triples") if triples is None else triples),
        "seed": int(config.get("synth.seed") if seed is None else seed),
        "malformed_fraction": float(
            config.get("synth.malformed_fraction") if malformed_fraction is None else malformed_fraction
        ),
        "duplicate_fraction": float(
            config.get("synth.duplicate_fraction") if duplicate_fraction is None else duplicate_fraction
        ),
        "gzip": gzip,
    }
    summary = JobSummary("synth", params=params)
    with summary.timed("generate"):
        kg = synth.generate(params["triples"], params["seed"])
    with summary.timed("write"):
        manifest = synth.write_dataset(
            kg, params["out"], params["malformed_fraction"], params["duplicate_fraction"], compress=gzip
        )
    summary.params.update(
        model=synth.MODEL_PARAMETERS,
        classes=manifest["classes"],
        planted_rules=[r["rule"] for r in manifest["planted_rules"]],
    )
    summary.counts.update(
        lines={
            "train": manifest["train_file_lines"],
            "valid": manifest["splits"]["valid"],
            "test": manifest["splits"]["test"],
        },
        triples=manifest["splits"],
        entities=manifest["entities"],
        relations=manifest["relations"],
        malformed_lines=manifest["malformed_lines"],
        duplicate_lines=manifest["duplicate_lines"],
        top_class_in_degree=manifest["top_class"]["in_degree"],
    )
    return summary
