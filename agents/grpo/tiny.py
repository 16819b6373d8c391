"""A tiny random Qwen2 causal LM with its own byte-level BPE tokenizer, built locally in
seconds (no download): for tests of the ``hf`` backend and smoke runs of the GRPO trainer
(``orchenv reproduce 000``).

The model is random, so what it writes is nonsense, but every code path of a real causal LM
runs (chat template, batching, token counting, generation, the update).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# ChatML-like, the layout Qwen models use; the end-of-turn token doubles as EOS.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BOS, EOS, PAD = "<|bos|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, "<|im_start|>"]

_CORPUS = [
    "Problem: What is 12 + 30? Solution: 12 + 30 = 42. The final answer is \\boxed{42}.",
    "Problem: Solve 3x + 4 = 19 for x. Subtract 4: 3x = 15, so x = 5. Answer: \\boxed{5}.",
    "Problem: Compute 7 * 8 - 6. 7 * 8 = 56 and 56 - 6 = 50, giving \\boxed{50}.",
    "Find the remainder when 2024 is divided by 9. The digit sum is 8, so \\boxed{8}.",
    "<thinking>The problem is easy arithmetic.</thinking><model>weak</model>",
    "<thinking>This needs careful algebra.</thinking><model>strong</model>",
    "<checking>Step 2 drops a sign.</checking><verdict>False</verdict><model>mid</model>",
    "<checking>Every step is right.</checking><verdict>True</verdict>",
    "You are a careful mathematician. Solve the problem step by step.",
    "A previous attempt was judged incorrect. Write a complete, corrected solution.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 3.14 -7 1/2",
    "Let f(x) = x^2 - 5x + 6. The roots are x = 2 and x = 3, so the sum is \\boxed{5}.",
    "The probability of two heads in two fair coin flips is 1/4: \\boxed{\\frac{1}{4}}.",
    "system user assistant Problem Proposed solution from Reviewer's notes Turn 1 of 3",
]


def build_tiny_qwen2(tmp_dir: str | Path, *, vocab_size: int = 400, seed: int = 0) -> Path:
    """Train a byte-level BPE tokenizer and save it with a random 2-layer Qwen2 to ``tmp_dir``.

    Weights are drawn from a private ``torch.Generator`` (the global RNG is
    untouched), so the same ``seed`` always gives the same model.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(tmp_dir)
    out.mkdir(parents=True, exist_ok=True)

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})

    # a wide init gives peaked logits: greedy choices are robust to the last-bit float
    # differences between padded and unpadded batches
    model = tiny_qwen2(tokenizer, max_positions=512, init_std=0.5, seed=seed)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def tiny_qwen2(
    tokenizer: Any, *, max_positions: int, init_std: float, seed: int, zero_biases: bool = False
) -> Any:
    """A 2-layer, 64-wide Qwen2 for ``tokenizer``, its weights drawn from N(0, init_std^2).

    Norm weights are 1; with ``zero_biases`` the biases are 0 (and take no draws). The
    draws come from a generator seeded with ``seed``, in parameter order.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif zero_biases and name.endswith(".bias"):
                param.zero_()
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * init_std)
    return model
