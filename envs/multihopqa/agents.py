"""Simulated role agents for multihop QA (seed 004): planner, searcher, answerer, verifier, judge.

Offline, routing only matters if the agents react to the context they are
routed. Each simulated role reads its prompt the way a model would and
decides from what is actually there; ground truth (the task's hop chain) is
used only to recognise which gold facts the prompt holds:

* a hop is **known** to an agent when the gold sentence stating it appears
  verbatim in the agent's prompt;
* the **planner** asks for the first unknown hop (``<query>`` with that hop's
  sub-question, the bridge entity filled in from the known hops); with
  probability ``1 - accuracy`` it asks the whole question instead (a vague
  query; distracted like the recommender, see below); once every hop is known and an answer is in memory it sends
  ``<finish/>``;
* the **searcher** passes the newest sub-question in its context to the search
  tool (``<query>``): the last query item, or the ``Next:`` / ``First:`` line of a
  plan when that comes later; with neither in sight it searches the question;
* the **recommender** (answerer) answers correctly only when every hop is
  known, with probability ``sigmoid(logit(accuracy) - distraction * noise_k)``
  where ``noise_k`` is the prompt's tokens outside gold sentences, in
  thousands. That term is a modelling assumption standing in for the
  long-context degradation reported for real models (Liu et al. 2023, "Lost
  in the Middle"); ``distraction=0`` switches it off. With a hop missing (or an
  unlucky draw) it guesses an answer of the kind the question asks for (``guess``: a
  city for "In which city...", a year, yes or no, one of two compared names), never a
  hop of the chain: until issue 38 it answered the last entity of its known chain, the
  next hop's subject, so "look up the Recommender's answer" followed the hops for the
  Planner and that answer's length (a name where a year was asked) told right from
  wrong. A later hop's sentence seen without the hops before it is not reached: nothing
  in the prompt links it to the question (issue 25: it used to count, so a query that
  happened to retrieve the answer paragraph was answered right for sure);
* the **verifier** says ``supported`` when the latest answer matches what the
  known hops imply, else ``unsupported`` with the missing entity;
* the **judge** returns the Answer Quality Score JSON of appendix A.4
  (``{"score": 1-5, "justification": ...}``) from the answer's F1.

Outcomes are deterministic per (seed, task, role, prompt); an agent's luck (the uniform
draw its odds are compared with) is keyed on what it is asked (``request_key``: the
normalized sub-question for the Recommender), not on the prompt's wording, so rewording a
request ("Thanks.", "Please be concise.", case, spacing) never redraws it (issue 38). Token counts use
the same counter as the shared memory, so eq. (10) totals are in one unit.
Written here because no library simulates these roles.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchenv.backends.simulated import counted_completion
from orchenv.error import BackendError
from orchenv.grading import best_answer_prf
from orchenv.memory import TokenCounter, make_token_counter
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task
from orchenv.teams import role_agent_pool

#: name of this backend in env-built pools
BACKEND_NAME = "multihop-roles"
#: the simulated roles' behaviour version, in the reproduction's cache keys (a cached run
#: of an older simulator is recomputed, never reused): 2 = issue 38's kind-matched guess
SIMULATOR_VERSION = 2
ROLES = ("planner", "searcher", "recommender", "verifier", "judge")

_QUESTION_RE = re.compile(r"^[ \t]*Question: (.*)$", re.MULTILINE)
_ANSWER_ITEM_RE = re.compile(r"type: answer\n(?:  [a-z_]+: .*\n)*  text: \|\n((?:    .*(?:\n|$))+)")
#: a query item, or a plan's "Next: ..." / "First: ..." sub-question (its first line)
_SUBQUESTION_RE = re.compile(
    r"type: query\n(?:  [a-z_]+: .*\n)*  text: \|\n((?:    .*(?:\n|$))+)"
    r"|type: plan\n(?:  [a-z_]+: .*\n)*  text: \|\n(?:    .*\n)*?    .*?\b(?:Next|First): (.+)"
)


def _sigmoid(x: float) -> float:
    # not orchenv.backends.simulated.sigmoid: its overflow-free tanh form differs from this one
    # in the last bits for most x, and these odds (and the p_correct they report) must stay
    # those the calibration in docs/reproduction/004.md was measured with
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def gold_sentences(task: Task) -> list[str]:
    """The gold sentence of each hop in the chain (empty when the record has no chain)."""
    paragraphs = {title: sentences for title, sentences in task.meta.get("context", [])}
    out = []
    for hop in task.meta.get("chain", []):
        sentences = paragraphs.get(hop.get("title"), [])
        index = int(hop.get("sent", -1))
        out.append(sentences[index].strip() if 0 <= index < len(sentences) else "")
    return out


def resolved_marker(hop: Mapping[str, Any]) -> str:
    """How a plan records a resolved hop: ``"ENTITY -> ANSWER"``."""
    return f"{hop.get('entity') or hop.get('question', '?')} -> {hop.get('answer')}"


def subquestions(prompt: str) -> list[str]:
    """Every sub-question in a rendered context: query items and plans' ``Next:`` /
    ``First:`` lines, in memory order."""
    return [
        _block_text(m) if m.group(1) is not None else m.group(2).strip()
        for m in _SUBQUESTION_RE.finditer(prompt)
    ]


def known_hops(task: Task, prompt: str) -> list[bool]:
    """Which hops ``prompt`` establishes: the gold sentence verbatim, a plan's record of it
    (``ENTITY -> ANSWER``), or, for a hop before the last, a sub-question of the team that
    names the hop's answer (the Planner fills found entities into the next sub-question, so
    "Which university did X attend?" records that X is what the hop before it found; a real
    reader follows that record whether or not the paragraph that stated it is still routed
    to it). A later hop's sentence alone is no link to the question (see ``known_prefix``)."""
    chain = task.meta.get("chain", [])
    # a sub-question is about one entity (two for a comparison): a query naming more than two
    # of the question's paragraphs records no hop (else a Planner could dump every name it
    # saw into one query)
    titles = [str(t).lower() for t, _ in task.meta.get("context", []) if str(t).strip()]
    asked = [q for q in subquestions(prompt) if sum(t in q.lower() for t in titles) <= 2]
    return [
        (bool(s) and s in prompt)
        or resolved_marker(hop) in prompt
        or (i < len(chain) - 1 and _names_answer(asked, str(hop.get("answer") or "")))
        for i, (s, hop) in enumerate(zip(gold_sentences(task), chain, strict=False))
    ]


def _names_answer(asked: Sequence[str], answer: str) -> bool:
    if not answer.strip():
        return False
    pattern = re.compile(r"(?<!\w)" + re.escape(answer.strip()) + r"(?!\w)", re.IGNORECASE)
    return any(pattern.search(q) for q in asked)


def known_prefix(known: Sequence[bool]) -> int:
    """How many hops, from the first, are known without a gap (the chain an agent can follow
    from the question)."""
    count = 0
    for k in known:
        if not k:
            break
        count += 1
    return count


def _block_text(match: re.Match[str]) -> str:
    return "\n".join(line[4:] for line in match.group(1).splitlines()).strip()


def latest_subquestion(prompt: str) -> str | None:
    """The newest sub-question in a rendered context: the last query item, or the
    ``Next:`` / ``First:`` part of a plan, whichever comes later in memory order."""
    matches = list(_SUBQUESTION_RE.finditer(prompt))
    if not matches:
        return None
    last = matches[-1]
    return _block_text(last) if last.group(1) is not None else last.group(2).strip()


#: courtesy and framing words a rewording adds or drops without changing what is asked
_COURTESY = frozenset(
    [
        "please",
        "kindly",
        "thanks",
        "thank",
        "you",
        "be",
        "concise",
        "brief",
        "short",
        "answer",
        "just",
        "could",
        "would",
        "can",
        "tell",
        "me",
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "to",
        "is",
        "was",
        "what",
        "which",
        "who",
    ]
)
_WORD_RE = re.compile(r"[^\W_]+")
_ROUND_RE = re.compile(r"^[ \t]*Round (\d+) of \d+", re.MULTILINE)


def normalized_request(text: str) -> str:
    """What a request asks, without its wording: its lower-cased words, courtesy and
    framing words dropped (``_COURTESY``), sorted. "Thanks. Who founded X?", "who  founded
    x" and "Please be concise: who founded X" all give "founded x"."""
    words = {w for w in _WORD_RE.findall(text.casefold()) if w not in _COURTESY}
    return " ".join(sorted(words))


def request_key(role: str, task: Task, prompt: str) -> tuple[str, ...]:
    """What a role is asked in ``prompt``, for keying its luck (issue 38: the luck of a call
    depends on what is asked, never on its wording): the Recommender and the Searcher the
    newest sub-question (else the question), the Planner the question and which hops are
    known, the Verifier the answer under review and the known hops, the judge the answer;
    each (but the judge's) with the round it is asked in (``Round N of T``: the team's state,
    as before, when every round's prompt was a new one). Repeats of the same request in a
    round share one draw (their errors are fully correlated: rewording it or asking it again
    redraws nothing); a new round draws afresh. The calibrated accuracy is per request."""
    known = "".join("1" if k else "0" for k in known_hops(task, prompt))
    match = _ROUND_RE.search(prompt)
    round_ = match.group(1) if match else "?"
    if role in ("recommender", "searcher"):
        return (normalized_request(latest_subquestion(prompt) or question_of(prompt)), round_)
    if role == "planner":
        return (normalized_request(question_of(prompt)), known, round_)
    answer = normalized_request(latest_answer(prompt) or "")
    return (answer, known, round_) if role == "verifier" else (answer,)


def latest_answer(prompt: str) -> str | None:
    matches = list(_ANSWER_ITEM_RE.finditer(prompt))
    return _block_text(matches[-1]) if matches else None


def question_of(prompt: str) -> str:
    match = _QUESTION_RE.search(prompt)
    return match.group(1).strip() if match else ""


_YEAR_RE = re.compile(r"(?<!\d)(1[0-9]{3}|20[0-9]{2})(?!\d)")


def guess(task: Task, prompt: str, luck: float) -> str:
    """The Recommender's answer without the chain (a hop missing, or an unlucky draw): a
    guess of the answer's kind, never a hop of the chain (issue 38).

    Asked "In which city was the founder of X born?" without the founder's paragraph, a
    reader answers a city from its context, not the founder's name: the kind of answer
    the question asks for. Until issue 38 the simulated Recommender answered the last
    entity of its known chain (the next hop's subject), so "look up whatever the
    Recommender answered" followed the hops without the Planner's skill and tied the
    skill reference under full and static routing. Now:

    * yes / no questions: yes or no (a coin; right half the time);
    * comparisons naming two entities: one of the names in the question;
    * years: a year in the prompt other than the answer (else one in the question's
      paragraphs, else a nearby year);
    * other kinds: a name of the answer's kind in the prompt (``meta["same_type_names"]``,
      from the generator: never the answer, a chain entity or a hop's answer), else one in
      the question's paragraphs; a task without kinds (loaded files) gets a distractor
      paragraph's title.

    The pick among candidates is drawn from ``luck``.
    """
    pick = int(luck * 1e6)
    chain = task.meta.get("chain", [])
    kind = str(task.meta.get("answer_type") or "")
    if kind == "yes/no" or task.answer.strip().casefold() in ("yes", "no"):
        return ("yes", "no")[pick % 2]
    question = question_of(prompt) or task.prompt
    if task.meta.get("type") == "comparison" and chain:
        named = [str(h["entity"]) for h in chain if str(h.get("entity") or "") in question]
        names = list(dict.fromkeys(named)) or [str(h["entity"]) for h in chain]
        return names[pick % len(names)]
    answers = {a.strip().casefold() for a in task.answers}
    plain = task.answer.strip()
    number = plain.isascii() and plain.isdigit() and len(plain) <= 9
    if kind == "year" or (not kind and number):
        years = [y for y in _YEAR_RE.findall(prompt) if y not in answers and y not in question]
        if not years:
            text = " ".join(" ".join(s) for _, s in task.meta.get("context", []))
            years = [y for y in _YEAR_RE.findall(text) if y not in answers]
        distinct = list(dict.fromkeys(years))
        if distinct:
            return distinct[pick % len(distinct)]
        base = int(plain) if number else 1950
        return str(base + 1 + pick % 30)
    candidates = [
        str(n) for n in task.meta.get("same_type_names", ()) if str(n).casefold() not in answers
    ]
    if candidates:
        seen = [n for n in candidates if n in prompt and n not in question]
        pool = seen or candidates
        return pool[pick % len(pool)]
    return _wrong_name(task, pick)


def _wrong_name(task: Task, pick: int) -> str:
    """A distractor paragraph's title (no paragraph of the chain)."""
    titles = [
        t
        for t, _ in task.meta.get("context", [])
        if t not in {h.get("title") for h in task.meta.get("chain", [])}
    ]
    return titles[pick % len(titles)] if titles else "unknown"


class MultihopRoleBackend:
    """The simulated backend behind every role; see the module docstring."""

    def __init__(
        self,
        *,
        seed: int = 0,
        token_counter: str | TokenCounter | None = "auto",
        distraction: float = 0.6,
    ) -> None:
        if distraction < 0:
            raise BackendError(f"distraction must be >= 0, got {distraction}")
        self.seed = seed
        self.counter = make_token_counter(token_counter)
        self.distraction = distraction

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = context.task
        if task is None:
            raise BackendError(
                f"the simulated multihop agents need the task to answer {spec.name!r}; "
                "the environment passes it in CallContext(task=...)"
            )
        role = str(spec.backend_kwargs.get("role", spec.name))
        prompt = "\n\n".join(m["content"] for m in messages)
        luck = stable_uniform(self.seed, task.id, role, spec.name, *request_key(role, task, prompt))
        accuracy = float(spec.calibration.get("accuracy", 0.9))
        writer = {
            "planner": self._planner,
            "searcher": self._searcher,
            "recommender": self._recommender,
            "verifier": self._verifier,
            "judge": self._judge,
        }.get(role)
        if writer is None:
            raise BackendError(f"agent {spec.name!r} has role {role!r}; expected one of {ROLES}")
        text, meta = writer(task, prompt, accuracy, luck)
        return self._metered(spec, messages, text, meta)

    # -- roles ----------------------------------------------------------------
    def _planner(self, task: Task, prompt: str, accuracy: float, luck: float) -> tuple[str, dict]:
        chain = task.meta.get("chain", [])
        known = known_hops(task, prompt)
        missing = [i for i, k in enumerate(known) if not k]
        if not chain:
            return (
                f"<plan>Search for the question directly.</plan>\n<query>{question_of(prompt)}</query>",
                {},
            )
        if not missing:
            done = ", ".join(resolved_marker(h) for h in chain)
            if latest_answer(prompt):
                return f"<plan>Resolved so far: {done}. An answer exists.</plan>\n<finish/>", {}
            return f"<plan>Resolved so far: {done}. The recommender should answer now.</plan>", {}
        hop = chain[missing[0]]
        done = ", ".join(resolved_marker(h) for h, k in zip(chain, known, strict=False) if k)
        resolved = f"Resolved so far: {done}. " if done else ""
        if luck >= _sigmoid(
            _logit(accuracy) - self.distraction * self._noise_k(task, prompt)
        ):  # vague plan: the whole question instead of the next hop
            return (
                f"<plan>{resolved}Look for evidence about the question.</plan>\n"
                f"<query>{question_of(prompt)}</query>",
                {"vague": True},
            )
        plan = f"{resolved}Next: {hop['question']}" if done else f"First: {hop['question']}"
        return f"<plan>{plan}</plan>\n<query>{hop['question']}</query>", {"hop": missing[0]}

    def _searcher(self, task: Task, prompt: str, accuracy: float, luck: float) -> tuple[str, dict]:
        query = latest_subquestion(prompt) or question_of(prompt)
        return f"<query>{query}</query>", {}

    def _noise_k(self, task: Task, prompt: str) -> float:
        gold = sum(self.counter.count(s) for s in gold_sentences(task) if s and s in prompt)
        return max(0, self.counter.count(prompt) - gold) / 1000.0

    def _recommender(
        self, task: Task, prompt: str, accuracy: float, luck: float
    ) -> tuple[str, dict]:
        chain = task.meta.get("chain", [])
        known = known_hops(task, prompt)
        complete = bool(chain) and all(known)
        p = _sigmoid(_logit(accuracy) - self.distraction * self._noise_k(task, prompt))
        answer = task.answer if complete and luck < p else guess(task, prompt, luck)
        # only the answer: no note on how many supporting facts it had (issue 38: a real
        # model does not know how many facts it is missing)
        return (
            f"<answer>{answer}</answer>",
            # privileged (never shown to the controller): read by the audit's tell meter
            {
                "complete": complete,
                "p_correct": p if complete else 0.0,
                "correct": answer == task.answer,
            },
        )

    def _verifier(self, task: Task, prompt: str, accuracy: float, luck: float) -> tuple[str, dict]:
        answer = latest_answer(prompt)
        chain = task.meta.get("chain", [])
        known = known_hops(task, prompt)
        if answer is None:
            return "<feedback>unsupported: there is no answer yet</feedback>", {}
        supported = bool(chain) and all(known) and best_answer_prf(task.answers, answer)[2] == 1.0
        if luck >= accuracy:
            supported = not supported
        if supported:
            return "<feedback>supported: the answer follows from the evidence</feedback>", {}
        gap = next((h["entity"] for h, k in zip(chain, known, strict=False) if not k), "the answer")
        return f"<feedback>unsupported: missing evidence about {gap}</feedback>", {}

    def _judge(self, task: Task, prompt: str, accuracy: float, luck: float) -> tuple[str, dict]:
        answer = prompt.rsplit("Answer:", 1)[-1].split("Please provide", 1)[0].strip()
        f1 = best_answer_prf(task.answers, answer)[2] if answer else 0.0
        score = 1 if not answer else 5 if f1 == 1.0 else 4 if f1 >= 0.5 else 3 if f1 > 0 else 2
        return json.dumps(
            {"score": score, "justification": f"token F1 with the reference {f1:.2f}"}
        ), {}

    # -- metering ---------------------------------------------------------------
    def _metered(
        self, spec: AgentSpec, messages: Sequence[Message], text: str, meta: Mapping[str, Any]
    ) -> Completion:
        return counted_completion(spec, messages, text, self.counter, meta)


#: default calibration of each simulated role (see the module docstring)
DEFAULT_ACCURACY = {
    "planner": 0.9,
    "searcher": 1.0,
    "recommender": 0.92,
    "verifier": 0.9,
    "judge": 1.0,
}


def multihop_pool(
    *,
    seed: int = 0,
    token_counter: str | TokenCounter | None = "auto",
    distraction: float = 0.6,
    accuracy: Mapping[str, float] | None = None,
) -> AgentPool:
    """The default pool: one simulated agent per role (and the judge), Qwen2.5-7B-Instruct prices.

    Seed 004 does not name its role models (DeepSeek and GPT-4 appear only as
    judges); orchenv uses a 7B instruct model's prices for every role
    (``orchenv.teams.role_agent_pool``).
    """
    acc = {**DEFAULT_ACCURACY, **(accuracy or {})}
    backend = MultihopRoleBackend(seed=seed, token_counter=token_counter, distraction=distraction)
    return role_agent_pool(
        "multihop", BACKEND_NAME, backend, {r: {"accuracy": acc[r]} for r in ROLES}
    )
