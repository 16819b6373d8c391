"""Seed 000 eq. (1)-(3) computed by hand for crafted trajectories, checked against the env.

Eq. (1)/(3) is ``reward="paper"``, named explicitly (the default is ``"outcome"``, issue 25).

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
    kwargs.setdefault("reward", "paper")
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


def test_enforcement_per_query_needs_a_budget_size(tiny_tasks):
    from orchenv.error import ConfigError

    with pytest.raises(ConfigError, match="usage_budget_queries"):
        MathRouteEnv(
            task_source=tiny_tasks, enforce_usage_constraints=True, usage_denominator="queries"
        )
    with pytest.raises(ConfigError, match="usage_denominator"):
        MathRouteEnv(task_source=tiny_tasks, usage_denominator="episodes")


def test_enforced_share_of_calls_is_eq2_by_default(tiny_tasks):
    """Without usage_budget_queries the budget is eq. (2)'s: an agent serves a call only if
    its share of all routed calls, this one included, stays within c_i."""
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    env = MathRouteEnv(pool=pool, task_source=tiny_tasks, enforce_usage_constraints=True)
    assert env.usage_denominator == "calls"
    env.reset(seed=0)
    served = []
    for _ in range(8):
        _, _, _, _, info = env.step(route_text(STRONG))
        served.append(info["called_agent"])
        total = sum(env.ledger.values())
        for agent, limit in env.usage_constraints.items():
            assert env.ledger.get(agent, 0) <= limit * total + 1e-9
        env.reset()
    # share 1/1 > 0.25 and > 0.5: weak; then mid at 1/2; weak; strong at 1/4; ...
    assert served == [WEAK, MID, WEAK, STRONG, MID, MID, WEAK, STRONG]
    assert env.lifetime_state() == {"ledger": {WEAK: 3, MID: 3, STRONG: 2}, "episodes": 9}


def test_usage_is_reported_per_episode_and_as_share_of_calls(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(WEAK))
    _, _, _, _, info = env.step(verdict_text(False, MID))
    env.consult(STRONG, [{"role": "user", "content": "second opinion"}])
    _, _, term, _, info = env.step(verdict_text(True))
    assert term
    metrics = info["metrics"]
    assert metrics["calls/weak"] == metrics["calls/mid"] == metrics["calls/strong"] == 1.0
    assert metrics["calls/total"] == 3.0  # consulted calls are usage too
    # calls over the env's lifetime, what budgets bind: a consulted call counts as a routed
    # one (issue 38: one price for every call)
    usage = info["lifetime_usage"]
    assert usage["denominator"] == "calls" and usage["episodes"] == 1
    assert usage["share_of_calls"] == pytest.approx({WEAK: 1 / 3, MID: 1 / 3, STRONG: 1 / 3})
    assert usage["calls_per_episode"] == {WEAK: 1.0, MID: 1.0, STRONG: 1.0}
    env.reset()
    env.step(route_text(MID))
    _, _, _, _, info = env.step(verdict_text(True))
    usage = info["lifetime_usage"]
    assert usage["share_of_calls"][MID] == pytest.approx(2 / 4)
    assert usage["calls_per_episode"][MID] == 1.0


# -- reward="outcome" ---------------------------------------------------------------------
def episode_return(env: MathRouteEnv, *actions: str) -> float:
    total, done = 0.0, False
    for action in actions:
        assert not done
        _, reward, done, _, _ = env.step(action)
        total += reward
    assert done
    return total


@pytest.mark.parametrize(
    "actions, expected_return",
    [
        ((route_text(MID), verdict_text(True)), 1 - 0.125),
        ((route_text(WEAK), verdict_text(True)), 0.0),  # a wrong final answer
        ((route_text(WEAK), verdict_text(False, STRONG), verdict_text(True)), 1 - 0.25),
        # a false rejection only costs: lambda of the agent it calls
        ((route_text(MID), verdict_text(False, STRONG), verdict_text(True)), 1 - 0.125 - 0.25),
        ((route_text(STRONG), verdict_text(False)), 1 - 0.25),  # the draft stands
    ],
)
def test_outcome_reward(tiny_tasks, actions, expected_return):
    env = make_env(tiny_tasks, reward="outcome")
    assert episode_return(env, *actions) == pytest.approx(expected_return)


def test_outcome_reward_is_paid_at_the_horizon(tiny_tasks):
    env = make_env(tiny_tasks, reward="outcome", max_turns=2)
    _, r1, *_ = env.step(route_text(WEAK))
    _, r2, term, _, info = env.step(verdict_text(False, MID))
    assert r1 == 0.0 and term and r2 == pytest.approx(1 - 0.125)
    assert info["reward_components"]["outcome"] == 1.0
    assert info["reward_components"]["usage_penalty"] == 0.125
    env = make_env(tiny_tasks, reward="outcome", max_turns=2)
    env.step(route_text(MID))
    _, r2, term, _, _ = env.step("no verdict")  # malformed on the last turn: the draft stands
    assert term and r2 == pytest.approx(1.0 - 1.0)  # outcome 1 plus the format penalty -1


def test_the_default_reward_is_outcome(tiny_tasks):
    """Issue 25: eq. (1)/(3) pays for rejecting right drafts, so the default is "outcome"."""
    env = MathRouteEnv(
        pool=scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT}), task_source=tiny_tasks
    )
    assert env.reward_variant == "outcome"
    env.reset(seed=0)
    assert episode_return(env, route_text(MID), verdict_text(True)) == pytest.approx(1 - 0.125)


def test_reward_must_be_known(tiny_tasks):
    from orchenv.error import UnknownNameError

    with pytest.raises(UnknownNameError, match="outcome"):
        MathRouteEnv(task_source=tiny_tasks, reward="final")


# -- the critique's effect on the next solver ------------------------------------------------
@pytest.mark.parametrize(
    "mode, note, guidance, kind",
    [
        ("judged", "Step 1 is wrong: 2 + 3 is 5.", 0.5, "pointed"),
        ("judged", "Please recheck the arithmetic.", 0.0, "generic"),
        ("judged", "", 0.0, "empty"),
        ("judged", "Step 3 is wrong.", -0.25, "misleading"),
        ("fixed", "Please recheck the arithmetic.", 0.25, None),
        ("fixed", "", 0.0, None),
        ("off", "Step 1 is wrong.", 0.0, None),
    ],
)
def test_critique_guidance(tiny_tasks, mode, note, guidance, kind):
    env = make_env(tiny_tasks, critique_bonus=mode)
    env.step(route_text(WEAK))
    _, _, _, _, info = env.step(verdict_text(False, MID, note=note))
    _, _, context = env.pool.backend_for(MID).calls[-1]
    assert context.guidance == pytest.approx(guidance) and context.draft == WRONG
    assert info["privileged"].get("critique") == kind


def test_critique_logits_can_be_set(tiny_tasks):
    from orchenv.error import UnknownNameError

    env = make_env(tiny_tasks, critique_logits={"generic": -0.5})
    env.step(route_text(WEAK))
    env.step(verdict_text(False, MID, note="recheck"))
    assert env.pool.backend_for(MID).calls[-1][2].guidance == -0.5
    with pytest.raises(UnknownNameError):
        MathRouteEnv(task_source=tiny_tasks, critique_logits={"helpful": 1.0})


def test_consulted_calls_are_charged_to_the_episode(tiny_tasks):
    env = make_env(tiny_tasks)
    env.step(route_text(WEAK))
    # a controller asks the strong agent for a second opinion before giving its verdict
    opinion = env.consult(STRONG, [{"role": "user", "content": "check this draft"}])
    assert opinion.text == RIGHT
    _, reward, _, _, info = env.step(verdict_text(False, MID))
    # the consult is priced as a routed call of STRONG would be: alpha * lambda_STRONG
    # (issue 38; it used to be free)
    charge = env.call_charge(opinion)
    assert charge == pytest.approx(env.alpha * env.multipliers[STRONG])
    assert reward == pytest.approx(expected(1, 1, MID) - charge)
    assert info["consult_charge"] == pytest.approx(charge)
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
