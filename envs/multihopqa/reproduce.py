"""Seed 004 (RCR-Router) in simulation: full-context, static and RCR routing for role teams.

Every experiment plays whole teams of simulated role agents (no controller is learned, so
results are stored with ``Reproduction.cached``, one file per setting and run seed):

- multihop QA (``MultihopQAGame`` + ``run_team``: Planner, Searcher, Recommender over a
  shared memory) for Table 2 (routers), Tables 3-4 (the per-agent budget B_i), the
  per-role budgets of eq. (4) and the rounds T, against full context at the same T;
- ALFWorld (``ALFWorldRoleGame``, Table 8) and WebShop (``WebShopRoleGame``, Table 10)
  with each role played by its simulated pool agent in turn, every round.

Run seed ``s`` builds its own synthetic questions and its agents' luck, so every setting
plays the same (seed, episode) pairs and differences from full context are paired by
episode. ``scripts/reproduce_rcr.sh`` wraps ``orchenv reproduce 004``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

from orchenv.reproduce import report
from orchenv.reproduce.context import Reproduction
from orchenv.reproduce.figures import bars_with_intervals, new_figure, points_with_intervals, save
from orchenv.reproduce.papers import int_keys, load_paper_numbers
from orchenv.reproduce.report import Estimate, Finding, Row, Section, Source
from orchenv.reproduce.stats import divided, paired_difference, relative_change, scaled

INTRO = (
    "Teams of simulated role agents (Planner, Searcher, Recommender; in ALFWorld Planner, "
    "Navigator, Interactor, Evaluator) share one memory, and a router decides which items "
    "each role reads: all of them (full context), a fixed slice per role (static), or RCR "
    "(appendix E's importance score and Algorithm 1's greedy pick under eq. 4's budget "
    "B_i). The simulated agents act only on what is routed to them, so routing moves their "
    "answers as well as the tokens. Questions come from orchenv's embedded generator, "
    "shaped like HotpotQA (2 to 4 hops, 8 distractor paragraphs, 20% comparisons) or like "
    "MuSiQue (2 to 4 hops, 18 distractors, no comparisons); a downloaded HotpotQA, MuSiQue "
    "or 2WikiMultihopQA file adds its rows when `ORCHENV_HOTPOTQA`, `ORCHENV_MUSIQUE` or "
    "`ORCHENV_2WIKI` holds its path (or when it lies in `orchenv.envs.multihopqa.loaders."
    "data_dir()`). Tokens are prompt plus reply tokens of every role call (eq. 10), "
    "runtime is eq. 7's parallel latency at the simulated agents' 60 tokens/s, and the "
    "1-5 score is the simulated judge's, which buckets the answer's F1 (it is not an LLM "
    "judge). The orchenv budgets are the paper's scaled to the generator's ~100-token "
    "paragraphs: orchenv's default B_i (Planner 384, Searcher 128, Recommender 384) "
    "stands for the paper's 2048. Every row's command (under its table) replays that row "
    "alone, with the page's seeds and sizes and the same code as `orchenv reproduce 004`: "
    "`python -m orchenv.envs.multihopqa.reproduce KIND --setting JSON --seeds ... "
    "--episodes N --out FILE` prints its means with 95% intervals (`--episodes 2` for a "
    "smoke run). They are not `orchenv eval` runs: every role of a team, the Planner "
    "included, is a simulated pool agent, while `orch/MultihopQA-v0` makes the Planner the "
    "learner. Each row and finding names the simulator inputs it depends on; no input is "
    "set to a paper number, but the token and runtime savings follow the budgets picked "
    "(chosen) and every F1 comparison between routers follows the assumed distraction term."
)

#: the paper's numbers (Tables 2-6, 8, 10), as fractions where the paper gives percentages
_PAPER = load_paper_numbers(
    __package__, ("table2", "budgets", "rounds", "teams", "setting_min_b")
)  # paper_numbers.json beside this module
PAPER_TABLE2: dict[str, dict[str, dict[str, float]]] = _PAPER["table2"]
#: Tables 3 (HotpotQA) and 4 (MuSiQue): per-agent budget -> tokens (K), score, F1
PAPER_BUDGETS: dict[str, dict[int, dict[str, float]]] = {
    dataset: int_keys(table) for dataset, table in _PAPER["budgets"].items()
}
#: Table 5 (HotpotQA, RCR): rounds T -> tokens (K), F1, score (the paper measured T = 3 only)
PAPER_ROUNDS: dict[int, dict[str, float]] = int_keys(_PAPER["rounds"])
#: Tables 8 (ALFWorld) and 10 (WebShop): runtime (s), tokens (K), F1
PAPER_TEAMS: dict[str, dict[str, dict[str, float]]] = _PAPER["teams"]

ROUTERS = ("full", "static", "rcr")
ROUTER_NAMES = {"full": "Full-Context", "static": "Static Routing", "rcr": "RCR-router"}
QA_ROLES = ("planner", "searcher", "recommender")
#: orchenv's default B_i stand for the paper's 2048: budgets scale by this factor
BUDGET_SCALE = 384 / 2048
PAPER_B = tuple(sorted(PAPER_BUDGETS["HotpotQA"]))
UNIFORM = {"planner": 0, "searcher": 0, "recommender": 0}
#: the synthetic question sets: generator arguments (the run seed is added)
SYNTH = {
    "HotpotQA": {},
    "MuSiQue": {"n_distractors": 18, "comparison_share": 0.0},
}
#: local files of the real datasets: environment variable -> loader name, paper column
LOCAL = (
    ("ORCHENV_HOTPOTQA", "hotpotqa", "HotpotQA"),
    ("ORCHENV_MUSIQUE", "musique", "MuSiQue"),
    ("ORCHENV_2WIKI", "2wikimultihopqa", "2WikiMultihopQA"),
)
#: default sizes: multihop questions per seed, ALFWorld games and WebShop goals per seed
SHOP = {"num_products": 1000, "num_goals": 200, "split": "test"}
QUICK_SHOP = {"num_products": 200, "num_goals": 40, "split": "test"}

# -- where the page's numbers come from (issue 26) ---------------------------------------------
# Each Source names a simulator input that was put in, checked in the code it names. No input
# of this page is set to a number of the paper (nothing is ``calibrated``): the agents' levels
# and the budgets are orchenv's choices, and the distraction term is an assumption chosen so
# that a long context can hurt (the only reason full context can score below a routed one).
#: the simulated multihop agents' levels: they set every F1 level on the page
AGENTS = report.chosen(
    "simulated role agents' accuracy",
    "envs/multihopqa/agents.py DEFAULT_ACCURACY: Planner 0.9, Recommender 0.92; orchenv's "
    "levels, no paper number; the level of every F1 follows them",
)
#: the distraction term: what makes full context answer worse than a routed context
DISTRACTION = report.assumed(
    "distraction 0.6 per 1K off-evidence prompt tokens",
    "envs/multihopqa/agents.py MultihopRoleBackend: a modelling assumption standing in for "
    "long-context degradation, the only reason full context can score below a routed context",
)
#: RCR's budgets: every token and runtime saving of RCR follows them
BUDGETS = report.chosen(
    "RCR budgets B_i (Planner 384, Searcher 128, Recommender 384)",
    "MultihopQAGame.default_routing, the paper's 2048 scaled by 384/2048 to the generator's "
    "~100-token paragraphs; the saving moves with them: 'tokens vs full' in Tables 3-4 sweeps "
    "B_i over 0.25x to 2x",
)
#: the budget scale of Tables 3-4
BUDGET_AXIS = report.chosen(
    "B_i scale 384/2048",
    "BUDGET_SCALE: orchenv's B_i is the paper's x 384/2048, chosen so the default fits one "
    "round's evidence",
)
#: static routing's per-role slices
STATIC = report.chosen(
    "static routing's per-role slices",
    "MultihopQAGame.team static_types (Searcher: task and query only); orchenv's choice, the "
    "paper lists none",
)
#: the memory's size: search_k paragraphs of the generator per search
MEMORY = report.chosen(
    "shared memory's size",
    "2 paragraphs per search (search_k) of the generator's ~100 tokens; a saving is a share of it",
)
#: RCR's importance weights (free: both weightings are shown)
WEIGHTS = report.chosen(
    "RCR weights w = (1, 1, 1), fixed K_i",
    "appendix E's; the former (0.5, 1, 1) with tracked names is in 'Router effect by Planner'",
)
#: the Planner of the team (free: three are shown)
PLANNER = report.chosen(
    "simulated Planner that records resolved hops in its plan",
    "section 'Router effect by Planner' plays the same questions with two other Planners",
)
#: rounds T
ROUNDS = report.chosen("rounds T = 3", "Table 5 and Figure 2 sweep T = 1..5")


def _team_sources(name: str) -> dict[str, Source]:
    """The inputs of the ALFWorld / WebShop role-team rows."""
    if name == "ALFWorld":
        agents = report.chosen(
            "simulated ALFWorld role agents' accuracy",
            "envs/alfworld/agents.py: 0.9 guided, 0.5 unguided; orchenv's levels",
        )
        budgets = f"beta_base {SCALED_BUDGETS['ALFWorld']['beta_base']} in the last row"
    else:
        agents = report.chosen(
            "simulated WebShop role agents",
            "envs/webshop/roles.py webshop_role_pool: orchenv's rules, no paper number",
        )
        budgets = "384 / 192 in the last row"
    return {
        "agents": agents,
        "budgets": report.chosen(
            f"{name} budgets B_i", f"the paper's setting, and orchenv's {budgets} (SCALED_BUDGETS)"
        ),
        "static": report.chosen(
            f"{name} static slices", f"{name}RoleGame's team static_types; orchenv's choice"
        ),
        "memory": report.chosen(
            f"{name} shared memory's size", "set by what orchenv's simulated roles write"
        ),
    }


# -- multihop QA ------------------------------------------------------------------------
def _local_file(var: str, name: str) -> Path | None:
    """The local file of dataset ``name``: ``$var``, else the official file in
    ``loaders.data_dir()`` (never the network)."""
    given = os.environ.get(var)
    if given:
        return Path(given).expanduser()
    from orchenv.envs.multihopqa import loaders

    spec = loaders._DATASETS.get(name)
    if spec is None or "validation" not in spec.files:
        return None
    path = loaders.data_dir() / name / spec.files["validation"]
    return path if path.is_file() else None


def _play_multihop(setting: Mapping[str, Any], seed: int, episodes: int) -> list[dict[str, Any]]:
    """``episodes`` questions of one setting and run seed: per-episode metrics (and the
    tokens of each role)."""
    from orchenv.envs.multihopqa.agents import multihop_pool
    from orchenv.envs.multihopqa.env import MultihopQAGame, run_team
    from orchenv.envs.multihopqa.loaders import load_multihop

    kwargs: dict[str, Any] = {
        "router": setting["router"],
        "max_turns": int(setting.get("rounds", 3)),
        "routing": dict(setting.get("routing", {})),
        "track_names": bool(setting.get("track_names", False)),
    }
    if setting.get("planner", "simulated") != "simulated":
        return _play_planner(setting, kwargs, seed, episodes)
    if "file" in setting:
        source = load_multihop(setting["loader"], path=setting["file"], limit=episodes)
        kwargs |= {"task_source": source, "split": source.splits[0]}
        episodes = min(episodes, source.size(source.splits[0]))
    else:
        kwargs["task_source_kwargs"] = {"seed": seed, **SYNTH[setting["dataset"]]}
    game = MultihopQAGame(**kwargs)
    pool = multihop_pool(seed=seed, token_counter=game.counter)
    rows = []
    for i in range(episodes):
        metrics = run_team(game, pool, options={"task_index": i})
        by_role = {r: sum(u.tokens.get(r, 0) for u in game.usage) for r in game.roles}
        keep = (
            "f1",
            "em",
            "precision",
            "recall",
            "tokens_total",
            "latency_parallel_s",
            "answer_quality_from_f1",
            "rounds",
        )
        rows.append({k: metrics[k] for k in keep} | {"tokens_by_role": by_role})
    return rows


def _hop_following(env: Any) -> str:
    """The 3-line hop-following Planner: look up the Recommender's latest answer the first
    time it is seen, else the question; never finish (the last round's answer is graded)."""
    from orchenv.envs.multihopqa.env import query_action

    answers = [m.text for m in env.game.route("planner").items if m.type == "answer"]
    answer = answers[-1].strip() if answers else None
    asked = {q for q, _ in env.game.searches}
    if answer and answer not in asked:
        return query_action(answer)
    return query_action(env.task.prompt)


def _play_planner(
    setting: Mapping[str, Any], kwargs: Mapping[str, Any], seed: int, episodes: int
) -> list[dict[str, Any]]:
    """``episodes`` questions with the Planner played by a fixed policy in the Gymnasium
    env (``"scripted"``: the hop chain, privileged, with resolved hops recorded in the
    plan, as the audit's skill reference at s = 1; ``"hop-following"``: ``_hop_following``,
    which reads only its prompt) and the other roles by the simulated pool."""
    from orchenv.envs.multihopqa.env import MultihopQAEnv, chain_action

    env = MultihopQAEnv(
        **kwargs, task_source_kwargs={"seed": seed, **SYNTH[setting["dataset"]]}, seed=seed
    )
    rows = []
    for i in range(episodes):
        env.reset(seed=seed, options={"task_index": i})
        done, info = False, cast("dict[str, Any]", {})
        while not done:
            if setting["planner"] == "scripted":
                assert env.task is not None
                action = chain_action(env.task, env.game.memory)
            else:
                action = _hop_following(env)
            _, _, term, trunc, info = env.step(action)
            done = term or trunc
        by_role = {r: sum(u.tokens.get(r, 0) for u in env.game.usage) for r in env.game.roles}
        keep = ("f1", "em", "precision", "recall", "tokens_total", "latency_parallel_s",
                "answer_quality_from_f1", "rounds")  # fmt: skip
        rows.append({k: info[k] for k in keep} | {"tokens_by_role": by_role})
    return rows


class Runs:
    """Named settings over the run seeds, each stored as one cached experiment per seed."""

    def __init__(self, rep: Reproduction, episodes: int) -> None:
        self.rep = rep
        self.episodes = episodes
        self._done: dict[str, list[dict[str, Any]]] = {}
        self.settings: dict[str, dict[str, Any]] = {}

    def command(self, name: str) -> str:
        """The command that replays setting ``name`` alone (``row_command``)."""
        return row_command(self.rep, "multihop", self.settings[name], self.episodes, name)

    def multihop(self, name: str, setting: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every episode of ``setting`` over the run seeds, in (seed, question) order."""
        self.settings[name] = dict(setting)
        if name not in self._done:
            from orchenv.envs.multihopqa.agents import SIMULATOR_VERSION

            rows: list[dict[str, Any]] = []
            for seed in self.rep.seeds:
                config = {
                    **setting,
                    "seed": seed,
                    "episodes": self.episodes,
                    "simulator": SIMULATOR_VERSION,
                }
                rows += self.rep.cached(
                    f"multihop-{name}-seed{seed}",
                    config,
                    partial(_play_multihop, setting, seed, self.episodes),
                )
            self._done[name] = rows
        return self._done[name]


def _values(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def _mean(rows: Sequence[Mapping[str, Any]], key: str, scale: float = 1.0) -> Estimate:
    return scaled(Estimate.of_values(_values(rows, key)), scale)


def _role_tokens(rows: Sequence[Mapping[str, Any]], role: str) -> Estimate:
    return divided(Estimate.of_values([r["tokens_by_role"].get(role, 0) for r in rows]), 1000)


def _paired(
    rows: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]], key: str
) -> Estimate:
    return paired_difference(_values(rows, key), _values(ref, key))


def _relative(
    rows: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]], key: str
) -> Estimate:
    """The paired change of ``key`` as a fraction of the reference's mean (the interval is
    the paired difference's, divided by that mean)."""
    return relative_change(_paired(rows, ref, key), statistics.fmean(_values(ref, key)))


def _saving(rows: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]]) -> Estimate:
    """The paired token saving against ``ref`` as a fraction of its tokens (positive: fewer)."""
    return scaled(_relative(rows, ref, "tokens_total"), -1.0)


def _separated(est: Estimate, up: bool) -> bool:
    """Is the paired difference ``est`` clearly above (``up``) or below zero?"""
    return est.lo > 0 if up else est.hi < 0


#: episodes of exactly zero difference that decide against a claimed difference
IDENTICAL_MIN_N = 30


def _paired_finding(
    claim: str,
    diff: Estimate,
    *,
    up: bool,
    what: str,
    why: str = "",
    sources: Sequence[Source] = (),
    paper: bool = True,
) -> Finding:
    """A claim that a paired difference is positive (``up``) or negative, beyond noise.

    An interval that holds zero decides nothing (undecided), unless every one of at least
    ``IDENTICAL_MIN_N`` episodes differs by exactly zero (the two settings played
    identically, as when every memory fits the budget: decided against)."""
    observed = f"{what} {diff.fmt(3)} (paired, {diff.n} episodes)"
    holds_zero = diff.lo <= 0 <= diff.hi
    identical = diff.lo == diff.hi == 0 and diff.n >= IDENTICAL_MIN_N
    if identical:
        observed += ", identical in every episode"
    elif not _separated(diff, up) and holds_zero:
        observed += ", within noise"
    passed = _separated(diff, up)
    decided = passed or identical or not holds_zero
    return Finding(
        claim, observed, passed, why, decided=decided, paper=paper, sources=tuple(sources)
    )


#: the paired comparisons' measures: record key -> (its name on the page, unit, whether the
#: claim is that it rises: a better answer, or that it falls: fewer tokens, a shorter runtime)
PAIRED_MEASURES = {
    "f1": ("F1", "", True),
    "score": ("score", "", True),
    "tokens_total": ("tokens", "", False),
    "latency_parallel_s": ("runtime", " (s)", False),
}


def _paired_better(
    claim: str,
    rows: Sequence[Mapping[str, Any]],
    ref: Sequence[Mapping[str, Any]],
    key: str,
    names: tuple[str, str],
    **kwargs: Any,
) -> Finding:
    """``_paired_finding`` for the claim that ``rows`` do better than ``ref`` on ``key``
    (``PAIRED_MEASURES`` says which way is better), paired by episode; ``names`` name the
    two in the observed difference ("F1 RCR - full")."""
    what, unit, up = PAIRED_MEASURES[key]
    diff = _paired(rows, ref, key)
    return _paired_finding(claim, diff, up=up, what=f"{what} {' - '.join(names)}{unit}", **kwargs)


def _qa_row(
    label: str,
    rows: Sequence[Mapping[str, Any]],
    full: Sequence[Mapping[str, Any]] | None,
    paper: Mapping[str, Any],
    *,
    compare: str | None,
    why: str,
    command: str = "",
    sources: Sequence[Source] = (),
    signed: bool = False,
) -> Row:
    ours: dict[str, Any] = {
        "tokens (K)": _mean(rows, "tokens_total", 1 / 1000),
        "tokens vs full": 0.0 if full is None else _relative(rows, full, "tokens_total"),
        "F1": _mean(rows, "f1"),
        "F1 vs full": 0.0 if full is None else _paired(rows, full, "f1"),
        "precision": _mean(rows, "precision"),
        "recall": _mean(rows, "recall"),
        "score from F1 (1-5)": _mean(rows, "answer_quality_from_f1"),
        "runtime (s)": _mean(rows, "latency_parallel_s"),
    }
    return Row(
        label,
        ours,
        dict(paper),
        command=command,
        compare=compare,
        why=why,
        sources=tuple(sources),
        signed=signed,
    )


def _paper_qa(paper: Mapping[str, float], full: Mapping[str, float] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tokens (K)": paper["tokens"],
        "F1": paper["f1"],
        "score from F1 (1-5)": paper["quality"],
    }
    if "runtime" in paper:
        out["runtime (s)"] = paper["runtime"]
    if full is not None:
        out["tokens vs full"] = paper["tokens"] / full["tokens"] - 1
        out["F1 vs full"] = paper["f1"] - full["f1"]
    return out


QA_COLUMNS = [
    "tokens (K)",
    "tokens vs full",
    "F1",
    "F1 vs full",
    "precision",
    "recall",
    "score from F1 (1-5)",
    "runtime (s)",
]


#: the module that replays one row (``python -m``; see ``main``)
ROW_MODULE = "orchenv.envs.multihopqa.reproduce"


def row_command(
    rep: Reproduction, kind: str, setting: Mapping[str, Any], episodes: int, name: str
) -> str:
    """The command that replays one row's setting alone, with the page's seeds and sizes: the
    same functions as ``orchenv reproduce 004``, so it prints the row's numbers (the page's
    runs are not ``orchenv eval`` runs: a whole simulated team plays each episode)."""
    parts = [
        "python",
        "-m",
        ROW_MODULE,
        kind,
        "--setting",
        json.dumps(dict(setting), sort_keys=True),
    ]
    parts += ["--seeds", *map(str, rep.seeds), "--episodes", str(episodes)]
    parts += ["--out", f"runs/rows/004-{_slug(name)}.json"]
    return shlex.join(parts)


def _table2(
    rep: Reproduction, runs: Runs, local: list[tuple[str, str, str, Path | None]]
) -> Section:
    rows: list[Row] = []
    findings: list[Finding] = []
    blocks: list[tuple[str, str, dict[str, Any]]] = [
        (f"synthetic, {paper}-shaped", paper, {"dataset": paper}) for paper in SYNTH
    ]
    missing = []
    for var, loader, paper_label, path in local:
        if path is None:
            missing.append((var, loader, paper_label))
        else:
            stat = path.stat()
            blocks.append(
                (
                    f"{paper_label} file {path.name}",
                    paper_label,
                    {"file": str(path), "loader": loader, "size": stat.st_size},
                )
            )
    for label, paper_name, base in blocks:
        paper = PAPER_TABLE2[paper_name]
        got = {
            router: runs.multihop(
                f"t2-{_slug(label)}-{router}", {**base, "router": router, "rounds": 3}
            )
            for router in ROUTERS
        }
        full = got["full"]
        for router in ROUTERS:
            is_full = router == "full"
            why = (
                "The level of F1 is set by the simulated agents' calibration, not by the "
                "paper's models; what carries over is the difference between routers."
                if is_full
                else SAVING_WHY_BY_DATASET.get(paper_name, SAVING_WHY[router])
            )
            rows.append(
                _qa_row(
                    f"{label}: {ROUTER_NAMES[router]}",
                    got[router],
                    None if is_full else full,
                    _paper_qa(paper[router], None if is_full else paper["full"]),
                    compare="F1" if is_full else "tokens vs full",
                    why=why,
                    command=runs.command(f"t2-{_slug(label)}-{router}"),
                    sources=(AGENTS, DISTRACTION)
                    if is_full
                    else (BUDGETS, MEMORY)
                    if router == "rcr"
                    else (STATIC, MEMORY),
                    signed=not is_full,
                )
            )
        saving = {r: _saving(got[r], full) for r in ("static", "rcr")}
        findings.append(
            report.check_order(
                f"{label}: tokens, RCR < static < full context (paper, {paper_name})",
                {"RCR saving": saving["rcr"], "static saving": saving["static"], "full": 0.0},
                ["RCR saving", "static saving", "full"],
                why="Compared as the paired saving against full context (the share of its tokens a router avoids).",
            ).with_(sources=(BUDGETS, STATIC, MEMORY))
        )
        findings += [
            _paired_better(
                f"{label}: RCR answers better than full context (paper, {paper_name}: F1 "
                f"{paper['rcr']['f1']:.3f} vs {paper['full']['f1']:.3f})",
                got["rcr"],
                full,
                "f1",
                ("RCR", "full"),
                why="The simulated agents answer from the evidence routed to them. RCR's "
                "edge comes from the distraction term (fewer tokens outside the gold "
                "sentences) and needs the simulated Planner's plan, which records the "
                "resolved hops, to carry the chain past the old evidence RCR drops; with "
                "other Planners it vanishes or reverses (section 'Router effect by "
                "Planner').",
                sources=(DISTRACTION, PLANNER, WEIGHTS, BUDGETS),
            ),
            _paired_better(
                f"{label}: RCR answers better than static routing",
                got["rcr"],
                got["static"],
                "f1",
                ("RCR", "static"),
                sources=(DISTRACTION, PLANNER, WEIGHTS, BUDGETS, STATIC),
            ),
            _paired_better(
                f"{label}: RCR runs faster than full context (paper: {paper['rcr']['runtime']}"
                f" s vs {paper['full']['runtime']} s)",
                got["rcr"],
                full,
                "latency_parallel_s",
                ("RCR", "full"),
                why="Simulated runtime is tokens / (60 tokens/s) per call with the roles of a "
                "round in parallel, so it shrinks only with the slowest role's prompt.",
                sources=(BUDGETS, MEMORY),
            ),
        ]
    notes = [
        f"{paper}: not run: no local file; pass its path in `{var}` (e.g. `{var}=/data/"
        f"{loader}.json orchenv reproduce 004`) or put the official file in "
        "`orchenv.envs.multihopqa.loaders.data_dir()`."
        for var, loader, paper in missing
    ]
    return Section(
        "Table 2: full context, static and RCR routing (T = 3)",
        "Table 2 (HotpotQA, MuSiQue, 2WikiMultihopQA; per-agent budget B_i = 2048)",
        QA_COLUMNS,
        rows,
        intro=(
            "Each orchenv row plays the same questions with the same agents' luck; 'vs full' "
            "columns are paired by episode ('tokens vs full' is the change as a fraction of "
            "full context's tokens). The paper's 'tokens vs full' and 'F1 vs full' are "
            "computed from its Table 2. Synthetic rows are compared with the paper's row of "
            "the dataset they are shaped like."
        ),
        findings=findings,
        notes=notes,
    )


#: why a Table 2 router row saves what it saves: by router, unless its dataset has its own text
SAVING_WHY = {
    "static": "Static routing hands each role a fixed slice of item types (the Searcher only "
    "the question and queries), so its saving comes from the Searcher's and "
    "Recommender's prompts.",
    "rcr": "RCR's saving is set by the budgets B_i relative to the memory's size; orchenv's "
    "budgets keep the paper's ratio of B_i to a HotpotQA context, so the saving lands "
    "near the paper's where the memory looks like HotpotQA's.",
}
SAVING_WHY_BY_DATASET = {
    "MuSiQue": "The paper's MuSiQue episodes spend 13.4K tokens under full context yet save "
    "only 4% (static) and 11% (RCR): most of their tokens are ones no router cuts. "
    "orchenv's memory holds only the retrieved paragraphs (2 per search), so both "
    "synthetic sets have memories of the same size and RCR saves as much on the "
    "MuSiQue-shaped set as on the HotpotQA-shaped one.",
}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:40]


# -- Tables 3-4 and the per-role budgets -------------------------------------------------------
def _budget_section(
    rep: Reproduction, runs: Runs, dataset: str, table: str
) -> tuple[Section, dict[int, Any]]:
    rows: list[Row] = []
    got: dict[int, list[dict[str, Any]]] = {}
    # Table 2's full-context run of this dataset: the same questions and luck, for the
    # paired saving at each budget (the budget sweep of every token claim on the page)
    full = runs.multihop(
        f"t2-{_slug(f'synthetic, {dataset}-shaped')}-full",
        {"dataset": dataset, "router": "full", "rounds": 3},
    )
    full_paper = PAPER_TABLE2[dataset]["full"]
    for paper_b in PAPER_B:
        b = round(paper_b * BUDGET_SCALE)
        got[paper_b] = runs.multihop(
            f"budget-{dataset.lower()}-{b}",
            {"dataset": dataset, "router": "rcr", "rounds": 3,
             "routing": {"beta_base": b, "budget_offsets": UNIFORM}},
        )  # fmt: skip
    for paper_b in PAPER_B:
        b = round(paper_b * BUDGET_SCALE)
        data = got[paper_b]
        paper = PAPER_BUDGETS[dataset][paper_b]
        ours: dict[str, Any] = {
            "orchenv B_i": b,
            "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
            "tokens vs full": _relative(data, full, "tokens_total"),
            **{f"{r} tokens (K)": _role_tokens(data, r) for r in QA_ROLES},
            "F1": _mean(data, "f1"),
            "score from F1 (1-5)": _mean(data, "answer_quality_from_f1"),
            "runtime (s)": _mean(data, "latency_parallel_s"),
        }
        paper_cells: dict[str, Any] = {"tokens (K)": paper["tokens"], "F1": paper["f1"],
                       "score from F1 (1-5)": paper["quality"],
                       "tokens vs full": paper["tokens"] / full_paper["tokens"] - 1}  # fmt: skip
        rows.append(
            Row(
                f"B_i = {paper_b} (orchenv {b}) for every role",
                ours,
                paper_cells,
                command=runs.command(f"budget-{dataset.lower()}-{b}"),
                compare="F1",
                why=_budget_why(paper_b),
                sources=(AGENTS, DISTRACTION, BUDGET_AXIS),
            )
        )
    tokens = {str(b): _mean(got[b], "tokens_total") for b in PAPER_B}
    findings = [
        report.check_order(
            f"{dataset}-shaped: total tokens grow with the per-agent budget",
            tokens,
            [str(b) for b in reversed(PAPER_B)],
        ).with_(sources=(BUDGET_AXIS, MEMORY)),
        _saturation_finding(dataset, got),
    ]
    section = Section(
        f"{table}: per-agent budget, {dataset}-shaped synthetic questions (T = 3)",
        f"{table} ({dataset}, B_i in 512 / 1024 / 2048 / 4096 for every agent)",
        [
            "orchenv B_i",
            "tokens (K)",
            "tokens vs full",
            *(f"{r} tokens (K)" for r in QA_ROLES),
            "F1",
            "score from F1 (1-5)",
            "runtime (s)",
        ],  # fmt: skip
        rows,
        intro=(
            "Every role gets the same budget B_i; orchenv's B_i is the paper's x 384/2048 "
            "(its default 384 stands for 2048). The role columns split the tokens by role. "
            "'tokens vs full' is the paired change against Table 2's full-context run of the "
            "same questions (the paper's: its Table 3 or 4 tokens over its Table 2 full "
            "context): every token saving on this page is a consequence of the budgets "
            "picked, and this column shows how it moves with them."
        ),
        findings=findings,
    )
    return section, got


def _budget_why(paper_b: int) -> str:
    if paper_b <= 1024:
        return (
            "Below the size of one round's evidence the simulated Recommender no longer "
            "sees the paragraph that answers the last hop, so F1 falls much faster than "
            "in the paper, whose agents still answer partly from their own knowledge."
        )
    return (
        "At and above the default budget every role receives what it needs; the rest of "
        "the gap is the level of the simulated agents' F1."
    )


def _saturation_finding(dataset: str, got: Mapping[int, Sequence[Mapping[str, Any]]]) -> Finding:
    """Gains saturate beyond 2048: F1 at 4096 equals F1 at 2048 within a stated margin (an
    equivalence test on the paired difference, not overlapping intervals)."""
    paper = PAPER_BUDGETS[dataset]
    margin = round(paper[2048]["f1"] - paper[1024]["f1"], 3)
    gain_mid = _paired(got[2048], got[1024], "f1")
    finding = report.check_equivalence(
        f"{dataset}-shaped: F1 saturates beyond B_i = 2048 (paper: {paper[2048]['f1']:.3f} -> "
        f"{paper[4096]['f1']:.3f} at 4096)",
        _mean(got[2048], "f1"),
        _mean(got[4096], "f1"),
        margin=margin,
        difference=_paired(got[4096], got[2048], "f1"),
        why=f"Margin: the paper's own F1 gain from 1024 to 2048 ({margin:.3f}); a doubling "
        "that adds less than the doubling before it is what the paper calls saturation. "
        f"orchenv's gain 1024 -> 2048 is {gain_mid.fmt(3)}. In orchenv the default budget "
        "already fits the evidence, so a larger one adds little.",
    )
    return finding.with_(sources=(AGENTS, DISTRACTION, BUDGET_AXIS))


def _per_role_section(rep: Reproduction, runs: Runs, base: list[dict[str, Any]]) -> Section:
    from orchenv.envs.multihopqa.env import MultihopQAGame

    defaults = MultihopQAGame.default_routing
    rows: list[Row] = [
        Row(
            "default B_i (Planner 384, Searcher 128, Recommender 384)",
            {
                "B_i": "default",
                "tokens (K)": _mean(base, "tokens_total", 1 / 1000),
                "role's tokens (K)": "—",
                "F1": _mean(base, "f1"),
                "F1 vs default": 0.0,
            },
            command=runs.command(f"t2-{_slug('synthetic, HotpotQA-shaped')}-rcr"),
        )
    ]
    drops: dict[str, Estimate] = {}
    halves: dict[str, list[dict[str, Any]]] = {}
    for role in QA_ROLES:
        own = defaults.beta_base + defaults.budget_offsets[role]
        for factor in (0.5, 2.0):
            b = round(own * factor)
            offsets = dict(defaults.budget_offsets) | {role: b - defaults.beta_base}
            data = runs.multihop(
                f"role-{role}-{b}",
                {"dataset": "HotpotQA", "router": "rcr", "rounds": 3,
                 "routing": {"budget_offsets": offsets}},
            )  # fmt: skip
            diff = _paired(data, base, "f1")
            if factor < 1:
                drops[role], halves[role] = diff, data
            rows.append(
                Row(
                    f"{role} B_i = {b} ({'half' if factor < 1 else 'twice'} its default)",
                    {
                        "B_i": b,
                        "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
                        "role's tokens (K)": _role_tokens(data, role),
                        "F1": _mean(data, "f1"),
                        "F1 vs default": diff,
                    },
                    command=runs.command(f"role-{role}-{b}"),
                )
            )
    hurt = min(drops, key=lambda r: drops[r].mean)
    hurt = f"{hurt}'s budget"
    findings = [
        Finding(
            "Eq. (4): roles differ in the context they need (the Planner more than an "
            "executing role); halving the Searcher's budget costs less F1 than halving the "
            "Planner's",
            f"F1 change at half budget: planner {drops['planner'].fmt(3)}, searcher "
            f"{drops['searcher'].fmt(3)}, recommender {drops['recommender'].fmt(3)}",
            _paired(halves["searcher"], halves["planner"], "f1").lo > 0,
            "Compared paired (F1 with the Searcher's budget halved minus F1 with the "
            f"Planner's halved). Halving the {hurt} costs the most F1 here. The Recommender "
            "reads the evidence to answer and the Planner to name the next hop, while the "
            "Searcher at half budget only sometimes loses the newest sub-question. The "
            "paper gives no per-role numbers, so the claim is orchenv's reading of eq. (4).",
            decided=_paired(halves["searcher"], halves["planner"], "f1").hi < 0
            or _paired(halves["searcher"], halves["planner"], "f1").lo > 0,
            paper=False,
            sources=(BUDGETS, AGENTS, DISTRACTION),
        )
    ]
    return Section(
        "Per-role budgets (eq. 4): one role's B_i halved or doubled",
        "Eq. (4), B_i = beta_base + beta_role(R_i); Tables 3-4 vary B_i for every agent at once",
        ["B_i", "tokens (K)", "role's tokens (K)", "F1", "F1 vs default"],
        rows,
        intro=(
            "HotpotQA-shaped synthetic questions, RCR, T = 3; the other roles keep their "
            "default budgets. 'F1 vs default' is paired by episode. The paper reports no "
            "per-role numbers, so these rows have no paper column."
        ),
        findings=findings,
    )


# -- rounds ---------------------------------------------------------------------------------
def _rounds_section(
    rep: Reproduction, runs: Runs, t3: Mapping[str, list[dict[str, Any]]]
) -> tuple[Section, dict[int, dict[str, Any]]]:
    got: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for t in range(1, 6):
        got[t] = {}
        for router in ("rcr", "full"):
            if t == 3:
                got[t][router] = t3[router]
            else:
                got[t][router] = runs.multihop(
                    f"rounds-{router}-T{t}", {"dataset": "HotpotQA", "router": router, "rounds": t}
                )
    rows: list[Row] = []
    for t in range(1, 6):
        rcr, full = got[t]["rcr"], got[t]["full"]
        paper = PAPER_ROUNDS[t]
        rows.append(
            Row(
                f"T = {t}",
                {
                    "tokens (K)": _mean(rcr, "tokens_total", 1 / 1000),
                    "full tokens (K)": _mean(full, "tokens_total", 1 / 1000),
                    "tokens vs full": _relative(rcr, full, "tokens_total"),
                    "F1": _mean(rcr, "f1"),
                    "full F1": _mean(full, "f1"),
                    "F1 vs full": _paired(rcr, full, "f1"),
                    "score from F1 (1-5)": _mean(rcr, "answer_quality_from_f1"),
                },
                {
                    "tokens (K)": paper["tokens"],
                    "F1": paper["f1"],
                    "score from F1 (1-5)": paper["quality"],
                },  # fmt: skip
                command=runs.command(
                    "t2-synthetic--hotpotqa-shaped-rcr" if t == 3 else f"rounds-rcr-T{t}"
                ),
                compare="F1",
                # at T = 3 the paper gives 0.748 (Table 5) and 0.824 (Table 2): a band of
                # 4 x 0.015 = 0.06 (interval at most ± tolerance, widened by it) cannot hold both
                tolerance=T3_TOLERANCE if t == 3 else 0.02,
                why=_rounds_why(t, _mean(rcr, "f1")),
                sources=(AGENTS, DISTRACTION, BUDGETS),
            )
        )
    f1 = {t: _mean(got[t]["rcr"], "f1") for t in got}
    best = max(f1, key=lambda t: f1[t].mean)
    findings = [
        Finding(
            "RCR's F1 peaks at T = 3 and falls beyond it (paper, Table 5; its other T are "
            "estimates, not measurements)",
            "F1 by T: " + ", ".join(f"{t}: {f1[t].mean:.3f}" for t in f1) + f"; best T = {best}",
            best == 3,
            "The simulated team needs one round per hop and questions have 2-4 hops, so "
            "every extra round resolves more of the 4-hop questions; nothing in the "
            "simulation makes late rounds hurt.",
            sources=(AGENTS, DISTRACTION),
        ),
        report.check_order(
            "Diminishing returns: the F1 gain per extra round shrinks after T = 3",
            {
                "gain 2->3": _paired(got[3]["rcr"], got[2]["rcr"], "f1"),
                "gain 3->4": _paired(got[4]["rcr"], got[3]["rcr"], "f1"),
                "gain 4->5": _paired(got[5]["rcr"], got[4]["rcr"], "f1"),
            },
            ["gain 2->3", "gain 3->4", "gain 4->5"],
        ).with_(sources=(AGENTS, DISTRACTION)),
    ]
    for t in range(1, 6):
        findings.append(
            _paired_better(
                f"T = {t}: RCR uses fewer tokens than full context at the same T",
                got[t]["rcr"],
                got[t]["full"],
                "tokens_total",
                ("RCR", "full"),
                why=(
                    "In one round the memory holds little more than the question and the "
                    "first plan, which fits every budget, so RCR routes what full context "
                    "routes."
                    if t == 1
                    else ""
                ),
                sources=(BUDGETS, MEMORY),
            )
        )
    section = Section(
        "Table 5 and Figure 2: rounds T, RCR against full context at the same T",
        "Table 5 (HotpotQA, RCR; T = 3 measured, other T estimated by the authors), Figure 2",
        [
            "tokens (K)",
            "full tokens (K)",
            "tokens vs full",
            "F1",
            "full F1",
            "F1 vs full",
            "score from F1 (1-5)",
        ],  # fmt: skip
        rows,
        intro=(
            "HotpotQA-shaped synthetic questions, orchenv's default budgets. Each T plays RCR "
            "and full context for T rounds on the same episodes; 'vs full' columns compare "
            "them at that T (paired)."
        ),
        findings=findings,
    )
    return section, got


#: the T = 3 row's tolerance: smaller than a quarter of the gap between the paper's two F1
#: for that setting (0.824 - 0.748 = 0.076), so no interval that decides can match both
T3_TOLERANCE = 0.015


def _rounds_why(t: int, f1: Estimate) -> str:
    if t < 3:
        return (
            "With fewer rounds than hops the simulated team cannot reach the last paragraph "
            "of most questions, so F1 drops far more than in the paper's estimate."
        )
    if t == 3:
        both = f1.contains(PAPER_ROUNDS[3]["f1"]) and f1.contains(
            PAPER_TABLE2["HotpotQA"]["rcr"]["f1"]
        )
        return (
            "T = 3 is the paper's measured point and orchenv's default. The paper gives two "
            f"F1 for this same setting: {PAPER_ROUNDS[3]['f1']:.3f} here (Table 5) and "
            f"{PAPER_TABLE2['HotpotQA']['rcr']['f1']:.3f} in Table 2; "
            + (
                "orchenv's interval holds both, so it is too wide to match either."
                if both
                else f"the row is checked against Table 5's with tolerance {T3_TOLERANCE}, "
                "a band too narrow to hold both."
            )
        )
    return (
        "Extra rounds let the simulated team finish 4-hop questions, so F1 keeps rising "
        "where the paper's (estimated) curve falls."
    )


# -- ALFWorld and WebShop teams ---------------------------------------------------------------
def _play_roles(game: Any, pool: Any, seed: int, task: Callable[[], Any]) -> dict[str, Any]:
    """One episode with each role played by its pool agent in turn, every round."""
    from orchenv.pool import CallContext

    game.reset(seed=seed)
    tokens = dict.fromkeys(game.roles, 0)
    parallel = 0.0
    while not (game.done or game.truncated):
        latency: dict[str, float] = {}
        for role in game.roles:
            completion = pool.call(
                role, game.role_messages(role), CallContext(task=task(), turn=game.round)
            )
            tokens[role] += completion.prompt_tokens + completion.completion_tokens
            latency[role] = completion.latency_s
            game.act(role, completion.text)
        parallel += max(latency.values(), default=0.0)
        game.end_round()
    return {
        "tokens_total": sum(tokens.values()),
        "tokens_by_role": tokens,
        "memory_tokens": game.memory.total_tokens,
        "latency_parallel_s": parallel,
        "rounds": game.round,
    }


#: the team games' routers: the three of the paper at its B_i = 2048, and RCR with budgets
#: below the size of orchenv's (small) simulated memories, so that RCR has to cut
TEAM_ROUTERS = ("full", "static", "rcr", "rcr-scaled")
SCALED_BUDGETS: dict[str, dict[str, Any]] = {
    "ALFWorld": {"beta_base": 128},
    "WebShop": {"beta_base": 384, "budget_offsets": {"planner": -192, "searcher": -192}},
}
#: the smallest B_i of each team game at the paper's setting
PAPER_SETTING_MIN_B: dict[str, int] = _PAPER["setting_min_b"]


def _team_router(router: str, name: str) -> tuple[str, dict[str, Any]]:
    """(router mode, routing changes) of a ``TEAM_ROUTERS`` entry."""
    if router == "rcr-scaled":
        return "rcr", dict(SCALED_BUDGETS[name])
    return router, {}


def _play_alfworld(router: str, seed: int, episodes: int) -> list[dict[str, Any]]:
    from orchenv.envs.alfworld.agents import alfworld_role_pool
    from orchenv.envs.alfworld.roles import ALFWorldRoleGame

    mode, routing = _team_router(router, "ALFWorld")
    game = ALFWorldRoleGame(
        router=mode, routing=routing, expert="planner", env_kwargs={"split": "valid_unseen"}
    )
    pool = alfworld_role_pool(seed=seed, token_counter=game.counter)
    rows = []
    try:
        for i in range(episodes):
            row = _play_roles(game, pool, 1000 * seed + i, game.agent_task)
            rows.append(row | {"success": float(game.won), "score": float(game.won)})
    finally:
        game.close()
    return rows


def _play_webshop(
    router: str, seed: int, episodes: int, shop: Mapping[str, Any]
) -> list[dict[str, Any]]:
    from orchenv.envs.webshop.roles import WebShopRoleGame, webshop_role_pool

    mode, routing = _team_router(router, "WebShop")
    game = WebShopRoleGame(router=mode, routing=routing, env_kwargs=dict(shop))
    pool = webshop_role_pool(token_counter=game.counter)
    rows = []
    for i in range(episodes):
        row = _play_roles(game, pool, 1000 * seed + i, lambda: None)
        info = game.summary()
        rows.append(
            row | {"success": float(bool(info.get("success"))), "score": float(info["score"])}
        )
    return rows


def _team_section(
    rep: Reproduction,
    name: str,
    table: str,
    play: Callable[[str, int], list[dict[str, Any]]],
    config: Mapping[str, Any],
    command: Callable[[str], str],
) -> Section:
    src = _team_sources(name)
    got: dict[str, list[dict[str, Any]]] = {}
    for router in TEAM_ROUTERS:
        rows: list[dict[str, Any]] = []
        for seed in rep.seeds:
            rows += rep.cached(
                f"{name.lower()}-{router}-seed{seed}",
                {**config, "router": router, "seed": seed},
                partial(play, router, seed),
            )
        got[router] = rows
    paper = PAPER_TEAMS[name]
    full = got["full"]
    peak = max(r["memory_tokens"] for rows in got.values() for r in rows)
    out: list[Row] = []
    for router in TEAM_ROUTERS:
        data = got[router]
        is_full = router == "full"
        ours: dict[str, Any] = {
            "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
            "tokens vs full": 0.0 if is_full else _relative(data, full, "tokens_total"),
            "success": Estimate.of_proportion(int(sum(r["success"] for r in data)), len(data)),
            "score": _mean(data, "score"),
            "score vs full": 0.0 if is_full else _paired(data, full, "score"),
            "rounds": _mean(data, "rounds"),
            "memory (K)": _mean(data, "memory_tokens", 1 / 1000),
            "runtime (s)": _mean(data, "latency_parallel_s"),
        }
        ref = "rcr" if router == "rcr-scaled" else router
        theirs: dict[str, Any] = {"tokens (K)": paper[ref]["tokens"], "score": paper[ref]["f1"],
                                  "runtime (s)": paper[ref]["runtime"]}  # fmt: skip
        if not is_full:
            theirs["tokens vs full"] = paper[ref]["tokens"] / paper["full"]["tokens"] - 1
            theirs["score vs full"] = paper[ref]["f1"] - paper["full"]["f1"]
        label = ROUTER_NAMES[ref]
        if router == "rcr-scaled":
            label += " (B_i below the memory's size)"
        elif router == "rcr":
            label += " (paper's B_i)"
        out.append(
            Row(
                label,
                ours,
                theirs,
                command=command(router),
                compare=None if is_full else "tokens vs full",
                why="" if is_full else _team_why(name, router, _saving(data, full), peak),
                sources=(src["static"], src["memory"])
                if router == "static"
                else (src["budgets"], src["memory"]),
                signed=True,
            )
        )
    findings = [
        _paired_better(
            f"{name}: static routing uses fewer tokens than full context",
            got["static"],
            full,
            "tokens_total",
            ("static", "full"),
            sources=(src["static"], src["memory"], src["agents"]),
        )
    ]
    for router in ("rcr", "rcr-scaled"):
        which = "the paper's B_i" if router == "rcr" else "small B_i"
        findings += [
            _paired_better(
                f"{name}: RCR ({which}) uses fewer tokens than full context",
                got[router],
                full,
                "tokens_total",
                ("RCR", "full"),
                why=_team_fit_why(name, peak) if router == "rcr" else "",
                sources=(src["budgets"], src["memory"], src["agents"]),
            ),
            _paired_better(
                f"{name}: RCR ({which}) uses fewer tokens than static routing",
                got[router],
                got["static"],
                "tokens_total",
                ("RCR", "static"),
                sources=(src["budgets"], src["static"], src["memory"], src["agents"]),
            ),
            _paired_better(
                f"{name}: RCR ({which}) scores higher than full context",
                got[router],
                full,
                "score",
                ("RCR", "full"),
                why=_team_score_why(name, _paired(got[router], full, "score")),
                sources=(src["agents"], src["budgets"]),
            ),
        ]
    runtime = _paired(got["rcr-scaled"], full, "latency_parallel_s")
    findings.append(
        _paired_better(
            f"{name}: RCR (small B_i) runs faster than full context",
            got["rcr-scaled"],
            full,
            "latency_parallel_s",
            ("RCR", "full"),
            why=""
            if runtime.hi < 0
            else "RCR's shorter prompts are offset by the extra rounds its episodes take "
            "(rounds column).",
            sources=(src["budgets"], src["memory"], src["agents"]),
        )
    )
    unit = "games" if name == "ALFWorld" else "shopping goals"
    return Section(
        f"{table}: {name} role teams under full, static and RCR routing",
        f"{table} ({name}; per-agent budget B_i = 2048)",
        [
            "tokens (K)",
            "tokens vs full",
            "success",
            "score",
            "score vs full",
            "rounds",
            "memory (K)",
            "runtime (s)",
        ],
        out,
        intro=TEAM_INTROS[name].format(unit=unit),
        findings=findings,
    )


#: each role-team table's introduction, by game (``{unit}``: what its episodes are)
TEAM_INTROS = {
    "ALFWorld": (
        "The four roles of appendix F (`ALFWorldRoleGame`) play alfworld's bundled "
        "valid_unseen games for up to 15 rounds; each round every role acts once, played "
        "by `alfworld_role_pool`'s simulated agents (right with probability 0.9 when "
        "their routed context holds the next sub-goal, 0.5 otherwise). 'score' is "
        "success (the paper's column is F1, which ALFWorld does not define for a "
        "team; it is shown for reference). Budgets: B_i = 2048 for every role, as the "
        "paper's, and, in the last row, 128 (below the memory's size). 'memory (K)' is the "
        "shared memory's size at the end. Per episode over the {unit}; 'vs full' "
        "columns are paired."
    ),
    "WebShop": (
        "The three roles of appendix G (`WebShopRoleGame`) shop on orchenv's generated "
        "catalog (test goals) for up to 10 rounds, played by `webshop_role_pool`'s "
        "simulated agents, which read only their routed prompt (no goal): the Recommender "
        "compares the product titles and the product page routed to it. 'score' is "
        "WebShop's purchase reward (0-1; the paper's column is its F1, shown for "
        "reference). Budgets: B_i = 2048 for the Recommender and 1024 for the others "
        "(orchenv's defaults), and, in the last row, 384 / 192 (below the memory's size). "
        "'memory (K)' is the shared memory's size at the end. Per episode over the {unit}; "
        "'vs full' columns are paired."
    ),
}


def _team_fit_why(name: str, peak: float) -> str:
    if peak > PAPER_SETTING_MIN_B[name]:
        return ""
    return (
        f"The largest shared memory of any episode ({peak:,.0f} tokens) fits the smallest "
        f"B_i ({PAPER_SETTING_MIN_B[name]:,}), so at the paper's budget RCR routes exactly "
        "what full context routes: orchenv's simulated memories are smaller than the "
        "paper's. The last row shows RCR cutting."
    )


def _team_why(name: str, router: str, saving: Estimate, peak: float) -> str:
    if router == "static":
        if name == "WebShop":
            return (
                "Static slices drop whole item types per role (the Planner sees no evidence, "
                "the Searcher only the task, queries and the page), which is where the "
                "paper's saving comes from too; the Recommender keeps the evidence and page "
                "it decides on."
            )
        if saving.lo > 0:
            return (
                "Static slices drop whole item types per role (the Navigator and Interactor "
                "see only the task and the plan), which is where the paper's saving comes "
                "from too."
            )
        return (
            "The Navigator's and Interactor's static slices (the task and the plan) are "
            "smaller, but without the Evaluator's feedback they act unguided after a vague "
            "plan, so episodes take more rounds (rounds column) and the extra rounds spend "
            "what the smaller prompts save."
        )
    if router == "rcr":
        return _team_fit_why(name, peak) or (
            "RCR keeps each role within B_i, ranking items by role keywords, stage and recency."
        )
    return (
        "With budgets below the memory's size RCR keeps each role within B_i, ranking items "
        "by role keywords, stage and recency; the saving grows with the episode's length."
    )


def _team_score_why(name: str, diff: Estimate) -> str:
    if name == "ALFWorld":
        return (
            "Every game is won under every router (success column): the Planner rewrites the "
            "remaining plan each round, a plan routed to the Navigator and Interactor keeps "
            "them guided, and RCR ranks the newest plan first, so even the small budget keeps "
            "it."
        )
    if diff.hi < 0:
        return (
            "With the small budget the Recommender's context sometimes lacks the product "
            "page's option lines, so it buys without choosing every option (episodes end "
            "sooner, rounds column) and the purchase reward drops."
        )
    return (
        "The simulated Recommender needs only the newest results page and product page, "
        "which RCR ranks first, so its choices do not change with the router."
    )


# -- orchenv's own design choices -------------------------------------------------------------
def _design_section(rep: Reproduction, runs: Runs, rcr: list[dict[str, Any]]) -> Section:
    variants: dict[str, dict[str, Any]] = {
        "RCR, on_overflow = skip (first-fit)": {"routing": {"on_overflow": "skip"}},
        "RCR without the stage term (w2 = 0)": {"routing": {"weights": [1.0, 0.0, 1.0]}},
    }
    rows = [
        Row(
            "RCR as default (stop at the first item that does not fit; w = 1, 1, 1)",
            {
                "tokens (K)": _mean(rcr, "tokens_total", 1 / 1000),
                "F1": _mean(rcr, "f1"),
                "F1 vs default": 0.0,
            },  # fmt: skip
            command=runs.command(f"t2-{_slug('synthetic, HotpotQA-shaped')}-rcr"),
        )
    ]
    for label, change in variants.items():
        data = runs.multihop(
            f"design-{_slug(label)}",
            {"dataset": "HotpotQA", "router": "rcr", "rounds": 3, **change},
        )
        rows.append(
            Row(
                label,
                {
                    "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
                    "F1": _mean(data, "f1"),
                    "F1 vs default": _paired(data, rcr, "f1"),
                },  # fmt: skip
                command=runs.command(f"design-{_slug(label)}"),
            )
        )
    return Section(
        "orchenv's RCR settings: Algorithm 1's stop rule and appendix E's stage term",
        "Algorithm 1 line 18 (stop when an item does not fit) and appendix E (w2, the stage term)",
        ["tokens (K)", "F1", "F1 vs default"],
        rows,
        intro=(
            "Not a table of the paper: the two choices behind orchenv's RCR defaults, on "
            "HotpotQA-shaped synthetic questions at T = 3 (paired with the default)."
        ),
    )


PLANNERS = {
    "simulated": "simulated Planner (pool agent; records resolved hops in its plan)",
    "scripted": "scripted Planner (privileged hop chain, resolved hops in the plan)",
    "hop-following": "hop-following Planner (3 lines: look up the Recommender's answer)",
}


def _planner_section(rep: Reproduction, runs: Runs) -> Section:
    """Issue 25: appendix E's weights against orchenv's former ones, and the router effect
    (RCR vs full vs static) under three Planners, each with its paired interval."""
    base = {"dataset": "HotpotQA", "rounds": 3}
    rows: list[Row] = []
    findings: list[Finding] = []
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for planner in PLANNERS:
        for router in ROUTERS:
            name = "t2-synthetic--hotpotqa-shaped-" + router
            if planner != "simulated":
                name = f"planner-{planner}-{router}"
            got[planner, router] = runs.multihop(
                name,
                {
                    **base,
                    "router": router,
                    **({} if planner == "simulated" else {"planner": planner}),
                },
            )
    weights = {
        "w = (1, 1, 1), fixed K_i (default; appendix E)": ("rcr", got["simulated", "rcr"]),
        "w = (0.5, 1, 1), tracked names in K_i (former default)": (
            "rcr-former",
            runs.multihop(
                "weights-former",
                {**base, "router": "rcr", "routing": {"weights": [0.5, 1.0, 1.0]}, "track_names": True},
            ),
        ),
        "w = (1, 1, 1), tracked names in K_i": (
            "rcr-names",
            runs.multihop(
                "weights-e-names",
                {**base, "router": "rcr", "routing": {"weights": [1.0, 1.0, 1.0]}, "track_names": True},
            ),
        ),
    }  # fmt: skip
    full = got["simulated", "full"]
    names = {
        "rcr": "t2-synthetic--hotpotqa-shaped-rcr",
        "rcr-former": "weights-former",
        "rcr-names": "weights-e-names",
    }
    for label, (key, data) in weights.items():
        rows.append(
            Row(
                f"simulated Planner, RCR {label}",
                {
                    "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
                    "F1": _mean(data, "f1"),
                    "F1 vs full": _paired(data, full, "f1"),
                    "F1 vs static": _paired(data, got["simulated", "static"], "f1"),
                },
                command=runs.command(names[key]),
            )
        )
    for planner, text in PLANNERS.items():
        ref = got[planner, "full"]
        for router in ROUTERS:
            data = got[planner, router]
            rows.append(
                Row(
                    f"{text}: {ROUTER_NAMES[router]}",
                    {
                        "tokens (K)": _mean(data, "tokens_total", 1 / 1000),
                        "F1": _mean(data, "f1"),
                        "F1 vs full": 0.0 if router == "full" else _paired(data, ref, "f1"),
                        "F1 vs static": _paired(data, got[planner, "static"], "f1")
                        if router == "rcr"
                        else "—",
                    },
                    command=runs.command(
                        "t2-synthetic--hotpotqa-shaped-" + router
                        if planner == "simulated"
                        else f"planner-{planner}-{router}"
                    ),
                )
            )
        findings.append(
            _paired_better(
                f"{text}: RCR answers better than full context (orchenv's check of Table "
                "2's claim under this Planner; the simulated Planner's is Table 2's finding)",
                got[planner, "rcr"],
                ref,
                "f1",
                ("RCR", "full"),
                sources=(DISTRACTION, WEIGHTS, BUDGETS),
                paper=False,
            )
        )
    findings.append(
        _paired_better(
            "simulated Planner: appendix E's weights (1, 1, 1) with fixed K_i answer better than "
            "the former (0.5, 1, 1) with tracked names",
            got["simulated", "rcr"],
            weights[list(weights)[1]][1],
            "f1",
            ("default", "former"),
            why="Reported either way; the headline 'RCR beats full context' holds only "
            "where the Planner's plan carries the resolved hops (see the rows).",
            sources=(DISTRACTION, PLANNER, BUDGETS),
            paper=False,
        )
    )
    return Section(
        "Router effect by Planner, and appendix E's importance weights (issue 25)",
        "Table 2's HotpotQA comparison under other Planners; appendix E (w1 = w2 = w3 = 1)",
        ["tokens (K)", "F1", "F1 vs full", "F1 vs static"],
        rows,
        intro=(
            "Not a table of the paper. HotpotQA-shaped synthetic questions at T = 3, paired "
            "by episode. The first rows compare RCR's importance weights with the simulated "
            "team; the others play the same questions with three Planners (the Searcher and "
            "Recommender are the simulated pool's in every row). RCR drops old evidence "
            "under its budget; a Planner whose plan records the resolved hops keeps the "
            "chain in the Recommender's context, one that does not loses it."
        ),
        findings=findings,
    )


# -- figures ----------------------------------------------------------------------------------
def _plot_rounds(rep: Reproduction, got: Mapping[int, Mapping[str, list[dict[str, Any]]]]) -> str:
    ts = sorted(got)
    curves: list[_Curve] = [
        (
            f"orchenv {ROUTER_NAMES[router]}",
            style,
            [_mean(got[t][router], "f1") for t in ts],
            [_mean(got[t][router], "tokens_total", 1 / 1000) for t in ts],
        )
        for router, style in (("rcr", "o-"), ("full", "s--"))
    ]
    paper = ([PAPER_ROUNDS[t]["f1"] for t in ts], [PAPER_ROUNDS[t]["tokens"] for t in ts])
    curves.append(("paper RCR (Table 5)", "k:", *paper))
    return _plot_f1_tokens(
        rep, "rounds", ts, curves, "rounds T", ("Answer F1 by rounds", "Tokens by rounds")
    )


def _plot_budgets(rep: Reproduction, got: Mapping[str, Mapping[int, list[dict[str, Any]]]]) -> str:
    curves: list[_Curve] = []
    for dataset, style in (("HotpotQA", "o-"), ("MuSiQue", "s-")):
        rows = [got[dataset][b] for b in PAPER_B]
        curves.append(
            (
                f"orchenv, {dataset}-shaped",
                style,
                [_mean(r, "f1") for r in rows],
                [_mean(r, "tokens_total", 1 / 1000) for r in rows],
            )
        )
        paper = PAPER_BUDGETS[dataset]
        curves.append(
            (
                f"paper, {dataset}",
                ":",
                [paper[b]["f1"] for b in PAPER_B],
                [paper[b]["tokens"] for b in PAPER_B],
            )
        )
    return _plot_f1_tokens(
        rep,
        "budgets",
        PAPER_B,
        curves,
        "per-agent budget B_i (paper's units)",
        ("F1 by budget", "Tokens by budget"),
        log2=True,
    )


#: one line of an F1 / tokens figure: label, format, F1 per x, tokens (K) per x; orchenv's
#: values are estimates (drawn with their intervals), the paper's plain numbers
_Curve = tuple[str, str, Sequence[Any], Sequence[Any]]


def _plot_f1_tokens(
    rep: Reproduction,
    name: str,
    xs: Sequence[int],
    curves: Sequence[_Curve],
    xlabel: str,
    titles: tuple[str, str],
    *,
    log2: bool = False,
) -> str:
    """Answer F1 (left) and tokens per episode (right) against ``xs``, one line per curve in
    the order given (the legend's order); ``log2``: a base-2 x axis labelled at ``xs``."""
    path, link = rep.figure(name)
    fig, (ax1, ax2) = new_figure(1, 2, size=(10, 4))
    for label, fmt, f1, tokens in curves:
        for ax, values in ((ax1, f1), (ax2, tokens)):
            if all(isinstance(v, Estimate) for v in values):
                points_with_intervals(ax, xs, values, fmt=fmt, label=label)
            else:
                ax.plot(xs, values, fmt, marker="x", label=label)
    ax1.set(xlabel=xlabel, ylabel="F1", title=titles[0])
    ax2.set(xlabel=xlabel, ylabel="tokens per episode (K)", title=titles[1])
    for ax in (ax1, ax2):
        if log2:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
        else:
            ax.set_xticks(xs)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path)
    return link


def _plot_runtime(rep: Reproduction, table2: Section) -> str:
    path, link = rep.figure("runtime")
    fig, (ax1, ax2) = new_figure(1, 2, size=(10, 4))
    datasets = list(PAPER_TABLE2)
    width = 0.25
    for k, router in enumerate(ROUTERS):
        xs = [i + (k - 1) * width for i in range(len(datasets))]
        ax1.bar(xs, [PAPER_TABLE2[d][router]["runtime"] for d in datasets], width,
                label=ROUTER_NAMES[router])  # fmt: skip
    ax1.set_xticks(range(len(datasets)), datasets)
    ax1.set(ylabel="avg runtime (s)", title="Paper (Figure 3)")
    labels = sorted({r.label.split(": ")[0] for r in table2.rows}, key=lambda s: s)
    for k, router in enumerate(ROUTERS):
        xs, ests = [], []
        for i, label in enumerate(labels):
            row = next(r for r in table2.rows if r.label == f"{label}: {ROUTER_NAMES[router]}")
            est = row.ours["runtime (s)"]
            assert isinstance(est, Estimate)
            xs.append(i + (k - 1) * width)
            ests.append(est)
        bars_with_intervals(ax2, xs, ests, width, label=ROUTER_NAMES[router])
    ax2.set_xticks(range(len(labels)), [lb.replace("synthetic, ", "") for lb in labels])
    ax2.set(ylabel="simulated runtime per episode (s)", title="orchenv (eq. 7, 60 tokens/s)")
    for ax in (ax1, ax2):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    save(fig, path)
    return link


# -- the page ---------------------------------------------------------------------------------
def build(rep: Reproduction) -> list[Section]:
    episodes = rep.size(150, 6)
    games = rep.size(20, 2)
    goals = rep.size(40, 3)
    shop = rep.size(SHOP, QUICK_SHOP)
    local = [(var, loader, paper, _local_file(var, loader)) for var, loader, paper in LOCAL]
    n_local = sum(path is not None for *_, path in local)
    # settings: Table 2 (3 per dataset), Tables 3-4 (4 + 4), per role (6), rounds (8 beyond
    # Table 2's T = 3), design (2); then ALFWorld and WebShop (4 routers each)
    multihop = 3 * (len(SYNTH) + n_local) + 8 + 6 + 8 + 2 + 6 + 2
    rep.plan(len(rep.seeds) * (multihop + 2 * len(TEAM_ROUTERS)))
    runs = Runs(rep, episodes)

    table2 = _table2(rep, runs, local)
    table2.figures.append(_plot_runtime(rep, table2))
    t3 = {
        r: runs.multihop(
            f"t2-{_slug('synthetic, HotpotQA-shaped')}-{r}",
            {"dataset": "HotpotQA", "router": r, "rounds": 3},
        )
        for r in ("rcr", "full")
    }
    table3, b_hot = _budget_section(rep, runs, "HotpotQA", "Table 3")
    table4, b_mus = _budget_section(rep, runs, "MuSiQue", "Table 4")
    table4.figures.append(_plot_budgets(rep, {"HotpotQA": b_hot, "MuSiQue": b_mus}))
    per_role = _per_role_section(rep, runs, t3["rcr"])
    rounds, by_t = _rounds_section(rep, runs, t3)
    rounds.figures.append(_plot_rounds(rep, by_t))
    alf = _team_section(
        rep,
        "ALFWorld",
        "Table 8",
        lambda router, seed: _play_alfworld(router, seed, games),
        {"games": games, "split": "valid_unseen"},
        lambda router: row_command(
            rep, "alfworld", {"router": router}, games, f"alfworld-{router}"
        ),
    )
    web = _team_section(
        rep,
        "WebShop",
        "Table 10",
        lambda router, seed: _play_webshop(router, seed, goals, shop),
        {"goals": goals, "shop": shop},
        lambda router: row_command(
            rep, "webshop", {"router": router, "shop": shop}, goals, f"webshop-{router}"
        ),
    )
    design = _design_section(rep, runs, t3["rcr"])
    planners = _planner_section(rep, runs)
    return [table2, table3, table4, per_role, rounds, alf, web, design, planners]


# -- one row alone: `python -m orchenv.envs.multihopqa.reproduce KIND --setting JSON ...` ------
def play_row(
    kind: str, setting: Mapping[str, Any], seeds: Sequence[int], episodes: int
) -> list[dict[str, Any]]:
    """Every episode of one row's setting over ``seeds``, with the functions the page uses."""
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        if kind == "multihop":
            rows += _play_multihop(setting, seed, episodes)
        elif kind == "alfworld":
            rows += _play_alfworld(str(setting["router"]), seed, episodes)
        elif kind == "webshop":
            shop = dict(setting.get("shop", SHOP))
            rows += _play_webshop(str(setting["router"]), seed, episodes, shop)
        else:
            raise ValueError(f"unknown kind {kind!r}: expected multihop, alfworld or webshop")
    return rows


def _check_setting(kind: str, setting: Any) -> dict[str, Any]:
    if not isinstance(setting, dict):
        raise ValueError("--setting must be a JSON object")
    if kind == "multihop":
        if "file" not in setting and setting.get("dataset") not in SYNTH:
            raise ValueError(f"setting needs 'dataset' in {sorted(SYNTH)} or a 'file'")
        if setting.get("router") not in ROUTERS:
            raise ValueError(f"setting needs 'router' in {list(ROUTERS)}")
        if setting.get("planner", "simulated") not in PLANNERS:
            raise ValueError(f"'planner' must be one of {list(PLANNERS)}")
    elif setting.get("router") not in TEAM_ROUTERS:
        raise ValueError(f"setting needs 'router' in {list(TEAM_ROUTERS)}")
    return setting


def main(argv: Sequence[str] | None = None) -> int:
    """Replay one row of seed 004's page (the command under each table) and print its means
    with 95% intervals; ``--out`` also writes every episode's metrics as JSON."""
    parser = argparse.ArgumentParser(prog=f"python -m {ROW_MODULE}", description=main.__doc__)
    parser.add_argument("kind", choices=["multihop", "alfworld", "webshop"])
    parser.add_argument("--setting", required=True, help="the row's setting, a JSON object")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=150, help="episodes per seed")
    parser.add_argument("--out", help="write the episodes and the summary to this JSON file")
    args = parser.parse_args(argv)
    try:
        if args.episodes < 1:
            raise ValueError("--episodes must be >= 1")
        setting = _check_setting(args.kind, json.loads(args.setting))
        rows = play_row(args.kind, setting, args.seeds, args.episodes)
    except (ValueError, KeyError, TypeError, OSError) as exc:  # JSONDecodeError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    keys = (
        ("f1", "tokens_total", "latency_parallel_s")
        if args.kind == "multihop"
        else ("score", "success", "tokens_total", "latency_parallel_s", "rounds")
    )
    summary = {k: _mean(rows, k).to_dict() for k in keys}
    for key, est in summary.items():
        print(f"{key}: {Estimate(**est).fmt(3)} over {est['n']} episodes")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"kind": args.kind, "setting": setting, "seeds": args.seeds,
                   "episodes": args.episodes, "summary": summary, "rows": rows}  # fmt: skip
        out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
