"""orchenv: multi-agent LLM coordination as standard RL environments.

``import orchenv`` registers every environment id with Gymnasium::

    import gymnasium as gym
    import orchenv  # noqa: F401
    env = gym.make("orch/MathRoute-v0")
"""

from __future__ import annotations

from orchenv.core import OrchestrationEnv
from orchenv.error import OrchEnvError
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, UsageMeter, make_pool
from orchenv.spaces import AnyText
from orchenv.tasks import Task, TaskSource, make_task_source

__version__ = "0.1.0"

# the one place core touches its plug-in packages: they fill the registries on import
import orchenv.agents  # noqa: E402,F401  (registers controller names)
import orchenv.envs  # noqa: E402,F401  (registers env ids, task sources, baselines)

__all__ = [
    "AgentPool",
    "AgentSpec",
    "AnyText",
    "CallContext",
    "Completion",
    "OrchEnvError",
    "OrchestrationEnv",
    "Task",
    "TaskSource",
    "UsageMeter",
    "__version__",
    "make_pool",
    "make_task_source",
]
