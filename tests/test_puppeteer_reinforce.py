"""REINFORCE (seed 003 eq. 5) on Puppeteer at small scale: Titan-Mono on MMLU-Pro, the
setting of the paper's Figure 3. It must beat a uniformly random puppeteer and spend fewer
tokens at the end of training than at the start (Figure 2's direction)."""

from __future__ import annotations

import numpy as np

from orchenv.agents.reinforce import evaluate, text_features, train, words_of
from orchenv.envs.puppeteer.env import PuppeteerEnv


def test_reinforce_beats_random_and_trims_tokens():
    env = PuppeteerEnv(preset="titan-mono", tasks="multiple-choice", n_tasks=200)
    policy, log = train(env, 3000, lr=0.1, baseline="mean", seed=0)
    start = np.mean([r["tokens"] for r in log[:150]])
    end = np.mean([r["tokens"] for r in log[-150:]])
    assert end < start
    random_ = evaluate(env, None, 150)
    trained = evaluate(env, policy, 150)
    assert trained["return"] > random_["return"] + 0.05


def test_features_are_stable_and_bounded():
    a = text_features("Step 1 of 4. Current answer: (none)", 1024)
    assert np.array_equal(a, text_features("Step 1 of 4. Current answer: (none)", 1024))
    assert a.max() < 1024 and len(text_features("x " * 1_000_000, 64)) <= 64
    start = words_of("Task: add 2 and 3. Current answer: (none)")
    assert len(text_features("Task: add 2 and 3. Current answer: (none)", 64, since=start)) == 1
    delta = text_features("Task: add 2 and 3. Current answer: 5", 1 << 20, since=start)
    assert len(delta) == 2  # "5" and "answer: 5": what the episode added, not the task
