"""Seed 003 (Puppeteer) on ``PuppeteerEnv``: eq. 6 by hand, termination, tools, parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from orchenv.envs.puppeteer.agents import PATTERNS, majority_vote
from orchenv.envs.puppeteer.env import PuppeteerEnv
from orchenv.envs.puppeteer.tasks import (
    TASK_KINDS,
    commongen_task,
    concept_coverage,
    extract_choice,
    gsm_hard_task,
    make_task,
    multiple_choice_task,
    score_answer,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.pool import AgentPool, AgentSpec
from orchenv.testing.scripted import ScriptedBackend


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


def test_terminate_first_step_and_horizon_truncates():
    env = make()
    _, r, term, trunc, info = env.step("<agent>terminate</agent>")
    assert term and not trunc and r == 0.0 and info["correct"] is False and info["turns"] == 1
    env = make(max_turns=2)
    name = f"<agent>{env.pool.names[1]}:reasoning</agent>"
    assert env.step(name)[2:4] == (False, False)
    _, r, term, trunc, info = env.step(name)
    # cut short at the horizon: truncated, and the final step is graded all the same
    assert trunc and not term and info["turns"] == 2
    assert r == pytest.approx(float(info["correct"]) - 0.1 * info["step_cost"])


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
    assert info["tool_call"]["network"] == "netns"
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
            wins[pattern] += score_answer(env.tasks, env.task, env.answer) == 1.0
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


# -- task kinds and width ----------------------------------------------------------------


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


@pytest.mark.parametrize("tasks", TASK_KINDS)
def test_task_kinds_deterministic_and_splits_disjoint(tasks):
    assert make_task(tasks, 0, 4) == make_task(tasks, 0, 4)
    train = {make_task(tasks, 0, i).prompt for i in range(30)}
    test = {make_task(tasks, 0, i, "test").prompt for i in range(30)}
    assert len(train) > 20 and len(train & test) < 3
    env = PuppeteerEnv(tasks=tasks)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.demo_action(rng))
            assert not info["invalid_action"], info["parse_error"]
            done = term or trunc
        assert isinstance(info["score"], float) and 0.0 <= info["score"] <= 1.0


def test_multiple_choice_grading_by_hand():
    task = multiple_choice_task(0, 2)
    letter = task.answer
    wrong = next(x for x in "ABCD" if x != letter)
    assert len(task.meta["options"]) == 4 == len(set(task.meta["options"]))
    assert extract_choice(f"so \\boxed{{{letter}}}") == letter
    assert extract_choice(f"The answer is ({letter.lower()})") == letter
    assert extract_choice("no letter here 42") is None
    env, _ = scripted_env(f"I pick \\boxed{{{letter}}}", tasks="multiple-choice")
    assert env.task == task
    env.step("<agent>m:reasoning</agent>")
    _, r, term, _, info = env.step("<agent>terminate</agent>")
    assert term and info["correct"] and info["score"] == 1.0 and r == 1.0
    env, _ = scripted_env(f"\\boxed{{{wrong}}}", tasks="multiple-choice")
    env.step("<agent>m:reasoning</agent>")
    _, r, _, _, info = env.step("<agent>terminate</agent>")
    assert not info["correct"] and info["score"] == 0.0 and r == 0.0
    # the simulated agents answer a letter
    env = PuppeteerEnv(tasks="multiple-choice", preset="titan")
    env.reset(seed=0, options={"task_index": 1})
    env.step(f"<agent>{env.pool.names[1]}:reasoning</agent>")
    assert env.answer in ("A", "B", "C", "D")


def test_commongen_coverage_by_hand():
    concepts = ("dog", "throw", "bake", "cut", "berry")
    assert concept_coverage("Dogs throwing, baked; cutting berries!", concepts) == 1.0
    assert concept_coverage("A dog throws.", concepts) == pytest.approx(2 / 5)
    assert concept_coverage("", concepts) == 0.0 and concept_coverage(None, concepts) == 0.0
    assert concept_coverage("doghouse", ("dog",)) == 0.0
    task = commongen_task(0, 2)
    assert 3 <= len(task.meta["concepts"]) <= 6
    assert concept_coverage(task.answer, task.meta["concepts"]) == 1.0


def test_commongen_partial_score_in_reward_eq6():
    lam, phi = 0.1, 4.0
    concepts = commongen_task(0, 2).meta["concepts"]
    sentence = "We saw " + " and ".join(concepts[:2]) + "."
    env, _ = scripted_env(f"\\boxed{{{sentence}}}", tasks="commongen", lam=lam, phi=phi)
    _, r1, _, _, info1 = env.step("<agent>m:reasoning</agent>")
    c1 = info1["step_tokens"] / 1000 * math.log(1 + 1 / phi)
    assert r1 == pytest.approx(-lam * c1)
    _, r2, term, _, info = env.step("<agent>terminate</agent>")
    score = 2 / len(concepts)
    assert term and info["score"] == pytest.approx(score) and info["correct"] is False
    assert info["final_answer"] == sentence and r2 == pytest.approx(score)
    # a last step that calls an agent: R_T = r - lam * C_T
    env, _ = scripted_env(f"\\boxed{{{sentence}}}", tasks="commongen", max_turns=1)
    _, r, term, trunc, info = env.step("<agent>m:reasoning</agent>")
    c = info["step_tokens"] / 1000 * math.log(1 + 1 / 4.0)
    assert trunc and not term and r == pytest.approx(score - 0.1 * c)


def test_commongen_simulated_agents_cover_fractions():
    env = PuppeteerEnv(tasks="commongen", preset="titan")
    scores = []
    for i in range(40):
        env.reset(seed=0, options={"task_index": i})
        env.step(f"<agent>{env.pool.names[1]}:reasoning</agent>")
        scores.append(env.step("<agent>terminate</agent>")[4]["score"])
    assert 0.3 < np.mean(scores) < 0.95 and len(set(scores)) > 3


def test_majority_vote_width3_by_hand():
    assert majority_vote(["1", "2", "2"]) == "2"
    assert majority_vote(["1", "2", "3"]) == "1"  # tie -> first
    assert majority_vote([None, "5", None]) == "5" and majority_vote([None]) is None
    replies = {1: "\\boxed{10}", 1001: "\\boxed{20}", 2001: "\\boxed{20}"}
    env, backend = scripted_env(lambda spec, msgs, ctx: replies[ctx.turn], width=3, lam=0.1)
    _, r, _, _, info = env.step("<agent>m:reasoning</agent>")
    assert info["branch_answers"] == ["10", "20", "20"] and env.answer == "20"
    assert len(backend.calls) == 3 and info["agent_calls"] == {"m": 3}
    assert [c[2].turn for c in backend.calls] == [1, 1001, 2001]
    assert "Branch 2 of 3" in backend.calls[1][1][0]["content"]
    tokens = sum(sum(len(m["content"].split()) for m in msgs) + 1 for _, msgs, _ in backend.calls)
    assert info["step_tokens"] == tokens == info["tokens"]["prompt"] + info["tokens"]["completion"]
    assert r == pytest.approx(-0.1 * tokens / 1000 * math.log(1 + 1 / 4.0))
    # multiple-choice votes on the extracted letters
    replies = {2: "\\boxed{B}", 1002: "(C)", 2002: "Answer: B"}
    env2, _ = scripted_env(
        lambda spec, msgs, ctx: replies.get(ctx.turn, "\\boxed{A}"),
        width=3,
        tasks="multiple-choice",
    )
    env2.step("<agent>m:reasoning</agent>")
    _, _, _, _, info = env2.step("<agent>m:reasoning</agent>")
    assert info["branch_answers"] == ["B", "C", "B"] and env2.answer == "B"


# -- the episode on the shared base ---------------------------------------------------------


def test_episode_metrics_sum_the_steps():
    env = make(max_turns=6)
    expr = env.task.meta["expression"]
    actions = [
        f"<agent>{env.pool.names[0]}:planning</agent>",
        "<agent>tool:search</agent><query>percent</query>",
        "no tag",
        f"<agent>tool:run_python</agent><code>print({expr})</code>",
        "<agent>terminate</agent>",
    ]
    infos = [env.step(a)[4] for a in actions]
    assert all("metrics" not in info for info in infos[:-1])
    metrics = infos[-1]["metrics"]
    assert metrics["tokens"] == sum(info["step_tokens"] for info in infos) > 0
    assert metrics["token_cost"] == pytest.approx(sum(info["step_cost"] for info in infos))
    assert metrics["tool_calls"] == 2 and metrics["agent_steps"] == 1
    assert infos[-1]["correct"] and infos[-1]["score"] == 1.0


def test_unusable_reply_repeats_the_prompt_with_the_notice():
    env = make()
    first = env.step("<agent>tool:run_python</agent>")[0]
    assert first.endswith(
        "Current answer: (none)\n\nYour previous reply could not be used: "
        "tool:run_python needs a non-empty <code>. Reply again in the required format."
    )
    assert "Step 2 of 4." in first
    second = env.step("<agent>terminate</agent>")[0]
    assert "could not be used" not in second


def test_tasks_by_index_and_by_id():
    env = PuppeteerEnv(tasks="multiple-choice", split="test", n_tasks=50)
    _, info = env.reset(seed=0, options={"task_index": 7})
    assert env.task == multiple_choice_task(0, 7, "test") and info["task_id"] == "mc-0-test-7"
    _, info = env.reset(options={"task_id": "mc-0-test-7"})
    assert env.task == multiple_choice_task(0, 7, "test")
    env.reset(options={"task_id": "mc-0-3"})
    assert env.task == make_task("multiple-choice", 0, 3)
    with pytest.raises(IndexError):
        env.reset(options={"task_index": 50})
    with pytest.raises(UnknownNameError):
        env.reset(options={"task_id": "gsmhard-0-3"})
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert all(i.startswith("mc-0-test-") for i in ids) and len(ids) > 10


def test_fork_shares_the_search_index_and_the_sandbox():
    env = make()
    env.step("<agent>tool:search</agent><query>percent</query>")
    clone = env.fork()
    assert clone._search_index is env._search_index and clone.pool is env.pool
    assert clone._sandbox_root == env._sandbox_root
    clone.step("<agent>tool:read_file</agent><path>problem.txt</path>")
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


def test_pool_by_name():
    env = PuppeteerEnv(pool="system1")
    _, info = env.reset(seed=0)
    model = env.pool.names[0]
    assert f"{model}:reasoning" in info["valid_agents"]
    _, _, _, _, info = env.step(f"<agent>{model}:reasoning</agent>")
    assert info["called_agent"] == f"{model}:reasoning" and info["agent_calls"] == {model: 1}
