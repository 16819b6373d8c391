"""orch/MultihopQA-v0 and its PettingZoo role views (seed 004)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from pettingzoo.test import api_test, parallel_api_test

import orchenv  # noqa: F401
from orchenv.envs.multihopqa.agents import known_hops, multihop_pool
from orchenv.envs.multihopqa.env import (
    MultihopQAGame,
    multihopqa_aec_env,
    multihopqa_parallel_env,
    run_team,
)
from orchenv.envs.multihopqa.loaders import load_hotpotqa, to_hotpot_record
from orchenv.envs.multihopqa.metrics import parse_judge_score
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource
from orchenv.error import UnknownNameError

FAST = {"token_counter": "estimate"}


def oracle_planner(env: gym.Env, info: dict) -> str:
    """Queries the chain's next hop, in order; finishes after the last one."""
    chain = env.unwrapped.task.meta["chain"]
    step = info["turn"]
    if step < len(chain):
        return f"<plan>hop {step + 1}</plan><query>{chain[step]['question']}</query>"
    return "<finish/>"


def test_oracle_planner_answers_most_two_hop_questions():
    env = gym.make("orch/MultihopQA-v0", **FAST, task_source_kwargs={"hops": (2, 2)})
    scores = []
    for seed in range(30):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            _, reward, term, trunc, info = env.step(oracle_planner(env, info))
            done = term or trunc
        assert reward == pytest.approx(info["f1"])
        scores.append(info["f1"])
    assert sum(scores) / len(scores) >= 0.7


def test_planner_that_never_searches_the_hops_does_badly():
    env = gym.make("orch/MultihopQA-v0", **FAST)
    scores = []
    for seed in range(30):
        env.reset(seed=seed)
        _, reward, term, _, info = env.step("<finish/>")
        assert term and info["turns"] == 1
        scores.append(info["f1"])
    assert sum(scores) / len(scores) < 0.2


def test_malformed_planner_text_is_penalised_and_the_round_still_runs():
    env = gym.make("orch/MultihopQA-v0", **FAST, format_penalty=-0.25)
    env.reset(seed=3)
    _, reward, term, _, info = env.step("I think we should search")
    assert info["invalid_action"] and "<query>" in info["parse_error"]
    assert reward == -0.25 and not term
    assert {c["agent"] for c in info["calls"]} == {"searcher", "recommender"}


def test_final_info_reports_appendix_a_metrics():
    env = gym.make("orch/MultihopQA-v0", **FAST, max_turns=2)
    _, info = env.reset(seed=5)
    tokens = 0
    done = False
    while not done:
        _, _, term, trunc, info = env.step(oracle_planner(env, info))
        tokens += sum(c["prompt_tokens"] + c["completion_tokens"] for c in info["calls"])
        done = term or trunc
    for key in ("em", "f1", "precision", "recall", "tokens_total", "task_id"):
        assert key in info
    assert info["answer_metric"] == "hotpotqa"  # the synthetic tasks are HotpotQA records
    # the simulated judge scores by answer F1 (5 exact, 4 for F1 >= 0.5, 3 partial, 2 wrong),
    # so its score is reported as F1-derived, never as a judge's answer quality
    f1 = info["f1"]
    expected = 5 if f1 == 1.0 else 4 if f1 >= 0.5 else 3 if f1 > 0 else 2
    assert info["answer_quality_from_f1"] == expected and info["answer_quality"] is None
    assert info["metrics"]["answer_quality_from_f1"] == expected
    assert "answer_quality" not in info["metrics"]
    assert info["latency_parallel_s"] <= info["latency_serial_s"]
    # eq. 10: every role's tokens; the pool roles' calls plus the planner's own prompt and reply
    assert info["tokens_total"] > tokens > 0


def test_rcr_routes_fewer_tokens_than_full_context():
    totals = {}
    for mode in ("full", "rcr"):
        game = MultihopQAGame(router=mode, **FAST)
        pool = multihop_pool(token_counter="estimate")
        totals[mode] = sum(
            run_team(game, pool, options={"task_index": i})["tokens_total"] for i in range(20)
        )
    assert totals["rcr"] < 0.85 * totals["full"]


def test_agents_only_know_what_their_routed_context_holds():
    routing = {"beta_base": 256, "budget_offsets": {"recommender": -255}}
    game = MultihopQAGame(router="rcr", routing=routing, **FAST)
    pool = multihop_pool(token_counter="estimate")
    game.reset(options={"task_index": 0})
    # a recommender with a 1-token budget sees no evidence, so it cannot know any hop
    from orchenv.envs.multihopqa.env import play_role

    for role in ("planner", "searcher"):
        play_role(game, role, pool, role)
    prompt = game.observe("recommender")
    assert not any(known_hops(game.task, prompt))
    assert any(
        known_hops(game.task, game.observe("planner") + "".join(m.text for m in game.memory))
    )


def test_unknown_role_agent_and_judge_are_clear_errors():
    with pytest.raises(UnknownNameError, match="searcher"):
        gym.make("orch/MultihopQA-v0", role_agents={"searcher": "serchr"}).reset(seed=0)
    with pytest.raises(UnknownNameError, match="judge"):
        gym.make("orch/MultihopQA-v0", judge="gpt-judge").reset(seed=0)


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ('{"score": 4, "justification": "ok"}', 4.0),
        ('```json\n{"score": 5, "justification": "ok"}\n```', 5.0),
        ('Sure! "score": 3 because ...', 3.0),
        ('{"score": 9}', None),
        ("no idea", None),
    ],
)
def test_judge_replies_are_parsed_or_rejected(text, score):
    assert parse_judge_score(text) == score


@pytest.mark.parametrize("verifier", [False, True])
def test_pettingzoo_views_pass_the_api_tests(verifier):
    api_test(multihopqa_aec_env(verifier=verifier, **FAST), num_cycles=12)
    parallel_api_test(multihopqa_parallel_env(verifier=verifier, **FAST), num_cycles=12)


def test_aec_roles_see_what_earlier_roles_wrote_this_round():
    env = multihopqa_aec_env(**FAST)
    env.reset(seed=2)
    chain = env.game.task.meta["chain"]
    env.step(f"<plan>go</plan><query>{chain[0]['question']}</query>")
    assert chain[0]["question"] in env.observe("searcher")
    env.step(f"<query>{chain[0]['question']}</query>")
    assert env.game.searches and env.game.searches[-1][1][0] == chain[0]["title"]


def test_parallel_roles_see_start_of_round_memory_and_get_team_reward():
    env = multihopqa_parallel_env(max_turns=1, **FAST)
    obs, _ = env.reset(seed=4)
    answer = env.game.task.answer
    actions = {
        "planner": "<plan>p</plan><query>q</query>",
        "searcher": "<query>x</query>",
        "recommender": f"<answer>{answer}</answer>",
    }
    # the planner did not finish: the round limit cuts the episode short (truncated),
    # and the team still earns the F1 of the recommender's answer
    obs, rewards, terms, truncs, infos = env.step(actions)
    assert set(rewards.values()) == {1.0} and all(truncs.values()) and not any(terms.values())
    assert infos["planner"]["f1"] == 1.0 and not env.agents
    env.reset(seed=4)
    actions["planner"] = f"<answer>{answer}</answer>"  # the planner's own answer ends it
    obs, rewards, terms, truncs, infos = env.step(actions)
    assert set(rewards.values()) == {1.0} and all(terms.values()) and not any(truncs.values())


def test_runs_on_hotpotqa_records(tmp_path):
    source = SyntheticMultihopSource(n_train=4, n_test=4)
    records = [to_hotpot_record(source.get("test", i)) for i in range(4)]
    path = tmp_path / "hotpot_dev_distractor.json"
    path.write_text(json.dumps(records))
    tasks = load_hotpotqa(path)
    split = tasks.splits[0]
    env = gym.make("orch/MultihopQA-v0", task_source=tasks, split=split, **FAST)
    env.reset(seed=0)
    assert env.unwrapped.task.meta["chain"]  # built from the supporting facts
    _, _, term, _, info = env.step(f"<answer>{env.unwrapped.task.answer}</answer>")
    assert term and info["f1"] == 1.0


def test_pool_agent_controller_plays_the_planner_and_is_charged():
    from orchenv.controllers import make_controller
    from orchenv.runner import run_episodes

    env = gym.make("orch/MultihopQA-v0", **FAST)
    summary, records = run_episodes(env, make_controller("pool-agent"), 20, seed=0, progress=False)
    assert summary.invalid_action_rate == 0.0
    assert summary.mean_reward > 0.5  # the simulated Planner resolves most questions
    with pytest.raises(UnknownNameError, match="planer"):
        run_episodes(env, make_controller("pool-agent", agent="planer"), 1, progress=False)


def test_pool_agent_controller_calls_appear_in_the_episode_usage():
    from orchenv.controllers import make_controller

    env = gym.make("orch/MultihopQA-v0", **FAST)
    controller = make_controller("pool-agent")
    controller.bind(env)
    obs, info = env.reset(seed=1)
    _, _, _, _, info = env.step(controller.act(obs, info))
    assert info["agent_calls"].get("planner") == 1
    assert any(c.get("consult") and c["agent"] == "planner" for c in info["calls"])
