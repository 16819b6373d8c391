"""Small helpers shared by the ``orchenv`` subcommands' handlers.

Written by hand: argparse has no call that hands a parsed command line's options to a
function as keyword arguments of the same names, and each subcommand handler did it by
hand (``max_steps=args.max_steps, epochs=args.epochs, ...``).
"""

from __future__ import annotations

import argparse
from typing import Any


def forward(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options ``names`` of ``args``, as keyword arguments of the same names.

    For a handler whose function takes the options under their argparse names
    (``--max-steps`` is ``args.max_steps`` is ``max_steps=``)::

        run_sft(args.demos, **forward(args, "max_steps", "epochs", "seed"))

    An option the parser does not define is a programming error, raised as a ``TypeError``
    that names it and the options the parser does define.
    """
    missing = [name for name in names if not hasattr(args, name)]
    if missing:
        raise TypeError(
            f"the command line has no option(s) {', '.join(missing)}; it has "
            f"{', '.join(sorted(vars(args))) or 'none'}"
        )
    return {name: getattr(args, name) for name in names}
