"""``orch/Puppeteer-v0``: a centralized puppeteer names the next agent each step.

Seed 003 (Puppeteer; agent space of appendix B, reward eq. 6) as a Gymnasium environment.
The agents are (model, reasoning pattern or tool) pairs that act for themselves: a tool
agent's model writes its tool call, and the team's answer is always an agent's
``FINAL ANSWER``, never a tool's output. The agents and their prompts are in ``.agents``,
the agent spaces in ``.presets``, the simulated revision dynamics in ``.revision``, the
prompt and parser in ``.protocol``, the task kinds in ``.tasks``; tools are offline
(``.tools``; web tools are out of scope). docs/puppeteer.md describes the model.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.backends.simulated import estimate_tokens
from orchenv.core import OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.puppeteer import outputs, revision
from orchenv.envs.puppeteer.agents import (
    PATTERNS,
    REVISING,
    TOOLS,
    PatternBackend,
    agent_messages,
    majority_vote,
    parse_tool_call,
    puppeteer_pool,
    reply_answer,
    reply_reasoning,
)
from orchenv.envs.puppeteer.choices import agent_text, canonical_choices, shortcuts, terminate_text
from orchenv.envs.puppeteer.presets import PRESETS
from orchenv.envs.puppeteer.protocol import (
    agent_names,
    controller_prompt,
    example_reply,
    parse_action,
    random_action,
)
from orchenv.envs.puppeteer.sandbox import OwnedTempDir
from orchenv.envs.puppeteer.tasks import (
    SPLITS,
    TASK_KINDS,
    PuppeteerTaskSource,
    graded_score,
    srdd_tool_run,
)
from orchenv.envs.puppeteer.tools import (
    SANDBOX_MODES,
    SearchIndex,
    ToolResult,
    containment_mode,
    network_isolation_mode,
    read_file,
    run_python,
    search,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.pool import AgentPool, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import TaskSource

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: the skill level a trained puppeteer realistically reaches (``skill_action``): a calibration,
#: see docs/puppeteer.md "Skill reference"
REALISTIC_SKILL = 0.6
REALISTIC_SKILL_SOURCE = (
    "calibration to seed 003 Table 1: the evolved Puppeteer (Titan) scores 0.83 on MMLU-Pro; "
    "orchenv's skill reference reaches 0.838 +- 0.029 there at s = 0.6 (600 test tasks, "
    "after issue 38's third pass; 0.832 +- 0.030 before it). On GSM-Hard the reference at "
    "s = 0.6 is above the paper's Puppeteer (it may have a program rewritten by the coder "
    "most likely to get the task right): Titan 0.918 +- 0.022 (paper 0.70), Mimas, the "
    "default id, 0.765 +- 0.034 (paper 0.54; s = 0.15 gives 0.572 +- 0.040); the Mono row "
    "(0.76, no better than the single call) would give s = 0 (docs/puppeteer.md)."
)
#: the no-skill default stops after an answer when its model's public single-call quality on
#: the task's family is at least this (the answer is more likely right than wrong), and else
#: has the same model critique and revise it (issue 38; docs/puppeteer.md "Skill reference")
UNSKILLED_STOP_PRIOR = 0.5
#: Puppeteer's simulated pools by the name they carry (``agents.puppeteer_pool``): ``pool=``
#: takes these names too (a leaderboard names the env-built pool: ``orchenv board init
#: orch/Puppeteer-v0 --pool puppeteer-mimas``); the pool argument replaces ``preset``
POOL_NAMES: dict[str, str] = {f"puppeteer-{p}": p for p in PRESETS}
#: the most program runs / grades remembered per env (and its forks)
CACHE_SIZE = 4096
#: the most characters of a team answer that are kept
MAX_ANSWER_CHARS = 20_000


@dataclass
class Branch:
    """One parallel exploration: its trajectory, its current answer (``draft``), its latest
    critique since then, and the evidence its tools and plans gathered (simulation only:
    a logit per source, see ``revision``)."""

    history: list[tuple[str, str]] = field(default_factory=list)
    draft: str | None = None
    critique: str | None = None
    evidence: dict[str, float] = field(default_factory=dict)

    def guidance(self) -> float:
        low, high = revision.GUIDANCE_RANGE
        return min(high, max(low, sum(self.evidence.values())))


class _Cache(OrderedDict[Any, Any]):
    """A small LRU map (program runs and grades are deterministic, and forks share it)."""

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        if len(self) > CACHE_SIZE:
            self.popitem(last=False)
        return value


class PuppeteerEnv(OrchestrationEnv):
    """Name the next agent (model x reasoning pattern, model x tool, or terminate) each step.

    ## Description
    A centralized puppeteer (seed 003) orchestrates agents on a task: GSM-Hard-style math,
    MMLU-Pro-style multiple choice (10 options), CommonGen-Hard-style sentence writing or an
    SRDD-style software task (``tasks``). Each step it names one agent per branch; the agent
    reads the task and its branch's trajectory and acts:

    - a reasoning agent ``MODEL:PATTERN`` writes reasoning and a ``FINAL ANSWER``, which
      becomes the branch's current answer (``planning`` writes a plan and no answer);
      ``critique`` / ``reflect`` / ``modify`` / ``summarize`` / ``conclude`` act on that
      answer, ``reasoning`` / ``question`` answer afresh;
    - a tool agent ``MODEL:TOOL`` has its model write the tool call (``run_python``: a
      program, run in the bubblewrap sandbox; ``read_file``: a file of the task's folder;
      ``search``: a query over the offline corpus). The result enters the trajectory for
      later agents to use; it never becomes the answer.

    The presets are simulated (``PatternBackend``; docs/puppeteer.md): Mimas (6 models),
    Titan (8) and their Mono settings, each model's single ``reasoning`` call calibrated to
    seed 003 Table 1 where the paper has the row. Tool results raise later answers' chance
    when the agent's program / query / path was the right one; revisions keep a right answer
    mostly right and fix a wrong one with a chance that a specific critique raises.

    ``width`` W (1 to 3; the paper explores up to 3): W branches with separate
    trajectories; the action names one agent per branch (or one for all); the team's answer
    is the majority vote of the branches' answers (exact match after stripping; ties to the
    lowest branch). All branches' tokens count in ``F_t``.

    ## Action format
    ``protocol``: ``<agent>MODEL:PATTERN</agent>``, ``<agent>MODEL:TOOL</agent>`` (up to W
    tags when ``width`` > 1) or ``<agent>terminate</agent>``. The old format in which the
    controller wrote a tool's argument (``tool:NAME`` with ``<code>``/``<path>``/``<query>``)
    is refused with a notice naming the new one. Anything unusable adds ``format_penalty``
    (default -0.1), calls nobody, costs no tokens and uses up the step; ``info["parse_error"]``
    says what was wrong. It never raises.

    ## Observation
    The controller prompt: agents, action format, task, and each branch's trajectory (agent
    and output, cut at ``max_reply_chars``) and current answer. ``info["phase"]`` is
    ``"act"``; ``info["valid_agents"]`` lists every agent name; ``info["sandbox"]`` names
    the containment ``run_python`` gets (``"bwrap+cgroup"``, ``"bwrap+rlimit"``,
    ``"unsafe-no-isolation"`` or ``"refused"``), ``info["network_mode"]`` is ``"netns"``
    under bwrap, else ``"none"``; a tool step's ``info["tool_calls"]`` lists per branch the
    tool, whether a call was found, ``ok``, ``error`` and the containment.

    ## Rewards
    Eq. 6: ``R_T = r - lambda * C_T`` and ``R_t = gamma * R_{t+1} - lambda * C_t`` with
    ``C_t = F_t * log(1 + t / phi)``, t the 1-based step, ``F_t`` = the step's tokens / 1000
    (each agent call's prompt + completion tokens, plus a tool's output tokens as
    characters / 4, summed over branches; terminate and malformed actions 0). ``r`` is the
    team answer's score (``tasks.score_answer``: 1/0 for GSM-Hard and MMLU-Pro, in [0, 1] for
    CommonGen-Hard and SRDD). Reported per step as ``-lambda * C_t`` and, at the final step,
    ``r - lambda * C_T``, so the ``gamma``-discounted return from step t equals ``R_t``.
    Defaults: ``lam=0.1``, ``gamma=0.99`` (``info["gamma"]``), ``phi`` = ``max_turns`` (the
    step budget, as the paper defines it). ``info`` has ``step_tokens`` and ``step_cost``.

    ## Episode end
    ``terminated`` at ``terminate``; ``truncated`` after ``max_turns`` steps (default 4,
    the paper's episode length). The team's answer is graded either way and ``info``
    carries ``task_id``, ``final_answer``, ``score``, ``correct`` (score 1.0), ``turns`` and
    ``metrics``: ``tokens``, ``token_cost``, ``tool_calls`` and ``agent_steps``.

    ## Arguments
    - ``preset``: ``"mimas"`` (default), ``"titan"``, ``"mimas-mono"``, ``"titan-mono"``.
    - ``tasks``: the task kind, one of ``tasks.TASK_KINDS`` (default ``"gsm-hard"``).
    - ``task_seed``, ``n_tasks``: the tasks of a split are ``make_task(tasks, task_seed, i,
      split)`` for ``i < n_tasks``; ``reset`` draws one, or takes
      ``options={"task_index": i}`` / ``{"task_id": ...}``.
    - ``lam`` (0.1), ``gamma`` (0.99), ``phi`` (None: the horizon, max_turns), ``width``
      (1; at most ``MAX_WIDTH``).
    - ``tool_timeout_s`` (4 s per ``run_python``), ``sandbox`` (``"bwrap"``: bubblewrap, or
      the call is refused with the fix; ``"unsafe-no-isolation"``: a plain subprocess, for
      trusted setups only), ``max_reply_chars`` (2,000 per trajectory entry).

    ## Discrete actions
    ``action_choices()``: every ``MODEL:PATTERN`` and ``MODEL:TOOL`` (pool order) and
    ``terminate``; all available in every state (one tag: every branch). ``audit_strategies``
    names the shortcuts the audit must find clearly worse than the best response;
    ``observation_features()`` adds whether there is an answer and whether the last step
    was a reasoning agent's.

    ## Shared arguments
    - ``pool``: an ``AgentPool``, preset name or pool file to use instead of ``preset`` (its
      agents are the models; a live model receives the pattern's prompts and writes its own tool
      calls, parsed by ``agents.parse_tool_call``); or the name of one of Puppeteer's own
      simulated pools (``puppeteer-mimas``, ``puppeteer-titan``, ``puppeteer-mimas-mono``,
      ``puppeteer-titan-mono``: ``POOL_NAMES``), which a leaderboard names.
    - ``sealed`` (a board's sealed plan): the task generator's seed is mixed with the secret
      (``tasks.PuppeteerTaskSource.sealed``) and no sealed task has a public prompt; the
      simulated agents' seed is sealed by the base env.

    ## Version history
    - v0: initial version; later ``tasks`` kinds, ``width``, the one-shape refactor
      (``max_turns``, ``truncated``), ``sandbox``. Issue 15: agents are (model, pattern or
      tool) and write their own tool calls (the controller's ``tool:NAME`` + argument format
      is refused); tool output never becomes the answer; revisions act on the current draft;
      Mimas / Titan / Mono presets calibrated to Table 1; width branches keep separate
      trajectories and vote at the end; ``phi`` defaults to ``max_turns``.
    """

    MAX_WIDTH: ClassVar[int] = 3
    _shared_attrs: ClassVar[tuple[str, ...]] = (
        *OrchestrationEnv._shared_attrs,
        "_search_index",
        "_task_folder",
        "_runs",
        "_grades",
    )

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "max_turns": 4,
        "format_penalty": -0.1,
    }

    #: shared arguments this env has no use for (passing one is an error)
    unused_shared_arguments = ("task_source", "task_source_kwargs")

    def __init__(
        self,
        *,
        preset: str = "mimas",
        tasks: str = "gsm-hard",
        task_seed: int = 0,
        n_tasks: int = 10_000,
        lam: float = 0.1,
        gamma: float = 0.99,
        phi: float | None = None,
        width: int = 1,
        tool_timeout_s: float = 4.0,
        sandbox: str = "bwrap",
        max_reply_chars: int = 2000,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        if tasks not in TASK_KINDS:
            raise UnknownNameError("puppeteer tasks", tasks, TASK_KINDS)
        if not 1 <= int(width) <= self.MAX_WIDTH:
            raise ConfigError(f"width must be 1 to {self.MAX_WIDTH} (seed 003), got {width}")
        if phi is not None and not phi > 0:
            raise ConfigError(f"phi must be > 0 (or None: max_turns), got {phi}")
        if int(n_tasks) < 1:
            raise ConfigError(f"n_tasks must be >= 1, got {n_tasks}")
        if self._pool_arg is None and preset not in PRESETS:
            raise UnknownNameError("puppeteer preset", preset, PRESETS)
        own = self._pool_arg is None or (
            isinstance(self._pool_arg, str) and self._pool_arg in POOL_NAMES
        )
        if own and (self._backend is not None or self._backend_kwargs):
            raise ConfigError(
                "backend / backend_kwargs need a pool given by name or file, not one of "
                "Puppeteer's own simulated pools (preset / pool "
                f"{', '.join(sorted(POOL_NAMES))})"
            )
        if self.split not in SPLITS:
            raise UnknownNameError("split", self.split, SPLITS)
        if sandbox not in SANDBOX_MODES:
            raise UnknownNameError("run_python sandbox", sandbox, SANDBOX_MODES)
        self.preset, self.tasks, self.width = preset, tasks, int(width)
        self.lam, self.gamma = lam, gamma
        self.phi = float(self.max_turns if phi is None else phi)
        self.task_seed, self.n_tasks = task_seed, int(n_tasks)
        self.tool_timeout_s, self.sandbox = tool_timeout_s, sandbox
        self.max_reply_chars = max_reply_chars
        self._search_index: SearchIndex | None = None
        self._sandbox_root: str | None = None
        self._task_folder: OwnedTempDir | None = None  # removed at close, GC or exit
        self._runs: _Cache = _Cache()
        self._grades: _Cache = _Cache()
        # episode state
        self.branches: list[Branch] = [Branch()]
        self.totals: dict[str, float] = {}

    # -- collaborators, built on first use ------------------------------------------------
    def _build_pool(self) -> AgentPool:
        if self._pool_arg is None:
            return puppeteer_pool(self.preset)
        if isinstance(self._pool_arg, str) and self._pool_arg in POOL_NAMES:
            # the pool's own name (``puppeteer-mimas``, ...): what a board names it by
            return puppeteer_pool(POOL_NAMES[self._pool_arg])
        return super()._build_pool()

    def _build_task_source(self) -> TaskSource:
        """The generated tasks (``tasks.PuppeteerTaskSource``); in a sealed env (a board's
        sealed plan, the shared argument ``sealed``) the same generator with its seed mixed
        with the secret (``PuppeteerTaskSource.sealed``): tasks nobody can generate from
        public code, none with a public prompt (issue 37)."""
        if self._sealed is not None:
            return PuppeteerTaskSource.sealed(
                self.tasks, self._sealed, seed=self.task_seed, n_tasks=self.n_tasks
            )
        return PuppeteerTaskSource(self.tasks, seed=self.task_seed, n_tasks=self.n_tasks)

    def _index(self) -> SearchIndex:
        if self._search_index is None:
            from orchenv.envs.puppeteer.corpus import corpus_index

            self._search_index = corpus_index()
        return self._search_index

    def sandbox_dir(self) -> str:
        """The current task's folder for ``read_file`` (its ``meta["files"]``, at least
        ``problem.txt``)."""
        assert self._sandbox_root is not None and self.task is not None
        path = os.path.join(self._sandbox_root, self.task.id)
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            for name, text in outputs.task_files(self.task).items():
                if os.path.basename(name) == name and name not in ("", ".", ".."):
                    with open(os.path.join(path, name), "w", encoding="utf-8") as handle:
                        handle.write(text)
        return path

    def close(self) -> None:
        if self._task_folder is not None:
            self._task_folder.cleanup()
        self._task_folder, self._sandbox_root = None, None
        super().close()

    def valid_agents(self) -> list[str]:
        return agent_names(self.pool.names)

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random valid action: mostly a reasoning agent, sometimes a tool agent or stop."""
        return random_action(rng, self.pool.names)

    # -- views used by strategies, features and tests -------------------------------------
    @property
    def history(self) -> list[tuple[str, str]]:
        """Branch 0's trajectory (every branch has as many entries)."""
        return self.branches[0].history

    @property
    def answer(self) -> str | None:
        """The team's current answer: the majority vote of the branches' answers."""
        return majority_vote([b.draft for b in self.branches])

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def action_choices(self) -> list[str | None]:
        """Every agent and terminate (see "Discrete actions" above)."""
        return list(canonical_choices(self.pool.names))

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return shortcuts(lambda env: env.single_call_model())

    def single_call_model(self) -> str:
        """The pool's best model for the current task's family by its single-call quality
        (``quality.FAMILY`` in the agents' calibration: seed 003 Table 1's "Pure Models" rows
        and the presets' guesses; public, per family, never per task, so truth-independent);
        the pool's ``strongest()`` (mean quality over the four families) where no agent
        carries that number (live pools) or before a task. Ties go to the later (stronger)
        agent in pool order. Why not ``strongest()``: in Mimas the strongest on average is
        Llama-3.1-8B, whose GSM-Hard row is 0.0000, so "the strongest model once" answered
        no default (Mimas, GSM-Hard) task right (docs/puppeteer.md, "The no-skill default")."""
        fallback = self.pool.strongest()
        if self.task is None:
            return fallback
        key = f"quality.{outputs.family_of(self.task)}"
        best: tuple[float, str] | None = None
        for agent in self.pool.agents:  # weakest first: ``>=`` keeps the stronger on ties
            value = agent.calibration.get(key)
            if value is None:
                continue
            if best is None or float(value) >= best[0]:
                best = (float(value), agent.name)
        return fallback if best is None else best[1]

    def single_call_quality(self, model: str) -> float:
        """``model``'s public single-call quality for the current task's family (its
        ``quality.FAMILY`` calibration; 0.5 where it has none or before a task)."""
        if self.task is None:
            return 0.5
        value = self.pool.spec(model).calibration.get(f"quality.{outputs.family_of(self.task)}")
        return 0.5 if value is None else float(value)

    #: issue 25: the skill reference's realistic level (see ``skill_action``)
    realistic_skill: ClassVar[float | None] = REALISTIC_SKILL
    realistic_skill_source: ClassVar[str] = REALISTIC_SKILL_SOURCE

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The audit's skill reference (``OrchestrationEnv.skill_action``): the puppeteer's
        skill is choosing the next agent and when to stop. Skilled (privileged): terminate
        when the team's answer is right (score 1), else name the agent most likely to make
        it right (``fixing_agent``). Unskilled: the calibrated single call (the reasoning agent
        of the model best at the task's family, ``single_call_model``, while there is no
        answer); then terminate if that model's public single-call quality on the family is
        at least ``UNSKILLED_STOP_PRIOR`` (its answer is more likely right than wrong), else
        have it critique and revise (issue 38: on Mimas GSM-Hard, where the single call is
        right 4.5% of the time, stopping there made every unskilled decision a loss)."""
        if self.task is None:
            return None
        if not skilled:
            model = self.single_call_model()
            if self.answer is None:
                return agent_text(model, "reasoning")
            if self.single_call_quality(model) < UNSKILLED_STOP_PRIOR:
                return agent_text(model, "critique")
            return terminate_text()
        if self.answer is not None and self._grade(self.answer)[0] >= 0.999:
            return terminate_text()
        return self.fixing_agent()

    def fixing_agent(self) -> str:
        """The agent most likely to make branch 0's answer right next (privileged: the task's
        latent difficulty and whether the draft is right; simulated presets' calibration).
        Compares a fresh answer by each model (``revision.conditional_right``), a critique
        and, after a critique, a ``modify`` by each model (``revision.fix_probability``), and
        a ``run_python`` where a right program's evidence is worth the extra step: when no
        program ran on the branch or the last one was wrong (issue 38: the puppeteer reads the
        program's output), each model's chance given the task's program latent and the
        model's own (``revision.program_conditional``)."""
        assert self.task is not None
        family = outputs.family_of(self.task)
        branch = self.branches[0]
        guidance = branch.guidance()
        backend = PatternBackend(self._pattern_seed())
        task_u = stable_uniform("task", backend.seed, self.task.id)
        program_u = stable_uniform("program", backend.seed, self.task.id)
        reference = outputs.right_output(self.task) if family == "srdd" else ""
        best: tuple[float, str] = (-1.0, agent_text(self.pool.strongest(), "reasoning"))
        # a program is worth running when none ran on this branch, or when the last one was
        # wrong or failed (its evidence is not positive: the puppeteer read its output); a new
        # run replaces the old one's evidence, so it is valued with the other evidence only
        last_run = branch.evidence.get("run_python")
        rerun_worth = last_run is None or last_run <= 0.0
        low, high = revision.GUIDANCE_RANGE
        other = min(
            high,
            max(low, sum(v for k, v in branch.evidence.items() if k != "run_python")),
        )
        for name in self.pool.names:
            spec = self.pool.spec(name)
            capability = backend.capability(spec)

            def fresh(delta: float, spec: Any = spec) -> float:
                p = backend.right_probability(spec, family, delta)
                return revision.conditional_right(p, task_u)

            options = [(fresh(guidance), "reasoning")]
            if branch.draft is not None:
                p_spec = revision.specific_probability(family, capability, "critique")

                def fix(*args: Any) -> float:  # the task's latent known (privileged)
                    return revision.revision_conditional(revision.fix_probability(*args), task_u)

                options.append(
                    (
                        p_spec * fix(family, capability, "specific", guidance)
                        + (1 - p_spec) * fix(family, capability, "generic", guidance),
                        "critique",
                    )
                )
                if branch.critique is not None:
                    judged = revision.judge_critique(
                        family, self.task, branch.draft, branch.critique, False, reference
                    )
                    options.append((fix(family, capability, judged, guidance), "modify"))
            left = self.max_turns - self.turn
            if rerun_worth and left >= 2:
                skill = float(spec.calibration.get("code_skill", 0.0))
                p_right = revision.program_conditional(
                    skill * revision.PROGRAM_FIT.get(family, 0.5),
                    program_u,
                    stable_uniform("program", backend.seed, self.task.id, name),
                )
                right_run, wrong_run = revision.EVIDENCE[family][:2]
                two_steps = p_right * fresh(other + right_run) + (1 - p_right) * fresh(
                    other + wrong_run
                )
                options.append((two_steps, "run_python"))
            for p, what in options:
                if p > best[0]:
                    best = (p, agent_text(name, what))
        return best[1]

    def _pattern_seed(self) -> int:
        """The seed of the pool's simulated agents (``PatternBackend``; a board's secret
        reseeds it in a sealed env), so the skill reference reads the latents the agents
        draw from; 0 for a pool without one."""
        for backend in getattr(self.pool, "_backends", {}).values():
            if isinstance(backend, PatternBackend):
                return int(backend.seed)
        return 0

    def observation_features(self) -> np.ndarray:
        """Whether the team has an answer, and whether the last step was a reasoning agent's."""
        last = self.history[-1][0] if self.history else ""
        reasoning = bool(last) and last.rsplit(":", 1)[-1] in PATTERNS
        return np.array([float(self.answer is not None), float(reasoning)], dtype=np.float32)

    # -- observation ------------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        assert self.task is not None
        prompt = controller_prompt(
            step=min(self.turn + 1, self.max_turns),
            max_turns=self.max_turns,
            models=self.pool.names,
            problem=self.task.prompt,
            branches=[(b.history, b.draft) for b in self.branches],
        )
        return [{"role": "user", "content": prompt}]

    def _observation_info(self) -> dict[str, Any]:
        return {
            "phase": "act",
            "network_mode": network_isolation_mode(self.sandbox),
            "sandbox": containment_mode(self.sandbox),
        }

    # -- episode ----------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        if self._task_folder is None:  # created before any fork, so forks share it
            self._task_folder = OwnedTempDir("orchenv-puppeteer-")
            self._sandbox_root = self._task_folder.path
        self.task = self.pick_task(options)
        self.branches = [Branch() for _ in range(self.width)]
        self.totals = {"tokens": 0.0, "token_cost": 0.0, "tool_calls": 0.0, "agent_steps": 0.0}
        return {}

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        parsed = parse_action(action, self.pool.names, self.width)
        info: dict[str, Any] = {"gamma": self.gamma}
        tokens = 0
        if parsed.agents:
            for b, (model, what) in enumerate(parsed.agents):
                if what in TOOLS:
                    tokens += self._tool_agent(b, model, what, info)
                    self.totals["tool_calls"] += 1
                else:
                    tokens += self._reasoning_agent(b, model, what, info)
                    self.totals["agent_steps"] += 1
            info["called_agents"] = [f"{m}:{w}" for m, w in parsed.agents]
        cost = (tokens / 1000.0) * math.log(1.0 + self.turn / self.phi)
        self.totals["tokens"] += tokens
        self.totals["token_cost"] += cost
        reward = 0.0 - self.lam * cost
        done = parsed.terminate
        if done or self.turn >= self.max_turns:  # the final step: R_T = r - lambda * C_T
            score, grading = self._grade(self.answer)
            reward += score
            if grading != "ok":  # refused or timed out: scored 0, and said so
                info["grading"] = grading
        info.update(step_tokens=tokens, step_cost=cost, privileged={"reference": self.task.answer})
        error = parsed.error
        if error is not None:  # the notice shows a filled-in valid action (issue 31)
            example = example_reply(self.pool.names)
            error = f"{error.rstrip('.')}. A valid reply now, for example: {example}"
        return Outcome(reward=reward, done=done, error=error, info=info)

    def call_charge(self, completion: Completion) -> float:
        """Eq. 6's price of one call at the current step ``t``: ``lambda * tokens / 1000 *
        log(1 + t / phi)`` (issue 38: a consulted call costs what a routed one of the same
        tokens does at that step; ``_apply`` prices the routed calls with the same rule)."""
        tokens = completion.prompt_tokens + completion.completion_tokens
        return self.lam * (tokens / 1000.0) * math.log(1.0 + max(self.turn, 1) / self.phi)

    def _context(self, b: int, branch: Branch, **kwargs: Any) -> CallContext:
        return CallContext(task=self.task, turn=self.turn + 1000 * b, draft=branch.draft, **kwargs)

    def _agent_messages(self, b: int, branch: Branch, kind: str) -> list[Message]:
        """The prompt of an agent acting as ``kind`` (a reasoning pattern or a tool) on
        branch ``b``."""
        assert self.task is not None
        return agent_messages(
            self.tasks,
            kind,
            self.task.prompt,
            branch.history,
            draft=branch.draft,
            branch=b,
            width=self.width,
        )

    def _reasoning_agent(self, b: int, model: str, pattern: str, info: dict[str, Any]) -> int:
        """Call a reasoning agent on branch ``b``; its ``FINAL ANSWER`` becomes the branch's
        answer. Returns its tokens."""
        branch = self.branches[b]
        messages = self._agent_messages(b, branch, pattern)
        feedback = branch.critique if pattern == "modify" else None
        context = self._context(b, branch, feedback=feedback, guidance=branch.guidance())
        completion = self.call_agent(model, messages, context)
        text = completion.text
        if pattern == "planning":
            branch.evidence["plan"] = revision.PLAN_LOGIT
        else:
            answer = reply_answer(self.tasks, text)
            if answer:
                branch.draft = answer[:MAX_ANSWER_CHARS]
            if pattern in ("critique", "reflect"):
                branch.critique = reply_reasoning(text)
            elif pattern in REVISING or pattern in ("reasoning", "question"):
                branch.critique = None  # a new or revised answer: the old critique is spent
        branch.history.append((f"{model}:{pattern}", text[: self.max_reply_chars]))
        return completion.prompt_tokens + completion.completion_tokens

    def _tool_agent(self, b: int, model: str, tool: str, info: dict[str, Any]) -> int:
        """Have ``model`` write a ``tool`` call on branch ``b``, run it, and log the result in
        the branch's trajectory. Returns the call's tokens plus the result's."""
        branch = self.branches[b]
        messages = self._agent_messages(b, branch, tool)
        completion = self.call_agent(model, messages, self._context(b, branch))
        tokens = completion.prompt_tokens + completion.completion_tokens
        argument = parse_tool_call(tool, completion.text)
        record: dict[str, Any] = {"branch": b, "tool": tool, "call_found": argument is not None}
        if argument is None:
            output = "(the agent's reply held no tool call)"
        else:
            result = self._run_tool(tool, argument)
            output = result.text()[: self.max_reply_chars]
            record.update(ok=result.ok, error=result.error)
            for key in (
                "containment",
                "network",
                "seccomp",
                "importable",
                "timed_out",
                "returncode",
            ):
                if key in result.meta:
                    record[key] = result.meta[key]
            branch.evidence[tool] = self._evidence(tool, argument, result)
            shown = argument[:300] + ("..." if len(argument) > 300 else "")
            output = f"call: {shown}\nresult: {output}"
            tokens += estimate_tokens(output)
        info.setdefault("tool_calls", []).append(record)
        branch.history.append((f"{model}:{tool}", output[: self.max_reply_chars]))
        self.transcript.append({"turn": self.turn, "role": f"{model}:{tool}", "text": output})
        return tokens

    def _run_tool(self, tool: str, argument: str) -> ToolResult:
        if tool == "run_python":
            key = ("run", containment_mode(self.sandbox), argument)
            cached = self._runs.get(key)
            if cached is not None:
                return cached  # type: ignore[no-any-return]
            if (
                self.task is not None and outputs.family_of(self.task) == "srdd"
            ):  # one run: the output and the grade
                result = self._srdd_run(argument)
            else:
                result = run_python(argument, timeout_s=self.tool_timeout_s, sandbox=self.sandbox)
            if result.meta.get("containment") != "refused" and not result.meta.get("timed_out"):
                self._runs.put(key, result)
            return result
        if tool == "read_file":
            return read_file(argument.strip(), self.sandbox_dir())
        return search(argument, self._index())

    def _srdd_run(self, code: str) -> ToolResult:
        """``run_python(code)`` on an SRDD task, graded in the same sandbox call
        (``tasks.srdd_tool_run``): the grade is remembered for ``_grade``, so a step runs
        the program once (it ran it again for grading, with a 10 s timeout: 14.1 s steps)."""
        assert self.task is not None
        tests, expected = self.task.meta.get("tests", ()), self.task.meta.get("expected", ())
        result, verdict = srdd_tool_run(
            code, tests, expected, timeout_s=self.tool_timeout_s, sandbox=self.sandbox
        )
        if verdict is not None:
            grade = (float(verdict["score"]), str(verdict["status"]))
            if grade[1] == "ok":
                self._grades.put((self.tasks, self.task.id, code), grade)
            self._just_graded = (self.tasks, self.task.id, code, grade)  # a timeout, too
        return result  # type: ignore[no-any-return]

    def _evidence(self, tool: str, argument: str, result: ToolResult) -> float:
        """What a tool result is worth to later simulated answers in its branch (a logit;
        privileged: judged against the task's ground truth; live agents read the result
        themselves and ignore it). ``revision.EVIDENCE`` has the values."""
        assert self.task is not None
        family = outputs.family_of(self.task)
        right_run, wrong_run, good_search, data_read = revision.EVIDENCE[family]
        if tool == "run_python":
            if family == "srdd":
                return right_run if self._grade(argument)[0] >= 0.999 else wrong_run
            if not result.ok:
                return 0.0
            lines = [ln.strip() for ln in result.output.splitlines() if ln.strip()]
            right = bool(lines) and self._grade(lines[-1])[0] >= 0.999
            return right_run if right else wrong_run
        if tool == "search":
            wanted = set(outputs.good_query(self.task).lower().split())
            got = set(argument.lower().split())
            good = bool(wanted) and len(wanted & got) >= 0.5 * len(wanted)
            return good_search if good and result.ok else 0.0
        data = outputs.data_file(self.task)
        return data_read if result.ok and data is not None and argument.strip() == data else 0.0

    def _grade(self, answer: str | None) -> tuple[float, str]:
        """``tasks.graded_score`` of ``answer``, remembered (SRDD grading runs the sandbox)."""
        assert self.task is not None
        key = (self.tasks, self.task.id, answer)
        cached = self._grades.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        just = getattr(self, "_just_graded", None)
        if just is not None and just[:3] == key:  # graded by this step's run (timed out)
            return just[3]  # type: ignore[no-any-return]
        score, status = graded_score(
            self.tasks, self.task, answer, sandbox=self.sandbox, timeout_s=self.tool_timeout_s
        )
        if status == "ok":
            self._grades.put(key, (score, status))
        return score, status

    def _summary(self) -> dict[str, Any]:
        answer = self.answer
        score = self._grade(answer)[0]
        summary: dict[str, Any] = {
            "final_answer": answer,
            "score": score,
            "correct": score == 1.0,
            "metrics": dict(self.totals),
        }
        if self.width > 1:
            summary["branch_answers"] = [b.draft for b in self.branches]
        return summary
