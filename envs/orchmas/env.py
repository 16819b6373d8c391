"""``orch/OrchMAS-v0``: dynamic role and prompt generation for one executor LLM.

Seed 002 (OrchMAS, sections 3.1-3.2, Table 2, section 4.1) as a Gymnasium
environment. The prompts are written for orchenv; the action protocol, the
5-turn limit and the format-gated F1 reward follow the paper. The paper's
reward formulas were lost in text extraction; the reconstruction is documented
in ``OrchMASEnv`` (## Rewards).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.envs.orchmas.executor import (
    BACKEND_NAME,
    ROLE_PREFIX,
    RoleAwareExecutorBackend,
    task_domain,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import exact_match, extract_boxed, f1_score, math_equal
from orchenv.parsing import extract_tag, has_open_tag
from orchenv.pool import AgentPool, AgentSpec, CallContext, Message, make_pool
from orchenv.seeding import stable_uniform
from orchenv.tasks import ListTaskSource, Task, TaskSource, make_task_source

CONTROLLER_SYSTEM = """\
You orchestrate an external language model (the executor) to answer a question. You never \
talk to the user; you talk to the executor, giving it a role and a request each turn, and \
finally you give the answer yourself.

How to proceed:
1. First turn: explain the question briefly (no deep reasoning) and hand it to the executor:
   <think>short note, at most 80 words</think>
   <interaction_prompt>{{"name": "prompt_dynamic", "arguments": {{"prompt": "...", \
"agent_role": "..."}}}}</interaction_prompt>
   "agent_role" is any role you choose for the executor (e.g. a domain expert, a planner, \
a verifier); "prompt" is your request. The executor does not see the question unless you \
put it in the prompt; it does see your earlier requests and its earlier replies.
2. Later turns: reflect on the executor's last reply and send a new request that builds on \
it (outline -> details -> refine -> check); do not repeat yourself:
   <think>your reasoning about the reply and the question</think>
   <interaction_prompt>{{"name": "prompt_dynamic", "arguments": {{...}}}}</interaction_prompt>
3. When the answer is ready:
   <think>final reasoning</think>
   <answer>the final answer only</answer>
You have at most {max_turns} turns; an episode without an <answer> scores nothing."""

EXECUTOR_SYSTEM = (
    ROLE_PREFIX + "{role}\n"
    "Read everything you are given (the earlier exchanges and the current request) and help "
    "complete the task or answer the question. Put a final answer, if you give one, in "
    "\\boxed{{...}}."
)

CALL_FORMAT = (
    '<interaction_prompt>{"name": "prompt_dynamic", "arguments": {"prompt": "...", '
    '"agent_role": "..."}}</interaction_prompt> (JSON inside the tags), or <answer>...</answer>'
)

#: roles demo_action picks from (generic, domain-fitting, mismatched, empty)
DEMO_ROLES = (
    "assistant",
    "math solver",
    "careful mathematician",
    "geography researcher",
    "economics expert",
    "linguist",
    "verifier",
    "",
)

DEFAULT_EXECUTOR = "executor"


def orchmas_pool(*, seed: int = 0, accuracy: float = 0.6, **backend_kwargs: float) -> AgentPool:
    """The default pool: one executor, Qwen2.5-7B-Instruct, on the role-aware simulated backend.

    The paper's executor is GPT-OSS-120B (section 4.1); orchenv's default is a
    7B instruct model so that the role and request matter (calibration accuracy
    0.6 for a one-shot call with a generic role). Built in code rather than as a
    preset JSON because the backend is not in ``orchenv.pool.BACKENDS``.
    """
    from orchenv.pricing import price_for

    price = price_for("qwen2.5-7b-instruct")
    spec = AgentSpec(
        name=DEFAULT_EXECUTOR,
        model="Qwen/Qwen2.5-7B-Instruct",
        tier=0,
        price_prompt=price.prompt,
        price_completion=price.completion,
        backend=BACKEND_NAME,
        calibration={"accuracy": accuracy, "mean_completion_tokens": 250, "tokens_per_second": 120},
    )
    backend = RoleAwareExecutorBackend(seed=seed, **backend_kwargs)
    return AgentPool([spec], {BACKEND_NAME: backend}, name="orchmas")


# -- the short-answer QA source ---------------------------------------------------
_SYLLABLES = (
    "ar", "bel", "cor", "dan", "el", "fir", "gal", "hes", "ir", "jor", "kal", "lum", "mar",
    "nor", "os", "pel", "quin", "ros", "sel", "tor", "ul", "vak", "wen", "yor", "zem",
)  # fmt: skip
_CAPITAL_FORMS = ("{}", "Port {}", "New {}", "{} City", "San {}", "{}grad")
_LANG_SUFFIX = ("ish", "ic", "ese", "an")
_CURRENCY = ("crown", "mark", "dinar", "florin", "real", "lira", "shilling", "peso")


def _name(rng: np.random.Generator, n: int) -> str:
    return "".join(str(rng.choice(_SYLLABLES)) for _ in range(n)).capitalize()


def orchmas_qa_source(*, n_countries: int = 120, seed: int = 0) -> ListTaskSource:
    """Short-answer questions over a synthetic knowledge base of made-up countries.

    Each country has a capital (some multi-word, e.g. "Port Elra"), a currency
    ("Velan crown") and a language ("Velanish"). Questions: "What is the capital
    of X?" (domain geography), "Which currency is used in X?" (economics),
    "What language is mainly spoken in X?" (linguistics). ``meta`` holds
    ``type``/``domain``, ``difficulty`` (hash-uniform), and ``distractors``
    (the same attribute of other countries, for wrong simulated replies).
    Countries 0..79% go to "train", the rest to "test".
    """
    rng = np.random.default_rng(seed)
    names: list[str] = []
    while len(names) < n_countries:
        name = _name(rng, int(rng.integers(2, 4)))
        if name not in names:
            names.append(name)
    kb = []
    for name in names:
        capital = str(rng.choice(_CAPITAL_FORMS)).format(_name(rng, 2))
        currency = f"{name[:4]}an {rng.choice(_CURRENCY)}"
        language = name[:5] + str(rng.choice(_LANG_SUFFIX))
        kb.append({"country": name, "capital": capital, "currency": currency, "language": language})
    questions = (
        ("capital", "geography", "What is the capital of {}?"),
        ("currency", "economics", "Which currency is used in {}?"),
        ("language", "linguistics", "What language is mainly spoken in {}?"),
    )
    cut = int(0.8 * n_countries)
    splits: dict[str, list[Task]] = {"train": [], "test": []}
    for i, row in enumerate(kb):
        split = "train" if i < cut else "test"
        for attr, domain, template in questions:
            others = [kb[(i + k) % len(kb)][attr] for k in (1, 7, 13)]
            task_id = f"orchmas-qa/{split}/{row['country']}/{attr}"
            splits[split].append(
                Task(
                    id=task_id,
                    prompt=template.format(row["country"]),
                    answers=(row[attr],),
                    meta={
                        "type": domain,
                        "domain": domain,
                        "difficulty": stable_uniform("orchmas-qa", seed, task_id),
                        "distractors": tuple(others),
                        "source": "orchmas-qa",
                    },
                )
            )
    return ListTaskSource("orchmas-qa", splits)


# -- parsing ------------------------------------------------------------------------
_TAG_RE = re.compile(r"<(/?)(think|interaction_prompt|answer)\s*>", re.IGNORECASE)


def parse_call(text: str) -> tuple[dict[str, str] | None, str | None]:
    """``({"prompt", "agent_role"}, None)`` from the call tag, else ``(None, error)``."""
    body = extract_tag(text, "interaction_prompt")
    if body is None:
        if has_open_tag(text, "interaction_prompt"):
            return None, f"<interaction_prompt> is not closed. Expected {CALL_FORMAT}."
        return None, f"no <interaction_prompt> and no <answer> found. Expected {CALL_FORMAT}."
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return (
            None,
            f"the <interaction_prompt> body is not valid JSON ({exc}). Expected {CALL_FORMAT}.",
        )
    if not isinstance(data, dict):
        return None, f"the <interaction_prompt> JSON must be an object. Expected {CALL_FORMAT}."
    if data.get("name") != "prompt_dynamic":
        return (
            None,
            f'"name" must be "prompt_dynamic", got {data.get("name")!r:.60}. '
            f"Expected {CALL_FORMAT}.",
        )
    args = data.get("arguments")
    if not isinstance(args, dict):
        return None, f'"arguments" must be an object. Expected {CALL_FORMAT}.'
    prompt, role = args.get("prompt"), args.get("agent_role")
    if not isinstance(prompt, str) or not prompt.strip():
        return None, f'"arguments.prompt" must be a non-empty string. Expected {CALL_FORMAT}.'
    if not isinstance(role, str):
        return None, f'"arguments.agent_role" must be a string. Expected {CALL_FORMAT}.'
    return {"prompt": prompt.strip(), "agent_role": " ".join(role.split())}, None


def _answer_format(text: str) -> tuple[bool, bool, bool]:
    """(B_m, B_v, I_c) of a final turn (see ``OrchMASEnv`` ## Rewards)."""
    tags = [(m.group(1), m.group(2).lower()) for m in _TAG_RE.finditer(text)]
    think, answer = extract_tag(text, "think"), extract_tag(text, "answer")
    count = {t: sum(1 for c, n in tags if n == t and not c) for t in ("think", "answer")}
    closes = {t: sum(1 for c, n in tags if n == t and c) for t in ("think", "answer")}
    b_m = (
        think is not None
        and answer is not None
        and count == {"think": 1, "answer": 1}
        and closes == count
        and not any(n == "interaction_prompt" for _, n in tags)
    )
    b_v = answer is not None and bool(answer.strip()) and len(answer) <= 500
    outside = re.sub(
        r"<think\s*>.*?</think\s*>|<answer\s*>.*?</answer\s*>", "", text, flags=re.S | re.I
    )
    i_c = bool(think) and not outside.strip()
    return b_m, b_v, i_c


class OrchMASEnv(OrchestrationEnv):
    """Give an executor LLM a free-form role and request each turn, then answer.

    ## Description
    OrchMAS (seed 002): an orchestrator coordinates an external executor LLM
    by generating, at every turn, a role for it (free text, learned: "math
    solver", "verifier", "researcher", ...) and a request. The executor sees a
    system prompt built from the role (Table 2(b), reworded), the earlier
    request/reply pairs as chat history, and the new request; its reply is
    appended to the orchestrator's history inside
    ``<interaction_response>...</interaction_response>``. The orchestrator
    stops by writing the final answer. Tasks: the embedded procedural math
    source (default) or ``task_source="orchmas-qa"`` (short-answer questions
    over a synthetic knowledge base, scored by token F1).

    ## Action format
    Table 2(a). A call:
    ``<think>...</think><interaction_prompt>{"name": "prompt_dynamic",
    "arguments": {"prompt": "...", "agent_role": "..."}}</interaction_prompt>``;
    the final answer: ``<think>...</think><answer>...</answer>``. Any text with
    an ``<answer>...</answer>`` ends the episode (its format is scored). Without
    one, invalid JSON, a wrong ``name``, a missing or empty ``prompt`` or a
    non-string ``agent_role`` make the action invalid: nobody is called, the
    turn is used, ``info["parse_error"]`` says what was expected and the next
    observation repeats it. An empty role is allowed (the executor is called
    with a blank role) but earns no format credit.

    ## Observation
    The orchestrator prompt as one string: instructions, the question, and the
    history of earlier turns (think, request with its role, executor reply);
    ``info["messages"]`` holds the same as chat messages. ``info["phase"]`` is
    always ``"act"``; ``info["valid_agents"]`` is ``[executor]``.

    ## Rewards
    Eq. (10)-(13), reconstructed. Format reward
    ``R_fmt = min(kappa, alpha * sum_t Lambda_t + beta * B_m + gamma * B_v + delta * I_c)``
    with Lambda_t = 1 for an interaction turn with non-empty ``<think>``, valid
    call JSON and a non-empty role; B_m = the final turn has exactly one
    balanced ``<think>`` and one ``<answer>`` block (no interaction tag); B_v =
    the answer is non-empty; I_c = non-empty think and no text outside the tags.
    Precision ``R_prec = max_ref F1(Std(answer), Std(ref))`` (token F1 after
    ``normalize_text``; for math tasks 1/0 by ``math_equal``). Gated aggregate
    ``R = -kappa + R_fmt + [R_fmt == kappa] * R_prec``. Defaults (assumptions;
    the paper gives no values): kappa = 0.4, alpha = beta = gamma = delta = 0.1,
    so full format credit needs at least one well-formed executor call and a
    clean final turn. The return is paid out per step so that it sums to R:
    each turn pays ``-kappa / max_turns`` plus the increase of the capped
    format reward; the final step adds the unpaid rest of ``-kappa`` and the
    gated precision. A malformed turn therefore gets ``-kappa / max_turns``.

    ## Episode end
    Terminated by an answer, or after ``max_turns`` turns (default 5, section
    4.1) without one (score 0). ``info`` then holds ``final_answer``,
    ``correct`` (EM for QA, math equivalence for math), ``em``, ``f1``,
    ``score`` (= f1), ``format_reward``, ``gate``, ``turns``.

    ## Arguments
    See ``__init__``. ``pool="orchmas"`` (default) builds the one-executor pool
    in code (``orchmas_pool``: Qwen2.5-7B-Instruct, calibration accuracy 0.6,
    ``RoleAwareExecutorBackend`` whose accuracy rises with a domain-fitting
    role and a verification request, falls with an empty role); another preset
    name or an ``AgentPool`` is accepted, and ``executor`` names the agent to
    call (default: the pool's strongest).

    ## Version history
    - v0: initial version.
    """

    def __init__(
        self,
        *,
        pool: str | AgentPool = "orchmas",
        executor: str | None = None,
        task_source: str | TaskSource = "procedural-math",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "train",
        max_turns: int = 5,
        kappa: float = 0.4,
        alpha: float = 0.1,
        beta: float = 0.1,
        gamma: float = 0.1,
        delta: float = 0.1,
        executor_accuracy: float = 0.6,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_reply_chars: int = 4000,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if kappa <= 0:
            raise ConfigError(f"kappa must be > 0, got {kappa}")
        if min(alpha, beta, gamma, delta) < 0:
            raise ConfigError("alpha, beta, gamma and delta must be >= 0")
        if not 0.0 < executor_accuracy < 1.0:
            raise ConfigError(f"executor_accuracy must lie in (0, 1), got {executor_accuracy}")
        self._pool_arg = pool
        self._executor_arg = executor
        self._task_source_arg = task_source
        self._task_source_kwargs = dict(task_source_kwargs or {})
        self._backend_kwargs = dict(backend_kwargs or {})
        self.split = split
        self.max_turns = max_turns
        self.kappa, self.alpha, self.beta, self.gamma, self.delta = kappa, alpha, beta, gamma, delta
        self.executor_accuracy = executor_accuracy
        self.max_reply_chars = max_reply_chars
        self.executor: str | None = None
        # episode state
        self.task: Task | None = None
        self.history: list[dict[str, Any]] = []  # one entry per turn
        self.format_sum = 0.0  # uncapped alpha * sum Lambda_t (+ final-turn terms)
        self.paid = 0.0  # return paid so far
        self.draft_agent: str | None = None  # no draft-verification phase in this env
        self._notice = ""

    # -- lazily built collaborators (no I/O in __init__) -----------------------------
    def _ensure_built(self) -> None:
        if self._pool is None:
            if isinstance(self._pool_arg, str) and self._pool_arg == "orchmas":
                self._pool = orchmas_pool(accuracy=self.executor_accuracy, **self._backend_kwargs)
            else:
                self._pool = make_pool(self._pool_arg, backend_kwargs=self._backend_kwargs)
            names = self._pool.names
            if self._executor_arg is not None and self._executor_arg not in names:
                raise UnknownNameError("executor agent", self._executor_arg, names)
            self.executor = self._executor_arg or self._pool.strongest()
        if self._task_source is None:
            self._task_source = make_task_source(self._task_source_arg, **self._task_source_kwargs)
            self._task_source.check_split(self.split)

    @property
    def task_source(self) -> TaskSource:
        self._ensure_built()
        return self._task_source

    def valid_agents(self) -> list[str]:
        return [self.executor] if self._pool is not None and self.executor else []

    # -- prompts ----------------------------------------------------------------------
    def _controller_messages(self) -> list[Message]:
        assert self.task is not None
        parts = [f"Question:\n{self.task.prompt}"]
        for i, entry in enumerate(self.history, 1):
            if entry["kind"] == "call":
                parts.append(
                    f"Turn {i}:\n<think>{entry['think'] or ''}</think>\n"
                    f"Request to the executor (role: {entry['role'] or '(none)'}):\n"
                    f"{entry['prompt']}\n"
                    f"<interaction_response>{entry['reply'][: self.max_reply_chars]}"
                    "</interaction_response>"
                )
            elif entry["kind"] == "invalid":
                parts.append(f"Turn {i}: your reply could not be used ({entry['error']})")
            else:
                parts.append(f"Turn {i}: final answer given: {entry['answer']}")
        parts.append(f"(Turn {self.turn + 1} of {self.max_turns}.)")
        if self._notice:
            parts.append(f"Your previous reply could not be used: {self._notice}")
        return [
            {"role": "system", "content": CONTROLLER_SYSTEM.format(max_turns=self.max_turns)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _executor_messages(self, role: str, prompt: str) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": EXECUTOR_SYSTEM.format(role=role)}]
        for entry in self.history:
            if entry["kind"] == "call":
                messages.append({"role": "user", "content": entry["prompt"]})
                messages.append({"role": "assistant", "content": entry["reply"]})
        messages.append({"role": "user", "content": prompt})
        return messages

    def _observation(self) -> tuple[str, dict[str, Any]]:
        messages = self._controller_messages()
        obs = self.render_messages(messages)
        return obs, {"messages": messages, "phase": "act"}

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        self.task = self.pick_task(options)
        self.history = []
        self.format_sum = 0.0
        self.paid = 0.0
        self._notice = ""
        obs, extra = self._observation()
        extra["task_id"] = self.task.id
        extra["privileged"] = {"domain": task_domain(self.task)}
        return obs, extra

    def _capped(self) -> float:
        return min(self.kappa, self.format_sum)

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None and self.executor is not None
        self.turn += 1
        self.transcript.append({"turn": self.turn, "role": "controller", "text": action})
        extra: dict[str, Any] = {"task_id": self.task.id}
        privileged: dict[str, Any] = {"domain": task_domain(self.task)}
        before = self._capped()
        answer = extract_tag(action, "answer")
        think = extract_tag(action, "think")
        terminated = False
        precision = 0.0
        if answer is not None:
            b_m, b_v, i_c = _answer_format(action)
            self.format_sum += self.beta * b_m + self.gamma * b_v + self.delta * i_c
            extra["format_checks"] = {"B_m": b_m, "B_v": b_v, "I_c": i_c}
            self.history.append({"kind": "answer", "answer": answer})
            self._notice = ""
            terminated = True
        else:
            call, error = parse_call(action)
            if call is None:
                self._notice = error or "malformed reply."
                self.history.append({"kind": "invalid", "error": self._notice})
                extra.update(invalid_action=True, parse_error=self._notice)
            else:
                self._notice = ""
                well_formed = bool(think) and bool(call["agent_role"])
                self.format_sum += self.alpha * well_formed
                extra["format_checks"] = {"Lambda": well_formed}
                messages = self._executor_messages(call["agent_role"], call["prompt"])
                last = next(
                    (h["reply"] for h in reversed(self.history) if h["kind"] == "call"), None
                )
                context = CallContext(task=self.task, turn=self.turn, draft=last)
                completion = self.call_agent(self.executor, messages, context)
                self.history.append(
                    {
                        "kind": "call",
                        "think": think,
                        "role": call["agent_role"],
                        "prompt": call["prompt"],
                        "reply": completion.text,
                    }
                )
                extra.update(
                    called_agent=self.executor,
                    agent_role=call["agent_role"],
                    latency_s=completion.latency_s,
                )
                privileged["executor_correct"] = self._grade(extract_boxed(completion.text))[0]
        if self.turn >= self.max_turns:
            terminated = True
        reward = -self.kappa / self.max_turns + (self._capped() - before)
        components = {"format": self._capped() - before, "base": -self.kappa / self.max_turns}
        if terminated:
            rest = -self.kappa * (self.max_turns - self.turn) / self.max_turns
            gate = self._capped() >= self.kappa - 1e-12
            em, f1 = self._grade(answer) if answer is not None else (False, 0.0)
            precision = f1 if gate else 0.0
            reward += rest + precision
            components.update(base=components["base"] + rest, precision=precision)
            extra.update(
                final_answer=answer,
                correct=bool(em),
                em=float(em),
                f1=float(f1),
                score=float(f1),
                format_reward=self._capped(),
                gate=bool(gate),
                turns=self.turn,
            )
        self.paid += reward
        extra["reward_components"] = components
        extra["privileged"] = privileged
        obs, obs_extra = self._observation()
        extra.update(obs_extra)
        return obs, reward, terminated, False, extra

    def _grade(self, answer: str | None) -> tuple[bool, float]:
        """(exact match, precision F1) of an answer against the task's references."""
        assert self.task is not None
        if answer is None:
            return False, 0.0
        if task_domain(self.task) == "math":
            candidate = extract_boxed(answer) or answer
            ok = any(math_equal(ref, candidate) for ref in self.task.answers)
            return ok, float(ok)
        em = any(exact_match(ref, answer) for ref in self.task.answers)
        return em, max((f1_score(ref, answer) for ref in self.task.answers), default=0.0)

    # -- helpers for controllers and tests ------------------------------------------------
    def demo_action(self, rng: np.random.Generator) -> str:
        """A valid action for the current state: a call with a random role, or an answer.

        Answers with the last executor reply's boxed answer when there is one
        (otherwise a guess); calls the executor with probability 0.6 while turns
        remain after this one.
        """
        assert self.task is not None
        last = next((h["reply"] for h in reversed(self.history) if h["kind"] == "call"), None)
        if self.turn + 1 < self.max_turns and (last is None or rng.random() < 0.6):
            role = DEMO_ROLES[int(rng.integers(len(DEMO_ROLES)))]
            request = (
                self.task.prompt if last is None else "Check the previous answer and verify it."
            )
            payload = {
                "name": "prompt_dynamic",
                "arguments": {"prompt": request, "agent_role": role},
            }
            body = json.dumps(payload)
            return (
                f"<think>Ask the executor.</think><interaction_prompt>{body}</interaction_prompt>"
            )
        guess = (extract_boxed(last) if last else None) or "unknown"
        return f"<think>Use the executor's answer.</think><answer>{guess}</answer>"
