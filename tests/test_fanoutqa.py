"""The ``fanoutqa`` task source (issue 31): FanOutQA's dev questions with the decomposition's
sub-answers as oracle evidence (live Wikipedia is not reachable offline)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the envs and task sources)
from orchenv.core import OrchestrationEnv
from orchenv.envs.multihopqa.agents import gold_sentences
from orchenv.envs.multihopqa.loaders import FANOUTQA_EVIDENCE, load_fanoutqa
from orchenv.error import ConfigError, UnknownNameError
from orchenv.tasks import make_task_source

pytest.importorskip("fanoutqa")


@pytest.fixture(scope="module")
def source():
    return load_fanoutqa()


def test_all_dev_questions_load_with_a_consistent_chain(source):
    assert source.splits == ("validation",) and source.size("validation") == 310
    for task in source.iter("validation"):
        meta = task.meta
        assert meta["evidence"] == FANOUTQA_EVIDENCE and meta["dataset"] == "fanoutqa"
        assert task.answer and meta["hops"] == len(meta["chain"]) >= 1
        titles = {title for title, _ in meta["context"]}
        for hop, sentence in zip(meta["chain"], gold_sentences(task), strict=True):
            assert hop["title"] in titles
            assert hop["answer"] in sentence  # the oracle evidence states the sub-answer
        assert all(u.startswith("https://en.wikipedia.org/") for u in meta["wikipedia_urls"])


def test_entity_answers_become_one_graded_string(source):
    task = source.by_id("7dcbbbdc7f1120cd")  # batting hands of the 1998 draft's first five
    assert task.answer.startswith("Pat Burrell: Right; Mark Mulder: Left")


def test_the_source_is_registered_and_refuses_the_test_split():
    assert make_task_source("fanoutqa", limit=3).size("validation") == 3
    with pytest.raises(UnknownNameError, match="without answers"):
        load_fanoutqa(split="test")
    with pytest.raises(ConfigError):
        load_fanoutqa(limit=0)


def test_the_multihop_env_plays_it_and_the_oracle_chain_answers():
    env = gym.make(
        "orch/MultihopQA-v0",
        task_source="fanoutqa",
        task_source_kwargs={"limit": 3},
        max_turns=10,
    )
    base = env.unwrapped
    assert isinstance(base, OrchestrationEnv)
    rng = np.random.default_rng(0)
    with pytest.warns(UserWarning, match="using 'validation'"):  # the env's default: test
        env.reset(seed=0, options={"task_index": 0})
    for _ in range(10):
        action = base.skill_action(True, rng)
        assert action is not None
        *_, term, trunc, info = env.step(action)
        assert not info["invalid_action"]
        if term or trunc:
            break
    assert info["final_answer"] and info["score"] == pytest.approx(1.0)
