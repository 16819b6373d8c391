"""The shared suite every registered orchenv id must pass: the public checks of
``orchenv.testing.checks`` (the same ones users run on their own envs), one test per
check and id."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from scenario import NEAR_MISS_FRAGMENTS

import orchenv  # noqa: F401  (registers the ids)
from orchenv.testing import checks

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))


def test_ids_are_registered():
    assert "orch/MathRoute-v0" in ENV_IDS and "orch/MathRouteSystem2-v0" in ENV_IDS


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    checks.check_api(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_determinism(env_id):
    checks.check_determinism(env_id, seeds=range(5))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_schema(env_id):
    checks.check_info_schema(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_fork_identical_and_independent(env_id):
    checks.check_fork(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_determinism_across_processes(env_id):
    """Outcomes must not depend on Python's per-process string hash seed."""
    checks.check_hash_seed_independence(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_ansi_transcript(env_id):
    checks.check_render(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_order_errors(env_id):
    checks.check_step_order(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_actions_never_raise(env_id):
    """Huge, nested, surrogate-laden, near-miss and non-str actions: a valid step, never an
    exception; non-str actions are unusable and never rewarded."""
    checks.check_hostile_actions(env_id, episodes=60, fragments=NEAR_MISS_FRAGMENTS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_max_turns_and_the_horizon_rule(env_id):
    """Every id takes ``max_turns``; with ``max_turns=k`` an episode ends within k steps,
    ``truncated`` when step k passed without a terminal decision, ``terminated`` when the
    action was terminal, never both."""
    checks.check_horizon(env_id, max_turns=(1, 2, 3), seeds=range(3))


GYMNASIUM_SECTIONS = (
    "## Description",
    "## Action format",
    "## Observation",
    "## Rewards",
    "## Episode end",
    "## Arguments",
    "## Version history",
)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_docstring_documents_every_argument(env_id):
    """Gymnasium-style docstrings: the fixed sections, and every ``__init__`` argument named
    in ``## Arguments`` (no "see __init__")."""
    cls = gym.make(env_id).unwrapped.__class__
    doc = inspect.getdoc(cls) or ""
    missing_sections = [s for s in GYMNASIUM_SECTIONS if s not in doc]
    assert not missing_sections, f"{cls.__name__} lacks {missing_sections}"
    arguments = doc.split("## Arguments", 1)[1].split("## Version history", 1)[0]
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    undocumented = [p for p in params if f"``{p}``" not in arguments]
    assert not undocumented, f"{cls.__name__}'s ## Arguments does not name {undocumented}"
