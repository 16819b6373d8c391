"""``orch/Puppeteer-v0``: a centralized puppeteer names the next agent each step.

Seed 003 (Puppeteer; agent space of appendix B, reward eq. 6) as a Gymnasium environment.
The paper's formulas were lost in text extraction; the reward follows eq. 6 as restated in
the class docstring. Tools are offline (``orchenv.envs.puppeteer.tools``): web tools are out of scope.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from orchenv.backends.simulated import estimate_prompt_tokens, estimate_tokens
from orchenv.core import OrchestrationEnv
from orchenv.envs.puppeteer.tools import SearchIndex, ToolResult, read_file, run_python, search
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import extract_boxed, math_equal
from orchenv.parsing import extract_tag, match_agent
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task

#: appendix B reasoning patterns
PATTERNS: tuple[str, ...] = (
    "planning", "reasoning", "critique", "reflect", "question", "summarize", "conclude", "modify",
)  # fmt: skip
TOOLS: tuple[str, ...] = ("run_python", "read_file", "search")
TERMINATE = "terminate"

#: margin bonus (logit) of each pattern; ``*_with_draft`` apply when an answer exists already
PATTERN_LOGIT: dict[str, float] = {
    "planning": 0.5, "reasoning": 1.0, "critique": 0.0, "reflect": 0.0, "question": -0.5,
    "summarize": 0.0, "conclude": 0.0, "modify": 0.0,
}  # fmt: skip
REVISE_LOGIT = 0.5  # critique / reflect / modify when an earlier answer exists

#: presets: model -> (one-shot accuracy with a neutral pattern, completion tokens, USD/1M)
PRESETS: dict[str, dict[str, tuple[float, int, float]]] = {
    "mimas": {"qwen2.5-1.5b": (0.15, 250, 0.1), "qwen2.5-7b": (0.3, 300, 0.3)},
    "titan": {"gpt-4o-mini": (0.45, 400, 0.6), "llama-3.1-405b": (0.55, 450, 3.0)},
}

CONTROLLER_PROMPT = """\
You are the puppeteer: each step, name the next agent to act on the task. Step {step} of {max_steps}.

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
Current answer: {answer}{notice}"""

AGENT_SYSTEM = (
    "Pattern: {pattern}\nYou are one agent in a team solving a math word problem. Apply the "
    "'{pattern}' reasoning pattern to the task and the trajectory so far, and end with the "
    "answer as \\boxed{{ANSWER}}."
)

#: the agents' system prompt per task kind (first line ``Pattern: X`` is read by the backend)
AGENT_SYSTEMS: dict[str, str] = {
    "gsm-hard": AGENT_SYSTEM,
    "multiple-choice": (
        "Pattern: {pattern}\nYou are one agent in a team answering a multiple-choice question. "
        "Apply the '{pattern}' reasoning pattern to the task and the trajectory so far, and end "
        "with the letter of the chosen option as \\boxed{{LETTER}} (one of A, B, C, D)."
    ),
    "commongen": (
        "Pattern: {pattern}\nYou are one agent in a team writing one coherent sentence that uses "
        "every given concept. Apply the '{pattern}' reasoning pattern to the task and the "
        "trajectory so far, and end with the sentence as \\boxed{{SENTENCE}}."
    ),
}

TASK_KINDS: tuple[str, ...] = ("gsm-hard", "multiple-choice", "commongen")
LETTERS: tuple[str, ...] = ("A", "B", "C", "D")

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


SPLITS = ("train", "test")


def _task_rng(seed: int, index: int, split: str, train_tag: int, test_tag: int):
    if split not in SPLITS:
        raise UnknownNameError("split", split, SPLITS)
    tag = train_tag if split == "train" else test_tag
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, tag, int(index)])


_NAMES = ("Ann", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jun")


def multiple_choice_task(seed: int, index: int, split: str = "train") -> Task:
    """A procedural multiple-choice reasoning question (options A-D, one correct letter).

    Deterministic in ``(seed, split, index)``; train and test draw from different random
    streams. Kinds: the next term of an arithmetic sequence, the youngest of an age chain,
    a remainder. ``answers`` is the correct letter; ``meta["options"]`` the four options.
    """
    rng = _task_rng(seed, index, split, 11, 17)
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
    letter = LETTERS[slot]
    body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return Task(
        id=f"mc-{seed}-{index}" if split == "train" else f"mc-{seed}-{split}-{index}",
        prompt=f"{question}\n{body}\nAnswer with the letter of the correct option.",
        answers=(letter,),
        meta={"family": "multiple-choice", "options": tuple(options), "difficulty": 0.5},
    )


#: CommonGen-Hard-style concept vocabulary (base forms)
CONCEPTS: tuple[str, ...] = (
    "dog", "frisbee", "catch", "throw", "river", "boat", "paddle", "mountain", "climb", "rope",
    "guitar", "play", "stage", "crowd", "cheer", "kitchen", "cook", "knife", "onion", "cut",
    "ball", "kick", "goal", "field", "snow", "ski", "slope", "jacket", "book", "read",
    "lamp", "desk", "paint", "wall", "brush", "ladder", "tree", "plant", "garden", "water",
    "horse", "ride", "fence", "jump", "bread", "bake", "oven", "market", "sell", "fish",
)  # fmt: skip


def commongen_task(seed: int, index: int, split: str = "train") -> Task:
    """A CommonGen-Hard-style task: write one sentence that covers 3-6 concept words.

    Deterministic in ``(seed, split, index)``; train and test draw from different random
    streams. ``meta["concepts"]`` holds the concepts; ``answers`` a reference sentence that
    covers all of them (graded by ``concept_coverage``, not by equality).
    """
    rng = _task_rng(seed, index, split, 13, 19)
    n = int(rng.integers(3, 7))
    concepts = tuple(CONCEPTS[int(i)] for i in rng.choice(len(CONCEPTS), size=n, replace=False))
    reference = "The story involves " + ", ".join(concepts) + "."
    return Task(
        id=f"cgen-{seed}-{index}" if split == "train" else f"cgen-{seed}-{split}-{index}",
        prompt="Write one coherent sentence that uses all of these concepts: "
        + ", ".join(concepts),
        answers=(reference,),
        meta={"family": "commongen", "concepts": concepts, "difficulty": 0.5},
    )


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


def make_task(kind: str, seed: int, index: int, split: str = "train") -> Task:
    """The task of a kind (``TASK_KINDS``), deterministic in ``(seed, split, index)``."""
    if kind == "gsm-hard":
        return gsm_hard_task(seed, index, split)
    if kind == "multiple-choice":
        return multiple_choice_task(seed, index, split)
    if kind == "commongen":
        return commongen_task(seed, index, split)
    raise UnknownNameError("puppeteer tasks", kind, TASK_KINDS)


def extract_choice(text: str | None) -> str | None:
    """The option letter of a reply: ``\\boxed{B}``, ``B``, ``(B)``, ``B. ...`` or ``Answer: B``."""
    if not text:
        return None
    boxed = extract_boxed(text)
    for candidate in ((boxed,) if boxed else ()) + (text,):
        m = re.fullmatch(r"\s*\(?([A-Da-d])\)?\s*(?:[.:)].*)?", candidate, flags=re.S)
        if m:
            return m.group(1).upper()
    m = re.search(r"answer\s*(?:is)?\s*[:=]?\s*\(?([A-D])\b", text, flags=re.I)
    return m.group(1).upper() if m else None


def gsm_hard_task(seed: int, index: int, split: str = "train") -> Task:
    """A GSM-Hard-style word problem with large numbers, deterministic in ``(seed, split, index)``.

    Train and test draw from different random streams. ``meta["expression"]`` is the Python
    expression of the answer (ground truth: privileged).
    """
    if split not in SPLITS:
        raise UnknownNameError("split", split, SPLITS)
    key = (
        [int(seed) & 0xFFFFFFFF, int(index)]
        if split == "train"
        else [int(seed) & 0xFFFFFFFF, 7, int(index)]
    )
    rng = np.random.default_rng(key)
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
        id=f"gsmhard-{seed}-{index}" if split == "train" else f"gsmhard-{seed}-{split}-{index}",
        prompt=template.format(**nums),
        answers=(answer,),
        meta={"family": "gsm-hard", "expression": expression, "difficulty": 0.8},
    )


class PatternBackend:
    """Simulated model agents whose success depends on the reasoning pattern.

    ``P(correct) = sigmoid(logit(accuracy) + PATTERN_LOGIT[pattern] + revise)`` with
    ``revise = REVISE_LOGIT`` for critique / reflect / modify when an earlier answer exists.
    ``summarize`` and ``conclude`` restate the trajectory's current answer when there is one
    (so a right tool result followed by ``conclude`` stays right). A wrong reply boxes the true
    answer plus a nonzero offset. Outcomes are deterministic in (seed, task, model, pattern,
    step); the pattern is read from the system prompt's first line (``Pattern: X``) and the
    current answer from ``CallContext.draft``.

    Per task kind (``task.meta["family"]``): GSM-Hard boxes a number; multiple-choice boxes the
    correct letter with probability ``P(correct)``, else a fixed wrong letter (per task, model
    and pattern); CommonGen boxes a sentence in which each concept appears independently with
    probability ``P(correct)`` (concepts the draft already covers stay covered under critique /
    reflect / modify; summarize / conclude restate the draft), some in a plural / -ing form.
    Width branches differ through ``CallContext.turn`` (``turn + 1000 * branch``).
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = context.task
        assert task is not None
        pattern = "question"
        for message in messages:
            if message.get("role") == "system":
                first = message.get("content", "").split("\n", 1)[0]
                if first.startswith("Pattern: "):
                    pattern = first[len("Pattern: ") :].strip()
                break
        draft = context.draft
        family = task.meta.get("family", "gsm-hard")
        logit = math.log(spec.calibration["accuracy"] / (1 - spec.calibration["accuracy"]))
        logit += PATTERN_LOGIT.get(pattern, 0.0)
        revising = bool(draft) and pattern in ("critique", "reflect", "modify")
        if revising:
            logit += REVISE_LOGIT
        p = 1.0 / (1.0 + math.exp(-logit))
        key = (self.seed, task.id, spec.name, pattern)
        if pattern in ("summarize", "conclude") and draft:
            answer = draft
        elif family == "commongen":
            concepts = task.meta["concepts"]
            words = []
            for c in concepts:
                kept = revising and concept_coverage(draft, (c,)) == 1.0
                if kept or stable_uniform("cgen", *key, c, context.turn) < p:
                    plural = stable_uniform("form", *key, c) < 0.3
                    words.append(c + "s" if plural else c)
            answer = "Here is a scene with " + (", ".join(words) or "nothing special") + "."
        elif stable_uniform("puppeteer", *key, context.turn) < p:
            answer = task.answer
        elif family == "multiple-choice":
            wrong = [x for x in LETTERS if x != task.answer]
            answer = wrong[int(stable_uniform("off", *key) * len(wrong))]
        else:
            off = 1 + int(stable_uniform("off", *key) * 997)
            answer = str(int(task.answer) + off)
        text = f"[{pattern}] Working through the problem step by step. \\boxed{{{answer}}}"
        completion_tokens = int(spec.calibration["tokens"])
        prompt_tokens = estimate_prompt_tokens(messages)
        return Completion(
            agent=spec.name,
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=spec.cost(prompt_tokens, completion_tokens),
            latency_s=completion_tokens / 100.0,
            cached=False,
            token_source="estimate",
            meta={"pattern": pattern, "answer": answer},
        )


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-None answer (exact string match); ties go to the earliest."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def puppeteer_pool(preset: str = "mimas", *, seed: int = 0) -> AgentPool:
    """The simulated model pool of a preset (``"mimas"``: small models, ``"titan"``: large)."""
    if preset not in PRESETS:
        raise UnknownNameError("puppeteer preset", preset, PRESETS)
    specs = []
    models = PRESETS[preset]
    for rank, (name, (acc, tokens, price)) in enumerate(models.items()):
        specs.append(
            AgentSpec(
                name=name,
                model=name,
                tier=len(models) - 1 - rank,
                price_prompt=price,
                price_completion=price,
                backend="puppeteer-pattern",
                calibration={"accuracy": acc, "tokens": tokens},
            )
        )
    return AgentPool(specs, {"puppeteer-pattern": PatternBackend(seed)}, name=f"puppeteer-{preset}")


class PuppeteerEnv(OrchestrationEnv):
    """Name the next agent (model x reasoning pattern, a tool, or terminate) each step.

    ## Description
    A centralized puppeteer (seed 003) orchestrates agents on a GSM-Hard-style word problem
    with large numbers (``gsm_hard_task``, procedural). Each step it names one agent, which
    acts on the task and the trajectory so far; the latest answer any agent produced is the
    team's current answer. Model agents are simulated (``PatternBackend``): their success
    depends on the pattern (reasoning +1.0 logit, planning +0.5, question -0.5, critique /
    reflect / modify +0.5 once an answer exists, summarize / conclude restate it). Presets:
    ``"mimas"`` (Qwen2.5-1.5B / 7B, 15% / 30% neutral accuracy) and ``"titan"``
    (GPT-4o-mini / Llama-3.1-405B, 45% / 55%). ``tool:run_python`` with correct code solves
    the task exactly.

    ``tasks`` picks the task kind (``TASK_KINDS``): ``"gsm-hard"`` (default, above);
    ``"multiple-choice"`` (``multiple_choice_task``: options A-D, graded by the letter, see
    ``extract_choice``; agents box a letter); ``"commongen"`` (``commongen_task``: 3-6 concept
    words, the answer is a sentence boxed by the agent, or its last line; the score is
    ``concept_coverage`` in [0, 1]; agents cover each concept with the pattern-dependent
    probability). For every kind the tools' last stdout line of ``run_python`` becomes the answer.

    ``width`` (default 1; the paper explores up to 3 in parallel): each named model agent is
    called ``width`` times per step, branch b (0-based) with ``CallContext.turn = t + 1000 b``
    and a "Branch b+1 of W" line in its system prompt (width 1 adds no line), so simulated
    outcomes differ; the step's answer is the majority vote of the branches' answers (exact
    string match, ties to the earliest branch; ``majority_vote``), listed in
    ``info["branch_answers"]``. All branches' tokens count in ``F_t`` and in the metering.
    Tools, terminate and malformed actions are not branched.

    ## Action format
    ``<agent>NAME</agent>`` plus the tool's argument:

    - ``<agent>MODEL:PATTERN</agent>``, PATTERN one of ``PATTERNS`` (appendix B);
    - ``<agent>tool:run_python</agent><code>...</code>``: the last non-empty stdout line
      becomes the current answer (if the program succeeds);
    - ``<agent>tool:read_file</agent><path>problem.txt</path>`` (inside the task's sandbox);
    - ``<agent>tool:search</agent><query>...</query>`` (BM25 over ``SEARCH_CORPUS``);
    - ``<agent>terminate</agent>``: stop.

    Anything else (no tag, unknown model or pattern, missing argument) is malformed: it adds
    ``format_penalty`` (default -0.1) to the step's reward, calls nobody, costs no tokens, uses
    up the step; ``info["parse_error"]`` says what was wrong. It never raises.

    ## Observation
    The controller prompt: agents, action format, task, trajectory (each step's agent and its
    output, truncated to ``max_reply_chars``), current answer. ``info["phase"]`` is ``"act"``;
    ``info["valid_agents"]`` lists every agent name (``MODEL:PATTERN``, ``tool:...``,
    ``terminate``); ``info["network_mode"]`` says how ``run_python`` blocks the network.

    ## Rewards
    Eq. 6: ``R_T = r - lambda * C_T`` and ``R_t = gamma * R_{t+1} - lambda * C_t`` with
    ``C_t = F_t * log(1 + t / phi)``, t the 1-based step, ``F_t`` = the step's tokens / 1000
    (a model call's prompt + completion tokens, summed over width branches; a tool's input + output tokens estimated as
    characters / 4; terminate and malformed actions 0). ``r`` = 1 if the final answer equals
    the reference (``math_equal``) else 0. Reported per step as ``-lambda * C_t`` at
    non-final steps and ``r - lambda * C_T`` at the final step, so the ``gamma``-discounted
    return from step t equals ``R_t``. Defaults: ``lam=0.1``, ``gamma=0.99`` (reported in
    ``info["gamma"]``), ``phi=4.0`` (the default episode length: the cost factor reaches
    ``log 2`` at the last step). ``info`` has ``step_tokens`` (F_t * 1000) and ``step_cost``
    (C_t). For ``tasks="commongen"``, ``r`` is the concept coverage score (partial credit).

    ## Episode end
    Terminated at ``terminate`` or after ``max_steps`` steps (default 4; the last named agent
    acts first). ``info`` then carries ``task_id``, ``final_answer``, ``score`` (``r``),
    ``correct`` (``score == 1.0``), ``turns``.

    ## Arguments
    See ``__init__``; ``split`` is "train" or "test" (disjoint random streams).
    ``reset(options={"task_index": i})`` picks a task.

    ## Version history
    - v0: initial version (web tools out of scope); later added ``tasks`` (multiple-choice,
      commongen) and ``width`` with majority vote, defaults unchanged.
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = ("_pool", "_task_source", "_search_index")

    def __init__(
        self,
        *,
        preset: str = "mimas",
        split: str = "train",
        max_steps: int = 4,
        lam: float = 0.1,
        gamma: float = 0.99,
        phi: float = 4.0,
        format_penalty: float = -0.1,
        task_seed: int = 0,
        n_tasks: int = 10_000,
        tool_timeout_s: float = 5.0,
        max_reply_chars: int = 2000,
        pool: AgentPool | None = None,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
        tasks: str = "gsm-hard",
        width: int = 1,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        if tasks not in TASK_KINDS:
            raise UnknownNameError("puppeteer tasks", tasks, TASK_KINDS)
        if int(width) < 1:
            raise ConfigError(f"width must be >= 1, got {width}")
        self.tasks, self.width = tasks, int(width)
        if max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
        if not phi > 0:
            raise ConfigError(f"phi must be > 0, got {phi}")
        if preset not in PRESETS and pool is None:
            raise UnknownNameError("puppeteer preset", preset, PRESETS)
        if split not in SPLITS:
            raise UnknownNameError("split", split, SPLITS)
        self.preset = preset
        self.split = split
        self._pool_arg = pool
        self.max_steps, self.lam, self.gamma, self.phi = max_steps, lam, gamma, phi
        self.format_penalty = format_penalty
        self.task_seed, self.n_tasks = task_seed, n_tasks
        self.tool_timeout_s = tool_timeout_s
        self.max_reply_chars = max_reply_chars
        self._search_index: SearchIndex | None = None
        self._sandbox_root: str | None = None
        self.task: Task | None = None
        self.history: list[tuple[str, str]] = []  # (agent, output)
        self.answer: str | None = None
        self._notice = ""

    # -- lazily built collaborators ------------------------------------------------------
    def _ensure_built(self) -> None:
        if self._pool is None:
            self._pool = self._pool_arg or puppeteer_pool(self.preset)
        if self._sandbox_root is None:
            self._sandbox_root = tempfile.mkdtemp(prefix="orchenv-puppeteer-")

    def _index(self) -> SearchIndex:
        if self._search_index is None:
            self._search_index = SearchIndex(SEARCH_CORPUS)
        return self._search_index

    def close(self) -> None:
        if self._sandbox_root is not None:
            shutil.rmtree(self._sandbox_root, ignore_errors=True)
            self._sandbox_root = None
        super().close()

    def sandbox_dir(self) -> str:
        """The current task's sandbox dir for ``tool:read_file`` (holds ``problem.txt``)."""
        assert self._sandbox_root is not None and self.task is not None
        import os

        path = os.path.join(self._sandbox_root, self.task.id)
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "problem.txt"), "w", encoding="utf-8") as handle:
                handle.write(self.task.prompt)
        return path

    def valid_agents(self) -> list[str]:
        if self._pool is None:
            return []
        names = [f"{m}:{p}" for m in self._pool.names for p in PATTERNS]
        return [*names, *(f"tool:{t}" for t in TOOLS), TERMINATE]

    # -- prompts --------------------------------------------------------------------------
    def _observation(self) -> tuple[str, dict[str, Any]]:
        assert self.task is not None
        lines = [f"{i + 1}. {a}: {out}" for i, (a, out) in enumerate(self.history)]
        notice = ""
        if self._notice:
            notice = f"\n\nYour previous reply could not be used: {self._notice}"
        text = CONTROLLER_PROMPT.format(
            step=min(self.turn + 1, self.max_steps),
            max_steps=self.max_steps,
            models=", ".join(self.pool.names),
            patterns=", ".join(PATTERNS),
            problem=self.task.prompt,
            trajectory="\n".join(lines) or "(empty)",
            answer=self.answer or "(none)",
            notice=notice,
        )
        from orchenv.envs.puppeteer.tools import network_isolation_mode

        return text, {
            "messages": [{"role": "user", "content": text}],
            "phase": "act",
            "network_mode": network_isolation_mode(),
        }

    # -- parsing ------------------------------------------------------------------------
    def _parse(self, action: str) -> tuple[str | None, str | None, str | None, str | None]:
        """(kind, name, argument, error); kind "model", "tool" or "terminate". Never raises."""
        name = extract_tag(action, "agent")
        if name is None:
            return None, None, None, "no <agent>...</agent> tag found."
        name = name.strip()
        low = name.lower()
        if low == TERMINATE:
            return "terminate", None, None, None
        head, sep, tail = name.partition(":")
        if not sep:
            return None, None, None, f"{name[:80]!r} is not MODEL:PATTERN, tool:NAME or terminate."
        if head.strip().lower() == "tool":
            tool = tail.strip().lower()
            arg_tag = {"run_python": "code", "read_file": "path", "search": "query"}.get(tool)
            if arg_tag is None:
                return None, None, None, f"unknown tool {tail[:40]!r}; tools: {', '.join(TOOLS)}."
            arg = extract_tag(action, arg_tag)
            if arg is None or not arg.strip():
                return None, None, None, f"tool:{tool} needs a non-empty <{arg_tag}>."
            return "tool", tool, arg, None
        model = match_agent(head.strip(), self.pool.names)
        if model is None:
            return None, None, None, f"unknown model {head[:40]!r}; models: {self.pool.names}."
        pattern = tail.strip().lower()
        if pattern not in PATTERNS:
            return None, None, None, f"unknown pattern {tail[:40]!r}; patterns: {PATTERNS}."
        return "model", model, pattern, None

    # -- episode --------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        if "task_index" in options:
            index = int(options["task_index"])
        else:
            index = int(self.np_random.integers(self.n_tasks))
        self.task = make_task(self.tasks, self.task_seed, index, self.split)
        self.history, self.answer, self._notice = [], None, ""
        obs, extra = self._observation()
        extra["task_id"] = self.task.id
        return obs, extra

    def _run_tool(self, tool: str, arg: str) -> tuple[str, int, dict[str, Any]]:
        result: ToolResult
        if tool == "run_python":
            result = run_python(arg, timeout_s=self.tool_timeout_s)
            if result.ok:
                last = [ln for ln in result.output.splitlines() if ln.strip()]
                if last:
                    self.answer = last[-1].strip()[:200]
        elif tool == "read_file":
            result = read_file(arg.strip(), self.sandbox_dir())
        else:
            result = search(arg, self._index())
        output = result.text()[: self.max_reply_chars]
        tokens = estimate_tokens(arg) + estimate_tokens(output)
        meta = {"tool": tool, "ok": result.ok, "error": result.error}
        for key in ("network", "timed_out", "returncode"):
            if key in result.meta:
                meta[key] = result.meta[key]
        return output, tokens, meta

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        kind, name, arg, error = self._parse(action)
        self.turn += 1
        self.transcript.append({"turn": self.turn, "role": "controller", "text": action})
        extra: dict[str, Any] = {"task_id": self.task.id, "gamma": self.gamma}
        reward, tokens, terminated = 0.0, 0, False
        if error is not None:
            reward += self.format_penalty
            self._notice = error
            extra.update(invalid_action=True, parse_error=error)
        else:
            self._notice = ""
            if kind == "terminate":
                terminated = True
            elif kind == "tool":
                assert name is not None and arg is not None
                output, tokens, extra["tool_call"] = self._run_tool(name, arg)
                self.history.append((f"tool:{name}", output))
                self.transcript.append({"turn": self.turn, "role": f"tool:{name}", "text": output})
            else:
                assert name is not None and arg is not None
                tokens, reply, answers = self._call_branches(name, arg)
                self.history.append((f"{name}:{arg}", reply[: self.max_reply_chars]))
                voted = majority_vote(answers)
                if voted is not None:
                    self.answer = voted
                extra["called_agent"] = f"{name}:{arg}"
                if self.width > 1:
                    extra["branch_answers"] = answers
        if self.turn >= self.max_steps:
            terminated = True
        cost = (tokens / 1000.0) * math.log(1.0 + self.turn / self.phi)
        reward -= self.lam * cost
        extra.update(step_tokens=tokens, step_cost=cost)
        if terminated:
            score = self._score(self.answer)
            reward += score
            extra.update(
                correct=score == 1.0, score=score, final_answer=self.answer, turns=self.turn
            )
        extra["privileged"] = {"reference": self.task.answer}
        obs, obs_extra = self._observation()
        extra.update(obs_extra)
        return obs, reward, terminated, False, extra

    def _agent_context(self) -> str:
        assert self.task is not None
        lines = [f"{a}: {out}" for a, out in self.history]
        return f"Task:\n{self.task.prompt}\n\nTrajectory so far:\n" + ("\n".join(lines) or "-")

    def _call_branches(self, name: str, pattern: str) -> tuple[int, str, list[str | None]]:
        """Call ``name`` once per width branch; (tokens of all branches, reply, answers)."""
        assert self.task is not None
        system = AGENT_SYSTEMS[self.tasks].format(pattern=pattern)
        tokens, texts, answers = 0, [], []
        for branch in range(self.width):
            content = system
            if self.width > 1:
                content += f"\nBranch {branch + 1} of {self.width} (parallel exploration)."
            messages: list[Message] = [
                {"role": "system", "content": content},
                {"role": "user", "content": self._agent_context()},
            ]
            turn = self.turn + 1000 * branch
            context = CallContext(task=self.task, turn=turn, draft=self.answer)
            completion = self.call_agent(name, messages, context)
            tokens += completion.prompt_tokens + completion.completion_tokens
            texts.append(completion.text)
            answers.append(self._extract_answer(completion.text))
        voted = majority_vote(answers)
        pick = answers.index(voted) if voted is not None else 0
        reply = texts[pick]
        if self.width > 1:
            count = sum(1 for a in answers if a == voted)
            reply = f"{reply} [majority {count}/{self.width}]"
        return tokens, reply, answers

    def _extract_answer(self, text: str) -> str | None:
        """The answer of a model reply for this task kind (None when it has none)."""
        if self.tasks == "multiple-choice":
            return extract_choice(text)
        boxed = extract_boxed(text)
        if boxed:
            return boxed.strip() if self.tasks == "commongen" else boxed
        if self.tasks == "commongen":
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            return lines[-1] if lines else None
        return None

    def _score(self, answer: str | None) -> float:
        """The final-answer score ``r`` in [0, 1]: 0/1 correctness, or concept coverage."""
        assert self.task is not None
        if self.tasks == "commongen":
            return concept_coverage(answer, self.task.meta["concepts"])
        return 1.0 if self._is_correct(answer) else 0.0

    def _is_correct(self, answer: str | None) -> bool:
        assert self.task is not None
        if not answer:
            return False
        if self.tasks == "multiple-choice":
            return extract_choice(answer) == self.task.answer
        if self.tasks == "commongen":
            return concept_coverage(answer, self.task.meta["concepts"]) == 1.0
        try:
            cleaned = re.sub(r"[,$\s]", "", answer)
            return math_equal(self.task.answer, cleaned)
        except (ValueError, ArithmeticError, RecursionError):
            return False

    # -- helpers for tests and demos ------------------------------------------------------
    def demo_action(self, rng: np.random.Generator) -> str:
        """A random valid action: mostly a model with a pattern, sometimes a tool or stop."""
        u = rng.random()
        if u < 0.15:
            return f"<agent>{TERMINATE}</agent>"
        if u < 0.25:
            return "<agent>tool:search</agent><query>large number multiplication</query>"
        if u < 0.3:
            return "<agent>tool:read_file</agent><path>problem.txt</path>"
        models = self.pool.names if self._pool is not None else ("qwen2.5-7b",)
        model = models[int(rng.integers(len(models)))]
        pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
        return f"<agent>{model}:{pattern}</agent>"
