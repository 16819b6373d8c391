"""What a simulated Puppeteer agent writes for a task: the right output and flawed ones.

The simulation only decides *whether* an agent is right; this module turns that into text the
env then grades like any other reply: the reference answer (or for SRDD the reference program)
when right, a plausible wrong one when not. Tool agents likewise write the task's reference
program or a flawed variant (``tasks.reference_program`` / ``tasks.flawed_program``), a good
search query (``tasks.search_terms``) or a poor one. Everything here reads the task's ground
truth: privileged, used by simulated agents only.
"""

from __future__ import annotations

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


def wrong_output(task: Task, *key: object) -> str:
    """A plausible wrong answer, deterministic in ``key``."""
    family = family_of(task)
    if family == "mmlu_pro":
        wrong = [x for x in letters(task) if x != task.answer]
        return wrong[int(stable_uniform("off", task.id, *key) * len(wrong))]
    if family == "commongen_hard":
        return flawed_sentence(task, *key)
    if family == "srdd":
        code = flawed_program(task, *key)
        if stable_uniform("broken", task.id, *key) < BROKEN_SHARE:
            return code + "\n)  # unfinished edit\n"  # does not load: scores 0
        return code
    try:
        value = int(str(task.answer).replace(",", ""))
    except ValueError:
        return f"{task.answer}0"
    return str(value + 1 + int(stable_uniform("off", task.id, *key) * 997))


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
