"""What several backends share: pickling without live resources, the batch-of-one call of
in-process engines, sampling-settings checks, per-call sampling seeds, chat messages, and
the error for a call that lacks the task its backend is keyed on. The event loop and the
async bridge live in ``orchenv.asyncbridge`` (below the pool and the backends) and are
re-exported here.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from orchenv.asyncbridge import (  # re-exported: backends import the bridge from here
    await_only,
    in_bridge,
    on_loop_thread,
    run_in_bridge,
    run_sync,
    shared_loop,
)
from orchenv.calltypes import AgentSpec, Call, CallContext, Completion, Message
from orchenv.error import BackendError, ConfigError
from orchenv.tasks import Task


class RebuiltOnCopy:
    """Pickling for backends that hold live resources (engines, clients, caches) and a lock.

    A pickled or copied backend starts with ``_fresh_on_copy``'s values (attribute ->
    value, copied: no client, empty caches) and rebuilds those lazily; its ``_lock`` is a
    new lock (an ``RLock`` when ``_reentrant_lock``). Subclasses set both class attributes.
    """

    #: attribute -> the value a copy starts with
    _fresh_on_copy: ClassVar[Mapping[str, Any]] = {}
    #: whether ``_lock`` is a ``threading.RLock`` (else a ``threading.Lock``)
    _reentrant_lock: ClassVar[bool] = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update({name: copy.copy(value) for name, value in self._fresh_on_copy.items()})
        state["_lock"] = None  # locks do not pickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock() if self._reentrant_lock else threading.Lock()


class BatchedEngine(RebuiltOnCopy, ABC):
    """Base of in-process engines that batch natively (``hf``, ``vllm``).

    One lock serialises engine use, so ``max_concurrency`` is 1 and parallelism comes
    from batching: ``complete`` is a batch of one of ``complete_batch``.
    """

    max_concurrency = 1
    _reentrant_lock = True

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """One call: a batch of one."""
        return self.complete_batch([(spec, messages, context)])[0]

    @abstractmethod
    def complete_batch(self, calls: Sequence[Call]) -> list[Completion]:
        """Answer ``calls`` in one engine batch, in order."""

    @staticmethod
    def engine_completion(
        spec: AgentSpec,
        text: str,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        model: str,
        finish_reason: str | None,
        batch_size: int,
        wall_s: float,
        **meta: Any,
    ) -> Completion:
        """A generated answer with tokenizer-exact counts; ``latency_s`` is the wall time
        of the batch it ran in (what the caller waited).
        """
        return spec.completion(
            text,
            prompt_tokens,
            completion_tokens,
            latency_s=wall_s,
            token_source="tokenizer",
            meta={"model": model, "finish_reason": finish_reason, "batch_size": batch_size, **meta},
        )


def call_seed(seed: int, agent: str, messages: Sequence[Message]) -> int:
    """The sampling seed of one call: a stable 63-bit hash of (seed, agent, messages)."""
    h = hashlib.blake2b(repr((int(seed), agent)).encode(), digest_size=8)
    for m in messages:
        h.update(b"\x1e")
        h.update(str(m.get("role", "")).encode())
        h.update(b"\x1f")
        h.update(str(m.get("content", "")).encode())
    return int.from_bytes(h.digest(), "big") & (2**63 - 1)


def chat_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as plain ``{"role", "content"}`` dicts (role ``user`` and empty content when
    missing), the shape chat templates and engines take.
    """
    return [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages]


def check_sampling(
    where: str,
    *,
    temperature: float,
    top_p: float,
    max_tokens: Any,
    max_tokens_name: str = "max_tokens",
    do_sample: bool | None = None,
    top_k: Any = None,
) -> None:
    """Validate decoding settings; ``where`` (``"HFBackend"``, ``"agent 'a'"``) starts the error.

    ``do_sample=None`` is vLLM's convention: temperature 0 means greedy, so it must be
    >= 0. With ``do_sample`` (transformers) the temperature matters only when sampling,
    and must then be > 0. ``top_k`` is None or an int >= 0 (0 or None: off).
    """
    if not (isinstance(max_tokens, int) and max_tokens >= 1):
        raise ConfigError(f"{where}: {max_tokens_name} must be an int >= 1, got {max_tokens!r}")
    if do_sample is None and not temperature >= 0:
        raise ConfigError(f"{where}: temperature must be >= 0, got {temperature!r}")
    if do_sample and not temperature > 0:
        raise ConfigError(f"{where}: temperature must be > 0 when sampling, got {temperature!r}")
    if not 0.0 < top_p <= 1.0:
        raise ConfigError(f"{where}: top_p must be in (0, 1], got {top_p!r}")
    if top_k is not None and not (isinstance(top_k, int) and top_k >= 0):
        raise ConfigError(f"{where}: top_k must be None or an int >= 0, got {top_k!r}")


def require_task(
    context: CallContext, spec: AgentSpec, who: str, keyed_on: str, *, by_turn: bool = False
) -> Task:
    """The call's task, or a BackendError: ``who`` (e.g. ``"simulated backend"``) needs it
    because its answers are ``keyed_on`` it; ``by_turn`` when the turn matters too.
    """
    if context.task is None:
        example = "CallContext(task=task, turn=turn)" if by_turn else "CallContext(task=task)"
        raise BackendError(
            f"the {who} needs the task to answer agent {spec.name!r}: {keyed_on}. "
            f"Environments pass it; when calling by hand use pool.call(name, messages, {example})."
        )
    return context.task


__all__ = [
    "BatchedEngine",
    "RebuiltOnCopy",
    "await_only",
    "call_seed",
    "chat_messages",
    "check_sampling",
    "in_bridge",
    "on_loop_thread",
    "require_task",
    "run_in_bridge",
    "run_sync",
    "shared_loop",
]
