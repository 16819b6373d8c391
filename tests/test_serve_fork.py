"""Issue 36, item 4: fork over the wire is faithful on every registered id.

For each id: a root ``/ws`` session plays an episode (after an earlier one, so history that a
seed does not reset would show), asks its state, and a child session restores the handle, once
fresh and once after playing an episode of its own. Given the same actions, root and child
must give the same observations, rewards and done flags; the restored observation must be the
root's last one. Runs OpenEnv's app in process (Starlette's TestClient: the same JSON frames
over an in-memory WebSocket), so the 11 ids need no server processes.

Before issue 36, ALFWorld's ``state`` failed (a ctypes pointer in the pickle) and a
MultihopQA restore kept the receiving session's own task.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv")
from starlette.testclient import TestClient  # noqa: E402

import orchenv  # noqa: E402,F401
from orchenv.serve.app import build_app  # noqa: E402
from orchenv.serve.environment import ServeConfig  # noqa: E402
from orchenv.serve.forks import HANDLE_RE  # noqa: E402

ALL_IDS = sorted(i for i in gym.registry if i.startswith("orch/"))


def frame(ws: Any, kind: str, data: dict | None = None) -> dict:
    message: dict[str, Any] = {"type": kind}
    if data is not None:
        message["data"] = data
    ws.send_text(json.dumps(message))
    return json.loads(ws.receive_text())


def play(ws: Any, actions: list[str]) -> list[tuple]:
    out: list[tuple] = []
    for action in actions:
        reply = frame(ws, "step", {"text": action})
        assert reply["type"] == "observation", reply
        data = reply["data"]
        out.append((data["reward"], data["observation"]["prompt"], data["done"]))
        if data["done"]:
            break
    return out


def test_every_registered_id_is_tested() -> None:
    assert len(ALL_IDS) >= 11, ALL_IDS


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_fork_is_faithful_on_every_id(env_id: str) -> None:
    app = build_app(ServeConfig(env_id=env_id, max_sessions=4))
    local: Any = gym.make(env_id).unwrapped  # only a source of well-formed actions
    rng = np.random.default_rng(1)
    with (
        TestClient(app) as client,
        client.websocket_connect("/ws") as root,
        client.websocket_connect("/ws") as fresh,
        client.websocket_connect("/ws") as used,
    ):
        frame(root, "reset", {"seed": 2})
        frame(root, "step", {"text": "not an action"})  # history before the forked episode
        frame(root, "reset", {"seed": 6})
        local.reset(seed=6)
        trunk = []
        last = None
        for _ in range(1):  # one trunk step: most ids have a future left to compare
            action = local.demo_action(rng)
            local.step(action)
            reply = frame(root, "step", {"text": action})
            trunk.append(action)
            last = reply["data"]
            if last["done"]:
                break
        state = frame(root, "state")["data"]
        handle = state["snapshot"]
        assert isinstance(handle, str) and HANDLE_RE.match(handle), state
        frame(used, "reset", {"seed": 11})  # a used session: its own episode first
        frame(used, "step", {"text": local.demo_action(np.random.default_rng(5))})
        branch = [local.demo_action(rng) for _ in range(4)]
        restored = {}
        for name, ws in (("fresh", fresh), ("used", used)):
            reply = frame(ws, "reset", {"injected_state": handle})
            assert reply["type"] == "observation", reply
            assert reply["data"]["observation"]["prompt"] == last["observation"]["prompt"]
            assert reply["data"]["done"] == last["done"]
            restored[name] = frame(ws, "state")["data"]
            assert restored[name]["task_id"] == state["task_id"], (name, env_id)
            assert restored[name]["step_count"] == len(trunk)
        if last["done"]:
            return  # nothing left to play: the restored observations were compared above
        futures = {name: play(ws, branch) for name, ws in (("fresh", fresh), ("used", used))}
        futures["root"] = play(root, branch)
        assert futures["root"], env_id
        assert len({json.dumps(f) for f in futures.values()}) == 1, (env_id, futures)
