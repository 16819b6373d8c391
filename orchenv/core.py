"""``OrchestrationEnv``: the base every orchenv environment shares.

It owns what is the same everywhere: text spaces, the turn counter and
transcript, metering of agent calls, the info schema, invalid-action
bookkeeping, ``fork()`` for tree rollouts, and guarding against use out of
order. Subclasses implement ``_reset_episode`` and ``_step_episode``.

Info schema (every step; see DESIGN.md): ``messages``, ``cost_usd``,
``tokens``, ``episode_cost_usd``, ``agent_calls``, ``constraint_costs``,
``valid_agents``, ``invalid_action``, ``parse_error``, ``turn``, ``calls`` (one
record per agent call this step: agent, tokens, how they were counted, cost,
latency, cached/replayed); at the
episode's end also ``task_id``, ``final_answer``, ``correct`` or ``score``,
``turns``. ``info["privileged"]`` holds ground truth (e.g. whether a draft
was right) for analysis and trainers' metrics; policies must not read it.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from orchenv.error import EnvStateError
from orchenv.pool import AgentPool, CallContext, Completion, Message, UsageMeter
from orchenv.spaces import AnyText


class OrchestrationEnv(gym.Env[str, str], ABC):
    """Text-in, text-out environment around an agent pool.

    Subclasses set ``self.pool`` (lazily is fine) and implement
    ``_reset_episode(options) -> (obs, info_extra)`` and
    ``_step_episode(action) -> (obs, reward, terminated, truncated, info_extra)``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012
    #: attributes that ``fork()`` shares instead of copying (backends, datasets)
    _shared_attrs: ClassVar[tuple[str, ...]] = ("_pool", "_task_source")

    def __init__(self, *, max_obs_chars: int = 1_000_000, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode {render_mode!r} is not supported; use one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self.observation_space = AnyText(max_length=max_obs_chars)
        self.action_space = AnyText(max_length=max_obs_chars)
        self.max_obs_chars = max_obs_chars
        self._pool: AgentPool | None = None
        self._task_source: Any = None
        self._started = False
        self._done = False
        self.turn = 0
        self.transcript: list[dict[str, Any]] = []
        self.meter = UsageMeter()
        self._step_meter = UsageMeter()
        self._step_calls: list[dict[str, Any]] = []
        self._consulted: list[Completion] = []
        self.task: Any = None  # the current Task; subclasses set it in _reset_episode
        self._last_obs = ""
        self._last_messages: list[Message] = []

    # -- subclass hooks -------------------------------------------------------
    @abstractmethod
    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start an episode; return the first observation and env-specific info."""

    @abstractmethod
    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one controller action (always a str); never raise on malformed text."""

    @abstractmethod
    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed action for the current state.

        Used by the shared test suite (determinism, ``fork()``), by docs and by smoke tests
        of new envs: every env says what a valid move looks like.
        """

    def valid_agents(self) -> list[str]:
        """Agents the controller may call now (drives action masks)."""
        return list(self.pool.names) if self._pool is not None else []

    @property
    def pool(self) -> AgentPool:
        if self._pool is None:
            raise EnvStateError("this environment has no agent pool yet; call reset() first")
        return self._pool

    # -- Gymnasium API --------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._started, self._done = True, False
        self.turn = 0
        self.transcript = []
        self.meter = UsageMeter()
        self._step_meter = UsageMeter()
        self._step_calls = []
        self._consulted = []
        obs, extra = self._reset_episode(dict(options or {}))
        return self._finish(obs, extra, invalid=False, parse_error=None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise EnvStateError("step() called before reset(); call env.reset() first")
        if self._done:
            raise EnvStateError(
                "step() called after the episode ended (terminated or truncated); call reset()"
            )
        self._step_meter = UsageMeter()
        self._step_calls = []
        for completion in self._consulted:  # calls the controller made since the last step
            self._step_meter.record(completion)
            self._step_calls.append({**self._call_record(completion), "consult": True})
        self._consulted = []
        if not isinstance(action, str):
            action = "" if action is None else f"<non-text action of type {type(action).__name__}>"
        obs, reward, terminated, truncated, extra = self._step_episode(action)
        self._done = terminated or truncated
        invalid = bool(extra.pop("invalid_action", False))
        parse_error = extra.pop("parse_error", None)
        obs, info = self._finish(obs, extra, invalid=invalid, parse_error=parse_error)
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = []
        for entry in self.transcript:
            lines.append(f"[turn {entry.get('turn')}] {entry.get('role')}: {entry.get('text', '')}")
        return "\n".join(lines)

    # -- helpers for subclasses -------------------------------------------------
    def call_agent(
        self, name: str, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """Call a pool agent, meter it for this step and the episode, log it in the transcript."""
        completion = self.pool.call(name, messages, context)
        self.meter.record(completion)
        self._step_meter.record(completion)
        self._step_calls.append(self._call_record(completion))
        self.transcript.append(
            {
                "turn": self.turn,
                "role": name,
                "text": completion.text,
                "cost_usd": completion.cost_usd,
            }
        )
        return completion

    def pick_task(self, options: Mapping[str, Any]) -> Any:
        """The episode's task: ``options["task_id"]``, ``options["task_index"]`` into
        ``self.split``, or a draw from the split with the env's ``np_random``.

        For envs with a ``task_source`` property and a ``split`` attribute.
        """
        source = self.task_source  # type: ignore[attr-defined]
        split = self.split  # type: ignore[attr-defined]
        if "task_id" in options:
            return source.by_id(str(options["task_id"]))
        if "task_index" in options:
            return source.get(split, int(options["task_index"]))
        return source.sample(split, self.np_random)

    @staticmethod
    def render_messages(messages: Sequence[Message]) -> str:
        """Chat messages as the one-string observation (contents joined by blank lines)."""
        return "\n\n".join(m["content"] for m in messages)

    @staticmethod
    def _call_record(completion: Completion) -> dict[str, Any]:
        return {
            "agent": completion.agent,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "token_source": completion.token_source,
            "cost_usd": completion.cost_usd,
            "latency_s": completion.latency_s,
            "cached": completion.cached,
        }

    def consult(self, name: str, messages: Sequence[Message]) -> Completion:
        """Call a pool agent on the controller's behalf (a verifier, self-consistency samples).

        For controllers that use pool agents outside the env's action protocol, e.g. a
        cascade whose verifier is an agent. The call is charged to the episode (cost,
        tokens, ``agent_calls``) and reported in the next step's ``info["calls"]`` with
        ``"consult": True`` and in its ``constraint_costs``, so such controllers are
        compared on equal terms.
        """
        if not self._started or self._done:
            raise EnvStateError("consult() needs an episode in progress; call reset() first")
        context = CallContext(task=self.task, turn=self.turn)
        completion = self.pool.call(name, messages, context)
        self.meter.record(completion)
        self._consulted.append(completion)
        self.transcript.append(
            {"turn": self.turn, "role": f"{name} (consulted)", "text": completion.text}
        )
        return completion

    def constraint_costs(self) -> np.ndarray:
        """Per-agent call indicator (counts) for this step, in pool order (weakest first)."""
        if self._pool is None:
            return np.zeros(0, dtype=np.float32)
        calls = self._step_meter.calls
        return np.array([calls.get(n, 0) for n in self._pool.names], dtype=np.float32)

    def _truncate_obs(self, obs: str) -> str:
        if len(obs) <= self.max_obs_chars:
            return obs
        marker = "\n[... truncated ...]\n"
        keep = self.max_obs_chars - len(marker)
        return obs[: keep // 2] + marker + obs[-(keep - keep // 2) :]

    def _finish(
        self, obs: str, extra: dict[str, Any], *, invalid: bool, parse_error: str | None
    ) -> tuple[str, dict[str, Any]]:
        obs = self._truncate_obs(obs)
        messages = extra.pop("messages", None) or [{"role": "user", "content": obs}]
        info: dict[str, Any] = {
            "messages": messages,
            "turn": self.turn,
            "cost_usd": self._step_meter.cost_usd,
            "tokens": {
                "prompt": self._step_meter.prompt_tokens,
                "completion": self._step_meter.completion_tokens,
            },
            "episode_cost_usd": self.meter.cost_usd,
            "agent_calls": dict(self.meter.calls),
            "calls": list(self._step_calls),
            "constraint_costs": self.constraint_costs(),
            "valid_agents": [] if self._done else self.valid_agents(),
            "invalid_action": invalid,
            "parse_error": parse_error,
        }
        info.update(extra)
        self._last_obs, self._last_messages = obs, messages
        return obs, info

    # -- tree rollouts -----------------------------------------------------------
    def fork(self) -> OrchestrationEnv:
        """An independent copy in the same state, sharing the pool's backends and the tasks.

        Stepping the copy never affects this env; identical actions from identical
        states give identical results (with simulated or replayed agents).
        """
        shared = {name: getattr(self, name, None) for name in self._shared_attrs}
        memo: dict[int, Any] = {id(v): v for v in shared.values() if v is not None}
        clone = copy.copy(self)
        clone.__dict__ = copy.deepcopy(self.__dict__, memo)
        return clone
