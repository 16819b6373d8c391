"""How much a controller's critique helps the next solver (simulation only, privileged).

Seed 000's controller writes a critique (``<checking>``) that the next solver reads
with the rejected draft. A live solver benefits from a critique that finds the wrong
step and not from "please recheck". The simulated solvers cannot read, so the env
judges the critique against the draft's actual error and passes the judgement to
them as ``CallContext.guidance`` (a logit added to the solver's margin). The error's
location is privileged: it is computed from the task's reference solution, used by
the simulation only and never shown to the controller.

Locating the error: a simulated wrong draft (``mathgen.worked_solution``) is the
correct solution in the same phrasing with one step changed (procedural tasks: an
injected mistake that propagates; file tasks: the reference solution with its last
steps perturbed). The simulated backend lays the steps out in its own shape (lines,
numbering, neutral prose) but keeps their mathematics, so the line holding the first
``$...$`` segment that departs from the correct solution's is the faulty step.

Judging the critique (``judge_critique``):

* ``"pointed"``: names the faulty step (``step 5``, ``line 5``; one step only) and gives
  the value it should have (``Step 5 should give 12``), or names no step and quotes both
  the wrong value the step wrote and the value it should have (``30/-5 is -6, not -5``);
  at most four distinct numbers besides the step's;
* ``"misleading"``: names one or two steps but not the faulty one, or names a step of
  a draft that has no error;
* ``"empty"``: no critique; ``"generic"``: anything else ("recheck the algebra"),
  including a list of more than two steps or of many numbers (a shotgun points nowhere),
  and naming the faulty step (or it and one more) without the value it should give.

Why the value (issue 38): naming steps alone can be guessed. Wrong drafts of the weakest
agent have their error at step 2 or 3 in 54% (System 1) / 60% (System 2) of cases, so the
fixed, draft-blind "Step 2 and step 3 look wrong." was judged pointed on 59% of them, above
any verifier that only guesses. The value a step should give cannot be guessed without
checking the step; with it required, a blind critique is never pointed. (A draft whose
faulty line has no differing number, ``ErrorSite.right`` None, is pointed at by naming that
one step: a guess hits it at chance over the draft's steps.)
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from orchenv.envs.mathroute.mathgen import worked_solution
from orchenv.tasks import Task

#: logit each kind of critique adds to the next solver's margin (``MathRouteEnv(critique_logits)``).
#: Assumptions, not measurements: a critique that finds the wrong step is worth about half
#: the effect of seeing the draft at all (``refinement_logit`` 0.75); a wrong pointer hurts.
CRITIQUE_LOGITS: Mapping[str, float] = {
    "pointed": 0.5,
    "generic": 0.0,
    "empty": 0.0,
    "misleading": -0.25,
}
#: the content-blind bonus of orchenv <= 0.x: any non-empty critique (``critique_bonus="fixed"``)
FIXED_FEEDBACK_LOGIT = 0.25
#: how the env turns a critique into ``CallContext.guidance``
CRITIQUE_MODES = ("judged", "fixed", "off")

_STYLES = 3  # phrasings mathgen renders solutions in
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_STEP_PREFIX_RE = re.compile(r"^\s*(?:step\s*)?(\d+)\s*[:.]", re.IGNORECASE)
_STEP_REF_RE = re.compile(r"\b(?:steps?|lines?)\s*#?\s*(\d+)\b", re.IGNORECASE)
_MAX_NAMED_STEPS = 2
_MAX_QUOTED_NUMBERS = 4  # more numbers than a correction needs: a list, not a pointer


@dataclass(frozen=True)
class ErrorSite:
    """Where a wrong draft first departs from a correct solution.

    ``line``: 1-based index of the faulty line; ``step``: its written step number (None
    when lines are not numbered); ``wrong`` / ``right``: the first number that differs
    there and the number the correct solution has in its place (None when none differs).
    """

    line: int
    step: int | None
    wrong: str | None
    right: str | None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines() if line.strip()]


#: the last tasks' correct renderings (``_references``), keyed on the task's id and prompt:
#: rendering three solutions was a tenth of a MathRoute step that judges a critique (issue 40)
_REFERENCE_CACHE: OrderedDict[tuple[str, str], list[list[str]]] = OrderedDict()
_REFERENCE_CACHE_SIZE = 8192  # MathRoute's 7,500 train tasks (4096 missed in steady state)
_UNITS_CACHE: OrderedDict[tuple[str, str, bool], list[list[str]]] = OrderedDict()
_REFERENCE_LOCK = threading.Lock()


def _references(task: Task) -> list[list[str]]:
    """The correct rendering of ``task`` in every phrasing (deterministic: no draw is used;
    cached per task id and prompt)."""
    key = (str(task.id), str(task.prompt))
    with _REFERENCE_LOCK:
        cached = _REFERENCE_CACHE.get(key)
        if cached is not None:
            _REFERENCE_CACHE.move_to_end(key)
            return cached
    rng = np.random.default_rng(0)
    refs = [_lines(worked_solution(task, correct=True, rng=rng, style=s)) for s in range(_STYLES)]
    with _REFERENCE_LOCK:
        _REFERENCE_CACHE[key] = refs
        while len(_REFERENCE_CACHE) > _REFERENCE_CACHE_SIZE:
            _REFERENCE_CACHE.popitem(last=False)
    return refs


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


#: a draft's mathematics (``$...$``): what the simulated writer keeps whatever the layout
_MATH_RE = re.compile(r"\$[^$]*\$")
#: the simulated layout's recap of a draft's values (``orchenv.backends.simulated``): after the
#: steps, so its mathematics is not a step's
_RECAP_MARK = "Values used along the way:"


def _maths(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, segment) of every ``$...$`` in ``lines``, the recap (and what follows it
    before the final answer) left out."""
    out: list[tuple[int, str]] = []
    in_recap = False  # the recap may run on over lines; only the final answer follows it
    for i, line in enumerate(lines):
        if "\\boxed" not in line:
            if in_recap:
                continue
            recap = line.find(_RECAP_MARK)
            if recap >= 0:
                line, in_recap = line[:recap], True
        out.extend((i, m) for m in _MATH_RE.findall(line))
    return out


def _units(lines: list[str], maths: bool) -> list[tuple[int, str]]:
    """What is compared: the ``$...$`` segments (``maths``) or the whole lines, by line."""
    return _maths(lines) if maths else list(enumerate(lines))


def _reference_units(task: Task, maths: bool) -> list[list[str]]:
    """The units of ``task``'s correct renderings (distinct ones; cached per task id and
    prompt beside ``_references``)."""
    key = (str(task.id), str(task.prompt), maths)
    with _REFERENCE_LOCK:
        cached = _UNITS_CACHE.get(key)
        if cached is not None:
            _UNITS_CACHE.move_to_end(key)
            return cached
    found: list[list[str]] = []
    for ref in _references(task):
        units = [u for _, u in _units(ref, maths)]
        if units not in found:
            found.append(units)
    with _REFERENCE_LOCK:
        _UNITS_CACHE[key] = found
        while len(_UNITS_CACHE) > _REFERENCE_CACHE_SIZE:
            _UNITS_CACHE.popitem(last=False)
    return found


def locate_error(task: Task, draft: str) -> ErrorSite | None:
    """The faulty step of ``draft`` (privileged: reads the reference solution); None when the
    draft matches a correct rendering.

    The simulated backend lays a writer's steps out in its own shape (lines, numbering,
    neutral prose: ``orchenv.backends.simulated.lay_out_draft``) but keeps every step's
    mathematics, so a draft that writes ``$...$`` mathematics in its steps is compared segment
    by segment with the correct solution's; one that writes none (a file task's plain-text
    solution) line by line. The line of the first unit that departs is the faulty one, its
    prefix (``Step 3:``, ``3.``) the step a critique names.
    """
    lines = _lines(draft)
    if not lines:
        return None
    maths = any("\\boxed" not in lines[i] for i, _ in _maths(lines))
    got = _units(lines, maths)
    got_units = [u for _, u in got]
    best: tuple[int, list[str]] | None = None
    for want in _reference_units(task, maths):
        n = _common_prefix(got_units, want)
        if best is None or n > best[0]:
            best = (n, want)
    if best is None:  # pragma: no cover - a task always has a rendering
        return None
    n, want = best
    if n >= len(got) and len(got) == len(want):
        return None
    if not got:
        i, faulty, correct = len(lines) - 1, "", ""
    else:
        k = min(n, len(got) - 1)
        i, faulty = got[k]
        correct = want[k] if k < len(want) else ""
    match = _STEP_PREFIX_RE.match(lines[i])
    got_numbers, want_numbers = _NUMBER_RE.findall(faulty), _NUMBER_RE.findall(correct)
    wrong = right = None
    for k, token in enumerate(got_numbers):
        other = want_numbers[k] if k < len(want_numbers) else None
        if token != other:
            wrong, right = token, other
            break
    return ErrorSite(
        line=i + 1, step=int(match.group(1)) if match else None, wrong=wrong, right=right
    )


def judge_critique(critique: str | None, site: ErrorSite | None) -> str:
    """``"pointed"``, ``"misleading"``, ``"generic"`` or ``"empty"`` (see the module doc);
    ``site`` is the draft's error (None: the draft has none)."""
    text = (critique or "").strip()
    if not text:
        return "empty"
    named = {int(n) for n in _STEP_REF_RE.findall(text)}
    if site is None:
        return "misleading" if named else "generic"
    if len(named) > _MAX_NAMED_STEPS:  # a list of steps points nowhere
        return "generic"
    faulty = site.step if site.step is not None else site.line
    numbers = set(_NUMBER_RE.findall(_STEP_REF_RE.sub(" ", text)))  # not the steps' numbers
    if named:
        if faulty not in named:
            return "misleading"
        if len(named) > 1 or len(numbers) > _MAX_QUOTED_NUMBERS:
            return "generic"
        if site.right is None or site.right in numbers:  # says what the step should give
            return "pointed"
        return "generic"
    if (
        site.wrong is not None
        and site.right is not None
        and {site.wrong, site.right} <= numbers
        and len(numbers) <= _MAX_QUOTED_NUMBERS
    ):
        return "pointed"
    return "generic"


def pointed_critique(site: ErrorSite | None) -> str:
    """A critique that points at ``site`` (for privileged analysis: what a verifier that
    finds the wrong step would write)."""
    if site is None:
        return ""
    where = f"Step {site.step}" if site.step is not None else f"Line {site.line}"
    if site.wrong is not None and site.right is not None:
        return f"{where} is wrong: it should give {site.right}, not {site.wrong}."
    return f"{where} is wrong."
