"""``--controller budgetroute-ppo-policy``: a MaskablePPO policy saved by ``orchenv reproduce
001`` played as a controller, so the page's trained rows have ``orchenv eval`` commands that run.

``model`` is the path of the policy's ``.zip``; a ``{seed}`` in it is replaced by the run seed,
so ``--seeds 0 1 2`` plays each run seed's own policy on that seed's episodes, as the page does
(one policy per run seed, greedy). The policy reads the discrete view's hashed features it was
trained on (``reproduce.N_FEATURES``).
"""

from __future__ import annotations

from pathlib import Path

from orchenv.discrete import MaskedPolicyController
from orchenv.error import ConfigError

#: the longest model path accepted (a path, not a payload)
MAX_PATH_CHARS = 4096
NAME = "budgetroute-ppo-policy"


def resolve_policy_path(model: object, seed: int) -> Path:
    """The policy file for run ``seed``: ``model`` with ``{seed}`` replaced (nothing else is
    formatted); it must be an existing file."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{NAME} needs model=PATH (a saved .zip), got {model!r}")
    if len(model) > MAX_PATH_CHARS or "\x00" in model:
        raise ConfigError(f"{NAME}: the model path is not a usable path")
    path = Path(model.replace("{seed}", str(seed))).expanduser()
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{NAME}: cannot read {str(path)!r}: {exc}") from exc
    if not found:
        raise ConfigError(
            f"{NAME}: no saved policy at {str(path)!r} (run seed {seed}); "
            "`orchenv reproduce 001` trains and saves the page's policies under "
            "runs/reproduce/001/"
        )
    return path


class SavedBudgetPolicy(MaskedPolicyController):
    """A MaskablePPO policy saved by seed 001's page, played greedily (deterministic).

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
    """

    privileged = False

    def __init__(self, model: str = "", seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"{NAME}: seed must be an integer, got {seed!r}")
        path = resolve_policy_path(model, seed)
        from sb3_contrib import MaskablePPO

        from orchenv.envs.budgetroute.reproduce import N_FEATURES

        try:
            policy = MaskablePPO.load(str(path), device="cpu")
        except Exception as exc:  # a corrupt or foreign zip: say which file, do not crash
            raise ConfigError(
                f"{NAME}: {str(path)!r} is not a saved MaskablePPO policy: {exc}"
            ) from exc
        super().__init__(policy, n_features=N_FEATURES)
        self.model_path = str(path)
