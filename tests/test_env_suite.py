"""The shared suite every registered orchenv id must pass: the public checks of
``orchenv.testing.checks`` (the same ones users run on their own envs), one test per
check and id."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import gymnasium as gym
import pytest
from scenario import NEAR_MISS_FRAGMENTS

import orchenv  # noqa: F401  (registers the ids)
from orchenv.testing import checks

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))


def test_ids_are_registered():
    assert "orch/MathRoute-v0" in ENV_IDS and "orch/MathRouteSystem2-v0" in ENV_IDS


#: check name -> how this suite runs that public check on one id
SHARED_CHECKS: dict[str, Callable[[str], object]] = {
    "gymnasium-check-env": checks.check_api,
    "seeded-determinism": lambda env_id: checks.check_determinism(env_id, seeds=range(5)),
    "info-schema": checks.check_info_schema,
    # a fork is identical to its source and independent of it afterwards
    "fork": checks.check_fork,
    # outcomes must not depend on Python's per-process string hash seed
    "determinism-across-processes": checks.check_hash_seed_independence,
    "render-ansi-transcript": checks.check_render,
    "step-order-errors": checks.check_step_order,
    # huge, nested, surrogate-laden, near-miss and non-str actions: a valid step, never an
    # exception; non-str actions are unusable and never rewarded
    "hostile-actions": lambda env_id: checks.check_hostile_actions(
        env_id, episodes=60, fragments=NEAR_MISS_FRAGMENTS
    ),
    # every id takes ``max_turns``; with ``max_turns=k`` an episode ends within k steps,
    # ``truncated`` when step k passed without a terminal decision, ``terminated`` when the
    # action was terminal, never both
    "horizon": lambda env_id: checks.check_horizon(env_id, max_turns=(1, 2, 3), seeds=range(3)),
}


@pytest.mark.parametrize("check", sorted(SHARED_CHECKS))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_shared_check(env_id, check):
    SHARED_CHECKS[check](env_id)


GYMNASIUM_SECTIONS = (
    "## Description",
    "## Action format",
    "## Observation",
    "## Rewards",
    "## Episode end",
    "## Arguments",
    "## Version history",
)


def _section(doc: str, heading: str) -> str:
    """The text of ``heading``'s section of a Gymnasium-style docstring (to the next one)."""
    if heading not in doc:
        return ""
    body = doc.split(heading, 1)[1]
    return body.split("\n## ", 1)[0]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_docstring_names_its_own_arguments_and_no_shared_one(env_id):
    """Gymnasium-style docstrings: the fixed sections; ``## Arguments`` names every argument
    of the env's own ``__init__`` (no "see __init__") and none of the shared ones, which
    ``OrchestrationEnv`` documents once (issue 27); the env passes those on (``**shared``),
    declares none of them itself, and its docstring ends with its defaults for them."""
    from gymnasium.envs.registration import load_env_creator

    from orchenv.core import SHARED_DEFAULTS, SHARED_DEFAULTS_HEADING, SharedArguments

    cls = load_env_creator(gym.spec(env_id).entry_point)  # the class, without building an env
    doc = inspect.getdoc(cls) or ""
    missing_sections = [s for s in GYMNASIUM_SECTIONS if s not in doc]
    assert not missing_sections, f"{cls.__name__} lacks {missing_sections}"
    arguments = _section(doc, "## Arguments")
    params = inspect.signature(cls.__init__).parameters.values()
    own = [p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    undocumented = [p for p in own if f"``{p}``" not in arguments]
    assert not undocumented, f"{cls.__name__}'s ## Arguments does not name {undocumented}"
    shared = set(SharedArguments.__annotations__)
    assert shared == set(SHARED_DEFAULTS)
    redeclared = sorted(shared & set(own))
    assert not redeclared, f"{cls.__name__}.__init__ re-declares shared arguments {redeclared}"
    assert any(p.kind is p.VAR_KEYWORD for p in params), f"{cls.__name__} drops **shared"
    named = sorted(a for a in shared if f"``{a}``" in arguments)
    assert not named, f"{cls.__name__}'s ## Arguments documents shared arguments {named}"
    notes = _section(doc, "## Shared arguments")
    strays = sorted(p for p in own if f"``{p}``" in notes.split(":", 1)[0])
    assert not strays, f"{cls.__name__}'s ## Shared arguments is about {strays}, its own"
    defaults = _section(doc, SHARED_DEFAULTS_HEADING)
    taken = [a for a in SHARED_DEFAULTS if a not in cls.unused_shared_arguments]
    assert all(f"- {a} = " in defaults for a in taken), f"{cls.__name__}: {defaults!r}"


def test_the_base_documents_each_shared_argument_once():
    """``OrchestrationEnv``'s docstring names every shared argument in its Args, once."""
    from orchenv.core import SHARED_DEFAULTS, OrchestrationEnv

    args = (inspect.getdoc(OrchestrationEnv) or "").split("Args:", 1)[1]
    counts = {a: args.count(f"{a}:") + args.count(f"{a},") for a in SHARED_DEFAULTS}
    assert counts == dict.fromkeys(SHARED_DEFAULTS, 1), counts


def test_shared_arguments_reach_the_base_and_typos_fail():
    """An env's defaults for the shared arguments apply, a caller's value wins, a misspelt
    argument is a TypeError and an unused one a ConfigError (never silently dropped)."""
    from orchenv.error import ConfigError

    env = gym.make("orch/MathRoute-v0").unwrapped
    assert (env.max_turns, env.format_penalty, env.split) == (3, -1.0, "train")
    env = gym.make("orch/MathRoute-v0", max_turns=2, split="test", format_penalty=-0.5).unwrapped
    assert (env.max_turns, env.format_penalty, env.split) == (2, -0.5, "test")
    with pytest.raises(TypeError, match="max_turn"):
        gym.make("orch/MathRoute-v0", max_turn=2)
    with pytest.raises(ConfigError, match="does not use pool"):
        gym.make("orch/WebShop-v0", pool="system1")
    assert gym.make("orch/OrchMAS-v0", max_calls=2).unwrapped.max_turns == 3
    assert gym.make("orch/OrchMAS-v0", max_calls=2, max_turns=5).unwrapped.max_turns == 5
