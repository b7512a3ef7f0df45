"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the tests and benchmarks of kgbrink.llm.

HTTP/1.1 with keep-alive on raw asyncio streams. ``POST /v1/chat/completions`` answers with the model the
body names (``models``: name -> ``callable(body) -> {"content", "finish_reason"?, "refusal"?,
"top_logprobs"?}``, or ``{"raw": value}`` to send ``value`` as the body; an unknown model is a 404) after ``delay_s``, in OpenAI's shape: usage as rough token
counts (characters / 4), ``choices[0].logprobs.content[0].top_logprobs`` when the request asks
``logprobs``. ``POST /v1/embeddings`` answers ``{"embeddings": [one vector per input]}`` of the model's
callable in OpenAI's shape (``embed``: :func:`hashed_embedding`). ``GET /v1/models`` lists the models. With ``api_key``, ``/v1/*`` needs ``Authorization:
Bearer <api_key>`` (else 401); the counters record whether the key arrived.

``faults``: a list of :class:`Fault` (the first that hits a request applies) or ``callable(ordinal, body,
attempt) -> Fault | None``: 429/5xx (with ``Retry-After``), a leaky 400 quoting the request's
Authorization header, slow answers, 200s with truncated JSON, dropped connections and cut bodies.

Counters (:meth:`LlmServer.stats`, ``GET /stats``): chat requests, completed answers (a chat completion
written whole to a connection its client had not closed), per ``"<model> <sha256 of the canonical
messages>"`` the requests, completed answers and arrival times, all arrival times (``time.monotonic``,
comparable across processes), current and maximum concurrent chat requests, held requests, faults served.

:meth:`LlmServer.hold` / :meth:`LlmServer.hold_after` keep requests pending instead of answering them;
:meth:`LlmServer.release` answers them, :meth:`LlmServer.drop_held` closes their connections unanswered
(never a completed answer). In-process: ``with LlmServer(models=..., faults=...) as server:`` serves from a
background thread at ``server.base_url``. Own process (benchmarks, kill tests): ``python -m tests.llm_server
--port 0 --delay-ms 50 --model echo`` prints its port on the first line; :class:`LlmServerProcess` starts
it and reads ``/stats`` and ``POST /control/{hold,release,drop,hold_after?n=N,reset}`` over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import http
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
PROJECT = Path(__file__).resolve().parents[1]
ERROR_KINDS = {"429": 429, "500": 500, "502": 502, "503": 503, "504": 504, "400": 400}
FAULT_KINDS = (*ERROR_KINDS, "slow", "malformed", "drop", "cut", "huge", "huge_chunked")
HUGE_CHUNK = b'{"pad": "' + b"x" * 65_000  # a huge body's repeated piece (never valid JSON)


def prompt_sha(messages: list) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of a request's messages."""
    text = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rough_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def last_text(body: dict) -> str:
    """The content of a request's last message ("" when there is none)."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    return content if isinstance(content, str) else ""


def echo(body: dict) -> dict:
    """The last message's content; its first word at logprob -0.01 beside "no" at -4.6."""
    text = last_text(body)
    alternatives = [{"token": text.split(" ", 1)[0] or " ", "logprob": -0.01}, {"token": "no", "logprob": -4.6}]
    return {"content": text, "top_logprobs": alternatives}


def letter(body: dict) -> dict:
    """Option A, with the four option letters' first-token log-probabilities (a ProbeKGC answer)."""
    tops = [{"token": x, "logprob": value} for x, value in zip("ABCD", (-0.05, -3.2, -4.0, -5.0))]
    return {"content": "A", "top_logprobs": tops}


def hashed_embedding(text: str, dimensions: int = 8) -> list[float]:
    """A deterministic unit vector of a text (from its SHA-256): an embedding model's stand-in."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    vector = [b - 127.5 for b in digest[:dimensions]]
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def embed(body: dict) -> dict:
    """:func:`hashed_embedding` of each input."""
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    return {"embeddings": [hashed_embedding(text) for text in inputs]}


BUILTIN_MODELS = {
    "embed": embed,
    "echo": echo,
    "letter": letter,
    "empty": lambda body: {"content": "  "},
    "refuse": lambda body: {"content": None, "refusal": "I can't help with that."},
    "truncate": lambda body: {"content": last_text(body)[:8], "finish_reason": "length"},
}


@dataclass(frozen=True)
class Fault:
    """What the server does instead of answering, and which chat requests it hits.

    ``kind``: an HTTP error ("429", "500", "502", "503", "504"; "400" quotes the request's Authorization
    header, as a leaky server would), "slow" (the answer after ``delay_s``), "malformed" (a 200 with
    truncated JSON), "drop" (the connection closed, no response) or "cut" (headers and half the body, then
    closed), "huge" (a 200 whose body is ``size`` bytes with its Content-Length) or "huge_chunked" (the same,
    chunked: no length announced); a huge body is streamed, never held. It hits the requests matching every selector given: ``ordinals`` (arrival order of chat
    requests, from 0), ``prompt`` (the last message's content) and ``attempts`` (the request's order among
    those of its model and messages, from 0); ``retry_after`` is the Retry-After header of an error.
    """

    kind: str
    ordinals: Container[int] | None = None
    prompt: str | None = None
    attempts: Container[int] | None = None
    retry_after: str | None = None
    delay_s: float = 2.0
    size: int = 300 << 20

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {FAULT_KINDS}")

    def hits(self, ordinal: int, body: dict, attempt: int) -> bool:
        return (
            (self.ordinals is None or ordinal in self.ordinals)
            and (self.prompt is None or last_text(body) == self.prompt)
            and (self.attempts is None or attempt in self.attempts)
        )


def parse_fault(spec: str) -> Fault:
    """``KIND[@FIRST-LAST][,retry_after=S][,delay_s=S]`` (ordinals FIRST..LAST inclusive) as a Fault."""
    head, *options = spec.split(",")
    kind, _, span = head.partition("@")
    ordinals = None
    if span:
        first, _, last = span.partition("-")
        ordinals = range(int(first), int(last or first) + 1)
    values = dict(option.split("=", 1) for option in options)
    delay = float(values.pop("delay_s", 2.0))
    retry_after = values.pop("retry_after", None)
    if values:
        raise ValueError(f"unknown fault options {sorted(values)}")
    return Fault(kind, ordinals=ordinals, retry_after=retry_after, delay_s=delay)


class _Counters:
    def __init__(self):
        self.requests = 0
        self.completed = 0
        self.concurrent = 0
        self.max_concurrent = 0
        self.arrivals: list[float] = []
        self.by_prompt: dict[str, list] = {}  # "<model> <sha>" -> [requests, completed, arrivals]
        self.auth = {"ok": 0, "missing": 0, "wrong": 0}
        self.faults: dict[str, int] = {}
        self.http_requests = 0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # of the completions delivered whole


class _Peer:
    """One client connection; ``gone`` once the client closed it or it broke."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    @property
    def gone(self) -> bool:
        return self.reader.at_eof() or self.reader.exception() is not None or self.writer.is_closing()


def _response(code: int, body: bytes, headers: Sequence[tuple[str, str]] = (), length: int | None = None) -> bytes:
    head = f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body) if length is None else length}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (head + "\r\n").encode("latin-1") + body


async def _stream_huge(peer: _Peer, fault: Fault) -> bool:
    """A 200 of ``fault.size`` bytes, streamed piece by piece until sent or the client closes (False then)."""
    chunked = fault.kind == "huge_chunked"
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {fault.size}"
    peer.writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n\r\n".encode())
    sent = 0
    try:
        while sent < fault.size:
            piece = HUGE_CHUNK[: fault.size - sent]
            peer.writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
            await peer.writer.drain()
            if peer.gone:
                return False
        if chunked:
            peer.writer.write(b"0\r\n\r\n")
            await peer.writer.drain()
    except (ConnectionError, OSError):
        return False
    return True


def _error(code: int, message: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    body = {"error": {"message": message, "type": http.HTTPStatus(code).phrase, "code": code}}
    return _response(code, json.dumps(body).encode(), headers)


class LlmServer:
    """The server: ``with LlmServer(...) as server`` (a background thread) or ``await server.serve()``."""

    def __init__(
        self,
        models: dict[str, Callable[[dict], dict]] | None = None,
        faults: Sequence[Fault] | Callable[[int, dict, int], Fault | None] = (),
        *,
        delay_s: float = 0.0,
        api_key: str | None = None,
        port: int = 0,
        system_fingerprint: str = "fp_llm_server",
    ):
        self.models = dict(BUILTIN_MODELS if models is None else models)
        self.system_fingerprint = system_fingerprint  # a redeployed server reports another
        self.faults = faults
        self.delay_s = delay_s
        self.api_key = api_key
        self.port = port
        self.counters = _Counters()
        self._holding = False
        self._hold_after = math.inf
        self._parked: set[asyncio.Future] = set()
        self._peers: set[_Peer] = set()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    # -- in-process use: a background thread running the server's event loop

    def __enter__(self) -> LlmServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve():
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.open())
            except BaseException as error:  # reported to the starting thread
                failure.append(error)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.close())
            self._loop.close()

        self._thread = threading.Thread(target=serve, name="llm-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc_info) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def _in_loop(self, function: Callable, *args):
        """Run ``function(*args)`` in the server's loop and return its value (from any other thread)."""

        async def call():
            return function(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)

    def stats(self, detail: bool = True) -> dict:
        """A snapshot of the counters (see the module docstring); ``detail``: with arrivals and by_prompt."""
        return self._in_loop(self._snapshot, detail)

    def prompt_counts(self, model: str, messages: list) -> dict:
        """``{"requests", "completed", "arrivals"}`` of one model and messages."""
        return self.stats()["by_prompt"].get(
            f"{model} {prompt_sha(messages)}", {"requests": 0, "completed": 0, "arrivals": []}
        )

    def hold(self) -> None:
        """Answer nothing from now on: requests stay pending until :meth:`release` or :meth:`drop_held`."""
        self._in_loop(self._control, "hold", None)

    def hold_after(self, n: int) -> None:
        """Answer the first ``n`` chat requests (arrival order, counted since the start or a reset) and hold
        every later one."""
        self._in_loop(self._control, "hold_after", n)

    def release(self) -> None:
        """Answer again, the held requests included."""
        self._in_loop(self._control, "release", None)

    def drop_held(self) -> None:
        """Close the held requests' connections without an answer (new requests stay held)."""
        self._in_loop(self._control, "drop", None)

    def reset(self, faults=None) -> None:
        """Zero the counters; new ``faults`` when given."""
        self._in_loop(self._control, "reset", faults)

    def wait_held(self, count: int, timeout_s: float = 10.0) -> None:
        """Wait until ``count`` requests are held."""
        deadline = time.monotonic() + timeout_s
        while self.stats(detail=False)["held"] < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} requests held after {timeout_s} s")
            time.sleep(0.01)

    # -- the server, in its event loop

    async def open(self) -> None:
        self._stopped = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._connection, HOST, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve(self, on_open: Callable[[LlmServer], None] | None = None) -> None:
        """Serve until :meth:`stop`; ``on_open(self)`` once the port is bound."""
        await self.open()
        try:
            if on_open is not None:
                on_open(self)
            await self._stopped.wait()
        finally:
            await self.close()

    def stop(self) -> None:
        self._stopped.set()

    async def close(self) -> None:
        self._server.close()
        for future in list(self._parked):
            if not future.done():
                future.set_result(False)
        for peer in list(self._peers):
            peer.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _control(self, action: str, value) -> dict:
        if action == "hold":
            self._holding = True
        elif action == "hold_after":
            self._hold_after = int(value)
        elif action in ("release", "drop"):
            if action == "release":
                self._holding = False
                self._hold_after = math.inf
            for future in list(self._parked):
                if not future.done():
                    future.set_result(action == "release")
        elif action == "reset":
            self.counters = _Counters()
            if value is not None:
                self.faults = value
        else:
            raise ValueError(f"unknown control {action!r}")
        return {"done": action}

    def _snapshot(self, detail: bool) -> dict:
        counters = self.counters
        snapshot = {
            "requests": counters.requests,
            "completed": counters.completed,
            "http_requests": counters.http_requests,
            "concurrent": counters.concurrent,
            "max_concurrent": counters.max_concurrent,
            "held": sum(not future.done() for future in self._parked),
            "auth": dict(counters.auth),
            "faults": dict(counters.faults),
            "usage": dict(counters.usage),
        }
        if detail:
            snapshot["arrivals"] = list(counters.arrivals)
            snapshot["by_prompt"] = {
                key: {"requests": n, "completed": done, "arrivals": list(times)}
                for key, (n, done, times) in counters.by_prompt.items()
            }
        return snapshot

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(reader, writer)
        task = asyncio.current_task()
        self._peers.add(peer)
        self._tasks.add(task)
        try:
            while await self._exchange(peer):
                pass
        except (
            ConnectionError,
            ValueError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            pass  # a request that is not HTTP closes its connection; a cancellation is the server closing
        finally:
            self._peers.discard(peer)
            self._tasks.discard(task)
            writer.close()

    async def _exchange(self, peer: _Peer) -> bool:
        """Read one request and answer it; False when the connection is to be closed."""
        try:
            head = await peer.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", ""):
            peer.writer.write(_error(501, "chunked request bodies are not supported", [("Connection", "close")]))
            return False
        length = int(headers.get("content-length", "0"))
        body = await peer.reader.readexactly(length) if length else b""
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        self.counters.http_requests += 1
        path, _, query = target.partition("?")
        if path.startswith("/v1/"):
            answer = self._authorize(headers)
            if answer is None and path == "/v1/chat/completions" and method == "POST":
                return await self._chat(peer, headers, body) and keep_alive
            if answer is None and path == "/v1/embeddings" and method == "POST":
                return await self._chat(peer, headers, body, embeddings=True) and keep_alive
            if answer is None and path == "/v1/models" and method == "GET":
                listing = [{"id": name, "object": "model", "owned_by": "llm_server"} for name in self.models]
                answer = _response(200, json.dumps({"object": "list", "data": listing}).encode())
            answer = answer or _error(404, f"no route {method} {path}")
        elif path == "/stats" and method == "GET":
            detail = urllib.parse.parse_qs(query).get("detail", ["1"])[0] != "0"
            answer = _response(200, json.dumps(self._snapshot(detail)).encode())
        elif path.startswith("/control/") and method == "POST":
            value = urllib.parse.parse_qs(query).get("n", [None])[0]
            try:
                answer = _response(200, json.dumps(self._control(path.removeprefix("/control/"), value)).encode())
            except (ValueError, TypeError) as error:
                answer = _error(400, str(error))
        else:
            answer = _error(404, f"no route {method} {path}")
        peer.writer.write(answer)
        await peer.writer.drain()
        return keep_alive

    def _authorize(self, headers: dict) -> bytes | None:
        """None when the request may pass, else the 401 to send."""
        if self.api_key is None:
            return None
        given = headers.get("authorization")
        if given == f"Bearer {self.api_key}":
            self.counters.auth["ok"] += 1
            return None
        self.counters.auth["missing" if given is None else "wrong"] += 1
        return _error(401, "Incorrect API key provided")

    def _held(self, ordinal: int) -> bool:
        return self._holding or ordinal >= self._hold_after

    async def _park(self) -> bool:
        """Wait while held: True to answer, False to drop the connection."""
        future = asyncio.get_running_loop().create_future()
        self._parked.add(future)
        try:
            return await future
        finally:
            self._parked.discard(future)

    def _fault(self, ordinal: int, body: dict, attempt: int) -> Fault | None:
        if callable(self.faults):
            return self.faults(ordinal, body, attempt)
        return next((fault for fault in self.faults if fault.hits(ordinal, body, attempt)), None)

    async def _chat(self, peer: _Peer, headers: dict, raw: bytes, embeddings: bool = False) -> bool:
        """Answer one chat completion, or one embeddings request (its ``input`` counted as the messages), or
        its fault; False when the connection was closed."""
        counters = self.counters
        ordinal = counters.requests
        counters.requests += 1
        now = time.monotonic()
        counters.arrivals.append(now)
        try:
            body = json.loads(raw)
            model, messages = body["model"], body["input" if embeddings else "messages"]
            if embeddings and isinstance(messages, str):
                messages = [messages]
            if not isinstance(messages, list):
                raise TypeError("messages (input) is not a list")
        except (ValueError, KeyError, TypeError) as error:
            kind = "an embeddings" if embeddings else "a chat completion"
            peer.writer.write(_error(400, f"not {kind} request: {error}"))
            return True
        counts = counters.by_prompt.setdefault(f"{model} {prompt_sha(messages)}", [0, 0, []])
        attempt = counts[0]
        counts[0] += 1
        counts[2].append(now)
        if model not in self.models:
            peer.writer.write(_error(404, f"The model `{model}` does not exist."))
            return True
        counters.concurrent += 1
        counters.max_concurrent = max(counters.max_concurrent, counters.concurrent)
        try:
            if self._held(ordinal) and not await self._park():
                return False
            fault = self._fault(ordinal, body, attempt)
            if fault is not None:
                counters.faults[fault.kind] = counters.faults.get(fault.kind, 0) + 1
                if fault.kind in ERROR_KINDS:
                    code = ERROR_KINDS[fault.kind]
                    message = "scripted failure"
                    if code == 400:
                        message = f"bad request; authorization header: {headers.get('authorization')}"
                    extra = [("Retry-After", fault.retry_after)] if fault.retry_after is not None else []
                    peer.writer.write(_error(code, message, extra))
                    await peer.writer.drain()
                    return True
            await asyncio.sleep(fault.delay_s if fault is not None and fault.kind == "slow" else self.delay_s)
            if self._held(ordinal) and not await self._park():
                return False
            if peer.gone:
                return False
            if embeddings:
                answer = self._embeddings(model, body, messages)
            else:
                answer = self._completion(ordinal, model, body, messages)
            if fault is not None and fault.kind == "drop":
                return False
            if fault is not None and fault.kind.startswith("huge"):
                return await _stream_huge(peer, fault)
            if fault is not None and fault.kind == "malformed":
                peer.writer.write(_response(200, answer[: len(answer) // 2]))
                return True
            if fault is not None and fault.kind == "cut":
                peer.writer.write(_response(200, answer[: len(answer) // 2], length=len(answer)))
                await peer.writer.drain()
                return False
            peer.writer.write(_response(200, answer))
            await peer.writer.drain()
            if peer.gone:
                return False
            counters.completed += 1
            counts[1] += 1
            sent = json.loads(answer)
            usage = (sent.get("usage") if isinstance(sent, dict) else None) or {}
            for key in counters.usage:
                counters.usage[key] += int(usage.get(key) or 0) if isinstance(usage, dict) else 0
            return True
        finally:
            counters.concurrent -= 1

    def _embeddings(self, model: str, body: dict, inputs: list) -> bytes:
        """The embeddings JSON of the model's vectors (``{"embeddings": [one per input]}``), in OpenAI's shape."""
        reply = self.models[model](body)
        if "raw" in reply:
            return json.dumps(reply["raw"]).encode("utf-8")
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(reply["embeddings"])]
        tokens = sum(rough_tokens(text) for text in inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return json.dumps({"object": "list", "data": data, "model": model, "usage": usage}).encode("utf-8")

    def _completion(self, ordinal: int, model: str, body: dict, messages: list) -> bytes:
        """The chat completion JSON of the model's reply."""
        reply = self.models[model](body)
        if "raw" in reply:
            return json.dumps(reply["raw"]).encode("utf-8")
        content = reply.get("content")
        message = {"role": "assistant", "content": content}
        if reply.get("refusal") is not None:
            message["refusal"] = reply["refusal"]
        logprobs = None
        if body.get("logprobs") and reply.get("top_logprobs") is not None:
            first = reply["top_logprobs"][0]["token"]
            alternatives = [{**alternative, "bytes": None} for alternative in reply["top_logprobs"]]
            logprobs = {
                "content": [{"token": first, "logprob": alternatives[0]["logprob"], "top_logprobs": alternatives}]
            }
        prompt_tokens = rough_tokens(json.dumps(messages, ensure_ascii=False))
        completion_tokens = rough_tokens(content or reply.get("refusal") or "")
        completion = {
            "id": f"chatcmpl-{ordinal}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": self.system_fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": reply.get("finish_reason", "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return json.dumps(completion, ensure_ascii=False).encode("utf-8")


class LlmServerProcess:
    """``python -m tests.llm_server`` in a subprocess: ``with LlmServerProcess("--delay-ms", "50") as s``."""

    def __init__(self, *arguments: str, env: dict | None = None):
        self.arguments = arguments
        self.env = env
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def __enter__(self) -> LlmServerProcess:
        command = [sys.executable, "-m", "tests.llm_server", "--port", "0", *self.arguments]
        self.process = subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.PIPE, text=True, env=self.env)
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the server did not print its port: {line!r}")
        self.port = int(line)
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def stats(self, detail: bool = True) -> dict:
        url = f"http://{HOST}:{self.port}/stats?detail={int(detail)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def control(self, action: str, n: int | None = None) -> None:
        """``hold``, ``hold_after`` (with ``n``), ``release``, ``drop`` or ``reset``."""
        query = "" if n is None else f"?n={n}"
        request = urllib.request.Request(f"http://{HOST}:{self.port}/control/{action}{query}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.llm_server", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed on the first line)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="simulated latency of every answer")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME[=KIND]",
        help=f"a model answering as KIND, one of {sorted(BUILTIN_MODELS)} (default echo); repeatable",
    )
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC", help=parse_fault.__doc__)
    parser.add_argument("--api-key-env", help="require the key this environment variable holds")
    options = parser.parse_args(argv)
    models = {}
    for spec in options.model or ["echo"]:
        name, _, kind = spec.partition("=")
        models[name] = BUILTIN_MODELS[kind or (name if name in BUILTIN_MODELS else "echo")]
    api_key = os.environ[options.api_key_env] if options.api_key_env else None
    server = LlmServer(
        models,
        [parse_fault(spec) for spec in options.fault],
        delay_s=options.delay_ms / 1000,
        api_key=api_key,
        port=options.port,
    )

    def opened(server: LlmServer) -> None:
        print(server.port, flush=True)
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, server.stop)

    asyncio.run(server.serve(opened))


if __name__ == "__main__":
    main()
