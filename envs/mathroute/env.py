"""``orch/MathRoute-v0``: iterative critique-and-routing over a pool of math solvers.

Seed 000 (sections 3.1-3.3, appendices B and C) as a Gymnasium environment.
The prompts are written for orchenv; the tags, rules, rewards and defaults
follow the paper, except the default reward: eq. (1)/(3) is ``reward="paper"``, and the
default ``"outcome"`` is problem (2)'s objective (issue 25, docs/mathroute.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.mathroute import features
from orchenv.envs.mathroute.critique import (
    CRITIQUE_LOGITS,
    CRITIQUE_MODES,
    FIXED_FEEDBACK_LOGIT,
    judge_critique,
    locate_error,
    pointed_critique,
)
from orchenv.envs.mathroute.protocol import (
    ROUTER_SYSTEM,
    SOLVER_SYSTEM,
    VERIFIER_SYSTEM,
    Decision,
    example_reply,
    example_variant,
    model_rule,
    parse_route,
    parse_verify,
    route_example,
    route_text,
    verdict_text,
    verify_examples,
)
from orchenv.envs.mathroute.rewards import (
    REWARDS,
    composite_reward,
    modified_composite_reward,
    outcome_reward,
    routing_reward,
    usage_penalty,
    verification_reward,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, math_answer
from orchenv.pool import AgentPool, CallContext, Completion, Message
from orchenv.tasks import Task

if TYPE_CHECKING:
    from typing_extensions import Unpack


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
    ``reward="outcome"`` (default): ``-lambda_a`` for each call at the step that makes it,
    plus 1 at the episode's end when the final answer is correct (problem (2)'s objective
    under seed 000's Lagrangian relaxation; lambda_a is the multiplier of the solver called,
    Table 9: 0.25 / 0.125 / 0 strongest to weakest; ``use_lagrangian=False`` sets them to 0).
    ``reward="paper"``: per turn, eq. (1)/(3) of seed 000 with ``alpha`` (default 0.5):
    ``alpha * (r^R - lambda_a) + (1 - alpha) * r^V`` where r^V rewards a verdict that matches
    the draft's correctness (0 at turn 1) and r^R rewards routing to a solver that answers
    correctly (0 when the controller stops). As written it pays to reject a correct draft:
    rejecting every draft unread (1.29 per episode) beats a perfect verifier (1.15, System 1),
    so it is an option, not the default (``orchenv.envs.mathroute.rewards``, docs/mathroute.md).
    The per-step agent-call vector is ``info["constraint_costs"]`` for constrained-RL
    methods that learn the multipliers themselves.

    ## Episode end
    ``terminated`` when the controller accepts a draft, rejects with nobody
    stronger left, or after ``max_turns`` controller turns (default 3, Table 9).
    The horizon is part of seed 000's MDP (the last turn's draft is graded as the
    answer and its tree GRPO has that fixed depth), so this env declares
    ``horizon_is_terminal``: reaching it is ``terminated``, never ``truncated``.
    The final answer is the last solver response and ``info`` carries ``task_id``, ``final_answer``,
    ``correct``, ``turns``, usage figures and ``metrics`` (``false_rejections``,
    ``false_acceptances``: verdicts that contradict the draft's correctness;
    ``calls/AGENT`` and ``calls/total``: this episode's calls, so their means are calls
    per episode and ``mean(calls/AGENT) / mean(calls/total)`` is eq. (2)'s share).
    ``info["lifetime_usage"]`` has the env-lifetime share of routed calls (eq. 2) and
    calls per episode.

    ## Arguments
    - ``alpha``: weight of routing vs verification in eq. (3) (default 0.5).
    - ``route_reward``, ``verify_reward``: the values of r^R and r^V (default 1).
    - ``use_lagrangian``, ``lagrange_multipliers``: the per-agent lambda_a
      (default: the preset's Table 9 values; ``use_lagrangian=False`` zeroes them).
    - ``usage_constraints``: the per-agent usage shares c_i (default: the preset's
      0.25 / 0.5 / 1, strongest first).
    - ``reward``: ``"outcome"`` (default) or ``"paper"`` (see Rewards).
    - ``enforce_usage_constraints``, ``usage_denominator``, ``usage_budget_queries``:
      with the first True (the evaluation protocol of section 4.2) a call beyond an
      agent's budget goes to the next-best solver with budget left (default: usage is
      reported only). The budget's denominator: ``"calls"`` (eq. 2: the agent's share of
      all routed calls over the env's lifetime, this call included, stays <= c_i) or
      ``"queries"`` (at most ``floor(c_i * usage_budget_queries)`` calls). Default:
      ``"queries"`` when ``usage_budget_queries`` is given, else ``"calls"``.
    - ``critique_bonus``: how the critique changes the next solver's chance (simulated
      agents only, via ``CallContext.guidance``): ``"judged"`` (default; a critique that
      names the draft's wrong step helps, a wrong pointer hurts, an empty or generic one
      does nothing: ``orchenv.envs.mathroute.critique``), ``"fixed"`` (+0.25 for any
      non-empty critique, orchenv's earlier model) or ``"off"``. ``critique_logits``
      overrides the judged values.
    - ``require_stronger``: a rejection must name a stronger solver (default True).
    - ``max_feedback_chars``: how much of the critique reaches the next solver.

    ## Shared arguments
    - ``pool``: a preset (``"system1"``, ``"system2"``: seed 000's two systems), a pool file or
      an ``AgentPool``.
    - ``max_turns``: 3 by default, seed 000's horizon (Table 9).

    ## Version history
    - v0: initial version. Since the one-shape refactor the format penalty is
      *added* to the step's reward (it replaced it; the same number, since an
      unusable action earns nothing else), and ``info["metrics"]`` is new.
      Since the soundness audit: ``reward``, ``critique_bonus`` (default ``"judged"``;
      the earlier model is ``"fixed"``), ``usage_denominator`` (enforcement without
      ``usage_budget_queries`` now uses eq. 2's share instead of refusing),
      ``action_choices()``, ``audit_strategies()``, ``calls/*`` metrics.
      Since issue 25 ("benchmarks that cannot be gamed"): the default reward is
      ``"outcome"`` (it was ``"paper"``, whose best response rejects right drafts);
      ``skill_action`` / ``realistic_skill`` give the audit's skill reference.
      Issue 38: a consulted call costs lambda_a as a routed one does (``call_charge``,
      ``info["consult_charge"]``) and enters the usage ledger; a critique is pointed only
      with the value the faulty step should give; two more audit strategies.
    """

    #: seed 000's three turns are the MDP's horizon: the last turn is terminal
    horizon_is_terminal = True
    #: the routing baselines (orchenv.agents.routers) apply to this protocol
    default_controller = "random"

    #: the verifier's informedness in seed 000's Tables 6 / 7 (see ``realistic_skill_source``)
    realistic_skill = 0.70
    realistic_skill_source = (
        "seed 000, appendix A.4, Tables 6 and 7 (the trained controller's turn-2 verdicts): "
        "recall on wrong drafts + acceptance of right drafts - 1 (Youden's J, the share of "
        "verdicts that are informed rather than a truth-blind guess) = 892/1163 + 2805/3021 - 1 "
        "= 0.70 (System 1) and 1247/1545 + 2563/2762 - 1 = 0.74 (System 2); the lower one is "
        "used for both systems"
    )

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "pool": "system1",  # seed 000's two systems: "system1", "system2"
        "task_source": "procedural-math",
        "max_turns": 3,  # Table 9
        "format_penalty": -1.0,
    }

    def __init__(
        self,
        *,
        alpha: float = 0.5,
        route_reward: float = 1.0,
        verify_reward: float = 1.0,
        use_lagrangian: bool = True,
        lagrange_multipliers: Mapping[str, float] | None = None,
        usage_constraints: Mapping[str, float] | None = None,
        require_stronger: bool = True,
        enforce_usage_constraints: bool = False,
        usage_budget_queries: int | None = None,
        reward: str = "outcome",
        usage_denominator: str | None = None,
        critique_bonus: str = "judged",
        critique_logits: Mapping[str, float] | None = None,
        max_feedback_chars: int = 4000,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
        if reward not in REWARDS:
            raise UnknownNameError("reward", reward, REWARDS)
        if critique_bonus not in CRITIQUE_MODES:
            raise UnknownNameError("critique_bonus", critique_bonus, CRITIQUE_MODES)
        logits = dict(CRITIQUE_LOGITS)
        for kind, value in (critique_logits or {}).items():
            if kind not in CRITIQUE_LOGITS:
                raise UnknownNameError("critique kind", kind, tuple(CRITIQUE_LOGITS))
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ConfigError(f"critique_logits[{kind!r}] must be a finite number")
            logits[kind] = float(value)
        if usage_denominator is None:
            usage_denominator = "calls" if usage_budget_queries is None else "queries"
        if usage_denominator not in ("calls", "queries"):
            raise UnknownNameError("usage_denominator", usage_denominator, ("calls", "queries"))
        if (
            enforce_usage_constraints
            and usage_denominator == "queries"
            and (usage_budget_queries is None or usage_budget_queries < 1)
        ):
            raise ConfigError(
                "enforce_usage_constraints=True with usage_denominator='queries' needs "
                "usage_budget_queries (the number of queries the budgets are shares of, e.g. "
                "the evaluation set size); usage_denominator='calls' needs none"
            )
        self.reward_variant = reward
        self.usage_denominator = usage_denominator
        self.critique_bonus = critique_bonus
        self.critique_logits = logits
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
        self._system_cache: dict[tuple[str | None, int], str] = {}
        self.ledger: dict[str, int] = {}  # routed calls per agent over the env's lifetime
        self.episodes = 0  # episodes started over the env's lifetime (usage per episode)

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
        if not self.enforce_usage_constraints:
            return None
        return {"ledger": dict(self.ledger), "episodes": self.episodes}

    def load_lifetime_state(self, state: Mapping[str, Any] | None) -> None:
        self.ledger = {str(k): int(v) for k, v in dict((state or {}).get("ledger") or {}).items()}
        self.episodes = int((state or {}).get("episodes") or 0)

    # -- discrete view (orchenv.discrete, orchenv audit) -----------------------------------
    def action_choices(self) -> list[str | None]:
        """One choice per agent (weakest first), then accept: at a route turn choice i routes
        to agent i; at a verify turn it rejects the draft and routes to agent i. ``None``
        marks what cannot be done now: accept at a route turn, and an agent not in
        ``valid_agents()`` (not stronger than the draft's author).

        When nobody stronger is left (the strongest agent wrote the draft), a rejection can
        route nowhere, and every reject choice stops the episode with the draft, as the
        removed ``DiscreteActions`` did for an unmasked pick (issue 27): under
        ``reward="paper"``, which pays the verdict, with the bare False verdict; under
        ``"outcome"``, where a verdict earns nothing, with the accept text (a bare False
        would earn exactly what accepting earns, a tie that lets a best response reject a
        right draft for nothing).
        """
        names = list(self.pool.names)
        if self.draft_agent is None:
            return [route_text(a) for a in names] + [None]
        accept = verdict_text(True)
        valid = set(self.valid_agents())
        if not valid:  # nobody stronger left: every choice ends the episode with this draft
            stop = verdict_text(False) if self.reward_variant == "paper" else accept
            return [*(stop for _ in names), accept]
        choices: list[str | None] = [verdict_text(False, a) if a in valid else None for a in names]
        return [*choices, accept]

    def observation_features(self) -> np.ndarray:
        """MathRoute's numbers for ``orchenv.discrete.ObservationFeatures``: statistics of the
        problem and of the draft's text and boxed answer, the phase, the draft's author and
        this episode's calls per agent (``orchenv.envs.mathroute.features``); nothing
        privileged."""
        names = list(self.pool.names)
        if self.task is None:  # before the first reset: the right size, all zeros
            return np.zeros(sum(features.blocks(len(names)).values()), dtype=np.float32)
        return features.mathroute_features(
            str(self.task.prompt or ""),
            self.draft,
            self.draft_agent,
            names,
            dict(self.meter.calls),
        )

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Text-level shortcuts (they read only what a learner sees: the turn, the draft and
        its author) that a sound reward must rank below the skill: one agent then accept
        (``always-*``: never reject), weakest then reject every draft (``always-reject``),
        weakest then reject once and accept (``reject-once``: also the verdict read from the
        author's name), weakest then straight to the strongest (``weakest-then-strongest``),
        verdicts read from surface tells of the draft: its length (``length-tell``) and
        whether its boxed answer is a whole number (``answer-form-tell``); weakest, then
        ``consult()`` the strongest and accept when the two answers agree, else reject for the
        strongest (``consult-strongest-compare``: the consult is priced as a routed call);
        weakest, then reject once for the next agent up with a fixed critique that reads
        nothing of the draft (``blind-critique``)."""
        return {
            "always-weakest": _route_then_accept("weakest"),
            "always-middle": _route_then_accept("middle"),
            "always-strongest": _route_then_accept("strongest"),
            "always-reject": _always_reject,
            "reject-once": _reject_once,
            "weakest-then-strongest": _weakest_then_strongest,
            "length-tell": _length_tell,
            "answer-form-tell": _answer_form_tell,
            "consult-strongest-compare": _consult_strongest_compare,
            "blind-critique": _blind_critique,
        }

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str:
        """The audit's skill reference (issue 25). Skilled, with the privileged truth: accept
        a right draft; reject a wrong one with a critique naming its wrong step; route (at
        turn 1, and after a rejection) as ``skilled_route`` does. Unskilled (reads no truth):
        route to the weakest agent; at a verify turn a fair coin decides the verdict, and a
        rejection goes one step up with an empty critique."""
        agents = self.valid_agents()
        if self.draft_agent is None:
            return route_text(self.skilled_route(agents) if skilled else agents[0])
        if not skilled:
            if rng.random() < 0.5:
                return verdict_text(True)
            return verdict_text(False, agents[0] if agents else None)
        if self.draft_correct:
            return verdict_text(True)
        assert self.task is not None and self.draft is not None
        note = pointed_critique(locate_error(self.task, self.draft))
        stronger = [a for a in agents if a in self.pool.stronger_than(self.draft_agent)]
        return verdict_text(
            False, self.skilled_route(stronger or agents, note) if agents else None, note
        )

    def skilled_route(self, agents: list[str], note: str = "") -> str:
        """Privileged routing skill: the cheapest of ``agents`` (weakest first) worth calling.
        An agent without a multiplier (free) is worth a try while a later turn remains to
        review its draft; any other agent when its chance of solving the task, with this
        request (``note`` is the critique it will see), is at least 1/2 (the simulated
        backend's ``p_correct``: the task's difficulty against the agent's ability); else the
        strongest. A backend that cannot say (live agents) gives the first of ``agents``."""
        assert self.task is not None and agents
        later = self.turn + 1 < self.max_turns
        multipliers = self.multipliers
        context = CallContext(
            task=self.task,
            turn=self.turn + 1,
            draft=self.draft,
            feedback=note or None,
            guidance=self._guidance(note, {}),
        )
        for name in agents:
            if later and not multipliers.get(name, 0.0):
                return name
            p_correct = getattr(self.pool.backend_for(name), "p_correct", None)
            if p_correct is None:
                return agents[0]
            if p_correct(self.pool.spec(name), self.task, context) >= 0.5:
                return name
        return agents[-1]

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
        on the pool, on who wrote the draft and on the examples' variant)."""
        author = self.draft_agent
        variant = self._example_variant()
        key = (author, variant)
        if key in self._system_cache:
            return self._system_cache[key]
        agents = ", ".join(self.pool.names)
        if author is None:
            prompt = ROUTER_SYSTEM.format(agents=agents, example=route_example(self.pool.names))
        else:
            stronger = self.valid_agents()
            if not stronger:
                rule = f"No solver is stronger than {author}: a False verdict ends the work."
            elif self.require_stronger:
                rule = (
                    f"If routing is needed, name exactly one solver stronger than {author}: "
                    f"{', '.join(stronger)}."
                )
            else:
                rule = f"If routing is needed, name exactly one solver: {', '.join(stronger)}."
            prompt = VERIFIER_SYSTEM.format(
                author=author,
                agents=agents,
                routing_rule=rule,
                model_rule=model_rule(stronger),
                examples=verify_examples(stronger, variant),
            )
        self._system_cache[key] = prompt
        return prompt

    def _example_variant(self) -> int:
        """The verify examples' order and wording this turn (``protocol.example_variant``: a
        hash of the task and the turn, drawn before the draft exists; 0 at a route turn)."""
        if self.draft_agent is None or self.task is None:
            return 0
        return example_variant(self.task.id, self.turn)

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

    def solver_request(self, task: Task) -> list[Message]:
        """The messages an agent gets when the controller routes ``task`` to it at the first
        turn (no draft yet). The one-shot routers (``orchenv.agents.routers``) label their
        training tasks with them through this hook, so they import no env package."""
        user = f"Problem:\n{task.prompt}"
        return [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": user}]

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
            self.episodes = 0
        self.task = self.pick_task(options)
        self.episodes += 1
        self.draft = self.draft_agent = self.draft_correct = None
        self.verdict_errors = {"false_rejections": 0, "false_acceptances": 0}
        return {"privileged": {"draft_correct": None}}

    def _resolve_budget(self, agent: str) -> str:
        """The agent that actually serves a call to ``agent`` under enforced usage budgets."""
        if not self.enforce_usage_constraints:
            return agent
        limits, queries = self.usage_constraints, self.usage_budget_queries
        total = sum(self.ledger.values())

        def has_budget(name: str) -> bool:
            if name not in limits:
                return True
            used = self.ledger.get(name, 0)
            if self.usage_denominator == "calls":  # eq. 2: the share after this call <= c_i
                return used + 1 <= limits[name] * (total + 1) + 1e-9
            assert queries is not None
            return used < math.floor(limits[name] * queries)

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

    def _guidance(self, feedback: str, privileged: dict[str, Any]) -> float:
        """What the critique is worth to the next solver (``CallContext.guidance``; simulated
        agents add it to their margin). Judged against the draft's actual error, which is
        privileged: it reaches the simulation and ``info["privileged"]`` only."""
        if self.draft is None or self.critique_bonus == "off":
            return 0.0
        if self.critique_bonus == "fixed":
            return FIXED_FEEDBACK_LOGIT if feedback else 0.0
        assert self.task is not None
        site = None if self.draft_correct else locate_error(self.task, self.draft)
        kind = judge_critique(feedback, site)
        privileged["critique"] = kind
        return self.critique_logits[kind]

    def _call(
        self, requested: str, feedback: str, privileged: dict[str, Any]
    ) -> tuple[str, bool, dict[str, Any]]:
        assert self.task is not None
        agent = self._resolve_budget(requested)
        messages = self._solver_messages(feedback)
        context = CallContext(
            task=self.task,
            turn=self.turn,
            draft=self.draft,
            feedback=feedback or None,
            guidance=self._guidance(feedback, privileged),
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
            example = example_reply(
                self.pool.names if self.draft_agent is None else None,
                self.valid_agents(),
                self._example_variant(),
            )
            error = f"{error.rstrip('.')}. A valid reply now, for example:\n{example}\n"
            components = {"route": 0.0, "verify": 0.0, "usage_penalty": 0.0, "outcome": 0.0}
            if self.reward_variant == "outcome" and self.turn >= self.max_turns:
                reward = components["outcome"] = outcome_reward(  # the draft stands as final
                    self.draft_correct, None, {}, value=self.route_value
                )
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
        outcome = self.reward_variant == "outcome"
        if decision.agent is None:  # accept, or reject with nobody stronger left: stop
            if outcome:  # the draft stands as the final answer
                final = outcome_reward(self.draft_correct, None, {}, value=self.route_value)
                components = {"route": 0.0, "verify": 0.0, "usage_penalty": 0.0, "outcome": final}
                return final, components, True
            components = {"route": 0.0, "verify": r_verify, "usage_penalty": 0.0, "outcome": 0.0}
            return composite_reward(0.0, r_verify, alpha=self.alpha), components, True
        agent, correct, call_extra = self._call(decision.agent, decision.feedback, privileged)
        extra.update(call_extra)
        privileged["response_correct"] = correct
        penalty = usage_penalty(agent, self.multipliers)
        if outcome:
            ending = correct if self.turn >= self.max_turns else None  # the horizon: final
            reward = outcome_reward(ending, agent, self.multipliers, value=self.route_value)
            components = {
                "route": 0.0,
                "verify": 0.0,
                "usage_penalty": penalty,
                "outcome": reward + penalty,
            }
            return reward, components, False
        r_route = routing_reward(correct, value=self.route_value)
        reward = modified_composite_reward(
            r_route, r_verify, agent, self.multipliers, alpha=self.alpha
        )
        components = {
            "route": r_route,
            "verify": r_verify,
            "usage_penalty": penalty,
            "outcome": 0.0,
        }
        return reward, components, False

    def _summary(self) -> dict[str, Any]:
        assert self.task is not None
        final = self.draft
        metrics = {k: float(v) for k, v in self.verdict_errors.items()}
        calls = self.meter.calls
        metrics.update({f"calls/{a}": float(calls.get(a, 0)) for a in self.pool.names})
        metrics["calls/total"] = float(self.meter.total_calls)
        return {
            "final_response": final,
            "final_answer": math_answer(final) if final else None,
            "correct": bool(self.draft_correct),
            "usage_constraints": self.usage_constraints,
            "lifetime_usage": self._lifetime_usage(),
            "level": self.task.level,
            "metrics": metrics,
        }

    def call_charge(self, completion: Completion) -> float:
        """What a call of ``completion.agent`` costs in reward, routed or consulted: lambda_a
        (``reward="outcome"``), alpha * lambda_a (``"paper"``, eq. 3's r~^R inside eq. 1)."""
        penalty = usage_penalty(completion.agent, self.multipliers)
        return penalty if self.reward_variant == "outcome" else self.alpha * penalty

    def consult(self, name: str, messages: Sequence[Message]) -> Completion:
        """``OrchestrationEnv.consult``, also entered in the usage ledger: a consulted call
        counts against eq. (2)'s usage shares as a routed one does."""
        completion = super().consult(name, messages)
        self.ledger[completion.agent] = self.ledger.get(completion.agent, 0) + 1
        return completion

    def _lifetime_usage(self) -> dict[str, Any]:
        """Calls over the env's lifetime as eq. (2)'s share of all calls and per episode
        (the ledger enforcement reads; consulted calls count as routed ones)."""
        names = self.pool.names
        total = sum(self.ledger.get(a, 0) for a in names)
        return {
            "denominator": self.usage_denominator,
            "episodes": self.episodes,
            "share_of_calls": {a: self.ledger.get(a, 0) / max(total, 1) for a in names},
            "calls_per_episode": {a: self.ledger.get(a, 0) / max(self.episodes, 1) for a in names},
        }


def _route_then_accept(rank: str) -> Callable[[OrchestrationEnv], str]:
    """Route to the weakest / middle / strongest agent, then accept whatever it wrote."""

    def policy(env: OrchestrationEnv) -> str:
        assert isinstance(env, MathRouteEnv)
        if env.draft_agent is not None:
            return verdict_text(True)
        names = env.pool.names
        index = {"weakest": 0, "middle": len(names) // 2, "strongest": len(names) - 1}[rank]
        return route_text(names[index])

    policy.__doc__ = f"Route to the {rank} agent, then accept its draft (never reject)."
    return policy


def _always_reject(env: OrchestrationEnv) -> str:
    """Route to the weakest agent, then reject every draft for the next agent up (a bare
    False once nobody is left)."""
    assert isinstance(env, MathRouteEnv)
    if env.draft_agent is None:
        return route_text(env.pool.names[0])
    agents = list(env.pool.stronger_than(env.draft_agent)) or env.valid_agents()
    return verdict_text(False, agents[0] if agents else None)


def _reject_once(env: OrchestrationEnv) -> str:
    """Route to the weakest agent, reject its draft for the next agent up, accept that one."""
    assert isinstance(env, MathRouteEnv)
    if env.draft_agent is None:
        return route_text(env.pool.names[0])
    stronger = list(env.pool.stronger_than(env.draft_agent))
    if env.turn == 1 and stronger:  # the first draft
        return verdict_text(False, stronger[0])
    return verdict_text(True)


def perfect_verifier(env: OrchestrationEnv) -> str:
    """**Privileged** reference, not a shortcut: route to the weakest agent; then accept a
    right draft and reject a wrong one for the next agent up (the cascade with a verifier
    that is never wrong; reads ``draft_correct``, the privileged truth)."""
    assert isinstance(env, MathRouteEnv)
    if env.draft_agent is None:
        return route_text(env.pool.names[0])
    if env.draft_correct:
        return verdict_text(True)
    stronger = env.valid_agents()
    return verdict_text(False, stronger[0] if stronger else None)


def _weakest_then_strongest(env: OrchestrationEnv) -> str:
    """Route to the weakest agent, reject its draft for the strongest, accept that one."""
    assert isinstance(env, MathRouteEnv)
    if env.draft_agent is None:
        return route_text(env.pool.names[0])
    stronger = env.valid_agents()
    if stronger and env.draft_agent == env.pool.names[0]:
        return verdict_text(False, stronger[-1])
    return verdict_text(True)


def _consult_strongest_compare(env: OrchestrationEnv) -> str:
    """Route to the weakest agent; at its draft consult the strongest with the same request
    and accept when the boxed answers agree, else reject for the strongest; then accept."""
    assert isinstance(env, MathRouteEnv)
    names = env.pool.names
    if env.draft_agent is None:
        return route_text(names[0])
    stronger = env.valid_agents()
    if env.draft_agent != names[0] or not stronger:
        return verdict_text(True)
    assert env.task is not None and env.draft is not None
    second = env.consult(names[-1], env.solver_request(env.task))
    mine = math_answer(env.draft)
    if mine is not None and math_answer(second.text) == mine:
        return verdict_text(True)
    return verdict_text(False, stronger[-1])


#: the fixed critique ``blind-critique`` sends, whatever the draft says (issue 38)
BLIND_CRITIQUE = "Step 2 and step 3 look wrong."


def _blind_critique(env: OrchestrationEnv) -> str:
    """Route to the weakest agent; reject its draft for the next agent up with the fixed
    critique BLIND_CRITIQUE (it reads nothing of the draft); accept that one."""
    assert isinstance(env, MathRouteEnv)
    if env.draft_agent is None:
        return route_text(env.pool.names[0])
    stronger = list(env.pool.stronger_than(env.draft_agent))
    if env.turn == 1 and stronger:
        return verdict_text(False, stronger[0], BLIND_CRITIQUE)
    return verdict_text(True)


#: ``length-tell`` accepts drafts of at most this many characters: the median length of the
#: weakest System 1 agent's drafts on 300 train tasks (a threshold a learner could fit)
LENGTH_TELL_CHARS = 290


def _escalate_unless(accept: Callable[[MathRouteEnv], bool]) -> Callable[[OrchestrationEnv], str]:
    def policy(env: OrchestrationEnv) -> str:
        assert isinstance(env, MathRouteEnv)
        if env.draft_agent is None:
            return route_text(env.pool.names[0])
        if accept(env):
            return verdict_text(True)
        stronger = env.valid_agents()
        return verdict_text(False, stronger[0] if stronger else None)

    return policy


def _short_draft(env: MathRouteEnv) -> bool:
    return len(env.draft or "") <= LENGTH_TELL_CHARS


def _whole_number_answer(env: MathRouteEnv) -> bool:
    answer = math_answer(env.draft) if env.draft else None
    return answer is not None and answer.strip().lstrip("-").isdigit()


_length_tell = _escalate_unless(_short_draft)
_length_tell.__doc__ = (
    "Weakest first; accept a draft of at most LENGTH_TELL_CHARS characters, else one step up."
)
_answer_form_tell = _escalate_unless(_whole_number_answer)
_answer_form_tell.__doc__ = (
    "Weakest first; accept a draft whose boxed answer is a whole number, else one step up."
)
