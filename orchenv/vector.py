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
(``orchenv.asyncbridge.run_in_bridge``), and a live agent call inside it
(the ``openai`` backend) suspends that step only, so hundreds of steps keep their
requests in flight on one thread and one connection pool. Steps of envs whose agents
are not live (simulated, replayed, in-process engines) run one after another on the
loop, as in ``SyncVectorEnv``.

``ProcessVectorEnv`` shards the sub-environments over worker processes, each running its
own event loop with an ``EventLoopVectorEnv`` of its shard: env code and the HTTP client
then use every core (one Python process uses one), with the same semantics again. Each
worker holds its own copy of the sub-environments' pool (one connection pool per worker).

``make_vec`` (and ``gym.make_vec`` on an orchenv id) picks among them by default
(``mode="auto"``, ``auto_vector_mode``): processes for hundreds of live envs on a machine
with several CPUs, where one process runs out of CPU; the event loop otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import queue
import re
import sys
import threading
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import (
    batch_differing_spaces,
    batch_space,
    concatenate,
    create_empty_array,
    iterate,
)

from orchenv.asyncbridge import run_in_bridge, run_sync, shared_loop
from orchenv.error import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Unpack


class SyncOptions(TypedDict, total=False):
    """``SyncVectorEnv``'s options, taken by every vector env here with its defaults:
    ``copy`` (True: ``step`` / ``reset`` return copies of the batched observations),
    ``observation_mode`` (``"same"``, ``"different"`` or the two spaces) and
    ``autoreset_mode`` (default ``AutoresetMode.NEXT_STEP``)."""

    copy: bool
    observation_mode: str | tuple[gym.Space, gym.Space]
    autoreset_mode: str | AutoresetMode


def _add_info(
    vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int, n: int
) -> dict[str, Any]:
    """Gymnasium's info batching for env ``env_num`` of ``n`` (same arrays, dtypes and
    ``_key`` masks, as the tests check against ``SyncVectorEnv``), without building a
    throwaway mask for every key of every env: at 256 envs that cost more than stepping them."""
    for key, value in env_info.items():
        if key == "final_obs":
            array = vector_infos.get(key)
            if array is None:
                array = np.full(n, fill_value=None, dtype=object)
            array[env_num] = value
        elif isinstance(value, dict):
            array = _add_info(vector_infos.get(key, {}), value, env_num, n)
        else:
            array = vector_infos.get(key)
            if array is None:
                array = _new_column(value, n)
            array[env_num] = value
        mask = vector_infos.get("_" + key)
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[env_num] = True
        vector_infos[key] = array
        vector_infos["_" + key] = mask
    return vector_infos


def _new_column(value: Any, n: int) -> np.ndarray:
    """The array Gymnasium creates for a key first seen with ``value`` (its type decides)."""
    kind = type(value)
    if kind in (int, float, bool) or issubclass(kind, np.number):
        return np.zeros(n, dtype=kind)
    if isinstance(value, np.ndarray):
        return np.zeros((n, *value.shape), dtype=value.dtype)
    return np.full(n, fill_value=None, dtype=object)


def _batch_infos(env_infos: Sequence[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    """``_add_info`` applied to every ``(env_num, info)`` in order, key by key instead of env
    by env: the same dict (keys in the same order, the same arrays, dtypes, values and
    masks), in a third of the time at 256 MathRoute envs (~70 keys each). Where a key holds
    a dict for some envs and not for others, or an info key collides with another's ``_key``
    mask, the whole merge runs env by env instead, so the result is always ``_add_info``'s."""
    out = _batch_columns(_columns(env_infos), n)
    if out is None:
        out = {}
        for env_num, info in env_infos:
            out = _add_info(out, info, env_num, n)
    return out


def _columns(
    env_infos: Sequence[tuple[int, dict[str, Any]]],
) -> dict[str, tuple[list[int], list[Any]]]:
    """key -> (env numbers, values) in the order of ``env_infos``, keys in the order they
    are first seen. Infos with the same keys (in the same order) are read together, a
    column at a time: sub-envs of one vector env mostly return the same keys."""
    groups: dict[tuple[str, ...], tuple[list[int], list[int], list[dict[str, Any]]]] = {}
    for position, (env_num, info) in enumerate(env_infos):
        keys = tuple(info)
        group = groups.get(keys)
        if group is None:
            groups[keys] = ([position], [env_num], [info])
        else:
            group[0].append(position)
            group[1].append(env_num)
            group[2].append(info)
    # a key's place: where it is first seen (its group's first info, its place in the keys)
    places: dict[str, tuple[int, int]] = {}
    parts: dict[str, list[tuple[list[int], list[int], list[Any]]]] = {}
    for keys, (positions, nums, infos) in groups.items():
        for index, key in enumerate(keys):
            place = (positions[0], index)
            if key not in places or place < places[key]:
                places[key] = place
            parts.setdefault(key, []).append((positions, nums, [info[key] for info in infos]))
    columns: dict[str, tuple[list[int], list[Any]]] = {}
    for key in sorted(places, key=places.__getitem__):
        found = parts[key]
        if len(found) == 1:
            columns[key] = (found[0][1], found[0][2])
        else:  # from infos with different keys: back into the order of env_infos
            rows = sorted(
                (position, num, value)
                for positions, nums, values in found
                for position, num, value in zip(positions, nums, values, strict=True)
            )
            columns[key] = ([num for _, num, _ in rows], [value for _, _, value in rows])
    return columns


def _batch_columns(
    columns: dict[str, tuple[list[int], list[Any]]], n: int
) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for key, (nums, values) in columns.items():
        if "_" + key in columns:
            return None
        array: Any
        kinds = set(map(type, values))
        nested = [issubclass(kind, dict) for kind in kinds]
        if key == "final_obs":
            array = np.full(n, fill_value=None, dtype=object)
            for env_num, value in zip(nums, values, strict=True):
                array[env_num] = value
        elif any(nested):
            if not all(nested):
                return None
            array = _batch_columns(_columns(list(zip(nums, values, strict=True))), n)
            if array is None:
                return None
        else:
            array = _new_column(values[0], n)
            once = len(set(nums)) == len(nums)  # else the last value of an env wins
            if once and array.ndim == 1 and (array.dtype == object or len(kinds) == 1):
                # one type of scalar: the same casts as one by one; objects go in as they
                # are (fromiter: a list value is one element, not broadcast)
                array[nums] = (
                    np.fromiter(values, dtype=object, count=len(values))
                    if array.dtype == object
                    else values
                )
            else:
                for env_num, value in zip(nums, values, strict=True):
                    array[env_num] = value
        mask = np.zeros(n, dtype=np.bool_)
        mask[nums] = True
        out[key] = array
        out["_" + key] = mask
    return out


#: sub-env steps ``EventLoopVectorEnv`` starts before letting them run to their first wait
_START_BATCH = 8

_gc_lock = threading.Lock()
_gc_holds = 0  # batches now running with automatic collection paused
_gc_paused = False  # whether they paused it (it was enabled when the first began)


@contextlib.contextmanager
def _no_gc_pauses() -> Generator[None, None, None]:
    """Pause CPython's automatic garbage collection while one batch of steps runs, then
    resume it (the next allocation collects what the batch left, at once).

    Why: a batch of hundreds of live steps keeps hundreds of requests' objects alive at
    once, so the cyclic collector ran dozens of young-generation and one full collection per
    256-env step, each walking those in-flight objects: about a fifth of the CPU of a step
    here (``benchmarks/README.md``). Reference counting still frees everything acyclic
    during the batch; cyclic garbage waits for its end. Process-wide (``gc`` has no other
    scope): another thread's code runs without automatic collection meanwhile. If automatic
    collection was already disabled, it is left so; nested and concurrent batches resume it
    when the last one ends."""
    global _gc_holds, _gc_paused
    with _gc_lock:
        if _gc_holds == 0:
            _gc_paused = gc.isenabled()
            if _gc_paused:
                gc.disable()
        _gc_holds += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holds -= 1
            if _gc_holds == 0 and _gc_paused:
                _gc_paused = False
                gc.enable()


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
        return _add_info(vector_infos, env_info, env_num, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = self._run_steps(actions)
        infos = _merge_results(results, self.num_envs)
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
    """``SyncVectorEnv`` whose ``step`` runs the sub-environments concurrently in threads.

    Args:
        env_fns: callables creating the sub-environments.
        max_workers: threads (default one per sub-environment).
        options: ``SyncVectorEnv``'s ``copy``, ``observation_mode``, ``autoreset_mode``
            (``SyncOptions``).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        max_workers: int | None = None,
        **options: Unpack[SyncOptions],
    ) -> None:
        super().__init__(env_fns, **options)
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
            steps = []
            for i, a in enumerate(actions):
                steps.append(asyncio.ensure_future(run_in_bridge(self._step_one, i, a)))
                # Start the steps a few at a time, each batch run to its first waits, and what
                # it scheduled (aiohttp writes a request's body in a task of its own) run,
                # before the next starts. Started all at once, the steps queued every
                # request's write behind all the others' CPU work: at 256 envs the first
                # request left 30 ms late and the whole step took 30 ms longer. One at a
                # time cost more CPU (a loop pass per step, one request per server wake-up)
                # than batches of _START_BATCH (benchmarks/README.md).
                if (i + 1) % _START_BATCH == 0:
                    await asyncio.sleep(0)
            return await asyncio.gather(*steps, return_exceptions=True)

        with _no_gc_pauses():
            results = run_sync(all_steps)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results


class ProcessVectorEnv(VectorEnv):
    """``SyncVectorEnv``'s semantics with the sub-environments sharded over worker processes.

    Worker ``k`` builds a contiguous shard of the sub-environments (``env_fns`` are sent to
    it with ``cloudpickle``) and steps it as an ``EventLoopVectorEnv`` on its own event loop,
    so live agent calls of the whole shard are in flight at once and the shards' CPU work
    (env code, the HTTP client) runs on separate cores. The results are merged in index
    order by the same code as the other vector envs: observations, rewards, the info dict of
    arrays with ``_key`` masks, ``final_obs`` / ``final_info`` and the autoreset modes equal
    ``SyncVectorEnv``'s for the same sub-environments and seeds (tested). Resets of one shard
    run one after another, as in ``SyncVectorEnv``.

    What a worker builds is its own: an ``AgentPool`` captured by ``env_fns`` is copied
    into each worker (its envs share that copy: one connection pool and one concurrency
    limit per worker), and meters, replay recorders or caches filled there stay there. Values
    crossing the process boundary (actions, observations, infos, ``call`` results) must
    pickle. A sub-environment's exception is raised once every shard has finished the
    command. ``context``: the ``multiprocessing`` start method (default ``"spawn"``: no
    fork of a process whose event-loop thread is running).

    Args:
        env_fns: callables creating the sub-environments (picklable with ``cloudpickle``).
        num_workers: worker processes (default: the number of CPUs, at most one per env).
        context: ``multiprocessing`` start method.
        options: ``SyncVectorEnv``'s ``copy``, ``observation_mode``, ``autoreset_mode``
            (``SyncOptions``).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        num_workers: int | None = None,
        context: str = "spawn",
        **options: Unpack[SyncOptions],
    ) -> None:
        import cloudpickle

        super().__init__()
        copy = options.get("copy", True)
        observation_mode = options.get("observation_mode", "same")
        autoreset_mode = options.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        n = len(env_fns)
        if n < 1:
            raise ConfigError("ProcessVectorEnv needs at least one env_fn")
        if num_workers is None:
            num_workers = os.cpu_count() or 1
        if isinstance(num_workers, bool) or not (isinstance(num_workers, int) and num_workers >= 1):
            raise ConfigError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        num_workers = min(num_workers, n)
        self.env_fns = env_fns
        self.copy = copy
        self.observation_mode = observation_mode
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.num_envs = n
        self.num_workers = num_workers
        #: sub-env index ranges of the workers: worker k holds envs bounds[k]..bounds[k+1]-1
        self._bounds = [round(k * n / num_workers) for k in range(num_workers + 1)]
        ctx: Any = multiprocessing.get_context(context)
        self._conns: list[Any] = []
        self._processes: list[Any] = []
        for k in range(num_workers):
            shard = list(env_fns[self._bounds[k] : self._bounds[k + 1]])
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=_shard_worker,
                args=(child, cloudpickle.dumps(shard), observation_mode, self.autoreset_mode),
                name=f"orchenv-shard-{k}",
                daemon=True,
            )
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        try:
            shards = self._collect()
        except BaseException:
            self._shutdown()
            raise
        first = shards[0]
        self.metadata = dict(first["metadata"])
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first["render_mode"]
        self.single_action_space = first["action_spaces"][0]
        self.action_space = batch_space(self.single_action_space, n)
        spaces = [space for shard in shards for space in shard["observation_spaces"]]
        if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
            self.observation_space, self.single_observation_space = observation_mode
        else:
            self.single_observation_space = spaces[0]
            if observation_mode == "same":
                self.observation_space = batch_space(self.single_observation_space, n)
            else:
                self.observation_space = batch_differing_spaces(spaces)
        for shard in shards:  # each worker checked its shard against its own first env
            if observation_mode == "same" and any(
                s != self.single_observation_space for s in shard["observation_spaces"]
            ):
                self._shutdown()
                raise RuntimeError(
                    "ProcessVectorEnv(..., observation_mode='same') however the "
                    "sub-environments' observation spaces are not equivalent"
                )
            if any(s != self.single_action_space for s in shard["action_spaces"]):
                self._shutdown()
                raise RuntimeError("the sub-environments' action spaces are not equivalent")
        self._env_obs: list[Any] = [None] * n
        self._observations: Any = create_empty_array(
            self.single_observation_space, n=n, fn=np.zeros
        )
        self._rewards = np.zeros((n,), dtype=np.float64)
        self._terminations = np.zeros((n,), dtype=np.bool_)
        self._truncations = np.zeros((n,), dtype=np.bool_)

    # -- talking to the workers ---------------------------------------------------------
    def _send(self, command: str, per_worker: Sequence[Any]) -> list[Any]:
        """Send ``command`` with worker k's argument ``per_worker[k]`` to every worker; the
        replies in worker order (the first failure raised once all have answered)."""
        if self.closed:
            raise gym.error.ClosedEnvironmentError("ProcessVectorEnv is closed")
        for conn, data in zip(self._conns, per_worker, strict=True):
            conn.send((command, data))
        return self._collect()

    def _collect(self) -> list[Any]:
        replies, error = [], None
        for k, conn in enumerate(self._conns):
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                status, value = (
                    "error",
                    RuntimeError(
                        f"ProcessVectorEnv worker {k} died (exit code "
                        f"{self._processes[k].exitcode}). {MAIN_GUARD_HINT}"
                    ),
                )
            if status == "error" and error is None:
                error = value
            replies.append(value)
        if error is not None:
            raise error
        return replies

    def _split(self, values: Sequence[Any]) -> list[list[Any]]:
        b = self._bounds
        return [list(values[b[k] : b[k + 1]]) for k in range(self.num_workers)]

    # -- the VectorEnv API ----------------------------------------------------------------
    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        n = self.num_envs
        if seed is None:
            seed = [None] * n
        elif isinstance(seed, int):
            seed = [seed + i for i in range(n)]
        if len(seed) != n:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={n} but got "
                f"length={len(seed)}."
            )
        mask = None
        if options is not None and "reset_mask" in options:
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray):
                raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
            if mask.shape != (n,):
                raise ValueError(
                    f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}"
                )
            if mask.dtype != np.bool_:
                raise TypeError(
                    f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}"
                )
            if not np.any(mask):
                raise ValueError(
                    "`options['reset_mask']` must contain a boolean array with at least one "
                    f"True value, got reset_mask={mask}"
                )
            self._terminations[mask] = False
            self._truncations[mask] = False
        else:
            self._terminations = np.zeros((n,), dtype=np.bool_)
            self._truncations = np.zeros((n,), dtype=np.bool_)
        masks = self._split(mask) if mask is not None else [None] * self.num_workers
        replies = self._send(
            "reset",
            [(s, options, m) for s, m in zip(self._split(seed), masks, strict=True)],
        )
        pairs: list[tuple[int, dict[str, Any]]] = []
        for k, (obs, reset_infos) in enumerate(replies):
            start = self._bounds[k]
            self._env_obs[start : start + len(obs)] = obs
            pairs.extend((start + i, info) for i, info in reset_infos)
        infos = _batch_infos(pairs, self.num_envs)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        return deepcopy(self._observations) if self.copy else self._observations, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        with _no_gc_pauses():  # the shards' replies: as for a batch of steps in one process
            replies = self._send("step", self._split(actions))
            infos: dict[str, Any] = {}
            exact = True
            for k, (obs, rewards, terminations, truncations, shard_infos) in enumerate(replies):
                start, stop = self._bounds[k], self._bounds[k + 1]
                self._env_obs[start:stop] = obs
                self._rewards[start:stop] = rewards
                self._terminations[start:stop] = terminations
                self._truncations[start:stop] = truncations
                exact = exact and _merge_shard_infos(infos, shard_infos, start, self.num_envs)
            if not exact:  # a key's dtype differs between shards: merge env by env instead
                shards = self._send("step_infos", [None] * self.num_workers)
                infos = _merge_results(
                    [result for results in shards for result in results], self.num_envs
                )
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """The sub-environments' numpy random seeds."""
        return self.get_attr("np_random_seed")

    def render(self) -> tuple[Any, ...]:
        """The sub-environments' rendered frames."""
        return self.call("render")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call (or read, when not callable) ``name`` on every sub-environment."""
        replies = self._send("call", [(name, args, kwargs)] * self.num_workers)
        return tuple(value for shard in replies for value in shard)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every sub-environment."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set ``name`` on every sub-environment (one value each, or the same for all)."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of "
                f"environments. Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._send("set_attr", [(name, shard) for shard in self._split(values)])

    def close_extras(self, **kwargs: Any) -> None:
        self._shutdown(kwargs)

    def _shutdown(self, kwargs: dict[str, Any] | None = None) -> None:
        """Close the workers' envs and end the workers (terminated if they do not answer)."""
        for conn, process in zip(self._conns, self._processes, strict=True):
            try:
                if process.is_alive():
                    conn.send(("close", kwargs or {}))
                    if conn.poll(10):
                        conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                pass
        for conn, process in zip(self._conns, self._processes, strict=True):
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
            conn.close()
        self._conns, self._processes = [], []


def _shard_worker(
    conn: Any, payload: bytes, observation_mode: Any, autoreset_mode: AutoresetMode
) -> None:
    """A ``ProcessVectorEnv`` worker: builds its shard as an ``EventLoopVectorEnv`` and
    answers commands until ``close`` (or until the parent goes away)."""
    import cloudpickle

    try:
        vec = EventLoopVectorEnv(
            cloudpickle.loads(payload),
            copy=False,
            observation_mode=observation_mode,
            autoreset_mode=autoreset_mode,
        )
        _reply(
            conn,
            "ok",
            {
                "observation_spaces": [env.observation_space for env in vec.envs],
                "action_spaces": [env.action_space for env in vec.envs],
                "metadata": vec.envs[0].metadata,
                "render_mode": vec.render_mode,
            },
        )
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        _reply(conn, "error", exc)
        return
    while True:
        try:
            command, data = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        try:
            if command == "close":
                vec.close(**data)
                _reply(conn, "ok", None)
                break
            with _no_gc_pauses():  # the whole command: the step, its merge and its reply
                _reply(conn, "ok", _SHARD_COMMANDS[command](vec, data))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            _reply(conn, "error", exc)
    conn.close()


def _reply(conn: Any, status: str, value: Any) -> None:
    """Send a reply; an exception that does not pickle goes as a RuntimeError with its
    traceback, a result that does not pickle as an error saying so."""
    try:
        conn.send((status, value))
    except Exception as exc:  # noqa: BLE001 - pickling of arbitrary values
        text = "".join(traceback.format_exception(value)) if status == "error" else str(exc)
        conn.send(("error", RuntimeError(f"ProcessVectorEnv worker: {text}")))


def _shard_step(vec: EventLoopVectorEnv, actions: list[Any]) -> tuple[Any, ...]:
    """Step the shard; its infos merged over the shard (the parent places them) and kept
    env by env for ``step_infos``."""
    results = vec._run_steps(actions)
    vec._autoreset_envs = np.logical_or(vec._terminations, vec._truncations)
    vec._last_results = results  # type: ignore[attr-defined]
    infos = _merge_results(results, vec.num_envs)
    return (list(vec._env_obs), vec._rewards, vec._terminations, vec._truncations, infos)


def _merge_results(
    results: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], n: int, start: int = 0
) -> dict[str, Any]:
    """The batched infos of ``_step_one`` results in index order (each env's SAME_STEP final
    data before its info), as ``SyncVectorEnv`` merges them; env ``i`` of ``results`` is
    env ``start + i`` of ``n``."""
    pairs: list[tuple[int, dict[str, Any]]] = []
    for i, (info, final) in enumerate(results, start):
        if final is not None:
            pairs.append((i, final))
        pairs.append((i, info))
    return _batch_infos(pairs, n)


def _merge_shard_infos(into: dict[str, Any], shard: dict[str, Any], start: int, n: int) -> bool:
    """Place a shard's batched infos (arrays over the shard, ``_key`` masks) at ``start``
    in ``into`` (arrays over all ``n`` envs), as if its envs' infos had been added one by
    one. False when that cannot be guaranteed (a key's dtype or kind differs from an earlier
    shard's: one env's value would have been cast differently); ``into`` is then partial."""
    keys = list(shard)
    if len(keys) % 2:
        return False
    for j in range(0, len(keys), 2):
        key, mask_key = keys[j], keys[j + 1]
        if mask_key != "_" + key:
            return False
        value, mask = shard[key], shard[mask_key]
        target = into.get(key)
        if isinstance(value, dict):
            if target is None:
                target = {}
            elif not isinstance(target, dict):
                return False
            if not _merge_shard_infos(target, value, start, n):
                return False
        else:
            if not isinstance(value, np.ndarray):
                return False
            if target is None:  # created as the first env with this key created it
                if value.dtype == object and value.ndim == 1:
                    unset = value[~mask]
                    fill = unset[0] if len(unset) else None
                    target = np.full(n, fill_value=fill, dtype=object)
                else:
                    target = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
            elif (
                not isinstance(target, np.ndarray)
                or target.dtype != value.dtype
                or target.shape[1:] != value.shape[1:]
            ):
                return False
            target[start : start + len(mask)][mask] = value[mask]
        whole = into.get(mask_key)
        if whole is None:
            whole = np.zeros(n, dtype=np.bool_)
        whole[start : start + len(mask)] |= mask
        into[key] = target
        into[mask_key] = whole
    return True


def _shard_step_infos(vec: EventLoopVectorEnv, data: None) -> Any:
    return vec._last_results  # type: ignore[attr-defined]


def _shard_reset(vec: EventLoopVectorEnv, data: tuple[Any, ...]) -> tuple[Any, ...]:
    seeds, options, mask = data
    if mask is None:
        vec._terminations[:] = False
        vec._truncations[:] = False
        vec._autoreset_envs[:] = False
    else:
        vec._terminations[mask] = False
        vec._truncations[mask] = False
        vec._autoreset_envs[mask] = False
    infos = []
    for i, env in enumerate(vec.envs):
        if mask is None or mask[i]:
            vec._env_obs[i], info = env.reset(seed=seeds[i], options=options)
            infos.append((i, info))
    return list(vec._env_obs), infos


def _shard_call(vec: EventLoopVectorEnv, data: tuple[Any, ...]) -> tuple[Any, ...]:
    name, args, kwargs = data
    return vec.call(name, *args, **kwargs)


def _shard_set_attr(vec: EventLoopVectorEnv, data: tuple[Any, ...]) -> None:
    name, values = data
    vec.set_attr(name, values)


_SHARD_COMMANDS: dict[str, Callable[[EventLoopVectorEnv, Any], Any]] = {
    "step": _shard_step,
    "step_infos": _shard_step_infos,
    "reset": _shard_reset,
    "call": _shard_call,
    "set_attr": _shard_set_attr,
}


T = TypeVar("T")
_SKIPPED = object()


def run_concurrently(
    jobs: Sequence[Callable[[], T]],
    *,
    concurrency: int,
    processes: int | None = None,
    context: str = "spawn",
) -> Generator[tuple[int, T | None, BaseException | None], None, None]:
    """Run the synchronous ``jobs`` (e.g. whole episodes) on orchenv's event loop, at most
    ``concurrency`` at once, each free to make live agent calls that overlap with the
    others' (no thread per job). Yields ``(index, result, None)`` or ``(index, None,
    exception)`` as each job ends, in the order they end.

    Unlike a vector env there is no barrier: a job that ends starts the next one, so the
    CPU work of one job overlaps the others' waits (what RL rollouts and ``orchenv eval
    --concurrency N`` need). Closing the iterator early starts no further job and waits
    for the running ones to end.

    ``processes=W`` (W > 1) runs the jobs in W worker processes instead (``context``
    start method), each an event loop running its share: job ``i`` goes to worker
    ``i % W``, and each worker runs at most ``ceil(concurrency / W)`` at once. Env code
    and the HTTP client then use W cores. Jobs are sent with ``cloudpickle`` (what they
    capture is copied into the worker: a captured pool becomes one pool per worker);
    results and exceptions come back pickled (one that does not pickle comes back as a
    ``RuntimeError`` with its text).
    """
    if isinstance(concurrency, bool) or not (isinstance(concurrency, int) and concurrency >= 1):
        raise ConfigError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if processes is not None and (
        isinstance(processes, bool) or not (isinstance(processes, int) and processes >= 1)
    ):
        raise ConfigError(f"processes must be an integer >= 1, got {processes!r}")
    if processes is not None and processes > 1 and len(jobs) > 1:
        return _run_in_processes(jobs, concurrency, min(processes, len(jobs)), context)
    return _run_on_loop(jobs, concurrency)


def _run_on_loop(
    jobs: Sequence[Callable[[], T]], concurrency: int
) -> Generator[tuple[int, T | None, BaseException | None], None, None]:
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


def _run_in_processes(
    jobs: Sequence[Callable[[], T]], concurrency: int, processes: int, context: str
) -> Generator[tuple[int, T | None, BaseException | None], None, None]:
    """``run_concurrently`` over ``processes`` worker processes (see there)."""
    from multiprocessing.connection import wait

    import cloudpickle

    ctx: Any = multiprocessing.get_context(context)
    per_worker = -(-concurrency // processes)
    conns: list[Any] = []
    workers: list[Any] = []
    try:
        for k in range(processes):
            share = [(i, jobs[i]) for i in range(k, len(jobs), processes)]
            parent, child = ctx.Pipe()
            worker = ctx.Process(
                target=_jobs_worker,
                args=(child, cloudpickle.dumps(share), per_worker),
                name=f"orchenv-jobs-{k}",
                daemon=True,
            )
            worker.start()
            child.close()
            conns.append(parent)
            workers.append(worker)
        running = list(conns)
        while running:
            ready: list[Any] = wait(running)  # type: ignore[assignment]
            for conn in ready:
                try:
                    message: Any = conn.recv()
                except (EOFError, OSError):
                    k = conns.index(conn)
                    raise RuntimeError(
                        f"run_concurrently worker {k} died (exit code {workers[k].exitcode})"
                    ) from None
                if message is None:  # that worker is done
                    running.remove(conn)
                elif len(message) == 2:
                    raise RuntimeError(f"run_concurrently worker failed: {message[1]}")
                else:
                    yield message
    finally:
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send("stop")  # an early close: start no further job
        for conn, worker in zip(conns, workers, strict=True):
            with contextlib.suppress(EOFError, OSError):
                while conn.recv() is not None:  # drain until the worker's running jobs end
                    pass
            worker.join(10)
            if worker.is_alive():
                worker.terminate()
                worker.join(5)
            conn.close()


def _jobs_worker(conn: Any, payload: bytes, concurrency: int) -> None:
    """A ``run_concurrently(processes=W)`` worker: runs its share of the jobs on its own
    loop, sends ``(index, result, exception)`` as each ends, then None (``("fatal", text)``
    when it cannot run them at all)."""
    import cloudpickle

    try:
        share = cloudpickle.loads(payload)
        indices = [i for i, _ in share]
        results = run_concurrently([job for _, job in share], concurrency=concurrency)
        try:
            for local, result, exc in results:
                try:
                    conn.send((indices[local], result, exc))
                except Exception as error:  # noqa: BLE001 - an unpicklable result or error
                    text = "".join(traceback.format_exception(exc or error))
                    conn.send((indices[local], None, RuntimeError(text)))
                if conn.poll() and conn.recv() == "stop":
                    break
        finally:
            results.close()
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        with contextlib.suppress(OSError):
            conn.send(("fatal", "".join(traceback.format_exception(exc))))
    with contextlib.suppress(OSError):
        conn.send(None)
        conn.close()


#: how ``make_vec`` steps its sub-environments
VECTOR_MODES = ("auto", "loop", "threads", "sync", "processes")
#: ``make_vec``'s default mode: ``"auto"`` picks the fastest mode that keeps
#: ``SyncVectorEnv``'s semantics on this machine (``auto_vector_mode``)
DEFAULT_VECTOR_MODE = "auto"
#: the fewest sub-envs for which ``"auto"`` shards live envs over worker processes: on the
#: 2-core sandbox, 256 envs against a 50 ms server step at 0.51 (0.50-0.52) of ideal in
#: ``ProcessVectorEnv`` and 0.44 (0.43-0.46) in ``EventLoopVectorEnv``; at 128 and below
#: processes were not faster (``benchmarks/README.md``), and starting workers costs seconds
PROCESS_MIN_ENVS = 256


logger = logging.getLogger(__name__)

#: what a spawned worker needs from the caller's script (said where workers die or are refused)
MAIN_GUARD_HINT = (
    "Worker processes are started with 'spawn', which re-imports your script: put the code "
    'that builds the vector env under `if __name__ == "__main__":` (or pass mode="loop")'
)
_GUARD_RE = re.compile(
    rb"^\s*if\s+(__name__\s*==\s*['\"]__main__['\"]|['\"]__main__['\"]\s*==\s*__name__)\s*:", re.M
)
#: the largest main script read to look for the guard
_MAIN_SOURCE_MAX_BYTES = 8 << 20


def main_is_guarded() -> bool:
    """Whether spawned workers can re-import ``__main__`` without re-running the caller's
    script: no script file (an interactive session, ``python -c``), or a script that has an
    ``if __name__ == "__main__":`` block (a static look at its source)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return True
    try:
        with open(path, "rb") as fh:
            source = fh.read(_MAIN_SOURCE_MAX_BYTES)
    except OSError:
        return True  # nothing to look at: let the workers say what happens
    return _GUARD_RE.search(source) is not None


def _is_pool(value: Any) -> bool:
    """Whether ``value`` is an ``orchenv.pool.AgentPool`` (by its name: ``orchenv.pool``
    imports the registry, which imports this module)."""
    return any(
        cls.__name__ == "AgentPool" and cls.__module__ == "orchenv.pool"
        for cls in type(value).__mro__
    )


def auto_vector_mode(env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> str:
    """The mode ``make_vec`` uses by default: ``"processes"`` when the sub-envs call live
    agents (an ``openai`` backend in their pool), there are at least ``PROCESS_MIN_ENVS``
    of them and more than one CPU; else ``"loop"``.

    Why: one Python process runs out of CPU at a few hundred live envs (env code and the
    HTTP client share one core), and worker processes use every core. Where processes
    would change what a run records, or gain nothing, the event loop stays: a pool that
    records (``record_to``: one file numbered by one process) or replays (no latency to
    overlap), simulated agents, or a pool that cannot be inspected. The pool is read
    from ``env_kwargs["pool"]`` when it is an ``AgentPool``, else from one env built
    (and closed) to look at its pool."""
    if num_envs < PROCESS_MIN_ENVS or (os.cpu_count() or 1) < 2:
        return "loop"
    pool: Any = env_kwargs.get("pool")
    probe = None
    if not _is_pool(pool):
        probe = gym.make(env_id, **env_kwargs)
        pool = getattr(probe.unwrapped, "pool", None)
    try:
        if not _is_pool(pool) or pool.record_to or pool.replay_from:
            return "loop"
        # a backend whose calls wait on a server says so (``orchenv.calltypes.Backend``)
        live = any(getattr(pool.backend_for(name), "live", False) is True for name in pool.names)
        return "processes" if live else "loop"
    finally:
        if probe is not None:
            probe.close()


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    threaded: bool | None = None,
    mode: str | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    num_workers: int | None = None,
    **env_kwargs: Any,
) -> VectorEnv:
    """``num_envs`` copies of ``env_id`` in a vector env (also what ``gym.make_vec`` builds
    for an orchenv id: ``vector_entry_point``).

    ``mode``: ``"auto"`` (default: ``"processes"`` for at least ``PROCESS_MIN_ENVS`` envs
    whose pool calls live agents on a machine with several CPUs, else ``"loop"``; see
    ``auto_vector_mode``; never processes when the caller's script has no
    ``if __name__ == "__main__":`` guard, which spawned workers need: a warning says so, and
    ``mode="processes"`` then raises ``ConfigError`` naming the guard: ``main_is_guarded``), ``"loop"`` (``EventLoopVectorEnv``: one thread, every live
    agent call of every sub-env in flight at once; steps of simulated or replayed envs run
    one after another as in ``SyncVectorEnv``), ``"processes"`` (``ProcessVectorEnv``:
    ``num_workers`` processes, default one per CPU, each an event loop over its shard: the
    fastest at hundreds of live envs; each worker holds its own copy of the pool and there
    is no ``vec.envs``), ``"threads"`` (``ThreadedVectorEnv``) or ``"sync"``
    (``SyncVectorEnv``). ``threaded`` (the older switch) picks ``"threads"`` (True) or
    ``"sync"`` (False) when ``mode`` is not given. Every mode returns what
    ``SyncVectorEnv`` returns for the same envs and seeds. Sub-envs built from a preset
    name each get their own pool; pass a built ``AgentPool`` as ``pool=`` to share one
    (and its connections and concurrency limits; with ``"processes"`` each worker shares
    its copy).
    """
    if mode is None:
        mode = DEFAULT_VECTOR_MODE if threaded is None else ("threads" if threaded else "sync")
    elif threaded is not None:
        raise ConfigError("pass either mode= or threaded=, not both")
    if mode not in VECTOR_MODES:
        raise ConfigError(f"unknown vector mode {mode!r}; choose one of {list(VECTOR_MODES)}")
    if num_workers is not None and mode != "processes":
        raise ConfigError(f"num_workers is for mode='processes', not mode={mode!r}")
    asked = mode
    if mode == "auto":
        mode = auto_vector_mode(env_id, num_envs, env_kwargs)
    if mode == "processes" and not main_is_guarded():
        script = getattr(sys.modules.get("__main__"), "__file__", "?")
        if asked == "processes":
            raise ConfigError(
                f"mode='processes' needs a main guard in {script!r}: {MAIN_GUARD_HINT}"
            )
        logger.warning(
            "make_vec: %d live envs would run faster in worker processes, but %s has no "
            '`if __name__ == "__main__":` guard, so the event loop is used. %s',
            num_envs,
            script,
            MAIN_GUARD_HINT,
        )
        mode = "loop"
    fns = [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)]
    if mode == "processes":
        return ProcessVectorEnv(fns, num_workers=num_workers, autoreset_mode=autoreset_mode)
    cls = {"loop": EventLoopVectorEnv, "threads": ThreadedVectorEnv, "sync": SyncVectorEnv}[mode]
    return cls(fns, autoreset_mode=autoreset_mode)


def vector_entry_point(env_id: str, num_envs: int, **kwargs: Any) -> VectorEnv:
    """What ``gym.make_vec(ID, n)`` builds for a registered orchenv id (its spec's
    ``vector_entry_point``, bound to the id): ``make_vec(ID, n, **kwargs)``, so the default
    is ``DEFAULT_VECTOR_MODE`` and ``mode=`` / ``autoreset_mode=`` / ``num_workers=`` go in
    the keyword arguments (Gymnasium refuses ``vector_kwargs`` for a vector entry point).
    ``gym.make_vec(ID, n, vectorization_mode="sync")`` still builds Gymnasium's own."""
    return make_vec(env_id, num_envs, **kwargs)
