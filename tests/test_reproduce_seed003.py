"""`orchenv reproduce 003 --quick`: Puppeteer's Table 1 rows, Figures 2, 3 and 7 and the
section 3.3 topology from REINFORCE runs, written as a page with intervals; a second call
resumes and reruns nothing."""

from __future__ import annotations

import json
import time

import pytest

from orchenv.cli import main
from orchenv.envs.puppeteer.topology import count_cycles, topology, trajectory_graph

SECTIONS = (
    "Table 1: single models and Self-Refine",
    "Table 1: Puppeteer, initialized vs evolved",
    "Figure 2: reward up, tokens and agents down",
    "Figure 3: the lambda trade-off",
    "Section 3.3: topology before and after training",
    "Figure 7: width and depth",
)


def _run(tmp):
    started = time.monotonic()
    code = main(
        ["reproduce", "3", "--quick", "--runs", str(tmp / "runs"), "--report",
         str(tmp / "003.md"), "--no-progress"]
    )  # fmt: skip
    assert code in (0, None)
    return time.monotonic() - started


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seed003")
    first = _run(tmp)
    stored = {p: p.stat().st_mtime_ns for p in (tmp / "runs").rglob("*") if p.is_file()}
    second = _run(tmp)
    return tmp, first, second, stored


@pytest.mark.slow
def test_page_has_every_section_with_intervals_and_findings(quick):
    tmp, _, _, _ = quick
    page = (tmp / "003.md").read_text()
    data = json.loads((tmp / "003.json").read_text())
    titles = [s["title"] for s in data["sections"]]
    for name in SECTIONS:
        assert any(t.startswith(name) for t in titles), name
        assert f"## {name}" in page
    for section in data["sections"]:
        assert section["rows"], section["title"]
        assert section["findings"], section["title"]
        cells = [v for r in section["rows"] for v in r["ours"].values() if isinstance(v, dict)]
        assert cells and all({"mean", "lo", "hi", "n", "over"} <= set(c) for c in cells)
    fixed = next(s for s in data["sections"] if s["title"].startswith(SECTIONS[0]))
    assert all(r["verdict"] for r in fixed["rows"])  # every row compared with the paper
    # the Self-Refine rows' two inputs side by side (calibrated draft, assumed revisions)
    assert "The inputs of the Self-Refine rows" in page and "revision rates, assumed" in page
    # issue 26: the Mono headlines across lambda and the stopping rule
    sweep = next(s for s in data["sections"] if s["title"].startswith("Sweeps:"))
    names = [r["label"].split(" (")[0] for r in sweep["rows"]]
    assert names == ["lambda 0", "lambda 0.1", "lambda 0.3", "lambda 1", "depth 2", "depth 4",
                     "depth 6"]  # fmt: skip
    assert len(sweep["findings"]) == 6 and not any(f["paper"] for f in sweep["findings"])
    headline = next(
        f for s in data["sections"] for f in s["findings"]
        if f["claim"].startswith("Puppeteer-Mono (Titan) · MMLU-Pro: tokens per episode fall")
    )  # fmt: skip
    assert "Across the lambda and stopping-rule sweeps" in headline["why"]
    assert all(c["n"] > 1 for r in fixed["rows"] for c in r["ours"].values())
    figures = sorted((tmp / "figures").glob("003_*.png"))
    assert len(figures) == 4 and all(f.stat().st_size > 1000 for f in figures)


@pytest.mark.slow
def test_second_call_reruns_nothing(quick):
    tmp, first, second, stored = quick
    now = {p: p.stat().st_mtime_ns for p in (tmp / "runs").rglob("*") if p.is_file()}
    changed = [p for p in stored if now.get(p) != stored[p] and p.suffix == ".json"]
    assert not [p for p in changed if p.name.startswith("train-")]
    assert second < first / 2


def test_topology_counts_nodes_edges_and_cycles():
    # reasoning -> critique -> reasoning -> search: one 2-cycle, 3 agents, 3 edges
    seq = [["m:reasoning", "m:critique", "m:reasoning", "m:search"]]
    assert topology(seq) == {
        "agents": 4.0, "distinct": 3.0, "edges": 3.0, "density": 3 / 9, "cycles": 1.0,
    }  # fmt: skip
    assert topology([["a", "a", "a"]])["cycles"] == 1.0  # a self-loop
    assert topology([["a"]]) == {
        "agents": 1.0, "distinct": 1.0, "edges": 0.0, "density": 0.0, "cycles": 0.0,
    }  # fmt: skip
    assert topology([])["density"] == 0.0
    # two branches in opposite order share nodes: a -> b and b -> a close a cycle
    assert topology([["a", "b"], ["b", "a"]])["cycles"] == 1.0
    # edges a->b, b->c, c->a, a->c: two elementary cycles, a-b-c-a and a-c-a
    nodes, edges = trajectory_graph([["a", "b", "c", "a", "c"]])
    assert len(edges) == 4 and count_cycles(nodes, edges) == 2
