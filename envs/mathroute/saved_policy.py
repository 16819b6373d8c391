"""``--controller ppo-policy``: a PPO policy saved by ``orchenv reproduce 000`` as a controller.

Seed 000's page evaluates one trained policy per run seed; this controller lets its printed
``orchenv eval`` commands replay those evaluations from the saved files. ``model`` is the path
of a Stable-Baselines3 ``.zip``; a ``{seed}`` in it is replaced by the run seed, so
``--seeds 0 1 2`` plays each seed's own policy, as the page does. The policy reads the core
discrete view (``orchenv.discrete``, with ``training.FEATURES``); ``feature_max_turns`` keeps
the turn feature on the training horizon when the env plays another one (the turn ablation).
Loading and checks: ``orchenv.discrete.SavedPolicy``. A policy saved before issue 27 read the
removed ``wrappers.TextFeatures`` (547 values for three agents): it is refused with a
``ConfigError`` that says so, since no conversion maps those features onto the new view;
``orchenv reproduce 000`` retrains it.
"""

from __future__ import annotations

import math
from typing import Any

from orchenv.discrete import MaskedPolicyController, SavedPolicy
from orchenv.envs.mathroute.training import FEATURES, policy_controller
from orchenv.error import ConfigError

#: the features every policy of seed 000's page was trained on (``training.FEATURES``)
SAVED_FEATURES: dict[str, Any] = dict(FEATURES)


class SavedPolicyController(SavedPolicy):
    """A saved SB3 PPO policy (deterministic argmax) on the plain MathRoute text env.

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
        feature_max_turns: the training horizon of the turn feature (default: the env's
            ``max_turns``).
    """

    name = "ppo-policy"
    made_by = "`orchenv reproduce 000` trains and saves the page's policies under runs/reproduce/000/models/"
    algorithm = "stable_baselines3:PPO"

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
        self.feature_max_turns = None if feature_max_turns is None else int(feature_max_turns)
        super().__init__(model, seed)

    def player(self, policy: Any) -> MaskedPolicyController:
        """Seed 000's policies read the core view with ``SAVED_FEATURES``; one whose input
        has another size (an older view) is refused when the player is bound to the env."""
        return policy_controller(
            policy, feature_kwargs=SAVED_FEATURES, feature_max_turns=self.feature_max_turns
        )
