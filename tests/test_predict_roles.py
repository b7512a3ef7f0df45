"""predict's two roles from the one endpoint settings shape (``predict`` and ``judge``, issue 70): a null judge
field is the answering one's, the judge's revision keys its calls and its run's fingerprint."""

from __future__ import annotations

from dataclasses import replace

from kgbrink.core.jobs import JobContext
from kgbrink.evaluation.calls import call_rows
from kgbrink.jobs import predict
from kgbrink.jobs.evaluations import EVALUATIONS
from kgbrink.jobs.evaluations.inputs import fingerprint


def _roles(config, *sets: str, **options):
    ctx = JobContext(None, config.with_overrides(list(sets)))
    opts = predict.PredictOptions(benchmark="okgqa", model="m", context="subgraph", **options)
    evaluation = EVALUATIONS["okgqa"]
    answering, judge = predict._roles(ctx, evaluation, opts, evaluation.template(None, opts.context))
    return ctx, opts, answering, judge


def test_a_null_judge_field_is_the_answering_ones_and_its_revision_keys_its_calls(config, spark):
    _, _, answering, judge = _roles(config, "predict.model_revision=r1", "predict.price_prompt_per_million=2")
    assert (judge.model, judge.revision, judge.prices[0]) == ("m", "r1", 2.0)
    assert judge.endpoint == answering.endpoint  # no judge URL: the answering endpoint, its key and all
    _, _, _, other = _roles(config, "predict.model_revision=r1", "judge.model=j", "judge.price_prompt_per_million=0")
    assert (other.model, other.revision, other.prices[0]) == ("j", None, 0.0)  # another model: not its revision
    ctx, opts, answering, own = _roles(
        config, "judge.model=j", "judge.model_revision=j2", "judge.base_url=http://127.0.0.1:9/v1"
    )
    assert own.revision == "j2" and own.endpoint.base_url == "http://127.0.0.1:9/v1"
    # the revision in the call key (not sent) and in the run's fingerprint
    items = spark.createDataFrame([("a", '[{"role": "user", "content": "x"}]')], "item_id string, messages string")
    keys = {r: call_rows(items, "j", {}, revision=r).first()["call_id"] for r in (None, "j2", "j3")}
    assert len(set(keys.values())) == 3
    evaluation = EVALUATIONS["okgqa"]
    prints = {
        revision: fingerprint(ctx, evaluation, opts, None, answering, replace(own, revision=revision))
        for revision in (None, "j2")
    }
    assert prints[None] != prints["j2"]
