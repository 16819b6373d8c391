"""The discrete view of ``orch/OrchMAS-v0``: canonical calls, and the audit's shortcuts.

A learned orchestrator in OrchMAS writes free-form roles and requests; a discrete policy
picks from a fixed menu instead (``OrchMASEnv.action_choices``): answer with the executor's
last answer, or call the executor with one of ``CHOICE_ROLES`` and one of two requests
(solve the question; verify the previous answer to it). The roles cover the domains of
orchenv's task sources (one generic role, one per domain), so choosing the role that fits
the question is the policy's job, as it is the paper's. Everything here reads only what
the orchestrator sees (the question, the executor's replies): never the reference answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchenv.envs.orchmas.protocol import call_action

#: the roles the discrete view offers: generic first, then one per task domain
CHOICE_ROLES = ("assistant", "math solver", "geography expert", "economics expert", "linguist")
#: the two requests: a first attempt, and a check of the executor's previous answer
SOLVE_REQUEST = "Solve this question and give the final answer: {question}"
VERIFY_REQUEST = (
    "Verify your previous answer to this question step by step, then give the final "
    "answer: {question}"
)
#: the answer given when no executor reply holds one
NO_ANSWER = "unknown"

Strategy = Callable[[Any], str]


def answer_text(answer: str | None, filler: str = "") -> str:
    """A clean final turn (full format credit) that gives ``answer`` (or ``NO_ANSWER``)."""
    body = (
        f"<think>Report the executor's last answer.</think><answer>{answer or NO_ANSWER}</answer>"
    )
    return f"{filler}{body}{filler}"


def call_text(role: str, question: str, *, verify: bool = False, filler: str = "") -> str:
    """A well-formed call of the executor as ``role``, asking it to solve or verify."""
    request = (VERIFY_REQUEST if verify else SOLVE_REQUEST).format(question=question)
    body = call_action(
        role, request, think=f"Ask the executor, as {role}, to {'verify' if verify else 'solve'}."
    )
    return f"{filler}{body}{filler}"


def canonical_choices(
    question: str, last_answer: str | None, *, has_reply: bool, can_call: bool
) -> list[str | None]:
    """``[answer] + [solve as role for each role] + [verify as role for each role]``.

    Calls are masked on the last turn (a call there ends the episode without an answer);
    verification is masked until the executor has replied once.
    """
    choices: list[str | None] = [answer_text(last_answer)]
    choices += [call_text(role, question) if can_call else None for role in CHOICE_ROLES]
    choices += [
        call_text(role, question, verify=True) if can_call and has_reply else None
        for role in CHOICE_ROLES
    ]
    return choices


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

    generic = CHOICE_ROLES[0]
    return {
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
