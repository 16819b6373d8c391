"""The submitter's side of a sandboxed re-execution (``orchenv.verify.sandbox``): run inside
bubblewrap, it loads the bundle's entry point and plays one refereed submission through the
referee's Unix socket, over OpenEnv's ``/ws`` JSON frames.

``python -m orchenv.verify.player --socket PATH --bundle DIR --entry MODULE:NAME --name NAME``

The entry point is either a function ``act(observation: str) -> str`` or a controller class
(built with the bundle's ``kwargs``) whose ``act(observation, info) -> str`` is called; a
class with ``reset(seed)`` is reset before each episode with ``None`` (the referee keeps the
seeds). Nothing here is trusted: the referee counts what it saw, whatever this process does.

With ``--endpoint-socket PATH --endpoint JSON`` (a submission that names an OpenAI-compatible
endpoint), the verifier's recording proxy (``orchenv.verify.endpoint``) is at PATH: the
player forwards a port of the sandbox's own loopback to it and sets ``OPENAI_BASE_URL``
(``http://127.0.0.1:PORT/v1``), ``OPENAI_API_KEY`` (a placeholder: the proxy adds the real
key outside) and ``ORCHENV_ENDPOINT_MODEL`` before loading the entry point. Without
``--entry``, the built-in endpoint controller plays: each observation is one user message
(after the optional system prompt), the reply's text is the action.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import socket
import sys
import threading
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


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then half-close ``dst``."""
    with contextlib.suppress(OSError):
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def forward_loopback(uds: str) -> int:
    """Listen on 127.0.0.1 (the sandbox's own loopback) and pipe each connection to the Unix
    socket ``uds``; the port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept() -> None:
        while True:
            client, _ = server.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(uds)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(server.getsockname()[1])


def endpoint_controller(base_url: str, endpoint: dict[str, Any]) -> Any:
    """The built-in endpoint controller: ``(prompt, info) -> action`` by one chat completion
    of ``endpoint["model"]`` at ``base_url`` (through the recording proxy)."""
    import urllib.request

    def act(prompt: str, info: dict[str, Any]) -> str:
        messages = []
        if endpoint.get("system"):
            messages.append({"role": "system", "content": endpoint["system"]})
        messages.append({"role": "user", "content": prompt})
        body = {"model": endpoint["model"], "messages": messages, **endpoint.get("params", {})}
        request = urllib.request.Request(
            base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=600) as reply:  # noqa: S310 - the proxy
            answer = json.loads(reply.read())
        content = answer["choices"][0]["message"]["content"]
        return content if isinstance(content, str) else ""

    act.reset = None  # type: ignore[attr-defined]
    return act


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
    p.add_argument("--entry", default=None)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--name", required=True)
    p.add_argument("--endpoint-socket", default=None)
    p.add_argument("--endpoint", default=None, help="JSON: model, system, params")
    args = p.parse_args(argv)
    endpoint = json.loads(args.endpoint) if args.endpoint else None
    base_url = None
    if args.endpoint_socket and endpoint is not None:
        base_url = f"http://127.0.0.1:{forward_loopback(args.endpoint_socket)}/v1"
        os.environ.update(
            OPENAI_BASE_URL=base_url,
            OPENAI_API_KEY="recorded-by-the-verifier",
            ORCHENV_ENDPOINT_MODEL=str(endpoint["model"]),
        )
    if args.entry is not None:
        act = load_entry(args.bundle, args.entry, json.loads(args.kwargs))
    elif base_url is not None and endpoint is not None:
        act = endpoint_controller(base_url, endpoint)
    else:
        p.error("--entry, or --endpoint-socket with --endpoint, is required")
    played = play(args.socket, act, args.name)
    print(f"played {played} episodes", file=sys.stderr)  # noqa: T201  (a CLI's own report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
