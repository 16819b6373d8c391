"""``orchenv serve`` (issue 29): real servers on 127.0.0.1, OpenEnv's own validator and
client, episodes equal to in-process ones, seats, fork over the wire, hostile input.

One server process per id (module-scoped), MathRoute, MultihopQA and Puppeteer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv")
requests = pytest.importorskip("requests")
websockets_sync = pytest.importorskip("websockets.sync.client")
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

import orchenv  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
MAX_SESSIONS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, env_id: str, *extra: str) -> None:
        self.port = _free_port()
        # a file, not a pipe: a full pipe would block the server
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed in stop())
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchenv", "serve", env_id, "--port", str(self.port)]
            + ["--max-sessions", str(MAX_SESSIONS), "--seat-timeout", "20", *extra],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.env_id = env_id

    def wait(self) -> Server:
        env_id = self.env_id
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orchenv serve {env_id} exited: {self.stderr()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"orchenv serve {env_id} did not come up in 120 s")

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def alive(self) -> bool:
        return self.proc.poll() is None and requests.get(self.url + "/health", timeout=5).ok

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    """The three servers, started at once (their imports overlap)."""
    started = {
        # pinned sessions; -v: each worker logs its sessions' resets, steps and closes
        "mathroute": Server("orch/MathRoute-v0", "--workers", "2", "-v"),
        "multihop": Server("orch/MultihopQA-v0"),
        "puppeteer": Server("orch/Puppeteer-v0", "--inline"),  # steps on the event loop
    }
    try:
        yield {name: server.wait() for name, server in started.items()}
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def mathroute(servers: dict[str, Server]) -> Server:
    return servers["mathroute"]


@pytest.fixture(scope="module")
def puppeteer(servers: dict[str, Server]) -> Server:
    return servers["puppeteer"]


@pytest.fixture(scope="module")
def multihop(servers: dict[str, Server]) -> Server:
    return servers["multihop"]


def _local_episode(env_id: str, seed: int) -> tuple[list[str], list[float], list[str]]:
    """An in-process episode (gym.make, demo actions from a fixed RNG): actions, rewards,
    observations."""
    env: Any = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions, rewards, prompts = [], [], [obs]
    while True:
        action = env.unwrapped.demo_action(rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        actions.append(action)
        rewards.append(float(reward))
        prompts.append(obs)
        if terminated or truncated:
            env.close()
            return actions, rewards, prompts


@pytest.mark.parametrize("name", ["mathroute", "multihop", "puppeteer"])
def test_openenv_validate_url_passes(name: str, request: pytest.FixtureRequest) -> None:
    """``openenv validate --url URL --json``: OpenEnv's own CLI (its typer app, run in this
    process: a new process would import gradio again, 5 s of CPU)."""
    from openenv.cli.__main__ import app
    from typer.testing import CliRunner

    server = request.getfixturevalue(name)
    out = CliRunner().invoke(app, ["validate", "--url", server.url, "--json"])
    report = json.loads(out.stdout)
    required = [c for c in report["criteria"] if c.get("required", True)]
    assert out.exit_code == 0, out.stdout
    assert report["passed"] and report["standard_profile"] == "openenv-http/1.x"
    assert len(required) >= 6 and all(c["passed"] for c in required), required


@pytest.mark.parametrize(
    "name,env_id", [("mathroute", "orch/MathRoute-v0"), ("puppeteer", "orch/Puppeteer-v0")]
)
def test_remote_episode_equals_in_process(
    name: str, env_id: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(name)
    with GenericEnvClient(base_url=server.url).sync() as client:
        for seed in (0, 1, 2):
            actions, rewards, prompts = _local_episode(env_id, seed)
            result = client.reset(seed=seed)
            remote_prompts = [result.observation["prompt"]]
            remote_rewards = []
            for action in actions:
                result = client.step({"text": action})
                remote_rewards.append(result.reward)
                remote_prompts.append(result.observation["prompt"])
                assert "privileged" not in json.dumps(result.observation)
            assert result.done
            assert remote_rewards == rewards and sum(remote_rewards) == sum(rewards)
            assert remote_prompts == prompts


def test_stateless_step_is_a_4xx_that_points_to_ws(mathroute: Server) -> None:
    response = requests.post(mathroute.url + "/step", json={"action": {"text": "x"}}, timeout=10)
    assert response.status_code == 409 and "/ws" in response.json()["detail"]
    # the stateless reset would build an env per request outside --max-sessions (issue 36)
    response = requests.post(mathroute.url + "/reset", json={"seed": 3}, timeout=10)
    assert response.status_code == 409 and "/ws" in response.json()["detail"]
    # the task API lists the id's splits and tasks by index
    assert requests.get(mathroute.url + "/list_environments", timeout=10).json() == ["MathRoute-v0"]
    splits = requests.get(mathroute.url + "/MathRoute-v0/splits", timeout=10).json()
    assert {"name": "test", "type": "test"} in splits
    task = requests.post(
        mathroute.url + "/MathRoute-v0/task", json={"split": "test", "index": 2}, timeout=10
    ).json()["task"]
    with GenericEnvClient(base_url=mathroute.url).sync() as client:
        result = client.reset(split="test", index=2)
        assert result.observation["info"]["task_id"] == task["id"]
        assert client.state()["task_id"] == task["id"]


def _raw(url: str) -> Any:
    return websockets_sync.connect(url.replace("http", "ws") + "/ws", max_size=None)


def _exchange(ws: Any, message: str) -> dict:
    with contextlib.suppress(ConnectionClosed):  # a refused session: error frame, then close
        ws.send(message)
    return json.loads(ws.recv(timeout=30))


def test_no_privileged_key_in_any_frame(mathroute: Server) -> None:
    local = gym.make("orch/MathRoute-v0")
    _, info = local.reset(seed=5)
    assert "privileged" in info  # in process the ground truth is there...
    with _raw(mathroute.url) as ws:
        frames = [_exchange(ws, json.dumps({"type": "reset", "data": {"seed": 5}}))]
        frames.append(_exchange(ws, json.dumps({"type": "state"})))
        frames.append(_exchange(ws, json.dumps({"type": "step", "data": {"text": "x"}})))
    for frame in frames:  # ...and never on the wire
        assert frame["type"] in {"observation", "state"} and "privileged" not in json.dumps(frame)


def test_fork_over_the_wire_equals_local_fork_tree(puppeteer: Server) -> None:
    env_id, seed = "orch/Puppeteer-v0", 4
    local: Any = gym.make(env_id).unwrapped
    local.reset(seed=seed)
    rng = np.random.default_rng(0)
    trunk = local.demo_action(rng)
    local.step(trunk)
    branches = [[local.demo_action(rng) for _ in range(3)] for _ in range(2)]

    def play(env, actions):  # local: (reward, prompt) per step until the end
        out = []
        for action in actions:
            obs, reward, terminated, truncated, _ = env.step(action)
            out.append((float(reward), obs, terminated or truncated))
            if terminated or truncated:
                break
        return out

    local_tree = [play(local.fork(), branch) for branch in branches]
    with GenericEnvClient(base_url=puppeteer.url).sync() as root:
        root.reset(seed=seed)
        root.step({"text": trunk})
        snapshot = root.state()["snapshot"]
        assert isinstance(snapshot, str) and snapshot
        remote_tree = []
        for branch in branches:
            with GenericEnvClient(base_url=puppeteer.url).sync() as child:
                child.reset(injected_state=snapshot)
                out = []
                for action in branch:
                    result = child.step({"text": action})
                    out.append((result.reward, result.observation["prompt"], result.done))
                    if result.done:
                        break
                remote_tree.append(out)
    assert remote_tree == local_tree
    # a forged handle is refused (it names nothing in the server's table)
    with (
        GenericEnvClient(base_url=puppeteer.url).sync() as client,
        pytest.raises(RuntimeError, match="unknown or expired fork handle"),
    ):
        client.reset(injected_state=snapshot[:-8] + "AAAAAAAA")


ROLE_TEXT = {
    "planner": "<plan>find the first entity</plan><query>{q}</query>",
    "searcher": "<search>{q}</search>",
    "recommender": "<answer>{q}</answer>",
}


def _role_action(role: str, prompt: str) -> str:
    return ROLE_TEXT.get(role, "ok").format(q=prompt.splitlines()[0][:60])


TOKEN = "coordinator-secret-0123456789"


def test_seats_play_one_game_in_aec_order(multihop: Server) -> None:
    from orchenv.envs.multihopqa.env import multihopqa_aec_env

    seed = 7
    aec = multihopqa_aec_env(router="rcr")
    aec.reset(seed=seed)
    local: dict[str, list] = {a: [] for a in aec.possible_agents}
    for agent in aec.agent_iter():
        obs, reward, terminated, truncated, _ = aec.last()
        local[agent].append((str(obs), float(reward)))
        aec.step(None if terminated or truncated else _role_action(agent, str(obs)))
    remote: dict[str, list] = {}
    errors: list[BaseException] = []

    def seat(role: str) -> None:
        try:
            with GenericEnvClient(base_url=multihop.url).sync() as client:
                # a token chosen by the coordinator: every seat can join at once
                result = client.reset(agent=role, group="g1", seed=seed, group_token=TOKEN)
                seen = [(result.observation["prompt"], result.reward)]
                while not result.done:
                    result = client.step({"text": _role_action(role, seen[-1][0])})
                    seen.append((result.observation["prompt"], result.reward))
                remote[role] = seen
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=seat, args=(r,)) for r in aec.possible_agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert set(remote) == set(local)
    for role in local:  # same prompts each turn, same rewards, same return
        assert [p for p, _ in remote[role]] == [p for p, _ in local[role]]
        assert [r for _, r in remote[role]] == [r for _, r in local[role]]
    # single-seat clients keep working on the same server (the Gymnasium planner view)
    with GenericEnvClient(base_url=multihop.url).sync() as client:
        assert client.reset(seed=seed).observation["agent"] is None


def test_hostile_input_gets_error_frames_and_the_server_survives(multihop: Server) -> None:
    with _raw(multihop.url) as ws:
        assert _exchange(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert _exchange(ws, json.dumps({"type": "nope"}))["data"]["code"] == "UNKNOWN_TYPE"
        bad = _exchange(ws, json.dumps({"type": "step", "data": {"text": 5}}))
        assert bad["type"] == "error"
        early = _exchange(ws, json.dumps({"type": "step", "data": {"text": "x"}}))
        assert early["type"] == "error" and "reset" in early["data"]["message"]
        unknown = _exchange(
            ws, json.dumps({"type": "reset", "data": {"agent": "nobody", "group": "h"}})
        )
        assert unknown["type"] == "error" and "planner" in unknown["data"]["message"]
        huge = _exchange(ws, json.dumps({"type": "reset", "data": {"seed": 10**400}}))
        assert huge["type"] == "error"
        odd = _exchange(ws, json.dumps({"type": "reset", "data": {"seed": 1, "bogus": [[[]]]}}))
        assert odd["type"] == "error" and "bogus" in odd["data"]["message"]
        assert (
            _exchange(ws, json.dumps({"type": "reset", "data": {"seed": 1}}))["type"]
            == "observation"
        )
        big = _exchange(ws, json.dumps({"type": "step", "data": {"text": "x" * 10_000_000}}))
        assert big["type"] == "observation" and big["data"]["observation"]["info"]["invalid_action"]
        lone = _exchange(ws, '{"type": "reset", "data": {"seed": 2}}')
        assert lone["type"] == "observation"
        lone = _exchange(ws, '{"type": "step", "data": {"text": "\\ud800 <query>\\udfff</query>"}}')
        assert lone["type"] == "observation"
    with _raw(multihop.url) as ws:  # deep nesting: the session ends with an error frame
        ws.send("[" * 100_000)
        assert json.loads(ws.recv(timeout=30))["type"] == "error"
    assert multihop.alive()
    # a flood beyond --max-sessions: CAPACITY_REACHED, then the server still serves
    time.sleep(0.5)
    codes = []
    with contextlib.ExitStack() as stack:
        for _ in range(MAX_SESSIONS + 4):
            ws = stack.enter_context(_raw(multihop.url))
            frame = _exchange(ws, json.dumps({"type": "reset", "data": {"seed": 0}}))
            codes.append(frame["type"] if frame["type"] != "error" else frame["data"]["code"])
    assert codes.count("CAPACITY_REACHED") >= 4 and codes.count("observation") >= 1
    assert set(codes) <= {"observation", "CAPACITY_REACHED"}
    time.sleep(1.0)
    with GenericEnvClient(base_url=multihop.url).sync() as client:
        assert client.reset(seed=0).observation["prompt"]
    assert multihop.alive()


def _doc_block(marker: str) -> str:
    text = (ROOT / "docs" / "serve.md").read_text("utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if b.startswith(f"# serve-doc: {marker}\n")]
    return block


def test_docs_plain_client_and_trl_environment_run(
    mathroute: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "http://127.0.0.1:8000"
    plain: dict[str, Any] = {}
    exec(compile(_doc_block("plain client").replace(url, mathroute.url), "serve.md", "exec"), plain)
    out = capsys.readouterr().out
    assert out.startswith("returns [") and out.rstrip().endswith("malformed turns 0"), out
    # the block's policy, in process: a valid action in every phase, never a format penalty
    # (the block before issue 36 sent a routing action on verify turns: 8 of 12 penalised)
    env: Any = gym.make("orch/MathRoute-v0")
    phases = set()
    for seed in range(4):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(plain["controller_turn"](info))
            done = terminated or truncated
            phases.add(info["phase"])
            assert not info["invalid_action"] and info["reward_components"]["format"] == 0, info
    assert phases >= {"verify"}
    data: dict[str, Any] = {}
    exec(compile(_doc_block("trl dataset"), "serve.md", "exec"), data)
    dataset = data["dataset"]
    assert {"prompt", "seed"} <= set(dataset.column_names) and len(dataset) == 64
    capsys.readouterr()
    namespace: dict[str, Any] = {}
    exec(
        compile(_doc_block("trl environment").replace(url, mathroute.url), "serve.md", "exec"),
        namespace,
    )
    actions, rewards, prompts = _local_episode("orch/MathRoute-v0", 1)
    tool = namespace["OrchEnvTool"]()
    assert tool.reset(seed=1, prompt=[{"role": "user", "content": "x"}]) == prompts[0]
    for action, prompt in zip(actions, prompts[1:], strict=True):
        assert tool.act(action) == prompt
    assert tool.done and tool.get_reward() == sum(rewards)
    assert tool.act("more") == "The episode is over."
    tool.client.close()


def test_two_workers_pin_sessions_and_restore_each_others_snapshots(mathroute: Server) -> None:
    """The MathRoute server runs --workers 2: a session stays on one worker for its whole
    episode, and a snapshot exported on one worker restores on the other."""
    clients = []
    try:
        # the kernel picks the worker: open sessions until both are seen, closing each one that
        # lands on the first session's worker again, so a run of them cannot fill that
        # worker's session slots (CI once saw "Server at capacity: 8/8 sessions active")
        for _ in range(40):
            client = GenericEnvClient(base_url=mathroute.url).sync()
            client.reset(seed=11)
            worker = client.state()["worker"]
            if clients and worker == clients[0][1]:
                client.close()
                continue
            clients.append((client, worker))
            if len(clients) == 2:
                break
        workers = {w for _, w in clients}
        assert len(workers) == 2, "40 sessions all landed on one worker"
        (root, root_worker), (child, child_worker) = (
            clients[0],
            next(c for c in clients if c[1] != clients[0][1]),
        )
        actions, rewards, prompts = _local_episode("orch/MathRoute-v0", 11)
        first = root.step({"text": actions[0]})
        assert first.observation["prompt"] == prompts[1]
        assert root.state()["worker"] == root_worker  # pinned
        handle = root.state()["snapshot"]
        assert handle.startswith("fork-") and len(handle) == 37  # opaque: no env data
        restored = child.reset(injected_state=handle)
        assert child.state()["worker"] == child_worker != root_worker
        assert restored.observation["prompt"] == prompts[1]
        rest = [child.step({"text": a}).reward for a in actions[1:]]
        assert [first.reward, *rest] == rewards
    finally:
        for client, _ in clients:
            client.close()


def test_skyrl_gym_env_plays_the_served_episode(mathroute: Server) -> None:
    """orchenv.serve.skyrl: SkyRL-Gym's BaseTextEnv over the wire gives the in-process
    episode (skipped unless skyrl-gym is installed; it is not a dependency of orchenv)."""
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from orchenv.serve import skyrl as orch_skyrl

    orch_skyrl.register()
    orch_skyrl.register()  # idempotent
    for seed in (0, 1):
        actions, rewards, prompts = _local_episode("orch/MathRoute-v0", seed)
        env = skyrl_gym.make(
            "orchenv", env_config={"orchenv_url": mathroute.url}, extras={"seed": seed}
        )
        conversation, _ = env.init([{"role": "user", "content": "ignored"}])
        assert conversation == [{"role": "user", "content": prompts[0]}]
        got = []
        for i, action in enumerate(actions):
            out = env.step(action)
            got.append(out["reward"])
            assert out["done"] == (i == len(actions) - 1)
            if not out["done"]:
                assert out["observations"] == [{"role": "user", "content": prompts[i + 1]}]
            assert "privileged" not in json.dumps(out["metadata"])
        assert got == rewards
        env.close()
    with pytest.raises(orchenv.error.ConfigError, match="URL"):
        orch_skyrl.OrchEnvSkyRLEnv(env_config={}, extras={})


def test_a_client_vanishing_mid_message_is_one_log_line(multihop: Server) -> None:
    """Issue 36: 20 clients that send a message and reset their TCP connection before the
    answer. Before, uvicorn logged a 5.8 KB traceback for each; now each is at most one
    line, and the server serves on."""
    import struct

    def full_log() -> str:
        multihop.log.seek(0)
        return multihop.log.read().decode("utf-8", "replace")

    before = len(full_log())
    for i in range(20):
        ws = _raw(multihop.url)
        kind = "reset" if i % 2 else "step"
        ws.send(
            json.dumps({"type": kind, "data": {"seed": i} if kind == "reset" else {"text": "x"}})
        )
        sock = ws.socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # an RST, no close frame: the server's answer has nowhere to go
    time.sleep(2.0)
    with GenericEnvClient(base_url=multihop.url).sync() as client:
        assert client.reset(seed=0).observation["prompt"]
    log = full_log()[before:]
    assert "Traceback" not in log, log[-3000:]
    assert log.count("mid-message") <= 20


def test_verbose_server_logs_resets_steps_and_closes_in_every_worker(mathroute: Server) -> None:
    """``orchenv serve -v --workers 2``: the spawned workers log too (issue 36)."""
    with GenericEnvClient(base_url=mathroute.url).sync() as client:
        client.reset(seed=21)
        client.step({"text": "<model>Qwen2.5-7B-Instruct</model>"})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and " closed after " not in mathroute.stderr():
        time.sleep(0.1)
    log = mathroute.stderr()
    assert "orchenv.serve.session" in log and "seed=21" in log, log[-2000:]
    assert " step 1: reward=" in log and " closed after " in log, log[-2000:]
