"""Boards: ``orchenv board key FILE`` (the maintainer's signing key) and, later, the board
spec. See docs/leaderboard.md."""

from __future__ import annotations

import argparse
from typing import Any


def add_subcommands(sub: Any) -> None:
    """Add ``board`` (with ``key``) to the ``orchenv`` subparsers object ``sub``."""
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


def cmd_key(args: argparse.Namespace) -> int:
    from orchenv.verify.keys import write_key

    path = write_key(args.file)
    print(f"board key written to {path} (mode 0600); keep it private")
    return 0
