"""Issue 25 for orch/WebShop-v0: the audit's skill reference (skill_action)."""

from __future__ import annotations

import statistics

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401
from orchenv.audit import play_skill

KWARGS = {"reward": "approx", "num_products": 300, "num_goals": 60, "max_turns": 30}


def test_webshop_skill_curve_rises():
    env = gym.make("orch/WebShop-v0", **KWARGS).unwrapped
    curve = {}
    for s in (0.0, 1.0):
        returns = []
        for task in range(10):
            env.reset(seed=task, options={"task_index": task})
            returns.append(play_skill(env, s, (0, task)).ret)
        curve[s] = statistics.fmean(returns)
    assert curve[1.0] >= 0.85, curve
    assert curve[1.0] - curve[0.0] > 0.2, curve


def test_webshop_skill_action_buys_the_goal_with_its_options():
    env = gym.make("orch/WebShop-v0", **KWARGS).unwrapped
    env.reset(seed=0, options={"task_index": 3})
    rng = np.random.default_rng(0)
    goal = env.goal
    info: dict = {}
    for _ in range(30):
        _, _, term, trunc, info = env.step(env.skill_action(True, rng))
        if term or trunc:
            break
    answer = info["final_answer"]
    assert answer is not None and answer["asin"].lower() == goal.asin.lower()
    assert set(dict(goal.options).values()) <= set(answer["options"].values())


def test_webshop_unskilled_action_is_a_valid_choice():
    env = gym.make("orch/WebShop-v0", **KWARGS).unwrapped
    env.reset(seed=0, options={"task_index": 1})
    for k in range(8):
        choices = [c for c in env.action_choices() if c is not None]
        action = env.skill_action(False, np.random.default_rng(k))
        assert action in choices
        _, _, term, trunc, info = env.step(action)
        assert not info.get("invalid_action")
        if term or trunc:
            break
