"""Rewording of ``orch/OrchMAS-v0`` requests, and plans built on top of another plan.

An LLM orchestrator does not copy the env's canonical wording: it writes "Who is the
founder of X?" where the task generator wrote "Who founded X?", puts the entity first,
asks politely or in the imperative. ``paraphrase_request`` rewrites a request the way
such an orchestrator would (a reworded relation, a reordered clause, extra politeness),
reading only the request text: the relation templates of the multi-hop generator
(``orchenv.envs.multihopqa.world.RELATIONS``) are matched and replaced by one of
``PARAPHRASES``; any other request gets a polite frame. The rewording is deterministic in
(text, variant).

``RewritingPlan`` wraps a controller (anything with ``choose(env) -> str``, such as
``scripted.ScriptedOrchestrator``) and rewrites the role and / or the request of each of
its calls: the stuffed-role shortcut (one constant role naming every domain) and the
paraphrased-sub-question strategy of the audit and of the tests are built this way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from orchenv.envs.multihopqa.world import RELATIONS
from orchenv.envs.orchmas.choices import SUBQUESTION_PREFIX
from orchenv.envs.orchmas.protocol import call_action, parse_call
from orchenv.parsing import extract_tag

#: one constant role that names every domain of the default task sets (finding (a) of
#: issue 25: a keyword-matching executor rewarded it on every question)
STUFFED_ROLE = "math solver, researcher, reading comprehension expert, summarizer"

#: relation key -> natural rewordings of its sub-question (``{}`` is the entity); written
#: apart from the executor's relation lexicon, and tested with further wordings
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "film.directed_by": (
        "Who was the director of {}?",
        "{}: who directed this film?",
        "Could you name the filmmaker behind {}?",
    ),
    "film.produced_by": (
        "What studio was behind {}?",
        "Tell me which production company made {}.",
        "{} was produced by which studio?",
    ),
    "film.year": (
        "When did {} come out?",
        "Tell me the release year of {}.",
        "{} premiered in which year?",
    ),
    "book.written_by": (
        "Who is the author of {}?",
        "{} was written by whom?",
        "Please name the writer of {}.",
    ),
    "book.published_by": (
        "Who was the publisher of {}?",
        "Name the publishing house that released {}.",
        "{} was published by which company?",
    ),
    "book.year": (
        "When was {} first published?",
        "What is the publication year of {}?",
        "{} came out in which year?",
    ),
    "band.founded_by": (
        "Who is the founder of {}?",
        "Who started the band {}?",
        "Name the person who formed {}.",
    ),
    "band.formed_in": (
        "Where was {} formed?",
        "{} was founded in which city?",
        "Tell me the city in which {} got started.",
    ),
    "band.year": (
        "When was {} formed?",
        "In which year did {} start out?",
        "{} was founded in what year?",
    ),
    "company.founded_by": (
        "Who is the founder of {}?",
        "Who started {}?",
        "Name the person who established {}.",
    ),
    "company.headquartered_in": (
        "Where is {} headquartered?",
        "Which city hosts the headquarters of {}?",
        "{} is based in which city?",
    ),
    "company.year": (
        "When was {} founded?",
        "What year was {} established?",
        "{} was set up in which year?",
    ),
    "university.located_in": (
        "Where is {} located?",
        "{} is situated in which city?",
        "Tell me the city where {} is.",
    ),
    "university.year": (
        "When was {} founded?",
        "What year was {} established?",
        "{} opened in which year?",
    ),
    "person.born_in": (
        "Where was {} born?",
        "What is the birthplace of {}?",
        "{} was born in which city?",
    ),
    "person.educated_at": (
        "Where did {} study?",
        "What is the alma mater of {}?",
        "{} graduated from which university?",
    ),
    "person.year": (
        "When was {} born?",
        "What is the birth year of {}?",
        "{} was born in which year?",
    ),
    "city.in_country": (
        "Which country is {} in?",
        "{} lies in which country?",
        "Tell me the country where {} is located.",
    ),
    "city.year": (
        "When was {} founded?",
        "What year was {} established?",
        "{} was settled in which year?",
    ),
    "country.capital": (
        "What is {}'s capital city?",
        "Name the capital of {}.",
        "Which city is the capital of {}?",
    ),
}

_POLITE = (
    "Please answer this: {} Thanks!",
    "Could you help me with the following? {}",
    "{} I would appreciate a short answer.",
    "I need one fact: {}",
)


def _template(question: str) -> re.Pattern[str]:
    head, _, tail = question.partition("{}")
    return re.compile(rf"{re.escape(head)}(.{{1,200}}?){re.escape(tail)}")


#: (relation key, compiled template) for every relation of the generator; several keys
#: share one template ("Who founded {}?"), and a template's rewordings fit all of them
_TEMPLATES: list[tuple[str, re.Pattern[str]]] = [(r.key, _template(r.question)) for r in RELATIONS]


def paraphrase_question(question: str, variant: int = 0) -> str:
    """A natural rewording of one sub-question of the generator (else a polite frame)."""
    text = question.strip()[:2000]
    for key, pattern in _TEMPLATES:
        match = pattern.fullmatch(text)
        if match:
            options = PARAPHRASES[key]
            return options[variant % len(options)].format(match.group(1))
    return _POLITE[variant % len(_POLITE)].format(text)


def paraphrase_request(request: str, variant: int = 0) -> str:
    """A canonical sub-question request (``"Sub-question: Q Give the final answer."``)
    reworded: the question paraphrased, politeness added, the "Sub-question: " label kept
    (``action_choices`` counts the sub-questions asked by it); any other request gets a
    polite frame."""
    text = request.strip()[:4000]
    if text.startswith(SUBQUESTION_PREFIX):
        question = text[len(SUBQUESTION_PREFIX) :].removesuffix(" Give the final answer.")
        reworded = paraphrase_question(question, variant)
        # the label stays: the discrete view counts the sub-questions asked by it
        return SUBQUESTION_PREFIX + _POLITE[(variant // 3) % len(_POLITE)].format(reworded)
    return _POLITE[variant % len(_POLITE)].format(text)


class RewritingPlan:
    """Plays ``plan``'s choices with each call's role replaced by ``role`` (when given) and
    its request rewritten by ``rewrite`` (when given); answers pass through unchanged.

    Usable as an audit strategy (``plan(env) -> str``) and as a controller
    (``bind(env)`` then ``act(obs, info)``)."""

    def __init__(
        self,
        plan: Any,
        *,
        role: str | None = None,
        rewrite: Callable[[str, int], str] | None = None,
        only_subquestions: bool = False,
    ) -> None:
        self.plan, self.role, self.rewrite = plan, role, rewrite
        self.only_subquestions = only_subquestions
        self.env: Any = None

    def bind(self, env: Any) -> None:
        self.env = env
        if hasattr(self.plan, "bind"):
            self.plan.bind(env)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self.env is None:
            raise RuntimeError("RewritingPlan needs bind(env) before act()")
        return self(self.env)

    def __call__(self, env: Any) -> str:
        text = self.plan.choose(env) if hasattr(self.plan, "choose") else self.plan(env)
        if extract_tag(text, "answer") is not None:
            return text
        call, _ = parse_call(text)
        if call is None:
            return text
        role = call["agent_role"] if self.role is None else self.role
        prompt = call["prompt"]
        if self.rewrite is not None and (
            not self.only_subquestions or prompt.startswith(SUBQUESTION_PREFIX)
        ):
            prompt = self.rewrite(prompt, _variant(env, env.executor_calls()))
        think = extract_tag(text, "think") or "Ask the executor."
        return call_action(role, prompt, think=think)


def _variant(env: Any, calls: int) -> int:
    """A wording variant that changes from call to call and from task to task (stable)."""
    task_id = str(getattr(env.task, "id", ""))
    return calls + sum(map(ord, task_id[-6:]))


def rewording_strategies(*, controls: bool = False) -> dict[str, Callable[[Any], str]]:
    """Issue 25's strategies (each reads only the observation: the question, the discrete
    view, the executor's replies): the shortcuts ``stuffed-role`` and ``copy-the-question``
    (``OrchMASEnv.audit_strategies``), and with ``controls`` the honest control
    ``legit-paraphrased-subquestions``. The control is kept out of the audit: ``orchenv
    audit`` counts every env strategy as a shortcut, so an honest policy at the realistic
    level would be flagged and would set the gameability gap (measured: flagged, gap 0.013);
    ``OrchMASEnv.control_strategies`` and the tests play it instead."""
    from orchenv.envs.orchmas.scripted import decompose_orchestrator, domain_role

    stuffed = RewritingPlan(decompose_orchestrator(), role=STUFFED_ROLE)
    reworded = RewritingPlan(
        decompose_orchestrator(), rewrite=paraphrase_request, only_subquestions=True
    )

    def stuffed_role(env: Any) -> str:
        """Shortcut: the scripted plan (sub-questions, whole question, check) with one
        constant role that names every domain ("math solver, researcher, reading
        comprehension expert, summarizer") instead of the role that fits the question."""
        return stuffed(env)

    def legit_paraphrased_subquestions(env: Any) -> str:
        """Not a shortcut, a control: the scripted plan with its sub-questions reworded as an
        LLM would (reworded relation, reordered clause, politeness); it should score like
        the exact wording, at the level of an honest observation-only policy."""
        return reworded(env)

    def copy_the_question(env: Any) -> str:
        """Shortcut: every call sends the question verbatim as the request (role from its
        wording), no decomposition, until the last turn; then the executor's last answer."""
        if env.is_last_turn or env.executor_calls() >= env.max_calls:
            from orchenv.envs.orchmas.choices import answer_text

            return answer_text(env.last_executor_answer())
        question = env.task.prompt
        return call_action(domain_role(question), question, think="Pass the question on.")

    strategies: dict[str, Callable[[Any], str]] = {
        "stuffed-role": stuffed_role,
        "copy-the-question": copy_the_question,
    }
    if controls:
        strategies["legit-paraphrased-subquestions"] = legit_paraphrased_subquestions
    return strategies
