"""What the puppeteer reads and writes: its prompt, its actions and their parser.

An action names one agent: ``<agent>MODEL:PATTERN</agent>``, a tool with its argument
(``<agent>tool:run_python</agent><code>...</code>``, ``tool:read_file`` + ``<path>``,
``tool:search`` + ``<query>``) or ``<agent>terminate</agent>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchenv.envs.puppeteer.agents import PATTERNS
from orchenv.parsing import extract_tag, match_agent

TERMINATE = "terminate"
#: each tool and the tag that holds its argument
TOOL_ARGUMENT: dict[str, str] = {"run_python": "code", "read_file": "path", "search": "query"}
TOOLS: tuple[str, ...] = tuple(TOOL_ARGUMENT)

#: the local corpus of ``tool:search``
SEARCH_CORPUS: dict[str, str] = {
    "order-of-operations": "Order of operations: evaluate parentheses first, then "
    "multiplication and division, then addition and subtraction.",
    "python-big-integers": "Python integers have arbitrary precision, so run_python computes "
    "products of large numbers exactly; print the result.",
    "rate-problems": "Rate problems: a daily change times the number of days gives the total "
    "change; add it to the starting amount.",
    "unit-price": "Total price: number of items times the price per item, minus any discount "
    "per item times the number of items.",
    "percent": "A percent p of a quantity q is p / 100 times q.",
}

CONTROLLER_PROMPT = """\
You are the puppeteer: each step, name the next agent to act on the task. Step {step} of {max_turns}.

Agents: MODEL:PATTERN with MODEL in {models} and PATTERN in {patterns}; the tools \
tool:run_python (runs your <code>, returns stdout), tool:read_file (a <path> in the task's \
sandbox; it holds problem.txt), tool:search (a <query> over a small local corpus); and \
terminate (stop; the latest answer in the trajectory is graded).

Reply with exactly one of:
<agent>MODEL:PATTERN</agent>
<agent>tool:run_python</agent><code>print(...)</code>
<agent>tool:read_file</agent><path>problem.txt</path>
<agent>tool:search</agent><query>...</query>
<agent>terminate</agent>

Task:
{problem}

Trajectory:
{trajectory}
Current answer: {answer}"""


def controller_prompt(
    *,
    step: int,
    max_turns: int,
    models: Sequence[str],
    problem: str,
    history: Sequence[tuple[str, str]],
    answer: str | None,
) -> str:
    """The puppeteer's prompt for ``step`` (1-based): the agents, the action format, the task,
    the trajectory (``(agent, output)`` pairs) and the current answer."""
    lines = [f"{i + 1}. {agent}: {output}" for i, (agent, output) in enumerate(history)]
    return CONTROLLER_PROMPT.format(
        step=step,
        max_turns=max_turns,
        models=", ".join(models),
        patterns=", ".join(PATTERNS),
        problem=problem,
        trajectory="\n".join(lines) or "(empty)",
        answer=answer or "(none)",
    )


def agent_names(models: Sequence[str]) -> list[str]:
    """Every agent the puppeteer can name: ``MODEL:PATTERN``, ``tool:NAME``, ``terminate``."""
    names = [f"{m}:{p}" for m in models for p in PATTERNS]
    return [*names, *(f"tool:{t}" for t in TOOLS), TERMINATE]


@dataclass(frozen=True)
class Action:
    """One parsed action.

    ``kind`` is ``"model"`` (``name`` the model, ``argument`` the pattern), ``"tool"``
    (``name`` the tool, ``argument`` its input) or ``"terminate"``. ``error`` is set (and the
    other fields are meaningless) when the text could not be used.
    """

    kind: str | None = None
    name: str | None = None
    argument: str | None = None
    error: str | None = None


def parse_action(text: str, models: Sequence[str]) -> Action:
    """The action in ``text``; never raises (an unusable text gives ``Action(error=...)``)."""
    name = extract_tag(text, "agent")
    if name is None:
        return Action(error="no <agent>...</agent> tag found.")
    name = name.strip()
    if name.lower() == TERMINATE:
        return Action(kind="terminate")
    head, sep, tail = name.partition(":")
    if not sep:
        return Action(error=f"{name[:80]!r} is not MODEL:PATTERN, tool:NAME or terminate.")
    if head.strip().lower() == "tool":
        tool = tail.strip().lower()
        arg_tag = TOOL_ARGUMENT.get(tool)
        if arg_tag is None:
            return Action(error=f"unknown tool {tail[:40]!r}; tools: {', '.join(TOOLS)}.")
        argument = extract_tag(text, arg_tag)
        if argument is None or not argument.strip():
            return Action(error=f"tool:{tool} needs a non-empty <{arg_tag}>.")
        return Action(kind="tool", name=tool, argument=argument)
    model = match_agent(head.strip(), models)
    if model is None:
        return Action(error=f"unknown model {head[:40]!r}; models: {tuple(models)}.")
    pattern = tail.strip().lower()
    if pattern not in PATTERNS:
        return Action(error=f"unknown pattern {tail[:40]!r}; patterns: {PATTERNS}.")
    return Action(kind="model", name=model, argument=pattern)


def random_action(rng: np.random.Generator, models: Sequence[str]) -> str:
    """A random valid action: mostly a model with a pattern, sometimes a tool or terminate."""
    u = rng.random()
    if u < 0.15:
        return f"<agent>{TERMINATE}</agent>"
    if u < 0.25:
        return "<agent>tool:search</agent><query>large number multiplication</query>"
    if u < 0.3:
        return "<agent>tool:read_file</agent><path>problem.txt</path>"
    model = models[int(rng.integers(len(models)))]
    pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
    return f"<agent>{model}:{pattern}</agent>"
