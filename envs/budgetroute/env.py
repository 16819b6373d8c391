"""``orch/BudgetRoute-v0``: a budget-controllable controller that consults paid experts.

Seed 001 (CoRL; sections 3.1-3.3, Table 2, appendix A) as a Gymnasium
environment. The prompts and the action parser are in ``protocol.py``; the
rewards, budgets and defaults follow the paper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, arguments_for
from orchenv.envs.budgetroute.protocol import (
    CONTROLLER_SYSTEM,
    EXPERT_SYSTEM,
    FORMAT_REMINDER,
    GENERIC_GUIDANCE,
    MODE_GUIDANCE,
    grade_answer,
    parse_action,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, math_answer
from orchenv.pool import AgentPool, Message
from orchenv.tasks import TaskSource

#: Appendix A: per-query cost budgets (USD) of the multi-expert study
DEFAULT_BUDGETS: dict[str, float] = {"low": 0.001, "medium": 0.006, "high": 1000.0}


class BudgetRouteEnv(OrchestrationEnv):
    """Answer a math problem, consulting paid experts under a per-query dollar budget.

    ## Description
    A controller LLM (seed 001, CoRL) faces a math problem and a budget mode
    (``low`` / ``medium`` / ``high``) stated in its prompt. Each turn (a "round"
    in its prompt) it either sends a sub-query to one expert of the pool (its
    reply joins the context of the next turn) or gives its own final answer,
    which ends the episode. The controller is the policy: the environment never
    solves the problem for it. In the simulated pools an expert's correctness
    depends on the task, not on the wording of the sub-query, and the expert
    answers the original problem.

    ## Action format
    One of (the first tag that appears wins; ``<think>...</think>`` blocks are
    ignored):

    - ``<search>EXPERT NAME: sub-query</search>``: call that expert (names
      match ignoring case and punctuation, e.g. ``gpt-4.1-nano``).
    - ``<answer>FINAL ANSWER</answer>``: stop; the answer is graded against
      the task's reference answers (a bare expression, or a ``\\boxed{...}``).

    Anything else (no tag, unknown expert, empty query or answer, no ``:``)
    is malformed: it adds ``format_penalty`` to the step's reward, uses up the
    turn, calls nobody, and ``info["parse_error"]`` says what was wrong; the
    next observation repeats the request with the error. It never raises.

    ## Observation
    The controller prompt as one string: the system instructions with the
    budget mode and the experts with their prices, the problem, the turns
    used, and the transcript so far (sub-queries and expert replies);
    ``info["messages"]`` holds the same as chat messages. ``info["phase"]``
    is always ``"act"``; ``info["valid_agents"]`` lists the experts.

    ## Rewards
    Only at the episode's end (eq. 5-7 of seed 001): ``R = r_perf * r_cost``
    with ``r_perf`` = 1 if the final answer is correct else 0 and
    ``r_cost`` = 1 if the episode's dollar cost (the sum of the expert calls'
    ``cost_usd``; the controller is free) is at most the budget of the
    episode's mode, else 0. Intermediate steps give 0. A malformed action
    adds ``format_penalty`` (default 0.0: the paper uses no format reward) to
    that step's reward. ``info["budget_mode"]`` and ``info["budget_usd"]`` are
    reported at every step. The per-step expert-call vector is
    ``info["constraint_costs"]``.

    ## Episode end
    ``terminated`` when the controller answers; ``truncated`` when ``max_turns``
    turns (default 3) pass without an answer (performance 0). A ``<search>`` in
    the last turn is not executed (``info["unexecuted_search"]`` names its
    expert): there is no turn left to read the reply. Either way ``info`` then
    carries ``task_id``, ``final_answer``, ``correct``, ``answered``,
    ``performance_reward``, ``cost_reward``, ``level``, ``turns``, the usage
    figures and ``metrics``: ``within_budget`` (= ``cost_reward``),
    ``expert_calls`` and ``answered``.

    ## Arguments
    - ``pool``: preset name (default ``"corl"``: o3 / GPT-4.1 / GPT-4.1-nano
      with public prices), pool file or ``AgentPool``; its agents are the experts.
    - ``task_source``, ``task_source_kwargs``, ``split``: where problems come from
      (default: procedural math, ``"train"``).
    - ``max_turns``: controller turns (rounds) per episode (default 3).
    - ``budgets``: budget mode -> USD per query (default appendix A: low 0.001,
      medium 0.006, high 1000).
    - ``budget_mode``: ``None`` (default) draws the mode uniformly per episode
      from the env's ``np_random``; a mode name fixes it;
      ``reset(options={"budget_mode": ...})`` overrides both.
    - ``format_penalty``: added to a step whose action cannot be parsed (default 0).
    - ``backend``, ``backend_kwargs``: override the pool's backends.
    - ``max_reply_chars``: how much of each expert reply the controller sees
      (default 4000).
    - ``max_obs_chars``, ``render_mode``: as for every orchenv env.

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``max_rounds``), and reaching it without an answer is
      ``truncated`` (it was ``terminated``); ``info["metrics"]`` is new.
    """

    format_reminder = FORMAT_REMINDER

    def __init__(
        self,
        *,
        pool: str | AgentPool = "corl",
        task_source: str | TaskSource = "procedural-math",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "train",
        max_turns: int = 3,
        budgets: Mapping[str, float] | None = None,
        budget_mode: str | None = None,
        format_penalty: float = 0.0,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_reply_chars: int = 4000,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        self.budgets = dict(DEFAULT_BUDGETS if budgets is None else budgets)
        if not self.budgets:
            raise ConfigError("budgets must name at least one budget mode")
        for mode, usd in self.budgets.items():
            if not isinstance(usd, (int, float)) or not usd >= 0:
                raise ConfigError(f"budget for mode {mode!r} must be a number >= 0, got {usd!r}")
        if budget_mode is not None and budget_mode not in self.budgets:
            raise UnknownNameError("budget mode", budget_mode, self.budgets)
        self.fixed_budget_mode = budget_mode
        self.max_reply_chars = max_reply_chars
        # episode state
        self.budget_mode: str | None = None
        self.history: list[tuple[str, str, str]] = []  # (expert, sub-query, reply)
        self.answer: str | None = None  # the controller's final answer, once given
        self.correct = False  # whether that answer is right

    @property
    def budget_usd(self) -> float | None:
        return None if self.budget_mode is None else float(self.budgets[self.budget_mode])

    def demo_action(self, rng: np.random.Generator) -> str:
        """A valid action for the current state: ask a random expert, or answer "0"."""
        experts = self.valid_agents()
        if experts and not self.is_last_turn and rng.random() < 0.5:
            expert = experts[int(rng.integers(len(experts)))]
            problem = self.task.prompt if self.task is not None else "the problem"
            return f"<search>{expert}: {problem}</search>"
        return "<answer>0</answer>"

    # -- prompts ----------------------------------------------------------------------
    def _system_prompt(self) -> str:
        assert self.budget_mode is not None
        lines = []
        for name in reversed(self.pool.names):  # strongest first
            spec = self.pool.spec(name)
            lines.append(f"- {name}: ${spec.price_prompt:g} / ${spec.price_completion:g}")
        return CONTROLLER_SYSTEM.format(
            mode=self.budget_mode,
            guidance=MODE_GUIDANCE.get(self.budget_mode, GENERIC_GUIDANCE),
            experts="\n".join(lines),
            max_turns=self.max_turns,
        )

    def _messages(self) -> list[Message]:
        assert self.task is not None
        parts = [f"Problem:\n{self.task.prompt}"]
        for expert, query, reply in self.history:
            parts.append(
                f"<search>{expert}: {query}</search>\n<information>\n{reply}\n</information>"
            )
        if self.is_last_turn:
            parts.append(f"(Round {self.turn + 1} of {self.max_turns}: the last one; answer now.)")
        else:
            parts.append(self.turn_line("Round"))
        return [
            {"role": "system", "content": self._system_prompt()},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation_info(self) -> dict[str, Any]:
        return {"phase": "act", "budget_mode": self.budget_mode, "budget_usd": self.budget_usd}

    # -- episode ------------------------------------------------------------------------
    def _pick_mode(self, options: Mapping[str, Any]) -> str:
        mode = options.get("budget_mode", self.fixed_budget_mode)
        if mode is None:
            modes = list(self.budgets)
            return modes[int(self.np_random.integers(len(modes)))]
        if mode not in self.budgets:
            raise UnknownNameError("budget mode", str(mode), self.budgets)
        return str(mode)

    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.budget_mode = self._pick_mode(options)
        self.history = []
        self.answer, self.correct = None, False
        return {}

    def _rewards(self) -> tuple[float, float]:
        """(r_perf, r_cost) of the episode so far (eq. 6 and 7)."""
        budget = self.budget_usd
        assert budget is not None
        return (1.0 if self.correct else 0.0), (1.0 if self.meter.cost_usd <= budget else 0.0)

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        parsed, error = parse_action(action, self.pool.names)
        info: dict[str, Any] = {}
        privileged: dict[str, Any] = {}
        info["privileged"] = privileged
        if parsed is None:
            return Outcome(error=error, info=info)
        if parsed.kind == "answer":
            self.answer = parsed.text
            self.correct = grade_answer(parsed.text, self.task.answers)
            r_perf, r_cost = self._rewards()
            return Outcome(reward=r_perf * r_cost, done=True, info=info)
        assert parsed.expert is not None
        if self.turn >= self.max_turns:
            info["unexecuted_search"] = parsed.expert  # no turn left to read the reply
            return Outcome(info=info)
        messages: list[Message] = [
            {"role": "system", "content": EXPERT_SYSTEM},
            {"role": "user", "content": parsed.text},
        ]
        completion = self.call_agent(parsed.expert, messages)
        self.history.append((parsed.expert, parsed.text, completion.text[: self.max_reply_chars]))
        info["called_agent"] = parsed.expert
        privileged["expert_correct"] = check_math_solution(completion.text, self.task.answers)
        return Outcome(info=info)

    def _summary(self) -> dict[str, Any]:
        assert self.task is not None
        r_perf, r_cost = self._rewards()
        answered = self.answer is not None
        return {
            "performance_reward": r_perf,
            "cost_reward": r_cost,
            "correct": self.correct,
            "final_answer": (math_answer(self.answer) or self.answer) if self.answer else None,
            "answered": answered,
            "level": self.task.level,
            "metrics": {
                "within_budget": r_cost,
                "expert_calls": float(len(self.history)),
                "answered": float(answered),
            },
        }
