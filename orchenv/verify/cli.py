"""``orchenv submit RUN_DIR --out BUNDLE`` and ``orchenv verify BUNDLE``."""

from __future__ import annotations

import argparse
from typing import Any

from orchenv.cliargs import forward


def add_subcommands(sub: Any) -> None:
    """Add ``submit`` and ``verify`` to the ``orchenv`` subparsers object ``sub``."""
    p = sub.add_parser(
        "submit",
        help="write a submission bundle of an `orchenv eval` run (for `orchenv verify`)",
        description=(
            "Copy a finished run (run.json, episodes.jsonl, summary.json), its pool and every "
            "recorded agent call into BUNDLE, with digests binding them. A run whose agents are "
            "all simulated is re-recorded from the simulator; a live run needs its recording "
            "(RUN_DIR/calls.jsonl or --calls)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished `orchenv eval --out` directory")
    p.add_argument("--out", required=True, metavar="BUNDLE", help="the bundle directory to write")
    p.add_argument("--calls", metavar="FILE", help="the run's call recording (replay format)")
    p.add_argument(
        "--reference",
        metavar="RUN_DIR",
        help="the same controller's run on another split (for the outcome-alignment check)",
    )
    p.add_argument("--reference-calls", metavar="FILE", help="the reference run's recording")
    p.add_argument("--pool-file", metavar="FILE", help="the pool file the run used")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty BUNDLE")
    p.set_defaults(func=cmd_submit)

    v = sub.add_parser(
        "verify",
        help="re-derive a submission bundle's score and cost from its recorded calls",
        description=(
            "Replay every episode of BUNDLE from the env, the submitted actions and the "
            "recorded answers; check rewards, correctness, turns, order, split, prices, cost, "
            "tokens, requests and privileged controllers; run the statistical integrity "
            "checks; write BUNDLE/verified.json and BUNDLE/verification.md. Exit status 0 "
            "when verified, 1 when a check failed."
        ),
    )
    v.add_argument("bundle", metavar="BUNDLE", help="a directory written by `orchenv submit`")
    v.add_argument("--audit", metavar="FILE", help="an `orchenv audit --json` report of the env")
    v.add_argument(
        "--oracle-episodes",
        type=int,
        default=None,
        metavar="N",
        help="episodes searched by the per-query oracle check (default 200; 0: skip)",
    )
    v.add_argument(
        "--oracle-seconds",
        type=float,
        default=None,
        metavar="S",
        help="wall-clock budget of the oracle check; past it: 'not checked' (default 20)",
    )
    v.add_argument(
        "--rerun",
        action="store_true",
        help="re-execute the registered controller and require the submitted actions "
        "(only re-executed bundles rank on a board)",
    )
    v.add_argument(
        "--key",
        metavar="FILE",
        help="the board's key (`orchenv board key`): sign verified.json with it (HMAC-SHA256)",
    )
    v.add_argument(
        "--board",
        metavar="FILE",
        help="with --rerun, --key and --out: play the bundle's Python entry point "
        "(entry_point.json) in a bubblewrap sandbox against a sealed referee of this board; "
        "the referee's signed record in --out is the row (docs/board-referee.md)",
    )
    v.add_argument("--out", metavar="DIR", help="--board: the new folder of the signed record")
    v.add_argument(
        "--task-file",
        metavar="FILE",
        help="--board: the board's private task file (boards whose sealed plan names one)",
    )
    v.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="--board: seconds the sandboxed entry point may play in all (default 600)",
    )
    v.add_argument(
        "--endpoint-key-env",
        metavar="VAR",
        help="--board, for a bundle that names an OpenAI-compatible endpoint: the environment "
        "variable holding its API key (the recording proxy sends it; it never enters the "
        "sandbox)",
    )
    v.add_argument(
        "--endpoint-allow-private",
        action="store_true",
        help="--board: let the recording proxy connect to a loopback, private or link-local "
        "address (an endpoint on the maintainer's own network); off: public addresses only",
    )
    v.add_argument(
        "--wheelhouse",
        metavar="DIR",
        help="--board, for a bundle with pinned requirements: install them from this folder "
        "of wheels (pip --no-index --find-links DIR --require-hashes --only-binary=:all:)",
    )
    v.add_argument(
        "--index-url",
        metavar="URL",
        help="--board, for a bundle with pinned requirements: install them from this index "
        "instead (the maintainer's; hashes still required)",
    )
    v.add_argument("--json", action="store_true", help="print verified.json")
    v.set_defaults(func=cmd_verify)


def cmd_submit(args: argparse.Namespace) -> int:
    from orchenv.verify.bundle import write_bundle

    out = write_bundle(
        args.run_dir,
        args.out,
        **forward(args, "calls", "reference", "reference_calls", "pool_file", "overwrite"),
    )
    print(f"bundle written to {out}; check it with `orchenv verify {out}`")
    return 0


def cmd_rerun_sandboxed(args: argparse.Namespace) -> int:
    """``orchenv verify BUNDLE --rerun --board B --key K --out DIR`` (orchenv.verify.sandbox)."""
    from orchenv.error import ConfigError
    from orchenv.verify.sandbox import rerun_entry_point

    if not (args.rerun and args.key and args.out):
        raise ConfigError(
            "--board re-executes the bundle's entry point against the board's referee: give "
            "--rerun, --key FILE (the board's key) and --out DIR (the signed record)"
        )
    result = rerun_entry_point(
        args.bundle,
        args.board,
        args.key,
        args.out,
        timeout_s=args.timeout,
        task_file=args.task_file,
        endpoint_key_env=args.endpoint_key_env,
        endpoint_allow_private=args.endpoint_allow_private,
        wheelhouse=args.wheelhouse,
        index_url=args.index_url,
    )
    how = "timed out" if result.exit_code is None else f"exit status {result.exit_code}"
    print(result.stderr_tail.rstrip()[-2000:])
    print(
        f"\n{result.status.upper()}: the sandboxed entry point ended ({how}) after "
        f"{result.seconds:.1f} s; the referee's signed record is {result.out} (rank it with "
        f"`orchenv leaderboard {result.out} --board {args.board} --key {args.key}`)"
    )
    if result.calls is not None:
        print(f"{result.note}: {result.calls} calls in {result.out}/endpoint_calls.jsonl")
    elif result.note:
        print(result.note)
    return 0 if result.status == "complete" else 1


def cmd_verify(args: argparse.Namespace) -> int:
    import json

    if args.board:
        return cmd_rerun_sandboxed(args)

    from orchenv.eval.rows import fmt_money
    from orchenv.verify.checks import VERIFIED_FILE, verify_bundle
    from orchenv.verify.keys import read_key

    key = read_key(args.key) if args.key else None
    report = verify_bundle(
        args.bundle,
        audit_file=args.audit,
        oracle_episodes=args.oracle_episodes,
        key=key,
        oracle_seconds=args.oracle_seconds,
        rerun=args.rerun,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for c in report.checks:
            print(f"{c.verdict:<12} {c.name:<18} {c.reason}")
        s = report.score
        if s:
            lo, hi = s["accuracy_ci95"]
            print(
                f"\n{report.verdict.upper()}: accuracy {s['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] "
                f"over {s['episodes']} episodes, ${fmt_money(s['mean_cost_usd'])} per episode "
                f"({report.seconds:.1f} s); report in {args.bundle}/{VERIFIED_FILE}"
            )
        else:
            print(f"\n{report.verdict.upper()}; report in {args.bundle}/{VERIFIED_FILE}")
    return 0 if report.verified else 1
