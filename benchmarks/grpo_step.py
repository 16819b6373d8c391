"""GRPO training steps: generation tokens/s and update tokens/s, per step, hf vs vllm.

Runs ``orchenv.agents.grpo.trainer.train`` for a few steps and prints, per step,
the rollout generation speed (completion tokens / seconds inside the sampler) and
the update speed (prompt + completion tokens through forward and backward / update
seconds), then the mean over the steps after the first (warm-up).

    python benchmarks/grpo_step.py                     # CPU: the tiny test policy, hf only
    python benchmarks/grpo_step.py --model models/SmolLM2-135M-Instruct --backends hf vllm

With ``--model`` (a local directory; nothing is downloaded) the env is
``orch/MathRoute-v0`` with the simulated System 1 pool, and each backend in
``--backends`` trains a fresh copy of the model for ``--steps`` steps in its own
output directory. ``vllm`` needs a CUDA GPU and ``pip install "orchenv[vllm]"``;
without them it is skipped with the reason. The GPU comparison has NOT been run
in this repository (no GPU was available).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchenv.backends.vllm_backend import cuda_available


def _tiny(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from grpo_env import build_policy, env_kwargs

    path = build_policy(tmp / "policy")
    return {
        "model_path": str(path),
        "tokenizer_path": str(path / "tokenizer"),
        "env_kwargs": env_kwargs(),
        "max_turns": 1,
        "learning_rate": 3e-3,
        "max_prompt_tokens": 512,
        "micro_batch_size": 32,
        "device": "cpu",
    }


def _vllm_skip_reason() -> str | None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return 'vllm is not installed (pip install "orchenv[vllm]")'
    if not cuda_available():
        return "no CUDA GPU"
    return None


def run(backend: str, base: dict[str, Any], args: argparse.Namespace, out: Path) -> list[dict]:
    from orchenv.agents.grpo.config import GRPOConfig
    from orchenv.agents.grpo.trainer import train

    config = GRPOConfig(
        **base,
        generation_backend=backend,
        queries_per_step=args.queries,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        total_steps=args.steps,
        checkpoint_every=0,
        output_dir=str(out),
        seed=0,
    )
    return train(config).metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="local model directory (default: the tiny CPU policy)")
    parser.add_argument("--backends", nargs="+", default=["hf"], choices=["hf", "vllm"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--queries", type=int, default=32, help="queries per step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="orchenv-grpo-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.model:
            base: dict[str, Any] = {"model_path": args.model, "max_turns": 3}
            args.max_new_tokens = args.max_new_tokens or 256
        else:
            base = _tiny(tmp, args)
            args.max_new_tokens = args.max_new_tokens or 8
        print(
            f"model={args.model or 'tiny test policy (CPU)'} queries/step={args.queries} "
            f"G={args.group_size} max_new_tokens={args.max_new_tokens} steps={args.steps} "
            f"torch threads={torch.get_num_threads()}"
        )
        for backend in args.backends:
            if backend == "vllm" and (reason := _vllm_skip_reason()):
                print(f"\n[{backend}] skipped: {reason}")
                continue
            metrics = run(backend, base, args, tmp / backend)
            print(f"\n[{backend}]")
            print(
                f"{'step':>4} {'samples':>8} {'gen tok':>8} {'gen tok/s':>10} "
                f"{'upd tok':>8} {'upd tok/s':>10} {'step s':>7}"
            )
            for m in metrics:
                upd_tokens = m["throughput/update_tokens_per_s"] * m["time/update_s"]
                print(
                    f"{m['step']:>4} {m['samples']:>8} {m['tokens/generated']:>8} "
                    f"{m['throughput/generation_tokens_per_s']:>10.0f} {upd_tokens:>8.0f} "
                    f"{m['throughput/update_tokens_per_s']:>10.0f} {m['time/step_s']:>7.2f}"
                )
            steady = metrics[1:] or metrics
            gen = statistics.mean(m["throughput/generation_tokens_per_s"] for m in steady)
            upd = statistics.mean(m["throughput/update_tokens_per_s"] for m in steady)
            print(
                f"mean over steps {steady[0]['step']}-{steady[-1]['step']}: "
                f"generation {gen:,.0f} tokens/s, update {upd:,.0f} tokens/s"
            )


if __name__ == "__main__":
    main()
