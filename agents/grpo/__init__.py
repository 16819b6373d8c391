"""Multi-turn GRPO for orchenv controllers (seed 000, section 3.4 and appendix E). torch loads
when a name below is first used, so building the ``orchenv`` command line stays light."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AGGREGATIONS", "Sample", "Sampler", "Trajectory", "Tree", "TreeNode", "build_batch",
    "group_advantages", "kl_k3", "node_returns", "policy_loss", "rollout_trajectories",
    "rollout_trees", "token_entropy", "token_logprobs", "trajectory_advantages",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("orchenv.agents.grpo.algorithms"), name)
    raise AttributeError(f"module 'orchenv.agents.grpo' has no attribute {name!r}")
