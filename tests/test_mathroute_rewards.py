"""Seed 000 eq. (1)-(3) computed by hand for crafted trajectories, checked against the env.

Pool: weak answers wrong, mid and strong answer right. alpha = 0.5,
lambda = 0.25 (strong) / 0.125 (mid) / 0 (weak), Table 9's defaults.
"""

from __future__ import annotations

import numpy as np
import pytest
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool

from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.envs.mathroute.protocol import route_text, verdict_text

ALPHA = 0.5
LAMBDA = {STRONG: 0.25, MID: 0.125, WEAK: 0.0}


def expected(r_route: float, r_verify: float, agent: str | None) -> float:
    penalty = LAMBDA[agent] if agent else 0.0
    return ALPHA * (r_route - penalty) + (1 - ALPHA) * r_verify


def make_env(tiny_tasks, **kwargs) -> MathRouteEnv:
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    env = MathRouteEnv(pool=pool, task_source=tiny_tasks, **kwargs)
    env.reset(seed=0)
    return env


def test_accept_after_correct(tiny_tasks):
    env = make_env(tiny_tasks)
    _, r1, term, _, info = env.step(route_text(MID))
    assert r1 == pytest.approx(expected(1, 0, MID)) == pytest.approx(0.4375)
    assert not term and info["phase"] == "verify"
    np.testing.assert_array_equal(info["constraint_costs"], [0, 1, 0])
    _, r2, term, _, info = env.step(verdict_text(True))
    assert r2 == pytest.approx(expected(0, 1, None)) == pytest.approx(0.5)
    assert term and info["correct"] is True and info["turns"] == 2
    assert info["final_answer"] == "5"
    np.testing.assert_array_equal(info["constraint_costs"], [0, 0, 0])


def test_accept_after_wrong(tiny_tasks):
    env = make_env(tiny_tasks)
    _, r1, *_ = env.step(route_text(WEAK))
    assert r1 == pytest.approx(expected(0, 0, WEAK)) == 0.0
    _, r2, term, _, info = env.step(verdict_text(True))
    assert r2 == 0.0 and term and info["correct"] is False and info["final_answer"] == "6"


def test_reject_correct_then_accept_on_last_turn(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(MID))
    _, r2, term, _, info = env.step(verdict_text(False, STRONG))
    assert r2 == pytest.approx(expected(1, 0, STRONG)) == pytest.approx(0.375)
    assert not term and info["reward_components"]["usage_penalty"] == 0.25
    assert info["valid_agents"] == []  # nobody is stronger than the strongest
    _, r3, term, _, info = env.step(verdict_text(True))
    assert r3 == pytest.approx(0.5) and term and info["correct"] and info["turns"] == 3
    assert info["agent_calls"] == {MID: 1, STRONG: 1}


def test_reject_wrong_and_escalate_on_last_turn(tiny_tasks):
    env = make_env(tiny_tasks, max_turns=2)
    env.step(route_text(WEAK))
    _, r2, term, trunc, info = env.step(verdict_text(False, STRONG))
    assert r2 == pytest.approx(expected(1, 1, STRONG)) == pytest.approx(0.875)
    assert term and not trunc, "max_turns reached: seed 000's horizon is terminal"
    # the routed agent's answer is graded as final
    assert info["correct"] is True and info["final_answer"] == "5"


def test_without_lagrangian_the_strong_agent_is_free(tiny_tasks):
    env = make_env(tiny_tasks, max_turns=2, use_lagrangian=False)
    env.step(route_text(WEAK))
    _, r2, *_ = env.step(verdict_text(False, STRONG))
    assert r2 == pytest.approx(1.0)


def test_reroute_to_weaker_is_invalid_by_default(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(MID))
    obs, r2, term, _, info = env.step(verdict_text(False, WEAK))
    assert r2 == -1.0 and not term
    assert info["invalid_action"] and "not stronger" in info["parse_error"]
    assert info["agent_calls"] == {MID: 1}, "an invalid action calls nobody"
    assert "could not be used" in obs


def test_reroute_to_weaker_allowed_when_configured(tiny_tasks):
    env = make_env(tiny_tasks, require_stronger=False)
    env.step(route_text(MID))
    _, r2, _, _, info = env.step(verdict_text(False, WEAK))
    # verdict False on a correct draft (r^V = 0), weak answers wrong (r^R = 0), lambda_weak = 0
    assert r2 == pytest.approx(expected(0, 0, WEAK)) == 0.0 and not info["invalid_action"]
    assert info["agent_calls"] == {MID: 1, WEAK: 1}


@pytest.mark.parametrize(
    "action, fragment",
    [
        ("hello", "no <model>"),
        ("<model>strong", "without a closing"),
        ("<model>stronk</model>", "Did you mean 'strong'"),
        ("", "no <model>"),
    ],
)
def test_malformed_first_turn(tiny_tasks, action, fragment):
    env = make_env(tiny_tasks)
    obs, r, term, trunc, info = env.step(action)
    assert r == -1.0 and not term and not trunc
    assert info["invalid_action"] and fragment in info["parse_error"]
    assert info["agent_calls"] == {} and info["phase"] == "route"
    assert info["reward_components"]["format"] == -1.0


def test_malformed_verdict_and_turn_limit(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(WEAK))
    _, r2, _, _, info = env.step("<verdict>maybe</verdict>")
    assert r2 == -1.0 and "neither True nor False" in info["parse_error"]
    _, r3, term, trunc, info = env.step("<verdict>False</verdict>")  # False without a model
    assert r3 == -1.0 and term and not trunc and info["turns"] == 3
    assert info["correct"] is False and info["final_answer"] == "6"


def test_false_verdict_on_strongest_ends_episode(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(STRONG))
    _, r2, term, _, info = env.step(verdict_text(False))
    assert term and r2 == pytest.approx(expected(0, 0, None)) == 0.0
    assert info["correct"] is True, "the final answer is the last response even when rejected"


def test_critique_reaches_the_next_agent(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(WEAK))
    env.step(verdict_text(False, MID, note="2 + 3 is 5, not 6"))
    backend = env.pool.backend_for(MID)
    name, messages, context = backend.calls[-1]
    assert name == MID and context.draft == WRONG and "not 6" in context.feedback
    assert "2 + 3 is 5, not 6" in messages[-1]["content"] and WRONG in messages[-1]["content"]


def test_costs_and_tokens_are_metered(tiny_tasks):
    env = make_env(tiny_tasks)
    _, _, _, _, info = env.step(route_text(MID))
    spec = env.pool.spec(MID)
    assert info["cost_usd"] == pytest.approx(
        spec.cost(info["tokens"]["prompt"], info["tokens"]["completion"])
    )
    assert info["tokens"]["completion"] == len(RIGHT.split())
    assert info["episode_cost_usd"] == pytest.approx(info["cost_usd"])


def test_enforced_usage_budget_reroutes_to_next_best(tiny_tasks):
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    env = MathRouteEnv(
        pool=pool, task_source=tiny_tasks, enforce_usage_constraints=True, usage_budget_queries=4
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(route_text(STRONG))  # strong budget: floor(0.25 * 4) = 1
    assert info["called_agent"] == STRONG and "rerouted_from" not in info
    env.reset()
    _, _, _, _, info = env.step(route_text(STRONG))
    assert info["called_agent"] == MID and info["rerouted_from"] == STRONG
    np.testing.assert_array_equal(info["constraint_costs"], [0, 1, 0])
    assert env.ledger == {STRONG: 1, MID: 1}
    env.reset(options={"reset_usage_ledger": True})
    assert env.ledger == {}


def test_enforcement_needs_a_budget_size(tiny_tasks):
    from orchenv.error import ConfigError

    with pytest.raises(ConfigError, match="usage_budget_queries"):
        MathRouteEnv(task_source=tiny_tasks, enforce_usage_constraints=True)


def test_consulted_calls_are_charged_to_the_episode(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(WEAK))
    # a controller asks the strong agent for a second opinion before giving its verdict
    opinion = env.consult(STRONG, [{"role": "user", "content": "check this draft"}])
    assert opinion.text == RIGHT
    _, reward, _, _, info = env.step(verdict_text(False, MID))
    assert reward == pytest.approx(expected(1, 1, MID)), "consulting does not change eq. (3)"
    assert info["agent_calls"] == {WEAK: 1, STRONG: 1, MID: 1}
    assert [c.get("consult", False) for c in info["calls"]] == [True, False]
    np.testing.assert_array_equal(info["constraint_costs"], [0, 1, 1])
    assert info["episode_cost_usd"] == pytest.approx(env.meter.cost_usd)


def test_consult_needs_an_episode(tiny_tasks):
    from orchenv.error import EnvStateError

    env = MathRouteEnv(
        pool=scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT}), task_source=tiny_tasks
    )
    with pytest.raises(EnvStateError, match="reset"):
        env.consult(WEAK, [{"role": "user", "content": "x"}])
