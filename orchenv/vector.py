"""``ThreadedVectorEnv``: N sub-environments stepped at the same time, for I/O-bound pools.

Gymnasium's ``SyncVectorEnv`` steps sub-environments one after another, so N
agent calls of 50 ms each take N x 50 ms. Here each sub-environment's step runs
in its own worker thread, so the calls overlap (the pool's per-backend
concurrency limit still applies). Python threads suffice because the time goes
to waiting on servers, not to Python code. ``AsyncVectorEnv`` would also
overlap calls but runs each env in a subprocess, which cannot share one pool,
its HTTP connections or its replay files.

Semantics are exactly ``SyncVectorEnv``'s (this class subclasses it and only
replaces the loop in ``step``): the same batched spaces (a tuple of strings for
text observations), the same info dict of arrays with ``_key`` masks, and the
same autoreset modes. Default ``autoreset_mode=AutoresetMode.NEXT_STEP``: after
an episode ends, the next ``step`` call resets that sub-environment and ignores
its action (reward 0, not terminated); ``SAME_STEP`` resets inside the step that
ended the episode and puts the last observation and info under ``final_obs`` /
``final_info``; ``DISABLED`` leaves resets to the caller (``reset_mask``).
Resets run sequentially (they do not call agents).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate


class ThreadedVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` whose ``step`` runs the sub-environments concurrently in threads."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        max_workers: int | None = None,
        copy: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        super().__init__(
            env_fns, copy=copy, observation_mode=observation_mode, autoreset_mode=autoreset_mode
        )
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers or self.num_envs, thread_name_prefix="orchenv-vec"
        )

    def _step_one(self, i: int, action: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Step (or autoreset) sub-env ``i``; returns its info and, for SAME_STEP, final data."""
        env = self.envs[i]
        final: dict[str, Any] | None = None
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
            self._env_obs[i], info = env.reset()
            self._rewards[i] = 0.0
            self._terminations[i] = False
            self._truncations[i] = False
            return info, None
        if self.autoreset_mode == AutoresetMode.DISABLED:
            assert not self._autoreset_envs[i], f"{self._autoreset_envs=}"
        (
            self._env_obs[i],
            self._rewards[i],
            self._terminations[i],
            self._truncations[i],
            info,
        ) = env.step(action)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and (
            self._terminations[i] or self._truncations[i]
        ):
            final = {"final_obs": self._env_obs[i], "final_info": info}
            self._env_obs[i], info = env.reset()
        return info, final

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        futures = [self._executor.submit(self._step_one, i, a) for i, a in enumerate(actions)]
        results = [f.result() for f in futures]  # re-raises a sub-env's exception
        infos: dict[str, Any] = {}
        for i, (info, final) in enumerate(results):  # merge in index order, as SyncVectorEnv
            if final is not None:
                infos = self._add_info(infos, final, i)
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    def close_extras(self, **kwargs: Any) -> None:
        self._executor.shutdown(wait=True)
        super().close_extras(**kwargs)


def make_vec(
    env_id: str, num_envs: int, *, threaded: bool = True, **env_kwargs: Any
) -> SyncVectorEnv:
    """``num_envs`` copies of ``env_id`` in a ``ThreadedVectorEnv`` (or a ``SyncVectorEnv``).

    Sub-environments built from a preset name each get their own pool; pass a
    built ``AgentPool`` as ``pool=`` to share one (and its concurrency limits).
    """
    fns = [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)]
    return ThreadedVectorEnv(fns) if threaded else SyncVectorEnv(fns)
