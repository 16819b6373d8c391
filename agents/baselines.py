"""Minimal baseline controllers for orch/MathRoute-v0 (seed 000, Table 1 baselines).

Each reads ``info["phase"]`` ("route" or "verify") and ``info["valid_agents"]``
(weakest first) and writes the canonical action text. The full baseline set
(oracle, kNN/classifier routers, LLM controllers) lives in later modules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchenv.error import ConfigError


def route_text(agent: str, note: str = "") -> str:
    """Canonical routing action."""
    return f"<thinking>{note}</thinking>\n<model>{agent}</model>"


def verdict_text(accept: bool, agent: str | None = None, note: str = "") -> str:
    """Canonical verification action (``agent`` only after a False verdict)."""
    text = f"<checking>{note}</checking>\n<verdict>{accept}</verdict>"
    if not accept and agent:
        text += f"\n<model>{agent}</model>"
    return text


class RandomRouter:
    """Routes to a uniformly random agent; at later turns accepts with ``p_accept``.

    With ``p_accept=1.0`` (default) it is the paper's one-shot random router.
    """

    privileged = False

    def __init__(self, *, seed: int = 0, p_accept: float = 1.0) -> None:
        if not 0.0 <= p_accept <= 1.0:
            raise ConfigError(f"p_accept must be in [0, 1], got {p_accept}")
        self.p_accept = p_accept
        self.rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        agents = list(info.get("valid_agents") or [])
        if info.get("phase") == "verify":
            if not agents or self.rng.random() < self.p_accept:
                return verdict_text(True)
            return verdict_text(False, agents[int(self.rng.integers(len(agents)))])
        if not agents:
            raise ConfigError("RandomRouter got no valid_agents in info at a routing turn")
        return route_text(agents[int(self.rng.integers(len(agents)))], "random choice")


class SingleAgent:
    """Always routes to one agent (by name, or by strength rank: 0 = strongest) and accepts."""

    privileged = False

    def __init__(self, *, agent: str | int = 0) -> None:
        self.agent = agent

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if info.get("phase") == "verify":
            return verdict_text(True)
        agents = list(info.get("valid_agents") or [])
        if isinstance(self.agent, int):
            if not -len(agents) <= self.agent < len(agents):
                raise ConfigError(f"agent rank {self.agent} out of range for {agents}")
            return route_text(agents[len(agents) - 1 - self.agent])
        return route_text(self.agent)


class CascadeController:
    """Weakest agent first; escalate one step up whenever the verifier rejects the draft.

    The verifier here reads the draft's ground-truth correctness from
    ``info["privileged"]`` and flips it with probability ``1 - verifier_accuracy``:
    a verifier of known quality (seed 000 Table 6 reports ~0.88 verification
    accuracy), which makes this controller privileged. Learned and LLM
    verifiers come with the baselines module.
    """

    privileged = True

    def __init__(self, *, verifier_accuracy: float = 0.88, seed: int = 0) -> None:
        if not 0.0 <= verifier_accuracy <= 1.0:
            raise ConfigError(f"verifier_accuracy must be in [0, 1], got {verifier_accuracy}")
        self.verifier_accuracy = verifier_accuracy
        self.rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        agents = list(info.get("valid_agents") or [])
        if info.get("phase") != "verify":
            return route_text(agents[0], "start with the weakest agent")
        truth = bool((info.get("privileged") or {}).get("draft_correct"))
        verdict = truth if self.rng.random() < self.verifier_accuracy else not truth
        if verdict or not agents:
            return verdict_text(True, note="verifier accepts")
        return verdict_text(False, agents[0], note="verifier rejects; escalate one step")
