"""OpenAI-compatible chat completions and embeddings from a synchronous caller: bounded concurrency, retries
and rate limits.

:func:`run_calls` POSTs each ``(key, body)`` request to ``<base_url>/chat/completions`` (vLLM, llama.cpp
server, Ollama, OpenAI), or to ``<base_url>/embeddings`` for an endpoint of ``api`` ``embeddings``, with at most ``in_flight`` requests outstanding, over as many keep-alive
connections, and hands each :class:`CallResult` to ``on_result`` in the caller's thread as it arrives.
The transport is aiohttp in a private event loop run by the calling thread: one thread, no locks and no
thread hand-offs per prompt, so a Spark task's Python worker spends a fraction of a millisecond of CPU on
each prompt (benchmarks/bench_predict_transport.py).

Retried, with exponential backoff and full jitter seeded by the key, up to ``max_tries`` tries: HTTP 429,
500, 502, 503 and 504, timeouts, dropped connections and cut bodies, and 200s whose body is not a chat
completion (or a list of embeddings, one per input). A ``Retry-After`` (seconds or an HTTP date) is waited in full, and pauses every request of the
run; one longer than ``backoff_max_s`` ends the prompt's tries. Other HTTP errors are not retried. The tries
and waits are one :class:`RetryPolicy`. A body longer than ``max_response_bytes`` is never held whole: its
``Content-Length``, or the bytes read past the cap, end the try as ``too_large`` (not retried).

The API key is read from the environment variable ``api_key_env`` names when :func:`run_calls` starts, is
sent only as ``Authorization: Bearer``, and is replaced by ``<api key>`` in every text taken from the
server; no result, statistic, exception or log record holds it.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import aiohttp

logger = logging.getLogger(__name__)

ANSWERED = frozenset({"ok", "empty", "refused", "truncated"})  # statuses of a response the endpoint gave
APIS = {"chat": "/chat/completions", "embeddings": "/embeddings"}
RETRIED_HTTP = frozenset({429, 500, 502, 503, 504})
BURST_S = 0.5  # a rate limit's bucket holds this many seconds of its rate (at least one request)
DETAIL_CHARS = 200  # the escaped excerpt of a server's text in CallResult.detail
HIDDEN_KEY = "<api key>"
MAX_RESPONSE_BYTES = 8 << 20  # a chat completion is kilobytes; a body past this is a server's fault
READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class RetryPolicy:
    """How a request is tried again: ``max_tries`` tries at most (the first counts), exponential backoff
    from ``backoff_initial_s`` doubled per try up to ``backoff_max_s``, full jitter (:func:`backoff_s`)."""

    max_tries: int = 6
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0

    def __post_init__(self):
        if self.max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        if self.backoff_initial_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff_initial_s and backoff_max_s must not be negative")


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible endpoint and how to ask it.

    ``base_url`` ends before ``/chat/completions`` (``http://127.0.0.1:8000/v1``); ``api_key_env`` is the
    NAME of the environment variable holding the key (``None``: no Authorization header); ``timeout_s``
    bounds one try, connection included; ``retry``: how a failed try is tried again; ``in_flight`` requests
    of one :func:`run_calls` are outstanding at most; ``requests_per_minute`` and ``tokens_per_minute``
    (prompt and completion tokens) are this caller's share of the endpoint's limits, ``None`` for none;
    ``max_response_bytes``: the longest response body read; ``api``: ``chat`` (``/chat/completions``) or
    ``embeddings`` (``/embeddings``: a result's ``content`` is the JSON list of the inputs' vectors, in input
    order).
    """

    base_url: str
    api_key_env: str | None = None
    timeout_s: float = 120.0
    retry: RetryPolicy = RetryPolicy()
    in_flight: int = 16
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    max_response_bytes: int = MAX_RESPONSE_BYTES
    api: str = "chat"

    def __post_init__(self):
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {self.base_url[:80]!r}")
        if self.in_flight < 1:
            raise ValueError("in_flight must be at least 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if self.max_response_bytes < 1024:
            raise ValueError("max_response_bytes must be at least 1024")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + APIS[self.api]


@dataclass
class CallResult:
    """The outcome of one request after its last try.

    ``status``: ``ok``; ``empty`` (blank content), ``refused`` (``message.refusal`` set), ``truncated``
    (``finish_reason`` ``length``, content kept), in this precedence: refused, truncated, empty; or, after
    the last try, ``malformed_response``, ``http_error`` (``http_status`` says which), ``timeout``,
    ``connection``, ``too_large`` (a body over the cap). ``top_logprobs``: ``choices[0].logprobs.content[0].top_logprobs`` as
    ``[{"token", "logprob"}]``. ``latency_s``, ``http_status`` and ``detail`` are the last try's; ``detail``
    is a short escaped text (the server's error, the refusal, the exception), never the API key.
    """

    key: str
    status: str
    content: str | None = None
    finish_reason: str | None = None
    top_logprobs: list | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tries: int = 0
    latency_s: float = 0.0
    http_status: int | None = None
    response_model: str | None = None
    system_fingerprint: str | None = None
    detail: str | None = None

    @property
    def answered(self) -> bool:
        """The endpoint gave a response (ok, empty, refused, truncated): kept, never asked again. False for
        a transport failure, which a later run asks again."""
        return self.status in ANSWERED


@dataclass
class CallStats:
    """The counts of one :func:`run_calls`: HTTP requests sent (tries), retries among them, the tokens of
    the answers' ``usage``, the seconds the rate limits and Retry-After pauses held requests back, and the
    results by status."""

    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    waited_s: float = 0.0
    by_status: dict = field(default_factory=dict)


def run_calls(
    config: EndpointConfig,
    requests: Iterable[tuple[str, dict]],
    on_result: Callable[[CallResult], None],
    *,
    estimate_tokens: Callable[[dict], float] | None = None,
) -> CallStats:
    """Ask every ``(key, body)`` of ``requests`` and call ``on_result`` once per request, in this thread.

    ``body`` is the JSON request (``model``, ``messages``, ``max_tokens``, ...; not ``stream``); keys
    must be unique. ``requests`` is read lazily, one item per free slot of ``in_flight``, so it may be a
    generator of any length. ``on_result`` calls are serialised and come in the order answers arrive; an
    exception it raises (or ``requests`` raises) cancels the requests in flight, whose results are lost,
    and propagates. ``estimate_tokens(body)`` estimates the tokens of a request before it is sent for
    ``tokens_per_minute`` (default: the characters of the messages' JSON / 4 + ``max_tokens``); the
    answer's ``usage`` corrects it. Raises RuntimeError when ``api_key_env`` is set but its variable is
    not, or when called from a thread running an event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_calls is synchronous: call it from a thread without a running event loop")
    key = _api_key(config)
    caller = _Caller(config, key, on_result, estimate_tokens or _estimate_tokens)
    with asyncio.Runner() as runner:
        runner.run(caller.run(iter(requests)))
    return caller.stats


def probe(config: EndpointConfig, timeout_s: float = 10.0) -> str | None:
    """One ``GET <base_url>/models`` before a run asks anything: None when the endpoint answers (any HTTP
    status but 401 and 403: a server without ``/models`` still answers chat completions), else why not,
    naming the URL (connection refused, unknown host, timeout, the key refused), never the key."""
    import urllib.error
    import urllib.request

    key = _api_key(config)
    url = config.base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"User-Agent": "kgbrink", "Accept": "application/json"})
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=min(timeout_s, config.timeout_s)) as response:
            response.read(1 << 16)
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            named = f" (the key in {config.api_key_env})" if config.api_key_env else " (no key was sent)"
            return f"{url} refused the request: HTTP {error.code}{named}"
        return None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        return f"cannot reach {url}: {escape(str(reason), key)}"
    return None


def _api_key(config: EndpointConfig) -> str | None:
    """The key in the variable ``config.api_key_env`` names; errors name the variable, never the value."""
    if config.api_key_env is None:
        return None
    value = os.environ.get(config.api_key_env, "").strip()
    if not value:
        raise RuntimeError(f"environment variable {config.api_key_env} (the endpoint's API key) is not set or empty")
    if not all(" " < c < "\x7f" for c in value):
        raise RuntimeError(f"environment variable {config.api_key_env} holds characters an HTTP header cannot carry")
    return value


def _estimate_tokens(body: dict) -> float:
    """A request's tokens before it is sent: the characters of its messages' (or embedding inputs') JSON / 4 +
    its completion cap."""
    messages = json.dumps(body.get("messages", body.get("input", [])), ensure_ascii=False, separators=(",", ":"))
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return len(messages) / 4 + cap


def backoff_s(policy: RetryPolicy, key: str, tries: int) -> float:
    """The wait after a request's ``tries``-th failed try: full jitter, uniform in [0, min(backoff_max_s,
    backoff_initial_s * 2 ** (tries - 1))], drawn from a generator seeded by the key and ``tries``."""
    cap = min(policy.backoff_max_s, policy.backoff_initial_s * 2.0 ** (tries - 1))
    return random.Random(f"{key}\x00{tries}").uniform(0.0, cap)


def escape(text: str, secret: str | None = None) -> str:
    """``text`` repr-escaped (no control or invisible characters) and cut to DETAIL_CHARS characters,
    ``secret`` replaced by ``<api key>``."""
    if secret:
        text = text.replace(secret, HIDDEN_KEY)
    shown = repr(text[:DETAIL_CHARS])[1:-1] + ("..." if len(text) > DETAIL_CHARS else "")
    return shown.replace(secret, HIDDEN_KEY) if secret else shown


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date; ``now``: epoch
    seconds), None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:
            return None
        seconds = moment.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


class _Bucket:
    """A token bucket: ``rate`` per second, holding at most ``burst``; takes may drive it into debt."""

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0
        self.burst = max(1.0, self.rate * BURST_S)
        self.level = self.burst
        self.stamp = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` (at most a burst) is in the bucket."""
        self.refill(now)
        need = min(amount, self.burst)
        return 0.0 if self.level >= need else (need - self.level) / self.rate


class _Limiter:
    """Requests/min and tokens/min buckets, and a pause every request waits out (a Retry-After)."""

    def __init__(self, config: EndpointConfig):
        self.requests = _Bucket(config.requests_per_minute) if config.requests_per_minute else None
        self.tokens = _Bucket(config.tokens_per_minute) if config.tokens_per_minute else None
        self.paused_until = 0.0
        self.waited_s = 0.0
        self._lock = asyncio.Lock()

    def pause(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)

    async def acquire(self, tokens: float) -> None:
        """Wait until one request of ``tokens`` fits in the limits (first come, first served), take it."""
        if self.requests is None and self.tokens is None and self.paused_until <= time.monotonic():
            return
        async with self._lock:
            while True:
                now = time.monotonic()
                wait = self.paused_until - now
                if self.requests is not None:
                    wait = max(wait, self.requests.wait_s(1.0, now))
                if self.tokens is not None:
                    wait = max(wait, self.tokens.wait_s(tokens, now))
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
                self.waited_s += time.monotonic() - now
            if self.requests is not None:
                self.requests.level -= 1.0
            if self.tokens is not None:
                self.tokens.level -= tokens

    def settle(self, estimated: float, used: int) -> None:
        """Correct a request's estimated tokens by the ``used`` its answer reports."""
        if self.tokens is not None:
            self.tokens.refill(time.monotonic())
            self.tokens.level = min(self.tokens.burst, self.tokens.level + estimated - used)


@dataclass
class _Try:
    """One HTTP exchange: the result's fields, whether to try again and the server's Retry-After."""

    status: str
    retry: bool = False
    retry_after: float | None = None
    fields: dict = field(default_factory=dict)


class _Caller:
    """One :func:`run_calls`: its session, limits and counts; runs in the private event loop."""

    def __init__(self, config: EndpointConfig, key: str | None, on_result, estimate_tokens):
        self.config = config
        self.url = config.url
        self.secret = key
        self.on_result = on_result
        self.estimate_tokens = estimate_tokens
        self.stats = CallStats()
        self.limiter: _Limiter | None = None
        self.session: aiohttp.ClientSession | None = None
        self.stopping = False  # on_result or the requests raised: no more reads, no more results

    async def run(self, requests: Iterator[tuple[str, dict]]) -> None:
        self.limiter = _Limiter(self.config)
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "kgbrink"}
        if self.secret is not None:
            headers["Authorization"] = f"Bearer {self.secret}"
        connector = aiohttp.TCPConnector(limit=self.config.in_flight, limit_per_host=0, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )
        try:
            workers = [asyncio.create_task(self._work(requests)) for _ in range(self.config.in_flight)]
            try:
                await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for worker in workers:
                    worker.cancel()
                outcomes = await asyncio.gather(*workers, return_exceptions=True)
            failures = [o for o in outcomes if isinstance(o, BaseException)]
            failure = next((f for f in failures if not isinstance(f, asyncio.CancelledError)), None)
            if failure is not None:
                raise failure
        finally:
            self.stats.waited_s = round(self.limiter.waited_s, 3)
            await self.session.close()

    async def _work(self, requests: Iterator[tuple[str, dict]]) -> None:
        """Ask requests from the shared iterator until it ends or the run stops (``next`` never awaits, so
        the workers take turns reading it); a failure here or in ``on_result`` stops every worker."""
        stats = self.stats
        try:
            for key, body in requests:
                result = await self._ask(key, body)
                if self.stopping:
                    return
                stats.by_status[result.status] = stats.by_status.get(result.status, 0) + 1
                stats.prompt_tokens += result.prompt_tokens or 0
                stats.completion_tokens += result.completion_tokens or 0
                self.on_result(result)
                if self.stopping:
                    return
        except asyncio.CancelledError:
            raise
        except BaseException:
            self.stopping = True
            raise

    async def _ask(self, key: str, body: dict) -> CallResult:
        """Try one request until it is answered, fails for good or has had ``max_tries`` tries."""
        if body.get("stream"):
            raise ValueError("streamed completions are not supported: drop 'stream' from the request body")
        policy = self.config.retry
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        estimate = self.estimate_tokens(body) if self.limiter.tokens is not None else 0.0
        tries = 0
        while True:
            tries += 1
            await self.limiter.acquire(estimate)
            self.stats.requests += 1
            outcome = await self._try(payload, body)
            fields = outcome.fields
            used = (fields.get("prompt_tokens") or 0) + (fields.get("completion_tokens") or 0)
            if used:
                self.limiter.settle(estimate, used)
            if not outcome.retry or tries >= policy.max_tries:
                return CallResult(key=key, status=outcome.status, tries=tries, **fields)
            wait = backoff_s(policy, key, tries)
            if outcome.retry_after is not None:
                if outcome.retry_after > policy.backoff_max_s:
                    fields["detail"] = f"Retry-After {outcome.retry_after:g} s exceeds backoff_max_s; " + str(
                        fields.get("detail")
                    )
                    return CallResult(key=key, status=outcome.status, tries=tries, **fields)
                wait = max(wait, outcome.retry_after)
                self.limiter.pause(outcome.retry_after)
            self.stats.retries += 1
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("retry %s after %.2f s: %s %s", key[:16], wait, outcome.status, fields.get("detail"))
            await asyncio.sleep(wait)

    async def _try(self, payload: bytes, body: dict) -> _Try:
        """POST once; classify the exchange."""
        start = time.perf_counter()
        try:
            async with self.session.post(self.url, data=payload) as response:
                raw = await self._body(response)
                code = response.status
                retry_after = response.headers.get("Retry-After") if code in (429, 503) else None
                if isinstance(raw, str):  # over the cap: the connection is closed, the rest never read
                    response.close()
                    fields = {"latency_s": time.perf_counter() - start, "http_status": code, "detail": raw}
                    return _Try("too_large", fields=fields)
        except TimeoutError:
            latency = time.perf_counter() - start
            detail = f"no answer in {self.config.timeout_s:g} s"
            return _Try("timeout", retry=True, fields={"latency_s": latency, "detail": detail})
        except aiohttp.ClientError as error:
            latency = time.perf_counter() - start
            detail = escape(f"{type(error).__name__}: {error}", self.secret)
            return _Try("connection", retry=True, fields={"latency_s": latency, "detail": detail})
        latency = time.perf_counter() - start
        if 200 <= code < 300:
            if self.config.api == "embeddings":
                return self._embeddings(raw, code, latency, body)
            return self._answer(raw, code, latency)
        fields = {"latency_s": latency, "http_status": code, "detail": f"HTTP {code}: {self._error_text(raw)}"}
        if code in RETRIED_HTTP:
            return _Try("http_error", retry=True, retry_after=retry_after_s(retry_after), fields=fields)
        return _Try("http_error", fields=fields)

    async def _body(self, response: aiohttp.ClientResponse) -> bytes | str:
        """The response body, or a text saying it is over ``max_response_bytes`` (from its Content-Length,
        before anything is read; else once the bytes read pass the cap)."""
        cap = self.config.max_response_bytes
        length = response.content_length
        if length is not None and length > cap:
            return f"response body of {length} bytes (Content-Length) exceeds the {cap}-byte cap"
        raw = bytearray()
        async for chunk in response.content.iter_chunked(READ_CHUNK):
            raw += chunk
            if len(raw) > cap:
                return f"response body exceeds the {cap}-byte cap ({len(raw)} bytes read, then closed)"
        return bytes(raw)

    def _error_text(self, raw: bytes) -> str:
        """The escaped message of an error body: ``error.message`` of its JSON, else its text."""
        text = raw.decode("utf-8", "replace")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            error = parsed.get("error", parsed.get("message", parsed.get("detail")))
            if isinstance(error, dict):
                error = error.get("message", error)
            text = error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
        return escape(text, self.secret)

    def _answer(self, raw: bytes, code: int, latency: float) -> _Try:
        """Classify a 2xx body: malformed (retried), or ok / empty / refused / truncated."""
        fields = {"latency_s": latency, "http_status": code}
        try:
            parsed = json.loads(raw)
            message = parsed["choices"][0]["message"]
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise TypeError("content is not text")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
            text = raw[: DETAIL_CHARS * 4].decode("utf-8", "replace")
            fields["detail"] = escape(f"not a chat completion ({type(error).__name__}): {text}", self.secret)
            return _Try("malformed_response", retry=True, fields=fields)
        choice = parsed["choices"][0]
        finish_reason = choice.get("finish_reason")
        refusal = message.get("refusal")
        usage = parsed.get("usage") if isinstance(parsed.get("usage"), dict) else {}
        fields.update(
            content=content,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
            top_logprobs=_top_logprobs(choice.get("logprobs")),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            response_model=_text(parsed.get("model")),
            system_fingerprint=_text(parsed.get("system_fingerprint")),
        )
        if isinstance(refusal, str) and refusal.strip():
            fields["detail"] = escape(refusal, self.secret)
            return _Try("refused", fields=fields)
        if finish_reason == "length":
            return _Try("truncated", fields=fields)
        if content is None or not content.strip():
            return _Try("empty", fields=fields)
        return _Try("ok", fields=fields)

    def _embeddings(self, raw: bytes, code: int, latency: float, body: dict) -> _Try:
        """Classify a 2xx body of ``/embeddings``: ok with ``content`` the JSON list of one vector of finite
        numbers per input of ``body`` (by ``index``), else malformed (retried)."""
        fields = {"latency_s": latency, "http_status": code}
        inputs = body.get("input")
        expected = len(inputs) if isinstance(inputs, list) else 1
        try:
            parsed = json.loads(raw)
            items = parsed["data"]
            vectors: list = [None] * expected
            for item in items:
                vector = item["embedding"]
                if not vector or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
                    raise TypeError("an embedding is not a list of numbers")
                if not all(math.isfinite(x) for x in vector):
                    raise ValueError("an embedding holds a non-finite number")
                index = item["index"]
                if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
                    raise ValueError(f"index {index!r} is not one of the {expected} inputs")
                if vectors[index] is not None:
                    raise ValueError(f"index {index} twice")
                vectors[index] = [float(x) for x in vector]
            if any(v is None for v in vectors) or len(items) != expected:
                raise ValueError(f"{len(items)} embeddings for {expected} inputs")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
            text = raw[: DETAIL_CHARS * 4].decode("utf-8", "replace")
            fields["detail"] = escape(f"not an embeddings list ({type(error).__name__}: {error}): {text}", self.secret)
            return _Try("malformed_response", retry=True, fields=fields)
        usage = parsed.get("usage") if isinstance(parsed.get("usage"), dict) else {}
        fields.update(
            content=json.dumps(vectors, separators=(",", ":")),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            response_model=_text(parsed.get("model")),
        )
        return _Try("ok", fields=fields)


def _top_logprobs(logprobs) -> list | None:
    """``logprobs.content[0].top_logprobs`` as ``[{"token", "logprob"}]``, None when absent or malformed."""
    try:
        alternatives = logprobs["content"][0]["top_logprobs"]
        return [{"token": str(a["token"]), "logprob": float(a["logprob"])} for a in alternatives]
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value) -> str | None:
    return value[:200] if isinstance(value, str) else None
