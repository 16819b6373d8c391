"""``--controller ppo-policy``: a PPO policy saved by ``orchenv reproduce 000`` as a controller.

Seed 000's page evaluates one trained policy per run seed; this controller lets its printed
``orchenv eval`` commands replay those evaluations from the saved files. ``model`` is the path
of a Stable-Baselines3 ``.zip``; a ``{seed}`` in it is replaced by the run seed, so
``--seeds 0 1 2`` plays each seed's own policy, as the page does. The policy reads the
discrete wrappers' text features (``orchenv.envs.mathroute.training``), trained with
``usage_history`` off; ``feature_max_turns`` keeps the turn feature on the training horizon
when the env plays another one (the turn ablation).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from orchenv.envs.mathroute.training import PolicyController
from orchenv.error import ConfigError

#: the features every policy of seed 000's page was trained on (``reproduce.FEATURES``)
SAVED_FEATURES: dict[str, Any] = {"usage_history": False}
#: the longest model path accepted (a path, not a payload)
MAX_PATH_CHARS = 4096


def resolve_model_path(model: object, seed: int) -> Path:
    """The policy file for run ``seed``: ``model`` with ``{seed}`` replaced (no other
    formatting is applied), which must be an existing file."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"ppo-policy needs model=PATH (a saved .zip), got {model!r}")
    if len(model) > MAX_PATH_CHARS or "\x00" in model:
        raise ConfigError("ppo-policy: the model path is not a usable path")
    path = Path(model.replace("{seed}", str(seed))).expanduser()
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"ppo-policy: cannot read the model path {str(path)!r}: {exc}") from exc
    if not found:
        raise ConfigError(
            f"ppo-policy: no saved policy at {str(path)!r} (run seed {seed}); "
            "`orchenv reproduce 000` trains and saves the page's policies under "
            "runs/reproduce/000/models/"
        )
    return path


class SavedPolicyController(PolicyController):
    """A saved SB3 PPO policy (deterministic argmax) on the plain MathRoute text env.

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
        feature_max_turns: the training horizon of the turn feature (default: the env's
            ``max_turns``).
    """

    privileged = False

    def __init__(
        self, model: str = "", seed: int = 0, feature_max_turns: int | None = None
    ) -> None:
        if feature_max_turns is not None and (
            isinstance(feature_max_turns, bool)
            or not isinstance(feature_max_turns, (int, float))
            or not math.isfinite(feature_max_turns)
            or int(feature_max_turns) != feature_max_turns
            or not 1 <= int(feature_max_turns) <= 64
        ):
            raise ConfigError(
                f"feature_max_turns must be an integer from 1 to 64, got {feature_max_turns!r}"
            )
        path = resolve_model_path(model, int(seed))
        from stable_baselines3 import PPO

        try:
            policy = PPO.load(path, device="cpu")
        except Exception as exc:  # a corrupt or foreign zip: say which file, do not crash
            raise ConfigError(
                f"ppo-policy: {str(path)!r} is not a saved PPO policy: {exc}"
            ) from exc
        super().__init__(
            policy,
            feature_kwargs=SAVED_FEATURES,
            feature_max_turns=None if feature_max_turns is None else int(feature_max_turns),
        )
        self.model_path = str(path)
