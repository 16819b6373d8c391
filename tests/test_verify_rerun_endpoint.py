"""Re-execution of an OpenAI-compatible endpoint controller (issue 37 item 3): the submission
names an endpoint (base URL, model); ``orchenv verify --rerun --board`` plays it in bubblewrap,
where the only way to the endpoint is the verifier's recording proxy over a Unix socket; every
call is recorded and signed with the referee's record, and the row says "re-executed against
endpoint X (calls recorded, model not verified)".

The endpoint is a tiny OpenAI-compatible stub (aiohttp) started here: a test fixture standing in
for the submitter's server. The recording proxy and the sandbox are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv")
requests = pytest.importorskip("requests")

import orchenv  # noqa: E402,F401
from orchenv.error import DataError  # noqa: E402
from orchenv.eval.board import make_spec, sealed_status, write_spec  # noqa: E402
from orchenv.eval.leaderboard import read_runs  # noqa: E402
from orchenv.eval.rundir import read_episode_log  # noqa: E402
from orchenv.verify.endpoint import (  # noqa: E402
    CALLS_FILE,
    RecordingProxy,
    check_endpoint,
    read_calls,
)
from orchenv.verify.keys import read_key, write_key  # noqa: E402
from orchenv.verify.player import forward_loopback  # noqa: E402
from orchenv.verify.sandbox import rerun_entry_point  # noqa: E402

MATH = "orch/MathRoute-v0"
EPISODES = 3
MODEL = "stub-router-1"
API_KEY = (
    "sk-verifier-only-7Q2"  # the endpoint's key: the proxy sends it, the sandbox never sees it
)

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)


class Stub:
    """An OpenAI-compatible chat endpoint: routes to the strongest agent and accepts its draft
    (by the prompt's words); remembers each request and its Authorization header."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from aiohttp import web

        async def chat(request: web.Request) -> web.Response:
            body = await request.json()
            self.seen.append({"body": body, "auth": request.headers.get("Authorization")})
            prompt = body["messages"][-1]["content"]
            if prompt in ("deep answer", "nan answer"):  # JSON the record cannot hold as is
                return web.Response(
                    text='{"a": NaN}' if prompt == "nan answer" else "[" * 5000 + "]" * 5000,
                    content_type="application/json",
                )
            text = (
                "<verdict>True</verdict>"
                if "Proposed solution from" in prompt
                else "<model>Qwen3-30B-A3B-Instruct</model>"
            )
            return web.json_response(
                {
                    "id": f"chatcmpl-{len(self.seen)}",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                }
            )

        async def start() -> None:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", chat)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start())
        self.ready.set()
        self.loop.run_forever()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def stub() -> Iterator[Stub]:
    server = Stub()
    server.thread.start()
    assert server.ready.wait(30)
    yield server
    server.loop.call_soon_threadsafe(server.loop.stop)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("endpoint")
    key_file = write_key(root / "secret" / "board.key")
    key = read_key(key_file)
    spec = make_spec(MATH, pool="system1", split="test", sealed_episodes=EPISODES, key=key)
    board_file = write_spec(root / "secret" / "board.json", spec)
    return {"root": root, "key_file": key_file, "key": key, "spec": spec, "board": board_file}


def _bundle(root: Path, name: str, endpoint: dict, source: str | None = None) -> Path:
    bundle = root / "bundles" / name
    bundle.mkdir(parents=True)
    entry: dict[str, Any] = {"endpoint": endpoint}
    if source is not None:
        (bundle / "policy.py").write_text(textwrap.dedent(source), encoding="utf-8")
        entry["entry_point"] = "policy:Router"
    (bundle / "entry_point.json").write_text(json.dumps(entry), encoding="utf-8")
    return bundle


@needs_bwrap
def test_an_endpoint_controller_is_re_executed_through_the_recording_proxy(
    board: dict, stub: Stub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STUB_KEY", API_KEY)
    endpoint = {"base_url": stub.base_url, "model": MODEL, "params": {"temperature": 0}}
    bundle = _bundle(board["root"], "builtin", endpoint)
    before = len(stub.seen)
    out = board["root"] / "runs" / "endpoint-builtin"
    result = rerun_entry_point(
        bundle,
        board["board"],
        board["key_file"],
        out,
        timeout_s=300,
        endpoint_key_env="STUB_KEY",
        endpoint_allow_private=True,  # the stub listens on 127.0.0.1
    )
    assert result.status == "complete", result.stderr_tail
    assert result.note == (
        f"re-executed against endpoint {stub.base_url} model {MODEL} "
        "(calls recorded, model not verified)"
    )
    rows = read_episode_log(out / "episodes.jsonl")
    actions = [a for r in rows for a in r["actions"]]
    assert len(rows) == EPISODES and all(r["correct"] is not None for r in rows)
    # every call the stub answered is in the record, in order, with the answer the sandbox got
    calls = read_calls(out / CALLS_FILE)
    seen = stub.seen[before:]
    assert result.calls == len(calls) == len(seen) == len(actions)
    assert [c["request"] for c in calls] == [s["body"] for s in seen]
    assert [c["response"]["choices"][0]["message"]["content"] for c in calls] == actions
    assert all(c["status"] == 200 and c["path"] == "/chat/completions" for c in calls)
    assert all(c["request"]["model"] == MODEL and c["request"]["temperature"] == 0 for c in calls)
    # the key reached the endpoint from the proxy, never the record
    assert {s["auth"] for s in seen} == {f"Bearer {API_KEY}"}
    for name in ("run.json", "episodes.jsonl", "summary.json", "sealed.json", CALLS_FILE):
        assert API_KEY not in (out / name).read_text()
    # the signed record binds the calls and says what it proves
    sealed = json.loads((out / "sealed.json").read_text())
    assert CALLS_FILE in sealed["files"] and sealed["note"] == result.note
    run = json.loads((out / "run.json").read_text())
    assert run["refereed"]["rerun"]["model"] == MODEL
    assert run["refereed"]["rerun"]["note"] == result.note
    assert sealed_status(out, board["spec"], board["key"]) == "sealed"
    site = tmp_path / "board"
    site.mkdir()
    ranked, rejected = read_runs([out], site, key=board["key"], spec=board["spec"])
    assert not rejected and ranked[0].sealed and ranked[0].verification == "verified"
    # the row says how it was made: refereed, and against which endpoint (the signed note)
    assert ranked[0].verification_reason.startswith("refereed by the board's server")
    assert result.note in ranked[0].verification_reason
    copy = tmp_path / "edited"
    shutil.copytree(out, copy)
    lines = (copy / CALLS_FILE).read_text().splitlines()
    (copy / CALLS_FILE).write_text("\n".join(lines[1:]) + "\n")  # drop a call
    assert sealed_status(copy, board["spec"], board["key"]) == (
        "its files changed after the sealed run was signed"
    )


PROBING = '''
import json, os, socket, urllib.error, urllib.request


class Router:
    """An entry point with an endpoint: probes its way out first, reports what it found in
    its requests' "user" field (which the proxy records), then plays through the proxy."""

    def __init__(self, direct):
        self.found = {"key": os.environ.get("OPENAI_API_KEY"),
                      "model": os.environ.get("ORCHENV_ENDPOINT_MODEL")}
        base = os.environ["OPENAI_BASE_URL"]
        self.base = base
        try:  # the endpoint itself, around the proxy
            socket.create_connection(tuple(direct), timeout=3).close()
            self.found["direct"] = "reached"
        except OSError as exc:
            self.found["direct"] = type(exc).__name__
        try:  # another model through the proxy
            self._chat("gpt-4o", "hi")
            self.found["other_model"] = "answered"
        except urllib.error.HTTPError as exc:
            self.found["other_model"] = exc.code

    def _chat(self, model, prompt):
        body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                "user": json.dumps(self.found)}
        req = urllib.request.Request(self.base + "/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as reply:
            return json.loads(reply.read())["choices"][0]["message"]["content"]

    def act(self, observation, info):
        return self._chat(self.found["model"], observation)
'''


@needs_bwrap
def test_an_entry_point_reaches_its_endpoint_only_through_the_proxy(
    board: dict, stub: Stub
) -> None:
    endpoint = {"base_url": stub.base_url, "model": MODEL}
    bundle = _bundle(board["root"], "probing", endpoint, PROBING)
    entry = json.loads((bundle / "entry_point.json").read_text())
    entry["kwargs"] = {"direct": ["127.0.0.1", stub.port]}
    (bundle / "entry_point.json").write_text(json.dumps(entry))
    out = board["root"] / "runs" / "endpoint-probing"
    result = rerun_entry_point(
        bundle, board["board"], board["key_file"], out, timeout_s=300, endpoint_allow_private=True
    )
    assert result.status == "complete", result.stderr_tail
    calls = read_calls(out / CALLS_FILE)
    found = json.loads(calls[-1]["request"]["user"])
    assert found["direct"] != "reached"  # no network: the endpoint only through the proxy
    assert found["other_model"] == 403  # the declared model, or nothing
    assert found["model"] == MODEL and found["key"] == "recorded-by-the-verifier"
    # the refused call is not a recorded call; the played ones are, one per action
    actions = [a for r in read_episode_log(out / "episodes.jsonl") for a in r["actions"]]
    assert len(calls) == len(actions) and all(c["request"]["model"] == MODEL for c in calls)
    assert json.loads((out / "sealed.json").read_text())["note"] == result.note


def test_the_recording_proxy_refuses_and_records(tmp_path: Path, stub: Stub) -> None:
    """Without a sandbox: the proxy on a Unix socket, reached through the player's loopback
    forwarder. Wrong paths, models, bodies and a stream are refused unrecorded; an unreachable
    endpoint is answered 502 and recorded; after the record is sealed every call is 409."""
    uds = str(tmp_path / "p.sock")
    proxy = RecordingProxy(
        {"base_url": stub.base_url, "model": MODEL},
        uds,
        tmp_path / "calls.jsonl",
        max_calls=3,
        allow_private=True,
    )
    with proxy:
        url = f"http://127.0.0.1:{forward_loopback(uds)}/v1"
        good = {"model": MODEL, "messages": [{"role": "user", "content": "x\ud800"}]}
        assert requests.post(url + "/chat/completions", json=good, timeout=30).status_code == 200
        for method, path, kw, status in (
            ("post", "/files", {"json": good}, 404),
            ("get", "/../../etc/passwd", {}, 404),
            ("post", "/chat/completions", {"json": {**good, "model": "other"}}, 403),
            ("post", "/chat/completions", {"data": b"\xff{not json"}, 400),
            ("post", "/chat/completions", {"json": [good]}, 400),
            ("post", "/chat/completions", {"json": {**good, "stream": True}}, 400),
            ("post", "/chat/completions", {"data": b"[" * 100_000}, 400),
            ("post", "/chat/completions", {"data": b"x" * (5 * 1024 * 1024)}, 413),
        ):
            reply = getattr(requests, method)(url + path, timeout=30, **kw)
            assert reply.status_code == status, (path, kw.keys(), reply.text[:200])
        for prompt in ("nan answer", "deep answer"):
            hostile = {**good, "messages": [{"role": "user", "content": prompt}]}
            reply = requests.post(url + "/chat/completions", json=hostile, timeout=30)
            assert reply.status_code == 200 and reply.text[:2] in ('{"', "[[")
        assert requests.post(url + "/chat/completions", json=good, timeout=30).status_code == 429
        folder = tmp_path / "record"
        folder.mkdir()
        assert proxy.seal_into(folder) == [CALLS_FILE]
        assert requests.post(url + "/chat/completions", json=good, timeout=30).status_code == 409
    calls = read_calls(folder / CALLS_FILE)
    assert [c["n"] for c in calls] == [1, 2, 3] and all(c["status"] == 200 for c in calls)
    assert calls[1]["response"] == '{"a": NaN}' and calls[2]["response"].startswith("[[[")
    # an endpoint that is down: 502, recorded with the error
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    uds2 = str(tmp_path / "q.sock")
    with RecordingProxy(
        {"base_url": f"http://127.0.0.1:{dead}/v1", "model": MODEL},
        uds2,
        tmp_path / "c2.jsonl",
        allow_private=True,
    ):
        url = f"http://127.0.0.1:{forward_loopback(uds2)}/v1"
        assert requests.post(url + "/chat/completions", json=good, timeout=30).status_code == 502
    (row,) = read_calls(tmp_path / "c2.jsonl")
    assert "error" in row and row["request"] == good
    # by default the proxy connects to public addresses only: a submission cannot point it
    # at the verifier's loopback, private network or the cloud metadata address
    for base in (stub.base_url, "http://169.254.169.254/latest", "http://[::1]:9/v1"):
        uds3 = str(tmp_path / "r.sock")
        with RecordingProxy({"base_url": base, "model": MODEL}, uds3, tmp_path / "c3.jsonl"):
            url = f"http://127.0.0.1:{forward_loopback(uds3)}/v1"
            reply = requests.post(url + "/chat/completions", json=good, timeout=30)
            assert reply.status_code == 502 and "not a public address" in reply.text, reply.text
        (row,) = read_calls(tmp_path / "c3.jsonl")
        assert "not a public address" in row["error"]


def test_endpoint_declarations_are_checked() -> None:
    ok = check_endpoint({"base_url": "https://api.example.com/v1/", "model": "m"}, "e")
    assert ok == {"base_url": "https://api.example.com/v1", "model": "m", "params": {}}
    for bad, why in (
        ([], "object"),
        ({"base_url": "file:///etc/passwd", "model": "m"}, "http"),
        ({"base_url": "http://h/v1?x=1", "model": "m"}, "query"),
        ({"base_url": "http://h/v1", "model": ""}, "model"),
        ({"base_url": "http://h/v1", "model": "m", "params": {"logit_bias": {}}}, "params"),
        ({"base_url": "http://h/v1", "model": "m", "params": {"temperature": [1] * 9}}, "params"),
        ({"base_url": "http://h/v1", "model": "m", "api_key": "x"}, "takes"),
        ({"base_url": "h" * 10_000, "model": "m"}, "URL"),
    ):
        with pytest.raises(DataError, match=why):
            check_endpoint(bad, "e")


OPENAI_CLIENT = '''
import os

from openai import OpenAI


class Router:
    """What a submitter writes: the OpenAI client, configured by the environment."""

    def __init__(self):
        self.client = OpenAI(max_retries=0, timeout=60)  # OPENAI_BASE_URL, OPENAI_API_KEY
        self.model = os.environ["ORCHENV_ENDPOINT_MODEL"]

    def act(self, observation, info):
        reply = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": observation}]
        )
        return reply.choices[0].message.content
'''


@needs_bwrap
def test_the_openai_client_works_unchanged_in_the_sandbox(board: dict, stub: Stub) -> None:
    pytest.importorskip("openai")
    bundle = _bundle(
        board["root"], "openai-client", {"base_url": stub.base_url, "model": MODEL}, OPENAI_CLIENT
    )
    out = board["root"] / "runs" / "endpoint-openai"
    result = rerun_entry_point(
        bundle, board["board"], board["key_file"], out, timeout_s=300, endpoint_allow_private=True
    )
    assert result.status == "complete", result.stderr_tail
    calls = read_calls(out / CALLS_FILE)
    actions = [a for r in read_episode_log(out / "episodes.jsonl") for a in r["actions"]]
    assert len(calls) == len(actions) == result.calls and all(c["status"] == 200 for c in calls)
    assert [c["response"]["choices"][0]["message"]["content"] for c in calls] == actions
