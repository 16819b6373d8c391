"""A simulated executor that reads the request: the role, what is asked, and the evidence.

OrchMAS (seed 002) learns free-form agent roles and requests for one external
executor LLM. Offline, that action space only carries signal if the simulated
executor reacts to what the request says. ``RoleAwareExecutorBackend`` extends
``SimulatedBackend`` (same calibrated item-response model: ability ``theta`` from
``calibration["accuracy"]``, task difficulty ``b(z)``, logistic luck ``xi``) and
first *reads* the request (``read_request``):

* **what it asks** (``RequestReading.target``):

  - ``"question"``: the request carries the question: at least ``carry_threshold``
    (0.6) of the question's content words (``content_words``: normalised tokens
    minus a short stop list) appear in it;
  - ``"hop"``: it carries a correct sub-question of a multi-hop chain
    (``task.meta["chain"]``, from ``SyntheticMultihopSource`` or the multihop
    loaders): the hop's entity is named in full and the hop's relation is asked in any
    wording (``relations.relation_asked``: a lexicon of the generator's relations and
    answer-type cues; issue 25), or, for relations the lexicon does not know,
    ``carry_threshold`` of the hop question's other content words appear. A sub-question
    about a *wrong* bridge entity (the executor's earlier mistake carried forward) is not
    a correct sub-question. The whole question wins over a hop unless every word it
    shares with the request belongs to the hop the request asks;
  - a request that names none of these but asks to verify / check while an
    earlier request in the conversation carried the question or a hop inherits
    that target (the paper's clarifier turns, Table 7);
  - ``"off-chain"``: on topic (a quarter of the question's or a hop's content
    words) but not a correct question or sub-question: the reply boxes a wrong
    answer (a wrong entity, a near number);
  - ``"irrelevant"``: anything else ("hello, please tell me a joke"): the reply
    gives no answer at all.

* **how well** (a bonus to the margin, logits, all ``RoleAwareExecutorBackend``
  arguments):

  - role fit (``role_fit_logit`` +1.0: the role names the task's domain and no other;
    one naming several unrelated domains is generic, issue 25), mismatched expert
    (``mismatch_logit`` -0.5), empty role (``empty_role_logit`` -1.0): ``role_fit``;
  - verification request (``verify_logit`` +0.5);
  - a repeat of an earlier target in the conversation (``refinement_logit``,
    inherited, +0.75): the executor sees its earlier attempt;
  - a single-hop sub-question (``subquestion_logit`` +2.0): one hop is easier
    than the whole chain;
  - the whole of a multi-hop question in one go (``extra_hop_logit`` -0.75 per hop
    beyond the first, times the share of hops not yet established): a one-shot answer
    must resolve every hop at once (seed 002 appendix A.3 (iv); Table 3's one-shot
    GPT-4o-mini scores 35-41 F1 on 2Wiki / HotpotQA);
  - evidence (``evidence_logit`` +3.0 times the share of the chain's hops whose
    answers already appear in the executor's earlier replies): answering the whole
    question after its hops are established is easier (the paper's
    "environment-guided execution");
  - a reading-comprehension task (``task.meta["passage"]``) whose passage the
    request does not carry (``missing_passage_logit`` -3.0).

The luck ``xi`` is drawn per (seed, task, agent, target), so a hop and the whole
question are separate draws, and a repeat of the same target (a verification) keeps its
draw: a right answer stays right, a wrong one is fixed when the bonus lifts the margin
over the draw. A generic role asking the whole question once, with no evidence, gets no
bonus, so ``calibration["accuracy"]`` is the accuracy of that call. Outcomes depend on
(seed, task, agent, what the request is read as), never on its surface wording.

Replies: math tasks from the procedural source get a worked solution ending in
``\\boxed{...}`` (the parent's writer); other tasks and sub-questions get a short reply
ending in ``\\boxed{ANSWER}``; a wrong reply boxes a plausible wrong answer
(``wrong_answer``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from orchenv.backends.common import require_task
from orchenv.backends.simulated import OUTCOMES_KEYED_ON, SimulatedBackend, sigmoid
from orchenv.envs.orchmas.relations import relation_asked, relation_words
from orchenv.grading import normalize_text
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task, difficulty_of

#: name of this backend in env-built pools
BACKEND_NAME = "orchmas-executor"

#: the executor's name in the default pool (``orchmas_pool``)
DEFAULT_EXECUTOR = "executor"

#: role prefix of the executor's system prompt (the backend reads the role from it)
ROLE_PREFIX = "Act as: "

_MATH_KEYWORDS = (
    "math", "algebra", "arithmetic", "calculat", "number theor", "geometr", "probabilit",
    "combinator", "statistic", "solver", "quantitative",
)  # fmt: skip
_KNOWLEDGE_KEYWORDS = (
    "research", "fact", "knowledge", "encyclop", "wiki", "trivia", "histor", "librar",
    "domain expert",
)  # fmt: skip

#: domain -> keywords (lower-case substrings) that make a role fit that domain
DOMAIN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "math": _MATH_KEYWORDS,
    "multihop": _KNOWLEDGE_KEYWORDS,
    "factoid": _KNOWLEDGE_KEYWORDS,
    "reading": ("reading", "reader", "comprehension", "extract", "passage", "annotat"),
    "summarization": ("summar", "editor", "writer", "abstract", "condens"),
    "geography": ("geograph", "atlas", "cartograph", "capital", "travel"),
    "economics": ("econom", "financ", "currenc", "monetar", "banker"),
    "linguistics": ("linguist", "language", "translat", "philolog"),
}

VERIFY_WORDS = ("verify", "verif", "check", "validate", "confirm", "double-check")

_MATH_TYPES = ("algebra", "prealgebra", "number theory", "counting", "probability", "geometry")

#: words that carry no content when comparing a request with a question
_STOP_TEXT = """a an the of in on at to for by with and or but is are was were be been being do does
    did what which who whom whose where when why how this that these those it its from as
    into than then there their they he she his her him i me you your we our us my please
    give tell find answer question final solve verify check previous step steps following
    can could would should will shall may might must not no yes if so about also just"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

Target = str  # "question" | "hop" | "off-chain" | "irrelevant"


def task_domain(task: Task) -> str:
    """The domain of a task: its ``meta["domain"]``; "multihop" for tasks with a hop
    ``chain``; else "math" for MATH-style types (and tasks without a type)."""
    domain = task.meta.get("domain")
    if isinstance(domain, str) and domain:
        return domain
    if task.meta.get("chain"):
        return "multihop"
    kind = str(task.meta.get("type", "")).lower()
    if not kind or any(word in kind for word in _MATH_TYPES):
        return "math"
    return kind


def role_of(messages: Sequence[Message]) -> str | None:
    """The role in the system prompt's first line (``"Act as: ROLE"``), or None if absent."""
    for message in messages:
        if message.get("role") == "system":
            first = message.get("content", "").split("\n", 1)[0]
            if first.startswith(ROLE_PREFIX):
                return first[len(ROLE_PREFIX) :].strip()
            return None
    return None


def role_fit(role: str | None, task: Task) -> str:
    """``"empty"``, ``"fit"``, ``"mismatch"`` or ``"generic"`` for a role on a task.

    A role fits when it names the task's domain (``DOMAIN_KEYWORDS``, or a word of the
    task's ``type``) and no other domain. A role that names the task's domain *and*
    unrelated ones ("math solver, researcher, reading comprehension expert, summarizer")
    is muddled: a real executor given it answers at best as with a generic role, so it
    counts as ``"generic"`` (issue 25: one role naming every domain used to fit every
    task). A role that names only other domains is a ``"mismatch"``."""
    if role is None or not role.strip():
        return "empty"
    text = role[:2000].lower()
    domain = task_domain(task)
    own = DOMAIN_KEYWORDS.get(domain, ()) + tuple(
        w for w in re.split(r"[^a-z]+", str(task.meta.get("type", "")).lower()) if len(w) > 3
    )
    others = [
        kw
        for d, kws in DOMAIN_KEYWORDS.items()
        if d != domain and kws != DOMAIN_KEYWORDS.get(domain)
        for kw in kws
        if kw not in own
    ]
    names_own = any(word in text for word in own)
    names_other = any(word in text for word in others)
    if names_own:
        return "generic" if names_other else "fit"
    return "mismatch" if names_other else "generic"


_MARKUP = re.compile(r"[\\{}$^_]")
_POSSESSIVE = re.compile(r"['\u2019]s\b")


def plain_words(text: str) -> str:
    """SQuAD-normalised text with LaTeX markup (``\\boxed{x}``) split off the words and
    possessives dropped ("Elra's capital" -> "elra capital")."""
    return normalize_text(_POSSESSIVE.sub(" ", _MARKUP.sub(" ", text[:READ_CHARS])))


#: characters of a text that are read (``plain_words``) and cached (a cache keyed on whole
#: megabyte requests would hold gigabytes)
READ_CHARS = 20_000


def all_words(text: str) -> frozenset[str]:
    """Every normalised word of ``text`` (``plain_words``), stop words included."""
    return _all_words(text[:READ_CHARS])


def content_words(text: str) -> frozenset[str]:
    """The normalised words of ``text`` (``plain_words``) minus ``STOP_WORDS``."""
    return _content_words(text[:READ_CHARS])


@lru_cache(maxsize=16_384)
def _all_words(text: str) -> frozenset[str]:
    return frozenset(plain_words(text).split())


@lru_cache(maxsize=16_384)
def _content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in plain_words(text).split() if w not in STOP_WORDS)


def _recall(needed: frozenset[str], have: frozenset[str]) -> float:
    return len(needed & have) / len(needed) if needed else 0.0


def asks_verification(text: str) -> bool:
    """Whether a request asks to verify or check something."""
    low = text.lower()
    return any(word in low for word in VERIFY_WORDS)


def _user_texts(messages: Sequence[Message]) -> list[str]:
    return [str(m.get("content", "")) for m in messages if m.get("role") == "user"]


def _question_of(task: Task) -> str:
    return str(task.meta.get("question") or task.prompt)


def _chain(task: Task) -> list[Mapping[str, Any]]:
    chain = task.meta.get("chain") or ()
    return [h for h in chain if isinstance(h, Mapping) and h.get("question")]


@dataclass(frozen=True)
class RequestReading:
    """What the executor reads a request as: its ``target`` ("question", "hop",
    "off-chain", "irrelevant"), the ``hop`` index for a sub-question, whether it asks
    for ``verify``-cation, and whether it ``repeats`` an earlier request's target."""

    target: Target
    hop: int | None = None
    verify: bool = False
    repeats: bool = False

    @property
    def key(self) -> str:
        """The outcome key: ``"question"``, ``"hop0"``, ``"hop1"``, ..."""
        return f"hop{self.hop}" if self.target == "hop" else self.target


def _classify(text: str, task: Task, threshold: float) -> tuple[Target, int | None]:
    """What ``text`` asks about ``task`` (``RequestReading.target``) and the hop's index.

    The whole question wins when the request carries ``threshold`` of its content words,
    unless every one of those words belongs to a sub-question the request asks in the
    lexicon's sense (its entity, its relation's words, its answer type's cues): "Who was
    the director of X?" shares "director" and X with "In which city was the director of
    X born?" but asks only the first hop."""
    words = content_words(text)
    question = content_words(_question_of(task))
    best_q = _recall(question, words)
    best, best_k, near, lexical = 0.0, None, best_q, False
    for k, hop in enumerate(_chain(task)):
        needed = content_words(str(hop["question"]))
        entity = hop.get("entity")
        near = max(near, _recall(needed, words))
        if entity:
            names = content_words(str(entity))
            if not names <= words:
                continue
            needed = needed - names
            # the hop's relation in any wording (relations.py); None: not in the lexicon
            relation = str(hop.get("relation", ""))
            asked = relation_asked(relation, all_words(text) - names)
            if asked is not None:
                if asked and not lexical:
                    best, best_k, lexical = 1.0, k, True
                    if best_q >= threshold and (question & words) <= names | relation_words(
                        relation
                    ):
                        best_q = 0.0  # the shared words are the sub-question's own
                continue
        score = _recall(needed, words) if needed else 1.0
        if score >= threshold and score > best and not lexical:
            best, best_k = score, k
    if best_q >= threshold:
        return "question", None
    if best_k is not None:
        return "hop", best_k
    return ("off-chain" if near >= 0.25 else "irrelevant"), None


def read_request(messages: Sequence[Message], task: Task, threshold: float = 0.6) -> RequestReading:
    """Read the last user message of ``messages`` as a request about ``task``."""
    users = _user_texts(messages)
    if not users:
        return RequestReading("irrelevant")
    current, earlier = users[-1], users[:-1]
    verify = asks_verification(current)
    target, hop = _classify(current, task, threshold)
    readings = [_classify(text, task, threshold) for text in earlier]
    if target in ("off-chain", "irrelevant") and verify:
        relevant = [r for r in readings if r[0] in ("question", "hop")]
        if relevant:
            target, hop = relevant[-1]
    repeats = (target, hop) in readings and target in ("question", "hop")
    return RequestReading(target, hop, verify, repeats)


def _evidence_share(messages: Sequence[Message], task: Task) -> float:
    """The share of the chain's hops whose answers appear in earlier executor replies."""
    chain = _chain(task)
    if not chain:
        return 0.0
    replies = " ".join(
        plain_words(str(m.get("content", ""))) for m in messages if m.get("role") == "assistant"
    )
    if not replies:
        return 0.0
    padded = f" {replies} "
    found = sum(
        1 for hop in chain if (a := plain_words(str(hop.get("answer", "")))) and f" {a} " in padded
    )
    return found / len(chain)


_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
#: the most a near-miss number moves, in steps (``near_number``)
NEAR_STEPS = 5
#: longer numbers (digits before and after the point) move in their head only
NEAR_DIGITS = 18
#: a four-digit number up to this year is not moved past it (a year near today stays a
#: year that has happened)
LATEST_YEAR = 2025


def near_number(plain: str, u: float) -> str:
    """A wrong number near ``plain`` (digits, an optional sign and decimals) that keeps its
    form: the sign, the count of digits before the point and of decimals (issue 38: the
    earlier near miss moved a number by up to 50% of its value, "1398" -> "838", so an
    answer's magnitude told a right reply from a wrong one).

    The number moves by 1 to ``NEAR_STEPS`` steps either way (drawn from ``u``); a step is
    one unit of the last decimal place, or, for whole numbers of four or more digits,
    ``10 ** (digits - 3)`` (a year moves by 10 to 50 years, 125000 by 1000 to 5000). A move
    that would change the digit count (or take a year up to ``LATEST_YEAR`` past it) goes the
    other way; a one-digit number moves by 1 to 3 within 0-9. A number of more than
    ``NEAR_DIGITS`` digits moves in its first four digits of the whole part (or its whole
    part alone), the rest copied: the form is kept without arithmetic on huge integers."""
    negative = plain.startswith("-")
    body = plain.lstrip("-")
    whole, _, decimals = body.partition(".")
    places = len(decimals)
    if len(whole) + places > NEAR_DIGITS:  # a huge number from a file: move its head only
        head, rest = (whole[:4], whole[4:]) if len(whole) > 4 else (whole, "")
        moved = near_number(head, u) + rest + (f".{decimals}" if places else "")
        return f"-{moved}" if negative else moved

    def form(n: int) -> str:
        digits = str(n).rjust(places + 1, "0")
        return f"{digits[:-places]}.{digits[-places:]}" if places else digits

    scaled = int(whole + decimals)
    size = len(form(scaled))
    width = len(str(scaled))
    k = 1 + int(u * NEAR_STEPS) % NEAR_STEPS
    sign = 1 if (u * 1e6) % 2 < 1 else -1
    if width == 1 and not places:
        k = 1 + k % 3
        out = scaled + sign * k
        if not 0 <= out <= 9:
            out = scaled - sign * k
    else:
        step = 10 ** max(0, width - 3) if not places else 1
        out = scaled + sign * k * step
        if out < 0 or len(form(out)) != size or (width == 4 and scaled <= LATEST_YEAR < out):
            out = scaled - sign * k * step
    text = form(abs(out))
    return f"-{text}" if negative else text


def _words(name: str) -> list[str]:
    return name.split()


def _shape_rank(candidate: str, correct: str) -> int:
    """How far ``candidate`` is from the form of ``correct``: 0 for the same count of words
    and the same last word (``"X Studios"`` for ``"Y Studios"``), 1 for the same count of
    words, 2 otherwise."""
    a, b = _words(candidate), _words(correct)
    if len(a) != len(b):
        return 2
    return 0 if len(a) > 1 and a[-1] == b[-1] else 1


def wrong_answer(task: Task, correct: str, key: str, seed: int = 0) -> str:
    """A plausible wrong answer to ``correct``, of its kind and form (deterministic in the
    arguments; never an answer of the task or of a hop of its chain).

    In order: a distractor of ``task.meta["distractors"]``; for a number, a near miss of the
    same form (``near_number``: sign, digit count, decimals); the other of yes / no; for a
    name, a name of the same kind the task's paragraphs mention (``meta["same_type_names"]``
    when ``correct`` is the task's answer), else a paragraph title of the task's context,
    preferring the titles shaped like ``correct`` (``_shape_rank``: same count of words, same
    last word: a studio for a studio, a two-word name for a two-word name); else "Unknown".
    Issue 38: a wrong reply must not differ from a right one in form (a number's magnitude,
    an answer's length) where a real model's wrong answer would not.
    """
    u = stable_uniform("orchmas-wrong", seed, task.id, key)
    bad = {normalize_text(correct), *(normalize_text(a) for a in task.answers)}
    bad |= {normalize_text(str(hop.get("answer", ""))) for hop in _chain(task)}
    wrong = [str(d) for d in task.meta.get("distractors", ()) if normalize_text(str(d)) not in bad]
    if wrong:
        return wrong[int(u * len(wrong))]
    plain = correct.replace(",", "").strip()
    if _NUMBER.match(plain):
        return near_number(plain, u)
    low = normalize_text(correct)
    if low in ("yes", "no"):
        return "no" if low == "yes" else "yes"
    names: list[str] = []
    if normalize_text(correct) in {normalize_text(a) for a in task.answers}:
        names = [
            str(n)
            for n in task.meta.get("same_type_names", ())
            if normalize_text(str(n)) not in bad
        ]
    if not names:
        names = [
            str(c[0])
            for c in task.meta.get("context", ())
            if isinstance(c, Sequence) and c and normalize_text(str(c[0])) not in bad
        ]
        if names:
            best = min(_shape_rank(n, correct) for n in names)
            names = [n for n in names if _shape_rank(n, correct) == best]
    if names:
        return names[int(u * len(names))]
    return "Unknown"


_IRRELEVANT_REPLIES = (
    "I'm not sure what you are asking me to work out: the request names no question. "
    "Could you state the question you want answered?",
    "Happy to help, but the request does not say which problem to solve. "
    "Please send the question itself.",
    "There is no question in this request that I can answer. What should I solve?",
)
_OPENERS = (
    "Going through what I know about this,",
    "Based on the available facts,",
    "After weighing the candidates,",
    "From the reference material,",
)


class RoleAwareExecutorBackend(SimulatedBackend):
    """``SimulatedBackend`` that reads the role and the request (see the module docstring)."""

    def __init__(
        self,
        *,
        role_fit_logit: float = 1.0,
        mismatch_logit: float = -0.5,
        empty_role_logit: float = -1.0,
        verify_logit: float = 0.5,
        subquestion_logit: float = 2.0,
        evidence_logit: float = 3.0,
        extra_hop_logit: float = -0.75,
        missing_passage_logit: float = -3.0,
        carry_threshold: float = 0.6,
        **kwargs: float,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.role_fit_logit = float(role_fit_logit)
        self.mismatch_logit = float(mismatch_logit)
        self.empty_role_logit = float(empty_role_logit)
        self.verify_logit = float(verify_logit)
        self.subquestion_logit = float(subquestion_logit)
        self.evidence_logit = float(evidence_logit)
        self.extra_hop_logit = float(extra_hop_logit)
        self.missing_passage_logit = float(missing_passage_logit)
        self.carry_threshold = float(carry_threshold)

    def read(self, messages: Sequence[Message], task: Task) -> RequestReading:
        """What this executor reads the request as (``read_request``)."""
        return read_request(messages, task, self.carry_threshold)

    def prompt_logit(self, messages: Sequence[Message], task: Task) -> float:
        """The margin bonus the role and the request earn on this task (``-inf`` when the
        request asks nothing the executor can answer right)."""
        reading = self.read(messages, task)
        if reading.target not in ("question", "hop"):
            return -math.inf
        fit = role_fit(role_of(messages), task)
        bonus = {
            "fit": self.role_fit_logit,
            "mismatch": self.mismatch_logit,
            "empty": self.empty_role_logit,
        }.get(fit, 0.0)
        if reading.verify:
            bonus += self.verify_logit
        if reading.repeats:
            bonus += self.refinement_logit
        if reading.target == "hop":
            bonus += self.subquestion_logit
        else:
            share = _evidence_share(messages[:-1], task)
            extra_hops = max(len(_chain(task)) - 1, 0)
            bonus += self.evidence_logit * share + self.extra_hop_logit * extra_hops * (1 - share)
        passage = task.meta.get("passage")
        if isinstance(passage, str) and passage:
            request = _user_texts(messages)[-1]
            if _recall(content_words(passage), content_words(request)) < 0.5:
                bonus += self.missing_passage_logit
        return bonus

    def _margin(self, spec: AgentSpec, task: Task, messages: Sequence[Message]) -> float:
        z = min(max(difficulty_of(task), 1e-6), 1.0 - 1e-6)
        base = self.ability(spec) - self.discrimination * math.log(z / (1.0 - z))
        return base + self.prompt_logit(messages, task)

    def _draw(self, spec: AgentSpec, task: Task, key: str) -> float:
        u = stable_uniform("orchmas-executor", self.seed, task.id, spec.name, key)
        u = min(max(u, 1e-15), 1.0 - 1e-15)
        return math.log(u / (1.0 - u))

    def p_correct_for(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> float:
        """The model's probability of a right reply to these messages (analysis, tests)."""
        assert context.task is not None
        margin = self._margin(spec, context.task, messages)
        return 0.0 if margin == -math.inf else sigmoid(margin / self.agent_noise)

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = require_task(context, spec, "simulated executor", OUTCOMES_KEYED_ON)
        reading = self.read(messages, task)
        margin = self._margin(spec, task, messages)
        correct = margin + self.agent_noise * self._draw(spec, task, reading.key) > 0.0
        digest = self._prompt_digest(spec, task, messages)
        variant = digest[0] % self.text_variants
        if reading.target == "irrelevant":
            text = _IRRELEVANT_REPLIES[variant % len(_IRRELEVANT_REPLIES)]
        elif reading.target == "question" and task_domain(task) == "math" and "family" in task.meta:
            text = self._solution_text(spec, task, correct, variant)
        else:
            text = self._short_answer_text(task, reading, correct, variant)
        meta = self.outcome_meta(
            text,
            margin if math.isfinite(margin) else -1e9,
            correct,
            role_fit=role_fit(role_of(messages), task),
            request=reading.key,
        )
        return self.metered(spec, task, messages, text, digest, meta)

    def _short_answer_text(
        self, task: Task, reading: RequestReading, correct: bool, variant: int
    ) -> str:
        chain = _chain(task)
        if reading.target == "hop" and reading.hop is not None:
            right = str(chain[reading.hop].get("answer", ""))
        else:
            right = task.answer
        answer = right if correct else wrong_answer(task, right, reading.key, self.seed)
        return f"{_OPENERS[variant % len(_OPENERS)]} the answer is \\boxed{{{answer}}}."


def orchmas_pool(*, seed: int = 0, accuracy: float = 0.6, **backend_kwargs: float) -> AgentPool:
    """The default pool: one executor, Qwen2.5-7B-Instruct, on the request-reading simulated
    backend.

    The paper's executor is GPT-OSS-120B (section 4.1); orchenv's default is a
    7B instruct model so that the role and request matter (calibration accuracy
    0.6 for a one-shot call with a generic role). Built in code rather than as a
    preset JSON because the backend is not in ``orchenv.pool.BACKENDS``.
    """
    spec = AgentSpec.priced(
        DEFAULT_EXECUTOR,
        "Qwen/Qwen2.5-7B-Instruct",
        "qwen2.5-7b-instruct",
        backend=BACKEND_NAME,
        calibration={"accuracy": accuracy, "mean_completion_tokens": 250, "tokens_per_second": 120},
    )
    backend = RoleAwareExecutorBackend(seed=seed, **backend_kwargs)
    return AgentPool([spec], {BACKEND_NAME: backend}, name="orchmas")
