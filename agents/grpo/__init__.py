"""Multi-turn GRPO for orchenv controllers (seed 000, section 3.4 and appendix E).

Tree rollouts (Algorithm 1), recursive discounted returns (eq. 5/14), group-relative
advantages (eq. 6/16) and the clipped token-level surrogate (eq. 21-24). Needs the
``train`` extra (torch, transformers): ``pip install "orchenv[train]"``.
"""

from __future__ import annotations

from typing import Any

# torch and transformers load only when a name is first used, so that building the
# `orchenv` command line (which registers `orchenv train grpo`) stays light.
_ALGORITHMS = "orchenv.agents.grpo.algorithms"


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module(_ALGORITHMS), name)
    raise AttributeError(f"module 'orchenv.agents.grpo' has no attribute {name!r}")


__all__ = [
    "AGGREGATIONS",
    "Sample",
    "Sampler",
    "Trajectory",
    "Tree",
    "TreeNode",
    "build_batch",
    "group_advantages",
    "kl_k3",
    "node_returns",
    "policy_loss",
    "rollout_trajectories",
    "rollout_trees",
    "token_entropy",
    "token_logprobs",
    "trajectory_advantages",
]
