"""``orchenv.discrete`` on a toy env with known choices: indices send the env's canonical
text, masks follow ``None`` entries, a masked index is refused by the env, strings pass
through, the feature vector has the documented layout, and Gymnasium's ``check_env``
accepts the stack. Contract violations (a choice list that changes length, no available
choice) fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from toy_bits import CHOICES, ENV_ID, BitsEnv, register

from orchenv.core import OrchestrationEnv
from orchenv.discrete import (
    UNAVAILABLE_TEXT,
    ChoiceActions,
    ObservationFeatures,
    hashed_ngrams,
    make_discrete_env,
)
from orchenv.error import ConfigError, OrchEnvError

register()


def test_indices_send_the_envs_choice_text_and_masks_follow_none():
    env = ChoiceActions(gym.make(ENV_ID))
    assert env.action_space == gym.spaces.Discrete(4)
    _, info = env.reset(seed=0)
    assert info["action_mask"].tolist() == [True, True, True, False]  # no stop before a guess
    assert env.action_masks().tolist() == [True, True, True, False]
    assert [env.action(i) for i in range(3)] == list(CHOICES[:3])
    _, _, _, _, info = env.step(1)
    assert env.unwrapped.bits == ["1"] and not info["invalid_action"]
    assert info["action_mask"].tolist() == [True, True, True, True]
    assert env.action(3) == CHOICES[3]
    *_, terminated, truncated, info = env.step(3)
    assert terminated and not truncated
    assert env.action_masks().all()  # between episodes every index is allowed


def test_a_masked_index_is_refused_by_the_env_and_changes_nothing():
    env = ChoiceActions(gym.make(ENV_ID))
    env.reset(seed=0)
    assert env.action(3) == UNAVAILABLE_TEXT.format(index=3)
    _, reward, terminated, truncated, info = env.step(3)
    assert info["invalid_action"] and reward == -1.0  # the toy's format penalty
    assert not (terminated or truncated) and env.unwrapped.bits == []


def test_strings_pass_through_and_bad_indices_raise():
    env = ChoiceActions(gym.make(ENV_ID))
    env.reset(seed=0)
    env.step("<bit>0</bit>")
    assert env.unwrapped.bits == ["0"]
    with pytest.raises(ConfigError, match=r"\[0, 3\]"):
        env.step(4)


def test_wrapping_before_reset_leaves_the_env_untouched():
    """The number of choices is probed on a fork: the wrapped env's episodes are the ones an
    unwrapped env plays from the same seeds."""
    plain, wrapped = gym.make(ENV_ID), ChoiceActions(gym.make(ENV_ID))
    assert wrapped.unwrapped.task is None
    for seed in (None, 3):
        assert plain.reset(seed=seed)[0] == wrapped.reset(seed=seed)[0]


def test_feature_layout():
    env = ObservationFeatures(ChoiceActions(gym.make(ENV_ID)), n_features=32)
    assert env.observation_space.shape == (32 + 1 + 4 + 2,)
    assert env.slices == {
        "ngrams": slice(0, 32),
        "turn": slice(32, 33),
        "mask": slice(33, 37),
        "env": slice(37, 39),
    }
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs in env.observation_space
    assert obs[env.slices["mask"]].tolist() == [1, 1, 1, 0]
    assert obs[env.slices["turn"]].tolist() == [0.0]
    assert obs[env.slices["env"]].tolist() == [0.0, 1.0]  # the toy's observation_features()
    assert np.linalg.norm(obs[env.slices["ngrams"]]) == pytest.approx(1.0, abs=1e-5)
    target = env.unwrapped.task.answer
    obs, *_ = env.step(int(target[0]))  # a right guess
    assert obs[env.slices["mask"]].tolist() == [1, 1, 1, 1]
    assert obs[env.slices["turn"]] == pytest.approx(1 / 3)
    assert obs[env.slices["env"]].tolist() == pytest.approx([1 / 3, 1.0])


def test_features_without_choice_actions_read_the_envs_mask():
    env = ObservationFeatures(gym.make(ENV_ID), n_features=16)
    obs, _ = env.reset(seed=0)
    assert obs[env.slices["mask"]].tolist() == [1, 1, 1, 0]


def test_the_system_message_does_not_enter_the_ngrams():
    env = ObservationFeatures(gym.make(ENV_ID), n_features=64)
    env.reset(seed=0)
    user = [m["content"] for m in env.unwrapped._messages() if m["role"] == "user"]
    obs = env.observation("")
    assert np.array_equal(obs[env.slices["ngrams"]], hashed_ngrams("\n\n".join(user), 64))


def test_hashed_ngrams():
    a = hashed_ngrams("route 12 to the strong model", 64)
    assert a.shape == (64,) and a.dtype == np.float32
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(a, hashed_ngrams("route 12 to the strong model", 64))
    assert not np.array_equal(a, hashed_ngrams("route 12 to the weak model", 64))
    assert not hashed_ngrams("", 64).any()
    # numbers count by their shape in word n-grams, so two-digit numbers share those slots
    words_only = {"word_ngrams": (1, 2), "char_ngrams": ()}
    assert np.array_equal(
        hashed_ngrams("x 12", 64, **words_only), hashed_ngrams("x 47", 64, **words_only)
    )


def test_hashed_ngrams_are_the_same_in_every_process():
    code = "from orchenv.discrete import hashed_ngrams; print(hashed_ngrams('a b 12', 16).tolist())"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert outs.pop().strip() == str(hashed_ngrams("a b 12", 16).tolist())


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_check_env_accepts_the_stack():
    env = make_discrete_env(ENV_ID, n_features=32)
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    assert env.get_wrapper_attr("action_masks")().tolist() == [True, True, True, False]


@pytest.mark.parametrize("stats", [False, True])
def test_action_masks_on_the_outermost_wrapper(stats):
    """The README's ``env.action_masks()`` works on the view itself, with or without
    ``RecordEpisodeStatistics`` on top (Gymnasium >= 1.0 wrappers forward no attributes)."""
    env = make_discrete_env(ENV_ID, n_features=32, record_episode_statistics=stats)
    assert env.action_masks().all()  # before the first reset: every index allowed
    _, info = env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, True, False]
    assert env.action_masks().tolist() == info["action_mask"].tolist()
    _, _, terminated, truncated, info = env.step(0)
    assert env.action_masks().tolist() == info["action_mask"].tolist()


def test_features_alone_compute_the_mask_from_the_env():
    env = ObservationFeatures(gym.make(ENV_ID), n_features=8)
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, True, False]


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_maskable_ppo_trains_through_the_view():
    """sb3-contrib's MaskablePPO finds the masks on the view (its ``get_action_masks`` calls
    ``env_method("action_masks")`` on the outermost wrapper) and never sends a masked index."""
    pytest.importorskip("torch")
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.env_util import make_vec_env

    vec = make_vec_env(
        lambda: make_discrete_env(ENV_ID, n_features=16, record_episode_statistics=True),
        n_envs=2,
    )
    assert is_masking_supported(vec)
    vec.reset()
    assert get_action_masks(vec).tolist() == [[True, True, True, False]] * 2
    model = sb3_contrib.MaskablePPO("MlpPolicy", vec, n_steps=16, batch_size=16, seed=0)
    model.learn(64)
    env = make_discrete_env(ENV_ID, n_features=16)
    obs, info = env.reset(seed=1)
    for _ in range(8):
        action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=False)
        assert env.action_masks()[int(action)]
        obs, _, terminated, truncated, info = env.step(action)
        assert not info.get("invalid_action")
        if terminated or truncated:
            obs, info = env.reset()


class _Shrinking(BitsEnv):
    def action_choices(self) -> list[str | None]:
        return super().action_choices()[: 4 - len(self.bits)]


class _Empty(BitsEnv):
    def action_choices(self) -> list[str | None]:
        return [None] * 4 if self.bits else super().action_choices()


class _NoChoices(BitsEnv):
    action_choices = OrchestrationEnv.action_choices


def test_contract_violations_fail_loudly():
    env = ChoiceActions(_Shrinking())
    env.reset(seed=0)
    with pytest.raises(OrchEnvError, match="same length in every state"):
        env.step(0)
    env = ChoiceActions(_Empty())
    env.reset(seed=0)
    with pytest.raises(OrchEnvError, match="no available choice"):
        env.step(0)
    with pytest.raises(NotImplementedError, match="_NoChoices has no discrete action set"):
        ChoiceActions(_NoChoices())


#: hashed_ngrams of GOLDEN_TEXT (32 features, raw numbers) as issue 27's implementation gave
#: them: saved policies were trained on these features, so a faster hasher must not move them
GOLDEN_TEXT = (
    "Problem: Find $x$ with 3(x + 8) = -9x + 48. Draft: Step 1: 3x + 24 = 48 - 9x; 12x = 24, x = 2."
)
GOLDEN = [
    -0.149402,
    0.0,
    0.264627,
    0.282786,
    -0.149402,
    0.149402,
    0.188524,
    0.21887,
    0.188524,
    0.094262,
    -0.337926,
    -0.094262,
    -0.264627,
    -0.094262,
    0.188524,
    0.094262,
    0.21887,
    -0.243664,
    0.264627,
    -0.094262,
    0.188524,
    -0.094262,
    0.0,
    0.188524,
    0.149402,
    0.149402,
    -0.188524,
    0.149402,
    -0.149402,
    0.094262,
    0.0,
    0.094262,
]


def test_hashed_ngrams_keep_the_features_policies_were_trained_on():
    vec = hashed_ngrams(GOLDEN_TEXT, 32, raw_numbers=True)
    assert np.allclose(vec, GOLDEN, atol=1e-6)
    again = hashed_ngrams(GOLDEN_TEXT, 32, raw_numbers=True)  # from the code table this time
    assert np.array_equal(vec, again)
    three = hashed_ngrams(GOLDEN_TEXT, 7, word_ngrams=(1, 2, 3), char_ngrams=(2, 4))
    assert three.shape == (7,) and np.isclose(np.linalg.norm(three), 1.0)
