"""kgbrink.llm.client against the scripted server of tests/llm_server.py (no Spark): answers, retries,
rate limits, the API key, laziness and a client killed while its requests are held."""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgbrink.llm.client import (
    CallResult,
    CallStats,
    EndpointConfig,
    RetryPolicy,
    backoff_s,
    escape,
    probe,
    retry_after_s,
    run_calls,
)
from tests.llm_server import Fault, LlmServer, LlmServerProcess, echo, prompt_sha

KEY = "sk-test-Zq81VbX0-secret-key-4417"
KEY_ENV = "KGBRINK_TEST_LLM_KEY"


def request(text: str, model: str = "echo", **params) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 16, **params}


def config(server, **overrides) -> EndpointConfig:
    """Fast test settings: short timeouts and backoffs, 3 tries, 4 in flight (a RetryPolicy field given by
    its name)."""
    values = {"timeout_s": 2.0, "max_tries": 3, "backoff_initial_s": 0.001, "backoff_max_s": 0.01, "in_flight": 4}
    values.update(overrides)
    retry = RetryPolicy(**{k: values.pop(k) for k in ("max_tries", "backoff_initial_s", "backoff_max_s")})
    return EndpointConfig(server.base_url, retry=retry, **values)


def ask(endpoint: EndpointConfig, requests) -> tuple[dict[str, CallResult], CallStats]:
    """Results by key (each key's result kept once: a second one fails the test), and the stats."""
    results: dict[str, CallResult] = {}

    def keep(result: CallResult) -> None:
        assert result.key not in results, f"two results for {result.key}"
        results[result.key] = result

    stats = run_calls(endpoint, requests, keep)
    return results, stats


def test_every_prompt_answered_once_in_the_callers_thread_with_in_flight_requests():
    prompts = {f"k{i}": f"question {i}" for i in range(40)}
    seen_threads = set()
    results = {}

    def keep(result):
        seen_threads.add(threading.get_ident())
        assert result.key not in results
        results[result.key] = result

    with LlmServer(delay_s=0.1) as server:
        requests = ((key, request(text, logprobs=True, top_logprobs=2)) for key, text in prompts.items())
        stats = run_calls(config(server, in_flight=8), requests, keep)
        counts = server.stats()
    assert seen_threads == {threading.get_ident()}
    assert {key: result.content for key, result in results.items()} == prompts
    first = results["k3"]
    assert (first.status, first.answered, first.finish_reason, first.tries, first.http_status) == (
        "ok",
        True,
        "stop",
        1,
        200,
    )
    assert first.top_logprobs == [{"token": "question", "logprob": -0.01}, {"token": "no", "logprob": -4.6}]
    assert (first.response_model, first.system_fingerprint, first.completion_tokens) == ("echo", "fp_llm_server", 3)
    assert first.prompt_tokens > 0 and 0.1 <= first.latency_s < 5
    assert (counts["requests"], counts["completed"], counts["max_concurrent"]) == (40, 40, 8)
    assert (stats.requests, stats.retries, stats.by_status) == (40, 0, {"ok": 40})
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in results.values())


def test_no_logprobs_unless_asked_and_an_empty_iterable():
    with LlmServer() as server:
        results, _ = ask(config(server), [("a", request("hello there"))])
        assert results["a"].top_logprobs is None
        assert ask(config(server), iter(())) == ({}, CallStats())


RETRIED = {
    "429": ("http_error", 429),
    "500": ("http_error", 500),
    "502": ("http_error", 502),
    "503": ("http_error", 503),
    "504": ("http_error", 504),
    "slow": ("timeout", None),
    "malformed": ("malformed_response", 200),
    "drop": ("connection", None),
    "cut": ("connection", None),
}


@pytest.mark.parametrize("kind", sorted(RETRIED))
def test_a_fault_is_retried_then_answered(kind):
    faults = [Fault(kind, prompt="p1", attempts={0, 1}, delay_s=1.5)]
    with LlmServer(faults=faults) as server:
        results, stats = ask(config(server, timeout_s=0.5), [(f"k{i}", request(f"p{i}")) for i in range(3)])
        counts = server.prompt_counts("echo", request("p1")["messages"])
        total = server.stats(detail=False)
    assert (results["k1"].status, results["k1"].tries, results["k1"].content) == ("ok", 3, "p1")
    assert [results[k].tries for k in ("k0", "k2")] == [1, 1]
    assert (counts["requests"], counts["completed"], total["completed"]) == (3, 1, 3)
    assert (stats.requests, stats.retries, total["faults"]) == (5, 2, {kind: 2})


@pytest.mark.parametrize("kind", sorted(RETRIED))
def test_a_fault_on_every_try_ends_with_its_status_after_max_tries(kind):
    with LlmServer(faults=[Fault(kind, prompt="p0", delay_s=1.5)]) as server:
        results, stats = ask(config(server, timeout_s=0.5), [("k0", request("p0")), ("k1", request("p1"))])
        counts = server.prompt_counts("echo", request("p0")["messages"])
    failed = results["k0"]
    assert (failed.status, failed.http_status, failed.tries, failed.answered, failed.content) == (
        *RETRIED[kind],
        3,
        False,
        None,
    )
    assert failed.detail and len(failed.detail) < 300
    assert (counts["requests"], counts["completed"]) == (3, 0)
    assert results["k1"].status == "ok"
    assert stats.by_status == {RETRIED[kind][0]: 1, "ok": 1}


def test_the_probe_passes_a_live_endpoint_and_names_a_dead_one_or_a_refused_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with LlmServer(api_key=KEY) as server:
        assert probe(EndpointConfig(server.base_url, api_key_env=KEY_ENV)) is None
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        refused = probe(EndpointConfig(server.base_url, api_key_env=KEY_ENV))
        assert refused == f"{server.base_url}/models refused the request: HTTP 401 (the key in {KEY_ENV})"
        assert probe(EndpointConfig(server.base_url)).endswith("HTTP 401 (no key was sent)")
    dead = probe(EndpointConfig("http://127.0.0.1:9/v1"))
    assert dead.startswith("cannot reach http://127.0.0.1:9/v1/models: ") and "refused" in dead.lower()


def test_a_body_over_the_cap_is_too_large_read_no_further_and_not_retried():
    """300 MB announced by Content-Length: refused before a byte of it is read; 300 MB chunked: the read stops
    just past the cap. Either way one try, ``too_large`` with the size, and the other prompts answered."""
    cap = 1 << 20
    faults = [Fault("huge", prompt="p0"), Fault("huge_chunked", prompt="p1")]
    with LlmServer(faults=faults) as server:
        keys = [(f"k{i}", request(f"p{i}")) for i in range(4)]
        results, stats = ask(config(server, max_response_bytes=cap, timeout_s=20), keys)
        served = server.stats(detail=False)
    announced, chunked = results["k0"], results["k1"]
    assert (announced.status, announced.tries, announced.answered, announced.http_status) == (
        "too_large",
        1,
        False,
        200,
    )
    assert announced.detail == f"response body of {300 << 20} bytes (Content-Length) exceeds the {cap}-byte cap"
    assert (chunked.status, chunked.tries) == ("too_large", 1)
    read = int(re.search(r"\((\d+) bytes read", chunked.detail).group(1))
    assert cap < read <= cap + (1 << 16) + 1  # one read chunk past the cap at most
    assert [results[f"k{i}"].status for i in (2, 3)] == ["ok", "ok"]
    assert stats.requests == 4 and stats.retries == 0 and served["faults"] == {"huge": 1, "huge_chunked": 1}


def test_other_client_errors_are_not_retried():
    with LlmServer(faults=[Fault("400", prompt="bad")]) as server:
        results, stats = ask(config(server), [("unknown", request("x", model="nope")), ("bad", request("bad"))])
    assert {key: (r.status, r.http_status, r.tries, r.answered) for key, r in results.items()} == {
        "unknown": ("http_error", 404, 1, False),
        "bad": ("http_error", 400, 1, False),
    }
    assert "nope" in results["unknown"].detail
    assert stats.requests == 2


def test_classification_of_answers():
    models = {
        "echo": echo,
        "blank": lambda body: {"content": " \n\t"},
        "none": lambda body: {"content": None},
        "refuse": lambda body: {"content": None, "refusal": "I can't help\nwith that."},
        "cut": lambda body: {"content": "The answer is", "finish_reason": "length"},
        "nochoices": lambda body: {"raw": {"object": "chat.completion", "choices": []}},
        "nomessage": lambda body: {"raw": {"choices": [{"index": 0, "finish_reason": "stop"}]}},
        "listcontent": lambda body: {"raw": {"choices": [{"message": {"content": [{"type": "text"}]}}]}},
        "array": lambda body: {"raw": [1, 2]},
    }
    with LlmServer(models=models) as server:
        results, _ = ask(config(server), [(name, request("q", model=name)) for name in models])
        counts = server.stats(detail=False)
    statuses = {name: (r.status, r.answered, r.tries) for name, r in results.items()}
    assert statuses == {
        "echo": ("ok", True, 1),
        "blank": ("empty", True, 1),
        "none": ("empty", True, 1),
        "refuse": ("refused", True, 1),
        "cut": ("truncated", True, 1),
        "nochoices": ("malformed_response", False, 3),
        "nomessage": ("malformed_response", False, 3),
        "listcontent": ("malformed_response", False, 3),
        "array": ("malformed_response", False, 3),
    }
    assert results["cut"].content == "The answer is" and results["cut"].finish_reason == "length"
    assert results["refuse"].detail == "I can't help\\nwith that."
    assert counts["requests"] == 5 + 4 * 3


def test_retry_after_seconds_is_waited_in_full_and_pauses_the_run():
    faults = [Fault("429", prompt="p0", attempts={0}, retry_after="0.6")]
    with LlmServer(faults=faults, delay_s=0.05) as server:
        endpoint = config(server, backoff_max_s=1, in_flight=2)
        results, stats = ask(endpoint, [(f"k{i}", request(f"p{i}")) for i in range(4)])
        arrivals = server.stats()["arrivals"]
    assert [results[f"k{i}"].tries for i in range(4)] == [2, 1, 1, 1]
    assert arrivals[2] - arrivals[0] >= 0.6  # after the 429, the other slot's next request waited too
    assert stats.waited_s >= 0.5


def test_retry_after_http_date_is_waited_in_full():
    answered_at = []

    def clock(body):
        answered_at.append(time.time())
        return {"content": "yes"}

    moment = math.ceil(time.time()) + 1
    faults = [Fault("503", attempts={0}, retry_after=email.utils.formatdate(moment, usegmt=True))]
    with LlmServer(models={"m": clock}, faults=faults) as server:
        results, _ = ask(config(server, backoff_max_s=5), [("k", request("p", model="m"))])
    assert results["k"].tries == 2 and answered_at[0] >= moment


def test_a_retry_after_beyond_backoff_max_ends_the_tries():
    with LlmServer(faults=[Fault("429", retry_after="3600")]) as server:
        started = time.monotonic()
        results, _ = ask(config(server, backoff_max_s=1), [("k", request("p"))])
    result = results["k"]
    assert (result.status, result.http_status, result.tries) == ("http_error", 429, 1)
    assert "Retry-After 3600 s" in result.detail and time.monotonic() - started < 5


def test_retry_after_header_values():
    assert retry_after_s("2") == 2.0 and retry_after_s(" 1.5 ") == 1.5 and retry_after_s("-3") == 0.0
    now = 1_800_000_000
    assert retry_after_s(email.utils.formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert retry_after_s(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert [retry_after_s(v) for v in (None, "soon", "nan", "")] == [None] * 4


def test_backoff_is_full_jitter_reproducible_from_the_key_and_waited():
    endpoint = RetryPolicy(backoff_initial_s=0.04, backoff_max_s=0.1)
    waits = [backoff_s(endpoint, "same key", tries) for tries in (1, 2, 3, 4)]
    assert waits == [backoff_s(endpoint, "same key", tries) for tries in (1, 2, 3, 4)]
    assert [0 <= wait <= cap for wait, cap in zip(waits, (0.04, 0.08, 0.1, 0.1))] == [True] * 4
    assert waits != [backoff_s(endpoint, "other key", tries) for tries in (1, 2, 3, 4)]
    draws = [backoff_s(endpoint, f"k{i}", 1) for i in range(2000)]
    assert 0.018 < sum(draws) / len(draws) < 0.022 and max(draws) > 0.039 and min(draws) < 0.001
    with LlmServer(faults=[Fault("500", attempts={0, 1})]) as server:
        ask(config(server, backoff_initial_s=0.04, backoff_max_s=0.1), [("same key", request("p"))])
        arrivals = server.prompt_counts("echo", request("p")["messages"])["arrivals"]
    assert [b - a >= wait - 1e-3 for a, b, wait in zip(arrivals, arrivals[1:], waits)] == [True, True]


def _conforms(times: list[float], sizes: list[float], per_second: float, burst: float) -> bool:
    """Every stretch of arrivals ``times[i..j]`` carries at most ``per_second * (t_j - t_i) + burst``."""
    prefix = [0.0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    return all(
        prefix[j + 1] - prefix[i] <= per_second * (times[j] - times[i]) + burst + 1e-9
        for i in range(len(times))
        for j in range(i, len(times))
    )


def test_requests_per_minute_hold_over_the_run():
    with LlmServer(delay_s=0.005) as server:
        endpoint = config(server, requests_per_minute=600, in_flight=4)
        _, stats = ask(endpoint, [(f"k{i}", request(f"p{i}")) for i in range(45)])
        arrivals = server.stats()["arrivals"]
    rate, burst = 10.0, 5.0  # 600/min; a bucket of half a second
    assert len(arrivals) == 45 and _conforms(arrivals, [1.0] * 45, rate, burst + 1)
    steady = arrivals[int(burst) :]
    assert 0.9 * rate <= (len(steady) - 1) / (steady[-1] - steady[0]) <= 1.1 * rate
    assert stats.waited_s > 3


def test_tokens_per_minute_hold_over_the_run():
    models = {"short": lambda body: {"content": "yes"}}
    text = "t" * 160  # every request of the same size: ~53 tokens by the server's usage, estimated 60
    with LlmServer(models=models, delay_s=0.005) as server:
        endpoint = config(server, tokens_per_minute=36_000, in_flight=4)
        results, stats = ask(
            endpoint, [(f"{i:03d}", request(f"{i:03d}{text}", model="short", max_tokens=10)) for i in range(45)]
        )
        arrivals = server.stats()["arrivals"]
    used = {r.prompt_tokens + r.completion_tokens for r in results.values()}
    assert len(used) == 1
    per_request, rate, burst = used.pop(), 600.0, 300.0
    assert stats.prompt_tokens + stats.completion_tokens == 45 * per_request
    assert _conforms(arrivals, [per_request] * 45, rate, burst + 2 * per_request)
    steady = arrivals[int(burst // per_request) + 1 :]
    assert 0.9 * rate <= (len(steady) - 1) * per_request / (steady[-1] - steady[0]) <= 1.1 * rate


def test_a_custom_token_estimate_is_asked_once_per_request():
    estimated = []

    def estimate(body):
        estimated.append(body["messages"][0]["content"])
        return 10.0

    with LlmServer(faults=[Fault("500", attempts={0})]) as server:
        endpoint = config(server, tokens_per_minute=6_000_000)
        stats = run_calls(
            endpoint, [("a", request("a")), ("b", request("b"))], lambda r: None, estimate_tokens=estimate
        )
    assert sorted(estimated) == ["a", "b"] and stats.requests == 4


def test_the_api_key_is_sent_and_never_leaks(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, KEY)
    seen: list = []
    faults = [Fault("400", prompt="leaky"), Fault("500", prompt="flaky", attempts={0}), Fault("drop", prompt="gone")]
    with LlmServer(api_key=KEY, faults=faults) as server:
        endpoint = config(server, api_key_env=KEY_ENV)
        prompts = ["fine", "leaky", "flaky", "gone", "unknown"]
        results, stats = ask(endpoint, [(p, request(p, model="nope" if p == "unknown" else "echo")) for p in prompts])
        seen += [results, stats, endpoint]
        auth = server.stats(detail=False)["auth"]
        monkeypatch.setenv("KGBRINK_TEST_OTHER_KEY", "sk-wrong-one")
        refused, _ = ask(config(server, api_key_env="KGBRINK_TEST_OTHER_KEY"), [("x", request("x"))])
        seen.append(refused)
    assert results["fine"].status == "ok" and results["flaky"].tries == 2
    assert (auth["ok"], auth["missing"], auth["wrong"]) == (stats.requests, 0, 0)
    assert (refused["x"].status, refused["x"].http_status) == ("http_error", 401)
    assert "<api key>" in results["leaky"].detail
    with pytest.raises(RuntimeError) as missing:
        run_calls(config(server, api_key_env="KGBRINK_TEST_UNSET_KEY"), [("k", request("p"))], print)
    assert "KGBRINK_TEST_UNSET_KEY" in str(missing.value)
    with pytest.raises(TypeError) as failed:  # a body that is not JSON
        run_calls(config(server, api_key_env=KEY_ENV), [("k", {"model": "echo", "messages": {1}})], print)
    seen += [missing.value, failed.value]
    for value in seen:
        values = value.values() if isinstance(value, dict) else [value]
        for item in values:
            texts = [repr(item), str(item), str(getattr(item, "__dict__", ""))]
            if isinstance(item, BaseException):
                texts.append("".join(traceback.format_exception(item)))
            assert all(KEY not in text for text in texts), item
    assert KEY not in caplog.text and all(KEY not in str(record.args) for record in caplog.records)


def test_missing_or_unusable_key_variable(monkeypatch):
    endpoint = EndpointConfig("http://127.0.0.1:9/v1", api_key_env="KGBRINK_TEST_UNSET_KEY")
    monkeypatch.delenv("KGBRINK_TEST_UNSET_KEY", raising=False)
    with pytest.raises(RuntimeError, match="KGBRINK_TEST_UNSET_KEY.*not set"):
        run_calls(endpoint, [], print)
    monkeypatch.setenv("KGBRINK_TEST_UNSET_KEY", "sk-a\r\nX-Injected: 1")
    with pytest.raises(RuntimeError, match="KGBRINK_TEST_UNSET_KEY.*cannot carry") as error:
        run_calls(endpoint, [], print)
    assert "sk-a" not in str(error.value)


def test_an_unreachable_endpoint_is_a_connection_failure():
    with LlmServer() as server:
        endpoint = config(server)
    results, _ = ask(endpoint, [("k", request("p"))])  # the server has stopped: its port is closed
    assert (results["k"].status, results["k"].tries, results["k"].answered) == ("connection", 3, False)


def test_details_escape_the_servers_text():
    with LlmServer() as server:
        results, _ = ask(config(server), [("k", request("p", model="evil\n\x1b[31m\u202e" + "x" * 500))])
    detail = results["k"].detail
    assert "\n" not in detail and "\x1b" not in detail and "\u202e" not in detail
    assert "\\n\\x1b[31m\\u202e" in detail and len(detail) < 260
    assert escape("a" * 300).endswith("...") and escape("key sk-1 here", "sk-1") == "key <api key> here"


def test_the_request_iterable_is_read_lazily_and_an_on_result_error_stops_the_run():
    pulled = 0

    def requests():
        nonlocal pulled
        for i in range(100_000):
            pulled += 1
            yield f"k{i}", request(f"p{i}")

    got = []

    class Stop(Exception):
        pass

    def keep(result):
        got.append(result.key)
        if len(got) == 5:
            raise Stop()

    with LlmServer(delay_s=0.01) as server:
        with pytest.raises(Stop):
            run_calls(config(server, in_flight=8), requests(), keep)
        time.sleep(0.05)
        counts = server.stats(detail=False)
        assert run_calls(config(server), [("after", request("p"))], print).by_status == {"ok": 1}
    assert len(got) == 5 and pulled <= 5 + 8
    assert counts["requests"] <= pulled and counts["concurrent"] == 0


def test_a_running_event_loop_is_refused():
    import asyncio

    async def inside():
        run_calls(EndpointConfig("http://127.0.0.1:9/v1"), [], print)

    with pytest.raises(RuntimeError, match="synchronous"):
        asyncio.run(inside())


def test_configuration_is_checked():
    for bad in ({"base_url": "ftp://x"}, {"in_flight": 0}, {"requests_per_minute": 0}, {"max_response_bytes": 10}):
        with pytest.raises(ValueError):
            EndpointConfig(**{"base_url": "http://127.0.0.1/v1", **bad})
    for bad in ({"max_tries": 0}, {"backoff_initial_s": -1}, {"backoff_max_s": -1}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)
    assert EndpointConfig("http://h:1/v1/").url == "http://h:1/v1/chat/completions"


STATUS_OF = {"500": "http_error", "429": "http_error", "malformed": "malformed_response", "drop": "connection"}
STATUS_OF |= {"cut": "connection", "slow": "timeout"}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts=st.lists(st.lists(st.sampled_from(sorted(STATUS_OF)), max_size=4), min_size=1, max_size=8))
def test_any_fault_script_ends_each_prompt_answered_once_or_failed_after_max_tries(scripts):
    """Prompt i meets the faults ``scripts[i]`` on its first tries: answered after them, or failed with
    the status of its last fault after 3 tries; the server's completed answers are the answered results."""
    faults = [
        Fault(kind, prompt=f"p{i}", attempts={attempt}, delay_s=1.0, retry_after="0")
        for i, script in enumerate(scripts)
        for attempt, kind in enumerate(script)
    ]
    with LlmServer(faults=faults) as server:
        requests = [(f"k{i}", request(f"p{i}")) for i in range(len(scripts))]
        results, stats = ask(config(server, timeout_s=0.3, in_flight=3), requests)
        counts = server.stats(detail=False)
        by_prompt = server.stats()["by_prompt"]
    assert sorted(results) == sorted(key for key, _ in requests)
    for i, script in enumerate(scripts):
        result = results[f"k{i}"]
        if len(script) >= 3:
            assert (result.status, result.tries, result.answered) == (STATUS_OF[script[2]], 3, False)
        else:
            assert (result.status, result.tries, result.content) == ("ok", len(script) + 1, f"p{i}")
        prompt = by_prompt[f"echo {prompt_sha(request(f'p{i}')['messages'])}"]
        assert (prompt["requests"], prompt["completed"]) == (result.tries, int(result.answered))
    assert counts["completed"] == sum(r.answered for r in results.values())
    assert stats.requests == counts["requests"] == sum(r.tries for r in results.values())
    assert stats.retries == stats.requests - len(scripts)


def test_held_requests_of_a_killed_client_are_never_answers():
    client = """
import sys
from kgbrink.llm.client import EndpointConfig, run_calls
requests = ((f"k{i}", {"model": "echo", "messages": [{"role": "user", "content": f"p{i}"}]}) for i in range(20))
run_calls(EndpointConfig(sys.argv[1], in_flight=4, timeout_s=60), requests, lambda r: print(r.key, flush=True))
"""
    with LlmServer() as server:
        server.hold_after(3)
        process = subprocess.Popen([sys.executable, "-c", client, server.base_url], stdout=subprocess.PIPE, text=True)
        try:
            server.wait_held(4)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            time.sleep(0.1)  # the server sees its connections close
        finally:
            process.kill()
        printed = process.stdout.read().split()
        process.stdout.close()
        server.release()  # answers nothing: their client is gone
        deadline = time.monotonic() + 5
        while server.stats(detail=False)["concurrent"] and time.monotonic() < deadline:
            time.sleep(0.01)
        counts = server.stats(detail=False)
    assert (counts["requests"], counts["completed"], counts["held"], counts["concurrent"]) == (7, 3, 0, 0)
    assert sorted(printed) == ["k0", "k1", "k2"]


def test_dropped_held_requests_are_retried_once_released():
    results = {}
    with LlmServer() as server:
        server.hold()
        thread = threading.Thread(target=lambda: results.update(ask(config(server), [("a", request("a"))])[0]))
        thread.start()
        server.wait_held(1)
        server.drop_held()
        server.wait_held(1)  # its retry, held too
        assert server.stats(detail=False)["completed"] == 0
        server.release()
        thread.join(timeout=10)
        counts = server.stats(detail=False)
    assert (results["a"].status, results["a"].tries) == ("ok", 2)
    assert (counts["requests"], counts["completed"]) == (2, 1)


def test_the_server_in_its_own_process(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    arguments = ("--model", "echo", "--model", "gpt=refuse", "--api-key-env", KEY_ENV, "--fault", "500@0")
    with LlmServerProcess(*arguments, env=dict(os.environ)) as server:
        endpoint = EndpointConfig(server.base_url, api_key_env=KEY_ENV, retry=RetryPolicy(backoff_initial_s=0.001))
        results, _ = ask(endpoint, [("a", request("a")), ("b", request("b", model="gpt"))])
        listing = urllib.request.Request(server.base_url + "/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(listing, timeout=10) as response:
            models = [model["id"] for model in json.loads(response.read())["data"]]
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(server.base_url + "/models", timeout=10)
        counts = server.stats()
    assert (results["a"].status, results["b"].status, results["a"].tries + results["b"].tries) == ("ok", "refused", 3)
    assert models == ["echo", "gpt"] and denied.value.code == 401
    assert (counts["requests"], counts["completed"], len(counts["arrivals"]), counts["faults"]) == (3, 2, 3, {"500": 1})
    assert counts["auth"] == {"ok": 4, "missing": 1, "wrong": 0}


def test_the_ask_steps_progress_counts_answers_from_the_spool_as_they_arrive(tmp_path, monkeypatch):
    """The counter reads whole lines only, each once; the running step prints its line instead of Spark's
    task counts while the reporter is set."""
    import io
    import threading
    import types

    from kgbrink.core import console
    from kgbrink.jobs.evaluations.model_calls import SpoolCounter

    def line(status, tries=1, answered=True):
        return json.dumps({"call_id": "k", "status": status, "answered": answered, "tries": tries}) + "\n"

    part = tmp_path / "part-00000-000.jsonl"
    part.write_text(line("ok") + line("ok", tries=3) + line("empty") + '{"call_id": "k", "sta')
    counter = SpoolCounter(str(tmp_path), 10)
    first = counter()
    assert first.startswith("3/10 answered (30%), ") and ", 2 retries, 1 quarantined, about " in first
    with part.open("a") as stream:
        stream.write('tus": "ok", "answered": true, "tries": 1}\n')
    (tmp_path / "part-00001-000.jsonl").write_text(line("http_error", tries=6, answered=False))
    assert counter().startswith("4/10 answered (40%), ") and ", 7 retries, 2 quarantined" in counter()
    assert console.answers_line(10, 10, 2.0, 0, 0) == "10/10 answered (100%), 5.0/s, 0 retries, 0 quarantined"
    # the step's watcher prints the reporter's line
    monkeypatch.setattr(console, "STAGE_REPORT_SECONDS", 0.02)
    stream = io.StringIO()
    progress = console.Progress(stream, total=1)
    printed = threading.Event()
    tracker = types.SimpleNamespace(getActiveStageIds=lambda: [], getStageInfo=lambda stage: None)
    idle = types.SimpleNamespace(sparkContext=types.SimpleNamespace(statusTracker=lambda: tracker))
    with progress.step("ask", spark=idle):
        with progress.reporting(lambda: printed.set() or "7/9 answered"):
            assert printed.wait(5)
    assert "... ask, " in stream.getvalue() and ": 7/9 answered" in stream.getvalue()


def test_embeddings_come_back_in_input_order_and_a_bad_list_is_malformed():
    """``api`` embeddings: one request of several inputs gives their vectors in input order (the server's
    ``index`` order, whatever order it lists them in) as a JSON list; a list with a missing, repeated,
    out-of-range or non-finite entry is malformed (retried, then given up)."""
    shuffled = {"embeddings": [[1.0, 0.0], [0.0, 2]]}

    def reversed_listing(body):
        data = [{"index": 1, "embedding": [0.0, 2]}, {"index": 0, "embedding": [1.0, 0.0]}]
        return {"raw": {"data": data, "model": "rev", "usage": {"prompt_tokens": 3}}}

    bad = {
        "one_missing": {"raw": {"data": [{"index": 0, "embedding": [1.0]}]}},
        "twice": {"raw": {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}},
        "out_of_range": {"raw": {"data": [{"index": 0, "embedding": [1.0]}, {"index": -1, "embedding": [1.0]}]}},
        "nan": {"raw": {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [float("nan")]}]}},
        "text": {"raw": {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": ["1.0"]}]}},
        "empty_vector": {"raw": {"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": [1.0]}]}},
        "chat_shape": {"raw": {"choices": [{"message": {"content": "[1.0]"}}]}},
    }
    models = {"plain": lambda body: shuffled, "rev": reversed_listing}
    models.update({name: (lambda body, reply=reply: reply) for name, reply in bad.items()})
    with LlmServer(models) as server:
        endpoint = config(server, api="embeddings")
        assert endpoint.url == server.base_url + "/embeddings"
        requests = [(name, {"model": name, "input": ["a b", "c"]}) for name in models]
        results, stats = ask(endpoint, requests)
        served = server.stats()
    assert json.loads(results["plain"].content) == [[1.0, 0.0], [0.0, 2.0]] and results["plain"].status == "ok"
    assert json.loads(results["rev"].content) == [[1.0, 0.0], [0.0, 2.0]]
    assert results["rev"].response_model == "rev" and results["rev"].prompt_tokens == 3
    for name in bad:
        assert results[name].status == "malformed_response" and results[name].tries == 3, name
        assert "not an embeddings list" in results[name].detail, name
    assert stats.requests == 2 + 3 * len(bad) == served["requests"]
    with pytest.raises(ValueError, match="api must be one of chat, embeddings"):
        EndpointConfig("http://127.0.0.1:1/v1", api="completions")
