"""``orch/OrchMAS-v0``: dynamic role and prompt generation for one executor LLM.

Seed 002 (OrchMAS, sections 3.1-3.2, Table 2, section 4.1) as a Gymnasium
environment. The prompts and parsers are in ``protocol.py``, the simulated
executor and the default pool in ``executor.py``, the short-answer QA source in
``qa.py``. The action protocol, the 5-turn limit and the format-gated F1 reward
follow the paper. The paper's reward formulas were lost in text extraction; the
reconstruction is documented in ``OrchMASEnv`` (## Rewards).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.orchmas.choices import (
    CHOICE_ROLES,
    SUBQUESTION_PREFIX,
    answer_text,
    call_text,
    canonical_choices,
    next_subquestion,
    shortcuts,
)
from orchenv.envs.orchmas.executor import orchmas_pool, task_domain
from orchenv.envs.orchmas.metrics import cosine_score, load_embedder
from orchenv.envs.orchmas.paraphrase import rewording_strategies
from orchenv.envs.orchmas.protocol import (
    CONTROLLER_SYSTEM,
    EXECUTOR_SYSTEM,
    answer_format,
    call_action,
    example_answer,
    example_call,
    parse_call,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import exact_match, extract_boxed, f1_score, match_any
from orchenv.parsing import extract_tag, is_placeholder
from orchenv.pool import AgentPool, CallContext, Message

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DEMO_ROLES",
    "GATES",
    "HIDDEN_REPLY",
    "MATH_PRECISIONS",
    "SUMMARY_METRICS",
    "OrchMASEnv",
]

#: ``gate``: "final-checks" opens the precision gate only when the format reward is at its
#: cap *and* the final turn passed B_m, B_v and I_c; "cap" is eq. (13) read literally
#: (the cap alone, which four well-formed calls reach with the default constants)
GATES = ("final-checks", "cap")
#: ``math_precision``: "f1" (eq. 11-12, token F1, 1 for an equivalent answer) or "exact"
MATH_PRECISIONS = ("f1", "exact")
#: ``summary_metric``: "cosine" (section 4.1) or "f1" for tasks with ``meta["metric"]="cosine"``
SUMMARY_METRICS = ("cosine", "f1")

#: what the orchestrator sees of a reply with ``feedback=False`` (Table 5, "- Environment")
HIDDEN_REPLY = "[the executor replied; its reply is not shown (feedback is off)]"

#: the role ``skill_action`` gives each task domain (each fits it in ``executor.role_fit``)
SKILL_ROLES = {
    "math": "math solver",
    "multihop": "researcher",
    "factoid": "researcher",
    "reading": "reading comprehension expert",
    "summarization": "summarizer",
    "geography": "geographer",
    "economics": "economist",
    "linguistics": "linguist",
}
#: ``OrchMASEnv.realistic_skill`` and where it comes from (measured; docs/orchmas.md)
REALISTIC_SKILL = 0.9
REALISTIC_SKILL_SOURCE = (
    "measured in orchenv, not from the paper (which reports no role or decomposition "
    "accuracy): the observation-only scripted orchestrator (role read from the question's "
    "wording, sub-questions with the bridge entity from the executor's replies; "
    "scripted.decompose_orchestrator) returns 0.790 +- 0.033 on the default test split "
    "(600 episodes), between the skill reference at s = 0.9 (0.777 +- 0.033) and s = 1 "
    "(0.810 +- 0.031); rounded down to 0.9"
)

#: roles demo_action picks from (generic, domain-fitting, mismatched, empty)
DEMO_ROLES = (
    "assistant",
    "math solver",
    "careful mathematician",
    "geography researcher",
    "economics expert",
    "linguist",
    "verifier",
    "",
)


class OrchMASEnv(OrchestrationEnv):
    """Give an executor LLM a free-form role and request each turn, then answer.

    ## Description
    OrchMAS (seed 002): an orchestrator coordinates an external executor LLM
    by generating, at every turn, a role for it (free text, learned: "math
    solver", "researcher", "verifier", ...) and a request. The executor sees a
    system prompt built from the role (Table 2(b), reworded), the earlier
    request/reply pairs as chat history, and the new request; its reply comes
    back inside ``<interaction_response>...</interaction_response>``. The
    orchestrator stops by writing the final answer. Tasks (``task_source="orchmas-qa"``,
    ``qa.orchmas_qa_source``): by default procedural math and multi-hop questions with a
    gold hop chain (``SyntheticMultihopSource``) interleaved; or one of the paper's
    datasets from local files (2Wiki, HotpotQA, MuSiQue, GSM8K, PopQA, TriviaQA, SQuAD v2,
    XSum-style summaries), or ``"procedural-math"`` alone. docs/orchmas.md has the details.

    ## Action format
    Table 2(a). A call:
    ``<think>...</think><interaction_prompt>{"name": "prompt_dynamic",
    "arguments": {"prompt": "...", "agent_role": "..."}}</interaction_prompt>``;
    the final answer: ``<think>...</think><answer>...</answer>``. Any text with
    an ``<answer>...</answer>`` ends the episode (its format is scored). Without
    one, invalid JSON, a wrong ``name``, a missing or empty ``prompt`` or a
    non-string ``agent_role`` make the action invalid: nobody is called, the
    turn is used, ``format_penalty`` is added to the step's reward,
    ``info["parse_error"]`` says what was expected and the next observation
    repeats it. The notice is written so that it is not itself a usable action
    (no tags, placeholders instead of JSON strings): a policy that copies it back
    makes another invalid action. An empty role is allowed (the executor is called
    with a blank role) but earns no format credit.

    ## Observation
    The orchestrator's chat (``info["messages"]``; the observation string joins
    their contents): the instructions, the question, then every turn as the policy
    wrote it, verbatim, as an ``assistant`` message, each followed by a ``user``
    message with the executor's reply in ``<interaction_response>`` (or why the
    turn could not be used). ``info["phase"]`` is always ``"act"``;
    ``info["valid_agents"]`` is ``[executor]``.

    ## Rewards
    Eq. (10)-(13), reconstructed. Format reward
    ``R_fmt = min(kappa, alpha * sum_t Lambda_t + beta * B_m + gamma * B_v + delta * I_c)``
    with Lambda_t = 1 for an interaction turn with non-empty ``<think>``, valid
    call JSON and a non-empty role; B_m = the final turn has exactly one
    balanced ``<think>`` and exactly one ``<answer>`` block (no interaction tag); B_v =
    the answer is non-empty; I_c = non-empty think and no text outside the tags.
    Precision ``R_prec = max_ref F1(Std(answer), Std(ref))``: token F1 after
    ``normalize_text`` for every task; math tasks also report exact equality
    (``math_equal``; an equal answer has F1 1; an answer too large to check, or
    whose check runs out of time, is not equal and ``info["grading"]`` says
    ``"too-large"`` or ``"timeout"``); summaries (``meta["metric"] == "cosine"``)
    are scored by embedding cosine. Gated aggregate
    ``R = -kappa + R_fmt + [gate] * R_prec`` where, by default
    (``gate="final-checks"``), the gate opens only when ``R_fmt == kappa`` *and*
    the final turn passed B_m, B_v and I_c: the paper says precision counts only
    when the format prerequisites are "completely and correctly fulfilled", and
    with the default constants four well-formed calls reach the cap alone, so
    eq. (13) read literally (``gate="cap"``) pays ``garbage <answer>X</answer>
    garbage`` in full. Defaults (assumptions; the paper gives no values): kappa
    = 0.4, alpha = beta = gamma = delta = 0.1, so full format credit needs at
    least one well-formed executor call and a clean final turn. The return is
    paid out per step so that it sums to R: each turn pays ``-kappa /
    max_turns`` plus the increase of the capped format reward; the answering
    step adds the unpaid rest of ``-kappa`` and the gated precision. A malformed
    turn therefore gets ``-kappa / max_turns`` (plus ``format_penalty``, default
    0). ``info["reward_components"]`` splits each step's reward into ``base``,
    ``format`` and ``precision``.

    ## Episode end
    ``terminated`` by an answer; ``truncated`` after ``max_turns`` turns without
    one (score 0). The turn budget is the paper's "at most 5 agent turns" read as
    5 executor calls plus the answer turn (``max_calls=5``, ``max_turns=6``;
    docs/orchmas.md). ``info`` then holds ``final_answer``, ``correct`` (exact
    match for text, math equivalence for math), ``em``, ``f1`` (token F1),
    ``score`` (the precision the gate pays: F1, or cosine for summaries),
    ``format_reward``, ``gate``, ``turns``, the usage figures and ``metrics``:
    ``f1``, ``em``, ``precision``, ``format_reward``, ``gate`` (1 when the
    gate opened), ``executor_calls`` and, for summaries, ``cos``.

    ## Arguments
    - ``executor``: the pool agent to call (default: the pool's strongest).
    - ``max_calls``: executor calls per episode (default 5, section 4.1); the
      episode has ``max_calls + 1`` turns.
    - ``gate``: ``"final-checks"`` (default) or ``"cap"`` (see Rewards).
    - ``math_precision``: ``"f1"`` (default, eq. 11-12) or ``"exact"`` (pay the
      exact match on math tasks, the earlier behaviour).
    - ``summary_metric``: ``"cosine"`` (default, section 4.1; needs the ``embed``
      extra) or ``"f1"`` for tasks marked ``meta["metric"] == "cosine"``.
    - ``kappa``: the format-reward cap and the per-episode base cost (default 0.4).
    - ``alpha``, ``beta``, ``gamma``, ``delta``: the weights of Lambda_t, B_m,
      B_v and I_c in the format reward (default 0.1 each).
    - ``executor_accuracy``: the default pool's calibration accuracy, in (0, 1)
      (default 0.6): a one-shot call with a generic role on a one-hop task.
    - ``max_reply_chars``: how much of each executor reply the orchestrator
      sees (default 4000).
    - ``fixed_role``: ``None`` (default: the role the orchestrator writes is sent) or a
      role sent with every call whatever the orchestrator writes (Table 5's "- Agent
      Roles" ablation; the format reward still reads the orchestrator's own text).
    - ``feedback``: ``True`` (default) or ``False`` for Table 5's "- Environment"
      ablation: the orchestrator does not see the executor's replies (each shows as
      ``HIDDEN_REPLY``; ``action_choices`` and ``observation_features`` read no reply),
      so the pipeline runs open-loop, and the answer graded is the executor's last boxed
      answer (the last call's answer is the system's), else the orchestrator's own.

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``; ``choices.py``),
    built from the question and the executor's replies, never from the reference: 0 answer
    with the executor's last boxed answer (``"unknown"`` before any); then a call with each
    role of ``CHOICE_ROLES`` (generic, math, research, reading) asking it to solve the
    question; then the same roles asking it to verify its previous answer (masked until it
    has replied); then the same roles asking the next sub-question of a multi-hop
    question (the gold hop question with the bridge entity taken from the executor's last
    answer; masked for other tasks). Calls are masked on the last turn.
    ``audit_strategies()`` names the shortcuts the audit must find clearly worse than the
    skill reference (``control_strategies()`` holds ``legit-paraphrased-subquestions``, an
    honest plan in natural wording that should reach it); ``skill_action`` is the audit's skill reference
    (the fitting role and the gold chain's next sub-question, or the generic role and the
    whole question), ``realistic_skill`` its realistic level (0.9, measured:
    ``REALISTIC_SKILL_SOURCE``); ``observation_features()`` adds the calls so far and
    whether the last reply holds an answer.

    ## Shared arguments
    - ``pool``: ``"orchmas"`` (default) builds the one-executor pool in code
      (``executor.orchmas_pool``: Qwen2.5-7B-Instruct, calibration accuracy
      ``executor_accuracy``, ``RoleAwareExecutorBackend``, which reads the request: whether it
      carries the question or a correct sub-question of the task's hop chain, the role's fit, a
      verification request, the evidence of earlier replies; an irrelevant request gets no
      answer); another preset name, a pool file or an ``AgentPool`` is accepted.
    - ``task_source``: ``"orchmas-qa"`` by default (math and multi-hop interleaved);
      ``task_source_kwargs={"dataset": ..., "path": ...}`` picks another set.
    - ``max_turns``: orchestrator turns, answer turn included; overrides ``max_calls`` when
      given (``max_turns=5`` is the earlier budget of 4 calls).
    - ``backend``: not available with ``pool="orchmas"``, whose backend is built in code;
      ``backend_kwargs`` there: ``seed`` and the ``RoleAwareExecutorBackend`` logits.

    ## Version history
    - v0: initial version. Since the one-shape refactor, reaching ``max_turns``
      without an answer is ``truncated`` (it was ``terminated``); the
      ``format_penalty`` and ``backend`` arguments and ``info["metrics"]`` are
      new; ``reward_components`` always has a ``precision`` entry; the notice
      after an unusable action ends with "Reply again in the required format."
      Issue 15: the executor reads the request; the default tasks are math and
      multi-hop (the made-up-countries set is ``dataset="countries"``); the gate
      needs the final turn's checks; math precision is token F1; 5 calls plus
      the answer turn (was 5 turns in all); turns kept verbatim; the notice is
      not an action; ``metrics["precision"]`` is new. Issue 19: ``fixed_role`` and
      ``feedback`` (Table 5's ablations; the defaults keep the earlier behaviour).
      Issue 25: a role naming several unrelated domains is generic, not fitting; a
      sub-question is read by its entity and relation in any wording (``relations.py``);
      ``skill_action``, ``realistic_skill`` and three more audit strategies.
      Issue 38: consulted calls count against ``max_calls`` (``calls_left``); a call
      past ``max_calls`` (also the unread one at the last turn) is refused.
    """

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "pool": "orchmas",
        "task_source": "orchmas-qa",
        "max_turns": None,
    }

    def __init__(
        self,
        *,
        executor: str | None = None,
        max_calls: int = 5,
        gate: str = "final-checks",
        math_precision: str = "f1",
        summary_metric: str = "cosine",
        kappa: float = 0.4,
        alpha: float = 0.1,
        beta: float = 0.1,
        gamma: float = 0.1,
        delta: float = 0.1,
        executor_accuracy: float = 0.6,
        max_reply_chars: int = 4000,
        fixed_role: str | None = None,
        feedback: bool = True,
        **shared: Unpack[SharedArguments],
    ) -> None:
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0:
            raise ConfigError(f"max_calls must be an int >= 0, got {max_calls!r}")
        if shared.get("max_turns") is None:  # the horizon follows the call budget
            shared["max_turns"] = max_calls + 1
        super().__init__(**shared)
        for label, value, allowed in (
            ("gate", gate, GATES),
            ("math_precision", math_precision, MATH_PRECISIONS),
            ("summary_metric", summary_metric, SUMMARY_METRICS),
        ):
            if value not in allowed:
                raise ConfigError(f"{label} must be one of {', '.join(allowed)}; got {value!r}")
        self.gate_rule, self.math_precision, self.summary_metric = (
            gate,
            math_precision,
            summary_metric,
        )
        if kappa <= 0:
            raise ConfigError(f"kappa must be > 0, got {kappa}")
        if min(alpha, beta, gamma, delta) < 0:
            raise ConfigError("alpha, beta, gamma and delta must be >= 0")
        if not 0.0 < executor_accuracy < 1.0:
            raise ConfigError(f"executor_accuracy must lie in (0, 1), got {executor_accuracy}")
        if self._pool_arg == "orchmas" and self._backend is not None:
            raise ConfigError(
                'backend overrides a preset\'s backends; pool="orchmas" is built in code '
                "with the simulated executor (pass a preset, a pool file or an AgentPool)"
            )
        self._executor_arg = executor
        self.kappa, self.alpha, self.beta, self.gamma, self.delta = kappa, alpha, beta, gamma, delta
        self.executor_accuracy = executor_accuracy
        self.max_reply_chars = max_reply_chars
        if fixed_role is not None and not isinstance(fixed_role, str):
            raise ConfigError(f"fixed_role must be a string or None, got {fixed_role!r}")
        if not isinstance(feedback, bool):
            raise ConfigError(f"feedback must be True or False, got {feedback!r}")
        self.fixed_role, self.feedback = fixed_role, feedback
        # episode state
        self.history: list[dict[str, Any]] = []  # one entry per turn
        self.format_sum = 0.0  # uncapped alpha * sum Lambda_t (+ final-turn terms)
        self.final_checks: tuple[bool, bool, bool] | None = None  # (B_m, B_v, I_c) of the answer
        self.answer: str | None = None  # the final answer, once given
        self.grade: tuple[bool, float] = (False, 0.0)  # its (exact match, precision)
        self.extra_metrics: dict[str, float] = {}  # token F1 / cosine of the answer
        self._embedder: Any = None  # the cosine metric's model, loaded on first use

    def _build_pool(self) -> AgentPool:
        if self._pool_arg == "orchmas":
            pool = orchmas_pool(accuracy=self.executor_accuracy, **self._backend_kwargs)
        else:
            pool = super()._build_pool()
        if self._executor_arg is not None and self._executor_arg not in pool.names:
            raise UnknownNameError("executor agent", self._executor_arg, pool.names)
        return pool

    @property
    def max_calls(self) -> int:
        """Executor calls an episode may make: every turn but the answer turn."""
        return self.max_turns - 1

    @property
    def executor(self) -> str:
        """The pool agent the orchestrator's calls go to."""
        return self._executor_arg or self.pool.strongest()

    def valid_agents(self) -> list[str]:
        return [self.executor]

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def executor_calls(self) -> int:
        """Calls of the executor so far this episode."""
        return sum(h["kind"] == "call" for h in self.history)

    def calls_left(self) -> int:
        """``max_calls`` less the calls made so far, routed (the executor) and consulted
        alike: a consult uses up one of the episode's calls."""
        return max(0, self.max_calls - self.executor_calls() - len(self.consulted))

    def last_executor_answer(self) -> str | None:
        """The boxed answer of the executor's latest reply (None before one shows it)."""
        last = self._last_reply()
        return extract_boxed(last) if last else None

    def visible_executor_answer(self) -> str | None:
        """``last_executor_answer()`` as the orchestrator sees it: None with ``feedback=False``."""
        return self.last_executor_answer() if self.feedback else None

    def action_choices(self) -> list[str | None]:
        """Answer, then solve as each role, then verify as each role (see "Discrete
        actions" above)."""
        if self.task is None:
            return [None] * (1 + 3 * len(CHOICE_ROLES))
        last = self.visible_executor_answer()
        asked = sum(
            h["kind"] == "call" and h["prompt"].startswith(SUBQUESTION_PREFIX) for h in self.history
        )
        chain = [h for h in self.task.meta.get("chain") or () if isinstance(h, Mapping)]
        return canonical_choices(
            self.task.prompt,
            last,
            has_reply=self._last_reply() is not None,
            can_call=not self.is_last_turn and self.calls_left() > 0,
            subquestion=next_subquestion(chain, asked, last),
        )

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the skill reference (``choices.py``,
        ``paraphrase.rewording_strategies``: the stuffed role, copy-the-question)."""
        return {**shortcuts(self.max_turns), **rewording_strategies()}

    def control_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Honest observation-only plans that should reach the skill reference's realistic
        level (not shortcuts; kept out of ``audit_strategies``, where the audit would flag
        them): ``legit-paraphrased-subquestions``, the scripted plan in natural wording."""
        return {
            k: v for k, v in rewording_strategies(controls=True).items() if k.startswith("legit-")
        }

    #: the audit's realistic skill level (``skill_action``): see ``realistic_skill_source``
    #: what boards rank (orchenv.eval.metrics): the episode's score (token F1, cosine for
    #: summaries), the quantity the format-gated reward pays for
    primary_metric: ClassVar[str] = "score"
    realistic_skill: ClassVar[float | None] = REALISTIC_SKILL
    realistic_skill_source: ClassVar[str] = REALISTIC_SKILL_SOURCE

    def skilled_role(self) -> str:
        """The role that fits this task's domain (privileged: the task's ``meta``)."""
        assert self.task is not None
        domain = task_domain(self.task)
        role = SKILL_ROLES.get(domain, f"{domain} expert")
        return role

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The paper's skill (dynamic roles and decomposition) with the privileged truth.

        ``skilled``: the role that fits the task's domain; on a multi-hop task the gold
        chain's next sub-question (with the true bridge entity, whatever the executor
        answered) while room is left for the whole question, then the whole question; on
        other tasks a check when only one call was made; then the executor's last answer.
        Not ``skilled``: the generic role and the whole question (once), then the answer.
        """
        if self.task is None:
            return None
        calls = self.executor_calls()
        left = self.max_calls - calls
        answer = answer_text(self.visible_executor_answer() or self.last_executor_answer())
        if self.is_last_turn or left <= 0:
            return answer
        prompts = [h["prompt"] for h in self.history if h["kind"] == "call"]
        whole_asked = any(not p.startswith(SUBQUESTION_PREFIX) for p in prompts)
        if not skilled:
            return answer if whole_asked else call_text(CHOICE_ROLES[0], self.task.prompt)
        role = self.skilled_role()
        if not whole_asked:
            chain = [h for h in self.task.meta.get("chain") or () if isinstance(h, Mapping)]
            asked = len(prompts)  # all of them sub-questions here
            if asked < len(chain) and left >= 2 and chain[asked].get("question"):
                return call_text(role, str(chain[asked]["question"]), sub=True)
            return call_text(role, self.task.prompt)
        if calls == 1:
            return call_text(role, self.task.prompt, verify=True)
        return answer

    def observation_features(self) -> np.ndarray:
        """Executor calls so far (as a share of ``max_turns``) and whether the last reply
        holds an answer."""
        calls = self.executor_calls() / max(self.max_turns, 1)
        has_answer = float(self.visible_executor_answer() is not None)
        return np.array([calls, has_answer], dtype=np.float32)

    def demo_action(self, rng: np.random.Generator) -> str:
        """A valid action for the current state: a call with a random role, or an answer.

        Answers with the last executor reply's boxed answer when there is one
        (otherwise a guess); calls the executor with probability 0.6 while turns
        remain after this one.
        """
        assert self.task is not None
        last = self._last_reply()
        if not self.is_last_turn and (last is None or rng.random() < 0.6):
            role = DEMO_ROLES[int(rng.integers(len(DEMO_ROLES)))]
            request = (
                self.task.prompt if last is None else "Check the previous answer and verify it."
            )
            return call_action(role, request)
        guess = (extract_boxed(last) if last else None) or "unknown"
        return f"<think>Use the executor's answer.</think><answer>{guess}</answer>"

    # -- prompts ----------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        """System prompt, the question, then each turn as the policy wrote it (an
        ``assistant`` message, verbatim) and what came back (a ``user`` message: the
        executor's reply in ``<interaction_response>``, or why the turn was unusable)."""
        assert self.task is not None
        system = CONTROLLER_SYSTEM.format(
            max_turns=self.max_turns,
            max_calls=self.max_calls,
            call_example=example_call(self.task.prompt),
            answer_example=example_answer(),
        )
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Question:\n{self.task.prompt}"},
        ]
        last = len(self.history) - 1
        for i, entry in enumerate(self.history):
            messages.append({"role": "assistant", "content": entry["action"]})
            if entry["kind"] == "call":
                reply = entry["reply"][: self.max_reply_chars] if self.feedback else HIDDEN_REPLY
                messages.append(
                    {
                        "role": "user",
                        "content": f"<interaction_response>{reply}</interaction_response>",
                    }
                )
            elif entry["kind"] == "invalid":
                # the latest unusable turn gets the env's notice appended (core)
                text = (
                    "Nothing was sent to the executor."
                    if i == last
                    else (f"Nothing was sent to the executor: {entry['error']}")
                )
                messages.append({"role": "user", "content": text})
        if messages[-1]["role"] == "user":
            messages[-1]["content"] += f"\n\n{self.turn_line()}"
        return messages

    def _executor_messages(self, role: str, prompt: str) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": EXECUTOR_SYSTEM.format(role=role)}]
        for entry in self.history:
            if entry["kind"] == "call":
                messages.append({"role": "user", "content": entry["prompt"]})
                messages.append({"role": "assistant", "content": entry["reply"]})
        messages.append({"role": "user", "content": prompt})
        return messages

    def _observation_info(self) -> dict[str, Any]:
        return {"phase": "act"}

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.history = []
        self.format_sum = 0.0
        self.final_checks = None
        self.answer, self.grade, self.extra_metrics = None, (False, 0.0), {}
        return {"privileged": {"domain": task_domain(self.task)}}

    def _capped(self) -> float:
        return min(self.kappa, self.format_sum)

    def _gate(self) -> bool:
        """Whether the precision counts: the format reward reached its cap and (with
        ``gate="final-checks"``) the final turn passed B_m, B_v and I_c."""
        if self._capped() < self.kappa - 1e-12:
            return False
        if self.gate_rule == "cap":
            return True
        return self.final_checks is not None and all(self.final_checks)

    def _last_reply(self) -> str | None:
        return next((h["reply"] for h in reversed(self.history) if h["kind"] == "call"), None)

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        before = self._capped()
        answer = extract_tag(action, "answer")
        info: dict[str, Any] = {}
        privileged: dict[str, Any] = {"domain": task_domain(self.task)}
        error = None
        if answer is not None and is_placeholder(answer):
            error = f"the answer {answer[:40]!r} is a placeholder; write the final answer itself."
            self.history.append({"kind": "invalid", "error": error, "action": action})
            answer = None
        elif answer is not None:
            b_m, b_v, i_c = answer_format(action)
            self.final_checks = (b_m, b_v, i_c)
            self.format_sum += self.beta * b_m + self.gamma * b_v + self.delta * i_c
            info["format_checks"] = {"B_m": b_m, "B_v": b_v, "I_c": i_c}
            self.history.append({"kind": "answer", "answer": answer, "action": action})
            if not self.feedback:  # open loop: the last call's answer is the system's
                answer = self.last_executor_answer() or answer
            em, f1, grading = self._grade(answer)
            self.answer, self.grade = answer, (em, f1)
            if grading != "ok":  # refused or timed out: counted wrong, and said so
                info["grading"] = grading
        elif error is None:
            call, error = parse_call(action)
            if call is not None and self.calls_left() <= 0:
                call, error = (
                    None,
                    (
                        f"the episode's {self.max_calls} agent calls are used up (consulted calls "
                        "count too); answer now."
                    ),
                )
            if call is None:
                self.history.append({"kind": "invalid", "error": error, "action": action})
            else:
                info.update(
                    self._call_executor(call, extract_tag(action, "think"), privileged, action)
                )
        base = -self.kappa / self.max_turns
        reward = base + (self._capped() - before)
        components = {"format": self._capped() - before, "base": base, "precision": 0.0}
        if answer is not None:
            rest = -self.kappa * (self.max_turns - self.turn) / self.max_turns
            precision = self.grade[1] if self._gate() else 0.0
            reward += rest + precision
            components.update(base=base + rest, precision=precision)
        info["reward_components"] = components
        info["privileged"] = privileged
        if error is not None:  # the notice shows a filled-in valid turn (issue 31)
            last = self.turn + 1 >= self.max_turns  # the next turn can only answer
            example = example_answer() if last else example_call(self.task.prompt)
            error = f"{error.rstrip('.')}. A valid reply now, for example:\n{example}\n"
        return Outcome(reward=reward, done=answer is not None, error=error, info=info)

    def _call_executor(
        self, call: dict[str, str], think: str | None, privileged: dict[str, Any], action: str
    ) -> dict[str, Any]:
        """Send one well-formed request to the executor; return the step's info."""
        assert self.task is not None
        well_formed = bool(think) and bool(call["agent_role"])
        self.format_sum += self.alpha * well_formed
        role = call["agent_role"] if self.fixed_role is None else self.fixed_role
        messages = self._executor_messages(role, call["prompt"])
        context = CallContext(task=self.task, turn=self.turn, draft=self._last_reply())
        completion = self.call_agent(self.executor, messages, context)
        self.history.append(
            {
                "kind": "call",
                "think": think,
                "role": role,
                "prompt": call["prompt"],
                "reply": completion.text,
                "action": action,
            }
        )
        reply_answer = extract_boxed(completion.text)
        privileged["executor_correct"] = self._grade(reply_answer, record=False)[0]
        return {
            "format_checks": {"Lambda": well_formed},
            "called_agent": self.executor,
            "agent_role": role,
            "latency_s": completion.latency_s,
        }

    def _grade(self, answer: str | None, *, record: bool = True) -> tuple[bool, float, str]:
        """(exact match, precision, grading status) of an answer against the task's
        references; with ``record``, also ``self.extra_metrics`` (``f1``, and ``cos`` for
        summaries; without it no embedding is computed).

        Precision is eq. (11)-(12)'s token F1 (``orchenv.grading.f1_score``: SQuAD
        normalisation, max over references) for every task. Math tasks: exact match is
        ``math_equal`` on the boxed (else raw) answer, and an equal answer has F1 1 (an
        equivalent form is the same standardised answer); ``math_precision="exact"`` pays
        the exact match instead of F1. Summaries (``meta["metric"] == "cosine"``): with
        ``summary_metric="cosine"`` the precision is the cosine similarity of the answer's
        and the best reference's MiniLM embeddings (section 4.1; ``metrics.cosine_score``).
        The status is ``orchenv.grading.Verdict.status`` ("ok" for text)."""
        assert self.task is not None
        extra: dict[str, float] = {}
        if record:
            self.extra_metrics = extra
        if answer is None:
            return False, 0.0, "ok"
        refs = self.task.answers
        if task_domain(self.task) == "math":
            candidate = extract_boxed(answer) or answer
            verdict = match_any(refs, candidate)
            f1 = 1.0 if verdict.equal else max((f1_score(r, candidate) for r in refs), default=0.0)
            extra["f1"] = f1
            precision = float(verdict.equal) if self.math_precision == "exact" else f1
            return verdict.equal, precision, verdict.status
        em = any(exact_match(ref, answer) for ref in refs)
        f1 = max((f1_score(ref, answer) for ref in refs), default=0.0)
        extra["f1"] = f1
        if record and self.task.meta.get("metric") == "cosine":
            if self._embedder is None:
                self._embedder = load_embedder()
            cos = cosine_score(self._embedder, answer, refs)
            extra["cos"] = cos
            if self.summary_metric == "cosine":
                return em, cos, "ok"
        return em, f1, "ok"

    def _summary(self) -> dict[str, Any]:
        em, precision = self.grade
        f1 = self.extra_metrics.get("f1", 0.0)
        capped, gate = self._capped(), self._gate()
        metrics = {
            "f1": float(f1),
            "em": float(em),
            "precision": float(precision),
            "format_reward": capped,
            "gate": float(gate),
            "executor_calls": float(self.executor_calls()),
        }
        if "cos" in self.extra_metrics:
            metrics["cos"] = float(self.extra_metrics["cos"])
        return {
            "final_answer": self.answer,
            "correct": bool(em),
            "em": float(em),
            "f1": float(f1),
            "score": float(precision),
            "format_reward": capped,
            "gate": gate,
            "metrics": metrics,
        }
