"""One orchenv episode as one token sequence, the unit TRL's and verl's trainers learn from.

Written by hand because no maintained library turns a multi-turn Gymnasium *text* env into
prompt ids, response ids and a loss mask. The pieces every adapter shares:

- ``make_env``: ``gymnasium.make`` with a registered id (core never imports ``orchenv.envs``).
- ``TokenEpisode``: the first turn's ``info["messages"]`` through the policy's chat template
  are the prompt; each controller turn's sampled ids are appended with mask 1, and the env's
  next prompt is appended as a user turn with mask 0 (``followup_message``).
- ``fold_rewards``: the env's per-turn rewards -> one trajectory reward (``REWARD_FOLDS``).
- ``episode_metrics``: accuracy, cost, per-agent calls, invalid actions from ``info``.

**Transcript, not fresh prompts.** orchenv's envs rebuild the whole prompt each turn and the
reference trainer (orchenv.agents.grpo) trains each turn on its own prompt. Single-sequence
trainers (TRL, verl) need one growing transcript, so from the second turn on the env's new
messages are folded into one user message appended after the controller's reply: the policy
sees every earlier turn too. This is the integrations' named departure
(``context="transcript"``, docs/integrations.md).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.error import ConfigError

#: ways to turn per-turn rewards r_0..r_{T-1} into the trajectory's reward
#: ``discounted``: sum_t gamma^t r_t (seed 000, eq. 5 along one path); ``terminal``: r_{T-1};
#: ``sum``: sum_t r_t
REWARD_FOLDS = ("discounted", "terminal", "sum")
#: the fold each env's paper prescribes; ids not listed use ``terminal``
DEFAULT_FOLDS: dict[str, str] = {
    "orch/MathRoute-v0": "discounted",  # seed 000: per-turn rewards, gamma = 1 (Table 9)
    "orch/MathRouteSystem2-v0": "discounted",
}
#: the only context layout a single-sequence trainer can use (see the module docstring)
CONTEXTS = ("transcript",)


def default_fold(env_id: str) -> str:
    """The reward fold of ``env_id``'s paper: ``discounted`` for seed 000, else ``terminal``."""
    return DEFAULT_FOLDS.get(env_id, "terminal")


def fold_rewards(rewards: Sequence[float], fold: str, gamma: float = 1.0) -> float:
    """One trajectory reward from the per-turn rewards (``REWARD_FOLDS``)."""
    if fold not in REWARD_FOLDS:
        raise ConfigError(f"reward fold must be one of {', '.join(REWARD_FOLDS)}, got {fold!r}")
    if not rewards:
        return 0.0
    if fold == "terminal":
        return float(rewards[-1])
    if fold == "sum":
        return float(sum(rewards))
    return float(sum(gamma**t * r for t, r in enumerate(rewards)))


def make_env(env_id: str, env_kwargs: Mapping[str, Any] | str | None = None) -> Any:
    """``gymnasium.make(env_id, **env_kwargs)``; ``env_kwargs`` may be a JSON object string
    (how parquet rows carry it). A bad id or argument is a ``ConfigError`` naming both."""
    import gymnasium as gym

    import orchenv  # noqa: F401  (registers the orch/ ids)

    kwargs = parse_env_kwargs(env_kwargs)
    try:
        return gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(
            f"cannot make env {env_id!r} with arguments {sorted(kwargs)}: {exc}; "
            "list the ids with `orchenv list`"
        ) from exc


def parse_env_kwargs(env_kwargs: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A mapping, a JSON object string, or None (-> {})."""
    if env_kwargs is None or env_kwargs == "":
        return {}
    value: Any = env_kwargs
    if isinstance(env_kwargs, str):
        try:
            value = json.loads(env_kwargs)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"env_kwargs is not a JSON object: {env_kwargs[:80]!r}") from exc
    if not isinstance(value, Mapping):
        raise ConfigError(f"env_kwargs must be a JSON object or mapping, got {value!r:.80}")
    return dict(value)


def render(tokenizer: Any, messages: Sequence[Mapping[str, str]], generation: bool) -> str:
    """The chat template as text (tokenised separately: works across transformers versions)."""
    return str(
        tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=generation
        )
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text``; the template already wrote any special tokens it wants."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def followup_message(messages: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The env's prompt for a later turn as one user message (system and user contents in
    order, blank-line separated), appended to the transcript after the controller's reply."""
    parts = [str(m.get("content") or "") for m in messages]
    return {"role": "user", "content": "\n\n".join(p for p in parts if p)}


def followup_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids that continue a transcript whose last token is the controller's end-of-turn:
    the template's text after a finished assistant turn, up to the next generation prompt."""
    head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    before = render(tokenizer, head, generation=False)
    after = render(tokenizer, [*head, followup_message(messages)], generation=True)
    if not after.startswith(before):
        raise ConfigError(
            "the chat template does not render a conversation as a prefix of its continuation"
        )
    eos = tokenizer.eos_token or ""
    cut = before.rfind(eos) + len(eos) if eos and eos in before else len(before)
    return encode(tokenizer, after[cut:])


@dataclass
class TokenEpisode:
    """One episode as prompt ids + response ids with a mask (1: controller, 0: env).

    Drive it: ``start`` -> ids to generate from; per turn ``policy_turn`` (the sampled ids)
    -> the action text for ``env.step``; after the step ``env_turn`` (its reward, done flag
    and info). ``max_response_tokens`` bounds the response: a turn that would cross it is
    cut and the episode ends (``truncated``)."""

    tokenizer: Any
    max_response_tokens: int | None = None
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    truncated: bool = False

    def start(self, info: Mapping[str, Any]) -> list[int]:
        """The first prompt: the reset info's messages with the generation prompt."""
        self.prompt_ids = encode(self.tokenizer, render(self.tokenizer, info["messages"], True))
        return list(self.prompt_ids)

    def context_ids(self) -> list[int]:
        """What the policy conditions on for its next turn."""
        return self.prompt_ids + self.response_ids

    def room(self) -> int | None:
        """Response tokens left (None: unbounded)."""
        if self.max_response_tokens is None:
            return None
        return max(self.max_response_tokens - len(self.response_ids), 0)

    def policy_turn(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Append the controller's sampled ids (mask 1); return the decoded action text."""
        ids = [int(i) for i in ids]
        room = self.room()
        if room is not None and len(ids) > room:
            ids, self.truncated = ids[:room], True
        self.response_ids += ids
        self.response_mask += [1] * len(ids)
        lps = [float(x) for x in logprobs[: len(ids)]] if logprobs is not None else []
        self.response_logprobs += lps + [0.0] * (len(ids) - len(lps))
        text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
        self.actions.append(text)
        return text

    def env_turn(self, reward: float, done: bool, info: Mapping[str, Any]) -> list[int] | None:
        """Record the step; unless the episode is over, append the env's next prompt (mask 0)
        and return the context to generate from, else None."""
        self.rewards.append(float(reward))
        self.infos.append(dict(info))
        if done or self.truncated or not info.get("messages"):
            self.done = True
            return None
        ids = followup_ids(self.tokenizer, info["messages"])
        last = self.response_ids[-1] if self.response_ids else None
        eos = self.tokenizer.eos_token_id
        if eos is not None and last != eos:  # the reply was cut: close its turn first
            ids = [eos, *ids]
        room = self.room()
        if room is not None and len(ids) >= room:  # no room left for another reply
            self.truncated = self.done = True
            return None
        self.response_ids += ids
        self.response_mask += [0] * len(ids)
        self.response_logprobs += [0.0] * len(ids)
        return self.context_ids()

    def reward(self, fold: str, gamma: float = 1.0) -> float:
        return fold_rewards(self.rewards, fold, gamma)

    def metrics(self) -> dict[str, float]:
        return episode_metrics(self.infos, self.rewards, truncated=self.truncated)


def episode_metrics(
    infos: Sequence[Mapping[str, Any]], rewards: Sequence[float], *, truncated: bool = False
) -> dict[str, float]:
    """Flat numeric metrics of one episode from its step infos (names as in the reference
    trainer's metrics.jsonl): turns, reward sum, accuracy when the env grades, episode cost,
    invalid-action fraction and calls per agent (``calls/AGENT``)."""
    out: dict[str, float] = {
        "turns": float(len(infos)),
        "reward/turn_sum": float(sum(rewards)),
        "truncated": float(truncated),
    }
    if not infos:
        return out
    last = infos[-1]
    if "correct" in last and last["correct"] is not None:
        out["accuracy"] = float(bool(last["correct"]))
    cost = last.get("episode_cost_usd")
    if cost is None:
        cost = sum(float(i.get("cost_usd") or 0.0) for i in infos)
    if isinstance(cost, (int, float)) and math.isfinite(float(cost)):
        out["cost_usd"] = float(cost)
    out["invalid_fraction"] = sum(bool(i.get("invalid_action")) for i in infos) / len(infos)
    calls: Counter[str] = Counter()
    for info in infos:
        for call in info.get("calls") or ():
            if isinstance(call, Mapping) and call.get("agent") is not None:
                calls[str(call["agent"])] += 1
    for agent, n in sorted(calls.items()):
        out[f"calls/{agent}"] = float(n)
    return out


def reset_env(
    env: Any,
    *,
    seed: int | None,
    task_id: str | None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``env.reset`` on a given task (``options={"task_id": ...}``) or a seeded draw; further
    reset ``options`` (BudgetRoute's ``budget_mode``) pass through."""
    merged = {**(options or {}), **({"task_id": task_id} if task_id else {})}
    _, info = env.reset(seed=seed, options=merged or None)
    if not info.get("messages"):
        raise ConfigError("the env's reset info has no 'messages': it is not a text env")
    return dict(info)
