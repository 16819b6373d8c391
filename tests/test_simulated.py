"""Tests of the simulated agent backend and the seed-000 pool presets.

The calibration test is a project acceptance criterion: every simulated agent
hits its Table 1 (M-LEval) accuracy within 2 points on 2,000 test tasks, and
its wrong answers really are wrong when graded like a live model's.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import pickle
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from orchenv.backends.simulated import (
    SimulatedBackend,
    estimate_prompt_tokens,
    expected_accuracy,
    solve_ability,
)
from orchenv.error import BackendError, ConfigError
from orchenv.grading import check_math_solution
from orchenv.pool import AgentSpec, CallContext, load_preset_data, make_backend, make_pool
from orchenv.pricing import price_for
from orchenv.tasks import Task

N_TASKS = 2000
PRESETS = ("system1", "system2")
TARGETS = {
    "system1": {
        "Qwen2.5-1.5B-Instruct": 0.554,
        "Qwen2.5-7B-Instruct": 0.757,
        "Qwen3-30B-A3B-Instruct": 0.956,
    },
    "system2": {
        "Llama-3.2-1B-Instruct": 0.275,
        "Ministral-3-8B-Instruct": 0.724,
        "Qwen3-30B-A3B-Instruct": 0.956,
    },
}


# -- task source: orchenv.envs.mathroute.mathgen, or a tiny stand-in until it exists ----------
def _van_der_corput(i: int) -> float:
    z, denom = 0.0, 1.0
    while i:
        i, digit = divmod(i, 2)
        denom *= 2.0
        z += digit / denom
    return z


class _StubSource:
    """Sums of two integers with a low-discrepancy difficulty layout (stand-in for mathgen)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def get(self, split: str, index: int) -> Task:
        z = _van_der_corput(index + 1)
        a, b = 3 * index + 7, 11 * index + 2
        return Task(
            id=f"stub/{split}/{index:05d}",
            prompt=f"What is {a} + {b}?",
            answers=(str(a + b),),
            meta={"difficulty": z, "level": 1 + int(5 * z), "a": a, "b": b},
        )

    def iter(self, split: str, limit: int | None = None):
        for i in range(limit or 0):
            yield self.get(split, i)


def _stub_worked_solution(task: Task, *, correct: bool, rng: np.random.Generator) -> str:
    a, b = task.meta["a"], task.meta["b"]
    result = a + b if correct else a + b + int(rng.integers(1, 10))
    opener = ["We add the numbers.", "Add the two terms.", "Sum them."][int(rng.integers(3))]
    return f"{opener}\n{a} + {b} = {result}.\nTherefore the answer is $\\boxed{{{result}}}$."


@pytest.fixture(scope="module")
def source():
    """ProceduralMathSource(seed=0) when orchenv.envs.mathroute.mathgen exists, else the stand-in."""
    if importlib.util.find_spec("orchenv.envs.mathroute.mathgen") is not None:
        from orchenv.envs.mathroute.mathgen import ProceduralMathSource

        yield ProceduralMathSource(seed=0)
        return
    stub = types.ModuleType("orchenv.envs.mathroute.mathgen")
    stub.worked_solution = _stub_worked_solution  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "orchenv.envs.mathroute.mathgen", stub)
        yield _StubSource(seed=0)


@pytest.fixture(scope="module")
def tasks(source) -> list[Task]:
    return list(source.iter("test", limit=N_TASKS))


def _messages(task: Task, variant: int = 0) -> list[dict[str, str]]:
    systems = [
        "Solve the math problem step by step. Put the final answer in \\boxed{}.",
        "You are a careful mathematician. Think step by step and box your final answer.",
    ]
    return [
        {"role": "system", "content": systems[variant]},
        {"role": "user", "content": task.prompt},
    ]


@pytest.fixture(scope="module")
def outcomes(tasks):
    """Per preset and agent: the completions of the first N_TASKS test tasks."""
    result = {}
    for preset in PRESETS:
        pool = make_pool(preset)
        result[preset] = {
            name: [pool.call(name, _messages(t), CallContext(task=t)) for t in tasks]
            for name in pool.names
        }
    return result


def _correct(completions) -> np.ndarray:
    return np.array([c.meta["correct"] for c in completions], dtype=bool)


# -- presets --------------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_documents_prices_and_targets(preset):
    data = load_preset_data(preset)
    assert data["paper"] == "seeds/000 Table 1"
    agents = {a["name"]: a for a in data["agents"]}
    assert {n: a["calibration"]["accuracy"] for n, a in agents.items()} == TARGETS[preset]
    for agent in agents.values():
        assert agent["backend"] == "simulated"
        price = price_for(agent["price"])
        assert price.prompt > 0 and price.completion > 0
        assert "retrieved 2026-11" in price.source and "http" in price.source
        assert 300 <= agent["calibration"]["mean_completion_tokens"] <= 800
    pool = make_pool(preset)
    strongest, middle, weakest = pool.strongest(), pool.names[1], pool.weakest()
    assert pool.usage_constraints == {strongest: 0.25, middle: 0.5, weakest: 1.0}
    assert pool.lagrange_multipliers == {strongest: 0.25, middle: 0.125, weakest: 0.0}
    assert [pool.spec(n).tier for n in pool.names] == [2, 1, 0]


# -- calibration (acceptance criterion) ---------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_accuracy_matches_table1_and_grading_agrees(preset, tasks, outcomes):
    for name, completions in outcomes[preset].items():
        flagged = _correct(completions)
        graded = np.array(
            [
                check_math_solution(c.text, t.answers)
                for c, t in zip(completions, tasks, strict=True)
            ]
        )
        disagree = np.flatnonzero(flagged != graded)
        assert disagree.size == 0, (
            f"{name}: meta['correct'] and grading disagree on {disagree.size} tasks, "
            f"e.g. {tasks[disagree[0]].id}: {completions[disagree[0]].text!r}"
        )
        target = TARGETS[preset][name]
        assert abs(flagged.mean() - target) <= 0.02, (name, flagged.mean(), target)
        assert all(c.meta["answer"] is not None for c in completions)


# -- nested skills and difficulty ---------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_stronger_agents_solve_what_weaker_ones_solve(preset, outcomes):
    names = list(outcomes[preset])  # weakest first
    correct = {n: _correct(outcomes[preset][n]) for n in names}
    for i, weak in enumerate(names):
        for strong in names[i + 1 :]:
            conditional = correct[strong][correct[weak]].mean()
            assert conditional >= 0.9, (weak, strong, conditional)
            assert conditional > correct[strong].mean(), (weak, strong)


@pytest.mark.parametrize("preset", PRESETS)
def test_accuracy_falls_with_level(preset, tasks, outcomes):
    levels = np.array([t.level for t in tasks])
    assert set(levels) == {1, 2, 3, 4, 5}
    for name, completions in outcomes[preset].items():
        correct = _correct(completions)
        assert correct[levels == 1].mean() > correct[levels == 5].mean(), name


# -- determinism and refinement -------------------------------------------------------
def _spec(preset: str, which: str) -> AgentSpec:
    pool = make_pool(preset)
    return pool.spec(getattr(pool, which)())


def test_same_inputs_give_identical_completions(tasks):
    spec = _spec("system1", "weakest")
    a, b = SimulatedBackend(seed=5), SimulatedBackend(seed=5)
    for t in tasks[:200]:
        ctx = CallContext(task=t)
        assert a.complete(spec, _messages(t), ctx) == b.complete(spec, _messages(t), ctx)


def test_seed_changes_outcomes_but_not_calibration(tasks):
    spec = _spec("system1", "weakest")
    runs = []
    for seed in (0, 1):
        backend = SimulatedBackend(seed=seed)
        runs.append(np.array([backend.is_correct(spec, t) for t in tasks]))
    assert (runs[0] != runs[1]).sum() > 20
    assert abs(runs[1].mean() - spec.calibration["accuracy"]) <= 0.02


def test_correctness_ignores_prompt_wording(tasks):
    spec = _spec("system2", "weakest")
    backend = SimulatedBackend()
    first = [backend.complete(spec, _messages(t, 0), CallContext(task=t)) for t in tasks[:300]]
    second = [backend.complete(spec, _messages(t, 1), CallContext(task=t)) for t in tasks[:300]]
    assert [c.meta["correct"] for c in first] == [c.meta["correct"] for c in second]
    # surface form (length) does vary with the prompt
    assert any(
        x.completion_tokens != y.completion_tokens for x, y in zip(first, second, strict=True)
    )


@pytest.mark.parametrize("preset", PRESETS)
def test_refinement_raises_accuracy_monotonically(preset, tasks):
    spec = _spec(preset, "weakest")
    backend = SimulatedBackend()
    plain = np.array([backend.is_correct(spec, t) for t in tasks])
    draft = np.array(
        [backend.is_correct(spec, t, CallContext(task=t, draft="x = 1")) for t in tasks]
    )
    pointed = CallContext(task=tasks[0], draft="x = 1", feedback="Step 2 is wrong.", guidance=0.5)
    full = np.array(
        [
            backend.complete(spec, _messages(t), dataclasses.replace(pointed, task=t)).meta[
                "correct"
            ]
            for t in tasks
        ]
    )
    assert plain.mean() < draft.mean() < full.mean()
    assert not np.any(plain & ~draft) and not np.any(draft & ~full)
    # model probabilities move the same way
    t = tasks[7]
    assert backend.p_correct(spec, t) < backend.p_correct(
        spec, t, CallContext(task=t, draft="d", feedback="f", guidance=0.5)
    )


def test_critique_text_alone_adds_nothing_the_env_judges_it(tasks):
    """A critique's worth comes from the env (``guidance``): by default the backend gives
    none for merely being there; ``feedback_logit`` restores the old content-blind bonus."""
    spec = _spec("system1", "weakest")
    t = tasks[11]
    blind, old = SimulatedBackend(), SimulatedBackend(feedback_logit=0.25)
    shown = CallContext(task=t, draft="d")
    critiqued = CallContext(task=t, draft="d", feedback="recheck everything")
    assert blind.p_correct(spec, t, critiqued) == blind.p_correct(spec, t, shown)
    assert old.p_correct(spec, t, critiqued) > old.p_correct(spec, t, shown)
    judged = CallContext(task=t, draft="d", feedback="recheck", guidance=0.25)
    assert blind.p_correct(spec, t, judged) == pytest.approx(old.p_correct(spec, t, critiqued))
    misled = CallContext(task=t, draft="d", feedback="step 9", guidance=-0.25)
    assert blind.p_correct(spec, t, misled) < blind.p_correct(spec, t, shown)
    # guidance applies to first calls too (a sub-query that carries the key step)
    assert blind.p_correct(spec, t, CallContext(task=t, guidance=1.0)) > blind.p_correct(spec, t)


# -- metering --------------------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_cost_and_token_accounting(preset, tasks, outcomes):
    pool = make_pool(preset)
    for name, completions in outcomes[preset].items():
        spec = pool.spec(name)
        for c, t in zip(completions[:200], tasks[:200], strict=True):
            assert c.agent == name and not c.cached and c.tokens_estimated
            assert c.prompt_tokens == estimate_prompt_tokens(_messages(t))
            assert c.cost_usd == pytest.approx(spec.cost(c.prompt_tokens, c.completion_tokens))
            assert c.completion_tokens >= len(c.text) // 4
            assert c.latency_s > 0.0
            assert 0.0 < c.meta["p_correct"] < 1.0
        mean_tokens = np.mean([c.completion_tokens for c in completions])
        target = spec.calibration["mean_completion_tokens"]
        assert abs(mean_tokens / target - 1.0) <= 0.10, (name, mean_tokens, target)


def test_latency_is_simulated_not_slept(tasks, monkeypatch):
    def no_sleep(seconds):
        raise AssertionError("the simulated backend must not sleep")

    monkeypatch.setattr(time, "sleep", no_sleep)
    spec = _spec("system1", "strongest")
    backend = SimulatedBackend()
    latencies = [
        backend.complete(spec, _messages(t), CallContext(task=t)).latency_s for t in tasks[:50]
    ]
    assert all(lat > 0.2 for lat in latencies)


# -- errors and configuration ---------------------------------------------------------------
def test_missing_task_is_a_helpful_backend_error():
    pool = make_pool("system1")
    with pytest.raises(BackendError, match=r"needs the task.*CallContext\(task="):
        pool.call(pool.weakest(), [{"role": "user", "content": "1+1?"}])


def test_configuration_errors(tasks):
    with pytest.raises(ConfigError):
        SimulatedBackend(agent_noise=0.0)
    with pytest.raises(ConfigError):
        SimulatedBackend(discrimination=-1.0)
    with pytest.raises(ConfigError):
        SimulatedBackend(token_noise=-0.1)
    with pytest.raises(ConfigError, match="calibration"):
        SimulatedBackend().complete(
            AgentSpec(name="x", model="m", tier=0), _messages(tasks[0]), CallContext(task=tasks[0])
        )
    with pytest.raises(ConfigError):
        solve_ability(1.0)
    backend = make_backend("simulated", seed=3, refinement_logit=1.0)
    assert isinstance(backend, SimulatedBackend) and backend.seed == 3


@pytest.mark.parametrize("discrimination,agent_noise", [(2.0, 1.0), (1.0, 1.0), (3.0, 0.5)])
def test_solve_ability_round_trip(discrimination, agent_noise):
    kw = {"discrimination": discrimination, "agent_noise": agent_noise}
    previous = -np.inf
    for target in (0.01, 0.1, 0.275, 0.5, 0.554, 0.724, 0.757, 0.9, 0.956, 0.995):
        theta = solve_ability(target, **kw)
        assert abs(expected_accuracy(theta, **kw) - target) < 1e-4
        assert theta > previous
        previous = theta
    # a draft's bonus raises the expected accuracy
    theta = solve_ability(0.5, **kw)
    assert expected_accuracy(theta, extra_logit=0.75, **kw) > 0.5


def test_expected_accuracy_matches_direct_integration():
    """Cross-check the logit-space quadrature against a plain midpoint rule over z."""
    z = (np.arange(200_000) + 0.5) / 200_000
    theta = 0.7
    direct = np.mean(1.0 / (1.0 + np.exp(-(theta - 2.0 * np.log(z / (1 - z))))))
    assert expected_accuracy(theta, discrimination=2.0, agent_noise=1.0) == pytest.approx(
        direct, abs=1e-5
    )


# -- concurrency and speed ---------------------------------------------------------------------
def test_threads_match_sequential(tasks):
    pool = make_pool("system2")
    calls = [
        (name, _messages(t), CallContext(task=t, draft="d" if i % 3 == 0 else None))
        for i, t in enumerate(tasks[:400])
        for name in pool.names
    ]
    sequential = [pool.call(*c) for c in calls]
    barrier = threading.Barrier(4)

    def run(chunk):
        barrier.wait()
        return [pool.call(*c) for c in chunk]

    chunks = [calls[i::4] for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as ex:
        results = list(ex.map(run, chunks))
    concurrent = [None] * len(calls)
    for i, res in enumerate(results):
        concurrent[i::4] = res
    assert concurrent == sequential
    assert pool.call_many(calls[:64]) == sequential[:64]


def test_backend_pickles_and_copies(tasks):
    spec = _spec("system1", "weakest")
    backend = SimulatedBackend(seed=2, refinement_logit=1.0)
    ctx = CallContext(task=tasks[3])
    expected = backend.complete(spec, _messages(tasks[3]), ctx)
    for clone in (pickle.loads(pickle.dumps(backend)), copy.deepcopy(backend)):
        assert clone.complete(spec, _messages(tasks[3]), ctx) == expected
