"""Live agents behind any OpenAI-compatible chat-completions server.

Why: the same controller code should run against simulated agents and against
real models served by vLLM, SGLang, llama.cpp's server or a hosted API. All of
them speak ``POST {base_url}/chat/completions``, so one small, dependency-light
client covers them.

Design:

* one thread-safe ``httpx.Client`` (connection pooling, keep-alive) shared by
  every agent and thread; ``AgentPool`` runs calls in threads and limits them
  to ``max_concurrency`` at once;
* transient faults are retried with exponential backoff and full jitter
  (a uniform wait in ``[0, min(backoff_max_s, backoff_base_s * 2**k)]`` before
  retry ``k + 1``): timeouts, connection errors, dropped connections, HTTP 429
  (its ``Retry-After`` is honoured, capped at ``backoff_max_s``), HTTP 5xx and
  200 replies that are not a usable chat completion. Other 4xx fail at once;
* every call has a deadline of ``(max_retries + 1) * timeout_s`` plus the sum
  of the backoff caps (``deadline_s``): attempts and waits are cut short to fit
  it, so a stalled server can never hang a caller. Each attempt (connect,
  TLS, send the request, receive the status line and headers, read the whole
  body) is bounded by ``timeout_s`` as a whole; the connect phase also by
  ``connect_timeout_s``. httpx bounds each socket operation alone, so a
  server dripping one header byte a second would never trip it: here every
  socket operation gets only the time left before the attempt's deadline
  (``_DeadlineBackend``, wrapped around the client's network backend);
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

The deadline hook reaches into httpx's transport (``_pool``) and httpcore's
pool (``_network_backend``), both private; ``test_header_drip_cannot_outlast_the_deadline``
(``tests/security/test_inputs.py``) fails if a new httpx moves them.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from orchenv.backends.common import RebuiltOnCopy
from orchenv.backends.simulated import (
    _MESSAGE_OVERHEAD_TOKENS,
    estimate_prompt_tokens,
    estimate_tokens,
)
from orchenv.error import BackendError, ConfigError, SchemaError, require
from orchenv.pool import AgentSpec, CallContext, Completion, Message
from orchenv.schema import USAGE, JSONLimitError, parse_json

logger = logging.getLogger(__name__)

#: keys an agent's ``spec.backend_kwargs`` may set for this backend
AGENT_KEYS = frozenset({"base_url", "model", "api_key", "api_key_env", "params", "headers"})

#: longest excerpt of a response body quoted in an error message
BODY_EXCERPT_CHARS = 300
#: default cap on a response body (bytes, after content decoding)
MAX_RESPONSE_BYTES = 16 * 2**20
#: longest ``model`` / ``id`` / ``finish_reason`` string kept in ``Completion.meta``
_META_TEXT_CHARS = 1000

_RETRY_STATUS_MIN = 500  # 5xx: server faults, retried
_TOO_MANY_REQUESTS = 429


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


# -- the whole-attempt deadline --------------------------------------------------------------
_attempt_deadline = threading.local()  # .at: time.monotonic() when this thread's attempt ends


def _time_left(timeout: float | None, timeout_error: type[Exception]) -> float | None:
    """``timeout`` cut to the time left before this thread's attempt deadline (if any)."""
    deadline = getattr(_attempt_deadline, "at", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise timeout_error("the attempt's deadline (timeout_s) passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by the attempt deadline."""

    _WRITE_CHUNK = 64 * 1024

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), self._WRITE_CHUNK):
            piece = buffer[start : start + self._WRITE_CHUNK]
            self._inner.write(piece, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """Opens ``_DeadlineStream`` connections (over the network backend it wraps)."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, left, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound_by_deadline(client: httpx.Client) -> None:
    """Route every connection of ``client`` (direct and through proxies) through
    ``_DeadlineBackend``; see the module docstring for the private attributes used."""
    wrapped = 0
    for transport in [client._transport, *client._mounts.values()]:
        pool = getattr(transport, "_pool", None)
        inner = getattr(pool, "_network_backend", None)
        if isinstance(inner, httpcore.NetworkBackend) and not isinstance(inner, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(inner)  # type: ignore[union-attr]
            wrapped += 1
    if not wrapped:
        logger.warning(
            "httpx %s: cannot bound whole requests by timeout_s (its transport changed); "
            "only each socket operation is bounded",
            httpx.__version__,
        )


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
        tokenizer: how to count tokens when a reply has no ``usage``: a callable
            ``text -> int`` or a Hugging Face tokenizer name / path (loaded
            lazily from the local cache only; needs ``orchenv[train]``).
            Without one, the character estimate is used.
        rng_seed: seed of the backoff jitter (reproducible waits in tests).
        max_response_bytes: the largest reply body read (after content decoding);
            a larger one fails the call at once.

    Per agent, ``spec.backend_kwargs`` may set ``base_url``, ``model`` (default
    ``spec.model``), ``api_key``, ``api_key_env``, ``params`` and ``headers``.

    ``Completion.latency_s`` is the wall time of the whole call: every attempt
    and every backoff wait until the successful reply was read (what the caller
    waited). ``meta["attempt_latency_s"]`` is the successful attempt alone.
    Construction does no I/O; the HTTP client is created on first use and
    ``close()`` releases it (a later call opens a new one).
    """

    # clients and loaded tokenizers do not pickle; they are rebuilt on use
    _fresh_on_copy = {"_client": None, "_hf_tokenizer": None}

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
        self._lock = threading.Lock()  # guards the client, the tokenizer and the rng
        self._client: Any = None
        self._hf_tokenizer: Any = None

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
        """Close the HTTP client and its pooled connections."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                # AgentPool bounds concurrency; keep that many connections alive for reuse
                limits = httpx.Limits(
                    max_connections=None, max_keepalive_connections=self.max_concurrency
                )
                self._client = httpx.Client(limits=limits, timeout=self.timeout_s)
                _bound_by_deadline(self._client)
            return self._client

    @property
    def deadline_s(self) -> float:
        """Upper bound on one call's wall time: every attempt's timeout plus every backoff cap."""
        waits = sum(
            min(self.backoff_max_s, self.backoff_base_s * 2.0**k) for k in range(self.max_retries)
        )
        return (self.max_retries + 1) * self.timeout_s + waits

    # -- the Backend protocol -------------------------------------------------------
    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """POST the messages to the agent's endpoint, retrying transient faults; meter the reply."""
        target = self._target(spec)
        message_list = [dict(m) for m in messages]
        payload = json.dumps(
            {**target.params, "model": target.model, "messages": message_list}
        ).encode("utf-8")
        start = time.monotonic()
        deadline = start + self.deadline_s
        attempts = 0
        while True:
            attempts += 1
            attempt_start = time.monotonic()
            try:
                data = self._attempt(target, payload, min(self.timeout_s, deadline - attempt_start))
            except _Failure as failure:
                if not failure.retryable or attempts > self.max_retries:
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
                    self.max_retries + 1,
                    wait,
                )
                time.sleep(wait)
                continue
            end = time.monotonic()
            return self._completion(
                spec, message_list, data, attempts, end - start, end - attempt_start
            )

    # -- internals ------------------------------------------------------------------
    def _target(self, spec: AgentSpec) -> _Target:
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
        return _Target(
            url=str(base_url).rstrip("/") + "/chat/completions",
            model=str(kwargs.get("model") or spec.model),
            headers=headers,
            params=params,
        )

    def _attempt(self, target: _Target, payload: bytes, budget_s: float) -> dict[str, Any]:
        """One request, bounded by ``budget_s``; the parsed reply, or a ``_Failure``."""
        if budget_s <= 0:
            raise _Failure("timeout", "no time left before the call deadline")
        client = self._http()
        timeout = httpx.Timeout(budget_s, connect=min(self.connect_timeout_s, budget_s))
        attempt_deadline = time.monotonic() + budget_s
        try:
            request = client.build_request(
                "POST", target.url, content=payload, headers=target.headers, timeout=timeout
            )
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise ConfigError(f"invalid base_url for {target.url!r}: {exc}") from exc
        _attempt_deadline.at = attempt_deadline
        try:
            response = client.send(request, stream=True)
            try:
                body = self._read_body(response)
            finally:
                response.close()
        except (
            httpx.TimeoutException,
            httpx.NetworkError,
            httpx.RemoteProtocolError,
            httpx.DecodingError,
        ) as exc:
            detail = str(exc) or "no detail"
            if isinstance(exc, httpx.TimeoutException):
                detail += f" (an attempt, headers and body included, may take {budget_s:g} s)"
            raise _Failure(type(exc).__name__, detail) from None
        except httpx.UnsupportedProtocol as exc:
            raise ConfigError(f"invalid base_url for {target.url!r}: {exc}") from exc
        except httpx.HTTPError as exc:  # local protocol or proxy errors: retrying will not help
            raise _Failure(type(exc).__name__, str(exc), retryable=False) from None
        finally:
            _attempt_deadline.at = None

        status = response.status_code
        if status != 200:
            retryable = status == _TOO_MANY_REQUESTS or status >= _RETRY_STATUS_MIN
            if 200 < status < 300:  # an odd success code: accept it if the body is a completion
                return _parse_reply(body, status)
            raise _Failure(
                f"HTTP {status}",
                _excerpt(body),
                status=status,
                retryable=retryable,
                retry_after=parse_retry_after(response.headers) if retryable else None,
            )
        return _parse_reply(body, status)

    def _read_body(self, response: httpx.Response) -> bytes:
        """The whole body, or a ``_Failure`` once it passes ``max_response_bytes``."""
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and (len(declared) > 18 or int(declared) > cap):
            raise _Failure(
                "response too large",
                f"Content-Length {_excerpt(declared, 40)} is over max_response_bytes={cap}",
                status=response.status_code,
                retryable=False,
            )
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise _Failure(
                    "response too large",
                    f"the body passed max_response_bytes={cap} (read {size} bytes so far)",
                    status=response.status_code,
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
        if prompt_tokens is not None and completion_tokens is not None:
            source = "server"
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
            },
        )

    # -- token counting without usage -------------------------------------------------
    def _load_tokenizer(self) -> Any:
        """The Hugging Face tokenizer named by ``tokenizer``, loaded once from local files."""
        with self._lock:
            if self._hf_tokenizer is None:
                transformers = require(
                    "transformers", "train", f"counting tokens with tokenizer {self.tokenizer!r}"
                )
                try:
                    self._hf_tokenizer = transformers.AutoTokenizer.from_pretrained(
                        self.tokenizer, local_files_only=True
                    )
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


def _parse_reply(body: bytes, status: int) -> dict[str, Any]:
    """The reply as a dict with a text ``choices[0].message.content`` and a checked ``usage``
    (None or an object), or a failure: retryable when the body is not JSON or has no text,
    final when it is beyond the parser's limits or its ``usage`` is not token counts."""
    try:
        data = parse_json(body, f"HTTP {status} reply")
    except JSONLimitError as exc:
        raise _Failure("malformed response", str(exc), status=status, retryable=False) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Failure(
            "malformed response", f"HTTP {status}, not JSON: {_excerpt(body)}", status=status
        ) from None
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
