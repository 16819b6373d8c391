"""Recording must not change a live run: repeated requests are distinct calls (issue 27).

Against a server that samples (a new answer per request), forked branches of one state and
repeated identical requests (self-consistency samples, retries) get different answers. They
must get the same answers with and without ``--record``, and a replay of the recording must
give each the answer it got live, with zero requests.
"""

from __future__ import annotations

import itertools
import json
import threading

import gymnasium as gym
import pytest

import orchenv  # noqa: F401  (registers the ids)
from orchenv.backends.replay import read_records
from orchenv.backends.store import OccurrenceStore
from orchenv.pool import CallContext, make_pool
from orchenv.testing.fake_openai import FakeOpenAIServer


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class Sampler:
    """A reply function that answers every request with a new number, like sampling at T=1."""

    def __init__(self) -> None:
        self._count = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        with self._lock:
            n = next(self._count)
        return f"I think the answer is \\boxed{{{n}}}."


def branch_drafts(pool) -> list[str]:
    """Three forks of one MathRoute state, each routing to the same agent with the same prompt,
    then two identical self-consistency requests through the pool: the answers' texts."""
    env = gym.make("orch/MathRoute-v0", pool=pool, split="test").unwrapped
    _, info = env.reset(seed=3)
    agent = info["valid_agents"][0]
    texts = []
    for _ in range(3):
        branch = env.fork()
        obs, *_ = branch.step(f"<model>{agent}</model>")
        texts.append(obs)  # the verify observation shows the draft
    messages = [{"role": "user", "content": "Sample me."}]
    for _ in range(2):
        texts.append(pool.call(agent, messages, CallContext(task=env.task)).text)
    return texts


def test_forks_and_samples_get_their_own_answers_with_and_without_recording(tmp_path):
    path = tmp_path / "rec.jsonl"
    runs = {}
    for name, record in (("live", None), ("recorded", path)):
        with FakeOpenAIServer(reply=Sampler()) as server:
            pool = make_pool(
                "system1",
                backend="openai",
                backend_kwargs={"base_url": server.url, "timeout_s": 10.0},
                record_to=record,
            )
            runs[name] = (branch_drafts(pool), len(server.requests))
            pool.close()
    live, recorded = runs["live"], runs["recorded"]
    # live: five requests, five different answers; recording changes nothing
    assert live[1] == recorded[1] == 5
    assert len(set(live[0])) == 5 and live[0] == recorded[0]
    occurrences = sorted(r["occurrence"] for r in read_records_all(path))
    assert occurrences == [0, 0, 1, 1, 2]
    # replay: each branch and sample gets its own live answer, and the server sees nothing
    with FakeOpenAIServer(reply=Sampler()) as server:
        pool = make_pool("system1", backend="openai",
                         backend_kwargs={"base_url": server.url}, replay_from=path)  # fmt: skip
        assert branch_drafts(pool) == recorded[0]
        assert len(server.requests) == 0
        pool.close()
    # a rerun that resumes the recording pays for nothing and gets the same answers
    with FakeOpenAIServer(reply=Sampler()) as server:
        pool = make_pool("system1", backend="openai",
                         backend_kwargs={"base_url": server.url}, record_to=path)  # fmt: skip
        assert branch_drafts(pool) == recorded[0]
        assert len(server.requests) == 0
        # one more repeat than recorded is a new live call, recorded as occurrence 2
        messages = [{"role": "user", "content": "Sample me."}]
        env = gym.make("orch/MathRoute-v0", split="test").unwrapped
        env.reset(seed=3)
        extra = pool.call(pool.names[0], messages, CallContext(task=env.task))
        assert len(server.requests) == 1 and extra.text not in recorded[0]
        pool.close()


def read_records_all(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def test_format_1_files_answer_every_repeat_with_the_first_record(tmp_path):
    store = OccurrenceStore()
    assert store.load("k", {"completion": "first"}) and not store.load("k", {"completion": "x"})
    assert [store.take("k")[1]["completion"] for _ in range(3)] == ["first"] * 3
    v2 = OccurrenceStore()
    v2.load("k", {"occurrence": 1, "completion": "b"})
    v2.load("k", {"occurrence": 0, "completion": "a"})
    assert [(n, r and r["completion"]) for n, r in (v2.take("k") for _ in range(3))] == [
        (0, "a"), (1, "b"), (2, None)
    ]  # fmt: skip
    assert read_records  # the keyed reader stays for tools that want one record per key
