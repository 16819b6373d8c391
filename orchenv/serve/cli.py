"""``orchenv serve ENV_ID``: one orchenv env behind an OpenEnv 0.10 server (docs/serve.md)."""

from __future__ import annotations

import argparse


def _cmd_serve(args: argparse.Namespace) -> int:
    from orchenv.cliargs import forward
    from orchenv.controllers import parse_kwargs
    from orchenv.error import ConfigError
    from orchenv.serve.app import configure_logging, serve
    from orchenv.serve.environment import ServeConfig

    if args.workers < 1 or args.max_sessions < 1:
        raise ConfigError("--workers and --max-sessions must be >= 1")
    if args.seat_timeout <= 0:
        raise ConfigError("--seat-timeout must be > 0")
    if args.fork_ttl <= 0 or args.fork_capacity < 1:
        raise ConfigError("--fork-ttl must be > 0 and --fork-capacity >= 1")
    if args.mcp and args.idle_timeout <= 0:
        raise ConfigError(
            "--mcp needs --idle-timeout > 0: an HTTP MCP session has no connection whose close "
            "would free its slot, only the idle timeout does"
        )
    if args.referee and not (args.key and args.runs):
        raise ConfigError(
            "--referee BOARD needs --key FILE (the board's key) and --runs DIR (where the "
            "signed records go); see docs/board-referee.md"
        )
    if (args.key or args.runs or args.task_file) and not args.referee:
        raise ConfigError("--key, --runs and --task-file are for --referee BOARD")
    configure_logging(args.verbose)
    config = ServeConfig(
        env_kwargs=parse_kwargs(args.env_kwarg),
        **forward(
            args,
            *("env_id", "pool", "split", "record", "replay", "replay_mode", "seed"),
            *("max_sessions", "workers", "inline", "ws_deflate", "sealed", "mcp", "verbose"),
        ),
        fork_ttl_s=args.fork_ttl,
        fork_capacity=args.fork_capacity,
        idle_timeout_s=args.idle_timeout if args.idle_timeout > 0 else None,
        seat_timeout_s=args.seat_timeout,
        referee_board=args.referee,
        referee_key=args.key,
        referee_runs=args.runs,
        referee_task_file=args.task_file,
    )
    serve(
        config,
        host=args.host,
        port=args.port,
        uds=args.uds,
        announce=lambda line: print(line, flush=True),
    )
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register ``orchenv serve`` on the ``orchenv`` parser."""
    p = sub.add_parser(
        "serve",
        help="serve an env over OpenEnv 0.10 (WebSocket sessions for TRL, SkyRL, torchforge)",
        description=(
            "Serve one registered env id with OpenEnv's server (openenv.core create_app): "
            "episodes live in /ws sessions (openenv's EnvClient / GenericEnvClient); "
            "reset takes seed, split, index, task_id, options, injected_state (a state's "
            "snapshot handle: fork) and, for multi-agent envs, agent=, group= and "
            "group_token= (seats). Fork handles are opaque and expire; the episode stays "
            "on the server. See docs/serve.md."
        ),
    )
    p.add_argument("env_id", metavar="ENV_ID", help="a registered id (see `orchenv list`)")
    p.add_argument(
        "-e",
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an env argument (VALUE read as JSON when it parses); repeatable",
    )
    p.add_argument("--pool", help="pool preset or pool file (default: the id's)")
    p.add_argument("--split", help="the split episodes draw tasks from (default: the env's)")
    p.add_argument("--record", metavar="FILE", help="record every agent call to this JSONL file")
    p.add_argument("--replay", metavar="FILE", help="answer agent calls from a recorded file")
    p.add_argument("--replay-mode", choices=["strict", "fallthrough"], default="strict")
    p.add_argument(
        "--seed",
        type=int,
        help="base seed: a session's first reset without a seed uses SEED + its session number",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes; sessions stay on one (default 1)"
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=64,
        help="concurrent sessions per worker process (OpenEnv's max_concurrent_envs; beyond "
        "it a new session gets CAPACITY_REACHED) (default: 64)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        help="close a session idle this many seconds (0: never) (default: 600)",
    )
    p.add_argument(
        "--seat-timeout",
        type=float,
        default=60.0,
        help="how long a seat waits for the other seats of its group (default: 60)",
    )
    p.add_argument(
        "--inline",
        action="store_true",
        help="step on the event loop, no thread hop per message: less CPU per step for "
        "CPU-only envs (simulated / replayed agents; see benchmarks/README.md for "
        "throughput); never with live backends (a network wait stalls every session of "
        "the worker)",
    )
    p.add_argument(
        "--ws-deflate",
        action="store_true",
        help="compress WebSocket messages (permessage-deflate; off by default: it costs "
        "more CPU per step than the env on a local network)",
    )
    p.add_argument(
        "--sealed",
        action="store_true",
        help="no fork: state carries no snapshot and reset refuses injected_state (sealed "
        "evaluation servers)",
    )
    p.add_argument(
        "--referee",
        metavar="BOARD",
        help="be the referee of this board (`orchenv board init` file with a sealed plan): "
        "a session's first reset(submission=NAME, ticket=T) opens a submission (tickets: "
        "orchenv board ticket NAME --board B --key K); the server assigns "
        "the sealed tasks, each once, and writes and signs the record under --runs "
        "(implies --sealed; docs/board-referee.md)",
    )
    p.add_argument("--key", metavar="FILE", help="--referee: the board's key file")
    p.add_argument("--runs", metavar="DIR", help="--referee: the folder of the signed records")
    p.add_argument(
        "--task-file",
        metavar="FILE",
        help="--referee: the board's private task file (boards whose sealed plan names one)",
    )
    p.add_argument(
        "--uds",
        metavar="PATH",
        help="listen on this Unix socket instead of --host/--port",
    )
    p.add_argument(
        "--fork-ttl",
        type=float,
        default=600.0,
        help="seconds a fork handle (a state's snapshot) stays valid (default: 600)",
    )
    p.add_argument(
        "--fork-capacity",
        type=int,
        default=4096,
        help="fork handles the server keeps at once; the oldest go first (default: 4096)",
    )
    p.add_argument(
        "--mcp",
        action="store_true",
        help="allow HTTP MCP sessions (openenv/session/create on POST /mcp); off by default: "
        "each holds a --max-sessions slot until --idle-timeout closes it",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log each session's resets, steps and closes (INFO, on stderr)",
    )
    p.set_defaults(func=_cmd_serve)
