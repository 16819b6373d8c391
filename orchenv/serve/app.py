"""The FastAPI app of ``orchenv serve``: OpenEnv's own ``create_app`` around
``OrchServeEnvironment``, and the uvicorn launch (one or several worker processes).

Everything on the wire is OpenEnv 0.10's protocol (``/ws`` sessions, ``/reset``,
``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``, the task API);
orchenv adds no endpoint. With ``--workers N`` uvicorn runs N processes on one socket; a
WebSocket session is one connection, so it stays on the worker that accepted it
(sessions are pinned). ``--max-sessions`` is each worker's ``max_concurrent_envs``: the
kernel does not spread connections evenly over the workers, so a split cap
(``max / N`` each) refuses sessions while others sit idle; with N workers the server
holds up to N x ``--max-sessions`` sessions. Workers share the fork table through a
private folder, so a fork handle minted on one worker restores on another.

Every way in builds its env inside the cap: ``/ws`` sessions count against
``--max-sessions``; the stateless ``POST /reset`` (which would build an env per request)
answers 409 naming ``/ws``; the task API reads one task source per worker; HTTP MCP
sessions (``openenv/session/create``, which hold a slot until reaped) are refused unless
``--mcp``. A client that vanishes mid-message is one log line, not a traceback.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchenv.error import ConfigError, OrchEnvError
from orchenv.serve.environment import (
    InlineOrchServeEnvironment,
    OrchAction,
    OrchObservation,
    OrchServeEnvironment,
    OrchState,
    Runtime,
    ServeConfig,
)

logger = logging.getLogger(__name__)

#: the env variable that carries the config to uvicorn's worker processes
CONFIG_ENV = "ORCHENV_SERVE_CONFIG"
#: WebSocket frames larger than this are refused by uvicorn (close code 1009)
WS_MAX_BYTES = 16 * 1024 * 1024
#: seconds a worker may take to answer uvicorn's health ping before it is restarted
WORKER_HEALTHCHECK_S = 60


def openenv_name(env_id: str) -> str:
    """The name OpenEnv's task routes use (``/{name}/splits``): the id without ``orch/``."""
    return env_id.split("/", 1)[-1]


def _referee(config: ServeConfig) -> Any:
    """The board's referee for ``--referee`` (None without it), checked against the id."""
    if config.referee_board is None:
        return None
    from orchenv.serve.referee import Referee

    if config.referee_key is None or config.referee_runs is None:
        raise ConfigError("--referee needs --key FILE and --runs DIR")
    referee = Referee(
        config.referee_board,
        config.referee_key,
        config.referee_runs,
        only=config.referee_name,
        task_file=config.referee_task_file,
        # what a sandboxed re-execution adds to the record (set by orchenv.verify.sandbox)
        extra=getattr(config, "referee_extra", None),
    )
    if referee.env_id != config.env_id:
        raise ConfigError(
            f"the board is of {referee.env_id}, not {config.env_id}: serve the board's env id"
        )
    return referee


def build_app(config: ServeConfig) -> FastAPI:
    """The OpenEnv app serving ``config.env_id`` (checks the id and its arguments now)."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    import orchenv  # noqa: F401  (registers the ids)

    try:  # fail now, loudly, on a bad id or argument
        runtime = Runtime(config, _referee(config))
        runtime.make_env().close()
    except (gym.error.Error, TypeError) as exc:
        raise OrchEnvError(f"cannot serve {config.env_id!r}: {exc}. See `orchenv list`.") from exc
    base: type = InlineOrchServeEnvironment if config.inline else OrchServeEnvironment
    if runtime.referee is not None:
        from orchenv.serve.referee import RefereeEnvironment

        if config.inline or config.mcp:
            raise OrchEnvError(
                "--referee serves /ws sessions only, stepped in their threads: drop --inline "
                "and --mcp"
            )
        base = RefereeEnvironment
    session_cls = type("OrchEnvSession", (base,), {"runtime": runtime, "__module__": __name__})
    app = create_app(
        session_cls,
        OrchAction,
        OrchObservation,
        env_name=openenv_name(config.env_id),
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=config.max_sessions, session_timeout=config.idle_timeout_s
        ),
        state_cls=OrchState,
    )
    app.title = f"orchenv serve {config.env_id}"
    _guard_routes(app, config)
    if runtime.referee is not None:
        _drop_task_routes(app, openenv_name(config.env_id))
    app.add_middleware(QuietDisconnects)
    return app


def _drop_task_routes(app: FastAPI, name: str) -> None:
    """A referee lists no task: OpenEnv's task API (``/{name}/...``) answers 404."""
    prefixes = (f"/{name}/", "/{env_name}/")
    for route in list(app.router.routes):
        if str(getattr(route, "path", "")).startswith(prefixes):
            app.router.routes.remove(route)


def _take_route(app: FastAPI, path: str, method: str) -> Any:
    """Remove OpenEnv's route for ``method path`` and return its endpoint."""
    for route in list(app.router.routes):
        if getattr(route, "path", None) == path and method in (
            getattr(route, "methods", None) or ()
        ):
            app.router.routes.remove(route)
            return route.endpoint  # type: ignore[attr-defined]
    raise OrchEnvError(f"openenv's app has no {method} {path} route (openenv version changed?)")


#: what the stateless reset answers: episodes (and their envs) live in /ws sessions
STATELESS_RESET_DETAIL = (
    "the stateless POST /reset is off on orchenv serve: it would build an env per request, "
    "outside --max-sessions. Episodes live in /ws sessions (openenv's EnvClient / "
    "GenericEnvClient); the task API (/{name}/splits, /{name}/task, ...) lists tasks"
)
MCP_OFF = (
    "HTTP MCP sessions (openenv/session/create) are off on this server: each would hold one "
    "of the --max-sessions slots without a connection. Episodes live in /ws sessions; serve "
    "with --mcp to allow them (they then count against --max-sessions and are closed after "
    "--idle-timeout)"
)


def _guard_routes(app: FastAPI, config: ServeConfig) -> None:
    """Replace OpenEnv's ``POST /reset`` (409, names ``/ws``) and wrap ``POST /mcp`` (no
    session create unless ``config.mcp``); the paths stay in the OpenAPI document, so
    ``openenv validate`` still sees the simulation-mode endpoint set."""
    _take_route(app, "/reset", "POST")

    @app.post("/reset", status_code=409, tags=["Environment Control"])
    async def reset_refused(request_raw: Request) -> JSONResponse:
        """Refused: use a ``/ws`` session (see ``STATELESS_RESET_DETAIL``)."""
        return JSONResponse({"detail": STATELESS_RESET_DETAIL}, status_code=409)

    mcp_endpoint = _take_route(app, "/mcp", "POST")

    @app.post("/mcp", tags=["MCP"])
    async def mcp_guarded(request_raw: Request) -> Any:
        """OpenEnv's MCP JSON-RPC endpoint; ``openenv/session/create`` only with ``--mcp``."""
        if not config.mcp:
            body = await request_raw.body()  # cached: OpenEnv's endpoint reads it again
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):
                message = None
            if isinstance(message, dict) and message.get("method") == "openenv/session/create":
                return {
                    "jsonrpc": "2.0",
                    "id": message.get("id") if isinstance(message.get("id"), str | int) else None,
                    "error": {"code": -32000, "message": MCP_OFF},
                }
        return await mcp_endpoint(request_raw)


class QuietDisconnects:
    """ASGI middleware: a WebSocket whose client vanished mid-message ends with one log line
    (OpenEnv's handler tries to send an error frame on the closed socket, and uvicorn logged
    that second failure as a 5.8 KB traceback per client)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001  (the connection is gone; nothing to answer)
            client = scope.get("client") or ("?", 0)
            logger.warning(
                "client %s:%s left %s mid-message (%s: %s)",
                client[0],
                client[1],
                scope.get("path"),
                type(exc).__name__,
                str(exc)[:200],
            )
            logger.debug("the disconnect's traceback", exc_info=True)


def app_from_env() -> FastAPI:
    """uvicorn's factory in each worker process (the config comes in ``CONFIG_ENV``)."""
    data: dict[str, Any] = json.loads(os.environ[CONFIG_ENV])
    config = ServeConfig(**data)
    configure_logging(config.verbose)  # a spawned worker does not inherit the parent's
    return build_app(config)


def configure_logging(verbose: bool) -> None:
    """``-v``: orchenv.serve's INFO lines (each session's resets, steps, closes) on stderr."""
    if not verbose:
        return
    log = logging.getLogger("orchenv.serve")
    log.setLevel(logging.INFO)
    # a handler on orchenv.serve only (no basicConfig: the root logger is the host's); the
    # `orchenv serve` process is configured by the CLI, so only a spawned worker with no
    # handler anywhere gets one
    ours = any(getattr(h, "_orchenv_serve", False) for h in log.handlers)
    if not ours and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(message)s"))
        handler._orchenv_serve = True  # type: ignore[attr-defined]
        log.addHandler(handler)


def serve(
    config: ServeConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Callable[[str], None] | None = None,
    uds: str | None = None,
) -> None:
    """Run the server until interrupted; ``announce`` gets the one-line banner once the app
    is built (the CLI prints it; by default it is logged at INFO). ``uds``: listen on this
    Unix socket instead of ``host:port`` (a sandboxed client reaches it through a bind
    mount with no network at all; ``orchenv.verify.sandbox``)."""
    import uvicorn

    announce = announce or logger.info

    if config.workers > 1 and config.fork_dir is None and not config.sealed:
        # the workers' shared fork table: a private folder, removed when the server stops
        config.fork_dir = tempfile.mkdtemp(prefix="orchenv-serve-forks-")
        atexit.register(shutil.rmtree, config.fork_dir, ignore_errors=True)
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "ws_max_size": WS_MAX_BYTES,
        "ws_per_message_deflate": config.ws_deflate,
        "log_level": "warning",
    }
    where = f"http://{host}:{port}"
    if uds is not None:
        common["uds"] = uds
        where = f"unix:{uds}"
    banner = (
        f"orchenv serve {config.env_id} on {where} ({config.workers} worker(s), "
        f"at most {config.max_sessions} sessions each); clients: openenv's EnvClient / "
        "GenericEnvClient over /ws"
        + (
            f"; referee of board {config.referee_board}, signed records in {config.referee_runs}"
            if config.referee_board
            else ""
        )
    )
    if config.workers > 1:
        os.environ[CONFIG_ENV] = json.dumps(config.to_dict())
        build_app(ServeConfig(**config.to_dict()))  # check the id and arguments in the parent
        announce(banner)
        uvicorn.run(
            "orchenv.serve.app:app_from_env",
            factory=True,
            workers=config.workers,
            # uvicorn kills and restarts a worker that misses its 5 s default health ping: on
            # a loaded machine, workers still importing / building the env were killed in a
            # loop and the server never came up (seen on the shared 2-core sandbox, issue 29)
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
            **common,
        )
    else:
        app = build_app(config)
        announce(banner)
        uvicorn.run(app, **common)
