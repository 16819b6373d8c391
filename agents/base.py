"""The controller contract and the name registry the CLI builds controllers from."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Protocol, runtime_checkable

from orchenv.error import ConfigError, UnknownNameError


@runtime_checkable
class Controller(Protocol):
    """Anything that turns an observation (and its info) into the controller's text.

    Optional:
    - ``reset(seed)``, called at each episode start;
    - ``reseed(seed)``, used by the evaluation harness to derive each episode's randomness
      from the episode's seed (so a resumed evaluation is exact) without rebuilding;
    - ``bind(env)``, called with the unwrapped env before each episode, for
      controllers that consult pool agents through ``env.consult(name, messages)``
      (charged to the episode) or, if privileged, inspect ``env.task``;
    - a class attribute ``privileged = True`` for controllers that read ground truth
      (``info["privileged"]``, ``env.task.answers``); leaderboards show them apart.
    """

    def act(self, obs: str, info: dict[str, Any]) -> str: ...


# name -> "module:Class"; resolved lazily so heavy controllers import only when used
CONTROLLERS: dict[str, str] = {
    "random": "orchenv.agents.baselines:RandomRouter",
    "env-random": "orchenv.agents.baselines:EnvRandomController",
    "pool-agent": "orchenv.agents.baselines:PoolAgentController",
    "single": "orchenv.agents.baselines:SingleAgent",
    "cascade": "orchenv.agents.baselines:CascadeController",
    "oracle": "orchenv.agents.baselines:OracleRouter",
    "knn": "orchenv.agents.routers:KNNRouter",
    "classifier": "orchenv.agents.routers:ClassifierRouter",
    "llm": "orchenv.agents.llm:LLMController",
    "router-r1": "orchenv.agents.llm:RouterR1Controller",
}


def env_label(env: Any) -> str:
    """A name for ``env`` in error messages: its registered id, else its class name."""
    if env is None:
        return "this environment"
    spec = getattr(env, "spec", None)
    env_id = getattr(spec, "id", None)
    return str(env_id) if env_id else type(getattr(env, "unwrapped", env)).__name__


def require_phase(info: dict[str, Any], controller: str, env: Any = None) -> str:
    """``info["phase"]`` ("route" or "verify"), or a ConfigError naming what is missing.

    Routing baselines only apply to envs with a route-then-verify protocol (the
    MathRoute family); on any other env they fail here with a clear message
    instead of emitting actions that env cannot read.
    """
    phase = info.get("phase")
    if phase in ("route", "verify") and isinstance(info.get("valid_agents"), list):
        return str(phase)
    raise ConfigError(
        f"controller {controller!r} does not apply to {env_label(env)}: it needs info['phase'] "
        "('route' or 'verify') and info['valid_agents'] (agents weakest first), as "
        f"orch/MathRoute-v0 provides; this env's info has phase={phase!r} and keys "
        f"{sorted(info)}. Use a controller written for this env, or 'llm' (which only "
        "needs info['messages'])."
    )


def make_controller(name: str, **kwargs: Any) -> Controller:
    """Build a registered controller by name, checking kwargs against its signature."""
    if name not in CONTROLLERS:
        raise UnknownNameError("controller", name, CONTROLLERS)
    module_name, attr = CONTROLLERS[name].split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    params = inspect.signature(cls).parameters
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        raise ConfigError(
            f"controller {name!r} does not take {', '.join(unknown)}; "
            f"it takes: {', '.join(params) or '(nothing)'}"
        )
    return cls(**kwargs)


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` from the command line to a dict, values read as JSON when they parse."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
