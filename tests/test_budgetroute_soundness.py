"""Issue 14, item 4: ``orch/BudgetRoute-v0`` rewards the skill seed 001 (CoRL) is about.

Best responses are found here by exhaustive search over ``action_choices()`` with
``env.fork()`` (simulated experts are deterministic given the state, so a forked branch is
the exact outcome: privileged information), pruned by branch and bound (a branch over budget
or already dearer than a found right answer cannot win). Ties go to the cheaper policy, then
to fewer calls. Samples are small (``TASKS`` test problems per mode) to keep CI fast.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

from orchenv.envs.budgetroute.env import DEFAULT_BUDGETS, REQUEST_KINDS, BudgetRouteEnv
from orchenv.envs.budgetroute.experts import (
    CARRY_LOGIT,
    HINT_LOGIT,
    STEP_LOGIT,
    UNRELATED_LOGIT,
    KeyStepReply,
    canonical_requests,
    judge,
    key_step_for,
    partial_work,
    task_key_step,
)
from orchenv.grading import extract_boxed
from orchenv.tasks import Task

MODES = ("low", "medium", "high")
TASKS = 60  # test-split problems per mode
TOLERANCE = 0.02
NANO, GPT41, O3 = "GPT-4.1-nano", "GPT-4.1", "o3"


@dataclass
class Leaf:
    """One finished episode: its return, cost and calls, and the actions that led to it."""

    ret: float
    cost: float
    correct: bool
    calls: dict[str, int]
    path: list[str] = field(default_factory=list)

    def key(self) -> tuple[float, float, int]:
        return (self.ret, -self.cost, -sum(self.calls.values()))


def best_response(env: BudgetRouteEnv, budget: float, total: float = 0.0) -> Leaf | None:
    """The best leaf below ``env``'s state (branch and bound over ``action_choices``)."""
    best: Leaf | None = None
    for text in env.action_choices():
        if text is None:
            continue
        if best is not None and best.ret >= 1.0 and env.meter.cost_usd >= best.cost:
            break  # nothing below can be right for less
        child = env.fork()
        _, r, term, trunc, info = child.step(text)
        if term or trunc:
            leaf = Leaf(total + r, info["episode_cost_usd"], info["correct"], info["agent_calls"])
        elif child.meter.cost_usd > budget and best is not None:
            continue  # over budget: every answer below earns 0 and costs more
        else:
            leaf = best_response(child, budget, total + r)
            if leaf is None:
                continue
        leaf.path = [text, *leaf.path]
        if best is None or leaf.key() > best.key():
            best = leaf
    return best


def episodes(mode: str, n: int = TASKS) -> list[BudgetRouteEnv]:
    """Fresh episodes on the first ``n`` test problems, in ``mode``."""
    out = []
    for i in range(n):
        env = BudgetRouteEnv(split="test")
        env.reset(seed=0, options={"budget_mode": mode, "task_index": i})
        out.append(env)
    return out


def summarise(leaves: list[Leaf]) -> dict:
    calls: Counter = Counter()
    for leaf in leaves:
        calls.update(leaf.calls)
    n = len(leaves)
    return {
        "return": float(np.mean([x.ret for x in leaves])),
        "accuracy": float(np.mean([x.correct for x in leaves])),
        "cost": float(np.mean([x.cost for x in leaves])),
        "calls": {k: v / n for k, v in calls.items()},
    }


@pytest.fixture(scope="module")
def best() -> dict[str, dict]:
    table = {}
    for mode in MODES:
        leaves = [best_response(env, DEFAULT_BUDGETS[mode]) for env in episodes(mode)]
        table[mode] = summarise([leaf for leaf in leaves if leaf is not None])
    return table


def play(env: BudgetRouteEnv, policy) -> Leaf:
    """Run ``policy(env) -> action text`` to the end of the episode."""
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, info = env.step(policy(env))
        total += r
        done = term or trunc
    return Leaf(total, info["episode_cost_usd"], info["correct"], info["agent_calls"])


def choice(kind: str, expert: str):
    """A fixed policy over the discrete choices: ask ``expert`` (``kind`` of request, and
    "finish" after a "key-step"), then answer with the latest expert answer."""

    def policy(env: BudgetRouteEnv) -> str:
        choices = env.action_choices()
        base = 2 + len(REQUEST_KINDS) * env.pool.names.index(expert)
        if kind == "key-step" and env.key_step_replies and len(env.history) == 1:
            return choices[base + REQUEST_KINDS.index("finish")]
        if env.history:
            return choices[1] or choices[0] or "<answer>0</answer>"
        return choices[base + REQUEST_KINDS.index(kind)]

    return policy


def mean_accuracy(mode: str, policy, n: int = TASKS) -> tuple[float, float]:
    leaves = [play(env, policy) for env in episodes(mode, n)]
    return float(np.mean([x.correct for x in leaves])), float(np.mean([x.cost for x in leaves]))


# -- (a) the paper's order holds for the best response ------------------------------------
def test_best_response_orders_cost_and_accuracy_low_medium_high(best):
    low, medium, high = (best[m] for m in MODES)
    assert low["accuracy"] < medium["accuracy"] < high["accuracy"], best
    assert low["cost"] < medium["cost"] < high["cost"], best
    assert low["return"] < medium["return"] < high["return"], best
    # each mode has its own policy: only medium and high ever need more than one nano call's
    # worth of money, only high needs the dear experts
    assert low["cost"] <= DEFAULT_BUDGETS["low"]
    assert high["calls"].get(GPT41, 0) + high["calls"].get(O3, 0) > medium["calls"].get(GPT41, 0)


# -- (b) no shortcut comes near the best response -----------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_no_degenerate_strategy_within_tolerance(best, mode):
    strategies = BudgetRouteEnv().audit_strategies()
    assert {"answer-alone", "copy-question", "numbers-only-sub-query", "always-cheapest",
            "always-most-expensive", "empty-sub-query", "garbage-around-tag", "max-turns"} \
        <= set(strategies)  # fmt: skip
    for name, strategy in strategies.items():
        if name.startswith("budget-blind"):
            continue  # honest plans that ignore the mode: tests/test_budgetroute_audit.py
        got = np.mean([play(env, strategy).ret for env in episodes(mode)])
        assert got < best[mode]["return"] - TOLERANCE, (mode, name, got, best[mode])


# -- (c) the sub-query matters ------------------------------------------------------------
@pytest.mark.parametrize("expert", [NANO, GPT41, O3])
def test_pointed_beats_whole_beats_unrelated(expert):
    pointed, _ = mean_accuracy("high", choice("pointed", expert))
    whole, _ = mean_accuracy("high", choice("whole", expert))
    unrelated, _ = mean_accuracy("high", lambda env: (
        f"<search>{expert}: What is the capital of France?</search>"
        if not env.history else f"<answer>{env.last_answer() or 0}</answer>"))  # fmt: skip
    assert pointed > whole > unrelated + 0.5
    assert unrelated < 0.1


def test_two_cheap_calls_beat_one_expensive_call():
    """Key step to GPT-4.1-nano, then finish with GPT-4.1-nano, against GPT-4.1 whole."""
    decomposed, cheap = mean_accuracy("high", choice("key-step", NANO), 400)
    single, dear = mean_accuracy("high", choice("whole", GPT41), 400)
    assert decomposed > single + 0.01 and cheap < dear / 5


def test_best_fixed_policy_differs_by_mode():
    """Without privileged information (one fixed plan for every problem), the best plan is
    a pointed nano call in low, the nano decomposition in medium, o3 in high."""
    plans = {
        "nano pointed": choice("pointed", NANO),
        "nano decomposed": choice("key-step", NANO),
        "o3 pointed": choice("pointed", O3),
    }
    best_plan = {}
    for mode in MODES:
        scores = {}
        for name, plan in plans.items():
            leaves = [play(env, plan) for env in episodes(mode, 120)]
            scores[name] = np.mean([x.ret for x in leaves])
        best_plan[mode] = max(scores, key=scores.get)
    assert best_plan == {"low": "nano pointed", "medium": "nano decomposed", "high": "o3 pointed"}


# -- the judge ----------------------------------------------------------------------------
def test_judge_kinds_and_logits():
    env = BudgetRouteEnv(split="test")
    env.reset(seed=0, options={"task_index": 8})  # 'What is the remainder when $2^{35}$ ...'
    q = env.task.prompt
    step = task_key_step(q, env.task.meta["family"], env.task.meta["solution"])
    assert step is key_step_for(q) and "period" in step.cues
    req = canonical_requests(q)
    assert judge(req["whole"], q, step).guidance == 0.0
    assert judge(req["pointed"], q, step).guidance == HINT_LOGIT
    assert judge(req["key-step"], q, step).guidance == STEP_LOGIT
    assert judge("Please help.", q, step).guidance == UNRELATED_LOGIT
    assert judge("What is 2 + 2?", q, step).kind == "unrelated"
    assert judge("What is the remainder when $2^{35}$ is divided by 7?", q, step).kind == "partial"
    assert judge(f"{q} Use the order of operations.", q, step).kind == "misled"
    everything = " ".join(k for k in ("period", "common denominator", "factorial", "vieta"))
    assert judge(f"{q} Hints: {everything}.", q, step).kind == "misled"  # stuffing every method
    work = "Step 1: Compute successive powers modulo $11$: they repeat every 10 steps."
    finish = f"{q}\nThe key step, worked out:\n{work}\nFinish."
    assert judge(finish, q, step, [KeyStepReply(work, True)]).guidance == CARRY_LOGIT
    assert judge(finish, q, step, [KeyStepReply(work, False)]).guidance == -CARRY_LOGIT


def test_key_step_from_a_reference_solution():
    """A task from another source: its key step is its solution's first step."""
    q = "Find the area of a circle whose circumference is $10\\pi$."
    sol = "The radius satisfies $2\\pi r = 10\\pi$, so the radius is $5$. Area $25\\pi$."
    step = task_key_step(q, None, sol)
    assert step is not None and "radius" in step.cues
    assert judge(f"{q} First find the radius from it, since it satisfies 2 pi r.", q, step).kind \
        == "pointed"  # fmt: skip
    assert judge(q, q, step).kind == "whole"
    assert task_key_step(q, None, None) is None


def test_key_step_reply_shows_work_without_final_answer():
    env = BudgetRouteEnv(split="test")
    env.reset(seed=0, options={"task_index": 3, "budget_mode": "high"})
    choices = env.action_choices()
    _, _, _, _, info = env.step(choices[2 + REQUEST_KINDS.index("key-step")])
    assert info["privileged"]["request"] == "key-step"
    shown = env.history[-1][2]
    assert extract_boxed(shown) is None and shown.strip()
    assert env.last_answer() is None and env.action_choices()[1] is None
    finish = env.action_choices()[2 + REQUEST_KINDS.index("finish")]
    assert finish is not None and shown in finish
    _, _, _, _, info = env.step(finish)
    assert info["privileged"]["request"] == "finish"
    assert abs(info["privileged"]["guidance"]) == CARRY_LOGIT
    assert partial_work("Step 1: a\nStep 2: b\nThe final answer is $\\boxed{3}$") == "Step 1: a"


# -- the discrete action set --------------------------------------------------------------
def test_action_choices_shape_masks_and_no_gold():
    env = BudgetRouteEnv(split="test", budget_mode="medium")
    env.reset(seed=0, options={"task_index": 0})
    first = env.action_choices()
    assert len(first) == 2 + len(REQUEST_KINDS) * 3
    assert first[0] is not None and first[1] is None  # own answer; no expert answer yet
    finish_slots = [2 + len(REQUEST_KINDS) * k + 3 for k in range(3)]
    assert all(first[i] is None for i in finish_slots)
    env.step(first[2])
    env.step(env.action_choices()[2])
    last = env.action_choices()
    assert len(last) == len(first) and last[1] is not None
    assert all(c is None for c in last[2:])  # the last turn: answer only
    task = env.task
    fake = Task(task.id, task.prompt, ("not the answer",), task.meta)
    env.reset(seed=0, options={"task": fake})
    assert env.action_choices()[1:] == first[1:]  # nothing but the own solution reads gold


def test_prompt_shows_expected_cost_per_call():
    env = BudgetRouteEnv(split="test")
    costs: dict[str, list[float]] = {NANO: [], GPT41: [], O3: []}
    for i in range(40):
        obs, _ = env.reset(seed=0, options={"task_index": i, "budget_mode": "high"})
        for name in costs:
            assert f"- {name}: $" in obs and "per call" in obs
        for name in costs:
            fork = env.fork()
            _, _, _, _, info = fork.step(f"<search>{name}: {env.task.prompt}</search>")
            costs[name].append(info["cost_usd"] / env.expected_call_cost(name))
    for name, ratios in costs.items():
        assert 0.85 < np.mean(ratios) < 1.15, name
