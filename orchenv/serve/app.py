"""The FastAPI app of ``orchenv serve``: OpenEnv's own ``create_app`` around
``OrchServeEnvironment``, and the uvicorn launch (one or several worker processes).

Everything on the wire is OpenEnv 0.10's protocol (``/ws`` sessions, ``/reset``,
``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``, the task API);
orchenv adds no endpoint. With ``--workers N`` uvicorn runs N processes on one socket; a
WebSocket session is one connection, so it stays on the worker that accepted it
(sessions are pinned). ``--max-sessions`` is each worker's ``max_concurrent_envs``: the
kernel does not spread connections evenly over the workers, so a split cap
(``max / N`` each) refuses sessions while others sit idle; with N workers the server
holds up to N x ``--max-sessions`` sessions. Workers share the snapshot key, so a state
exported on one worker restores on another.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from fastapi import FastAPI

from orchenv.error import OrchEnvError
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


def build_app(config: ServeConfig) -> FastAPI:
    """The OpenEnv app serving ``config.env_id`` (checks the id and its arguments now)."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    import orchenv  # noqa: F401  (registers the ids)

    if not config.state_key:
        config.state_key = secrets.token_hex(32)
    try:  # fail now, loudly, on a bad id or argument
        runtime = Runtime(config)
        runtime.make_env().close()
    except (gym.error.Error, TypeError) as exc:
        raise OrchEnvError(f"cannot serve {config.env_id!r}: {exc}. See `orchenv list`.") from exc
    base = InlineOrchServeEnvironment if config.inline else OrchServeEnvironment
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
    return app


def app_from_env() -> FastAPI:
    """uvicorn's factory in each worker process (the config comes in ``CONFIG_ENV``)."""
    data: dict[str, Any] = json.loads(os.environ[CONFIG_ENV])
    return build_app(ServeConfig(**data))


def serve(
    config: ServeConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Run the server until interrupted; ``announce`` gets the one-line banner once the app
    is built (the CLI prints it; by default it is logged at INFO)."""
    import uvicorn

    announce = announce or logger.info

    if not config.state_key:
        config.state_key = os.environ.get("ORCHENV_SERVE_STATE_KEY") or secrets.token_hex(32)
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "ws_max_size": WS_MAX_BYTES,
        "ws_per_message_deflate": config.ws_deflate,
        "log_level": "warning",
    }
    banner = (
        f"orchenv serve {config.env_id} on http://{host}:{port} ({config.workers} worker(s), "
        f"at most {config.max_sessions} sessions each); clients: openenv's EnvClient / "
        "GenericEnvClient over /ws"
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
