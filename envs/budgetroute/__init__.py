"""Seed 001 (CoRL): ``orch/BudgetRoute-v0``, budget-controllable routing to paid experts."""

from orchenv.envs.budgetroute.env import BudgetRouteEnv

__all__ = ["BudgetRouteEnv"]
