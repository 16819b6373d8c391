"""Issue 25 for the multihop QA ids: the skill reference, paraphrased sub-questions, and the
simulated Recommender's reach (a hop counts only along an unbroken chain from the question)."""

from __future__ import annotations

import statistics

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401
from orchenv.audit import play_skill
from orchenv.envs.multihopqa.agents import MultihopRoleBackend, gold_sentences, known_hops
from orchenv.envs.multihopqa.env import (
    MultihopQAEnv,
    MultihopQAGame,
    chain_action,
    paraphrase,
)
from orchenv.envs.multihopqa.synth import SyntheticMultihopSource

FAST = {"token_counter": "estimate", "judge": None}
ENV_IDS = ("orch/MultihopQA-v0", "orch/MultihopQAFull-v0", "orch/MultihopQAStatic-v0")


def test_appendix_e_weights_and_fixed_role_keywords_are_the_defaults():
    assert MultihopQAGame.default_routing.weights == (1.0, 1.0, 1.0)
    game = MultihopQAGame(token_counter="estimate")
    game.reset(options={"task_index": 0})
    assert not game.track_names
    # K_i of the Recommender is its fixed list (empty): the question's names score nothing
    names = MultihopQAGame(token_counter="estimate", track_names=True)
    names.reset(options={"task_index": 0})
    plain = game.router.scores(game.memory, "recommender", game.stage(), now=1, keywords=())
    tracked = names.router.scores(
        names.memory, "recommender", names.stage(), now=1, keywords=names._keywords()
    )
    assert names._keywords() and tracked[0] > plain[0]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_skill_curve_rises(env_id):
    env = gym.make(env_id, **FAST).unwrapped
    curve = {}
    for s in (0.0, 0.5, 1.0):
        returns = []
        for task in range(16):
            env.reset(seed=task, options={"task_index": task})
            returns.append(play_skill(env, s, (0, task)).ret)
        curve[s] = statistics.fmean(returns)
    assert curve[0.0] < curve[0.5] < curve[1.0]
    assert curve[1.0] - curve[0.0] > 0.4, curve


def test_skill_action_is_well_formed_and_the_unskilled_default_ignores_the_truth():
    env = gym.make("orch/MultihopQA-v0", **FAST).unwrapped
    env.reset(seed=1, options={"task_index": 1})
    rng = np.random.default_rng(0)
    skilled = env.skill_action(True, rng)
    first_hop = env.task.meta["chain"][0]["question"]
    assert f"<query>{first_hop}</query>" in skilled
    unskilled = env.skill_action(False, rng)
    # the same default on a task whose chain and answer are hidden
    hidden = env.fork()
    hidden.task = hidden.game.task = type(env.task)(
        id=env.task.id, prompt=env.task.prompt, answers=("unknowable",), meta={}
    )
    assert hidden.skill_action(False, rng) == unskilled
    _, _, _, _, info = env.step(skilled)
    assert not info.get("invalid_action")


def _scripted_f1(router: str, wording, n: int = 30) -> tuple[list[float], int]:
    env = MultihopQAEnv(router=router, **FAST)
    f1, complete = [], 0
    for i in range(n):
        env.reset(seed=i, options={"task_index": i})
        done = False
        while not done:
            k = env.game.round + i
            reword = None if wording is None else (lambda q, e, k=k: wording(q, e, k))
            _, _, term, trunc, info = env.step(chain_action(env.task, env.game.memory, reword))
            done = term or trunc
        text = "\n".join(m.text for m in env.game.memory)
        complete += all(g in text for g in gold_sentences(env.task))
        f1.append(info["f1"])
    return f1, complete


@pytest.mark.parametrize("router", ["rcr", "full"])
def test_paraphrased_sub_questions_keep_the_f1(router):
    plain, plain_complete = _scripted_f1(router, None)
    reworded, reworded_complete = _scripted_f1(router, paraphrase)
    # the searches find the same evidence; F1 moves only by the agents' luck
    assert reworded_complete == plain_complete
    diffs = [a - b for a, b in zip(reworded, plain, strict=True)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if any(diffs) else 0.0
    assert abs(statistics.fmean(diffs)) <= max(2 * se, 0.05)


def test_a_lone_answer_paragraph_is_not_reached():
    source = SyntheticMultihopSource(n_train=2, n_test=20)
    task = next(
        t
        for t in (source.get("test", i) for i in range(20))
        if t.meta["type"] == "bridge" and len(t.meta["chain"]) >= 3
    )
    gold = gold_sentences(task)
    backend = MultihopRoleBackend(token_counter="estimate", distraction=0.0)
    question = f"Question: {task.prompt}\n"
    # only the last hop's sentence: nothing links it to the question
    only_last = question + gold[-1]
    assert known_hops(task, only_last)[-1]
    for luck in (0.01, 0.5):
        answer, _ = backend._recommender(task, only_last, 0.99, luck)
        assert f"<answer>{task.answer}</answer>" not in answer
    # the whole chain: answered (distraction off, accuracy 0.99, low luck)
    answer, meta = backend._recommender(task, question + " ".join(gold), 0.99, 0.01)
    assert meta["complete"] and f"<answer>{task.answer}</answer>" in answer
    # the first hops recorded by the team's sub-questions (their answers filled in) link it
    chain = task.meta["chain"]
    asked = "".join(f"- type: query\n  text: |\n    {h['question']}\n" for h in chain[1:])
    answer, meta = backend._recommender(task, question + asked + gold[-1], 0.99, 0.01)
    assert meta["complete"]


def test_a_query_dumping_many_names_records_no_hop():
    source = SyntheticMultihopSource(n_train=2, n_test=20)
    task = next(
        t
        for t in (source.get("test", i) for i in range(20))
        if t.meta["type"] == "bridge" and len(t.meta["chain"]) >= 3
    )
    chain = task.meta["chain"]
    titles = [title for title, _ in task.meta["context"]]
    one = f"- type: query\n  text: |\n    {chain[1]['question']}\n"
    dump = "- type: query\n  text: |\n    " + " ".join(titles) + "\n"
    assert known_hops(task, one)[0]
    assert not any(known_hops(task, dump)[:-1])
