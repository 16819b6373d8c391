"""The controller contract and the registry the CLI and the eval harness build controllers from.

Controller packages (``orchenv.agents``, env families' own baselines) register their
classes by name with ``"module:Class"`` strings, so a controller's heavy dependencies
load only when it is built.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any, Protocol, runtime_checkable

from orchenv.error import ConfigError
from orchenv.registry import Registry


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


#: name -> controller class (or ``"module:Class"``), filled by the packages that define them
CONTROLLERS: Registry[Controller] = Registry("controller")


def register_controller(name: str, entry_point: str | type) -> None:
    """Register a controller class under ``name`` (``orchenv run/eval --controller NAME``)."""
    CONTROLLERS.register(name, entry_point)


def env_label(env: Any) -> str:
    """A name for ``env`` in error messages: its registered id, else its class name."""
    if env is None:
        return "this environment"
    spec = getattr(env, "spec", None)
    env_id = getattr(spec, "id", None)
    return str(env_id) if env_id else type(getattr(env, "unwrapped", env)).__name__


def default_controller(env_id: str) -> str:
    """The controller ``orchenv run`` / ``orchenv eval`` use when none is named: the env
    class's ``default_controller`` (``"random"`` for the MathRoute ids, whose routing baselines
    apply; ``"env-random"``, the env's own random valid moves, elsewhere)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"unknown env id {env_id!r}: {exc}. See `orchenv list`.") from exc
    entry = spec.entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return str(getattr(creator, "default_controller", "env-random"))


def make_controller(name: str, **kwargs: Any) -> Controller:
    """Build a registered controller by name, checking kwargs against its signature."""
    cls = CONTROLLERS.resolve(name)
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
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key] = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            out[key] = value
            continue
        if not _all_finite(out[key]):  # NaN, Infinity, 1e309: no setting takes them
            raise ConfigError(f"{key}={value}: not a finite number; give a finite number")
    return out


def _all_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True
