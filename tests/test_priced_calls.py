"""One price for every call (issue 38): a call made through ``OrchestrationEnv.consult`` is
charged by the env's reward and constraints exactly as a routed call of the same agent and
tokens, and counts against the env's per-episode call limit."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.mathroute.protocol import route_text
from orchenv.envs.orchmas.choices import call_text
from orchenv.error import EnvStateError

IDS = sorted(i for i in gym.registry if i.startswith("orch/"))
QUESTION = [{"role": "user", "content": "Please check: what is 17 times 3?"}]


def _made(env_id: str, **kwargs: object) -> orchenv.OrchestrationEnv:
    try:
        return gym.make(env_id, **kwargs).unwrapped  # type: ignore[return-value]
    except orchenv.error.DependencyError as exc:  # an optional dependency this install lacks
        pytest.skip(str(exc))


@pytest.mark.parametrize("env_id", IDS)
def test_a_consulted_call_is_metered_priced_and_limited(env_id: str) -> None:
    """Every id with a pool: the step after a consult costs the consult's dollars more, counts
    one more call of that agent, loses exactly ``call_charge`` of reward, and the call limit
    (where the env has one) has one call less."""
    env = _made(env_id)
    env.reset(seed=3)
    if not env.pool.names:
        pytest.skip(f"{env_id} has no agent pool to consult")
    agent = env.pool.names[0]
    action = env.demo_action(np.random.default_rng(0))
    plain, consulted = env.fork(), env.fork()
    left = consulted.calls_left()
    completion = consulted.consult(agent, QUESTION)
    if left is not None:
        assert consulted.calls_left() == left - 1
    _, r0, _, _, i0 = plain.step(action)
    _, r1, _, _, i1 = consulted.step(action)
    assert i1["cost_usd"] == pytest.approx(i0["cost_usd"] + completion.cost_usd)
    assert i1["episode_cost_usd"] == pytest.approx(i0["episode_cost_usd"] + completion.cost_usd)
    assert i1["agent_calls"].get(agent, 0) == i0["agent_calls"].get(agent, 0) + 1
    charge = consulted.call_charge(completion)
    assert r1 == pytest.approx(r0 - charge)
    if charge:
        assert i1["consult_charge"] == pytest.approx(charge)


@pytest.mark.parametrize("env_id", ["orch/MathRoute-v0", "orch/MathRouteSystem2-v0"])
@pytest.mark.parametrize("reward", ["outcome", "paper"])
def test_mathroute_consult_costs_lambda_like_a_routed_call(env_id: str, reward: str) -> None:
    """Routing the first turn to the strongest costs lambda_strongest (alpha x it under the
    paper's reward); consulting the strongest with the same request, then routing to the
    weakest, costs both lambdas. Before issue 38 the consult was free."""
    env = _made(env_id, reward=reward)
    env.reset(seed=5)
    weakest, strongest = env.pool.names[0], env.pool.names[-1]
    routed, consulting = env.fork(), env.fork()
    _, r_routed, _, _, info = routed.step(route_text(strongest))
    (call,) = info["calls"]
    completion = consulting.consult(strongest, env.solver_request(env.task))
    assert (call["agent"], call["prompt_tokens"], call["completion_tokens"]) == (
        completion.agent,
        completion.prompt_tokens,
        completion.completion_tokens,
    )  # the same agent and tokens
    lam = env.multipliers
    scale = 1.0 if reward == "outcome" else env.alpha
    assert lam[strongest] > 0
    # the routed call's charge is the reward's own usage term
    routed_charge = scale * info["reward_components"]["usage_penalty"]
    assert consulting.call_charge(completion) == pytest.approx(routed_charge)
    weak_only = env.fork()
    _, r_weak, _, _, _ = weak_only.step(route_text(weakest))
    _, r_both, _, _, info2 = consulting.step(route_text(weakest))
    assert r_both == pytest.approx(r_weak - routed_charge)
    assert info2["consult_charge"] == pytest.approx(scale * lam[strongest])
    if reward == "outcome":
        assert r_routed == pytest.approx(-lam[strongest])
    # a consulted call enters the usage ledger (eq. 2's shares) as a routed one does
    assert consulting.ledger.get(strongest, 0) == 1


def test_mathroute_consult_strongest_compare_is_an_audit_strategy() -> None:
    """The strategy consults the strongest at the verify turn and pays for it."""
    env = _made("orch/MathRoute-v0")
    env.reset(seed=2)
    policy = env.audit_strategies()["consult-strongest-compare"]
    total, calls = 0.0, []
    for _ in range(env.max_turns):
        _, reward, term, trunc, info = env.step(policy(env))
        total += reward
        calls.extend(info["calls"])
        if term or trunc:
            break
    assert any(c.get("consult") for c in calls)
    lam = env.multipliers
    paid = sum(lam.get(c["agent"], 0.0) for c in calls)
    assert total == pytest.approx(float(info["correct"]) - paid)


def test_multihopqa_consult_pays_the_token_penalty() -> None:
    """With eq. 2's token penalty, a consulted call's tokens are charged at the same rate as
    the role calls' tokens in ``tokens_total`` (and counted in it)."""
    penalty = 1.0
    env = _made("orch/MultihopQA-v0", token_penalty=penalty)
    env.reset(seed=1)
    plain, consulting = env.fork(), env.fork()
    completion = consulting.consult("recommender", QUESTION)
    tokens = completion.prompt_tokens + completion.completion_tokens
    assert tokens > 0
    rets, finals = [], []
    for e in (plain, consulting):
        rng, ret = np.random.default_rng(0), 0.0
        for _ in range(e.max_turns):
            _, r, term, trunc, info = e.step(e.demo_action(rng))
            ret += r
            if term or trunc:
                break
        rets.append(ret)
        finals.append(info)
    assert rets[1] == pytest.approx(rets[0] - penalty * tokens / 1000)
    assert finals[1]["tokens_total"] == finals[0]["tokens_total"] + tokens


def test_orchmas_consults_use_up_max_calls() -> None:
    """OrchMAS's max_calls counts consulted executor calls: after max_calls consults no call
    is left, a further consult is refused and a call action is refused as malformed."""
    env = _made("orch/OrchMAS-v0", max_calls=2)
    env.reset(seed=0)
    executor = env.valid_agents()[0]
    env.consult(executor, QUESTION)
    env.consult(executor, QUESTION)
    assert env.calls_left() == 0
    with pytest.raises(EnvStateError, match="call limit"):
        env.consult(executor, QUESTION)
    _, _, _, _, info = env.step(call_text("a domain expert", "What is asked?"))
    assert info["invalid_action"] and "used up" in info["parse_error"]
    assert env.executor_calls() == 0
    assert info["agent_calls"] == {executor: 2}


def test_budgetroute_consults_spend_the_budget_and_the_calls() -> None:
    """BudgetRoute: a consult's dollars count against the budget (r_cost) and its call against
    the rounds' calls (a search with no call left is not executed)."""
    env = _made("orch/BudgetRoute-v0", budget_mode="low")
    env.reset(seed=4)
    strongest = env.pool.names[-1]
    left = env.calls_left()
    assert left is not None and left >= 1
    spent = 0.0
    for _ in range(left):
        spent += env.consult(strongest, QUESTION).cost_usd
    assert spent > env.budget_usd  # the low budget cannot pay for this many o3 calls
    _, _, _, _, info = env.step(f"<search>{env.pool.names[0]}: what is 17 * 3?</search>")
    assert info.get("unexecuted_search") == env.pool.names[0]
    while True:
        _, reward, term, trunc, info = env.step("<answer>\\boxed{51}</answer>")
        if term or trunc:
            break
    assert info["cost_reward"] == 0.0 and reward == 0.0


def test_puppeteer_consult_pays_the_log_step_cost() -> None:
    """Puppeteer charges lambda x tokens/1000 x log(1 + t/phi) per step's calls: a consulted
    call at step t should cost the same (Puppeteer's ``call_charge``)."""
    env = _made("orch/Puppeteer-v0")
    env.reset(seed=0)
    plain, consulting = env.fork(), env.fork()
    completion = consulting.consult(env.pool.names[0], QUESTION)
    action = env.demo_action(np.random.default_rng(0))
    _, r0, _, _, _ = plain.step(action)
    _, r1, _, _, _ = consulting.step(action)
    tokens = completion.prompt_tokens + completion.completion_tokens
    price = env.lam * tokens / 1000 * math.log(1.0 + 1 / env.phi)
    assert r1 != pytest.approx(r0), "a consulted call was free"
    assert r1 == pytest.approx(r0 - price)


@pytest.mark.parametrize("env_id", ["orch/OrchMAS-v0", "orch/BudgetRoute-v0"])
def test_the_discrete_view_masks_calls_once_consults_used_them_up(env_id: str) -> None:
    env = _made(env_id)
    env.reset(seed=1)
    agent = env.valid_agents()[0] if env_id == "orch/OrchMAS-v0" else env.pool.names[0]
    assert any(c is not None and "<answer>" not in c for c in env.action_choices())
    while env.calls_left():
        env.consult(agent, QUESTION)
    choices = [c for c in env.action_choices() if c is not None]
    assert choices and all("<answer>" in c for c in choices), choices
