"""``GRPOConfig``: every knob of the GRPO trainer, written once with its help and bounds;
defaults follow seed 000's Table 9 (docs/grpo.md). The command line is generated from the
fields, so this module must not import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import operator
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from orchenv.controllers import parse_kwargs
from orchenv.error import ConfigError

Aggregation = Literal["token-mean", "sequence-mean"]
#: ways ``policy_loss`` reduces per-token losses to a scalar
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
Precision = Literal["auto", "fp32", "bf16-mixed", "bf16"]
#: the bounds ``arg`` takes: name -> (test, symbol)
_BOUNDS = {
    "ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="), "lt": (operator.lt, "<"),
}  # fmt: skip


def arg(default: Any, help: str, *flags: str, **bounds: float) -> Any:
    """A field documented in place: help text, extra flags (``--lr``), bounds (``ge=1``)."""
    meta = {"help": help, "flags": flags, "bounds": bounds}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class LoRASettings:
    """A LoRA adapter (peft) instead of full fine-tuning."""

    r: int = arg(16, "rank; setting it switches LoRA on", ge=1)
    alpha: int | None = arg(None, "the update is scaled by alpha / r (None: 2r)", gt=0)
    dropout: float = arg(0.0, "adapter dropout; 0 keeps the importance ratio exact", ge=0, lt=1)
    target_modules: list[str] | str = arg("all-linear", "modules to adapt (q_proj v_proj ...)")

    def __post_init__(self) -> None:
        if self.alpha is None:
            self.alpha = 2 * self.r


@dataclass
class GRPOConfig:
    """Configuration of ``orchenv.agents.grpo.trainer.train`` (validated on creation)."""

    # -- model
    model_path: str = arg("", "local directory of the causal LM to train", "--model")
    tokenizer_path: str | None = arg(None, "tokenizer directory (None: model_path)", "--tokenizer")
    local_files_only: bool = arg(True, "never download weights (False allows hub downloads)")
    trust_remote_code: bool = arg(False, "passed to from_pretrained; only for code you have read")

    # -- environment; its max_turns is the tree depth
    env_id: str = arg("orch/MathRoute-v0", "registered env id (orchenv list)", "--env")
    env_kwargs: dict[str, Any] = arg({}, "gym.make arguments", "--env-kwarg", "-e")
    split: str = arg("train", "task split of the training queries")
    max_turns: int | None = arg(None, "passed to the env as max_turns (None: its own)", ge=1)

    # -- rollouts and advantages (seed 000 section 3.4, appendix E)
    mode: Literal["tree", "trajectory"] = arg("tree", "Algorithm 1 trees, or standard GRPO")
    group_size: int = arg(4, "G, actions sampled per state (Table 9)", ge=1)
    queries_per_step: int = arg(128, "queries (trees) per step, Table 9's batch size", ge=1)
    gamma: float = arg(1.0, "discount of eq. 5 (Table 9)", ge=0, le=1)
    normalize_std: bool = arg(False, "divide advantages by the group std (seed 000 does not)")
    skip_zero_advantage: bool = arg(
        True, "leave advantage-0 samples out of the update when no KL/entropy term needs them"
    )

    # -- optimisation
    learning_rate: float = arg(1e-6, "AdamW learning rate (Table 9)", "--lr", gt=0)
    weight_decay: float = arg(0.0, "AdamW weight decay", ge=0)
    adam_betas: tuple[float, float] = arg((0.9, 0.999), "AdamW betas")
    adam_eps: float = arg(1e-8, "AdamW epsilon", gt=0)
    max_grad_norm: float | None = arg(1.0, "gradient-norm clip (None: off)", gt=0)
    micro_batch_size: int = arg(4, "sequences per forward/backward (memory only)", ge=1)
    grad_accum_steps: int | None = arg(None, "micro-batches per update (None: 1 update/step)", ge=1)
    clip_eps: float = arg(0.2, "PPO clip range of eq. 21", gt=0)
    clip_eps_high: float | None = arg(None, "upper clip range, DAPO clip-higher", gt=0)
    kl_coef: float = arg(0.0, "k3 KL to the initial policy (0: no reference model)", ge=0)
    entropy_coef: float = arg(0.0, "entropy bonus weight", ge=0)
    aggregation: Aggregation = arg("token-mean", "per-token losses to a scalar")
    use_sampler_logprobs: bool = arg(True, "pi_old from the sampler (else the policy, detached)")

    # -- generation
    action_space: Literal["text", "choices"] = arg(
        "text", "text: generate actions; choices: pick among the env's action_choices() by "
        "log-probability (always valid, docs/grpo.md)"
    )  # fmt: skip
    choice_score: Literal["sum", "mean"] = arg(
        "sum", "choice mode: a choice's score is its summed token log-probability, or the "
        "mean over its tokens (length-normalised: long choices are not penalised a priori)"
    )  # fmt: skip
    choice_enumerate: bool = arg(
        False, "choice mode: the G actions of a state are its available choices in turn (each "
        "once when G equals their number), not draws; advantages stay group-relative (a variant: "
        "the group's behaviour is uniform over the choices, docs/grpo.md)"
    )  # fmt: skip
    generation_backend: Literal["hf", "vllm"] = arg("hf", "transformers, or vLLM (GPU, untested)")
    temperature: float = arg(1.0, "training sampling temperature (Table 9)")
    eval_temperature: float = arg(0.0, "evaluation temperature, 0 = greedy (Table 9)", ge=0)
    top_p: float = arg(1.0, "nucleus sampling", gt=0, le=1)
    max_new_tokens: int = arg(2048, "response tokens per turn (Table 9)", ge=1)
    max_prompt_tokens: int = arg(3072, "prompt tokens (Table 9); longer lose their start", ge=1)
    generation_batch_size: int = arg(64, "prompts per hf generate call", ge=1)
    vllm_gpu_memory_utilization: float = arg(0.3, "the vLLM engine's GPU share", gt=0, le=1)
    vllm_kwargs: dict[str, Any] = arg({}, "further vllm.LLM arguments", "--vllm-kwarg")

    # -- memory and precision
    lora: LoRASettings | None = arg(None, "LoRA adapter (None: full fine-tuning)")
    gradient_checkpointing: bool = arg(False, "recompute activations in backward")
    precision: Precision = arg("auto", "auto: bf16-mixed on a GPU, fp32 on CPU")
    device: str | None = arg(None, "cpu, cuda, cuda:1 ... (None: cuda when available)")
    use_accelerate: bool = arg(False, "data parallel (implied by WORLD_SIZE > 1)", "--accelerate")

    # -- schedule, evaluation, output
    total_steps: int = arg(400, "training steps (Table 9: 400; System 2: 600)", "--steps", ge=1)
    checkpoint_every: int = arg(50, "checkpoint every N steps (0: only the last)", ge=0)
    keep_last_checkpoints: int | None = arg(None, "keep only the newest N checkpoints", ge=1)
    eval_every: int = arg(0, "evaluate every N steps (0: never)", ge=0)
    eval_episodes: int = arg(100, "episodes per evaluation", ge=1)
    eval_split: str = arg("test", "split of the evaluation tasks")
    output_dir: str = arg("runs/grpo", "metrics.jsonl, checkpoint-STEP/, tensorboard/")
    seed: int = arg(0, "base of every random choice (global RNGs are never seeded)")
    log_tensorboard: bool = arg(False, "also write TensorBoard scalars", "--tensorboard")
    resume_from: str | None = arg(None, "a checkpoint directory or latest", "--resume")

    def __post_init__(self) -> None:
        if isinstance(self.lora, Mapping):
            if "r" not in self.lora:
                raise ConfigError(f"LoRA settings need --lora-r (lora.r), got {dict(self.lora)}")
            self.lora = LoRASettings(**self.lora)
        self.adam_betas = tuple(self.adam_betas)  # type: ignore[assignment]  # from YAML/JSON
        # the checks: ConfigError naming the field, the value and what is expected
        if not self.model_path:
            raise ConfigError("model_path is required: a local model directory (--model PATH)")
        _check_fields(self)
        if self.lora is not None:
            _check_fields(self.lora, "lora.")
        if self.group_size < 2:
            raise ConfigError(f"group_size must be >= 2 for a baseline, got {self.group_size}")
        if self.temperature <= 0:
            raise ConfigError(
                "temperature must be > 0: GRPO needs sampled groups (greedy decoding "
                f"is for evaluation, eval_temperature=0), got {self.temperature!r}"
            )
        if self.choice_enumerate and self.action_space != "choices":
            raise ConfigError("choice_enumerate needs action_space='choices'")
        if self.action_space == "choices" and self.generation_backend != "hf":
            raise ConfigError("action_space='choices' scores choices with transformers: use "
                              "generation_backend='hf'")  # fmt: skip
        if self.env_kwargs.get("split") not in (None, self.split):
            raise ConfigError("env_kwargs sets a split: set the training split with `split` only")
        turns = self.env_kwargs.get("max_turns")
        if None not in (turns, self.max_turns) and turns != self.max_turns:
            raise ConfigError(
                f"env_kwargs sets max_turns={turns!r} but max_turns is "
                f"{self.max_turns!r}; set it once"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values JSON cannot hold, such as a built pool, become their repr)."""
        lora = None if self.lora is None else vars(self.lora)
        return json.loads(json.dumps({**vars(self), "lora": lora}, default=repr))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOConfig:
        """Build from a dict (a saved ``config.json``, a YAML file); unknown keys are errors."""
        names = [f.name for f in dataclasses.fields(cls)]
        if unknown := sorted(set(data) - set(names)):
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, names, n=1)
                hints.append(repr(key) + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(f"unknown GRPOConfig field(s): {', '.join(hints)}")
        return cls(**dict(data))

    @classmethod
    def from_cli(cls, args: argparse.Namespace | Sequence[str]) -> GRPOConfig:
        """From ``orchenv train grpo`` arguments: flags win over ``--config``, it over defaults."""
        if not isinstance(args, argparse.Namespace):
            parser = argparse.ArgumentParser(prog="orchenv train grpo")
            add_arguments(parser)
            args = parser.parse_args(list(args))
        data = _read_config_file(Path(args.config)) if args.config else {}
        data.update(_given(args, cls, data))
        data.update(parse_kwargs(args.set))
        return cls.from_dict(data)


def add_arguments(
    parser: argparse.ArgumentParser, cls: type = GRPOConfig, prefix: str = ""
) -> None:
    """One flag per field of ``cls`` (nested: ``--NAME-FIELD``), default None (= not given)."""
    if cls is GRPOConfig:
        parser.add_argument("--config", metavar="FILE", help="YAML/JSON file of fields (flags win)")
        parser.add_argument(
            "--set", action="append", default=[], metavar="FIELD=VALUE",
            help="any field, repeatable (values parsed as JSON when possible)",
        )  # fmt: skip
    for f, kind, _ in _fields(cls):
        if dataclasses.is_dataclass(kind):
            add_arguments(parser, kind, prefix=f"{prefix}{f.name}_")  # type: ignore[arg-type]
            continue
        default = {} if f.default is dataclasses.MISSING else f.default
        shown = f" (default: {default})" if default not in ("", {}) else ""
        parser.add_argument(
            *f.metadata["flags"], f"--{prefix}{f.name}".replace("_", "-"), dest=prefix + f.name,
            default=None, help=(f.metadata["help"] + shown).replace("%", "%%"), **_parse_as(kind),
        )  # fmt: skip


def _parse_as(kind: Any) -> dict[str, Any]:
    """argparse keywords for a field's type."""
    origin = get_origin(kind) or kind
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is dict:
        return {"action": "append", "metavar": "KEY=VALUE"}
    if origin is list:
        return {"nargs": "+"}
    if origin is tuple:
        return {"nargs": len(get_args(kind)), "type": get_args(kind)[0]}
    if origin is Literal:
        return {"choices": get_args(kind)}
    return {"type": kind}


def _given(args: argparse.Namespace, cls: type, base: Mapping[str, Any], prefix: str = "") -> dict:
    """The fields set on the command line; dicts and nested settings merge over ``base``."""
    out: dict[str, Any] = {}
    for f, kind, _ in _fields(cls):
        inner = dict(base[f.name]) if isinstance(base.get(f.name), Mapping) else {}
        if dataclasses.is_dataclass(kind):
            nested = _given(args, kind, {}, prefix=f"{prefix}{f.name}_")  # type: ignore[arg-type]
            value = {**inner, **nested} if nested else None
        else:
            value = getattr(args, prefix + f.name)
            if value is not None and get_origin(kind) is dict:
                value = {**inner, **parse_kwargs(value)}
        if value is not None:
            out[f.name] = value
    return out


def _check_fields(obj: Any, prefix: str = "") -> None:
    """Every field against its type (ints, dicts, choices) and the bounds written next to it."""
    for f, kind, optional in _fields(type(obj)):
        value, name = getattr(obj, f.name), prefix + f.name
        if value is None and optional:
            continue
        if get_origin(kind) is dict and not isinstance(value, dict):
            raise ConfigError(f"{name} must be a dict, got {type(value).__name__}")
        if get_origin(kind) is Literal and value not in get_args(kind):
            raise ConfigError(f"{name} must be one of {', '.join(get_args(kind))}, got {value!r}")
        bounds = [(*_BOUNDS[key], b) for key, b in f.metadata["bounds"].items()]
        wrong_type = kind is int and (not isinstance(value, int) or isinstance(value, bool))
        if wrong_type or not all(op(value, b) for op, _, b in bounds):
            expected = " and ".join(f"{symbol} {b}" for _, symbol, b in bounds)
            raise ConfigError(
                f"{name} must be {'an int ' if kind is int else ''}{expected}, got {value!r}"
            )


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any, bool]]:
    """Each field of ``cls``, its type without ``| None`` and whether it may be None."""
    hints, out = get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        members = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
        kinds = [m for m in members if m is not type(None)]
        out.append((f, kinds[0], len(kinds) < len(members)))
    return out


def _read_config_file(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")  # JSON by its own parser: YAML 1.1 reads 1e-06 as text
    data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of GRPOConfig fields")
    return data
