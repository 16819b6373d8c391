"""A tiny learnable setting for GRPO trainer tests: a word-level Qwen2 policy and a routing env.

Why: the trainer's acceptance test must show learning on this 2-core CPU in well under
two minutes. The policy is a 2-layer Qwen2 with a 23-token vocabulary in which every
routing action (``<model>mid</model>``...) is ONE token, initialised with small
weights so its first outputs are near uniform (near chance). The env is
``MathRouteEnv`` with one turn and a scripted pool in which only ``mid`` answers
correctly: routing to ``mid`` earns 0.5 * (1 - 0.125) = 0.4375, the other agents
0 (weak) or -0.125 (strong, its Lagrange multiplier), and text without a routing
tag costs the format penalty, -1.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source

from orchenv.agents.grpo.algorithms import Sample
from orchenv.agents.grpo.tiny import BOS, CHAT_TEMPLATE, EOS, PAD, tiny_qwen2

UNK, START = "[UNK]", "<|im_start|>"
ACTIONS = {agent: f"<model>{agent}</model>" for agent in (WEAK, MID, STRONG)}
#: ordinary words: some appear in the prompts, some are filler the policy may emit
WORDS = [
    "system", "user", "assistant", "Problem", "solver", "solvers", "the", "is", "What",
    "2", "3", "easy", "hard", "<thinking>", "</thinking>",
]  # fmt: skip

#: the best mean reward per action (routing to mid) and the format penalty
MAX_REWARD = 0.5 * (1.0 - 0.125)
FORMAT_PENALTY = -1.0


def build_policy(out_dir: str | Path, *, seed: int = 0, init_std: float = 0.02) -> Path:
    """Save a word-level tokenizer and a small-init 2-layer Qwen2 to ``out_dir``.

    Weights come from a private ``torch.Generator``: the global RNG is untouched and
    the same seed gives the same model.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, START, UNK, *WORDS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [START]})
    tokenizer.add_tokens(list(ACTIONS.values()))  # whole actions as single tokens
    tokenizer.chat_template = CHAT_TEMPLATE

    model = tiny_qwen2(
        tokenizer, max_positions=1024, init_std=init_std, seed=seed, zero_biases=True
    )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    # its own folder: next to a Qwen2 config.json, AutoTokenizer would rebuild it as a
    # byte-level Qwen2Tokenizer; here it loads as the word-level tokenizer it is
    tokenizer.save_pretrained(out / "tokenizer")
    return out


@lru_cache(maxsize=4)
def policy_path(seed: int = 0) -> Path:
    """One tiny policy per (test session, seed), in a temporary directory removed at exit."""
    tmp = tempfile.mkdtemp(prefix=f"orchenv-grpo-policy-{seed}-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return build_policy(tmp, seed=seed)


def env_kwargs(**overrides: Any) -> dict[str, Any]:
    """``gym.make("orch/MathRoute-v0", **env_kwargs())``: one turn, only ``mid`` is right."""
    kwargs: dict[str, Any] = {
        "pool": scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: WRONG}),
        "task_source": tiny_source(),
        "max_turns": 1,
        "reward": "paper",  # MAX_REWARD is eq. (3)'s
    }
    kwargs.update(overrides)
    return kwargs


def grpo_config(model: Path, output_dir: Path, **overrides: Any) -> Any:
    """A GRPOConfig sized for the tiny policy (a few seconds per handful of steps)."""
    from orchenv.agents.grpo.config import GRPOConfig

    fields: dict[str, Any] = {
        "model_path": str(model),
        "tokenizer_path": str(model / "tokenizer"),
        "env_id": "orch/MathRoute-v0",
        "env_kwargs": env_kwargs(),
        "max_turns": 1,
        "group_size": 4,
        "queries_per_step": 8,
        "learning_rate": 3e-3,
        "max_new_tokens": 4,
        "max_prompt_tokens": 512,
        "micro_batch_size": 16,
        "generation_batch_size": 64,
        "total_steps": 2,
        "checkpoint_every": 0,
        "device": "cpu",
        "output_dir": str(output_dir),
        "seed": 0,
    }
    fields.update(overrides)
    return GRPOConfig(**fields)


def uniform_sampler(tokenizer: Any, *, max_new_tokens: int, seed: int) -> Any:
    """A Sampler that draws every token uniformly from the vocabulary: the chance baseline."""
    rng = np.random.default_rng(seed)
    eos = tokenizer.eos_token_id
    vocab = len(tokenizer)

    def sample(prompts: list[list[dict[str, str]]]) -> list[Sample]:
        out = []
        for _ in prompts:
            ids: list[int] = []
            while len(ids) < max_new_tokens:
                ids.append(int(rng.integers(vocab)))
                if ids[-1] == eos:
                    break
            text = tokenizer.decode(ids, skip_special_tokens=True)
            out.append(Sample(text=text, prompt_ids=[], completion_ids=ids, logprobs=None))
        return out

    return sample
