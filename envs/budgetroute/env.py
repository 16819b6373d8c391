"""``orch/BudgetRoute-v0``: a budget-controllable controller that consults paid experts.

Seed 001 (CoRL; sections 3.1-3.3, Table 2, appendix A) as a Gymnasium
environment. The prompts and the action parser are in ``protocol.py``; the
rewards, budgets and defaults follow the paper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from orchenv.backends.simulated import SimulatedBackend, estimate_prompt_tokens
from orchenv.core import OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.budgetroute.experts import (
    KeyStepReply,
    canonical_requests,
    finish_request,
    judge,
    partial_work,
    task_key_step,
)
from orchenv.envs.budgetroute.protocol import (
    CONTROLLER_SYSTEM,
    EXPERT_SYSTEM,
    FORMAT_REMINDER,
    GENERIC_GUIDANCE,
    PROMPT_STYLES,
    answer_verdict,
    example_replies,
    parse_action,
)
from orchenv.envs.budgetroute.strategies import budget_blind_plan, shortcuts
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, extract_boxed, math_answer
from orchenv.pool import AgentSpec, CallContext, Message

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Appendix A: per-query cost budgets (USD) of the multi-expert study
DEFAULT_BUDGETS: dict[str, float] = {"low": 0.001, "medium": 0.006, "high": 1000.0}
#: Table 2: the controller (Qwen2.5-7B-Instruct) alone solves 70.8% of MATH500
CONTROLLER_ACCURACY = 0.708
#: the audit's realistic skill level (``BudgetRouteEnv.realistic_skill``): see the source
REALISTIC_SKILL = 0.5
REALISTIC_SKILL_SOURCE = (
    "seed 001, Table 2 (MATH500): CoRL's high-budget mode reaches pass@1 0.958, the one "
    "mode whose spending stays within its budget (its low and medium modes spend $0.0093 and "
    "$0.0125 per query, above $0.001 and $0.006), so the one where its accuracy is its eq. 7 "
    "reward. In the high mode the skill reference reaches that accuracy at s = 0.5 (0.960 "
    "+- 0.016 on the first 600 test tasks; 0.948 at s = 0.4, 0.968 at 0.6: "
    "docs/budgetroute.md). A calibration of s to the paper's number, not a measured skill."
)
#: the discrete choices per expert, after the two answer choices (``action_choices``)
REQUEST_KINDS = ("whole", "pointed", "key-step", "finish")


def simulated_behind(backend: Any) -> SimulatedBackend | None:
    """The simulated backend that answers for ``backend``: itself, or the one inside
    ``orchenv submit``'s recording wrapper (``inner``) or ``orchenv verify``'s checking
    wrapper (``simulators["simulated"]``); ``None`` for any other backend. The controller's
    own answer is a free simulated call, so recording or verifying a run must not take it
    away (before, a wrapped backend masked the answer-alone choice, and a run that answered
    alone could not be submitted)."""
    for _ in range(4):  # wrappers nest at most a few deep
        if isinstance(backend, SimulatedBackend):
            return backend
        inner = getattr(backend, "inner", None)
        if inner is None:
            simulators = getattr(backend, "simulators", None)
            inner = simulators.get("simulated") if isinstance(simulators, dict) else None
        if inner is None:
            return None
        backend = inner
    return None


class BudgetRouteEnv(OrchestrationEnv):
    """Answer a math problem, consulting paid experts under a per-query dollar budget.

    ## Description
    A controller LLM (seed 001, CoRL) faces a math problem and a budget mode
    (``low`` / ``medium`` / ``high``) stated in its prompt. Each turn (a "round"
    in its prompt) it either sends a sub-query to one expert of the pool (its
    reply joins the context of the next turn) or gives its own final answer,
    which ends the episode. The controller is the policy: the environment never
    solves the problem for it.

    Experts answer the sub-query they are sent (``experts.py``): with a simulated
    pool the env judges the sub-query against the task (privileged: the task's key
    step, its reference solution, which earlier replies were right) and passes the
    verdict to the expert as ``CallContext.guidance``, a logit added to its margin.
    A sub-query that names the problem's key step helps (+1); one that asks for
    the key step alone (+1.75) gets back the work up to that step, without a
    final answer; one that hands such work to an expert to finish helps if that
    step was right (+1.75) and misleads if it was wrong (-1.75); one that names a
    wrong method misleads (-1), one that names many at once buries the problem
    (-3), one that leaves out part of the problem's data or of what it asks hurts
    (-3), and an empty, generic or unrelated one, or the problem's numbers without
    its words and operators, is answered as something else (-12). The judge reads
    content, not wording: order, politeness, LaTeX or not, and inflection do not
    matter (``experts.content``). So
    decomposing a problem into two cheap calls (key step, then finish) can beat
    one expensive call. Live experts ignore the guidance (they read the sub-query
    itself).

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
    budget mode and the experts with their prices and the expected cost of one
    call on this problem (from each expert's calibrated mean completion length,
    where the pool has one), the problem, the turns
    used, and the transcript so far (sub-queries and expert replies);
    ``info["messages"]`` holds the same as chat messages. ``info["phase"]``
    is always ``"act"``; ``info["valid_agents"]`` lists the experts.

    ## Rewards
    Only at the episode's end (eq. 5-7 of seed 001): ``R = r_perf * r_cost``
    with ``r_perf`` = 1 if the final answer is correct else 0 (an answer too large
    to check, or whose check runs out of time, is wrong, and so is an expression still to
    evaluate where the reference is a plain value, e.g. the problem's expression copied
    back; ``info["grading"]`` then says ``"too-large"``, ``"timeout"`` or
    ``"unevaluated"``) and
    ``r_cost`` = 1 if the episode's dollar cost (the sum of the expert calls'
    ``cost_usd``; the controller is free) is at most the budget of the
    episode's mode, else 0. Intermediate steps give 0. A malformed action
    adds ``format_penalty`` (default 0.0: the paper uses no format reward) to
    that step's reward. ``info["budget_mode"]`` and ``info["budget_usd"]`` are
    reported at every step. The per-step expert-call vector is
    ``info["constraint_costs"]``. ``info["privileged"]`` (for oracles, never for
    controllers) says whether an expert's reply was right (``expert_correct``), how
    the sub-query was judged (``request``) and the logit it earned (``guidance``).

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
    - ``budgets``: budget mode -> USD per query (default appendix A: low 0.001,
      medium 0.006, high 1000).
    - ``budget_mode``: ``None`` (default) draws the mode uniformly per episode
      from the env's ``np_random``; a mode name fixes it;
      ``reset(options={"budget_mode": ...})`` overrides both.
    - ``prompt_style``: how the prompt states the budget mode: ``"guidance"`` (default;
      section 4.5's Prompt B, prefer / avoid experts) or ``"hard"`` (Prompt A, a rule:
      no expert in low, always one in high; ``protocol.HARD_MODE_GUIDANCE``).
    - ``controller_accuracy``: how often the controller model solves a problem on
      its own (default 0.708, Table 2's Qwen2.5-7B-Instruct on MATH500); it only
      drives the discrete "answer yourself" choice with a simulated pool (``None``:
      no such choice).
    - ``max_reply_chars``: how much of each expert reply the controller sees
      (default 4000).

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``), built from
    the problem text and the transcript, never from the gold answer: 0 answer with
    the controller model's own solution (simulated pools only: a free simulated
    call at ``controller_accuracy``); 1 answer with the latest final answer an
    expert gave; then, per expert (weakest first), ask it the whole problem, the
    problem with its key step named, the key step alone, or to finish from the
    latest key step worked out (``REQUEST_KINDS``). The key step is read from the
    problem text (``experts.key_step_for``; ``None`` where it knows none); asking
    is masked on the last turn. ``audit_strategies()`` names the shortcuts the audit
    compares with its skill reference (``skill_action``: the cheapest affordable request
    that will be right, from the privileged truth, or the budget-blind nano decomposition;
    ``realistic_skill`` 0.5, calibrated to Table 2's high mode). The budget-blind plans
    come within 0.05 of it: by the paper's costs and budgets the budget mode is worth about
    0.03 (docs/budgetroute.md).

    ## Shared arguments
    - ``pool``: a preset (default ``"corl"``: o3 / GPT-4.1 / GPT-4.1-nano with public prices),
      pool file or ``AgentPool``; its agents are the experts.
    - ``max_turns``: rounds per episode (default 3: an assumption, seed 001 states no limit on
      rounds; docs/budgetroute.md measures 2 to 5).

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``max_rounds``), and reaching it without an answer is
      ``truncated`` (it was ``terminated``); ``info["metrics"]`` is new. Since issue
      14 experts answer the sub-query they are sent (before, a simulated expert
      answered the original problem whatever it was asked), the prompt shows each
      expert's expected cost per call, and the env has a discrete action set. Since issue
      25 a sub-query of the problem's numbers alone is unrelated (before: the whole
      problem), an unevaluated expression is not a final answer, and the env has a skill
      reference (``skill_action``).
      Issue 38: consulted calls use up the episode's expert calls (``calls_left``);
      simulated token counts follow the text (costs within the reproduction's intervals).
    """

    format_reminder = FORMAT_REMINDER

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "pool": "corl",
        "task_source": "procedural-math",
        "max_turns": 3,
    }

    def __init__(
        self,
        *,
        budgets: Mapping[str, float] | None = None,
        budget_mode: str | None = None,
        prompt_style: str = "guidance",
        controller_accuracy: float | None = CONTROLLER_ACCURACY,
        max_reply_chars: int = 4000,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        self.budgets = dict(DEFAULT_BUDGETS if budgets is None else budgets)
        if not self.budgets:
            raise ConfigError("budgets must name at least one budget mode")
        for mode, usd in self.budgets.items():
            if not isinstance(usd, (int, float)) or not usd >= 0:
                raise ConfigError(f"budget for mode {mode!r} must be a number >= 0, got {usd!r}")
        if budget_mode is not None and budget_mode not in self.budgets:
            raise UnknownNameError("budget mode", budget_mode, self.budgets)
        self.fixed_budget_mode = budget_mode
        if prompt_style not in PROMPT_STYLES:
            raise UnknownNameError("prompt style", prompt_style, PROMPT_STYLES)
        self.prompt_style = prompt_style
        self.max_reply_chars = max_reply_chars
        if controller_accuracy is not None and not 0.0 < controller_accuracy < 1.0:
            raise ConfigError(
                f"controller_accuracy must lie strictly between 0 and 1, got {controller_accuracy!r}"
            )
        self.controller_accuracy = controller_accuracy
        # episode state
        self.budget_mode: str | None = None
        self.history: list[tuple[str, str, str]] = []  # (expert, sub-query, reply)
        self.answer: str | None = None  # the controller's final answer, once given
        self.correct = False  # whether that answer is right
        self.key_step_replies: list[KeyStepReply] = []  # replies to key-step requests
        self._own_answer: str | None = None  # the controller model's own answer, once drawn

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

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def own_answer(self) -> str | None:
        """The controller model's own final answer to this problem, or ``None``.

        The discrete stand-in for a controller that answers by itself: with a simulated
        pool, a free (unmetered) simulated call of a "controller" agent calibrated to
        ``controller_accuracy``, drawn once per episode. Like every simulated agent it is
        right or wrong by the calibrated outcome model (which knows the task); the env's
        choice code itself never reads the gold answer. ``None`` with other pools (a live
        controller writes its own answer).
        """
        if self.task is None or self.controller_accuracy is None:
            return None
        if self._own_answer is None:
            backend = simulated_behind(self.pool.backend_for(self.pool.weakest()))
            if backend is None:
                return None
            spec = AgentSpec(
                name="controller",
                model="controller",
                tier=0,
                calibration={"accuracy": float(self.controller_accuracy)},
            )
            context = CallContext(task=self.task, turn=self.turn)
            text = backend.complete(spec, self._expert_messages(self.task.prompt), context).text
            self._own_answer = extract_boxed(text) or ""
        return self._own_answer or None

    def last_answer(self) -> str | None:
        """The latest final answer (``\\boxed``) an expert's reply shows, or ``None``."""
        for _, _, reply in reversed(self.history):
            boxed = extract_boxed(reply)
            if boxed:
                return boxed
        return None

    def action_choices(self) -> list[str | None]:
        """Answer with the own solution; answer with the latest expert answer; then per
        expert (weakest first) each of ``REQUEST_KINDS``. See "Discrete actions" above."""
        size = 2 + len(REQUEST_KINDS) * len(self.pool.names)
        if self.task is None:
            return [None] * size
        own, last = self.own_answer(), self.last_answer()
        choices: list[str | None] = [
            None if own is None else f"<answer>{own}</answer>",
            None if last is None else f"<answer>{last}</answer>",
        ]
        requests = canonical_requests(self.task.prompt)
        if self.key_step_replies:
            requests["finish"] = finish_request(self.task.prompt, self.key_step_replies[-1].shown)
        can_ask = not self.is_last_turn and self.calls_left() > 0
        for name in self.pool.names:
            for kind in REQUEST_KINDS:
                query = requests.get(kind)
                choices.append(f"<search>{name}: {query}</search>" if can_ask and query else None)
        return choices

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``strategies.py``)."""
        return shortcuts(self.pool.weakest(), self.pool.strongest())

    # -- the audit's skill reference (issue 25) ---------------------------------------------
    #: the share of decisions taken with the paper's skill (see ``realistic_skill_source``)
    realistic_skill = REALISTIC_SKILL
    realistic_skill_source = REALISTIC_SKILL_SOURCE

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The audit's skill reference (issue 25). Skilled, with the privileged truth: answer
        with an answer known right (the latest expert's, else the controller's own); else ask
        the cheapest expert whose expected call cost fits what is left of this mode's budget
        and that will be right (the simulated backend's ``is_correct`` for the request: the
        key step named, the finish of a worked key step, or the whole problem); else the one
        most likely right (``p_correct``) that fits; with nothing affordable, answer. Unskilled (budget-blind, reads no
        truth): the best fixed plan over the modes, the cheapest expert's key step, its
        finish, then its answer (``budget_blind_plan``). ``None`` before a reset."""
        if self.task is None:
            return None
        if not skilled:
            return budget_blind_plan(self)
        return self._skilled_action()

    def _skilled_action(self) -> str:
        assert self.task is not None and self.budget_usd is not None
        answers = self.task.answers
        last, own = self.last_answer(), self.own_answer()
        for known in (last, own):
            if known is not None and answer_verdict(known, answers).equal:
                return f"<answer>{known}</answer>"
        fallback = f"<answer>{last or own or '0'}</answer>"
        if self.is_last_turn:
            return fallback
        requests = canonical_requests(self.task.prompt)
        if self.key_step_replies:
            requests["finish"] = finish_request(self.task.prompt, self.key_step_replies[-1].shown)
        meta = self.task.meta
        step = task_key_step(self.task.prompt, meta.get("family"), meta.get("solution"))
        left = self.budget_usd - self.meter.cost_usd
        turns_left = self.max_turns - self.turn  # this one included; the last one answers
        # (cost, right, p, action) of each way to ask: one call, or a key step then its finish
        candidates: list[tuple[float, bool, float, str]] = []
        for name in self.pool.names:
            backend = self.pool.backend_for(name)
            expected = self.expected_call_cost(name)
            if not isinstance(backend, SimulatedBackend) or expected is None:
                continue
            spec = self.pool.spec(name)

            def outcome(query: str, spec: AgentSpec = spec, backend: Any = backend) -> tuple:
                assert self.task is not None
                guidance = judge(query, self.task.prompt, step, self.key_step_replies).guidance
                context = CallContext(task=self.task, turn=self.turn, guidance=guidance)
                return backend.is_correct(spec, self.task, context), backend.p_correct(
                    spec, self.task, context
                )

            for kind in ("finish", "pointed", "whole"):
                query = requests.get(kind)
                if query and expected <= left:
                    candidates.append(
                        (expected, *outcome(query), f"<search>{name}: {query}</search>")
                    )
            query = requests.get("key-step")
            if query and 2 * expected <= left and turns_left >= 3:
                # the key step is right, then so is its finish, exactly when one call at the
                # key step's guidance is (the simulated luck is the same for both calls)
                candidates.append(
                    (2 * expected, *outcome(query), f"<search>{name}: {query}</search>")
                )
        right = [c for c in candidates if c[1]]
        if right:
            return min(right, key=lambda c: (c[0], -c[2]))[3]
        best = max(candidates, key=lambda c: c[2], default=None)
        return best[3] if best is not None else fallback

    def observation_features(self) -> np.ndarray:
        """The budget mode (one-hot over ``budgets``), the share of the budget spent
        (clipped to 2), and whether a key step has been worked out."""
        modes = [1.0 if mode == self.budget_mode else 0.0 for mode in self.budgets]
        budget = self.budget_usd or 0.0
        spent = min(2.0, self.meter.cost_usd / budget) if budget > 0 else 0.0
        return np.array([*modes, spent, float(bool(self.key_step_replies))], dtype=np.float32)

    # -- prompts ----------------------------------------------------------------------
    def _system_prompt(self) -> str:
        assert self.budget_mode is not None
        lines = []
        for name in reversed(self.pool.names):  # strongest first
            spec = self.pool.spec(name)
            line = f"- {name}: ${spec.price_prompt:g} / ${spec.price_completion:g}"
            expected = self.expected_call_cost(name)
            if expected is not None:
                line += f"; about ${expected:.4f} per call"
            lines.append(line)
        search, answer = example_replies(self.pool.names)
        return CONTROLLER_SYSTEM.format(
            mode=self.budget_mode,
            guidance=PROMPT_STYLES[self.prompt_style].get(self.budget_mode, GENERIC_GUIDANCE),
            experts="\n".join(lines),
            max_turns=self.max_turns,
            search_example=search,
            answer_example=answer,
        )

    def expected_call_cost(self, expert: str) -> float | None:
        """The expected dollar cost of asking ``expert`` this problem: its calibrated mean
        completion length at its prices (``None`` for an expert without one, e.g. live)."""
        spec = self.pool.spec(expert)
        mean = spec.calibration.get("mean_completion_tokens")
        if mean is None or self.task is None:
            return None
        prompt = estimate_prompt_tokens(self._expert_messages(self.task.prompt))
        return spec.cost(prompt, round(float(mean)))

    @staticmethod
    def _expert_messages(query: str) -> list[Message]:
        return [{"role": "system", "content": EXPERT_SYSTEM}, {"role": "user", "content": query}]

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
        self.key_step_replies = []
        self._own_answer = None
        return {}

    def calls_left(self) -> int:
        """Expert calls the episode may still make: one per turn but the last (which can only
        answer), routed and consulted alike (a consult's dollars are in ``self.meter`` and so
        in the budget check too)."""
        return max(0, self.max_turns - 1 - len(self.history) - len(self.consulted))

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
            search, answer = example_replies(self.pool.names)
            error = (
                f"{(error or 'malformed reply').rstrip('.')}. A valid reply now, for example:\n"
                f"{search}\nor\n{answer}\n"
            )
            return Outcome(error=error, info=info)
        if parsed.kind == "answer":
            self.answer = parsed.text
            verdict = answer_verdict(parsed.text, self.task.answers)
            self.correct = verdict.equal
            if verdict.status != "ok":  # refused or timed out: counted wrong, and said so
                info["grading"] = verdict.status
            r_perf, r_cost = self._rewards()
            return Outcome(reward=r_perf * r_cost, done=True, info=info)
        assert parsed.expert is not None
        if self.turn >= self.max_turns or self.calls_left() <= 0:
            info["unexecuted_search"] = parsed.expert  # no turn (or call) left for the reply
            return Outcome(info=info)
        meta = self.task.meta
        step = task_key_step(self.task.prompt, meta.get("family"), meta.get("solution"))
        judged = judge(parsed.text, self.task.prompt, step, self.key_step_replies)
        context = CallContext(task=self.task, turn=self.turn, guidance=judged.guidance)
        completion = self.call_agent(parsed.expert, self._expert_messages(parsed.text), context)
        reply = completion.text
        if judged.kind == "key-step":
            right = completion.meta.get("correct")  # a simulated expert's (privileged) outcome
            if right is not None:  # it wrote the whole solution: show the work up to the step
                reply = partial_work(reply)
            shown = reply[: self.max_reply_chars]
            self.key_step_replies.append(
                KeyStepReply(shown, None if right is None else bool(right))
            )
        self.history.append((parsed.expert, parsed.text, reply[: self.max_reply_chars]))
        info["called_agent"] = parsed.expert
        privileged["expert_correct"] = check_math_solution(completion.text, self.task.answers)
        privileged["request"] = judged.kind
        privileged["guidance"] = judged.guidance
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
