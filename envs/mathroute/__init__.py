"""Seed 000's critique-and-routing family: ``orch/MathRoute-v0`` and its System 2 variant,
its rewards, the procedural math tasks and loaders, and the discrete-action wrappers."""

from orchenv.envs.mathroute.env import MathRouteEnv

__all__ = ["MathRouteEnv"]
