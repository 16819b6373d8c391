"""Refereed play over the wire (issue 37 item 3): ``orchenv serve --referee BOARD --key FILE
--runs DIR`` assigns the board's sealed tasks, writes the record server-side and signs it.

One real server process (module-scoped) on a MathRoute board with a 4-episode sealed plan;
clients are OpenEnv's ``GenericEnvClient`` and raw WebSockets. Each test opens its own
submission (a submission name is used once per runs folder).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv")
requests = pytest.importorskip("requests")
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

import orchenv  # noqa: E402,F401
from orchenv.eval.board import make_spec, sealed_plan, sealed_status, write_spec  # noqa: E402
from orchenv.eval.leaderboard import read_runs  # noqa: E402
from orchenv.eval.rundir import episode_seed, read_episode_log  # noqa: E402
from orchenv.serve.referee import issue_ticket  # noqa: E402
from orchenv.verify.keys import read_key, write_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MATH = "orch/MathRoute-v0"
EPISODES = 4
STRONGEST = "<model>Qwen3-30B-A3B-Instruct</model>"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Referee:
    """A board (spec + key) and its referee server process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key_file = write_key(root / "board.key")
        self.key = read_key(self.key_file)
        self.spec = make_spec(
            MATH, pool="system1", split="test", sealed_episodes=EPISODES, key=self.key
        )
        self.board = write_spec(root / "board.json", self.spec)
        self.runs = root / "runs"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchenv", "serve", MATH, "--port", str(self.port)]
            + ["--referee", str(self.board), "--key", str(self.key_file)]
            + ["--runs", str(self.runs), "--idle-timeout", "30"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )

    def wait(self) -> Referee:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the referee exited: {self.stderr()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError("the referee did not come up in 120 s")

    def ticket(self, name: str) -> str:
        """What the maintainer hands the submitter of ``name``."""
        return issue_ticket(self.spec, self.key, name)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    def record(self, name: str, timeout: float = 20.0) -> Path:
        """The submission's folder once it is signed (a close is handled asynchronously)."""
        folder = self.runs / name
        deadline = time.monotonic() + timeout
        while not (folder / "sealed.json").exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} was not signed in {timeout} s: {self.stderr()}")
            time.sleep(0.1)
        return folder


@pytest.fixture(scope="module")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    server = Referee(tmp_path_factory.mktemp("referee"))
    try:
        yield server.wait()
    finally:
        server.stop()


def _play_all(client: Any, name: str, ticket: str, policy: Any = None) -> list[dict[str, Any]]:
    """Play a whole submission; returns the last observation of each episode."""
    from orchenv.envs.mathroute.baselines import SingleAgent

    policy = policy or SingleAgent(agent=0)
    ends = []
    result = client.reset(submission=name, ticket=ticket)
    for n in range(EPISODES):
        if n:
            result = client.reset()
        obs = result.observation
        assert obs["info"]["referee"]["episode"] == n + 1
        while not result.done:
            result = client.step({"text": policy.act(obs["prompt"], obs["info"])})
            obs = result.observation
        ends.append(obs)
    return ends


def _real_ids(folder: Path, referee: Referee, rows: list[dict[str, Any]]) -> list[str]:
    """The real task ids of a record: opened with the board's secret when the env seals its
    ids (orchenv.eval.board.sealed_task_ids), else the record's own."""
    import orchenv.eval.board as board

    opener = getattr(board, "sealed_task_ids", None)
    if opener is not None and rows[0]["task_id"].startswith("sealed-"):
        return list(opener(folder, referee.spec, referee.key))
    return [r["task_id"] for r in rows]


def _rows(folder: Path) -> list[dict[str, Any]]:
    return read_episode_log(folder / "episodes.jsonl")


def test_an_honest_submission_is_signed_ranks_and_equals_the_sealed_plan(
    referee: Referee, tmp_path: Path
) -> None:
    from orchenv.eval import EvalConfig, evaluate

    with GenericEnvClient(base_url=referee.url).sync() as client:
        ends = _play_all(client, "honest", referee.ticket("honest"))
        assert ends[-1]["info"]["referee"]["finished"] is True
        with pytest.raises(RuntimeError, match="closed"):  # no fifth task
            client.reset()
    folder = referee.record("honest")
    assert sealed_status(folder, referee.spec, referee.key) == "sealed"
    run = json.loads((folder / "run.json").read_text())
    assert run["refereed"]["status"] == "complete" and run["refereed"]["episodes_played"] == 4
    rows = _rows(folder)
    assert [r["episode"] for r in rows] == list(range(EPISODES))  # each task once, in order
    # the tasks are the sealed plan's: the same controller played by the maintainer in
    # process (what `orchenv board play` does) gets the same tasks and the same rewards
    seeds, kwargs = sealed_plan(referee.spec, referee.key)
    local = evaluate(
        EvalConfig(
            MATH,
            controller="single",
            controller_kwargs={"agent": 0},
            env_kwargs=kwargs,
            pool="system1",
            split="test",
            seeds=seeds,
            episodes=EPISODES,
        ),
        tmp_path / "local",
        progress=False,
    )
    mine = [(r["task_id"], r["reward"], r["correct"]) for r in rows]
    theirs = [
        (rec.task_id, rec.reward, rec.correct)
        for _, rec in sorted(local.records.items(), key=lambda kv: kv[0])
    ]
    assert mine == theirs
    assert rows[0]["episode_seed"] == episode_seed(seeds[0], 0)
    # what the client saw: opaque ids (the record's, which only the board's secret opens),
    # never the task's own
    shown = [end["info"]["task_id"] for end in ends]
    assert all(s.startswith("sealed-") for s in shown)
    real = _real_ids(folder, referee, rows)
    assert len(set(real)) == EPISODES and not set(shown) & set(real)
    assert not any(r in json.dumps(ends) for r in real) and "procmath" not in json.dumps(ends)
    # the secret never reaches the record
    secret = kwargs.get("sealed")
    for name in ("run.json", "summary.json", "episodes.jsonl", "sealed.json"):
        assert not secret or secret not in (folder / name).read_text()
    # the board ranks it, as a sealed row
    out = tmp_path / "board"
    out.mkdir()
    ranked, rejected = read_runs([folder], out, key=referee.key, spec=referee.spec)
    assert not rejected and len(ranked) == 1 and ranked[0].sealed
    assert ranked[0].verification == "verified"
    assert ranked[0].verification_reason == "refereed by the board's server (complete)"
    # without the board's key it does not rank
    _, rejected = read_runs([folder], out, key=b"x" * 32, spec=referee.spec)
    assert rejected and "not signed" in rejected[0].reason


def test_a_client_cannot_choose_its_tasks_or_reset_past_an_episode(referee: Referee) -> None:
    with GenericEnvClient(base_url=referee.url).sync() as client:
        with pytest.raises(RuntimeError, match="submission"):  # no submission, no episode
            client.reset()
        with pytest.raises(RuntimeError, match="assigns the tasks"):
            client.reset(submission="chooser", seed=7)
        for chosen in (
            {"split": "train"},
            {"index": 3},
            {"task_id": "procmath-0/test/1"},
            {"options": {"task_index": 2}},
            {"injected_state": "fork-" + "A" * 32},
            {"agent": "planner", "group": "g"},
        ):
            with pytest.raises(RuntimeError, match="assigns the tasks"):
                client.reset(submission="chooser", **chosen)
        first = client.reset(submission="chooser", ticket=referee.ticket("chooser"))
        first = first.observation["info"]["task_id"]
        with pytest.raises(RuntimeError, match="unfinished"):  # no skipping
            client.reset()
        with pytest.raises(RuntimeError, match="assigns the tasks"):
            client.reset(seed=1)
        with pytest.raises(RuntimeError, match="another session"):
            client.reset(submission="someone-else")
        state = client.state()
        assert state["snapshot"] is None and state["seed"] is None
        assert state["task_id"] == first
    # the task API, which would list the tasks, is off
    assert requests.get(referee.url + "/MathRoute-v0/splits", timeout=10).status_code == 404
    assert (
        requests.post(
            referee.url + "/MathRoute-v0/task", json={"split": "test", "index": 0}, timeout=10
        ).status_code
        == 404
    )
    # the stateless HTTP reset stays refused
    assert requests.post(referee.url + "/reset", json={}, timeout=10).status_code == 409


def test_hostile_submission_names_are_refused(referee: Referee) -> None:
    """A 10 MB name, a lone surrogate, a path, a number, an object: refused with the rule,
    nothing created outside the runs folder, the server still up."""
    with GenericEnvClient(base_url=referee.url).sync() as client:
        for name in ("x" * 10_000_000, "a\ud800b", "../escape", "", 12, {"a": 1}, [1] * 1000):
            with pytest.raises(RuntimeError, match="submission name"):
                client.reset(submission=name)
        with pytest.raises(RuntimeError, match="episode_id"):
            client.reset(submission="fine", episode_id={"deep": [[[[]]]]})
    assert not (referee.runs.parent / "escape").exists()
    assert sorted(p.name for p in referee.runs.iterdir() if p.name.startswith(".")) == []
    assert requests.get(referee.url + "/health", timeout=10).ok


def test_a_dropped_submission_counts_every_task(referee: Referee, tmp_path: Path) -> None:
    """The client leaves mid-episode 2: episode 1 is logged as played, episode 2 with its
    return so far (not correct), episodes 3-4 at 0; the record is still signed."""
    with GenericEnvClient(base_url=referee.url).sync() as client:
        result = client.reset(submission="dropper", ticket=referee.ticket("dropper"))
        while not result.done:
            result = client.step({"text": STRONGEST})
        client.reset()
        partial = client.step({"text": STRONGEST})  # route: the verify phase comes next
        assert not partial.done
    folder = referee.record("dropper")
    assert sealed_status(folder, referee.spec, referee.key) == "sealed"
    rows = _rows(folder)
    assert [r["episode"] for r in rows] == list(range(EPISODES))
    assert "referee_abandoned" not in rows[0]["metrics"]
    assert rows[1]["metrics"]["referee_abandoned"] == 1.0 and not rows[1]["correct"]
    assert rows[1]["reward"] == pytest.approx(partial.reward) and rows[1]["actions"] == [STRONGEST]
    assert [r["reward"] for r in rows[2:]] == [0.0, 0.0]
    assert [r["score"] for r in rows[1:]] == [0.0, 0.0, 0.0]
    run = json.loads((folder / "run.json").read_text())
    assert run["refereed"]["status"] == "abandoned"
    assert (run["refereed"]["episodes_played"], run["refereed"]["episodes_abandoned"]) == (1, 3)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["pooled"]["episodes"] == EPISODES
    out = tmp_path / "board"
    out.mkdir()
    ranked, _ = read_runs([folder], out, key=referee.key, spec=referee.spec)
    assert ranked[0].verification_reason.startswith("refereed by the board's server (abandoned")


def test_an_edited_record_no_longer_ranks(referee: Referee, tmp_path: Path) -> None:
    with GenericEnvClient(base_url=referee.url).sync() as client:
        _play_all(client, "edited", referee.ticket("edited"))
    folder = referee.record("edited")
    for name, edit in (
        ("summary.json", lambda d: d["pooled"].update(accuracy=1.0)),
        ("run.json", lambda d: d["refereed"].update(status="complete!")),
    ):
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        data = json.loads((copy / name).read_text())
        edit(data)
        (copy / name).write_text(json.dumps(data))
        assert sealed_status(copy, referee.spec, referee.key) == (
            "its files changed after the sealed run was signed"
        )
        _, rejected = read_runs([copy], tmp_path, key=referee.key, spec=referee.spec)
        assert rejected and "changed" in rejected[0].reason
    # a re-signed sealed.json without the key: not the board's signature
    copy = tmp_path / "resigned"
    shutil.copytree(folder, copy)
    lines = (copy / "episodes.jsonl").read_text().splitlines()
    (copy / "episodes.jsonl").write_text("\n".join(lines[:2]) + "\n")  # drop two episodes
    sealed = json.loads((copy / "sealed.json").read_text())
    from orchenv.verify.bundle import file_digests
    from orchenv.verify.keys import SIGNATURE, sign

    sealed["files"] = file_digests(copy, sorted(sealed["files"]))
    sealed[SIGNATURE] = sign(sealed, b"not the board's key")
    (copy / "sealed.json").write_text(json.dumps(sealed))
    assert "not signed" in str(sealed_status(copy, referee.spec, referee.key))


def test_two_clients_submissions_stay_apart(referee: Referee) -> None:
    """Two sessions interleave their episodes: each gets the whole plan, in its own folder;
    a name already on file is refused."""
    from orchenv.envs.mathroute.baselines import SingleAgent

    weakest, strongest = SingleAgent(agent=2), SingleAgent(agent=0)
    with (
        GenericEnvClient(base_url=referee.url).sync() as a,
        GenericEnvClient(base_url=referee.url).sync() as b,
    ):
        ra = a.reset(submission="twin-a", ticket=referee.ticket("twin-a"))
        rb = b.reset(submission="twin-b", ticket=referee.ticket("twin-b"))
        with (
            pytest.raises(RuntimeError, match="being played in another session"),
            GenericEnvClient(base_url=referee.url).sync() as c,
        ):
            c.reset(submission="twin-a", ticket=referee.ticket("twin-a"))
        for n in range(EPISODES):
            if n:
                ra, rb = a.reset(), b.reset()
            assert ra.observation["info"]["task_id"] == rb.observation["info"]["task_id"]
            while not (ra.done and rb.done):
                if not ra.done:
                    obs = ra.observation
                    ra = a.step({"text": weakest.act(obs["prompt"], obs["info"])})
                if not rb.done:
                    obs = rb.observation
                    rb = b.step({"text": strongest.act(obs["prompt"], obs["info"])})
    rows_a, rows_b = _rows(referee.record("twin-a")), _rows(referee.record("twin-b"))
    assert [r["task_id"] for r in rows_a] == [r["task_id"] for r in rows_b]
    assert len(rows_a) == len(rows_b) == EPISODES
    assert all("<model>Qwen2.5-1.5B-Instruct</model>" in r["actions"][0] for r in rows_a)
    assert all(STRONGEST in r["actions"][0] for r in rows_b)
    for name in ("twin-a", "twin-b"):
        assert sealed_status(referee.runs / name, referee.spec, referee.key) == "sealed"


def _open(client: Any, name: str, ticket: str | None) -> Any:
    """The attacker's way in: with the ticket it has, else (a referee without tickets)
    without one. The RuntimeError of the last try when every way is refused."""
    try:
        return client.reset(submission=name, ticket=ticket)
    except RuntimeError as exc:
        if "takes no" not in str(exc):  # refused for another reason than the ticket argument
            raise
    return client.reset(submission=name)


def test_two_sessions_cannot_play_the_sealed_tasks_in_lockstep(referee: Referee) -> None:
    """The lockstep attack over the wire. A submitter holding one ticket opens a probe
    session and tries to open a second one (same name and ticket, another name with its
    ticket, another name without a ticket). Had one opened, it would see the probe's sealed
    task side by side: the probe routes to the weakest agent (a throwaway action) and learns
    whether it is right, the bench routes to the strongest only where the probe failed (in
    process, over 100 sealed MathRoute tasks and one probe per agent, that lifted the reward
    from 0.710 [0.671, 0.749] to 0.891 [0.855, 0.927], docs/board-referee.md). Every second
    session is refused, and the probe's record counts every task."""
    from orchenv.envs.mathroute.baselines import SingleAgent

    weakest, strongest = SingleAgent(agent=2), SingleAgent(agent=0)
    ticket = referee.ticket("lock-probe")
    seen: list[tuple[Any, Any]] = []  # (probe's prompt, bench's prompt) of shared episodes
    refusals: list[str] = []
    with GenericEnvClient(base_url=referee.url).sync() as probe:
        rp = _open(probe, "lock-probe", ticket)
        bench_client, rb = None, None
        for name, tried in (("lock-probe", ticket), ("lock-bench", ticket), ("lock-bench", None)):
            candidate = GenericEnvClient(base_url=referee.url).sync()
            candidate.connect()
            try:
                rb = _open(candidate, name, tried)
                bench_client = candidate
                break
            except RuntimeError as exc:
                refusals.append(str(exc))
                candidate.close()
        try:
            for n in range(EPISODES if bench_client is not None else 1):
                if n:
                    rp = probe.reset()
                    rb = bench_client.reset() if bench_client is not None else None
                first_prompt = rp.observation["prompt"]
                while not rp.done:
                    obs = rp.observation
                    rp = probe.step({"text": weakest.act(obs["prompt"], obs["info"])})
                if bench_client is not None and rb is not None:
                    seen.append((first_prompt, rb.observation["prompt"]))
                    policy = weakest if rp.observation["info"].get("correct") else strongest
                    while not rb.done:
                        obs = rb.observation
                        rb = bench_client.step({"text": policy.act(obs["prompt"], obs["info"])})
        finally:
            if bench_client is not None:
                bench_client.close()
    # the attack: a second live session saw the probe's sealed tasks
    assert bench_client is None, (
        f"a second session opened and saw {sum(a == b for a, b in seen)} of {len(seen)} "
        "sealed tasks the probe had just played"
    )
    assert len(refusals) == 3
    assert "being played in another session" in refusals[0]
    assert "does not admit submission 'lock-bench'" in refusals[1]
    assert "admits a submission with its ticket" in refusals[2]
    # the probe's own submission still counts every task (abandoned after episode 1)
    folder = referee.record("lock-probe")
    assert sealed_status(folder, referee.spec, referee.key) == "sealed"
    assert len(_rows(folder)) == EPISODES
    assert not (referee.runs / "lock-bench").exists()
    # and a finished submission's name stays closed, ticket or not
    with (
        GenericEnvClient(base_url=referee.url).sync() as late,
        pytest.raises(RuntimeError, match="already on file"),
    ):
        late.reset(submission="lock-probe", ticket=ticket)


def test_tickets_are_checked(referee: Referee, capsys: pytest.CaptureFixture[str]) -> None:
    """No ticket, another name's, a wrong or hostile one (10 MB, a lone surrogate, an object,
    a number): refused with the rule, no folder made, the server still up; the CLI issues
    the same ticket as ``issue_ticket``."""
    with GenericEnvClient(base_url=referee.url).sync() as client:
        with pytest.raises(RuntimeError, match="admits a submission with its ticket"):
            client.reset(submission="tk")
        for bad in (
            referee.ticket("other"),
            "ticket-" + "0" * 32,
            "x" * 10_000_000,
            "ticket-\ud800",
            {"a": [1]},
            12,
        ):
            with pytest.raises(RuntimeError, match="ticket"):
                client.reset(submission="tk", ticket=bad)
    assert not (referee.runs / "tk").exists()
    assert requests.get(referee.url + "/health", timeout=10).ok
    out = subprocess.run(
        [sys.executable, "-m", "orchenv.serve.referee", "ticket", "tk", "tk2"]
        + ["--board", str(referee.board), "--key", str(referee.key_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tk", referee.ticket("tk"), "tk2", referee.ticket("tk2")]
    from orchenv.cli import main as orchenv_main

    board_args = ["--board", str(referee.board), "--key", str(referee.key_file)]
    assert orchenv_main(["board", "ticket", "tk", *board_args]) == 0
    assert capsys.readouterr().out.split() == ["tk", referee.ticket("tk")]
    from orchenv.serve.referee import main

    other_key = write_key(referee.root / "other.key")
    for argv, why in ((["../x"], "submission name"), (["tk", "--key", str(other_key)], "key")):
        assert (
            main(["ticket", "--board", str(referee.board), "--key", str(referee.key_file), *argv])
            == 2
        )
        assert why in capsys.readouterr().err


def test_referee_flags_are_checked(tmp_path: Path) -> None:
    from orchenv.error import ConfigError
    from orchenv.serve.app import build_app
    from orchenv.serve.environment import ServeConfig

    proc = subprocess.run(
        [sys.executable, "-m", "orchenv", "serve", MATH, "--referee", "b.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "--key" in proc.stderr
    key = read_key(write_key(tmp_path / "k"))
    no_sealed = write_spec(tmp_path / "dev.json", make_spec(MATH, pool="system1", split="test"))
    with pytest.raises(ConfigError, match="no sealed plan"):
        build_app(
            ServeConfig(
                env_id=MATH,
                referee_board=str(no_sealed),
                referee_key=str(tmp_path / "k"),
                referee_runs=str(tmp_path / "runs"),
            )
        )
    other = write_key(tmp_path / "other")
    sealed = write_spec(
        tmp_path / "s.json",
        make_spec(MATH, pool="system1", split="test", sealed_episodes=2, key=key),
    )
    with pytest.raises(ConfigError, match="not the board's"):
        build_app(
            ServeConfig(
                env_id=MATH,
                referee_board=str(sealed),
                referee_key=str(other),
                referee_runs=str(tmp_path / "runs"),
            )
        )
