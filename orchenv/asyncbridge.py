"""One event loop for live calls, and the bridge from synchronous env code to it.

``shared_loop`` (the process's loop, on a daemon thread), ``run_in_bridge`` /
``await_only`` (synchronous code run on the loop that may wait on coroutines),
``run_sync`` (a coroutine's result from synchronous code, in or out of a bridge). Below
both ``orchenv.pool`` (which overlaps calls in a bridge) and ``orchenv.backends`` (whose live
backends run on the loop); ``orchenv.backends.common`` re-exports every name.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["await_only", "in_bridge", "on_loop_thread", "run_in_bridge", "run_sync", "shared_loop"]

T = TypeVar("T")

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
