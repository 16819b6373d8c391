"""Registered controllers for ``orch/OrchMAS-v0`` (seed 002's page, issue 26), so the page's
printed ``orchenv eval`` commands run from a clean checkout:

- ``scripted-single-executor``: ``scripted.single_executor()`` (one generic call, the whole
  question, then the answer: the paper's direct-prompting baselines);
- ``scripted-decompose``: ``scripted.decompose_orchestrator()`` (sub-questions as the
  researcher, the whole question as the role its wording fits, a check after a lone call);
- ``orchmas-ppo-policy``: a MaskablePPO policy saved by ``orchenv reproduce 002``
  (``model=PATH``; a ``{seed}`` in it is replaced by the run seed, so ``--seeds 0 1 2`` plays
  each seed's own policy, as the page does), played greedily on the discrete view's
  features it was trained on (``reproduce.FEATURES``).

The names of the scripted ones are the controller names the page's evaluations already carry,
so the commands replay the page's episodes exactly.
"""

from __future__ import annotations

from pathlib import Path

from orchenv.discrete import MaskedPolicyController
from orchenv.envs.orchmas.scripted import ScriptedOrchestrator
from orchenv.error import ConfigError

#: the longest model path accepted (a path, not a payload)
MAX_PATH_CHARS = 4096


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


def resolve_policy_path(model: object, seed: int) -> Path:
    """The policy file for run ``seed``: ``model`` with ``{seed}`` replaced (nothing else is
    formatted); it must be an existing file."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"orchmas-ppo-policy needs model=PATH (a saved .zip), got {model!r}")
    if len(model) > MAX_PATH_CHARS or "\x00" in model:
        raise ConfigError("orchmas-ppo-policy: the model path is not a usable path")
    path = Path(model.replace("{seed}", str(seed))).expanduser()
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"orchmas-ppo-policy: cannot read {str(path)!r}: {exc}") from exc
    if not found:
        raise ConfigError(
            f"orchmas-ppo-policy: no saved policy at {str(path)!r} (run seed {seed}); "
            "`orchenv reproduce 002` trains and saves the page's policies under "
            "runs/reproduce/002/models/"
        )
    return path


class SavedMaskablePolicy(MaskedPolicyController):
    """A MaskablePPO policy saved by seed 002's page, played greedily (deterministic).

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
    """

    privileged = False

    def __init__(self, model: str = "", seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"orchmas-ppo-policy: seed must be an integer, got {seed!r}")
        path = resolve_policy_path(model, seed)
        from sb3_contrib import MaskablePPO

        from orchenv.envs.orchmas.reproduce import FEATURES

        try:
            policy = MaskablePPO.load(str(path), device="cpu")
        except Exception as exc:  # a corrupt or foreign zip: say which file, do not crash
            raise ConfigError(
                f"orchmas-ppo-policy: {str(path)!r} is not a saved MaskablePPO policy: {exc}"
            ) from exc
        super().__init__(policy, **FEATURES)
        self.model_path = str(path)
