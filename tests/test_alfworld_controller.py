"""The adaptive coordinator of ``orch/ALFWorldRoles-v0`` as a controller that reads only the
observation text and ``info`` (``coordination.AdaptiveRoleCoordinator``): it makes the same
choice as ``adaptive_coordinator`` (which reads the env's memory objects) at every step, so it
can be re-executed over the wire as a board's baseline; hostile observations do not crash it."""

from __future__ import annotations

import time

import gymnasium as gym

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.alfworld.coordination import (
    AdaptiveRoleCoordinator,
    adaptive_coordinator,
    memory_from_observation,
)


def test_same_choices_as_the_in_process_coordinator_from_the_observation_alone():
    env = gym.make("orch/ALFWorldRoles-v0", split="test").unwrapped
    controller = AdaptiveRoleCoordinator()
    steps = wins = 0
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        controller.reset(seed)
        done = False
        while not done:
            action = controller.act(obs, info)
            assert action == adaptive_coordinator(env), (seed, env.turn)
            obs, _, term, trunc, info = env.step(action)
            done = term or trunc
            steps += 1
        wins += bool(info["correct"])
    env.close()
    assert steps >= 15 and wins == 3


def test_hostile_observations():
    controller = AdaptiveRoleCoordinator()
    started = time.monotonic()
    for obs in (
        "x" * 10_000_000,
        "Shared memory:\n" + "    \ud800 lone surrogate\n" * 200_000,
        "Shared memory:\n- id: m0\n  round: " + "9" * 5000 + "\n  role: a\n  type: plan\n"
        "  text: |\n    1. GoTo(fridge 1)",
        "",
    ):
        assert controller.act(obs, {"feedback": ["not", "text"], "role": None}) in (
            "<role>planner</role>",
            "<role>navigator</role>",
        )
    assert time.monotonic() - started < 20
    (item,) = memory_from_observation(
        "Shared memory:\n- id: m2\n  round: 1\n  role: planner\n  type: plan\n  key: k\n"
        "  text: |\n    1. GoTo(drawer 1) 2. Open(drawer 1)\n    second line"
    )
    assert (item.type, item.round, item.text) == (
        "plan",
        1,
        "1. GoTo(drawer 1) 2. Open(drawer 1)\nsecond line",
    )
