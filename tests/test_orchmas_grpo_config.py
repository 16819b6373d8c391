"""The OrchMAS GRPO config (examples/orchmas_grpo.yaml) loads into the reference trainer's
GRPOConfig with seed 002's section 4.1 settings (issue 15, item 6)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from orchenv.agents.grpo.config import GRPOConfig

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "orchmas_grpo.yaml"


def test_orchmas_grpo_config_has_the_papers_settings():
    pytest.importorskip("yaml")
    config = GRPOConfig.from_cli(["--config", str(CONFIG), "--model", "some/local/dir"])
    assert config.env_id == "orch/OrchMAS-v0" and config.model_path == "some/local/dir"
    assert config.learning_rate == pytest.approx(1e-6)
    assert config.kl_coef == pytest.approx(0.001)
    assert config.normalize_std and config.mode == "trajectory"
    assert config.max_prompt_tokens == 8192
    env = gym.make(config.env_id, max_turns=config.max_turns, **config.env_kwargs).unwrapped
    assert env.max_turns == 6 and env.max_calls == 5  # 5 executor calls and the answer
