"""What several backends share: pickling without live resources, the batch-of-one call of
in-process engines, sampling-settings checks, per-call sampling seeds, chat messages, and
the error for a call that lacks the task its backend is keyed on.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from orchenv.error import BackendError, ConfigError
from orchenv.pool import AgentSpec, Call, CallContext, Completion, Message
from orchenv.tasks import Task

T = TypeVar("T")


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


# -- one event loop for live calls, and the bridge from synchronous env code to it ------------
#
# Why: an env's ``step`` is synchronous code that calls ``pool.call(...)`` deep inside. To
# keep hundreds of such steps in flight without a thread each, ``run_in_bridge`` runs the
# synchronous function in a greenlet on the event loop; when the code inside reaches a live
# backend, ``run_sync`` hands the backend's coroutine to the loop (``await_only``) and the
# loop goes on with the other steps. Outside a bridge, ``run_sync`` submits the coroutine to
# the loop thread and waits, so plain ``env.step`` and threads keep working. Written by hand
# (about 60 lines over ``greenlet``): no maintained library offers this bridge on its own
# (SQLAlchemy's ``greenlet_spawn`` / ``await_only`` are the same idea, private to it).


class _LoopThread:
    """The process's event loop for live calls, run forever by one daemon thread.

    Created on first use (and again in a forked child, where the parent's thread is gone).
    Backends keep their connection pools on it, so every thread and every bridged env step
    shares one loop and each backend one pool.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(ready,), name="orchenv-loop", daemon=True
        )
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()


_loop_lock = threading.Lock()
_loop_thread: _LoopThread | None = None


def shared_loop() -> asyncio.AbstractEventLoop:
    """The event loop live backends run on (started on first use, one per process)."""
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None or _loop_thread.pid != os.getpid():
            _loop_thread = _LoopThread()
        return _loop_thread.loop


def on_loop_thread() -> bool:
    """Whether the caller runs on the shared loop's thread."""
    current = _loop_thread
    return current is not None and current.thread is threading.current_thread()


def _bridge_types() -> type:
    global _Bridge
    if _Bridge is None:
        import greenlet

        class Bridge(greenlet.greenlet):  # type: ignore[misc]
            """A greenlet whose synchronous code may wait on coroutines (``await_only``)."""

        _Bridge = Bridge
    return _Bridge


_Bridge: type | None = None


def in_bridge() -> bool:
    """Whether the caller is synchronous code run by ``run_in_bridge`` (it may ``await_only``)."""
    if _Bridge is None:
        return False
    import greenlet

    return isinstance(greenlet.getcurrent(), _Bridge)


def await_only(awaitable: Awaitable[T]) -> T:
    """Wait for ``awaitable`` from synchronous code run by ``run_in_bridge``: the loop runs
    other work meanwhile. Outside a bridge this is an error (use ``run_sync``)."""
    import greenlet

    current = greenlet.getcurrent()
    if _Bridge is None or not isinstance(current, _Bridge):
        raise RuntimeError("await_only outside run_in_bridge; call run_sync instead")
    return current.parent.switch(awaitable)  # type: ignore[attr-defined, no-any-return]


async def run_in_bridge(fn: Callable[..., T], *args: Any) -> T:
    """Run the synchronous ``fn(*args)`` on the event loop; each ``await_only`` inside it
    suspends it (not the loop) until its awaitable is done. Its exceptions propagate."""
    bridge = _bridge_types()(fn)
    result: Any = bridge.switch(*args)
    while not bridge.dead:
        try:
            value = await result
        except BaseException as exc:  # noqa: BLE001 - handed to the code that awaited it
            result = bridge.throw(exc)
        else:
            result = bridge.switch(value)
    return result  # type: ignore[no-any-return]


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The result of the coroutine ``make()`` on the shared loop, from synchronous code.

    In a bridge it is awaited there (other bridged steps go on meanwhile); from any other
    thread it is submitted to the loop thread and waited for. Calling it on the loop thread
    outside a bridge would deadlock, so that is a ``RuntimeError``.
    """
    if in_bridge():
        return await_only(make())
    loop = shared_loop()
    if on_loop_thread():
        raise RuntimeError(
            "a live backend was called synchronously on orchenv's event loop; run the caller "
            "with orchenv.backends.common.run_in_bridge"
        )
    return asyncio.run_coroutine_threadsafe(make(), loop).result()
