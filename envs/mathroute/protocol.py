"""Seed 000's controller protocol: the prompts, the action parser and the canonical
action text (what a well-formed controller turn looks like).

Turn 1 routes: ``<thinking>...</thinking><model>NAME</model>``. Every later turn verifies:
``<checking>...</checking><verdict>True|False</verdict>`` and, after False,
``<model>NAME</model>``. The generic tag rules (case, whitespace, reasoning blocks, last
occurrence wins) are those of ``orchenv.parsing``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from orchenv.parsing import (
    extract_tag,
    has_open_tag,
    is_placeholder,
    match_agent,
    parse_bool,
    strip_reasoning,
    suggest_agent,
)

ROUTER_SYSTEM = """\
You coordinate a team of math solvers of different strength. Read the problem and decide \
which solver should attempt it.

Rules:
- The solvers, from weakest to strongest, are: {agents}.
- Pick a solver that matches the problem's difficulty; stronger solvers are scarce.
- Do not solve the problem yourself; judge only how hard it is.

Reply format:
- First a short difficulty judgement inside a <thinking> tag.
- Then the exact name of one solver from the list inside a <model> tag.

Example reply (the solver's name is one of the list; choose your own):
{example}"""

VERIFIER_SYSTEM = """\
You check math solutions and, when one is not right, hand the problem to a stronger solver. \
You are given a problem and a proposed solution written by {author}.

Rules:
- Go through the proposed solution step by step.
- If any step is wrong, unjustified or incomplete, or relies on an assumption that does not \
hold, the verdict is False and the problem goes to a solver stronger than {author}.
- If the solution is entirely correct, the verdict is True and the work stops.
- The solvers, from weakest to strongest, are: {agents}.
- {routing_rule}

Reply format (use exactly this structure):
- Your check inside a <checking> tag.
- Then <verdict>True</verdict> or <verdict>False</verdict>.
- {model_rule}

{examples}"""

SOLVER_SYSTEM = (
    "You are a careful mathematician. Solve the problem step by step and give the final "
    "answer as \\boxed{ANSWER}."
)


#: the notes of the filled-in example replies in the prompts (issue 31: a small model copies
#: a bare placeholder such as ``<model>SOLVER NAME</model>``; a concrete reply it can adapt)
EXAMPLE_ROUTE_NOTE = "A two-step word problem with small numbers; a mid-strength solver suffices."
#: the verify prompt's example notes, (rejecting, accepting) per wording; a verify turn's
#: wording and the order of its two examples come from :func:`example_variant` (issue 31: with
#: the rejection always first a small model copied it, a bias toward rejecting)
VERIFY_EXAMPLE_NOTES: tuple[tuple[str, str], ...] = (
    (
        "Step 2 adds 12 instead of subtracting it, so the final answer is wrong.",
        "Every step follows from the previous one and the final answer checks out.",
    ),
    (
        "The last step divides by 4 where the equation needs 3, so the boxed answer is off.",
        "Substituting the boxed answer back into the problem confirms it; no step is wrong.",
    ),
)
#: how many distinct verify prompts :func:`example_variant` picks from (order x wording)
N_EXAMPLE_VARIANTS = 2 * len(VERIFY_EXAMPLE_NOTES)


@lru_cache(maxsize=4096)
def example_variant(task_id: str, turn: int) -> int:
    """Which order and wording the verify examples take at ``turn`` of the episode on task
    ``task_id``: a hash of the two (the same in every process), so it is fixed before any
    draft exists and carries nothing about whether the draft under review is right.
    Cached (a pure function of its arguments, read on every observation of a verify turn)."""
    key = f"{task_id}\x00{turn}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % N_EXAMPLE_VARIANTS


def route_example(agents: Sequence[str]) -> str:
    """A filled-in routing reply naming a real solver of ``agents`` (the middle one)."""
    return route_text(agents[len(agents) // 2], EXAMPLE_ROUTE_NOTE) if agents else ""


def _verify_pair(stronger: Sequence[str], variant: int) -> list[tuple[str, str]]:
    """The two example replies of a verify turn as (label, text), in ``variant``'s order."""
    reject_note, accept_note = VERIFY_EXAMPLE_NOTES[(variant // 2) % len(VERIFY_EXAMPLE_NOTES)]
    pair = [
        ("rejecting", verdict_text(False, stronger[0] if stronger else None, reject_note)),
        ("accepting", verdict_text(True, None, accept_note)),
    ]
    return pair[::-1] if variant % 2 else pair


def verify_examples(stronger: Sequence[str], variant: int = 0) -> str:
    """The filled-in verification replies for a verify turn: a rejection naming a real solver
    of ``stronger`` (a bare False when nobody stronger is left) and an acceptance, in the
    order and wording of ``variant`` (:func:`example_variant`; 0: the rejection first)."""
    return "\n\n".join(
        f"Example reply {label} the solution:\n{text}"
        for label, text in _verify_pair(stronger, variant)
    )


def model_rule(stronger: Sequence[str]) -> str:
    """The verify prompt's line on the ``<model>`` tag (none when nobody stronger is left)."""
    if not stronger:
        return "Give no <model> tag: nobody stronger is left, so a False verdict ends the work."
    return (
        "Only after a False verdict, on the next line: the exact name of one stronger solver "
        "inside a <model> tag."
    )


def example_reply(
    phase_agents: Sequence[str] | None, stronger: Sequence[str], variant: int = 0
) -> str:
    """A valid reply for the current phase, for the notice after an unusable one:
    ``phase_agents`` is the pool at a route turn, ``None`` at a verify turn, where the reply
    is the first example of the turn's prompt (``verify_examples(stronger, variant)``)."""
    if phase_agents is not None:
        return route_example(phase_agents)
    return _verify_pair(stronger, variant)[0][1]


def route_text(agent: str, note: str = "") -> str:
    """Canonical routing action."""
    return f"<thinking>{note}</thinking>\n<model>{agent}</model>"


def verdict_text(accept: bool, agent: str | None = None, note: str = "") -> str:
    """Canonical verification action (``agent`` only after a False verdict)."""
    text = f"<checking>{note}</checking>\n<verdict>{accept}</verdict>"
    if not accept and agent:
        text += f"\n<model>{agent}</model>"
    return text


@dataclass(frozen=True)
class Decision:
    """What a controller turn asked for.

    ``verdict`` is None for a routing-only turn; ``agent`` is None when no agent
    is to be called (accept, or reject with nobody stronger left). ``error`` is
    set (and the other fields are meaningless) when the text was malformed.
    """

    agent: str | None = None
    verdict: bool | None = None
    feedback: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _agent_error(raw: str | None, text: str, allowed: Sequence[str], what: str) -> str:
    if raw is not None and is_placeholder(raw):
        return (
            f"{raw[:80]!r} is a placeholder, not a solver; write the exact name of one of: "
            f"{', '.join(allowed)}"
        )
    if raw is None:
        if has_open_tag(text, "model"):
            return (
                f"found <model> without a closing </model>; expected a <model> tag holding one "
                f"of {', '.join(allowed)}"
            )
        return f"no <model> tag found; {what} must name one of: {', '.join(allowed)}"
    return f"{raw[:80]!r} is not an agent that can be called now; expected one of: {', '.join(allowed)}.{suggest_agent(raw, allowed)}"


#: actions up to this many characters have their parse cached (``parse_route`` /
#: ``parse_verify``): the parse is a pure function of its arguments, and scripted, cycled and
#: discrete-view controllers repeat a handful of action texts (issue 40)
PARSE_CACHE_CHARS = 2048
_PARSE_CACHE_SIZE = 1024


def _cacheable(text: object) -> bool:
    return type(text) is str and len(text) <= PARSE_CACHE_CHARS


def parse_route(text: object, allowed: Sequence[str]) -> Decision:
    """Turn-1 routing: ``<model>NAME</model>`` with NAME in ``allowed``. (The parse of a
    short action is cached: ``PARSE_CACHE_CHARS``.)"""
    if _cacheable(text):
        return _parse_route_cached(text, tuple(allowed))  # type: ignore[arg-type]
    return _parse_route(text, allowed)


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse_route_cached(text: str, allowed: tuple[str, ...]) -> Decision:
    return _parse_route(text, allowed)


def _parse_route(text: object, allowed: Sequence[str]) -> Decision:
    if not isinstance(text, str):
        return Decision(error=f"the action must be a str, got {type(text).__name__}")
    feedback = extract_tag(text, "thinking", keep_reasoning=True) or ""
    text = strip_reasoning(text)
    raw = extract_tag(text, "model", keep_reasoning=True)
    agent = match_agent(raw, allowed)
    if agent is None:
        return Decision(error=_agent_error(raw, text, allowed, "the routing decision"))
    return Decision(agent=agent, feedback=feedback)


def parse_verify(
    text: object, known: Sequence[str], stronger: Sequence[str], *, require_stronger: bool = True
) -> Decision:
    """Turn >= 2: ``<checking>..</checking><verdict>True|False</verdict>[<model>NAME</model>]``.

    A False verdict must name an agent; with ``require_stronger`` it must be one of
    ``stronger`` (agents stronger than the draft's author), else any of ``known``.
    When nobody stronger is left, a bare False verdict is valid and ends the episode; a
    ``<model>`` tag then names nobody that can be called and makes the reply invalid (issue
    31: a copied ``<model>SOLVER NAME</model>`` must not count as an action). A model named
    after a True verdict is ignored. (The parse of a short action is cached:
    ``PARSE_CACHE_CHARS``.)
    """
    if _cacheable(text):
        return _parse_verify_cached(
            text,  # type: ignore[arg-type]
            tuple(known),
            tuple(stronger),
            require_stronger,
        )
    return _parse_verify(text, known, stronger, require_stronger=require_stronger)


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse_verify_cached(
    text: str, known: tuple[str, ...], stronger: tuple[str, ...], require_stronger: bool
) -> Decision:
    return _parse_verify(text, known, stronger, require_stronger=require_stronger)


def _parse_verify(
    text: object, known: Sequence[str], stronger: Sequence[str], *, require_stronger: bool
) -> Decision:
    if not isinstance(text, str):
        return Decision(error=f"the action must be a str, got {type(text).__name__}")
    text = strip_reasoning(text)
    raw_verdict = extract_tag(text, "verdict", keep_reasoning=True)
    verdict = parse_bool(raw_verdict)
    if verdict is None:
        if raw_verdict is None:
            hint = (
                "found <verdict> without a closing </verdict>"
                if has_open_tag(text, "verdict")
                else "no <verdict>...</verdict> tag found"
            )
        else:
            hint = f"verdict {raw_verdict[:40]!r} is neither True nor False"
        return Decision(
            error=f"{hint}; expected <verdict>True</verdict> or <verdict>False</verdict>"
        )
    feedback = extract_tag(text, "checking", keep_reasoning=True) or ""
    if verdict:
        return Decision(verdict=True, feedback=feedback)
    allowed = list(stronger) if require_stronger else list(known)
    raw = extract_tag(text, "model", keep_reasoning=True)
    if not allowed:
        if raw is not None:
            return Decision(
                error=f"after a False verdict on the strongest available solver's draft, nobody "
                f"is left to route to: give the verdict alone, without a <model> tag "
                f"({raw[:80]!r} was named)"
            )
        return Decision(verdict=False, feedback=feedback)
    agent = match_agent(raw, allowed)
    if agent is None:
        if raw is not None and require_stronger and match_agent(raw, known):
            return Decision(
                error=f"{raw[:80]!r} is not stronger than the agent that wrote the draft; "
                f"after a False verdict route to one of: {', '.join(allowed)}"
            )
        return Decision(error=_agent_error(raw, text, allowed, "a False verdict"))
    return Decision(agent=agent, verdict=False, feedback=feedback)
