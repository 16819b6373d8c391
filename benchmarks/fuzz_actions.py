"""Hostile controller actions against every registered env id: no exception, no slow step,
no growing memory.

For each ``orch/`` id, N fuzzed actions (default 2,500) are stepped one after another
(resetting when an episode ends). Each action is built from the env's own
``demo_action`` (a well-formed action for the current state) and mutated: lone
surrogates and NULs spliced in, 10 MB strings, deep nesting (``((((``, ``<a><a>``,
``[[[[``, ``\\boxed{\\boxed{``), every tag of the env's protocol unclosed, repeated,
nested, re-cased, spaced, or filled with hostile payloads (numbers of 5,000 digits,
``10**400``, ``9^{9^{9}}``, ``1e999999``, answers that make sympy run for minutes,
JSON bombs, paths that escape or exceed name limits), actions just under the length cap
(the most a parser ever sees), non-``str`` actions (None, bytes, int, dict, ...), and
(issue 28) JSON escapes of surrogates and NULs inside the demo's JSON, confusable letters,
bidi overrides, 30k nested tags, path-like and 250k-character agent names, and
``1e309`` / ``NaN`` in every numeric field.

Per id it prints the exceptions (must be 0), malformed results (must be 0), the slowest
step, the steps over 5 s (must be 0), the peak of the Python heap while fuzzing that id
(``tracemalloc``: the 10 MB actions and their copies) and the heap's growth from the end
of the first tenth of the actions to the end (bounded memory: nothing kept per action).
Puppeteer's hostile programs go through an agent, as the protocol has it (the controller
only names ``coder:run_python``; a scripted agent ``coder`` writes the program, in a second
copy of the env); those steps are reported apart (their time is the sandbox's own limit). Then the grading cache's size, the grading worker's RSS, and ``make_vec``
(threaded) stepping ``<answer>9^{9^{9}}</answer>`` and a minutes-long sum, to show they
return.

    python benchmarks/fuzz_actions.py [--actions 2500] [--ids orch/OrchMAS-v0 ...]

``tests/security/test_fuzz.py`` runs the same fuzzer with a few hundred actions per id
(without the payloads whose cost is the grading budget, and without hostile programs).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import re
import resource
import time
import traceback
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401  (registers the ids)
from orchenv import grading
from orchenv.core import MAX_ACTION_CHARS

TEN_MB = 10 * 2**20
SLOW_STEP_S = 5.0
#: every tag any bundled protocol reads, so each env also meets the others' tags
PROTOCOL_TAGS = (
    "think", "thinking", "model", "verdict", "checking", "search", "answer",
    "interaction_prompt", "agent", "code", "path", "query", "plan", "finish", "role",
    "feedback", "note",
)  # fmt: skip
NUMBERS = (
    "10**400", "9" * 5000, "-" + "1" * 4301, "9^{9^{9}}", "9**9**9", "1e999999", "-1e-999999",
    "x^{9^{9^{9}}}", "10^{100000000}", "100000!", "\\frac{1}{0}", "0/0", "nan", "-inf",
    "2^{-1074}", "\\sqrt{-1}", "((((1))))" * 50, "(" * 100_000 + "1", "\\boxed{" * 2000,
    "1" + "0" * 1000, "0." + "3" * 5000, "1,000,000,000,000", "\u0661\u0662",
)  # fmt: skip
#: answers that pass the size checks but would keep sympy busy for minutes: their cost is
#: the grading budget (``orchenv.grading.GRADING_TIMEOUT_S``), once per distinct answer
EXPENSIVE = (
    "\\sum_{k=1}^{100000} k^{k}",
    "99999^{99999}\\cdot 88888^{99999}\\cdot 77777^{99999}",
    "(99999!)!",
    "{9^{9}}!",
)
JSON_BOMBS = (
    '{"name": "prompt_dynamic", "arguments": ' + "[" * 100_000,
    '{"name": ' + "[" * 990 + "]" * 990 + "}",
    '{"name": "prompt_dynamic", "arguments": {"prompt": ' + "9" * 5000 + "}}",
    '{"name": "prompt_dynamic", "arguments": {"prompt": 1e400, "agent_role": []}}',
    '{"name": "prompt_dynamic", "arguments": {"prompt": "\\ud800", "agent_role": "\\u0000"}}',
    '{"a": ' * 20_000,
)
PATHS = (
    "../../../../etc/shadow", "/etc/passwd", "problem.txt/..", "a/" * 5000, "x" * 300,
    "y" * 300 + "/problem.txt", "/proc/self/environ", "~", ".", "", "\ufffd", "problem.txt\n",
)  # fmt: skip
TEXTS = (
    "", " ", "\n" * 1000, "\u202e\u200b\ufeff", "\udcff\ud800", "\x00" * 100, "tool:",
    "tool:run_python", "tool:read_file", "terminate", "True", "False", "<", ">", "}", "{",
    "search[", "click[", "]", "Action: click[buy now]", "pass",
)  # fmt: skip
CODE = (
    "print(1)",
    "while True: pass",
    "print('9^{9^{9}}')",
    "print(10**4000)",
    "print('x' * 10**7)",
    "import os\nfor _ in range(64): os.fork()",
)
NON_TEXT: tuple[Any, ...] = (
    None, b"<answer>1</answer>", 7, 3.5, float("nan"), {"answer": 1}, ["<answer>1</answer>"],
    object(), np.str_("<answer>1</answer>"), np.array(["x"]),
)  # fmt: skip
_TAG = re.compile(r"<\s*/?\s*([A-Za-z_][\w-]*)")
#: issue 28: JSON escapes that decode to lone surrogates / NULs / controls (the action itself
#: is all ASCII, so the action normaliser sees nothing wrong)
JSON_ESCAPES = ("\\ud800", "\\udfff", "\\ud83d", "\\u0000", "\\u001b[2J", "\\u202e")
#: look-alike letters (Cyrillic a, e, o; fullwidth brackets), bidi overrides, zero widths
CONFUSABLES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "<": "\uff1c", ">": "\uff1e"}
BIDI = ("\u202e", "\u202d", "\u2066", "\u2067", "\u200f", "\u200b", "\ufeff", "\x1b[31m")
#: numbers that overflow or are not numbers, for every numeric field of a demo
BAD_NUMBERS = ("1e309", "-1e309", "NaN", "Infinity", "-Infinity", "1e-400", "nan", "inf")
NAMES = ("../../etc/passwd", "/etc/shadow", "a/b", "..", "C:\\x", "x" * 250_000, "\ud800")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_NAME_TAGS = ("model", "agent", "role")


def _size(rng: np.random.Generator) -> int:
    """How long a repeated piece should get: small, medium, just under the cap, or 10 MB."""
    return int(rng.choice([2_000, 60_000, MAX_ACTION_CHARS - 64, TEN_MB]))


def _fill(piece: str, length: int) -> str:
    return piece * max(1, length // max(1, len(piece)))


def _splice(rng: np.random.Generator, text: str, insert: str) -> str:
    at = int(rng.integers(len(text) + 1))
    return text[:at] + insert + text[at:]


@dataclass
class Fuzzer:
    """Hostile actions built from an env's well-formed ones.

    Args:
        expensive: include the answers whose cost is the grading budget (``EXPENSIVE``).
        code: include Puppeteer ``run_python`` calls whose agent writes a hostile program
            (``CODE``; stepped on a copy of the env with the scripted ``coder`` agent).
    """

    expensive: bool = True
    code: bool = True

    def payloads(self) -> tuple[str, ...]:
        return NUMBERS + JSON_BOMBS + PATHS + TEXTS + (EXPENSIVE if self.expensive else ())

    def action(self, rng: np.random.Generator, demo: str) -> Any:
        """One hostile action; ``demo`` is a well-formed action for the current state."""
        kinds: list[Callable[[np.random.Generator, str], Any]] = [
            self._encoding, self._size, self._nesting, self._tag_payload,
            self._tag_structure, self._tag_structure, self._near_miss, self._non_text,
        ]  # fmt: skip
        kinds += [self._escapes, self._escapes]  # issue 28
        if self.code and "<agent>" in demo:  # Puppeteer's protocol: its tools
            kinds.append(self._code)
        return kinds[int(rng.integers(len(kinds)))](rng, demo)

    def _pick(self, rng: np.random.Generator, options: Sequence[Any]) -> Any:
        return options[int(rng.integers(len(options)))]

    def _tags(self, demo: str) -> list[str]:
        return list(dict.fromkeys([*_TAG.findall(demo), *PROTOCOL_TAGS]))

    def _encoding(self, rng: np.random.Generator, demo: str) -> str:
        pieces = ["\udcff", "\ud800", "\udfff", "\x00", "\ud83d\ude00", "\ud83d", "\ufffe"]
        text = demo
        for _ in range(int(rng.integers(1, 20))):
            text = _splice(rng, text, self._pick(rng, pieces))
        if rng.random() < 0.3:  # random code points, controls and surrogates included
            text += "".join(chr(int(c)) for c in rng.integers(0, 0x110000, size=500))
        return text

    def _size(self, rng: np.random.Generator, demo: str) -> str:
        length = _size(rng)
        piece = self._pick(rng, [demo, demo[: max(1, len(demo) // 2)], "x", " ", "\n", "<"])
        text = _fill(piece, length)
        place = self._pick(rng, [lambda: text, lambda: demo + text, lambda: text + demo])
        return place()  # only the chosen string is built: the heap figures are the env's

    def _nesting(self, rng: np.random.Generator, demo: str) -> str:
        tag = self._pick(rng, self._tags(demo))
        piece = self._pick(
            rng, ["(", "[", "{", "<a>", f"<{tag}>", "\\boxed{", "\\frac{", '{"a": ', "^{"]
        )
        depth = int(rng.choice([1_000, 100_000, MAX_ACTION_CHARS // len(piece) - 8]))
        body = piece * depth
        place = self._pick(
            rng,
            [
                lambda: body,
                lambda: demo + body,
                lambda: body + demo,
                lambda: f"<{tag}>{body}</{tag}>",
            ],
        )
        return place()

    def _tag_payload(self, rng: np.random.Generator, demo: str) -> str:
        """A tag of the protocol filled with a hostile payload, alone or inside the demo."""
        tag = self._pick(rng, self._tags(demo))
        payload = self._pick(rng, self.payloads())
        block = f"<{tag}>{payload}</{tag}>"
        inside = re.search(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", demo, re.S)
        if inside is not None and rng.random() < 0.6:
            return demo[: inside.start(1)] + payload + demo[inside.end(1) :]
        brackets = re.search(r"\[(.*)\]", demo, re.S)  # WebShop's search[...] / click[...]
        if brackets is not None and rng.random() < 0.5:
            return demo[: brackets.start(1)] + payload + demo[brackets.end(1) :]
        return self._pick(rng, [block, demo + block, block + demo, f"<think>x</think>{block}"])

    def _tag_structure(self, rng: np.random.Generator, demo: str) -> str:
        """Unclosed, stray, repeated, nested, interleaved, re-cased and spaced tags."""
        tags = self._tags(demo)
        tag, other = self._pick(rng, tags), self._pick(rng, tags)
        length = _size(rng)
        shapes: list[Callable[[], str]] = [
            lambda: _fill(f"<{tag}>", length),
            lambda: _fill(f"</{tag}>", length),
            lambda: _fill(f"<{tag}>a</{tag}>", length) + f"<{tag}>",
            lambda: _fill(f"<{tag}><{other}></{tag}></{other}>", length),
            lambda: f"<answer>{demo}</answer>" + _fill("<think>", length),
            lambda: f"<{tag}>" + _fill("<think>", length) + f"</{tag}>",
            lambda: _fill(f"< {tag.upper()} >x</ {tag} >", length),
            lambda: _fill("<" + " " * 500, length) + demo,
            lambda: demo.replace("</", "<") * 3,
            lambda: demo.replace(">", "> " + "<think>" * 100, 1),
            lambda: _fill(demo[: max(1, len(demo) // 2)], length),
        ]
        return self._pick(rng, shapes)()

    def _near_miss(self, rng: np.random.Generator, demo: str) -> str:
        cut = int(rng.integers(len(demo) + 1))
        piece = self._pick(rng, self.payloads())
        return self._pick(
            rng,
            [demo[:cut], demo[:cut] + demo[cut + 1 :], demo[:cut] + piece + demo[cut:],
             demo.upper(), demo * 2, demo.swapcase()],
        )  # fmt: skip

    def _non_text(self, rng: np.random.Generator, demo: str) -> Any:
        return self._pick(rng, [*NON_TEXT, demo.encode("utf-8", "surrogatepass")])

    def _escapes(self, rng: np.random.Generator, demo: str) -> str:
        """Issue 28: JSON escapes of surrogates and NULs inside the demo's strings,
        confusables, bidi overrides, 30k nested tags, path-like and 250k-character names,
        and 1e309 / NaN in every numeric field."""
        tag = self._pick(rng, self._tags(demo))
        escape = self._pick(rng, JSON_ESCAPES)
        name = self._pick(rng, NAMES)
        bad = self._pick(rng, BAD_NUMBERS)
        shapes: list[Callable[[], str]] = [
            lambda: demo.replace('": "', '": "' + escape),
            lambda: demo.replace('"', escape + '"', 3),
            lambda: f"<{tag}>{escape}</{tag}>" + demo,
            lambda: "".join(CONFUSABLES.get(c, c) for c in demo),
            lambda: _splice(rng, demo, self._pick(rng, BIDI)),
            lambda: self._pick(rng, BIDI).join(demo.split(">")),
            lambda: f"<{tag}>" * 30_000 + demo + f"</{tag}>" * 30_000,
            lambda: "".join(f"<{t}>{name}</{t}>" for t in _NAME_TAGS) + demo,
            lambda: re.sub(r"(<(model|agent|role)>)[^<]*", lambda m: m.group(1) + name, demo),
            lambda: _NUMBER.sub(bad, demo),
            lambda: demo.replace('": ', '": ' + bad + ', "x": ', 1),
        ]
        return self._pick(rng, shapes)()

    def _code(self, rng: np.random.Generator, demo: str) -> str:
        return CODE_ACTION


# -- checking one step ------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} in info is not JSON")


def _finite(value: Any, where: str) -> None:
    if isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"
    elif isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _finite(item, f"{where}[{i}]")


def check_step(result: tuple[Any, ...], space: gym.Space) -> None:
    """A fuzzed step's result is well formed: text observation, finite reward, an info
    that serialises to JSON (strictly: no NaN, no objects) with finite numbers."""
    obs, reward, terminated, truncated, info = result
    assert isinstance(obs, str) and space.contains(obs), "observation"
    assert isinstance(reward, float) and math.isfinite(reward), f"reward {reward}"
    assert not (terminated and truncated), "terminated and truncated"
    text = json.dumps(info, default=_plain, allow_nan=True)
    _finite(json.loads(text), "info")
    if info.get("invalid_action"):
        assert isinstance(info.get("parse_error"), str) and info["parse_error"], "parse_error"


# -- fuzzing one id ---------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Report:
    """What fuzzing one id found. Steps that ran a hostile program are counted apart: their
    time is the sandbox's own limit (``tool_timeout_s``), not parsing or grading."""

    env_id: str
    actions: int = 0
    exceptions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed results
    slowest_s: float = 0.0
    slowest_action: str = ""
    over_limit: int = 0
    code_steps: int = 0
    code_slowest_s: float = 0.0
    code_over_limit: int = 0
    heap_peak_mb: float = 0.0  # Python heap (tracemalloc) peak while fuzzing this id
    heap_growth_kb: float = 0.0  # Python heap after the first tenth of the actions -> the end
    grading: dict[str, int] = field(default_factory=dict)

    def timed(self, action: Any, took: float) -> None:
        if action is CODE_ACTION:
            self.code_steps += 1
            self.code_slowest_s = max(self.code_slowest_s, took)
            self.code_over_limit += took > SLOW_STEP_S
            return
        if took > self.slowest_s:
            self.slowest_s, self.slowest_action = took, _show(action)
        self.over_limit += took > SLOW_STEP_S


def _show(action: Any) -> str:
    text = repr(action)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(text):,} chars)"


#: the controller's action for a hostile program: it names the scripted agent that writes one
CODE_ACTION = "<agent>coder:run_python</agent>"


def coder_env(env_id: str, rng: np.random.Generator, **kwargs: Any) -> tuple[gym.Env, Any]:
    """A copy of ``env_id`` whose one agent, ``coder``, answers a tool request with a hostile
    program from ``CODE`` (the way a live model's reply carries its tool call)."""
    from orchenv.pool import AgentPool, AgentSpec
    from orchenv.testing.scripted import ScriptedBackend

    def reply(spec: Any, messages: Any, context: Any) -> str:
        code = CODE[int(rng.integers(len(CODE)))]
        return json.dumps({"action": "run_python", "parameter": code})

    backend = ScriptedBackend({"coder": reply})
    spec = AgentSpec(name="coder", model="coder", tier=0, backend="scripted")
    pool = AgentPool([spec], {"scripted": backend}, name="fuzz-coder")
    return gym.make(env_id, pool=pool, **kwargs), backend


def _heap_kb() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1024


def fuzz_env(
    env_id: str,
    actions: int,
    *,
    seed: int = 0,
    fuzzer: Fuzzer | None = None,
    trace_memory: bool = False,
    **kwargs: Any,
) -> Report:
    """Step ``actions`` fuzzed actions through ``env_id``; what went wrong, and how fast.
    ``trace_memory``: follow the Python heap with ``tracemalloc`` (slower)."""
    fuzzer = fuzzer or Fuzzer()
    report = Report(env_id)
    rng = np.random.default_rng(seed)
    env = gym.make(env_id, **kwargs)
    space, base = env.observation_space, env.unwrapped
    env.reset(seed=seed)
    if trace_memory:
        tracemalloc.start()
    heap0 = 0.0
    coder: tuple[gym.Env, Any] | None = None
    for i in range(actions):
        demo = base.demo_action(np.random.default_rng(int(rng.integers(2**31))))  # type: ignore[attr-defined]
        action = fuzzer.action(rng, demo)
        target = env
        if action is CODE_ACTION:  # the hostile program is written by the coder agent
            if coder is None:
                coder = coder_env(env_id, rng, **kwargs)
                coder[0].reset(seed=seed)
            target = coder[0]
            coder[1].calls.clear()
        start = time.perf_counter()
        try:
            result = target.step(action)
        except Exception:
            report.exceptions.append(f"{_show(action)}\n{traceback.format_exc(limit=6)}")
            target.reset(seed=int(rng.integers(2**31)))
            continue
        finally:
            report.timed(action, time.perf_counter() - start)
            report.actions += 1
            del action
        try:
            check_step(result, space)
        except (AssertionError, TypeError, ValueError) as exc:
            report.problems.append(f"{_show(demo)} -> {exc}")
        status = result[4].get("grading")
        if status:
            report.grading[status] = report.grading.get(status, 0) + 1
        if result[2] or result[3]:
            target.reset(seed=int(rng.integers(2**31)))
        del result
        if trace_memory and i + 1 == max(1, actions // 10):
            heap0 = _heap_kb()
    env.close()
    if coder is not None:
        coder[0].close()
    if trace_memory:
        report.heap_growth_kb = _heap_kb() - heap0
        report.heap_peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return report


def _worker_rss_kb() -> int | None:
    pid = grading.worker_pid()
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as handle:
            line = next(ln for ln in handle if ln.startswith("VmRSS:"))
        return int(line.split()[1])
    except (OSError, StopIteration):
        return None


def vector_check(env_id: str, answer: str, n: int = 4) -> tuple[float, list[Any]]:
    """Seconds for one threaded ``make_vec`` step where every copy answers ``answer``."""
    from orchenv.vector import make_vec

    vec = make_vec(env_id, n)
    vec.reset(seed=0)
    start = time.perf_counter()
    _, _, _, _, infos = vec.step([f"<think>t</think><answer>{answer}</answer>"] * n)
    took = time.perf_counter() - start
    vec.close()
    return took, list(infos.get("grading", [None] * n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=2_500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ids", nargs="*", default=None)
    args = parser.parse_args()
    ids = args.ids or sorted(i for i in gym.registry if i.startswith("orch/"))
    print(f"{args.actions:,} fuzzed actions per id, seed {args.seed}\n")
    print(
        "| env id | actions | exceptions | malformed results | max step s | steps > 5 s "
        "| heap peak MB | heap growth KB | grading too-large / timeout |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed, reports = False, []
    for env_id in ids:
        r = fuzz_env(env_id, args.actions, seed=args.seed, trace_memory=True)
        reports.append(r)
        failed |= bool(r.exceptions or r.problems or r.over_limit)
        grades = f"{r.grading.get('too-large', 0)} / {r.grading.get('timeout', 0)}"
        print(
            f"| {env_id} | {r.actions - r.code_steps:,} | {len(r.exceptions)} "
            f"| {len(r.problems)} | {r.slowest_s:.2f} | {r.over_limit} | {r.heap_peak_mb:.0f} "
            f"| {r.heap_growth_kb:,.0f} | {grades} |",
            flush=True,
        )
        for line in (r.exceptions + r.problems)[:3]:
            print(f"    {line}")
        if r.slowest_s > 1.0:
            print(f"    slowest action: {r.slowest_action}")
    for r in reports:
        if r.code_steps:
            print(
                f"\n{r.env_id} coder:run_python steps (hostile programs): {r.code_steps}, "
                f"max {r.code_slowest_s:.2f} s, {r.code_over_limit} over 5 s"
            )
    info = grading.cache_info()
    print(f"\ngrading cache: {info.currsize:,} entries, {info.nbytes / 2**20:.2f} MB")
    print(f"grading worker RSS: {(_worker_rss_kb() or 0) / 1024:.0f} MB")
    print(f"peak RSS of this process: {_peak_rss_mb():.0f} MB\n")
    for n, env_id in enumerate(("orch/BudgetRoute-v0", "orch/OrchMAS-v0")):
        for answer in ("9^{9^{9}}", f"{EXPENSIVE[0]} + {n}"):
            took, statuses = vector_check(env_id, answer)
            print(f"make_vec({env_id!r}, 4), <answer>{answer}</answer>: {took:.2f} s, {statuses}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
