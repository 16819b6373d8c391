"""``orch/Puppeteer-v0``: a centralized puppeteer names the next agent each step.

Seed 003 (Puppeteer; agent space of appendix B, reward eq. 6) as a Gymnasium environment.
The paper's formulas were lost in text extraction; the reward follows eq. 6 as restated in
the class docstring. The agent space and simulated agents are in
``orchenv.envs.puppeteer.agents``, the prompt and parser in ``.protocol``, the task kinds in
``.tasks``; tools are offline (``.tools``): web tools are out of scope.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from orchenv.backends.simulated import estimate_tokens
from orchenv.core import OrchestrationEnv, Outcome, arguments_for
from orchenv.envs.puppeteer.agents import PRESETS, agent_messages, majority_vote, puppeteer_pool
from orchenv.envs.puppeteer.choices import canonical_choices, shortcuts
from orchenv.envs.puppeteer.protocol import (
    SEARCH_CORPUS,
    agent_names,
    controller_prompt,
    parse_action,
    random_action,
)
from orchenv.envs.puppeteer.sandbox import OwnedTempDir
from orchenv.envs.puppeteer.tasks import (
    SPLITS,
    TASK_KINDS,
    PuppeteerTaskSource,
    extract_answer,
    graded_score,
    score_answer,
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
from orchenv.pool import AgentPool, CallContext, Message


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
    ``<agent>NAME</agent>`` plus the tool's argument (``orchenv.envs.puppeteer.protocol``):

    - ``<agent>MODEL:PATTERN</agent>``, PATTERN one of ``PATTERNS`` (appendix B);
    - ``<agent>tool:run_python</agent><code>...</code>``: the last non-empty stdout line
      becomes the current answer (if the program succeeds);
    - ``<agent>tool:read_file</agent><path>problem.txt</path>`` (inside the task's sandbox);
    - ``<agent>tool:search</agent><query>...</query>`` (BM25 over ``SEARCH_CORPUS``);
    - ``<agent>terminate</agent>``: stop.

    Anything else (no tag, unknown model or pattern, missing argument) is malformed: it adds
    ``format_penalty`` (default -0.1) to the step's reward, calls nobody, costs no tokens, uses
    up the step; ``info["parse_error"]`` says what was wrong and the next observation repeats
    it. It never raises.

    ## Observation
    The controller prompt: agents, action format, task, trajectory (each step's agent and its
    output, truncated to ``max_reply_chars``), current answer. ``info["phase"]`` is ``"act"``;
    ``info["valid_agents"]`` lists every agent name (``MODEL:PATTERN``, ``tool:...``,
    ``terminate``); ``info["sandbox"]`` names the containment ``tool:run_python`` gets here
    (``"bwrap+cgroup"``, ``"bwrap+rlimit"``, ``"unsafe-no-isolation"`` or ``"refused"``) and
    ``info["network_mode"]`` is ``"netns"`` under bwrap, else ``"none"``. A tool step's
    ``info["tool_call"]["containment"]`` says which mode that call ran in.

    ## Rewards
    Eq. 6: ``R_T = r - lambda * C_T`` and ``R_t = gamma * R_{t+1} - lambda * C_t`` with
    ``C_t = F_t * log(1 + t / phi)``, t the 1-based step, ``F_t`` = the step's tokens / 1000
    (a model call's prompt + completion tokens, summed over width branches; a tool's input +
    output tokens estimated as characters / 4; terminate and malformed actions 0). ``r`` = 1
    if the final answer equals the reference (``math_equal``) else 0. Reported per step as
    ``-lambda * C_t`` at non-final steps and ``r - lambda * C_T`` at the final step (the one
    that terminates or truncates the episode), so the ``gamma``-discounted return from step t
    equals ``R_t``. Defaults: ``lam=0.1``, ``gamma=0.99`` (reported in ``info["gamma"]``),
    ``phi=4.0`` (the default episode length: the cost factor reaches ``log 2`` at the last
    step). ``info`` has ``step_tokens`` (F_t * 1000) and ``step_cost`` (C_t). For
    ``tasks="commongen"``, ``r`` is the concept coverage score (partial credit).

    ## Episode end
    ``terminated`` at ``<agent>terminate</agent>``; ``truncated`` when ``max_turns`` steps
    (default 4) pass without it (the last named agent acts first). Either way the latest
    answer is graded and ``info`` carries ``task_id``, ``final_answer``, ``score`` (``r``),
    ``correct`` (``score == 1.0``), ``turns`` and ``metrics``: ``tokens`` (the sum of
    ``step_tokens``), ``token_cost`` (the sum of ``C_t``), ``tool_calls`` (tool steps) and
    ``agent_steps`` (model agent steps).

    ## Arguments
    - ``preset``: the simulated model pool, ``"mimas"`` (default) or ``"titan"``.
    - ``pool``: an ``AgentPool``, preset name or pool file to use instead of ``preset``
      (its agents are the models; the pattern reaches them as the system prompt's first
      line, ``Pattern: X``).
    - ``tasks``: the task kind, one of ``TASK_KINDS`` (default ``"gsm-hard"``).
    - ``split``: ``"train"`` or ``"test"`` (disjoint random streams).
    - ``task_seed``, ``n_tasks``: the tasks of a split are ``make_task(tasks, task_seed, i,
      split)`` for ``i < n_tasks`` (default 0 and 10,000); ``reset`` draws one uniformly, or
      takes ``options={"task_index": i}`` or ``options={"task_id": ...}``.
    - ``max_turns``: controller steps per episode (default 4).
    - ``lam``, ``gamma``, ``phi``: lambda, gamma and phi of eq. 6 (defaults 0.1, 0.99, 4.0).
    - ``format_penalty``: added to a step whose action cannot be used (default -0.1).
    - ``width``: model calls per named model agent and step, majority-voted (default 1).
    - ``tool_timeout_s``: wall-clock limit of one ``run_python`` call (default 4 s, so a
      step stays under 5 s with the sandbox's start-up).
    - ``sandbox``: how ``tool:run_python`` contains the controller's code: ``"bwrap"``
      (default: bubblewrap, see ``orchenv.envs.puppeteer.sandbox``; where it cannot run, the
      call is refused with the fix and the step goes on) or ``"unsafe-no-isolation"`` (a plain
      subprocess with rlimits, for machines without bwrap; only for trusted controllers).
    - ``max_reply_chars``: how much of each agent's or tool's output enters the trajectory
      (default 2,000).
    - ``backend``, ``backend_kwargs``: override the backends of a ``pool`` given by name or
      file (the presets are simulated and take none).
    - ``max_obs_chars``, ``render_mode``: as for every orchenv env.

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``; ``choices.py``):
    every ``MODEL:PATTERN`` (models in pool order, then ``PATTERNS``), ``tool:read_file`` on
    ``problem.txt``, ``tool:search`` with the task text as query, and ``terminate``; all
    available in every state. ``tool:run_python`` is not among them: its code would be the
    solution, which a fixed menu cannot write without the reference. ``audit_strategies()``
    names the shortcuts the audit must find clearly worse than the best response;
    ``observation_features()`` adds whether there is an answer and whether the last step
    was a model agent's.

    ## Version history
    - v0: initial version (web tools out of scope); later added ``tasks`` (multiple-choice,
      commongen) and ``width`` with majority vote, defaults unchanged. Since the one-shape
      refactor the horizon is ``max_turns`` (it was ``max_steps``) and reaching it is
      ``truncated`` (it was ``terminated``; the reward is unchanged, the final step is graded
      either way); ``info["metrics"]`` holds the episode's numbers; tasks come from a task
      source, so ``task_index`` must be below ``n_tasks`` and ``task_id`` selects a task;
      ``pool`` may also be a preset name or pool file. ``sandbox`` added: ``run_python`` runs
      under bubblewrap or is refused (it was a subprocess with rlimits and Python-level hooks).
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = (
        *OrchestrationEnv._shared_attrs,
        "_search_index",
        "_task_folder",
    )

    def __init__(
        self,
        *,
        preset: str = "mimas",
        pool: str | AgentPool | None = None,
        tasks: str = "gsm-hard",
        split: str = "train",
        task_seed: int = 0,
        n_tasks: int = 10_000,
        max_turns: int = 4,
        lam: float = 0.1,
        gamma: float = 0.99,
        phi: float = 4.0,
        format_penalty: float = -0.1,
        width: int = 1,
        tool_timeout_s: float = 4.0,
        sandbox: str = "bwrap",
        max_reply_chars: int = 2000,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        if tasks not in TASK_KINDS:
            raise UnknownNameError("puppeteer tasks", tasks, TASK_KINDS)
        if int(width) < 1:
            raise ConfigError(f"width must be >= 1, got {width}")
        if not phi > 0:
            raise ConfigError(f"phi must be > 0, got {phi}")
        if int(n_tasks) < 1:
            raise ConfigError(f"n_tasks must be >= 1, got {n_tasks}")
        if pool is None and preset not in PRESETS:
            raise UnknownNameError("puppeteer preset", preset, PRESETS)
        if pool is None and (backend is not None or backend_kwargs):
            raise ConfigError("backend / backend_kwargs need a pool given by name or file")
        if split not in SPLITS:
            raise UnknownNameError("split", split, SPLITS)
        if sandbox not in SANDBOX_MODES:
            raise UnknownNameError("run_python sandbox", sandbox, SANDBOX_MODES)
        self.preset, self.tasks, self.width = preset, tasks, int(width)
        self.lam, self.gamma, self.phi = lam, gamma, phi
        self.task_seed, self.n_tasks = task_seed, int(n_tasks)
        self.tool_timeout_s, self.sandbox = tool_timeout_s, sandbox
        self.max_reply_chars = max_reply_chars
        self._search_index: SearchIndex | None = None
        self._sandbox_root: str | None = None
        self._task_folder: OwnedTempDir | None = None  # removed at close, GC or exit
        # episode state
        self.history: list[tuple[str, str]] = []  # (agent, output)
        self.answer: str | None = None
        self.totals: dict[str, float] = {}

    # -- collaborators, built on first use ------------------------------------------------
    def _build_pool(self) -> AgentPool:
        if self._pool_arg is None:
            return puppeteer_pool(self.preset)
        return super()._build_pool()

    def _build_task_source(self) -> PuppeteerTaskSource:
        return PuppeteerTaskSource(self.tasks, seed=self.task_seed, n_tasks=self.n_tasks)

    def _index(self) -> SearchIndex:
        if self._search_index is None:
            self._search_index = SearchIndex(SEARCH_CORPUS)
        return self._search_index

    def sandbox_dir(self) -> str:
        """The current task's sandbox dir for ``tool:read_file`` (holds ``problem.txt``)."""
        assert self._sandbox_root is not None and self.task is not None
        path = os.path.join(self._sandbox_root, self.task.id)
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "problem.txt"), "w", encoding="utf-8") as handle:
                handle.write(self.task.prompt)
        return path

    def close(self) -> None:
        if self._task_folder is not None:
            self._task_folder.cleanup()
        self._task_folder, self._sandbox_root = None, None
        super().close()

    def valid_agents(self) -> list[str]:
        return agent_names(self.pool.names)

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random valid action: mostly a model with a pattern, sometimes a tool or stop."""
        return random_action(rng, self.pool.names)

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def action_choices(self) -> list[str | None]:
        """Each model agent, two tools and terminate (see "Discrete actions" above)."""
        return list(canonical_choices(self.pool.names, self.task.prompt if self.task else ""))

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return shortcuts(self.pool.strongest())

    def observation_features(self) -> np.ndarray:
        """Whether the team has an answer, and whether the last step was a model agent's."""
        last_model = bool(self.history) and not self.history[-1][0].startswith("tool:")
        return np.array([float(self.answer is not None), float(last_model)], dtype=np.float32)

    # -- observation ------------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        assert self.task is not None
        prompt = controller_prompt(
            step=min(self.turn + 1, self.max_turns),
            max_turns=self.max_turns,
            models=self.pool.names,
            problem=self.task.prompt,
            history=self.history,
            answer=self.answer,
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
        self.history, self.answer = [], None
        self.totals = {"tokens": 0.0, "token_cost": 0.0, "tool_calls": 0.0, "agent_steps": 0.0}
        return {}

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        parsed = parse_action(action, self.pool.names)
        info: dict[str, Any] = {"gamma": self.gamma}
        tokens = 0
        if parsed.kind == "tool":
            assert parsed.name is not None and parsed.argument is not None
            tokens = self._run_tool(parsed.name, parsed.argument, info)
            self.totals["tool_calls"] += 1
        elif parsed.kind == "model":
            assert parsed.name is not None and parsed.argument is not None
            tokens = self._call_model(parsed.name, parsed.argument, info)
            self.totals["agent_steps"] += 1
        cost = (tokens / 1000.0) * math.log(1.0 + self.turn / self.phi)
        self.totals["tokens"] += tokens
        self.totals["token_cost"] += cost
        reward = 0.0 - self.lam * cost
        done = parsed.kind == "terminate"
        if done or self.turn >= self.max_turns:  # the final step: R_T = r - lambda * C_T
            score, grading = graded_score(self.tasks, self.task, self.answer)
            reward += score
            if grading != "ok":  # refused or timed out: scored 0, and said so
                info["grading"] = grading
        info.update(step_tokens=tokens, step_cost=cost, privileged={"reference": self.task.answer})
        return Outcome(reward=reward, done=done, error=parsed.error, info=info)

    def _run_tool(self, tool: str, argument: str, info: dict[str, Any]) -> int:
        """Run a tool, log its output in the trajectory; return its tokens (F_t * 1000)."""
        result: ToolResult
        if tool == "run_python":
            result = run_python(argument, timeout_s=self.tool_timeout_s, sandbox=self.sandbox)
            if result.ok:
                last = [ln for ln in result.output.splitlines() if ln.strip()]
                if last:
                    self.answer = last[-1].strip()[:200]
        elif tool == "read_file":
            result = read_file(argument.strip(), self.sandbox_dir())
        else:
            result = search(argument, self._index())
        output = result.text()[: self.max_reply_chars]
        meta = {"tool": tool, "ok": result.ok, "error": result.error}
        for key in ("containment", "network", "timed_out", "returncode"):
            if key in result.meta:
                meta[key] = result.meta[key]
        info["tool_call"] = meta
        self.history.append((f"tool:{tool}", output))
        self.transcript.append({"turn": self.turn, "role": f"tool:{tool}", "text": output})
        return estimate_tokens(argument) + estimate_tokens(output)

    def _call_model(self, model: str, pattern: str, info: dict[str, Any]) -> int:
        """Call ``model`` with ``pattern`` once per width branch; the branches' majority answer
        becomes the current answer. Return the tokens of all branches (F_t * 1000)."""
        assert self.task is not None
        tokens, texts, answers = 0, [], []
        for branch in range(self.width):
            messages = agent_messages(
                self.tasks,
                pattern,
                self.task.prompt,
                self.history,
                branch=branch,
                width=self.width,
            )
            context = CallContext(task=self.task, turn=self.turn + 1000 * branch, draft=self.answer)
            completion = self.call_agent(model, messages, context)
            tokens += completion.prompt_tokens + completion.completion_tokens
            texts.append(completion.text)
            answers.append(extract_answer(self.tasks, completion.text))
        voted = majority_vote(answers)
        reply = texts[answers.index(voted) if voted is not None else 0]
        if self.width > 1:
            count = sum(1 for a in answers if a == voted)
            reply = f"{reply} [majority {count}/{self.width}]"
            info["branch_answers"] = answers
        self.history.append((f"{model}:{pattern}", reply[: self.max_reply_chars]))
        if voted is not None:
            self.answer = voted
        info["called_agent"] = f"{model}:{pattern}"
        return tokens

    def _score(self) -> float:
        """``r``: the current answer's score for this task (``score_answer``)."""
        assert self.task is not None
        return score_answer(self.tasks, self.task, self.answer)

    def _summary(self) -> dict[str, Any]:
        score = self._score()
        return {
            "final_answer": self.answer,
            "score": score,
            "correct": score == 1.0,
            "metrics": dict(self.totals),
        }
