"""Seed 003 (Puppeteer) on ``PuppeteerEnv``: eq. 6 by hand, the action format (agents only),
agents that write their own tool calls, width branches, forks, arguments."""

from __future__ import annotations

import json
import math

import pytest
from gymnasium.utils.env_checker import check_env

from orchenv.envs.puppeteer import tasks as task_api
from orchenv.envs.puppeteer.agents import majority_vote, parse_tool_call, reply_answer
from orchenv.envs.puppeteer.env import PuppeteerEnv
from orchenv.envs.puppeteer.tasks import TASK_KINDS
from orchenv.error import ConfigError, UnknownNameError
from orchenv.pool import AgentPool, AgentSpec
from orchenv.testing.scripted import ScriptedBackend


def make(**kw):
    env = PuppeteerEnv(**kw)
    env.reset(seed=0, options={"task_index": 3})
    return env


def scripted_env(replies, **kw):
    spec = AgentSpec(name="m", model="m", tier=0, backend="scripted")
    backend = ScriptedBackend({"m": replies})
    env = PuppeteerEnv(pool=AgentPool([spec], {"scripted": backend}, name="s"), **kw)
    env.reset(seed=0, options={"task_index": 2})
    return env, backend


@pytest.mark.parametrize("tasks", TASK_KINDS)
def test_check_env_each_task_kind(tasks):
    for width in (1, 3):
        env = PuppeteerEnv(tasks=tasks, width=width)
        check_env(env, skip_render_check=True)
        env.close()


def test_eq6_by_hand_and_phi_is_the_step_budget():
    lam, gamma = 0.1, 0.99
    env = make(lam=lam, gamma=gamma)
    assert env.phi == 4.0 == env.max_turns  # phi defaults to the step budget
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
    costs = [tokens[t - 1] / 1000 * math.log(1 + t / 4.0) for t in (1, 2, 3)]
    for t in range(3):
        assert rewards[t] == pytest.approx(-lam * costs[t])
    assert rewards[3] == pytest.approx(info["score"])
    ret = info["score"]
    for t in (2, 1, 0):
        ret = gamma * ret - lam * costs[t]
    assert sum(gamma**k * rw for k, rw in enumerate(rewards)) == pytest.approx(ret)
    assert make(max_turns=6).phi == 6.0 and make(phi=2.5).phi == 2.5


def test_terminate_first_step_and_horizon_truncates():
    env = make()
    _, r, term, trunc, info = env.step("<agent>terminate</agent>")
    assert term and not trunc and r == 0.0 and info["correct"] is False and info["turns"] == 1
    env = make(max_turns=2)
    name = f"<agent>{env.pool.names[1]}:reasoning</agent>"
    assert env.step(name)[2:4] == (False, False)
    _, r, term, trunc, info = env.step(name)
    assert trunc and not term and info["turns"] == 2
    assert r == pytest.approx(info["score"] - 0.1 * info["step_cost"])


@pytest.mark.parametrize(
    "action",
    [
        "",
        "hello",
        "<agent>",
        "<agent>nobody:reasoning</agent>",
        "<agent>llama-3.1-8b:dance</agent>",
        "<agent>tool:web</agent>",
        "x" * 100_000,
        "<agent>\x00</agent>",
        "<agent>" * 50_000,
        "<agent>llama-3.1-8b:reasoning</agent><agent>terminate</agent>",
    ],
)
def test_malformed_never_raises(action):
    env = make()
    _, r, term, _, info = env.step(action)
    assert info["invalid_action"] and info["parse_error"] and r == pytest.approx(-0.1)
    assert info["step_tokens"] == 0 and not term


@pytest.mark.parametrize(
    "action",
    [
        "<agent>tool:run_python</agent><code>print(1)</code>",
        "<agent>tool:read_file</agent><path>problem.txt</path>",
        "<agent>tool:search</agent><query>percent</query>",
        "<agent>llama-3.1-8b:run_python</agent><code>print(1)</code>",
    ],
)
def test_old_format_with_tool_arguments_gets_a_clear_notice(action):
    env = make()
    obs, r, _, _, info = env.step(action)
    assert info["invalid_action"] and "names an agent only" in info["parse_error"]
    assert "MODEL:run_python" in info["parse_error"] and info["step_tokens"] == 0
    assert "could not be used" in obs and not env.history


def test_tool_agents_write_their_own_calls_and_never_answer():
    """The agent's model writes the program; it runs in the sandbox; the result enters the
    trajectory; the team still has no answer until a reasoning agent gives one."""
    env = make(preset="titan-mono")
    model = env.pool.names[0]
    for tool in ("run_python", "read_file", "search"):
        _, _, _, _, info = env.step(f"<agent>{model}:{tool}</agent>")
        (call,) = info["tool_calls"]
        assert call["tool"] == tool and call["call_found"]
        assert env.history[-1][0] == f"{model}:{tool}" and "result:" in env.history[-1][1]
        assert env.answer is None
    assert info["tool_calls"][0]["ok"]
    _, _, term, _, info = env.step("<agent>terminate</agent>")
    assert term and info["score"] == 0.0 and info["final_answer"] is None


def test_live_tool_call_is_parsed_from_the_reply_and_run():
    code = "print(6 * 7)"
    replies = {1: json.dumps({"action": "run_python", "parameter": code}), 2: "FINAL ANSWER: 42"}
    env, backend = scripted_env(lambda spec, msgs, ctx: replies[ctx.turn])
    _, _, _, _, info = env.step("<agent>m:run_python</agent>")
    assert info["tool_calls"][0]["ok"] and env.history[-1][1].rstrip().endswith("result: 42")
    assert "Pattern: run_python" in backend.calls[0][1][0]["content"]
    env.step("<agent>m:reasoning</agent>")
    assert env.answer == "42" and "result: 42" in backend.calls[1][1][1]["content"]


def test_reply_parsing_is_bounded():
    assert parse_tool_call("run_python", '{"action": "run_python", "parameter": "x=1"}') == "x=1"
    assert parse_tool_call("run_python", "```python\nprint(2)\n```") == "print(2)\n"
    assert parse_tool_call("search", "rate problems") == "rate problems"
    assert parse_tool_call("run_python", "no code here") is None
    assert parse_tool_call("run_python", "{" * 200_000) is None
    assert reply_answer("gsm-hard", "REASONING RESULT: ...\nFINAL ANSWER: 1,234") == "1,234"
    assert reply_answer("multiple-choice", "FINAL ANSWER: (C) because") == "C"
    assert reply_answer("srdd", "FINAL ANSWER:\n```python\ndef f():\n    return 1\n```") == (
        "def f():\n    return 1\n"
    )


def test_width3_branches_keep_separate_trajectories_and_vote():
    assert majority_vote(["1", "2", "2"]) == "2" and majority_vote(["1", "2", "3"]) == "1"
    assert majority_vote([None, "5", None]) == "5" and majority_vote([None]) is None
    replies = {1: "FINAL ANSWER: 10", 1001: "FINAL ANSWER: 20", 2001: "FINAL ANSWER: 20"}
    env, backend = scripted_env(
        lambda spec, msgs, ctx: replies.get(ctx.turn, "FINAL ANSWER: 7"), width=3
    )
    env.step("<agent>m:reasoning</agent>")
    assert [b.draft for b in env.branches] == ["10", "20", "20"] and env.answer == "20"
    assert [c[2].turn for c in backend.calls] == [1, 1001, 2001]
    assert "Branch 2 of 3" in backend.calls[1][1][0]["content"]
    # different agents per branch; each branch sees only its own trajectory
    _, _, _, _, info = env.step("<agent>m:critique</agent><agent>m:planning</agent>")
    assert info["called_agents"] == ["m:critique", "m:planning", "m:planning"]
    assert [len(b.history) for b in env.branches] == [2, 2, 2]
    assert "FINAL ANSWER: 10" in backend.calls[3][1][1]["content"]
    assert "FINAL ANSWER: 10" not in backend.calls[4][1][1]["content"]
    _, _, _, _, info = env.step("<agent>terminate</agent>")
    assert info["branch_answers"] == ["7", "20", "20"] and info["final_answer"] == "20"
    with pytest.raises(ConfigError):
        PuppeteerEnv(width=4)


def test_episode_metrics_sum_the_steps():
    env = make(max_turns=6)
    model = env.pool.names[0]
    actions = [
        f"<agent>{model}:planning</agent>",
        f"<agent>{model}:search</agent>",
        "no tag",
        f"<agent>{model}:run_python</agent>",
        f"<agent>{model}:reasoning</agent>",
        "<agent>terminate</agent>",
    ]
    infos = [env.step(a)[4] for a in actions]
    metrics = infos[-1]["metrics"]
    assert metrics["tokens"] == sum(info["step_tokens"] for info in infos) > 0
    assert metrics["token_cost"] == pytest.approx(sum(info["step_cost"] for info in infos))
    assert metrics["tool_calls"] == 2 and metrics["agent_steps"] == 2


def test_fork_shares_caches_and_the_sandbox():
    env = make()
    model = env.pool.names[0]
    env.step(f"<agent>{model}:search</agent>")
    clone = env.fork()
    assert clone._search_index is env._search_index and clone.pool is env.pool
    assert clone._sandbox_root == env._sandbox_root and clone._runs is env._runs
    clone.step(f"<agent>{model}:read_file</agent>")
    assert len(clone.history) == 2 and len(env.history) == 1
    env.close()
    assert env._sandbox_root is None


def test_arguments_are_checked():
    for kwargs in ({"max_turns": 0}, {"width": 0}, {"phi": 0.0}, {"n_tasks": 0}):
        with pytest.raises(ConfigError):
            PuppeteerEnv(**kwargs)
    for kwargs in ({"tasks": "poetry"}, {"preset": "europa"}, {"split": "dev"}):
        with pytest.raises(UnknownNameError):
            PuppeteerEnv(**kwargs)
    with pytest.raises(ConfigError, match="pool given by name"):
        PuppeteerEnv(backend="openai")


def test_pool_by_name_and_by_file(tmp_path):
    env = PuppeteerEnv(pool="system1")
    _, info = env.reset(seed=0)
    model = env.pool.names[0]
    assert (
        f"{model}:reasoning" in info["valid_agents"]
        and f"{model}:run_python" in (info["valid_agents"])
    )
    env.step(f"<agent>{model}:reasoning</agent>")
    agents = [
        {"name": n, "model": n, "tier": t, "backend": "simulated", "calibration": {"accuracy": a}}
        for n, t, a in (("a1", 1, 0.5), ("a2", 0, 0.7))
    ]
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"name": "p", "agents": agents}))
    env = PuppeteerEnv(pool=str(path))  # the env builds the pool from the file
    _, info = env.reset(seed=0)
    assert set(env.pool.names) == {"a1", "a2"} and "a2:run_python" in info["valid_agents"]
    _, _, _, _, info = env.step("<agent>a2:reasoning</agent>")
    assert info["agent_calls"] == {"a2": 1}


def test_presets_are_the_papers_agent_spaces():
    sizes = {p: len(PuppeteerEnv(preset=p).pool.names) for p in ("mimas", "titan")}
    assert sizes == {"mimas": 6, "titan": 8}
    assert PuppeteerEnv(preset="mimas-mono").pool.names == ("llama-3.1-8b",)
    assert PuppeteerEnv(preset="titan-mono").pool.names == ("llama-3.1-405b",)
    env = make(preset="titan")
    assert len(env.action_choices()) == 8 * 11 + 1


def test_task_api_is_what_the_simulation_uses():
    task = task_api.make_task("gsm-hard", 0, 1, "test")
    assert task.meta["family"] == "gsm_hard" and isinstance(task_api.search_terms(task), str)
    assert task_api.reference_program(task)
