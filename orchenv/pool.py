"""Agent pool: who the controller can call, what each call costs, and how calls run.

``AgentSpec`` describes an agent (model id, strength tier, prices, backend);
``AgentPool`` maps names to specs and backends and runs calls, singly or
concurrently; ``UsageMeter`` totals calls, tokens and dollars for an episode
or a whole evaluation. Presets (``orchenv/presets/*.json``) are data: the
seed papers' agent systems with prices and calibration targets.
"""

from __future__ import annotations

import bisect
import copy
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from orchenv.asyncbridge import await_only, in_bridge, run_in_bridge
from orchenv.calltypes import (
    TOKEN_SOURCES,
    AgentSpec,
    Backend,
    Call,
    CallContext,
    Completion,
    Message,
    with_measured_latency,
)
from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.parsing import clean_parsed, clean_text, match_agent
from orchenv.registry import Registry
from orchenv.schema import (
    POOL_AGENT,
    POOL_FILE,
    JSONLimitError,
    depth_and_finite,
    parse_json,
)

#: the call types live in ``orchenv.calltypes`` (below the pool and the backends); they are
#: re-exported here, where most code imports them from
__all__ = [
    "BACKENDS",
    "TOKEN_SOURCES",
    "AgentPool",
    "AgentSpec",
    "Backend",
    "Call",
    "CallContext",
    "Completion",
    "Message",
    "NoAgents",
    "UsageMeter",
    "cost_order",
    "make_backend",
    "make_pool",
    "resolve_agent",
    "with_measured_latency",
]

#: backend name -> factory taking ``**backend_kwargs`` and returning a Backend (or "module:attr")
BACKENDS: Registry[Backend] = Registry("backend")
for _name, _entry in {
    "simulated": "orchenv.backends.simulated:SimulatedBackend",
    "openai": "orchenv.backends.openai_compat:OpenAICompatBackend",
    "hf": "orchenv.backends.hf:HFBackend",
    "vllm": "orchenv.backends.vllm_backend:VLLMBackend",
    "replay": "orchenv.backends.replay:ReplayBackend",
    "recording": "orchenv.backends.recording:RecordingBackend",
}.items():
    BACKENDS.register(_name, _entry)


def make_backend(name: str, **kwargs: Any) -> Backend:
    """Build a backend from its registered name."""
    factory = BACKENDS.resolve(name)
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"cannot build backend {name!r} from {sorted(kwargs)}: {exc}") from exc


class AgentPool:
    """Agents by name, ordered from weakest to strongest, with their backends.

    Backends are shared by ``fork()``-ed environments: a pool holds no
    per-episode state (that lives in ``UsageMeter``).
    """

    def __init__(
        self,
        agents: Sequence[AgentSpec],
        backends: Mapping[str, Backend] | None = None,
        *,
        name: str = "custom",
        usage_constraints: Mapping[str, float] | None = None,
        lagrange_multipliers: Mapping[str, float] | None = None,
        max_concurrency: int = 8,
    ) -> None:
        if not agents:
            raise ConfigError("an AgentPool needs at least one agent")
        names = [a.name for a in agents]
        if len(set(names)) != len(names):
            seen: set[str] = set()
            twice = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
            raise ConfigError(f"agent names must be unique, got {twice[:5]} more than once")
        self.name = name
        # weakest first: the order controllers see in prompts (seed 000, appendix B)
        self.agents: tuple[AgentSpec, ...] = tuple(sorted(agents, key=lambda a: -a.tier))
        self._by_name = {a.name: a for a in self.agents}
        self._names = tuple(a.name for a in self.agents)
        # stronger = lower tier = a suffix of ``agents``; found by bisection (a tuple per
        # agent was quadratic: 20k agents took minutes and gigabytes, issue 28)
        self._order_keys = [-a.tier for a in self.agents]
        self._backends: dict[str, Backend] = dict(backends or {})
        for spec in self.agents:
            if spec.backend not in self._backends:
                self._backends[spec.backend] = make_backend(spec.backend)
        self.usage_constraints = dict(usage_constraints or {})
        self.lagrange_multipliers = dict(lagrange_multipliers or {})
        for label, table in (
            ("usage_constraints", self.usage_constraints),
            ("lagrange_multipliers", self.lagrange_multipliers),
        ):
            for key in table:
                if key not in self._by_name:
                    raise UnknownNameError(f"agent in {label}", key, self._by_name)
        self.max_concurrency = max_concurrency
        # one slot pool per backend: concurrent callers (vector envs, call_many) share it
        self._slots = {
            name: CallSlots(int(getattr(backend, "max_concurrency", None) or max_concurrency))
            for name, backend in self._backends.items()
        }

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentPool:
        # A pool is a handle to shared resources (connections, engines, replay files,
        # concurrency slots): copies of envs or env specs share it rather than clone it.
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_slots"] = {  # a slot object set by hand (a threading semaphore) copies too
            name: getattr(sem, "size", None) or sem._initial_value  # type: ignore[attr-defined]
            for name, sem in self._slots.items()
        }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        slots = state.pop("_slots")
        self.__dict__.update(state)
        self._slots = {name: CallSlots(n) for name, n in slots.items()}

    # -- lookup -------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Agent names, weakest first."""
        return self._names

    def spec(self, name: str) -> AgentSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownNameError("agent", name, self._by_name) from None

    def backend_for(self, name: str) -> Backend:
        return self._backends[self.spec(name).backend]

    def stronger_than(self, name: str) -> tuple[str, ...]:
        """Agents strictly stronger than ``name``, weakest first."""
        if name not in self._by_name:
            raise UnknownNameError("agent", name, self._by_name)
        start = bisect.bisect_right(self._order_keys, -self._by_name[name].tier)
        return self._names[start:]

    def strongest(self) -> str:
        return self.agents[-1].name

    def weakest(self) -> str:
        return self.agents[0].name

    # -- calls --------------------------------------------------------------
    def call(
        self, name: str, messages: Sequence[Message], context: CallContext | None = None
    ) -> Completion:
        """Call one agent (waiting for a slot of its backend's concurrency limit).

        Latency is measured here when the backend did not report it.
        """
        spec = self.spec(name)
        backend = self._backends[spec.backend]
        start = time.perf_counter()
        if in_bridge():
            # an env step run on the event loop (AsyncVectorEnv, eval --concurrency): a
            # thread semaphore would block the loop; live backends bound their own calls
            completion = backend.complete(spec, messages, context or CallContext())
        else:
            with self._slots[spec.backend]:
                completion = backend.complete(spec, messages, context or CallContext())
        return with_measured_latency(completion, start)

    def call_many(
        self, calls: Sequence[tuple[str, Sequence[Message], CallContext | None]]
    ) -> list[Completion]:
        """Run several calls at once; results keep the input order.

        Calls to a backend with ``complete_batch`` (local engines) go to it as one
        batch; the others run in threads, at most ``max_concurrency`` per backend.
        """
        if len(calls) <= 1:
            return [self.call(*c) for c in calls]
        results: list[Completion | None] = [None] * len(calls)
        batches: dict[str, list[int]] = {}
        singles: list[int] = []
        for i, (name, _, _) in enumerate(calls):
            backend_name = self.spec(name).backend
            if hasattr(self._backends[backend_name], "complete_batch"):
                batches.setdefault(backend_name, []).append(i)
            else:
                singles.append(i)

        def run_batch(backend_name: str, indices: list[int]) -> None:
            batch: list[Call] = [
                (self.spec(calls[i][0]), calls[i][1], calls[i][2] or CallContext()) for i in indices
            ]
            with self._slots[backend_name]:
                out = self._backends[backend_name].complete_batch(batch)  # type: ignore[attr-defined]
            for i, completion in zip(indices, out, strict=True):
                results[i] = completion

        def run_single(i: int) -> None:
            results[i] = self.call(*calls[i])

        if in_bridge():  # on the event loop: overlap the calls there, not in threads
            import asyncio

            async def gather() -> None:
                await asyncio.gather(
                    *[run_in_bridge(run_batch, b, idx) for b, idx in batches.items()],
                    *[run_in_bridge(run_single, i) for i in singles],
                )

            await_only(gather())
            return [r for r in results if r is not None]
        workers = max(1, min(len(singles) + len(batches), 256))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(run_batch, b, idx) for b, idx in batches.items()]
            futures += [pool.submit(run_single, i) for i in singles]
            for future in futures:
                future.result()  # re-raise the first failure
        return [r for r in results if r is not None]

    def wrap_backends(self, wrap: Callable[[str, Backend], Backend]) -> Callable[[], None]:
        """Replace each backend ``b`` registered as ``name`` by ``wrap(name, b)`` (a journal,
        a cache, a tracer); returns the function that puts the originals back. Concurrency
        slots stay those of the originals."""
        originals = dict(self._backends)
        self._backends = {name: wrap(name, backend) for name, backend in originals.items()}

        def undo() -> None:
            self._backends = originals

        return undo

    #: where ``make_pool`` records calls to / replays them from (None: neither)
    record_to: str | os.PathLike[str] | None = None
    replay_from: str | os.PathLike[str] | None = None
    replay_mode: str = "strict"

    def wrap_controller_backend(self, backend: Backend) -> Backend:
        """``backend`` (a controller model's, e.g. the ``llm`` controller's) wrapped as this
        pool's agents are: recorded to the same file, or answered from the same replay
        file, so a replayed run makes no live call, the controller's included."""
        if self.record_to:
            return make_backend("recording", inner=backend, path=self.record_to)
        if self.replay_from:
            fallback = backend if self.replay_mode == "fallthrough" else None
            return make_backend(
                "replay", path=self.replay_from, mode=self.replay_mode, fallback=fallback
            )
        return backend

    def close(self) -> None:
        """Release backend resources (HTTP sessions, engines)."""
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if callable(close):
                close()

    def describe(self) -> str:
        rows = [
            f"  {a.name:<28} tier {a.tier}  model {a.model}  "
            f"${a.price_prompt:g}/${a.price_completion:g} per 1M tokens  backend {a.backend}"
            for a in reversed(self.agents)
        ]
        return f"pool {self.name!r} (strongest first):\n" + "\n".join(rows)


def cost_order(pool: AgentPool, agents: Sequence[str] | None = None) -> list[str]:
    """``agents`` (default: the whole pool) cheapest first.

    Price is ``price_completion`` (completions dominate a solver call's cost);
    ties go to the weaker agent, so equal-priced agents keep pool order.
    """
    names = list(pool.names if agents is None else agents)
    rank = {name: i for i, name in enumerate(pool.names)}  # weakest first
    return sorted(names, key=lambda n: (pool.spec(n).price_completion, rank[n]))


def resolve_agent(name: str, pool: AgentPool) -> str:
    """A pool agent by name (case and punctuation ignored) or alias ``strongest`` / ``middle``
    (the median by strength) / ``weakest``."""
    found = match_agent(name, pool.names)
    if found is not None:
        return found
    alias = name.strip().lower()
    if alias == "strongest":
        return pool.strongest()
    if alias == "weakest":
        return pool.weakest()
    if alias == "middle":
        return pool.names[len(pool.names) // 2]
    raise UnknownNameError("agent", name, [*pool.names, "strongest", "middle", "weakest"])


class CallSlots:
    """A backend's concurrency slots: at most ``size`` holders at once (``with slots:``).

    ``threading.BoundedSemaphore``'s use here, with a lock-only path when a slot is free
    (issue 40: the semaphore's condition variable was a twentieth of a simulated call); a
    caller that finds none waits on its own lock and is handed the next slot released, in
    arrival order."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ConfigError(f"a backend needs at least 1 concurrency slot, got {size}")
        self.size = size
        self._free = size
        self._lock = threading.Lock()
        self._waiting: deque[threading.Lock] = deque()

    def __enter__(self) -> CallSlots:
        with self._lock:
            if self._free:
                self._free -= 1
                return self
            handoff = threading.Lock()
            handoff.acquire()
            self._waiting.append(handoff)
        try:
            handoff.acquire()  # released by the holder that hands this caller its slot
        except BaseException:  # interrupted while waiting: leave the queue, or pass the slot on
            with self._lock:
                still_waiting = handoff in self._waiting
                if still_waiting:
                    self._waiting.remove(handoff)
            if not still_waiting:
                self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()  # the slot passes on, never freed
            else:
                self._free += 1

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._free


@dataclass
class UsageMeter:
    """Running totals of calls, tokens and dollars per agent."""

    calls: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached_calls: int = 0
    estimated_calls: int = 0
    #: calls whose server counts were checked against the agent's tokenizer, and those that
    #: disagreed (``Completion.meta["metering"]``, set by the ``openai`` backend)
    metering_checked: int = 0
    metering_disagreements: int = 0

    def record(self, completion: Completion) -> None:
        calls, agent = self.calls, completion.agent
        calls[agent] = calls.get(agent, 0) + 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.cost_usd += completion.cost_usd
        self.latency_s += completion.latency_s
        self.cached_calls += int(completion.cached)
        # Completion.tokens_estimated, inline (issue 40: two meters record every call)
        self.estimated_calls += int(completion.token_source not in ("server", "tokenizer"))
        metering = completion.meta.get("metering") if completion.meta else None
        if isinstance(metering, Mapping):
            self.metering_checked += 1
            self.metering_disagreements += int(bool(metering.get("disagree")))

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def usage_ratios(self, n_queries: int, agents: Iterable[str] = ()) -> dict[str, float]:
        """Calls per agent divided by the number of queries (seed 000's usage ratio)."""
        names = list(agents) or list(self.calls)
        denom = max(n_queries, 1)
        return {a: self.calls.get(a, 0) / denom for a in names}

    def merge(self, other: UsageMeter) -> None:
        for agent, n in other.calls.items():
            self.calls[agent] = self.calls.get(agent, 0) + n
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        self.latency_s += other.latency_s
        self.cached_calls += other.cached_calls
        self.estimated_calls += other.estimated_calls
        self.metering_checked += other.metering_checked
        self.metering_disagreements += other.metering_disagreements

    def copy(self) -> UsageMeter:
        return copy.deepcopy(self)


# -- presets ----------------------------------------------------------------
def list_presets() -> list[str]:
    """Names of the shipped pool presets."""
    files = resources.files("orchenv.presets").iterdir()
    return sorted(p.name[:-5] for p in files if p.name.endswith(".json"))


def load_preset_data(name: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw pool document: a shipped preset by name, or a ``.json`` / ``.yaml`` pool file.

    A pool file has the presets' schema (``orchenv.schema.POOL_FILE`` and ``POOL_AGENT``):
    ``{"name", "agents": [{"name", "model", "tier", "price" | "price_prompt" +
    "price_completion", "backend", "backend_kwargs", ...}], "usage_constraints",
    "lagrange_multipliers"}``. Unknown keys are a ``ConfigError`` with a "did you mean"
    hint (a misspelt ``price_promt`` would otherwise make prompts free), as are wrong types
    and negative or non-finite numbers. YAML aliases are refused (see ``_read_pool_file``).
    """
    path = Path(name)
    if path.suffix.lower() in {".json", ".yaml", ".yml"}:
        data = _read_pool_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
            raise DataError(f"pool file {str(path)!r} must be a mapping with an 'agents' list")
        data.setdefault("name", path.stem)
        return check_pool_data(data, f"pool file {str(path)!r}")
    if str(name) not in list_presets():
        raise UnknownNameError("pool preset", str(name), list_presets())
    text = resources.files("orchenv.presets").joinpath(f"{name}.json").read_text("utf-8")
    return check_pool_data(json.loads(text), f"pool preset {str(name)!r}")


#: the largest pool file read (pool files are a few kilobytes)
MAX_POOL_FILE_BYTES = 4 * 2**20


def _read_pool_file(path: Path) -> Any:
    """A pool file's document: JSON through ``orchenv.schema.parse_json``, YAML through a
    safe loader that refuses aliases (one alias can expand to gigabytes: "billion laughs";
    write the value out instead). Files over ``MAX_POOL_FILE_BYTES`` are refused."""
    if not path.is_file():
        raise DataError(f"pool file {str(path)!r} does not exist")
    with path.open("rb") as fh:
        raw = fh.read(MAX_POOL_FILE_BYTES + 1)
    if len(raw) > MAX_POOL_FILE_BYTES:
        raise DataError(f"pool file {str(path)!r} is over {MAX_POOL_FILE_BYTES} bytes")
    kind = path.suffix[1:].lower()
    try:
        if kind == "json":
            # numbers are checked by POOL_FILE / POOL_AGENT, which name the field
            return parse_json(raw, f"pool file {str(path)!r}", finite=False)
        return _yaml_load_without_aliases(raw.decode("utf-8"))
    except JSONLimitError:
        raise
    except Exception as exc:  # json and yaml raise different types (RecursionError included)
        raise DataError(f"pool file {str(path)!r} is not valid {kind}: {exc}") from exc


def _yaml_load_without_aliases(text: str) -> Any:
    """A YAML document without aliases and without a key twice in one mapping.

    The events are scanned for an alias first (``*name``: one can expand to gigabytes, and a
    merge key needs one), then the document is built by a safe loader whose constructor
    refuses duplicate keys (PyYAML keeps the last silently). libyaml's C parser is used
    where PyYAML has it (``CSafeLoader``: 20k agents in about 2 s; the pure-Python loader
    takes about 1 ms per agent)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    for event in yaml.parse(text, Loader=base):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                f"found the alias *{event.anchor}; aliases are not allowed in pool files "
                "(write the value out)",
                event.start_mark,  # type: ignore[arg-type]  # libyaml's Mark is compatible
            )

    class NoDuplicateLoader(base):  # type: ignore[valid-type, misc]
        """``base`` whose constructor refuses a key given twice in one mapping."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:str":  # the common case, cheaply
                    key: Any = key_node.value
                else:
                    key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if twice:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"the key {key!r} appears twice (the last would win)",
                        key_node.start_mark,
                    )
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=NoDuplicateLoader)  # noqa: S506 - a safe loader subclass


#: the most agents a pool may hold (the 4 MiB file cap alone admits about 44,000)
MAX_POOL_AGENTS = 20_000


def check_pool_data(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a pool document) checked against ``POOL_FILE`` and each agent entry against
    ``POOL_AGENT``; a ``ConfigError`` naming ``where`` and the field otherwise. At most
    ``MAX_POOL_AGENTS`` agents; names unique."""
    agents = data.get("agents") if isinstance(data, Mapping) else None
    if isinstance(agents, list) and len(agents) > MAX_POOL_AGENTS:
        raise ConfigError(
            f"{where}: {len(agents):,} agents; a pool holds at most {MAX_POOL_AGENTS:,}"
        )
    checked = POOL_FILE.validate(data, where, error=ConfigError)
    checked["agents"] = [
        POOL_AGENT.validate(raw, f"{where}, agents[{i}]", error=ConfigError)
        for i, raw in enumerate(checked["agents"])
    ]
    first: dict[str, int] = {}
    for i, agent in enumerate(checked["agents"]):
        if agent["name"] in first:
            raise ConfigError(
                f"{where}, agents[{i}], field 'name': {agent['name']!r} is already the name "
                f"of agents[{first[agent['name']]}]; agent names must be unique"
            )
        first[agent["name"]] = i
        for key in ("price", "backend", "role_prompt"):  # the free texts of an entry
            if isinstance(agent.get(key), str):
                agent[key] = clean_text(agent[key])
        if "backend_kwargs" in agent:
            if not depth_and_finite(agent["backend_kwargs"])[1]:
                raise ConfigError(
                    f"{where}, agents[{i}], field 'backend_kwargs' must hold finite numbers only"
                )
            agent["backend_kwargs"] = clean_parsed(agent["backend_kwargs"])
    for key in ("name", "description", "paper", "controller_model"):
        if isinstance(checked.get(key), str):
            checked[key] = clean_text(checked[key])
    return checked


def _spec_from_dict(
    raw: Mapping[str, Any], backend: str | None, *, checked: bool = False
) -> AgentSpec:
    """An AgentSpec from a preset entry, resolving ``"price": KEY`` through the price table
    (``checked``: ``raw`` already passed ``check_pool_data``)."""
    from orchenv.pricing import price_for

    if checked:
        data = dict(raw)
    else:
        data = POOL_AGENT.validate(raw, f"agent entry {raw.get('name')!r}", error=ConfigError)
    key = data.pop("price", None)
    if key is not None:
        price = price_for(key)
        data.setdefault("price_prompt", price.prompt)
        data.setdefault("price_completion", price.completion)
    if backend is not None:
        data["backend"] = backend
    return AgentSpec(**data)


def make_pool(
    preset: str | os.PathLike[str] | AgentPool,
    *,
    backend: str | None = None,
    backends: Mapping[str, Backend] | None = None,
    backend_kwargs: Mapping[str, Any] | None = None,
    record_to: str | os.PathLike[str] | None = None,
    replay_from: str | os.PathLike[str] | None = None,
    replay_mode: str = "strict",
) -> AgentPool:
    """Build a pool from a preset name or a pool file (or pass a pool through).

    ``backend`` overrides every agent's backend name; ``backend_kwargs`` are passed
    to backends built here. ``record_to`` wraps every backend in a
    ``RecordingBackend`` appending to that JSONL file (a rerun resumes: recorded calls
    are not made again). ``replay_from`` answers from a recorded file instead,
    ``replay_mode="strict"`` (a missing record is an error) or ``"fallthrough"`` (a
    miss calls the preset's own backend).
    """
    if isinstance(preset, AgentPool):
        if record_to or replay_from:
            raise ConfigError("record_to / replay_from need a preset name or pool file, not a pool")
        return preset
    if record_to and replay_from:
        raise ConfigError("choose record_to or replay_from, not both")
    data = load_preset_data(preset)
    specs = [_spec_from_dict(raw, backend, checked=True) for raw in data["agents"]]
    built: dict[str, Backend] = dict(backends or {})
    for spec in specs:
        if spec.backend not in built:
            built[spec.backend] = make_backend(spec.backend, **dict(backend_kwargs or {}))
    if record_to:
        for name, inner in list(built.items()):
            built[name] = make_backend("recording", inner=inner, path=record_to)
    elif replay_from:
        for name, live in list(built.items()):
            fallback = live if replay_mode == "fallthrough" else None
            built[name] = make_backend(
                "replay", path=replay_from, mode=replay_mode, fallback=fallback
            )
    pool = AgentPool(
        specs,
        built,
        name=str(data.get("name", preset)),
        usage_constraints=data.get("usage_constraints"),
        lagrange_multipliers=data.get("lagrange_multipliers"),
    )
    pool.record_to, pool.replay_from, pool.replay_mode = record_to, replay_from, replay_mode
    return pool


def seal_backends(pool: AgentPool, secret: str | bytes) -> list[str]:
    """Mix a board's sealed-plan ``secret`` into the seed of every seeded backend of ``pool``
    (simulated backends, env-built role backends, a recording backend's inner one), so the
    pool's luck on sealed tasks cannot be simulated from public code. Called once by
    ``OrchestrationEnv`` on a pool it has just built, before any call. Returns the names of
    the backends it reseeded; a backend without a ``seed`` (a live model) is left alone.
    ``ConfigError`` for a replaying pool (its answers are public recordings)."""
    from orchenv.seeding import sealed_int

    if getattr(pool, "replay_from", None):
        raise ConfigError(
            "a sealed env cannot replay a recorded pool (replay_from): recorded answers are "
            "public, and sealed tasks are not in them; play the sealed plan on the pool itself"
        )
    key = secret if isinstance(secret, bytes) else secret.encode("utf-8")
    done: list[str] = []
    seen: set[int] = set()
    for name, backend in getattr(pool, "_backends", {}).items():
        target: Any = backend
        while target is not None and id(target) not in seen:
            seen.add(id(target))
            seed = getattr(target, "seed", None)
            if isinstance(seed, int) and not isinstance(seed, bool):
                target.seed = sealed_int(key, "orchenv-sealed-backend", type(target).__name__, seed)
                done.append(name)
            target = getattr(target, "inner", None)
    return done


class NoAgents:
    """The pool of a single-learner view (WebShop, ALFWorld): no agents, nothing to call.

    Such envs have the learner act in the world itself; this stand-in keeps the
    info schema and ``fork()`` (which shares the pool) uniform with pooled envs.
    """

    name = "none"
    agents: tuple[AgentSpec, ...] = ()
    names: tuple[str, ...] = ()

    def call(self, *args: Any, **kwargs: Any) -> Completion:
        raise ConfigError("this environment has no agent pool: the policy acts in it directly")

    def __deepcopy__(self, memo: dict[int, Any]) -> NoAgents:
        return self


#: the shared empty pool
NO_AGENTS = NoAgents()
