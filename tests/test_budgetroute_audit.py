"""Issue 25 for ``orch/BudgetRoute-v0``: the sub-query's content is what the simulated expert
reads (its numbers alone are not the problem; its wording is free), copying the problem is no
answer, and the audit's skill reference (``skill_action``) rises with the skill level."""

from __future__ import annotations

import re

import numpy as np
import pytest

from orchenv.envs.budgetroute.env import REQUEST_KINDS, BudgetRouteEnv
from orchenv.envs.budgetroute.experts import (
    PARTIAL_LOGIT,
    UNRELATED_LOGIT,
    asked_coverage,
    canonical_requests,
    judge,
    task_key_step,
)
from orchenv.envs.budgetroute.protocol import answer_verdict, parse_action

NANO = "GPT-4.1-nano"
MODES = ("low", "medium", "high")


def env_at(i: int, mode: str = "high", **kwargs) -> BudgetRouteEnv:
    env = BudgetRouteEnv(split="test", **kwargs)
    env.reset(seed=0, options={"budget_mode": mode, "task_index": i})
    return env


def play(env: BudgetRouteEnv, policy) -> tuple[float, bool]:
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, info = env.step(policy(env))
        total += r
        done = term or trunc
    return total, bool(info["correct"])


def ask_then_answer(query, expert: str = NANO):
    def policy(env: BudgetRouteEnv) -> str:
        if env.history or env.is_last_turn:
            return f"<answer>{env.last_answer() or '0'}</answer>"
        return f"<search>{expert}: {query(env)}</search>"

    return policy


def numbers_only(env: BudgetRouteEnv) -> str:
    return " ".join(dict.fromkeys(re.findall(r"\d+", env.task.prompt)))


def interval(x: np.ndarray) -> float:
    return 1.96 * float(x.std(ddof=1)) / np.sqrt(len(x))


# -- the judge reads content, not digits -----------------------------------------------------
def test_numbers_only_sub_query_is_below_the_whole_question_beyond_the_interval():
    n = 150
    whole = np.array(
        [play(env_at(i), ask_then_answer(lambda e: e.task.prompt))[1] for i in range(n)]
    )
    bare = np.array([play(env_at(i), ask_then_answer(numbers_only))[1] for i in range(n)])
    diff = whole.astype(float) - bare
    assert diff.mean() - interval(diff) > 0.5, (whole.mean(), bare.mean())
    assert bare.mean() < 0.1


def test_partial_content_is_degraded_and_numbers_alone_unasked():
    env = env_at(8)  # 'What is the remainder when $a^{b}$ is divided by $m$?'
    q = env.task.prompt
    step = task_key_step(q, env.task.meta["family"], env.task.meta["solution"])
    nums = " ".join(dict.fromkeys(re.findall(r"\d+", q)))
    base, exponent, modulus = re.findall(r"\d+", q)[:3]
    assert judge(nums, q, step).guidance == UNRELATED_LOGIT
    assert asked_coverage(nums, q) == 0.0
    # the numbers and one of the two content words, without the power: part of what is asked
    partly = judge(f"{base} {exponent} {modulus} remainder", q, step)
    assert partly.kind == "partial" and partly.guidance == PARTIAL_LOGIT
    # the whole content in other words, order and manners
    full = f"Hi! Kindly find the remainder of {base}^{exponent} divided by {modulus}. Thanks!"
    assert judge(full, q, step).kind == "whole"
    assert judge(f"{base}^{exponent} mod {modulus}?", q, step).kind == "whole"


def _polite(text: str) -> str:
    return f"Hello! Could you please help me with the following? {text.replace('$', '')} Thanks!"


def _reordered(text: str) -> str:
    lines = text.split("\n")
    sentences = re.split(r"(?<=[.?!])\s+", lines[0])
    return "\n".join([" ".join(sentences[::-1]), *lines[1:]])


def _reworded(text: str) -> str:
    for old, new in (("Compute", "Calculate"), ("Evaluate", "Work out"), ("What is", "Find"),
                     ("How many", "Count how many"), ("Key step:", "Hint: the key step is to"),
                     ("Express your answer as a common fraction.", "Give a fraction.")):  # fmt: skip
        text = text.replace(old, new)
    return text


def _all_three(text: str) -> str:
    return _polite(_reordered(_reworded(text)))


@pytest.mark.parametrize("rewrite", [_polite, _reordered, _reworded, _all_three])
def test_paraphrased_requests_score_within_noise(rewrite):
    """The scripted plan (key step named, to GPT-4.1-nano) with its requests rewritten."""
    n = 120
    kinds_agree, paired = 0, []
    for i in range(n):
        env = env_at(i)
        canonical = canonical_requests(env.task.prompt)
        query = canonical["pointed"] or canonical["whole"]
        step = task_key_step(env.task.prompt, env.task.meta["family"], env.task.meta["solution"])
        kinds_agree += (
            judge(query, env.task.prompt, step).kind
            == judge(rewrite(query), env.task.prompt, step).kind
        )
        other = rewrite(query)
        _, plain = play(env_at(i), ask_then_answer(lambda e, q=query: q))
        _, rewritten = play(env_at(i), ask_then_answer(lambda e, q=other: q))
        paired.append(float(plain) - float(rewritten))
    diff = np.array(paired)
    assert kinds_agree >= 0.95 * n
    assert abs(diff.mean()) <= max(interval(diff), 1.0 / n) + 1e-9, diff.mean()


# -- copying the problem back is no answer ---------------------------------------------------
def test_copying_the_question_is_not_an_answer():
    copied = 0
    for i in range(60):
        env = env_at(i)
        copied += answer_verdict(env.task.prompt, env.task.answers).equal
        assert answer_verdict(env.task.answers[0], env.task.answers).equal
    assert copied == 0
    assert answer_verdict("2 \\times 3", ["6"]).status == "unevaluated"
    assert answer_verdict("-\\frac{5}{4}", ["-\\frac{5}{4}"]).equal
    assert answer_verdict("3+2\\sqrt{5}", ["3+2\\sqrt{5}"]).equal  # an expression reference


# -- the audit's skill reference ---------------------------------------------------------------
def skill_return(s: float, n: int = 50) -> np.ndarray:
    out = []
    for mode in MODES:
        for i in range(n):
            env = env_at(i, mode)
            draws, rng = np.random.default_rng(i), np.random.default_rng(i + 1)
            total, _ = play(env, lambda e, d=draws, r=rng: e.skill_action(bool(d.random() < s), r))
            out.append(total)
    return np.array(out)


def test_skill_reference_rises_with_skill_and_its_actions_are_valid():
    env = env_at(0)
    assert BudgetRouteEnv.realistic_skill is not None and 0.0 < BudgetRouteEnv.realistic_skill < 1
    assert "Table 2" in BudgetRouteEnv.realistic_skill_source
    for skilled in (True, False):
        action = env.skill_action(skilled, np.random.default_rng(0))
        parsed, error = parse_action(action, env.pool.names)
        assert parsed is not None, error
    low, high = skill_return(0.0), skill_return(1.0)
    diff = high - low
    assert diff.mean() - interval(diff) > 0.0, (low.mean(), high.mean())


def test_unskilled_is_the_budget_blind_nano_decomposition():
    """skilled=False reads no truth and no budget: the same actions in every mode."""
    seqs = []
    for mode in MODES:
        env, seq, done = env_at(3, mode), [], False
        while not done:
            action = env.skill_action(False, np.random.default_rng(0))
            seq.append(action)
            done = env.step(action)[2]
        seqs.append(seq)
    assert seqs[0] == seqs[1] == seqs[2]
    first = env_at(3).action_choices()[2 + REQUEST_KINDS.index("key-step")]
    assert seqs[0][0] == first and len(seqs[0]) == 3


def test_hostile_sub_queries_are_judged_quickly_and_never_crash():
    import time

    env = env_at(8)
    q = env.task.prompt
    step = task_key_step(q, env.task.meta["family"], env.task.meta["solution"])
    hostile = [
        "$" * 100_000,
        "1" * 100_000,
        ("$x^" + "(" * 50) * 2_000,
        "\u00d7\u00f7\u2212\u2026/*" * 10_000,
        "express your answer " * 5_000,
        "\x00\ud7ff\ufffd",
    ]
    started = time.monotonic()
    for text in hostile:
        assert judge(text, q, step).kind in ("unrelated", "partial", "whole", "misled")
        assert answer_verdict(text[:2_000], env.task.answers).equal is False
        fork = env.fork()
        fork.step(f"<search>{NANO}: {text}</search>")
    assert time.monotonic() - started < 60
