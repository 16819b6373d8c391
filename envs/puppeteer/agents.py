"""Puppeteer's agents: (model, reasoning pattern or tool) pairs, their prompts, and the
simulated models behind them (seed 003 section 2 and appendix B).

An agent is ``MODEL:PATTERN`` (a reasoning agent: ``PATTERNS``) or ``MODEL:TOOL`` (a tool
agent: ``TOOLS``). Every agent is driven by its model: a reasoning agent writes reasoning
and a ``FINAL ANSWER:``; a tool agent writes its own tool call (``{"action": TOOL,
"parameter": ...}``, appendix B's tool prompts), which the env parses and runs. The pattern
and tool prompts below restate appendix B's templates in our own words.

``PatternBackend`` simulates the models (``revision`` holds the dynamics, ``outputs`` the
texts, ``presets`` the calibrated models); live pools answer the same prompts for real.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from orchenv.backends.simulated import estimate_prompt_tokens
from orchenv.envs.puppeteer import outputs, revision
from orchenv.envs.puppeteer.presets import MODELS, PATTERN_TOKEN_FACTOR, PRESET_MODELS
from orchenv.envs.puppeteer.tasks import extract_answer, score_answer
from orchenv.error import UnknownNameError
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task

#: appendix B reasoning patterns
PATTERNS: tuple[str, ...] = (
    "planning", "reasoning", "critique", "reflect", "question", "summarize", "conclude", "modify",
)  # fmt: skip
#: tool-use agents (appendix B's offline subset: web browsing and Bing/arXiv are out of scope;
#: ``search`` is the offline Wikipedia-style corpus)
TOOLS: tuple[str, ...] = ("run_python", "read_file", "search")
ANSWERING = ("reasoning", "question")
REVISING = ("critique", "reflect", "modify")
RESTATING = ("summarize", "conclude")

#: appendix B's role prompts, in our words
ROLES: dict[str, str] = {
    "planning": "You are a planner: you break the task into steps and lay out a plan.",
    "reasoning": "You are a reasoner: you carry the solution forward step by step.",
    "critique": "You are a critic: you look for the flaw in the previous reasoning and say "
    "exactly where it is.",
    "reflect": "You reflect on the whole trajectory: why might it have failed, and what should "
    "change.",
    "question": "You pose the next sub-question the solution needs and answer it.",
    "summarize": "You summarise the intermediate results so far.",
    "conclude": "You draw the team's final conclusion from the trajectory.",
    "modify": "You correct errors: you find what is wrong in the previous output and fix it.",
    "run_python": "You are a Python expert: you write a program whose printed output helps "
    "solve the task.",
    "read_file": "You handle files: you pick the task file worth reading.",
    "search": "You are a search expert: you write a query for the offline encyclopedia.",
}

#: appendix B's action prompts, in our words
ACTIONS: dict[str, str] = {
    "planning": "Decompose the task and plan the next steps. Write your plan after "
    "'REASONING RESULT:'. Do not give a final answer.",
    "reasoning": "Continue the reasoning towards the answer, following the path so far. Write "
    "it after 'REASONING RESULT:' and end with 'FINAL ANSWER: <answer>'.",
    "critique": "Critique the team's current answer: check whether it is plausible and point "
    "at the step, number, option or line that is wrong, if any. Write the critique after "
    "'REASONING RESULT:' and end with 'FINAL ANSWER: <answer>' (kept or corrected).",
    "reflect": "Assume the current attempt may have failed. Diagnose the likely cause in a few "
    "sentences and outline a better plan after 'REASONING RESULT:', then give "
    "'FINAL ANSWER: <answer>'.",
    "question": "Ask the next sub-question the solution needs and answer it with evidence. Write "
    "it after 'REASONING RESULT:' and end with 'FINAL ANSWER: <answer>'.",
    "summarize": "Summarise the reasoning so far and the intermediate conclusions after "
    "'REASONING RESULT:', then give 'FINAL ANSWER: <answer>'.",
    "conclude": "Conclude the task: state the team's final answer. Write 'REASONING RESULT:' "
    "with a one-line justification, then 'FINAL ANSWER: <answer>'.",
    "modify": "Find the errors in the previous output (use the latest critique), say which "
    "part was wrong, why, and what is right, after 'REASONING RESULT:'; then give the corrected "
    "'FINAL ANSWER: <answer>'.",
    "run_python": "Write standard-library Python that computes what the task needs and prints "
    'it. Reply with JSON only: {"action": "run_python", "parameter": "<code>"}.',
    "read_file": "Name the task file to read. Reply with JSON only: "
    '{"action": "read_file", "parameter": "<file name>"}.',
    "search": "Write a short query (a concept, name or term) for the encyclopedia. Reply with "
    'JSON only: {"action": "search", "parameter": "<query>"}.',
}

#: what a ``FINAL ANSWER`` is, per task kind
ANSWER_FORMS: dict[str, str] = {
    "gsm-hard": "The answer is a number.",
    "multiple-choice": "The answer is the letter of one option.",
    "commongen": "The answer is one sentence that uses every concept.",
    "srdd": "The answer is the complete program, in a ```python fenced block after "
    "'FINAL ANSWER:'.",
}

MAX_TOOL_ARGUMENT_CHARS = 20_000
MAX_ANSWER_CHARS = 20_000


def agent_messages(
    kind: str,
    pattern: str,
    problem: str,
    history: Sequence[tuple[str, str]],
    *,
    draft: str | None = None,
    branch: int = 0,
    width: int = 1,
) -> list[Message]:
    """One agent's messages: ``Pattern: X`` then its role and action prompt (system; the
    first line is how ``PatternBackend`` learns the pattern), then the task, this branch's
    trajectory and its current answer (user)."""
    system = f"Pattern: {pattern}\n{ROLES[pattern]}\n{ACTIONS[pattern]}"
    if pattern not in TOOLS:
        system += "\n" + ANSWER_FORMS.get(kind, "")
    if width > 1:
        system += f"\nBranch {branch + 1} of {width} (parallel exploration)."
    lines = [f"{agent}: {output}" for agent, output in history]
    user = (
        f"Task:\n{problem}\n\nTrajectory so far:\n"
        + ("\n".join(lines) or "-")
        + f"\n\nCurrent answer: {draft if draft is not None else '(none)'}"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def pattern_of(messages: Sequence[Message]) -> str:
    """The pattern named on the first system message's first line (``reasoning`` if none)."""
    for message in messages:
        if message.get("role") == "system":
            first = message.get("content", "").split("\n", 1)[0]
            if first.startswith("Pattern: "):
                return first[len("Pattern: ") :].strip()
            break
    return "reasoning"


# -- reading replies (live and simulated alike) ----------------------------------------------
_FINAL = "FINAL ANSWER:"


def reply_answer(kind: str, text: str) -> str | None:
    """The answer of an agent's reply: what follows the last ``FINAL ANSWER:`` (SRDD: its
    fenced code, else the rest), else ``tasks.extract_answer`` on the whole reply."""
    if not isinstance(text, str) or not text:
        return None
    text = text[-MAX_ANSWER_CHARS:]
    at = text.upper().rfind(_FINAL)
    if at >= 0:
        rest = text[at + len(_FINAL) :].strip()
        if kind == "srdd":
            return extract_answer(kind, rest) or None
        line = next((ln.strip() for ln in rest.splitlines() if ln.strip()), "")
        line = line.strip("[]").strip()
        if kind == "multiple-choice":
            return extract_answer(kind, line) or extract_answer(kind, rest)
        return line or None
    return extract_answer(kind, text)


def reply_reasoning(text: str) -> str:
    """The part of a reply before its last ``FINAL ANSWER:`` (a critique's content)."""
    at = text.upper().rfind(_FINAL)
    body = text if at < 0 else text[:at]
    return body.replace("REASONING RESULT:", "").strip()[: revision.MAX_CRITIQUE_CHARS]


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def parse_tool_call(tool: str, text: str) -> str | None:
    """The argument of the tool call an agent wrote (None: none found). Accepts appendix B's
    JSON (``{"action": ..., "parameter": ...}``), a fenced code block (``run_python``) or a
    bare single line (``read_file``, ``search``). Bounded: reads at most
    ``MAX_TOOL_ARGUMENT_CHARS * 2`` characters."""
    if not isinstance(text, str):
        return None
    text = text[: MAX_TOOL_ARGUMENT_CHARS * 2].strip()
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            data = json.loads(text[start : end + 1])
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            value = data.get("parameter", data.get("code", data.get("query", data.get("path"))))
            if isinstance(value, str) and value.strip():
                return value[:MAX_TOOL_ARGUMENT_CHARS]
    if tool == "run_python":
        fence = _FENCE.search(text)
        return fence.group(1)[:MAX_TOOL_ARGUMENT_CHARS] if fence else None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:500] if len(lines) == 1 else None


# -- the simulated models ------------------------------------------------------------------
def tool_call_text(tool: str, argument: str) -> str:
    return json.dumps({"action": tool, "parameter": argument})


class PatternBackend:
    """Simulated Puppeteer agents (``revision`` documents the dynamics).

    Reads the pattern from the system prompt (``Pattern: X``), the task and the branch's
    current answer from ``CallContext`` (``task``, ``draft``) and the env's judgement of the
    trajectory from ``CallContext.guidance`` (tool evidence and plans, a logit); ``modify``
    reads the branch's latest critique from ``CallContext.feedback`` and judges it
    (``revision.judge_critique``). Draws are deterministic in (seed, task, agent, pattern, ``context.turn``); width
    branches differ through ``turn`` (``turn + 1000 * branch``). Agent calibration keys:
    ``quality.<family>`` (else ``accuracy`` for every family), ``capability``,
    ``code_skill``, ``tokens``.
    """

    def __init__(self, seed: int = 0, levels: dict[str, tuple[float, float]] | None = None):
        from orchenv.envs.puppeteer.presets import SCORE_LEVELS

        self.seed = seed
        self.levels = dict(SCORE_LEVELS if levels is None else levels)

    # profile of an agent ------------------------------------------------------------------
    @staticmethod
    def quality(spec: AgentSpec, family: str) -> float:
        cal = spec.calibration
        return float(cal.get(f"quality.{family}", cal.get("accuracy", 0.5)))

    @staticmethod
    def capability(spec: AgentSpec) -> float:
        return float(spec.calibration.get("capability", spec.calibration.get("accuracy", 0.5)))

    def right_probability(self, spec: AgentSpec, family: str, guidance: float = 0.0) -> float:
        """The chance an answering call (``reasoning``) is right: the calibrated quality,
        mapped to the reference-output chance, shifted by ``guidance``."""
        base = revision.right_probability(self.quality(spec, family), self.levels.get(family))
        return revision.shifted(base, guidance)

    def is_right(self, task: Task, draft: str | None) -> bool:
        if not draft:
            return False
        family = outputs.family_of(task)
        if family in ("gsm_hard", "mmlu_pro"):
            return score_answer(outputs.kind_of(task), task, draft) == 1.0
        return draft.strip() == outputs.right_output(task).strip()

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = context.task
        assert task is not None
        pattern = pattern_of(messages)
        key = (self.seed, task.id, spec.name, pattern, context.turn)
        if pattern in TOOLS:
            text = self._tool_call(spec, task, pattern, key)
        else:
            text = self._reasoning(spec, task, pattern, context, key)
        tokens = int(
            float(spec.calibration.get("tokens", 400)) * PATTERN_TOKEN_FACTOR.get(pattern, 1.0)
        )
        return spec.completion(
            text,
            estimate_prompt_tokens(messages),
            max(1, tokens),
            latency_s=tokens / 100.0,
            token_source="estimate",
            # privileged (never shown to the controller): whether the reply's answer is right,
            # read by the audit's tell meter; a tool call or a plan writes no answer
            meta={"pattern": pattern}
            if pattern in TOOLS or pattern == "planning"
            else {
                "pattern": pattern,
                "correct": self.is_right(task, reply_answer(outputs.kind_of(task), text)),
            },
        )

    def _tool_call(self, spec: AgentSpec, task: Task, tool: str, key: tuple) -> str:
        family = outputs.family_of(task)
        u = stable_uniform("tool", *key)
        if tool == "run_python":
            skill = float(spec.calibration.get("code_skill", 0.5))
            p_right = skill * revision.PROGRAM_FIT.get(family, 0.5)
            right = revision.program_hit(
                p_right,
                stable_uniform("program", self.seed, task.id),
                stable_uniform("program", self.seed, task.id, spec.name),
                u,
            )
            code = outputs.reference_program(task) if right else outputs.flawed_program(task, *key)
            return tool_call_text(tool, code)
        capability = self.capability(spec)
        if tool == "search":
            good = u < revision.QUERY_BASE + revision.QUERY_SLOPE * capability
            return tool_call_text(tool, outputs.good_query(task) if good else outputs.POOR_QUERY)
        data = outputs.data_file(task)
        path = data if data is not None and u < revision.PATH_RIGHT else "problem.txt"
        return tool_call_text(tool, path)

    def _reasoning(
        self, spec: AgentSpec, task: Task, pattern: str, context: CallContext, key: tuple
    ) -> str:
        family = outputs.family_of(task)
        draft = context.draft
        guidance = context.guidance
        capability = self.capability(spec)
        u = stable_uniform("call", *key)
        params = revision.REVISION[family]
        critique = ""
        if pattern == "planning":
            return f"REASONING RESULT: [{pattern}] 1. Read the task. 2. Work out each quantity."
        if not draft or pattern in ANSWERING:
            delta = guidance + {
                "question": revision.QUESTION_LOGIT,
                "summarize": revision.RESTATE_LOGIT,
                "conclude": revision.RESTATE_LOGIT,
            }.get(pattern, 0.0 if pattern in ANSWERING else revision.NO_DRAFT_LOGIT)
            p = self.right_probability(spec, family, delta)
            right = revision.correlated_hit(p, stable_uniform("task", self.seed, task.id), u)
            answer = outputs.right_output(task) if right else outputs.wrong_output(task, *key)
            return self._text(pattern, "Working through the task.", answer, family)
        was_right = self.is_right(task, draft)
        if pattern in RESTATING:
            right = u < (revision.RESTATE_KEEP if was_right else revision.RESTATE_FIX)
        else:
            reference = outputs.right_output(task) if family == "srdd" else ""
            if pattern == "modify":  # reads the latest critique in its trajectory
                judged = revision.judge_critique(
                    family, task, draft, context.feedback, was_right, reference
                )
            else:  # critique / reflect write their own critique first
                v = stable_uniform("critique", *key)
                if was_right:
                    judged = "misleading" if v < params.false_alarm else "generic"
                else:
                    p_spec = revision.specific_probability(family, capability, pattern)
                    judged = "specific" if v < p_spec else "generic"
                critique = revision.written_critique(family, task, draft, judged, reference)
            alarm = judged == "misleading"
            if was_right:
                right = u < (params.keep_after_alarm if alarm else params.keep)
            else:
                fixed = revision.fix_probability(family, capability, judged, guidance)
                task_u = stable_uniform("task", self.seed, task.id)
                right = revision.revision_hit(fixed, task_u, u)
        if right == was_right:
            answer = draft
        else:
            answer = outputs.right_output(task) if right else outputs.wrong_output(task, *key)
        return self._text(pattern, critique or "Revising the draft.", answer, family)

    @staticmethod
    def _text(pattern: str, reasoning: str, answer: str, family: str) -> str:
        if family == "srdd":
            return f"REASONING RESULT: [{pattern}] {reasoning}\nFINAL ANSWER:\n```python\n{answer}\n```"
        return f"REASONING RESULT: [{pattern}] {reasoning}\nFINAL ANSWER: {answer}"


def model_spec(name: str, *, rank: int, n: int) -> AgentSpec:
    """The simulated ``AgentSpec`` of a preset model (``presets.MODELS``)."""
    profile = MODELS[name]
    calibration = {f"quality.{f}": q for f, q in profile.quality.items()}
    calibration.update(
        capability=profile.capability, code_skill=profile.code_skill, tokens=profile.tokens
    )
    return AgentSpec(
        name=name,
        model=name,
        tier=max(0, n - 1 - rank),
        price_prompt=profile.price,
        price_completion=profile.price,
        backend="puppeteer-pattern",
        calibration=calibration,
    )


def puppeteer_pool(preset: str = "mimas", *, seed: int = 0) -> AgentPool:
    """The simulated pool of an agent space (``presets.PRESET_MODELS``: ``mimas``,
    ``titan``, ``mimas-mono``, ``titan-mono``); tiers by capability (0 strongest)."""
    if preset not in PRESET_MODELS:
        raise UnknownNameError("puppeteer preset", preset, PRESET_MODELS)
    names = PRESET_MODELS[preset]
    order = sorted(names, key=lambda m: MODELS[m].capability)
    specs = [model_spec(m, rank=order.index(m), n=len(names)) for m in names]
    return AgentPool(specs, {"puppeteer-pattern": PatternBackend(seed)}, name=f"puppeteer-{preset}")


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-None answer (exact string match after stripping); ties go to
    the earliest."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer.strip()] = counts.get(answer.strip(), 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a.strip()] == best)
