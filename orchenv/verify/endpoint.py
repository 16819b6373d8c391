"""The recording proxy of an OpenAI-compatible endpoint, for sandboxed re-execution
(``orchenv verify BUNDLE --rerun --board ...``, docs/board-referee.md).

A submission may name an endpoint instead of (or besides) shipping all of its logic:
``entry_point.json`` holds ``{"endpoint": {"base_url": "https://host/v1", "model": "m"}}``.
The sandboxed controller (no network) reaches that endpoint only through this proxy, run by
the verifier on a Unix socket bound into the sandbox; the player forwards the sandbox's own
loopback to it, so the controller's OpenAI client uses ``OPENAI_BASE_URL`` as usual. The
proxy:

* serves ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models``
  only (anything else: 404), JSON request bodies of at most ``MAX_REQUEST_BYTES``;
* refuses a request that names another model than the submission's (403): the calls go to
  the declared model, or nowhere;
* connects only to public addresses (``allow_private``: also loopback, private and
  link-local ones, for an endpoint the maintainer runs on their own network): a submission
  cannot point the verifier's proxy at the maintainer's internal services;
* forwards to ``base_url`` (adding the verifier's API key, which never enters the sandbox),
  reads at most ``MAX_RESPONSE_BYTES`` of the answer, and records every request and its
  response (or the error) as one JSON line, before the sandbox sees the answer;
* stops at ``max_calls`` (429) and once the referee has signed the record (409).

The calls file is written into the signed record (``endpoint_calls.jsonl``, bound by
``sealed.json``'s digests). What it proves: which requests the controller made and what the
endpoint answered, in order. What it does not: which model served them (the endpoint is the
submitter's or a third party's; "model not verified").
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from orchenv.error import ConfigError, DataError

logger = logging.getLogger(__name__)

#: the calls file in the signed record
CALLS_FILE = "endpoint_calls.jsonl"
#: what the proxy serves: (method, path below /v1)
ROUTES = (("POST", "/chat/completions"), ("POST", "/completions"), ("GET", "/models"))
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: the largest recording (then every call is refused, 507)
MAX_RECORD_BYTES = 512 * 1024 * 1024
#: calls one re-execution may make (default)
DEFAULT_MAX_CALLS = 20_000
#: sampling parameters a built-in endpoint controller may set
PARAMS = ("temperature", "top_p", "max_tokens", "stop", "seed")


def check_endpoint(data: Any, where: str) -> dict[str, Any]:
    """A submission's ``endpoint`` object, checked: ``base_url`` (http or https, a host),
    ``model`` (a non-empty string), optional ``system`` (a string) and ``params`` (numbers,
    strings or lists of strings, among ``PARAMS``). ``DataError`` naming the fix."""
    if not isinstance(data, Mapping):
        raise DataError(f"{where}: endpoint must be an object with base_url and model")
    unknown = sorted(set(data) - {"base_url", "model", "system", "params"})
    if unknown:
        raise DataError(f"{where}: endpoint takes base_url, model, system, params; not {unknown}")
    base, model = data.get("base_url"), data.get("model")
    if not isinstance(base, str) or len(base) > 2000:
        raise DataError(f"{where}: endpoint.base_url must be a URL string")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise DataError(
            f"{where}: endpoint.base_url must be http(s)://host[:port]/path without a query, "
            f"got {base[:80]!r}"
        )
    if not isinstance(model, str) or not 0 < len(model) <= 200:
        raise DataError(f"{where}: endpoint.model must be a model name (1 to 200 characters)")
    system = data.get("system")
    if system is not None and (not isinstance(system, str) or len(system) > 100_000):
        raise DataError(f"{where}: endpoint.system must be a string (at most 100,000 characters)")
    params = data.get("params", {})
    if not isinstance(params, Mapping) or not set(params) <= set(PARAMS):
        raise DataError(f"{where}: endpoint.params takes {list(PARAMS)}")
    for k, v in params.items():
        ok = isinstance(v, (int, float, str)) and not isinstance(v, bool)
        ok = ok or (isinstance(v, list) and all(isinstance(s, str) for s in v) and len(v) <= 8)
        if not ok or (isinstance(v, str) and len(v) > 200):
            raise DataError(f"{where}: endpoint.params[{k!r}] must be a number or a short string")
    out = {"base_url": base.rstrip("/"), "model": model, "params": dict(params)}
    if system is not None:
        out["system"] = system
    return out


def note(endpoint: Mapping[str, Any]) -> str:
    """The row's words for a re-execution against ``endpoint``."""
    return (
        f"re-executed against endpoint {endpoint['base_url']} model {endpoint['model']} "
        "(calls recorded, model not verified)"
    )


def _public_connector(allow_private: bool) -> Any:
    """An aiohttp connector that connects only to global addresses (unless
    ``allow_private``), whatever a name resolves to, checked on each connection."""
    import ipaddress

    import aiohttp

    class PublicOnly(aiohttp.TCPConnector):
        async def _resolve_host(self, host: str, port: int, traces: Any = None) -> Any:
            results = await super()._resolve_host(host, port, traces)
            if allow_private:
                return results
            for r in results:
                address = ipaddress.ip_address(str(r["host"]).split("%")[0])
                if not address.is_global:
                    raise OSError(
                        f"{host} resolves to {address}, not a public address: the recording "
                        "proxy connects to public endpoints only (the maintainer may allow "
                        "private ones: --endpoint-allow-private)"
                    )
            return results

    return PublicOnly()


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace")


class RecordingProxy:
    """The proxy (module docstring) on the Unix socket ``uds``, in a thread of this process
    with its own event loop; ``calls_path`` is its recording (in a folder the sandbox does
    not mount). ``api_key``: sent upstream as ``Authorization: Bearer``."""

    def __init__(
        self,
        endpoint: Mapping[str, Any],
        uds: str,
        calls_path: Path,
        *,
        api_key: str | None = None,
        max_calls: int = DEFAULT_MAX_CALLS,
        timeout_s: float = 300.0,
        allow_private: bool = False,
    ) -> None:
        self.endpoint = dict(endpoint)
        self.allow_private = allow_private
        self.uds = uds
        self.calls_path = calls_path
        self.api_key = api_key
        self.max_calls = max_calls
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.calls = 0
        self.recorded_bytes = 0
        self.closed = False
        self._file = open(calls_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="endpoint-proxy")
        self._runner: Any = None
        self._session: Any = None

    # -- the server thread ------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # noqa: BLE001 - reported by __enter__
            self._failed = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        import aiohttp
        from aiohttp import web

        self._session = aiohttp.ClientSession(
            connector=_public_connector(self.allow_private),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            auto_decompress=True,
            trust_env=False,
        )
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.uds).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        if not self._ready.wait(60) or self._failed is not None:
            raise ConfigError(
                f"the endpoint's recording proxy did not start on {self.uds}: {self._failed}"
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving (calls in flight end) and close the recording."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        with self.lock:
            self.closed = True
            if not self._file.closed:
                self._file.close()

    # -- the record ---------------------------------------------------------------------------
    def _record(self, row: dict[str, Any]) -> bool:
        """Append ``row`` (False when the recording is closed: the call is refused). A
        request or response JSON cannot hold (NaN, nesting past the recursion limit) is
        recorded as its text."""
        try:
            line = json.dumps(row, ensure_ascii=True, allow_nan=False)
        except (ValueError, RecursionError):
            for k in ("request", "response"):
                if k in row and not isinstance(row[k], str):
                    try:
                        row[k] = json.dumps(row[k], ensure_ascii=True)
                    except (ValueError, RecursionError):
                        row[k] = repr(row[k])[:MAX_RESPONSE_BYTES]
            line = json.dumps(row, ensure_ascii=True, allow_nan=False)
        with self.lock:
            if self.closed:
                return False
            self._file.write(line + "\n")
            self._file.flush()
            self.recorded_bytes += len(line) + 1
            return True

    def seal_into(self, folder: Path) -> list[str]:
        """Close the recording (later calls: 409) and copy it into ``folder``; the names of
        the files written (the referee signs them with the record)."""
        with self.lock:
            self.closed = True
            if not self._file.closed:
                self._file.close()
        shutil.copyfile(self.calls_path, folder / CALLS_FILE)
        return [CALLS_FILE]

    # -- one call -----------------------------------------------------------------------------
    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        def refuse(status: int, message: str) -> Any:
            return web.json_response({"error": {"message": message, "code": status}}, status=status)

        path = request.path
        route = path[3:] if path.startswith("/v1/") else None
        if route is None or (request.method, route) not in ROUTES:
            return refuse(404, f"the recording proxy serves {[f'{m} /v1{p}' for m, p in ROUTES]}")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return refuse(413, f"a request body is at most {MAX_REQUEST_BYTES} bytes")
        body: Any = None
        if request.method == "POST":
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                return refuse(400, "a request body is a JSON object")
            if not isinstance(body, dict):
                return refuse(400, "a request body is a JSON object")
            if body.get("model") != self.endpoint["model"]:
                return refuse(
                    403,
                    f"this re-execution calls model {self.endpoint['model']!r} only, not "
                    f"{str(body.get('model'))[:80]!r}",
                )
            if body.get("stream"):
                return refuse(400, "streamed responses are not recorded: send stream=false")
        with self.lock:
            if self.closed:
                return refuse(409, "the record is signed: no more calls are recorded")
            if self.calls >= self.max_calls:
                return refuse(429, f"this re-execution may make {self.max_calls} calls")
            if self.recorded_bytes >= MAX_RECORD_BYTES:
                return refuse(507, f"the recording reached {MAX_RECORD_BYTES} bytes")
            self.calls += 1
            n = self.calls
        row: dict[str, Any] = {"n": n, "time": time.time(), "method": request.method, "path": route}
        if body is not None:
            row["request"] = body
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        started = time.monotonic()
        try:
            async with self._session.request(
                request.method,
                self.endpoint["base_url"] + route,
                data=raw if body is not None else None,
                headers=headers,
                allow_redirects=False,
            ) as upstream:
                answer = await upstream.content.read(MAX_RESPONSE_BYTES + 1)
                status = upstream.status
                ctype = upstream.headers.get("Content-Type", "application/json")
        except Exception as exc:  # noqa: BLE001 - recorded, answered 502
            cause = getattr(exc, "os_error", None) or exc.__cause__
            row.update(
                error=(f"{type(exc).__name__}: {exc}" + (f" ({cause})" if cause else ""))[:2000],
                seconds=time.monotonic() - started,
            )
            if not self._record(row):
                return refuse(409, "the record is signed: no more calls are recorded")
            return refuse(502, f"the endpoint could not be reached: {row['error'][:300]}")
        row["seconds"] = round(time.monotonic() - started, 6)
        if len(answer) > MAX_RESPONSE_BYTES:
            row.update(status=status, error=f"response over {MAX_RESPONSE_BYTES} bytes")
            self._record(row)
            return refuse(502, row["error"])
        row.update(status=status, response=_json_or_text(answer))
        if not self._record(row):
            return refuse(409, "the record is signed: no more calls are recorded")
        return web.Response(body=answer, status=status, content_type=ctype.split(";")[0].strip())


def read_calls(path: str | Path) -> list[dict[str, Any]]:
    """The recorded calls of a re-execution (``DataError`` for a line that is not a JSON
    object)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}:{i} is not JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise DataError(f"{path}:{i} is not a JSON object")
            rows.append(row)
    return rows


__all__ = [
    "CALLS_FILE",
    "DEFAULT_MAX_CALLS",
    "RecordingProxy",
    "check_endpoint",
    "note",
    "read_calls",
]
