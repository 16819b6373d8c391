"""The fast paths of issue 40's speed work give the answers of the code they shortcut.

Each cache or shortcut on the step path (``orchenv.core.has_controls``, the cached action
parses of ``orchenv.envs.mathroute.protocol``, the cached ``orchenv.grading.extract_boxed``,
``Completion``'s validation fast path, the simulated backend's ``_luck`` cache) is checked
against the plain computation on inputs that exercise its edges. The end-to-end check is
``tests/test_step_identical.py`` (digests of whole episodes recorded before the changes).
"""

from __future__ import annotations

import math
import random

import pytest

from orchenv import grading
from orchenv.calltypes import Completion
from orchenv.core import _CONTROL_CHARS, escape_controls, has_controls
from orchenv.envs.mathroute import protocol
from orchenv.error import BackendError
from orchenv.seeding import stable_uniform

AGENTS = ("Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct")


def test_has_controls_agrees_with_the_regex_on_every_code_point() -> None:
    for i in range(0x110000):
        c = chr(i)
        want = _CONTROL_CHARS.search(c) is not None
        assert has_controls(c) is want, hex(i)
        assert has_controls(f"ab{c}cd\n\t\r") is want, hex(i)
    rng = random.Random(0)
    pool = [chr(i) for i in range(0x2100)]
    for _ in range(20_000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 8)))
        assert has_controls(text) is (_CONTROL_CHARS.search(text) is not None), repr(text)
    assert escape_controls("a\x1bb\u202ec\n") == "a\\x1bb\\u202ec\n"


ROUTES = [
    f"<thinking>easy</thinking><model>{AGENTS[0]}</model>",
    f"<model>{AGENTS[2].lower()}</model>",
    "<model>SOLVER NAME</model>",
    "<model>nobody</model>",
    "<model>" + AGENTS[1],
    "<think><model>x</model></think>",
    "",
    "x" * (protocol.PARSE_CACHE_CHARS + 1),
    None,
    42,
]
VERDICTS = [
    "<checking>ok</checking><verdict>True</verdict>",
    f"<checking>off</checking><verdict>False</verdict><model>{AGENTS[2]}</model>",
    f"<verdict>False</verdict><model>{AGENTS[0]}</model>",
    "<verdict>maybe</verdict>",
    "<verdict>False</verdict>",
    "<verdict>True",
    None,
]


@pytest.mark.parametrize("text", ROUTES)
def test_cached_route_parse_is_the_parse(text: object) -> None:
    for _ in range(2):  # the second call is served from the cache
        assert protocol.parse_route(text, list(AGENTS)) == protocol._parse_route(text, AGENTS)


@pytest.mark.parametrize("text", VERDICTS)
@pytest.mark.parametrize("stronger", [AGENTS[1:], AGENTS[2:], ()])
@pytest.mark.parametrize("require", [True, False])
def test_cached_verify_parse_is_the_parse(text: object, stronger: tuple, require: bool) -> None:
    want = protocol._parse_verify(text, AGENTS, stronger, require_stronger=require)
    for _ in range(2):
        got = protocol.parse_verify(text, list(AGENTS), list(stronger), require_stronger=require)
        assert got == want


def test_example_variant_is_cached_and_unchanged() -> None:
    plain = protocol.example_variant.__wrapped__
    for turn in range(5):
        assert protocol.example_variant("procmath-0/train/1", turn) == plain(
            "procmath-0/train/1", turn
        )


@pytest.mark.parametrize(
    "text",
    [
        "so \\boxed{12} and \\boxed{\\frac{1}{2}}",
        "\\boxed{unclosed",
        "no box",
        "\\fbox{ 3 }",
        "\\boxed{" * 10 + "1" + "}" * 3,
        "\\boxed{" + "9" * (grading.BOXED_CACHE_CHARS + 10) + "}",
    ],
)
def test_cached_boxed_is_the_extraction(text: str) -> None:
    for _ in range(2):
        assert grading.extract_boxed(text) == grading._extract_boxed(text)


def _completion(**change: object) -> Completion:
    fields: dict = dict(
        agent="a", text="t", prompt_tokens=10, completion_tokens=20, cost_usd=0.1, latency_s=1.0
    )
    fields.update(change)
    return Completion(**fields)


@pytest.mark.parametrize(
    "bad",
    [
        {"cost_usd": math.nan},
        {"cost_usd": -1e-9},
        {"latency_s": math.inf},
        {"prompt_tokens": True},
        {"cost_usd": True},
        {"completion_tokens": -1},
        {"prompt_tokens": 10**12},
        {"prompt_tokens": 1.5},
    ],
)
def test_completion_still_refuses_bad_figures(bad: dict) -> None:
    with pytest.raises(BackendError):
        _completion(**bad)


def test_completion_still_converts_numpy_counts() -> None:
    np = pytest.importorskip("numpy")
    c = _completion(prompt_tokens=np.int64(7), cost_usd=0, latency_s=np.float64(0.5))
    assert type(c.prompt_tokens) is int and c.prompt_tokens == 7


def test_simulated_luck_cache_is_the_hash() -> None:
    from orchenv.backends.simulated import SimulatedBackend, _logit
    from orchenv.pool import AgentSpec
    from orchenv.tasks import Task

    backend = SimulatedBackend(seed=3)
    spec = AgentSpec.priced(
        name="a", model="m", tier=1, price_key="gpt-4.1-mini", backend="sim", calibration={}
    )
    for i in range(5):
        task = Task(id=f"t{i}", prompt="p", answers=("1",))
        u = min(max(stable_uniform("simulated-outcome", 3, task.id, "a"), 1e-15), 1 - 1e-15)
        assert backend._luck(spec, task) == _logit(u) == backend._luck(spec, task)


def test_call_slots_bound_concurrency_and_hand_slots_on() -> None:
    import threading
    import time

    from orchenv.pool import CallSlots

    slots = CallSlots(2)
    active, peak, done = [0], [0], []
    guard = threading.Lock()

    def work(i: int) -> None:
        with slots:
            with guard:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.005)
            with guard:
                active[0] -= 1
        done.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(done) == list(range(12)) and peak[0] == 2
    assert slots.free == 2
    with pytest.raises(ValueError):
        CallSlots(0)


def test_a_copied_pool_keeps_its_slot_sizes() -> None:
    import pickle

    import gymnasium as gym

    pool = gym.make("orch/MathRoute-v0").unwrapped.pool
    copy = pickle.loads(pickle.dumps(pool))
    assert {k: s.size for k, s in copy._slots.items()} == {
        k: s.size for k, s in pool._slots.items()
    }
