"""Issue 31: the verify prompt's two example replies vary in order and wording, and that
variation carries no information about whether the draft under review is right (a small
model copied the first example, which was always the rejection)."""

from __future__ import annotations

from collections import Counter

import gymnasium as gym

import orchenv  # noqa: F401  (registers the orch/ ids)
from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.envs.mathroute.protocol import (
    N_EXAMPLE_VARIANTS,
    example_reply,
    example_variant,
    route_text,
    verify_examples,
)

TASKS = 60


def _first_example(system: str) -> str:
    """ "rejecting" or "accepting": which example the verify prompt lists first."""
    reject, accept = system.find("Example reply rejecting"), system.find("Example reply accepting")
    assert reject >= 0 and accept >= 0, system
    return "rejecting" if reject < accept else "accepting"


def test_order_is_fixed_before_the_draft_and_independent_of_its_truth() -> None:
    """From one state, every first route (right and wrong drafts alike) sees the same
    examples; over tasks, both orders meet both right and wrong drafts, in shares that do
    not depend on the truth beyond sampling noise."""
    env = gym.make("orch/MathRoute-v0", split="test").unwrapped
    assert isinstance(env, MathRouteEnv)
    seen: Counter[tuple[str, int]] = Counter()
    variants = set()
    for k in range(TASKS):
        env.reset(seed=0, options={"task_index": k})
        prompts = set()
        for agent in env.pool.names:
            child = env.fork()
            _, _, _, _, info = child.step(route_text(agent))
            system = info["messages"][0]["content"]
            # the strongest's draft has nobody above it: its prompt's rejection is bare
            prompts.add((_first_example(system), system.count("Example reply")))
            seen[(_first_example(system), int(bool(child.draft_correct)))] += 1
            variants.add(example_variant(child.task.id, child.turn))
        assert len({order for order, _ in prompts}) == 1, prompts  # the author does not matter
    assert variants == set(range(N_EXAMPLE_VARIANTS))
    assert all(seen[(order, truth)] > 0 for order in ("rejecting", "accepting") for truth in (0, 1))
    right = seen[("rejecting", 1)] / (seen[("rejecting", 1)] + seen[("accepting", 1)])
    wrong = seen[("rejecting", 0)] / (seen[("rejecting", 0)] + seen[("accepting", 0)])
    assert abs(right - wrong) < 0.25, seen  # 180 verify prompts; both near one half
    assert 0.3 < (seen[("rejecting", 1)] + seen[("rejecting", 0)]) / sum(seen.values()) < 0.7


def test_the_example_after_an_unusable_reply_is_the_prompts_first() -> None:
    env = gym.make("orch/MathRoute-v0", split="test").unwrapped
    assert isinstance(env, MathRouteEnv)
    firsts = set()
    for k in range(12):
        env.reset(seed=0, options={"task_index": k})
        env.step(route_text(env.pool.weakest()))
        child = env.fork()
        _, _, _, _, info = child.step("no tags at all")
        assert info["invalid_action"]
        system, user = info["messages"][0]["content"], info["messages"][-1]["content"]
        variant = example_variant(child.task.id, child.turn)
        example = example_reply(None, child.valid_agents(), variant)
        assert example in user and system.index(example) < system.rindex("Example reply")
        assert verify_examples(child.valid_agents(), variant) in system
        firsts.add(_first_example(system))
    assert firsts == {"rejecting", "accepting"}


def test_variant_is_a_stable_hash_of_task_and_turn() -> None:
    assert example_variant("t-1", 1) == example_variant("t-1", 1)
    assert {example_variant(f"t-{i}", 1) for i in range(40)} == set(range(N_EXAMPLE_VARIANTS))
    assert example_variant("\ud800" * 10, 2) in range(N_EXAMPLE_VARIANTS)  # a lone surrogate
