"""RCR context routing per call at 100 / 1k / 10k memory items, against a plain Python sort.

The memory holds what a multihop QA team writes over many rounds: plans,
search queries, evidence paragraphs, notes, answers and verifier feedback
(token lengths from the estimate counter, so building 10k items is quick).
Four roles route with their own keywords, stage types and budgets, plus the
question's entities as per-call keywords, as ``orch/MultihopQA-v0`` does.

Measured in this process, one call at a time, median over repeats:

* ``rcr warm``: ``RCRRouter.select`` on an unchanged memory (several roles
  routing the same round);
* ``rcr after write``: the same call right after a write (an item replaced),
  the per-round path: the memory's columns and keyword masks are updated
  incrementally, not rebuilt;
* ``rcr new keywords``: a call with keywords the memory has not seen (one scan
  of the texts per new keyword; informational);
* ``python score+sort``: the plain implementation of appendix E and Algorithm
  1: a Python loop scores every item (lowercased texts precomputed), then
  ``sorted`` by the same score and the selection loop;
* ``python sort only``: just ``sorted`` + loop over precomputed scores.

Every timed RCR call is checked to pick the same items as the Python
reference. Target: at 10k items an RCR call stays under 1 ms.

    python benchmarks/router_select.py [--sizes 100 1000 10000] [--repeats 200]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

from orchenv.memory import AgentOutput, MemoryItem, RCRRouter, RoleSpec, SharedMemory

ROLES = {
    "planner": RoleSpec("planner", ("unsupported", "missing", "resolved"), 128),
    "searcher": RoleSpec("searcher", ("next:", "first:"), -160),
    "recommender": RoleSpec("recommender", ("answer",), 128),
    "verifier": RoleSpec("verifier", ("supported",), 0),
}
STAGES = {"planner": "plan", "searcher": "search", "recommender": "answer", "verifier": "verify"}
STAGE_TYPES = {
    "plan": ("plan", "feedback", "answer", "evidence"),
    "search": ("query",),
    "answer": ("plan", "evidence"),
    "verify": ("answer", "evidence"),
}
WEIGHTS, DECAY, BETA_BASE = (0.5, 1.0, 1.0), 0.5, 2048

SYLLABLES = "ar bel cor dun el fen gor hal is jor kel lun mar nor ol pen quin ros sel tor".split()  # noqa: SIM905
NOUNS = "river castle abbey bridge university novel symphony company painter city".split()  # noqa: SIM905
VERBS = "founded designed wrote composed directed built governed discovered".split()  # noqa: SIM905


def entity(rng: np.random.Generator) -> str:
    name = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4)))).capitalize()
    return name if rng.random() < 0.5 else f"{name} {str(rng.choice(NOUNS)).capitalize()}"


def make_text(kind: str, rng: np.random.Generator) -> str:
    a, b, c = entity(rng), entity(rng), entity(rng)
    year, noun, verb = int(rng.integers(1500, 2020)), str(rng.choice(NOUNS)), str(rng.choice(VERBS))
    if kind == "plan":
        return (
            f"1. Find who {verb} {a}.\n2. Look up where {b} was born.\n"
            f"3. Compare both dates; next: search {c}."
        )
    if kind == "query":
        return f"{a} {verb} {noun} {year}"
    if kind == "evidence":
        return (
            f"{a} is a {noun} near {b}. It was {verb} in {year} by {c}, who later moved to "
            f"{entity(rng)}. Records from {year + int(rng.integers(1, 80))} describe its "
            f"{str(rng.choice(NOUNS))} and the dispute with {entity(rng)} over the {noun}."
        )
    if kind == "answer":
        return f"{a} ({year})"
    if kind == "feedback":
        verdict = "supported" if rng.random() < 0.5 else "unsupported: missing the date of"
        return f"{verdict} {a}; resolved {b}, still missing {c}."
    return f"Note: {a} and {b} may be the same {noun}; check {c} first: {year}."


KINDS = ("evidence", "query", "note", "plan", "feedback", "answer")
KIND_SHARE = (0.5, 0.2, 0.12, 0.1, 0.05, 0.03)
WRITERS = {
    "evidence": "searcher",
    "query": "searcher",
    "note": "planner",
    "plan": "planner",
    "feedback": "verifier",
    "answer": "recommender",
}


def build_memory(size: int, seed: int = 0) -> tuple[SharedMemory, list[str]]:
    """A memory of exactly ``size`` items over ~50 rounds, and the question's entities."""
    rng = np.random.default_rng(seed)
    memory = SharedMemory("estimate")
    memory.write(
        "user", "task", "Question: who founded the abbey near Valmar?", round=0, key="task"
    )
    per_round = max(1, size // 50)
    serial = 0
    while len(memory) < size:
        kind = str(rng.choice(KINDS, p=KIND_SHARE))
        serial += 1
        output = AgentOutput(WRITERS[kind], make_text(kind, rng), type=kind, key=f"{kind}-{serial}")
        memory.update([output], round=1 + len(memory) // per_round)
    return memory, ["Valmar", "abbey", "founded"]


# -- the plain reference -----------------------------------------------------------------------
class PlainRouter:
    """Appendix E's scorer and Algorithm 1 (skip mode) written as plain Python over a list."""

    def __init__(self, memory: SharedMemory) -> None:
        self.items: list[MemoryItem] = memory.items
        self.lowered = ["\x00".join((m.text, *m.tags)).lower() for m in self.items]
        self.round = memory.round

    def scores(self, role: str, keywords: list[str], now: int) -> list[float]:
        w1, w2, w3 = WEIGHTS
        wanted = [k.lower() for k in (*ROLES[role].keywords, *keywords)]
        preferred = set(STAGE_TYPES[STAGES[role]])
        return [  # summed in the order numpy does, so equal scores stay equal
            w3 * math.exp(-DECAY * max(now - m.round, 0))
            + w1 * any(k in hay for k in wanted)
            + w2 * (m.type in preferred)
            for m, hay in zip(self.items, self.lowered, strict=True)
        ]

    def select(self, scores: list[float], budget: int) -> list[str]:
        chosen, total = [], 0
        for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
            tokens = self.items[i].tokens
            if total + tokens <= budget:
                chosen.append(i)
                total += tokens
        return [self.items[i].id for i in sorted(chosen)]


def median_call_us(call: Callable[[int], object], repeats: int, max_s: float = 3.0) -> float:
    """Median wall time of ``call(i)`` in microseconds (at least 5 calls, at most ~max_s)."""
    times = []
    started = time.perf_counter()
    gc.disable()
    try:
        for i in range(repeats):
            t0 = time.perf_counter_ns()
            call(i)
            times.append((time.perf_counter_ns() - t0) / 1e3)
            if i >= 4 and time.perf_counter() - started > max_s:
                break
    finally:
        gc.enable()
    return statistics.median(times)


def bench(size: int, repeats: int) -> dict[str, float]:
    t0 = time.perf_counter()
    memory, entities = build_memory(size)
    build_s = time.perf_counter() - t0
    size = len(memory)
    router = RCRRouter(ROLES, STAGE_TYPES, beta_base=BETA_BASE, weights=WEIGHTS, decay=DECAY)
    roles = list(ROLES)
    now = memory.round

    def rcr(i: int) -> list[MemoryItem]:
        role = roles[i % len(roles)]
        return router.select(memory, role, STAGES[role], keywords=entities, now=now)

    plain = PlainRouter(memory)
    for i in range(len(roles)):  # same choice as the plain reference, before timing anything
        role = roles[i]
        expected = plain.select(plain.scores(role, entities, now), router.budget(role))
        assert [m.id for m in rcr(i)] == expected, f"{role}: RCR and the reference disagree"

    warm = median_call_us(rcr, repeats)

    rng = np.random.default_rng(1)

    def after_write(i: int) -> int:  # the write is not timed; the following route is (ns)
        version = memory.version
        while memory.version == version:  # (a near-duplicate draft would change nothing)
            text = make_text("feedback", rng)
            memory.write("verifier", "feedback", text, round=now, key="check")
        t0 = time.perf_counter_ns()
        rcr(i)
        return time.perf_counter_ns() - t0

    write_times = [after_write(i) / 1e3 for i in range(min(repeats, 200))]
    after = statistics.median(write_times)

    def new_keywords(i: int) -> object:
        role = roles[i % len(roles)]
        fresh = [f"unseen{i}x", entity(rng)]
        return router.select(memory, role, STAGES[role], keywords=fresh, now=now)

    cold = median_call_us(new_keywords, min(repeats, 20))

    plain = PlainRouter(memory)  # the memory changed: rebuild the reference's list
    for i in range(len(roles)):
        role = roles[i]
        expected = plain.select(plain.scores(role, entities, now), router.budget(role))
        assert [m.id for m in rcr(i)] == expected, f"{role}: RCR and the reference disagree"

    def python_full(i: int) -> list[str]:
        role = roles[i % len(roles)]
        return plain.select(plain.scores(role, entities, now), router.budget(role))

    precomputed = {role: plain.scores(role, entities, now) for role in roles}

    def python_sort(i: int) -> list[str]:
        role = roles[i % len(roles)]
        return plain.select(precomputed[role], router.budget(role))

    return {
        "items": size,
        "build_s": build_s,
        "rcr_warm": warm,
        "rcr_after_write": after,
        "rcr_new_keywords": cold,
        "python_full": median_call_us(python_full, repeats),
        "python_sort": median_call_us(python_sort, repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    rows = [bench(size, args.repeats) for size in args.sizes]
    header = (
        f"{'items':>7} {'build s':>8} {'rcr warm':>10} {'rcr after':>10} {'rcr new kw':>11} "
        f"{'py score+sort':>14} {'py sort only':>13} {'x score+sort':>13} {'x sort only':>12}"
    )
    print("per-call median, microseconds (x = python time / rcr warm time)")
    print(header)
    for r in rows:
        print(
            f"{r['items']:>7,} {r['build_s']:>8.2f} {r['rcr_warm']:>10.1f} "
            f"{r['rcr_after_write']:>10.1f} {r['rcr_new_keywords']:>11.1f} "
            f"{r['python_full']:>14.1f} {r['python_sort']:>13.1f} "
            f"{r['python_full'] / r['rcr_warm']:>12.1f}x {r['python_sort'] / r['rcr_warm']:>11.1f}x"
        )
    big = max(rows, key=lambda r: r["items"])
    worst = max(big["rcr_warm"], big["rcr_after_write"])
    verdict = "met" if worst < 1000 else "NOT met"
    print(
        f"target: RCR call < 1 ms at {big['items']:,} items (warm and after a write): "
        f"{worst:.0f} us -> {verdict}"
    )


if __name__ == "__main__":
    main()
