"""Issue 38: ALFWorldRoles' held-out games (6 -> 20) and what the coordinator's skill buys on
them. The best fixed schedule, ``(PNII)*``, still completes every test game within the 20
turns (an open finding: ALFWorld's reward is success only, docs/alfworld.md), so what is
asserted here is the part of the skill the reward does not price: the skill reference at the
realistic level finishes in fewer coordinator turns than the fixed schedule, paired by game,
beyond the 95% interval; and the audit's blind-critique strategy is offered."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

pytest.importorskip("alfworld")

from orchenv.envs.alfworld.roles import ALFWorldControllerEnv  # noqa: E402


def turns(env, policy, i):
    env.reset(seed=0, options={"task_index": i})
    done, info = False, {}
    while not done:
        _, _, terminated, truncated, info = env.step(policy(env))
        done = terminated or truncated
    return env.turn, bool(info.get("correct"))


def test_blind_critique_is_an_audit_strategy():
    env = ALFWorldControllerEnv(split="test")
    strategies = env.audit_strategies()
    assert {"blind-critique", "best-fixed-schedule"} <= set(strategies)
    env.reset(seed=0, options={"task_index": 0})
    assert strategies["blind-critique"](env) == "<role>planner</role>"
    env.close()


@pytest.mark.slow
def test_skill_reference_needs_fewer_turns_than_the_best_fixed_schedule():
    env = ALFWorldControllerEnv(split="test")
    n = env.task_source.size("test")
    assert n == 20
    fixed = env.audit_strategies()["best-fixed-schedule"]
    s = ALFWorldControllerEnv.realistic_skill
    saved, wins = [], []
    for i in range(n):
        rng = np.random.default_rng(i)
        skilled, won = turns(env, lambda e, rng=rng: e.skill_action(bool(rng.random() < s), rng), i)
        blind, _ = turns(env, fixed, i)
        saved.append(blind - skilled)
        wins.append(won)
    mean = statistics.fmean(saved)
    half = 1.96 * statistics.stdev(saved) / math.sqrt(n)
    assert mean - half > 0, (mean, half)  # measured: 13.70 vs 10.15 turns (audit, seed 0)
    assert statistics.fmean(wins) >= 0.9
    env.close()
