"""ALFWorld household tasks (seed 004's embodied benchmark) on alfworld's own text engine.

``ALFWorldEnv`` (``orch/ALFWorld-v0``) is the single-learner view; ``roles.py``
holds the Planner / Navigator / Interactor / Evaluator views of seed 004's
appendix F. Importing this package is cheap: alfworld and textworld load when
an env first resets (``pip install "orchenv[alfworld]"``).
"""

from __future__ import annotations

from orchenv.envs.alfworld.env import ALFWorldEnv

__all__ = ["ALFWorldEnv"]
