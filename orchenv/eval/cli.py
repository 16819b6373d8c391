"""``orchenv eval`` and ``orchenv leaderboard``: the subcommands ``orchenv.cli`` wires in."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from orchenv.cliargs import forward

logger = logging.getLogger(__name__)


def add_env_controller_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``orchenv run`` and ``orchenv eval`` share: the env id, the controller,
    repeatable ``-c`` / ``-e`` KEY=VALUE arguments (for ``controllers.parse_kwargs``),
    ``--pool`` and ``--split``.
    """
    parser.add_argument("env_id", help="e.g. orch/MathRoute-v0 (see `orchenv list`)")
    parser.add_argument(
        "--controller",
        default=None,
        help="controller name (default: the env's own: 'random' on the MathRoute ids, "
        "'env-random', random valid moves, elsewhere)",
    )
    for flags, what in (
        (("--controller-kwarg", "-c"), "controller"),
        (("--env-kwarg", "-e"), "environment"),
    ):
        parser.add_argument(
            *flags,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"{what} argument, repeatable (values parsed as JSON when possible)",
        )
    parser.add_argument(
        "--pool", help="pool preset (system1, system2) or a pool file (.json/.yaml)"
    )
    parser.add_argument("--split", help="task split (default: the env's)")


def add_subcommands(sub: Any) -> None:
    """Add ``eval`` and ``leaderboard`` to the ``orchenv`` subparsers object ``sub``."""
    p_eval = sub.add_parser(
        "eval",
        help="evaluate a controller over seeds x episodes into a resumable run directory",
        description=(
            "Play EPISODES episodes per seed, log each to OUT/episodes.jsonl as it finishes, "
            "then write OUT/summary.json. Rerunning the same command after a crash resumes "
            "where it stopped; episode i of seed s always gets the same task."
        ),
    )
    add_env_controller_arguments(p_eval)
    p_eval.add_argument(
        "--episodes", type=int, default=100, help="episodes per seed (default: 100)"
    )
    p_eval.add_argument(
        "--seeds", type=int, nargs="+", default=[0], metavar="SEED", help="seeds (default: 0)"
    )
    p_eval.add_argument("--out", required=True, metavar="DIR", help="run directory")
    p_eval.add_argument(
        "--overwrite", action="store_true", help="discard a previous run in DIR and start over"
    )
    p_eval.add_argument(
        "--fsync-every",
        type=int,
        default=0,
        metavar="K",
        help="fsync the log every K episodes (1: each one; 0: off, the default)",
    )
    p_eval.add_argument(
        "--fsync-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="fsync the log once this many seconds have passed since the last fsync, checked "
        "as each episode ends (default: 1; 0: off; always at the end). A killed "
        "process never loses a finished episode; a power cut loses at most the unsynced tail",
    )
    p_eval.add_argument(
        "--retries",
        type=int,
        default=2,
        metavar="N",
        help="play an episode in which a backend failed again, whole, up to N more times "
        "before stopping (default: 2). Calls that succeeded are kept in OUT/journal/ and "
        "never bought twice, also when the same command is rerun later",
    )
    p_eval.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="play up to N episodes at once on one event loop, their live agent calls in "
        "flight together (default: 1). Results equal a sequential run's",
    )
    p_eval.add_argument("--json", action="store_true", help="print the pooled summary as JSON")
    p_eval.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p_eval.set_defaults(func=cmd_eval)

    p_board = sub.add_parser(
        "leaderboard",
        help="build a leaderboard (markdown, HTML, plots) from eval run directories",
        description=(
            "Ranking: within each (env, pool, split, kwargs) group (or the runs of a board "
            "spec, --board), controllers that do not read ground truth first, by the env's "
            "primary metric (the return unless the env names another; OrchMAS: F1 score), "
            "ties by lower mean cost per episode; privileged controllers (marked †) after "
            "them. Only verdicts signed with --key (or verified here, --verify) and "
            "re-executed count as verified."
        ),
    )
    p_board.add_argument("runs", nargs="+", metavar="DIR", help="run directories of `orchenv eval`")
    p_board.add_argument("--out", required=True, metavar="BOARD", help="output directory")
    p_board.add_argument("--title", default="orchenv leaderboard", help="page title")
    p_board.add_argument(
        "--no-plots", action="store_true", help="skip the PNG plots (no matplotlib needed)"
    )
    p_board.add_argument(
        "--key",
        metavar="FILE",
        help="the board's key (`orchenv board key`): only verdicts signed with it are trusted",
    )
    p_board.add_argument(
        "--board",
        metavar="FILE",
        help="a board spec (`orchenv board init`): runs outside it are kept out, with the reason",
    )
    p_board.add_argument(
        "--verify",
        action="store_true",
        help="verify every bundle here instead of reading its verified.json",
    )
    p_board.add_argument(
        "--oracle-episodes",
        type=int,
        default=None,
        metavar="N",
        help="with --verify: episodes searched by the oracle check",
    )
    p_board.set_defaults(func=cmd_leaderboard)
    from orchenv.eval.board_cli import add_subcommands as add_board

    add_board(sub)


def cmd_eval(args: argparse.Namespace) -> int:
    import json

    from orchenv.controllers import default_controller, parse_kwargs
    from orchenv.eval.harness import EvalConfig, evaluate
    from orchenv.runner import format_summary

    config = EvalConfig(
        controller=args.controller or default_controller(args.env_id),
        controller_kwargs=parse_kwargs(args.controller_kwarg),
        env_kwargs=parse_kwargs(args.env_kwarg),
        seeds=list(args.seeds),
        **forward(args, "env_id", "pool", "split", "episodes"),
    )
    result = evaluate(
        config,
        args.out,
        progress=not args.no_progress,
        fsync_interval_s=args.fsync_interval if args.fsync_interval > 0 else None,
        **forward(args, "overwrite", "fsync_every", "retries", "concurrency"),
    )
    if args.json:
        print(json.dumps(result.summary["pooled"], indent=2))
        return 0
    pooled = result.summary["pooled"]
    print(format_summary(result.pooled))
    print(f"pool         {pooled['pool']}   split {pooled['split']}")
    if len(result.per_seed) > 1:
        spread = result.summary["accuracy_across_seeds"]
        accs = ", ".join(f"{s}: {r.accuracy:.3f}" for s, r in result.per_seed.items())
        print(f"seeds        {accs}  (mean {spread['mean']:.3f}, sd {spread['std']:.3f})")
    print(f"written      {result.out_dir} ({result.ran} episodes run now)")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from orchenv.eval.board import read_spec
    from orchenv.eval.leaderboard import build_leaderboard
    from orchenv.verify.keys import read_key

    board = build_leaderboard(
        args.runs,
        args.out,
        title=args.title,
        plots=not args.no_plots,
        key=read_key(args.key) if args.key else None,
        verify=args.verify,
        oracle_episodes=args.oracle_episodes,
        spec=read_spec(args.board) if args.board else None,
    )
    for path in board.files:
        print(path)
    return 0
