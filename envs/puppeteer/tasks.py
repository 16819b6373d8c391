"""Puppeteer's task kinds: procedural generators, their task source, and how answers are graded.

Three kinds (``TASK_KINDS``), each deterministic in ``(seed, split, index)`` with disjoint
train and test random streams: GSM-Hard-style word problems with large numbers,
multiple-choice reasoning questions (options A-D) and CommonGen-Hard-style sentence writing
(graded by concept coverage, partial credit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from orchenv.error import UnknownNameError
from orchenv.grading import extract_boxed, math_verdict
from orchenv.tasks import GeneratedTaskSource, Task

TASK_KINDS: tuple[str, ...] = ("gsm-hard", "multiple-choice", "commongen")
SPLITS: tuple[str, ...] = ("train", "test")
LETTERS: tuple[str, ...] = ("A", "B", "C", "D")

#: the id prefix of each kind's tasks
_ID_PREFIX: dict[str, str] = {"gsm-hard": "gsmhard", "multiple-choice": "mc", "commongen": "cgen"}

_TEMPLATES: tuple[tuple[str, str], ...] = (
    (
        "A warehouse holds {a} boxes. Every day {b} boxes arrive and {c} boxes are shipped. "
        "How many boxes does the warehouse hold after {d} days?",
        "{a} + {d} * ({b} - {c})",
    ),
    (
        "A company pays each of its {a} employees {b} dollars a month. How many dollars does it "
        "pay in {d} months, including a one-time bonus pool of {c} dollars?",
        "{a} * {b} * {d} + {c}",
    ),
    (
        "A stadium sells {a} tickets at {b} dollars each and refunds {c} of them. Then it sells "
        "{d} more tickets at the same price. How many dollars does it take in?",
        "({a} - {c} + {d}) * {b}",
    ),
)

_NAMES = ("Ann", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jun")

#: CommonGen-Hard-style concept vocabulary (base forms)
CONCEPTS: tuple[str, ...] = (
    "dog", "frisbee", "catch", "throw", "river", "boat", "paddle", "mountain", "climb", "rope",
    "guitar", "play", "stage", "crowd", "cheer", "kitchen", "cook", "knife", "onion", "cut",
    "ball", "kick", "goal", "field", "snow", "ski", "slope", "jacket", "book", "read",
    "lamp", "desk", "paint", "wall", "brush", "ladder", "tree", "plant", "garden", "water",
    "horse", "ride", "fence", "jump", "bread", "bake", "oven", "market", "sell", "fish",
)  # fmt: skip


# -- generators ----------------------------------------------------------------------------
def _task_rng(
    seed: int, index: int, split: str, *, train_tag: int | None, test_tag: int
) -> np.random.Generator:
    """The random stream of one task; train and test streams differ by their tag."""
    if split not in SPLITS:
        raise UnknownNameError("split", split, SPLITS)
    tag = train_tag if split == "train" else test_tag
    tags = [] if tag is None else [tag]
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, *tags, int(index)])


def _task_id(kind: str, seed: int, split: str, index: int) -> str:
    """``gsmhard-0-3`` for train tasks, ``gsmhard-0-test-3`` for the others."""
    middle = f"{seed}" if split == "train" else f"{seed}-{split}"
    return f"{_ID_PREFIX[kind]}-{middle}-{index}"


def gsm_hard_task(seed: int, index: int, split: str = "train") -> Task:
    """A GSM-Hard-style word problem with large numbers, deterministic in ``(seed, split, index)``.

    Train and test draw from different random streams. ``meta["expression"]`` is the Python
    expression of the answer (ground truth: privileged).
    """
    rng = _task_rng(seed, index, split, train_tag=None, test_tag=7)
    template, expr = _TEMPLATES[int(rng.integers(len(_TEMPLATES)))]
    b = int(rng.integers(100_000, 9_999_999))
    nums = {
        "a": int(rng.integers(1_000_000, 99_999_999)),
        "b": b,
        "c": int(rng.integers(1_000, b)),
        "d": int(rng.integers(12, 999)),
    }
    expression = expr.format(**nums)
    answer = str(eval(expression, {"__builtins__": {}}))  # noqa: S307 - digits and + - * only
    return Task(
        id=_task_id("gsm-hard", seed, split, index),
        prompt=template.format(**nums),
        answers=(answer,),
        meta={"family": "gsm-hard", "expression": expression, "difficulty": 0.8},
    )


def multiple_choice_task(seed: int, index: int, split: str = "train") -> Task:
    """A procedural multiple-choice reasoning question (options A-D, one correct letter).

    Deterministic in ``(seed, split, index)``; train and test draw from different random
    streams. Kinds: the next term of an arithmetic sequence, the youngest of an age chain,
    a remainder. ``answers`` is the correct letter; ``meta["options"]`` the four options.
    """
    rng = _task_rng(seed, index, split, train_tag=11, test_tag=17)
    kind = int(rng.integers(3))
    if kind == 0:
        a, d = int(rng.integers(2, 500)), int(rng.integers(3, 60))
        terms = ", ".join(str(a + k * d) for k in range(4))
        question = f"What is the next number in the sequence {terms}, ...?"
        right = a + 4 * d
        wrong = [right + d, right - 1, right + 2 * d]
        correct, distractors = str(right), [str(w) for w in wrong]
    elif kind == 1:
        people = [_NAMES[int(i)] for i in rng.permutation(len(_NAMES))[:4]]
        facts = " ".join(
            f"{people[k]} is older than {people[k + 1]}." for k in rng.permutation(3).tolist()
        )
        question = f"{facts} Who is the youngest?"
        correct, distractors = people[3], people[:3]
    else:
        n, k = int(rng.integers(1_000, 999_999)), int(rng.integers(3, 13))
        question = f"What is the remainder when {n} is divided by {k}?"
        right = n % k
        pool = [v for v in range(k) if v != right]
        picks = rng.choice(len(pool), size=min(3, len(pool)), replace=False)
        correct, distractors = str(right), [str(pool[int(i)]) for i in picks]
    slot = int(rng.integers(4))
    options = list(distractors[:3])
    options.insert(slot, correct)
    body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return Task(
        id=_task_id("multiple-choice", seed, split, index),
        prompt=f"{question}\n{body}\nAnswer with the letter of the correct option.",
        answers=(LETTERS[slot],),
        meta={"family": "multiple-choice", "options": tuple(options), "difficulty": 0.5},
    )


def commongen_task(seed: int, index: int, split: str = "train") -> Task:
    """A CommonGen-Hard-style task: write one sentence that covers 3-6 concept words.

    Deterministic in ``(seed, split, index)``; train and test draw from different random
    streams. ``meta["concepts"]`` holds the concepts; ``answers`` a reference sentence that
    covers all of them (graded by ``concept_coverage``, not by equality).
    """
    rng = _task_rng(seed, index, split, train_tag=13, test_tag=19)
    n = int(rng.integers(3, 7))
    concepts = tuple(CONCEPTS[int(i)] for i in rng.choice(len(CONCEPTS), size=n, replace=False))
    reference = "The story involves " + ", ".join(concepts) + "."
    return Task(
        id=_task_id("commongen", seed, split, index),
        prompt="Write one coherent sentence that uses all of these concepts: "
        + ", ".join(concepts),
        answers=(reference,),
        meta={"family": "commongen", "concepts": concepts, "difficulty": 0.5},
    )


_GENERATORS = {
    "gsm-hard": gsm_hard_task,
    "multiple-choice": multiple_choice_task,
    "commongen": commongen_task,
}


def make_task(kind: str, seed: int, index: int, split: str = "train") -> Task:
    """The task of a kind (``TASK_KINDS``), deterministic in ``(seed, split, index)``."""
    if kind not in _GENERATORS:
        raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)
    return _GENERATORS[kind](seed, index, split)


class PuppeteerTaskSource(GeneratedTaskSource):
    """``n_tasks`` tasks of one kind per split (train, test), generated on first use.

    Ids are those of the generators (``gsmhard-0-3``, ``mc-0-test-5``, ...).
    """

    def __init__(self, kind: str = "gsm-hard", *, seed: int = 0, n_tasks: int = 10_000) -> None:
        if kind not in TASK_KINDS:
            raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)
        self.kind, self.seed = kind, int(seed)
        self.name = f"puppeteer-{kind}"
        self._sizes = {split: int(n_tasks) for split in SPLITS}

    def _generate(self, split: str, index: int) -> Task:
        return make_task(self.kind, self.seed, index, split)

    def by_id(self, task_id: str) -> Task:
        prefix = re.escape(_ID_PREFIX[self.kind])
        pattern = rf"^{prefix}-(-?\d+)-(?:(test)-)?(\d+)$"
        match = re.match(pattern, task_id) if isinstance(task_id, str) else None
        if match is not None:
            split, index = match.group(2) or "train", int(match.group(3))
            if int(match.group(1)) == self.seed and index < self._sizes[split]:
                return self.get(split, index)
        examples = [_task_id(self.kind, self.seed, split, 0) for split in SPLITS]
        raise UnknownNameError("task id", str(task_id), examples)


# -- grading --------------------------------------------------------------------------------
def extract_choice(text: str | None) -> str | None:
    """The option letter of a reply: ``\\boxed{B}``, ``B``, ``(B)``, ``B. ...`` or ``Answer: B``."""
    if not text:
        return None
    boxed = extract_boxed(text)
    for candidate in ((boxed,) if boxed else ()) + (text,):
        m = re.fullmatch(r"\s*\(?([A-Da-d])\)?\s*(?:[.:)].*)?", candidate, flags=re.S)
        if m:
            return m.group(1).upper()
    # each \s* is followed by a literal, so a run of spaces is read once (no backtracking)
    m = re.search(r"answer\s*(?:is\s*)?(?:[:=]\s*)?\(?([A-D])\b", text, flags=re.I)
    return m.group(1).upper() if m else None


def _concept_forms(concept: str) -> set[str]:
    c = concept.lower()
    forms = {c, c + "s", c + "es", c + "ing", c + "ed", c + "d"}
    if c.endswith("e"):
        forms |= {c[:-1] + "ing", c[:-1] + "ed"}
    if c.endswith("y"):
        forms |= {c[:-1] + "ies", c[:-1] + "ied"}
    forms |= {c + c[-1] + "ing", c + c[-1] + "ed"}  # doubled consonant: cut -> cutting
    return forms


def concept_coverage(sentence: str | None, concepts: Sequence[str]) -> float:
    """The fraction of ``concepts`` that ``sentence`` uses, in [0, 1].

    Lemma-insensitive simple matching: the sentence is lowercased and stripped of punctuation;
    a concept counts when some word equals it or a simple plural / -ing / -ed form of it
    (``throw`` matches ``throws``, ``throwing``, ``throwed``; ``bake`` matches ``baking``;
    ``cut`` matches ``cutting``).
    """
    if not concepts:
        return 0.0
    words = set(re.sub(r"[^a-z0-9\s]", " ", (sentence or "").lower()).split())
    hits = sum(1 for c in concepts if _concept_forms(c) & words)
    return hits / len(concepts)


def extract_answer(kind: str, text: str) -> str | None:
    """The answer of an agent's reply for a task kind (None when it has none): the option
    letter (multiple-choice), the boxed number (gsm-hard), the boxed sentence or else the
    reply's last line (commongen)."""
    if kind == "multiple-choice":
        return extract_choice(text)
    boxed = extract_boxed(text)
    if boxed:
        return boxed.strip() if kind == "commongen" else boxed
    if kind == "commongen":
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else None
    return None


def score_answer(kind: str, task: Task, answer: str | None) -> float:
    """The final-answer score ``r`` in [0, 1]: concept coverage (commongen), else 1.0 for the
    right letter (multiple-choice) or a number equal to the reference (gsm-hard; commas,
    ``$`` and spaces ignored), 0.0 otherwise."""
    return graded_score(kind, task, answer)[0]


def graded_score(kind: str, task: Task, answer: str | None) -> tuple[float, str]:
    """``score_answer`` and the grading status (``orchenv.grading.Verdict.status``): a number
    too large to check, or whose check runs out of time, scores 0 and says so."""
    if kind == "commongen":
        return concept_coverage(answer, task.meta["concepts"]), "ok"
    if not answer:
        return 0.0, "ok"
    if kind == "multiple-choice":
        return (1.0 if extract_choice(answer) == task.answer else 0.0), "ok"
    verdict = math_verdict(task.answer, re.sub(r"[,$\s]", "", answer))
    return float(verdict.equal), verdict.status
