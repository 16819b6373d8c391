"""Local Hugging Face ``transformers`` causal LMs as agents (backend name ``"hf"``).

Why: to run a pool of real open-weight models on one machine (a laptop CPU
for small models, a GPU for larger ones) without any server, with exact
token counts from the model's own tokenizer, and with natively batched
generation so ``AgentPool.call_many`` (and vectorised environments) use the
hardware well.

Offline by default: models and tokenizers load with ``local_files_only=True``,
so a run never downloads weights behind the user's back. Download once, e.g.
``hf download Qwen/Qwen2.5-1.5B-Instruct --local-dir models/qwen1.5b``, then
point ``model`` (or an agent's ``backend_kwargs["model_path"]``) at the
directory, or pass ``local_files_only=False`` to allow downloads.

Which model serves an agent: ``spec.backend_kwargs["model_path"]`` if set, else
the backend's ``model`` argument, else ``spec.model``. Agents that resolve to
the same path share one loaded copy. An agent's ``backend_kwargs`` may also
override ``max_new_tokens``, ``do_sample``, ``temperature``, ``top_p`` and
``top_k`` (and ``tokenizer_path``).

Decoding is greedy by default (deterministic). With ``do_sample=True`` every
call draws from its own ``torch.Generator`` seeded with a stable hash of
(seed, agent name, messages): a call's sample does not depend on which other
calls share its batch, the same prompt gives the same text on every run, and
the process-wide torch RNG is never touched. (Sampling is done by a logits
processor that picks the token with the call's generator; ``generate`` then
runs in greedy mode over the result.) Decoding settings come from this
backend; other defaults in the model's ``generation_config`` (such as a
``repetition_penalty``) still apply, as they would with ``model.generate``.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from orchenv.backends.common import BatchedEngine, call_seed, chat_messages, check_sampling
from orchenv.choice_policy import ChoiceScores
from orchenv.error import BackendError, ConfigError, require
from orchenv.pool import AgentSpec, Call, Completion, Message

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

_PURPOSE = "the 'hf' backend (local transformers models)"

_DTYPE_NAMES = {
    "auto": "auto",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}

#: generation settings an agent's ``backend_kwargs`` may override
GENERATION_KEYS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k")


@dataclass(frozen=True)
class _Settings:
    """Generation settings of one group of calls (calls batch together only if equal)."""

    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    top_k: int | None


@dataclass
class _Loaded:
    """A model ready to generate, with what batching and metering need."""

    key: str
    model: Any
    tokenizer: Any
    device: Any
    pad_id: int
    eos_ids: tuple[int, ...]
    has_template: bool
    max_positions: int | None

    def greedy_config(self, max_new_tokens: int, **overrides: Any) -> Any:
        """A greedy ``GenerationConfig`` for this model: sampling, when asked, is done by a
        seeded logits processor. ``overrides`` add fields (e.g. ``repetition_penalty``).
        """
        _, transformers = _deps()
        return transformers.GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            # the library defaults, set so the model's sampling defaults are not merged
            # in (unused in greedy mode, they would only trigger warnings)
            temperature=1.0,
            top_p=1.0,
            top_k=50,
            pad_token_id=self.pad_id,
            eos_token_id=list(self.eos_ids) or None,
            **overrides,
        )


def _check_settings(s: _Settings, where: str) -> None:
    check_sampling(
        where,
        temperature=s.temperature,
        top_p=s.top_p,
        max_tokens=s.max_new_tokens,
        max_tokens_name="max_new_tokens",
        do_sample=s.do_sample,
        top_k=s.top_k,
    )


def _deps() -> tuple[Any, Any]:
    """torch and transformers, or a DependencyError naming the ``train`` extra."""
    torch = require("torch", "train", _PURPOSE)
    transformers = require("transformers", "train", _PURPOSE)
    return torch, transformers


def _transformers_version(transformers: Any) -> tuple[int, int]:
    parts = re.findall(r"\d+", transformers.__version__)[:2]
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 else (0, 0)


def gguf_source(src: str) -> tuple[str, dict[str, str]]:
    """``(path, extra from_pretrained kwargs)`` for a model or tokenizer source: a ``.gguf``
    file loads through transformers' GGUF reader (``gguf_file=``; the weights are
    dequantised to ``dtype``; needs the ``gguf`` package), anything else as it is."""
    if not src.lower().endswith(".gguf"):
        return src, {}
    require("gguf", "train", f"loading the GGUF file {src!r}")
    folder, name = os.path.split(os.path.abspath(src))
    return folder, {"gguf_file": name}


def _load_error(what: str, path: str, local_files_only: bool, exc: BaseException) -> BackendError:
    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or os.path.exists(path)
    if looks_local:
        hint = (
            f"No usable {what} directory there: it should hold config.json, the weights and "
            "the tokenizer files (as written by save_pretrained). Models are loaded offline "
            "(local_files_only=True); point `model` (or the agent's "
            "backend_kwargs['model_path']) at a downloaded model directory. "
        )
    elif local_files_only:
        hint = (
            "Models are loaded offline (local_files_only=True) and it is not in the local "
            f"Hugging Face cache: download it first, e.g. `hf download {path} --local-dir DIR`, "
            "and point the hf backend's `model` (or the agent's backend_kwargs['model_path']) "
            "at DIR, or pass local_files_only=False to allow downloads. "
        )
    else:
        hint = ""
    return BackendError(
        f"the hf backend could not load the {what} at {path!r}. {hint}"
        f"Cause: {type(exc).__name__}: {exc}"
    )


@lru_cache(maxsize=1)
def seeded_sampler_class() -> type:
    """A transformers LogitsProcessor that samples each row with its own generator.

    Built lazily so this module imports without transformers installed.
    """
    import torch
    from transformers import LogitsProcessor

    class SeededSampler(LogitsProcessor):
        """Temperature / top-k / top-p sampling, one ``torch.Generator`` per batch row.

        Returns logits that are -inf except at the sampled token, so greedy
        decoding downstream emits exactly the sampled token.
        """

        def __init__(
            self, seeds: Sequence[int], temperature: float, top_p: float, top_k: int | None
        ) -> None:
            self.seeds = list(seeds)
            self.temperature = float(temperature)
            self.top_p = float(top_p)
            self.top_k = top_k
            self.generators: list[torch.Generator] | None = None

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):  # noqa: ANN204
            if self.generators is None:
                self.generators = [
                    torch.Generator(device=scores.device).manual_seed(s) for s in self.seeds
                ]
            logits = scores.float() / self.temperature
            neg = torch.finfo(logits.dtype).min
            if self.top_k:
                k = min(self.top_k, logits.shape[-1])
                kth = torch.topk(logits, k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, neg)
            if self.top_p < 1.0:
                sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
                probs = torch.softmax(sorted_logits, dim=-1)
                # drop a token once the mass before it already exceeds top_p (the top one stays)
                drop_sorted = (torch.cumsum(probs, dim=-1) - probs) > self.top_p
                drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
                logits = logits.masked_fill(drop, neg)
            probs = torch.softmax(logits, dim=-1)
            picks = torch.stack(
                [
                    torch.multinomial(probs[i], 1, generator=gen)[0]
                    for i, gen in enumerate(self.generators)
                ]
            )
            out = torch.full_like(scores, torch.finfo(scores.dtype).min)
            out.scatter_(1, picks.unsqueeze(1), 0.0)
            return out

    return SeededSampler


class HFBackend(BatchedEngine):
    """Agents served by local ``transformers`` causal LMs, batched.

    Args:
        model: a local directory or hub id, or an already-loaded
            ``PreTrainedModel`` (e.g. a policy being trained); ``None`` means each
            agent's ``spec.model``. An agent's ``backend_kwargs["model_path"]`` wins.
        tokenizer: a path / hub id or a tokenizer object for ``model``; default:
            the model's own path (``model.name_or_path`` for a model object).
        device: ``"cuda"``, ``"cpu"``, ``"cuda:1"``...; ``None`` picks cuda when
            available, else cpu (a model object passed in stays where it is).
        dtype: ``"auto"`` (bf16 on GPU, fp32 on CPU), ``"float32"``,
            ``"float16"`` or ``"bfloat16"``; not applied to model objects.
        max_new_tokens: generation budget per call.
        do_sample, temperature, top_p, top_k: decoding; greedy by default.
        seed: base of the per-call sampling seeds (see the module docstring).
        batch_size: most calls per ``generate``; larger batches use a GPU better.
        local_files_only: load only what is on disk (the default: no downloads).
        trust_remote_code: passed to ``from_pretrained``; leave False unless the
            model needs custom code you have read.

    Metering: prompt and completion tokens are counted exactly from the token
    ids (``token_source="tokenizer"``); the completion count includes the stop
    token when one was generated. ``latency_s`` of each call is the wall time
    of the ``generate`` batch it ran in (what the caller waited), not a share.

    Thread-safe: one lock serialises loading and generation, and
    ``max_concurrency`` is 1; parallelism comes from batching.
    """

    _fresh_on_copy = {"_loaded": {}, "_warned": set()}  # models reload lazily

    def __init__(
        self,
        *,
        model: str | os.PathLike[str] | PreTrainedModel | None = None,
        tokenizer: str | os.PathLike[str] | PreTrainedTokenizerBase | None = None,
        device: str | None = None,
        dtype: str = "auto",
        max_new_tokens: int = 512,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
        batch_size: int = 8,
        local_files_only: bool = True,
        trust_remote_code: bool = False,
    ) -> None:
        if str(dtype).lower() not in _DTYPE_NAMES:
            raise ConfigError(
                f"dtype must be one of {sorted(set(_DTYPE_NAMES.values()))}, got {dtype!r}"
            )
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.settings = _Settings(
            max_new_tokens=max_new_tokens,
            do_sample=bool(do_sample),
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=top_k,
        )
        _check_settings(self.settings, "HFBackend")
        self.model = os.fspath(model) if isinstance(model, os.PathLike) else model
        self.tokenizer = os.fspath(tokenizer) if isinstance(tokenizer, os.PathLike) else tokenizer
        self.device = device
        self.dtype = _DTYPE_NAMES[str(dtype).lower()]
        self.seed = int(seed)
        self.batch_size = batch_size
        self.local_files_only = bool(local_files_only)
        self.trust_remote_code = bool(trust_remote_code)
        self._loaded: dict[str, _Loaded] = {}
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        model = self.model if self.model is None or isinstance(self.model, str) else "<object>"
        return (
            f"HFBackend(model={model!r}, device={self.device!r}, dtype={self.dtype!r}, "
            f"max_new_tokens={self.settings.max_new_tokens}, do_sample={self.settings.do_sample}, "
            f"batch_size={self.batch_size})"
        )

    # -- the Backend protocol ------------------------------------------------------
    def complete_batch(self, calls: Sequence[Call]) -> list[Completion]:
        """Run calls grouped by (model, generation settings), ``batch_size`` at a time.

        Results keep the input order. Within a group, calls are sorted by prompt
        length before chunking so that batches carry little padding.
        """
        if not calls:
            return []
        results: list[Completion | None] = [None] * len(calls)
        with self._lock:
            groups: dict[tuple[str, _Settings], list[int]] = {}
            for i, (spec, _, _) in enumerate(calls):
                loaded = self._ensure_loaded(spec)
                groups.setdefault((loaded.key, self._settings_for(spec)), []).append(i)
            for (key, settings), indices in groups.items():
                loaded = self._loaded[key]
                prompts = {i: self.prompt_ids(loaded, calls[i][1]) for i in indices}
                ordered = sorted(indices, key=lambda i: len(prompts[i]))
                for start in range(0, len(ordered), self.batch_size):
                    chunk = ordered[start : start + self.batch_size]
                    seeds = [call_seed(self.seed, calls[i][0].name, calls[i][1]) for i in chunk]
                    t0 = time.perf_counter()
                    outputs = self._generate(loaded, settings, [prompts[i] for i in chunk], seeds)
                    wall = time.perf_counter() - t0
                    for i, seed, (text, n_new, finish) in zip(chunk, seeds, outputs, strict=True):
                        results[i] = self.engine_completion(
                            calls[i][0],
                            text,
                            len(prompts[i]),
                            n_new,
                            model=key,
                            finish_reason=finish,
                            batch_size=len(chunk),
                            wall_s=wall,
                            **({"seed": seed} if settings.do_sample else {}),
                        )
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Drop every loaded model (and the CUDA cache when one was on a GPU)."""
        with self._lock:
            on_cuda = any(getattr(m.device, "type", "") == "cuda" for m in self._loaded.values())
            self._loaded.clear()
        gc.collect()
        if on_cuda:
            import torch

            torch.cuda.empty_cache()

    # -- resolution and loading -----------------------------------------------------
    def _settings_for(self, spec: AgentSpec) -> _Settings:
        overrides = {k: spec.backend_kwargs[k] for k in GENERATION_KEYS if k in spec.backend_kwargs}
        if not overrides:
            return self.settings
        base = self.settings.__dict__ | overrides
        settings = _Settings(
            max_new_tokens=base["max_new_tokens"],
            do_sample=bool(base["do_sample"]),
            temperature=float(base["temperature"]),
            top_p=float(base["top_p"]),
            top_k=base["top_k"],
        )
        _check_settings(settings, f"agent {spec.name!r} backend_kwargs")
        return settings

    def _sources(self, spec: AgentSpec) -> tuple[Any, Any]:
        """(model source, tokenizer source) for an agent; see the module docstring."""
        kwargs: Mapping[str, Any] = spec.backend_kwargs
        if kwargs.get("model_path"):
            model: Any = os.fspath(kwargs["model_path"])
            tokenizer: Any = kwargs.get("tokenizer_path") or model
        else:
            model = self.model if self.model is not None else spec.model
            tokenizer = kwargs.get("tokenizer_path") or self.tokenizer
            if tokenizer is None:
                tokenizer = model if isinstance(model, str) else _name_or_path(model)
        if isinstance(tokenizer, os.PathLike):
            tokenizer = os.fspath(tokenizer)
        return model, tokenizer

    def _ensure_loaded(self, spec: AgentSpec) -> _Loaded:
        model_src, tok_src = self._sources(spec)
        key = model_src if isinstance(model_src, str) else _object_key(model_src)
        loaded = self._loaded.get(key)
        if loaded is None:
            loaded = self.load(key, model_src, tok_src)
            self._loaded[key] = loaded
        return loaded

    def _resolve_device(self, torch: Any) -> Any:
        if self.device is not None:
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def _resolve_dtype(self, torch: Any, device: Any) -> Any:
        if self.dtype != "auto":
            return getattr(torch, self.dtype)
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32

    def load(self, key: str, model_src: Any, tok_src: Any) -> _Loaded:
        """Load (or adopt) a model and tokenizer; resolve its device, pad and EOS ids, template.

        Public for trainers that generate with a live policy (the GRPO sampler).
        """
        torch, transformers = _deps()
        common = {
            "local_files_only": self.local_files_only,
            "trust_remote_code": self.trust_remote_code,
        }
        if isinstance(model_src, str):
            device = self._resolve_device(torch)
            dtype = self._resolve_dtype(torch, device)
            # transformers renamed `torch_dtype` to `dtype` in 4.56
            dtype_kw = "dtype" if _transformers_version(transformers) >= (4, 56) else "torch_dtype"
            try:
                where, gguf = gguf_source(model_src)
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    where, **{dtype_kw: dtype}, **common, **gguf
                )
            except Exception as exc:
                raise _load_error("model", model_src, self.local_files_only, exc) from exc
            model.to(device)
            model.eval()
            logger.info("hf backend loaded %s on %s (%s)", model_src, device, dtype)
        else:
            model = model_src
            if not callable(getattr(model, "generate", None)):
                raise ConfigError(
                    f"the hf backend's model must be a path or a transformers model with "
                    f"generate(), got {type(model).__name__}"
                )
            if self.device is not None:
                model.to(torch.device(self.device))
            device = next(model.parameters()).device

        if tok_src is None:
            raise ConfigError(
                "the hf backend got a model object without a tokenizer and cannot find one "
                "(model.name_or_path is empty): pass tokenizer=..."
            )
        if isinstance(tok_src, str):
            try:
                where, gguf = gguf_source(tok_src)
                tokenizer = transformers.AutoTokenizer.from_pretrained(where, **common, **gguf)
            except Exception as exc:
                raise _load_error("tokenizer", tok_src, self.local_files_only, exc) from exc
            if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
                tokenizer.pad_token = tokenizer.eos_token  # ours: safe to modify
        else:
            tokenizer = tok_src  # the caller's object: read, never modified

        eos: list[int] = []
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        for value in (gen_eos, tokenizer.eos_token_id):
            for tid in value if isinstance(value, (list, tuple)) else [value]:
                if tid is not None and int(tid) not in eos:
                    eos.append(int(tid))
        pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = eos[0] if eos else 0
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if not has_template:
            logger.warning(
                "the tokenizer of %s has no chat template: prompts are rendered as "
                "'role: content' lines ending with 'assistant:'",
                key,
            )
        max_positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        return _Loaded(
            key=key,
            model=model,
            tokenizer=tokenizer,
            device=device,
            pad_id=int(pad_id),
            eos_ids=tuple(eos),
            has_template=has_template,
            max_positions=max_positions if isinstance(max_positions, int) else None,
        )

    # -- prompts and generation ------------------------------------------------------
    def prompt_ids(self, loaded: _Loaded, messages: Sequence[Message]) -> list[int]:
        """Token ids of the chat-formatted prompt, ending with the assistant header."""
        tok = loaded.tokenizer
        chat = chat_messages(messages)
        if loaded.has_template:
            text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]  # the template has them
        else:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in chat) + "\nassistant:"
            ids = tok(text)["input_ids"]
        if not ids:
            raise BackendError(f"the prompt for model {loaded.key!r} tokenized to nothing")
        return list(ids)

    def score_choices(
        self,
        spec: AgentSpec,
        messages: Sequence[Message],
        choices: Sequence[str],
        *,
        share_prompt: bool = True,
    ) -> ChoiceScores:
        """Choice mode (``orchenv.choice_policy``): the summed log-probability of each choice
        as the reply to ``messages``, all choices in one forward pass sharing the prompt's KV
        cache (see :func:`choice_logprobs`). Uses ``spec``'s model, at temperature 1."""
        torch, _ = _deps()
        if not choices:
            raise ConfigError("score_choices needs at least one choice")
        with self._lock:
            loaded = self._ensure_loaded(spec)
            prompt = self.prompt_ids(loaded, messages)
            ids = choice_token_ids(loaded, choices)
            model = loaded.model
            was_training = bool(getattr(model, "training", False))
            model.eval()
            try:
                with torch.inference_mode():
                    scores = choice_logprobs(
                        model, prompt, ids, pad_id=loaded.pad_id, share_prompt=share_prompt
                    )
            except Exception as exc:
                raise BackendError(
                    f"choice scoring with {loaded.key!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            finally:
                if was_training:
                    model.train()
        return ChoiceScores(
            logprobs=[float(v) for v in scores.tolist()],
            prompt_tokens=len(prompt),
            choice_tokens=sum(len(c) for c in ids),
            cost_usd=(
                len(prompt) * spec.price_prompt + sum(len(c) for c in ids) * spec.price_completion
            )
            / 1e6,
            token_counts=tuple(len(c) for c in ids),
        )

    def _generate(
        self,
        loaded: _Loaded,
        settings: _Settings,
        prompts: list[list[int]],
        seeds: list[int],
    ) -> list[tuple[str, int, str]]:
        """Left-padded batched generate; (text, completion tokens, finish reason) per prompt."""
        torch, transformers = _deps()
        width = max(len(p) for p in prompts)
        if loaded.max_positions and width + settings.max_new_tokens > loaded.max_positions:
            warn_key = (loaded.key, "length")
            if warn_key not in self._warned:
                self._warned.add(warn_key)
                logger.warning(
                    "prompt (%d tokens) + max_new_tokens (%d) exceeds %s's "
                    "max_position_embeddings (%d); output quality may degrade",
                    width,
                    settings.max_new_tokens,
                    loaded.key,
                    loaded.max_positions,
                )
        input_ids, attention = left_padded(prompts, loaded.pad_id)
        config = loaded.greedy_config(settings.max_new_tokens)  # sampling: SeededSampler
        processors = None
        if settings.do_sample:
            sampler = seeded_sampler_class()(
                seeds, settings.temperature, settings.top_p, settings.top_k
            )
            processors = transformers.LogitsProcessorList([sampler])
        model = loaded.model
        was_training = bool(getattr(model, "training", False))
        model.eval()
        try:
            with torch.inference_mode():
                out = model.generate(
                    input_ids=input_ids.to(loaded.device),
                    attention_mask=attention.to(loaded.device),
                    generation_config=config,
                    logits_processor=processors,
                )
        except Exception as exc:
            raise BackendError(
                f"generation with {loaded.key!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            if was_training:
                model.train()
        new_rows = out[:, width:].tolist()
        eos = set(loaded.eos_ids)
        results = []
        for row in new_rows:
            stop = next((j for j, tid in enumerate(row) if tid in eos), None)
            n_new = len(row) if stop is None else stop + 1
            text = loaded.tokenizer.decode(row[:n_new], skip_special_tokens=True)
            results.append((text, n_new, "length" if stop is None else "stop"))
        return results


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """``(input_ids, attention_mask)`` long tensors of a batch of prompts, padded on the
    left with ``pad_id`` to the longest (so every row's generation starts at one column).
    """
    torch, _ = _deps()
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


def _name_or_path(model: Any) -> str | None:
    name = getattr(model, "name_or_path", None) or getattr(
        getattr(model, "config", None), "_name_or_path", None
    )
    return str(name) if name else None


def _object_key(model: Any) -> str:
    """Cache key of a model object: its identity (two objects never share a slot)."""
    return f"<{type(model).__name__} object at {id(model):#x}>"


# -- choice mode: log-probability scoring of given replies (orchenv.choice_policy) -----------
def choice_token_ids(loaded: _Loaded, choices: Sequence[str]) -> list[list[int]]:
    """Token ids of each choice as the assistant's whole reply: its text, then the model's
    end-of-turn token (so a choice that is a prefix of a longer one does not score higher)."""
    stop = list(loaded.eos_ids[:1])
    out = []
    for text in choices:
        ids = list(loaded.tokenizer(text, add_special_tokens=False)["input_ids"]) + stop
        if not ids:
            raise BackendError(f"choice {text[:60]!r} tokenized to nothing")
        out.append(ids)
    return out


def choice_logprobs(
    model: Any,
    prompt_ids: Sequence[int],
    choice_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    share_prompt: bool = True,
    amp: bool = False,
) -> torch.Tensor:
    """Summed ``log p(choice | prompt)`` of every choice, a float32 ``[n_choices]`` tensor,
    differentiable (wrap in ``torch.no_grad`` to score only).

    All choices go through the model in one batched forward pass. ``share_prompt``: the
    prompt runs once and its KV cache is repeated for the choices (``DynamicCache``), so the
    cost is one prompt plus the choices' tokens; when the model cannot return a cache (a
    training forward with gradient checkpointing turns caching off) each row is the prompt
    and its choice, batched, which gives the same numbers. ``temperature`` divides the logits
    (the sampler's distribution).
    """
    torch, _ = _deps()
    device = next(model.parameters()).device
    n, width = len(choice_ids), max(len(c) for c in choice_ids)
    lp = len(prompt_ids)
    choice = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, ids in enumerate(choice_ids):
        choice[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, : len(ids)] = 1
    choice, mask = choice.to(device), mask.to(device)
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        logits = None
        if share_prompt:
            first = model(input_ids=prompt, use_cache=True)
            cache = getattr(first, "cache", None) or getattr(first, "past_key_values", None)
            if cache is not None and callable(getattr(cache, "batch_repeat_interleave", None)):
                cache.batch_repeat_interleave(n)
                rest = model(
                    input_ids=choice,
                    attention_mask=torch.cat(
                        [torch.ones_like(choice[:, :1]).expand(n, lp), mask], 1
                    ),
                    position_ids=(lp + torch.arange(width, device=device)).expand(n, width),
                    use_cache=True,
                    **{_cache_kwarg(model): cache},
                ).logits
                head = first.logits[:, -1:].expand(n, 1, first.logits.shape[-1])
                logits = torch.cat([head, rest[:, :-1]], dim=1)  # logits[:, j] predicts token j
        if logits is None:  # no shared cache: prompt + choice per row, right-padded
            rows = torch.cat([prompt.expand(n, lp), choice], dim=1)
            attention = torch.cat([torch.ones_like(rows[:, :lp]), mask], dim=1)
            full = model(input_ids=rows, attention_mask=attention, use_cache=False).logits
            logits = full[:, lp - 1 : lp - 1 + width]
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = torch.gather(logits, -1, choice.unsqueeze(-1)).squeeze(-1)
    token_lp = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(mask.bool(), token_lp, torch.zeros_like(token_lp)).sum(dim=-1)


def _cache_kwarg(model: Any) -> str:
    """The forward argument that takes a KV cache: ``cache`` in newer transformers (which
    deprecate ``past_key_values``), else ``past_key_values``."""
    import inspect

    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
