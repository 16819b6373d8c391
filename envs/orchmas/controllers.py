"""Registered controllers for ``orch/OrchMAS-v0`` (seed 002's page, issue 26), so the page's
printed ``orchenv eval`` commands run from a clean checkout:

- ``scripted-single-executor``: ``scripted.single_executor()`` (one generic call, the whole
  question, then the answer: the paper's direct-prompting baselines);
- ``scripted-decompose``: ``scripted.decompose_orchestrator()`` (sub-questions as the
  researcher, the whole question as the role its wording fits, a check after a lone call);
- ``orchmas-ppo-policy``: a MaskablePPO policy saved by ``orchenv reproduce 002``
  (``model=PATH``; a ``{seed}`` in it is replaced by the run seed, so ``--seeds 0 1 2`` plays
  each seed's own policy, as the page does), played greedily on the discrete view's
  features it was trained on (``reproduce.FEATURES``); loading and checks:
  ``orchenv.discrete.SavedPolicy``.

The names of the scripted ones are the controller names the page's evaluations already carry,
so the commands replay the page's episodes exactly.
"""

from __future__ import annotations

from typing import Any

from orchenv.discrete import SavedPolicy
from orchenv.envs.orchmas.scripted import ScriptedOrchestrator


class ScriptedSingleExecutor(ScriptedOrchestrator):
    """One call with the generic role and the whole question, then the answer."""

    privileged = False

    def __init__(self) -> None:
        super().__init__(role="generic", decompose=False, verify=False, max_calls=1)


class ScriptedDecompose(ScriptedOrchestrator):
    """Sub-questions as the researcher, the whole question as the domain role, a check when
    only one call was made; then the answer."""

    privileged = False

    def __init__(self) -> None:
        super().__init__(role="domain", decompose=True, verify=True)


class SavedMaskablePolicy(SavedPolicy):
    """A MaskablePPO policy saved by seed 002's page, played greedily (deterministic).

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
    """

    name = "orchmas-ppo-policy"
    made_by = "`orchenv reproduce 002` trains and saves the page's policies under runs/reproduce/002/models/"

    def feature_kwargs(self) -> dict[str, Any]:
        from orchenv.envs.orchmas.reproduce import FEATURES

        return dict(FEATURES)
