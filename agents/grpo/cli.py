"""``orchenv train grpo``: the flags are generated from ``GRPOConfig`` (no torch to build them)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchenv.agents.grpo.config import GRPOConfig, add_arguments

_EPILOG = """\
examples:
  orchenv train grpo --model models/qwen2.5-7b --env orch/MathRoute-v0 --output-dir runs/s1
  orchenv train grpo --model models/qwen3-4b --env orch/MathRouteSystem2-v0 --steps 600 \\
      --lora-r 16 --queries-per-step 32 --output-dir runs/s2-lora
  orchenv train grpo --config runs/s1/config.yaml --resume latest
  accelerate launch --num_processes 4 -m orchenv train grpo --model ... (data parallel)
"""


def add_subcommands(sub: Any) -> None:
    """Add ``train`` (with its ``grpo`` subcommand) to the ``orchenv`` subparsers ``sub``."""
    p_train = sub.add_parser("train", help="train a controller (grpo)")
    trainers = p_train.add_subparsers(dest="trainer", required=True, metavar="TRAINER")
    p_grpo = trainers.add_parser(
        "grpo",
        help="multi-turn GRPO on an orchenv environment (seed 000)",
        description="Train a causal LM controller with multi-turn tree GRPO (seed 000, "
        "Algorithm 1) or trajectory GRPO; defaults follow Table 9. Writes "
        "OUTPUT_DIR/metrics.jsonl and OUTPUT_DIR/checkpoint-STEP/.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p_grpo)
    p_grpo.add_argument("--json", action="store_true", help="print the final metrics as JSON")
    p_grpo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p_grpo.set_defaults(func=cmd_train_grpo)


def cmd_train_grpo(args: argparse.Namespace) -> int:
    """Run ``train(GRPOConfig.from_cli(args))`` with a progress bar; print the final metrics."""
    config = GRPOConfig.from_cli(args)
    from tqdm.auto import tqdm

    from orchenv.agents.grpo.trainer import train

    bar = tqdm(total=config.total_steps, desc="grpo", unit="step", disable=args.no_progress)

    def on_step(record: dict[str, Any]) -> None:
        bar.update(record["step"] - bar.n)  # a resumed run starts part-way
        shown = ("reward/node_mean", "reward/episode", "accuracy")
        bar.set_postfix(
            {k.split("/")[-1]: f"{record[k]:.3f}" for k in shown if record.get(k) is not None}
        )

    with bar:
        result = train(config, on_step=on_step)
    if args.json:
        print(json.dumps(result.final_metrics, indent=2))
        return 0
    print(f"trained to step {result.step} in {result.output_dir}; checkpoint: {result.checkpoint}")
    for key, value in result.final_metrics.items():
        if value is not None:
            print(f"  {key:<40} {f'{value:.4f}' if isinstance(value, float) else value}")
    return 0
