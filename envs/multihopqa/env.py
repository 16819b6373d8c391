"""Multihop QA with role-aware shared-memory routing (seed 004, RCR-Router).

Three roles (Planner, Searcher, Recommender; optionally a Verifier) answer a
multihop question over several rounds. They share one ``SharedMemory``; before
each role acts, a router (full context, static, or RCR) picks the memory items
it sees. ``MultihopQAGame`` holds the rules once; three views drive it:

* ``MultihopQAEnv`` (Gymnasium, ``orch/MultihopQA-v0`` and its router
  variants): the learner plays the **planner**, the controller role that
  decides what to look up next and when to stop; pool agents play the others;
* ``multihopqa_aec_env`` / ``multihopqa_parallel_env``: PettingZoo views where
  every role is an external policy;
* ``run_team``: every role played by pool agents (the paper's system, used by
  the reproduction script ``scripts/reproduce_rcr.py``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import best_answer_prf, exact_match
from orchenv.memory import (
    AgentOutput,
    Router,
    SharedMemory,
    TokenCounter,
    make_role_router,
    make_token_counter,
    render_context,
)
from orchenv.parsing import extract_tag
from orchenv.pool import AgentPool, CallContext, Message, make_pool
from orchenv.tasks import Task, TaskSource, make_task_source
from orchenv.teams import RoleAECEnv, RoleGame, RoleParallelEnv

log = logging.getLogger(__name__)

ROLE_ORDER = ("planner", "searcher", "recommender", "verifier")
STAGES = {"planner": "plan", "searcher": "search", "recommender": "answer", "verifier": "verify"}

#: appendix E's role keyword lists K_i (the question's words are added per episode)
ROLE_KEYWORDS = {
    "planner": ("unsupported", "missing", "resolved"),
    "searcher": ("next:", "first:"),
    "recommender": (),
    "verifier": (),
}
#: preferred item types per stage (the sets T_t of appendix E)
STAGE_TYPES = {
    "plan": ("plan", "feedback", "answer", "evidence"),
    "search": ("query",),
    "answer": ("plan", "evidence"),
    "verify": ("answer", "evidence"),
}
#: the static baseline's fixed per-role slices (item types)
STATIC_TYPES = {
    "planner": ("task", "plan", "evidence", "answer", "feedback"),
    "searcher": ("task", "query"),
    "recommender": ("task", "evidence", "answer"),
    "verifier": ("task", "evidence", "answer"),
}
#: beta_role of eq. (4): role offsets to the base budget (tokens). With the default
#: beta_base of 256: planner 384, searcher 96, recommender 384, verifier 256. Seed 004
#: uses B_i = 2048 on HotpotQA, whose contexts are several times longer than the
#: generator's ~100-token paragraphs; the defaults keep the same ratio of budget to
#: memory size. ``scripts/reproduce_rcr.py`` sweeps beta_base.
BUDGET_OFFSETS = {"planner": 128, "searcher": -160, "recommender": 128, "verifier": 0}
#: appendix E's (w1, w2, w3). The paper's example sets all to 1; here the role-keyword
#: indicator weighs 0.5 so that a fresh item of the preferred type outranks an old item
#: that merely names a tracked entity (measured in docs/rcr/results.md).
DEFAULT_WEIGHTS = (0.5, 1.0, 1.0)

ROLE_PROMPTS = {
    "planner": (
        "You are the Planner of a team answering a multihop question. Decompose it into single-hop "
        "sub-questions and direct the Searcher. Reply with <plan>your reasoning</plan> and one "
        "<query>the next sub-question, with entities already found filled in</query>. When the "
        "evidence answers every hop and the Recommender has answered, reply <finish/>. You may "
        "also give the final answer yourself with <answer>...</answer>."
    ),
    "searcher": (
        "You are the Searcher. Turn the newest sub-question in the shared memory into a search "
        "query for the paragraph index. Reply with <query>search terms</query>."
    ),
    "recommender": (
        "You are the Recommender. Answer the question from the evidence in the shared memory. "
        "Reply with <answer>a short answer (an entity, a date, yes or no)</answer>."
    ),
    "verifier": (
        "You are the Verifier. Check whether the latest answer follows from the evidence. Reply "
        "with <feedback>supported: why</feedback> or <feedback>unsupported: what is missing</feedback>."
    ),
}

JUDGE_PROMPT = (
    "You are an expert judge. Your task is to evaluate how well the answer responds to the "
    "user's query.\n\nUser Query:\n{question}\n\nAnswer:\n{answer}\n\nPlease provide a JSON object "
    'with the following format: {{"score": (1 to 5), "justification": "a short explanation of the score"}}'
)

_NAME_RE = re.compile(r"[A-Z][\w'-]+(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]+)*")
_NOT_NAMES = frozenset(
    {"which", "what", "who", "where", "when", "in which", "first", "next", "resolved", "look"}
)
_FINISH_RE = re.compile(r"<finish\s*/?>", re.IGNORECASE)
_SCORE_RE = re.compile(r'"score"\s*:\s*([0-9.]+)')


@dataclass
class RoundUsage:
    """Tokens and latency per role in one round (eq. 7, 8, 10)."""

    tokens: dict[str, int] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)


def parse_judge_score(text: str) -> float | None:
    """The 1-5 score from a judge reply (JSON, or a ``"score": N`` fragment); None if absent."""
    try:
        value = json.loads(text.strip().removeprefix("```json").removesuffix("```"))
        score = float(value["score"]) if isinstance(value, dict) else None
    except (ValueError, KeyError, TypeError):
        match = _SCORE_RE.search(text)
        score = float(match.group(1)) if match else None
    if score is None or not 1.0 <= score <= 5.0:
        return None
    return score


class MultihopQAGame(RoleGame):
    """The multihop QA rules: roles, routed observations, memory updates, metrics.

    Arguments:
        task_source: a registered source name or a ``TaskSource`` whose tasks
            carry HotpotQA-style ``meta["context"]`` (default: the embedded
            generator ``"multihop-synth"``).
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        rounds: T, interaction rounds (default 3, the paper's best).
        beta_base / budget_offsets: eq. (4) budgets for RCR.
        weights / decay / selector: RCR's scorer and selection (see ``RCRRouter``).
        verifier: add the Verifier role.
        search_k: paragraphs the search tool returns per query.
        token_counter: how memory items and prompts are counted.
    """

    name = "multihopqa"

    def __init__(
        self,
        *,
        task_source: str | TaskSource = "multihop-synth",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "test",
        router: str = "rcr",
        rounds: int = 3,
        beta_base: int = 256,
        budget_offsets: Mapping[str, int] | None = None,
        weights: tuple[float, float, float] = DEFAULT_WEIGHTS,
        decay: float = 1.0,
        selector: str = "greedy",
        verifier: bool = False,
        search_k: int = 2,
        token_counter: str | TokenCounter | None = "auto",
        max_action_chars: int = 4000,
    ) -> None:
        super().__init__()
        if rounds < 1:
            raise ConfigError(f"rounds must be >= 1, got {rounds}")
        if search_k < 1:
            raise ConfigError(f"search_k must be >= 1, got {search_k}")
        self.roles = ROLE_ORDER if verifier else ROLE_ORDER[:3]
        self.max_rounds = rounds
        self.split = split
        self.search_k = search_k
        self.max_action_chars = max_action_chars
        self.router_mode = router
        self.router: Router = make_role_router(
            router,
            self.roles,
            keywords=ROLE_KEYWORDS,
            static_types=STATIC_TYPES,
            budget_offsets=BUDGET_OFFSETS,
            stage_types=STAGE_TYPES,
            overrides=budget_offsets,
            beta_base=beta_base,
            weights=weights,
            decay=decay,
            selector=selector,
        )
        self._task_source_arg = task_source
        self._task_source_kwargs = dict(task_source_kwargs or {})
        self._task_source: TaskSource | None = None
        self._counter_arg = token_counter
        self.counter: TokenCounter | None = None
        # episode state
        self.task: Task | None = None
        self.memory = SharedMemory("estimate")
        self.answer: str | None = None
        self.finish_requested = False
        self.usage: list[RoundUsage] = []
        self._prompt_cache: dict[str, tuple[int, str]] = {}
        self.searches: list[tuple[str, list[str]]] = []

    # -- lazily built collaborators -----------------------------------------------
    @property
    def task_source(self) -> TaskSource:
        if self._task_source is None:
            self._task_source = make_task_source(self._task_source_arg, **self._task_source_kwargs)
            self._task_source.check_split(self.split)
        return self._task_source

    def _counter(self) -> TokenCounter:
        if self.counter is None:
            self.counter = make_token_counter(self._counter_arg)
        return self.counter

    # -- RoleGame ----------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> None:
        source = self.task_source
        if "task_id" in options:
            self.task = source.by_id(str(options["task_id"]))
        elif "task_index" in options:
            self.task = source.get(self.split, int(options["task_index"]))
        else:
            self.task = source.sample(self.split, self.np_random)
        self.memory = SharedMemory(self._counter())
        self.memory.write("user", "task", f"Question: {self.task.prompt}", round=0, key="task")
        self.answer = None
        self.finish_requested = False
        self.usage = [RoundUsage()]
        self._prompt_cache = {}
        self.searches = []

    def _keywords(self) -> tuple[str, ...]:
        """Per-episode keywords added to every role's list K_i: the names (capitalised spans)
        in the question and in the plans and queries written so far, so evidence about the
        entities the team is tracking counts as role-relevant."""
        assert self.task is not None
        texts = [self.task.prompt] + [m.text for m in self.memory if m.type in ("plan", "query")]
        names = (n for text in texts for n in _NAME_RE.findall(text))
        return tuple(dict.fromkeys(n for n in names if len(n) > 3 and n.lower() not in _NOT_NAMES))

    def role_messages(self, role: str) -> list[Message]:
        """The chat messages of ``role``'s prompt now (system: role; user: question + context)."""
        if role not in self.roles:
            raise UnknownNameError("role", role, self.roles)
        assert self.task is not None, "reset() first"
        kwargs: dict[str, Any] = {}
        if self.router_mode == "rcr":
            kwargs = {"keywords": self._keywords(), "now": self.round + 1}
        items = self.router.select(self.memory, role, STAGES[role], **kwargs)
        user = (
            f"Question: {self.task.prompt}\nRound {self.round + 1} of {self.max_rounds}; "
            f"your stage: {STAGES[role]}.\nShared memory routed to you:\n{render_context(items)}"
        )
        return [
            {"role": "system", "content": ROLE_PROMPTS[role]},
            {"role": "user", "content": user},
        ]

    def observe(self, role: str) -> str:
        text = "\n\n".join(m["content"] for m in self.role_messages(role))
        self._prompt_cache[role] = (self.round, text)
        return text

    def prompt_tokens(self, role: str) -> int:
        """Tokens of the prompt ``role`` last observed this round (rendered now if it did not)."""
        cached = self._prompt_cache.get(role)
        text = cached[1] if cached and cached[0] == self.round else self.observe(role)
        return self._counter().count(text)

    def act(
        self,
        role: str,
        text: str,
        *,
        usage: tuple[int, int, float] | None = None,
    ) -> dict[str, Any]:
        """Apply ``role``'s reply. ``usage`` = (prompt tokens, completion tokens, latency s)
        when a pool agent produced it; otherwise tokens are counted on the text."""
        if role not in self.roles:
            raise UnknownNameError("role", role, self.roles)
        if self.done or self.truncated:
            return {"invalid_action": True, "parse_error": "the episode is over"}
        if not isinstance(text, str):
            text = repr(text)
        text = text[: self.max_action_chars]
        if usage is None:
            usage = (self.prompt_tokens(role), self._counter().count(text), 0.0)
        current = self.usage[-1]
        current.tokens[role] = current.tokens.get(role, 0) + usage[0] + usage[1]
        current.latency[role] = current.latency.get(role, 0.0) + usage[2]
        info = getattr(self, f"_act_{role}")(text)
        self.set_info(role, info)
        return info

    def _store(self, role: str, text: str, default_type: str) -> int:
        """Run one reply through the memory update (eq. 5); the number of items stored."""
        body = _FINISH_RE.sub("", text).strip()
        if not body:
            return 0
        return len(self.memory.update([AgentOutput(role, body, type=default_type)], self.round + 1))

    def _act_planner(self, text: str) -> dict[str, Any]:
        answer = extract_tag(text, "answer")
        query = extract_tag(text, "query")
        plan = extract_tag(text, "plan")
        finish = bool(_FINISH_RE.search(text))
        if answer is not None and answer.strip():
            self.answer = answer.strip()[:500]
            finish = True
        if not (query or plan or finish):
            self.memory.dropped = []
            return {
                "invalid_action": True,
                "parse_error": "expected <plan>...</plan> with a <query>...</query>, <answer>...</answer> "
                "or <finish/>; got none of them",
            }
        self.finish_requested = self.finish_requested or finish
        stored = self._store("planner", text, "plan")
        return {"invalid_action": False, "parse_error": None, "stored": stored, "finish": finish}

    def _act_searcher(self, text: str) -> dict[str, Any]:
        from orchenv.envs.multihopqa.data import paragraph_index

        assert self.task is not None
        query = extract_tag(text, "query")
        invalid = query is None or not query.strip()
        if invalid:  # fall back on the question so the round is not lost entirely
            query = self.task.prompt
        assert query is not None
        hits = paragraph_index(self.task).search(query.strip()[:1000], k=self.search_k)
        outputs = [
            AgentOutput(
                "searcher",
                f"{hit.title}: " + " ".join(s.strip() for s in hit.sentences),
                type="evidence",
                key=hit.title,
            )
            for hit in hits
        ]
        stored = len(self.memory.update(outputs, self.round + 1))
        self.searches.append((query, [hit.title for hit in hits]))
        info: dict[str, Any] = {
            "query": query,
            "hits": [hit.title for hit in hits],
            "stored": stored,
        }
        if invalid:
            info.update(
                invalid_action=True,
                parse_error="expected <query>search terms</query>; searched the question instead",
            )
        else:
            info.update(invalid_action=False, parse_error=None)
        return info

    def _act_recommender(self, text: str) -> dict[str, Any]:
        answer = extract_tag(text, "answer")
        if answer is None or not answer.strip():
            return {"invalid_action": True, "parse_error": "expected <answer>short answer</answer>"}
        self.answer = answer.strip()[:500]
        self.memory.write("recommender", "answer", self.answer, round=self.round + 1)
        return {"invalid_action": False, "parse_error": None, "answer": self.answer}

    def _act_verifier(self, text: str) -> dict[str, Any]:
        feedback = extract_tag(text, "feedback")
        if feedback is None or not feedback.strip():
            return {
                "invalid_action": True,
                "parse_error": "expected <feedback>supported|unsupported: ...</feedback>",
            }
        self.memory.write(
            "verifier", "feedback", feedback.strip(), round=self.round + 1, key="verifier:feedback"
        )
        return {"invalid_action": False, "parse_error": None}

    def _end_round(self) -> None:
        if self.finish_requested or self.round + 1 >= self.max_rounds:
            self.done = True
            score = self.metrics()["f1"]
            self.round_rewards = {role: score for role in self.roles}
        else:
            self.usage.append(RoundUsage())

    # -- metrics (appendix A) -----------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """EM, F1, precision, recall, total tokens (eq. 10), latency (eq. 7 parallel, eq. 8 serial)."""
        assert self.task is not None
        precision, recall, f1 = best_answer_prf(self.task.answers, self.answer)
        em = any(exact_match(ref, self.answer) for ref in self.task.answers)
        return {
            "em": float(em),
            "f1": f1,
            "precision": precision,
            "recall": recall,
            "tokens_total": sum(sum(u.tokens.values()) for u in self.usage),
            "latency_parallel_s": sum(max(u.latency.values(), default=0.0) for u in self.usage),
            "latency_serial_s": sum(sum(u.latency.values()) for u in self.usage),
            "rounds": len(self.usage),
            "memory_items": len(self.memory),
            "memory_tokens": self.memory.total_tokens,
        }

    def info(self, role: str) -> dict[str, Any]:
        info = super().info(role)
        if self.done and self.task is not None:
            info.update(self.metrics(), task_id=self.task.id, final_answer=self.answer)
        return info


# -- pool-played roles ---------------------------------------------------------------
def play_role(
    game: MultihopQAGame,
    role: str,
    pool: AgentPool,
    agent: str,
    call: Any = None,
) -> dict[str, Any]:
    """One role's turn played by a pool agent: prompt, call, apply (with the call's usage)."""
    assert game.task is not None
    messages = game.role_messages(role)
    caller = call or pool.call
    completion = caller(agent, messages, CallContext(task=game.task, turn=game.round))
    usage = (completion.prompt_tokens, completion.completion_tokens, completion.latency_s)
    return game.act(role, completion.text, usage=usage)


def judge_answer(game: MultihopQAGame, pool: AgentPool, judge: str) -> float | None:
    """The Answer Quality Score (1-5, appendix A.4) from the judge agent; None if unparsable."""
    assert game.task is not None
    prompt = JUDGE_PROMPT.format(question=game.task.prompt, answer=game.answer or "")
    completion = pool.call(
        judge, [{"role": "user", "content": prompt}], CallContext(task=game.task)
    )
    return parse_judge_score(completion.text)


def run_team(
    game: MultihopQAGame,
    pool: AgentPool,
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
    role_agents: Mapping[str, str] | None = None,
    judge: str | None = "judge",
) -> dict[str, Any]:
    """One episode with every role played by pool agents; returns the episode's metrics."""
    agents = {role: role for role in game.roles} | dict(role_agents or {})
    game.reset(seed=seed, options=options)
    while not (game.done or game.truncated):
        for role in game.roles:
            play_role(game, role, pool, agents[role])
        game.end_round()
    metrics = game.metrics()
    metrics["answer_quality"] = judge_answer(game, pool, judge) if judge else None
    assert game.task is not None
    metrics["task_id"] = game.task.id
    return metrics


# -- the Gymnasium view ---------------------------------------------------------------
class MultihopQAEnv(OrchestrationEnv):
    """Multihop QA where the learner is the Planner of a routed multi-agent team (seed 004).

    ## Description
    A question needs 2-4 hops of evidence. Each round the learner (the
    Planner, the team's controller) reads the shared memory the router gives
    it and directs the next hop; the Searcher (a pool agent) turns that into a
    BM25 search over the question's paragraphs, whose hits enter memory as
    evidence; the Recommender (a pool agent) answers from its routed context;
    an optional Verifier checks the answer. Routers: full context, static
    per-role slices, or RCR (token budgets, importance scores, greedy
    selection). Offline the pool is simulated (``envs/multihopqa/agents.py``):
    agents only know what their routed context holds.

    ## Action format
    ``<plan>reasoning</plan><query>next sub-question</query>`` to direct the
    search; ``<finish/>`` to stop with the Recommender's answer;
    ``<answer>text</answer>`` to stop with one's own answer. Anything else is
    invalid: ``format_penalty`` and the round still runs (the Searcher then
    searches the question itself).

    ## Observation
    The Planner's prompt: its role instructions, the question, the round and
    the routed memory items as YAML-like blocks. ``info["messages"]`` has the
    same as chat messages.

    ## Rewards
    At the end: answer F1 (HotpotQA token F1 against the answer and aliases)
    minus ``token_penalty`` x total tokens / 1000 (eq. 2 with lambda =
    ``token_penalty``, default 0). An invalid action earns ``format_penalty``
    instead, also on the last round (the team's F1 is still in the info).

    ## Episode end
    Terminates after ``<finish/>`` / ``<answer>`` or after ``rounds`` rounds.
    The final info holds ``task_id``, ``final_answer``, ``score`` (F1), ``em``,
    ``precision``, ``recall``, ``tokens_total`` (eq. 10), ``latency_parallel_s``
    (eq. 7), ``latency_serial_s`` (eq. 8), ``answer_quality`` (1-5 from the
    judge agent, or None without one; the judge is evaluation, so its call is not
    charged to the episode) and ``turns``.

    ## Arguments
    ``pool`` ("multihop" = simulated roles, or a pool name/file/AgentPool with
    agents per role), ``role_agents`` (role -> agent name), ``judge`` (agent
    name or None), ``format_penalty``, ``token_penalty``, and every
    ``MultihopQAGame`` argument (``task_source``, ``split``, ``router``,
    ``rounds``, ``beta_base``, ``budget_offsets``, ``weights``, ``decay``,
    ``selector``, ``verifier``, ``search_k``, ``token_counter``).

    ## Version history
    * v0: initial version.
    """

    def __init__(
        self,
        *,
        pool: str | AgentPool = "multihop",
        role_agents: Mapping[str, str] | None = None,
        judge: str | None = "judge",
        task_source: str | TaskSource = "multihop-synth",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "test",
        router: str = "rcr",
        rounds: int = 3,
        beta_base: int = 256,
        budget_offsets: Mapping[str, int] | None = None,
        weights: tuple[float, float, float] = DEFAULT_WEIGHTS,
        decay: float = 1.0,
        selector: str = "greedy",
        verifier: bool = False,
        search_k: int = 2,
        token_counter: str | TokenCounter | None = "auto",
        format_penalty: float = -0.1,
        token_penalty: float = 0.0,
        seed: int = 0,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        self.game = MultihopQAGame(
            task_source=task_source,
            task_source_kwargs=task_source_kwargs,
            split=split,
            router=router,
            rounds=rounds,
            beta_base=beta_base,
            budget_offsets=budget_offsets,
            weights=weights,
            decay=decay,
            selector=selector,
            verifier=verifier,
            search_k=search_k,
            token_counter=token_counter,
        )
        self._pool_arg = pool
        self._role_agents_arg = dict(role_agents or {})
        self.judge = judge
        self.format_penalty = format_penalty
        self.token_penalty = token_penalty
        self.backend_seed = seed
        self.split = split
        self.role_agents: dict[str, str] = {}
        self._penalties = 0.0

    _shared_attrs = ("_pool", "_task_source")

    @property
    def pool(self) -> AgentPool:
        self._ensure_built()
        assert self._pool is not None
        return self._pool

    @property
    def task_source(self) -> TaskSource:
        return self.game.task_source

    def _ensure_built(self) -> None:
        if self._pool is not None:
            return
        self._task_source = self.game.task_source  # listed in _shared_attrs: forks share it
        if isinstance(self._pool_arg, AgentPool):
            self._pool = self._pool_arg
        elif self._pool_arg == "multihop":
            from orchenv.envs.multihopqa.agents import multihop_pool

            self._pool = multihop_pool(seed=self.backend_seed, token_counter=self.game._counter())
        else:
            self._pool = make_pool(self._pool_arg)
        names = self._pool.names
        agents = {role: role for role in self.game.roles if role != "planner"}
        agents.update({r: a for r, a in self._role_agents_arg.items() if r != "planner"})
        for role, agent in agents.items():
            if agent not in names:
                raise UnknownNameError(
                    f"pool agent for role {role!r} (set role_agents=)", agent, names
                )
        if self.judge is not None and self.judge not in names:
            raise UnknownNameError("judge agent (or judge=None)", self.judge, names)
        self.role_agents = agents

    def valid_agents(self) -> list[str]:
        return [a for r, a in self.role_agents.items() if r in self.game.roles]

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed Planner reply: a query from the question's words, or finish."""
        task = self.game.task
        words = task.prompt.split() if task is not None else ["question"]
        if rng.random() < 0.2:
            return "<finish/>"
        picked = rng.choice(
            len(words), size=min(len(words), int(rng.integers(1, 6))), replace=False
        )
        query = " ".join(words[i] for i in sorted(picked))
        return f"<plan>look up part of the question</plan><query>{query}</query>"

    # -- episode ---------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        self.game.np_random = self.np_random
        self.game.reset(options=options)
        self.task = self.game.task
        self._penalties = 0.0
        return self._observation()

    def _observation(self) -> tuple[str, dict[str, Any]]:
        messages = self.game.role_messages("planner")
        obs = self.render_messages(messages)
        self.game._prompt_cache["planner"] = (self.game.round, obs)
        return obs, {
            "messages": messages,
            "round": self.game.round,
            "router": self.game.router_mode,
        }

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        game = self.game
        self.transcript.append(
            {"turn": self.turn, "role": "planner (learner)", "text": action[:4000]}
        )
        planner_info = game.act("planner", action)
        invalid = bool(planner_info.get("invalid_action"))
        if invalid:
            self._penalties += self.format_penalty
        if not game.finish_requested:
            for role in game.roles[1:]:
                play_role(game, role, self.pool, self.role_agents[role], call=self._call)
        game.end_round()
        self.turn += 1
        obs, extra = self._observation()
        extra.update(invalid_action=invalid, parse_error=planner_info.get("parse_error"))
        reward = self.format_penalty if invalid else 0.0
        if game.done:
            metrics = game.metrics()
            metrics["answer_quality"] = (
                judge_answer(game, self.pool, self.judge) if self.judge else None
            )
            assert game.task is not None
            if not invalid:  # malformed text is never rewarded, even on the last round
                reward += metrics["f1"] - self.token_penalty * metrics["tokens_total"] / 1000.0
            extra.update(
                metrics,
                task_id=game.task.id,
                final_answer=game.answer,
                score=metrics["f1"],
                correct=bool(metrics["em"]),
                turns=self.turn,
            )
        return obs, reward, game.done, False, extra

    def _call(self, agent: str, messages: Sequence[Message], context: CallContext) -> Any:
        return self.call_agent(agent, messages, context)


# -- PettingZoo views ----------------------------------------------------------------------
def multihopqa_aec_env(**kwargs: Any) -> RoleAECEnv:
    """PettingZoo turn-based env: every role (planner, searcher, recommender[, verifier]) is a policy."""
    return RoleAECEnv(MultihopQAGame(**kwargs))


def multihopqa_parallel_env(**kwargs: Any) -> RoleParallelEnv:
    """PettingZoo parallel env: every role acts each round on start-of-round memory."""
    return RoleParallelEnv(MultihopQAGame(**kwargs))
