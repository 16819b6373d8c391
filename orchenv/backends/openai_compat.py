"""Live agents behind any OpenAI-compatible chat-completions server.

Why: the same controller code should run against simulated agents and against
real models served by vLLM, SGLang, llama.cpp's server or a hosted API. All of
them speak ``POST {base_url}/chat/completions``, so one small client covers them.
RL rollouts keep hundreds of such requests in flight, so the client must never be
the bottleneck: it is asynchronous (``aiohttp``, which keeps up with a server at
1,000 concurrent requests where a thread per call does not).

Design:

* one ``aiohttp.ClientSession`` per backend (one connection pool, keep-alive, at
  most ``max_concurrency`` calls in flight), living on the process's one event loop
  (``orchenv.backends.common.shared_loop``). ``complete`` is synchronous and safe from
  any thread; inside ``orchenv.vector.AsyncVectorEnv`` or ``orchenv eval
  --concurrency N`` (``run_in_bridge``) the same call suspends only the env step that
  made it, so N episodes share one thread and one loop;
* transient faults are retried with exponential backoff and full jitter
  (a uniform wait in ``[0, min(backoff_max_s, backoff_base_s * 2**k)]`` before
  retry ``k + 1``): timeouts, connection errors, dropped connections, HTTP 429
  (its ``Retry-After`` is honoured, capped at ``backoff_max_s``), HTTP 5xx and
  200 replies that are not a usable chat completion. Other 4xx fail at once;
* every call has a deadline of ``(max_retries + 1) * timeout_s`` plus the sum
  of the backoff caps (``deadline_s``): attempts and waits are cut short to fit
  it, so a stalled server can never hang a caller. Each attempt (connect, send,
  status line and headers, the whole body) is one coroutine cancelled when its
  ``timeout_s`` is up, so a server dripping one header byte a second cannot
  outlast it; the connect phase is also bounded by ``connect_timeout_s``;
* a reply body is read in chunks and refused past ``max_response_bytes``
  (default 16 MiB; a ``Content-Length`` above it is refused before reading);
* replies are parsed with ``orchenv.schema.parse_json`` (bounded digits and
  nesting) and ``usage`` is checked by ``orchenv.schema.USAGE``: token counts
  are ints in ``[0, MAX_CALL_TOKENS]``. A reply beyond those limits, or over
  the size cap, fails at once (not retried: a server that sends one will
  send it again) with an ``OpenAIRequestError`` naming the field;
* token counts come from the reply's ``usage`` (``token_source="server"``);
  without it from a configured tokenizer (``"tokenizer"``), else from the
  simulated backend's documented estimate (``"estimate"``: ceil(chars / 4)
  per message plus 4 framing tokens, ceil(chars / 4) for the completion).
  With both a server count and a tokenizer, the two are compared (verified
  metering): ``meta["metering"]`` holds both and ``disagree`` when they differ by
  more than ``metering_tolerance`` (relative) and 2 tokens;
* where the server returns them (request ``logprobs: true``; llama.cpp and vLLM do),
  the sampled tokens and their log-probabilities are in ``meta["logprobs"]``
  (``{"tokens", "logprobs", "token_ids"}``; ids where the server gives them, e.g.
  vLLM's ``return_tokens_as_token_ids``), so a trainer can use served generation
  without re-tokenising.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import functools
import json
import logging
import math
import os
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchenv.backends.common import (
    RebuiltOnCopy,
    await_only,
    in_bridge,
    on_loop_thread,
    run_sync,
    shared_loop,
)
from orchenv.backends.simulated import (
    _MESSAGE_OVERHEAD_TOKENS,
    estimate_prompt_tokens,
    estimate_tokens,
)
from orchenv.backends.token_ids import PieceIndex, fill_token_ids
from orchenv.choice_policy import ChoiceScores
from orchenv.error import BackendError, ConfigError, SchemaError, require
from orchenv.pool import AgentSpec, CallContext, Completion, Message
from orchenv.schema import (
    MAX_DEPTH,
    MAX_FLOAT_CHARS,
    MAX_INT_DIGITS,
    USAGE,
    JSONLimitError,
    parse_json,
)

logger = logging.getLogger(__name__)

#: keys an agent's ``spec.backend_kwargs`` may set for this backend
AGENT_KEYS = frozenset(
    {
        "base_url",
        "model",
        "api_key",
        "api_key_env",
        "params",
        "headers",
        "timeout_s",
        "connect_timeout_s",
        "max_retries",
    }
)

#: longest excerpt of a response body quoted in an error message
BODY_EXCERPT_CHARS = 300
#: default cap on a response body (bytes, after content decoding)
MAX_RESPONSE_BYTES = 16 * 2**20
#: longest ``model`` / ``id`` / ``finish_reason`` string kept in ``Completion.meta``
_META_TEXT_CHARS = 1000

_RETRY_STATUS_MIN = 500  # 5xx: server faults, retried
_TOO_MANY_REQUESTS = 429
#: the most sampled tokens whose log-probabilities are kept in ``Completion.meta``
MAX_LOGPROB_TOKENS = 65536
_READ_CHUNK = 65536

#: waits between attempts (a module attribute so tests can record them instead)
_sleep = asyncio.sleep


def _timeout_after(seconds: float) -> Any:
    """An async context manager cancelling its block after ``seconds`` (3.11's
    ``asyncio.timeout``; on 3.10 a small equivalent over ``loop.call_later``)."""
    if sys.version_info >= (3, 11):
        return asyncio.timeout(seconds)
    return _Timeout310(seconds)  # pragma: no cover - Python 3.10 only


class _Timeout310:  # pragma: no cover - Python 3.10 only
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None

        def fire() -> None:
            self.fired = True
            task.cancel()

        self.handle = asyncio.get_running_loop().call_later(self.seconds, fire)

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self.handle.cancel()
        if self.fired and kind is asyncio.CancelledError:
            raise TimeoutError from exc
        return False


def _excerpt(body: bytes | str, limit: int = BODY_EXCERPT_CHARS) -> str:
    """At most ``limit`` characters of a response body, for error messages."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms``, ``Retry-After`` seconds or date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(0.0, value)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return max(0.0, value) if math.isfinite(value) else None


class OpenAIRequestError(BackendError):
    """A chat-completions request failed for good (retries spent, or not retryable)."""

    def __init__(
        self, message: str, *, agent: str, url: str, status: int | None, attempts: int
    ) -> None:
        super().__init__(message)
        self.agent, self.url, self.status, self.attempts = agent, url, status, attempts


class _Failure(Exception):
    """One failed attempt: what went wrong and whether another attempt may help."""

    def __init__(
        self,
        reason: str,
        detail: str = "",
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason, detail)
        self.reason = reason  # "HTTP 503", "ReadTimeout", "malformed response"
        self.detail = detail  # body excerpt or exception text
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class _Target:
    """Where and how one agent's requests go (resolved from its spec per call)."""

    url: str
    model: str
    headers: dict[str, str]
    params: dict[str, Any]
    timeout_s: float
    connect_timeout_s: float
    max_retries: int
    proxy: str | None = None


class OpenAICompatBackend(RebuiltOnCopy):
    """Agents served by an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: default endpoint root, e.g. ``"http://localhost:8000/v1"``, for
            agents that do not set their own ``backend_kwargs["base_url"]``.
        api_key: default bearer key. Without one, the key is read from the
            environment variable ``api_key_env`` at call time; without that
            either, requests carry no ``Authorization`` header (local servers).
        api_key_env: environment variable holding the key.
        timeout_s: bound on one attempt (connect, send, wait, read the body).
        connect_timeout_s: bound on opening a connection (within ``timeout_s``).
        max_retries: retries after the first attempt for transient faults.
        backoff_base_s, backoff_max_s: full-jitter exponential backoff; the wait
            before retry ``k + 1`` is uniform in
            ``[0, min(backoff_max_s, backoff_base_s * 2**k)]``; a server's
            ``Retry-After`` replaces it (capped at ``backoff_max_s``).
        max_concurrency: calls ``AgentPool`` runs at once against this backend.
        default_params: request fields sent with every call (``temperature``,
            ``max_tokens``, ``top_p``, ``seed`` ...); an agent's
            ``backend_kwargs["params"]`` is merged over them.
        tokenizer: the agent's own tokenizer, to count tokens when a reply has no
            ``usage`` and to check the server's count when it has one: a callable
            ``text -> int``, a Hugging Face tokenizer name / path, or a ``.gguf``
            file (its embedded tokenizer; needs the ``gguf`` package), loaded lazily
            from local files only (needs ``orchenv[train]``). Without one, the
            character estimate is used and server counts are taken as they come.
        metering_tolerance: relative difference between the server's and the
            tokenizer's count above which a call is flagged (``meta["metering"]``),
            when the absolute difference is also over 2 tokens.
        rng_seed: seed of the backoff jitter (reproducible waits in tests).
        max_response_bytes: the largest reply body read (after content decoding);
            a larger one fails the call at once.

    Per agent, ``spec.backend_kwargs`` may set ``base_url``, ``model`` (default
    ``spec.model``), ``api_key``, ``api_key_env``, ``params``, ``headers``, and the
    backend's ``timeout_s``, ``connect_timeout_s`` and ``max_retries`` for that agent
    (so a pool file can give a slow CPU-served model more time).

    ``Completion.latency_s`` is the wall time of the whole call: every attempt
    and every backoff wait until the successful reply was read (what the caller
    waited). ``meta["attempt_latency_s"]`` is the successful attempt alone.
    Construction does no I/O; the HTTP session is created on first use and
    ``close()`` releases it (a later call opens a new one).
    """

    #: its calls wait on a server (``orchenv.calltypes.Backend``: what ``make_vec``'s
    #: default mode looks for)
    live = True

    # sessions and loaded tokenizers do not pickle; they are rebuilt on use
    _fresh_on_copy = {
        "_session": None,
        "_slots": None,
        "_hf_tokenizer": None,
        "_piece_index": None,
        "_finalizer": None,
        "_targets": {},
    }

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_concurrency: int = 16,
        default_params: Mapping[str, Any] | None = None,
        tokenizer: str | Callable[[str], int] | None = None,
        rng_seed: int | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        metering_tolerance: float = 0.05,
    ) -> None:
        for label, value in (
            ("timeout_s", timeout_s),
            ("connect_timeout_s", connect_timeout_s),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
        for label, value in (("backoff_base_s", backoff_base_s), ("backoff_max_s", backoff_max_s)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{label} must be >= 0 seconds, got {value!r}")
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise ConfigError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not (isinstance(max_concurrency, int) and max_concurrency >= 1):
            raise ConfigError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        if isinstance(max_response_bytes, bool) or not (
            isinstance(max_response_bytes, int) and max_response_bytes >= 1
        ):
            raise ConfigError(
                f"max_response_bytes must be an integer >= 1, got {max_response_bytes!r}"
            )
        if not (
            isinstance(metering_tolerance, (int, float))
            and math.isfinite(metering_tolerance)
            and metering_tolerance >= 0
        ):
            raise ConfigError(f"metering_tolerance must be >= 0, got {metering_tolerance!r}")
        if tokenizer is not None and not (callable(tokenizer) or isinstance(tokenizer, str)):
            raise ConfigError(
                "tokenizer must be a callable text -> token count or a Hugging Face "
                f"tokenizer name or path, got {type(tokenizer).__name__}"
            )
        self.base_url = base_url
        self.api_key = api_key
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = max_retries
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.max_concurrency = max_concurrency
        self.max_response_bytes = max_response_bytes
        self.default_params = dict(default_params or {})
        _check_params(self.default_params, "default_params")
        self.tokenizer = tokenizer
        self.rng_seed = rng_seed
        self._rng = random.Random(rng_seed)
        self.metering_tolerance = float(metering_tolerance)
        self._lock = threading.Lock()  # guards the tokenizer and the rng
        # the session and the concurrency slots live on the shared loop (touched only there)
        self._session: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._finalizer: Any = None  # closes the session when the backend is dropped unclosed
        self._targets: dict[int, tuple[AgentSpec, tuple[str | None, str | None], _Target]] = {}
        self._hf_tokenizer: Any = None
        self._piece_index: PieceIndex | None = None

    # -- lifecycle -------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"OpenAICompatBackend(base_url={self.base_url!r}, timeout_s={self.timeout_s:g}, "
            f"max_retries={self.max_retries}, max_concurrency={self.max_concurrency})"
        )

    def __enter__(self) -> OpenAICompatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session and its pooled connections (a later call opens a new one)."""
        session, self._session, self._slots = self._session, None, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        _close_session(session)

    def _http(self) -> Any:
        """This backend's session on the shared loop (call on the loop thread only)."""
        session = self._session
        if session is None or session.closed or session._orchenv_pid != os.getpid():
            import aiohttp

            connector = aiohttp.TCPConnector(
                limit=self.max_concurrency, limit_per_host=0, ttl_dns_cache=300
            )
            # no trust_env: it reads ~/.netrc in a worker thread on every request; proxies
            # from the environment are resolved once per URL instead (``_proxy_for``).
            # No cookie jar: an API client has no use for a server's cookies.
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            session._orchenv_pid = os.getpid()  # type: ignore[attr-defined]
            session._orchenv_loop = asyncio.get_running_loop()  # type: ignore[attr-defined]
            self._session = session
            if self._finalizer is not None:
                self._finalizer.detach()
            # a backend dropped without close() (an env never closed) still closes its
            # connections, quietly, instead of aiohttp warning about an unclosed session
            self._finalizer = weakref.finalize(self, _close_session, session)
            self._slots = asyncio.Semaphore(self.max_concurrency)
        return session

    @property
    def deadline_s(self) -> float:
        """Upper bound on one call's wall time: every attempt's timeout plus every backoff cap."""
        return self._deadline(self.timeout_s, self.max_retries)

    def _deadline(self, timeout_s: float, max_retries: int) -> float:
        waits = sum(
            min(self.backoff_max_s, self.backoff_base_s * 2.0**k) for k in range(max_retries)
        )
        return (max_retries + 1) * timeout_s + waits

    # -- the Backend protocol -------------------------------------------------------
    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """POST the messages to the agent's endpoint, retrying transient faults; meter the reply.

        Synchronous; in a bridged env step (``AsyncVectorEnv``, ``eval --concurrency``) it
        waits without blocking the other steps.
        """
        target = self._target(spec)
        message_list = [dict(m) for m in messages]
        payload = self._payload(target, message_list)
        shared_loop()  # started before run_sync picks the path
        data, attempts, latency, attempt_latency = run_sync(
            lambda: self._call(spec, target, payload)
        )
        return self._completion(spec, message_list, data, attempts, latency, attempt_latency)

    async def acomplete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """``complete`` as a coroutine, for code already running on ``shared_loop()``."""
        target = self._target(spec)
        message_list = [dict(m) for m in messages]
        payload = self._payload(target, message_list)
        data, attempts, latency, attempt_latency = await self._call(spec, target, payload)
        return self._completion(spec, message_list, data, attempts, latency, attempt_latency)

    @staticmethod
    def _payload(target: _Target, messages: list[Message]) -> bytes:
        body = {**target.params, "model": target.model, "messages": messages}
        return json.dumps(body).encode("utf-8")

    async def _call(
        self,
        spec: AgentSpec,
        target: _Target,
        payload: bytes,
        parse: Callable[[bytes, int], dict[str, Any]] | None = None,
    ) -> tuple[dict[str, Any], int, float, float]:
        """The parsed reply, attempts, call and attempt latency; retries transient faults."""
        session = self._http()
        slots = self._slots
        assert slots is not None
        async with slots:
            start = time.monotonic()
            deadline = start + self._deadline(target.timeout_s, target.max_retries)
            attempts = 0
            while True:
                attempts += 1
                attempt_start = time.monotonic()
                try:
                    data = await self._attempt(
                        session,
                        target,
                        payload,
                        min(target.timeout_s, deadline - attempt_start),
                        parse or _parse_reply,
                    )
                except _Failure as failure:
                    if not failure.retryable or attempts > target.max_retries:
                        raise self._give_up(spec, target, failure, attempts) from None
                    wait = self._next_wait(failure, attempts)
                    if time.monotonic() + wait >= deadline:
                        failure.detail += " (call deadline reached)"
                        raise self._give_up(spec, target, failure, attempts) from None
                    logger.info(
                        "agent %r: %s from %s (attempt %d of %d); retrying in %.3f s",
                        spec.name,
                        failure.reason,
                        target.url,
                        attempts,
                        target.max_retries + 1,
                        wait,
                    )
                    await _sleep(wait)
                    continue
                end = time.monotonic()
                return data, attempts, end - start, end - attempt_start

    # -- choice mode (orchenv.choice_policy) --------------------------------------------
    def score_choices(
        self, spec: AgentSpec, messages: Sequence[Message], choices: Sequence[str]
    ) -> ChoiceScores:
        """The summed log-probability of each choice as the reply to ``messages``, from the
        server's prompt log-probabilities: one ``POST /completions`` with every
        ``chat-template(messages) + choice + end-of-turn`` as a prompt, ``echo`` and
        ``logprobs`` (vLLM returns them, and its prefix cache shares the prompt's KV). The
        chat template is applied here, so the backend needs ``tokenizer=`` naming the served
        model's tokenizer. A server that returns no prompt log-probabilities (llama.cpp's
        server may not echo them: untested here) fails loudly."""
        if not choices:
            raise ConfigError("score_choices needs at least one choice")
        if self.tokenizer is None or callable(self.tokenizer):
            raise ConfigError(
                "choice scoring through an openai server renders the chat template locally: "
                "give the backend tokenizer= the served model's tokenizer (a name, a path or "
                "a .gguf file), not a counting callable"
            )
        tok = self._load_tokenizer()
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"tokenizer {self.tokenizer!r} has no chat template to render")
        chat = [dict(m) for m in messages]
        prompt = str(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        stop = str(tok.eos_token or "")
        target = self._target(spec)
        url = target.url.removesuffix("/chat/completions") + "/completions"
        target = dataclasses.replace(target, url=url, proxy=_proxy_for(url))
        texts = [prompt + c + stop for c in choices]
        body = {"model": target.model, "prompt": texts, "echo": True, "logprobs": 1}
        body.update(max_tokens=1, temperature=0.0)
        payload = json.dumps(body).encode("utf-8")
        shared_loop()
        data, _, _, _ = run_sync(lambda: self._call(spec, target, payload, _parse_choice_reply))
        rows = sorted(data["choices"], key=lambda c: int(c.get("index", 0)))
        if len(rows) != len(texts):
            raise BackendError(
                f"{url} answered {len(rows)} choices for {len(texts)} prompts (agent {spec.name!r})"
            )
        scores, counts = [], []
        for text, row in zip(texts, rows, strict=True):
            lp = row.get("logprobs") or {}
            tokens, values = lp.get("tokens"), lp.get("token_logprobs")
            offsets = lp.get("text_offset")
            if not (isinstance(tokens, list) and isinstance(values, list)) or not isinstance(
                offsets, list
            ):
                raise BackendError(
                    f"{url} returned no prompt log-probabilities (echo + logprobs with "
                    "tokens, token_logprobs and text_offset): choice mode needs a server that "
                    "does (vLLM documents echo with prompt logprobs; not checked against llama.cpp here)"
                )
            total, n = 0.0, 0
            for token, value, offset in zip(tokens, values, offsets, strict=False):
                # the choice's tokens: those ending after the prompt, starting inside the text
                if offset + len(str(token)) <= len(prompt) or offset >= len(text):
                    continue
                if value is None or not isinstance(value, (int, float)):
                    raise BackendError(f"{url} returned a non-number log-probability {value!r}")
                total += float(value)
                n += 1
            if n == 0:
                raise BackendError(f"{url} echoed no token of choice {text[len(prompt) :][:60]!r}")
            scores.append(total)
            counts.append(n)
        counted = sum(counts)
        prompt_tokens = self._tokenizer_count(prompt)
        return ChoiceScores(
            logprobs=scores,
            prompt_tokens=prompt_tokens,
            choice_tokens=counted,
            cost_usd=(prompt_tokens * spec.price_prompt + counted * spec.price_completion) / 1e6,
            token_counts=tuple(counts),
        )

    # -- internals ------------------------------------------------------------------
    def _target(self, spec: AgentSpec) -> _Target:
        """The agent's resolved target, cached per spec object (resolving it on every call
        cost a tenth of the client's time at 256 envs). The API key is still read from the
        environment at call time: a changed variable gives a fresh target."""
        kwargs = spec.backend_kwargs
        keys = (
            os.environ.get(str(kwargs["api_key_env"])) if kwargs.get("api_key_env") else None,
            os.environ.get(self.api_key_env) if self.api_key_env else None,
        )
        cached = self._targets.get(id(spec))
        if cached is not None and cached[0] is spec and cached[1] == keys:
            return cached[2]
        target = self._resolve_target(spec)
        if len(self._targets) >= 4096:
            self._targets.clear()
        self._targets[id(spec)] = (spec, keys, target)
        return target

    def _resolve_target(self, spec: AgentSpec) -> _Target:
        """Resolve an agent's URL, model, headers and params from its spec and the defaults."""
        kwargs = dict(spec.backend_kwargs)
        unknown = sorted(set(kwargs) - AGENT_KEYS)
        if unknown:
            raise ConfigError(
                f"agent {spec.name!r}: unknown backend_kwargs {unknown} for the openai backend; "
                f"known: {sorted(AGENT_KEYS)}"
            )
        base_url = kwargs.get("base_url") or self.base_url
        if not base_url:
            raise ConfigError(
                f"agent {spec.name!r} has no base_url: set backend_kwargs['base_url'] on the "
                "agent or OpenAICompatBackend(base_url=...), e.g. 'http://localhost:8000/v1'"
            )
        params = {**self.default_params, **dict(kwargs.get("params") or {})}
        _check_params(params, f"agent {spec.name!r} params")
        key = kwargs.get("api_key")
        if key is None and kwargs.get("api_key_env"):
            key = os.environ.get(str(kwargs["api_key_env"]))
        if key is None:
            key = self.api_key
        if key is None and self.api_key_env:
            key = os.environ.get(self.api_key_env)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update({str(k): str(v) for k, v in dict(kwargs.get("headers") or {}).items()})
        timeouts = {}
        for label in ("timeout_s", "connect_timeout_s"):
            value = kwargs.get(label, getattr(self, label))
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and math.isfinite(value) and value > 0
            ):
                raise ConfigError(
                    f"agent {spec.name!r}: backend_kwargs {label} must be a positive number of "
                    f"seconds, got {value!r}"
                )
            timeouts[label] = float(value)
        retries = kwargs.get("max_retries", self.max_retries)
        if isinstance(retries, bool) or not (isinstance(retries, int) and retries >= 0):
            raise ConfigError(
                f"agent {spec.name!r}: backend_kwargs max_retries must be an integer >= 0, "
                f"got {retries!r}"
            )
        url = str(base_url).rstrip("/") + "/chat/completions"
        return _Target(
            url=url,
            proxy=_proxy_for(url),
            model=str(kwargs.get("model") or spec.model),
            headers=headers,
            params=params,
            max_retries=retries,
            **timeouts,
        )

    async def _attempt(
        self,
        session: Any,
        target: _Target,
        payload: bytes,
        budget_s: float,
        parse: Callable[[bytes, int], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """One request, bounded as a whole by ``budget_s``; the parsed reply, or a ``_Failure``."""
        import aiohttp

        parse = parse or _parse_reply
        if budget_s <= 0:
            raise _Failure("timeout", "no time left before the call deadline")
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=min(target.connect_timeout_s, budget_s)
        )
        try:
            async with (
                _timeout_after(budget_s),
                session.post(
                    target.url,
                    data=payload,
                    headers=target.headers,
                    timeout=timeout,
                    proxy=target.proxy,
                ) as response,
            ):
                status = response.status
                headers = response.headers
                body = await self._read_body(response)
        except aiohttp.ServerTimeoutError as exc:  # the connect phase (sock_connect)
            raise _Failure("ConnectTimeout", str(exc) or "connect timed out") from None
        except TimeoutError:
            raise _Failure(
                "ReadTimeout",
                f"no complete reply in time (an attempt, headers and body included, may take "
                f"{budget_s:g} s)",
            ) from None
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError, ValueError) as exc:
            raise ConfigError(f"invalid base_url for {target.url!r}: {exc}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise _Failure("ConnectError", str(exc) or "cannot connect") from None
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientResponseError,  # a reply that is not valid HTTP
        ) as exc:
            raise _Failure(type(exc).__name__, str(exc) or "no detail") from None
        except aiohttp.ClientError as exc:  # local protocol or proxy errors: retrying will not help
            raise _Failure(type(exc).__name__, str(exc), retryable=False) from None

        if status != 200:
            retryable = status == _TOO_MANY_REQUESTS or status >= _RETRY_STATUS_MIN
            if 200 < status < 300:  # an odd success code: accept it if the body is a completion
                return parse(body, status)
            raise _Failure(
                f"HTTP {status}",
                _excerpt(body),
                status=status,
                retryable=retryable,
                retry_after=parse_retry_after(headers) if retryable else None,
            )
        return parse(body, status)

    async def _read_body(self, response: Any) -> bytes:
        """The whole body, or a ``_Failure`` once it passes ``max_response_bytes`` (the
        connection is then dropped, not drained)."""
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and (len(declared) > 18 or int(declared) > cap):
            response.close()
            raise _Failure(
                "response too large",
                f"Content-Length {_excerpt(declared, 40)} is over max_response_bytes={cap}",
                status=response.status,
                retryable=False,
            )
        headers = response.headers
        if (
            declared.isdigit()
            and headers.get("content-encoding", "identity") == "identity"
            and "transfer-encoding" not in headers
        ):
            # a plain body framed by its Content-Length (checked above): aiohttp reads no
            # more than that, so it is read whole at once (a tenth of the per-chunk loop)
            body: bytes = await response.read()
            if len(body) > cap:  # cannot happen with Content-Length framing: refused anyway
                raise _Failure(
                    "response too large",
                    f"the body passed max_response_bytes={cap} ({len(body)} bytes)",
                    status=response.status,
                    retryable=False,
                )
            return body
        chunks, size = [], 0
        async for chunk in response.content.iter_chunked(_READ_CHUNK):
            size += len(chunk)
            if size > cap:
                response.close()
                raise _Failure(
                    "response too large",
                    f"the body passed max_response_bytes={cap} (read {size} bytes so far)",
                    status=response.status,
                    retryable=False,
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _next_wait(self, failure: _Failure, attempts: int) -> float:
        """Seconds to wait before the next attempt: Retry-After, else full jitter."""
        if failure.retry_after is not None:
            return min(failure.retry_after, self.backoff_max_s)
        cap = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempts - 1))
        with self._lock:
            return self._rng.uniform(0.0, cap)

    def _give_up(
        self, spec: AgentSpec, target: _Target, failure: _Failure, attempts: int
    ) -> OpenAIRequestError:
        plural = "attempt" if attempts == 1 else "attempts"
        why = "" if failure.retryable else ", not retried"
        hint = ""
        if failure.status in (401, 403):
            hint = " Check the API key (api_key / api_key_env, or backend_kwargs of the agent)."
        elif failure.status == 404:
            hint = " Check base_url (it should end in /v1) and the model name."
        message = (
            f"agent {spec.name!r} (model {target.model!r}): POST {target.url} failed after "
            f"{attempts} {plural} ({failure.reason}{why}): {failure.detail or '(empty body)'}"
            f"{hint}"
        )
        logger.warning("%s", message)
        return OpenAIRequestError(
            message, agent=spec.name, url=target.url, status=failure.status, attempts=attempts
        )

    def _completion(
        self,
        spec: AgentSpec,
        messages: list[Message],
        data: dict[str, Any],
        attempts: int,
        latency_s: float,
        attempt_latency_s: float,
    ) -> Completion:
        choice = data["choices"][0]
        text: str = choice["message"]["content"]
        usage = data.get("usage") or {}  # checked by _parse_reply
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        extra: dict[str, Any] = {}
        if prompt_tokens is not None and completion_tokens is not None:
            source = "server"
            if self.tokenizer is not None:
                extra["metering"] = self._verify(messages, text, prompt_tokens, completion_tokens)
        elif self.tokenizer is not None:
            prompt_tokens = self._tokenizer_prompt_tokens(messages)
            completion_tokens = self._tokenizer_count(text)
            source = "tokenizer"
        else:
            prompt_tokens = estimate_prompt_tokens(messages)
            completion_tokens = estimate_tokens(text)
            source = "estimate"
        return spec.completion(
            text,
            prompt_tokens,
            completion_tokens,
            latency_s=latency_s,
            token_source=source,
            meta={
                "finish_reason": _meta_text(choice.get("finish_reason")),
                "attempts": attempts,
                "model": _meta_text(data.get("model")),
                "id": _meta_text(data.get("id")),
                "attempt_latency_s": attempt_latency_s,
                **extra,
                **self._logprobs_with_ids(choice, text),
            },
        )

    def _logprobs_with_ids(self, choice: Mapping[str, Any], text: str) -> dict[str, Any]:
        """The choice's log-probabilities; where the server sent token texts without ids
        (llama.cpp), the ids are looked up in the agent's own tokenizer (``token_ids``)."""
        found = _logprobs(choice)
        if not found:
            return found
        index = None
        if self.tokenizer is not None and not callable(self.tokenizer):
            tokenizer = self._load_tokenizer()
            with self._lock:
                if self._piece_index is None:
                    self._piece_index = PieceIndex(tokenizer)
                index = self._piece_index
        return {"logprobs": fill_token_ids(found["logprobs"], index, text)}

    def _verify(
        self, messages: list[Message], text: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        """The server's counts next to the agent's own tokenizer's (verified metering)."""
        mine = (self._tokenizer_prompt_tokens(messages), self._tokenizer_count(text))
        theirs = (prompt_tokens, completion_tokens)
        disagree = any(
            abs(a - b) > max(2, self.metering_tolerance * max(a, b))
            for a, b in zip(theirs, mine, strict=True)
        )
        if disagree:
            logger.warning(
                "token counts disagree: server %s, tokenizer %s (prompt, completion)", theirs, mine
            )
        return {"server": list(theirs), "tokenizer": list(mine), "disagree": disagree}

    # -- token counting without usage -------------------------------------------------
    def _load_tokenizer(self) -> Any:
        """The Hugging Face tokenizer named by ``tokenizer``, loaded once from local files."""
        with self._lock:
            if self._hf_tokenizer is None:
                transformers = require(
                    "transformers", "train", f"counting tokens with tokenizer {self.tokenizer!r}"
                )
                try:
                    self._hf_tokenizer = load_tokenizer(transformers, str(self.tokenizer))
                except (OSError, ValueError) as exc:
                    raise ConfigError(
                        f"cannot load tokenizer {self.tokenizer!r} from local files: "
                        f"{str(exc).rstrip('.')}. "
                        "Download it first (huggingface-cli download NAME) or pass a local path "
                        "or a callable text -> token count."
                    ) from exc
            return self._hf_tokenizer

    def _tokenizer_count(self, text: str) -> int:
        if callable(self.tokenizer):
            return int(self.tokenizer(text))
        return len(self._load_tokenizer().encode(text, add_special_tokens=False))

    def _tokenizer_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens: the chat template when the tokenizer has one, else texts plus framing."""
        if not callable(self.tokenizer):
            tok = self._load_tokenizer()
            if getattr(tok, "chat_template", None):
                try:
                    ids = tok.apply_chat_template(
                        messages, tokenize=True, add_generation_prompt=True
                    )
                except Exception as exc:  # e.g. a template that rejects system messages
                    logger.debug("chat template failed (%s); counting messages one by one", exc)
                else:
                    if isinstance(ids, Mapping):  # newer versions return a BatchEncoding
                        ids = ids["input_ids"]
                    return len(ids)
        return sum(
            self._tokenizer_count(m.get("content", "")) + _MESSAGE_OVERHEAD_TOKENS for m in messages
        )


def _close_session(session: Any) -> None:
    """Close an aiohttp session on the loop it lives on (from any thread, or in a bridge)."""
    if session is None or session.closed or getattr(session, "_orchenv_pid", None) != os.getpid():
        return
    loop = session._orchenv_loop
    if loop.is_closed() or not loop.is_running():
        return
    if in_bridge():
        await_only(session.close())
    elif on_loop_thread():  # outside a bridge: close it soon instead
        loop.create_task(session.close())
    else:
        with contextlib.suppress(Exception):  # at exit, a stuck loop must not hang Python
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=5)


@functools.lru_cache(maxsize=256)
def _proxy_for(url: str) -> str | None:
    """The proxy the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``) sets for ``url``, as other HTTP clients honour them; None for none.
    Read once per URL (``_proxy_for.cache_clear()`` after changing the variables)."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxies = getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or (parts.hostname and proxy_bypass(parts.hostname)):
        return None
    return proxy


def load_tokenizer(transformers: Any, name: str) -> Any:
    """A Hugging Face tokenizer from local files: a name or directory, or a ``.gguf`` file
    (transformers reads the tokenizer embedded in it; needs the ``gguf`` package)."""
    if name.lower().endswith(".gguf"):
        require("gguf", "train", f"reading the tokenizer of {name!r}")
        folder, file = os.path.split(os.path.abspath(name))
        return transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)
    return transformers.AutoTokenizer.from_pretrained(name, local_files_only=True)


def _logprobs(choice: Mapping[str, Any]) -> dict[str, Any]:
    """``{"logprobs": {"tokens", "logprobs", "token_ids"}}`` from a choice's OpenAI-style
    ``logprobs.content`` (or ``{}``). Ids come from a ``token_id`` field or from tokens
    written ``"token_id:123"`` (vLLM's ``return_tokens_as_token_ids``); missing ids are
    None. Bounded: at most ``MAX_LOGPROB_TOKENS`` entries are read."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, Mapping) else None
    if not isinstance(content, list) or not content:
        return {}
    tokens: list[str] = []
    logprobs: list[float] = []
    ids: list[int | None] = []
    for entry in content[:MAX_LOGPROB_TOKENS]:
        if not isinstance(entry, Mapping):
            return {}
        token, value = entry.get("token"), entry.get("logprob")
        if not isinstance(token, str) or isinstance(value, bool):
            return {}
        if not isinstance(value, (int, float)) or not math.isfinite(value) and value != -math.inf:
            return {}
        token_id = entry.get("token_id", entry.get("id"))
        if not (isinstance(token_id, int) and not isinstance(token_id, bool)):
            token_id = None
            if token.startswith("token_id:") and token[9:].isdigit() and len(token) < 30:
                token_id = int(token[9:])
        tokens.append(token[:_META_TEXT_CHARS])
        logprobs.append(float(value))
        ids.append(token_id)
    return {"logprobs": {"tokens": tokens, "logprobs": logprobs, "token_ids": ids}}


def _check_params(params: Mapping[str, Any], label: str) -> None:
    for key in ("model", "messages"):
        if key in params:
            raise ConfigError(
                f"{label} must not set {key!r}: the backend fills it in "
                "(set the model with the agent's backend_kwargs['model'] or spec.model)"
            )
    if params.get("stream"):
        raise ConfigError(f"{label}: stream=True is not supported (replies are read whole)")


def _meta_text(value: Any) -> str | None:
    """A reply's ``model`` / ``id`` / ``finish_reason`` when it is a short string, else None."""
    return value if isinstance(value, str) and len(value) <= _META_TEXT_CHARS else None


class _OverLimits(Exception):
    """A reply's JSON may break a ``parse_json`` limit: let ``parse_json`` itself say which."""


def _checked_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _OverLimits
    return int(literal)


def _checked_float(literal: str) -> float:
    value = float(literal) if len(literal) <= MAX_FLOAT_CHARS else math.inf
    if not math.isfinite(value):
        raise _OverLimits
    return value


def _refuse_constant(literal: str) -> float:
    raise _OverLimits  # NaN, Infinity, -Infinity


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _OverLimits
    return out


_CHECKED_DECODER = json.JSONDecoder(
    parse_int=_checked_int,
    parse_float=_checked_float,
    parse_constant=_refuse_constant,
    object_pairs_hook=_refuse_duplicate_keys,
)


def _load_reply(body: bytes, status: int) -> Any:
    """The reply's JSON as ``orchenv.schema.parse_json`` reads it (bounded numbers and
    nesting, finite numbers, no key twice), or a ``_Failure``: final past the limits,
    retryable when it is not JSON.

    A reply with at most ``MAX_DEPTH`` brackets in its bytes cannot nest deeper, so it is
    read by ``json.loads`` with hooks that check each number, constant and object as it
    is read (no second pass over the value): the same value in 40% of the time (the
    second pass took half of the 22 us a reply cost, a tenth of the client's CPU at 256
    envs). Anything a hook refuses, and any other reply, goes through ``parse_json``
    itself, which names the field."""
    where = f"HTTP {status} reply"
    try:
        if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
            try:
                # json.loads(body, **hooks), less building a decoder per reply
                return _CHECKED_DECODER.decode(
                    body.decode(json.detect_encoding(body), "surrogatepass")
                )
            except _OverLimits:
                pass
        return parse_json(body, where)
    except JSONLimitError as exc:
        raise _Failure("malformed response", str(exc), status=status, retryable=False) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Failure(
            "malformed response", f"HTTP {status}, not JSON: {_excerpt(body)}", status=status
        ) from None


def _parse_choice_reply(body: bytes, status: int) -> dict[str, Any]:
    """A ``/completions`` reply with a ``choices`` list (choice-mode scoring), or a failure."""
    data = _load_reply(body, status)
    if not (isinstance(data, dict) and isinstance(data.get("choices"), list)):
        raise _Failure("malformed response", f"HTTP {status}, no choices list: {_excerpt(body)}")
    if not all(isinstance(c, dict) for c in data["choices"]):
        raise _Failure("malformed response", f"HTTP {status}, a choice is not an object")
    return data


def _parse_reply(body: bytes, status: int) -> dict[str, Any]:
    """The reply as a dict with a text ``choices[0].message.content`` and a checked ``usage``
    (None or an object), or a failure: retryable when the body is not JSON or has no text,
    final when it is beyond the parser's limits or its ``usage`` is not token counts."""
    data = _load_reply(body, status)
    if isinstance(data, dict) and data.get("usage") is not None:
        try:
            data["usage"] = USAGE.validate(data["usage"], f"HTTP {status} reply")
        except SchemaError as exc:
            raise _Failure(
                "malformed usage",
                f"{exc}; the server's token counts cannot be trusted",
                status=status,
                retryable=False,
            ) from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        raise _Failure(
            "malformed response",
            f"HTTP {status}, no choices[0].message.content text: {_excerpt(body)}",
            status=status,
        )
    return data
