"""orch/OrchMAS-v0, issue 38 (third pass): the shortcuts stay below the skill at 100 tasks, a
wrong reply has the form of a right one (no magnitude or length tell), and consulting is
bounded by the episode's calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchenv.audit import audit
from orchenv.audit_tells import TEXT_FEATURES, text_features
from orchenv.envs.orchmas.executor import near_number, wrong_answer
from orchenv.tasks import Task

ENV_ID = "orch/OrchMAS-v0"
MAGNITUDE = TEXT_FEATURES.index("answer_log_magnitude")


# -- item 1: stuffed-role and copy-the-question at 100 tasks ---------------------------------------
@pytest.mark.slow  # 20-30 s on a shared core
def test_shortcuts_stay_below_the_realistic_skill_at_100_tasks():
    """The 30-task audit tied them with skill@0.9 (0.900 each): on those 30 tasks the skill
    reference is flat from s = 0.75 to 1 (every policy fails the same 3 tasks). At 100 tasks
    (measured 2026-12-07) skill@0.9 is 0.82 and both shortcuts 0.09-0.10 below: not flagged."""
    report = audit(
        ENV_ID,
        tasks=100,
        progress=False,
        best_response=False,
        blind=False,
        time_limit_s=None,
        skill_levels=(0.9, 1.0),
    )
    rows = {row.name: row for row in report.rows}
    skill = rows["skill@0.9"]
    for name in ("stuffed-role", "copy-the-question"):
        row = rows[name]
        assert not row.flagged, name
        gap = float(np.mean(np.array(skill.returns) - np.array(row.returns)))
        assert gap > report.tolerance, (name, gap)


# -- item 2: a wrong answer keeps the right one's form ---------------------------------------------
@pytest.mark.parametrize(
    "value",
    ["1398", "1744", "1990", "2024", "836", "36", "10", "99", "7", "0", "2.5", "-7", "125000"],
)
def test_near_number_keeps_the_form(value: str):
    for i in range(200):
        wrong = near_number(value, (i + 0.5) / 200)
        assert wrong != value
        assert wrong.startswith("-") == value.startswith("-")
        whole, _, decimals = value.lstrip("-").partition(".")
        w_whole, _, w_decimals = wrong.lstrip("-").partition(".")
        assert len(w_whole) == len(whole) and len(w_decimals) == len(decimals), (value, wrong)
        if len(whole) == 4 and int(whole) <= 2025:
            assert int(w_whole) <= 2025, (value, wrong)  # a past year stays a past year
        if len(whole) >= 2:  # one digit: another digit (the length above)
            magnitude = abs(math.log10(abs(float(wrong)) + 1) - math.log10(abs(float(value)) + 1))
            assert magnitude < 0.35, (value, wrong)


def _task(answer: str, **meta: object) -> Task:
    return Task("t/test/0", "Q?", (answer,), dict(meta))


def test_wrong_numbers_have_the_right_numbers_magnitude():
    """The earlier near miss moved a number by up to 50% ("1398" -> "838"): over the years and
    counts of a multi-hop set, the wrong answers' mean log-magnitude fell 0.17 below the right
    ones' and the tell meter's largest weight was the answer's magnitude."""
    rng = np.random.default_rng(0)
    rights = [str(v) for v in rng.integers(1000, 2020, 150)] + [
        str(v) for v in rng.integers(10, 999, 150)
    ]
    shift = []
    for i, right in enumerate(rights):
        task = _task(right)
        wrong = wrong_answer(task, right, f"hop{i % 3}")
        mag = [text_features(f"the answer is \\boxed{{{x}}}.")[MAGNITUDE] for x in (right, wrong)]
        assert len(wrong) == len(right), (right, wrong)
        shift.append(mag[1] - mag[0])
    assert abs(float(np.mean(shift))) < 0.02
    assert float(np.max(np.abs(shift))) < 0.35


def test_wrong_names_are_shaped_like_the_right_one():
    context = [
        ["Electric Harvest", ["Electric Harvest is a 1990 film."]],
        ["Meagrudend Studios", ["Meagrudend Studios is a film studio."]],
        ["Herynzear Studios", ["Herynzear Studios is a film studio."]],
        ["Wejymton", ["Wejymton is a city."]],
        ["Drearmemwick", ["Drearmemwick is a city."]],
    ]
    task = _task("Veabendmere", context=context)
    for key in ("question", "hop0", "hop1", "off-chain"):
        assert wrong_answer(task, "Veabendmere", key) in ("Wejymton", "Drearmemwick")
        assert wrong_answer(task, "Lumax Studios", key).endswith(" Studios")
    # the generator's names of the answer's kind come first for the whole question
    typed = _task("Veabendmere", context=context, same_type_names=["Stantokwick"])
    assert wrong_answer(typed, "Veabendmere", "question") == "Stantokwick"
    assert wrong_answer(_task("yes"), "yes", "question") == "no"
    assert wrong_answer(_task("A"), "Some Thing", "question") == "Unknown"


def test_orchmas_short_replies_tell_nothing_beyond_chance():
    """The tell meter's classifier on the short replies (answers to questions and
    sub-questions; worked math drafts come from the shared math writer) of 120 train / 60 test
    episodes: within-author AUC 0.705 [0.587, 0.813] before (200 / 100 episodes, seed 0),
    0.490 [0.386, 0.590] after (both by the earlier reply-only rule). Asserted, by the meter's
    rule since it also reads the task: not flagged, within 0.05 of what the task alone tells."""
    from orchenv.audit_tells import (
        TellMeter,
        _collect,
        _random_available,
        _skill_player,
        measure,
    )

    players = [_random_available, _skill_player(0.9)]
    train, *_ = _collect(ENV_ID, {}, "train", 120, 0, players, None, 0)
    test, *_ = _collect(ENV_ID, {}, "test", 60, 1, players, None, 1_000_000)

    def short(output: object) -> bool:
        text = output.text  # type: ignore[attr-defined]
        return "\n" not in text and "Step" not in text

    meter = TellMeter(env_id=ENV_ID, measurable=False)
    measure(meter, [o for o in train if short(o)], [o for o in test if short(o)], bootstrap=50)
    assert meter.measurable and meter.auc_within is not None
    # the meter's rule: what the replies add beyond the task's own statement (which the
    # classifier also reads since the rule changed) stays within 0.05
    assert meter.auc_within_task is not None and not meter.flagged, meter.line()
    assert meter.auc_within - meter.auc_within_task < 0.05, meter.line()


# -- item 3: the pool-agent controller on ids with a call limit ------------------------------------
@pytest.mark.parametrize("env_id", ["orch/OrchMAS-v0", "orch/BudgetRoute-v0"])
def test_pool_agent_refuses_a_call_limited_id_before_any_call(env_id: str):
    """Its turns are consults, and consults count against the call limit: with fewer calls than
    turns it used to run out at the last turns (``consult()`` refused halfway through the
    episode, after 5 charged calls on OrchMAS); now it refuses before the first call."""
    import gymnasium as gym

    from orchenv.controllers import make_controller
    from orchenv.error import ConfigError
    from orchenv.runner import run_episodes

    env = gym.make(env_id)
    base = env.unwrapped
    agent = "executor" if env_id == "orch/OrchMAS-v0" else base.pool.names[0]
    with pytest.raises(ConfigError, match="call limit") as raised:
        run_episodes(env, make_controller("pool-agent", agent=agent), 1, progress=False)
    assert "env-random" in str(raised.value)  # the fix is named
    assert base.meter.total_calls == 0 and not base.consulted
    # bound before the episode starts (no task yet): the first act refuses, no call made
    controller = make_controller("pool-agent", agent=agent)
    fresh = gym.make(env_id)
    controller.bind(fresh)
    obs, info = fresh.reset(seed=0)
    with pytest.raises(ConfigError, match="call limit"):
        controller.act(obs, info)
    assert fresh.unwrapped.meter.total_calls == 0


def test_wrong_answer_is_quick_on_hostile_answers():
    import time

    started = time.monotonic()
    huge = "9" * 1_000_000
    wrong = near_number(huge, 0.3)
    assert len(wrong) == len(huge) and wrong != huge
    assert near_number("-" + "12345" * 10, 0.2).startswith("-")
    assert near_number("1." + "0" * 100_000 + "1", 0.7).endswith("1")
    context = [["\ud800 Studios", ["x"]], ["A" * 100_000 + " Studios", ["y"]]]
    task = _task("Lumax Studios", context=context)
    assert wrong_answer(task, "Lumax Studios", "question").endswith("Studios")
    assert wrong_answer(_task("1" * 20_000), "1" * 20_000, "hop0") != "1" * 20_000
    assert time.monotonic() - started < 5.0
