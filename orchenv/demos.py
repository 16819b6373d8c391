"""Demonstrations for warm starts: a controller's per-turn actions as chat-format SFT data.

``orchenv demos ENV_ID --controller NAME --episodes N --out FILE`` plays any registered
controller (a scripted baseline, a saved policy, a served model) and writes one JSON line per
turn it took: the env's own controller prompt for that turn (``info["messages"]``, exactly
what the ``llm`` controller sends) as ``prompt``, the controller's action as the assistant's
``completion``, and the episode's total ``reward``. Episodes whose reward is below
``--min-reward`` are left out, and so are turns the env refused as invalid (a demonstration of
a malformed action would teach the malformed action).

The file is in TRL's *conversational prompt-completion* format (``SFTTrainer`` reads
``{"prompt": [{"role": ..., "content": ...}, ...], "completion": [{"role": "assistant",
"content": ...}]}`` and, by default, computes the loss on the completion only, with any chat
template). The other fields (``env_id``, ``episode``, ``turn``, ``reward``, ...) ride along
and are dropped by :func:`to_sft_dataset`. ``format="messages"`` writes the conversational
language-modelling form instead (``{"messages": prompt + completion}``), for
``SFTConfig(assistant_only_loss=True)``, which needs a chat template with
``{% generation %}`` markers (TRL swaps one in for the templates it knows).

The collection loop is ours (it is ``orchenv.runner.run_episode`` that also keeps each turn's
prompt and whether the env accepted the action); the data format and the trainer are TRL's.
Files are read back through :data:`DEMO_RECORD` (``orchenv.schema``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError, SchemaError
from orchenv.schema import (
    Invalid,
    Schema,
    boolean,
    free,
    integer,
    list_of,
    name,
    number,
    one_of,
    optional,
    parse_json,
    show,
)

#: the longest message content a demonstration file may hold (a controller prompt is a few
#: thousand characters; a longer one is a broken or hostile file, not a demonstration)
MAX_CONTENT_CHARS = 1_000_000
#: the longest line :func:`load_demos` reads (a line past it is refused before parsing)
MAX_LINE_CHARS = 4 * MAX_CONTENT_CHARS
#: the formats :func:`write_demos` writes
FORMATS = ("prompt-completion", "messages")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _content(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"must be a string, got {show(value)}")
    if len(value) > MAX_CONTENT_CHARS:
        raise Invalid(f"must hold at most {MAX_CONTENT_CHARS:,} characters, got {len(value):,}")
    bad = _LONE_SURROGATE.search(value)
    if bad is not None:  # a tokenizer cannot encode it
        raise Invalid(f"holds a lone surrogate U+{ord(bad.group()):04X} at {bad.start()}")
    return value


def _short(value: Any) -> str:
    """A short string (task ids, phases): at most 1,000 characters."""
    out = _content(value)
    if len(out) > 1000:
        raise Invalid(f"must hold at most 1,000 characters, got {len(out):,}")
    return out


def _message(value: Any) -> dict[str, str]:
    return MESSAGE.validate(value, "message", error=_Nested)


class _Nested(SchemaError):
    pass


def _checked(schema_check: Any) -> Any:
    """Turn a nested ``SchemaError`` into ``Invalid`` so the outer record names the field."""

    def check(value: Any) -> Any:
        try:
            return schema_check(value)
        except _Nested as exc:
            raise Invalid(str(exc).removeprefix("message: ")) from None

    return check


#: one chat message
MESSAGE = Schema(
    "message",
    {"role": one_of("system", "user", "assistant"), "content": _content},
    required=frozenset({"role", "content"}),
)
_messages = _checked(list_of(_message))
_turn_number = integer(0, 10**9)

#: one line of a demonstrations file (either format)
DEMO_RECORD = Schema(
    "demonstration",
    {
        "prompt": _messages,
        "completion": _messages,
        "messages": _messages,
        "env_id": name,
        "controller": name,
        "task_id": optional(_short),
        "episode": _turn_number,
        "turn": _turn_number,
        "phase": optional(_short),
        "reward": number(-1e12, 1e12),
        "step_reward": number(-1e12, 1e12),
        "correct": optional(boolean),
        "seed": optional(integer(-(2**63), 2**64)),
        "meta": optional(free),
    },
    required=frozenset({"env_id", "controller", "episode", "turn", "reward"}),
)


@dataclass
class DemoStats:
    """What a collection kept and dropped."""

    episodes: int = 0
    kept_episodes: int = 0
    turns: int = 0
    kept_turns: int = 0
    invalid_turns: int = 0
    rewards: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        n = len(self.rewards)
        mean = sum(self.rewards) / n if n else float("nan")
        return {
            "episodes": self.episodes,
            "kept_episodes": self.kept_episodes,
            "turns": self.turns,
            "kept_turns": self.kept_turns,
            "invalid_turns": self.invalid_turns,
            "mean_reward": mean,
        }


def _json_safe(value: Any) -> Any:
    """A float for the JSON file (numpy scalars included); refused when not finite."""
    out = float(value)
    if not math.isfinite(out):
        raise DataError(f"the env returned a non-finite reward ({value!r}); cannot write it")
    return out


def collect_demos(
    env: Any,
    controller: Any,
    episodes: int,
    *,
    seed: int = 0,
    min_reward: float | None = None,
    env_id: str | None = None,
    controller_name: str | None = None,
    fmt: str = "prompt-completion",
    progress: bool = False,
    stats: DemoStats | None = None,
) -> Iterator[dict[str, Any]]:
    """Play ``episodes`` episodes and yield one record per accepted turn of each episode
    whose total reward is at least ``min_reward`` (all of them when None).

    Seeding matches ``orchenv run --seed``: the first reset gets ``seed``, the others
    continue the env's RNG, so the tasks are the ones ``orchenv run`` would play.
    """
    from tqdm.auto import tqdm

    from orchenv.runner import env_id_of

    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {fmt!r}")
    if not (isinstance(episodes, int) and episodes >= 1):
        raise ConfigError(f"episodes must be an integer >= 1, got {episodes!r}")
    if min_reward is not None and not math.isfinite(min_reward):
        raise ConfigError(f"min_reward must be a finite number, got {min_reward!r}")
    stats = stats if stats is not None else DemoStats()
    env_id = env_id or env_id_of(env)
    controller_name = controller_name or type(controller).__name__
    bar = tqdm(range(episodes), desc="demos", unit="ep", disable=not progress, leave=False)
    for episode in bar:
        obs, info = env.reset(seed=seed if episode == 0 else None)
        if hasattr(controller, "bind"):
            controller.bind(env.unwrapped)
        if hasattr(controller, "reset"):
            controller.reset(seed if episode == 0 else None)
        turns: list[dict[str, Any]] = []
        total = 0.0
        for turn in range(10_000):
            prompt = list(info.get("messages") or [{"role": "user", "content": obs}])
            phase = info.get("phase")
            action = controller.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            stats.turns += 1
            if info.get("invalid_action"):
                stats.invalid_turns += 1
            else:
                turns.append(
                    {
                        "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
                        "completion": [{"role": "assistant", "content": str(action)}],
                        "turn": turn,
                        "phase": None if phase is None else str(phase)[:1000],
                        "step_reward": _json_safe(reward),
                    }
                )
            if terminated or truncated:
                break
        else:
            raise DataError(f"{env_id}: an episode did not end within 10,000 steps")
        stats.episodes += 1
        stats.rewards.append(total)
        bar.set_postfix(kept=f"{stats.kept_episodes}/{stats.episodes}", refresh=False)
        if min_reward is not None and total < min_reward:
            continue
        stats.kept_episodes += 1
        correct = info.get("correct")
        for record in turns:
            stats.kept_turns += 1
            head = {
                "env_id": env_id,
                "controller": controller_name,
                "task_id": str(info.get("task_id", ""))[:1000],
                "episode": episode,
                "seed": seed,
                "reward": _json_safe(total),
                "correct": None if correct is None else bool(correct),
            }
            if fmt == "messages":
                record["messages"] = record.pop("prompt") + record.pop("completion")
            yield {**head, **record}


def write_demos(records: Iterator[dict[str, Any]], out: str | os.PathLike[str]) -> int:
    """Write ``records`` as JSON Lines to ``out`` (through a temporary file, so a crash
    leaves no half-written file behind); returns how many were written."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for record in records:
                DEMO_RECORD.validate(record, f"{path}, record {n + 1}", error=DataError)
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return n


def load_demos(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The checked records of a demonstrations file (:data:`DEMO_RECORD`, each line parsed
    with ``orchenv.schema.parse_json``); a bad line raises ``DataError`` naming file and line.
    Each record has either ``prompt`` and ``completion`` or ``messages``, and one file holds
    one format."""
    out: list[dict[str, Any]] = []
    kind = None
    try:
        fh = open(path, encoding="utf-8", errors="strict")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DataError(f"cannot read demonstrations file {path}: {exc.strerror}") from None
    with fh:
        lineno = 0
        while True:
            lineno += 1
            try:
                line = fh.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}, line {lineno}: not UTF-8 ({exc.reason})") from None
            if not line:
                break
            where = f"{path}, line {lineno}"
            if len(line) > MAX_LINE_CHARS:
                raise DataError(f"{where}: longer than {MAX_LINE_CHARS:,} characters")
            if not line.strip():
                continue
            try:
                data = parse_json(line, where)
            except SchemaError as exc:
                raise DataError(str(exc)) from None
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{where}: malformed JSON ({exc.msg} at column {exc.colno}); expected one "
                    "JSON object per line"
                ) from None
            record = DEMO_RECORD.validate(data, where, error=DataError)
            has_pc = "prompt" in record and "completion" in record
            has_m = "messages" in record
            if has_pc == has_m:
                raise DataError(
                    f"{where}: a demonstration holds either 'prompt' and 'completion' or "
                    "'messages' (one of the two formats), not " + ("both" if has_m else "neither")
                )
            this = "messages" if has_m else "prompt-completion"
            if kind is not None and this != kind:
                raise DataError(f"{where}: {this} record in a {kind} file; one format per file")
            kind = this
            completion = record.get("completion") or record["messages"][-1:]
            if not completion or completion[-1]["role"] != "assistant":
                raise DataError(f"{where}: the last message must be the assistant's action")
            out.append(record)
    if not out:
        raise DataError(f"{path}: no demonstrations in the file")
    return out


def to_sft_dataset(records_or_path: Sequence[dict[str, Any]] | str | os.PathLike[str]) -> Any:
    """A ``datasets.Dataset`` with only the columns ``SFTTrainer`` reads (``prompt`` and
    ``completion``, or ``messages``), from records or a file read by :func:`load_demos`."""
    import datasets

    if isinstance(records_or_path, (str, os.PathLike)):
        records: Sequence[dict[str, Any]] = load_demos(records_or_path)
    else:
        records = records_or_path
    keys = ("messages",) if "messages" in records[0] else ("prompt", "completion")
    return datasets.Dataset.from_list([{k: r[k] for k in keys} for r in records])


# -- the command --------------------------------------------------------------------------------
def _cmd_demos(args: Any) -> int:
    import gymnasium as gym

    from orchenv.controllers import default_controller, make_controller, parse_kwargs

    env_kwargs = parse_kwargs(args.env_kwarg)
    if args.pool:
        env_kwargs["pool"] = args.pool
    if args.split:
        env_kwargs["split"] = args.split
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    try:
        env = gym.make(args.env_id, **env_kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {args.env_id!r}: {exc}. See `orchenv list`.") from exc
    name_ = args.controller or default_controller(args.env_id)
    controller = make_controller(name_, **parse_kwargs(args.controller_kwarg))
    stats = DemoStats()
    try:
        n = write_demos(
            collect_demos(
                env,
                controller,
                args.episodes,
                seed=args.seed,
                min_reward=args.min_reward,
                env_id=args.env_id,
                controller_name=name_,
                fmt=args.format,
                progress=not args.no_progress,
                stats=stats,
            ),
            args.out,
        )
    finally:
        env.close()
        close = getattr(controller, "close", None)
        if callable(close):
            close()
    summary = {**stats.to_dict(), "records": n, "out": str(args.out)}
    print(json.dumps(summary))
    if n == 0:
        raise DataError(
            f"no demonstrations kept: {stats.episodes} episodes, mean reward "
            f"{summary['mean_reward']:.3f}, --min-reward {args.min_reward}; lower --min-reward "
            f"or use a stronger controller ({args.out} holds nothing)"
        )
    return 0


def add_subcommands(sub: Any) -> None:
    """Add ``demos`` to the ``orchenv`` subparsers object ``sub``."""
    from orchenv.eval.cli import add_env_controller_arguments

    p = sub.add_parser(
        "demos",
        help="write a controller's per-turn actions as chat-format SFT data (TRL)",
        description=(
            "Play a controller and write one JSON line per accepted turn: the env's prompt, "
            "the action as the assistant's completion, and the episode's reward. The file "
            "loads in TRL's SFTTrainer (`orchenv sft`). See docs/demos.md."
        ),
    )
    add_env_controller_arguments(p)
    p.add_argument("--episodes", type=int, default=100, help="episodes to play (default: 100)")
    p.add_argument("--out", required=True, metavar="FILE", help="the JSONL file to write")
    p.add_argument(
        "--min-reward",
        type=float,
        default=None,
        metavar="R",
        help="keep only episodes whose total reward is at least R (default: keep all)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the first reset (default: 0)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="prompt-completion",
        help="TRL dataset format (default: prompt-completion, loss on the action only)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_demos)
    # `orchenv sft` is orchenv.agents.sft's, registered in CLI_COMMANDS by orchenv.agents


__all__ = [
    "DEMO_RECORD",
    "FORMATS",
    "DemoStats",
    "collect_demos",
    "load_demos",
    "to_sft_dataset",
    "write_demos",
]
