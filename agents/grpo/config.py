"""``GRPOConfig``: every knob of the GRPO trainer, each written once with its help and bounds.

Defaults follow seed 000, appendix C, Table 9 (System 1): 128 queries per step,
group size 4, prompts up to 3072 and responses up to 2048 tokens, learning rate
1e-6, 400 steps, temperature 1 for training and 0 (greedy) for evaluation,
discount 1. What Table 9 leaves open (optimizer, clipping, micro-batching, LoRA,
precision) follows common GRPO practice; docs/grpo.md explains each choice.

The command line is generated from the fields (``add_arguments``): a field is
``--field-name`` plus the aliases written next to it, nested settings are
``--lora-r`` and so on, ``--set FIELD=VALUE`` sets any field and ``--config
FILE`` (YAML or JSON) a whole config; flags win over the file, the file over the
defaults. No torch here: the CLI builds its parser from this module.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    target_modules: str | list[str] = arg("all-linear", "modules to adapt (q_proj v_proj ...)")

    def __post_init__(self) -> None:
        if self.alpha is None and isinstance(self.r, int):
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
    skip_zero_advantage: bool = arg(False, "leave samples with advantage 0 out of the update")

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
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the field, the value and what is expected."""
        if not self.model_path:
            raise ConfigError("model_path is required: a local model directory (--model PATH)")
        _check_fields(self)
        if self.lora is not None:
            _check_fields(self.lora, "lora.")
        _require(
            self.group_size >= 2,
            f"group_size must be >= 2 for group-relative advantages, got {self.group_size} "
            "(a group of one has no baseline and every advantage would be 0)",
        )
        _require(
            self.temperature > 0,
            f"temperature (training) must be > 0: GRPO needs sampled groups, got "
            f"{self.temperature!r}; greedy decoding is for evaluation (eval_temperature=0)",
        )
        split, turns = self.env_kwargs.get("split"), self.env_kwargs.get("max_turns")
        _require(
            split in (None, self.split),
            f"env_kwargs sets split={split!r} but split is {self.split!r}; set the training "
            "split with `split` (--split) only",
        )
        _require(
            None in (turns, self.max_turns) or turns == self.max_turns,
            f"env_kwargs sets max_turns={turns!r} but max_turns is {self.max_turns!r}; set it once",
        )
        _require(
            self.resume_from is None or bool(str(self.resume_from).strip()),
            "resume_from must be a checkpoint directory, 'latest' or None",
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (values JSON cannot hold, such as a built pool, become their repr)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["lora"] = None if self.lora is None else dataclasses.asdict(self.lora)
        return json.loads(json.dumps(out, default=repr))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOConfig:
        """Build from a dict (a saved ``config.json``, a YAML file); unknown keys are errors."""
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(data) - names):
            import difflib

            hints = [
                repr(k)
                + "".join(
                    f" (did you mean {m!r}?)" for m in difflib.get_close_matches(k, names, n=1)
                )
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
        data = _read_config_file(args.config) if args.config else {}
        data.update(_given(args, cls, data))
        data.update(parse_kwargs(args.set))
        return cls.from_dict(data)


# -- the command line, generated from the fields ------------------------------------------------


def add_arguments(
    parser: argparse.ArgumentParser, cls: type = GRPOConfig, prefix: str = ""
) -> None:
    """One flag per field of ``cls`` (a nested dataclass's as ``--NAME-FIELD``), default None.

    Unset flags keep the dataclass default (or the --config file's value).
    """
    if cls is GRPOConfig:
        parser.add_argument("--config", metavar="FILE", help="YAML/JSON file of fields (flags win)")
        parser.add_argument(
            "--set", action="append", default=[], metavar="FIELD=VALUE",
            help="any field, repeatable (values parsed as JSON when possible)",
        )  # fmt: skip
    for f, hint in _fields(cls):
        if (nested := _nested(hint)) is not None:
            add_arguments(parser, nested, prefix=f"{prefix}{f.name}_")
            continue
        default = {} if f.default is dataclasses.MISSING else f.default
        shown = f" (default: {default})" if default not in ("", {}) else ""
        parser.add_argument(
            *f.metadata["flags"], f"--{prefix}{f.name}".replace("_", "-"), dest=prefix + f.name,
            default=None, help=(f.metadata["help"] + shown).replace("%", "%%"), **_parse_as(hint),
        )  # fmt: skip


def _parse_as(hint: Any) -> dict[str, Any]:
    """argparse keywords for a field's type."""
    options = _options(hint)
    kinds = {get_origin(o) or o for o in options}
    if bool in kinds:
        return {"action": argparse.BooleanOptionalAction}
    if dict in kinds:
        return {"action": "append", "metavar": "KEY=VALUE"}
    if list in kinds:
        return {"nargs": "+"}
    if tuple in kinds:
        items = get_args(options[0])
        return {"nargs": len(items), "type": items[0]}
    if Literal in kinds:
        return {"choices": get_args(options[0])}
    return {"type": options[0]}


def _given(args: argparse.Namespace, cls: type, base: Mapping[str, Any], prefix: str = "") -> dict:
    """The fields set on the command line; dicts and nested settings merge over ``base``."""
    out: dict[str, Any] = {}
    for f, hint in _fields(cls):
        inner = dict(base[f.name]) if isinstance(base.get(f.name), Mapping) else {}
        value: Any
        if (nested := _nested(hint)) is not None:
            value = _given(args, nested, {}, prefix=f"{prefix}{f.name}_")
            value = {**inner, **value} if value else None
        else:
            value = getattr(args, prefix + f.name, None)
            if value is not None and dict in {get_origin(o) for o in _options(hint)}:
                value = {**inner, **parse_kwargs(value)}
        if value is not None:
            out[f.name] = value
    return out


def _check_fields(obj: Any, prefix: str = "") -> None:
    """Every field against its type (ints, choices) and the bounds written next to it."""
    for f, hint in _fields(type(obj)):
        value, name, options = getattr(obj, f.name), prefix + f.name, _options(hint)
        if value is None and len(options) < len(get_args(hint)):  # ``X | None``
            continue
        if get_origin(options[0]) is dict and not isinstance(value, dict):
            raise ConfigError(f"{name} must be a dict, got {type(value).__name__}")
        if get_origin(options[0]) is Literal and value not in get_args(options[0]):
            raise ConfigError(
                f"{name} must be one of {', '.join(get_args(options[0]))}, got {value!r}"
            )
        integer = options[0] is int
        bounds = [(*_BOUNDS[key], b) for key, b in f.metadata["bounds"].items()]
        wrong_type = integer and (not isinstance(value, int) or isinstance(value, bool))
        if wrong_type or not all(op(value, b) for op, _, b in bounds):
            expected = " and ".join(f"{sym} {b}" for _, sym, b in bounds)
            raise ConfigError(
                f"{name} must be {'an int ' if integer else ''}{expected}, got {value!r}"
            )


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def _options(hint: Any) -> list[Any]:
    """The non-None members of ``X | Y | None`` (or ``[hint]``)."""
    if get_origin(hint) in (Union, types.UnionType):
        return [a for a in get_args(hint) if a is not type(None)]
    return [hint]


def _nested(hint: Any) -> type | None:
    return next((o for o in _options(hint) if dataclasses.is_dataclass(o)), None)  # type: ignore[return-value]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _read_config_file(path: str | Path) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    text = p.read_text(encoding="utf-8")  # JSON by its own parser: YAML 1.1 reads 1e-06 as text
    data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of GRPOConfig fields")
    return data
