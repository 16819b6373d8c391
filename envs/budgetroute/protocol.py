"""The controller protocol of ``orch/BudgetRoute-v0``: prompts, the action parser, the grader.

The paper's appendix B prompts did not survive text extraction, so the prompts are
written for orchenv; the action tags follow the Search-R1 / Router-R1 convention the
paper builds on (``<search>`` / ``<answer>``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchenv.grading import Verdict, extract_boxed, match_any, solution_verdict
from orchenv.parsing import (
    extract_tag,
    find_tag,
    is_placeholder,
    match_agent,
    strip_reasoning,
    suggest_agent,
)

CONTROLLER_SYSTEM = """\
You solve math problems and may consult paid expert models. Budget mode: {mode}.
{guidance}

Experts (name, price in USD per 1M prompt / completion tokens, expected cost of one call \
on this problem), strongest first:
{experts}

Each round, do exactly one of the following:
- Ask one expert a question: a <search> tag holding the expert's exact name, a colon and \
your question. The expert's reply is shown to you in the next round. Experts answer what \
you ask: naming the key step helps, and you may split the problem (ask for only the key \
step, then pass that work to an expert to finish).
- Give your final answer and stop: an <answer> tag holding only the final value.
You may think first inside a <think> tag. You have {max_turns} rounds in total; without an \
answer by then the problem counts as unsolved.

Example reply asking an expert (use a name from the list and your own question):
{search_example}

Example reply giving the final answer (write your own value):
{answer_example}"""

MODE_GUIDANCE: dict[str, str] = {
    "low": "Money is tight: solve the problem yourself when you can, and if you need help, "
    "prefer the cheapest expert.",
    "medium": "Spend moderately: balance inexpensive and expensive experts and consult the "
    "dearest ones only when the problem needs them.",
    "high": "Money is no object: consult the most capable experts whenever it helps you "
    "get the answer right.",
}
GENERIC_GUIDANCE = "Keep the total cost of expert calls within this budget mode."
#: seed 001 section 4.5's "Prompt A": the budget mode as a hard rule instead of the guidance
#: above ("Prompt B"); ``BudgetRouteEnv(prompt_style="hard")``
HARD_MODE_GUIDANCE: dict[str, str] = {
    "low": "Rule for this mode: do not call any expert. Answer the problem yourself.",
    "medium": "Rule for this mode: call at most one expert, and never the dearest one.",
    "high": "Rule for this mode: always ask an expert before you answer; never answer "
    "without consulting one.",
}
#: ``prompt_style`` -> the budget-mode sentences of the controller prompt
PROMPT_STYLES: dict[str, dict[str, str]] = {"guidance": MODE_GUIDANCE, "hard": HARD_MODE_GUIDANCE}

EXPERT_SYSTEM = (
    "You are an expert mathematician. Answer the question step by step and give the final "
    "answer as \\boxed{ANSWER}."
)

#: what the notice after an unusable action adds to the parse error (after a filled-in
#: example, ``example_replies``)
FORMAT_REMINDER = (
    "Reply with one <search> tag (an expert's exact name, a colon, your question) or one "
    "<answer> tag (your final value)."
)
#: the question and the answer of the filled-in example replies (issue 31: a small model
#: copies a bare ``<answer>FINAL ANSWER</answer>``; a concrete reply it can adapt)
EXAMPLE_QUESTION = "What is the key first step for this problem, and what does it give?"
EXAMPLE_ANSWER = "\\frac{3}{4}"


def search_text(expert: str, question: str) -> str:
    """Canonical search action."""
    return f"<search>{expert}: {question}</search>"


def answer_text(answer: str) -> str:
    """Canonical final-answer action."""
    return f"<answer>{answer}</answer>"


def example_replies(experts: Sequence[str]) -> tuple[str, str]:
    """(a search naming a real expert, a final answer): filled-in replies for the prompt and
    the notice. ``experts`` is weakest first; the example asks the cheapest one."""
    search = search_text(experts[0], EXAMPLE_QUESTION) if experts else ""
    return search, answer_text(EXAMPLE_ANSWER)


@dataclass(frozen=True)
class Action:
    """A usable controller action: a question to one expert, or the final answer."""

    kind: Literal["search", "answer"]
    text: str  # the sub-query or the answer, stripped
    expert: str | None = None  # the pool's spelling of the expert's name (searches only)


def parse_action(text: str, experts: Sequence[str]) -> tuple[Action | None, str | None]:
    """``(action, None)``, or ``(None, what was wrong)``; never raises.

    The first of ``<search>`` / ``<answer>`` that appears outside ``<think>`` blocks
    wins; an unclosed first tag yields to a complete second one. Expert names match
    ignoring case and punctuation (``orchenv.parsing.match_agent``).
    """
    visible = strip_reasoning(text)
    positions = {}
    for tag in ("search", "answer"):
        where = find_tag(visible, tag)
        if where is not None:
            positions[tag] = where
    if not positions:
        return None, "no <search> or <answer> tag found."
    kind = min(positions, key=lambda t: positions[t])
    body = extract_tag(text, kind)
    if body is None:
        other = "answer" if kind == "search" else "search"
        if other in positions:  # an unclosed first tag, a complete second one
            kind, body = other, extract_tag(text, other)
        if body is None:
            return None, f"<{kind}> is not closed with </{kind}>."
    if kind == "answer":
        if not body:
            return None, "the <answer> is empty."
        if is_placeholder(body):
            return None, f"{body[:40]!r} is a placeholder; write your own final value."
        return Action("answer", body), None
    name, sep, query = body.partition(":")
    if not sep:
        return None, (
            f"the <search> lacks 'EXPERT NAME:' before the question; experts: {', '.join(experts)}."
        )
    expert = match_agent(name.strip(), experts)
    if expert is None:
        hint = suggest_agent(name.strip(), experts)
        return None, f"unknown expert {name.strip()!r}; experts: {', '.join(experts)}.{hint}"
    if not query.strip():
        return None, f"the question to {expert} is empty."
    if is_placeholder(query.strip()):
        return None, f"{query.strip()[:40]!r} is a placeholder; ask {expert} a real question."
    return Action("search", query.strip(), expert), None


def grade_answer(answer: str, references: Sequence[str]) -> bool:
    """Whether a final answer (a bare expression or a ``\\boxed{...}``) matches a reference.

    Never raises: the ``orchenv.grading`` helpers it uses never do.
    """
    return answer_verdict(answer, references).equal


#: an operation still to carry out: a binary operator (a leading sign is not one) or brackets
_OPERATION = re.compile(r"(?<=\S)\s*[-+*/^]|\\times|\\div|\\cdot|[()]|\\left|\\right")


def _value(text: str) -> str:
    inner = extract_boxed(text)
    return (inner if inner is not None else text).strip().strip("$").strip()


def unevaluated(answer: str, references: Sequence[str]) -> bool:
    """Whether ``answer`` is an expression still to evaluate where every reference is a plain
    value (a number or a fraction): e.g. the problem's own expression copied back, which a
    symbolic check would find equal to its value. Such an answer is not a final answer."""
    if any(_OPERATION.search(_value(ref)) for ref in references):
        return False  # the reference itself is an expression: nothing to tell apart
    return _OPERATION.search(_value(answer)) is not None


def answer_verdict(answer: str, references: Sequence[str]) -> Verdict:
    """``grade_answer`` with the grading status (``orchenv.grading.Verdict``): a check refused
    as too large or cut off by the time budget counts as wrong and says so, and so does an
    unevaluated expression found equal to a plain-value reference (``"unevaluated"``)."""
    verdict = _symbolic_verdict(answer, references)
    if verdict.equal and unevaluated(answer, references):
        return Verdict(False, "unevaluated")
    return verdict


def _symbolic_verdict(answer: str, references: Sequence[str]) -> Verdict:
    if extract_boxed(answer) is not None:
        return solution_verdict(answer, tuple(references))
    bare = answer.strip().strip("$").strip()
    verdict = solution_verdict(f"\\boxed{{{bare}}}", tuple(references))
    if verdict.equal:
        return verdict
    again = match_any(references, bare)
    return again if again.equal or again.status != "ok" else verdict
