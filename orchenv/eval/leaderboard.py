"""Leaderboards from ``orchenv eval`` run directories: markdown, HTML and PNG plots.

Ranking rule (also printed at the top of ``leaderboard.md`` and ``leaderboard.html``):
runs are grouped by (env, pool, split), since numbers are only comparable on the same tasks
and agents. Within a group, controllers that do not read ground truth come first, ordered by
accuracy (higher first) with ties broken by lower mean cost per episode; privileged
controllers (marked †: they read ground truth, e.g. a simulated verifier or an oracle) follow
in their own section, ordered the same way. They bound what a controller could reach and are
never ranked against the others.

Verification (issue 30): each run is read through ``orchenv.schema`` (finite numbers only; a
run with a NaN or Infinity in its summary is rejected with the reason and listed under
"Rejected runs", never copied onto the board). A run directory holding a ``verified.json``
(written by ``orchenv verify`` into a submission bundle, which is itself a run directory) is
marked with its verdict and linked to its report; the verdict is ``stale`` when the run's
files changed after verification. When any run on the board is verified, only verified runs
are ranked and the rest are listed apart, unranked. The row model lives in
``orchenv.eval.rows``.

``build_leaderboard(run_dirs, out_dir)`` writes ``leaderboard.md``, ``leaderboard.html``
(self-contained: inline CSS, JS and images; no network), ``leaderboard.json`` (the rows, in
rank order) and ``accuracy_vs_cost.png`` / ``usage.png`` (one pair per group, suffixed with
the group's name, when there are several groups).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError
from orchenv.eval.harness import load_summary, read_episode_log
from orchenv.eval.metrics import difference, mean_interval, per_episode, primary_metric
from orchenv.eval.rows import (
    DAGGER,
    RANKING_RULE,
    VERIFIED_RULE,
    Group,
    GroupKey,
    Rejected,
    Row,
    cell,
    columns,
    fmt_accuracy,
    fmt_money,
)

logger = logging.getLogger(__name__)


@dataclass
class Leaderboard:
    groups: list[Group]
    files: list[Path]
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [r for g in self.groups for r in g.rows]


def kwargs_variant(env_kwargs: Any) -> str:
    """ "" for the env's defaults, else "env kwargs " and a short hash of the canonical kwargs:
    runs with other kwargs (e.g. a task source of one easy task) form their own group."""
    if not env_kwargs:
        return ""
    canon = json.dumps(env_kwargs, sort_keys=True, separators=(",", ":"), default=str)
    import hashlib

    return "env kwargs " + hashlib.sha256(canon.encode()).hexdigest()[:10]


def row_from_summary(summary: dict[str, Any]) -> Row:
    """A board row from a loaded ``summary.json`` (see ``harness.load_summary``)."""
    pooled = summary.get("pooled") or {}
    run = summary.get("run") or {}
    path = Path(summary.get("dir", "."))
    try:
        lo, hi = pooled["accuracy_ci95"]
        return Row(
            run=path.name or str(path),
            dir=str(path),
            env_id=str(pooled.get("env_id") or run.get("env_id")),
            pool=str(pooled.get("pool") or run.get("pool")),
            split=str(pooled.get("split") or run.get("split")),
            controller=str(pooled.get("controller_label") or pooled["controller"]),
            controller_spec=str(pooled.get("controller_spec") or run.get("controller")),
            privileged=bool(pooled.get("privileged", run.get("privileged", False))),
            seeds=[int(s) for s in pooled.get("seeds") or run.get("seeds") or []],
            episodes=int(pooled["episodes"]),
            accuracy=float(pooled["accuracy"]),
            ci_low=float(lo),
            ci_high=float(hi),
            mean_cost_usd=float(pooled["mean_cost_usd"]),
            mean_tokens=float(
                pooled.get("mean_tokens")
                or pooled["mean_prompt_tokens"] + pooled["mean_completion_tokens"]
            ),
            usage={str(k): float(v) for k, v in pooled["usage_ratios"].items()},
            mean_turns=float(pooled["mean_turns"]),
            invalid_rate=float(pooled["invalid_action_rate"]),
            mean_reward=float(pooled["mean_reward"]),
            env_kwargs=dict(run.get("env_kwargs") or {}),
            variant=kwargs_variant(run.get("env_kwargs") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"{path / 'summary.json'} lacks a field the leaderboard needs ({exc}); "
            "regenerate it by rerunning its `orchenv eval` command"
        ) from exc


def rank_rows(rows: Iterable[Row]) -> list[Group]:
    """Group by (env, pool, split) and order each group by the ranking rule (module doc).

    When any row is verified, only verified rows are ranked; the others are listed apart,
    unranked (``orchenv.eval.rows.VERIFIED_RULE``)."""
    rows = list(rows)
    verified_board = any(r.verified for r in rows)
    by_group: dict[GroupKey, list[Row]] = {}
    for row in rows:
        by_group.setdefault(row.group, []).append(row)
    groups = []
    for key in sorted(by_group):
        members = by_group[key]

        def order(r: Row) -> tuple[float, float, str, str]:
            return (-r.primary, r.mean_cost_usd, r.controller, r.run)

        group = Group(key=key, rows=[], agents=[], verified_board=verified_board)
        sections: dict[str, list[Row]] = {"ranked": [], "privileged": [], "unverified": []}
        for r in members:
            sections[group.section(r)].append(r)
        for section in sections.values():
            section.sort(key=order)
            for upper, lower in zip(section, section[1:], strict=False):
                diff = difference(upper.per_episode, lower.per_episode)
                upper.vs_next = diff.text if diff is not None else ""
        for i, r in enumerate(sections["ranked"], 1):
            r.rank = i
        for r in sections["privileged"] + sections["unverified"]:
            r.rank = None
        agents: list[str] = []
        for r in members:
            agents.extend(a for a in r.usage if a not in agents)
        group.rows = sections["ranked"] + sections["privileged"] + sections["unverified"]
        group.agents = agents
        groups.append(group)
    return groups


def _own_verification(run_dir: Path, oracle_episodes: int | None) -> dict[str, Any] | None:
    """The board's own verification of a bundle (``orchenv verify`` without writing): None
    for a run directory that is not a bundle."""
    from orchenv.error import OrchEnvError
    from orchenv.verify.bundle import MANIFEST
    from orchenv.verify.checks import verify_bundle

    if not (run_dir / MANIFEST).is_file() or (run_dir / MANIFEST).is_symlink():
        return None
    try:
        report = verify_bundle(run_dir, write=False, oracle_episodes=oracle_episodes, rerun=True)
    except (OrchEnvError, OSError) as exc:
        return {"status": "failed", "reason": f"verification stopped: {exc}", "report": None}
    failed = [c.name for c in report.failures()]
    gap = report.audit.get("gameability_gap") if report.audit else None
    return {
        "status": "verified" if report.verified else "failed",
        "reason": "verified by this board" if report.verified else f"failed: {', '.join(failed)}",
        "report": None,
        "gameability_gap": str(gap)[:200] if gap else None,
    }


def _attach_primary(row: Row, run_dir: Path, out: Path) -> None:
    """The row's primary metric (``orchenv.eval.metrics``) from its episode log, and its
    ``view.html`` link when ``orchenv view`` wrote one."""
    log = run_dir / "episodes.jsonl"
    if not os.path.lexists(log):
        raise DataError(
            f"{log} is missing: the board ranks by per-episode values (rerun the `orchenv "
            "eval` command that wrote this run)"
        )
    metric = primary_metric(row.env_id)
    row.metric = metric.label
    row.per_episode = per_episode(read_episode_log(log), metric)
    row.primary, row.primary_low, row.primary_high = mean_interval(
        [v for _, v in row.per_episode.values()]
    )
    view = run_dir / "view.html"
    if view.is_file() and not view.is_symlink():
        row.view = os.path.relpath(view, out)


def _limits(group: Group) -> tuple[dict[str, float], dict[str, float]]:
    """The group pool's usage constraints (a shipped preset's ``usage_constraints``) and the
    env's per-episode budgets (an env with a ``budgets`` mapping, BudgetRoute), for the
    plots; empty where there are none or they cannot be read."""
    from orchenv.error import OrchEnvError

    env_id, pool, *_ = group.key
    constraints: dict[str, float] = {}
    try:
        from orchenv.pool import list_presets, load_preset_data

        if pool in list_presets():
            raw = load_preset_data(pool).get("usage_constraints") or {}
            constraints = {str(k): float(v) for k, v in raw.items()}
    except (OrchEnvError, OSError, TypeError, ValueError) as exc:
        logger.debug("no usage constraints for %s: %s", pool, exc)
    budgets: dict[str, float] = {}
    try:
        import inspect

        import gymnasium as gym

        from orchenv.registry import load_entry_point

        entry = gym.spec(env_id).entry_point
        cls = load_entry_point(entry) if isinstance(entry, str) else entry
        if not callable(cls) or "budgets" not in inspect.signature(cls).parameters:
            return constraints, budgets
        env = gym.make(env_id)
        try:
            raw_budgets = getattr(env.unwrapped, "budgets", None)
            if isinstance(raw_budgets, dict):
                budgets = {str(k): float(v) for k, v in raw_budgets.items()}
        finally:
            env.close()
    except Exception as exc:  # noqa: BLE001 - a board never fails over a plot annotation
        logger.debug("no budgets for %s: %s", env_id, exc)
    return constraints, budgets


def show_note(note: str) -> str:
    """A signed record's note as one short, valid line (300 characters at most)."""
    from orchenv.serve.wire import safe_text

    return safe_text(" ".join(note.split())[:300])


def _sealed_reason(run_dir: Path) -> str:
    """How a signed sealed run was made, from its (already verified) ``sealed.json``: played
    by the board itself (``orchenv board play`` / ``verify --rerun``) or refereed by the
    board's server (``orchenv serve --referee``), complete or abandoned."""
    from orchenv.error import OrchEnvError
    from orchenv.eval.board import SEALED_FILE
    from orchenv.eval.rundir import read_json_file

    try:
        data = read_json_file(run_dir / SEALED_FILE)
    except OrchEnvError:  # checked moments ago; a file swapped since reads as the default
        data = {}
    if data.get("how") == "refereed":
        # a re-execution's note (e.g. "re-executed against endpoint X ...") is signed with it
        note = data.get("note")
        extra = f"; {show_note(note)}" if isinstance(note, str) and note.strip() else ""
        if data.get("status") == "abandoned":
            return f"refereed by the board's server (abandoned: unplayed tasks count 0){extra}"
        return f"refereed by the board's server (complete){extra}"
    return "played by the board on its sealed plan"


def _check_spec(
    spec: dict[str, Any], summary: dict[str, Any], run_dir: Path, key: bytes | None = None
) -> bool:
    """``DataError`` naming why the run is outside the board ``spec``
    (``orchenv.eval.board.spec_mismatch``); True for a sealed run of the spec signed with the
    board's ``key`` (``orchenv board play``), False for a dev-plan run."""
    from orchenv.error import OrchEnvError
    from orchenv.eval.board import sealed_status, spec_mismatch
    from orchenv.eval.rundir import read_json_file

    sealed = sealed_status(run_dir, spec, key)
    if sealed == "sealed":
        return True
    if sealed is not None:
        raise DataError(f"outside board {spec['spec_sha256'][:12]}: {sealed}")

    pool_doc = None
    if os.path.lexists(run_dir / "pool.json"):  # a bundle: the pool it was verified with
        from orchenv.pool import check_pool_data

        try:
            pool_doc = check_pool_data(read_json_file(run_dir / "pool.json"), "pool.json")
        except OrchEnvError as exc:
            raise DataError(f"outside this board: its pool.json cannot be read ({exc})") from exc
    try:
        why = spec_mismatch(spec, summary.get("run") or {}, pool_doc)
    except (TypeError, ValueError, KeyError) as exc:  # a run.json of the wrong shapes
        raise DataError(f"outside this board: its run.json cannot be compared ({exc})") from exc
    if why:
        raise DataError(
            f"outside board {spec['spec_sha256'][:12]} (not in its group): " + "; ".join(why)
        )
    return False


def read_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: Path,
    *,
    key: bytes | None = None,
    verify: bool = False,
    oracle_episodes: int | None = None,
    spec: dict[str, Any] | None = None,
) -> tuple[list[Row], list[Rejected]]:
    """Each run's row, read through ``orchenv.schema`` (finite numbers only), with its
    verification: the board's own (``verify``: bundles are re-verified, nothing shipped is
    read) or ``verified.json``, trusted only when signed with the board's ``key`` and
    checked against the run's files. A run that cannot be read is rejected with the reason,
    never copied onto the board."""
    from orchenv.verify.checks import read_verification

    rows: list[Row] = []
    rejected: list[Rejected] = []
    for d in run_dirs:
        try:
            summary = load_summary(d)
            sealed = _check_spec(spec, summary, Path(d), key) if spec is not None else False
            row = row_from_summary(summary)
            if spec is not None:
                row.variant = f"board {spec['spec_sha256'][:12]}"
            if sealed:  # played by the maintainer on the sealed plan: trusted, seeds hidden
                row.verification = "verified"
                row.verification_reason = _sealed_reason(Path(d))
                row.seeds = []
                # the sealed plan's env kwargs carry the key-derived backend seed: shown as
                # the board's own kwargs, so no page or JSON names the sealed seeds
                row.env_kwargs = dict((spec or {}).get("env_kwargs") or {})
                row.sealed = True
                row.variant += " · sealed plan"  # ranked among sealed runs only
            _attach_primary(row, Path(d), out)
        except DataError as exc:
            logger.warning("leaderboard: %s rejected: %s", d, exc)
            rejected.append(Rejected(dir=str(d), reason=str(exc)))
            continue
        if row.sealed:
            rows.append(row)
            continue
        found = (
            _own_verification(Path(d), oracle_episodes)
            if verify
            else read_verification(Path(d), key)
        )
        if found is not None:
            row.verification = found["status"]
            row.verification_reason = found["reason"]
            row.report = os.path.relpath(found["report"], out) if found["report"] else None
            row.audit_gap = found.get("gameability_gap")
        rows.append(row)
    return rows, rejected


def build_leaderboard(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    title: str = "orchenv leaderboard",
    plots: bool = True,
    key: bytes | None = None,
    verify: bool = False,
    oracle_episodes: int | None = None,
    spec: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> Leaderboard:
    """Read each run's summary and write the board files into ``out_dir`` (module doc).

    ``notes``: paragraphs (plain text) printed under the title of ``leaderboard.md`` and
    ``leaderboard.html``, e.g. a published board's sizes and what its rows are.

    A run whose files do not pass the schema (a NaN or Infinity in its summary, a missing
    field) is left off the board and listed under "Rejected runs" with the reason; when no
    run can be read, ``DataError`` names the first reason and nothing is written."""
    if not run_dirs:
        raise ConfigError("give at least one run directory (made by `orchenv eval --out DIR`)")
    out = Path(out_dir)
    rows, rejected = read_runs(
        run_dirs,
        out.resolve() if out.exists() else out.absolute(),
        key=key,
        verify=verify,
        oracle_episodes=oracle_episodes,
        spec=spec,
    )
    if not rows:
        raise DataError(
            f"no run could be read: {rejected[0].dir}: {rejected[0].reason}"
            + (f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else "")
        )
    groups = rank_rows(rows)
    for group in groups:
        group.constraints, group.budgets = _limits(group)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    if plots:
        from orchenv.eval.plots import accuracy_vs_cost_png, usage_png

        for group in groups:
            suffix = "" if len(groups) == 1 else f"_{group.slug}"
            acc_path = out / f"accuracy_vs_cost{suffix}.png"
            use_path = out / f"usage{suffix}.png"
            accuracy_vs_cost_png(group, acc_path)
            usage_png(group, use_path)
            group.plots = {"accuracy_vs_cost": acc_path, "usage": use_path}
            files += [acc_path, use_path]
    from orchenv.eval.html_report import render_html

    md_path, html_path, json_path = (
        out / "leaderboard.md",
        out / "leaderboard.html",
        out / "leaderboard.json",
    )
    rule = RANKING_RULE + " " + VERIFIED_RULE
    md_path.write_text(render_markdown(groups, title, rejected, notes), encoding="utf-8")
    html_path.write_text(render_html(groups, title, rule, rejected, notes), encoding="utf-8")
    json_path.write_text(
        json.dumps(
            [{**_row_dict(r), "group": list(r.group)} for g in groups for r in g.rows],
            indent=2,
            allow_nan=False,  # rows come from schema-checked summaries: finite numbers
        )
        + "\n",
        encoding="utf-8",
    )
    files = [md_path, html_path, json_path, *files]
    logger.info("leaderboard of %d runs in %d groups written to %s", len(rows), len(groups), out)
    return Leaderboard(groups=groups, files=files, rejected=rejected)


def _row_dict(row: Row) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(row)
    data.pop("per_episode", None)
    return {**data, "display_name": row.display_name}


# -- markdown ------------------------------------------------------------------------------------
def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_cell(row: Row, key: str) -> str:
    text = _md_escape(cell(row, key)[0])
    if key == "verification" and row.report:
        target = row.report.replace(" ", "%20").replace(")", "%29")
        return f"[{text}]({target})"
    if key == "run" and row.view:
        target = row.view.replace(" ", "%20").replace(")", "%29")
        return f"[{text}]({target})"
    return text


def _md_table(group: Group, rows: list[Row]) -> list[str]:
    cols = columns(group)
    text_cols = {"controller", "run", "verification", "vs_next"}
    lines = [
        "| " + " | ".join(_md_escape(h) for _, h in cols) + " |",
        "|" + "|".join("---:" if k not in text_cols else "---" for k, _ in cols) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(row, k) for k, _ in cols) + " |")
    return lines


def render_markdown(
    groups: Sequence[Group],
    title: str,
    rejected: Sequence[Rejected] = (),
    notes: Sequence[str] = (),
) -> str:
    lines = [f"# {title}", ""]
    for note in notes:
        lines += [note.replace("\n", " "), ""]
    lines += [RANKING_RULE, "", VERIFIED_RULE, ""]
    if groups and not groups[0].verified_board:
        lines += ["**No run on this board is verified**: its ranks are of unverified runs.", ""]
    for group in groups:
        lines += [f"## {group.title}", "", group.header + ".", ""]
        if group.audit_gap:
            lines += [f"Env gameability gap (`orchenv audit`): {_md_escape(group.audit_gap)}", ""]
        ranked = group.rows_in("ranked")
        privileged = group.rows_in("privileged")
        unverified = group.rows_in("unverified")
        lines += _md_table(group, ranked) if ranked else ["(no ranked runs)"]
        lines.append("")
        if privileged:
            lines += [
                f"### Privileged controllers {DAGGER} (read ground truth; not ranked)",
                "",
                *_md_table(group, privileged),
                "",
            ]
        if unverified:
            lines += [
                "### Unverified runs (not ranked)",
                "",
                *_md_table(group, unverified),
                "",
                *[
                    f"- {_md_escape(r.run)}: {_md_escape(r.verification)}"
                    + (f" ({_md_escape(r.verification_reason)})" if r.verification_reason else "")
                    for r in unverified
                ],
                "",
            ]
        for kind, path in group.plots.items():
            lines += [f"![{kind.replace('_', ' ')}]({path.name})", ""]
    if rejected:
        lines += ["## Rejected runs (not on the board)", ""]
        lines += [f"- `{_md_escape(r.dir)}`: {_md_escape(r.reason)}" for r in rejected]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


__all__ = [
    "DAGGER",
    "RANKING_RULE",
    "VERIFIED_RULE",
    "Group",
    "Leaderboard",
    "Rejected",
    "Row",
    "build_leaderboard",
    "cell",
    "columns",
    "fmt_accuracy",
    "fmt_money",
    "rank_rows",
    "read_runs",
    "render_markdown",
    "row_from_summary",
]
