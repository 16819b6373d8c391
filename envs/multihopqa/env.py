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
  ``orchenv reproduce 004``, ``orchenv.envs.multihopqa.reproduce``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, SharedArguments, arguments_for
from orchenv.envs.multihopqa.metrics import (
    METRIC_NAMES,
    RoundUsage,
    episode_metrics,
    judge_metrics,
)
from orchenv.envs.multihopqa.search import paragraph_index
from orchenv.error import ConfigError, UnknownNameError
from orchenv.memory import (
    AgentOutput,
    MemoryItem,
    Routing,
    RoutingSettings,
    TokenCounter,
    render_context,
)
from orchenv.parsing import extract_tag, is_placeholder
from orchenv.pool import AgentPool, CallContext, Completion, Message
from orchenv.tasks import Task, TaskSource, make_task_source, pick_task
from orchenv.teams import (
    RoleAECEnv,
    RoleGame,
    RoleParallelEnv,
    TeamRole,
    assign_role_agents,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_NAME_RE = re.compile(r"[A-Z][\w'-]+(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]+)*")
_NOT_NAMES = frozenset(
    {"which", "what", "who", "where", "when", "in which", "first", "next", "resolved", "look"}
)
_FINISH_RE = re.compile(r"<finish\s*/?>", re.IGNORECASE)


#: the Planner's filled-in example replies (issue 31: a small model copies bare placeholders
#: such as ``<query>...</query>``; an illustrative question it can adapt)
PLANNER_EXAMPLES = (
    'Example reply for the question "In which year was the director of Jaws born?":\n'
    "<plan>Two hops: who directed Jaws, then that person's birth year. First the director."
    "</plan>\n<query>Who directed Jaws?</query>\n\n"
    "Example reply once the evidence names Steven Spielberg, for the second hop:\n"
    "<plan>Jaws was directed by Steven Spielberg; now his birth year.</plan>\n"
    "<query>In which year was Steven Spielberg born?</query>\n\n"
    "Example reply once the evidence answers every hop and the Recommender has answered:\n"
    "<finish/>"
)


def planner_example(question: str) -> str:
    """A filled-in Planner reply for ``question`` (the notice after an unusable reply): look
    up the first name in it, else the question itself."""
    names = names_in(question)
    return query_action(names[0] if names else question)


def names_in(text: str) -> list[str]:
    """The names (capitalised spans of more than 3 characters) in ``text``, in order."""
    found = (n for n in _NAME_RE.findall(text) if len(n) > 3 and n.lower() not in _NOT_NAMES)
    return list(dict.fromkeys(found))


#: appendix E's task stages S_t, in the order an episode goes through them
STAGES = ("planning", "retrieval", "decision")


def round_stage(round_index: int, max_turns: int) -> str:
    """S_t of round ``round_index`` (0-based) of ``max_turns``: the first round plans, the
    last one decides, the rounds between retrieve (a one-round episode only plans).

    Seed 004 conditions the importance score on the task stage of the round (appendix E:
    "context planning, candidate filtering, final decision"), the same for every role
    acting in it; the role enters through its keywords K_i and its budget B_i.
    """
    if round_index <= 0:
        return STAGES[0]
    return STAGES[2] if round_index >= max_turns - 1 else STAGES[1]


class MultihopQAGame(RoleGame):
    """The multihop QA rules: roles, routed observations, memory updates, metrics.

    Arguments:
        max_turns: T, interaction rounds (default 3, the paper's best).
        verifier: add the Verifier role.
        search_k: paragraphs the search tool returns per query.
        task_source: a registered source name or a ``TaskSource`` whose tasks
            carry HotpotQA-style ``meta["context"]`` (default: the embedded
            generator ``"multihop-synth"``); ``None`` when whoever drives the game
            passes each episode's task as ``reset(options={"task": task})``.
        task_source_kwargs: arguments for a named task source.
        split: the split episodes draw tasks from (default ``"test"``).
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        routing: changes to ``default_routing`` (``RoutingSettings``: eq. (4) budgets,
            RCR's scorer and selection, the memory's duplicate test), as a
            ``RoutingSettings`` or a mapping of the fields to change. A budget
            ``beta_base + beta_role`` below 1 token is a ``ConfigError`` (never clamped).
        on_overflow: shorthand for ``routing={"on_overflow": ...}``: ``"stop"`` (the
            default, Algorithm 1 line 18) or ``"skip"`` (first-fit).
        token_counter: how memory items and prompts are counted.
        track_names: add the names in the question, plans and queries to the K_i of the
            roles in ``NAMED_ROLES`` (an orchenv extension of appendix E's role keyword
            lists; default False: each role's K_i is its fixed list, as in the paper).

    Every role of round t is routed for the round's task stage S_t (``round_stage``:
    planning, retrieval, decision), which selects the preferred item types of
    appendix E's stage term (``stage_types``); the role itself enters the score through
    its keywords K_i and its budget B_i.

    ``done`` when the Planner finishes (``<finish/>`` or its own ``<answer>``);
    ``truncated`` after ``max_turns`` rounds without that. Either way every role
    earns the answer's F1 in the last round.
    """

    name = "multihopqa"
    #: the roles in acting order: appendix E's keywords K_i (roles in ``NAMED_ROLES`` also
    #: get the names the team tracks, per episode) and the static baseline's slice (item
    #: types). Their ``stage`` is not used: every role of a round routes with the round's
    #: stage (``round_stage``).
    team = (
        TeamRole(
            "planner",
            stage="round",
            keywords=("unsupported", "missing", "resolved"),
            static_types=("task", "plan", "evidence", "answer", "feedback"),
        ),
        TeamRole(
            "searcher",
            stage="round",
            keywords=("next:", "first:"),
            static_types=("task", "query"),
        ),
        TeamRole(
            "recommender",
            stage="round",
            static_types=("task", "evidence", "answer"),
        ),
        TeamRole(
            "verifier",
            stage="round",
            static_types=("task", "evidence", "answer"),
        ),
    )
    #: roles whose K_i include the names in the question, plans and queries (the roles that
    #: reason over evidence about those entities)
    NAMED_ROLES: ClassVar[frozenset[str]] = frozenset({"planner", "recommender", "verifier"})
    #: each role's instructions (its system prompt)
    role_prompts: ClassVar[Mapping[str, str]] = {
        "planner": (
            "You are the Planner of a team answering a multihop question. Decompose it into single-hop "
            "sub-questions and direct the Searcher: write your reasoning inside a <plan> tag and the "
            "next sub-question, with the entities already found filled in, inside a <query> tag. "
            "When the evidence answers every hop and the Recommender has answered, reply <finish/>. "
            "You may also give the final answer yourself inside an <answer> tag.\n\n"
            + PLANNER_EXAMPLES
        ),
        "searcher": (
            "You are the Searcher. Turn the newest sub-question in the shared memory into a search "
            "query for the paragraph index. Reply with the search terms inside a <query> tag, for "
            "example: <query>Jaws film director</query>"
        ),
        "recommender": (
            "You are the Recommender. Answer the question from the evidence in the shared memory. "
            "Reply with a short answer (an entity, a date, yes or no) inside an <answer> tag, for "
            "example: <answer>Steven Spielberg</answer>"
        ),
        "verifier": (
            "You are the Verifier. Check whether the latest answer follows from the evidence. Reply "
            "inside a <feedback> tag with supported or unsupported, a colon and the reason, for "
            "example: <feedback>supported: the evidence says Spielberg directed Jaws.</feedback> or "
            "<feedback>unsupported: no evidence gives his birth year.</feedback>"
        ),
    }
    #: preferred item types per stage (the sets T_t of appendix E): the question and the
    #: plan while planning, the query history and search results while retrieving, the
    #: evidence, plans and answers when deciding
    stage_types: ClassVar[Mapping[str, Sequence[str]]] = {
        "planning": ("task", "plan", "query"),
        "retrieval": ("query", "evidence"),
        "decision": ("evidence", "plan", "answer", "feedback"),
    }
    #: eq. (4)'s budgets in tokens, beta_base 256 plus beta_role: planner 384, searcher 128,
    #: recommender 384, verifier 256 (every role keeps at least 128 tokens, room for the
    #: newest plan and query). Seed 004 uses B_i = 2048 on HotpotQA, whose contexts are
    #: several times longer than the generator's ~100-token paragraphs; the defaults keep
    #: the same ratio of budget to memory size (``orchenv reproduce 004`` sweeps the
    #: per-agent budget as the paper's Table 3 does).
    #: Appendix E's (w1, w2, w3) = (1, 1, 1), the paper's default. (Before issue 25 the
    #: role-keyword weight was 0.5: with the per-episode tracked names in K_i, an orchenv
    #: addition now off by default (``track_names``), w1 = 1 let old items naming a tracked
    #: entity outrank the newest evidence and RCR lost to full context; see
    #: docs/multihopqa.md, "Importance weights and K_i".)
    #: ``on_overflow="stop"``: Algorithm 1 as written (line 18 ends the scan at the first
    #: item that does not fit). Measured against first-fit ``"skip"`` in docs/reproduction/004.md:
    #: filling the leftover budget with low-scored items adds tokens and distraction, not
    #: evidence.
    default_routing: ClassVar[RoutingSettings] = RoutingSettings(
        beta_base=256,
        budget_offsets={"planner": 128, "searcher": -128, "recommender": 128},
        weights=(1.0, 1.0, 1.0),
        decay=1.0,
        on_overflow="stop",
    )

    def __init__(
        self,
        *,
        max_turns: int = 3,
        verifier: bool = False,
        search_k: int = 2,
        task_source: str | TaskSource | None = "multihop-synth",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "test",
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        on_overflow: str | None = None,
        token_counter: str | TokenCounter | None = "auto",
        track_names: bool = False,
    ) -> None:
        routing = with_overflow(self.default_routing, routing, on_overflow)
        super().__init__(
            roles=None if verifier else ROLE_ORDER[:3], **arguments_for(super().__init__, locals())
        )
        if search_k < 1:
            raise ConfigError(f"search_k must be >= 1, got {search_k}")
        self.split = split
        self.search_k = search_k
        self.track_names = bool(track_names)
        self._task_source_arg = task_source
        self._task_source_kwargs = dict(task_source_kwargs or {})
        self._task_source: TaskSource | None = None
        # episode state
        self.task: Task | None = None
        self.answer: str | None = None
        self.finish_requested = False
        self.usage: list[RoundUsage] = []
        self._prompt_cache: dict[str, tuple[int, str]] = {}
        self.searches: list[tuple[str, list[str]]] = []

    @property
    def task_source(self) -> TaskSource:
        """The game's own task source (built on first use)."""
        if self._task_source is None:
            if self._task_source_arg is None:
                raise ConfigError(
                    "this MultihopQAGame has no task_source: pass reset(options={'task': task})"
                )
            source = make_task_source(self._task_source_arg, **self._task_source_kwargs)
            self.split = source.resolve_split(self.split)  # a default split it lacks
            source.check_split(self.split)
            self._task_source = source
        return self._task_source

    # -- RoleGame ----------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> None:
        source = None if "task" in options else self.task_source
        self.task = pick_task(source, self.split, options, self.np_random)
        self.memory.write("user", "task", f"Question: {self.task.prompt}", round=0, key="task")
        self.answer = None
        self.finish_requested = False
        self.usage = [RoundUsage()]
        self._prompt_cache = {}
        self.searches = []

    def _task_line(self) -> str:
        assert self.task is not None, "reset() first"
        return f"Question: {self.task.prompt}"

    def _keywords(self) -> tuple[str, ...]:
        """Per-episode keywords added to every role's list K_i: the names (capitalised spans)
        in the question and in the plans and queries written so far, so evidence about the
        entities the team is tracking counts as role-relevant."""
        assert self.task is not None
        texts = [self.task.prompt] + [m.text for m in self.memory if m.type in ("plan", "query")]
        return tuple(dict.fromkeys(n for text in texts for n in names_in(text)))

    def stage(self) -> str:
        """S_t of the current round (``round_stage``): what every role's router scores for."""
        return round_stage(self.round, self.max_turns)

    def route(self, role: str) -> Routing:
        """The memory the router gives ``role`` now: scored for the round's stage S_t (not
        the role's), with the tracked names in K_i of ``NAMED_ROLES`` only."""
        self.check_role(role)
        kwargs: dict[str, Any] = {}
        if self.router_mode == "rcr":
            named = self.track_names and role in self.NAMED_ROLES
            names = self._keywords() if named else ()
            kwargs = {"keywords": names, "now": self.round + 1}
        return self.router.route(self.memory, role, self.stage(), **kwargs)

    def role_messages(self, role: str) -> list[Message]:
        """``RoleGame.role_messages`` with the routing of ``route`` (the round's stage)."""
        routing = self.route(role)
        self.context_tokens[role] = routing.tokens
        lines = [
            self._task_line(),
            f"Round {self.round + 1} of {self.max_turns}; stage: {self.stage()}.",
            *self.reply_cut_lines(role),
            *self._role_lines(role),
            "Shared memory routed to you:\n" + render_context(routing.items),
        ]
        return [
            {"role": "system", "content": self.role_prompts[role]},
            {"role": "user", "content": "\n".join(lines)},
        ]

    def observe(self, role: str) -> str:
        text = super().observe(role)
        self.remember_prompt(role, text)
        return text

    def remember_prompt(self, role: str, text: str) -> None:
        """Record the prompt ``role`` sees this round (its tokens count when it acts)."""
        self._prompt_cache[role] = (self.round, text)

    def prompt_tokens(self, role: str) -> int:
        """Tokens of the prompt ``role`` last observed this round (rendered now if it did not)."""
        cached = self._prompt_cache.get(role)
        text = cached[1] if cached and cached[0] == self.round else self.observe(role)
        return self.counter.count(text)

    def _act(
        self,
        role: str,
        text: str,
        *,
        usage: tuple[int, int, float] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Apply ``role``'s reply. ``usage`` = (prompt tokens, completion tokens, latency s)
        when a pool agent produced it; otherwise tokens are counted on the text."""
        if usage is None:
            usage = (self.prompt_tokens(role), self.counter.count(text), 0.0)
        self.usage[-1].add(role, usage[0] + usage[1], usage[2])
        act: Any = getattr(self, f"_act_{role}")
        info: dict[str, Any] = act(text)
        return info

    def _store(self, role: str, text: str, default_type: str) -> int:
        """Run one reply through the memory update (eq. 5); the number of items stored."""
        body = _FINISH_RE.sub("", text).strip()
        if not body:
            return 0
        return len(self.memory.update([AgentOutput(role, body, type=default_type)], self.round + 1))

    def _act_planner(self, text: str) -> dict[str, Any]:
        assert self.task is not None
        # a tag holding a stand-in copied from a format line (``...``) is no action (issue 31)
        answer, query, plan = (
            None if is_placeholder(body) else body
            for body in (extract_tag(text, tag) for tag in ("answer", "query", "plan"))
        )
        finish = bool(_FINISH_RE.search(text))
        if answer is not None and answer.strip():
            self.answer = answer.strip()[:500]
            finish = True
        if not (query or plan or finish):
            self.memory.dropped = []
            return {
                "invalid_action": True,
                "parse_error": "expected a <plan> tag with a <query> tag, an <answer> tag or "
                "<finish/>; got none of them (a tag holding only a placeholder does not count). "
                f"A valid reply now, for example: {planner_example(self.task.prompt)}",
            }
        self.finish_requested = self.finish_requested or finish
        stored = self._store("planner", text, "plan")
        return {"invalid_action": False, "parse_error": None, "stored": stored, "finish": finish}

    def _act_searcher(self, text: str) -> dict[str, Any]:
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
                "parse_error": "expected a <feedback> tag: supported or unsupported, a colon and "
                "the reason",
            }
        self.memory.write(
            "verifier", "feedback", feedback.strip(), round=self.round + 1, key="verifier:feedback"
        )
        return {"invalid_action": False, "parse_error": None}

    def _end_round(self) -> None:
        if self.finish_requested:
            self.done = True
            self._score_round()
        elif self.round + 1 < self.max_turns:
            self.usage.append(RoundUsage())

    def _on_truncate(self) -> None:
        self._score_round()

    def _score_round(self) -> None:
        score = self.metrics()["f1"]
        self.round_rewards = {role: score for role in self.roles}

    # -- metrics (appendix A) -----------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """EM, F1, precision, recall, total tokens (eq. 10), latency (eq. 7 parallel, eq. 8
        serial), rounds, and the memory's size."""
        assert self.task is not None
        return {
            **episode_metrics(
                self.task.answers, self.answer, self.usage, dataset=self.task.meta.get("dataset")
            ),
            "memory_items": len(self.memory),
            "memory_tokens": self.memory.total_tokens,
        }

    def summary(self) -> dict[str, Any]:
        assert self.task is not None
        return {**self.metrics(), "task_id": self.task.id, "final_answer": self.answer}


def with_overflow(
    defaults: RoutingSettings,
    routing: RoutingSettings | Mapping[str, Any] | None,
    on_overflow: str | None,
) -> RoutingSettings | Mapping[str, Any] | None:
    """``routing`` with the ``on_overflow=`` shorthand folded in (None: unchanged; it also
    overrides a ``RoutingSettings``); ``ConfigError`` when a ``routing`` mapping names
    another mode."""
    if on_overflow is None:
        return routing
    given = routing.get("on_overflow") if isinstance(routing, Mapping) else None
    if given is not None and given != on_overflow:
        raise ConfigError(
            f"on_overflow={on_overflow!r} contradicts routing's on_overflow={given!r}; give it once"
        )
    return defaults.updated(routing).updated({"on_overflow": on_overflow})


#: every role of the game, in acting order
ROLE_ORDER = tuple(role.name for role in MultihopQAGame.team)


# -- pool-played roles ---------------------------------------------------------------
def play_role(
    game: MultihopQAGame,
    role: str,
    pool: AgentPool,
    agent: str,
    call: Any = None,
) -> dict[str, Any]:
    """One role's turn played by a pool agent: prompt, call, apply (with the call's usage).

    ``tokens_total`` (eq. 10) must be in one unit: the game's token counter, which also
    counts the learner's own prompts and replies. A call metered with that counter (the
    simulated role agents) is taken as metered; one metered otherwise (a served model's
    ``usage``, another tokenizer) is recounted with the game's counter for ``tokens_total``,
    the same way: its messages' contents plus its reply. Its dollar cost and the pool's
    meter keep the server's counts.
    """
    assert game.task is not None
    messages = game.role_messages(role)
    caller = call or pool.call
    completion = caller(agent, messages, CallContext(task=game.task, turn=game.round))
    if completion.meta.get("tokenizer") == game.counter.name:
        prompt, reply = completion.prompt_tokens, completion.completion_tokens
    else:
        prompt = sum(game.counter.count(m.get("content", "")) for m in messages)
        reply = game.counter.count(completion.text)
    return game.act(role, completion.text, usage=(prompt, reply, completion.latency_s))


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
    assert game.task is not None
    metrics = game.metrics()
    metrics.update(judge_metrics(pool, judge, game.task, game.answer))
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
    invalid: ``format_penalty``, and the round still runs (the Searcher then
    searches the question itself); the next observation repeats the request with
    the error.

    ## Observation
    The Planner's prompt: its role instructions, the question, the round and its
    stage (planning, retrieval, decision) and the routed memory items as YAML-like
    blocks. ``info["messages"]`` has the
    same as chat messages; ``info["round"]`` and ``info["router"]`` say where the
    team is and how it routes.

    ## Rewards
    At the end: answer F1 (HotpotQA token F1 against the answer and aliases)
    minus ``token_penalty`` x total tokens / 1000 (eq. 2 with lambda =
    ``token_penalty``, default 0). An invalid action earns ``format_penalty``
    and no F1, also on the last round (the team's F1 is still in the info).

    ## Episode end
    ``terminated`` after ``<finish/>`` / ``<answer>`` (the Planner's decision to
    stop); ``truncated`` after ``max_turns`` rounds without it (the team's last
    answer is graded either way). The final info holds ``task_id``,
    ``final_answer``, ``score`` (F1), ``correct`` (EM), ``em``, ``f1``,
    ``precision``, ``recall``, ``tokens_total`` (eq. 10), ``latency_parallel_s``
    (eq. 7), ``latency_serial_s`` (eq. 8), the judge's 1-5 score (the judge is
    evaluation, so its call is not charged to the episode) as ``answer_quality``
    when the judge is a real agent, or as ``answer_quality_from_f1`` when it is the
    simulated judge (which buckets the answer's F1; the other key is None),
    ``rounds``, ``memory_items``, ``memory_tokens`` and ``turns``;
    ``info["metrics"]`` holds EM, F1, precision, recall, the judge's score under
    its key (when there is one), total tokens and both latencies.

    ## Discrete actions
    ``action_choices()`` (``orchenv.discrete``, ``orchenv audit``): the ``CHOICES``
    in order, built from the question and the memory routed to the Planner only:
    look up the question, its first or second name, the Recommender's latest
    answer, one of three names in the routed evidence no search has covered, or
    ``<finish/>``. ``audit_strategies()``: answer at once, finish without
    searching, the same query every round, chatter around a bare tag, the
    question's first name every round, hop-following in reworded sub-questions.
    ``skill_action`` (the audit's skill reference): with the skill, the privileged
    chain's next sub-question (or its answer once the chain is in memory); without,
    the whole question.

    ## Arguments
    - ``role_agents``: role -> agent name, for pools whose agents are not named
      after the roles (the Planner is the learner and needs none).
    - ``judge``: the agent that scores answers 1-5 (default ``"judge"``), or None.
    - ``router``: ``"rcr"`` (default), ``"full"`` or ``"static"``.
    - ``routing``: changes to ``MultihopQAGame.default_routing``, a
      ``RoutingSettings`` or a mapping of its fields (e.g. ``{"beta_base": 512}``):
      RCR's per-role token budgets (``beta_base``, ``budget_offsets``; eq. 4, default
      256 plus planner +128, searcher -128, recommender +128; a budget below 1 token
      is a ``ConfigError``), importance score (``weights``, default (1, 1, 1), and
      ``decay``, default 1.0; appendix E), selection (``selector``: ``"greedy"``,
      Algorithm 1, or ``"exact"``; ``on_overflow``: ``"stop"``, the default, or
      ``"skip"``) and the memory's duplicate test (``novelty_threshold``, default 0.9).
    - ``on_overflow``: shorthand for ``routing={"on_overflow": ...}``.
    - ``verifier``: add the Verifier role (default False).
    - ``search_k``: paragraphs per search (default 2).
    - ``token_counter``: how prompts and memory items are counted (default
      ``"auto"``: the bundled MiniLM tokenizer when installed, else 4 chars/token).
    - ``track_names``: add the names of the question, plans and queries to the
      Planner's, Recommender's and Verifier's RCR keywords K_i (default False:
      appendix E's fixed per-role lists).
    - ``token_penalty``: lambda of eq. 2, per 1,000 tokens (default 0).
    - ``seed``: the simulated agents' luck.

    ## Shared arguments
    - ``pool``: ``"multihop"`` (default: the simulated roles and judge), or a pool name, pool
      file or ``AgentPool`` with an agent per pool-played role.
    - ``task_source``: the embedded generator ``"multihop-synth"`` by default, on ``"test"``.
    - ``max_turns``: T, rounds per episode (default 3, the paper's best).

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``rounds``), reaching it without ``<finish/>`` or
      ``<answer>`` is ``truncated`` (it was ``terminated``), an invalid action's
      next observation carries the shared notice, ``info["metrics"]`` is new,
      ``backend`` / ``backend_kwargs`` are accepted, and RCR's ``beta_base``,
      ``budget_offsets``, ``weights``, ``decay`` and ``selector`` arguments are the
      fields of one ``routing`` argument. Rewards are unchanged.
      Issue 14: every role of a round is routed for the round's stage (planning,
      retrieval, decision) instead of a stage fixed per role; greedy selection stops
      at the first item that does not fit (``on_overflow="stop"``, Algorithm 1 line
      18; it used to skip it); the Searcher's budget is 128 tokens (was 96) and a
      budget below 1 token is refused (it used to be clamped to 0); the simulated
      judge's score is ``answer_quality_from_f1`` (it was ``answer_quality``); the
      simulated Searcher also reads a plan's ``Next:`` sub-question; HotpotQA and
      2Wiki files without decompositions get hop chains from their supporting facts.
      Issue 25: RCR's weights are appendix E's (1, 1, 1) (were (0.5, 1, 1)) and K_i
      is each role's fixed list (the tracked names are ``track_names=True``); the
      simulated Recommender reaches a hop only along an unbroken chain (a lone answer
      paragraph used to be answered right for sure) and reads the team's
      sub-questions as records of the hops they fill in; ``skill_action``,
      ``realistic_skill`` and the ``paraphrased-follow-up`` shortcut are new. Rewards
      of the same episodes change.
      Issue 38: role luck is keyed on what is asked (``agents.request_key``), not the
      prompt's hash; a consult pays the token penalty; ``reworded-majority`` strategy.
    """

    #: also shared by ``fork()``: the episode's task (read-only) and the text spaces
    _shared_attrs: ClassVar[tuple[str, ...]] = (
        *OrchestrationEnv._shared_attrs,
        "task",
        "observation_space",
        "action_space",
    )

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "pool": "multihop",
        "task_source": "multihop-synth",
        "split": "test",
        "max_turns": 3,
        "format_penalty": -0.1,
    }

    def __init__(
        self,
        *,
        role_agents: Mapping[str, str] | None = None,
        judge: str | None = "judge",
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        on_overflow: str | None = None,
        verifier: bool = False,
        search_k: int = 2,
        token_counter: str | TokenCounter | None = "auto",
        track_names: bool = False,
        token_penalty: float = 0.0,
        seed: int = 0,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        # the env picks each task and hands it to the game
        game_args = {**locals(), "max_turns": self.max_turns, "split": self.split}
        self.game = MultihopQAGame(
            **arguments_for(MultihopQAGame, game_args) | {"task_source": None}
        )
        self._role_agents_arg = {r: a for r, a in (role_agents or {}).items() if r != "planner"}
        self._role_agents: dict[str, str] | None = None
        self.judge = judge
        self.token_penalty = token_penalty
        self.backend_seed = seed
        self._final: dict[str, Any] = {}

    def _build_pool(self) -> AgentPool:
        if self._pool_arg == "multihop":
            from orchenv.envs.multihopqa.agents import multihop_pool

            pool = multihop_pool(seed=self.backend_seed, token_counter=self.game.counter)
        else:
            pool = super()._build_pool()
        if self.judge is not None and self.judge not in pool.names:
            raise UnknownNameError("judge agent (or judge=None)", self.judge, pool.names)
        return pool

    @property
    def role_agents(self) -> dict[str, str]:
        """Role -> the pool agent that plays it (the Planner is the learner)."""
        if self._role_agents is None:
            roles = self.game.roles[1:]
            self._role_agents = assign_role_agents(
                self.pool.names, roles, self._role_agents_arg, known=ROLE_ORDER[1:]
            )
        return self._role_agents

    def valid_agents(self) -> list[str]:
        return list(self.role_agents.values())

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed Planner reply: a query from the question's words, or finish."""
        words = self.task.prompt.split() if self.task is not None else ["question"]
        if rng.random() < 0.2:
            return "<finish/>"
        picked = rng.choice(
            len(words), size=min(len(words), int(rng.integers(1, 6))), replace=False
        )
        query = " ".join(words[i] for i in sorted(picked))
        return f"<plan>look up part of the question</plan><query>{query}</query>"

    # -- the discrete view (orchenv.discrete, orchenv audit) ----------------------------
    #: what each discrete choice does, in index order (``action_choices``)
    CHOICES = (
        "query the question",
        "query the question's 1st name",
        "query the question's 2nd name",
        "query the Recommender's current answer",
        "query the 1st new name in the evidence",
        "query the 2nd new name in the evidence",
        "query the 3rd new name in the evidence",
        "finish with the Recommender's answer",
    )

    def action_choices(self) -> list[str | None]:
        """The Planner's canonical replies, one per ``CHOICES`` entry, built only from what
        its prompt shows (the question and the memory routed to it): look up the question,
        a name in it, the Recommender's latest answer (without the whole chain it is a
        guess of the kind asked, no hop's entity: issue 38), or a name in the routed
        evidence that no search has covered yet; or finish. A choice with nothing to fill
        in, or that repeats an earlier choice's text, is ``None``."""
        assert self.task is not None, "reset() first"
        items = self.game.route("planner").items if not self.game.done else []
        asked = names_in(self.task.prompt)
        answers = [m.text for m in items if m.type == "answer"]
        answer = answers[-1].strip() if answers else None
        found = evidence_names(items, exclude=asked)
        targets: list[str | None] = [
            self.task.prompt,
            *(asked[i] if i < len(asked) else None for i in range(2)),
            answer,
            *(found[i] if i < len(found) else None for i in range(3)),
        ]
        choices: list[str | None] = []
        for target in targets:
            text = None if not target else query_action(target)
            choices.append(None if text in choices else text)
        choices.append("<finish/>")
        return choices

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that read only the Planner's prompt (``orchenv audit``)."""
        return dict(_AUDIT_STRATEGIES)

    #: no published rate at which a Planner issues the right next sub-question; the audit's
    #: default level (see docs/multihopqa.md, "Skill reference")
    realistic_skill: ClassVar[float | None] = 0.75
    realistic_skill_source: ClassVar[str] = (
        "no published figure: seed 004 reports no sub-question accuracy; orchenv's default "
        "level (the simulated Planner's calibrated 0.9 at no distraction falls to ~0.8 at "
        "a 1K-token prompt, a calibration, not a measurement)"
    )

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The audit's skill reference (seed 004's Planner skill: decompose and follow hops).

        Skilled, with the privileged chain: when every hop's gold sentence is in the shared
        memory, answer with the chain's answer; else ask the first hop whose sentence is
        missing, its entity filled in, recording the hops already resolved in the plan
        (``Resolved so far: ENTITY -> ANSWER``). Unskilled: the fixed default, a lookup of
        the whole question (a wasted round, not an early stop: a stop would end the episode
        on one unskilled draw and mix a second skill, when to stop, into the curve)."""
        assert self.task is not None, "reset() first"
        if not skilled:
            return query_action(self.task.prompt)
        return chain_action(self.task, self.game.memory)

    def observation_features(self) -> np.ndarray:
        """Round fraction, and what the Planner sees: an answer, evidence items, new names."""
        if self.task is None:
            return np.zeros(4, dtype=np.float32)
        items = self.game.route("planner").items if not self.game.done else []
        n_evidence = sum(m.type == "evidence" for m in items)
        found = evidence_names(items, exclude=names_in(self.task.prompt))
        return np.asarray(
            [
                self.game.round / self.game.max_turns,
                float(any(m.type == "answer" for m in items)),
                n_evidence / 10.0,
                min(len(found), 3) / 3.0,
            ],
            dtype=np.float32,
        )

    # -- episode ---------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.game.np_random = self.np_random
        self.game.reset(options={"task": self.task})
        self._final = {}
        return {}

    def _messages(self) -> list[Message]:
        messages = self.game.role_messages("planner")
        self.game.remember_prompt("planner", self.render_messages(messages))
        return messages

    def _observation_info(self) -> dict[str, Any]:
        return {"round": self.game.round, "router": self.game.router_mode}

    def _apply(self, action: str) -> Outcome:
        game = self.game
        planner = game.act("planner", action)
        if not game.finish_requested:
            for role in game.roles[1:]:
                play_role(game, role, self.pool, self.role_agents[role], call=self.call_agent)
        game.end_round()
        error = planner["parse_error"] if planner.get("invalid_action") else None
        reward = 0.0
        if game.done or game.truncated:
            assert self.task is not None
            self._final = game.metrics()
            self._final.update(judge_metrics(self.pool, self.judge, self.task, game.answer))
            if error is None:  # malformed text is never rewarded, even on the last round
                reward = self._final["f1"] - self.token_penalty * self._final["tokens_total"] / 1000
            # consulted calls' tokens count in eq. 10's total; their penalty (call_charge) was
            # taken at the step after each consult, as the base env does for every env
            self._final["tokens_total"] += sum(
                c.prompt_tokens + c.completion_tokens for c in self.consulted
            )
        return Outcome(reward=reward, done=game.done, error=error)

    def call_charge(self, completion: Completion) -> float:
        """Eq. 2's token penalty of one call, routed or consulted: ``token_penalty`` x its
        prompt and completion tokens / 1000 (0 with the default ``token_penalty``)."""
        tokens = completion.prompt_tokens + completion.completion_tokens
        return self.token_penalty * tokens / 1000

    def _summary(self) -> dict[str, Any]:
        final = self._final
        return {
            **final,
            "final_answer": self.game.answer,
            "score": final["f1"],
            "correct": bool(final["em"]),
            "metrics": {k: float(final[k]) for k in METRIC_NAMES if final[k] is not None},
        }


# -- the Planner's discrete choices and the audit's shortcuts -----------------------------------
def query_action(target: str) -> str:
    """The Planner reply that has the Searcher look ``target`` up."""
    target = " ".join(target.split())[:300]
    return f"<plan>Next: look up {target}</plan><query>{target}</query>"


def chain_action(task: Task, memory: Any, wording: Callable[[str, str], str] | None = None) -> str:
    """The Planner's reply with the privileged hop chain (the audit's skill reference and the
    reproduction's scripted Planner): the answer once every hop's gold sentence is in
    ``memory``, else the first missing hop's sub-question (``wording(question, entity)``
    rewords it), with the resolved hops recorded in the plan."""
    from orchenv.envs.multihopqa.agents import gold_sentences, resolved_marker

    chain = task.meta.get("chain", [])
    text = "\n".join(m.text for m in memory)
    found = [bool(g) and g in text for g in gold_sentences(task)]
    if not chain or all(found):
        return f"<answer>{task.answer}</answer>" if chain else "<finish/>"
    done = ", ".join(resolved_marker(h) for h, k in zip(chain, found, strict=False) if k)
    record = f"Resolved so far: {done}. " if done else ""
    hop = chain[found.index(False)]
    question = str(hop["question"])
    if wording is not None:
        question = wording(question, str(hop.get("entity") or ""))
    return f"<plan>{record}Next: {question}</plan><query>{question}</query>"


#: rewordings of a sub-question that keep what it asks and its content words (``paraphrase``);
#: none repeats the entity: the Searcher's BM25 weighs a repeated name twice, which drowns
#: the relation words (measured in docs/multihopqa.md, "Paraphrased sub-questions")
_PARAPHRASES = (
    "I need one fact. {question}",
    "Find out this: {rest}",
    "Could you check {rest}",
    "{question} Please search for it.",
)


def paraphrase(question: str, entity: str, k: int = 0) -> str:
    """Sub-question ``question`` about ``entity`` reworded (template ``k`` of ``_PARAPHRASES``,
    cyclic); the entity and the relation words are kept, the phrasing is not."""
    question = " ".join(question.split())
    rest = question[:1].lower() + question[1:] if question else question
    entity = entity or "it"
    return _PARAPHRASES[k % len(_PARAPHRASES)].format(entity=entity, rest=rest, question=question)


def evidence_names(items: Sequence[MemoryItem], exclude: Sequence[str] = ()) -> list[str]:
    """Names in the routed evidence that no search has covered: not the title of a
    retrieved paragraph, not in a query yet, not in ``exclude``; newest evidence first."""
    titles = {m.key for m in items if m.type == "evidence" and m.key}
    queried = " ".join(m.text for m in items if m.type == "query").lower()
    skip = {n.lower() for n in (*titles, *exclude)}
    out: list[str] = []
    for item in reversed([m for m in items if m.type == "evidence"]):
        for name in names_in(item.text):
            low = name.lower()
            if low in skip or low in queried or any(low in t.lower() for t in titles):
                continue
            if name not in out:
                out.append(name)
    return out


def _question_of(env: OrchestrationEnv) -> str:
    task = env.task
    return task.prompt if task is not None else ""


def _answer_now(env: OrchestrationEnv) -> str:
    """Answers at once with the question's first name (no agent has seen anything)."""
    names = names_in(_question_of(env))
    return f"<answer>{names[0] if names else 'yes'}</answer>"


def _finish_now(env: OrchestrationEnv) -> str:
    """Finishes on the first turn, before any search."""
    return "<finish/>"


def _same_query(env: OrchestrationEnv) -> str:
    """Asks the whole question every round and never finishes."""
    return query_action(_question_of(env))


def _garbage_around_tag(env: OrchestrationEnv) -> str:
    """Wraps the whole question in chatter around a bare ``<query>`` tag, every round."""
    return f"Sure! Let me think step by step. <query>{_question_of(env)}</query> Hope this helps!"


def _first_name_always(env: OrchestrationEnv) -> str:
    """Looks up the question's first name every round (one hop, repeated)."""
    names = names_in(_question_of(env))
    return query_action(names[0] if names else _question_of(env))


def _latest_answer_seen(env: OrchestrationEnv) -> str | None:
    game = getattr(env, "game", None)
    if game is None or game.done:
        return None
    answers = [m.text for m in game.route("planner").items if m.type == "answer"]
    return answers[-1].strip() if answers else None


def _paraphrased_followup(env: OrchestrationEnv) -> str:
    """Hop-following in reworded sub-questions, from the prompt only: ask about the
    Recommender's latest answer (without the whole chain, a guess of the kind asked), else
    about the question's first name, each time in another wording."""
    question = _question_of(env)
    names = names_in(question)
    target = _latest_answer_seen(env) or (names[0] if names else question)
    turn = int(getattr(env, "turn", 0))
    asked = paraphrase(f"What is known about {target}?", target, turn)
    return f"<plan>Next: {asked}</plan><query>{asked}</query>"


#: the trivial rewordings ``reworded-majority`` sends (issue 38): a courtesy line, case,
#: spacing; none changes what is asked
REWORDINGS: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: f"{text}\n\nThanks.",
    lambda text: f"{text}\n\nPlease be concise.",
    lambda text: f"  {text}  \n",
    lambda text: f"{text}\n\nTHANKS, PLEASE BE CONCISE.",
)


def reworded(messages: Sequence[Message], k: int) -> list[Message]:
    """``messages`` with the last one's content passed through ``REWORDINGS[k]``."""
    out = [dict(m) for m in messages]
    out[-1]["content"] = REWORDINGS[k](str(out[-1]["content"]))
    return out  # type: ignore[return-value]


def _reworded_majority(env: OrchestrationEnv) -> str:
    """Paraphrased follow-up, and at the last turn consults the Recommender with its own
    prompt in each of five trivial rewordings (``REWORDINGS``) and answers with the
    majority answer (the base answer when no answer has three votes)."""
    game = getattr(env, "game", None)
    if game is None or not env.is_last_turn or game.done:
        return _paraphrased_followup(env)
    messages = game.role_messages("recommender")
    votes: dict[str, int] = {}
    for k in range(len(REWORDINGS)):
        answer = extract_tag(env.consult("recommender", reworded(messages, k)).text, "answer")
        if answer:
            key = " ".join(answer.split()).casefold()
            votes[key] = votes.get(key, 0) + 1
    best = max(votes.items(), key=lambda kv: kv[1], default=("", 0))
    if best[1] >= 3:
        return f"<answer>{best[0]}</answer>"
    return _paraphrased_followup(env)


_AUDIT_STRATEGIES = {
    "answer-immediately": _answer_now,
    "finish-without-searching": _finish_now,
    "same-query-every-round": _same_query,
    "garbage-around-tag": _garbage_around_tag,
    "first-name-every-round": _first_name_always,
    "paraphrased-follow-up": _paraphrased_followup,
    "reworded-majority": _reworded_majority,
}


# -- PettingZoo views ----------------------------------------------------------------------
def multihopqa_aec_env(**kwargs: Any) -> RoleAECEnv:
    """PettingZoo turn-based env: every role (planner, searcher, recommender[, verifier]) is a policy."""
    return RoleAECEnv(MultihopQAGame(**kwargs))


def multihopqa_parallel_env(**kwargs: Any) -> RoleParallelEnv:
    """PettingZoo parallel env: every role acts each round on start-of-round memory."""
    return RoleParallelEnv(MultihopQAGame(**kwargs))
