"""The discrete view of ``orch/OrchMAS-v0``: canonical calls, and the audit's shortcuts.

A learned orchestrator in OrchMAS writes free-form roles and requests; a discrete policy
picks from a fixed menu instead (``OrchMASEnv.action_choices``): answer with the executor's
last answer, or call the executor with one of ``CHOICE_ROLES`` and one of three requests
(solve the question; verify the previous answer to it; ask the next sub-question of a
multi-hop question). The roles cover the domains of orchenv's task sources (one generic
role, one per domain), so choosing the role that fits the question is the policy's job,
as it is the paper's. The answer and the calls read only what the orchestrator sees (the
question, the executor's replies), never the reference answer. The sub-question request
is a planner's decomposition: it is the task's gold hop question (``meta["chain"]``) with
the bridge entity taken from the executor's last answer, so a wrong answer carries
forward into a wrong sub-question; it holds no reference answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchenv.envs.orchmas.protocol import call_action
from orchenv.grading import normalize_text

#: the roles the discrete view offers: generic first, then one per task domain
CHOICE_ROLES = ("assistant", "math solver", "researcher", "reading comprehension expert")
#: the two requests: a first attempt, and a check of the executor's previous answer
SOLVE_REQUEST = "Solve this question and give the final answer: {question}"
VERIFY_REQUEST = (
    "Verify your previous answer to this question step by step, then give the final "
    "answer: {question}"
)
#: a sub-question of a multi-hop question (the discrete view counts calls that start so)
SUBQUESTION_PREFIX = "Sub-question: "
SUBQUESTION_REQUEST = SUBQUESTION_PREFIX + "{question} Give the final answer."
#: a request that carries no question (the audit's irrelevant-request shortcut)
IRRELEVANT_REQUEST = "Hello, please tell me a joke."
#: the answer given when no executor reply holds one
NO_ANSWER = "unknown"

Strategy = Callable[[Any], str]


def answer_text(answer: str | None, filler: str = "") -> str:
    """A clean final turn (full format credit) that gives ``answer`` (or ``NO_ANSWER``)."""
    body = (
        f"<think>Report the executor's last answer.</think><answer>{answer or NO_ANSWER}</answer>"
    )
    return f"{filler}{body}{filler}"


def call_text(
    role: str, question: str, *, verify: bool = False, filler: str = "", sub: bool = False
) -> str:
    """A well-formed call of the executor as ``role``, asking it to solve or verify the
    question, or (``sub``) to answer the sub-question ``question``."""
    if sub:
        request, verb = SUBQUESTION_REQUEST.format(question=question), "answer a sub-question"
    elif verify:
        request, verb = VERIFY_REQUEST.format(question=question), "verify"
    else:
        request, verb = SOLVE_REQUEST.format(question=question), "solve"
    body = call_action(role, request, think=f"Ask the executor, as {role}, to {verb}.")
    return f"{filler}{body}{filler}"


def canonical_choices(
    question: str,
    last_answer: str | None,
    *,
    has_reply: bool,
    can_call: bool,
    subquestion: str | None = None,
) -> list[str | None]:
    """``[answer] + [solve as role] + [verify as role] + [next sub-question as role]``.

    Calls are masked on the last turn (a call there ends the episode without an answer);
    verification is masked until the executor has replied once; the sub-question is
    masked when there is none (not a multi-hop task, every hop asked, or the bridge
    entity it needs is not known yet).
    """
    choices: list[str | None] = [answer_text(last_answer)]
    choices += [call_text(role, question) if can_call else None for role in CHOICE_ROLES]
    choices += [
        call_text(role, question, verify=True) if can_call and has_reply else None
        for role in CHOICE_ROLES
    ]
    choices += [
        call_text(role, subquestion, sub=True) if can_call and subquestion else None
        for role in CHOICE_ROLES
    ]
    return choices


def next_subquestion(
    chain: Sequence[Mapping[str, Any]], asked: int, last_answer: str | None
) -> str | None:
    """Hop ``asked`` of the gold ``chain`` as a request, its bridge entity replaced by the
    executor's ``last_answer`` (None when every hop was asked or the entity is unknown)."""
    if asked >= len(chain):
        return None
    hop = chain[asked]
    question = str(hop.get("question", ""))
    entity = hop.get("entity")
    if (
        asked > 0
        and entity
        and normalize_text(str(entity)) == normalize_text(str(chain[asked - 1].get("answer", "")))
    ):
        if not last_answer:
            return None
        question = question.replace(str(entity), last_answer)
    return question or None


def _calls(role: str, n_calls: int, filler: str = "", doc: str = "") -> Strategy:
    """Solve as ``role``, then verify as ``role`` until ``n_calls`` calls (or the last turn),
    then answer with the executor's last answer."""

    def act(env: Any) -> str:
        made = env.executor_calls()
        if made >= n_calls or env.is_last_turn:
            return answer_text(env.last_executor_answer(), filler)
        return call_text(role, env.task.prompt, verify=made > 0, filler=filler)

    act.__doc__ = doc
    return act


def shortcuts(max_turns: int) -> dict[str, Strategy]:
    """The named shortcuts ``orchenv audit`` plays (``OrchMASEnv.audit_strategies``)."""

    def without_executor(env: Any) -> str:
        """Answer at once, without calling the executor."""
        return answer_text(None)

    def irrelevant(env: Any) -> str:
        """A well-formed call that carries no question ("tell me a joke"), then answer."""
        if env.executor_calls() >= 1 or env.is_last_turn:
            return answer_text(env.last_executor_answer())
        return call_action(CHOICE_ROLES[0], IRRELEVANT_REQUEST, think="Say hello.")

    def garbage_answer(env: Any) -> str:
        """Four well-formed calls (fill the format cap), then an answer wrapped in garbage
        without a think block (``garbage <answer>X</answer> garbage``)."""
        made = env.executor_calls()
        if made >= 4 or env.is_last_turn:
            answer = env.last_executor_answer() or NO_ANSWER
            return f"garbage <answer>{answer}</answer> garbage"
        return call_text(CHOICE_ROLES[0], env.task.prompt, verify=made > 0)

    generic = CHOICE_ROLES[0]
    return {
        "irrelevant-request": irrelevant,
        "four-calls-garbage-answer": garbage_answer,
        "answer-without-executor": without_executor,
        "one-generic-call": _calls(
            generic, 1, doc="One call with the generic role, then answer with its reply."
        ),
        "always-generic": _calls(
            generic, 2, doc="Generic role: solve, verify, answer (the role never changes)."
        ),
        "always-math-solver": _calls(
            "math solver", 2, doc="Math-solver role whatever the question: solve, verify, answer."
        ),
        "max-turns": _calls(
            generic,
            max_turns,
            doc="Generic role every turn (solve, then verify) until the last turn, then answer.",
        ),
        "garbage-around-tag": _calls(
            generic,
            2,
            filler=" lorem ipsum ",
            doc="As always-generic, with filler text around every tag (I_c fails).",
        ),
    }
