"""How a simulated expert of ``orch/BudgetRoute-v0`` reads the sub-query it is sent.

Seed 001's controller "decomposes [the problem] into sub-queries" and beats o3 "via adapted
query phrasing" (sections 1 and 4.3). A simulated expert must therefore answer the request it
gets, not the original problem. This module has two halves:

* the **playbook** (no privileged information): from the problem's *text* alone, the key step
  a competent controller would name (``key_step_for(question)``), and the canonical requests
  a discrete controller picks from (``canonical_requests``);
* the **judge** (privileged: it knows the task's family, reference solution and which earlier
  replies were right): how much a request helps the expert, as a logit
  (``CallContext.guidance``) that the simulated backend adds to the expert's margin.

The key step of a task is the method its reference solution turns on: for procedural-math
tasks (the default source) one entry of ``KEY_STEPS`` per family and problem kind (e.g. a
modular power: "find the period of the powers"; a committee: "binomial coefficients"); for
tasks from other sources with a reference solution, the content words of that solution's
first step. A request *names* the key step when it contains one of the step's cues (outside
the problem's own text). Guidance values are documented assumptions (docs/budgetroute.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: logits the judge adds to the expert's margin (assumptions, see docs/budgetroute.md)
HINT_LOGIT = 1.0  # the request names the key step: the expert is pointed at the method
STEP_LOGIT = 1.75  # the request asks for the key step alone: a smaller problem than the whole
CARRY_LOGIT = 1.75  # the request carries a right key step (or -: a wrong one) to finish from
MISLEAD_LOGIT = -1.0  # the request names a method that is not this problem's
SCATTER_LOGIT = -3.0  # the request names many methods at once: noise that buries the problem
PARTIAL_LOGIT = -3.0  # the request leaves out part of the problem's data
UNRELATED_LOGIT = -12.0  # the request is not about this problem (empty, generic or unrelated)

#: how much of the problem's data (its numbers) a request must repeat to be about it
ON_TOPIC, PARTLY_ON_TOPIC = 0.75, 0.4
#: how much of what the problem asks (its words and operators) a request must carry
ASKED, PARTLY_ASKED = 0.5, 0.25

RequestKind = Literal["unrelated", "partial", "whole", "pointed", "misled", "key-step", "finish"]


@dataclass(frozen=True)
class KeyStep:
    """The method a problem turns on: ``instruction`` is how a controller would name it,
    ``cues`` the phrases (lower case) by which the judge recognises it in a request."""

    family: str
    instruction: str
    cues: tuple[str, ...]
    pattern: str | None = None  # a regex on the problem text selecting this kind; None: default

    def named_in(self, text: str) -> bool:
        return any(cue in text for cue in self.cues)


def _k(family: str, pattern: str | None, instruction: str, *cues: str) -> KeyStep:
    return KeyStep(family, instruction, cues, pattern)


#: procedural-math's key steps, by family; within a family the first matching pattern wins
KEY_STEPS: tuple[KeyStep, ...] = (
    _k(
        "fractions",
        r"lowest terms",
        "rewrite the fractions over a common denominator, combine the numerators, then simplify",
        "common denominator",
    ),  # fmt: skip
    _k(
        "arithmetic",
        None,
        "use the order of operations: parentheses first, then multiplication "
        "and division from left to right, then addition and subtraction",
        "order of operations",
    ),  # fmt: skip
    _k(
        "linear_equation",
        None,
        "expand the products, collect the x terms on one side and the "
        "constants on the other, then divide by the coefficient of x",
        "collect the x",
        "isolate x",
        "like terms",
    ),  # fmt: skip
    _k(
        "linear_system",
        None,
        "eliminate one variable: scale the equations so that x has the "
        "same coefficient, subtract them, solve for y, then substitute back",
        "eliminat",
    ),  # fmt: skip
    _k(
        "gcd_lcm",
        None,
        "factor each number into primes: the gcd takes the lowest power of each "
        "shared prime, the lcm the highest power of every prime",
        "into primes",
        "prime factor",
    ),  # fmt: skip
    _k(
        "modular",
        r"\^",
        "reduce the base modulo the divisor, find the period of its powers, "
        "then reduce the exponent modulo that period",
        "period",
        "cycle",
    ),  # fmt: skip
    _k(
        "modular",
        None,
        "reduce each number modulo the divisor first, then combine the remainders",
        "reduce each number",
        "remainders first",
    ),  # fmt: skip
    _k(
        "counting",
        r"arranged in a row",
        "count the arrangements in a row as a factorial",
        "factorial",
    ),  # fmt: skip
    _k(
        "counting",
        r"consisting of one",
        "use the multiplication principle: multiply the number of choices for each item",
        "multiplication principle",
        "product rule",
    ),  # fmt: skip
    _k(
        "counting",
        r"more than one (office|prize)",
        "order matters: multiply the choices for each position in turn (a permutation)",
        "order matters",
        "permutation",
    ),  # fmt: skip
    _k(
        "counting",
        r"at least one",
        "count the complement: all selections minus those with none of the required kind",
        "complement",
    ),  # fmt: skip
    _k(
        "counting",
        None,
        "order does not matter: count each selection with a binomial "
        "coefficient (and multiply across groups)",
        "binomial",
        "combination",
    ),  # fmt: skip
    _k(
        "series",
        r"geometric|^Evaluate the sum",
        "treat it as a geometric series: find "
        "the first term, the common ratio and the number of terms, then use the geometric sum "
        "formula",
        "geometric series",
        "geometric sum",
        "common ratio",
    ),  # fmt: skip
    _k(
        "series",
        None,
        "count the terms, then use the arithmetic series formula: the number of "
        "terms times the average of the first and last terms",
        "arithmetic series",
        "number of terms",
    ),  # fmt: skip
    _k(
        "quadratic",
        r"r_1",
        "use Vieta's formulas for the sum and the product of the roots",
        "vieta",
    ),  # fmt: skip
    _k(
        "quadratic",
        None,
        "divide by the leading coefficient and factor the quadratic to read off its roots",
        "factor the quadratic",
        "factoring",
    ),  # fmt: skip
    _k(
        "probability",
        r"at least one|at least once",
        "use the complement: one minus the probability that it never happens",
        "complement",
    ),  # fmt: skip
    _k(
        "probability",
        r"dice",
        "list the favorable outcomes among the equally likely ordered outcomes",
        "favorable outcomes",
        "equally likely",
    ),  # fmt: skip
    _k(
        "probability",
        r"both are",
        "multiply the probability of the first draw by that of the second draw from what is left",
        "second draw",
        "first draw",
    ),  # fmt: skip
    _k(
        "probability",
        r"exactly",
        "count with binomial coefficients: the ways to pick the red "
        "and the blue marbles over the ways to pick any",
        "binomial",
        "combination",
    ),  # fmt: skip
    _k(
        "probability",
        None,
        "divide the favorable count by the total count",
        "favorable count",
        "total count",
    ),  # fmt: skip
    _k(
        "percent",
        r"raised by",
        "apply the two changes as multipliers, one after the other",
        "multiplier",
    ),  # fmt: skip
    _k(
        "percent",
        r"ratio",
        "split the total into equal parts, one per unit of the ratio",
        "equal parts",
    ),  # fmt: skip
    _k(
        "percent",
        r"discount",
        "the sale price is the remaining percent of the original: divide by that fraction",
        "remaining percent",
    ),  # fmt: skip
    _k(
        "percent",
        r"population",
        "multiply the two growth factors, then subtract one",
        "growth factor",
    ),  # fmt: skip
    _k("percent", None, "write the percent as a fraction over 100 and multiply", "over 100"),
)
FAMILIES = tuple(dict.fromkeys(k.family for k in KEY_STEPS))


def _matches(step: KeyStep, question: str) -> bool:
    return step.pattern is None or re.search(step.pattern, question) is not None


def family_key_step(family: str, question: str) -> KeyStep | None:
    """The key step of a procedural problem of ``family`` (judge side: the family is known)."""
    return next((k for k in KEY_STEPS if k.family == family and _matches(k, question)), None)


# -- the playbook: what a controller can derive from the problem text -------------------------
_FAMILY_BY_TEXT: tuple[tuple[str, str], ...] = (
    ("fractions", r"lowest terms"),
    ("gcd_lcm", r"common divisor|common multiple"),
    ("modular", r"remainder when"),
    ("quadratic", r"x\^2"),
    ("linear_system", r"\$x\$ and \$y\$|and \$[-\d]*x [+-] \d*y"),
    ("linear_equation", r"\$x\$"),
    ("probability", r"probability"),
    ("series", r"sum \$|sum of the first|arithmetic sequence|multiples of"),
    ("percent", r"\\%|ratio of"),
    ("counting", r"how many"),
    ("arithmetic", r"^(Evaluate|Compute|What is the value of) \$[^$]*\$[.?]$"),
)


def key_step_for(question: str) -> KeyStep | None:
    """The key step a controller would name, read from the problem text alone (no gold)."""
    for family, pattern in _FAMILY_BY_TEXT:
        if re.search(pattern, question, re.IGNORECASE):
            return family_key_step(family, question)
    return None


#: how a request says it wants the key step alone (``canonical_requests`` uses the first)
_ONLY_THIS_STEP = re.compile(
    r"\b(only|just)\b[^.\n]{0,40}\bstep\b|\bstop (after|there)\b|\bdo not finish\b", re.IGNORECASE
)
FINISH_HEADER = "The key step, worked out:"


def canonical_requests(question: str) -> dict[str, str | None]:
    """The sub-queries a discrete controller picks from, built from the problem text alone:
    ``whole`` (the problem as given), ``pointed`` (plus its key step), ``key-step`` (the key
    step alone). ``None`` where the playbook knows no key step for this problem."""
    step = key_step_for(question)
    return {
        "whole": question,
        "pointed": None if step is None else f"{question}\nKey step: {step.instruction}.",
        "key-step": None
        if step is None
        else f"Do only this step and stop there: {step.instruction}.\nProblem: {question}",
    }


def finish_request(question: str, partial: str) -> str:
    """The sub-query that hands a worked key step to an expert to finish the problem."""
    return f"{question}\n{FINISH_HEADER}\n{partial}\nFinish the problem from this step."


# -- the judge (privileged) -----------------------------------------------------------------
@dataclass(frozen=True)
class KeyStepReply:
    """A reply to a key-step request, as the judge remembers it: the work shown to the
    controller and whether that key step was right (privileged; ``None``: unknown)."""

    shown: str
    right: bool | None


@dataclass(frozen=True)
class Judgement:
    """What the judge made of a request: its kind and the logit it adds to the expert."""

    kind: RequestKind
    guidance: float
    coverage: float  # the smaller of the shares of the problem's numbers and words it repeats


_NUMBER = re.compile(r"\d+")
_WORD = re.compile(r"[a-z]{4,}")
_MATH_SPAN = re.compile(r"\$[^$]*\$")
_MATH_TOKEN = re.compile(r"\\[a-z]+|\d+|(?<![a-z\\])[a-z](?![a-z])|[-+^=%:()]")
_TEXT_WORD = re.compile(r"[a-z]{3,}")
#: how a request may spell the problem's operators (normalised before comparing)
_SPELLINGS = (
    ("\u00d7", " \\times "), ("\u22c5", " \\times "), ("\\cdot ", " \\times "),
    ("*", " \\times "), ("\u00f7", " \\div "), ("\u2212", "-"), ("\u2026", " \\cdots "),
    ("...", " \\cdots "), ("\\dots", " \\cdots "), ("\\ldots", " \\cdots "),
)  # fmt: skip
#: LaTeX that only formats (not content)
_FORMATTING = frozenset(("\\left", "\\right", "\\,", "\\displaystyle", "\\text", "\\dfrac"))
#: words that carry no content of a problem: function words and politeness
_FUNCTION_WORDS = frozenset(
    (
        *("the", "and", "are", "for", "its", "how", "was", "has", "had", "can", "you", "your"),
        *("what", "when", "which", "that", "this", "with", "from", "into", "then", "than"),
        *("there", "their", "these", "those", "does", "did", "is", "be", "been", "being", "let"),
        *("please", "kindly", "could", "would", "should", "will", "may", "might", "must"),
        *(
            "help",
            "thank",
            "answer",
            "thanks",
            "hello",
            "dear",
            "tell",
            "give",
            "need",
            "want",
            "like",
        ),
        *("question", "problem", "solve", "following", "here", "some", "any", "all", "also"),
        *("about", "just", "only", "very", "much", "our", "out", "who", "whose", "them"),
    )
)


#: a few math words a request may use for the problem's (compared after stemming)
_SYNONYMS = {
    "mod": "remainder", "modulo": "remainder", "modulus": "remainder", "chance": "probability",
    "likelihood": "probability", "odds": "probability", "gcd": "divisor", "gcf": "divisor",
    "hcf": "divisor", "lcm": "multiple", "evaluate": "compute", "calculate": "compute",
    "work": "compute", "simplify": "compute", "determine": "find",
}  # fmt: skip
#: a sentence that only asks for the answer's format (not the problem's content)
_FORMAT_SENTENCE = re.compile(r"express your answer[^.?!]*[.?!]?", re.IGNORECASE)


def _stem(word: str) -> str:
    return _SYNONYMS.get(word, word)[:4]


def content(text: str, *, request: bool = False) -> tuple[frozenset[str], ...]:
    """A text's content as three sets: its numbers, its operators and variables (math
    tokens other than numbers), and the stems of its content words (outside ``$...$``).
    Order, spacing, politeness and inflection do not change them. A problem's math is read
    from its ``$...$`` spans; a request's (``request=True``) from all of it, formatted or not."""
    text = _FORMAT_SENTENCE.sub(" ", text.lower())
    for spelling, canonical in _SPELLINGS:
        text = text.replace(spelling, canonical)
    if request:  # a slash is a fraction or a division
        text = text.replace("/", " \\frac \\div ")
    spans = None if request else _MATH_SPAN.findall(text)
    math, prose = (" ".join(spans), _MATH_SPAN.sub(" ", text)) if spans else (text, text)
    tokens = {t for t in _MATH_TOKEN.findall(math) if t not in _FORMATTING}
    numbers = frozenset(t for t in tokens if t.isdigit())
    ops = frozenset(t for t in tokens if not t.isdigit())
    words = frozenset(_stem(w) for w in _TEXT_WORD.findall(prose) if w not in _FUNCTION_WORDS)
    return numbers, ops, words


def _share(wanted: frozenset[str], got: frozenset[str]) -> float:
    return 1.0 if not wanted else len(wanted & got) / len(wanted)


def coverage(request: str, question: str) -> float:
    """How much of the problem's data the request repeats: the share of the problem's
    distinct numbers found in it (of its content words when it has no numbers)."""
    numbers, _, words = content(question)
    got_numbers, _, got_words = content(request, request=True)
    if numbers:
        return _share(numbers, got_numbers)
    return _share(words, got_words)


def asked_coverage(request: str, question: str) -> float:
    """How much of what the problem asks the request carries: the share of the problem's
    operators, variables and content-word stems (not its numbers) found in it. A request
    made of the problem's numbers alone scores 0 (unless the problem is a bare expression
    whose operators it repeats, which is the whole problem)."""
    _, ops, words = content(question)
    _, got_ops, got_words = content(request, request=True)
    return _share(ops | words, got_ops | got_words)


_STOP = frozenset(
    (
        *("about", "above", "after", "again", "their", "there", "these", "those", "which"),
        *("where", "while", "would", "could", "should", "since", "then", "than", "that"),
        *("this", "with", "from", "into", "have", "will", "each", "both", "first", "second"),
        *("third", "using", "given", "find", "compute", "answer", "problem", "solve", "value"),
    )
)


def _solution_step(solution: str, question: str) -> KeyStep | None:
    """A key step for a task from another source: the first step of its reference solution,
    recognised by its content words absent from the problem (two of them, or the only one)."""
    lines = [ln.strip() for ln in solution.splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.lower().startswith("let's")), "")
    first = re.sub(r"^(step\s*)?1[.:]\s*", "", first, flags=re.IGNORECASE).split(". ")[0]
    seen = set(_WORD.findall(question.lower()))
    words = [w for w in dict.fromkeys(_WORD.findall(first.lower())) if w not in seen | _STOP]
    if not words:
        return None
    return KeyStep("solution", first, tuple(words[:6]))


def task_key_step(question: str, family: str | None, solution: str | None) -> KeyStep | None:
    """The task's key step (judge side): by family for procedural tasks, else from the
    reference solution, else none."""
    if family:
        step = family_key_step(family, question)
        if step is not None:
            return step
    return _solution_step(solution, question) if solution else None


def _names_step(step: KeyStep, text: str, question: str = "") -> bool:
    """Whether ``text`` names ``step`` with a cue that the problem (``question``, lower case)
    does not already contain."""
    cues = [cue for cue in step.cues if cue not in question]
    if step.family == "solution":  # cues are single words: ask for two of them
        return sum(cue in text for cue in cues) >= min(2, len(step.cues))
    return any(cue in text for cue in cues)


def judge(
    request: str,
    question: str,
    step: KeyStep | None,
    key_step_replies: Sequence[KeyStepReply] = (),
) -> Judgement:
    """How a request for ``question`` helps the expert that receives it.

    In order: a request that repeats too little of the problem's data (its numbers) or of
    what it asks (its words and operators: ``asked_coverage``) is ``unrelated`` (or
    ``partial``); a request of the problem's numbers alone is ``unrelated``; one that quotes an earlier key-step reply is ``finish`` (helped when
    that step was right, misled when it was wrong); one that names the key step is
    ``pointed``, or ``key-step`` when it asks for that step alone; one that names another
    method instead, or several at once, is ``misled``; otherwise ``whole``.
    """
    share = coverage(request, question)
    asked = asked_coverage(request, question)
    if share < PARTLY_ON_TOPIC or asked < PARTLY_ASKED:
        return Judgement("unrelated", UNRELATED_LOGIT, min(share, asked))
    base = 0.0 if share >= ON_TOPIC and asked >= ASKED else PARTIAL_LOGIT
    for reply in reversed(key_step_replies):
        quoted = [ln for ln in reply.shown.splitlines() if len(ln.strip()) >= 25]
        if quoted and any(ln.strip() in request for ln in quoted):
            carry = 0.0 if reply.right is None else (CARRY_LOGIT if reply.right else -CARRY_LOGIT)
            return Judgement("finish", base + carry, min(share, asked))
    # the problem's own words name nothing, quoted verbatim or paraphrased
    own, asked_text = request.replace(question, " ").lower(), question.lower()
    right = step is not None and _names_step(step, own, asked_text)
    others = {
        k.instruction
        for k in KEY_STEPS
        if (step is None or k.instruction != step.instruction)
        and any(
            cue in own and cue not in asked_text and (step is None or cue not in step.cues)
            for cue in k.cues
        )
    }
    share = min(share, asked)
    if len(others) >= 2:
        return Judgement("misled", base + SCATTER_LOGIT, share)
    if others and not right:
        return Judgement("misled", base + MISLEAD_LOGIT, share)
    if right and _ONLY_THIS_STEP.search(own):
        return Judgement("key-step", base + STEP_LOGIT, share)
    if right:
        return Judgement("pointed", base + HINT_LOGIT, share)
    return Judgement("partial" if base else "whole", base, share)


def partial_work(reply: str) -> str:
    """A worked solution cut before its last step and final answer: what a simulated expert
    asked for the key step alone shows (its reply continues to the end of the problem)."""
    lines = reply.rstrip().splitlines()
    boxed = [i for i, ln in enumerate(lines) if "\\boxed" in ln or "\\fbox" in ln]
    end = boxed[-1] if boxed else len(lines)
    kept = [ln for ln in lines[:end] if ln.strip()]
    if len(kept) > 1:
        kept = kept[:-1]  # the last step computes the final answer: the expert stopped before
    return "\n".join(kept) if kept else "(no work shown)"
