"""The discrete views of OrchMAS, Puppeteer, WebShop, ALFWorld and ALFWorldRoles
(``action_choices`` / ``audit_strategies``): the choice list has one length in every state,
every available choice is an action the env accepts, ``ChoiceActions``' masks follow the
``None`` entries, the choices do not move when only the gold answer (or alfworld's expert
plan) changes, and every named strategy plays an episode to its end without an invalid
action. ALFWorld's engine is slow, so its episodes are short (``max_turns`` 6-8)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from orchenv.audit import play
from orchenv.core import OrchestrationEnv
from orchenv.discrete import ChoiceActions, available
from orchenv.envs.alfworld.choices import DEFAULT_SLOTS, ordered_commands
from orchenv.envs.orchmas.choices import CHOICE_ROLES, NO_ANSWER
from orchenv.envs.puppeteer.agents import PATTERNS, TOOLS
from orchenv.envs.webshop.choices import OPTION_SLOTS
from orchenv.envs.webshop.site import ITEM, PRODUCT_WINDOW, RESULTS
from orchenv.tasks import Task

#: the envs with their short test settings, and how long their choice list is
CASES = {
    "orch/OrchMAS-v0": ({}, 1 + 3 * len(CHOICE_ROLES)),
    "orch/Puppeteer-v0": ({}, 6 * (len(PATTERNS) + len(TOOLS)) + 1),
    "orch/WebShop-v0": ({"max_turns": 8}, 1 + 3 + PRODUCT_WINDOW + OPTION_SLOTS + 3 + 1),
    "orch/ALFWorld-v0": ({"max_turns": 6}, DEFAULT_SLOTS),
    "orch/ALFWorldRoles-v0": ({"max_turns": 6}, 4),
}
#: envs whose every available choice is stepped on a fork in every state (ALFWorld's forks
#: replay the game: its commands are checked against the admissible ones instead, and the
#: role view's four fixed choices are stepped in the first state only)
CHEAP = ("orch/OrchMAS-v0", "orch/Puppeteer-v0", "orch/WebShop-v0")


@pytest.fixture(scope="module")
def envs():
    made = {env_id: gym.make(env_id, **kwargs) for env_id, (kwargs, _) in CASES.items()}
    yield made
    for env in made.values():
        env.close()


def base_of(env: gym.Env) -> OrchestrationEnv:
    base = env.unwrapped
    assert isinstance(base, OrchestrationEnv)
    return base


def assert_choices_valid(env_id: str, base: OrchestrationEnv) -> None:
    choices = base.action_choices()
    assert len(choices) == CASES[env_id][1]
    assert available(choices), "no available choice"
    if env_id == "orch/ALFWorld-v0":
        admissible = base.state.admissible_commands  # type: ignore[attr-defined]
        assert all(c in admissible for c in choices if c is not None)
        return
    if env_id not in CHEAP and base.turn > 0:
        return
    for text in choices:
        if text is not None:
            *_, info = base.fork().step(text)
            assert not info["invalid_action"], (text, info.get("parse_error"))


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_length_is_constant_and_every_available_choice_is_accepted(env_id, envs):
    """Two episodes of random available choices: at every state the list has the env's
    length and each available entry is accepted; the wrapper's mask is ``not None``."""
    wrapped = ChoiceActions(envs[env_id])
    base = base_of(wrapped)
    rng = np.random.default_rng(0)
    for seed in range(2):
        _, info = wrapped.reset(seed=seed)
        done = False
        while not done:
            assert_choices_valid(env_id, base)
            expected = [c is not None for c in base.action_choices()]
            assert info["action_mask"].tolist() == expected
            assert wrapped.action_masks().tolist() == expected
            index = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, terminated, truncated, info = wrapped.step(index)
            assert not info["invalid_action"]
            done = terminated or truncated


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_named_strategies_play_to_the_end_without_invalid_actions(env_id, envs):
    base = base_of(envs[env_id])
    base.reset(seed=1)
    strategies = base.audit_strategies()
    assert len(strategies) >= 3
    for name, policy in strategies.items():
        episode = play(base, policy)
        # play() allows one step past the horizon: an env must end its episode by then
        assert len(episode.actions) <= base.max_turns, (name, episode.actions)
        assert episode.invalid == 0, (name, episode.actions)
        assert policy.__doc__, f"{name} has no description"


# -- the choices never read the gold answer ----------------------------------------------------
def test_orchmas_choices_ignore_the_reference_answer():
    env = gym.make("orch/OrchMAS-v0").unwrapped
    question = "What is 12 * 12?"
    seen = []
    for answer in ("144", "7"):
        task = Task(id="q", prompt=question, answers=(answer,), meta={"type": "Prealgebra"})
        env.reset(seed=0, options={"task": task})
        seen.append(env.action_choices())
    assert seen[0] == seen[1]
    first = seen[0]
    assert first[0] is not None and f"<answer>{NO_ANSWER}</answer>" in first[0]
    assert all(c is not None and question in c for c in first[1 : 1 + len(CHOICE_ROLES)])
    assert all(c is None for c in first[1 + len(CHOICE_ROLES) :])  # nothing to verify yet


def test_orchmas_masks_verification_before_a_reply_and_calls_on_the_last_turn():
    env = gym.make("orch/OrchMAS-v0", max_turns=3, task_source="procedural-math").unwrapped
    env.reset(seed=0)
    n = len(CHOICE_ROLES)
    env.step(env.action_choices()[2])  # solve as math solver
    after = env.action_choices()
    assert all(c is not None for c in after[: 1 + 2 * n])
    assert all(c is None for c in after[1 + 2 * n :])  # no hop chain: no sub-question calls
    last = env.last_executor_answer()
    assert last and f"<answer>{last}</answer>" in after[0]
    env.step(after[1 + n + 1])  # verify as math solver
    final = env.action_choices()
    assert final[0] is not None and all(c is None for c in final[1:])


def test_puppeteer_choices_ignore_the_reference_answer_and_name_agents_only():
    env = gym.make("orch/Puppeteer-v0").unwrapped
    prompt = "A shop sells 123456 pens at 789 dollars each. How many dollars does it take in?"
    seen = []
    for answer in ("97406784", "1"):
        env.reset(seed=0, options={"task": Task(id="p", prompt=prompt, answers=(answer,))})
        seen.append(env.action_choices())
    assert seen[0] == seen[1]
    assert not any(tag in c for c in seen[0] if c for tag in ("<code>", "<query>", "<path>"))
    assert sum(c.endswith(":run_python</agent>") for c in seen[0] if c) == 6
    assert seen[0][-1] == "<agent>terminate</agent>"
    assert all(c is not None for c in seen[0])


def test_webshop_slots_follow_the_page_and_ignore_the_goal_product(envs):
    base = base_of(envs["orch/WebShop-v0"])
    base.reset(seed=0, options={"task_index": 0})
    goal = base.goal
    other = next(a for a in base.catalog.asins if a != goal.asin)
    traces = []
    for g in (goal, dataclasses.replace(goal, asin=other)):
        base.reset(seed=0, options={"goal": g})
        trace = [base.action_choices()]
        assert trace[0][0] is not None and all(c is None for c in trace[0][1:])  # search only
        base.step(trace[0][0])
        trace.append(base.action_choices())
        traces.append(trace)
    assert traces[0] == traces[1]
    results = traces[0][1]
    assert base.state.page == RESULTS
    asins = [base.catalog.asins[i].lower() for i in base.site.page_hits(base.state)]
    assert results[4 : 4 + len(asins)] == [f"click[{a}]" for a in asins]
    assert results[-1] is None  # no buy now on a results page
    base.step(results[4])
    item = base.action_choices()
    assert base.state.page == ITEM and item[-1] == "click[buy now]"
    values = [c for c in item[4 + PRODUCT_WINDOW : 4 + PRODUCT_WINDOW + OPTION_SLOTS] if c]
    product = base.catalog.product(base.state.item)
    assert len(values) == min(OPTION_SLOTS, len({v for _, vs in product.options for v in vs}))


def test_alfworld_choices_are_the_admissible_commands_grouped_by_verb():
    commands = [
        "close fridge 1",
        "examine apple 1",
        "go to cabinet 1",
        "help",
        "inventory",
        "look",
        "move apple 1 to fridge 1",
        "take egg 1 from fridge 1",
    ]
    assert ordered_commands(commands) == [
        "take egg 1 from fridge 1",
        "move apple 1 to fridge 1",
        "close fridge 1",
        "go to cabinet 1",
        "examine apple 1",
        "look",
        "inventory",
    ]


def test_alfworld_choices_ignore_the_expert_plan(envs):
    """With and without alfworld's expert (privileged), the same game gives the same slots."""
    plain = base_of(envs["orch/ALFWorld-v0"])
    expert = gym.make("orch/ALFWorld-v0", max_turns=6, expert="planner").unwrapped
    try:
        for env in (plain, expert):
            env.reset(seed=0, options={"task_index": 0})
        assert plain.action_choices() == expert.action_choices()
        command = next(c for c in plain.action_choices() if c and c.startswith("go to"))
        for env in (plain, expert):
            env.step(command)
        assert plain.action_choices() == expert.action_choices()
    finally:
        expert.close()


def test_alfworld_roles_has_a_task_source_for_distinct_games(envs):
    base = base_of(envs["orch/ALFWorldRoles-v0"])
    size = base.task_source.size(base.split)
    ids = set()
    for index in range(min(size, 3)):
        base.reset(seed=0, options={"task_index": index})
        ids.add(base.task.id)
        assert base.action_choices() == [
            f"<role>{r}</role>" for r in ("planner", "navigator", "interactor", "evaluator")
        ]
    assert len(ids) == min(size, 3)
