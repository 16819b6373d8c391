"""What a simulated Puppeteer agent writes for a task: the right output and flawed ones.

The simulation only decides *whether* an agent is right; this module turns that into text the
env then grades like any other reply: the reference answer (or for SRDD the reference program)
when right, a plausible wrong one when not. Tool agents likewise write the task's reference
program or a flawed variant (``tasks.reference_program`` / ``tasks.flawed_program``), a good
search query (``tasks.search_terms``) or a poor one. Everything here reads the task's ground
truth: privileged, used by simulated agents only.
"""

from __future__ import annotations

import math
import re

import numpy as np

from orchenv.envs.puppeteer import tasks as task_api
from orchenv.envs.puppeteer.tasks import concept_coverage
from orchenv.seeding import stable_int, stable_uniform
from orchenv.tasks import Task

#: the family name (``task.meta["family"]``) of each task kind
FAMILY_OF_KIND: dict[str, str] = {
    "gsm-hard": "gsm_hard",
    "multiple-choice": "mmlu_pro",
    "commongen": "commongen_hard",
    "srdd": "srdd",
}
FAMILIES = ("gsm_hard", "mmlu_pro", "commongen_hard", "srdd")
#: flawed variants per task (so the sandbox's run cache stays small)
FLAWED_VARIANTS = 3
#: the share of wrong SRDD answers that do not even load (the rest run but fail some tests);
#: Table 1's SRDD scores go down to 0.21, below what a running flawed program scores
BROKEN_SHARE = 0.75
#: a task's plausible wrong answers and how often a wrong call gives each, most popular first
#: (chosen parameter, not a fit: with ``revision.TASK_CORRELATION`` it sets how much
#: agreement and majority votes gain; docs/puppeteer.md "Correlated errors")
DISTRACTOR_SHARES = (0.6, 0.25, 0.15)
#: a query that finds nothing useful for any task
POOR_QUERY = "general overview of the topic"


def family_of(task: Task) -> str:
    """The task's family (``gsm_hard``, ``mmlu_pro``, ``commongen_hard``, ``srdd``)."""
    family = str(task.meta.get("family", "gsm_hard"))
    return FAMILY_OF_KIND.get(family, family)


def kind_of(task: Task) -> str:
    """The task's kind (``tasks.TASK_KINDS``: ``gsm-hard``, ``multiple-choice``, ...)."""
    if "kind" in task.meta:
        return str(task.meta["kind"])
    family = family_of(task)
    return next((k for k, f in FAMILY_OF_KIND.items() if f == family), "gsm-hard")


def letters(task: Task) -> tuple[str, ...]:
    options = task.meta.get("options") or ()
    n = len(options) if options else 4
    return tuple("ABCDEFGHIJ"[:n])


def right_output(task: Task) -> str:
    """The reference answer: the reference program for SRDD, else ``task.answer``."""
    if family_of(task) == "srdd":
        return task_api.reference_program(task)
    return str(task.answer)


def distractor_index(task: Task, *key: object) -> int:
    """Which of the task's ``DISTRACTOR_SHARES`` distractors a wrong call gives (per call)."""
    u = stable_uniform("distractor", task.id, *key)
    total = 0.0
    for i, share in enumerate(DISTRACTOR_SHARES):
        total += share
        if u < total:
            return i
    return len(DISTRACTOR_SHARES) - 1


def _task_rng(task: Task, *key: object) -> np.random.Generator:
    return np.random.default_rng(stable_int(task.id, *key) % 2**63)


def distractors(task: Task) -> list[str]:
    """The task's plausible wrong answers, most popular first (``DISTRACTOR_SHARES``): what
    every wrong call on this task chooses among, so that wrong answers agree as often as a
    real model's do (a hard question has a popular wrong answer)."""
    family = family_of(task)
    n = len(DISTRACTOR_SHARES)
    if family == "mmlu_pro":
        wrong = [x for x in letters(task) if x != task.answer]
        order = _task_rng(task, "letters").permutation(len(wrong))
        return [wrong[int(i)] for i in order[:n]]
    if family == "commongen_hard":
        return [flawed_sentence(task, "distractor", i) for i in range(n)]
    if family == "srdd":
        return [_srdd_distractor(task, i) for i in range(n)]
    return _number_distractors(task, n)


def wrong_output(task: Task, *key: object) -> str:
    """A plausible wrong answer: one of the task's ``distractors`` (drawn per ``key`` by
    ``DISTRACTOR_SHARES``)."""
    options = distractors(task)
    return options[min(distractor_index(task, *key), len(options) - 1)]


def _number_distractors(task: Task, n: int) -> list[str]:
    """GSM-Hard: the right value off by a relative slip whose sign is a fair coin per
    distractor (wrong answers are as often smaller as larger: no magnitude tell); small
    slips (a carried digit, a rounding) and large ones (a wrong operation) alike."""
    try:
        value = int(str(task.answer).replace(",", ""))
    except ValueError:
        return [f"{task.answer}{i}" for i in range(n)]
    rng = _task_rng(task, "numbers")
    out: list[str] = []
    for _ in range(200):
        up = bool(rng.random() < 0.5)
        size = rng.uniform(0.01, 0.2) if rng.random() < 0.5 else rng.uniform(0.2, 1.2)
        wrong = round(value * math.exp(size if up else -size))
        if wrong == value:  # a small answer: off by a few units instead
            wrong = value + int(rng.integers(1, 10)) * (1 if up else -1)
        if wrong < 0 <= value:  # keep a non-negative answer's distractors non-negative
            continue
        if str(wrong) not in out and wrong != value:
            out.append(str(wrong))
            if len(out) == n:
                break
    while len(out) < n:  # an answer of 0 (no smaller non-negative number) and the like
        out.append(str(value + len(out) + 1))
    return out


def _srdd_distractor(task: Task, i: int) -> str:
    """SRDD: flawed variant ``i`` (``tasks.flawed_program``: one wrong line that fails some
    hidden tests); with ``BROKEN_SHARE`` it also has a misspelled name (``name_slip``), so
    every test fails: what a real model's broken code looks like, no label, and it compiles."""
    rng = np.random.default_rng(stable_int("flawed", task.id, i % FLAWED_VARIANTS) % 2**63)
    code = task_api.flawed_program(task, rng)
    if stable_uniform("broken", task.id, i) < BROKEN_SHARE:
        return name_slip(code)
    return code


_DEF = re.compile(r"^(\s*)def \w+\(([^)]*)\)")


def name_slip(code: str) -> str:
    """``code`` with one misspelled name: the first use, in the body of the program's first
    function, of that function's first parameter (``self`` included) is written one letter
    short (a ``NameError`` on the first call: it compiles and loads, and fails every test
    that reaches the function). Unchanged if there is no such use."""
    lines = code.split("\n")
    for at, line in enumerate(lines):
        match = _DEF.match(line)
        if not match:
            continue
        params = [
            p.split(":")[0].split("=")[0].strip().lstrip("*") for p in match.group(2).split(",")
        ]
        params = [p for p in params if p]
        indent = len(match.group(1))
        for name in params[:1]:
            typo = name[:-1] if len(name) > 3 else name + name[-1]
            if re.search(rf"\b{re.escape(typo)}\b", code):
                typo = name + "_"
            for k in range(at + 1, len(lines)):
                body = lines[k]
                if body.strip() and len(body) - len(body.lstrip()) <= indent:
                    break  # left the function
                new = re.sub(rf"\b{re.escape(name)}\b", typo, body, count=1)
                if new != body:
                    lines[k] = new
                    return "\n".join(lines)
        break
    return code


def flawed_sentence(task: Task, *key: object) -> str:
    """The reference sentence with about half of the concepts' words dropped."""
    concepts = tuple(task.meta.get("concepts", ()))
    dropped = {c for c in concepts if stable_uniform("drop", task.id, c, *key) < 0.5}
    if concepts and not dropped:
        dropped = {concepts[0]}
    kept = [
        w
        for w in str(task.answer).split()
        if not any(concept_coverage(re.sub(r"[^A-Za-z]", "", w), (c,)) == 1.0 for c in dropped)
    ]
    return " ".join(kept)


def reference_program(task: Task) -> str:
    return task_api.reference_program(task)


def flawed_program(task: Task, *key: object) -> str:
    """One of ``FLAWED_VARIANTS`` flawed programs of the task (``tasks.flawed_program``)."""
    variant = int(stable_uniform("variant", task.id, *key) * FLAWED_VARIANTS)
    rng = np.random.default_rng(stable_int("flawed", task.id, variant) % 2**63)
    return task_api.flawed_program(task, rng)


def good_query(task: Task) -> str:
    return task_api.search_terms(task)


def task_files(task: Task) -> dict[str, str]:
    files = task.meta.get("files")
    if isinstance(files, dict) and files:
        return {str(k): str(v) for k, v in files.items()}
    return {"problem.txt": task.prompt}


def data_file(task: Task) -> str | None:
    """The task's file beyond ``problem.txt`` that an agent should read (None: none)."""
    return next((name for name in task_files(task) if name != "problem.txt"), None)
