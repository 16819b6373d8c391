"""Recording and replaying agent calls (orchenv.backends.recording / .replay).

A recorded run replayed strictly must reproduce every observation, reward and
info; a recording killed mid-run must resume without losing or duplicating a
record and without paying again for recorded calls.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import json
import logging
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence

import orchenv  # noqa: F401  (registers the ids)
from orchenv.backends.recording import RecordingBackend
from orchenv.backends.replay import (
    ReplayBackend,
    completion_from_record,
    prompt_sha256,
    read_records,
    replay_key,
)
from orchenv.backends.simulated import SimulatedBackend
from orchenv.envs.mathroute.baselines import RandomRouter
from orchenv.error import BackendError, ConfigError, DataError
from orchenv.pool import AgentSpec, CallContext, Completion, make_pool
from orchenv.tasks import Task, make_task_source

N_EPISODES = 20
# info fields that say how a call was served: live when recorded, replayed on replay
SERVED_FROM = {"cached", "token_source", "cached_calls", "estimated_calls"}


# -- helpers ------------------------------------------------------------------------------
class Spy:
    """Counts the calls that reach a backend, by replay key."""

    def __init__(self, inner: Any, keying: str = "prompt") -> None:
        self.inner, self.keying = inner, keying
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def complete(self, spec, messages, context) -> Completion:
        key = replay_key(context.task.id, spec.name, messages, context.turn, self.keying)
        with self._lock:
            self.keys.append(key)
        return self.inner.complete(spec, messages, context)


def run_episodes(backend: Any, seeds: Sequence[int], **env_kwargs: Any) -> list[list[tuple]]:
    """Full trajectories of seeded RandomRouter episodes on MathRoute with ``backend``."""
    pool = make_pool("system1", backends={"simulated": backend})
    env = gym.make("orch/MathRoute-v0", pool=pool, split="test", **env_kwargs)
    trajectories = []
    for seed in seeds:
        controller = RandomRouter(seed=seed, p_accept=0.5)
        obs, info = env.reset(seed=seed)
        trace: list[tuple] = [(obs, info)]
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(controller.act(obs, info))
            trace.append((obs, reward, term, trunc, info))
            done = term or trunc
        trajectories.append(trace)
    return trajectories


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in SERVED_FROM}
    if isinstance(value, (list, tuple)):
        return type(value)(_strip(v) for v in value)
    return value


def normalized(trajectories: list[list[tuple]]) -> list[list[tuple]]:
    """Trajectories without the fields that legitimately differ (live vs replayed call)."""
    return _strip(copy.deepcopy(trajectories))


def served_flags(trajectories: list[list[tuple]]) -> list[tuple[bool, str]]:
    """(cached, token_source) of every agent call in the infos' ``calls`` lists (if any)."""
    return [
        (call["cached"], call["token_source"])
        for trace in trajectories
        for step in trace[1:]
        for call in step[-1].get("calls", [])
    ]


def n_agent_calls(trajectories: list[list[tuple]]) -> int:
    """How many agent calls the episodes made (MathRoute names the agent of each call)."""
    return sum("called_agent" in step[-1] for trace in trajectories for step in trace[1:])


def file_keys(path: Path) -> list[str]:
    """The key of every line of a JSONL file (every line must parse)."""
    return [json.loads(line)["key"] for line in path.read_text("utf-8").splitlines()]


def system1_spec() -> AgentSpec:
    return make_pool("system1").agents[0]


def procedural_tasks(n: int) -> list[Task]:
    source = make_task_source("procedural-math")
    return [source.get("test", i) for i in range(n)]


def solver_messages(task: Task, note: str = "") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Solve it." + note},
        {"role": "user", "content": task.prompt},
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[list[tuple]], Spy]:
    """A 20-episode run recorded through a spy on the simulated backend."""
    path = tmp_path_factory.mktemp("rec") / "rec.jsonl"
    spy = Spy(SimulatedBackend(seed=0))
    recorder = RecordingBackend(inner=spy, path=path)
    trajectories = run_episodes(recorder, range(N_EPISODES))
    recorder.close()
    return path, trajectories, spy


# -- record and replay ----------------------------------------------------------------------
def test_strict_replay_reproduces_recorded_run(recorded):
    path, live, spy = recorded
    replay = ReplayBackend(path=path, mode="strict")
    replayed = run_episodes(replay, range(N_EPISODES))
    assert data_equivalence(normalized(live), normalized(replayed))
    # only how calls were served differs: live once per key, replayed always
    assert replay.hits == n_agent_calls(live) > 0 and replay.misses == 0
    live_flags, replay_flags = served_flags(live), served_flags(replayed)
    if replay_flags:  # the info's per-call records say how each call was served
        assert len(live_flags) == len(replay_flags) == replay.hits
        assert (False, "estimate") in live_flags
        assert set(replay_flags) == {(True, "record")}
    # one line per distinct call, each key once, and exactly the calls the model answered
    keys = file_keys(path)
    assert len(keys) == len(set(keys)) == len(spy.keys) == len(set(spy.keys))
    assert set(keys) == set(spy.keys)


def test_record_format(recorded):
    path, _, _ = recorded
    line = json.loads(path.read_text("utf-8").splitlines()[0])
    assert set(line) == {
        "v",
        "key",
        "task_id",
        "agent",
        "turn",
        "prompt_sha256",
        "occurrence",
        "completion",
        "recorded_at",
    }
    assert line["v"] == 2 and line["occurrence"] == 0
    assert line["key"] == f"{line['task_id']}\x1f{line['agent']}\x1f{line['prompt_sha256']}"
    assert set(line["completion"]) >= {"text", "prompt_tokens", "completion_tokens", "meta"}
    assert isinstance(line["completion"]["meta"]["correct"], bool)  # correctness travels
    assert line["completion"]["cached"] is False
    record = read_records(path)[line["key"]]
    completion = completion_from_record(record)
    assert completion.cached and completion.token_source == "record"
    assert completion.latency_s == line["completion"]["latency_s"] > 0


def test_replay_key_and_prompt_hash():
    messages = [{"role": "user", "content": "É = mc²"}, {"role": "system", "content": "x"}]
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert prompt_sha256(messages) == digest
    assert replay_key("t1", "a", messages, 2) == f"t1\x1fa\x1f{digest}"
    assert replay_key("t1", "a", messages, 2, "turn") == "t1\x1fa\x1fturn=2"
    with pytest.raises(ConfigError):
        replay_key("t1", "a", messages, 2, "prompts")


# -- misses, fallthrough, keying --------------------------------------------------------------
def test_strict_miss_names_the_call(recorded):
    path, _, _ = recorded
    record = next(iter(read_records(path).values()))
    spec = make_pool("system1").spec(record["agent"])
    task = make_task_source("procedural-math").by_id(record["task_id"])
    replay = ReplayBackend(path=path)
    messages = [{"role": "user", "content": "a prompt that was never recorded"}]
    with pytest.raises(BackendError) as err:
        replay.complete(spec, messages, CallContext(task=task, turn=7))
    msg = str(err.value)
    key = replay_key(task.id, spec.name, messages, 7)
    for piece in (task.id, spec.name, "turn 7", prompt_sha256(messages), str(path)):
        assert piece in msg
    assert key.replace("\x1f", " | ") in msg
    assert "fallthrough" in msg and "RecordingBackend" in msg
    assert "other prompts" in msg  # the file has this task and agent, under other prompts
    # a diverging run fails loudly in strict mode
    with pytest.raises(BackendError):
        run_episodes(ReplayBackend(path=path), range(100, 100 + N_EPISODES))


def test_fallthrough_calls_the_fallback(recorded):
    path, _, _ = recorded
    seeds = list(range(10, 10 + N_EPISODES))  # partly different episodes
    spy = Spy(SimulatedBackend(seed=0))
    replay = ReplayBackend(path=path, mode="fallthrough", fallback=spy)
    mixed = run_episodes(replay, seeds)
    assert replay.misses == len(spy.keys) > 0 and replay.hits > 0
    recorded_keys = set(read_records(path))
    assert not recorded_keys & set(spy.keys), "recorded calls never reach the fallback"
    assert replay.hits + replay.misses == n_agent_calls(mixed)
    flags = served_flags(mixed)
    if flags:
        assert flags.count((True, "record")) == replay.hits
        assert flags.count((False, "estimate")) == replay.misses  # fallback answers unchanged
    live = run_episodes(SimulatedBackend(seed=0), seeds)
    assert data_equivalence(normalized(live), normalized(mixed))


def test_fallback_by_registered_name(recorded):
    path, _, _ = recorded
    replay = ReplayBackend(
        path=path, mode="fallthrough", fallback="simulated", fallback_kwargs={"seed": 3}
    )
    task = procedural_tasks(1)[0]
    spec = system1_spec()
    messages = solver_messages(task, " (never recorded)")
    got = replay.complete(spec, messages, CallContext(task=task))
    want = SimulatedBackend(seed=3).complete(spec, messages, CallContext(task=task))
    assert got == want and not got.cached
    assert isinstance(replay._fallback, SimulatedBackend)
    replay.close()


def test_turn_keying(tmp_path):
    path = tmp_path / "turn.jsonl"
    # one episode per task: turn keys are unambiguous
    pool_backend = RecordingBackend(inner=SimulatedBackend(seed=0), path=path, keying="turn")
    live = run_episodes(pool_backend, range(8))
    pool_backend.close()
    assert all(k.split("\x1f")[2].startswith("turn=") for k in file_keys(path))
    replayed = run_episodes(ReplayBackend(path=path, keying="turn"), range(8))
    assert data_equivalence(normalized(live), normalized(replayed))

    # turn keying ignores the prompt's wording; prompt keying does not
    record = next(iter(read_records(path).values()))
    spec = make_pool("system1").spec(record["agent"])
    task = make_task_source("procedural-math").by_id(record["task_id"])
    context = CallContext(task=task, turn=record["turn"])
    reworded = [{"role": "user", "content": "a reworded prompt"}]
    hit = ReplayBackend(path=path, keying="turn").complete(spec, reworded, context)
    assert hit.text == record["completion"]["text"] and hit.cached
    with pytest.raises(BackendError):
        ReplayBackend(path=path, keying="prompt").complete(spec, reworded, context)


def test_prompt_recording_replays_with_turn_keying(recorded):
    path, _, _ = recorded
    by_turn = read_records(path, keying="turn")
    assert all(k.endswith(f"turn={r['turn']}") for k, r in by_turn.items())
    assert len(by_turn) <= len(read_records(path))


def test_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    replay = ReplayBackend(path=path)  # no I/O at construction
    task, spec = procedural_tasks(1)[0], system1_spec()
    with pytest.raises(DataError, match="nope.jsonl"):
        replay.complete(spec, solver_messages(task), CallContext(task=task))
    spy = Spy(SimulatedBackend(seed=0))
    fall = ReplayBackend(path=path, mode="fallthrough", fallback=spy)
    assert fall.complete(spec, solver_messages(task), CallContext(task=task)).cached is False
    assert len(spy.keys) == 1 and not path.exists()


def test_task_is_required(tmp_path):
    spec = system1_spec()
    messages = [{"role": "user", "content": "1+1"}]
    replay = ReplayBackend(path=tmp_path / "r.jsonl")
    recorder = RecordingBackend(inner=SimulatedBackend(), path=tmp_path / "w.jsonl")
    for backend in (replay, recorder):
        with pytest.raises(BackendError, match=r"needs the task.*task id.*task=task, turn=turn"):
            backend.complete(spec, messages, CallContext())
    assert not (tmp_path / "w.jsonl").exists()


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        ReplayBackend(path=tmp_path / "r", mode="lenient")
    with pytest.raises(ConfigError):
        ReplayBackend(path=tmp_path / "r", keying="hash")
    with pytest.raises(ConfigError, match="fallback"):
        ReplayBackend(path=tmp_path / "r", mode="fallthrough")
    with pytest.raises(ConfigError):
        ReplayBackend(
            path=tmp_path / "r",
            mode="fallthrough",
            fallback=SimulatedBackend(),
            fallback_kwargs={"a": 1},
        )
    with pytest.raises(ConfigError, match="JSON Lines"):
        RecordingBackend(inner=SimulatedBackend(), path=tmp_path / "r.parquet")
    with pytest.raises(ConfigError):
        RecordingBackend(inner=SimulatedBackend(), path=tmp_path / "r", inner_kwargs={"seed": 1})
    rec = RecordingBackend(inner="simulated", inner_kwargs={"seed": 4}, path=tmp_path / "r")
    assert isinstance(rec.inner, SimulatedBackend) and rec.inner.seed == 4


# -- file robustness ------------------------------------------------------------------------
def _lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines(keepends=True)


def test_torn_last_line_is_skipped(recorded, tmp_path, caplog):
    path, _, _ = recorded
    lines = _lines(path)
    torn = tmp_path / "torn.jsonl"
    torn.write_text("".join(lines) + lines[-1][: len(lines[-1]) // 2], "utf-8")
    with caplog.at_level(logging.WARNING, logger="orchenv.backends.replay"):
        records = read_records(torn)
    assert records == read_records(path)
    assert "truncated or corrupt last line" in caplog.text
    # a garbage last line that did get its newline is skipped too
    torn.write_text("".join(lines) + "\x00garbage\n\n", "utf-8")
    assert read_records(torn) == read_records(path)


def test_corrupt_middle_line_is_an_error(recorded, tmp_path):
    path, _, _ = recorded
    lines = _lines(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:2]) + "{not json\n" + "".join(lines[2:]), "utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:3"):
        read_records(bad)
    record = json.loads(lines[0])
    del record["completion"]["text"]
    bad.write_text(json.dumps(record) + "\n" + "".join(lines), "utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:1.*lacks completion\.text"):
        read_records(bad)
    bad.write_text(json.dumps({**json.loads(lines[0]), "v": 3}) + "\n", "utf-8")
    with pytest.raises(DataError, match="version"):
        read_records(bad)


def test_duplicate_keys_keep_the_first(recorded, tmp_path):
    path, _, _ = recorded
    lines = _lines(path)
    twice = json.loads(lines[0])
    twice["completion"]["text"] = "a later duplicate"
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join(lines) + json.dumps(twice) + "\n", "utf-8")
    records = read_records(dup)
    assert records == read_records(path)
    assert records[twice["key"]]["completion"]["text"] != "a later duplicate"


def test_recorder_cuts_a_torn_tail_before_appending(recorded, tmp_path):
    path, _, _ = recorded
    lines = _lines(path)
    target = tmp_path / "resume.jsonl"
    target.write_text("".join(lines[:3]) + lines[3][:40], "utf-8")
    spy = Spy(SimulatedBackend(seed=0))
    recorder = RecordingBackend(inner=spy, path=target, fsync=False)
    run_episodes(recorder, range(N_EPISODES))
    recorder.close()
    keys = file_keys(target)  # every line parses: the torn bytes are gone
    assert len(keys) == len(set(keys)) and set(keys) == set(read_records(path))
    assert len(spy.keys) == len(keys) - 3
    # a last record without its newline is kept and terminated
    target.write_text("".join(lines[:3]) + lines[3].rstrip("\n"), "utf-8")
    recorder = RecordingBackend(inner=SimulatedBackend(seed=0), path=target, fsync=False)
    run_episodes(recorder, range(N_EPISODES))
    recorder.close()
    keys = file_keys(target)
    assert len(keys) == len(set(keys)) == len(lines)


# -- kill and resume ------------------------------------------------------------------------
KILL_EPISODES = 40
RECORD_SCRIPT = """
import sys, time
import gymnasium as gym
import orchenv
from orchenv.envs.mathroute.baselines import RandomRouter
from orchenv.backends.recording import RecordingBackend
from orchenv.backends.simulated import SimulatedBackend
from orchenv.pool import make_pool

class Slow:
    def __init__(self, inner):
        self.inner = inner
    def complete(self, spec, messages, context):
        time.sleep(0.03)
        return self.inner.complete(spec, messages, context)

recorder = RecordingBackend(inner=Slow(SimulatedBackend(seed=0)), path=sys.argv[1])
pool = make_pool("system1", backends={"simulated": recorder})
env = gym.make("orch/MathRoute-v0", pool=pool, split="test")
for seed in range(int(sys.argv[2])):
    controller = RandomRouter(seed=seed, p_accept=0.5)
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, reward, term, trunc, info = env.step(controller.act(obs, info))
        done = term or trunc
"""


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_kill_and_resume(tmp_path):
    path = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", RECORD_SCRIPT, str(path), str(KILL_EPISODES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while _complete_lines(path) < 6:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the recording subprocess made no progress"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    with path.open("ab") as fh:  # as if the kill had torn a write
        fh.write(b'{"v":1,"key":"torn-wri')
    before = set(read_records(path))
    assert before

    # resume in-process with the same seeds: only unrecorded calls reach the model
    spy = Spy(SimulatedBackend(seed=0))
    recorder = RecordingBackend(inner=spy, path=path)
    resumed = run_episodes(recorder, range(KILL_EPISODES))
    recorder.close()
    assert not before & set(spy.keys), "recorded calls were paid for again"
    assert len(spy.keys) == len(set(spy.keys))
    assert recorder.resumed >= len(before)

    # an uninterrupted reference run records the same calls with the same answers
    reference_path = tmp_path / "reference.jsonl"
    reference_backend = RecordingBackend(
        inner=SimulatedBackend(seed=0), path=reference_path, fsync=False
    )
    reference = run_episodes(reference_backend, range(KILL_EPISODES))
    reference_backend.close()
    keys = file_keys(path)  # every line parses: the torn tail was cut off
    assert len(keys) == len(set(keys)), "duplicate records"
    assert set(keys) == before | set(spy.keys) == set(file_keys(reference_path))
    got, want = read_records(path), read_records(reference_path)
    assert {k: r["completion"] for k, r in got.items()} == {
        k: r["completion"] for k, r in want.items()
    }
    assert data_equivalence(normalized(resumed), normalized(reference))

    # strict replay of the whole run reproduces it
    replayed = run_episodes(ReplayBackend(path=path), range(KILL_EPISODES))
    assert data_equivalence(normalized(replayed), normalized(resumed))


# -- concurrency, batching, lifecycle ---------------------------------------------------------
def test_concurrent_recording(tmp_path):
    path = tmp_path / "threads.jsonl"
    tasks = procedural_tasks(30)
    specs = make_pool("system1").agents
    calls = [(spec, task) for task in tasks for spec in specs]  # 90 distinct keys
    recorder = RecordingBackend(inner=SimulatedBackend(seed=0), path=path)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        order = calls[:]
        random.Random(i).shuffle(order)  # every thread makes every call: races on each key
        barrier.wait()
        try:
            for spec, task in order:
                c = recorder.complete(spec, solver_messages(task), CallContext(task=task))
                assert c.agent == spec.name
            for spec, task in order[:10]:  # keys unique to this thread
                ctx = CallContext(task=task, turn=100 + i)
                recorder.complete(spec, solver_messages(task, f" thread {i}"), ctx)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recorder.close()
    assert not errors, errors
    lines = [json.loads(line) for line in _lines(path)]  # every line parses
    # every thread's request is its own call: 8 occurrences of each shared key, numbered 0-7
    pairs = [(line["key"], line["occurrence"]) for line in lines]
    assert len(pairs) == len(set(pairs)) == 8 * len(calls) + 8 * 10
    by_key = collections.Counter(line["key"] for line in lines)
    assert sorted(set(by_key.values())) == [1, 8]
    assert recorder.recorded == len(lines)


class BatchingBackend:
    """A simulated backend with native batching, counting batches."""

    max_concurrency = 3

    def __init__(self) -> None:
        self.inner = SimulatedBackend(seed=0)
        self.batches: list[int] = []
        self.closed = False

    def complete(self, spec, messages, context):
        return self.inner.complete(spec, messages, context)

    def complete_batch(self, calls):
        self.batches.append(len(calls))
        return [self.inner.complete(*call) for call in calls]

    def close(self) -> None:
        self.closed = True


def test_complete_batch_passthrough(tmp_path):
    path = tmp_path / "batch.jsonl"
    assert not hasattr(RecordingBackend(inner=SimulatedBackend(), path=path), "complete_batch")
    inner = BatchingBackend()
    recorder = RecordingBackend(inner=inner, path=path)
    assert recorder.max_concurrency == 3
    pool = make_pool("system1", backends={"simulated": recorder})
    tasks = procedural_tasks(4)
    calls = [(name, solver_messages(t), CallContext(task=t)) for t in tasks for name in pool.names]
    first = pool.call_many(calls[:6])
    assert inner.batches == [6] and len(file_keys(path)) == 6
    pool.close()
    assert inner.closed
    # a resumed run (a new recorder on the same file): the first six come from the file
    inner = BatchingBackend()
    pool = make_pool("system1", backends={"simulated": RecordingBackend(inner=inner, path=path)})
    second = pool.call_many(calls)
    assert inner.batches == [len(calls) - 6]
    assert [c.text for c in second[:6]] == [c.text for c in first]
    assert all(c.cached for c in second[:6]) and not any(c.cached for c in second[6:])
    keys = file_keys(path)
    assert len(keys) == len(set(keys)) == len(calls)
    # within one run, a repeated request is a new call (occurrence 1), recorded apart
    again = pool.call_many(calls[:2])
    assert inner.batches == [len(calls) - 6, 2] and not any(c.cached for c in again)
    occurrences = [json.loads(line)["occurrence"] for line in _lines(path)]
    assert occurrences.count(1) == 2
    pool.close()
    with pytest.raises(BackendError, match="closed"):
        recorder.complete(pool.spec(pool.names[0]), calls[0][1], calls[0][2])
    recorder.close()  # idempotent


def test_resume_false_calls_inner_every_time(recorded, tmp_path):
    path, _, spy = recorded
    copy_path = tmp_path / "again.jsonl"
    copy_path.write_bytes(path.read_bytes())
    again = Spy(SimulatedBackend(seed=0))
    recorder = RecordingBackend(inner=again, path=copy_path, resume=False, fsync=False)
    run_episodes(recorder, range(N_EPISODES))
    recorder.close()
    assert len(again.keys) >= len(spy.keys)
    assert len(file_keys(copy_path)) == len(spy.keys) + len(again.keys)
    assert read_records(copy_path) == read_records(path)  # readers keep the first records


def test_backends_pickle(recorded, tmp_path):
    path, _, _ = recorded
    replay = ReplayBackend(path=path)
    replay.load()
    clone = pickle.loads(pickle.dumps(replay))
    assert clone._store is None and clone.load() == replay.load()
    recorder = RecordingBackend(inner=BatchingBackend(), path=tmp_path / "p.jsonl")
    task, spec = procedural_tasks(1)[0], system1_spec()
    recorder.complete(spec, solver_messages(task), CallContext(task=task))
    clone = pickle.loads(pickle.dumps(recorder))
    assert hasattr(clone, "complete_batch")
    assert clone.complete(spec, solver_messages(task), CallContext(task=task)).cached
    clone.close()
    recorder.close()


# -- parquet ----------------------------------------------------------------------------------
def test_parquet_replay(recorded, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path, live, _ = recorded
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    for row in rows:
        row["completion"] = json.dumps(row["completion"], ensure_ascii=False)
    converted = tmp_path / "rec.parquet"
    pq.write_table(pa.Table.from_pylist(rows), converted)
    assert read_records(converted) == read_records(path)
    replayed = run_episodes(ReplayBackend(path=converted), range(N_EPISODES))
    assert data_equivalence(normalized(replayed), normalized(live))
    broken = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pylist([{"task_id": "t", "agent": "a"}]), broken)
    with pytest.raises(DataError, match="completion"):
        read_records(broken)
    # a parquet file under another name is refused by the recorder (it appends JSON Lines)
    disguised = tmp_path / "disguised.jsonl"
    disguised.write_bytes(converted.read_bytes())
    recorder = RecordingBackend(inner=SimulatedBackend(), path=disguised)
    task = procedural_tasks(1)[0]
    with pytest.raises(ConfigError, match="parquet"):
        recorder.complete(system1_spec(), solver_messages(task), CallContext(task=task))
    assert disguised.read_bytes() == converted.read_bytes()


def test_registered_names(recorded, monkeypatch):
    """``backend="replay"`` / ``"recording"`` by name, as pool.BACKENDS registers them."""
    import orchenv.pool as pool_module

    monkeypatch.setitem(pool_module.BACKENDS, "replay", "orchenv.backends.replay:ReplayBackend")
    monkeypatch.setitem(
        pool_module.BACKENDS, "recording", "orchenv.backends.recording:RecordingBackend"
    )
    path, live, _ = recorded
    env = gym.make(
        "orch/MathRoute-v0", split="test", backend="replay", backend_kwargs={"path": str(path)}
    )
    controller = RandomRouter(seed=0, p_accept=0.5)
    obs, info = env.reset(seed=0)
    trace: list[tuple] = [(obs, info)]
    while len(trace) == 1 or not (trace[-1][2] or trace[-1][3]):
        obs, reward, term, trunc, info = env.step(controller.act(obs, info))
        trace.append((obs, reward, term, trunc, info))
    assert env.unwrapped.pool.backend_for(env.unwrapped.pool.names[0]).hits > 0
    assert data_equivalence(normalized([trace]), normalized(live[:1]))
    backend = pool_module.make_backend("recording", inner="simulated", path=path.parent / "n.jsonl")
    assert isinstance(backend, RecordingBackend)
