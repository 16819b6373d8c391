"""A real OpenAI-compatible HTTP server on loopback, with scriptable replies and faults.

Why: the live backend's retry, timeout and concurrency behaviour can only be
trusted when tested against real sockets, yet tests must run offline. This
server speaks ``POST /v1/chat/completions`` (and ``GET /v1/models``; and, for choice-mode
scoring, ``POST /v1/completions`` with ``echo`` and ``logprobs``: prompt log-probabilities
as vLLM returns them, scripted by ``prompt_logprob``) from the
standard library, answers concurrently (one thread per connection), and
injects faults per request from a queue::

    with FakeOpenAIServer(reply="\\\\boxed{4}") as server:
        server.add_faults(Fault(status=503), Fault(status=429, retry_after=0.2))
        ...  # point a backend at server.url ("http://127.0.0.1:PORT/v1")
        server.requests[0].body["messages"]

Each request takes the next queued fault, or ``default_fault`` when the queue
is empty. Usage figures are deterministic (see ``usage_for``) and recorded with
each request so tests can compare metering against what the server reported.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)

Reply = str | Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Fault:
    """What goes wrong with one request.

    ``latency_s`` delays the answer (on top of the server's default latency);
    ``status`` answers with that HTTP status and an OpenAI-style error body
    (``retry_after`` adds a ``Retry-After`` header); ``malformed`` answers 200
    with a body that is not JSON; ``no_content`` answers 200 JSON without
    ``choices[0].message.content``; ``drop`` closes the connection without any
    response; ``no_usage`` omits the ``usage`` field; ``body`` replaces the
    error body of a ``status`` fault.
    """

    latency_s: float = 0.0
    status: int | None = None
    retry_after: float | str | None = None
    malformed: bool = False
    no_content: bool = False
    drop: bool = False
    no_usage: bool = False
    body: str | None = None


@dataclass
class ReceivedRequest:
    """One request as the server saw it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # the parsed JSON body (None when it was not JSON)
    arrived: float  # time.monotonic() when the request was read
    fault: Fault
    answered: float | None = None  # time.monotonic() when the answer was sent
    status: int | None = None  # status answered (None: dropped or not answered yet)
    usage: dict[str, int] | None = None  # usage reported in a successful answer
    text: str | None = None  # the completion text of a successful answer


def usage_for(body: Mapping[str, Any], text: str) -> dict[str, int]:
    """Deterministic token figures the server reports: words plus fixed framing.

    Deliberately unlike the client's character estimate, so a test can tell
    which one a completion used.
    """
    messages = body.get("messages") or []
    prompt = sum(len(str(m.get("content", "")).split()) + 3 for m in messages) + 11
    completion = len(text.split()) + 7
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients may connect at once
    allow_reuse_address = True
    owner: FakeOpenAIServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    disable_nagle_algorithm = True  # no delayed small writes on loopback
    timeout = 30  # idle keep-alive connections end eventually
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("fake openai: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") == "/v1/models":
            owner = self.server.owner
            data = {"object": "list", "data": [{"id": owner.model or "fake", "object": "model"}]}
            self._send_json(200, data)
        else:
            self._send_json(404, _error_body(404, f"no route GET {self.path}"))

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        owner = self.server.owner
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = ReceivedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            arrived=time.monotonic(),
            fault=owner._next_fault(),
        )
        owner._begin(record)
        try:
            self._answer(owner, record)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timed out); nothing to do
        finally:
            owner._end()

    def _answer(self, owner: FakeOpenAIServer, record: ReceivedRequest) -> None:
        fault = record.fault
        delay = owner.latency_s + fault.latency_s
        if delay > 0 and owner._stopping.wait(delay):
            self.close_connection = True  # shutting down: drop
            return
        if self.path.rstrip("/") == "/v1/completions" and not (fault.status or fault.drop):
            self._reply(record, 200, _echo_completion(owner, record))
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._reply(record, 404, _error_body(404, f"no route POST {self.path}"))
            return
        if fault.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault.status is not None and fault.status != 200:
            extra: dict[str, str] = {}
            if fault.retry_after is not None:
                extra["Retry-After"] = str(fault.retry_after)
            error: Any = _error_body(fault.status, f"injected fault: HTTP {fault.status}")
            if fault.body is not None:
                error = fault.body.encode("utf-8")
            self._reply(record, fault.status, error, extra)
            return
        if fault.malformed:
            self._reply(record, 200, b'{"id": "broken", "choices": [ {"message": ')
            return
        if not isinstance(record.body, dict) or not isinstance(record.body.get("messages"), list):
            self._reply(record, 400, _error_body(400, "body must be JSON with a messages list"))
            return
        try:
            text = owner._text_for(record.body)
        except Exception as exc:  # a broken reply script shows up as a server error
            logger.exception("fake openai: the reply callable failed")
            self._reply(record, 500, _error_body(500, f"reply callable failed: {exc!r}"))
            return
        data: dict[str, Any] = {
            "id": f"chatcmpl-fake-{id(record):x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": owner.model or record.body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
        if fault.no_content:
            data["choices"][0]["message"] = {"role": "assistant", "content": None}
        if not fault.no_usage:
            record.usage = usage_for(record.body, text)
            data["usage"] = record.usage
        record.text = text
        self._reply(record, 200, data)

    def _reply(
        self,
        record: ReceivedRequest,
        status: int,
        data: Any,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        record.status, record.answered = status, time.monotonic()
        self._send_json(status, data, headers)

    def _send_json(self, status: int, data: Any, headers: Mapping[str, str] | None = None) -> None:
        payload = data if isinstance(data, bytes) else json.dumps(data).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def _echo_completion(owner: FakeOpenAIServer, record: ReceivedRequest) -> dict[str, Any]:
    """A legacy completions reply; with ``echo`` and ``logprobs``, each prompt's tokens
    (whitespace-led words) and their scripted log-probabilities (the first is None, as in
    vLLM), then one generated token "." (``max_tokens`` >= 1)."""
    body = record.body if isinstance(record.body, dict) else {}
    prompts = body.get("prompt")
    prompts = [prompts] if isinstance(prompts, str) else list(prompts or [])
    choices = []
    for index, prompt in enumerate(prompts):
        text = str(prompt) + "." if body.get("echo") else "."
        choice: dict[str, Any] = {"index": index, "text": text, "finish_reason": "length"}
        if body.get("logprobs") is not None and owner.prompt_logprob is not None:
            pieces = [(m.start(), m.group()) for m in re.finditer(r"\s*\S+|\s+$", str(prompt))]
            if not body.get("echo"):
                pieces = []
            tokens = [t for _, t in pieces] + ["."]
            offsets = [o for o, _ in pieces] + [len(str(prompt))]
            logprobs: list[float | None] = [
                None if k == 0 else owner.prompt_logprob(t, str(prompt)[:o])
                for k, (o, t) in enumerate(pieces)
            ]
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": [*logprobs, -0.5],
                "text_offset": offsets,
                "top_logprobs": None,
            }
        choices.append(choice)
    return {"id": "cmpl-fake", "object": "text_completion", "choices": choices}


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error", "code": status}}


class FakeOpenAIServer:
    """A loopback chat-completions server in a daemon thread (a context manager).

    Args:
        reply: the completion text, or a callable ``request_json -> text``.
        latency_s: delay before every answer (faults add their own).
        default_fault: applied to requests when the fault queue is empty
            (e.g. ``Fault(status=503)`` for a server that always fails).
        model: the ``model`` field of answers (default: echo the request's).
        prompt_logprob: ``/v1/completions`` with ``echo``: the log-probability of each
            prompt token (``token_text, text_before -> float``; tokens are whitespace-led
            words); ``None`` answers without prompt log-probabilities, as a server that
            cannot echo them does.
    """

    def __init__(
        self,
        reply: Reply = "The answer is \\boxed{0}.",
        *,
        latency_s: float = 0.0,
        default_fault: Fault | None = None,
        model: str | None = None,
        prompt_logprob: Callable[[str, str], float] | None = lambda token, before: -1.0,
    ) -> None:
        self.reply = reply
        self.prompt_logprob = prompt_logprob
        self.latency_s = latency_s
        self.default_fault = default_fault or Fault()
        self.model = model
        self.requests: list[ReceivedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._faults: collections.deque[Fault] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake sleeping handlers, close the listening socket."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake server is not running; use start() or `with`")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for clients, ending in /v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------
    def add_faults(self, *faults: Fault) -> None:
        """Queue faults for the next requests, one each, in order."""
        with self._lock:
            self._faults.extend(faults)

    def completions(self) -> list[ReceivedRequest]:
        """Requests to /v1/chat/completions answered successfully, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.status == 200 and r.text is not None]

    def _next_fault(self) -> Fault:
        with self._lock:
            return self._faults.popleft() if self._faults else self.default_fault

    def _text_for(self, body: dict[str, Any]) -> str:
        return self.reply(body) if callable(self.reply) else self.reply

    def _begin(self, record: ReceivedRequest) -> None:
        with self._lock:
            self.requests.append(record)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _end(self) -> None:
        with self._lock:
            self.in_flight -= 1
