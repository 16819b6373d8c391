"""Rule-based baselines (random, single, oracle, cascade) and building controllers by name."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gymnasium as gym
import pytest
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source

import orchenv  # noqa: F401  (registers the env ids)
from orchenv.cli import main
from orchenv.controllers import CONTROLLERS, make_controller
from orchenv.envs.mathroute.baselines import (
    CascadeController,
    OracleRouter,
    RandomRouter,
    SingleAgent,
    cost_order,
    resolve_agent,
    solver_messages,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.runner import run_episodes

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))
# the route-then-verify protocol of seed 000 that the routing baselines are written for
ROUTE_VERIFY_IDS = [e for e in ENV_IDS if "MathRoute" in e]
OTHER_IDS = [e for e in ENV_IDS if e not in ROUTE_VERIFY_IDS]
N = 300  # test-split episodes for the accuracy comparisons


def _run(controller, n: int = N, env_id: str = "orch/MathRoute-v0", **env_kwargs):
    env = gym.make(env_id, split="test", **env_kwargs)
    return run_episodes(env, controller, n, seed=0, progress=False)


@pytest.fixture(scope="module")
def singles():
    """System 1 single-agent summaries on the test split, strongest first (agent=0, 1, 2)."""
    return [_run(SingleAgent(agent=rank))[0] for rank in range(3)]


# -- oracle ---------------------------------------------------------------------------
def test_oracle_matches_the_strongest_agent_while_rarely_using_it(singles):
    oracle = make_controller("oracle")
    summary, records = _run(oracle)
    strongest = singles[0]
    assert summary.privileged and oracle.privileged
    assert summary.accuracy >= strongest.accuracy - 0.01
    usage = summary.usage_ratios["Qwen3-30B-A3B-Instruct"]
    assert usage < 0.4, usage
    assert summary.mean_cost_usd < strongest.mean_cost_usd
    # the peeks are the oracle's privilege: each episode is charged one routed call only
    assert all(sum(r.agent_calls.values()) == 1 for r in records)
    assert summary.invalid_action_rate == 0.0
    assert oracle.peek_calls >= N


def test_oracle_routes_to_the_cheapest_correct_agent():
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    env = gym.make("orch/MathRoute-v0", pool=pool, task_source=tiny_source())
    summary, records = run_episodes(env, OracleRouter(), 4, seed=0, progress=False)
    assert summary.accuracy == 1.0
    assert all(r.agent_calls == {MID: 1} for r in records)

    pool = scripted_pool({WEAK: WRONG, MID: WRONG, STRONG: WRONG})
    env = gym.make("orch/MathRoute-v0", pool=pool, task_source=tiny_source())
    _, records = run_episodes(env, OracleRouter(), 2, seed=0, progress=False)
    assert all(r.agent_calls == {STRONG: 1} for r in records)  # nobody right: the strongest


def test_oracle_peeks_with_the_envs_own_solver_request():
    """If the env's first-turn solver prompt changes, the oracle's peeks must follow."""
    env = gym.make("orch/MathRoute-v0")
    env.reset(seed=0)
    inner = env.unwrapped
    assert solver_messages(inner.task.prompt) == inner._solver_messages("")


def test_cost_order_breaks_price_ties_by_weakness():
    env = gym.make("orch/MathRouteSystem2-v0")
    env.reset(seed=0)
    pool = env.unwrapped.pool
    # System 2: Ministral-3-8B's completions are cheaper than Llama-3.2-1B's
    assert cost_order(pool) == [
        "Ministral-3-8B-Instruct",
        "Llama-3.2-1B-Instruct",
        "Qwen3-30B-A3B-Instruct",
    ]
    env = gym.make("orch/MathRoute-v0")
    env.reset(seed=0)
    pool = env.unwrapped.pool
    assert cost_order(pool) == list(pool.names)  # 1.5B and 7B cost the same: weaker first
    assert resolve_agent("strongest", pool) == "Qwen3-30B-A3B-Instruct"
    assert resolve_agent("qwen2.5-7b-instruct", pool) == "Qwen2.5-7B-Instruct"
    with pytest.raises(UnknownNameError, match="Did you mean"):
        resolve_agent("Qwen2.5-7B-Instruc", pool)


# -- cascade --------------------------------------------------------------------------
def _episodes_with_calls(controller, n: int, env_id: str = "orch/MathRoute-v0"):
    """(episode cost, cost of routed calls, consult records) per episode, stepping by hand."""
    env = gym.make(env_id, split="test")
    out = []
    for i in range(n):
        obs, info = env.reset(seed=i)
        controller.bind(env.unwrapped)
        routed, consults, done = 0.0, [], False
        while not done:
            obs, _, term, trunc, info = env.step(controller.act(obs, info))
            done = term or trunc
            for call in info["calls"]:
                if call.get("consult"):
                    consults.append(call)
                else:
                    routed += call["cost_usd"]
        out.append((info["episode_cost_usd"], routed, consults, info))
    return out


@pytest.mark.parametrize(
    ("verifier", "privileged"),
    [("agent:strongest", False), ("self-consistency", False), ("noisy-oracle", True)],
)
def test_cascade_consults_are_charged(verifier, privileged):
    cascade = make_controller("cascade", verifier=verifier)
    assert cascade.privileged is privileged
    episodes = _episodes_with_calls(cascade, 40)
    consulted = [e for e in episodes if e[2]]
    if verifier == "noisy-oracle":  # reads ground truth instead of calling anyone
        assert not consulted
        assert all(cost == pytest.approx(routed) for cost, routed, _, _ in episodes)
        return
    assert len(consulted) >= 30  # every draft with a stronger agent left gets checked
    for cost, routed, consults, info in consulted:
        assert cost == pytest.approx(routed + sum(c["cost_usd"] for c in consults))
        assert cost > routed
        assert sum(info["agent_calls"].values()) > info["turns"] - 1  # consults count as usage
    if verifier == "self-consistency":  # the author resamples itself, 3 times by default
        first = consulted[0][2]
        assert len(first) % 3 == 0 and first[0]["agent"] == "Qwen2.5-1.5B-Instruct"
    else:
        assert {c["agent"] for _, _, cs, _ in consulted for c in cs} == {"Qwen3-30B-A3B-Instruct"}


def test_agent_verifier_cascade_beats_the_weakest_agent(singles):
    summary, _ = _run(make_controller("cascade", verifier="agent:Qwen2.5-7B-Instruct"))
    weakest = singles[2]
    assert not summary.privileged
    assert summary.accuracy > weakest.accuracy + 0.1
    assert summary.invalid_action_rate == 0.0
    sc, _ = _run(make_controller("cascade"))  # default: self-consistency, samples=3
    assert sc.accuracy > weakest.accuracy + 0.1
    assert sc.usage_ratios["Qwen3-30B-A3B-Instruct"] < 0.5


def test_cascade_verifier_reply_with_a_verdict_tag_is_read():
    """A live verifier that answers with a verdict (not a solution) decides by its verdict."""
    pool = scripted_pool(
        {
            WEAK: RIGHT,
            MID: RIGHT,
            STRONG: lambda spec, messages, ctx: (
                "<checking>fine</checking><verdict>False</verdict>"
                if "grader" in messages[0]["content"]
                else RIGHT
            ),
        }
    )
    env = gym.make("orch/MathRoute-v0", pool=pool, task_source=tiny_source())
    _, records = run_episodes(
        env, CascadeController(verifier="agent:strong"), 2, seed=0, progress=False
    )
    # the grader rejects every draft, so the cascade climbs to the top: weak, mid, strong
    assert all(r.agent_calls[WEAK] == 1 and r.agent_calls[MID] == 1 for r in records)


def test_cascade_arguments():
    assert make_controller("cascade").mode == "self-consistency"
    legacy = make_controller("cascade", verifier_accuracy=0.9)  # the older interface
    assert legacy.mode == "noisy-oracle" and legacy.privileged
    with pytest.raises(ConfigError, match="only to verifier='noisy-oracle'"):
        make_controller("cascade", verifier="self-consistency", verifier_accuracy=0.9)
    with pytest.raises(ConfigError, match="unknown cascade verifier"):
        make_controller("cascade", verifier="majority")
    with pytest.raises(ConfigError, match="samples"):
        make_controller("cascade", samples=0)
    env = gym.make("orch/MathRoute-v0")
    env.reset(seed=0)
    with pytest.raises(UnknownNameError, match="agent"):
        make_controller("cascade", verifier="agent:GPT-9").bind(env.unwrapped)


# -- every env, and envs that do not apply ---------------------------------------------
@pytest.mark.parametrize("env_id", ROUTE_VERIFY_IDS)
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("random", {}),
        ("single", {"agent": 1}),
        ("oracle", {}),
        ("cascade", {}),
        ("cascade", {"verifier": "agent:strongest"}),
        ("cascade", {"verifier": "noisy-oracle"}),
    ],
)
def test_baselines_run_on_every_env(env_id, name, kwargs):
    summary, _ = _run(make_controller(name, **kwargs), 20, env_id=env_id)
    assert summary.episodes == 20 and summary.invalid_action_rate == 0.0


@pytest.mark.parametrize("env_id", OTHER_IDS)
@pytest.mark.parametrize("name", ["random", "single", "oracle", "cascade", "knn", "classifier"])
def test_routing_baselines_say_clearly_where_they_do_not_apply(env_id, name):
    kwargs = {"embedder": "tfidf", "n_train": 20} if name in ("knn", "classifier") else {}
    with pytest.raises(ConfigError, match="does not apply to " + env_id):
        _run(make_controller(name, **kwargs), 2, env_id=env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_random_runs_everywhere(env_id):
    summary, _ = _run(make_controller("env-random", seed=3), 10, env_id=env_id)
    assert summary.episodes == 10 and summary.invalid_action_rate == 0.0


def test_a_baseline_on_an_env_without_phases_fails_clearly():
    fake_env = SimpleNamespace(spec=SimpleNamespace(id="orch/Elsewhere-v0"))
    info = {"messages": [{"role": "user", "content": "hi"}], "valid_agents": ["a"]}
    for controller in (RandomRouter(), SingleAgent(), CascadeController(verifier="noisy-oracle")):
        controller.bind(fake_env)
        with pytest.raises(ConfigError, match=r"orch/Elsewhere-v0.*info\['phase'\]"):
            controller.act("hi", info)
    with pytest.raises(ConfigError, match="orch/Elsewhere-v0.*pool"):
        OracleRouter().bind(fake_env)
    with pytest.raises(ConfigError, match="orch/Elsewhere-v0.*consult"):
        CascadeController().bind(fake_env)


# -- building by name -------------------------------------------------------------------
SENSIBLE_KWARGS = {
    "random": {"seed": 1},
    "single": {"agent": 2},
    "cascade": {"verifier": "agent:strongest"},
    "oracle": {},
    "knn": {"embedder": "tfidf", "n_train": 50, "k": 5},
    "classifier": {"embedder": "tfidf", "n_train": 50, "C": 0.5},
    "llm": {"model": "m", "backend_kwargs": {"base_url": "http://127.0.0.1:9/v1"}},
    "router-r1": {"backend": "openai", "model": "m", "max_tokens": 64},
    "scripted-puppeteer": {"script": ["llama-3.1-8b:reasoning"]},
}


#: controllers that replay a policy saved by a reproduction: without the file they must refuse
#: clearly (their own tests build them from a saved policy)
SAVED_POLICY = {"ppo-policy", "orchmas-ppo-policy", "budgetroute-ppo-policy"}


@pytest.mark.parametrize("name", sorted(CONTROLLERS))
def test_every_registered_controller_builds_by_name(name):
    if name in SAVED_POLICY:
        with pytest.raises(ConfigError, match="model=PATH"):
            make_controller(name)
        with pytest.raises(ConfigError, match="does not take"):
            make_controller(name, no_such_argument=1)
        return
    controller = make_controller(name, **SENSIBLE_KWARGS.get(name, {}))
    assert callable(controller.act)
    assert isinstance(controller.privileged, bool)
    with pytest.raises(ConfigError, match="does not take"):
        make_controller(name, no_such_argument=1)


def test_registry_has_the_paper_baselines():
    expected = {"random", "single", "oracle", "cascade", "knn", "classifier", "llm", "router-r1"}
    assert expected <= set(CONTROLLERS)


def test_cli_runs_a_cascade_and_labels_the_oracle(capsys):
    args = ["run", "orch/MathRoute-v0", "--episodes", "10", "--split", "test", "--no-progress"]
    assert main([*args, "--controller", "cascade", "-c", "verifier=agent:strongest", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 10 and summary["privileged"] is False
    assert main([*args, "--controller", "oracle"]) == 0
    assert "privileged" in capsys.readouterr().out
