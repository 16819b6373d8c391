"""How Puppeteer's simulated agents answer, revise and use tools (simulation only, privileged).

Seed 003's finding is that compact cyclic chains of critique and refinement help. That can
only show up if a revision acts on the current draft: this module is the model of it. The
numbers are assumptions set so that the directions of the paper's Table 1 hold (Self-Refine
helps GSM-Hard and SRDD, hurts MMLU-Pro and CommonGen-Hard; see docs/puppeteer.md), not fits.

Per call, with ``q`` the model's single-call quality for the family (``presets``), ``c`` its
capability (mean quality over families) and ``g`` the guidance logit the env judged from the
trajectory (tool evidence, a plan, the latest critique):

* answering patterns (``reasoning``; ``question`` at ``QUESTION_LOGIT``): an independent
  re-answer, right with ``sigmoid(logit(q) + g)``; with ``g = 0`` exactly ``q`` (Table 1).
  The draw is correlated across calls on one task (a per-task latent, ``TASK_CORRELATION``)
  without changing its mean;
* ``planning``: writes a plan and no answer; the plan adds ``PLAN_LOGIT`` to later guidance;
* ``critique`` / ``reflect``: write a critique of the draft, then a revised answer; the
  critique of a wrong draft points at the error with probability
  ``sigmoid(logit(specific_rate) + CAPABILITY_SLOPE * (c - 0.5))`` (``reflect``: times
  ``REFLECT_SPECIFIC``); of a right draft it raises a false alarm with ``false_alarm``;
* ``modify``: revises the draft using the latest critique in the trajectory (judged by
  ``judge_critique``: a specific one adds ``CRITIQUE_LOGITS["specific"]``);
* a revision of a wrong draft fixes it with
  ``sigmoid(logit(fix) + CAPABILITY_SLOPE * (c - 0.5) + critique logit + g)``; a right draft
  stays right with ``keep`` (``keep_after_alarm`` after a false alarm);
* ``summarize`` / ``conclude``: restate the draft (right stays right with ``RESTATE_KEEP``,
  wrong is fixed with ``RESTATE_FIX``); without a draft they answer at ``RESTATE_LOGIT``;
* a revising pattern without a draft answers like ``reasoning`` at ``NO_DRAFT_LOGIT``.

Critiques are judged by their content, as ``envs/mathroute/critique.py`` does for MathRoute:
``"specific"`` (names the wrong number / option / a missing concept / a faulty code line),
``"misleading"`` (claims an error in a right draft), ``"empty"`` or ``"generic"``. Live
agents write their own critiques and ignore the guidance (they read the text itself).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from orchenv.envs.puppeteer.tasks import concept_coverage
from orchenv.tasks import Task

_NORMAL = NormalDist()


@dataclass(frozen=True)
class RevisionParams:
    """One family's revision dynamics at capability 0.5 (see the module doc)."""

    keep: float
    keep_after_alarm: float
    fix: float
    specific_rate: float
    false_alarm: float


#: per family; directions from Table 1's Self-Refine rows (GSM-Hard 0.00 -> 0.48 and
#: 0.14 -> 0.53; SRDD 0.46 -> 0.54 and 0.61 -> 0.63; MMLU-Pro 0.53 -> 0.26 and 0.76 -> 0.60;
#: CommonGen-Hard 0.70 -> 0.60 and 0.81 -> 0.70)
REVISION: dict[str, RevisionParams] = {
    "gsm_hard": RevisionParams(
        keep=0.95, keep_after_alarm=0.75, fix=0.22, specific_rate=0.6, false_alarm=0.1
    ),
    "srdd": RevisionParams(
        keep=0.93, keep_after_alarm=0.7, fix=0.15, specific_rate=0.5, false_alarm=0.15
    ),
    "mmlu_pro": RevisionParams(
        keep=0.85, keep_after_alarm=0.45, fix=0.08, specific_rate=0.35, false_alarm=0.25
    ),
    "commongen_hard": RevisionParams(
        keep=0.85, keep_after_alarm=0.55, fix=0.1, specific_rate=0.4, false_alarm=0.25
    ),
}
CAPABILITY_SLOPE = 4.0
#: added to the fix logit by the judged critique (``modify`` reads the latest critique; a
#: ``critique`` / ``reflect`` agent its own)
CRITIQUE_LOGITS: Mapping[str, float] = {
    "specific": 1.5,
    "generic": 0.0,
    "empty": -0.5,
    "misleading": 0.0,
}
REFLECT_SPECIFIC = 0.7
QUESTION_LOGIT = -0.25
NO_DRAFT_LOGIT = -0.5
RESTATE_LOGIT = -0.3
RESTATE_KEEP = 0.98
RESTATE_FIX = 0.03
PLAN_LOGIT = 0.2
#: the share of the answering draw's variance that is the task's (a probit latent per task,
#: shared by every model and call on it): chosen parameter, set with
#: ``outputs.DISTRACTOR_SHARES`` so that agreement gains what self-consistency gains a real
#: model with a few samples (docs/puppeteer.md "Correlated errors"; it was 0.3 before issue 25)
TASK_CORRELATION = 0.8
#: guidance is clipped to this range (evidence does not pile up without bound)
GUIDANCE_RANGE = (-1.5, 3.5)

#: tool evidence (logit added to later answers in the same trajectory), per family:
#: (run_python right, run_python wrong, search with a good query, read_file of a task file)
EVIDENCE: dict[str, tuple[float, float, float, float]] = {
    "gsm_hard": (4.0, -0.5, 0.3, 1.0),
    "mmlu_pro": (0.4, -0.5, 0.2, 0.0),
    "commongen_hard": (1.0, -0.3, 0.2, 0.0),
    "srdd": (1.5, -0.3, 0.4, 0.6),
}
#: how well the family's task translates into a program (scales the model's code skill)
PROGRAM_FIT: dict[str, float] = {
    "gsm_hard": 0.9,
    "mmlu_pro": 0.5,
    "commongen_hard": 0.5,
    "srdd": 1.0,
}
#: the chance a search agent writes a good query: ``QUERY_BASE + QUERY_SLOPE * capability``
QUERY_BASE, QUERY_SLOPE = 0.4, 0.5
#: the chance a read_file agent names the task's own data file (when it has one)
PATH_RIGHT = 0.9


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, x))))


def logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


#: a shifted chance starts from at least this (Table 1's 0.00 for Llama-3.1-8B on GSM-Hard
#: must not make a right program's output useless to it)
SHIFT_FLOOR = 0.02


def shifted(p: float, delta: float) -> float:
    """``p`` moved by ``delta`` in logit space, from within [``SHIFT_FLOOR``, 1 -
    ``SHIFT_FLOOR``] (``delta == 0`` returns ``p`` exactly: the calibrated single call)."""
    if delta == 0:
        return p
    return sigmoid(logit(min(max(p, SHIFT_FLOOR), 1 - SHIFT_FLOOR)) + delta)


def correlated_hit(p: float, task_u: float, call_u: float) -> bool:
    """True with probability exactly ``p`` over ``call_u`` and ``task_u`` (both uniform), with
    calls on the same task (same ``task_u``) correlated by ``TASK_CORRELATION``."""
    if p <= 0.0:
        return False
    if p >= 1.0:
        return True
    r = TASK_CORRELATION
    clip = 1e-12
    z = math.sqrt(r) * _NORMAL.inv_cdf(min(max(task_u, clip), 1 - clip))
    z += math.sqrt(1 - r) * _NORMAL.inv_cdf(min(max(call_u, clip), 1 - clip))
    return z < _NORMAL.inv_cdf(p)


#: the share of a revision's fix draw that is the task's latent (the same per-task latent
#: as the answering draw's): a hard question stays hard when revised, so a loop of blind
#: revisions gains less per round (issue 38). 0 made every round an independent draw.
REVISION_CORRELATION = 0.8


def revision_hit(p: float, task_u: float, call_u: float) -> bool:
    """Whether a revision of a wrong draft fixes it: true with probability exactly ``p``
    over ``call_u`` and ``task_u``, revisions of one task correlated by
    ``REVISION_CORRELATION`` through its latent ``task_u``."""
    return _latent_hit(p, task_u, call_u, REVISION_CORRELATION)


def revision_conditional(p: float, task_u: float) -> float:
    """The chance ``revision_hit(p, task_u, u)`` is true over ``u`` alone (privileged: the
    task's latent known; the skill reference's estimate of a revision's chance)."""
    return _latent_conditional(p, task_u, REVISION_CORRELATION)


#: a program draw's latent (issue 38): ``PROGRAM_SHARED`` of its variance is the task's (shared
#: by every model: a hard task is hard to program for all), ``PROGRAM_MODEL`` the model's own
#: on the task (which coder happens to get this task right), the rest the call's. Repeats of
#: one model on one task are correlated by the sum, 0.8: the answering draw's value, and what
#: sampled programs' pass@k shows (Codex-12B on HumanEval, Chen et al. 2021: pass@1 0.288,
#: pass@100 0.723; a probit latent of 0.8 gives pass@100 0.730 from pass@1 0.288). Two
#: models' programs are correlated by ``PROGRAM_SHARED`` alone (0.4, chosen, not fitted):
#: seed 003's heterogeneity claim (Puppeteer over Puppeteer-Mono, "complementary interactions
#: among heterogeneous agents") needs models that fail on different tasks. Before issue 38's
#: third pass every run was an independent draw.
PROGRAM_SHARED = 0.4
PROGRAM_MODEL = 0.4
PROGRAM_CORRELATION = PROGRAM_SHARED + PROGRAM_MODEL


def _z(u: float) -> float:
    return _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


def program_hit(p: float, task_u: float, model_u: float, call_u: float) -> bool:
    """Whether a ``run_python`` agent writes the task's right program: true with probability
    exactly ``p`` over the three uniforms; ``task_u`` is the task's program latent (every
    model), ``model_u`` this model's on the task, ``call_u`` the call's."""
    if p <= 0.0 or p >= 1.0:
        return p >= 1.0
    z = math.sqrt(PROGRAM_SHARED) * _z(task_u) + math.sqrt(PROGRAM_MODEL) * _z(model_u)
    z += math.sqrt(1 - PROGRAM_CORRELATION) * _z(call_u)
    return z < _NORMAL.inv_cdf(p)


def program_conditional(p: float, task_u: float, model_u: float) -> float:
    """The chance ``program_hit(p, task_u, model_u, u)`` is true over ``u`` alone
    (privileged: both latents known; the skill reference's estimate)."""
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    z = math.sqrt(PROGRAM_SHARED) * _z(task_u) + math.sqrt(PROGRAM_MODEL) * _z(model_u)
    return _NORMAL.cdf((_NORMAL.inv_cdf(p) - z) / math.sqrt(1 - PROGRAM_CORRELATION))


def _latent_hit(p: float, task_u: float, call_u: float, r: float) -> bool:
    if p <= 0.0:
        return False
    if p >= 1.0:
        return True
    clip = 1e-12
    z = math.sqrt(r) * _NORMAL.inv_cdf(min(max(task_u, clip), 1 - clip))
    z += math.sqrt(1 - r) * _NORMAL.inv_cdf(min(max(call_u, clip), 1 - clip))
    return z < _NORMAL.inv_cdf(p)


def _latent_conditional(p: float, task_u: float, r: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    if r >= 1.0:
        return float(_NORMAL.inv_cdf(min(max(task_u, 1e-12), 1 - 1e-12)) < _NORMAL.inv_cdf(p))
    z = math.sqrt(r) * _NORMAL.inv_cdf(min(max(task_u, 1e-12), 1 - 1e-12))
    return _NORMAL.cdf((_NORMAL.inv_cdf(p) - z) / math.sqrt(1 - r))


def conditional_right(p: float, task_u: float) -> float:
    """The chance ``correlated_hit(p, task_u, u)`` is true over ``u`` alone: a fresh answer's
    chance on this task (its latent ``task_u`` known), as a verifier that knows the task's
    difficulty would judge it (the audit's skill reference; privileged)."""
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    r = TASK_CORRELATION
    z = math.sqrt(r) * _NORMAL.inv_cdf(min(max(task_u, 1e-12), 1 - 1e-12))
    return _NORMAL.cdf((_NORMAL.inv_cdf(p) - z) / math.sqrt(1 - r))


def fix_probability(family: str, capability: float, critique: str, guidance: float) -> float:
    """The chance a revision fixes a wrong draft (see the module doc)."""
    params = REVISION[family]
    x = logit(params.fix) + CAPABILITY_SLOPE * (capability - 0.5)
    return sigmoid(x + CRITIQUE_LOGITS.get(critique, 0.0) + guidance)


def specific_probability(family: str, capability: float, pattern: str) -> float:
    """The chance a critique (or reflection) of a wrong draft points at its error."""
    p = sigmoid(logit(REVISION[family].specific_rate) + CAPABILITY_SLOPE * (capability - 0.5))
    return p * (REFLECT_SPECIFIC if pattern == "reflect" else 1.0)


def right_probability(quality: float, levels: tuple[float, float] | None) -> float:
    """The chance of a reference-quality output so that the mean score is ``quality``:
    ``quality`` itself for a binary family (``levels`` None), else solved from the mean
    scores ``(right, flawed)`` of the family's two kinds of output."""
    if levels is None:
        return quality
    right, flawed = levels
    if right - flawed <= 1e-9:
        return 1.0
    return min(1.0, max(0.0, (quality - flawed) / (right - flawed)))


# -- critiques ------------------------------------------------------------------------------
_CLAIM = re.compile(
    r"\b(?:wrong|incorrect|error|mistake|missing|lacks|fails|bug|not right)\b", re.I
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
MAX_CRITIQUE_CHARS = 4000


def _norm_number(text: str) -> str:
    return text.replace(",", "").strip()


def judge_critique(
    family: str,
    task: Task,
    draft: str | None,
    critique: str | None,
    right: bool,
    reference: str = "",
) -> str:
    """``"specific"``, ``"misleading"``, ``"generic"`` or ``"empty"`` (module doc); ``right``
    says whether the draft is right and ``reference`` is the right output (both
    privileged; ``reference`` is only read for SRDD)."""
    text = (critique or "").strip()[:MAX_CRITIQUE_CHARS]
    if not text:
        return "empty"
    claims = _CLAIM.search(text) is not None
    if right or not draft:
        return "misleading" if claims and draft else "generic"
    if not claims:
        return "generic"
    draft = draft.strip()
    if family == "gsm_hard":
        wanted = _norm_number(draft)
        quoted = {_norm_number(n) for n in _NUMBER.findall(text)[:20]}
        return "specific" if wanted and wanted in quoted else "generic"
    if family == "mmlu_pro":
        letter = re.escape(draft[:1].upper())
        named = re.search(rf"\b(?:option|answer|choice)\s*\(?{letter}\)?(?![A-Za-z])", text, re.I)
        return "specific" if letter and named else "generic"
    if family == "commongen_hard":
        concepts = tuple(task.meta.get("concepts", ()))
        missing = [c for c in concepts if concept_coverage(draft, (c,)) == 0.0]
        words = set(re.sub(r"[^a-z0-9\s]", " ", text.lower()).split())
        return "specific" if any(c.lower() in words for c in missing) else "generic"
    # srdd (and anything else): quotes a line of the draft that the right output lacks
    lines = set(_code_lines(reference))
    for line in _code_lines(draft)[:400]:
        if len(line) >= 8 and line in text and line not in lines:
            return "specific"
    return "generic"


def _code_lines(code: str) -> list[str]:
    return [ln.strip() for ln in code.splitlines() if ln.strip()]


def faulty_line(draft: str, reference: str) -> str | None:
    """The first line of ``draft`` (8+ characters) that ``reference`` lacks."""
    ref = set(_code_lines(reference))
    return next((ln for ln in _code_lines(draft) if len(ln) >= 8 and ln not in ref), None)


def written_critique(family: str, task: Task, draft: str, kind: str, reference: str = "") -> str:
    """A simulated critique of ``kind`` (``"specific"``, ``"misleading"``, ``"generic"``)."""
    if kind == "generic":
        return "The reasoning looks mostly plausible; double-check each step before answering."
    if kind == "misleading" or family == "gsm_hard":
        if family == "mmlu_pro":
            return f"Option {draft[:1]} is wrong: it does not follow from the question."
        if family == "commongen_hard":
            return "The sentence is wrong: it reads unnaturally and should be rewritten."
        if family == "srdd":
            return "The code is wrong: it does not meet the requirements."
        return f"The result {draft} is wrong: recheck the arithmetic of the last step."
    if family == "mmlu_pro":
        return f"Option {draft[:1]} is wrong: it does not follow from the question."
    if family == "commongen_hard":
        concepts = tuple(task.meta.get("concepts", ()))
        missing = [c for c in concepts if concept_coverage(draft, (c,)) == 0.0]
        if missing:
            return f"The sentence is missing the concept '{missing[0]}'."
        return "The sentence is wrong: it reads unnaturally."
    line = faulty_line(draft, reference)
    return f"This line is wrong: {line}" if line else "The code is wrong somewhere."
