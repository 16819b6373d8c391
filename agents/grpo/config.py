"""``GRPOConfig``: every knob of the GRPO trainer, documented where it is declared.

Defaults follow seed 000, appendix C, Table 9 (System 1): batch size 128 queries,
group size 4, max prompt 3072 / response 2048 tokens, learning rate 1e-6, 400
iterations, temperature 1.0 for training and 0 (greedy) for evaluation, discount
1, at most 3 turns. What Table 9 does not fix (optimizer details, clipping,
micro-batching, LoRA, precision) follows common GRPO practice and is marked so.

The command line maps onto this dataclass in one place (``add_arguments`` /
``from_cli``): named flags for the usual fields, ``--set FIELD=VALUE`` for any
other field, and ``--config FILE`` (YAML or JSON) for a whole config; flags win
over the file, the file over the defaults.

Importing this module is cheap (no torch): the CLI builds its parser from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError

MODES = ("tree", "trajectory")
BACKENDS = ("hf", "vllm")
PRECISIONS = ("auto", "fp32", "bf16-mixed", "bf16")
AGGREGATIONS = ("token-mean", "sequence-mean")  # as orchenv.agents.grpo.algorithms (no torch here)


@dataclass
class LoRASettings:
    """A LoRA adapter (peft) instead of full fine-tuning."""

    #: rank of the low-rank update
    r: int = 16
    #: scaling numerator (the update is scaled by alpha / r)
    alpha: int = 32
    #: dropout on the adapter input. 0 keeps the importance ratio exact: the sampler runs
    #: without dropout, so any dropout in the update would make ratio != 1 on-policy
    dropout: float = 0.0
    #: modules to adapt: peft's "all-linear" or a list of module names (e.g. ["q_proj", "v_proj"])
    target_modules: str | list[str] = "all-linear"


@dataclass
class GRPOConfig:
    """Configuration of ``orchenv.agents.grpo.trainer.train`` (validated on creation)."""

    # -- model ------------------------------------------------------------------------
    #: local directory (or cached hub id) of the causal LM to train; loaded with
    #: ``local_files_only=True`` unless ``local_files_only`` is False
    model_path: str = ""
    #: tokenizer directory; None = ``model_path``
    tokenizer_path: str | None = None
    #: load models and tokenizers from local files only (True: a run never downloads
    #: weights behind your back; False allows hub downloads)
    local_files_only: bool = True
    #: passed to ``from_pretrained``; leave False unless you have read the model's code
    trust_remote_code: bool = False

    # -- environment ----------------------------------------------------------------------
    #: registered env id (``orchenv list``)
    env_id: str = "orch/MathRoute-v0"
    #: keyword arguments of ``gym.make`` (objects such as a built AgentPool are allowed
    #: from Python; they are saved in checkpoints as their repr)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: task split the training queries come from (passed as ``split=`` to the env)
    split: str = "train"

    # -- rollouts and advantages (seed 000 section 3.4, appendix E) ----------------------
    #: "tree": Algorithm 1, every state branches into G actions, Q by eq. (5), A by eq. (6);
    #: "trajectory": standard GRPO, G independent episodes per query, one advantage each
    mode: str = "tree"
    #: G, actions sampled per state (Table 9: 4)
    group_size: int = 4
    #: maximum controller turns = tree depth (Table 9: 3); also passed to the env as its
    #: ``max_turns`` when the env takes one and ``env_kwargs`` does not set it
    max_turns: int = 3
    #: queries (trees) per training step, the batch size of Table 9 (128)
    queries_per_step: int = 128
    #: discount factor of eq. (5) (Table 9: 1)
    gamma: float = 1.0
    #: divide advantages by the group std (classic GRPO); seed 000 does not (appendix E.1.2)
    normalize_std: bool = False
    #: leave samples with advantage exactly 0 out of the update (they carry no policy
    #: gradient; saves compute, but changes the token-mean denominator and drops their
    #: KL / entropy terms). Off by default: every sample is trained on
    skip_zero_advantage: bool = False

    # -- optimisation -------------------------------------------------------------------------
    #: AdamW learning rate (Table 9: 1e-6)
    learning_rate: float = 1e-6
    #: AdamW weight decay (not in Table 9; 0 as in TRL's default)
    weight_decay: float = 0.0
    #: AdamW betas (torch defaults)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    #: AdamW epsilon
    adam_eps: float = 1e-8
    #: clip the global gradient norm to this before each optimizer step (None: no clipping)
    max_grad_norm: float | None = 1.0
    #: sequences per forward/backward pass (memory knob; does not change the result
    #: beyond float rounding)
    micro_batch_size: int = 4
    #: micro-batches per optimizer update. None: all micro-batches of a step, i.e. ONE
    #: update per step on freshly sampled data, the on-policy GRPO of appendix E.1.2.
    #: k: ceil(micro-batches / k) updates per step (PPO-style; later ones are off-policy
    #: and the clip matters)
    grad_accum_steps: int | None = None
    #: PPO clip range (eq. 21); 0.2 as in GRPO / verl
    clip_eps: float = 0.2
    #: upper clip range (DAPO clip-higher); None: same as clip_eps
    clip_eps_high: float | None = None
    #: weight of the k3 KL penalty against the frozen initial policy (0: no reference
    #: model is loaded; with LoRA the reference is the base with the adapter disabled)
    kl_coef: float = 0.0
    #: entropy bonus weight
    entropy_coef: float = 0.0
    #: "token-mean" (every controller token weighs the same) or "sequence-mean"
    aggregation: str = "token-mean"
    #: use the sampler's logprobs as pi_old (True), or the policy's own logprobs at update
    #: time, detached (False: ratio exactly 1 on the first update, eq. 22). With vLLM the
    #: sampler's logprobs come from another kernel and precision; True corrects for that
    use_sampler_logprobs: bool = True

    # -- generation ---------------------------------------------------------------------------
    #: "hf": transformers generate (CPU or GPU); "vllm": vLLM engine on GPU (UNTESTED here)
    generation_backend: str = "hf"
    #: sampling temperature for training rollouts (Table 9: 1.0)
    temperature: float = 1.0
    #: temperature for evaluation (Table 9: 0 = greedy)
    eval_temperature: float = 0.0
    #: nucleus sampling (1.0: off). The recorded logprobs are of the untruncated tempered
    #: distribution, the one the update computes
    top_p: float = 1.0
    #: max response tokens per controller turn (Table 9: 2048)
    max_new_tokens: int = 2048
    #: max prompt tokens (Table 9: 3072); longer prompts lose tokens from the left (warned)
    max_prompt_tokens: int = 3072
    #: prompts per ``generate`` call with the hf backend (memory knob)
    generation_batch_size: int = 64
    #: share of GPU memory the vLLM engine reserves (the policy trains beside it)
    vllm_gpu_memory_utilization: float = 0.3
    #: further ``vllm.LLM`` engine arguments
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)

    # -- model memory and precision --------------------------------------------------------
    #: LoRA adapter settings; None = full fine-tuning
    lora: LoRASettings | None = None
    #: recompute activations in the backward pass (less memory, ~30% slower)
    gradient_checkpointing: bool = False
    #: "auto" (bf16-mixed on a GPU, fp32 on CPU), "fp32", "bf16-mixed" (fp32 weights and
    #: optimizer, bf16 autocast), "bf16" (bf16 weights: least memory, but updates of
    #: lr ~ 1e-6 are below bf16 resolution for most weights)
    precision: str = "auto"
    #: "cpu", "cuda", "cuda:1", ...; None: cuda when available (with accelerate: its device)
    device: str | None = None
    #: data-parallel training with ``accelerate`` (also switched on when started by
    #: ``accelerate launch`` / torchrun with WORLD_SIZE > 1)
    use_accelerate: bool = False

    # -- schedule, evaluation, output -----------------------------------------------------------
    #: training iterations (Table 9: 400 for System 1, 600 for System 2)
    total_steps: int = 400
    #: save a checkpoint every N steps (0: only the final one)
    checkpoint_every: int = 50
    #: keep only the newest N checkpoints (None: keep all)
    keep_last_checkpoints: int | None = None
    #: evaluate every N steps (0: never)
    eval_every: int = 0
    #: episodes per evaluation (greedy unless eval_temperature > 0)
    eval_episodes: int = 100
    #: split evaluation tasks come from
    eval_split: str = "test"
    #: run directory: metrics.jsonl, checkpoint-STEP/, tensorboard/
    output_dir: str = "runs/grpo"
    #: base of every random choice (query seeds, sampling); the global RNGs are not seeded
    seed: int = 0
    #: also write TensorBoard scalars (needs the tensorboard package)
    log_tensorboard: bool = False
    #: a checkpoint directory, or "latest" (the newest checkpoint in output_dir; a fresh
    #: start when there is none), to continue training from
    resume_from: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lora, Mapping):
            self.lora = LoRASettings(**dict(self.lora))
        if isinstance(self.adam_betas, list):
            self.adam_betas = (float(self.adam_betas[0]), float(self.adam_betas[1]))
        self.validate()

    # -- checks ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError naming the field, the value and what is expected."""
        if not self.model_path:
            raise ConfigError("model_path is required: a local model directory (--model PATH)")
        _choice("mode", self.mode, MODES)
        _choice("generation_backend", self.generation_backend, BACKENDS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("aggregation", self.aggregation, AGGREGATIONS)
        for name in (
            "group_size",
            "max_turns",
            "queries_per_step",
            "micro_batch_size",
            "max_new_tokens",
            "max_prompt_tokens",
            "generation_batch_size",
            "total_steps",
            "eval_episodes",
        ):
            _positive_int(name, getattr(self, name))
        for name in ("checkpoint_every", "eval_every"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ConfigError(f"{name} must be an int >= 0 (0: off), got {value!r}")
        for name in ("grad_accum_steps", "keep_last_checkpoints"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
        if self.group_size < 2:
            raise ConfigError(
                f"group_size must be >= 2 for group-relative advantages, got {self.group_size} "
                "(a group of one has no baseline and every advantage would be 0)"
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ConfigError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {self.gamma!r}")
        if not self.clip_eps > 0:
            raise ConfigError(f"clip_eps must be > 0, got {self.clip_eps!r}")
        if self.clip_eps_high is not None and not self.clip_eps_high > 0:
            raise ConfigError(f"clip_eps_high must be > 0 or None, got {self.clip_eps_high!r}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError(
                f"kl_coef and entropy_coef must be >= 0, got {self.kl_coef!r}, {self.entropy_coef!r}"
            )
        if not self.temperature > 0:
            raise ConfigError(
                f"temperature (training) must be > 0: GRPO needs sampled groups, got "
                f"{self.temperature!r}; greedy decoding is for evaluation (eval_temperature=0)"
            )
        if self.eval_temperature < 0:
            raise ConfigError(f"eval_temperature must be >= 0, got {self.eval_temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ConfigError(
                "vllm_gpu_memory_utilization must be in (0, 1], got "
                f"{self.vllm_gpu_memory_utilization!r}"
            )
        if not isinstance(self.env_kwargs, dict):
            raise ConfigError(f"env_kwargs must be a dict, got {type(self.env_kwargs).__name__}")
        if "split" in self.env_kwargs and self.env_kwargs["split"] != self.split:
            raise ConfigError(
                f"env_kwargs sets split={self.env_kwargs['split']!r} but split is {self.split!r}; "
                "set the training split with `split` (--split) only"
            )
        if self.lora is not None:
            lora = self.lora
            if not (isinstance(lora.r, int) and lora.r >= 1):
                raise ConfigError(f"lora.r must be an int >= 1, got {lora.r!r}")
            if not lora.alpha > 0:
                raise ConfigError(f"lora.alpha must be > 0, got {lora.alpha!r}")
            if not 0.0 <= lora.dropout < 1.0:
                raise ConfigError(f"lora.dropout must be in [0, 1), got {lora.dropout!r}")
        if self.resume_from is not None and not str(self.resume_from).strip():
            raise ConfigError("resume_from must be a checkpoint directory, 'latest' or None")

    # -- (de)serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (env_kwargs values that JSON cannot hold become their repr)."""
        out = dataclasses.asdict(self)
        out["env_kwargs"] = {k: _jsonable(v) for k, v in self.env_kwargs.items()}
        out["vllm_kwargs"] = {k: _jsonable(v) for k, v in self.vllm_kwargs.items()}
        out["adam_betas"] = list(self.adam_betas)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOConfig:
        """Build from a dict (a saved ``config.json``, a YAML file); unknown keys are errors."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            import difflib

            hints = [
                f"{k!r} (did you mean {m[0]!r}?)"
                if (m := difflib.get_close_matches(k, names, n=1))
                else repr(k)
                for k in unknown
            ]
            raise ConfigError(f"unknown GRPOConfig field(s): {', '.join(hints)}")
        return cls(**dict(data))

    @classmethod
    def from_cli(cls, args: argparse.Namespace | Sequence[str]) -> GRPOConfig:
        """From parsed ``orchenv train grpo`` arguments (or the raw argument list)."""
        if not isinstance(args, argparse.Namespace):
            parser = argparse.ArgumentParser(prog="orchenv train grpo")
            add_arguments(parser)
            args = parser.parse_args(list(args))
        data: dict[str, Any] = {}
        if getattr(args, "config", None):
            data.update(_read_config_file(args.config))
        for dest, name in _FLAG_FIELDS.items():
            value = getattr(args, dest, None)
            if value is not None:
                data[name] = value
        if getattr(args, "env_kwarg", None):
            data["env_kwargs"] = {**data.get("env_kwargs", {}), **_pairs(args.env_kwarg)}
        lora = _lora_from_args(args, data.get("lora"))
        if lora is not None:
            data["lora"] = lora
        for key, value in _pairs(getattr(args, "set", None) or []).items():
            data[key] = value
        return cls.from_dict(data)


# -- command line ---------------------------------------------------------------------------

#: argparse dest -> GRPOConfig field, for the named flags
_FLAG_FIELDS = {
    "model": "model_path",
    "tokenizer": "tokenizer_path",
    "env": "env_id",
    "split": "split",
    "mode": "mode",
    "group_size": "group_size",
    "max_turns": "max_turns",
    "queries_per_step": "queries_per_step",
    "steps": "total_steps",
    "lr": "learning_rate",
    "weight_decay": "weight_decay",
    "max_grad_norm": "max_grad_norm",
    "micro_batch_size": "micro_batch_size",
    "grad_accum_steps": "grad_accum_steps",
    "clip_eps": "clip_eps",
    "clip_eps_high": "clip_eps_high",
    "kl_coef": "kl_coef",
    "entropy_coef": "entropy_coef",
    "aggregation": "aggregation",
    "gamma": "gamma",
    "normalize_std": "normalize_std",
    "temperature": "temperature",
    "eval_temperature": "eval_temperature",
    "top_p": "top_p",
    "max_new_tokens": "max_new_tokens",
    "max_prompt_tokens": "max_prompt_tokens",
    "generation_backend": "generation_backend",
    "generation_batch_size": "generation_batch_size",
    "gradient_checkpointing": "gradient_checkpointing",
    "precision": "precision",
    "device": "device",
    "accelerate": "use_accelerate",
    "checkpoint_every": "checkpoint_every",
    "eval_every": "eval_every",
    "eval_episodes": "eval_episodes",
    "output_dir": "output_dir",
    "seed": "seed",
    "tensorboard": "log_tensorboard",
    "resume": "resume_from",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``orchenv train grpo`` flags. Every default is None: unset flags keep the
    dataclass default (or the --config file's value)."""
    add = parser.add_argument
    add("--config", metavar="FILE", help="a YAML/JSON file of GRPOConfig fields (flags win)")
    add("--model", metavar="PATH", help="local directory of the causal LM to train (required)")
    add("--tokenizer", metavar="PATH", help="tokenizer directory (default: --model)")
    add("--env", metavar="ID", help="env id (default: orch/MathRoute-v0)")
    add(
        "--env-kwarg",
        "-e",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment argument, repeatable (values parsed as JSON when possible)",
    )
    add("--split", help="training split (default: train)")
    add("--mode", choices=MODES, help="tree (Algorithm 1, default) or trajectory (standard GRPO)")
    add("--group-size", type=int, metavar="G", help="actions per state (default: 4)")
    add("--max-turns", type=int, metavar="N", help="controller turns / tree depth (default: 3)")
    add("--queries-per-step", type=int, metavar="N", help="queries per step (default: 128)")
    add("--steps", type=int, metavar="N", help="training steps (default: 400)")
    add("--lr", type=float, help="learning rate (default: 1e-6)")
    add("--weight-decay", type=float, help="AdamW weight decay (default: 0)")
    add("--max-grad-norm", type=float, help="gradient-norm clip (default: 1.0)")
    add("--micro-batch-size", type=int, help="sequences per forward/backward (default: 4)")
    add(
        "--grad-accum-steps",
        type=int,
        help="micro-batches per optimizer update (default: all, one update per step)",
    )
    add("--clip-eps", type=float, help="PPO clip range (default: 0.2)")
    add("--clip-eps-high", type=float, help="upper clip range (default: --clip-eps)")
    add("--kl-coef", type=float, help="KL penalty weight (default: 0, no reference model)")
    add("--entropy-coef", type=float, help="entropy bonus weight (default: 0)")
    add("--aggregation", choices=AGGREGATIONS, help="loss aggregation (default: token-mean)")
    add("--gamma", type=float, help="discount factor (default: 1)")
    add(
        "--normalize-std",
        action="store_const",
        const=True,
        help="divide advantages by the group std (seed 000 does not)",
    )
    add("--temperature", type=float, help="training sampling temperature (default: 1.0)")
    add("--eval-temperature", type=float, help="evaluation temperature (default: 0, greedy)")
    add("--top-p", type=float, help="nucleus sampling (default: 1.0)")
    add("--max-new-tokens", type=int, help="max response tokens per turn (default: 2048)")
    add("--max-prompt-tokens", type=int, help="max prompt tokens (default: 3072)")
    add("--generation-backend", choices=BACKENDS, help="hf (default) or vllm (GPU)")
    add("--generation-batch-size", type=int, help="prompts per hf generate call (default: 64)")
    add("--lora-r", type=int, metavar="R", help="train a LoRA adapter of this rank")
    add("--lora-alpha", type=int, help="LoRA alpha (default: 2 * r)")
    add("--lora-dropout", type=float, help="LoRA dropout (default: 0)")
    add(
        "--lora-target-modules",
        nargs="+",
        metavar="NAME",
        help="modules to adapt (default: all-linear)",
    )
    add(
        "--gradient-checkpointing",
        action="store_const",
        const=True,
        help="recompute activations in the backward pass",
    )
    add("--precision", choices=PRECISIONS, help="auto (default), fp32, bf16-mixed, bf16")
    add("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    add(
        "--accelerate",
        action="store_const",
        const=True,
        help="data-parallel training with accelerate (implied under `accelerate launch`)",
    )
    add("--checkpoint-every", type=int, metavar="N", help="checkpoint every N steps (default: 50)")
    add("--eval-every", type=int, metavar="N", help="evaluate every N steps (default: 0, never)")
    add("--eval-episodes", type=int, metavar="N", help="episodes per evaluation (default: 100)")
    add("--output-dir", metavar="DIR", help="run directory (default: runs/grpo)")
    add("--seed", type=int, help="seed (default: 0)")
    add("--tensorboard", action="store_const", const=True, help="write TensorBoard scalars")
    add("--resume", metavar="PATH|latest", help="continue from a checkpoint or 'latest'")
    add(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other GRPOConfig field, repeatable (values parsed as JSON when possible)",
    )


# -- helpers --------------------------------------------------------------------------------------


def _choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _positive_int(name: str, value: Any) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _pairs(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict, values parsed as JSON when they parse."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _read_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of GRPOConfig fields")
    return data


def _lora_from_args(args: argparse.Namespace, base: Any) -> dict[str, Any] | None:
    """LoRA settings from --lora-* flags over a file's ``lora`` mapping (None: no LoRA)."""
    flags = {
        "r": getattr(args, "lora_r", None),
        "alpha": getattr(args, "lora_alpha", None),
        "dropout": getattr(args, "lora_dropout", None),
        "target_modules": getattr(args, "lora_target_modules", None),
    }
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return None
    lora = dict(base) if isinstance(base, Mapping) else {}
    if "r" not in given and "r" not in lora:
        raise ConfigError("--lora-alpha/--lora-dropout/--lora-target-modules need --lora-r")
    lora.update(given)
    if "alpha" not in lora:
        lora["alpha"] = 2 * int(lora["r"])
    return lora
