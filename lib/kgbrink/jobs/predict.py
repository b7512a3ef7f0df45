"""``kgbrink predict``: a benchmark's prompts sent to an OpenAI-compatible chat-completions endpoint, every
answer kept, parsed the paper's way and scored (issue 58; ``../shared/specs/model-evaluation.md``).

What each benchmark reads, renders, parses and scores is its :class:`kgbrink.jobs.evaluations.protocol.Evaluation`
(:data:`kgbrink.jobs.evaluations.EVALUATIONS`); the model call is :mod:`kgbrink.jobs.evaluations.model_calls`.
Every request is a row of ``predict/model_calls`` keyed by ``call_id`` = SHA-256 of (model, request
parameters, prompt SHA-256): a prompt whose key has a row is never asked again (a rerun asks nothing; a new
model or setting asks only what it lacks), and answers reach a spool file as they arrive
(:mod:`kgbrink.llm.spool`), so a killed run or a lost executor asks no answered prompt twice. Prompts whose
call failed (after ``predict.max_tries``) or whose answer did not parse go to ``predict_quarantine`` with the
reason; past ``predict.max_bad_fraction`` the job fails. Output under ``--out`` (default
``<dataset>/predict/<benchmark>/<name>/<fingerprint>``): ``predict_prompts``, the parsed predictions,
``predict_quarantine`` and the scorer's tables and report.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from kgbrink.core import catalog
from kgbrink.core.jobs import JobContext, arg, job
from kgbrink.core.locations import is_uri
from kgbrink.core.tracking import JobSummary, fail_past_bad_fraction
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation.calls import call_rows, canonical
from kgbrink.jobs.evaluations import EVALUATIONS, model_calls
from kgbrink.jobs.evaluations.inputs import ReleaseInput, fingerprint, pinned_sources
from kgbrink.jobs.evaluations.protocol import (
    QUARANTINE,
    Evaluation,
    Role,
    Run,
    judge_params,
    quarantined_example,
    request_params,
    split_answers,
)


@dataclass
class PredictOptions:
    benchmark: str = arg(None, "benchmark whose prompts are asked", required=True, choices=sorted(EVALUATIONS))
    dataset: str | None = arg(None, "dataset (default: setting 'dataset'; with --release: where answers are kept)")
    release: str | None = arg(
        None,
        "a release (kgbrink release's root, one version, or a fetched copy) whose questions are asked instead of "
        "a dataset's (brink: --context none; okgqa: a release built with --okgqa-questions)",
    )
    name: str | None = arg(
        None,
        "question set (probekgc: kgbrink mcq --name, default probekgc; brink: the variant, default variant.name; "
        "okgqa: okgqa-subgraphs --name; synthkgqa: seed-graphs --name, default seeds)",
    )
    model: str | None = arg(None, "model name sent to the endpoint (default: setting predict.model)")
    base_url: str | None = arg(None, "endpoint, e.g. http://127.0.0.1:8000/v1 (default: setting predict.base_url)")
    template: str | None = arg(
        None,
        "prompt template: one of the benchmark's built-ins for its context (name@version; docs/evaluation.md) or a "
        "YAML/JSON file whose slots the benchmark fills",
    )
    scheme: str = arg("text_label", "brink: entity naming", choices=["private_id", "entity_id", "text_label"])
    context: str | None = arg(
        None,
        "knowledge given with a question: brink none (default), oracle or neighbourhood; okgqa subgraph "
        "(default), triplets, paths, pcst, none, cot or cot_sc; synthkgqa-answer gt (default), full_gt, sp, question_graph, retrieved "
        "or none",
        choices=sorted({c for e in EVALUATIONS.values() for c in e.contexts}),
    )
    kg: str = arg("incomplete", "brink neighbourhood: the KG it is retrieved from", choices=["complete", "incomplete"])
    questions: str | None = arg(None, 'okgqa: question texts, JSON Lines {"qid", "question", "references"?}')
    retrieved: str | None = arg(
        None, 'synthkgqa-answer --context retrieved: a retriever\'s triples, JSON Lines {"id", "triples": [[h, r, t]]}'
    )
    judge_model: str | None = arg(None, "okgqa: the G-Eval judge's model (default: setting judge.model)")
    judge_base_url: str | None = arg(
        None, "okgqa: the judge's endpoint (default: setting judge.base_url, else the answering one)"
    )
    split: str = arg("test", "brink: question split asked; synthkgqa-answer: 'all' for every split")
    limit: int | None = arg(None, "ask only the first N prompts (by item id)", type=int)
    run_name: str = arg("1", "run label of the predictions (score-mcq's run)", flag="--run")
    out: str | None = arg(None, "output folder (default: <dataset>/predict/<benchmark>/<name>/<fingerprint>)")
    files: str | None = arg(
        None,
        "local folder of the plain files (JSON Lines, reports; default: the output folder when it is local, else "
        "<data_dir>/predict/<benchmark>/<name>/<fingerprint>)",
    )
    rewrite: bool = arg(
        False,
        "brink: App. D, each question rewritten by the judge's model (--judge-model, else --model) before it is "
        "asked; a rewrite that fails the check keeps the template question",
        action="store_true",
    )
    score: bool = arg(True, "skip the scorer", flag="--no-score", action="store_false")
    dry_run: bool = arg(
        False,
        "print the plan and ask nothing: prompts, answers kept, requests to send, estimated tokens, cost and time, "
        "three sample prompts",
        action="store_true",
    )


def coalesce(*values):
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


def _roles(ctx: JobContext, evaluation: Evaluation, opts: PredictOptions, template) -> tuple[Role, Role | None]:
    """The answering model (settings ``predict``) and, when the evaluation's scorer asks one, its judge
    (settings ``judge``, the same shape, a null field the answering model's; a missing key of either fails
    here, before anything is asked; with ``--no-score`` the judge is named, for the fingerprint, but its
    endpoint is not checked)."""
    settings, judging = ctx.config.predict, ctx.config.judge
    model = opts.model or settings.model
    if not model:
        raise ConfigError("no model: pass --model or set predict.model")
    prices = (settings.price_prompt_per_million, settings.price_completion_per_million)
    endpoint = model_calls.endpoint(settings, settings, "predict", opts.base_url)
    answering = Role("answer", model, request_params(template, settings), endpoint, prices, settings.model_revision)
    judge_template = evaluation.judge_template(opts)
    if judge_template is None:
        return answering, None
    judge_url = opts.judge_base_url or judging.base_url
    judge_prices = (
        coalesce(judging.price_prompt_per_million, prices[0]),
        coalesce(judging.price_completion_per_million, prices[1]),
    )
    used = opts.score or evaluation.judge is None  # a scorer's judge only when scoring; a rewriter always
    # its own endpoint gets its own key only; without one it is the answering endpoint, key and all
    judge_endpoint = model_calls.endpoint(settings, judging, "judge", judge_url) if used and judge_url else endpoint
    judge_model = opts.judge_model or judging.model or model
    revision = coalesce(judging.model_revision, settings.model_revision if judge_model == model else None)
    params = judge_params(judge_template, settings)
    return answering, Role("judge", judge_model, params, judge_endpoint, judge_prices, revision)


def _check(config, opts: PredictOptions) -> None:
    """What needs no Spark, before the session starts: the model, the settings, the context and template."""
    settings = config.predict
    if not (opts.model or settings.model):
        raise ConfigError("no model: pass --model or set predict.model")
    evaluation = EVALUATIONS[opts.benchmark]
    if settings.tasks < 1 or settings.in_flight < 1 or settings.max_tries < 1:
        raise ConfigError("predict.tasks, predict.in_flight and predict.max_tries must be >= 1")
    if settings.max_cost is not None and (
        settings.max_cost <= 0
        or (settings.price_prompt_per_million, settings.price_completion_per_million) == (None, None)
    ):
        raise ConfigError("predict.max_cost must be > 0 and needs predict.price_prompt_per_million or _completion_")
    if settings.model_change not in ("fail", "allow"):
        raise ConfigError(f"predict.model_change must be fail or allow, not {settings.model_change!r}")
    opts.context = opts.context or evaluation.contexts[0]
    if opts.context not in evaluation.contexts:
        known = ", ".join(evaluation.contexts)
        raise ConfigError(f"--context {opts.context} is not one of {opts.benchmark}'s: {known}")
    evaluation.template(opts.template, opts.context)


def _open(ctx: JobContext, opts: PredictOptions) -> tuple[Evaluation, Run]:
    """Settings checked, the benchmark's inputs pinned, the output folder named by their fingerprint."""
    settings = ctx.config.predict
    evaluation = EVALUATIONS[opts.benchmark]
    _check(ctx.config, opts)  # again: a job run by another job (ctx.run) has no command line
    template = evaluation.template(opts.template, opts.context)
    answering, judge = _roles(ctx, evaluation, opts, template)
    release = ReleaseInput.open(ctx, opts.release) if opts.release else None
    if release is not None and evaluation.release_benchmark not in release.manifest["benchmarks"]:
        raise ConfigError(f"{release.where}: the release has no {evaluation.release_benchmark} benchmark")
    dataset = opts.dataset or ctx.config.data_dir if release else ctx.config.require_dataset(opts.dataset)
    name = opts.name or (
        f"release-{release.manifest.get('version', 'v')}" if release else evaluation.default_name(ctx.config)
    )
    summary = ctx.begin(
        benchmark=opts.benchmark,
        dataset=dataset,
        name=name,
        model=answering.model,
        base_url=answering.endpoint.base_url,
        api_key_env=settings.api_key_env,
        params=answering.params,
        template=opts.template,
        template_ref=template.ref,
        limit=opts.limit,
        release=release.folder if release else None,
        context=opts.context,
        **evaluation.labels(opts),
    )
    if release is not None:
        sources = evaluation.release_sources(ctx, release, opts)
    else:
        sources = pinned_sources(ctx, evaluation, opts, dataset, name)
    digest = fingerprint(ctx, evaluation, opts, release, answering, judge)
    out = (opts.out or f"{dataset}/predict/{opts.benchmark}/{name}/{digest}").rstrip("/")
    spool_dir = settings.spool_dir or f"{dataset}/predict/_spool"
    if is_uri(spool_dir):
        raise ConfigError(f"predict.spool_dir must be a file system folder every executor sees, not {spool_dir}")
    files = opts.files or (
        out if not is_uri(out) else f"{ctx.config.data_dir}/predict/{opts.benchmark}/{name}/{digest}"
    )
    if is_uri(files):
        raise ConfigError(f"--files must be a local folder, not {files}")
    summary.params.update(out=out, fingerprint=digest, files=files)
    run = Run(
        opts.benchmark, dataset, name, answering, template, judge, settings.tasks, out, spool_dir, digest, files,
        release.folder if release else "", sources,
    )  # fmt: skip
    return evaluation, run


@job(
    "predict",
    "a benchmark's prompts to an OpenAI-compatible endpoint, answers kept, parsed and scored",
    PredictOptions,
    steps=5,
    check=_check,
)
def run(ctx: JobContext, opts: PredictOptions) -> JobSummary:
    evaluation, state = _open(ctx, opts)
    return _steps(ctx, evaluation, state, opts)  # the frames its steps persisted: released by ctx at the end


def _steps(ctx: JobContext, evaluation: Evaluation, run: Run, opts: PredictOptions) -> JobSummary:
    summary = ctx.summary
    with ctx.step("prompts"):
        items = evaluation.prompts(ctx, run, opts)
        role = run.answering
        prompts = run.prompts = ctx.persist(call_rows(items, role.model, role.params, opts.limit, role.revision))
        if opts.dry_run:
            return model_calls.dry_run(ctx, run, prompts, judged=evaluation.judge is not None)
        ctx.write("predict_prompts", prompts.drop("body"), run.path("predict_prompts"), table="predict.prompts")
        summary.counts.update(prompts=prompts.count(), distinct_prompts=prompts.select("call_id").distinct().count())
    with ctx.step("recover"):
        summary.counts["spools_recovered"] = model_calls.recover(ctx, run)
    with ctx.step("ask"):
        run.failed = model_calls.ask(ctx, run, run.answering, prompts)
    model_calls.usage(ctx, run, run.answering, prompts)
    with ctx.step("parse"):
        answers, quarantine = split_answers(prompts, model_calls.calls(ctx, run), run.failed)
        bad = evaluation.parse(ctx, run, answers, quarantine, opts)
        fail_past_bad_fraction(
            summary,
            bad,
            summary.counts["prompts"],
            float(ctx.config.predict.max_bad_fraction),
            "predict.max_bad_fraction",
            "prompts",
            f"see {run.path(QUARANTINE)}",
            example=partial(quarantined_example, ctx),
        )
    if opts.score:
        with ctx.step("score"):
            evaluation.score(ctx, run, opts)
        _record_results(ctx, evaluation, run, opts)
    return summary


_COLUMNS = ("metric", "value", "model", "run")  # a result's keys the results table has columns for


def _record_results(ctx: JobContext, evaluation: Evaluation, run: Run, opts: PredictOptions) -> None:
    """The run's scores into ``<dataset>/predict/results`` (replacing an earlier run with its fingerprint):
    what a release's results config carries."""
    judge = ctx.summary.params.get("judge_model")
    # the options that make runs of one setting differ, as labels (the neighbourhood's KG is in the setting)
    options = {k: v for k, v in evaluation.labels(opts).items() if k != "kg"}
    options.update({k: getattr(opts, k) for k in ("template", "limit") if getattr(opts, k) is not None})
    rows = [
        (
            run.benchmark,
            run.name,
            run.model,
            judge,
            opts.run_name,
            f"{opts.context}/{opts.kg}" if opts.context == "neighbourhood" else opts.context,
            run.fingerprint,
            str(result["metric"]),
            None if result.get("value") is None else float(result["value"]),
            canonical({**options, **{k: v for k, v in result.items() if k not in _COLUMNS and v is not None}}),
            run.out,
        )
        for result in ctx.summary.results
        if isinstance(result.get("value"), (int, float, type(None)))
        and "metric" in result
        and not str(result["metric"]).startswith("cost.")  # the run's bill, not a score
    ]
    if not rows:
        return
    table = catalog.table("predict.results")
    frame = ctx.spark.createDataFrame(rows, table.schema)
    path = table.path(dataset=run.dataset)
    ctx.replace_where("results", frame, path, f"fingerprint = '{run.fingerprint}'", "a model's scores per run")
