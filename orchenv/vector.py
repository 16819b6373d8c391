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

``EventLoopVectorEnv`` has the same semantics without a thread per sub-environment: each
sub-environment's step runs as a greenlet on orchenv's one event loop
(``orchenv.backends.common.run_in_bridge``), and a live agent call inside it
(the ``openai`` backend) suspends that step only, so hundreds of steps keep their
requests in flight on one thread and one connection pool. Steps of envs whose agents
are not live (simulated, replayed, in-process engines) run one after another on the
loop, as in ``SyncVectorEnv``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate

from orchenv.backends.common import run_in_bridge, run_sync, shared_loop
from orchenv.error import ConfigError


class _ConcurrentSteps(SyncVectorEnv, ABC):
    """What the concurrent vector envs share: one sub-env's step (or autoreset) and the
    merge of the results in index order, exactly as ``SyncVectorEnv`` does them."""

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

    @abstractmethod
    def _run_steps(self, actions: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Step every sub-env with its action at once (threads or the event loop)."""

    def _add_info(
        self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
    ) -> dict[str, Any]:
        """Gymnasium's info batching (same arrays, dtypes and ``_key`` masks, as the tests
        check against ``SyncVectorEnv``), without building a throwaway mask for every key
        of every env: at 256 envs that cost more than stepping them."""
        n = self.num_envs
        for key, value in env_info.items():
            if key == "final_obs":
                array = vector_infos.get(key)
                if array is None:
                    array = np.full(n, fill_value=None, dtype=object)
                array[env_num] = value
            elif isinstance(value, dict):
                array = self._add_info(vector_infos.get(key, {}), value, env_num)
            else:
                array = vector_infos.get(key)
                if array is None:
                    kind = type(value)
                    if kind in (int, float, bool) or issubclass(kind, np.number):
                        array = np.zeros(n, dtype=kind)
                    elif isinstance(value, np.ndarray):
                        array = np.zeros((n, *value.shape), dtype=value.dtype)
                    else:
                        array = np.full(n, fill_value=None, dtype=object)
                array[env_num] = value
            mask = vector_infos.get("_" + key)
            if mask is None:
                mask = np.zeros(n, dtype=np.bool_)
            mask[env_num] = True
            vector_infos[key] = array
            vector_infos["_" + key] = mask
        return vector_infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = self._run_steps(actions)
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


class ThreadedVectorEnv(_ConcurrentSteps):
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

    def _run_steps(self, actions: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        futures = [self._executor.submit(self._step_one, i, a) for i, a in enumerate(actions)]
        return [f.result() for f in futures]  # re-raises a sub-env's exception

    def close_extras(self, **kwargs: Any) -> None:
        self._executor.shutdown(wait=True)
        super().close_extras(**kwargs)


class EventLoopVectorEnv(_ConcurrentSteps):
    """``SyncVectorEnv`` whose ``step`` runs the sub-environments as greenlets on orchenv's
    event loop: live agent calls of all sub-environments are in flight at once, without a
    thread per sub-environment (see the module docstring). A sub-environment's exception
    is raised once every other step of the batch has finished (none is left running)."""

    def _run_steps(self, actions: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        async def all_steps() -> list[Any]:
            return await asyncio.gather(
                *[run_in_bridge(self._step_one, i, a) for i, a in enumerate(actions)],
                return_exceptions=True,
            )

        results = run_sync(all_steps)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results


T = TypeVar("T")
_SKIPPED = object()


def run_concurrently(
    jobs: Sequence[Callable[[], T]], *, concurrency: int
) -> Generator[tuple[int, T | None, BaseException | None], None, None]:
    """Run the synchronous ``jobs`` (e.g. whole episodes) on orchenv's event loop, at most
    ``concurrency`` at once, each free to make live agent calls that overlap with the
    others' (no thread per job). Yields ``(index, result, None)`` or ``(index, None,
    exception)`` as each job ends, in the order they end.

    Unlike a vector env there is no barrier: a job that ends starts the next one, so the
    CPU work of one job overlaps the others' waits (what RL rollouts and ``orchenv eval
    --concurrency N`` need). Closing the iterator early starts no further job and waits
    for the running ones to end.
    """
    if isinstance(concurrency, bool) or not (isinstance(concurrency, int) and concurrency >= 1):
        raise ConfigError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    out: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
    stop = threading.Event()

    async def drive() -> None:
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int, job: Callable[[], T]) -> None:
            async with slots:
                if stop.is_set():
                    out.put((i, None, _SKIPPED))
                    return
                try:
                    result = await run_in_bridge(job)
                except Exception as exc:  # noqa: BLE001 - handed to the consumer
                    out.put((i, None, exc))
                else:
                    out.put((i, result, None))

        await asyncio.gather(*[one(i, job) for i, job in enumerate(jobs)])

    future = asyncio.run_coroutine_threadsafe(drive(), shared_loop())
    try:
        for _ in range(len(jobs)):
            i, result, exc = out.get()
            if exc is not _SKIPPED:
                yield i, result, exc
    finally:
        stop.set()
        future.result()


#: how ``make_vec`` steps its sub-environments
VECTOR_MODES = ("loop", "threads", "sync")


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    threaded: bool = True,
    mode: str | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    **env_kwargs: Any,
) -> SyncVectorEnv:
    """``num_envs`` copies of ``env_id`` in a vector env.

    ``mode``: ``"loop"`` (``EventLoopVectorEnv``: one thread, best for many envs with live
    agents), ``"threads"`` (``ThreadedVectorEnv``) or ``"sync"`` (``SyncVectorEnv``);
    without it, ``threaded`` picks threads (default) or sync, as before. Sub-environments
    built from a preset name each get their own pool; pass a built ``AgentPool`` as
    ``pool=`` to share one (and its connections and concurrency limits).
    """
    if mode is None:
        mode = "threads" if threaded else "sync"
    if mode not in VECTOR_MODES:
        raise ConfigError(f"unknown vector mode {mode!r}; choose one of {list(VECTOR_MODES)}")
    fns = [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)]
    cls = {"loop": EventLoopVectorEnv, "threads": ThreadedVectorEnv, "sync": SyncVectorEnv}[mode]
    return cls(fns, autoreset_mode=autoreset_mode)
