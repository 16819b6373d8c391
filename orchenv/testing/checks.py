"""The checks every orchenv environment passes, public so you can run them on your own.

::

    from orchenv.testing.checks import check_orch_env

    check_orch_env("orch/Echo-v0")             # a registered id
    check_orch_env(EchoEnv, max_turns=(1, 3))  # or a class / factory taking keyword arguments

``check_orch_env`` runs all of them; each is also a function of its own (orchenv's suite
parametrizes them over every registered id). A check raises ``AssertionError`` saying what
broke. The env must be an ``orchenv.core.OrchestrationEnv`` (the checks play its
``demo_action``, ``fork`` it and read its turn counter). What they check:

- ``check_api``: Gymnasium's ``check_env``;
- ``check_determinism``: the same seed and actions give the same episode; seeds vary tasks;
- ``check_info_schema``: every ``info`` holds the keys of ``orchenv.info.StepInfo`` with
  consistent values, the last one the episode's result;
- ``check_fork``: ``fork()`` copies are identical, independent and leave the original alone;
- ``check_render``: ``render_mode="ansi"`` shows the transcript;
- ``check_step_order``: ``step`` before ``reset`` or after the end raises ``EnvStateError``;
- ``check_hostile_actions``: huge strings, lone surrogates, deep nesting, near-misses of
  well-formed actions and non-``str`` actions never raise and always give a valid step;
- ``check_horizon``: ``max_turns=k`` is accepted and an episode ends within ``k`` steps;
  ``truncated`` exactly when step ``k`` ended it without a terminal decision, ``terminated``
  otherwise, never both;
- ``check_hash_seed_independence`` (registered ids only): the same outcomes in processes
  with different ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env, data_equivalence

from orchenv.core import OrchestrationEnv
from orchenv.error import EnvStateError
from orchenv.info import StepInfo

logger = logging.getLogger(__name__)

#: an env id, or a class / factory called with the env's keyword arguments
EnvSource = str | Callable[..., gym.Env]

#: keys of every ``info`` (``reset`` and ``step``)
STEP_KEYS = frozenset(StepInfo.__required_keys__)
#: keys the last ``step`` of an episode adds (and ``correct`` or ``score``)
END_KEYS = frozenset({"task_id", "final_answer", "turns"})
TOKEN_SOURCES = frozenset({"server", "tokenizer", "estimate", "record"})
ROLES = frozenset({"system", "user", "assistant"})

#: pieces the fuzzer glues together, besides cuts of the env's own well-formed actions
FRAGMENTS = (
    "<", ">", "</", "/>", "<<", ">>", "\\boxed{", "{", "}", "[", "]", "(", ")", '"', "'",
    ":", ",", "\n", " ", "\t", "\x00", "\\", "True", "False", "None", "0", "-1", "1e309",
    "\udcff", "\ud800", "\U0001f600", "\u202e", "\ufeff",
)  # fmt: skip
#: actions that are not text at all (the env must treat them as unusable, not crash)
NON_TEXT_ACTIONS: tuple[Any, ...] = (None, 42, 3.5, b"<answer>x</answer>", ["x"], {"a": 1})


def make_env(env: EnvSource, **kwargs: Any) -> gym.Env:
    """``gym.make(env, **kwargs)`` for an id, ``env(**kwargs)`` for a class or factory."""
    made = gym.make(env, **kwargs) if isinstance(env, str) else env(**kwargs)
    assert isinstance(made.unwrapped, OrchestrationEnv), (
        f"{env!r} made {type(made.unwrapped).__name__}, not an orchenv.core.OrchestrationEnv"
    )
    return made


def _base(env: gym.Env) -> OrchestrationEnv:
    base = env.unwrapped
    assert isinstance(base, OrchestrationEnv)
    return base


def rollout(env: gym.Env, seed: int, controller_seed: int) -> list[tuple[Any, ...]]:
    """One episode of the env's own random well-formed actions (``demo_action``):
    ``[(obs, info), (obs, reward, terminated, truncated, info), ...]``."""
    rng = np.random.default_rng(controller_seed)
    obs, info = env.reset(seed=seed)
    trace: list[tuple[Any, ...]] = [(obs, info)]
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(_base(env).demo_action(rng))
        trace.append((obs, reward, terminated, truncated, info))
        done = terminated or truncated
    return trace


def _short(value: Any, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else f"{text[: n // 2]}...{text[-n // 2 :]} ({len(text)} chars)"


# -- the checks ----------------------------------------------------------------------------------
def check_api(env: EnvSource, **kwargs: Any) -> None:
    """Gymnasium's ``check_env`` (spaces, seeding, ``reset``/``step`` signatures)."""
    made = make_env(env, **kwargs)
    check_env(made.unwrapped, skip_render_check=True)
    made.close()


def check_determinism(env: EnvSource, *, seeds: Iterable[int] = range(5), **kwargs: Any) -> None:
    """Two envs given the same seeds and actions play the same episodes (observations,
    rewards, flags, infos); different seeds start different episodes."""
    a, b = make_env(env, **kwargs), make_env(env, **kwargs)
    for seed in seeds:
        assert data_equivalence(rollout(a, seed, seed), rollout(b, seed, seed)), (
            f"seed {seed}: two envs given the same seed and actions played different episodes"
        )
    first = {a.reset(seed=seed)[0] for seed in range(10)}
    assert len(first) > 1, "seeds 0-9 all start the same episode: reset(seed=...) should vary it"


def check_info_schema(env: EnvSource, *, seed: int = 3, **kwargs: Any) -> None:
    """Every ``info`` has ``StepInfo``'s keys and consistent values; the last one has the
    episode's result (``task_id``, ``final_answer``, ``turns``, ``correct`` or ``score``)."""
    made = make_env(env, **kwargs)
    trace = rollout(made, seed=seed, controller_seed=1)
    n_agents = len(_base(made).pool.names)
    _, first = trace[0]
    assert set(first) >= STEP_KEYS, f"reset info lacks {sorted(STEP_KEYS - set(first))}"
    assert first["turn"] == 0
    for turn, (_obs, reward, _term, _trunc, info) in enumerate(trace[1:], 1):
        missing = sorted(STEP_KEYS - set(info))
        assert not missing, f"step {turn}: info lacks {missing}"
        assert isinstance(reward, float) and math.isfinite(reward), f"step {turn}: {reward!r}"
        assert info["turn"] == turn, f"step {turn}: info['turn'] is {info['turn']}"
        assert info["constraint_costs"].shape == (n_agents,)
        # one indicator per agent call made this step; the step's tokens are its calls' tokens
        assert len(info["calls"]) == int(info["constraint_costs"].sum())
        for call in info["calls"]:
            assert call["token_source"] in TOKEN_SOURCES, call
        step_tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in info["calls"])
        assert step_tokens == sum(info["tokens"].values())
        assert math.isfinite(info["cost_usd"]) and info["cost_usd"] >= 0
        assert all(m["role"] in ROLES for m in info["messages"]), info["messages"]
        assert info["parse_error"] is None or isinstance(info["parse_error"], str)
    end = trace[-1][-1]
    assert set(end) >= END_KEYS, f"the last info lacks {sorted(END_KEYS - set(end))}"
    assert end["turns"] == len(trace) - 1
    assert isinstance(end.get("correct"), bool) or isinstance(end.get("score"), float), (
        "the last info needs 'correct' (bool) or 'score' (float)"
    )
    metrics = end.get("metrics", {})
    assert isinstance(metrics, dict), "info['metrics'] maps names to numbers"
    for name, value in metrics.items():
        assert isinstance(name, str) and isinstance(value, float), (name, value)


def check_fork(env: EnvSource, *, seed: int = 11, **kwargs: Any) -> None:
    """Forks share the pool, continue identically under identical actions, differ under
    other actions, and leave the original untouched."""
    base = _base(make_env(env, **kwargs))
    base.reset(seed=seed)
    rng = np.random.default_rng(0)
    before = (base.turn, base.meter.total_calls, len(base.transcript))
    a, b = base.fork(), base.fork()
    assert a.pool is base.pool, "forks share the pool's backends"
    action = base.demo_action(rng)
    ra, rb = a.step(action), b.step(action)
    assert data_equivalence(ra, rb), "identical actions from identical states: identical futures"
    others = [base.fork().step(base.demo_action(rng)) for _ in range(8)]
    assert any(not data_equivalence(ra, rc) for rc in others), "other actions lead elsewhere"
    after = (base.turn, base.meter.total_calls, len(base.transcript))
    assert after == before, "stepping forks changed the original"


def check_render(env: EnvSource, **kwargs: Any) -> None:
    """``render_mode="ansi"`` renders the transcript, which shows the controller's action."""
    made = make_env(env, render_mode="ansi", **kwargs)
    made.reset(seed=0)
    action = _base(made).demo_action(np.random.default_rng(0))
    made.step(action)
    text = made.render()
    assert isinstance(text, str) and action[:20] in text, "the transcript lacks the action"


def _expect_state_error(step: Callable[[], Any], words: str, when: str) -> None:
    try:
        step()
    except EnvStateError as exc:
        assert words in str(exc), f"the error of step() {when} should say {words!r}: {exc}"
    else:
        raise AssertionError(f"step() {when} must raise EnvStateError")


def check_step_order(env: EnvSource, **kwargs: Any) -> None:
    """``step`` before ``reset`` and after the episode's end raise ``EnvStateError``."""
    base = _base(make_env(env, **kwargs))
    _expect_state_error(lambda: base.step("x"), "reset", "before reset()")
    base.reset(seed=0)
    done = False
    while not done:
        *_, terminated, truncated, _ = base.step("garbage")
        done = terminated or truncated
    _expect_state_error(lambda: base.step("x"), "after the episode ended", "after the end")


@lru_cache(maxsize=1)
def _fixed_actions() -> tuple[Any, ...]:
    return (
        "",
        "\udcff",
        "x" * 1_000_000,
        "[" * 100_000,
        '{"a": ' * 20_000,
        "<a>" * 50_000,
        *NON_TEXT_ACTIONS,
    )


def hostile_action(rng: np.random.Generator, demo: str, fragments: Sequence[str] = ()) -> Any:
    """A hostile action: random unicode (lone surrogates included), a huge or deeply nested
    string, glued fragments, a near-miss of the well-formed action ``demo``, or no ``str``."""
    pieces = [*FRAGMENTS, *fragments]
    kind = int(rng.integers(6))
    if kind == 0:
        fixed = _fixed_actions()
        return fixed[int(rng.integers(len(fixed)))]
    if kind == 1:  # random code points, control characters and surrogates included
        return "".join(chr(int(c)) for c in rng.integers(0, 0x110000, size=rng.integers(200)))
    if kind == 2:
        return "".join(pieces[int(i)] for i in rng.integers(len(pieces), size=rng.integers(30)))
    if kind == 3:  # a well-formed prefix repeated: quadratic parsers show up here
        return (demo[: max(1, len(demo) // 2)] or "<") * 20_000
    cut = int(rng.integers(len(demo) + 1))
    piece = pieces[int(rng.integers(len(pieces)))]
    near_misses = (
        demo[:cut],
        demo[:cut] + demo[cut + 1 :],
        demo[:cut] + piece + demo[cut:],
        demo.upper(),
        demo * 2,
    )
    return near_misses[int(rng.integers(len(near_misses)))]


def check_hostile_actions(
    env: EnvSource,
    *,
    seed: int = 0,
    episodes: int = 30,
    steps: int = 5,
    fragments: Sequence[str] = (),
    **kwargs: Any,
) -> None:
    """Hostile actions never raise: each gives a valid observation, a finite reward and a
    full ``info``; an unusable one says why (``parse_error``); a non-``str`` one is unusable
    and never rewarded. ``fragments``: extra env-specific pieces for the fuzzer."""
    made = make_env(env, **kwargs)
    space, base = made.observation_space, _base(made)
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        reset_seed = int(rng.integers(2**16))
        obs, info = made.reset(seed=reset_seed)
        assert space.contains(obs)
        for _ in range(int(rng.integers(1, steps + 1))):
            demo = base.demo_action(np.random.default_rng(int(rng.integers(2**16))))
            action = hostile_action(rng, demo, fragments)
            where = f"episode {episode} (reset seed {reset_seed}), action {_short(action)}"
            try:
                obs, reward, terminated, truncated, info = made.step(action)
            except Exception as exc:
                raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
            assert isinstance(obs, str) and space.contains(obs), where
            assert isinstance(reward, float) and math.isfinite(reward), (where, reward)
            assert set(info) >= STEP_KEYS, (where, sorted(STEP_KEYS - set(info)))
            assert not (terminated and truncated), f"{where}: terminated and truncated"
            if info["invalid_action"]:
                error = info["parse_error"]
                assert isinstance(error, str) and error, f"{where}: no parse_error"
            if not isinstance(action, str):
                assert info["invalid_action"], f"{where}: a non-str action was used"
                assert reward <= 0, f"{where}: a non-str action was rewarded {reward}"
            if terminated or truncated:
                break


def check_horizon(
    env: EnvSource,
    *,
    max_turns: Iterable[int] = (1, 2, 3),
    seeds: Iterable[int] = range(3),
    **kwargs: Any,
) -> None:
    """The horizon rule with ``max_turns=k``, played with ``demo_action`` and with unusable
    actions: the episode ends within ``k`` steps; before step ``k`` only by a terminal
    decision (``terminated``); at step ``k`` it is ``terminated`` if the action was
    terminal (or the env declares ``horizon_is_terminal``), else ``truncated``; never
    both. Unusable actions change nothing, so an episode of them ends at exactly step
    ``k``: ``truncated``, or ``terminated`` for a ``horizon_is_terminal`` env."""
    for k in max_turns:
        made = make_env(env, max_turns=k, **kwargs)
        assert _base(made).max_turns == k, f"max_turns={k} was not applied"
        terminal_horizon = bool(getattr(_base(made), "horizon_is_terminal", False))
        for seed in seeds:
            for controller in ("demo", "unusable"):
                rng = np.random.default_rng(seed)
                made.reset(seed=seed)
                all_invalid = True
                for step in range(1, k + 1):
                    action = _base(made).demo_action(rng) if controller == "demo" else "\x00"
                    _, _, terminated, truncated, info = made.step(action)
                    all_invalid = all_invalid and bool(info["invalid_action"])
                    where = f"max_turns={k}, seed {seed}, {controller} actions, step {step}"
                    assert isinstance(terminated, bool) and isinstance(truncated, bool), where
                    assert not (terminated and truncated), f"{where}: terminated and truncated"
                    if step < k:
                        assert not truncated, f"{where}: truncated before the horizon"
                    elif terminal_horizon:
                        assert terminated, f"{where}: a terminal horizon passed without terminated"
                    elif not terminated:
                        assert truncated, f"{where}: the horizon passed without truncated"
                    if terminated or truncated:
                        break
                else:
                    raise AssertionError(f"max_turns={k}, seed {seed}: no end after {k} steps")
                if controller == "unusable" and all_invalid:
                    ended = terminated if terminal_horizon else truncated
                    assert ended and step == k, (
                        f"max_turns={k}, seed {seed}: unusable actions ended the episode at "
                        f"step {step} (terminated={terminated}); they must change nothing"
                    )


_DIGEST_SCRIPT = """
import hashlib, json, sys
import gymnasium as gym, numpy as np
import orchenv
from orchenv.testing.checks import rollout
env_id, entry_point, spec_kwargs, kwargs, seeds = json.loads(sys.argv[1])
if env_id not in gym.registry:
    gym.register(id=env_id, entry_point=entry_point, kwargs=spec_kwargs)
env = gym.make(env_id, **kwargs)
h = hashlib.sha256()
for seed in seeds:
    for step in rollout(env, seed, seed)[1:]:
        obs, reward, _, _, info = step
        h.update(f"{obs}|{reward}|{info['episode_cost_usd']}|{info['tokens']}".encode())
sys.stdout.write(h.hexdigest())
"""


def check_hash_seed_independence(
    env_id: str, *, seeds: Sequence[int] = (0, 1, 2), timeout: float = 300, **kwargs: Any
) -> None:
    """Episodes do not depend on Python's per-process string hashing (``PYTHONHASHSEED``).

    Plays the same seeds in two fresh processes (with this process's ``sys.path``; an id
    registered here is registered there from its spec). ``kwargs`` must be JSON values.
    """
    spec = gym.spec(env_id)
    entry = spec.entry_point
    if not isinstance(entry, str):  # a class or function: by its import name
        entry = f"{entry.__module__}:{getattr(entry, '__qualname__', '')}"
    payload = json.dumps([env_id, entry, spec.kwargs, kwargs, list(seeds)])
    path = os.pathsep.join(p for p in sys.path if p)
    digests = set()
    for hash_seed in ("1", "2"):
        child_env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": path}
        result = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT, payload],
            capture_output=True,
            text=True,
            env=child_env,
            timeout=timeout,
        )
        assert result.returncode == 0, f"PYTHONHASHSEED={hash_seed}: {result.stderr[-3000:]}"
        digests.add(result.stdout.strip())
    assert len(digests) == 1, f"{env_id}: episodes differ with PYTHONHASHSEED 1 and 2"


@dataclass
class Checklist:
    """What :func:`check_orch_env` checked: ``(check, seconds, what it covers)`` per passed
    check, in order. ``str()`` (and the REPL) shows it as a checklist."""

    env: str
    passed: list[tuple[str, float, str]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"check_orch_env({self.env}): {len(self.passed)} checks passed"]
        lines += [f"  [ok] {name:<30} {secs:6.2f} s  {what}" for name, secs, what in self.passed]
        return "\n".join(lines)

    __repr__ = __str__


def check_orch_env(
    env: EnvSource,
    *,
    seed: int = 0,
    episodes: int = 3,
    max_turns: Iterable[int] = (1, 2),
    fuzz_episodes: int = 30,
    fragments: Sequence[str] = (),
    **kwargs: Any,
) -> Checklist:
    """Run every check above on ``env`` (an id, or a class / factory), made with ``kwargs``;
    returns the :class:`Checklist` of what passed (``print(check_orch_env(ENV_ID))``; each
    check is also logged at INFO). A failing check raises an ``AssertionError`` naming the
    check and the ones that passed before it, then the check's own message (chained).

    ``episodes`` seeded episodes from ``seed`` for determinism and the horizon rule (at
    each of ``max_turns``); ``fuzz_episodes`` of hostile actions (plus ``fragments``).
    The process check runs for registered ids only.
    """
    seeds = range(seed, seed + episodes)
    name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
    checklist = Checklist(str(name))
    steps: list[tuple[Callable[[], Any], str, str]] = [
        (lambda: check_api(env, **kwargs), "check_api", "Gymnasium's check_env, spaces"),
        (
            lambda: check_determinism(env, seeds=seeds, **kwargs),
            "check_determinism",
            f"same seed, same episode ({episodes} seeds)",
        ),
        (
            lambda: check_info_schema(env, seed=seed, **kwargs),
            "check_info_schema",
            "info keys and types (orchenv.info)",
        ),
        (lambda: check_fork(env, seed=seed, **kwargs), "check_fork", "fork() repeats exactly"),
        (lambda: check_render(env, **kwargs), "check_render", "render_mode='ansi'"),
        (lambda: check_step_order(env, **kwargs), "check_step_order", "step before reset fails"),
        (
            lambda: check_hostile_actions(
                env, seed=seed, episodes=fuzz_episodes, fragments=fragments, **kwargs
            ),
            "check_hostile_actions",
            f"huge, surrogate, nested, non-str actions ({fuzz_episodes} episodes)",
        ),
        (
            lambda: check_horizon(env, max_turns=max_turns, seeds=seeds, **kwargs),
            "check_horizon",
            f"terminated vs truncated at max_turns {tuple(max_turns)}",
        ),
    ]
    if isinstance(env, str):
        steps.append(
            (
                lambda: check_hash_seed_independence(env, seeds=seeds, **kwargs),
                "check_hash_seed_independence",
                "same episodes in another process (PYTHONHASHSEED)",
            )
        )
    for run, check, what in steps:
        started = time.perf_counter()
        try:
            run()
        except AssertionError as exc:
            done = ", ".join(n for n, _, _ in checklist.passed) or "none"
            raise AssertionError(
                f"check_orch_env({name}): {check} failed; passed before it: {done}\n{exc}"
            ) from exc
        checklist.passed.append((check, time.perf_counter() - started, what))
        logger.info("check_orch_env(%s): %s passed", name, check)
    return checklist


__all__ = [
    "END_KEYS",
    "Checklist",
    "STEP_KEYS",
    "EnvSource",
    "check_api",
    "check_determinism",
    "check_fork",
    "check_hash_seed_independence",
    "check_horizon",
    "check_hostile_actions",
    "check_info_schema",
    "check_orch_env",
    "check_render",
    "check_step_order",
    "hostile_action",
    "make_env",
    "rollout",
]
