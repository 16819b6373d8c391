"""Every number read from outside is validated (issue 13, part 3).

Each test is an attack from the issue, tried for real: a loopback server that lies in
``usage``, drips its headers or sends 50 MB; replay files, eval logs and pool files with
hostile or edited values; recording targets that cannot be written; a disk that fills up
mid-run (``RLIMIT_FSIZE`` in a child process: the kernel refuses the write as a full disk
would). Each must end in one clear ``orchenv`` error naming the file, line and field, and
lose nothing already written. Timeouts are hang guards, never measurements.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import helpers
import pytest
from helpers import one_agent_pool

import orchenv  # noqa: F401 - registers the env ids
from orchenv.backends.openai_compat import OpenAICompatBackend, OpenAIRequestError
from orchenv.backends.recording import RecordingBackend
from orchenv.backends.replay import ReplayBackend, make_record, read_records
from orchenv.cli import main
from orchenv.error import BackendError, ConfigError, DataError, SchemaError
from orchenv.eval import read_episode_log
from orchenv.pool import AgentSpec, Completion, make_pool
from orchenv.schema import MAX_CALL_TOKENS, JSONLimitError, nesting_depth, parse_json

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]
DEEP = "[" * 100_000 + "]" * 100_000  # 100k-deep JSON
HUGE = "9" * 5000  # a 5,000-digit integer


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables; loopback requests must not go through one."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


# -- a raw loopback server ----------------------------------------------------------------------
Respond = Callable[[socket.socket, threading.Event, "RawServer"], None]


class RawServer:
    """Answers every connection with ``respond(conn, stop, server)`` after reading the request;
    counts connections and the bytes ``respond`` reports in ``sent``."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.stop = threading.Event()
        self.connections = 0
        self.sent = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            while len(body) < length:
                body += conn.recv(65536)
            self.respond(conn, self.stop, self)


def json_reply(body: str) -> Respond:
    def respond(conn: socket.socket, stop: threading.Event, server: RawServer) -> None:
        data = body.encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )

    return respond


def reply_with_usage(usage: str) -> str:
    """A chat completion whose ``usage`` is the raw JSON text ``usage``."""
    return (
        '{"id": "x", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", '
        '"content": "4"}, "finish_reason": "stop"}], "usage": ' + usage + "}"
    )


def backend(**kwargs) -> OpenAICompatBackend:
    settings = {"timeout_s": 2.0, "max_retries": 2, "backoff_base_s": 0.01, "rng_seed": 0}
    return OpenAICompatBackend(**{**settings, **kwargs})


def call(server: RawServer, live: OpenAICompatBackend) -> Completion:
    pool = one_agent_pool(server.url, live)
    try:
        return pool.call("a", MESSAGES)
    finally:
        pool.close()


# -- 1. the live backend -------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "usage, message",
    [
        ('{"prompt_tokens": 1' + "0" * 400 + ', "completion_tokens": 3}', "401 digits"),
        ('{"prompt_tokens": ' + HUGE + ', "completion_tokens": 3}', "5,000 digits"),
        ('{"prompt_tokens": 7, "completion_tokens": ' + DEEP + "}", "nested"),
        (f'{{"prompt_tokens": {2**64}, "completion_tokens": 3}}', "'prompt_tokens' must be"),
        ('{"prompt_tokens": -5, "completion_tokens": 3}', "'prompt_tokens' must be"),
        ('{"prompt_tokens": 12.5, "completion_tokens": 3}', "'prompt_tokens' must be"),
        ('{"prompt_tokens": 12, "completion_tokens": "3"}', "'completion_tokens' must be"),
        ('"lots"', "usage must be a JSON object"),
    ],
    ids=["10**400", "5000-digits", "deep", "2**64", "negative", "float", "string", "not-object"],
)
def test_hostile_usage_is_a_clear_backend_error(usage, message):
    server = RawServer(json_reply(reply_with_usage(usage)))
    with server, pytest.raises(OpenAIRequestError, match=message) as info:
        call(server, backend())
    assert info.value.attempts == 1 and server.connections == 1  # final: not bought again
    assert "malformed" in str(info.value)


def test_sane_usage_is_still_the_server_count():
    with RawServer(
        json_reply(reply_with_usage('{"prompt_tokens": 7, "completion_tokens": 3}'))
    ) as s:
        completion = call(s, backend())
    assert (completion.prompt_tokens, completion.completion_tokens) == (7, 3)
    assert completion.token_source == "server" and completion.cost_usd == (7 + 6) / 1e6


def drip(where: str) -> Respond:
    """A server that sends the start of a reply, then one byte every 50 ms for up to 60 s:
    each socket read returns quickly, so only a whole-request deadline can stop it."""

    def respond(conn: socket.socket, stop: threading.Event, server: RawServer) -> None:
        if where == "headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(1200):
            if stop.wait(0.05):
                return
            conn.sendall(b"a")

    return respond


@pytest.mark.timeout(20)  # a hang guard: the deadline is 1 s, the drip lasts 60 s
@pytest.mark.parametrize("where", ["headers", "body"])
def test_header_drip_cannot_outlast_the_deadline(where):
    live = backend(timeout_s=1.0, max_retries=0)
    server = RawServer(drip(where))
    with server, pytest.raises(OpenAIRequestError, match="Timeout") as info:
        call(server, live)
    assert info.value.attempts == 1 and live.deadline_s == 1.0


def big_body(size: int, chunked: bool) -> Respond:
    def respond(conn: socket.socket, stop: threading.Event, server: RawServer) -> None:
        framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + framing + b"\r\n\r\n"
        )
        piece = b"x" * 65536
        while server.sent < size and not stop.is_set():
            conn.sendall(b"10000\r\n" + piece + b"\r\n" if chunked else piece)
            server.sent += len(piece)

    return respond


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_50_mb_body_is_not_read_whole(chunked):
    size = 50 * 2**20
    server = RawServer(big_body(size, chunked))
    with server, pytest.raises(OpenAIRequestError, match="max_response_bytes=1048576") as info:
        call(server, backend(max_response_bytes=2**20))
    assert info.value.attempts == 1
    # the client hung up after 1 MiB: the server could only fill the socket buffers
    assert server.sent < size // 2


def test_max_response_bytes_is_checked():
    with pytest.raises(ConfigError, match="max_response_bytes"):
        OpenAICompatBackend(max_response_bytes=0)


# -- 2. replay files and recordings ----------------------------------------------------------
def record_line(**completion_changes) -> dict:
    completion = Completion("a", "four", 10, 5, 0.00002, latency_s=0.1, token_source="server")
    record = make_record(task_id="t", agent="a", turn=0, messages=MESSAGES, completion=completion)
    record["completion"].update(completion_changes)
    return record


BAD_RECORDS = {
    "nan-cost": (lambda r: r["completion"].update(cost_usd=math.nan), "completion.cost_usd"),
    "negative-cost": (lambda r: r["completion"].update(cost_usd=-1.0), "completion.cost_usd"),
    "negative-tokens": (
        lambda r: r["completion"].update(prompt_tokens=-3),
        "completion.prompt_tokens",
    ),
    "2**64-tokens": (
        lambda r: r["completion"].update(completion_tokens=2**64),
        "completion.completion_tokens",
    ),
    "latency-text": (lambda r: r["completion"].update(latency_s="slow"), "completion.latency_s"),
    "cached-text": (lambda r: r["completion"].update(cached="yes"), "completion.cached"),
    "text-number": (lambda r: r["completion"].update(text=5), "completion.text"),
    "meta-list": (lambda r: r["completion"].update(meta=[1]), "completion.meta"),
    "turn-text": (lambda r: r.update(turn="2"), "'turn'"),
    "typo": (
        lambda r: r["completion"].update(cost_usdd=1.0),
        "did you mean 'completion.cost_usd'",
    ),
    "completion-list": (lambda r: r.update(completion=[1]), "completion must be a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_replay_records_with_bad_values_are_refused(tmp_path, case):
    mutate, field = BAD_RECORDS[case]
    bad = record_line()
    mutate(bad)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record_line()) + "\n" + json.dumps(bad) + "\n" + "\n")
    with pytest.raises(SchemaError, match=f"r.jsonl:2: .*{field}"):
        ReplayBackend(path=path).load()


@pytest.mark.parametrize("line, why", [(HUGE, "5,000 digits"), (DEEP, "nested")])
def test_replay_lines_beyond_the_parser_are_refused(tmp_path, line, why):
    path = tmp_path / "r.jsonl"
    good = json.dumps(record_line())
    for text in (f"{good}\n{line}\n{good}\n", f"{good}\n{line}\n"):  # middle, then last line
        path.write_text(text)
        with pytest.raises(JSONLimitError, match=f"r.jsonl:2: .*{why}"):
            read_records(path)


def test_an_endless_replay_line_is_refused_not_read_whole(tmp_path, monkeypatch):
    from orchenv.backends import replay

    monkeypatch.setattr(replay, "MAX_RECORD_BYTES", 10_000)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record_line()) + "\n" + "x" * 50_000)  # no newline: endless
    with pytest.raises(DataError, match="r.jsonl:2: a line longer than 10000 bytes"):
        read_records(path)


class Inner:
    """A backend that answers every call with a fixed 400-character text."""

    def complete(self, spec, messages, context) -> Completion:
        return spec.completion("x" * 400, 10, 20, latency_s=0.01, token_source="estimate")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody can create files in: a read-only tmpfs as root (a chmod does not stop
    root), else a chmod 0555 folder; as root without mount rights, ``/proc``."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield Path("/proc")
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("target", ["directory", "dev-full", "fifo", "read-only"])
def test_recording_target_is_checked_at_start(tmp_path, read_only_dir, target):
    if target == "directory":
        path, why = tmp_path, "it is a directory"
    elif target == "dev-full":
        path, why = Path("/dev/full"), "not a regular file"
    elif target == "fifo":
        path, why = tmp_path / "pipe.jsonl", "not a regular file"
        os.mkfifo(path)
    else:
        path, why = read_only_dir / "calls.jsonl", "writable folder"
    with pytest.raises(ConfigError, match=f"cannot record to .*{why}"):
        RecordingBackend(inner=Inner(), path=path)


def test_a_good_recording_target_is_not_created_before_the_first_call(tmp_path):
    path = tmp_path / "new" / "calls.jsonl"
    RecordingBackend(inner=Inner(), path=path)
    assert path.parent.is_dir() and not path.exists()


def run_under_file_size_limit(script: str, *args: str, limit: int) -> dict:
    """Run ``script`` in a child whose files may not grow past ``limit`` bytes (the kernel then
    fails writes with EFBIG, as a full disk fails them with ENOSPC); its last stdout line."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_files,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


RECORD_UNTIL_FULL = """
import json, sys
from pathlib import Path
from orchenv.backends.recording import RecordingBackend
from orchenv.pool import AgentSpec, CallContext, Completion
from orchenv.tasks import Task

class Inner:
    def complete(self, spec, messages, context):
        return spec.completion("x" * 400, 10, 20, latency_s=0.01, token_source="estimate")

recorder = RecordingBackend(inner=Inner(), path=Path(sys.argv[1]), fsync=False)
spec = AgentSpec(name="a", model="m", tier=0)
done, error = 0, None
try:
    for i in range(100):
        task = Task(f"t{i}", "p", ("1",))
        recorder.complete(spec, [{"role": "user", "content": f"q{i}"}], CallContext(task=task))
        done += 1
except Exception as exc:
    error = {"type": type(exc).__name__, "message": str(exc), "os": isinstance(exc, OSError)}
print(json.dumps({"done": done, "error": error}))
"""


@pytest.mark.timeout(120)
def test_disk_full_while_recording_is_one_clear_error_and_loses_nothing(tmp_path):
    path = tmp_path / "calls.jsonl"
    out = run_under_file_size_limit(RECORD_UNTIL_FULL, str(path), limit=6000)
    assert 0 < out["done"] < 100, out
    error = out["error"]
    assert error["type"] == "OutputError" and error["os"], error
    assert "cannot append to the recording" in error["message"] and "intact" in error["message"]
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn record: the failed one was cut off
    assert len(read_records(path)) == out["done"]  # every paid call is on file


# -- 3. eval logs --------------------------------------------------------------------------------
def logged_rows(path: Path, n: int) -> bytes:
    """``n`` wrong episodes (``correct-flipped`` below flips one) logged under a run header."""
    header = {"run_key": "k", "controller": "c"}
    return helpers.logged_rows(path, n, header=header, correct=False, score=0.0)


@pytest.mark.parametrize("line, why", [(HUGE, "5,000 digits"), (DEEP, "nested")])
def test_eval_lines_beyond_the_parser_name_file_and_line(tmp_path, line, why):
    path = tmp_path / "episodes.jsonl"
    first, second = logged_rows(path, 2).splitlines(keepends=True)
    for text in (first + line.encode() + b"\n" + second, first + line.encode() + b"\n"):
        path.write_bytes(text)
        with pytest.raises(DataError, match=f"episodes.jsonl:2: .*{why}"):
            read_episode_log(path)


EDITS = {  # edits of a written line: the digest no longer matches its bytes
    "cost": lambda row: row.update(cost_usd=-1e9),
    "correct-flipped": lambda row: row.update(correct=True),
    "tokens": lambda row: row.update(prompt_tokens=-5, tokens=0),
}
LEGACY_EDITS = {  # lines without a digest (logs from before it): the schema catches these
    "cost": (lambda row: row.update(cost_usd=-1e9), "'cost_usd' must be"),
    "correct-text": (lambda row: row.update(correct="yes"), "'correct' must be true or false"),
    "tokens": (lambda row: row.update(prompt_tokens=-5), "'prompt_tokens' must be"),
    "typo": (lambda row: row.update(corect=True), "did you mean 'correct'"),
    "sum": (lambda row: row.update(tokens=99), "tokens is not prompt_tokens"),
    "2**64": (lambda row: row.update(completion_tokens=2**64), "'completion_tokens' must be"),
    "nan-reward": (lambda row: row.update(reward=math.nan), "'reward' must be"),
}


def rewrite_line(path: Path, index: int, edit: Callable[[dict], None], drop_digest: bool) -> None:
    """Apply ``edit`` to line ``index`` (the others keep their bytes unless ``drop_digest``
    removes every line's digest, making the log look written before digests existed)."""
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if i == index or drop_digest:
            row = json.loads(line)
            if drop_digest:
                row.pop("line_digest", None)
            if i == index:
                edit(row)
            lines[i] = json.dumps(row) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("case", sorted(EDITS))
def test_edited_eval_lines_are_refused(tmp_path, case):
    path = tmp_path / "episodes.jsonl"
    logged_rows(path, 3)
    rewrite_line(path, 1, EDITS[case], drop_digest=False)
    with pytest.raises(DataError, match="episodes.jsonl:2: this line was changed"):
        read_episode_log(path)


@pytest.mark.parametrize("case", sorted(LEGACY_EDITS))
def test_bad_values_in_eval_lines_name_the_field(tmp_path, case):
    edit, message = LEGACY_EDITS[case]
    path = tmp_path / "episodes.jsonl"
    logged_rows(path, 3)
    rewrite_line(path, 1, lambda row: None, drop_digest=True)
    assert len(read_episode_log(path)) == 3  # lines without a digest are still read
    rewrite_line(path, 1, edit, drop_digest=False)
    with pytest.raises(SchemaError, match=f"episodes.jsonl:2: .*{message}"):
        read_episode_log(path)


@pytest.mark.timeout(30)  # a hang guard: opening a FIFO without a writer blocks
def test_an_eval_log_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "episodes.jsonl")
    with pytest.raises(DataError, match="not a regular file"):
        read_episode_log(tmp_path / "episodes.jsonl")


def test_a_line_without_its_digest_after_digested_lines_is_refused(tmp_path):
    path = tmp_path / "episodes.jsonl"
    logged_rows(path, 3)
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    del row["line_digest"]
    path.write_text("".join(lines[:2]) + json.dumps(row) + "\n")
    with pytest.raises(DataError, match="episodes.jsonl:3: this line was changed"):
        read_episode_log(path)


def eval_argv(out: Path, episodes: int = 4) -> list[str]:
    return ["eval", "orch/MathRoute-v0", "--episodes", str(episodes), "--out", str(out),
            "--no-progress"]  # fmt: skip


def test_resuming_a_run_with_a_flipped_correct_is_one_clear_error(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(eval_argv(out)) == 0
    log = out / "episodes.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    flipped = lines[1].replace('"correct":false', '"correct":true', 1)
    if flipped == lines[1]:
        flipped = lines[1].replace('"correct":true', '"correct":false', 1)
    log.write_text(lines[0] + flipped + "".join(lines[2:]))
    capsys.readouterr()
    assert main(eval_argv(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("orchenv: error: ")
    assert "episodes.jsonl:2: this line was changed" in err


def test_eval_into_a_read_only_folder_is_one_clear_error(read_only_dir, capsys):
    assert main(eval_argv(read_only_dir / "run")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("orchenv: error: ")


LOG_UNTIL_FULL = """
import json, sys
from pathlib import Path
from orchenv.eval.harness import EpisodeLog, _write_json_atomic

folder = Path(sys.argv[1])
summary = folder / "summary.json"
_write_json_atomic(summary, {"small": 1})  # under the limit
log = EpisodeLog(folder / "episodes.jsonl", fsync_interval_s=None)
done, errors = 0, []
try:
    for i in range(1000):
        log.append({"seed": 0, "episode": i, "pad": "x" * 200})
        done += 1
except Exception as exc:
    errors.append({"type": type(exc).__name__, "message": str(exc)})
log.close()
try:
    _write_json_atomic(summary, {"big": "y" * 20000})
except Exception as exc:
    errors.append({"type": type(exc).__name__, "message": str(exc)})
print(json.dumps({"done": done, "errors": errors}))
"""


@pytest.mark.timeout(120)
def test_disk_full_while_logging_is_one_clear_error_and_loses_nothing(tmp_path):
    out = run_under_file_size_limit(LOG_UNTIL_FULL, str(tmp_path), limit=8000)
    assert 0 < out["done"] < 1000, out
    (append_error, summary_error) = out["errors"]
    assert append_error["type"] == summary_error["type"] == "OutputError", out
    assert "cannot append to the episode log" in append_error["message"]
    assert "intact" in append_error["message"] and "summary.json" in summary_error["message"]
    data = (tmp_path / "episodes.jsonl").read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == out["done"]  # no torn line
    assert json.loads((tmp_path / "summary.json").read_text()) == {"small": 1}  # unchanged
    assert not (tmp_path / "summary.json.tmp").exists()


@pytest.mark.timeout(300)
def test_disk_full_during_orchenv_eval_then_resume_loses_nothing(tmp_path):
    out = tmp_path / "run"

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (15_000, 15_000))

    argv = [sys.executable, "-m", "orchenv", *eval_argv(out, episodes=40)]
    full = subprocess.run(
        argv, capture_output=True, text=True, timeout=240, preexec_fn=limit_files, check=False
    )
    assert full.returncode == 2, full.stderr[-3000:]
    assert full.stderr.count("\n") == 1 and full.stderr.startswith("orchenv: error: ")
    assert "Traceback" not in full.stderr
    kept = read_episode_log(out / "episodes.jsonl")
    assert 0 < len(kept) < 40
    again = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = read_episode_log(out / "episodes.jsonl")
    assert rows[: len(kept)] == kept  # what was written before the disk filled is unchanged
    assert sorted(r["episode"] for r in rows) == list(range(40))  # each episode exactly once


# -- 4. pool files -------------------------------------------------------------------------------
def write_pool(tmp_path: Path, doc: dict, suffix: str = ".json") -> Path:
    import yaml

    path = tmp_path / f"pool{suffix}"
    path.write_text(json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc))
    return path


def agent(**changes) -> dict:
    return {"name": "a", "model": "m", "tier": 0, "price": "gpt-4.1", "backend": "simulated",
            "calibration": {"accuracy": 0.5}, **changes}  # fmt: skip


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_typo_in_a_pool_file_is_an_error_with_a_hint(tmp_path, suffix):
    path = write_pool(tmp_path, {"agents": [agent(price_promt=0.0)]}, suffix)
    with pytest.raises(ConfigError, match=r"pool\..*agents\[0\].*did you mean 'price_prompt'"):
        make_pool(path)
    path = write_pool(tmp_path, {"agents": [agent()], "usage_constraint": {"a": 1}}, suffix)
    with pytest.raises(ConfigError, match="did you mean 'usage_constraints'"):
        make_pool(path)


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"agents": [agent(tier="high")]}, "'tier' must be an integer"),
        ({"agents": [agent(tier=2**70)]}, "'tier' must be an integer"),
        ({"agents": [agent(calibration="good")]}, "'calibration' must be an object"),
        ({"agents": [agent(backend_kwargs=[1])]}, "'backend_kwargs' must be an object"),
        ({"agents": [agent(name=5)]}, "'name' must be a string"),
        ({"agents": ["a"]}, "agent must be a JSON object"),
        ({"agents": [agent()], "usage_constraints": [1]}, "'usage_constraints' must be"),
        ({"agents": [agent()], "usage_constraints": {"a": -1}}, "'usage_constraints'"),
        ({"agents": [agent(price_prompt=-1.0)]}, "'price_prompt' must be a finite number"),
        ({"agents": [agent(price_completion=1e300)]}, "'price_completion' must be"),
        ({"agents": [agent(price=3)]}, "'price' must be a string"),
    ],
)
def test_wrong_types_and_bad_prices_in_pool_files_name_the_field(tmp_path, doc, field):
    path = write_pool(tmp_path, doc)
    with pytest.raises(ConfigError, match=field) as info:
        make_pool(path)
    assert "pool.json" in str(info.value)


@pytest.mark.parametrize("price", [".nan", ".inf", "-.inf"])
def test_nan_and_infinite_prices_in_yaml_are_refused(tmp_path, price):
    path = tmp_path / "pool.yaml"
    path.write_text(f"agents:\n  - {{name: a, model: m, tier: 0, price_prompt: {price}}}\n")
    with pytest.raises(ConfigError, match="'price_prompt' must be a finite number"):
        make_pool(path)


def test_json_infinity_price_is_refused(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text('{"agents": [{"name": "a", "model": "m", "tier": 0, "price_prompt": 1e400}]}')
    with pytest.raises(ConfigError, match="'price_prompt' must be a finite number"):
        make_pool(path)


@pytest.mark.timeout(60)
def test_billion_laughs_in_openai_params_is_refused(tmp_path):
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "x-laughs:\n" + "".join(f"  {line}\n" for line in levels)
    text += textwrap.dedent(
        """\
        agents:
          - name: a
            model: m
            tier: 0
            backend: openai
            backend_kwargs: {base_url: "http://127.0.0.1:9/v1", params: {stop: *a9}}
        """
    )
    path = tmp_path / "pool.yaml"
    path.write_text(text)
    with pytest.raises(DataError, match="alias"):
        make_pool(path)


def test_a_huge_pool_file_is_refused(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text('{"agents": [], "description": "' + "x" * (5 * 2**20) + '"}')
    with pytest.raises(DataError, match="over"):
        make_pool(path)


def test_shipped_presets_and_examples_still_load():
    root = Path(__file__).resolve().parents[2]
    for preset in ("system1", "system2", "corl"):
        assert len(make_pool(preset).names) >= 3
    for path in sorted((root / "examples" / "pools").glob("*.yaml")):
        assert all(make_pool(path).spec(n).price_completion > 0 for n in make_pool(path).names)
    assert make_pool("system1").spec("Qwen2.5-7B-Instruct").calibration["accuracy"] == 0.757


# -- 5. specs and completions built in code ----------------------------------------------------
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"price_prompt": math.nan}, "price_prompt"),
        ({"price_completion": -2.0}, "price_completion"),
        ({"tier": 1.5}, "tier"),
        ({"tier": True}, "tier"),
    ],
)
def test_agent_specs_refuse_values_that_poison_costs(changes, field):
    with pytest.raises(ConfigError, match=field):
        AgentSpec(**{"name": "a", "model": "m", "tier": 0, **changes})


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"prompt_tokens": 2**64}, "prompt_tokens"),
        ({"completion_tokens": -1}, "completion_tokens"),
        ({"completion_tokens": 3.0}, "completion_tokens"),
        ({"prompt_tokens": True}, "prompt_tokens"),
        ({"cost_usd": math.nan}, "cost_usd"),
        ({"latency_s": -1.0}, "latency_s"),
    ],
)
def test_completions_refuse_counts_that_poison_summaries(changes, field):
    fields = {"agent": "a", "text": "t", "prompt_tokens": 1, "completion_tokens": 1,
              "cost_usd": 0.0, **changes}  # fmt: skip
    with pytest.raises(BackendError, match=field):
        Completion(**fields)


def test_completions_take_numpy_integers_as_ints():
    np = pytest.importorskip("numpy")
    completion = Completion("a", "t", np.int64(3), np.int32(4), 0.0)
    assert type(completion.prompt_tokens) is int and completion.completion_tokens == 4
    assert AgentSpec("a", "m", 0, 1.0, 1.0).completion(
        "t", MAX_CALL_TOKENS, 0, latency_s=0.0, token_source="server"
    ).cost_usd == pytest.approx(MAX_CALL_TOKENS / 1e6)


# -- the parser itself ----------------------------------------------------------------------------
def test_parse_json_bounds_digits_floats_and_depth():
    assert parse_json(b'{"a": [1, 2.5, "x"]}', "w") == {"a": [1, 2.5, "x"]}
    assert nesting_depth(parse_json("[" * 64 + "]" * 64, "w")) == 64
    for text, why in [
        (HUGE, "5,000 digits"),
        ("-" + "1" * 41, "41 digits"),
        ("1." + "0" * 200, "characters"),
        ("[" * 65 + "]" * 65, "65 levels"),
        (DEEP, "nested deeper"),
    ]:
        with pytest.raises(JSONLimitError, match=f"w: .*{why}"):
            parse_json(text, "w")
    with pytest.raises(json.JSONDecodeError):
        parse_json("{not json", "w")
