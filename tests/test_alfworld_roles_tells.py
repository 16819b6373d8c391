"""Issue 38: ALFWorldRoles' simulated actors slip alike, so the surface of a reply (whether it
is a ``pass``, how many object numbers it names, and with them its length, token count and
latency) does not tell a right reply from a wrong one beyond what the situation does.

The audit's tell meter read right from wrong on ALFWorldRoles at within-author AUC 0.650
[0.598, 0.697], top features ``latency_s`` and ``numbers``: the navigator never missed its
turn when its step was due (it always had another place to go), the interactor whenever it
had no other target, and an interactor called out of turn sent ``close ...`` (a verb the
plans never use, one object number) as often as a planned verb."""

from __future__ import annotations

from orchenv.envs.alfworld.agents import MISS_SHARE, alfworld_role_pool, mistakes
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


def test_both_actors_miss_a_due_turn_equally_often():
    """A slip on a due step is a missed turn (``pass``) with probability ``MISS_SHARE`` for
    both actors, whether or not another target is on offer (the navigator's share was 0)."""
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
    shares = [
        sum(text == "pass" for text in replies) / CALLS for replies in (navigator, interactor)
    ]
    for share in shares:
        assert abs(share - MISS_SHARE) < 0.08, shares
    assert set(navigator) - {"pass"} == {"go to cabinet 1", "go to countertop 1"}
    assert set(interactor) - {"pass"} == {"take mug 1 from countertop 1"}


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
    # no planned verb on offer: a command on some object, as before
    assert mistakes(None, ["close drawer 1", "look"], plan) == ["close drawer 1"]
