"""The shared suite every registered orchenv id must pass.

Gymnasium's ``check_env``, seeded determinism, the info schema, ``fork()``
semantics, and fuzzed actions (arbitrary unicode, empty, 1 MB, near-miss tags)
that must never raise and always yield a valid observation.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario import NEAR_MISS_FRAGMENTS

import orchenv  # noqa: F401  (registers the ids)

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))
STEP_KEYS = {
    "messages",
    "calls",
    "cost_usd",
    "tokens",
    "episode_cost_usd",
    "agent_calls",
    "constraint_costs",
    "valid_agents",
    "invalid_action",
    "parse_error",
    "turn",
}
END_KEYS = {"task_id", "final_answer", "turns"}


def test_ids_are_registered():
    assert "orch/MathRoute-v0" in ENV_IDS and "orch/MathRouteSystem2-v0" in ENV_IDS


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def rollout(env: gym.Env, seed: int, controller_seed: int) -> list:
    """An episode of the env's own random well-formed actions (``demo_action``)."""
    rng = np.random.default_rng(controller_seed)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info)]
    done = False
    while not done:
        obs, reward, term, trunc, info = env.step(env.unwrapped.demo_action(rng))
        trace.append((obs, reward, term, trunc, info))
        done = term or trunc
    return trace


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_determinism(env_id):
    a, b = gym.make(env_id), gym.make(env_id)
    for seed in range(5):
        assert data_equivalence(rollout(a, seed, seed), rollout(b, seed, seed))
    first = [rollout(a, s, 0)[0][0] for s in range(10)]
    assert len(set(first)) > 1, "different seeds should pick different tasks"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_schema(env_id):
    env = gym.make(env_id)
    trace = rollout(env, seed=3, controller_seed=1)
    _, info = trace[0]
    assert set(info) >= STEP_KEYS
    for _obs, reward, _term, _trunc, info in trace[1:]:
        assert set(info) >= STEP_KEYS
        assert isinstance(reward, float) and math.isfinite(reward)
        assert info["constraint_costs"].shape == (len(env.unwrapped.pool.names),)
        # one indicator per agent call made this step; the step's tokens are its calls' tokens
        assert len(info["calls"]) == int(info["constraint_costs"].sum())
        for call in info["calls"]:
            assert call["token_source"] in {"server", "tokenizer", "estimate", "record"}
        step_tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in info["calls"])
        assert step_tokens == sum(info["tokens"].values())
        assert all(m["role"] in {"system", "user", "assistant"} for m in info["messages"])
    end = trace[-1][-1]
    assert set(end) >= END_KEYS
    assert isinstance(end.get("correct"), bool) or isinstance(end.get("score"), float)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_fork_identical_and_independent(env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    before = (env.turn, env.meter.total_calls, len(env.transcript))
    a, b = env.fork(), env.fork()
    assert a.pool is env.pool, "forks share the pool's backends"
    action = env.demo_action(rng)
    ra, rb = a.step(action), b.step(action)
    assert data_equivalence(ra, rb), "identical actions from identical states: identical futures"
    others = [env.fork().step(env.demo_action(rng)) for _ in range(8)]
    assert any(not data_equivalence(ra, rc) for rc in others), "other actions lead elsewhere"
    assert (env.turn, env.meter.total_calls, len(env.transcript)) == before, "original untouched"


DIGEST_SCRIPT = """
import hashlib, gymnasium as gym, numpy as np, orchenv
env = gym.make({env_id!r})
h = hashlib.sha256()
for seed in range(3):
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(env.unwrapped.demo_action(rng))
        h.update(f"{{obs}}|{{r}}|{{info['episode_cost_usd']}}|{{info['tokens']}}".encode())
        done = term or trunc
print(h.hexdigest())
"""


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_determinism_across_processes(env_id):
    """Outcomes must not depend on Python's per-process string hash seed."""
    import os
    import subprocess
    import sys

    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT.format(env_id=env_id)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_ansi_transcript(env_id):
    env = gym.make(env_id, render_mode="ansi")
    env.reset(seed=0)
    action = env.unwrapped.demo_action(np.random.default_rng(0))
    env.step(action)
    assert action[:20] in env.render()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_order_errors(env_id):
    from orchenv.error import EnvStateError

    env = gym.make(env_id).unwrapped
    with pytest.raises(EnvStateError, match="reset"):
        env.step("<model>x</model>")
    env.reset(seed=0)
    done = False
    while not done:
        *_, term, trunc, _ = env.step("garbage")
        done = term or trunc
    with pytest.raises(EnvStateError, match="after the episode ended"):
        env.step("garbage")


NEAR_MISS = st.sampled_from(NEAR_MISS_FRAGMENTS)
ACTIONS = st.one_of(
    st.text(max_size=200),
    st.just(""),
    st.just("x" * 1_000_000),
    st.just("<model>" * 50_000),
    st.lists(NEAR_MISS, max_size=30).map("".join),
)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_fuzzed_actions_never_raise(env_id):
    env = gym.make(env_id)
    space = env.observation_space

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**16), actions=st.lists(ACTIONS, min_size=1, max_size=5))
    def run(seed, actions):
        obs, info = env.reset(seed=seed)
        assert space.contains(obs)
        for action in actions:
            obs, reward, term, trunc, info = env.step(action)
            assert space.contains(obs) and isinstance(obs, str)
            assert math.isfinite(reward)
            assert set(info) >= STEP_KEYS
            if info["invalid_action"]:
                assert isinstance(info["parse_error"], str) and info["parse_error"]
            if term or trunc:
                obs, info = env.reset()

    run()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_non_string_actions_are_invalid_not_fatal(env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    for action in (None, 42, b"<model>x</model>"):
        _, reward, term, _, info = env.step(action)  # type: ignore[arg-type]
        assert info["invalid_action"] and reward <= 0, "malformed text is never rewarded"
        if term:
            env.reset()
