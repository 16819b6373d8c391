"""``orchenv board key | init | play | ticket``: the command-line side of ``orchenv.eval.board``
(the board spec, its sealed plan and the maintainer's key; docs/leaderboard.md)."""

from __future__ import annotations

import argparse
from typing import Any

from orchenv.eval.board import make_spec, play_sealed, read_spec, write_spec


def add_subcommands(sub: Any) -> None:
    """Add ``board`` (``key``, ``init``, ``play``, ``ticket``) to the ``orchenv`` subparsers object ``sub``."""
    p = sub.add_parser(
        "board",
        help="maintain a leaderboard: its signing key and its spec",
        description="Maintainer commands of a leaderboard (docs/leaderboard.md).",
    )
    actions = p.add_subparsers(dest="board_command", required=True)
    k = actions.add_parser(
        "key",
        help="write a new random board key (HMAC-SHA256) to FILE, mode 0600",
        description=(
            "The key signs verdicts (`orchenv verify BUNDLE --key FILE`); the board trusts "
            "only verdicts signed with it (`orchenv leaderboard --key FILE`). Keep it out of "
            "every bundle and repository."
        ),
    )
    k.add_argument("file", metavar="FILE", help="where to write the key (must not exist)")
    k.set_defaults(func=cmd_key)
    i = actions.add_parser(
        "init",
        help="write a board spec: env, kwargs, pool (preset or env-built) and hash, split, "
        "metric, seed plans",
        description=(
            "Write the board file that `orchenv leaderboard --board FILE` groups runs by: a "
            "run with other env kwargs, another pool (or an edited pool.json), another split or "
            "another seed plan is kept out of the board's group, with the reason."
        ),
    )
    i.add_argument("env_id", help="e.g. orch/MathRoute-v0")
    i.add_argument(
        "--pool",
        required=True,
        help="a shipped pool preset (orchenv list), or the name of the pool the env builds "
        "itself (e.g. multihop for MultihopQA, none for WebShop): the spec then holds the "
        "hashes of the pool the env builds under the board's kwargs",
    )
    i.add_argument("--split", required=True, help="the split every run plays")
    i.add_argument(
        "-e", "--env-kwarg", action="append", default=[], metavar="K=V", help="env kwargs"
    )
    i.add_argument("--dev-seeds", type=int, nargs="+", default=[0], help="public dev seeds")
    i.add_argument("--episodes", type=int, default=100, help="dev episodes per seed")
    i.add_argument("--sealed-episodes", type=int, default=0, help="episodes of the sealed plan")
    i.add_argument("--key", metavar="FILE", help="the maintainer's key (for the sealed plan)")
    i.add_argument(
        "--sealed-task-file",
        metavar="FILE",
        help="a private task file for the sealed plan (file-based task sources): only its "
        "sha256 enters the spec; `board play --task-file FILE` reads it",
    )
    i.add_argument(
        "--task-file-kwarg",
        default="path",
        metavar="NAME",
        help="the task-source argument the private file fills (default: path)",
    )
    i.add_argument("--out", required=True, metavar="FILE", help="the board file to write")
    i.set_defaults(func=cmd_init)
    s = actions.add_parser(
        "play",
        help="re-execute a submission's registered controller on the board's sealed plan",
        description=(
            "The maintainer plays the submitted controller (registered name and kwargs from "
            "the bundle's run.json) on the sealed plan: seeds and simulated-backend seed "
            "derived from the maintainer's key. Writes an `orchenv eval` run directory with a "
            "signed sealed.json; `orchenv leaderboard --board FILE --key FILE` ranks it."
        ),
    )
    s.add_argument("bundle", metavar="BUNDLE", help="a submission bundle (orchenv submit)")
    s.add_argument("--board", required=True, metavar="FILE", help="the board spec")
    s.add_argument("--key", required=True, metavar="FILE", help="the maintainer's key")
    s.add_argument("--out", required=True, metavar="DIR", help="the sealed run directory")
    s.add_argument(
        "--task-file",
        metavar="FILE",
        help="the board's private task file (its sha256 must be the spec's)",
    )
    s.set_defaults(func=cmd_play)
    t = actions.add_parser(
        "ticket",
        help="print the referee tickets that admit submissions NAME... (orchenv serve --referee)",
        description=(
            "A refereed board (`orchenv serve --referee BOARD --key K`) admits a submission "
            "only with its ticket: an HMAC of the name under the board's key. Give each "
            "submitter one ticket per board; their controller opens its submission with "
            "reset(submission=NAME, ticket=TICKET) (docs/board-referee.md)."
        ),
    )
    t.add_argument("names", nargs="+", metavar="NAME", help="submission names")
    t.add_argument("--board", required=True, metavar="FILE", help="the board spec")
    t.add_argument("--key", required=True, metavar="FILE", help="the maintainer's key")
    t.set_defaults(func=cmd_ticket)


def cmd_key(args: argparse.Namespace) -> int:
    from orchenv.verify.keys import write_key

    path = write_key(args.file)
    print(f"board key written to {path} (mode 0600); keep it private")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from orchenv.verify.keys import read_key

    spec, key = read_spec(args.board), read_key(args.key)
    out = play_sealed(args.bundle, spec, key, args.out, task_file=args.task_file)
    print(f"sealed run written to {out}")
    return 0


def cmd_ticket(args: argparse.Namespace) -> int:
    """The referee's own ``ticket`` command (it checks the names and that the key is the
    board's before issuing anything)."""
    from orchenv.serve.referee import main

    return main(["ticket", *args.names, "--board", args.board, "--key", args.key])


def cmd_init(args: argparse.Namespace) -> int:
    from orchenv.controllers import parse_kwargs
    from orchenv.verify.keys import read_key

    spec = make_spec(
        args.env_id,
        pool=args.pool,
        split=args.split,
        env_kwargs=parse_kwargs(args.env_kwarg),
        dev_seeds=args.dev_seeds,
        dev_episodes=args.episodes,
        sealed_episodes=args.sealed_episodes,
        key=read_key(args.key) if args.key else None,
        sealed_task_file=args.sealed_task_file,
        task_file_kwarg=args.task_file_kwarg,
    )
    path = write_spec(args.out, spec)
    print(f"board spec {spec['spec_sha256'][:12]} written to {path}")
    return 0
