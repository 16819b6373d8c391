"""Seed 003 (Puppeteer) on ``PuppeteerEnv``: eq. 6 by hand, termination, tools, parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from orchenv.envs.puppeteer import PATTERNS, PuppeteerEnv, gsm_hard_task


def make(**kw):
    env = PuppeteerEnv(**kw)
    env.reset(seed=0, options={"task_index": 3})
    return env


def test_check_env():
    env = PuppeteerEnv()
    check_env(env, skip_render_check=True)
    env.close()


def test_eq6_by_hand():
    lam, gamma, phi = 0.1, 0.99, 4.0
    env = make(lam=lam, gamma=gamma, phi=phi)
    model = env.pool.names[0]
    rewards, tokens = [], []
    for pattern in ("planning", "reasoning", "critique"):
        _, r, term, _, info = env.step(f"<agent>{model}:{pattern}</agent>")
        rewards.append(r)
        tokens.append(info["step_tokens"])
        assert not term
    _, r, term, _, info = env.step("<agent>terminate</agent>")
    assert term and info["step_tokens"] == 0
    rewards.append(r)
    costs = [tokens[t - 1] / 1000 * math.log(1 + t / phi) for t in (1, 2, 3)]
    for t in range(3):
        assert rewards[t] == pytest.approx(-lam * costs[t])
    big_r = 1.0 if info["correct"] else 0.0
    assert rewards[3] == pytest.approx(big_r)
    # the recursion R_t = gamma R_{t+1} - lam C_t equals the discounted return
    ret = big_r
    for t in (2, 1, 0):
        ret = gamma * ret - lam * costs[t]
    assert sum(gamma**k * rw for k, rw in enumerate(rewards)) == pytest.approx(ret)
    # the same tokens cost more later in the trajectory
    assert costs[0] / tokens[0] < costs[1] / tokens[1] < costs[2] / tokens[2]


def test_terminate_first_step_and_step_limit():
    env = make()
    _, r, term, trunc, info = env.step("<agent>terminate</agent>")
    assert term and not trunc and r == 0.0 and info["correct"] is False and info["turns"] == 1
    env = make(max_steps=2)
    name = f"<agent>{env.pool.names[1]}:reasoning</agent>"
    assert not env.step(name)[2]
    _, r, term, _, info = env.step(name)
    assert (
        term
        and info["turns"] == 2
        and r == pytest.approx(float(info["correct"]) - 0.1 * info["step_cost"])
    )


@pytest.mark.parametrize(
    "action",
    [
        "",
        "hello",
        "<agent>",
        "<agent>nobody:reasoning</agent>",
        "<agent>qwen2.5-7b:dance</agent>",
        "<agent>tool:web</agent>",
        "<agent>tool:run_python</agent>",
        "x" * 100_000,
        "<agent>\x00</agent>",
    ],
)
def test_malformed_never_raises(action):
    env = make()
    _, r, term, _, info = env.step(action)
    assert info["invalid_action"] and info["parse_error"] and r == pytest.approx(-0.1)
    assert info["step_tokens"] == 0 and not term


def test_run_python_solves_task():
    env = make()
    expr = env.task.meta["expression"]
    _, r, _, _, info = env.step(f"<agent>tool:run_python</agent><code>print({expr})</code>")
    assert info["tool_call"]["ok"] and r < 0
    assert info["tool_call"]["network"] in ("netns", "socket-stub")
    _, r, term, _, info = env.step("<agent>terminate</agent>")
    assert term and info["correct"] and r == 1.0 and info["final_answer"] == env.task.answer


def test_read_file_and_search_tools():
    env = make()
    _, _, _, _, info = env.step("<agent>tool:read_file</agent><path>problem.txt</path>")
    assert info["tool_call"]["ok"] and env.task.prompt in env.history[-1][1]
    env.step("<agent>tool:read_file</agent><path>../../etc/passwd</path>")
    assert "outside sandbox" in env.history[-1][1]
    env.step("<agent>tool:search</agent><query>python large integers</query>")
    assert "python-big-integers" in env.history[-1][1]


def test_patterns_matter():
    env = PuppeteerEnv(preset="titan")
    env.reset(seed=0)
    model = env.pool.names[1]
    wins = {}
    for pattern in ("reasoning", "question"):
        wins[pattern] = 0
        for i in range(200):
            env.reset(options={"task_index": i})
            _, _, _, _, info = env.step(f"<agent>{model}:{pattern}</agent>")
            wins[pattern] += env._is_correct(env.answer)
    assert wins["reasoning"] > wins["question"] + 30


def test_demo_action_valid_and_deterministic():
    env = PuppeteerEnv()
    for seed in range(5):
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.demo_action(rng))
            assert not info["invalid_action"], info["parse_error"]
            done = term or trunc
    assert gsm_hard_task(0, 5) == gsm_hard_task(0, 5)
    assert len(env.valid_agents()) == 0 or len(PATTERNS) == 8
