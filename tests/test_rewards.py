"""Seed 000's reward functions, including the boundary cases of section 3.2."""

from __future__ import annotations

import pytest

from orchenv.envs.mathroute import rewards as R

LAMBDA = {"strong": 0.25, "mid": 0.125, "weak": 0.0}


def test_verification_reward():
    assert R.verification_reward(True, True) == 1.0
    assert R.verification_reward(False, False) == 1.0
    assert R.verification_reward(True, False) == 0.0
    assert R.verification_reward(False, True) == 0.0
    assert R.verification_reward(None, True) == 0.0, "turn 1: nothing to verify"
    assert R.verification_reward(True, None) == 0.0


def test_routing_reward_and_penalty():
    assert R.routing_reward(True) == 1.0 and R.routing_reward(False) == 0.0
    assert R.routing_reward(None) == 0.0, "no routing when the controller stops"
    assert R.modified_routing_reward(1.0, "strong", LAMBDA) == 0.75
    assert R.modified_routing_reward(0.0, "mid", LAMBDA) == -0.125
    assert R.modified_routing_reward(1.0, None, LAMBDA) == 1.0


def test_composite_rewards():
    assert R.composite_reward(1.0, 1.0) == 1.0
    assert R.composite_reward(1.0, 0.0, alpha=0.25) == 0.25
    assert R.modified_composite_reward(1.0, 1.0, "strong", LAMBDA) == pytest.approx(0.875)
    assert R.modified_composite_reward(0.0, 1.0, "weak", LAMBDA) == pytest.approx(0.5)


def test_outcome_reward():
    assert R.REWARDS == ("paper", "outcome")
    assert R.outcome_reward(None, "strong", LAMBDA) == -0.25, "a call mid-episode only costs"
    assert R.outcome_reward(True, "mid", LAMBDA) == pytest.approx(0.875), "last call, right"
    assert R.outcome_reward(False, "weak", LAMBDA) == 0.0
    assert R.outcome_reward(True, None, LAMBDA, value=2.0) == 2.0, "accepting ends it"
