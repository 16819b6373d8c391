"""The types of one agent call, below both ``orchenv.pool`` and ``orchenv.backends``.

``AgentSpec`` (who is called, at what price), ``CallContext`` (what the env knows about
the call), ``Completion`` (the metered answer), the ``Backend`` protocol and ``Call`` (one
entry of a batch). ``orchenv.pool`` builds pools from them and ``orchenv.backends`` answer
them; both import this module and neither imports the other at import time (issue 27).
``orchenv.pool`` re-exports every name, so ``from orchenv.pool import AgentSpec`` still works.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from orchenv.error import BackendError, ConfigError
from orchenv.schema import MAX_CALL_TOKENS, MAX_PRICE_PER_MTOK, show
from orchenv.tasks import Task

__all__ = [
    "TOKEN_SOURCES",
    "AgentSpec",
    "Backend",
    "Call",
    "CallContext",
    "Completion",
    "Message",
    "with_measured_latency",
]

Message = dict[str, str]


@dataclass(frozen=True)
class AgentSpec:
    """One agent of a pool.

    ``tier`` orders strength: 0 is the strongest. Prices are USD per one
    million prompt / completion tokens. ``calibration`` holds the targets a
    simulated backend reproduces (e.g. ``{"accuracy": 0.757}``).
    """

    name: str
    model: str
    tier: int
    price_prompt: float = 0.0
    price_completion: float = 0.0
    backend: str = "simulated"
    role_prompt: str | None = None
    calibration: Mapping[str, float] = field(default_factory=dict)
    backend_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check what prices every call: a NaN, negative or absurd price (or a tier that is
        not an int) would poison every cost computed from it."""
        where = f"agent {self.name!r}"
        if not isinstance(self.name, str) or not isinstance(self.model, str):
            raise ConfigError(f"{where}: name and model must be strings, got {self.model!r}")
        if isinstance(self.tier, bool) or not isinstance(self.tier, int) or self.tier < 0:
            raise ConfigError(
                f"{where}: tier must be an integer >= 0 (0 strongest), got {self.tier!r}"
            )
        for label in ("price_prompt", "price_completion"):
            value = getattr(self, label)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and 0 <= value <= MAX_PRICE_PER_MTOK):
                raise ConfigError(
                    f"{where}: {label} must be a finite number of USD per 1M tokens in "
                    f"[0, {MAX_PRICE_PER_MTOK:g}], got {value!r}"
                )

    @classmethod
    def priced(
        cls,
        name: str,
        model: str,
        price_key: str,
        *,
        backend: str,
        calibration: Mapping[str, float],
        tier: int = 0,
        backend_kwargs: Mapping[str, Any] | None = None,
    ) -> AgentSpec:
        """An agent at the public prices of ``price_key`` in ``orchenv/pricing.json`` (for
        pools built in code, e.g. simulated role agents or a single executor)."""
        from orchenv.pricing import price_for

        price = price_for(price_key)
        return cls(
            name=name,
            model=model,
            tier=tier,
            price_prompt=price.prompt,
            price_completion=price.completion,
            backend=backend,
            calibration=dict(calibration),
            backend_kwargs=dict(backend_kwargs or {}),
        )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollar cost of a call with these token counts."""
        return (prompt_tokens * self.price_prompt + completion_tokens * self.price_completion) / 1e6

    def completion(
        self,
        text: str,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        latency_s: float,
        token_source: str,
        cached: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> Completion:
        """This agent's answer ``text``, metered: priced with ``cost`` from its token counts.

        The one way backends (and env-side simulated agents) build a ``Completion``
        for a call they answered; ``token_source`` is one of ``TOKEN_SOURCES``.
        """
        return Completion(
            agent=self.name,
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self.cost(prompt_tokens, completion_tokens),
            latency_s=latency_s,
            cached=cached,
            token_source=token_source,
            meta={} if meta is None else meta,
        )


#: how a completion's token counts were obtained
TOKEN_SOURCES = ("server", "tokenizer", "estimate", "record")


@dataclass(frozen=True)
class Completion:
    """One agent response with its metering.

    ``token_source`` says how the token counts were obtained: ``"server"`` (the
    API's ``usage`` field), ``"tokenizer"`` (counted with the model's tokenizer),
    ``"estimate"`` (a documented character-based estimate, e.g. simulated agents)
    or ``"record"`` (read back from a replay file). ``cached`` is True when no
    model ran for this call (replayed or served from a cache). ``meta`` carries
    backend extras (the simulated backend records whether its answer was right:
    privileged information for oracles and analysis, never shown to controllers).
    """

    agent: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float = 0.0
    cached: bool = False
    token_source: str = "estimate"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every completion is metered from these figures: token counts must be integers in
        ``[0, orchenv.schema.MAX_CALL_TOKENS]`` (numpy integers are converted), cost and
        latency finite and non-negative; otherwise a ``BackendError`` names the agent."""
        # fast path (issue 40: every simulated call builds one): plain ints and floats in
        # range need neither conversion nor an error; anything else takes the full check
        p, c, cost, latency = (
            self.prompt_tokens,
            self.completion_tokens,
            self.cost_usd,
            self.latency_s,
        )
        if (
            type(p) is int
            and type(c) is int
            and 0 <= p <= MAX_CALL_TOKENS
            and 0 <= c <= MAX_CALL_TOKENS
            and type(cost) is float
            and type(latency) is float
            and 0.0 <= cost < math.inf
            and 0.0 <= latency < math.inf
        ):
            return
        for label in ("prompt_tokens", "completion_tokens"):
            value = getattr(self, label)
            try:
                number = operator.index(value)
            except TypeError:
                number = -1
            if isinstance(value, bool) or not 0 <= number <= MAX_CALL_TOKENS:
                raise BackendError(
                    f"agent {self.agent!r}: {label} must be an integer in "
                    f"[0, {MAX_CALL_TOKENS:,}], got {show(value)}"
                )
            if type(value) is not int:
                object.__setattr__(self, label, number)
        for label in ("cost_usd", "latency_s"):
            value = getattr(self, label)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and value >= 0):
                raise BackendError(
                    f"agent {self.agent!r}: {label} must be a finite number >= 0, got {show(value)}"
                )

    @property
    def tokens_estimated(self) -> bool:
        """True unless the counts came from the serving model's own report."""
        return self.token_source not in ("server", "tokenizer")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe record of this completion (the replay file format uses it)."""
        return {
            "agent": self.agent,
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "latency_s": self.latency_s,
            "cached": self.cached,
            "token_source": self.token_source,
            "meta": dict(self.meta),
        }


@dataclass(frozen=True)
class CallContext:
    """What the environment knows about a call, for backends that need it.

    Simulated and replay backends key their answers on the task; live
    backends ignore the context. ``draft`` is a previous response the agent
    is asked to improve and ``feedback`` the controller's critique of it.
    """

    task: Task | None = None
    turn: int = 0
    draft: str | None = None
    feedback: str | None = None
    #: how much the controller's request helps the agent, as a logit the env judged from the
    #: request's text (a sub-query that carries the key step, a critique that names the wrong
    #: step: > 0; an empty or unrelated one: < 0). Simulated agents add it to their margin;
    #: live agents ignore it (they read the request itself).
    guidance: float = 0.0


@runtime_checkable
class Backend(Protocol):
    """Produces completions for agents. Implementations must be thread-safe.

    Optional extras a backend may define:
    - ``complete_batch(calls) -> list[Completion]`` for engines that batch
      natively (local transformers, vLLM); ``AgentPool.call_many`` uses it;
    - ``max_concurrency: int``, the most calls to run at once in threads;
    - ``close()``, to release servers, sessions or GPU memory;
    - ``live = True`` for a backend whose calls wait on a server (the ``openai`` backend):
      ``orchenv.vector.make_vec``'s default mode shards many envs with such agents over
      worker processes (``auto_vector_mode``).
    """

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion: ...


Call = tuple[AgentSpec, Sequence[Message], CallContext]


def with_measured_latency(completion: Completion, start: float) -> Completion:
    """``completion`` timed from ``start`` (a ``time.perf_counter()`` reading) to now when its
    backend reported no latency and a model ran (not cached); otherwise ``completion`` itself.
    """
    if completion.latency_s == 0.0 and not completion.cached:
        return replace(completion, latency_s=time.perf_counter() - start)
    return completion
