"""``--controller budgetroute-ppo-policy``: a MaskablePPO policy saved by ``orchenv reproduce
001`` played as a controller, so the page's trained rows have ``orchenv eval`` commands that run.

``model`` is the path of the policy's ``.zip``; a ``{seed}`` in it is replaced by the run seed,
so ``--seeds 0 1 2`` plays each run seed's own policy on that seed's episodes, as the page does
(one policy per run seed, greedy). The policy reads the discrete view's hashed features it was
trained on (``reproduce.N_FEATURES``). Loading and checks: ``orchenv.discrete.SavedPolicy``.
"""

from __future__ import annotations

from typing import Any

from orchenv.discrete import SavedPolicy

NAME = "budgetroute-ppo-policy"


class SavedBudgetPolicy(SavedPolicy):
    """A MaskablePPO policy saved by seed 001's page, played greedily (deterministic).

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
    """

    name = NAME
    made_by = (
        "`orchenv reproduce 001` trains and saves the page's policies under runs/reproduce/001/"
    )

    def feature_kwargs(self) -> dict[str, Any]:
        from orchenv.envs.budgetroute.reproduce import N_FEATURES

        return {"n_features": N_FEATURES}
