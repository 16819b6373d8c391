"""The info schema every orchenv env returns, as TypedDicts (one place; see DESIGN.md).

``StepInfo`` is what ``reset`` and every ``step`` return; ``EpisodeEndInfo`` lists the keys
added when the episode ends. Env-specific keys sit beside them; env-specific *episode
metrics* go in ``info["metrics"]`` so that the evaluation harness and trainers read every
env the same way.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from orchenv.pool import Message


class TokenCounts(TypedDict):
    prompt: int
    completion: int


class StepInfo(TypedDict):
    """Keys present after ``reset`` and after every ``step``."""

    #: chat messages for the next controller turn (same content as the observation)
    messages: list[Message]
    #: controller turns played so far
    turn: int
    #: this step's pool cost and tokens
    cost_usd: float
    tokens: TokenCounts
    #: running totals for the episode
    episode_cost_usd: float
    agent_calls: dict[str, int]
    #: one record per agent call this step (agent, tokens, token source, cost, latency, cached)
    calls: list[dict[str, Any]]
    #: per-agent call counts this step in pool order: a cost channel for constrained RL
    constraint_costs: np.ndarray
    #: agents the controller may call now (drives action masks)
    valid_agents: list[str]
    #: the action could not be used (it cost the format penalty); what was wrong
    invalid_action: bool
    parse_error: str | None


class EpisodeEndInfo(TypedDict, total=False):
    """Keys added to the last step's info (``terminated`` or ``truncated``)."""

    task_id: str
    final_answer: Any
    #: exactly one of ``correct`` (right/wrong tasks) or ``score`` (graded tasks) is usual
    correct: bool
    score: float
    turns: int
    #: env-specific episode metrics (numbers), averaged by the eval harness
    metrics: dict[str, float]
    #: ground truth for analysis and privileged baselines; policies must not read it
    privileged: dict[str, Any]
