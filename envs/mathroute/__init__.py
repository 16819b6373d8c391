"""Seed 000's critique-and-routing family: ``orch/MathRoute-v0`` and its System 2 variant,
its rewards, the procedural math tasks and loaders, and its PPO training on the core
discrete view (``orchenv.discrete``: the env implements ``action_choices`` and
``observation_features``)."""

from orchenv.envs.mathroute.env import MathRouteEnv

__all__ = ["MathRouteEnv"]
