"""An agent loop for verl (0.9.x, ``verl.experimental.agent_loop``) that plays orchenv envs.

Registered as ``orchenv`` (set ``actor_rollout_ref.rollout.agent.default_agent_loop=orchenv``
or give dataset rows ``agent_name: orchenv``). One call of ``run`` is one episode, one
trajectory for verl:

1. the env comes from the row: ``extra_info["orch"]`` holds ``env_id``, ``env_kwargs`` (a
   JSON object string: pool preset or pool file, ``max_turns`` ...), ``split``,
   ``task_id``, ``seed`` and ``reset_options`` (JSON; BudgetRoute's ``budget_mode``), as
   ``orchenv.integrations.verl_data.verl_rows`` writes them; loop-level
   defaults come from the agent-loop config file (``env_id``, ``env_kwargs``, ...);
2. the env's reset ``info["messages"]`` through the tokenizer's chat template are the
   prompt ids; each turn the server manager generates from the token ids so far (token ids
   in, token ids out, one sticky request id per episode), the decoded text is stepped, and
   the env's next prompt is appended as a user turn (``orchenv.integrations.episode``):
   controller tokens have ``response_mask`` 1, env tokens 0;
3. the per-turn rewards are folded into ``reward_score`` (``reward_fold``: ``discounted``
   with ``gamma`` for seed 000's MathRoute, ``terminal`` for the others; configurable), so
   verl's reward loop is not needed; per-turn rewards go to ``extra_fields["turn_scores"]``;
4. episode metrics (turns, accuracy, cost, invalid fraction, calls per agent) are returned as
   ``reward_extra_info``, which verl aggregates per data source in validation and dumps
   with rollouts.

``env.reset`` / ``env.step`` (where the agent pool is called) run in worker threads
(``asyncio.to_thread``), so one worker's event loop keeps generating for other episodes
while a pool call waits. Envs are reused within a worker process (``EnvCache``).

Importing this module needs verl; it is registered on import, so name this module in the
agent-loop config file (``examples/verl/agent_loop.yaml``) or import it in the worker.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from orchenv.error import ConfigError, DependencyError
from orchenv.integrations.episode import (
    TokenEpisode,
    default_fold,
    fold_rewards,
    make_env,
    parse_env_kwargs,
    reset_env,
)

try:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as exc:  # pragma: no cover - the main venv has no verl
    raise DependencyError(
        "verl", "verl", "the verl agent loop (orchenv.integrations.verl)"
    ) from exc

#: the name rows and configs use to pick this loop
AGENT_NAME = "orchenv"
#: metric keys every episode reports (verl takes the key set from the first trajectory)
BASE_METRICS = ("turns", "reward/turn_sum", "truncated", "accuracy", "cost_usd", "invalid_fraction")


class EnvCache:
    """Idle envs of one worker process, by (env id, kwargs), reused across episodes."""

    def __init__(self) -> None:
        self.idle: dict[str, list[Any]] = {}

    def take(self, env_id: str, kwargs: dict[str, Any]) -> tuple[str, Any]:
        key = json.dumps([env_id, kwargs], sort_keys=True, default=repr)
        envs = self.idle.get(key)
        return key, (envs.pop() if envs else make_env(env_id, kwargs))

    def give(self, key: str, env: Any) -> None:
        self.idle.setdefault(key, []).append(env)


ENVS = EnvCache()


def episode_spec(row: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Env id, kwargs, split, task id and seed of one row (``extra_info["orch"]``, else a
    top-level ``orch`` column), over the loop's ``defaults``."""
    extra = row.get("extra_info") or {}
    spec = dict(defaults)
    found = extra.get("orch") if isinstance(extra, Mapping) else None
    if found is None:
        found = row.get("orch")
    if found is not None:
        spec.update({k: v for k, v in dict(found).items() if v is not None and v != ""})
    if not spec.get("env_id"):
        raise ConfigError(
            "no env for this row: set extra_info.orch.env_id in the dataset "
            "(examples/verl/build_dataset.py) or env_id in the agent-loop config"
        )
    kwargs = {
        **parse_env_kwargs(defaults.get("env_kwargs")),
        **parse_env_kwargs(spec.get("env_kwargs")),
    }
    kwargs["split"] = str(spec.get("split") or kwargs.get("split") or "train")
    seed = spec.get("seed")
    options = spec.get("reset_options") or {}
    if isinstance(options, str):
        options = json.loads(options) if options else {}
    return {
        "reset_options": dict(options),
        "env_id": str(spec["env_id"]),
        "env_kwargs": kwargs,
        "task_id": str(spec["task_id"]) if spec.get("task_id") else None,
        "seed": int(seed) if seed is not None and seed != "" else None,
    }


@register(AGENT_NAME)
class OrchEnvAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """verl agent loop running one orchenv episode per trajectory (module docstring).

    Extra constructor arguments (from the agent-loop config file) are the defaults for rows
    that leave them out: ``env_id``, ``env_kwargs``, ``split``; and the loop's settings:
    ``reward_fold`` (None: the env's paper), ``gamma``, ``max_turn_tokens`` (per reply; None:
    whatever the response budget allows), ``metric_agents`` (agents always reported as
    ``calls/AGENT``, default: the reset info's ``valid_agents``).
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        env_kwargs: Mapping[str, Any] | str | None = None,
        split: str | None = None,
        reward_fold: str | None = None,
        gamma: float = 1.0,
        max_turn_tokens: int | None = None,
        metric_agents: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("tools", None)  # verl passes its tool list to every loop; envs own theirs
        super().__init__(*args, **kwargs)
        self.defaults = {"env_id": env_id, "env_kwargs": env_kwargs, "split": split}
        self.reward_fold = reward_fold
        self.gamma = float(gamma)
        self.max_turn_tokens = max_turn_tokens
        self.metric_agents = list(metric_agents) if metric_agents else None
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = episode_spec(kwargs, self.defaults)
        fold = self.reward_fold or default_fold(spec["env_id"])
        fold_rewards([], fold)  # a bad fold name fails before any pool call
        key, env = ENVS.take(spec["env_id"], spec["env_kwargs"])
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        episode = TokenEpisode(self.tokenizer, max_response_tokens=self.response_length)
        with_logprobs = True
        try:
            t0 = time.perf_counter()
            info = await asyncio.to_thread(
                reset_env,
                env,
                seed=spec["seed"],
                task_id=spec["task_id"],
                options=spec["reset_options"],
            )
            timing["tool_calls"] += time.perf_counter() - t0
            agents = self.metric_agents or [str(a) for a in info.get("valid_agents") or []]
            context: list[int] | None = episode.start(info)
            if len(episode.prompt_ids) > self.prompt_length:  # as verl does: keep the end
                episode.prompt_ids = episode.prompt_ids[-self.prompt_length :]
                context = episode.context_ids()
            request_id = uuid.uuid4().hex  # one sticky session per episode: prefix caching
            while context is not None:
                params = dict(sampling_params)
                room = episode.room()
                if self.max_turn_tokens is not None or room is not None:
                    limits = [n for n in (self.max_turn_tokens, room) if n is not None]
                    params["max_tokens"] = max(1, min(limits))
                t0 = time.perf_counter()
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=context, sampling_params=params
                )
                timing["generate_sequences"] += time.perf_counter() - t0
                with_logprobs = with_logprobs and bool(out.log_probs)
                action = episode.policy_turn(out.token_ids, out.log_probs)
                t0 = time.perf_counter()
                _, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
                timing["tool_calls"] += time.perf_counter() - t0
                context = episode.env_turn(reward, bool(terminated or truncated), info)
        finally:
            ENVS.give(key, env)
        return AgentLoopOutput(
            prompt_ids=episode.prompt_ids,
            response_ids=episode.response_ids,
            response_mask=episode.response_mask,
            response_logprobs=episode.response_logprobs if with_logprobs else None,
            reward_score=episode.reward(fold, self.gamma),
            num_turns=2 * len(episode.rewards) + 1,  # the prompt, then reply + env per turn
            metrics=AgentLoopMetrics(**timing),
            extra_fields={
                "reward_extra_info": verl_metrics(episode, agents),
                "turn_scores": list(episode.rewards),
                "tool_rewards": [],
            },
        )


def verl_metrics(episode: TokenEpisode, agents: list[str]) -> dict[str, float]:
    """The episode's metrics with a fixed key set (NaN: not measured, e.g. an ungraded
    episode's accuracy), as verl needs the same keys on every trajectory of a batch."""
    found = episode.metrics()
    out = {name: float(found.get(name, float("nan"))) for name in BASE_METRICS}
    for agent in agents:
        out[f"calls/{agent}"] = float(found.get(f"calls/{agent}", 0.0))
    return out
