"""Seed 001 (CoRL) eq. 5-7 checked by hand on ``BudgetRouteEnv``, plus the simulated preset.

Scripted pool: ``cheap`` and ``dear`` both answer 5 (right), ``wrong`` answers 6.
Prompt tokens are free; completion tokens cost 10 / 100,000 / 10 USD per 1M, so a
reply of n words costs n * 1e-5 (cheap) or n * 0.1 (dear) dollars. Budgets are
appendix A's: low 0.001, medium 0.006, high 1000.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scenario import NEAR_MISS_FRAGMENTS, RIGHT, WRONG

from orchenv.envs.budgetroute.env import DEFAULT_BUDGETS, BudgetRouteEnv
from orchenv.grading import extract_boxed
from orchenv.pool import AgentPool, AgentSpec, make_pool
from orchenv.testing.scripted import ScriptedBackend

CHEAP, DEAR, BAD = "cheap", "dear", "wrong"
PRICE = {CHEAP: 10.0, DEAR: 100_000.0, BAD: 10.0}  # USD per 1M completion tokens
WORDS = len(RIGHT.split())


def cost_of(agent: str, text: str = RIGHT) -> float:
    return len(text.split()) * PRICE[agent] / 1e6


def scripted_pool() -> AgentPool:
    specs = [
        AgentSpec(name=n, model=n, tier=t, price_completion=PRICE[n], backend="scripted")
        for n, t in ((BAD, 2), (CHEAP, 1), (DEAR, 0))
    ]
    backend = ScriptedBackend({CHEAP: RIGHT, DEAR: RIGHT, BAD: WRONG})
    return AgentPool(specs, {"scripted": backend}, name="scripted")


def make_env(tiny_tasks, mode: str, **kwargs) -> BudgetRouteEnv:
    env = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks, **kwargs)
    env.reset(seed=0, options={"budget_mode": mode})
    return env


def test_costs_are_as_designed():
    assert cost_of(CHEAP) < DEFAULT_BUDGETS["low"] < cost_of(DEAR) < DEFAULT_BUDGETS["high"]


def test_check_env():
    check_env(BudgetRouteEnv(), skip_render_check=True)


def test_check_env_scripted(tiny_tasks):
    check_env(BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks), skip_render_check=True)


def test_answer_directly_correct_low(tiny_tasks):
    env = make_env(tiny_tasks, "low")
    _, r, term, trunc, info = env.step("<think>2+3 is 5</think><answer>5</answer>")
    assert (r, term, trunc) == (1.0, True, False)
    assert info["performance_reward"] == 1.0 and info["cost_reward"] == 1.0
    assert info["budget_mode"] == "low" and info["budget_usd"] == 0.001
    assert info["correct"] is True and info["final_answer"] == "5" and info["turns"] == 1
    assert info["episode_cost_usd"] == 0.0 and info["agent_calls"] == {}
    assert info["metrics"] == {"within_budget": 1.0, "expert_calls": 0.0, "answered": 1.0}
    np.testing.assert_array_equal(info["constraint_costs"], [0, 0, 0])


def test_boxed_answer_is_graded(tiny_tasks):
    env = make_env(tiny_tasks, "low")
    _, r, *_ = env.step("<answer>$\\boxed{5}$</answer>")
    assert r == 1.0


@pytest.mark.parametrize(("mode", "reward", "cost_reward"), [("low", 0.0, 0.0), ("high", 1.0, 1.0)])
def test_dear_expert_then_correct(tiny_tasks, mode, reward, cost_reward):
    env = make_env(tiny_tasks, mode)
    obs, r1, term, _, info = env.step("<search>DEAR: what is 2 + 3?</search>")
    assert r1 == 0.0 and not term and info["phase"] == "act"
    assert info["cost_usd"] == pytest.approx(cost_of(DEAR)) == pytest.approx(WORDS * 0.1)
    np.testing.assert_array_equal(info["constraint_costs"], [0, 0, 1])
    assert RIGHT in obs and "Round 2 of 3" in obs
    _, r2, term, _, info = env.step("<answer>5</answer>")
    assert term and r2 == reward
    assert info["performance_reward"] == 1.0 and info["cost_reward"] == cost_reward
    assert info["metrics"]["within_budget"] == cost_reward
    assert info["metrics"]["expert_calls"] == 1.0
    assert info["episode_cost_usd"] == pytest.approx(cost_of(DEAR))


def test_cheap_expert_then_correct_low(tiny_tasks):
    env = make_env(tiny_tasks, "low")
    env.step("<search>cheap: what is 2 + 3?</search>")
    _, r, term, _, info = env.step("<answer>5</answer>")
    assert term and r == 1.0 and info["episode_cost_usd"] == pytest.approx(cost_of(CHEAP))


def test_wrong_answer(tiny_tasks):
    env = make_env(tiny_tasks, "high")
    env.step("<search>wrong: 2 + 3?</search>")
    _, r, term, _, info = env.step("<answer>6</answer>")
    assert term and r == 0.0
    assert info["performance_reward"] == 0.0 and info["cost_reward"] == 1.0
    assert info["correct"] is False and info["final_answer"] == "6"


def test_malformed_costs_penalty_and_a_round(tiny_tasks):
    env = make_env(tiny_tasks, "low", format_penalty=-0.1)
    for action in ("", "5", "<search>nobody: hi</search>", "<search>cheap</search>",
                   "<search>cheap: </search>", "<answer></answer>", "<answer>5"):  # fmt: skip
        env.reset(seed=0, options={"budget_mode": "low"})
        obs, r, term, _, info = env.step(action)
        assert r == pytest.approx(-0.1) and not term, action
        assert info["invalid_action"] and info["parse_error"], action
        assert info["agent_calls"] == {}
        assert "could not be used" in obs
    _, r, term, _, info = env.step("<answer>5</answer>")
    assert term and r == 1.0 and info["turns"] == 2


def test_default_penalty_is_zero(tiny_tasks):
    env = make_env(tiny_tasks, "low")
    _, r, _, _, info = env.step("no tags here")
    assert r == 0.0 and info["invalid_action"]


def test_turns_exhausted_is_truncated(tiny_tasks):
    env = make_env(tiny_tasks, "high", max_turns=3)
    env.step("<search>cheap: 2 + 3?</search>")
    _, r, term, trunc, _ = env.step("<search>dear: 2 + 3?</search>")
    assert r == 0.0 and not term and not trunc
    _, r, term, trunc, info = env.step("<search>dear: again?</search>")
    assert trunc and not term and r == 0.0 and info["unexecuted_search"] == DEAR
    assert info["performance_reward"] == 0.0 and info["answered"] is False
    assert info["final_answer"] is None and info["agent_calls"] == {CHEAP: 1, DEAR: 1}
    assert info["turns"] == 3
    assert info["metrics"] == {"within_budget": 1.0, "expert_calls": 2.0, "answered": 0.0}


def test_answer_in_the_last_turn_is_terminated(tiny_tasks):
    env = make_env(tiny_tasks, "low", max_turns=2)
    obs, *_ = env.step("<search>cheap: 2 + 3?</search>")
    assert "Round 2 of 2: the last one; answer now." in obs
    _, r, term, trunc, _ = env.step("<answer>5</answer>")
    assert term and not trunc and r == 1.0


def test_turns_exhausted_by_malformed_with_penalty(tiny_tasks):
    env = make_env(tiny_tasks, "low", max_turns=1, format_penalty=-0.5)
    _, r, term, trunc, info = env.step("garbage")
    assert trunc and not term and r == -0.5 and info["performance_reward"] == 0.0


def test_first_tag_wins_and_think_is_ignored(tiny_tasks):
    env = make_env(tiny_tasks, "low")
    _, r, term, _, info = env.step("<think><answer>6</answer></think><search>cheap: q</search>")
    assert not term and info["called_agent"] == CHEAP
    _, r, term, _, _ = env.step("<answer>5</answer><search>dear: q</search>")
    assert term and r == 1.0


def test_budget_mode_drawn_and_fixed(tiny_tasks):
    env = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks)
    modes = {env.reset(seed=s)[1]["budget_mode"] for s in range(30)}
    assert modes == {"low", "medium", "high"}
    assert env.reset(seed=1)[1]["budget_mode"] == env.reset(seed=1)[1]["budget_mode"]
    fixed = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks, budget_mode="medium")
    obs, info = fixed.reset(seed=3)
    assert info["budget_mode"] == "medium" and info["budget_usd"] == 0.006
    assert "Budget mode: medium" in obs
    custom = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks, budgets={"tiny": 0.0})
    assert custom.reset(seed=0)[1]["budget_mode"] == "tiny"
    with pytest.raises(KeyError):
        BudgetRouteEnv(budget_mode="huge")
    with pytest.raises(KeyError):
        fixed.reset(options={"budget_mode": "huge"})


def test_demo_action_is_valid(tiny_tasks):
    env = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks)
    rng = np.random.default_rng(0)
    for seed in range(20):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.demo_action(rng))
            assert not info["invalid_action"]
            done = term or trunc
        assert info["answered"] and term


def test_fuzz_never_raises(tiny_tasks):
    env = BudgetRouteEnv(pool=scripted_pool(), task_source=tiny_tasks, format_penalty=-1.0)
    rng = np.random.default_rng(0)
    frags = [*NEAR_MISS_FRAGMENTS, "<search>", "</search>", "<answer>", "</answer>", ":",
             CHEAP, DEAR, "5", "\x00", "\u202e", "é"]  # fmt: skip
    for _ in range(300):
        env.reset(seed=int(rng.integers(1000)))
        done = False
        while not done:
            action = "".join(rng.choice(frags, size=int(rng.integers(0, 12))))
            _, r, term, trunc, info = env.step(action)
            assert isinstance(r, float) and not (term and trunc)
            assert r in (-1.0, 0.0, 1.0) or r == pytest.approx(0.0)
            done = term or trunc
    env.reset(seed=0)
    env.step("<answer>" + "9" * 1_000_000 + "</answer>")
    env.reset(seed=0)
    env.step(None)  # type: ignore[arg-type]


# -- the simulated CoRL preset ------------------------------------------------------------
def test_preset_budgets_are_meaningful():
    pool = make_pool("corl")
    assert pool.names == ("GPT-4.1-nano", "GPT-4.1", "o3")
    env = BudgetRouteEnv()
    nano, o3 = [], []
    for seed in range(50):
        env.reset(seed=seed, options={"budget_mode": "low"})
        _, _, _, _, info = env.step(f"<search>GPT-4.1-nano: {env.task.prompt}</search>")
        nano.append(info["cost_usd"])
        env.reset(seed=seed, options={"budget_mode": "low"})
        _, _, _, _, info = env.step(f"<search>o3: {env.task.prompt}</search>")
        o3.append(info["cost_usd"])
    assert max(nano) <= DEFAULT_BUDGETS["low"] < min(o3)


def cheap_controller(env: BudgetRouteEnv, obs: str, info: dict) -> str:
    if not env.history:
        return f"<search>GPT-4.1-nano: {env.task.prompt}</search>"
    return f"<answer>{extract_boxed(env.history[-1][2])}</answer>"


def o3_controller(env: BudgetRouteEnv, obs: str, info: dict) -> str:
    if not env.history:
        return f"<search>o3: {env.task.prompt}</search>"
    return f"<answer>{extract_boxed(env.history[-1][2])}</answer>"


def run(controller, mode: str, episodes: int = 60, seed: int = 0) -> list[dict]:
    env = BudgetRouteEnv()
    out = []
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i, options={"budget_mode": mode})
        done, total, expert_right = False, 0.0, None
        while not done:
            obs, r, term, trunc, info = env.step(controller(env, obs, info))
            total += r
            done = term or trunc
            expert_right = info["privileged"].get("expert_correct", expert_right)
        out.append({**info, "return": total, "expert_right": expert_right})
    return out


def test_cheap_controller_full_reward_in_low_mode_when_nano_is_right():
    results = run(cheap_controller, "low")
    for res in results:
        assert res["return"] == (1.0 if res["expert_right"] else 0.0)
        assert res["cost_reward"] == 1.0
    assert 0.6 < np.mean([r["return"] for r in results]) < 0.95


def test_o3_controller_zero_in_low_positive_in_high():
    low = run(o3_controller, "low")
    assert all(r["return"] == 0.0 and r["cost_reward"] == 0.0 for r in low)
    assert np.mean([r["performance_reward"] for r in low]) > 0.8
    high = run(o3_controller, "high")
    assert np.mean([r["return"] for r in high]) > 0.8


def test_determinism():
    a = [(r["return"], r["episode_cost_usd"], r["task_id"]) for r in run(o3_controller, "high", 10)]
    b = [(r["return"], r["episode_cost_usd"], r["task_id"]) for r in run(o3_controller, "high", 10)]
    assert a == b
    env1, env2 = BudgetRouteEnv(), BudgetRouteEnv()
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    for seed in range(5):
        o1, i1 = env1.reset(seed=seed)
        o2, i2 = env2.reset(seed=seed)
        assert o1 == o2 and i1["budget_mode"] == i2["budget_mode"]
        done = False
        while not done:
            o1, r1, term, trunc, _ = env1.step(env1.demo_action(rng1))
            o2, r2, _, _, _ = env2.step(env2.demo_action(rng2))
            assert (o1, r1) == (o2, r2)
            done = term or trunc


def test_fork_is_independent():
    env = BudgetRouteEnv()
    env.reset(seed=0, options={"budget_mode": "low"})
    env.step(f"<search>GPT-4.1: {env.task.prompt}</search>")
    clone = env.fork()
    _, r_clone, *_ = clone.step("<answer>0</answer>")
    assert env.turn == 1 and len(env.history) == 1
    _, r_env, *_ = env.step("<answer>0</answer>")
    assert r_env == r_clone
