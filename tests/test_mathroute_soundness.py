"""Is the best way to score on MathRoute the skill seed 000 studies?

Best responses are computed exactly: from each task's start state every sequence of the
env's discrete choices (``action_choices()``, at most 3 turns) is stepped on ``fork()``
copies, and simulated agents are deterministic given the state, so the best sequence is
the best response with privileged information. This file has its own small enumeration
(independent of ``orchenv.audit``) on a small task sample.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the orch/ ids)
from orchenv.backends.simulated import SimulatedBackend
from orchenv.discrete import ChoiceActions
from orchenv.envs.mathroute.critique import judge_critique, locate_error, pointed_critique
from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.envs.mathroute.loaders import load_math_records
from orchenv.envs.mathroute.mathgen import ProceduralMathSource, worked_solution
from orchenv.envs.mathroute.protocol import route_text, verdict_text
from orchenv.pool import make_pool
from orchenv.tasks import Task

ENV_IDS = ["orch/MathRoute-v0", "orch/MathRouteSystem2-v0"]
TASKS = 40
TOLERANCE = 0.02


def make(env_id: str, **kwargs: Any) -> MathRouteEnv:
    env = gym.make(env_id, split="test", **kwargs).unwrapped
    assert isinstance(env, MathRouteEnv)
    return env


def best_response(env: MathRouteEnv) -> tuple[float, list[str], dict[str, Any]]:
    """(return, actions, last info) of the best choice sequence from ``env``'s state; ties
    go to the shorter episode, then to the earlier choice."""
    best: tuple[float, list[str], dict[str, Any]] | None = None
    for text in env.action_choices():
        if text is None:
            continue
        child = env.fork()
        _, reward, terminated, truncated, info = child.step(text)
        if terminated or truncated:
            value, actions = reward, [text]
        else:
            rest, tail, info = best_response(child)  # type: ignore[arg-type]
            value, actions = reward + rest, [text, *tail]
        if (
            best is None
            or value > best[0] + 1e-9
            or (abs(value - best[0]) <= 1e-9 and len(actions) < len(best[1]))
        ):
            best = (value, actions, info)
    assert best is not None
    return best


def play(env: MathRouteEnv, policy: Any) -> tuple[float, dict[str, Any]]:
    total = 0.0
    while True:
        _, reward, terminated, truncated, info = env.step(policy(env))
        assert not info["invalid_action"]
        total += reward
        if terminated or truncated:
            return total, info


def audit(env_id: str, **kwargs: Any) -> dict[str, Any]:
    """Mean best-response return and behaviour, and each audit strategy's mean return."""
    env = make(env_id, **kwargs)
    returns, false_rejections, first = [], [], []
    strategies: dict[str, list[float]] = {name: [] for name in env.audit_strategies()}
    for k in range(TASKS):
        env.reset(seed=0, options={"task_index": k})
        value, actions, info = best_response(env)
        returns.append(value)
        false_rejections.append(info["metrics"]["false_rejections"])
        first.append(actions[0])
        for name, policy in env.audit_strategies().items():
            env.reset(seed=0, options={"task_index": k})
            strategies[name].append(play(env, policy)[0])
    return {
        "best": float(np.mean(returns)),
        "false_rejections": float(np.mean(false_rejections)),
        "first": first,
        "weakest": route_text(env.pool.weakest()),
        "strategies": {name: float(np.mean(v)) for name, v in strategies.items()},
    }


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_paper_reward_pays_for_rejecting_right_drafts(env_id: str) -> None:
    """Eq. (1)/(3) as written: the best response always starts with the weakest agent and
    rejects drafts it knows are right (0.54 / 0.27 per episode on 500 tasks)."""
    result = audit(env_id, reward="paper")  # the default is "outcome" (issue 25)
    assert result["false_rejections"] >= 0.2, result
    assert set(result["first"]) == {result["weakest"]}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_outcome_reward_has_no_exploit_and_no_shortcut(env_id: str) -> None:
    result = audit(env_id)  # reward="outcome", the default
    assert result["false_rejections"] == 0.0, result
    assert len(set(result["first"])) > 1, "the best first route depends on the task"
    for name, value in result["strategies"].items():
        assert value < result["best"] - TOLERANCE, (name, value, result["best"])


def test_action_choices_are_the_discrete_views_actions() -> None:
    """Same length in every state; None exactly where the core view (ChoiceActions) masks;
    the texts are what it sends; available choices are never invalid."""
    wrapped = ChoiceActions(gym.make("orch/MathRoute-v0", split="test"))
    env = wrapped.unwrapped
    assert isinstance(env, MathRouteEnv)
    n = len(env.pool.names) + 1
    for k in range(3):
        frontier: list[list[int]] = [[]]
        while frontier:
            prefix = frontier.pop()
            wrapped.reset(seed=0, options={"task_index": k})
            done = False
            for action in prefix:
                *_, terminated, truncated, _ = wrapped.step(action)
                done = terminated or truncated
            if done:
                continue
            choices = env.action_choices()
            assert len(choices) == n
            mask = wrapped.action_masks()
            np.testing.assert_array_equal(mask, [c is not None for c in choices])
            for index, text in enumerate(choices):
                if text is not None:
                    assert wrapped.action(index) == text
                    child = env.fork()
                    assert not child.step(text)[-1]["invalid_action"]
                    frontier.append([*prefix, index])


def test_a_critique_that_finds_the_wrong_step_helps_the_next_solver() -> None:
    """Pointed >= generic = empty >= misleading, nested task by task (the bonus only shifts
    the margin), and strictly better on a sample of wrong weakest drafts."""
    env = make("orch/MathRoute-v0")
    middle = env.pool.names[1]
    right: dict[str, set[int]] = {"pointed": set(), "generic": set(), "misleading": set()}
    wrong_drafts = 0
    for k in range(300):
        env.reset(seed=0, options={"task_index": k})
        env.step(route_text(env.pool.weakest()))
        if env.draft_correct:
            continue
        wrong_drafts += 1
        site = locate_error(env.task, env.draft)
        notes = {
            "pointed": pointed_critique(site),
            "generic": "Something is off; please recheck the computation.",
            "misleading": f"Step {(site.step or 0) + 7} is wrong.",
        }
        for kind, note in notes.items():
            child = env.fork()
            *_, info = child.step(verdict_text(False, middle, note=note))
            assert info["privileged"]["critique"] == kind
            if info["privileged"]["response_correct"]:
                right[kind].add(k)
    assert wrong_drafts > 50
    assert right["misleading"] <= right["generic"] <= right["pointed"]
    assert len(right["pointed"]) > len(right["generic"]) > len(right["misleading"])


def test_locating_the_injected_error() -> None:
    source = ProceduralMathSource()
    for i in range(200):
        task = source.get("test", i)
        rng = np.random.default_rng(i)
        assert locate_error(task, worked_solution(task, correct=True, rng=rng)) is None
        wrong = worked_solution(task, correct=False, rng=rng)
        site = locate_error(task, wrong)
        assert site is not None and site.step is not None
        assert f"{site.step}" in wrong.splitlines()[site.line - 1]
        assert judge_critique(pointed_critique(site), site) == "pointed"
        assert judge_critique("Please recheck everything.", site) == "generic"
        assert judge_critique("", site) == "empty"
        every = ", ".join(f"step {n}" for n in range(1, 9))
        assert judge_critique(f"Wrong: {every}.", site) == "generic", "naming every step"
        numbers = " ".join(str(n) for n in range(-20, 200))
        assert judge_critique(f"One of {numbers} is off.", site) == "generic"
    assert judge_critique("Step 2 is wrong.", None) == "misleading", "a right draft"


def test_level_mix_keeps_calibrated_accuracies() -> None:
    """A split whose levels are not 20% each (the MATH test mix) keeps each simulated agent
    at its calibrated accuracy; the fixed fifth-per-level mapping would not."""
    mix = {1: 437, 2: 894, 3: 1131, 4: 1214, 5: 1324}
    records = [
        {"id": f"s/{level}/{i}", "problem": "p", "answer": "1", "level": f"Level {level}"}
        for level, count in mix.items()
        for i in range(count)
    ]
    tasks = list(load_math_records(records).iter("test"))
    fixed = [Task(t.id, t.prompt, t.answers, {"level": t.level}) for t in tasks]
    backend = SimulatedBackend()
    pool = make_pool("system1")
    for name in pool.names:
        spec = pool.spec(name)
        target = spec.calibration["accuracy"]
        spread = np.mean([backend.is_correct(spec, t) for t in tasks])
        assert abs(spread - target) < 0.02, (name, spread, target)
    weakest = pool.spec(pool.weakest())
    old = np.mean([backend.is_correct(weakest, t) for t in fixed])
    assert old < weakest.calibration["accuracy"] - 0.05


@pytest.mark.parametrize("env_id", ["orch/MathRoute-v0", "orch/MathRouteSystem2-v0"])
def test_a_blind_critique_is_not_pointed_more_often_than_chance(env_id: str) -> None:
    """Issue 38: the fixed "Step 2 and step 3 look wrong." was judged pointed on 59% of wrong
    weakest drafts (errors cluster at steps 2-3). No draft-blind critique naming steps may be
    pointed more often than a uniform guess over the draft's steps."""
    from orchenv.envs.mathroute.env import BLIND_CRITIQUE

    env = make(env_id)
    blind = {"two": BLIND_CRITIQUE, **{str(k): f"Step {k} looks wrong." for k in range(1, 7)}}
    pointed = dict.fromkeys(blind, 0)
    chance, wrong = 0.0, 0
    for k in range(200):
        env.reset(seed=0, options={"task_index": k})
        env.step(route_text(env.pool.weakest()))
        if env.draft_correct:
            continue
        wrong += 1
        site = locate_error(env.task, env.draft)
        steps = len(re.findall(r"^\s*(?:step\s*)?\d+\s*[:.]", env.draft, re.I | re.M))
        chance += 1 / max(steps, 1)
        assert judge_critique(pointed_critique(site), site) == "pointed"
        for name, note in blind.items():
            pointed[name] += judge_critique(note, site) == "pointed"
    assert wrong > 50
    for name, hits in pointed.items():
        assert hits <= chance, (name, hits, chance, wrong)


def test_locating_the_error_in_a_laid_out_draft() -> None:
    """The simulated backend regroups a draft's steps into its own lines (``shape_draft``):
    the error is still found by its mathematics, on the line that holds it."""
    from orchenv.backends.simulated import shape_draft

    source = ProceduralMathSource()
    found = 0
    for i in range(150):
        task = source.get("test", i)
        rng = np.random.default_rng(i)
        right = worked_solution(task, correct=True, rng=rng)
        wrong = worked_solution(task, correct=False, rng=rng)
        key = bytes((i * 37 + k) % 256 for k in range(8))
        assert locate_error(task, shape_draft(right, key)) is None
        laid = shape_draft(wrong, key)
        site = locate_error(task, laid)
        assert site is not None
        line = laid.splitlines()[site.line - 1]
        if site.wrong is not None:
            found += 1
            assert site.wrong in line
        if site.step is not None:
            assert line.lstrip().split(":")[0].split(".")[0].endswith(str(site.step))
        assert judge_critique(pointed_critique(site), site) == "pointed"
    assert found > 120
