"""Luck depends on what is asked, not its wording (issue 38): MultihopQA's simulated roles key
their luck on the request (``request_key``), so five trivial rewordings of a request ("Thanks.",
"Please be concise.", spacing, case) get the same answer. Keyed on the prompt's hash, the
Recommender's answer changed across them in about a quarter of states."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.multihopqa.agents import normalized_request, request_key
from orchenv.envs.multihopqa.env import REWORDINGS, chain_action, reworded
from orchenv.parsing import extract_tag
from orchenv.pool import CallContext


def test_normalized_request_drops_wording() -> None:
    base = normalized_request("Who founded Redath Films?")
    for text in (
        "who  founded redath films",
        "Thanks. Who founded Redath Films?",
        "Please be concise: WHO FOUNDED REDATH FILMS?",
        "  Who founded Redath Films?\n",
    ):
        assert normalized_request(text) == base
    assert normalized_request("Where was Redath Films founded?") != base


def test_five_rewordings_of_a_request_get_the_same_luck() -> None:
    env = gym.make("orch/MultihopQA-v0").unwrapped
    states = 0
    for seed in range(15):
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(env.max_turns):
            messages = env.game.role_messages("recommender")
            context = CallContext(task=env.task, turn=env.turn)
            prompts = ["\n\n".join(m["content"] for m in reworded(messages, k)) for k in range(5)]
            keys = {request_key("recommender", env.task, p) for p in prompts}
            assert len(keys) == 1, keys
            answers = {
                extract_tag(
                    env.pool.call("recommender", reworded(messages, k), context).text, "answer"
                )
                for k in range(len(REWORDINGS))
            }
            assert len(answers) == 1, answers
            states += 1
            action = chain_action(env.task, env.game.memory) if rng.random() < 0.7 else None
            _, _, term, trunc, _ = env.step(action or env.demo_action(rng))
            if term or trunc:
                break
    assert states >= 30


def test_reworded_majority_is_an_audit_strategy_and_pays_its_consults() -> None:
    env = gym.make("orch/MultihopQA-v0", token_penalty=1.0).unwrapped
    env.reset(seed=3)
    policy = env.audit_strategies()["reworded-majority"]
    consulted = 0
    for _ in range(env.max_turns):
        _, _, term, trunc, info = env.step(policy(env))
        consulted += sum(bool(c.get("consult")) for c in info["calls"])
        if term or trunc:
            break
    assert consulted == len(REWORDINGS)
