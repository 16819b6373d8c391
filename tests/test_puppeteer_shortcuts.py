"""Issue 25: Puppeteer's shortcuts score what an honest policy reaches, no more.

Wrong answers are correlated within a task (shared distractors, a task latent), so agreeing
answers gain about what self-consistency gains a real model; wrong outputs carry no tell (no
magnitude bias on GSM-Hard, no marker in SRDD code); the skill reference rises with skill."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from orchenv.envs.puppeteer import outputs
from orchenv.envs.puppeteer.choices import MARKER, _extreme, agent_text
from orchenv.envs.puppeteer.env import PuppeteerEnv
from orchenv.envs.puppeteer.protocol import parse_action
from orchenv.envs.puppeteer.tasks import make_task

#: Wang et al. 2023 (ICLR, "Self-Consistency Improves Chain of Thought Reasoning in Language
#: Models"), abstract: self-consistency gains +3.9 points on ARC-challenge (multiple choice)
#: with 40 sampled paths; four calls should gain no more
SELF_CONSISTENCY_MC_GAIN = 0.039


def play(env, policy, n, returns=False):
    """Scores (or returns: summed rewards) of ``n`` episodes on the first ``n`` tasks."""
    scores, totals = [], []
    for i in range(n):
        env.reset(seed=0, options={"task_index": i})
        done, info, total = False, {}, 0.0
        while not done:
            _, reward, terminated, truncated, info = env.step(policy(env))
            total += reward
            done = terminated or truncated
        scores.append(float(info["score"]))
        totals.append(total)
    return totals if returns else scores


def paired(a, b):
    """Mean of a - b and its 95% half-width."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    return statistics.fmean(d), 1.96 * statistics.stdev(d) / math.sqrt(len(d))


def env_for(preset, tasks, n):
    return PuppeteerEnv(preset=preset, tasks=tasks, split="test", n_tasks=n)


def test_wrong_gsm_answers_are_as_often_smaller_as_larger():
    smaller = total = 0
    for i in range(400):
        task = make_task("gsm-hard", 0, i, "test")
        value = int(task.answer)
        for wrong in outputs.distractors(task):
            assert int(wrong) != value
            smaller += int(wrong) < value
            total += 1
    assert abs(smaller / total - 0.5) < 0.05


def test_magnitude_rule_gains_nothing():
    """Picking the smaller answer (the old tell: wrong GSM-Hard answers ran large) scores as
    its mirror (the larger answer) does: what it gains over one call is re-asking's gain, not
    the magnitude's; and its return (eq. 6, tokens paid) is no better than the single call's."""
    n = 800
    env = env_for("titan-mono", "gsm-hard", n)
    strategies = env.audit_strategies()
    reason = agent_text(env.pool.strongest(), "reasoning")
    small = play(env, strategies["smaller-answer"], n)
    large = play(env, lambda e: _extreme(e, reason, max), n)
    mean, half = paired(small, large)
    assert abs(mean) <= half + 0.005
    single = play(env, strategies["one-call-then-terminate"], n)
    mean, half = paired(small, single)
    assert mean - half <= SELF_CONSISTENCY_MC_GAIN  # the old rule gained +0.087 +- 0.020
    single_r = play(env, strategies["one-call-then-terminate"], n, returns=True)
    small_r = play(env, strategies["smaller-answer"], n, returns=True)
    mean, half = paired(small_r, single_r)
    assert mean - half <= 0.0
    env.close()


def test_agreement_gains_no_more_than_self_consistency():
    n = 1000
    env = env_for("titan-mono", "multiple-choice", n)
    strategies = env.audit_strategies()
    single = play(env, strategies["one-call-then-terminate"], n)
    agree = play(env, strategies["agree-twice"], n)
    mean, half = paired(agree, single)
    assert mean - half <= SELF_CONSISTENCY_MC_GAIN  # was +0.142 +- 0.018 (n = 2000)
    assert mean - half > 0.0  # and agreeing answers do help, as self-consistency does
    env.close()


def test_wrong_srdd_code_carries_no_marker():
    """Wrong SRDD code has no label and compiles: a broken one differs from its flawed base by
    one misspelled name (as a real model's does), so neither a marker nor a syntax check
    tells it from the right program."""
    for i in range(30):
        task = make_task("srdd", 0, i, "test")
        for code in outputs.distractors(task):
            assert not MARKER.search(code)
            assert code != outputs.right_output(task)
            compile(code, "<draft>", "exec")


def test_mmlu_distractors_favour_no_letter():
    tops = [outputs.distractors(make_task("multiple-choice", 0, i, "test"))[0] for i in range(600)]
    counts = {x: tops.count(x) for x in set(tops)}
    assert max(counts.values()) / len(tops) < 0.16 and len(counts) == 10


@pytest.mark.parametrize(
    "reworded",
    [
        "Next I ask <agent> LLAMA-3.1-405B : Reasoning </agent> to solve it.",
        "<AGENT>Llama 3.1 405B: reasoning</AGENT> (the strongest reasoner)",
    ],
)
def test_paraphrased_agent_requests_keep_the_score(reworded):
    """The puppeteer takes free text only around its agent tags: a reworded request calls the
    same agent, so the score stays within noise (here: the same draws)."""
    assert parse_action(reworded, ["llama-3.1-405b"], 1).agents == (
        ("llama-3.1-405b", "reasoning"),
    )
    n = 300
    env = env_for("titan-mono", "multiple-choice", n)
    canonical = "<agent>llama-3.1-405b:reasoning</agent>"
    plain = play(env, lambda e: canonical if not e.history else "<agent>terminate</agent>", n)
    worded = play(env, lambda e: reworded if not e.history else "Done: <agent>Terminate</agent>", n)
    mean, half = paired(worded, plain)
    assert abs(mean) <= half
    assert statistics.fmean(worded) == pytest.approx(0.76, abs=0.08)
    env.close()


def test_skill_reference_rises_with_skill():
    n = 300
    env = env_for("titan", "multiple-choice", n)
    assert PuppeteerEnv.realistic_skill is not None and 0 < PuppeteerEnv.realistic_skill < 1
    assert "Table 1" in PuppeteerEnv.realistic_skill_source
    means = []
    for s in (0.0, 0.5, 1.0):
        rng = np.random.default_rng(0)

        def policy(e, s=s, rng=rng):
            return e.skill_action(bool(rng.random() < s), rng)

        means.append(statistics.fmean(play(env, policy, n)))
    single = statistics.fmean(play(env, env.audit_strategies()["one-call-then-terminate"], n))
    assert means[0] == single
    # margins 0.03 (0.05 before issue 38: correlated revisions make the skilled critique
    # worth less on hard tasks, and s = 0.5 measured 0.810 against s = 0's 0.763)
    assert means[0] + 0.03 < means[1] < means[2] - 0.03
    env.close()


@pytest.mark.parametrize("tasks", ["gsm-hard", "commongen"])
def test_skill_actions_are_well_formed(tasks):
    env = env_for("titan", tasks, 20)
    rng = np.random.default_rng(1)
    for i in range(20):
        env.reset(seed=0, options={"task_index": i})
        done = False
        while not done:
            action = env.skill_action(bool(rng.random() < 0.7), rng)
            assert parse_action(action, env.pool.names, 1).error is None
            _, _, terminated, truncated, info = env.step(action)
            assert info.get("parse_error") is None
            done = terminated or truncated
    env.close()


def test_default_id_no_skill_default_answers_some_tasks():
    """The default id (Mimas, GSM-Hard): the no-skill default and one-call-then-terminate
    call the model best at the task's family (Qwen-2.5-14B, Table 1's 0.045), not the
    strongest on average (Llama-3.1-8B, whose GSM-Hard row is 0.0000: accuracy 0 on every
    task before the fix), and so answer some tasks right."""
    import gymnasium as gym

    n = 200
    env = gym.make("orch/Puppeteer-v0", split="test", n_tasks=n).unwrapped
    env.reset(seed=0, options={"task_index": 0})
    key = "quality.gsm_hard"
    best = max(a.calibration[key] for a in env.pool.agents)
    assert env.pool.spec(env.single_call_model()).calibration[key] == best > 0
    rng = np.random.default_rng(0)
    single = play(env, env.audit_strategies()["one-call-then-terminate"], n)
    assert statistics.fmean(single) > 0.0
    # issue 38: after the first answer the no-skill default has the same model critique and
    # revise while its public single-call quality is below UNSKILLED_STOP_PRIOR (0.045 here)
    env.reset(seed=0, options={"task_index": 0})
    first = env.skill_action(False, rng)
    assert first == agent_text(env.single_call_model(), "reasoning")
    env.step(first)
    assert env.skill_action(False, rng) == agent_text(env.single_call_model(), "critique")
    unskilled = play(env, lambda e: e.skill_action(False, rng), n)
    assert statistics.fmean(unskilled) > statistics.fmean(single) + 0.2
    env.close()


def test_no_skill_default_stops_where_the_single_call_is_likely_right():
    """Titan MMLU-Pro (Llama-3.1-405B, 0.76 >= 0.5): the no-skill default is the single call
    then terminate, as before issue 38."""
    env = env_for("titan", "multiple-choice", 30)
    rng = np.random.default_rng(0)
    unskilled = play(env, lambda e: e.skill_action(False, rng), 30)
    single = play(env, env.audit_strategies()["one-call-then-terminate"], 30)
    assert unskilled == single
    env.close()
