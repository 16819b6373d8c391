"""Table 2 baselines of seed 001 (CoRL) on ``orch/BudgetRoute-v0``, as registered controllers.

``budget-baseline`` plays one fixed plan through the env's discrete choices
(``BudgetRouteEnv.action_choices``), so its text is exactly what the discrete view sends:

- ``expert="none"``: the controller model alone (Table 2's Qwen2.5-7B-Instruct row): answer
  with its own solution at once;
- ``expert=NAME``: ask that expert the whole problem, then answer with its final answer
  (Table 2's single-expert rows);
- ``expert="random"``: ask a uniformly random expert the whole problem, then answer with its
  final answer (Table 2's "Random Assign").

None reads the budget mode: their accuracy and cost are the same in every mode, only eq. 7's
reward changes. Not privileged (the controller's own answer is a simulated call of the
controller model, like any consultation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchenv.controllers import env_label
from orchenv.envs.budgetroute.env import REQUEST_KINDS
from orchenv.error import ConfigError, UnknownNameError
from orchenv.parsing import match_agent

#: choices of ``action_choices()``: answer alone, answer with the latest expert answer
OWN, LAST = 0, 1


class BudgetBaseline:
    """A fixed Table 2 plan on ``orch/BudgetRoute-v0`` (see the module docstring)."""

    privileged = False

    def __init__(self, *, expert: str = "none", seed: int = 0) -> None:
        self.expert = expert
        self.rng = np.random.default_rng(seed)
        self._env: Any = None

    def reseed(self, seed: int) -> None:
        """Restart the random stream from ``seed`` (the evaluation harness seeds each episode)."""
        self.rng = np.random.default_rng(seed)

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)
        if not hasattr(env, "action_choices") or not hasattr(env, "own_answer"):
            raise ConfigError(
                f"controller 'budget-baseline' does not apply to {env_label(env)}: it plays "
                "orch/BudgetRoute-v0's discrete choices"
            )
        if (
            self.expert not in ("none", "random")
            and match_agent(self.expert, env.pool.names) is None
        ):
            raise UnknownNameError("expert", self.expert, ["none", "random", *env.pool.names])
        self._env = env

    def _pick(self) -> int:
        """The index of 'ask the whole problem' for this episode's expert."""
        env = self._env
        names = list(env.pool.names)
        if self.expert == "random":
            k = int(self.rng.integers(len(names)))
        else:
            k = names.index(match_agent(self.expert, names))
        return 2 + len(REQUEST_KINDS) * k + REQUEST_KINDS.index("whole")

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._env is None:
            raise ConfigError("budget-baseline needs bind(env) first (orchenv run / eval do this)")
        choices = self._env.action_choices()
        if self.expert == "none":
            order = [OWN]
        elif self._env.history:
            order = [LAST, OWN]  # no boxed answer in the reply: fall back to the own answer
        else:
            order = [self._pick(), LAST, OWN]
        for index in order:
            if choices[index] is not None:
                return str(choices[index])
        return "<answer>0</answer>"
