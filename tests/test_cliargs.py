"""``orchenv.cliargs.forward``: a parsed command line's options as keyword arguments."""

from __future__ import annotations

import argparse

import pytest

from orchenv.cliargs import forward


def parsed(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--pool-file")
    return parser.parse_args(argv)


def test_forward_passes_the_named_options_under_their_argparse_names():
    args = parsed(["--max-steps", "7"])
    assert forward(args, "max_steps", "pool_file") == {"max_steps": 7, "pool_file": None}
    assert forward(args) == {}


def test_forward_names_an_option_the_parser_lacks():
    with pytest.raises(TypeError, match=r"no option\(s\) max_step; it has max_steps, pool_file"):
        forward(parsed([]), "max_step")
