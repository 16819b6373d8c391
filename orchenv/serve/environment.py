"""The OpenEnv ``Environment`` that one server session plays: an orchenv env, or one seat
of a multi-agent role game.

OpenEnv's ``HTTPEnvServer`` builds one instance per ``/ws`` session (and a throw-away one
for each stateless HTTP request); this module only adapts orchenv's Gymnasium and
PettingZoo views to OpenEnv's typed ``reset`` / ``step`` / ``state``.

Wire types (``OrchAction``, ``OrchObservation``, ``OrchState``) are pydantic models on
OpenEnv's base types. The seat scheme is an orchenv extension (OpenEnv 0.10 has no
multi-agent contract): a reset that names ``agent`` (a PettingZoo role) and ``group``
plays that role in the group's game; the server steps the game in AEC order, so a seat's
``step`` returns when that seat is to act again (or the game is over), with the team
reward earned since its last action. Groups have owners: the first reset of a group returns
its ``group_token`` (or takes the one the client chose), every other seat joins with it, and a
seat another session holds is refused, never restarted.

Fork (``state``'s ``snapshot``, a reset's ``injected_state``) is an opaque handle into the
server's table of episode recordings (``orchenv.serve.forks``): nothing of the env leaves
the server and nothing a client sends is unpickled. ``--sealed`` turns fork off.

``orchenv serve -v`` logs each session's resets, steps and closes (logger
``orchenv.serve.session``, INFO).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import itertools
import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
from fastapi import HTTPException
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

import orchenv
from orchenv.error import ConfigError, EnvStateError, UnknownNameError
from orchenv.registry import ENV_SUMMARIES, load_entry_point
from orchenv.serve.forks import MAX_RECORDING_CHARS, ForkTable, binding
from orchenv.serve.wire import safe_text, wire_safe

logger = logging.getLogger(__name__)
#: one line per reset, step and close at INFO (``orchenv serve -v``)
session_log = logging.getLogger("orchenv.serve.session")

#: env id prefix -> (PettingZoo AEC factory, the role game class whose arguments it takes)
SEAT_VIEWS: dict[str, tuple[str, str]] = {
    "orch/MultihopQA": (
        "orchenv.envs.multihopqa.env:multihopqa_aec_env",
        "orchenv.envs.multihopqa.env:MultihopQAGame",
    ),
    "orch/WebShop-v0": (
        "orchenv.envs.webshop.roles:webshop_aec_env",
        "orchenv.envs.webshop.roles:WebShopRoleGame",
    ),
    "orch/ALFWorld": (
        "orchenv.envs.alfworld.roles:alfworld_aec_env",
        "orchenv.envs.alfworld.roles:ALFWorldRoleGame",
    ),
}
_RESET_ARGS: tuple[str, ...] = (
    "seed",
    "episode_id",
    "agent",
    "group",
    "group_token",
    "injected_state",
    "split",
    "index",
    "task_id",
    "options",
)


class OrchAction(Action):
    """One controller (or seat) turn: the text the env parses."""

    text: str = Field(description="the action text (the env's own format, e.g. a tool tag)")


class OrchObservation(Observation):
    """The env's text prompt and its ``info`` (JSON-safe, without ``privileged``);
    ``reward``, ``terminated`` and ``truncated`` as Gymnasium's (``done`` = either)."""

    prompt: str = Field(default="", description="the observation text")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info")
    terminated: bool = Field(default=False)
    truncated: bool = Field(default=False)
    agent: str | None = Field(default=None, description="the seat this session plays")
    group_token: str | None = Field(
        default=None,
        description="a seat reset's group token: the other seats join the group with it",
    )


class OrchState(State):
    """Where the session's episode stands; ``snapshot`` is the ``injected_state`` a reset
    takes to continue from here (the ``set_state`` capability: ``env.fork()`` semantics): an
    opaque, expiring handle into the server's fork table, ``None`` on a sealed server, for
    seats, before the first reset, and for an episode whose actions exceed the table's
    bound (``fork`` says which)."""

    env_id: str = ""
    seed: int | None = None
    task_id: str | None = None
    turn: int = 0
    done: bool = False
    agent: str | None = None
    group: str | None = None
    snapshot: str | None = None
    fork: str = Field(default="", description="why snapshot is None, when it is")
    worker: int = Field(default=0, description="the server process holding this session")


@dataclass
class ServeConfig:
    """What ``orchenv serve`` was asked for (one per server; every worker gets a copy)."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    pool: str | None = None
    split: str | None = None
    record: str | None = None
    replay: str | None = None
    replay_mode: str = "strict"
    seed: int | None = None
    max_sessions: int = 64
    workers: int = 1
    idle_timeout_s: float | None = 600.0
    seat_timeout_s: float = 60.0
    #: no fork: state carries no snapshot and reset takes no injected_state (sealed evaluation)
    sealed: bool = False
    #: how long a fork handle lives, and how many the table holds (per server)
    fork_ttl_s: float = 600.0
    fork_capacity: int = 4096
    #: the private folder the workers share fork handles through (``--workers N``; set by serve)
    fork_dir: str | None = None
    #: HTTP MCP sessions (``openenv/session/create`` on ``POST /mcp``); off unless asked
    mcp: bool = False
    #: log each session's resets, steps and closes (``-v``; every worker process)
    verbose: bool = False
    #: step on the event loop (no thread hop per message): for CPU-only envs
    inline: bool = False
    #: permessage-deflate on the WebSocket (off: CPU is scarcer than bandwidth on a cluster)
    ws_deflate: bool = False
    #: refereed play (``--referee BOARD --key FILE --runs DIR``; ``orchenv.serve.referee``):
    #: the board file, the maintainer's key file and the folder the signed records go to
    referee_board: str | None = None
    referee_key: str | None = None
    referee_runs: str | None = None
    #: the one submission name the referee accepts (sandboxed re-execution); None: any
    referee_name: str | None = None
    #: a board's private task file (``--task-file``; boards whose sealed plan names one)
    referee_task_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def env_arguments(self) -> dict[str, Any]:
        """What decides the served env's behaviour (fork handles are bound to it)."""
        keys = ("env_kwargs", "pool", "split", "record", "replay", "replay_mode")
        return {k: self.__dict__[k] for k in keys}


class _SeatGroup:
    """One role game played by several sessions (one per role)."""

    def __init__(self, aec: Any, token: str) -> None:
        self.aec = aec
        self.token = token
        self.cond = threading.Condition()
        self.generation = 0
        self.joined: set[str] = set()
        self.present: set[str] = set()
        self.left: str | None = None
        self.touched = time.monotonic()

    @property
    def over(self) -> bool:
        return bool(self.aec.game.done or self.aec.game.truncated)


class Runtime:
    """Per-process state shared by the sessions of one worker: the config, the shared pool
    (record / replay), the seat groups, the session counter."""

    def __init__(self, config: ServeConfig, referee: Any = None) -> None:
        """``referee``: the board's ``orchenv.serve.referee.Referee`` when serving refereed
        play (built by ``build_app``, so this module does not import the referee's)."""
        self.config = config
        self.spec = gym.spec(config.env_id)
        self.forks: ForkTable | None = None
        self.referee: Any = referee
        if referee is not None:
            config.sealed = True  # a referee never forks
        if not config.sealed:
            self.forks = ForkTable(
                binding(config.env_id, config.env_arguments(), orchenv.__version__),
                capacity=config.fork_capacity,
                ttl_s=config.fork_ttl_s,
                folder=config.fork_dir,
            )
        self._probe: Any = None  # one env per worker for the task API (never a session's)
        self.pool: Any = None
        self.groups: dict[str, _SeatGroup] = {}
        self.lock = threading.Lock()
        self.counter = itertools.count()

    def env_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.config.env_kwargs)
        if self.config.split:
            kwargs["split"] = self.config.split
        if self.config.record or self.config.replay:
            with self.lock:
                if self.pool is None:  # one pool per worker: one recorder per file
                    from orchenv.pool import make_pool

                    self.pool = make_pool(
                        self.config.pool or self.spec.kwargs.get("pool", "system1"),
                        backend=kwargs.pop("backend", None),
                        backend_kwargs=kwargs.pop("backend_kwargs", None),
                        record_to=self.config.record,
                        replay_from=self.config.replay,
                        replay_mode=self.config.replay_mode,
                    )
            kwargs.pop("backend", None)
            kwargs.pop("backend_kwargs", None)
            kwargs["pool"] = self.pool
        elif self.config.pool:
            kwargs["pool"] = self.config.pool
        return kwargs

    def make_env(self) -> Any:
        if self.referee is not None:
            return self.referee.make_env().unwrapped
        return gym.make(self.config.env_id, **self.env_kwargs()).unwrapped

    def task_source(self) -> Any:
        """The task API's source: one env per worker, built once (the task API never builds
        an env per request, so it cannot be used to go around ``--max-sessions``)."""
        with self.lock:
            if self._probe is None:
                self._probe = self.make_env()
            return self._probe.task_source

    def seat_view(self) -> tuple[str, str] | None:
        for prefix, view in SEAT_VIEWS.items():
            if self.config.env_id.startswith(prefix):
                return view
        return None

    def make_aec(self) -> Any:
        view = self.seat_view()
        if view is None:
            raise ConfigError(
                f"{self.config.env_id} has no multi-agent view: reset without 'agent' (seats "
                f"exist for {', '.join(sorted(SEAT_VIEWS))}*)"
            )
        factory, game_cls = load_entry_point(view[0]), load_entry_point(view[1])
        accepted = set(inspect.signature(game_cls.__init__).parameters) - {"self"}
        unknown = sorted(set(self.config.env_kwargs) - accepted)
        if unknown:
            raise ConfigError(
                f"the role game of {self.config.env_id} does not take {unknown}; it takes "
                f"{sorted(accepted)}"
            )
        kwargs = {k: v for k, v in self.spec.kwargs.items() if k in accepted}
        kwargs.update(self.config.env_kwargs)
        if self.config.split and "split" in accepted:
            kwargs["split"] = self.config.split
        return factory(**kwargs)

    def join(
        self, group_id: str, role: str, seed: int | None, options: dict, token: str | None
    ) -> tuple:
        """Seat ``role`` in ``group_id``'s game (a new game when the role already played the
        current one or the game is over); returns (group, generation).

        A new group takes ``token`` (or a random one) as its token; joining an existing group
        needs that token, and a seat another session holds is refused."""
        with self.lock:
            self._expire()
            group = self.groups.get(group_id)
        if group is None:
            aec = self.make_aec()  # outside the lock: building a game may load data
            if role not in aec.possible_agents:  # checked before the group exists
                raise UnknownNameError("seat (agent)", role, aec.possible_agents)
            with self.lock:
                if group_id not in self.groups and len(self.groups) >= self.config.max_sessions:
                    raise ConfigError(
                        f"too many seat groups ({len(self.groups)}); finish or close one first"
                    )
                mine = _SeatGroup(aec, token or secrets.token_urlsafe(24))
                group = self.groups.setdefault(group_id, mine)
            if group is mine:
                token = group.token
        if not isinstance(token, str) or not hmac.compare_digest(
            token.encode("utf-8", "backslashreplace"), group.token.encode()
        ):
            raise ConfigError(
                f"group {safe_text(group_id)[:80]!r} exists and belongs to the sessions that "
                "hold its token: join it with group_token= (the token its first reset "
                "returned), or pick another group id"
            )
        if role not in group.aec.possible_agents:
            raise UnknownNameError("seat (agent)", role, group.aec.possible_agents)
        with group.cond:
            if role in group.present:
                free = sorted(set(group.aec.possible_agents) - group.present)
                raise ConfigError(
                    f"seat {role!r} of group {safe_text(group_id)[:80]!r} is taken by another "
                    f"session; free seats: {free}"
                )
            if role in group.joined or group.over or group.left is not None or not group.generation:
                group.aec.reset(seed=seed, options=options)
                group.generation += 1
                group.joined = set()
                group.left = None
            group.joined.add(role)
            group.present.add(role)
            group.touched = time.monotonic()
            group.cond.notify_all()
            return group, group.generation

    def leave(self, group_id: str, role: str) -> None:
        with self.lock:
            group = self.groups.get(group_id)
            if group is None:
                return
            with group.cond:
                group.present.discard(role)
                if not group.over:
                    group.left = role
                group.cond.notify_all()
                if not group.present:
                    del self.groups[group_id]

    def _expire(self) -> None:
        limit = self.config.idle_timeout_s
        if limit is None:
            return
        now = time.monotonic()
        for gid in [g for g, grp in self.groups.items() if now - grp.touched > limit]:
            del self.groups[gid]


class OrchServeEnvironment(Environment[OrchAction, OrchObservation, OrchState]):
    """One session: an orchenv env (built at the first reset), or a seat of a role game.

    The class served is a subclass made by ``orchenv.serve.app.build_app`` with
    ``runtime`` set (OpenEnv takes a class; its instances are the sessions).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    runtime: ClassVar[Runtime]

    def __init__(self) -> None:
        super().__init__()
        self._env: Any = None
        self._index = next(self.runtime.counter)
        self._resets = 0
        self._seed: int | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._last: dict[str, Any] | None = None
        self._seat: tuple[str, str] | None = None  # (group, role)
        self._generation = 0
        self._group_token: str | None = None
        self._seat_group: str | None = None
        self._closed = False
        # the episode's recording (what a fork handle replays); None: nothing to fork
        self._recording: dict[str, Any] | None = None
        self._fork_note = "no episode yet: reset first"
        self._minted: tuple[int, str] | None = None  # (actions recorded, handle)

    # -- OpenEnv API ---------------------------------------------------------------------------
    def reset(  # type: ignore[override]
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        agent: str | None = None,
        group: str | None = None,
        group_token: str | None = None,
        injected_state: str | None = None,
        split: str | None = None,
        index: int | None = None,
        task_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> OrchObservation:
        self._check_open()
        if kwargs:
            raise ConfigError(
                f"unknown reset argument(s) {[safe_text(str(k))[:80] for k in sorted(kwargs)][:8]}; "
                f"reset takes {list(_RESET_ARGS)}"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"seed must be an int, got {type(seed).__name__}")
        if seed is not None and not 0 <= seed < 2**63:
            raise ConfigError("seed must be in [0, 2**63)")
        if options is not None and not isinstance(options, dict):
            raise ConfigError("options must be an object")
        for name, value, kind in (
            ("episode_id", episode_id, str),
            ("split", split, str),
            ("task_id", task_id, str),
            ("index", index, int),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ConfigError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
        if episode_id is not None and len(episode_id) > 200:
            raise ConfigError("episode_id is at most 200 characters")
        opts = dict(options or {})
        if index is not None:
            opts["task_index"] = index
        if task_id is not None:
            opts["task_id"] = task_id
        if seed is None and self._resets == 0 and self.runtime.config.seed is not None:
            seed = self.runtime.config.seed + self._index  # the per-session seed
        self._resets += 1
        self._seed, self._episode_id, self._steps = seed, episode_id, 0
        if self._seat is not None:
            self.runtime.leave(*self._seat)
            self._seat = None
        if agent is not None or group is not None:
            if injected_state is not None:
                raise ConfigError("injected_state is not supported for seats (agent=)")
            if group_token is not None and not isinstance(group_token, str):
                raise ConfigError("group_token must be a string")
            return self._seat_reset(agent, group, seed, opts, group_token)
        if group_token is not None:
            raise ConfigError("group_token is for seats: reset with agent= and group=")
        if injected_state is not None:
            return self._restore(injected_state)
        if self._env is None:
            self._env = self.runtime.make_env()
        env = self._env
        if split is not None:
            env.task_source.check_split(split)
            env.split = split
        # a fork replays this reset: the seed is always explicit (drawn when none was given)
        used_seed = seed if seed is not None else secrets.randbelow(2**63)
        lifetime = env.lifetime_state()
        obs, info = env.reset(seed=used_seed, options=opts)
        self._start_recording(env, used_seed, opts, lifetime)
        self._last = {"prompt": obs, "info": info, "reward": 0.0, "seed": seed}
        self._last.update(terminated=False, truncated=False)
        if session_log.isEnabledFor(logging.INFO):
            session_log.info(
                "session %d reset %d: seed=%s task=%s",
                self._index,
                self._resets,
                seed,
                getattr(getattr(env, "task", None), "id", None),
            )
        return self._observation(self._last)

    # -- fork: recordings and handles -------------------------------------------------------------
    def _start_recording(
        self, env: Any, used_seed: int, opts: dict[str, Any], lifetime: Any
    ) -> None:
        self._minted = None
        if self.runtime.forks is None:
            self._recording, self._fork_note = None, "this server is sealed (--sealed)"
            return
        try:  # JSON only (the table never holds objects); a copy, detached from the env
            frozen = json.loads(json.dumps({"options": opts, "lifetime": lifetime}))
        except (TypeError, ValueError) as exc:
            self._recording = None
            self._fork_note = f"this episode's reset options are not JSON ({exc})"
            return
        self._recording = {
            "seed": used_seed,
            "split": getattr(env, "split", None),
            **frozen,
            "actions": [],
            "chars": 0,
        }
        self._fork_note = ""

    def _record(self, text: str) -> None:
        recording = self._recording
        if recording is None:
            return
        recording["chars"] += len(text)
        if recording["chars"] > MAX_RECORDING_CHARS:
            self._recording = None
            self._fork_note = (
                f"this episode's actions exceed {MAX_RECORDING_CHARS:,} characters, the fork "
                "table's bound per episode"
            )
            return
        recording["actions"].append(text)

    def _fork_handle(self) -> str | None:
        forks, recording = self.runtime.forks, self._recording
        if forks is None or recording is None or self._seat is not None or self._closed:
            return None
        done = len(recording["actions"])
        if self._minted is not None and self._minted[0] == done:
            return self._minted[1]  # nothing played since: the same handle
        frozen = {k: v for k, v in recording.items() if k not in ("chars", "actions")}
        frozen["actions"] = list(recording["actions"])  # a copy: the session plays on
        handle = forks.put(frozen)
        self._minted = (done, handle)
        return handle

    def _restore(self, handle: Any) -> OrchObservation:
        """Replay the recording behind ``handle`` on this session's env (fork)."""
        forks = self.runtime.forks
        if forks is None:
            raise ConfigError(
                "fork is off on this server (orchenv serve --sealed): state carries no "
                "snapshot and reset takes no injected_state"
            )
        recording = forks.get(handle)
        if self._env is None:
            self._env = self.runtime.make_env()
        env = self._env
        if recording.get("split") is not None:
            env.split = recording["split"]
        env.load_lifetime_state(recording.get("lifetime"))
        options = dict(recording.get("options") or {})
        obs, info = env.reset(seed=recording["seed"], options=options)
        self._start_recording(env, recording["seed"], options, recording.get("lifetime"))
        last: dict[str, Any] = {"prompt": obs, "info": info, "reward": 0.0}
        last.update(terminated=False, truncated=False)
        for text in recording.get("actions", []):
            obs, reward, terminated, truncated, info = env.step(text)
            self._record(text)
            last = {"prompt": obs, "info": info, "reward": reward}
            last.update(terminated=terminated, truncated=truncated)
        self._steps = len(recording.get("actions", []))
        self._seed = recording["seed"]
        last["seed"] = self._seed
        self._last = last
        session_log.info(
            "session %d restored a fork (%d actions replayed)", self._index, self._steps
        )
        return self._observation(last)

    def step(  # type: ignore[override]
        self, action: OrchAction, timeout_s: float | None = None, **kwargs: Any
    ) -> OrchObservation:
        self._check_open()
        if self._seat is not None:
            return self._seat_step(action.text)
        if self._env is None or self._last is None:
            raise HTTPException(
                status_code=409,
                detail=(
                    "no episode in this session: send a reset first. Episodes live in /ws "
                    "sessions (openenv's EnvClient / GenericEnvClient); the stateless POST "
                    "/step builds a fresh env for each request, so it can never step one"
                ),
            )
        obs, reward, terminated, truncated, info = self._env.step(action.text)
        self._record(action.text)
        self._steps += 1
        self._last = {"prompt": obs, "info": info, "reward": reward, "seed": self._seed}
        self._last.update(terminated=terminated, truncated=truncated)
        if session_log.isEnabledFor(logging.INFO):
            session_log.info(
                "session %d step %d: reward=%s done=%s",
                self._index,
                self._steps,
                reward,
                terminated or truncated,
            )
        return self._observation(self._last)

    @property
    def state(self) -> OrchState:
        env = self._env
        snapshot = self._fork_handle() if self._last is not None else None
        note = "" if snapshot else (self._fork_note or "seats do not fork")
        if self._seat is not None:
            note = "seats do not fork"
        task = getattr(env, "task", None)
        return OrchState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.runtime.config.env_id,
            seed=self._seed,
            task_id=getattr(task, "id", None),
            turn=int(getattr(env, "turn", 0) or 0),
            done=bool(self._last and (self._last["terminated"] or self._last["truncated"])),
            agent=self._seat[1] if self._seat else None,
            group=self._seat[0] if self._seat else None,
            snapshot=snapshot,
            fork=note,
            worker=os.getpid(),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        env_id = self.runtime.config.env_id
        seats = (
            " Seats (reset with agent=, group=): multi-agent roles."
            if self.runtime.seat_view()
            else ""
        )
        return EnvironmentMetadata(
            name=env_id,
            description=f"{ENV_SUMMARIES.get(env_id, env_id)} (orchenv serve).{seats}",
            version=orchenv.__version__,
            author="orchenv",
            documentation_url="docs/serve.md",
        )

    def close(self) -> None:
        if not self._closed and (self._resets or self._steps):
            session_log.info(
                "session %d closed after %d reset(s), %d step(s) in its last episode",
                self._index,
                self._resets,
                self._steps,
            )
        if self._seat is not None:
            self.runtime.leave(*self._seat)
            self._seat = None
        if self._env is not None and not self._closed:
            self._env.close()
        self._closed = True

    # -- the task API (OpenEnv TaskProvider) -----------------------------------------------------
    def _tasks(self) -> Any:
        return self.runtime.task_source()

    def list_splits(self) -> list[str]:
        return list(self._tasks().splits)

    def num_tasks(self, split: str) -> int:
        return int(self._tasks().size(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        source = self._tasks()
        if not 0 <= index < source.size(split):
            raise IndexError(index)
        return {"id": source.get(split, index).id, "index": index, "split": split}

    def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        size = self._tasks().size(split)
        lo, hi, _ = slice(start, stop).indices(size)
        return [self.get_task(split, i) for i in range(lo, min(hi, lo + 10_000))]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.get_task_range(split, 0, 1000)  # a bounded preview; num_tasks is the total

    # -- seats -------------------------------------------------------------------------------------
    def _seat_reset(
        self,
        agent: Any,
        group: Any,
        seed: int | None,
        opts: dict[str, Any],
        token: str | None = None,
    ) -> OrchObservation:
        if self.runtime.config.workers > 1:
            raise ConfigError(
                "seats need every seat of a group in one process: serve with --workers 1"
            )
        if not isinstance(agent, str) or not isinstance(group, str) or not agent or not group:
            raise ConfigError("a seat reset names both 'agent' (a role) and 'group' (strings)")
        if len(group) > 200:
            raise ConfigError("group ids are at most 200 characters")
        if token is not None and not 16 <= len(token) <= 200:
            raise ConfigError("a group_token is 16 to 200 characters (a secret the seats share)")
        if token is None and self._group_token is not None and self._seat_group == group:
            token = self._group_token  # this session's own group: it holds the token
        grp, generation = self.runtime.join(group, agent, seed, opts, token)
        self._seat, self._generation = (group, agent), generation
        self._seat_group, self._group_token = group, grp.token
        session_log.info("session %d took seat %r of group %r", self._index, agent, group)
        return self._seat_wait(grp, agent, announce=True)

    def _seat_step(self, text: str) -> OrchObservation:
        assert self._seat is not None
        group_id, role = self._seat
        grp = self.runtime.groups.get(group_id)
        if grp is None:
            raise EnvStateError(f"seat group {group_id!r} is gone; reset to start a new game")
        with grp.cond:
            self._check_generation(grp)
            if grp.over:
                raise EnvStateError("the game is over: reset to play again")
            if grp.aec.agent_selection != role:
                raise EnvStateError(
                    f"not {role!r}'s turn ({grp.aec.agent_selection!r} acts now); a seat steps "
                    "once per reply it got"
                )
            grp.aec.step(text)
            grp.touched = time.monotonic()
            self._steps += 1
            grp.cond.notify_all()
        return self._seat_wait(grp, role)

    def _check_generation(self, grp: _SeatGroup) -> None:
        if grp.generation != self._generation:
            raise EnvStateError("another seat restarted this group's game: reset to join it")
        if grp.left is not None and not grp.over:
            raise EnvStateError(f"seat {grp.left!r} left the game; reset to start a new one")

    def _seat_wait(self, grp: _SeatGroup, role: str, announce: bool = False) -> OrchObservation:
        """Block until ``role`` acts next or the game ends, then observe it."""
        deadline = time.monotonic() + self.runtime.config.seat_timeout_s
        with grp.cond:
            while True:
                self._check_generation(grp)
                if grp.over or grp.aec.agent_selection == role:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EnvStateError(
                        f"timed out after {self.runtime.config.seat_timeout_s:g}s waiting for "
                        f"seat {grp.aec.agent_selection!r} to act (seats: "
                        f"{grp.aec.possible_agents}; joined: {sorted(grp.joined)})"
                    )
                grp.cond.wait(min(left, 1.0))
            aec = grp.aec
            over = grp.over
            last = {
                "prompt": aec.game.observe(role),
                "info": dict(aec.infos.get(role, {})),
                "reward": float(aec._cumulative_rewards.get(role, 0.0)),
                "terminated": bool(aec.terminations.get(role, False)) or bool(aec.game.done),
                "truncated": bool(aec.truncations.get(role, False)) or (over and not aec.game.done),
                "seed": self._seed,
            }
        self._last = last
        return self._observation(last, agent=role, group_token=grp.token if announce else None)

    # -- helpers -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise EnvStateError(
                "this session was closed (idle longer than the server's --idle-timeout, or "
                "shut down): open a new one"
            )

    @staticmethod
    def _observation(
        last: Mapping[str, Any], agent: str | None = None, group_token: str | None = None
    ) -> OrchObservation:
        terminated, truncated = bool(last["terminated"]), bool(last["truncated"])
        reward = float(last["reward"])
        info = wire_safe(last["info"])
        if type(info) is not dict:  # an env whose info is not a dict (never, in orchenv)
            info = {"info": info}
        # every field is built here with its declared type (wire_safe gives plain JSON),
        # so pydantic's validation would only copy the info again: construct directly
        return OrchObservation.model_construct(
            prompt=safe_text(str(last["prompt"])),
            info=info,
            reward=reward if math.isfinite(reward) else None,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            agent=agent,
            group_token=group_token,
            metadata={},
        )


# OpenEnv calls ``inspect.signature(session.reset)`` on every reset message to pick the
# arguments it passes; computing it from the function each time cost ~45 us per reset
# (profiled, issue 29). ``inspect`` reads a function's ``__signature__`` first.
OrchServeEnvironment.reset.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    OrchServeEnvironment.reset
)


class InlineOrchServeEnvironment(OrchServeEnvironment):
    """``--inline``: reset and step run on the server's event loop instead of hopping to the
    session's thread (OpenEnv awaits ``reset_async`` / ``step_async`` when a class overrides
    them). Saves the hop's CPU for envs whose step is CPU work (simulated or replayed
    agents; throughput: benchmarks/README.md);
    a live backend's network wait would stall every session of the worker, so do not use it
    there. Seats always wait in a thread (they block until the other seats act)."""

    async def reset_async(  # type: ignore[override]
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> OrchObservation:
        if kwargs.get("agent") is not None or kwargs.get("group") is not None:
            return await asyncio.to_thread(self.reset, seed, episode_id, **kwargs)
        return self.reset(seed, episode_id, **kwargs)

    async def step_async(  # type: ignore[override]
        self, action: OrchAction, timeout_s: float | None = None, **kwargs: Any
    ) -> OrchObservation:
        if self._seat is not None:
            return await asyncio.to_thread(self.step, action)
        return self.step(action)
