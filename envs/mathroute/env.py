"""``orch/MathRoute-v0``: iterative critique-and-routing over a pool of math solvers.

Seed 000 (sections 3.1-3.3, appendices B and C) as a Gymnasium environment.
The prompts are written for orchenv; the tags, rules, rewards and defaults
follow the paper.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, arguments_for
from orchenv.envs.mathroute.protocol import (
    ROUTER_SYSTEM,
    SOLVER_SYSTEM,
    VERIFIER_SYSTEM,
    Decision,
    parse_route,
    parse_verify,
)
from orchenv.envs.mathroute.rewards import (
    composite_reward,
    modified_composite_reward,
    routing_reward,
    usage_penalty,
    verification_reward,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, math_answer
from orchenv.pool import AgentPool, CallContext, Message
from orchenv.tasks import TaskSource


class MathRouteEnv(OrchestrationEnv):
    """Route a math problem to a solver, verify each draft, re-route until satisfied.

    ## Description
    A controller coordinates a pool of heterogeneous LLM solvers (seed 000). At
    the first turn it routes the problem to one solver. At each later turn it
    sees the problem and the latest solver's worked solution, judges whether
    the solution is correct, and either stops (the draft becomes the final
    answer) or rejects it and names a stronger solver, whose new solution is
    written with the rejected draft and the controller's critique in view.

    ## Action format
    Turn 1: ``<thinking>...</thinking><model>NAME</model>``.
    Turn t >= 2: ``<checking>...</checking><verdict>True|False</verdict>`` and,
    after False, ``<model>NAME</model>`` naming a stronger solver (any solver
    when ``require_stronger=False``). When no stronger solver is left, a bare
    False ends the episode. Parsing rules: ``orchenv.parsing``. A malformed
    action adds ``format_penalty`` to the step's reward, uses up the turn, calls
    nobody, and the next observation repeats the request with the parse error.

    ## Observation
    The controller prompt for this turn as one string (system instructions,
    the problem, the draft under review); ``info["messages"]`` holds the same
    as chat messages.

    ## Rewards
    Per turn, eq. (1)/(3) of seed 000 with ``alpha`` (default 0.5):
    ``alpha * (r^R - lambda_a) + (1 - alpha) * r^V`` where r^V rewards a verdict
    that matches the draft's correctness (0 at turn 1) and r^R rewards routing
    to a solver that answers correctly (0 when the controller stops); lambda_a
    is the Lagrange multiplier of the solver called (Table 9: 0.25 / 0.125 / 0
    strongest to weakest; ``use_lagrangian=False`` sets them to 0). The
    per-step agent-call vector is ``info["constraint_costs"]`` for constrained-RL
    methods that learn the multipliers themselves.

    ## Episode end
    ``terminated`` when the controller accepts a draft, rejects with nobody
    stronger left, or after ``max_turns`` controller turns (default 3, Table 9).
    The horizon is part of seed 000's MDP (the last turn's draft is graded as the
    answer and its tree GRPO has that fixed depth), so this env declares
    ``horizon_is_terminal``: reaching it is ``terminated``, never ``truncated``.
    The final answer is the last solver response and ``info`` carries ``task_id``, ``final_answer``,
    ``correct``, ``turns``, usage figures and ``metrics`` (``false_rejections``,
    ``false_acceptances``: verdicts that contradict the draft's correctness).

    ## Arguments
    - ``pool``: preset name (``"system1"``, ``"system2"``), pool file or ``AgentPool``.
    - ``task_source``, ``task_source_kwargs``, ``split``: where problems come from
      (default: procedural math, ``"train"``).
    - ``max_turns``: controller turns per episode (default 3, Table 9).
    - ``alpha``: weight of routing vs verification in eq. (3) (default 0.5).
    - ``route_reward``, ``verify_reward``: the values of r^R and r^V (default 1).
    - ``use_lagrangian``, ``lagrange_multipliers``: the per-agent lambda_a
      (default: the preset's Table 9 values; ``use_lagrangian=False`` zeroes them).
    - ``usage_constraints``: the per-agent usage shares c_i (default: the preset's
      0.25 / 0.5 / 1, strongest first).
    - ``enforce_usage_constraints``, ``usage_budget_queries``: with the first True
      (the evaluation protocol of section 4.2) each solver may be called at most
      ``c_i * usage_budget_queries`` times over the env's lifetime and calls beyond
      that go to the next-best solver with budget left (default: reported only).
    - ``require_stronger``: a rejection must name a stronger solver (default True).
    - ``format_penalty``: added to a step whose action cannot be parsed (default -1).
    - ``backend``, ``backend_kwargs``: override the pool's backends.
    - ``max_feedback_chars``: how much of the critique reaches the next solver.
    - ``max_obs_chars``, ``render_mode``: as for every orchenv env.

    ## Version history
    - v0: initial version. Since the one-shape refactor the format penalty is
      *added* to the step's reward (it replaced it; the same number, since an
      unusable action earns nothing else), and ``info["metrics"]`` is new.
    """

    #: seed 000's three turns are the MDP's horizon: the last turn is terminal
    horizon_is_terminal = True

    def __init__(
        self,
        *,
        pool: str | AgentPool = "system1",
        task_source: str | TaskSource = "procedural-math",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "train",
        max_turns: int = 3,
        alpha: float = 0.5,
        route_reward: float = 1.0,
        verify_reward: float = 1.0,
        use_lagrangian: bool = True,
        lagrange_multipliers: Mapping[str, float] | None = None,
        usage_constraints: Mapping[str, float] | None = None,
        require_stronger: bool = True,
        format_penalty: float = -1.0,
        enforce_usage_constraints: bool = False,
        usage_budget_queries: int | None = None,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_feedback_chars: int = 4000,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
        if enforce_usage_constraints and (usage_budget_queries is None or usage_budget_queries < 1):
            raise ConfigError(
                "enforce_usage_constraints=True needs usage_budget_queries (the number of "
                "queries the budgets are shares of, e.g. the evaluation set size)"
            )
        self.alpha = alpha
        self.route_value = route_reward
        self.verify_value = verify_reward
        self.use_lagrangian = use_lagrangian
        self._multipliers_arg = lagrange_multipliers
        self._constraints_arg = usage_constraints
        self.require_stronger = require_stronger
        self.enforce_usage_constraints = enforce_usage_constraints
        self.usage_budget_queries = usage_budget_queries
        self.max_feedback_chars = max_feedback_chars
        # episode state
        self.draft: str | None = None
        self.draft_agent: str | None = None
        self.draft_correct: bool | None = None
        self.verdict_errors = {"false_rejections": 0, "false_acceptances": 0}
        self._system_cache: dict[str | None, str] = {}
        self.ledger: dict[str, int] = {}  # calls per agent over the env's lifetime (enforcement)

    def _build_pool(self) -> AgentPool:
        pool = super()._build_pool()
        for label, table in (
            ("lagrange_multipliers", self._multipliers_arg),
            ("usage_constraints", self._constraints_arg),
        ):
            for key in table or {}:
                if key not in pool.names:
                    raise UnknownNameError(f"agent in {label}", key, pool.names)
        return pool

    @property
    def multipliers(self) -> dict[str, float]:
        if not self.use_lagrangian:
            return {}
        if self._multipliers_arg is not None:
            return dict(self._multipliers_arg)
        return dict(self.pool.lagrange_multipliers)

    @property
    def usage_constraints(self) -> dict[str, float]:
        if self._constraints_arg is not None:
            return dict(self._constraints_arg)
        return dict(self.pool.usage_constraints)

    def valid_agents(self) -> list[str]:
        if self.draft_agent is None or not self.require_stronger:
            return list(self.pool.names)
        return list(self.pool.stronger_than(self.draft_agent))

    def lifetime_state(self) -> dict[str, Any] | None:
        """The usage ledger, when budgets are enforced (it binds across episodes)."""
        return {"ledger": dict(self.ledger)} if self.enforce_usage_constraints else None

    def load_lifetime_state(self, state: Mapping[str, Any] | None) -> None:
        self.ledger = {str(k): int(v) for k, v in dict((state or {}).get("ledger") or {}).items()}

    def demo_action(self, rng: np.random.Generator) -> str:
        """Route to a random agent, or give a random verdict (rejecting to a random stronger one)."""
        agents = self.valid_agents()
        if self.draft_agent is None:
            return f"<model>{agents[int(rng.integers(len(agents)))]}</model>"
        if not agents or rng.random() < 0.5:
            return "<checking>demo</checking><verdict>True</verdict>"
        pick = agents[int(rng.integers(len(agents)))]
        return f"<checking>demo</checking><verdict>False</verdict><model>{pick}</model>"

    # -- prompts ----------------------------------------------------------------------
    def _system_prompt(self) -> str:
        """The controller's system prompt for the current phase (cached: it depends only
        on the pool and on who wrote the draft)."""
        key = self.draft_agent
        if key in self._system_cache:
            return self._system_cache[key]
        agents = ", ".join(self.pool.names)
        if key is None:
            prompt = ROUTER_SYSTEM.format(agents=agents)
        else:
            stronger = self.valid_agents()
            if not stronger:
                rule = f"No solver is stronger than {key}: a False verdict ends the work."
            elif self.require_stronger:
                rule = (
                    f"If routing is needed, name exactly one solver stronger than {key}: "
                    f"{', '.join(stronger)}."
                )
            else:
                rule = f"If routing is needed, name exactly one solver: {', '.join(stronger)}."
            prompt = VERIFIER_SYSTEM.format(author=key, agents=agents, routing_rule=rule)
        self._system_cache[key] = prompt
        return prompt

    def _messages(self) -> list[Message]:
        assert self.task is not None
        turn_line = self.turn_line()
        if self.draft_agent is None:
            user = f"Problem:\n{self.task.prompt}\n\n{turn_line}"
        else:
            user = (
                f"Problem:\n{self.task.prompt}\n\n"
                f"Proposed solution from {self.draft_agent}:\n{self.draft}\n\n{turn_line}"
            )
        return [
            {"role": "system", "content": self._system_prompt()},
            {"role": "user", "content": user},
        ]

    def _solver_messages(self, feedback: str) -> list[Message]:
        assert self.task is not None
        user = f"Problem:\n{self.task.prompt}"
        if self.draft is not None:
            user += (
                f"\n\nA previous attempt by {self.draft_agent} was judged incorrect.\n"
                f"Previous attempt:\n{self.draft}"
            )
            if feedback:
                user += f"\n\nReviewer's notes:\n{feedback[: self.max_feedback_chars]}"
            user += "\n\nWrite a complete, corrected solution."
        return [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": user}]

    def _observation_info(self) -> dict[str, Any]:
        return {"phase": "route" if self.draft_agent is None else "verify"}

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        if options.get("reset_usage_ledger"):
            self.ledger = {}
        self.task = self.pick_task(options)
        self.draft = self.draft_agent = self.draft_correct = None
        self.verdict_errors = {"false_rejections": 0, "false_acceptances": 0}
        return {"privileged": {"draft_correct": None}}

    def _resolve_budget(self, agent: str) -> str:
        """The agent that actually serves a call to ``agent`` under enforced usage budgets."""
        if not self.enforce_usage_constraints:
            return agent
        assert self.usage_budget_queries is not None
        limits, queries = self.usage_constraints, self.usage_budget_queries

        def has_budget(name: str) -> bool:
            if name not in limits:
                return True
            return self.ledger.get(name, 0) < math.floor(limits[name] * queries)

        if has_budget(agent):
            return agent
        names = list(self.pool.names)  # weakest first
        i = names.index(agent)
        # next-best: the strongest weaker agent with budget, then the weakest stronger one
        for name in reversed(names[:i]):
            if has_budget(name):
                return name
        for name in names[i + 1 :]:
            if has_budget(name):
                return name
        return agent  # every budget is spent: serve the request and flag it in info

    def _call(self, requested: str, feedback: str) -> tuple[str, bool, dict[str, Any]]:
        assert self.task is not None
        agent = self._resolve_budget(requested)
        messages = self._solver_messages(feedback)
        context = CallContext(
            task=self.task, turn=self.turn, draft=self.draft, feedback=feedback or None
        )
        completion = self.call_agent(agent, messages, context)
        self.ledger[agent] = self.ledger.get(agent, 0) + 1
        correct = check_math_solution(completion.text, self.task.answers)
        self.draft, self.draft_agent, self.draft_correct = completion.text, agent, correct
        extra: dict[str, Any] = {"called_agent": agent, "latency_s": completion.latency_s}
        if agent != requested:
            extra["rerouted_from"] = requested
        return agent, correct, extra

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        if self.draft_agent is None:
            decision = parse_route(action, self.pool.names)
        else:
            decision = parse_verify(
                action,
                self.pool.names,
                self.valid_agents(),
                require_stronger=self.require_stronger,
            )
        info: dict[str, Any] = {}
        # ground truth for analysis and privileged baselines; never for policies
        privileged: dict[str, Any] = {"judged_draft_correct": self.draft_correct}
        if decision.ok:
            reward, components, done = self._apply_decision(decision, info, privileged)
            error = None
        else:
            reward, done, error = 0.0, False, decision.error or "malformed reply."
            components = {"route": 0.0, "verify": 0.0, "usage_penalty": 0.0}
        components["format"] = 0.0 if error is None else self.format_penalty
        info["reward_components"] = components
        privileged["draft_correct"] = self.draft_correct  # the draft the next turn reviews
        info["privileged"] = privileged
        return Outcome(reward=reward, done=done, error=error, info=info)

    def _apply_decision(
        self, decision: Decision, extra: dict[str, Any], privileged: dict[str, Any]
    ) -> tuple[float, dict[str, float], bool]:
        """Execute a well-formed decision; return (reward, components, terminated)."""
        if decision.verdict is not None and self.draft_correct is not None:
            if decision.verdict is False and self.draft_correct:
                self.verdict_errors["false_rejections"] += 1
            elif decision.verdict is True and not self.draft_correct:
                self.verdict_errors["false_acceptances"] += 1
        r_verify = verification_reward(
            decision.verdict, self.draft_correct, value=self.verify_value
        )
        extra["verdict"] = decision.verdict
        if decision.agent is None:  # accept, or reject with nobody stronger left: stop
            components = {"route": 0.0, "verify": r_verify, "usage_penalty": 0.0}
            return composite_reward(0.0, r_verify, alpha=self.alpha), components, True
        agent, correct, call_extra = self._call(decision.agent, decision.feedback)
        extra.update(call_extra)
        privileged["response_correct"] = correct
        r_route = routing_reward(correct, value=self.route_value)
        penalty = usage_penalty(agent, self.multipliers)
        reward = modified_composite_reward(
            r_route, r_verify, agent, self.multipliers, alpha=self.alpha
        )
        components = {"route": r_route, "verify": r_verify, "usage_penalty": penalty}
        return reward, components, False

    def _summary(self) -> dict[str, Any]:
        assert self.task is not None
        final = self.draft
        return {
            "final_response": final,
            "final_answer": math_answer(final) if final else None,
            "correct": bool(self.draft_correct),
            "usage_constraints": self.usage_constraints,
            "level": self.task.level,
            "metrics": {k: float(v) for k, v in self.verdict_errors.items()},
        }
