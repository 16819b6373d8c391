"""``orchenv serve``: every orchenv env over OpenEnv 0.10 (docs/serve.md).

``build_app(ServeConfig(env_id=...))`` is the FastAPI app (OpenEnv's ``create_app``);
``serve`` runs it with uvicorn. Clients are OpenEnv's own (``GenericEnvClient``,
``EnvClient`` subclasses, TRL's OpenEnv path); orchenv writes no protocol.

``orchenv.serve.skyrl`` is a SkyRL-Gym ``BaseTextEnv`` that plays a served episode (needs
``skyrl-gym``; docs/serve.md).

Needs the ``serve`` extra (``pip install 'orchenv[serve]'``: openenv 0.10); the names
below are imported on first use, so ``orchenv``'s CLI works without it.
"""

from __future__ import annotations

from typing import Any

_NAMES = {
    "build_app": "orchenv.serve.app",
    "serve": "orchenv.serve.app",
    "OrchAction": "orchenv.serve.environment",
    "OrchObservation": "orchenv.serve.environment",
    "OrchServeEnvironment": "orchenv.serve.environment",
    "OrchState": "orchenv.serve.environment",
    "ServeConfig": "orchenv.serve.environment",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'orchenv.serve' has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(_NAMES[name])
    except ImportError as exc:
        raise ImportError(
            f"orchenv.serve needs the 'serve' extra: pip install 'orchenv[serve]' ({exc})"
        ) from exc
    return getattr(module, name)
