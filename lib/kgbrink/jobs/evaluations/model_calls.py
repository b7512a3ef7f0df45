"""The model call, one step for every role (the answering model, a judge): the prompts ``model_calls`` has no
answer for asked from ``predict.tasks`` Spark tasks, each answer spooled as it arrives and folded into
``<dataset>/predict/model_calls`` (keyed by ``call_id``; :mod:`kgbrink.llm.spool`), the tokens and cost of
the answers a run uses counted.

A role's endpoint is built from one settings shape (:func:`endpoint`): the URL, the name of the variable
holding its key (read here, carried in memory to the executors as :class:`kgbrink.llm.spool.Secret`, never
written), one :class:`kgbrink.llm.client.RetryPolicy`, the rate limits shared evenly by the tasks and the
response size cap.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from functools import partial
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kgbrink.core import catalog
from kgbrink.core.console import answers_line
from kgbrink.core.delta import table_exists
from kgbrink.core.files import delete_path, read_json_lines
from kgbrink.core.jobs import JobContext
from kgbrink.core.tracking import JobFailed
from kgbrink.core.typed import ConfigError
from kgbrink.evaluation.calls import canonical
from kgbrink.jobs.evaluations.protocol import Role, Run
from kgbrink.llm import spool
from kgbrink.llm.client import EndpointConfig, RetryPolicy, probe

CALLS = "model_calls"
STAT_KEYS = ("requests", "retries", "prompt_tokens", "completion_tokens", "skipped")


def endpoint(settings, own, section: str, base_url: str | None = None) -> EndpointConfig:
    """The endpoint of one role: ``own`` (an :class:`~kgbrink.core.endpoint_settings.EndpointSettings`, the settings
    section ``section``) gives the URL (``base_url`` overrides it) and the key's variable; the transport (retry
    policy, in-flight requests, timeouts, size cap) and the global rate limits, split evenly among the tasks,
    are ``settings``' (``predict``'s). A key variable named but not set fails here, before anything starts."""

    def share(limit):
        return None if limit is None else float(limit) / settings.tasks

    key_env = own.api_key_env
    if key_env and not os.environ.get(key_env):
        raise ConfigError(f"{section}.api_key_env names {key_env}, which is not set in the environment")
    retry = RetryPolicy(int(settings.max_tries), float(settings.backoff_seconds), float(settings.backoff_max_seconds))
    return EndpointConfig(
        base_url=(base_url or own.base_url).rstrip("/"),
        api_key_env=key_env,
        timeout_s=float(settings.timeout_seconds),
        retry=retry,
        in_flight=int(settings.in_flight),
        requests_per_minute=share(settings.requests_per_minute),
        tokens_per_minute=share(settings.tokens_per_minute),
        max_response_bytes=int(float(settings.max_response_mb) * (1 << 20)),
    )


def calls_path(run: Run) -> str:
    return f"{run.dataset}/predict/{CALLS}"


def fold(ctx: JobContext, run: Run, folder: str) -> DataFrame:
    """The spool files under ``folder`` into ``model_calls`` (a call id's first answer kept); the rows of the
    calls that got no answer (the last try's result of each) are returned for the quarantine."""
    rows = read_json_lines(ctx.spark, folder, spool.SCHEMA)
    rows = ctx.persist(rows)
    answered = rows.filter("answered").drop("answered").dropDuplicates(["call_id"])
    columns = [c.split()[0] for c in catalog.table("predict.model_calls").schema.split(", ")]
    answered = answered.select(*columns)
    path = calls_path(run)
    if table_exists(ctx.spark, path):
        ctx.merge(CALLS, path, answered, "t.call_id = s.call_id", insert_all=True)
    elif answered.limit(1).count():
        ctx.write(CALLS, answered, path, "answers of chat-completions endpoints", table="predict.model_calls")
    failed = rows.join(answered.select("call_id"), "call_id", "left_anti")
    failed = failed.groupBy("call_id").agg(F.max_by(F.struct("status", "detail"), "tries").alias("last"))
    failed = ctx.persist(failed)  # counted: the spool folder goes next
    failed.count()
    ctx.unpersist(rows)
    return failed


def recover(ctx: JobContext, run: Run) -> int:
    """Spools of earlier runs that ended before folding them (killed) folded into ``model_calls``."""
    root = Path(run.spool_dir)
    left = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    for folder in left:
        if any(folder.glob("*.jsonl")):
            ctx.unpersist(fold(ctx, run, str(folder)))
        delete_path(ctx.spark, str(folder))
    return len(left)


def ask(ctx: JobContext, run: Run, role: Role, prompts: DataFrame) -> DataFrame | None:
    """Ask ``role`` the prompts ``model_calls`` has no answer for, from ``run.tasks`` tasks, counted in the
    summary under the role's prefix; the calls left unanswered (``call_id, last``, cached) or None when
    nothing was asked."""
    summary, prefix = ctx.summary, role.prefix
    path = calls_path(run)
    distinct = prompts.select("call_id", "body", "prompt_sha256").dropDuplicates(["call_id"])
    if table_exists(ctx.spark, path):
        distinct = distinct.join(ctx.read(CALLS, path).select("call_id"), "call_id", "left_anti")
    pending = distinct.repartition(run.tasks, "call_id").sortWithinPartitions("call_id")
    pending = pending.withColumns({"model": F.lit(role.model), "params": F.lit(canonical(role.params))})
    pending = ctx.persist(pending)
    n_pending = pending.count()
    summary.counts[f"{prefix}asked"] = n_pending
    for key in (*STAT_KEYS, "rate_limit_wait_s"):
        summary.counts[prefix + key] = 0
    if n_pending == 0:
        ctx.unpersist(pending)
        return None
    unreachable = probe(role.endpoint)
    if unreachable:  # fail in seconds, not after every prompt's tries
        ctx.unpersist(pending)
        raise JobFailed(f"{unreachable}; {n_pending} prompts not asked (--base-url, predict.base_url)", summary)
    folder = f"{run.spool_dir}/{uuid.uuid4().hex}"
    Path(folder).mkdir(parents=True, exist_ok=True)
    config = role.endpoint
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    budget = _budget(ctx.config.predict, run, role)
    secret = spool.Secret(key) if key else None
    stats = []
    if ctx.config.predict.model_change == "fail" and n_pending < prompts.select("call_id").distinct().count():
        canary, stats = _canary(ctx, run, role, prompts, pending, folder, secret)
        pending = pending.filter(F.col("call_id") != canary)
    task = partial(_ask_task, endpoint=config, folder=folder, api_key=secret, budget=budget)
    with ctx.progress.reporting(SpoolCounter(folder, n_pending)):  # answers, not Spark's 2 tasks
        stats += pending.rdd.mapPartitionsWithIndex(task).collect()
    ctx.unpersist(pending)
    for key in STAT_KEYS:
        summary.counts[prefix + key] = sum(int(s.get(key) or 0) for s in stats)
    summary.counts[f"{prefix}rate_limit_wait_s"] = round(sum(float(s.get("waited_s") or 0) for s in stats), 3)
    run.spent += sum(float(s.get("spent") or 0) for s in stats)
    not_asked = sum(int(s.get("over_budget") or 0) for s in stats)
    failed = fold(ctx, run, folder)  # cached and counted: the spool folder goes next
    delete_path(ctx.spark, folder)
    if not_asked:
        ctx.unpersist(failed)
        limit = ctx.config.predict.max_cost
        raise JobFailed(
            f"predict.max_cost {limit:g} reached ({run.spent:.6f} spent by this run): every answer so far is kept "
            f"in {calls_path(run)}, {not_asked} {role.role} prompts not asked; run again to ask them",
            summary,
        )
    return failed


def _canary(
    ctx: JobContext, run: Run, role: Role, prompts: DataFrame, pending: DataFrame, folder: str, secret
) -> tuple[str, list[dict]]:
    """A run that reuses answers asks one pending prompt first, from the driver: when the endpoint answers
    as another model (``response_model``) or deployment (``system_fingerprint``) than the kept answers this
    run reuses record, it fails before asking the rest (``predict.model_change``: fail). Returns the prompt's
    call id and its counts."""
    row = pending.orderBy("call_id").limit(1).collect()[0].asDict()
    partition = run.tasks  # a spool file of its own: no task's
    stats = list(
        spool.ask_partition(partition, [row], endpoint=role.endpoint, folder=folder, attempt=0, api_key=secret)
    )
    answer = next((line for line in spool.lines(Path(folder), partition) if line.get("answered")), None)
    if answer is None:  # no answer: nothing to compare; the tasks try the rest
        return row["call_id"], stats
    now = (answer.get("response_model"), answer.get("system_fingerprint"))
    used = ctx.read(CALLS, calls_path(run)).join(prompts.select("call_id").distinct(), "call_id")
    kept = used.groupBy("response_model", "system_fingerprint").count().collect()
    other = [(r["response_model"], r["system_fingerprint"], int(r["count"])) for r in kept if (r[0], r[1]) != now]
    if other:
        before = ", ".join(f"{n} by {m!r} ({f!r})" for m, f, n in sorted(other, key=lambda x: -x[2])[:3])
        raise JobFailed(
            f"{role.endpoint.base_url} now answers {role.model} as {now[0]!r} (system_fingerprint {now[1]!r}), but "
            f"answers this run would reuse came from another: {before}; set predict.model_revision to ask them "
            "again, or predict.model_change=allow to reuse them",
            ctx.summary,
        )
    return row["call_id"], stats


def _budget(settings, run: Run, role: Role) -> spool.Budget | None:
    """Each task's share of what ``predict.max_cost`` leaves of this run's spending, at the role's prices."""
    if settings.max_cost is None:
        return None
    return spool.Budget((float(settings.max_cost) - run.spent) / run.tasks, *role.prices)


class SpoolCounter:
    """The ask step's progress line: a spool folder's lines counted as the tasks append them (each file read
    on from where the last call stopped, whole lines only): answered of ``total``, answers a second,
    retries, and the prompts quarantined so far (no answer after the last try, or not ``ok``)."""

    def __init__(self, folder: str, total: int):
        self.folder, self.total = Path(folder), total
        self.offsets: dict[Path, int] = {}
        self.answered = self.retries = self.quarantined = 0
        self.start = time.perf_counter()

    def __call__(self) -> str:
        for path in sorted(self.folder.glob("part-*.jsonl")):
            at = self.offsets.get(path, 0)
            with path.open("rb") as stream:
                stream.seek(at)
                data = stream.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = at + end
            for raw in data[:end].splitlines():
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(line, dict):
                    continue
                self.retries += max(0, int(line.get("tries") or 1) - 1)
                self.answered += line.get("answered") is True
                self.quarantined += line.get("status") != "ok"
        elapsed = time.perf_counter() - self.start
        return answers_line(self.answered, self.total, elapsed, self.retries, self.quarantined)


def _ask_task(partition: int, rows, *, endpoint: EndpointConfig, folder: str, api_key, budget):
    """One task's share of the pending prompts (runs on an executor)."""
    attempt = TaskContext.get().attemptNumber() if TaskContext.get() else 0
    rows = (r.asDict() for r in rows)
    return spool.ask_partition(
        partition, rows, endpoint=endpoint, folder=folder, attempt=attempt, api_key=api_key, budget=budget
    )


def calls(ctx: JobContext, run: Run) -> DataFrame | None:
    """``model_calls`` as this run left it: the version it wrote, else the one it read, else None."""
    if CALLS in ctx.summary.outputs:
        return ctx.written(CALLS)
    path = calls_path(run)
    return ctx.read(CALLS, path) if table_exists(ctx.spark, path) else None


def usage(ctx: JobContext, run: Run, role: Role, prompts: DataFrame) -> None:
    """Token sums over the answers this run's prompts use (``answer_*``; ``judge_answer_*`` for the judge),
    and their cost at the role's prices (``cost.answers``, ``cost.this_run``: what this run asked)."""
    table = calls(ctx, run)
    if table is None:
        return
    prefix = role.prefix
    used = prompts.select("call_id").distinct().join(table, "call_id")
    row = used.agg(F.sum("prompt_tokens").alias("p"), F.sum("completion_tokens").alias("c")).first()
    p_tokens, c_tokens = int(row["p"] or 0), int(row["c"] or 0)
    counts = ctx.summary.counts
    counts.update({f"{prefix}answer_prompt_tokens": p_tokens, f"{prefix}answer_completion_tokens": c_tokens})
    prompt_price, completion_price = role.prices
    if prompt_price is None and completion_price is None:
        return

    def cost(prompt_tokens: int, completion_tokens: int) -> float:
        paid = prompt_tokens * float(prompt_price or 0) + completion_tokens * float(completion_price or 0)
        return round(paid / 1e6, 6)

    asked = cost(counts.get(f"{prefix}prompt_tokens", 0), counts.get(f"{prefix}completion_tokens", 0))
    ctx.summary.results.extend(
        [
            {"metric": f"cost.{prefix}answers", "value": cost(p_tokens, c_tokens)},
            {"metric": f"cost.{prefix}this_run", "value": asked},
        ]
    )


def ask_and_count(ctx: JobContext, run: Run, role: Role, prompts: DataFrame) -> DataFrame | None:
    """:func:`ask`, then :func:`usage`: the model-call step of one role."""
    failed = ask(ctx, run, role, prompts)
    usage(ctx, run, role, prompts)
    return failed


def plan(ctx: JobContext, run: Run, role: Role, prompts: DataFrame) -> dict:
    """What asking ``prompts`` would take, asking nothing: the prompts, the answers already kept, the
    requests to send, their estimated tokens (the characters of the messages / 4, as the client's rate
    limiter estimates, and at most ``max_tokens`` each), their cost at most at the role's prices, the minutes
    the rate limits need at least, and three of the prompts to send (by call id)."""
    settings = ctx.config.predict
    distinct = prompts.select("call_id", "messages").dropDuplicates(["call_id"])
    path = calls_path(run)
    pending = distinct
    if table_exists(ctx.spark, path):
        pending = distinct.join(ctx.read(CALLS, path).select("call_id"), "call_id", "left_anti")
    row = pending.agg(F.count("*").alias("n"), F.sum(F.length("messages")).alias("chars")).first()
    n_distinct, n_pending = distinct.count(), int(row["n"])
    prompt_tokens = round(int(row["chars"] or 0) / 4)
    completion_tokens = n_pending * int(role.params.get("max_tokens") or 0)
    out = {
        "prompts": prompts.count(),
        "distinct_prompts": n_distinct,
        "kept": n_distinct - n_pending,
        "to_send": n_pending,
        "estimated_prompt_tokens": prompt_tokens,
        "estimated_completion_tokens_at_most": completion_tokens,
    }
    prompt_price, completion_price = role.prices
    if prompt_price is not None or completion_price is not None:
        paid = prompt_tokens * float(prompt_price or 0) + completion_tokens * float(completion_price or 0)
        out["estimated_cost_at_most"] = round(paid / 1e6, 6)
    limits = []
    if settings.requests_per_minute:
        limits.append(n_pending / float(settings.requests_per_minute))
    if settings.tokens_per_minute:
        limits.append((prompt_tokens + completion_tokens) / float(settings.tokens_per_minute))
    out["minutes_at_least"] = round(max(limits), 2) if limits else None
    samples = pending.orderBy("call_id").limit(3).collect()
    out["sample_prompts"] = [json.loads(r["messages"]) for r in samples]
    return out


def dry_run(ctx: JobContext, run: Run, prompts: DataFrame, judged: bool = False):
    """The plan of the answering round (:func:`plan`) as the run's summary; nothing asked or written
    (``judged``: a judge's rounds follow, not planned)."""
    summary, planned = ctx.summary, plan(ctx, run, run.answering, prompts)
    samples = planned.pop("sample_prompts")
    summary.counts.update({k: v for k, v in planned.items() if isinstance(v, int)})
    summary.extra["plan"] = {**planned, "sample_prompts": samples}
    cost = planned.get("estimated_cost_at_most")
    minutes = planned["minutes_at_least"]
    summary.highlights["dry run"] = (
        f"{planned['to_send']} of {planned['distinct_prompts']} distinct prompts to send ({planned['kept']} kept), about "
        f"{planned['estimated_prompt_tokens']:,} prompt tokens and at most {planned['estimated_completion_tokens_at_most']:,} "
        "completion tokens"
        + (f", cost at most {cost:g}" if cost is not None else "")
        + (f", at least {minutes:g} min under the rate limits" if minutes is not None else "")
    )
    if judged:
        summary.highlights["judge"] = "the judge's rounds follow the answers: not planned here"
    for i, messages in enumerate(samples, 1):
        summary.highlights[f"sample {i}"] = " ".join(messages[-1]["content"].split())[:200]
    return summary
