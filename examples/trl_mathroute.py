"""Train a controller on orch/MathRoute-v0 with TRL's GRPOTrainer (orchenv.integrations.trl).

    pip install "orchenv[train,data]" "trl==1.16.0"
    hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir models/qwen2.5-0.5b-instruct
    python examples/trl_mathroute.py --model models/qwen2.5-0.5b-instruct --steps 50

Each dataset prompt is one MathRoute episode (three turns by default): TRL samples
``--group-size`` episodes per prompt, the env's per-turn rewards are summed (seed 000,
gamma = 1) into the completion's reward, and the env's text between the controller's
turns is masked out of the loss. GPU recommended; on CPU use a tiny model and few steps.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local directory of a causal LM")
    parser.add_argument("--env", default="orch/MathRoute-v0")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--queries", type=int, default=8, help="distinct prompts per step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--output-dir", default="runs/trl-mathroute")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from orchenv.integrations.trl import OrchRollout

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model)
    rollout = OrchRollout(args.env, max_turn_tokens=args.turn_tokens)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.queries * args.group_size,
        num_generations=args.group_size,
        max_completion_length=4 * args.turn_tokens + 2048,  # 3 replies + the env's text
        learning_rate=args.lr,
        temperature=1.0,
        beta=0.0,  # Table 9 lists no KL term
        scale_rewards="none",  # seed 000 (E.1.2): no division by the group std
        logging_steps=1,
        report_to="none",
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        train_dataset=rollout.dataset(args.steps * args.queries),
        reward_funcs=rollout.reward_func,
        rollout_func=rollout,
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    rollout.close()


if __name__ == "__main__":
    main()
