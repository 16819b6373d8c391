"""A live backend failing mid-episode costs nothing twice (issue 13, part 4).

The episode is marked failed and retried whole; calls that had succeeded are served from
the episode's journal, both by the harness's own retries and by a later resume of the same
command, and the finished run's records equal an uninterrupted run's.
"""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest
from helpers import rows_without_timing

import orchenv  # noqa: F401 - registers the env ids
from orchenv.error import BackendError, DataError, EnvStateError
from orchenv.eval import EvalConfig, evaluate
from orchenv.eval.journal import JOURNAL_DIR
from orchenv.testing.fake_openai import FakeOpenAIServer, Fault

ENV_ID = "orch/MathRoute-v0"
EPISODES = 4


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def backend_kwargs(server: FakeOpenAIServer) -> dict:
    # no retries inside the backend: one fault is one failed call
    return {"base_url": server.url, "timeout_s": 5.0, "max_retries": 0, "rng_seed": 0}


def config(server: FakeOpenAIServer) -> EvalConfig:
    return EvalConfig(
        ENV_ID,
        controller="env-random",
        env_kwargs={"backend": "openai", "backend_kwargs": backend_kwargs(server)},
        episodes=EPISODES,
        seeds=[0],
    )


def reply(body: dict) -> str:
    """An answer that depends on the request, so serving the wrong record would show."""
    return f"Sum of lengths: \\boxed{{{sum(len(m['content']) for m in body['messages']) % 97}}}"


@pytest.fixture
def uninterrupted(tmp_path: Path):
    with FakeOpenAIServer(reply=reply) as server:
        result = evaluate(config(server), tmp_path / "clean", progress=False)
        bought = len(server.completions())
    calls = [sum(result.records[pair].agent_calls.values()) for pair in sorted(result.records)]
    assert sum(calls) == bought and min(calls) >= 1
    # the failure hits the second call of the first episode that makes two or more
    episode = next(i for i, n in enumerate(calls) if n >= 2)
    return rows_without_timing(result), bought, sum(calls[:episode]) + 2


@pytest.mark.timeout(120)
def test_resume_after_a_failure_buys_no_call_twice(tmp_path: Path, uninterrupted) -> None:
    expected, bought, fail_at = uninterrupted
    with FakeOpenAIServer(reply=reply) as server:
        server.add_faults(*[Fault()] * (fail_at - 1), Fault(status=500))
        out = tmp_path / "run"
        with pytest.raises(BackendError, match="not bought again"):
            evaluate(config(server), out, progress=False, retries=0)
        (journal,) = (out / JOURNAL_DIR).glob("*.jsonl")  # the failed episode's paid call
        assert len(journal.read_text().splitlines()) == 1
        first = len(server.completions())
        assert first == fail_at - 1

        result = evaluate(config(server), out, progress=False, retries=0)  # the resume
        total = len(server.completions())
    assert total == bought  # the calls that succeeded before the failure were not bought again
    assert rows_without_timing(result) == expected
    assert not list((out / JOURNAL_DIR).glob("*.jsonl"))  # journals go once logged


@pytest.mark.timeout(120)
def test_harness_retries_a_failed_episode_from_its_journal(tmp_path: Path, uninterrupted) -> None:
    expected, bought, fail_at = uninterrupted
    with FakeOpenAIServer(reply=reply) as server:
        server.add_faults(*[Fault()] * (fail_at - 1), Fault(status=500))
        result = evaluate(config(server), tmp_path / "run", progress=False, retries=1)
        assert len(server.completions()) == bought
    assert rows_without_timing(result) == expected
    assert result.ran == EPISODES


@pytest.mark.timeout(60)
def test_a_failed_step_marks_the_episode_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer(default_fault=Fault(status=500)) as server:
        env = gym.make(ENV_ID, backend="openai", backend_kwargs=backend_kwargs(server))
        try:
            env.reset(seed=0)
            base = env.unwrapped
            action = base.demo_action(base.np_random)
            with pytest.raises(BackendError):
                env.step(action)
            assert base.failure is not None and "HTTP 500" in base.failure
            with pytest.raises(EnvStateError, match="failed"):
                env.step(action)
            env.reset(seed=0)  # a fresh attempt is allowed
            assert base.failure is None and base.turn == 0
        finally:
            env.close()


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_an_unwritable_journal_is_one_clear_error(tmp_path: Path) -> None:
    with FakeOpenAIServer(reply=reply) as server:
        out = tmp_path / "run"
        out.mkdir()
        (out / JOURNAL_DIR).mkdir()
        (out / JOURNAL_DIR).chmod(0o500)
        with pytest.raises(DataError, match="call journal"):
            evaluate(config(server), out, progress=False)


def test_journal_write_failure_is_a_data_error(tmp_path: Path) -> None:
    """Disk full while journaling: a clear DataError naming the file and the fix."""
    from orchenv.eval.journal import CallJournal
    from orchenv.pool import AgentSpec, CallContext, Completion

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    journal = CallJournal(tmp_path)
    journal.begin(0, 0)
    journal._log._fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC

    class Backend:
        def complete(self, spec, messages, context):
            return Completion(spec.name, "x", 1, 1, 0.0)

    spec = AgentSpec(name="a", model="m", tier=0, backend="openai")
    with pytest.raises(DataError, match="Free disk space"):
        journal.complete(Backend(), spec, [{"role": "user", "content": "q"}], CallContext())
