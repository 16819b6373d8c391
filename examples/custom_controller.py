"""Plug in your own controller and compare it with a baseline on equal terms.

A controller is any object with ``act(obs: str, info: dict) -> str``. This one
routes by the problem's length and rejects drafts that lack a boxed answer.

    python examples/custom_controller.py
"""

from __future__ import annotations

import gymnasium as gym

import orchenv  # noqa: F401
from orchenv.controllers import make_controller
from orchenv.runner import format_summary, run_episodes


class LengthRouter:
    """Long problems go to a stronger agent; drafts without \\boxed{} are escalated."""

    def act(self, obs: str, info: dict) -> str:
        agents = info["valid_agents"]
        if info["phase"] == "route":
            problem = obs.split("Problem:\n", 1)[-1]
            pick = agents[1] if len(problem) > 160 else agents[0]
            return f"<thinking>length {len(problem)}</thinking><model>{pick}</model>"
        if "\\boxed{" in obs.split("Proposed solution", 1)[-1] or not agents:
            return "<checking>has a final answer</checking><verdict>True</verdict>"
        return f"<checking>no final answer</checking><verdict>False</verdict><model>{agents[0]}</model>"


env = gym.make("orch/MathRoute-v0", split="test")
for name, controller in [("length-router", LengthRouter()), ("random", make_controller("random"))]:
    summary, _ = run_episodes(env, controller, 200, seed=0, controller_name=name, progress=False)
    print(format_summary(summary), "\n")
