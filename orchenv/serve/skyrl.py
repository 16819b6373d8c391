"""A SkyRL-Gym env that plays an ``orchenv serve`` episode over OpenEnv (docs/serve.md).

SkyRL's trainer (``skyrl-train``) builds its environments with ``skyrl_gym.make(env_class,
env_config=..., extras=row's env_extras)`` and talks to them through ``BaseTextEnv``'s
``init`` / ``step`` (chat messages in, text out). SkyRL's own OpenEnv integration
(``skyrl-train/integrations/openenv`` in the SkyRL repository, not in the ``skyrl-gym``
package) starts six fixed OpenEnv images with ``from_docker_image`` and parses
``<action>`` tags, so it cannot reach a server by URL; this class is that glue for
orchenv, on OpenEnv's own ``GenericEnvClient`` (no protocol of orchenv's). Written by hand
because neither package ships a URL-based OpenEnv ``BaseTextEnv``.

    import orchenv.serve.skyrl as orch_skyrl
    orch_skyrl.register()  # skyrl_gym id "orchenv"
    env = skyrl_gym.make("orchenv", env_config={"orchenv_url": "http://envhost:8000"},
                         extras={"seed": 3})

``extras`` (a dataset row's ``env_extras``) may carry ``seed``, ``index``, ``task_id``
and ``split`` for the reset, and ``orchenv_url`` to override the config's URL (else the
``ORCHENV_URL`` environment variable). Needs ``skyrl-gym`` (``pip install skyrl-gym``)
next to the ``serve`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # pragma: no cover - exercised only without skyrl-gym
    raise ImportError(
        f"orchenv.serve.skyrl needs skyrl-gym: pip install skyrl-gym 'orchenv[serve]' ({exc})"
    ) from exc

from orchenv.error import ConfigError

#: the skyrl_gym id ``register`` uses by default
SKYRL_ID = "orchenv"
_RESET_KEYS = ("seed", "index", "task_id", "split")


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)  # omegaconf DictConfig and similar


class OrchEnvSkyRLEnv(BaseTextEnv):  # type: ignore[misc]
    """One SkyRL rollout = one episode of a served orchenv env (a ``/ws`` session)."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        from openenv.core.generic_client import GenericEnvClient

        extras = dict(extras or {})
        url = (
            extras.get("orchenv_url")
            or _get(env_config, "orchenv_url")
            or os.environ.get("ORCHENV_URL")
        )
        if not url:
            raise ConfigError(
                "OrchEnvSkyRLEnv needs the server's URL: env_config.orchenv_url, "
                "extras['orchenv_url'] or ORCHENV_URL (start one with `orchenv serve ENV_ID`)"
            )
        self.url = str(url)
        self.reset_kwargs = {k: extras[k] for k in _RESET_KEYS if extras.get(k) is not None}
        self.max_turns = int(extras.get("max_turns") or _get(env_config, "max_turns") or 10_000)
        self.client = GenericEnvClient(base_url=self.url).sync()
        self.total = 0.0
        self.done = False

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset the served env; the conversation starts with the env's prompt (the dataset
        row's ``prompt`` is ignored: the env owns the task)."""
        result = self.client.reset(**self.reset_kwargs)
        self.turns, self.total, self.done = 0, 0.0, bool(result.done)
        observation = result.observation
        return [{"role": "user", "content": str(observation["prompt"])}], {
            "info": observation.get("info", {})
        }

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.done:
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata={"note": "episode over"}
            )
        self.turns += 1
        result = self.client.step({"text": action})
        reward = float(result.reward or 0.0)
        self.total += reward
        observation = result.observation
        self.done = bool(result.done) or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[]
            if self.done
            else [{"role": "user", "content": str(observation["prompt"])}],
            reward=reward,
            done=self.done,
            metadata={"info": observation.get("info", {}), "return": self.total},
            postprocessed_action=None,
        )

    def close(self) -> None:
        self.client.close()


def register(env_id: str = SKYRL_ID) -> None:
    """Register ``OrchEnvSkyRLEnv`` with skyrl_gym under ``env_id`` (idempotent)."""
    import skyrl_gym

    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point="orchenv.serve.skyrl:OrchEnvSkyRLEnv")
