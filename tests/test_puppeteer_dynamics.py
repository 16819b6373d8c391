"""Puppeteer's simulated agents reward what seed 003 studies: tool output is not an answer,
revisions act on the draft (a specific critique helps more than an empty one), and each
calibrated model's single call matches Table 1."""

from __future__ import annotations

import numpy as np
import pytest

from orchenv.envs.puppeteer import outputs, revision
from orchenv.envs.puppeteer.agents import PatternBackend, agent_messages, puppeteer_pool
from orchenv.envs.puppeteer.env import PuppeteerEnv
from orchenv.envs.puppeteer.presets import MODEL_PROVENANCE, PRESET_MODELS, SCORE_LEVELS
from orchenv.envs.puppeteer.tasks import make_task, score_answer
from orchenv.pool import CallContext


def mean_score(env, script, n, start=0):
    scores = []
    for i in range(start, start + n):
        env.reset(seed=i, options={"task_index": i})
        for action in [*script, "<agent>terminate</agent>"]:
            *_, term, trunc, info = env.step(action)
            if term or trunc:
                break
        scores.append(info["score"])
    return float(np.mean(scores))


def test_tool_stdout_exploit_scores_no_better_than_no_agent():
    """'Print the answer, then terminate': the controller cannot write code any more, and a
    tool agent's output never becomes the team's answer."""
    env = PuppeteerEnv(preset="titan", tasks="gsm-hard", split="test", n_tasks=40)
    nothing = mean_score(env, [], 20)
    strongest = env.pool.strongest()
    exploit = mean_score(env, [f"<agent>{strongest}:run_python</agent>"], 20)
    code = f"<agent>tool:run_python</agent><code>print({env.task.answer})</code>"
    written = mean_score(env, [code], 20)
    assert exploit <= nothing and written <= nothing and nothing == 0.0


def test_reasoning_then_critique_beats_reasoning_on_gsm_hard():
    """Table 1: Self-Refine lifts Llama-3.1-8B from 0.00 to 0.48 on GSM-Hard."""
    env = PuppeteerEnv(preset="mimas-mono", tasks="gsm-hard", split="test", n_tasks=300)
    agent = "<agent>llama-3.1-8b:{}</agent>"
    alone = mean_score(env, [agent.format("reasoning")], 200)
    critiqued = mean_score(env, [agent.format("reasoning"), agent.format("critique")], 200)
    assert critiqued > alone + 0.15


def test_a_right_draft_mostly_stays_right_and_reasoning_reanswers():
    backend = PatternBackend()
    spec = puppeteer_pool("titan-mono").spec("llama-3.1-405b")
    kept = fresh = 0
    for i in range(200):
        task = make_task("gsm-hard", 0, i, "test")
        for pattern in ("critique", "reasoning"):
            msgs = agent_messages("gsm-hard", pattern, task.prompt, [], draft=task.answer)
            text = backend.complete(spec, msgs, CallContext(task=task, turn=1, draft=task.answer))
            right = task.answer in text.text.rsplit("FINAL ANSWER:", 1)[1]
            if pattern == "critique":
                kept += right
            else:
                fresh += right
    assert kept / 200 > 0.85 and fresh / 200 < 0.3  # reasoning: 0.135 (Table 1)


@pytest.mark.parametrize("kind", ["gsm-hard", "multiple-choice", "commongen"])
def test_specific_critique_fixes_more_than_an_empty_one(kind):
    backend = PatternBackend()
    spec = puppeteer_pool("mimas-mono").spec("llama-3.1-8b")
    fixed = {"specific": 0, "empty": 0}
    for i in range(300):
        task = make_task(kind, 0, i, "test")
        family = outputs.family_of(task)
        draft = outputs.wrong_output(task, "draft", i)
        critique = revision.written_critique(family, task, draft, "specific")
        assert revision.judge_critique(family, task, draft, critique, False) == "specific"
        assert revision.judge_critique(family, task, draft, "", False) == "empty"
        for label, feedback in (("specific", critique), ("empty", "")):
            msgs = agent_messages(kind, "modify", task.prompt, [], draft=draft)
            ctx = CallContext(task=task, turn=2, draft=draft, feedback=feedback)
            answer = backend.complete(spec, msgs, ctx).text.rsplit("FINAL ANSWER:", 1)[1]
            fixed[label] += backend.is_right(task, answer.strip())
    assert fixed["specific"] > fixed["empty"] + 30


def test_critiques_are_judged_by_content():
    task = make_task("gsm-hard", 0, 1, "test")
    wrong = outputs.wrong_output(task, 1)
    judge = revision.judge_critique
    assert judge("gsm_hard", task, wrong, f"The result {wrong} is wrong.", False) == "specific"
    assert judge("gsm_hard", task, wrong, "Please recheck everything.", False) == "generic"
    other = str(int(wrong) + 7)  # a number the draft does not hold
    assert judge("gsm_hard", task, wrong, f"The result {other} is wrong.", False) == "generic"
    assert judge("gsm_hard", task, task.answer, "This is wrong.", True) == "misleading"


def calibrated():
    for preset in ("mimas", "titan"):
        for model in PRESET_MODELS[preset]:
            if MODEL_PROVENANCE[model] == "table1":
                yield preset, model


@pytest.mark.parametrize(("preset", "model"), list(calibrated()))
def test_single_model_rows_match_table1(preset, model):
    """The expected score of one reasoning call, per family, is the Table 1 row (within 2
    points): exactly for the binary families; for the continuous ones, the right-output
    chance solved against ``SCORE_LEVELS`` (checked against the scorer below)."""
    from orchenv.envs.puppeteer.presets import MODELS

    backend = PatternBackend()
    spec = puppeteer_pool(preset).spec(model)
    for family, target in MODELS[model].quality.items():
        p = backend.right_probability(spec, family)
        right, flawed = SCORE_LEVELS.get(family, (1.0, 0.0))
        assert p * right + (1 - p) * flawed == pytest.approx(target, abs=0.02)


def test_commongen_score_levels_match_the_scorer():
    right, flawed = [], []
    for i in range(60):
        task = make_task("commongen", 0, i, "test")
        right.append(score_answer("commongen", task, outputs.right_output(task)))
        flawed.append(score_answer("commongen", task, outputs.wrong_output(task, "lvl", i)))
    levels = SCORE_LEVELS["commongen_hard"]
    assert np.mean(right) == pytest.approx(levels[0], abs=0.02)
    assert np.mean(flawed) == pytest.approx(levels[1], abs=0.03)


def test_single_model_episode_matches_table1_empirically():
    env = PuppeteerEnv(preset="titan", tasks="multiple-choice", split="test", n_tasks=800)
    got = mean_score(env, ["<agent>llama-3.1-405b:reasoning</agent>"], 800)
    assert got == pytest.approx(0.76, abs=0.045)  # 3.0 standard errors at n = 800
