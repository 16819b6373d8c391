"""Simulated agents: an offline, deterministic stand-in for a pool of LLMs.

Why: training and testing a controller against live models is slow, costly
and noisy. This backend reproduces what matters to a controller -- agents of
different strength whose answers are sometimes wrong, whose failures follow
task difficulty, and whose calls cost tokens -- in microseconds per call.

Outcome model (a logistic item-response model):

* a task's difficulty quantile ``z = difficulty_of(task)`` in [0, 1) maps to
  a latent difficulty ``b(z) = discrimination * logit(z)``; since z is uniform
  over a task set, ``b`` is logistic with scale ``discrimination``;
* agent ``a`` answers correctly iff
  ``theta_a + extra - b(z) + agent_noise * xi > 0``, where ``xi`` is a
  standard-logistic draw fixed by a stable hash of (seed, task id, agent) and
  ``extra`` is the request's bonus: ``context.guidance`` (the env's judgement of
  what the request says, e.g. whether a critique names the draft's wrong step)
  plus ``refinement_logit`` when a previous draft is shown;
* ``theta_a`` is solved (bisection on a numerical integral, no Monte Carlo)
  so that the expected accuracy over ``z ~ U(0, 1)`` and ``xi`` equals the
  agent's ``calibration["accuracy"]``.

Because ``b(z)`` is shared by all agents and ``xi`` is per agent with a scale
well below the spread of ``b``, a stronger agent solves nearly everything a
weaker one solves (nested skills), as seed 000's usage-constraint argument
(Appendix A.2) assumes. Outcomes depend on (seed, task, agent, whether a
draft was shown, the env's guidance logit), never on the prompt's surface
wording: a GRPO group whose rollouts take the same action sees the same outcome. The solution text's
surface form and its token count do vary with the prompt (hashed).

Text (issue 38, third pass): the task's solution writer gives the content (which steps, which
mistake, which answer: once per task for a right draft, one of ``WRONG_CONTENTS`` mistakes per
task and agent for a wrong one); ``lay_out_draft`` gives the shape (length, lines, numbering, count of numbers), drawn from
the prompt's hash without the correctness, so the draft's surface does not read the task's
difficulty (and through it the correctness) except through its mathematics.

Token counts follow the text (issue 38): ``completion_tokens`` is the written text's
length at the agent's documented rate (``completion_chars_per_token``: a preset's
``mean_completion_tokens`` spread over a reference draft of ``REFERENCE_DRAFT_CHARS``,
since the simulator writes a condensed draft standing for the whole output) or the pool's
tokenizer, times log-normal noise keyed on the prompt. No visible quantity (tokens,
latency) reads the task's difficulty or the answer's correctness except through the text.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from orchenv.backends.common import RebuiltOnCopy, require_task
from orchenv.error import ConfigError
from orchenv.grading import extract_boxed
from orchenv.pool import AgentSpec, CallContext, Completion, Message
from orchenv.registry import Registry
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task, difficulty_of

if TYPE_CHECKING:
    from orchenv.memory import TokenCounter

logger = logging.getLogger(__name__)

DEFAULT_DISCRIMINATION = 2.0
DEFAULT_AGENT_NOISE = 1.0
DEFAULT_COMPLETION_TOKENS = 400.0
DEFAULT_TOKENS_PER_SECOND = 100.0

# Latency model (simulated, never slept): time to first token, then prefill
# and decode at fixed rates. Rough figures for hosted small/medium models.
_FIRST_TOKEN_S = 0.2
_PREFILL_TOKENS_PER_S = 5000.0

# Token estimate: ~4 characters per token for English/LaTeX (the usual rule of
# thumb for BPE tokenizers) plus a few tokens of chat-template framing.
_CHARS_PER_TOKEN = 4
_MESSAGE_OVERHEAD_TOKENS = 4

#: why the simulated backends need the call's task (``require_task``)
OUTCOMES_KEYED_ON = "its outcomes are keyed on the task's id and difficulty"

# z is clipped away from 0 and 1 so logit(z) stays finite.
_Z_EPS = 1e-9

# Integration grid over t = logit(z): t is standard logistic when z ~ U(0, 1).
# The integrand is smooth and the density decays like exp(-|t|), so the
# trapezoid rule on [-40, 40] is accurate far below 1e-8.
_T_GRID = np.linspace(-40.0, 40.0, 8001)
_T_WEIGHTS = 0.25 / np.cosh(_T_GRID / 2.0) ** 2 * (_T_GRID[1] - _T_GRID[0])
_T_WEIGHTS[[0, -1]] *= 0.5

_NORMAL = NormalDist()

# One reusable PCG64 per thread, reset per call: building a fresh Generator costs
# ~6 us (SeedSequence), resetting a bit generator's state under 1 us. Module-level
# (not on the backend) so backends stay picklable.
_THREAD_RNG = threading.local()


def sigmoid(x: float) -> float:
    """The logistic function ``1 / (1 + exp(-x))``, without overflow for large ``|x|``
    (shared by the simulated agents of every env family)."""
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _text_rng(key: bytes) -> np.random.Generator:
    """This thread's Generator, reset to a PCG64 state taken from ``key`` (24 bytes).

    Deterministic in ``key``; valid until the thread's next call (callers use it
    at once and never keep it).
    """
    gen = getattr(_THREAD_RNG, "gen", None)
    if gen is None:
        gen = _THREAD_RNG.gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {
            "state": int.from_bytes(key[:16], "big"),
            "inc": int.from_bytes(key[16:24], "big") | 1,  # PCG increments must be odd
        },
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


def _check_model_params(discrimination: float, agent_noise: float) -> None:
    if not (math.isfinite(discrimination) and discrimination > 0):
        raise ConfigError(f"discrimination must be a positive number, got {discrimination!r}")
    if not (math.isfinite(agent_noise) and agent_noise > 0):
        raise ConfigError(f"agent_noise must be a positive number, got {agent_noise!r}")


def expected_accuracy(
    theta: float,
    *,
    discrimination: float = DEFAULT_DISCRIMINATION,
    agent_noise: float = DEFAULT_AGENT_NOISE,
    extra_logit: float = 0.0,
) -> float:
    """Expected accuracy of an agent with ability ``theta`` over tasks with z ~ U(0, 1).

    ``E_z[sigmoid((theta + extra_logit - discrimination * logit(z)) / agent_noise)]``,
    integrated numerically (deterministic, no sampling).
    """
    _check_model_params(discrimination, agent_noise)
    x = (theta + extra_logit - discrimination * _T_GRID) / agent_noise
    p = 0.5 * (1.0 + np.tanh(0.5 * x))
    return float(np.dot(p, _T_WEIGHTS))


@lru_cache(maxsize=4096)
def solve_ability(
    target_accuracy: float,
    *,
    discrimination: float = DEFAULT_DISCRIMINATION,
    agent_noise: float = DEFAULT_AGENT_NOISE,
) -> float:
    """The ability ``theta`` whose ``expected_accuracy`` equals ``target_accuracy``.

    Bisection (expected accuracy is increasing in theta); cached because every
    simulated call needs its agent's theta.
    """
    _check_model_params(discrimination, agent_noise)
    if not (isinstance(target_accuracy, (int, float)) and 0.0 < target_accuracy < 1.0):
        raise ConfigError(
            f"a calibration accuracy must lie strictly between 0 and 1, got {target_accuracy!r}"
        )
    lo, hi = -60.0 * discrimination, 60.0 * discrimination
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if expected_accuracy(mid, discrimination=discrimination, agent_noise=agent_noise) < (
            target_accuracy
        ):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    theta = 0.5 * (lo + hi)
    logger.debug(
        "simulated ability %.4f for accuracy %.4f (discrimination %g, agent_noise %g)",
        theta,
        target_accuracy,
        discrimination,
        agent_noise,
    )
    return theta


def estimate_tokens(text: str) -> int:
    """Token count estimate of a text: ceil(characters / 4), at least 1."""
    return max(1, -(-len(text) // _CHARS_PER_TOKEN))


def estimate_prompt_tokens(messages: Sequence[Message]) -> int:
    """Prompt token estimate: each message's text estimate plus chat-template framing."""
    total = 0
    for m in messages:
        total += (
            max(1, -(-len(m.get("content", "")) // _CHARS_PER_TOKEN)) + _MESSAGE_OVERHEAD_TOKENS
        )
    return total or 1


#: ``task.meta["solution_writer"]`` (default ``"math"``) -> ``writer(task, *, correct, rng) -> str``
#: that writes an agent's worked solution, right or wrong. Env families register theirs.
SOLUTION_WRITERS: Registry[str] = Registry("simulated solution writer")


def register_solution_writer(kind: str, writer: str | Callable[..., str]) -> None:
    """Register the worked-solution writer for tasks of ``kind`` (callable or ``"module:attr"``)."""
    SOLUTION_WRITERS.register(kind, writer)


def simulated_latency(spec: AgentSpec, prompt_tokens: int, completion_tokens: int) -> float:
    """Simulated seconds of a call (never slept): first token, then prefill and decode at
    fixed rates; decoding at the agent's ``calibration["tokens_per_second"]`` (default 100).
    """
    tps = float(spec.calibration.get("tokens_per_second", DEFAULT_TOKENS_PER_SECOND))
    return _FIRST_TOKEN_S + prompt_tokens / _PREFILL_TOKENS_PER_S + completion_tokens / tps


def simulated_completion(
    spec: AgentSpec,
    text: str,
    prompt_tokens: int,
    completion_tokens: int,
    *,
    token_source: str = "estimate",
    meta: Mapping[str, Any] | None = None,
) -> Completion:
    """A simulated agent's answer: priced by ``spec`` and timed by ``simulated_latency``."""
    return spec.completion(
        text,
        prompt_tokens,
        completion_tokens,
        latency_s=simulated_latency(spec, prompt_tokens, completion_tokens),
        token_source=token_source,
        meta=meta,
    )


class SimulatedBackend(RebuiltOnCopy):
    """Calibrated simulated agents (see the module docstring for the model).

    Args:
        seed: which "world" of outcomes: the same seed gives the same answer
            for every (task, agent, prompt); another seed redraws the
            agent-specific luck ``xi`` (accuracies stay calibrated).
        discrimination: scale of the shared task difficulty ``b(z)`` in logits.
            Larger means outcomes are driven more by the task than by the
            agent's luck: more nested skills, steeper accuracy-vs-level curves.
        agent_noise: scale of the agent-specific logistic noise ``xi``. The
            model's probability of a right answer on a task is
            ``sigmoid((theta + extra - b(z)) / agent_noise)``.
        refinement_logit: added to the agent's margin when it is shown a
            previous draft (``context.draft``) to improve.
        feedback_logit: added on top when the draft comes with any non-empty
            critique (``context.feedback``), whatever it says. Default 0: envs judge
            what a critique says and pass its worth as ``context.guidance``
            (MathRoute: ``critique_bonus``; its ``"fixed"`` mode is the earlier
            content-blind +0.25).
        token_noise: sigma of the log-normal spread of completion token counts around
            what the written text stands for (``written_tokens``): keyed on the prompt's
            hash, independent of the task's difficulty and of correctness. Default 0.1
            (it was 0.25 when it also stood for the spread of output lengths, which now
            comes from the texts themselves; at 0.25 a GPT-4.1-nano call of BudgetRoute's
            low mode went over its $0.001 budget in 0.7% of tasks, at 0.1 in none of 300).
        text_variants: how many shapes (length, lines, numbering: ``shape_draft``) an
            agent's draft of a task can take; the prompt's hash picks one, whatever the
            correctness.
        text_cache_size: how many written drafts (their content: one per task for right
            drafts, per task and agent for wrong ones) and, apart, how many laid-out texts
            to keep (two LRUs); 0 disables both. Outputs do not depend on it.
        tokenizer: the pool's tokenizer (``orchenv.memory.make_token_counter`` spec:
            ``"minilm"``, ``"hf:NAME"``, ``"file:PATH"``) that counts the written text;
            ``None`` (default): the documented per-model rate
            ``completion_chars_per_token(spec)``.

    The backend keeps no mutable state, so it is safe to share across
    threads and forked environments. It never sleeps: ``latency_s`` is a
    simulated figure for analysis.
    """

    # caches do not travel
    _fresh_on_copy = {
        "_texts": OrderedDict(),
        "_laid": OrderedDict(),
        "_counter": None,
        "_lucks": {},
        "_digest_starts": {},
    }

    def __init__(
        self,
        *,
        seed: int = 0,
        discrimination: float = DEFAULT_DISCRIMINATION,
        agent_noise: float = DEFAULT_AGENT_NOISE,
        refinement_logit: float = 0.75,
        feedback_logit: float = 0.0,
        token_noise: float = 0.1,
        text_variants: int = 8,
        text_cache_size: int = 50_000,
        tokenizer: str | None = None,
    ) -> None:
        _check_model_params(discrimination, agent_noise)
        if text_variants < 1 or text_cache_size < 0:
            raise ConfigError("text_variants must be >= 1 and text_cache_size >= 0")
        for label, value in (
            ("refinement_logit", refinement_logit),
            ("feedback_logit", feedback_logit),
        ):
            if not math.isfinite(value):
                raise ConfigError(f"{label} must be a finite number, got {value!r}")
        if not (math.isfinite(token_noise) and token_noise >= 0):
            raise ConfigError(f"token_noise must be >= 0, got {token_noise!r}")
        self.seed = int(seed)
        self.discrimination = float(discrimination)
        self.agent_noise = float(agent_noise)
        self.refinement_logit = float(refinement_logit)
        self.feedback_logit = float(feedback_logit)
        self.token_noise = float(token_noise)
        self.text_variants = int(text_variants)
        self.text_cache_size = int(text_cache_size)
        self.tokenizer = tokenizer
        self._counter: TokenCounter | None = None  # built on first use from ``tokenizer``
        self._texts: OrderedDict[tuple, DraftParts] = OrderedDict()
        self._laid: OrderedDict[tuple, str] = OrderedDict()  # the last laid-out drafts
        self._lock = threading.Lock()  # guards _texts and _laid
        #: (seed, task id, agent) -> ``_luck`` (a hash per call before, issue 40)
        self._lucks: dict[tuple[int, str, str], float] = {}
        #: (seed, task id, agent) -> the prompt hash's state after them (``_prompt_digest``)
        self._digest_starts: dict[tuple[int, str, str], Any] = {}

    def __repr__(self) -> str:
        return (
            f"SimulatedBackend(seed={self.seed}, discrimination={self.discrimination:g}, "
            f"agent_noise={self.agent_noise:g}, refinement_logit={self.refinement_logit:g}, "
            f"feedback_logit={self.feedback_logit:g}, token_noise={self.token_noise:g})"
        )

    # -- the outcome model ----------------------------------------------------
    def ability(self, spec: AgentSpec) -> float:
        """The agent's calibrated ability theta (cached per accuracy and model parameters)."""
        accuracy = spec.calibration.get("accuracy")
        if accuracy is None:
            raise ConfigError(
                f"agent {spec.name!r} has no calibration['accuracy']; the simulated backend "
                "needs a target accuracy for every agent (see orchenv/presets/*.json)"
            )
        return solve_ability(
            float(accuracy), discrimination=self.discrimination, agent_noise=self.agent_noise
        )

    def extra_logit(self, context: CallContext) -> float:
        """Margin bonus: the env's judgement of the request (``context.guidance``), plus, for
        refinement calls, ``refinement_logit`` (and ``feedback_logit`` for any critique)."""
        if context.draft is None:
            return context.guidance
        bonus = self.refinement_logit + (self.feedback_logit if context.feedback else 0.0)
        return context.guidance + bonus

    def _mean_margin(self, spec: AgentSpec, task: Task, context: CallContext) -> float:
        z = min(max(difficulty_of(task), _Z_EPS), 1.0 - _Z_EPS)
        return self.ability(spec) + self.extra_logit(context) - self.discrimination * _logit(z)

    def _luck(self, spec: AgentSpec, task: Task) -> float:
        """The agent's standard-logistic draw xi for this task (prompt-independent; cached
        per (seed, task id, agent) for string ids and names, at most ``_LUCK_CACHE_SIZE``)."""
        task_id, name = task.id, spec.name
        cacheable = type(task_id) is str and type(name) is str
        if cacheable:
            key = (self.seed, task_id, name)
            luck = self._lucks.get(key)
            if luck is not None:
                return luck
        u = stable_uniform("simulated-outcome", self.seed, task_id, name)
        u = min(max(u, 1e-15), 1.0 - 1e-15)
        luck = _logit(u)
        if cacheable:
            if len(self._lucks) >= _LUCK_CACHE_SIZE:
                self._lucks.clear()  # a bound, not an LRU: refilled at one hash a call
            self._lucks[key] = luck
        return luck

    def p_correct(self, spec: AgentSpec, task: Task, context: CallContext | None = None) -> float:
        """The model's probability that ``spec`` answers ``task`` correctly."""
        margin = self._mean_margin(spec, task, context or CallContext(task=task))
        return sigmoid(margin / self.agent_noise)

    def is_correct(self, spec: AgentSpec, task: Task, context: CallContext | None = None) -> bool:
        """Whether a call would be answered correctly, without producing text (oracles, analysis)."""
        context = context or CallContext(task=task)
        margin = self._mean_margin(spec, task, context)
        return margin + self.agent_noise * self._luck(spec, task) > 0.0

    # -- the Backend protocol ---------------------------------------------------
    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """Answer one call: decide correctness, write a worked solution, meter it."""
        task = require_task(context, spec, "simulated backend", OUTCOMES_KEYED_ON)
        mean_margin = self._mean_margin(spec, task, context)
        correct = mean_margin + self.agent_noise * self._luck(spec, task) > 0.0

        # Surface variation (wording, length) is keyed on the prompt as well.
        digest = self._prompt_digest(spec, task, messages)
        text = self._solution_text(spec, task, correct, digest[0] % self.text_variants)
        meta = self.outcome_meta(text, mean_margin, correct)
        return self.metered(spec, task, messages, text, digest, meta)

    def outcome_meta(self, text: str, margin: float, correct: bool, **extra: Any) -> dict[str, Any]:
        """A simulated answer's ``meta``: whether it is ``correct``, its boxed ``answer`` and
        ``p_correct`` (the sigmoid of the mean ``margin``), then ``extra``. Privileged: for
        oracles and analysis, never shown to controllers.
        """
        return {
            "correct": bool(correct),
            "answer": extract_boxed(text),
            "p_correct": sigmoid(margin / self.agent_noise),
            **extra,
        }

    def metered(
        self,
        spec: AgentSpec,
        task: Task,
        messages: Sequence[Message],
        text: str,
        digest: bytes,
        meta: dict[str, Any],
    ) -> Completion:
        """A Completion for ``text`` with simulated token counts, cost and latency."""
        completion_tokens = self._completion_tokens(spec, task, text, digest)
        return simulated_completion(
            spec, text, estimate_prompt_tokens(messages), completion_tokens, meta=meta
        )

    def _solution_text(self, spec: AgentSpec, task: Task, correct: bool, variant: int) -> str:
        """The agent's worked solution of ``task`` (right or wrong), laid into shape ``variant``.

        The content (which steps, which mistake, which answer) is written by the task's
        solution writer once per task for a right draft and as one of ``WRONG_CONTENTS``
        mistakes per (task, agent) for a wrong one, and cached parsed (``draft_parts``); its shape (length, lines, numbering, count of
        numbers: ``lay_out_draft``) is one of ``text_variants`` per (task, agent), drawn
        without the correctness and picked by the prompt's hash. So the
        same prompt always gets the same text, and a right and a wrong draft of one request
        have the same target length.
        """
        key = (task.id, task.prompt, spec.name, correct, variant)
        with self._lock:
            text = self._laid.get(key)
            if text is not None:
                self._laid.move_to_end(key)
                return text
        parts = self._draft_content(spec, task, correct, variant)
        shape_key = hashlib.blake2b(
            repr((self.seed, task.id, task.prompt, spec.name, int(variant))).encode(),
            digest_size=8,
        ).digest()
        text = lay_out_draft(parts, shape_key)
        if self.text_cache_size:
            with self._lock:
                self._laid[key] = text
                while len(self._laid) > self.text_cache_size:
                    self._laid.popitem(last=False)
        return text

    def _draft_content(
        self, spec: AgentSpec, task: Task, correct: bool, variant: int = 0
    ) -> DraftParts:
        """The writer's draft, parsed and cached (LRU of ``text_cache_size``): a right draft's
        content is the task's (its writer's phrasing drawn once per task), a wrong one's one of
        ``WRONG_CONTENTS`` mistakes of the agent's (``variant`` picks it), so resampling a
        wrong agent scatters its wrong answers as a real model's do (self-consistency reads
        that) while it stays wrong. Steady state on MathRoute's 7,500 train tasks: 7,500 right
        drafts and 4 per (task, agent) the agent gets wrong (a quarter of pairs), about 30,000
        entries within the default 50,000 (the whole write-ups of the earlier cache, 8 per
        (task, agent, correctness), missed on 72% of calls)."""
        key = (
            task.id,
            task.prompt,
            None if correct else spec.name,
            correct if correct else int(variant) % WRONG_CONTENTS,
        )
        with self._lock:
            parts = self._texts.get(key)
            if parts is not None:
                self._texts.move_to_end(key)
                return parts
        writer = SOLUTION_WRITERS.resolve(str(task.meta.get("solution_writer", "math")))
        seed_key = hashlib.blake2b(repr((self.seed,) + key).encode(), digest_size=24).digest()
        parts = draft_parts(writer(task, correct=correct, rng=_text_rng(seed_key)))
        if self.text_cache_size:
            with self._lock:
                self._texts[key] = parts
                while len(self._texts) > self.text_cache_size:
                    self._texts.popitem(last=False)
        return parts

    def _prompt_digest(self, spec: AgentSpec, task: Task, messages: Sequence[Message]) -> bytes:
        """A stable 32-byte hash of (seed, task, agent, messages). (The hash state after
        (seed, task, agent) is kept per key, at most ``_LUCK_CACHE_SIZE``, and the messages
        are fed in one update: the same bytes, so the same digest.)"""
        key = (self.seed, task.id, spec.name)
        cacheable = type(key[1]) is str and type(key[2]) is str
        start = self._digest_starts.get(key) if cacheable else None
        if start is None:
            start = hashlib.blake2b(repr(key).encode(), digest_size=32)
            if cacheable:
                if len(self._digest_starts) >= _LUCK_CACHE_SIZE:
                    self._digest_starts.clear()
                self._digest_starts[key] = start
        h = start.copy()
        parts: list[bytes] = []
        for m in messages:
            parts += (b"\x1e", m.get("role", "").encode(), b"\x1f", m.get("content", "").encode())
        h.update(b"".join(parts))
        return h.digest()

    def _completion_tokens(self, spec: AgentSpec, task: Task, text: str, digest: bytes) -> int:
        """The written text's tokens at the agent's rate (``completion_chars_per_token``; the
        pool's ``tokenizer`` when one is named), times a log-normal factor (sigma
        ``token_noise``, mean 1) keyed on the prompt's hash. Nothing here reads the task's
        difficulty or the answer's correctness: those reach the count only through the text
        written (issue 38; the count was ``mean x (0.75 + 0.5 z)``, a tell of z).
        """
        u = (int.from_bytes(digest[24:32], "big") + 0.5) / 2.0**64
        sigma = self.token_noise
        factor = math.exp(sigma * _NORMAL.inv_cdf(u) - 0.5 * sigma * sigma)
        return max(1, round(self.written_tokens(spec, text) * factor))

    def written_tokens(self, spec: AgentSpec, text: str) -> float:
        """The completion tokens ``text`` stands for, before noise: with a named ``tokenizer``,
        its count of ``text`` x ``expansion(spec)``; else ``len(text) /
        completion_chars_per_token(spec)`` (the same figure with the 4-characters estimate)."""
        if self.tokenizer is None:
            return len(text) / completion_chars_per_token(spec)
        if self._counter is None:
            from orchenv.memory import make_token_counter

            self._counter = make_token_counter(self.tokenizer)
        return self._counter.count(text) * expansion(spec)


#: at most this many (task, agent) draws ``xi`` are kept (``SimulatedBackend._luck``)
_LUCK_CACHE_SIZE = 200_000

#: how many different mistakes an agent makes on a task it gets wrong (the prompt's hash picks
#: one): enough that three resamples rarely agree on a wrong answer
WRONG_CONTENTS = 4

#: the mean length in characters of the worked solutions the simulator writes (the math
#: writer's drafts over every agent: 309 on the train and 310 on the test split of
#: MathRoute's and BudgetRoute's task sets, 400 tasks each); a preset's
#: ``mean_completion_tokens`` is spread over this many written characters (``expansion``),
#: so the calibrated means hold within 4% on those sets
REFERENCE_DRAFT_CHARS = 310.0


# -- the draft's shape (issue 38 item 2, third pass) --------------------------------------------
#: sigma of the log-normal spread of a draft's length in characters around ``REFERENCE_DRAFT_CHARS``
DRAFT_CHARS_SIGMA = 0.3
#: a draft's body has between this many lines (the count is drawn from the prompt's hash)
DRAFT_LINES = (3, 5)
#: the targets' mean over ``REFERENCE_DRAFT_CHARS``: below 1 because drafts whose content
#: (or recap) does not fit run over their target; with it the drafts' mean length stays at
#: ``REFERENCE_DRAFT_CHARS`` (so the calibrated mean tokens and costs hold)
_TARGET_SCALE = 0.94
#: no target above this many ``REFERENCE_DRAFT_CHARS``: the log-normal's far tail would put a
#: GPT-4.1-nano call of BudgetRoute's low mode over its $0.001 (0.4% of calls uncapped)
_TARGET_CAP = 1.9
_PREFIX_RE = re.compile(r"^\s*(?:Step\s+\d+\s*[:.]\s*|\d+\.\s+)")
_MATH_RE = re.compile(r"\$[^$]*\$")
_NUM_RE = re.compile(r"-?\d+(?:\.\d+)?")
#: numbers a draft writes per character of its length target (drawn in this range): a recap
#: of its own values tops up a draft with fewer, so the count of numbers follows the length
#: target, not the task (a hard task's draft writes more numbers: AUC 0.8 on the count alone)
DRAFT_NUMBER_DENSITY = (0.09, 0.12)
_STEP_PREFIXES = ("Step {}: ", "{}. ", "Step {}. ", "")
#: neutral sentences that lengthen a short draft (an opener before the steps, closers after
#: them): the same pools, in an order drawn from the prompt's hash, for right and wrong drafts
#: (they say nothing about the content's truth)
_OPENERS = (
    "Let's work through this step by step.",
    "We solve the problem one step at a time.",
    "First, note what the problem gives and what it asks for.",
    "The plan is to compute the needed quantities in order.",
)
_CLOSERS = (
    "This is the quantity the question asks for.",
    "Going back over each step, the computation holds together.",
    "The arithmetic in every line was carried out once more.",
    "Each step used only the results of the steps before it.",
    "Nothing else in the statement affects the result.",
    "Writing out every intermediate value kept the work easy to follow.",
    "That completes the computation.",
    "No further simplification is needed.",
)
_FILLERS = frozenset(_OPENERS + _CLOSERS)


#: a written draft, parsed once (``draft_parts``) and laid out per call (``lay_out_draft``):
#: (steps without numbering, the same steps terse (their mathematics only), the final answer
#: line, the numbers the steps and the final line write, each step's and terse step's length)
DraftParts = tuple[
    tuple[str, ...], tuple[str, ...], str, tuple[str, ...], tuple[int, ...], tuple[int, ...]
]


def draft_parts(text: str) -> DraftParts:
    """A written draft parsed for ``lay_out_draft`` (``DraftParts``); a draft without a
    ``\\boxed`` line keeps its last line as the final one, the writer's numbering and intro
    lines are dropped."""
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    if not lines:
        return (), (), "", (), (), ()
    last = max((i for i, ln in enumerate(lines) if "\\boxed" in ln), default=len(lines) - 1)
    final = "\n".join(lines[last:])
    steps = [_PREFIX_RE.sub("", ln, count=1) for ln in lines[:last]]
    steps = [s for s in steps if s not in _FILLERS]  # the writer's own intro lines
    terse = []
    for s in steps:
        maths = _MATH_RE.findall(s)
        terse.append(", ".join(maths) + "." if maths else s)
    numbers = tuple(n for part in (*steps, final) for n in _NUM_RE.findall(part))
    return (
        tuple(steps),
        tuple(terse),
        final,
        numbers,
        tuple(len(x) + 1 for x in steps),
        tuple(len(x) + 1 for x in terse),
    )


_MAX_CUT_CHARS = 4000


def _cut_points(text: str) -> list[int]:
    """Where ``text`` may be cut in two lines: after ", " or ". " outside ``$...$`` (none in a
    unit over ``_MAX_CUT_CHARS``: a hostile file solution is not scanned character by
    character)."""
    if len(text) > _MAX_CUT_CHARS:
        return []
    cuts, inside = [], False
    for i, ch in enumerate(text[:-1]):
        if ch == "$":
            inside = not inside
        elif not inside and ch in ",." and text[i + 1] == " " and 0 < i < len(text) - 2:
            cuts.append(i + 2)
    return cuts


def shape_draft(text: str, key: bytes) -> str:
    """``lay_out_draft`` of a written draft ``text``."""
    return lay_out_draft(draft_parts(text), key)


def _byte_pick(byte: int, n: int) -> int:
    """``floor(u * n)`` for ``u = (byte + 0.5) / 256``: an index in ``[0, n)``."""
    return (2 * byte + 1) * n // 512


#: the length target of each value of a key's first byte: log-normal quantiles (median
#: ``_TARGET_SCALE * REFERENCE_DRAFT_CHARS``, sigma ``DRAFT_CHARS_SIGMA``), precomputed
_TARGETS = tuple(
    min(
        _TARGET_CAP * REFERENCE_DRAFT_CHARS,
        _TARGET_SCALE
        * REFERENCE_DRAFT_CHARS
        * math.exp(
            DRAFT_CHARS_SIGMA * _NORMAL.inv_cdf((b + 0.5) / 256.0) - 0.5 * DRAFT_CHARS_SIGMA**2
        ),
    )
    for b in range(256)
)


def lay_out_draft(parts: DraftParts, key: bytes) -> str:
    """A parsed draft (``draft_parts``) laid into a shape drawn from ``key`` (8 bytes) alone:
    its length in characters (log-normal around ``REFERENCE_DRAFT_CHARS``, sigma
    ``DRAFT_CHARS_SIGMA``), its number of body lines (``DRAFT_LINES``), its numbering style and
    the count of numbers it writes (``DRAFT_NUMBERS``).

    The writer's content (every step's mathematics and the final answer) is kept; what changes
    is the neutral material around it: a recap of the draft's own values tops up the count of
    numbers, an opener and closers (``_OPENERS``, ``_CLOSERS``, in an order drawn from ``key``)
    lengthen a short draft, and a long one drops its steps' prose (keeping their mathematics)
    until it fits. ``key`` carries no correctness, so a right and a wrong draft of one request
    get the same targets, and a harder task's longer solution no longer makes a longer draft
    (within an author, length read the task's difficulty and so the correctness: AUC 0.84 on
    length alone in issue 38's tell meter).
    """
    steps, terse, final, numbers, step_lens, terse_lens = parts
    if not final:
        return ""
    lo, hi = DRAFT_LINES
    n_lines = lo + _byte_pick(key[1], hi - lo + 1)
    prefix = _STEP_PREFIXES[_byte_pick(key[2], len(_STEP_PREFIXES))]
    budget = _TARGETS[key[0]] - len(final) - (n_lines * (len(prefix) - 1) if prefix else 0)
    # a recap of the draft's own values, so that an easy task's short draft carries about as
    # many numbers as a hard one's (the count of numbers read the difficulty: AUC 0.8)
    tail: list[str] = []
    lo_density, hi_density = DRAFT_NUMBER_DENSITY
    density = lo_density + (hi_density - lo_density) * (key[3] + 0.5) / 256.0
    missing = round(density * _TARGETS[key[0]]) - len(numbers)
    if numbers and missing > 0:
        values = numbers[::-1] * (missing // len(numbers) + 1)
        recap = "Values used along the way: $" + "$, $".join(values[:missing]) + "$."
        tail.append(recap)
        budget -= len(recap) + 1
    used = sum(step_lens)
    body: tuple[str, ...] | list[str] = steps
    if used > budget:
        # drop prose step by step, from the first, until the draft fits
        body = list(steps)
        for i in range(len(steps)):
            if used <= budget:
                break
            body[i] = terse[i]
            used += terse_lens[i] - step_lens[i]
    head: list[str] = []
    if used < budget and key[4] <= 153:  # an opener in 60% of drafts
        opener = _OPENERS[_byte_pick(key[5], len(_OPENERS))]
        if used + len(opener) / 2 < budget:
            head.append(opener)
            used += len(opener) + 1
    first = _byte_pick(key[6], len(_CLOSERS))
    for k in range(len(_CLOSERS)):
        closer = _CLOSERS[(first + k) % len(_CLOSERS)]
        if used + len(closer) / 2 >= budget:
            break
        tail.append(closer)
        used += len(closer) + 1
    units = [*head, *body, *tail]
    if not units:
        return final
    # too few units for n_lines lines: split the longest at its middle-most ", " or ". "
    while len(units) < n_lines:
        i = max(range(len(units)), key=lambda j: len(units[j]))
        x = units[i]
        cuts = _cut_points(x)
        if not cuts:
            break
        cut = min(cuts, key=lambda c: abs(2 * c - len(x)))
        units[i : i + 1] = [x[:cut].rstrip(), x[cut:]]
    # lay the units out on n_lines lines (or fewer, one unit each), balancing their lengths
    n = min(n_lines, len(units))
    if n == len(units):
        lines = [[x] for x in units]
    else:
        total = sum(len(x) for x in units)
        lines = [[]]
        filled = 0
        for i, x in enumerate(units):
            if (
                lines[-1]
                and len(lines) < n
                and (filled >= total * len(lines) / n or len(units) - i <= n - len(lines))
            ):
                lines.append([])
            lines[-1].append(x)
            filled += len(x)
    if prefix:
        out = [prefix.format(i) + " ".join(group) for i, group in enumerate(lines, 1)]
    else:
        out = [" ".join(group) for group in lines]
    out.append(final)
    return "\n".join(out)


def expansion(spec: AgentSpec) -> float:
    """Completion tokens per written token (at 4 characters a token): how much longer than
    the simulator's condensed draft the model's whole output is (its reasoning).

    ``calibration["expansion"]`` when given; else ``mean_completion_tokens`` over the
    written tokens of a reference draft (``REFERENCE_DRAFT_CHARS / 4``), so the calibrated
    mean holds on drafts of the reference length; else 1 (the text's own tokens).
    """
    value = spec.calibration.get("expansion")
    if value is None:
        mean = spec.calibration.get("mean_completion_tokens")
        if mean is None:
            return 1.0
        value = float(mean) / (REFERENCE_DRAFT_CHARS / _CHARS_PER_TOKEN)
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(
            f"agent {spec.name!r}: calibration expansion must be a positive number, got {value!r}"
        )
    return value


def completion_chars_per_token(spec: AgentSpec) -> float:
    """The documented per-model rate: written characters per completion token,
    ``4 / expansion(spec)`` (e.g. 0.62 for seed 000's System 1 weakest agent: 500 tokens
    for a 310-character draft). A simulated count is ``len(text) / rate`` times noise."""
    return _CHARS_PER_TOKEN / expansion(spec)


def counted_completion(
    spec: AgentSpec,
    messages: Sequence[Message],
    text: str,
    counter: TokenCounter,
    meta: Mapping[str, Any],
) -> Completion:
    """A simulated Completion whose tokens are counted with ``counter`` (a real tokenizer or
    the estimate), priced by ``spec`` and timed with the same latency model as above.

    For simulated role agents whose token totals must be in the shared memory's unit.
    """
    return simulated_completion(
        spec,
        text,
        sum(counter.count(m["content"]) for m in messages),
        counter.count(text),
        token_source="estimate" if counter.name == "estimate" else "tokenizer",
        meta={**meta, "tokenizer": counter.name},
    )
