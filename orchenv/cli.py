"""The ``orchenv`` command: list what is registered, run a controller on an env."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import select
import sys
from collections.abc import Sequence

import gymnasium as gym

import orchenv
from orchenv.cliargs import forward
from orchenv.error import OrchEnvError
from orchenv.eval.cli import add_env_controller_arguments, add_subcommands


def _cmd_list(args: argparse.Namespace) -> int:
    from orchenv.controllers import CONTROLLERS
    from orchenv.pool import list_presets, load_preset_data
    from orchenv.registry import ENV_SUMMARIES
    from orchenv.tasks import TASK_SOURCES

    print("Environments:")
    for env_id, summary in ENV_SUMMARIES.items():
        print(f"  {env_id:<28} {summary}")
    print("\nPool presets (agents weakest first):")
    for name in list_presets():
        data = load_preset_data(name)
        agents = sorted(data["agents"], key=lambda a: -a["tier"])
        print(f"  {name:<12} {', '.join(a['name'] for a in agents)}")
    print("\nTask sources:")
    for name in TASK_SOURCES:
        print(f"  {name}")
    print("\nControllers (what each does; where it applies):")
    for name in CONTROLLERS:
        what, where = controller_summary(name)
        print(f"  {name:<24} {what} [applies to: {where}]")
    return 0


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "")
    found = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.\s", text)
    return (text[: found.start() + 1] if found else text) or "(no description)"


def controller_summary(name: str) -> tuple[str, str]:
    """A registered controller's one-line description (its class docstring's first sentence)
    and the env ids it applies to: its class's ``applies_to`` (ids) when it has one, else the
    ids of the env family whose package defines it (``orchenv.envs.FAMILY``), else any env."""
    from orchenv.controllers import CONTROLLERS
    from orchenv.registry import ENV_SUMMARIES

    target = CONTROLLERS[name]
    module = target.partition(":")[0] if isinstance(target, str) else target.__module__
    try:
        cls = CONTROLLERS.resolve(name)
    except Exception as exc:  # an optional dependency missing: say so, keep listing
        return f"(cannot load {target}: {type(exc).__name__})", "?"
    what = _first_sentence(cls.__doc__)
    applies = getattr(cls, "applies_to", None)
    if isinstance(applies, list | tuple) and applies:
        return what, ", ".join(map(str, applies))
    parts = module.split(".")
    if parts[:2] == ["orchenv", "envs"] and len(parts) > 2:
        family = f"orchenv.envs.{parts[2]}"
        ids = []
        for env_id in ENV_SUMMARIES:
            try:
                entry = str(gym.spec(env_id).entry_point)
            except gym.error.Error:
                continue
            if entry.startswith(family + ".") or entry.startswith(family + ":"):
                ids.append(env_id)
        return what, ", ".join(ids) or parts[2]
    return what, "any env"


def _cmd_run(args: argparse.Namespace) -> int:
    from orchenv.controllers import default_controller, make_controller, parse_kwargs
    from orchenv.runner import format_summary, run_episodes

    env_kwargs = parse_kwargs(args.env_kwarg)
    if args.record or args.replay:
        from orchenv.pool import make_pool

        # the pool is built here, so the env's backend options apply here
        env_kwargs["pool"] = make_pool(
            args.pool or _default_pool(args.env_id),
            backend=env_kwargs.pop("backend", None),
            backend_kwargs=env_kwargs.pop("backend_kwargs", None),
            record_to=args.record,
            replay_from=args.replay,
            replay_mode=args.replay_mode,
        )
    elif args.pool:
        env_kwargs["pool"] = args.pool
    if args.split:
        env_kwargs["split"] = args.split
    try:
        env = gym.make(args.env_id, **env_kwargs)
    except (gym.error.Error, TypeError) as exc:  # unknown id, or an argument the env does not take
        raise OrchEnvError(f"cannot make {args.env_id!r}: {exc}. See `orchenv list`.") from exc
    args.controller = args.controller or default_controller(args.env_id)
    controller = make_controller(args.controller, **parse_kwargs(args.controller_kwarg))
    try:
        summary, records = run_episodes(
            env,
            controller,
            args.episodes,
            seed=args.seed,
            controller_name=args.controller,
            progress=not args.no_progress,
        )
    finally:
        env.close()
        close = getattr(controller, "close", None)
        if callable(close):
            close()
    usage = getattr(controller, "usage", None)
    spend = usage() if callable(usage) else None
    if args.json:
        print(json.dumps({**summary.to_dict(), "controller_usage": spend}, indent=2))
    else:
        print(format_summary(summary))
        if spend:
            print(format_controller_spend(spend, summary.episodes))
    return 0


def format_controller_spend(spend: dict, episodes: int) -> str:
    """The controller model's own calls, tokens and dollars (the ``llm`` controller's
    ``usage()``), apart from the agents' spend above it."""
    from orchenv.runner import usd

    n = max(episodes, 1)
    return (
        f"controller   {spend.get('controller_calls', 0) / n:.2f} model calls, "
        f"{spend.get('controller_prompt_tokens', 0) / n:.0f} prompt + "
        f"{spend.get('controller_completion_tokens', 0) / n:.0f} completion tokens, "
        f"{usd(spend.get('controller_cost_usd', 0.0) / n)} per episode, "
        f"{usd(spend.get('controller_cost_usd', 0.0))} total"
    )


def _cmd_audit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchenv.audit import audit
    from orchenv.controllers import parse_kwargs

    report = audit(
        args.env_id,
        env_kwargs=parse_kwargs(args.env_kwarg),
        time_limit_s=args.time_limit if args.time_limit > 0 else None,
        progress=not args.no_progress,
        best_response=not args.no_best_response,
        blind=not args.no_blind,
        **forward(args, "tasks", "split", "seed", "tolerance", "method", "budget"),
        **forward(args, "skill_levels", "blind_budget"),
        tells=args.tells,
        tell_episodes=args.tell_episodes,
        observer_steps=args.observer_steps,
    )
    text = report.to_json() if args.json else report.to_markdown()
    if args.out:
        Path(args.out).write_text(report.to_json() + "\n", encoding="utf-8")
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def _add_audit(sub: argparse._SubParsersAction) -> None:
    from orchenv.audit import (
        DEFAULT_BLIND_BUDGET,
        DEFAULT_BUDGET,
        DEFAULT_SKILL_LEVELS,
        DEFAULT_TASKS,
        DEFAULT_TIME_LIMIT_S,
        DEFAULT_TOLERANCE,
        METHODS,
    )
    from orchenv.audit_tells import DEFAULT_TELL_EPISODES

    p = sub.add_parser(
        "audit",
        help="skill reference vs blind and shortcut policies of an env (is the skill what scores?)",
        description=(
            "On sampled tasks, play the env's skill reference (skill_action) over a sweep of "
            "skill levels, the best blind choice sequence (picked on one half of the tasks, "
            "reported on the other) and shortcut strategies; flag each blind or shortcut "
            "policy whose mean return is within the tolerance of the skill reference at the "
            "realistic level. The privileged best response (a search with fork()) is reported "
            "as an upper bound only (docs/audit.md)."
        ),
    )
    p.add_argument("env_id", help="e.g. orch/MathRoute-v0 (see `orchenv list`)")
    p.add_argument(
        "--tasks", type=int, default=DEFAULT_TASKS, help="tasks sampled (default: %(default)s)"
    )
    p.add_argument("--split", help="task split (default: test when the env has one)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="flag policies within this of the skill reference's mean return at the realistic "
        "level (default: %(default)s)",
    )
    p.add_argument(
        "--skill-levels",
        type=float,
        nargs="+",
        metavar="S",
        help="skill levels of the skill reference, in [0, 1]; 0, 1 and the env's realistic "
        f"level are always added (default: {' '.join(f'{s:g}' for s in DEFAULT_SKILL_LEVELS)})",
    )
    p.add_argument(
        "--no-best-response",
        action="store_true",
        help="skip the privileged best response search (the upper bound; the expensive part)",
    )
    p.add_argument("--no-blind", action="store_true", help="skip the best blind policy search")
    p.add_argument(
        "--blind-budget",
        type=int,
        default=DEFAULT_BLIND_BUDGET,
        help="sequences per fold the best blind search may try when it cannot enumerate them "
        "all (default: %(default)s)",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="the best response's search (default: auto)",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help="env steps of search per task (default: %(default)s)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="SECONDS",
        help="audit fewer tasks rather than run past this; 0: no limit (default: %(default)s)",
    )
    p.add_argument(
        "--env-kwarg",
        "-e",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment argument, repeatable (values parsed as JSON when possible)",
    )
    p.add_argument(
        "--tells",
        action="store_true",
        help="run the tell meter (can surface features of the agents' outputs tell whether they "
        "are right?) and, where drafts are judged, the surface-verifier shortcut",
    )
    p.add_argument(
        "--tell-episodes",
        type=int,
        default=DEFAULT_TELL_EPISODES,
        help="train episodes of the tell meter (default: %(default)s)",
    )
    p.add_argument(
        "--observer-steps",
        type=int,
        default=0,
        metavar="N",
        help="train the observer's reference (MaskablePPO, N env steps on the train split; "
        "needs the train extra); 0: skip (default)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_audit)


def _cmd_baselines(args: argparse.Namespace) -> int:
    import dataclasses

    from orchenv.controllers import parse_kwargs
    from orchenv.runner import format_yardsticks, yardsticks

    rows, report = yardsticks(
        args.env_id,
        tasks=args.tasks,
        split=args.split,
        seed=args.seed,
        env_kwargs=parse_kwargs(args.env_kwarg),
        best_response=not args.no_best_response,
        progress=not args.no_progress,
        time_limit_s=args.time_limit if args.time_limit > 0 else None,
    )
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        print(format_yardsticks(rows, report))
    return 0


def _add_baselines(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "baselines",
        help="the yardsticks a learner should be compared with: random valid, best fixed plan, "
        "skill at the realistic level, upper bound",
        description=(
            "On the same sampled tasks: random valid choices, the best fixed plan (the audit's "
            "best blind policy, picked on one half of the tasks and scored on the other), the "
            "paper's skill at the env's realistic level and the privileged upper bound, each "
            "with its 95% interval, on the env's own reward (-e reward=... for another). "
            "Needs an env with action_choices() (docs/audit.md)."
        ),
    )
    p.add_argument("env_id", help="e.g. orch/MathRoute-v0, or MODULE:ENV_ID")
    p.add_argument("--tasks", type=int, default=100, help="tasks sampled (default: %(default)s)")
    p.add_argument("--split", help="task split (default: test when the env has one)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument(
        "--no-best-response", action="store_true", help="skip the upper bound (the slow part)"
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="use fewer tasks rather than run past this; 0: no limit (default)",
    )
    p.add_argument(
        "--env-kwarg",
        "-e",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment argument, repeatable (values parsed as JSON when possible)",
    )
    p.add_argument("--json", action="store_true", help="print the yardsticks as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_baselines)


def _cmd_view(args: argparse.Namespace) -> int:
    from orchenv.view import write_view

    path = write_view(
        args.run_dir,
        out=args.out,
        compare=args.compare,
        replay=not args.no_replay,
        max_episodes=args.max_episodes,
        progress=not args.no_progress,
    )
    print(f"wrote {path} (open it in a browser; it needs no server)")
    return 0


def _add_view(sub: argparse._SubParsersAction) -> None:
    from orchenv.view import DEFAULT_MAX_EPISODES

    p = sub.add_parser(
        "view",
        help="a static HTML viewer of a run's episodes (turns, replies, rewards, costs)",
        description=(
            "Write a self-contained HTML page of an `orchenv eval` run: its episodes with "
            "filters by outcome, agent and reward, and each episode's turns (observation, "
            "action, agents' replies, reward, cost), rebuilt by replaying the logged actions "
            "when every agent is simulated (nothing is called again otherwise). --compare "
            "pairs two runs' episodes by seed (the same tasks)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="an `orchenv eval --out` directory")
    p.add_argument("--compare", metavar="OTHER_RUN_DIR", help="a second run to pair with")
    p.add_argument("--out", metavar="FILE", help="the page to write (default: RUN_DIR/view.html)")
    p.add_argument("--no-replay", action="store_true", help="show the logged actions only")
    p.add_argument(
        "--max-episodes",
        type=int,
        default=DEFAULT_MAX_EPISODES,
        help="the first N episodes (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_view)


def _cmd_init(args: argparse.Namespace) -> int:
    from orchenv.scaffold import env_id_of, scaffold

    root = scaffold(args.name, args.out)
    env_id = env_id_of(args.name)
    print(
        f"wrote {root} ({env_id}). Next:\n"
        f"  cd {root} && python -m pytest tests        # orchenv's checks and the audit\n"
        f"  orchenv audit {args.name}:{env_id} --tasks 16  # from {root}, or after pip install -e ."
    )
    return 0


def _add_init(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold a new env package (env, skill action, tests, openenv.yaml)",
        description=(
            "Write NAME/ (a package registering NAME/Echo-v0: a minimal env with a discrete "
            "view, a skill reference and an audit strategy; tests running orchenv's shared "
            "checks and the audit; openenv.yaml; pyproject.toml). It passes check_orch_env "
            "and `orchenv audit` as generated; replace the protocol with yours."
        ),
    )
    p.add_argument("name", metavar="NAME", help="the package's import name (lower-case)")
    p.add_argument("--out", default=".", metavar="DIR", help="where to create NAME/")
    p.set_defaults(func=_cmd_init)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from orchenv.reproduce import reproduce, write_index

    if args.seed_id == "index":
        changed = write_index()
        print("updated " + (", ".join(map(str, changed)) or "nothing (already current)"))
        return 0
    from pathlib import Path

    from orchenv.reproduce import resolve_seed

    sid = resolve_seed(args.seed_id)
    if sum(x is not None for x in (args.report, args.out)) + bool(args.update_docs) > 1:
        raise OrchEnvError("give one of --report FILE, --out DIR and --update-docs")
    runs = (
        Path(args.runs)
        if args.runs
        else Path("runs/reproduce") / (f"{sid}-quick" if args.quick else sid)
    )
    if args.report is not None:
        report = Path(args.report)
    elif args.update_docs:
        report = Path("docs/reproduction") / f"{sid}.md"  # the documented page
    else:  # never the checkout's docs unless asked
        report = Path(args.out if args.out is not None else runs) / f"{sid}.md"
    page = reproduce(
        args.seed_id,
        quick=args.quick,
        runs_dir=runs,
        report=report,
        progress=not args.no_progress,
        seeds=args.seeds,
    )
    print(f"wrote {page} and {page.with_suffix('.json')}")
    return 0


def _add_reproduce(sub: argparse._SubParsersAction) -> None:
    from orchenv.registry import REPRODUCTION_TITLES

    p = sub.add_parser(
        "reproduce",
        help="rerun a seed paper's tables and figures in simulation and write its page",
        description=(
            "Run a seed paper's experiments in simulation (resumable), then write a page "
            "with the paper's numbers and orchenv's side by side, with 95% intervals. Seeds: "
            + "; ".join(f"{k} {v}" for k, v in sorted(REPRODUCTION_TITLES.items()))
        ),
    )
    p.add_argument(
        "seed_id",
        metavar="SEED",
        help="000 ... 004 (see docs/reproduction/), or 'index' to rewrite the counts tables in "
        "README.md and docs/reproduction/README.md from the pages' JSON",
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes (minutes; for tests and smoke runs)"
    )
    p.add_argument(
        "--runs",
        metavar="DIR",
        help="where results are stored and resumed from (default: runs/reproduce/SEED[-quick])",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write the page (SEED.md, .json, figures/) in DIR (default: the --runs folder)",
    )
    p.add_argument(
        "--update-docs",
        action="store_true",
        help="write the documented page, docs/reproduction/SEED.md, in this checkout",
    )
    p.add_argument("--report", metavar="FILE", help="the page to write (a file; overrides --out)")
    p.add_argument("--seeds", type=int, nargs="+", help="run seeds (default: 0 1 2; quick: 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=_cmd_reproduce)


def import_modules(names: Sequence[str]) -> None:
    """Import each module of ``--import MODULE`` (an outside package registering its ids with
    ``gymnasium.register`` on import). A module that cannot be imported is an
    ``OrchEnvError`` naming it."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise OrchEnvError(
                f"--import {name}: cannot import it ({exc}); install the package that "
                "registers your env, or put its folder on PYTHONPATH"
            ) from exc


def resolve_env_id(env_id: str) -> str:
    """``env_id`` in Gymnasium's ``"module:ENV_ID"`` form: import ``module`` (which registers
    the id) and return ``ENV_ID``; a plain id is returned as it is."""
    module, sep, rest = env_id.partition(":")
    if not sep:
        return env_id
    if not module or not rest:
        raise OrchEnvError(
            f"env id {env_id!r}: expected ENV_ID or MODULE:ENV_ID (Gymnasium's form, e.g. "
            "mypkg:mypkg/Echo-v0)"
        )
    import_modules([module])
    return rest


def _pre_import(argv: Sequence[str]) -> list[str]:
    """The ``--import MODULE`` values anywhere in ``argv`` (before or after the command), so
    plug-in commands and ids register before the parser is built."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--import" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--import="):
            found.append(arg.partition("=")[2])
    return found


def _strip_imports(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == "--import" and i + 1 < len(argv):
            skip = True
        elif not arg.startswith("--import="):
            out.append(arg)
    return out


def _default_pool(env_id: str) -> str:
    """The pool preset an env id is registered with (for --record / --replay without --pool)."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise OrchEnvError(f"cannot make {env_id!r}: {exc}. See `orchenv list`.") from exc
    pool = spec.kwargs.get("pool", "system1")
    if not isinstance(pool, str):
        raise OrchEnvError(f"{env_id!r} is registered with a built pool; pass --pool")
    return pool


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orchenv", description=__doc__)
    parser.add_argument("--version", action="version", version=f"orchenv {orchenv.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable; anywhere on the line), e.g. the package that "
        "registers your own env ids; an id may also be given as MODULE:ENV_ID",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser(
        "list", help="registered environments, pools, task sources, controllers"
    )
    p_list.set_defaults(func=_cmd_list)

    p_run = sub.add_parser("run", help="run a controller on an environment and print a summary")
    add_env_controller_arguments(p_run)
    p_run.add_argument(
        "--episodes", type=int, default=100, help="number of episodes (default: 100)"
    )
    p_run.add_argument("--seed", type=int, default=0, help="seed of the first reset (default: 0)")
    p_run.add_argument(
        "--record", metavar="FILE", help="record every agent call to this JSONL file (resumable)"
    )
    p_run.add_argument("--replay", metavar="FILE", help="answer agent calls from a recorded file")
    p_run.add_argument(
        "--replay-mode",
        choices=["strict", "fallthrough"],
        default="strict",
        help="on a missing record: fail (strict) or call the live backend (fallthrough)",
    )
    p_run.add_argument("--json", action="store_true", help="print the summary as JSON")
    p_run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p_run.set_defaults(func=_cmd_run)
    add_subcommands(sub)  # eval, leaderboard (orchenv.eval.cli)
    _add_audit(sub)
    _add_baselines(sub)
    _add_view(sub)
    _add_init(sub)
    _add_reproduce(sub)
    __import__("orchenv.demos").demos.add_subcommands(sub)  # demos, sft (issue 31)
    __import__("orchenv.verify.cli").verify.cli.add_subcommands(sub)  # submit, verify
    __import__("orchenv.serve.cli").serve.cli.add_subcommands(sub)  # serve (issue 29)
    from orchenv.registry import CLI_COMMANDS

    for name in CLI_COMMANDS:  # plug-ins, e.g. `train grpo` from orchenv.agents (parser only)
        CLI_COMMANDS.resolve(name)(sub)
    return parser


def _stdout_gone() -> bool:
    """Whether our stdout is a pipe whose reader went away (``poll`` reports ``POLLERR``)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR and POLLHUP are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def console_main() -> int:
    """The ``orchenv`` executable (and ``python -m orchenv``): ``main``, ending quietly with
    the SIGPIPE status (141) when the reader of stdout goes away (``orchenv list | head``).

    SIGPIPE keeps Python's setting (ignored): a write to a closed pipe raises
    ``BrokenPipeError`` where it happens, so a write into a sandboxed or grading child that
    died is handled there; the default action used to kill the whole evaluation silently,
    exit 141 (issue 28). Only a broken stdout ends the command."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    if code == 141 or _stdout_gone():
        with contextlib.suppress(OSError, ValueError):  # no second error at interpreter exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    imports = _pre_import(argv)
    try:
        import_modules(imports)
    except OrchEnvError as exc:
        print(f"orchenv: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(_strip_imports(argv))
    args.imports = imports
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if getattr(args, "episodes", 1) < 1:
        parser.error("--episodes must be at least 1")
    try:
        if isinstance(getattr(args, "env_id", None), str):
            args.env_id = resolve_env_id(args.env_id)
        return int(args.func(args))
    except OrchEnvError as exc:
        print(f"orchenv: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output folder or file the OS refuses (read-only, disk full)
        if isinstance(exc, BrokenPipeError) and _stdout_gone():
            raise  # our reader went away: console_main ends quietly
        print(
            f"orchenv: error: {exc}. Check the path's permissions and free space", file=sys.stderr
        )
        return 2


if __name__ == "__main__":
    sys.exit(console_main())
