"""What the puppeteer reads and writes: its prompt, its actions and their parser.

An action names agents only (seed 003: the orchestrator selects, the agents act):
``<agent>MODEL:PATTERN</agent>`` (a reasoning agent), ``<agent>MODEL:TOOL</agent>`` (a tool
agent: its model writes the tool call) or ``<agent>terminate</agent>``. With ``width`` W > 1
the action may hold up to W ``<agent>`` tags, one per branch in order (one tag: every branch;
fewer than W: the last one fills the remaining branches).
The old format in which the controller wrote the tool's argument (``tool:run_python`` with
``<code>``, ``<path>`` or ``<query>``) is refused with a notice that says what changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchenv.envs.puppeteer.agents import PATTERNS, TOOLS
from orchenv.parsing import is_placeholder, match_agent

TERMINATE = "terminate"
#: the argument tags of the old action format (the controller wrote the tool call)
OLD_ARGUMENT_TAGS: tuple[str, ...] = ("code", "path", "query")
#: the longest agent name read inside one ``<agent>`` tag
MAX_NAME_CHARS = 200
_AGENT_TAG = re.compile(rf"<agent>([^<]{{0,{MAX_NAME_CHARS}}})</agent>", re.I)

CONTROLLER_PROMPT = """\
You are the puppeteer: each step, name the next agent to act on the task. Step {step} of {max_turns}.

Agents are MODEL:PATTERN (a reasoning agent) or MODEL:TOOL (a tool agent: the model writes \
its own tool call), with MODEL in {models}, PATTERN in {patterns} and TOOL in {tools} \
(run_python runs the program the agent writes; read_file reads a file of the task's folder; \
search queries an offline encyclopedia). terminate stops; the team's current answer (the \
latest FINAL ANSWER an agent gave) is graded.{width_note}

Reply with exactly one <agent> tag holding a model's name, a colon and a pattern or a \
tool, or holding the word terminate.

Example replies (choose your own model, pattern or tool):
{examples}

Task:
{problem}

{trajectories}"""


def controller_prompt(
    *,
    step: int,
    max_turns: int,
    models: Sequence[str],
    problem: str,
    branches: Sequence[tuple[Sequence[tuple[str, str]], str | None]],
) -> str:
    """The puppeteer's prompt for ``step`` (1-based): the agents, the action format, the task
    and each branch's trajectory (``(agent, output)`` pairs) and current answer."""
    parts = []
    for b, (history, answer) in enumerate(branches):
        lines = [f"{i + 1}. {agent}: {output}" for i, (agent, output) in enumerate(history)]
        head = "Trajectory" if len(branches) == 1 else f"Branch {b + 1} trajectory"
        parts.append(
            f"{head}:\n"
            + ("\n".join(lines) or "(empty)")
            + f"\nCurrent answer: {answer or '(none)'}"
        )
    width = len(branches)
    note = (
        ""
        if width == 1
        else f"\n{width} branches explore in parallel, each with its own trajectory; write up to "
        f"{width} <agent> tags, one per branch in order (one tag applies to every branch). The "
        "branches' answers are majority-voted at the end."
    )
    return CONTROLLER_PROMPT.format(
        step=step,
        max_turns=max_turns,
        models=", ".join(models),
        patterns=", ".join(PATTERNS),
        tools=", ".join(TOOLS),
        width_note=note,
        examples=example_replies(models),
        problem=problem,
        trajectories="\n\n".join(parts),
    )


def example_replies(models: Sequence[str]) -> str:
    """Filled-in actions naming real agents of ``models`` (issue 31: a small model copies a
    bare ``<agent>MODEL:PATTERN</agent>``): a reasoning agent, a tool agent, terminate."""
    model = models[0] if models else "MODEL"
    return "\n".join(
        (
            f"<agent>{model}:{PATTERNS[0]}</agent>",
            f"<agent>{model}:{TOOLS[0]}</agent>",
            f"<agent>{TERMINATE}</agent>",
        )
    )


def example_reply(models: Sequence[str]) -> str:
    """One valid action for the notice after an unusable one (a reasoning agent)."""
    return f"<agent>{models[0]}:{PATTERNS[1]}</agent>" if models else f"<agent>{TERMINATE}</agent>"


def agent_names(models: Sequence[str]) -> list[str]:
    """Every agent the puppeteer can name: ``MODEL:PATTERN``, ``MODEL:TOOL``, ``terminate``."""
    return [*(f"{m}:{p}" for m in models for p in (*PATTERNS, *TOOLS)), TERMINATE]


@dataclass(frozen=True)
class Action:
    """One parsed action: ``terminate``, or ``agents`` (one ``(model, pattern_or_tool)`` per
    branch). ``error`` is set (and the rest meaningless) when the text could not be used."""

    terminate: bool = False
    agents: tuple[tuple[str, str], ...] = ()
    error: str | None = None


def _old_format(text: str) -> str | None:
    lower = text.lower()
    if "tool:" in lower or any(f"<{tag}>" in lower for tag in OLD_ARGUMENT_TAGS):
        return (
            "the controller names an agent only; tool arguments (<code>, <path>, <query>) and "
            "'tool:NAME' agents are no longer accepted: name a tool agent as "
            "<agent>MODEL:run_python</agent> (or MODEL:read_file, MODEL:search) and its model "
            "writes the call."
        )
    return None


def _one_agent(name: str, models: Sequence[str]) -> tuple[str, str] | str:
    if is_placeholder(name):
        return f"{name[:80]!r} is a placeholder; name a real agent (models: {', '.join(models)})."
    head, sep, tail = name.partition(":")
    if not sep:
        return f"{name[:80]!r} is not MODEL:PATTERN, MODEL:TOOL or terminate."
    model = match_agent(head.strip(), models)
    if model is None:
        return f"unknown model {head[:40]!r}; models: {', '.join(models)}."
    what = tail.strip().lower()
    if what not in PATTERNS and what not in TOOLS:
        return (
            f"unknown pattern or tool {tail[:40]!r}; patterns: {', '.join(PATTERNS)}; tools: "
            f"{', '.join(TOOLS)}."
        )
    return model, what


def parse_action(text: str, models: Sequence[str], width: int = 1) -> Action:
    """The action in ``text``; never raises, linear in ``len(text)`` (an unusable text gives
    ``Action(error=...)``)."""
    if not isinstance(text, str):
        return Action(error="the action must be text.")
    names = []
    for match in _AGENT_TAG.finditer(text):
        names.append(match.group(1).strip())
        if len(names) > width:
            break
    old = _old_format(text)
    if old is not None:
        return Action(error=old)
    if not names:
        return Action(error="no complete <agent> tag found.")
    if len(names) > width:
        return Action(error=f"at most {width} <agent> tag(s) (one per branch), got more.")
    if any(n.lower() == TERMINATE for n in names):
        if len(names) > 1:
            return Action(error="terminate must be the only <agent> tag.")
        return Action(terminate=True)
    agents = []
    for name in names:
        parsed = _one_agent(name, models)
        if isinstance(parsed, str):
            return Action(error=parsed)
        agents.append(parsed)
    if len(agents) == 1:
        agents = agents * width
    elif len(agents) < width:
        agents += [agents[-1]] * (width - len(agents))
    return Action(agents=tuple(agents))


def random_action(rng: np.random.Generator, models: Sequence[str]) -> str:
    """A random valid action: mostly a reasoning agent, sometimes a tool agent or terminate."""
    u = rng.random()
    if u < 0.15:
        return f"<agent>{TERMINATE}</agent>"
    model = models[int(rng.integers(len(models)))]
    if u < 0.35:
        return f"<agent>{model}:{TOOLS[int(rng.integers(len(TOOLS)))]}</agent>"
    return f"<agent>{model}:{PATTERNS[int(rng.integers(len(PATTERNS)))]}</agent>"
