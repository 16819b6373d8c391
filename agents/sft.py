"""A short supervised warm start on demonstrations: TRL's ``SFTTrainer`` with a LoRA adapter.

``orchenv sft DEMOS.jsonl --model PATH --out DIR`` fine-tunes a causal LM (a transformers
directory, a hub name in the local cache, or a ``.gguf`` file, dequantised by transformers'
GGUF reader) on a file written by ``orchenv demos`` (``orchenv.demos``), with a LoRA adapter
(``peft``), loss on the assistant's action only (TRL's prompt-completion format), then merges
the adapter and saves a plain transformers model and its tokenizer to ``DIR``, which the
``hf`` backend loads: ``orchenv run ENV --controller llm -c backend=hf -c model=DIR``.
``--no-merge`` saves the adapter alone (for the GRPO trainer's ``--lora`` path).

Nothing here is written by hand but the glue: the trainer, the data format and the loss mask
are TRL's, the adapter is peft's. Runs on CPU (fp32) or one GPU (bf16 when supported).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from orchenv.cliargs import forward
from orchenv.error import ConfigError


def dequantised(model: Any) -> Any:
    """Drop the GGUF quantizer marker of a model loaded with ``gguf_file=``: its weights are
    already dequantised to plain tensors, but transformers refuses to save (and Trainer to
    fully train) a model that still carries the marker."""
    model.hf_quantizer = None
    for obj in (model, model.config):
        if hasattr(obj, "quantization_config"):
            delattr(obj, "quantization_config")
    with contextlib.suppress(AttributeError):  # a read-only property in some versions
        model.is_quantized = False
    return model


def run_sft(
    demos: str | os.PathLike[str],
    model: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    max_steps: int = 50,
    epochs: float = 1.0,
    batch_size: int = 4,
    learning_rate: float = 2e-4,
    lora_r: int = 16,
    lora_alpha: int = 32,
    target_modules: str | list[str] = "all-linear",
    max_length: int = 1024,
    seed: int = 0,
    merge: bool = True,
    use_lora: bool = True,
    log_every: int = 5,
) -> dict[str, Any]:
    """Fine-tune ``model`` on the demonstrations file ``demos`` and save it to ``out``.

    ``max_steps`` caps the optimiser steps (``0``: train ``epochs`` epochs). Returns a
    summary (steps, first and last logged loss, seconds, examples) that is also written to
    ``out/sft_summary.json``.
    """
    from orchenv.backends.hf import gguf_source
    from orchenv.demos import to_sft_dataset
    from orchenv.error import require

    require("trl", "train", "the SFT warm start")
    require("peft", "train", "the SFT warm start's LoRA adapter")
    import torch
    import transformers
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    if not (isinstance(max_steps, int) and max_steps >= 0):
        raise ConfigError(f"max_steps must be an integer >= 0, got {max_steps!r}")
    for label, value in (("epochs", epochs), ("learning_rate", learning_rate)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{label} must be a finite number > 0, got {value!r}")
    if batch_size < 1 or max_length < 16 or lora_r < 1:
        raise ConfigError("batch_size and lora_r must be >= 1 and max_length >= 16")
    dataset = to_sft_dataset(demos)
    src = os.fspath(model)
    where, gguf = gguf_source(src)
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    tokenizer = transformers.AutoTokenizer.from_pretrained(where, **gguf)
    if tokenizer.chat_template is None:
        raise ConfigError(
            f"{src} has no chat template: the demonstrations are chat-format prompts. Use an "
            "instruct / chat model, or set tokenizer.chat_template first"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = transformers.AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **gguf)
    if gguf:
        dequantised(lm)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        max_steps=max_steps if max_steps > 0 else -1,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        logging_steps=max(1, log_every),
        save_strategy="no",
        report_to=[],
        max_length=max_length,
        seed=seed,
        bf16=dtype == torch.bfloat16,
        use_cpu=not cuda,
        # TRL turns checkpointing on by default: it saves GPU memory at ~1/3 more compute,
        # which a CPU run does not need
        gradient_checkpointing=cuda,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    peft_config = (
        LoraConfig(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=0.0,
            target_modules=target_modules,
            task_type="CAUSAL_LM",
        )
        if use_lora
        else None
    )
    trainer = SFTTrainer(
        model=lm,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    started = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - started
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    trained: Any = trainer.model
    if use_lora and merge:
        trained = trained.merge_and_unload()
    trained.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    summary = {
        "demos": os.fspath(demos),
        "model": src,
        "examples": len(dataset),
        "steps": int(result.global_step),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_loss": float(result.training_loss),
        "seconds": round(seconds, 2),
        "lora": {"r": lora_r, "alpha": lora_alpha, "merged": bool(use_lora and merge)}
        if use_lora
        else None,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "device": "cuda" if cuda else "cpu",
    }
    (out_dir / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _cmd_sft(args: Any) -> int:
    summary = run_sft(
        args.demos,
        args.model,
        args.out,
        merge=not args.no_merge,
        use_lora=not args.full,
        **forward(args, "max_steps", "epochs", "batch_size", "learning_rate"),
        **forward(args, "lora_r", "lora_alpha", "max_length", "seed"),
    )
    print(json.dumps(summary, indent=2))
    return 0


def add_subcommand(sub: Any) -> None:
    """Add ``sft`` to the ``orchenv`` subparsers object ``sub``."""
    p = sub.add_parser(
        "sft",
        help="a short LoRA SFT warm start on `orchenv demos` output (TRL SFTTrainer)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("demos", help="a file written by `orchenv demos`")
    p.add_argument("--model", required=True, help="a transformers directory or a .gguf file")
    p.add_argument("--out", required=True, metavar="DIR", help="where the tuned model goes")
    p.add_argument("--max-steps", type=int, default=50, help="optimiser steps (0: use --epochs)")
    p.add_argument("--epochs", type=float, default=1.0, help="epochs when --max-steps is 0")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--max-length", type=int, default=1024, help="tokens per example")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-merge", action="store_true", help="save the LoRA adapter, unmerged")
    p.add_argument("--full", action="store_true", help="train every weight, no LoRA")
    p.set_defaults(func=_cmd_sft)
