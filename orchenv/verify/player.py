"""The submitter's side of a sandboxed re-execution (``orchenv.verify.sandbox``): run inside
bubblewrap, it loads the bundle's entry point and plays one refereed submission through the
referee's Unix socket, over OpenEnv's ``/ws`` JSON frames.

``python -m orchenv.verify.player --socket PATH --bundle DIR --entry MODULE:NAME --name NAME``

The entry point is either a function ``act(observation: str) -> str`` or a controller class
(built with the bundle's ``kwargs``) whose ``act(observation, info) -> str`` is called; a
class with ``reset(seed)`` is reset before each episode with ``None`` (the referee keeps the
seeds). Nothing here is trusted: the referee counts what it saw, whatever this process does.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

#: the largest frame the player reads (the server's own cap)
MAX_FRAME = 16 * 1024 * 1024


def load_entry(bundle: str, entry: str, kwargs: dict[str, Any]) -> Any:
    """A callable ``(prompt, info) -> action`` made from ``MODULE:NAME`` in ``bundle``."""
    module_name, _, name = entry.partition(":")
    sys.path.insert(0, bundle)
    target = getattr(importlib.import_module(module_name), name)
    if inspect.isclass(target):
        controller = target(**kwargs)

        def act(prompt: str, info: dict[str, Any], _c: Any = controller) -> Any:
            return _c.act(prompt, info)

        act.reset = getattr(controller, "reset", None)  # type: ignore[attr-defined]
        return act

    def call(prompt: str, info: dict[str, Any]) -> Any:
        return target(prompt)

    call.reset = None  # type: ignore[attr-defined]
    return call


def _exchange(ws: Any, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"type": kind, "data": data}))
    reply = json.loads(ws.recv(timeout=600))
    if reply.get("type") == "error":
        raise RuntimeError(f"the referee refused {kind}: {reply.get('data', {}).get('message')}")
    return dict(reply.get("data") or {})


def play(socket_path: str, act: Any, name: str) -> int:
    """Play every sealed task of submission ``name``; the number of episodes played."""
    from websockets.sync.client import unix_connect

    played = 0
    with unix_connect(socket_path, uri="ws://referee/ws", max_size=MAX_FRAME) as ws:
        data = _exchange(ws, "reset", {"submission": name})
        while True:
            if callable(getattr(act, "reset", None)):
                act.reset(None)
            while not data.get("done"):
                obs = data["observation"]
                action = act(obs.get("prompt", ""), obs.get("info") or {})
                if not isinstance(action, str):
                    raise TypeError(f"the entry point returned {type(action).__name__}, not str")
                data = _exchange(ws, "step", {"text": action})
            played += 1
            if (data["observation"].get("info") or {}).get("referee", {}).get("finished"):
                return played
            data = _exchange(ws, "reset", {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchenv.verify.player")
    p.add_argument("--socket", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--entry", required=True)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--name", required=True)
    args = p.parse_args(argv)
    act = load_entry(args.bundle, args.entry, json.loads(args.kwargs))
    played = play(args.socket, act, args.name)
    print(f"played {played} episodes", file=sys.stderr)  # noqa: T201  (a CLI's own report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
