"""Issue 38: an ALFWorldRoles actor's slip looks like a step (the verb of a planned step, so as
many object numbers, and with them the same length, token count and latency), so the surface
of a reply does not tell a right reply from a wrong one beyond what the situation does.

The audit's tell meter read right from wrong on ALFWorldRoles at within-author AUC 0.650
[0.598, 0.697], top features ``latency_s`` and ``numbers``: an interactor called out of turn
sent ``close ...`` / ``open ...`` (one object number; ``close`` a verb the plans never use)
as often as a planned verb; it now jumps ahead to a planned verb, and sends ``close`` only
when nothing else is on offer."""

from __future__ import annotations

import pytest

from orchenv.envs.alfworld import agents
from orchenv.envs.alfworld.agents import alfworld_role_pool, mistakes
from orchenv.pool import CallContext
from orchenv.tasks import Task

CALLS = 400


def _wrong_replies(role: str, plan: tuple[str, ...], commands: tuple[str, ...]) -> list[str]:
    pool = alfworld_role_pool(seed=3, accuracy_unguided={role: 0.0})  # every call slips
    task = Task("g", "put an apple in the fridge", (), {
        "expert_plan": plan,
        "admissible_commands": commands,
    })  # fmt: skip
    wrong = []
    for i in range(CALLS):
        completion = pool.call(
            role, [{"role": "user", "content": f"call {i}"}], CallContext(task=task)
        )
        assert completion.meta["right"] is False
        wrong.append(completion.text)
    return wrong


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_a_slip_on_a_due_step_is_a_missed_turn_at_the_miss_share(share, monkeypatch):
    """``MISS_SHARE`` of the slips on a due step are a missed turn, for both actors alike (0 by
    default: issue 38 measured 0.5, which let a fixed schedule tie the skill reference); an
    actor with no other target of the due verb passes whatever the share."""
    monkeypatch.setattr(agents, "MISS_SHARE", share)
    navigator = _wrong_replies(
        "navigator",
        ("go to fridge 1", "open fridge 1"),
        ("go to fridge 1", "go to cabinet 1", "go to countertop 1", "look", "inventory"),
    )
    interactor = _wrong_replies(
        "interactor",
        ("take apple 1 from countertop 1", "go to fridge 1"),
        ("take apple 1 from countertop 1", "take mug 1 from countertop 1", "go to fridge 1"),
    )
    for replies in (navigator, interactor):
        assert abs(sum(text == "pass" for text in replies) / CALLS - share) < 0.08
    assert set(navigator) - {"pass"} == {"go to cabinet 1", "go to countertop 1"}
    assert set(interactor) - {"pass"} == {"take mug 1 from countertop 1"}
    alone = _wrong_replies("interactor", ("take apple 1 from countertop 1",),
                           ("take apple 1 from countertop 1", "go to fridge 1"))  # fmt: skip
    assert set(alone) == {"pass"}


def test_an_actor_out_of_turn_jumps_ahead_to_its_next_planned_verb():
    """Called when its step is not due, the interactor tries the verb of its next step in the
    plan on what is at hand (two object numbers, like the step), not ``close`` / ``open``."""
    plan = ("go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1")
    commands = ("go to countertop 1", "take mug 1 from diningtable 1", "close drawer 1")
    commands += ("open cabinet 2",)
    wrong = _wrong_replies("interactor", plan, commands)
    assert set(wrong) == {"take mug 1 from diningtable 1"}
    others = ["take mug 1 from diningtable 1", "close drawer 1", "open cabinet 2"]
    assert mistakes(None, others, plan) == ["take mug 1 from diningtable 1"]
    # no planned verb on offer: a command on some object, ``close`` (never planned) last
    assert mistakes(None, ["close drawer 1", "open cabinet 2", "look"], plan) == ["open cabinet 2"]
    assert mistakes(None, ["close drawer 1", "look"], plan) == ["close drawer 1"]
