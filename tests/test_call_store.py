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


# -- the eval journal is the same store ---------------------------------------------------------
class Counting:
    """A sampling backend in process: every call a new answer."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, spec, messages, context):
        from orchenv.pool import Completion

        self.calls += 1
        return Completion(spec.name, f"answer {self.calls}", 3, 2, 0.0)


def test_the_journal_gives_the_nth_repeat_the_nth_answer_and_repairs_its_file(tmp_path, caplog):
    from orchenv.error import DataError
    from orchenv.eval.journal import CallJournal
    from orchenv.pool import AgentSpec

    spec = AgentSpec(name="a", model="m", tier=0, backend="openai")
    messages = [{"role": "user", "content": "Sample me."}]
    backend, journal = Counting(), CallJournal(tmp_path)
    journal.begin(0, 0)
    live = [journal.complete(backend, spec, messages, CallContext()).text for _ in range(3)]
    assert live == ["answer 1", "answer 2", "answer 3"]
    journal.close()
    path = journal.path_for(0, 0)
    rows = read_records_all(path)
    assert [r["occurrence"] for r in rows] == [0, 1, 2] and len({r["key"] for r in rows}) == 1
    with path.open("ab") as fh:  # a kill mid-write
        fh.write(b'{"v":1,"key":"' + rows[0]["key"].encode() + b'","occ')
    # the retry: every repeat gets its own journaled answer, nothing is bought again
    assert journal.begin(0, 0) == 3
    again = [journal.complete(backend, spec, messages, CallContext()).text for _ in range(4)]
    assert again == [*live, "answer 4"] and backend.calls == 4 and journal.served == 3
    journal.close()
    assert [r["occurrence"] for r in read_records_all(path)] == [0, 1, 2, 3]  # torn tail cut
    # lines written before occurrences were stored count in file order
    legacy = [{k: v for k, v in r.items() if k != "occurrence"} for r in read_records_all(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert journal.begin(0, 0) == 4
    assert journal.complete(backend, spec, messages, CallContext()).text == "answer 1"
    journal.close()
    # a line that breaks the schema in the middle of the file is an error naming it
    path.write_text(json.dumps({**rows[0], "completion": {"text": 1}}) + "\n" + path.read_text())
    with pytest.raises(DataError, match=r"s0-e0.jsonl:1"):
        journal.begin(0, 0)


def test_eval_retries_get_the_same_answers_with_and_without_recording_and_in_replay(tmp_path):
    from orchenv.eval.harness import EvalConfig, evaluate
    from orchenv.testing.fake_openai import Fault

    def run(out, *, record=None, replay=None, fault=True):
        with FakeOpenAIServer(reply=Sampler()) as server:
            if fault:  # the third request fails once: its episode is retried from the journal
                server.add_faults(Fault(), Fault(), Fault(status=500))
            kwargs = {"base_url": server.url, "timeout_s": 10.0, "max_retries": 0}
            pool = make_pool("system1", backend="openai", backend_kwargs=kwargs,
                             record_to=record, replay_from=replay)  # fmt: skip
            config = EvalConfig("orch/MathRoute-v0", controller="env-random", pool=pool,
                                episodes=3, seeds=[0])  # fmt: skip
            result = evaluate(config, tmp_path / out, progress=False, retries=1)
            pool.close()
            if fault:  # the failed request was made, and its episode played again
                assert len(server.requests) == len(server.completions()) + 1
            answers = [
                (r.final_answer, r.correct, r.agent_calls, r.cached_calls)
                for _, r in sorted(result.records.items())
            ]
            return answers, len(server.completions())

    live, bought = run("live")
    recorded, bought_recording = run("recorded", record=tmp_path / "rec.jsonl")
    assert recorded == live and bought_recording == bought  # recording changes nothing
    assert len({a for a, *_ in live}) > 1  # the sampler's answers really differ
    replayed, requests = run("replayed", replay=tmp_path / "rec.jsonl", fault=False)
    assert requests == 0
    assert [a[:3] for a in replayed] == [a[:3] for a in live]  # each call its live answer


def test_call_log_fsyncs_every_record_or_at_most_once_per_interval(tmp_path, monkeypatch):
    import os

    from orchenv.backends import store

    synced: list[int] = []
    monkeypatch.setattr(store.os, "fsync", lambda fd: synced.append(fd))

    def log(name, interval):
        return store.CallLog(tmp_path / name, key_of=lambda r: r["k"],
                             validate=lambda row, where: row, who="test",
                             fsync_interval_s=interval)  # fmt: skip

    every = log("every.jsonl", None)
    for n in range(3):
        every.append("a", n, {"k": "a", "occurrence": n}, b'{"k":"a"}\n')
    assert len(synced) == 3
    every.close()
    batched = log("batched.jsonl", 3600.0)
    for n in range(3):
        batched.append("a", n, {"k": "a", "occurrence": n}, b'{"k":"a"}\n')
    assert len(synced) == 3  # none yet: the interval has not passed
    batched.close()
    assert len(synced) == 4  # the rest, once, when the file is closed
    batched.append("a", 3, {"k": "a", "occurrence": 3}, b'{"k":"a"}\n')
    batched.close(sync=False)  # about to be deleted: not synced
    assert len(synced) == 4 and os.path.getsize(tmp_path / "batched.jsonl") == 4 * 10
