"""Coordinators of ``orch/ALFWorldRoles-v0`` and the measurement of how much the role choice
matters (issue 25).

* ``schedule_policy(cycle, prefix)``: a fixed schedule, blind to everything but the turn
  (``prefix`` once, then ``cycle`` over and over), e.g. plan once, then alternate the
  navigator and the interactor.
* ``adaptive_coordinator``: reads only what the coordinator's observation shows (the shared
  memory: the plan, the evaluator's feedback, the commands sent and the engine's answers)
  and calls the role the next sub-goal needs: the planner when there is no usable plan (none
  yet, a vague one, one used up, or one a command strayed from), when the last command
  failed or when the actor called passed; otherwise the navigator for a ``GoTo`` /
  ``Examine`` sub-goal and the interactor for the rest. It never reads ``info["privileged"]`` or the engine's state.
* ``search_schedules``: every cyclic schedule of length 1 to ``max_len`` (each with and
  without a planner call first) that contains both actors, scored on the same episodes.

``python -m orchenv.envs.alfworld.coordination`` prints the comparison (see
``docs/alfworld.md``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchenv.envs.alfworld.agents import ROLES, subgoal
from orchenv.envs.alfworld.env import NOTHING_HAPPENS

Policy = Callable[[Any, np.random.Generator], str]

_STEP = re.compile(r"\d+\.\s*([A-Za-z]+\([^)]*\))")
_NEXT = re.compile(r"next:\s*([A-Za-z]+\([^)]*\))")
#: sub-goal names the navigator carries out (the rest are the interactor's)
NAVIGATION_GOALS = frozenset({"GoTo", "Examine", "Look", "Inventory", "Help"})


def role_text(role: str) -> str:
    return f"<role>{role}</role>"


def goal_role(goal: str) -> str:
    """Which actor carries out a sub-goal such as ``GoTo(fridge 1)``."""
    return "navigator" if goal.split("(", 1)[0] in NAVIGATION_GOALS else "interactor"


def schedule_policy(cycle: Sequence[str], prefix: Sequence[str] = ()) -> Policy:
    """``prefix`` once, then ``cycle`` repeated; reads nothing but the turn."""
    cycle, prefix = tuple(cycle), tuple(prefix)

    def policy(env: Any, rng: np.random.Generator | None = None) -> str:
        t = env.turn
        role = prefix[t] if t < len(prefix) else cycle[(t - len(prefix)) % len(cycle)]
        return role_text(role)

    policy.__name__ = schedule_name(cycle, prefix)
    return policy


def schedule_name(cycle: Sequence[str], prefix: Sequence[str] = ()) -> str:
    short = {"planner": "P", "navigator": "N", "interactor": "I", "evaluator": "E"}
    head = "".join(short[r] for r in prefix)
    return (head + "+" if head else "") + "(" + "".join(short[r] for r in cycle) + ")*"


def random_roles(env: Any, rng: np.random.Generator) -> str:
    return role_text(ROLES[int(rng.integers(len(ROLES)))])


def guidance(items: Sequence[Any]) -> tuple[str | None, list[str] | None, int]:
    """What the memory (as the coordinator sees it) says comes next: ``(kind, sub-goals,
    round)`` of the newest plan or evaluator feedback that names sub-goals, where the
    sub-goals are those still ahead of the commands sent since it was written; ``(None,
    None, -1)`` when there is none."""
    best: tuple[str | None, list[str] | None, int] = (None, None, -1)
    for item in items:
        if item.type == "plan":
            steps = _STEP.findall(item.text)
            kind = "plan"
        elif item.type == "feedback":
            steps = _NEXT.findall(item.text)
            kind = "feedback"
        else:
            continue
        if steps and item.round >= best[2]:
            best = (kind, steps, item.round)
    kind_found, steps_found, written = best
    if steps_found is None:
        return best
    ahead = list(steps_found)
    for item in items:
        if item.type != "observation" or item.round <= written or not item.text.startswith("> "):
            continue
        command, _, feedback = item.text[2:].partition("\n")
        if feedback.strip() == NOTHING_HAPPENS:
            continue
        if ahead and subgoal(command) == ahead[0]:
            ahead.pop(0)
        else:
            return kind_found, None, written  # strayed from the guidance: it is stale
    return kind_found, ahead, written


def adaptive_coordinator(env: Any, rng: np.random.Generator | None = None) -> str:
    """Call the role the next sub-goal needs, from the shared memory alone (see module)."""
    items = list(env.game.memory.items)
    last = getattr(env, "_last", {}) or {}
    _, ahead, _ = guidance(items)
    failed = last.get("feedback") is not None and last["feedback"].strip() == NOTHING_HAPPENS
    passed = last.get("role") in ("navigator", "interactor") and last.get("command") is None
    if not ahead or failed or passed:
        # no plan that names sub-goals, a stale or used-up one, a failed command, or an actor
        # that saw no step of its kind: the actors need new guidance
        return role_text("planner")
    return role_text(goal_role(ahead[0]))


# -- the adaptive coordinator as a controller (reads the observation text and info only) ------
_BLOCK = re.compile(
    r"^- id: (?P<id>\S+)\n  round: (?P<round>\d+)\n  role: .*\n  type: (?P<type>[\w-]+)\n"
    r"(?:  key: .*\n)?(?:  tags: .*\n)?  text: \|\n(?P<text>(?:    .*(?:\n|$))*)",
    re.M,
)
#: the most memory blocks read from one observation (hostile input: a huge observation)
MAX_BLOCKS = 10_000


class MemoryView:
    """One shared-memory item as the coordinator's observation renders it."""

    __slots__ = ("round", "text", "type")

    def __init__(self, type_: str, text: str, round_: int) -> None:
        self.type, self.text, self.round = type_, text, round_


def memory_from_observation(obs: str) -> list[MemoryView]:
    """The shared memory's items (type, text, round) from the coordinator's observation (the
    YAML-like blocks after "Shared memory:"; ``orchenv.memory.MemoryItem.render``)."""
    text = str(obs)
    at = text.rfind("Shared memory:\n")
    if at < 0:
        return []
    items = []
    for match in _BLOCK.finditer(text, at):
        body = "\n".join(line[4:] for line in match["text"].rstrip("\n").split("\n"))
        items.append(MemoryView(match["type"], body, int(match["round"][:9])))
        if len(items) >= MAX_BLOCKS:
            break
    return items


class AdaptiveRoleCoordinator:
    """``adaptive_coordinator`` as a controller of ``orch/ALFWorldRoles-v0`` that reads only
    what reaches a controller over the wire: the observation's shared memory (parsed back
    from its rendered blocks) and ``info``'s ``role`` / ``command`` / ``feedback`` of the last
    turn. Never ``info["privileged"]`` or the env: it plays the same over ``orchenv serve``
    as in process (a board's re-executable baseline)."""

    privileged = False
    #: the ids it plays (``orchenv list``; the controller-coverage tests)
    applies_to = ("orch/ALFWorldRoles-v0",)

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: every decision reads the current observation."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        items = memory_from_observation(obs)
        _, ahead, _ = guidance(items)
        feedback = info.get("feedback")
        failed = isinstance(feedback, str) and feedback.strip() == NOTHING_HAPPENS
        passed = info.get("role") in ("navigator", "interactor") and info.get("command") is None
        if not ahead or failed or passed:
            return role_text("planner")
        return role_text(goal_role(ahead[0]))


# -- measurement ----------------------------------------------------------------------------
def play(env: Any, policy: Policy, seed: int) -> dict[str, float]:
    """One episode of ``policy`` on ``env`` (``reset(seed=seed)``): won, return, turns."""
    rng = np.random.default_rng(10_000 + seed)
    env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        _, reward, term, trunc, info = env.step(policy(env, rng))
        total += float(reward)
        done = term or trunc
    return {"won": float(info.get("correct", False)), "return": total, "turns": float(env.turn)}


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (normal approximation; Wilson-like floor
    for 0/1 outcomes at the ends is not applied, so an all-wins row reads +- 0)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()) if len(x) else math.nan, math.nan
    return float(x.mean()), float(1.96 * x.std(ddof=1) / math.sqrt(len(x)))


def evaluate(env: Any, policy: Policy, seeds: Sequence[int]) -> dict[str, Any]:
    rows = [play(env, policy, s) for s in seeds]
    out: dict[str, Any] = {"episodes": len(rows)}
    for key in ("won", "return", "turns"):
        out[key] = mean_ci([r[key] for r in rows])
    out["per_episode"] = [r["return"] for r in rows]
    return out


def cyclic_schedules(max_len: int = 4) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every (prefix, cycle): cycles of length 1..``max_len`` over the four roles that hold
    both actors and are not a repetition of a shorter cycle, one phase each (a fixed
    schedule of ``max_turns`` turns hardly depends on it), each alone and after one
    planner call."""
    out: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for n in range(1, max_len + 1):
        for cycle in itertools.product(ROLES, repeat=n):
            if "navigator" not in cycle or "interactor" not in cycle:
                continue
            if any(n % k == 0 and cycle == cycle[:k] * (n // k) for k in range(1, n)):
                continue
            # one phase per cycle: the rotation that comes first in ROLES order (it starts
            # with the planner when the cycle has one); the prefix variant shifts the phase
            rank = tuple(ROLES.index(r) for r in cycle)
            if any(rank[k:] + rank[:k] < rank for k in range(1, n)):
                continue
            out.append(((), cycle))
            if cycle[0] != "planner":
                out.append((("planner",), cycle))
    return out


def search_schedules(
    env: Any, seeds: Sequence[int], max_len: int = 4
) -> list[tuple[str, float, tuple[tuple[str, ...], tuple[str, ...]]]]:
    """Mean return of every ``cyclic_schedules(max_len)`` schedule on ``seeds``, best first."""
    scored = []
    for prefix, cycle in cyclic_schedules(max_len):
        policy = schedule_policy(cycle, prefix)
        mean = float(np.mean([play(env, policy, s)["return"] for s in seeds]))
        scored.append((schedule_name(cycle, prefix), mean, (prefix, cycle)))
    scored.sort(key=lambda row: -row[1])
    return scored


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - a measurement script
    import argparse

    from orchenv.envs.alfworld.roles import ALFWorldControllerEnv

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--search-episodes", type=int, default=24)
    parser.add_argument("--max-len", type=int, default=4)
    parser.add_argument("--top", type=int, default=5, help="schedules re-measured in full")
    parser.add_argument("--split", default="train")
    args = parser.parse_args(argv)
    env = ALFWorldControllerEnv(split=args.split)
    seeds = range(args.episodes)
    search_seeds = range(100_000, 100_000 + args.search_episodes)  # disjoint from the test

    def show(name: str, result: dict[str, Any]) -> None:
        (w, wh), (r, rh), (t, th) = result["won"], result["return"], result["turns"]
        print(f"{name:32s} won {w:.3f}±{wh:.3f}  return {r:.3f}±{rh:.3f}  turns {t:.1f}±{th:.1f}")

    results = {}
    for name, policy in (
        ("adaptive (observation only)", adaptive_coordinator),
        ("plan-once-then-alternate", schedule_policy(("navigator", "interactor"), ("planner",))),
        ("random roles", random_roles),
    ):
        results[name] = evaluate(env, policy, seeds)
        show(name, results[name])
    ranked = search_schedules(env, search_seeds, args.max_len)
    print(f"schedule search: {len(ranked)} schedules on {args.search_episodes} episodes; top:")
    for name, mean, _ in ranked[: args.top]:
        print(f"  {name:20s} {mean:.3f}")
    adaptive = np.asarray(results["adaptive (observation only)"]["per_episode"])
    for name, _, (prefix, cycle) in ranked[: args.top]:
        result = evaluate(env, schedule_policy(cycle, prefix), seeds)
        show(name, result)
        diff = mean_ci(list(adaptive - np.asarray(result["per_episode"])))
        print(f"  adaptive - {name}: {diff[0]:+.3f}±{diff[1]:.3f} (paired)")
    env.close()


if __name__ == "__main__":  # pragma: no cover
    main()
