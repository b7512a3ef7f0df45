"""``kgbrink synth``: a Wikidata5m-shaped knowledge graph in the Wikidata5m file format (model in
:mod:`kgbrink.kg.synth`), with ``synth_manifest.json`` describing what was generated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobSummary
from kgbrink.kg import synth


@dataclass
class SynthOptions:
    out: str | None = arg(None, "output directory", required=True)
    triples: int | None = arg(None, "number of distinct triples (default: setting synth.triples)", type=int)
    seed: int | None = arg(None, "random seed (default: setting synth.seed)", type=int)
    malformed_fraction: float | None = arg(None, "share of extra malformed lines", type=float)
    duplicate_fraction: float | None = arg(None, "share of extra exact duplicate lines", type=float)
    gzip: bool = arg(False, "write .txt.gz files", action="store_true")


@job("synth", "generate a Wikidata5m-shaped KG in the Wikidata5m file format", SynthOptions, spark=False, steps=2)
def run(ctx: JobContext, opts: SynthOptions) -> JobSummary:
    """Generate and write the graph into the local directory ``out``; None options take ``synth.*`` settings."""
    config, out, gzip = ctx.config, opts.out, opts.gzip
    if not out:
        raise ValueError("synth needs an output directory (--out)")
    if is_uri(out):
        raise ValueError(f"synth writes local files; got the URI {out}")
    params = {
        "out": str(Path(out).resolve()),
        "triples": int(config.synth.triples if opts.triples is None else opts.triples),
        "seed": int(config.synth.seed if opts.seed is None else opts.seed),
        "malformed_fraction": float(
            config.synth.malformed_fraction if opts.malformed_fraction is None else opts.malformed_fraction
        ),
        "duplicate_fraction": float(
            config.synth.duplicate_fraction if opts.duplicate_fraction is None else opts.duplicate_fraction
        ),
        "gzip": gzip,
    }
    summary = ctx.begin(**params)
    with ctx.step("generate"):
        kg = synth.generate(params["triples"], params["seed"])
    with ctx.step("write"):
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
