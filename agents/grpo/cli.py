"""``orchenv train grpo``: the GRPO trainer from the command line.

``orchenv.cli`` calls ``add_subcommands(sub)``. Building the parser imports only
``orchenv.agents.grpo.config`` (no torch); the trainer is imported when the
command runs.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from orchenv.agents.grpo.config import GRPOConfig, add_arguments

logger = logging.getLogger(__name__)

_EPILOG = """\
examples:
  orchenv train grpo --model models/qwen2.5-7b --env orch/MathRoute-v0 --output-dir runs/s1
  orchenv train grpo --model models/qwen3-4b --env orch/MathRouteSystem2-v0 --steps 600 \\
      --lora-r 16 --queries-per-step 32 --output-dir runs/s2-lora
  orchenv train grpo --config runs/s1/config.yaml --resume latest
  accelerate launch --num_processes 4 -m orchenv train grpo --model ... (data parallel)
"""

#: metrics shown on the progress bar
_SHOWN = ("reward/node_mean", "reward/episode", "accuracy")


def add_subcommands(sub: Any) -> None:
    """Add ``train`` (with its ``grpo`` subcommand) to the ``orchenv`` subparsers ``sub``."""
    p_train = sub.add_parser("train", help="train a controller (grpo)")
    trainers = p_train.add_subparsers(dest="trainer", required=True, metavar="TRAINER")
    p_grpo = trainers.add_parser(
        "grpo",
        help="multi-turn GRPO on an orchenv environment (seed 000)",
        description=(
            "Train a causal LM controller with multi-turn tree GRPO (seed 000, Algorithm 1) "
            "or standard trajectory GRPO. Defaults follow Table 9. Writes "
            "OUTPUT_DIR/metrics.jsonl and OUTPUT_DIR/checkpoint-STEP/."
        ),
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
    started = False

    def on_step(record: dict[str, Any]) -> None:
        nonlocal started
        if not started:  # a resumed run starts part-way
            bar.update(record["step"] - 1)
            started = True
        bar.update(1)
        bar.set_postfix(
            {k.split("/")[-1]: f"{record[k]:.3f}" for k in _SHOWN if record.get(k) is not None}
        )

    try:
        result = train(config, on_step=on_step)
    finally:
        bar.close()
    final = result.final_metrics
    if args.json:
        print(json.dumps(final, indent=2))
    else:
        print(f"trained to step {result.step}; run directory: {result.output_dir}")
        if result.checkpoint is not None:
            print(f"checkpoint: {result.checkpoint}")
        for key, value in final.items():
            if key.startswith(("time/", "throughput/")) and value is not None:
                print(f"  {key:<40} {value:.3f}")
            elif isinstance(value, float):
                print(f"  {key:<40} {value:.4f}")
            elif value is not None:
                print(f"  {key:<40} {value}")
    return 0
