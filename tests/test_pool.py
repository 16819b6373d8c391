"""Agent pool, presets, usage metering and task sources' shared behaviour."""

from __future__ import annotations

import time

import pytest
from helpers import InFlight
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool

from orchenv.error import ConfigError, UnknownNameError
from orchenv.pool import (
    AgentPool,
    AgentSpec,
    CallContext,
    Completion,
    UsageMeter,
    list_presets,
    load_preset_data,
    make_pool,
    with_measured_latency,
)
from orchenv.pricing import price_for, price_table
from orchenv.tasks import ListTaskSource, Task, difficulty_of, make_task_source
from orchenv.testing.scripted import ScriptedBackend


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
            price = price_for(raw["price"])
            assert price.source and "http" in price.source, "every price names its public source"
            spec = pool.spec(raw["name"])
            assert (spec.price_prompt, spec.price_completion) == (price.prompt, price.completion)
    assert make_pool("system1").spec("Qwen2.5-7B-Instruct").calibration["accuracy"] == 0.757
    assert make_pool("system2").spec("Llama-3.2-1B-Instruct").calibration["accuracy"] == 0.275


def test_price_table_covers_the_seed_papers():
    table = price_table()
    for key in ("gpt-4.1", "gpt-4.1-nano", "o3", "qwen3-30b-a3b-instruct-2507"):
        assert table[key].prompt > 0 and table[key].completion > 0 and table[key].source
    assert table["gpt-4.1-nano"].prompt < table["gpt-4.1"].prompt
    with pytest.raises(UnknownNameError, match="Did you mean 'gpt-4.1'"):
        price_for("gpt-4.l")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_pool_from_a_file_with_price_override(tmp_path, suffix):
    import json

    import yaml

    doc = {
        "name": "mine",
        "agents": [
            {"name": "nano", "model": "gpt-4.1-nano", "tier": 1, "price": "gpt-4.1-nano",
             "backend": "simulated", "calibration": {"accuracy": 0.5}},
            {"name": "big", "model": "gpt-4.1", "tier": 0, "price": "gpt-4.1", "price_completion": 7.0,
             "backend": "simulated", "calibration": {"accuracy": 0.9}},
        ],
        "usage_constraints": {"big": 0.3},
    }  # fmt: skip
    path = tmp_path / f"pool{suffix}"
    path.write_text(json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc))
    pool = make_pool(path)
    assert pool.names == ("nano", "big") and pool.name == "mine"
    assert pool.spec("nano").price_prompt == 0.1
    assert (pool.spec("big").price_prompt, pool.spec("big").price_completion) == (2.0, 7.0)
    assert pool.usage_constraints == {"big": 0.3}


def test_bad_pool_files_say_what_is_wrong(tmp_path):
    from orchenv.error import DataError

    with pytest.raises(DataError, match="does not exist"):
        make_pool(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not valid json"):
        make_pool(bad)
    bad.write_text('{"agents": [{"name": "x"}]}')
    with pytest.raises(ConfigError, match="lacks model, tier"):
        make_pool(bad)


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
    calls_now = InFlight()
    slow = calls_now.slow(0.05, lambda spec, messages: f"{spec.name}:{messages[0]['content']}")
    pool = scripted_pool({WEAK: slow, MID: slow, STRONG: slow})
    calls = [
        (n, [{"role": "user", "content": str(i)}], CallContext())
        for i, n in enumerate([WEAK, MID, STRONG] * 3)
    ]
    out = pool.call_many(calls)
    assert [c.text for c in out] == [f"{n}:{i}" for i, (n, _, _) in enumerate(calls)]
    assert calls_now.peak > 1, "calls overlapped"


def test_spec_completion_prices_the_call_and_latency_is_measured_once():
    spec = AgentSpec("a", "m", 0, price_prompt=2.0, price_completion=8.0)
    out = spec.completion("hi", 1000, 500, latency_s=0.0, token_source="server")
    assert out == Completion("a", "hi", 1000, 500, 0.006, 0.0, False, "server", {})
    assert out.cost_usd == spec.cost(1000, 500)
    timed = with_measured_latency(out, time.perf_counter() - 1.0)
    assert timed.latency_s >= 1.0 and timed.text == "hi" and timed.cost_usd == out.cost_usd
    reported = spec.completion("hi", 1, 1, latency_s=0.5, token_source="estimate", meta={"k": 1})
    cached = spec.completion("hi", 1, 1, latency_s=0.0, token_source="record", cached=True)
    assert with_measured_latency(reported, 0.0) is reported and reported.meta == {"k": 1}
    assert with_measured_latency(cached, 0.0) is cached


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
