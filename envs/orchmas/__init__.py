"""Seed 002 (OrchMAS): ``orch/OrchMAS-v0`` and its simulated executor."""

from orchenv.envs.orchmas.env import OrchMASEnv

__all__ = ["OrchMASEnv"]
