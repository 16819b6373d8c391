"""Issue 36: ``orchenv serve`` hardened, in process (OpenEnv's app under Starlette's
TestClient: the real routes and JSON frames, no server process).

Each test failed on the code before issue 36:

* a state's snapshot was a zlib'd pickle of the env (the task's answer inside; a server
  unpickled whatever carried a valid MAC), with no way to turn fork off;
* a stranger resetting a taken role in someone's group restarted their game;
* ``POST /mcp`` ``openenv/session/create`` calls took every ``--max-sessions`` slot without a
  connection, and ``POST /reset`` / the task API built an env per request outside the cap;
* ``orchenv serve`` logged one line per session, nothing per reset or step.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import zlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv")
from starlette.testclient import TestClient  # noqa: E402

import orchenv  # noqa: E402,F401
from orchenv.serve.app import MCP_OFF, build_app  # noqa: E402
from orchenv.serve.environment import Runtime, ServeConfig  # noqa: E402
from orchenv.serve.forks import HANDLE_RE  # noqa: E402

MATH = "orch/MathRoute-v0"


def frame(ws: Any, kind: str, data: dict | None = None) -> dict:
    message: dict[str, Any] = {"type": kind}
    if data is not None:
        message["data"] = data
    ws.send_text(json.dumps(message))
    return json.loads(ws.receive_text())


def _decodes_to_env_data(snapshot: str) -> bool:
    """Whether a snapshot string is (base64 of) anything but a few random bytes: the old
    snapshots were base64(MAC + zlib(pickle)); a handle is 'fork-' + 24 random bytes."""
    try:
        raw = base64.urlsafe_b64decode(snapshot.encode("ascii") + b"==")
        zlib.decompress(raw[32:])
        return True
    except Exception:  # noqa: BLE001
        return False


# -- 1. snapshots without secrets or pickles ------------------------------------------------------


def test_state_snapshot_is_an_opaque_handle_and_restores() -> None:
    app = build_app(ServeConfig(env_id=MATH))
    local: Any = gym.make(MATH).unwrapped
    local.reset(seed=4)
    action = local.demo_action(np.random.default_rng(0))
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        frame(ws, "reset", {"seed": 4})
        step = frame(ws, "step", {"text": action})["data"]
        state = frame(ws, "state")["data"]
        snapshot = state["snapshot"]
        assert HANDLE_RE.match(snapshot) and len(snapshot) == 37, snapshot
        assert not _decodes_to_env_data(snapshot)
        assert local.task.id not in snapshot and state["fork"] == ""
        assert frame(ws, "state")["data"]["snapshot"] == snapshot  # nothing played: same one
        restored = frame(ws, "reset", {"injected_state": snapshot})["data"]
        assert restored["observation"]["prompt"] == step["observation"]["prompt"]
        # a forged handle, an old-style blob, a pickle: refused, nothing is unpickled
        for bad in (snapshot[:-4] + "AAAA", "gASVAAAAAAAAAAB9lC4=", {"x": 1}, "x" * 100_000):
            reply = frame(ws, "reset", {"injected_state": bad})
            assert reply["type"] == "error", reply
            assert "handle" in reply["data"]["message"] or "fork" in reply["data"]["message"]


def test_a_handle_keeps_the_point_it_was_minted_at() -> None:
    """The session plays on after its state was asked: the handle still restores the
    earlier point (the table holds a copy of the recording, not the live one)."""
    app = build_app(ServeConfig(env_id="orch/Puppeteer-v0"))
    local: Any = gym.make("orch/Puppeteer-v0").unwrapped
    local.reset(seed=4)
    rng = np.random.default_rng(0)
    actions = [local.demo_action(rng) for _ in range(3)]
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        frame(ws, "reset", {"seed": 4})
        at_mint = frame(ws, "step", {"text": actions[0]})["data"]
        handle = frame(ws, "state")["data"]["snapshot"]
        for action in actions[1:]:
            frame(ws, "step", {"text": action})
        with client.websocket_connect("/ws") as child:
            restored = frame(child, "reset", {"injected_state": handle})["data"]
            assert restored["observation"]["prompt"] == at_mint["observation"]["prompt"]
            assert frame(child, "state")["data"]["step_count"] == 1


def test_sealed_server_has_no_fork() -> None:
    app = build_app(ServeConfig(env_id=MATH, sealed=True))
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        frame(ws, "reset", {"seed": 1})
        state = frame(ws, "state")["data"]
        assert state["snapshot"] is None and "sealed" in state["fork"]
        reply = frame(ws, "reset", {"injected_state": "fork-" + "A" * 32})
        assert reply["type"] == "error" and "--sealed" in reply["data"]["message"]


def test_handle_is_bound_to_the_servers_arguments_and_expires(tmp_path: Path) -> None:
    """Two servers sharing a fork folder (as workers do) but with other env arguments: the
    handle of one is refused by the other; a handle past --fork-ttl is refused."""
    mine = build_app(ServeConfig(env_id=MATH, fork_dir=str(tmp_path), fork_ttl_s=0.5))
    theirs = build_app(ServeConfig(env_id=MATH, split="test", fork_dir=str(tmp_path)))
    with TestClient(mine) as a, a.websocket_connect("/ws") as ws:
        frame(ws, "reset", {"seed": 2})
        handle = frame(ws, "state")["data"]["snapshot"]
        with TestClient(theirs) as b, b.websocket_connect("/ws") as other:
            reply = frame(other, "reset", {"injected_state": handle})
            assert reply["type"] == "error" and "other env arguments" in reply["data"]["message"]
        time.sleep(0.7)
        reply = frame(ws, "reset", {"injected_state": handle})
        assert reply["type"] == "error" and "expired" in reply["data"]["message"]


# -- 2. seats with owners ---------------------------------------------------------------------------


def test_a_stranger_cannot_take_a_seat_or_restart_the_game() -> None:
    app = build_app(ServeConfig(env_id="orch/MultihopQA-v0", seat_timeout_s=1.0))
    with (
        TestClient(app) as client,
        client.websocket_connect("/ws") as owner,
        client.websocket_connect("/ws") as stranger,
    ):
        first = frame(owner, "reset", {"agent": "planner", "group": "g1", "seed": 3})
        token = first["data"]["observation"]["group_token"]
        assert isinstance(token, str) and len(token) >= 16
        # no token: refused (before issue 36 this restarted the owner's game)
        reply = frame(stranger, "reset", {"agent": "planner", "group": "g1", "seed": 9})
        assert reply["type"] == "error" and "group_token" in reply["data"]["message"]
        reply = frame(stranger, "reset", {"agent": "searcher", "group": "g1"})
        assert reply["type"] == "error" and "group_token" in reply["data"]["message"]
        wrong = {"agent": "planner", "group": "g1", "group_token": "x" * 32}
        assert frame(stranger, "reset", wrong)["type"] == "error"
        # the token does not buy a taken seat either
        taken = {"agent": "planner", "group": "g1", "group_token": token}
        reply = frame(stranger, "reset", taken)
        assert reply["type"] == "error" and "taken by another session" in reply["data"]["message"]
        assert "searcher" in reply["data"]["message"]  # the free seats are named
        # the owner's game was not restarted: its step plays, then waits for the searcher
        reply = frame(owner, "step", {"text": "<plan>x</plan><query>y</query>"})
        assert reply["type"] == "error" and "timed out" in reply["data"]["message"], reply
        assert "restarted" not in reply["data"]["message"]


def test_a_client_chosen_token_lets_seats_start_together() -> None:
    app = build_app(ServeConfig(env_id="orch/MultihopQA-v0", seat_timeout_s=5.0))
    token = "a-secret-the-seats-share"
    with TestClient(app) as client, client.websocket_connect("/ws") as planner:
        reply = frame(planner, "reset", {"agent": "planner", "group": "g2", "group_token": token})
        assert reply["data"]["observation"]["group_token"] == token
        with client.websocket_connect("/ws") as other:
            short = {"agent": "searcher", "group": "g3", "group_token": "short"}
            assert "16 to 200" in frame(other, "reset", short)["data"]["message"]


# -- 3. one capacity for every way in -----------------------------------------------------------


def test_a_flood_of_mcp_sessions_resets_and_task_calls_leaves_ws_able_to_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = []
    make_env = Runtime.make_env

    def counting(self: Runtime) -> Any:
        built.append(1)
        return make_env(self)

    monkeypatch.setattr(Runtime, "make_env", counting)
    app = build_app(ServeConfig(env_id=MATH, max_sessions=2))
    built.clear()
    with TestClient(app) as client:
        for i in range(10):
            create = {"jsonrpc": "2.0", "id": i, "method": "openenv/session/create", "params": {}}
            reply = client.post("/mcp", json=create).json()
            assert reply.get("error", {}).get("message") == MCP_OFF, reply
            response = client.post("/reset", json={"seed": i})
            assert response.status_code == 409 and "/ws" in response.json()["detail"]
            assert client.get("/MathRoute-v0/splits").status_code == 200
            count = client.post("/MathRoute-v0/num_tasks", json={"split": "test"})
            assert count.status_code == 200, count.text
        assert client.post("/mcp", json={}).json()["jsonrpc"] == "2.0"  # validate's probe
        paths = client.get("/openapi.json").json()["paths"]  # validate's mode check
        assert {"/reset", "/step", "/state", "/mcp"} <= set(paths)
        assert len(built) <= 1, "the stateless routes built envs outside the cap"
        with client.websocket_connect("/ws") as ws:
            assert frame(ws, "reset", {"seed": 0})["type"] == "observation"


def test_with_mcp_on_sessions_count_against_the_cap() -> None:
    app = build_app(ServeConfig(env_id=MATH, max_sessions=1, mcp=True))
    with TestClient(app) as client:
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        assert "session_id" in client.post("/mcp", json=create).json()["result"]
        second = client.post("/mcp", json=create).json()
        assert "error" in second
        with client.websocket_connect("/ws") as ws:
            reply = frame(ws, "reset", {"seed": 0})
            assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED"


# -- 5. logs ------------------------------------------------------------------------------------


def test_verbose_logs_each_reset_step_and_close(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orchenv.serve.session")
    app = build_app(ServeConfig(env_id=MATH))
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        frame(ws, "reset", {"seed": 1})
        frame(ws, "step", {"text": "<model>Qwen2.5-7B-Instruct</model>"})
        ws.send_text(json.dumps({"type": "close"}))  # the server closes the session now
        deadline = time.monotonic() + 10  # the session closes in its executor
        while time.monotonic() < deadline and not any(
            "closed" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if r.name == "orchenv.serve.session"]
    assert any(" reset " in line and "seed=1" in line for line in lines), lines
    assert any(" step 1" in line for line in lines), lines
    assert any("closed" in line for line in lines), lines
