"""Issue 25: the role choice of orch/ALFWorldRoles-v0 matters, and the skill references of
both ALFWorld views rise with the skill (small samples: alfworld games are slowish)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("alfworld")

from orchenv.envs.alfworld import coordination as co  # noqa: E402
from orchenv.envs.alfworld.agents import subgoal  # noqa: E402
from orchenv.envs.alfworld.env import ALFWorldEnv  # noqa: E402
from orchenv.envs.alfworld.games import BUNDLED_ROOT  # noqa: E402
from orchenv.envs.alfworld.roles import ALFWorldControllerEnv, ALFWorldRoleGame  # noqa: E402

HOUSE = {"data_dir": BUNDLED_ROOT}
SEEDS = range(8)


def skill_return(env, s: float, seed: int) -> float:
    """One episode of the audit's skill reference at skill ``s``."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action = env.skill_action(bool(rng.random() < s), rng)
        _, reward, term, trunc, _ = env.step(action)
        total += float(reward)
        done = term or trunc
    return total


def test_adaptive_coordinator_beats_the_fixed_schedules():
    env = ALFWorldControllerEnv(**HOUSE)
    adaptive = [co.play(env, co.adaptive_coordinator, s)["return"] for s in SEEDS]
    shortcuts = env.audit_strategies()
    assert "plan-once-then-actors" in shortcuts and "best-fixed-schedule" in shortcuts
    assert np.mean(adaptive) == 1.0
    # over 100 episodes: adaptive 1.00, best fixed 0.90 +- 0.06, plan-once 0.77 +- 0.08
    for name in ("plan-once-then-actors", "best-fixed-schedule"):
        fixed = [co.play(env, lambda e, _r, f=shortcuts[name]: f(e), s)["return"] for s in SEEDS]
        assert np.mean(fixed) < np.mean(adaptive), name
    env.close()


def test_roles_skill_reference_rises_with_skill():
    env = ALFWorldControllerEnv(**HOUSE)
    curve = [np.mean([skill_return(env, s, seed) for seed in range(8)]) for s in (0.0, 0.5, 1.0)]
    assert curve[0] < curve[1] < curve[2] and curve[2] >= 0.9 and curve[0] <= 0.4, curve
    env.close()


def test_single_learner_skill_reference_rises_with_skill():
    env = ALFWorldEnv(**HOUSE, max_turns=30)
    curve = [np.mean([skill_return(env, s, seed) for seed in range(8)]) for s in (0.0, 1.0)]
    assert curve[1] == 1.0 and curve[0] <= 0.25, curve
    env.close()


def test_a_stray_command_makes_the_guidance_stale_until_it_is_renewed():
    game = ALFWorldRoleGame(router="full", expert="planner", env_kwargs=HOUSE)
    game.reset(seed=4)
    assert game.guidance_fresh is False, "no plan yet"
    plan = game.house.expert_plan()
    steps = " ".join(f"{i}. {subgoal(c)}" for i, c in enumerate(plan, 1))
    game.act("planner", f"<plan>{steps}</plan>")
    assert game.guidance_fresh is True
    game.act("planner", "<plan>1. Explore(room)</plan>")  # a plan that misses the next step
    assert game.guidance_fresh is False
    game.act("evaluator", f"<feedback>not done; next: {subgoal(plan[0])}</feedback>")
    assert game.guidance_fresh is True
    game.act("navigator", plan[0])  # following the plan keeps it fresh
    assert game.guidance_fresh is True
    stray = next(
        c
        for c in game.allowed_commands("navigator")
        if c.startswith("go to") and c != game.house.expert_plan()[0]
    )
    game.act("navigator", stray)
    assert game.guidance_fresh is False
    assert game.agent_task().meta["guidance_fresh"] is False
    game.close()
