"""orch/OrchMAS-v0, issue 25: a stuffed role does not fit, paraphrased sub-questions are
read as sub-questions, the audit's skill reference rises with skill, "- Agent Roles" uses
the best fixed role."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from orchenv.envs.orchmas.choices import SUBQUESTION_REQUEST
from orchenv.envs.orchmas.env import SKILL_ROLES, OrchMASEnv
from orchenv.envs.orchmas.executor import read_request, role_fit, wrong_answer
from orchenv.envs.orchmas.paraphrase import (
    PARAPHRASES,
    STUFFED_ROLE,
    RewritingPlan,
    paraphrase_question,
    paraphrase_request,
)
from orchenv.envs.orchmas.protocol import call_action, parse_call
from orchenv.envs.orchmas.relations import RELATION_TERMS, relation_asked
from orchenv.envs.orchmas.reproduce import FIXED_ROLES, best_fixed_role
from orchenv.envs.orchmas.scripted import decompose_orchestrator
from orchenv.tasks import Task

MULTIHOP = {"task_source_kwargs": {"dataset": "multihop-synth"}}


def play(env: OrchMASEnv, policy: Callable[[Any], str], episodes: int) -> np.ndarray:
    """The score of ``policy`` on episodes reset with seeds 0..episodes-1."""
    scores = []
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            *_, terminated, truncated, info = env.step(policy(env))
            done = terminated or truncated
        scores.append(info["score"])
    return np.array(scores)


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean of ``a - b`` and its 95% half-width."""
    d = a - b
    return float(d.mean()), float(1.96 * d.std(ddof=1) / np.sqrt(len(d)))


def reading(task: Task, text: str, role: str = "researcher"):
    messages = [{"role": "system", "content": f"Act as: {role}"}, {"role": "user", "content": text}]
    return read_request(messages, task)


# -- finding (a): a role naming every domain is not a fitting role --------------------------------
def test_stuffed_role_scores_below_per_question_roles():
    env = OrchMASEnv(split="test")  # the default mixed set
    exact = play(env, decompose_orchestrator().choose, 300)
    stuffed = play(env, RewritingPlan(decompose_orchestrator(), role=STUFFED_ROLE), 300)
    gain, half = paired(exact, stuffed)
    assert gain - half > 0, (gain, half)  # per-question roles beat it beyond the interval


def test_role_fit_names_one_domain():
    env = OrchMASEnv(split="test")
    env.reset(options={"task_index": 0})
    math_task = env.task
    env.reset(options={"task_index": 1})
    hop_task = env.task
    assert "chain" in hop_task.meta and "chain" not in math_task.meta
    assert role_fit("math solver", math_task) == "fit"
    assert role_fit("researcher", hop_task) == "fit"
    assert role_fit("researcher", math_task) == "mismatch"
    for task in (math_task, hop_task):
        assert role_fit(STUFFED_ROLE, task) == "generic"  # muddled: at best generic
        assert role_fit("math solver and researcher", task) == "generic"
        assert role_fit("assistant", task) == "generic"
        assert role_fit("", task) == "empty"
        assert role_fit(SKILL_ROLES["math" if task is math_task else "multihop"], task) == "fit"


# -- finding (b): a sub-question is read in any wording --------------------------------------------
def test_paraphrased_subquestions_score_like_exact_wording():
    for kwargs in ({}, MULTIHOP):  # the default mixed set, and multi-hop questions only
        env = OrchMASEnv(split="test", **kwargs)
        exact = play(env, decompose_orchestrator().choose, 250)
        reworded = RewritingPlan(
            decompose_orchestrator(), rewrite=paraphrase_request, only_subquestions=True
        )
        para = play(env, reworded, 250)
        gap, half = paired(exact, para)
        assert abs(gap) <= max(half, 0.01), (kwargs, gap, half)


def test_paraphrases_of_every_hop_are_read_as_that_hop():
    env = OrchMASEnv(split="test", **MULTIHOP)
    seen_relations, total = set(), 0
    for index in range(60):
        env.reset(options={"task_index": index})
        chain = env.task.meta["chain"]
        for hop in chain:
            seen_relations.add(hop["relation"])
            for variant in range(6):
                canonical = SUBQUESTION_REQUEST.format(question=hop["question"])
                request = paraphrase_request(canonical, variant)
                for text in (request, paraphrase_question(hop["question"], variant)):
                    got = reading(env.task, text)
                    same = [j for j, h in enumerate(chain) if h["question"] == hop["question"]]
                    assert got.target == "hop" and got.hop in same, (text, got, hop)
                    total += 1
    assert len(seen_relations) >= 8 and total > 500


def test_held_out_wordings_and_ambiguity():
    """Wordings the paraphraser never writes; the year and the founder share a verb."""
    task = Task(
        "t",
        "In which city was the founder of Velor Labs born?",
        ("Port Elra",),
        {
            "chain": [
                {"question": "Who founded Velor Labs?", "entity": "Velor Labs",
                 "answer": "Ana Quill", "relation": "company.founded_by"},
                {"question": "In which city was Ana Quill born?", "entity": "Ana Quill",
                 "answer": "Port Elra", "relation": "person.born_in"},
            ]
        },
    )  # fmt: skip
    for text in (
        "Who is the founder of Velor Labs?",
        "velor labs -- who started it?",
        "Kindly name the person that established Velor Labs.",
        "Tell me Velor Labs's founder, please.",
        "I'd like to know who set up Velor Labs. Thank you so much!",
    ):
        got = reading(task, text)
        assert (got.target, got.hop) == ("hop", 0), text
    for text in ("Where was Ana Quill born?", "What is Ana Quill's birthplace?"):
        assert (reading(task, text).target, reading(task, text).hop) == ("hop", 1), text
    # another relation of the same entity, or both at once: not the hop
    for text in (
        "When was Velor Labs founded?",
        "Velor Labs founded",
        "Who founded Velor Labs, when, and where is it headquartered?",
        "In what year was Ana Quill born?",
    ):
        assert reading(task, text).target != "hop", text
    # the right relation of the wrong entity stays off-chain and gets a wrong answer
    assert reading(task, "Who is the founder of Mira Labs?").target != "hop"
    assert wrong_answer(task, "Ana Quill", "off-chain") != "Ana Quill"
    # the whole question is still the whole question
    assert reading(task, task.prompt).target == "question"
    assert relation_asked("no.such_relation", {"who"}) is None
    assert set(PARAPHRASES) == set(RELATION_TERMS)


def test_hostile_requests_are_read_quickly():
    env = OrchMASEnv(split="test", **MULTIHOP)
    env.reset(options={"task_index": 3})
    entity = env.task.meta["chain"][0]["entity"]
    started = time.perf_counter()
    for text in (
        "who founder " * 200_000,
        f"{entity} " + "founded " * 100_000 + "\x00\ud800" * 1000,
        "'s" * 300_000,
        "",
        "{" * 50_000 + "\\boxed{" * 10_000,
    ):
        assert reading(env.task, text).target in ("question", "hop", "off-chain", "irrelevant")
        assert paraphrase_request(text).startswith(("Sub-question", "Please", "Could", "I need"))
        env.fork().step(call_action(STUFFED_ROLE * 50, text or "?"))
    assert time.perf_counter() - started < 10


# -- the audit: skill reference and strategies ----------------------------------------------------
def skill_policy(s: float, seed: int) -> Callable[[Any], str]:
    rng = np.random.default_rng(seed)

    def act(env: Any) -> str:
        action = env.skill_action(bool(rng.random() < s), rng)
        assert action is not None
        return action

    return act


def test_skill_reference_rises_with_skill_and_uses_the_fitting_role():
    env = OrchMASEnv(split="test")
    means = {}
    for s in (0.0, 1.0):
        scores = []
        for seed in range(200):
            scores.append(play_one(env, skill_policy(s, seed), seed))
        means[s] = np.array(scores)
    gain, half = paired(means[1.0], means[0.0])
    assert gain - half > 0.1, (gain, half)
    env.reset(options={"task_index": 1})  # multi-hop: the first hop, as the researcher
    call, _ = parse_call(env.skill_action(True, np.random.default_rng(0)))
    assert call is not None and call["agent_role"] == "researcher"
    assert env.task.meta["chain"][0]["question"] in call["prompt"]
    call, _ = parse_call(env.skill_action(False, np.random.default_rng(0)))
    assert call is not None and call["agent_role"] == "assistant"
    assert env.task.prompt in call["prompt"]
    assert 0.0 < OrchMASEnv.realistic_skill <= 1.0 and OrchMASEnv.realistic_skill_source


def play_one(env: OrchMASEnv, policy: Callable[[Any], str], seed: int) -> float:
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(policy(env))
        total += reward
        done = terminated or truncated
    return total


@pytest.mark.parametrize("max_calls", [1, 5])
def test_audit_strategies_play_valid_actions(max_calls: int):
    env = OrchMASEnv(split="test", max_calls=max_calls)
    strategies = env.audit_strategies()
    controls = env.control_strategies()
    assert "legit-paraphrased-subquestions" in controls and not set(controls) & set(strategies)
    strategies = {**strategies, **controls}
    for name in ("stuffed-role", "legit-paraphrased-subquestions", "copy-the-question"):
        assert name in strategies and strategies[name].__doc__
    for name, policy in strategies.items():
        for seed in range(4):
            env.reset(seed=seed)
            done = False
            while not done:
                *_, terminated, truncated, info = env.step(policy(env))
                assert not info.get("parse_error"), name
                done = terminated or truncated
        for seed in range(4):  # the skill reference is valid at every budget too
            play_one(env, skill_policy(0.5, seed), seed)


def test_agent_roles_ablation_picks_the_best_fixed_role():
    picked = best_fixed_role(12, seed=7)
    assert set(picked["means"]) == set(FIXED_ROLES) and STUFFED_ROLE in FIXED_ROLES
    assert picked["means"][picked["best"]] == max(picked["means"].values())
