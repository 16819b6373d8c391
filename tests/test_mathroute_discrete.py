"""MathRoute on the core discrete view (issue 27 item 4: ``envs/mathroute/wrappers.py`` is
gone): Gymnasium / SB3 checks, MathRoute's ``observation_features`` block, the action
mapping and masks (the bare rejection when nobody stronger is left), the turn scale of a
policy played at another horizon, and the refusal of a policy trained on another view."""

from __future__ import annotations

import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import orchenv  # noqa: F401  (registers the orch/ ids)
from orchenv.discrete import MaskedPolicyController, ObservationFeatures, make_discrete_env
from orchenv.envs.mathroute import features
from orchenv.envs.mathroute.env import MathRouteEnv
from orchenv.envs.mathroute.protocol import route_text, verdict_text
from orchenv.error import ConfigError

ENV_IDS = ["orch/MathRoute-v0", "orch/MathRouteSystem2-v0"]
_WRAPPED_NOTE = "is different from the unwrapped version"  # gymnasium's note about any wrapper
N_FEATURES = 32


def _check_quietly(check: Any, env: gym.Env) -> None:
    """Run a checker and fail on any warning but gymnasium's generic note about wrappers."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(env)
    other = [str(w.message) for w in caught if _WRAPPED_NOTE not in str(w.message)]
    assert not other, other


def _base(env: gym.Env) -> MathRouteEnv:
    base = env.unwrapped
    assert isinstance(base, MathRouteEnv)
    return base


def _env_block(env: gym.Env, obs: np.ndarray) -> dict[str, np.ndarray]:
    """The MathRoute block of a view's observation, split by ``features.blocks``."""
    block = obs[env.get_wrapper_attr("slices")["env"]]
    out, start = {}, 0
    for name, size in features.blocks(len(_base(env).pool.names)).items():
        out[name] = block[start : start + size]
        start += size
    assert start == block.size
    return out


# -- checkers ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_and_sb3_check_env(env_id: str) -> None:
    _check_quietly(gym_check_env, make_discrete_env(env_id, n_features=N_FEATURES))
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    _check_quietly(sb3_check_env, make_discrete_env(env_id, n_features=N_FEATURES))


# -- features ------------------------------------------------------------------------------
def test_features_are_deterministic_per_seed() -> None:
    actions = [0, 1, 2, 1, 3, 0, 3, 1, 2]  # route, reject..., accept: both phases, several episodes

    def rollout() -> list[np.ndarray]:
        env = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES, raw_numbers=True)
        obs, _ = env.reset(seed=7)
        out = [obs]
        for action in actions:
            obs, _, terminated, truncated, _ = env.step(action)
            out.append(obs)
            if terminated or truncated:
                obs, _ = env.reset()
                out.append(obs)
        return out

    first, second = rollout(), rollout()
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_mathroute_block_reads_problem_draft_author_and_calls() -> None:
    env = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES)
    obs, info = env.reset(seed=3)
    base = _base(env)
    problem = base.task.prompt
    block = _env_block(env, obs)
    np.testing.assert_allclose(block["problem_stats"], features.text_statistics(problem))
    assert not block["draft_stats"].any() and not block["draft_author"].any()
    assert block["verify"].tolist() == [0.0] and not block["episode_calls"].any()
    obs, _, _, _, info = env.step(1)  # the middle agent writes a draft
    block = _env_block(env, obs)
    draft = base.draft
    assert draft and draft in info["messages"][-1]["content"]
    expected = np.concatenate([features.text_statistics(draft), features.answer_statistics(draft)])
    np.testing.assert_allclose(block["draft_stats"], expected)
    assert block["verify"].tolist() == [1.0]
    np.testing.assert_array_equal(block["draft_author"], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(block["episode_calls"], np.array([0, 1, 0]) / 3, rtol=1e-6)


def test_statistics_order_difficulty_and_survive_hostile_text() -> None:
    small = features.text_statistics("What is $2 + 3$?")
    large = features.text_statistics("What is $123456 \\cdot 98765 + 4321 - 17$?")
    for name in ["log_digits", "log_numbers", "log_max_number", "log_operators"]:
        i = features.STAT_NAMES.index(name)
        assert large[i] > small[i], name
    started = time.monotonic()
    for text in ("9" * 10_000_000, "\ud800" * 1000 + "\\boxed{" * 50_000, "1." * 400_000):
        stats = features.text_statistics(text)
        answer = features.answer_statistics(text)
        assert np.isfinite(stats).all() and np.isfinite(answer).all()
    assert time.monotonic() - started < 10.0


# -- actions and masks ------------------------------------------------------------------------
def test_action_mapping_is_canonical() -> None:
    env = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES)
    action = env.get_wrapper_attr("action")
    weak, mid, strong = _base(env).pool.names
    env.reset(seed=0)
    assert action(0) == route_text(weak)
    assert action(np.int64(2)) == route_text(strong)
    _, _, _, _, info = env.step(0)
    assert info["phase"] == "verify"
    assert action(1) == verdict_text(False, mid)
    assert action(np.array(2)) == verdict_text(False, strong)
    assert action(3) == verdict_text(True)
    with pytest.raises(ConfigError):
        action(4)


@pytest.mark.parametrize("reward", ["paper", "outcome"])
def test_nobody_stronger_left_every_choice_stops(reward: str) -> None:
    """The strongest agent's draft: every choice ends the episode with that draft, as the
    removed wrapper did for any pick (so a plain PPO's pick there is never refused): under
    the paper reward (which pays the verdict) a reject index is the bare False, under the
    outcome reward (where it would tie with accepting) the accept text."""
    env = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES, reward=reward)
    action = env.get_wrapper_attr("action")
    env.reset(seed=3)
    _, _, _, _, info = env.step(2)
    np.testing.assert_array_equal(info["action_mask"], [True, True, True, True])
    stop = verdict_text(False) if reward == "paper" else verdict_text(True)
    assert [action(i) for i in range(4)] == [stop, stop, stop, verdict_text(True)]
    _, _, terminated, _, info = env.step(0)
    assert terminated and not info["invalid_action"]
    assert info["verdict"] is (reward != "paper")
    assert info["metrics"]["calls/total"] == 1.0


@pytest.mark.parametrize(
    ("env_id", "reward"), [(i, "outcome") for i in ENV_IDS] + [(ENV_IDS[0], "paper")]
)
def test_every_masked_sequence_is_valid_and_masked_choices_are_refused(
    env_id: str, reward: str
) -> None:
    """All action sequences the masks allow, for two tasks, are well-formed; every masked
    index is flagged invalid by the env (probed on a fork)."""
    env = make_discrete_env(env_id, n_features=N_FEATURES, reward=reward)
    action = env.get_wrapper_attr("action")
    for seed in range(2):
        frontier: list[list[int]] = [[]]
        while frontier:
            prefix = frontier.pop()
            _, info = env.reset(seed=seed)
            done = False
            for index in prefix:
                *_, terminated, truncated, info = env.step(index)
                done = terminated or truncated
            if done:
                continue
            mask = env.get_wrapper_attr("action_masks")()
            np.testing.assert_array_equal(info["action_mask"], mask)
            assert mask[-1] == (info["phase"] == "verify")
            for index in range(len(mask)):
                *_, step_info = _base(env).fork().step(action(index))
                assert step_info["invalid_action"] is not bool(mask[index]), (prefix, index)
                if mask[index]:
                    frontier.append([*prefix, index])


def test_str_actions_pass_through() -> None:
    env = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES)
    _, info = env.reset(seed=0)
    mid = _base(env).pool.names[1]
    _, _, _, _, info = env.step(route_text(mid))
    assert not info["invalid_action"] and info["called_agent"] == mid


def test_maskable_ppo_reads_masks() -> None:
    pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec = DummyVecEnv([lambda: make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES)])
    vec.seed(0)
    vec.reset()
    np.testing.assert_array_equal(get_action_masks(vec), [[True, True, True, False]])


# -- policies played on the text env --------------------------------------------------------------
class _Fixed:
    """A stand-in policy: always index ``choice``; records what it was shown."""

    def __init__(self, shape: tuple[int, ...], choice: int = 2) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, shape=shape)
        self.choice = choice
        self.seen: list[np.ndarray] = []

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> tuple[int, None]:
        self.seen.append(obs)
        return self.choice, None


def test_turn_scale_of_a_policy_played_at_another_horizon() -> None:
    view = make_discrete_env("orch/MathRoute-v0", n_features=N_FEATURES)
    shape = view.observation_space.shape
    assert shape is not None
    turn = view.get_wrapper_attr("slices")["turn"]
    env = gym.make("orch/MathRoute-v0", max_turns=4).unwrapped
    for scale, expected in ((None, 0.25), (3, 1 / 3)):
        policy = _Fixed(shape, choice=0)
        controller = MaskedPolicyController(
            policy, n_features=N_FEATURES, **({} if scale is None else {"max_turns": scale})
        )
        controller.bind(env)
        obs, info = env.reset(seed=0)
        obs, *_, info = env.step(controller.act(obs, info))
        controller.act(obs, info)
        assert policy.seen[-1][turn][0] == pytest.approx(expected)
    with pytest.raises(ConfigError, match="max_turns"):
        ObservationFeatures(env, max_turns=0)


def test_a_policy_trained_on_another_view_is_refused() -> None:
    """A policy saved before issue 27 read ``wrappers.TextFeatures`` (547 values for three
    agents): playing it on the core view is a ConfigError that says why, not a crash."""
    env = gym.make("orch/MathRoute-v0").unwrapped
    controller = MaskedPolicyController(_Fixed((547,)), n_features=256, raw_numbers=True)
    with pytest.raises(ConfigError, match="trained on other features"):
        controller.bind(env)


def test_saved_policy_controller_plays_the_core_view(tmp_path: Any) -> None:
    """The registered ``ppo-policy`` controller loads a PPO saved on the training view and
    plays it on the text env (a few training steps: the file format, not the skill)."""
    pytest.importorskip("stable_baselines3")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from orchenv.envs.mathroute.saved_policy import SavedPolicyController
    from orchenv.envs.mathroute.training import train_ppo
    from orchenv.runner import run_episodes

    model = train_ppo(64, n_envs=1, ppo_kwargs={"n_steps": 64, "batch_size": 32, "n_epochs": 1})
    model.save(tmp_path / "seed0.zip")
    controller = SavedPolicyController(str(tmp_path / "seed{seed}.zip"), seed=0)
    env = gym.make("orch/MathRoute-v0", split="test")
    summary, records = run_episodes(env, controller, episodes=3, progress=False)
    assert len(records) == 3 and summary.episodes == 3
    assert not any(r.invalid_actions for r in records)
