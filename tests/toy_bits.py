"""A toy env whose best response and shortcuts are known by hand (imported by the tests of
``orchenv.discrete`` and ``orchenv.audit``).

Each task hides three bits. Per turn the controller guesses a bit (+1 while every guess so
far was right, 0 once one was wrong), asks a helper agent (``ask_reward``, a metered call),
or stops (``stop_reward``; unavailable before the first guess). Three turns.

With the defaults the best response guesses all three bits (return 3.0 on every task);
"stop-early" (guess 0, then stop) returns 1.5 or 0.5, mean 1.0 over the eight tasks;
"always guess 0" returns the number of leading zeros, mean 7/8. Rewards depend on the
whole history, so a search that mixed up its forks would get them wrong.

The skill is knowing the bits: ``skill_action`` guesses the task's next bit when skilled and
guesses 0 (a fixed default, blind to the truth) when not; it never asks or stops. Its
realistic level is 0.5 (a toy choice: a learner that knows every other bit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from helpers import agent_spec

from orchenv.core import OrchestrationEnv, Outcome
from orchenv.pool import AgentPool, Message
from orchenv.tasks import ListTaskSource, Task, TaskSource
from orchenv.testing.scripted import ScriptedBackend

ENV_ID = "toy/Bits-v0"
CHOICES = ("<bit>0</bit>", "<bit>1</bit>", "<ask/>", "<stop/>")
HINT = "the helper does not know either"


def bits_tasks() -> ListTaskSource:
    tasks = [
        Task(id=f"bits-{i:03b}", prompt="Guess three bits.", answers=(f"{i:03b}",))
        for i in range(8)
    ]
    return ListTaskSource("bits", {"train": tasks, "test": tasks})


class BitsEnv(OrchestrationEnv):
    """Guess the task's three bits (see the module docstring)."""

    realistic_skill = 0.5
    realistic_skill_source = "toy: a learner that knows half the bits"

    def __init__(
        self,
        *,
        split: str = "test",
        max_turns: int = 3,
        stop_reward: float = 0.5,
        ask_reward: float = -0.25,
        format_penalty: float = -1.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            split=split, max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        self.stop_reward, self.ask_reward = stop_reward, ask_reward
        self.bits: list[str] = []
        self.on_track = True
        self.asks = 0

    def _build_task_source(self) -> TaskSource:
        return bits_tasks()

    def _build_pool(self) -> AgentPool:
        spec = agent_spec("helper", model="h")  # $1 / $2 per million tokens
        return AgentPool([spec], {"scripted": ScriptedBackend({"helper": HINT})}, name="bits")

    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.bits, self.on_track, self.asks = [], True, 0
        return {}

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        if action in CHOICES[:2]:
            bit = action[5]
            right = self.on_track and bit == self.task.answer[len(self.bits)]
            self.on_track = right
            self.bits.append(bit)
            return Outcome(reward=float(right))
        if action == "<ask/>":
            self.asks += 1
            self.call_agent("helper", [{"role": "user", "content": "Which bit comes next?"}])
            return Outcome(reward=self.ask_reward)
        if action == "<stop/>" and self.bits:
            return Outcome(reward=self.stop_reward, done=True)
        return Outcome(error="reply with one of " + ", ".join(self.action_choices_now()))

    def action_choices_now(self) -> list[str]:
        return [c for c in self.action_choices() if c is not None]

    def action_choices(self) -> list[str | None]:
        return [*CHOICES[:3], CHOICES[3] if self.bits else None]

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        def stop_early(env: OrchestrationEnv) -> str:
            """Guess 0, then stop."""
            return "<stop/>" if env.turn > 0 else "<bit>0</bit>"

        return {"stop-early": stop_early}

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        assert self.task is not None
        if skilled and self.on_track and len(self.bits) < len(self.task.answer):
            return f"<bit>{self.task.answer[len(self.bits)]}</bit>"
        return CHOICES[0]

    def observation_features(self) -> np.ndarray:
        return np.array([len(self.bits) / 3.0, float(self.on_track)], dtype=np.float32)

    def _messages(self) -> list[Message]:
        user = f"Guess the next bit. So far: {''.join(self.bits) or '(none)'}. {self.turn_line()}"
        return [
            {"role": "system", "content": "Guess three bits."},
            {"role": "user", "content": user},
        ]

    def _summary(self) -> dict[str, Any]:
        assert self.task is not None
        answer = "".join(self.bits)
        return {
            "final_answer": answer,
            "correct": answer == self.task.answer,
            "metrics": {"asks": float(self.asks), "mistakes": float(not self.on_track)},
        }

    def demo_action(self, rng: np.random.Generator) -> str:
        options = self.action_choices_now()
        return options[int(rng.integers(len(options)))]


def register() -> None:
    """Register ``toy/Bits-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=BitsEnv)
