"""Agent pool, presets, usage metering and task sources' shared behaviour."""

from __future__ import annotations

import threading
import time

import pytest
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool

from orchenv.backends.scripted import ScriptedBackend
from orchenv.error import ConfigError, UnknownNameError
from orchenv.pool import (
    AgentPool,
    AgentSpec,
    CallContext,
    UsageMeter,
    list_presets,
    load_preset_data,
    make_pool,
)
from orchenv.tasks import ListTaskSource, Task, difficulty_of, make_task_source


def test_presets_follow_seed_000_table_1_and_9():
    assert {"system1", "system2"} <= set(list_presets())
    for name in ("system1", "system2"):
        pool = make_pool(name)
        assert len(pool.names) == 3
        strongest, weakest = pool.strongest(), pool.weakest()
        assert pool.usage_constraints[strongest] == 0.25 and pool.usage_constraints[weakest] == 1.0
        assert (
            pool.lagrange_multipliers[strongest] == 0.25
            and pool.lagrange_multipliers[weakest] == 0.0
        )
        accuracies = [pool.spec(n).calibration["accuracy"] for n in pool.names]
        assert accuracies == sorted(accuracies), "names are ordered weakest first"
        for raw in load_preset_data(name)["agents"]:
            assert raw["price_source"], "every price names its source"
    assert make_pool("system1").spec("Qwen2.5-7B-Instruct").calibration["accuracy"] == 0.757
    assert make_pool("system2").spec("Llama-3.2-1B-Instruct").calibration["accuracy"] == 0.275


def test_unknown_names_suggest_the_right_one():
    pool = make_pool("system1")
    with pytest.raises(UnknownNameError, match="Did you mean 'Qwen2.5-7B-Instruct'"):
        pool.spec("Qwen2.5-7B-Instruc")
    with pytest.raises(UnknownNameError, match="system1"):
        make_pool("sytem1")
    with pytest.raises(UnknownNameError, match="procedural-math"):
        make_task_source("procedural-mat")


def test_pool_validation():
    spec = AgentSpec(name="a", model="m", tier=0, backend="scripted")
    backends = {"scripted": ScriptedBackend({"a": "hi"})}
    with pytest.raises(ConfigError):
        AgentPool([])
    with pytest.raises(ConfigError, match="unique"):
        AgentPool([spec, spec], backends)
    with pytest.raises(UnknownNameError):
        AgentPool([spec], backends, usage_constraints={"b": 0.5})
    with pytest.raises(UnknownNameError, match="backend"):
        AgentPool([AgentSpec(name="a", model="m", tier=0, backend="nope")])
    with pytest.raises(ConfigError, match="cannot build backend 'simulated'"):
        make_pool("system1", backend_kwargs={"sede": 1})


def test_call_many_is_concurrent_and_ordered():
    active, peak = [0], [0]
    lock = threading.Lock()

    def slow(spec, messages, ctx):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return f"{spec.name}:{messages[0]['content']}"

    pool = scripted_pool({WEAK: slow, MID: slow, STRONG: slow})
    calls = [
        (n, [{"role": "user", "content": str(i)}], CallContext())
        for i, n in enumerate([WEAK, MID, STRONG] * 3)
    ]
    out = pool.call_many(calls)
    assert [c.text for c in out] == [f"{n}:{i}" for i, (n, _, _) in enumerate(calls)]
    assert peak[0] > 1, "calls overlapped"


def test_usage_meter():
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    meter = UsageMeter()
    for name in (WEAK, WEAK, STRONG):
        meter.record(pool.call(name, [{"role": "user", "content": "q"}]))
    assert meter.calls == {WEAK: 2, STRONG: 1} and meter.total_calls == 3
    assert meter.usage_ratios(4, pool.names) == {WEAK: 0.5, MID: 0.0, STRONG: 0.25}
    other = meter.copy()
    other.merge(meter)
    assert other.calls[WEAK] == 4 and meter.calls[WEAK] == 2
    assert other.cost_usd == pytest.approx(2 * meter.cost_usd)


def test_task_source_basics():
    tasks = [
        Task(id=f"x{i}", prompt=str(i), answers=(str(i),), meta={"level": 1 + i % 5})
        for i in range(10)
    ]
    src = ListTaskSource("mini", {"train": tasks})
    assert src.by_id("x3").prompt == "3" and src.size("train") == 10
    with pytest.raises(UnknownNameError):
        src.size("test")
    assert 0.0 <= difficulty_of(tasks[0]) < 0.2 and 0.8 <= difficulty_of(tasks[4]) < 1.0
