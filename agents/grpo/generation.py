"""Samplers for the policy being trained: chat prompts in, ``Sample``s (ids + logprobs) out.

Both implement ``orchenv.agents.grpo.algorithms.Sampler``: one call takes every
prompt of a rollout depth and returns one ``Sample`` per prompt, in order.

``HFPolicySampler`` (CPU or GPU, tested): transformers ``generate`` on the live
policy, left-padded batches of ``batch_size`` prompts. Sampling is done by the
``hf`` backend's seeded logits processor (``orchenv.backends.hf``), one
``torch.Generator`` per row, so the process-wide RNG is never touched and a
row's sample does not depend on which rows share its batch. The logprob of each
sampled token is read inside generation, from the same logits the token was
drawn from: log_softmax(logits / temperature), i.e. the tempered distribution
*before* top-p truncation, which is the distribution the trainer's update
computes (it divides its logits by the same temperature). At temperature 1 and on
the same weights the two agree up to float rounding between the KV-cached
decode and the full forward pass (a test checks this). No extra forward pass is
needed and only one float per token is kept (``output_scores`` would keep a
[batch, vocab] tensor per step).

``VLLMPolicySampler`` (GPU, UNTESTED here): the same contract on a vLLM engine
started through ``orchenv.backends.vllm_backend.VLLMBackend``. The trainer calls
``sync_weights(policy)`` before each step's rollouts; token ids and the sampled
tokens' logprobs come from vLLM's outputs (``SamplingParams(logprobs=0)``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from orchenv.agents.grpo.algorithms import Sample
from orchenv.backends.hf import HFBackend, _deps, _sampler_class, call_seed
from orchenv.error import BackendError, ConfigError, require

logger = logging.getLogger(__name__)

Messages = list[dict[str, str]]


def row_seed(seed: int, call: int, row: int) -> int:
    """The sampling seed of one prompt: a stable hash of (seed, call number, row)."""
    return call_seed(seed, f"grpo-policy/{call}/{row}", ())


class _Counters:
    """What a sampler did since ``pop_stats()``: prompts, tokens, seconds."""

    def __init__(self) -> None:
        self.prompts = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seconds = 0.0
        self.truncated_prompts = 0

    def pop(self) -> dict[str, float]:
        out = dict(vars(self))
        self.__init__()  # type: ignore[misc]
        return out


class HFPolicySampler:
    """Sample controller actions from a transformers causal LM (the policy being trained).

    Args:
        model: the policy (a ``PreTrainedModel``, peft-wrapped or not). It is switched
            to eval mode while generating and restored afterwards.
        tokenizer: its tokenizer (its chat template renders the prompts).
        temperature: > 0 samples; 0 decodes greedily (evaluation; logprobs are None).
        top_p: nucleus sampling.
        max_new_tokens: completion budget per prompt.
        max_prompt_tokens: longer prompts keep their last tokens (warned once, counted).
        batch_size: prompts per ``generate`` call (prompts are sorted by length first).
        seed: base of the per-row sampling seeds; ``reseed`` sets it per training step.
        autocast_dtype: e.g. ``torch.bfloat16`` to generate under autocast (bf16-mixed).

    The completion of each prompt is the generated ids up to and including the
    first end-of-sequence token (or all ``max_new_tokens`` ids when none came);
    the padding ``generate`` adds after it is dropped.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        max_prompt_tokens: int | None = None,
        batch_size: int = 64,
        seed: int = 0,
        autocast_dtype: Any = None,
    ) -> None:
        if not temperature >= 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if not 0.0 < top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p!r}")
        for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        # the hf backend resolves EOS ids, the pad id and the chat template for us
        self._backend = HFBackend(model=model, tokenizer=tokenizer)
        self._loaded = self._backend._load("policy", model, tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = max_new_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self.autocast_dtype = autocast_dtype
        self.seed = int(seed)
        self._calls = 0
        self._stats = _Counters()
        self._warned_truncation = False

    @property
    def pad_id(self) -> int:
        return self._loaded.pad_id

    def reseed(self, seed: int) -> None:
        """Restart the seed sequence (the trainer does this once per step: resumable)."""
        self.seed = int(seed)
        self._calls = 0

    def with_settings(self, **settings: Any) -> HFPolicySampler:
        """A copy sharing the model with other decoding settings (e.g. greedy evaluation)."""
        clone = copy.copy(self)
        for key, value in settings.items():
            if not hasattr(self, key):
                raise ConfigError(f"HFPolicySampler has no setting {key!r}")
            setattr(clone, key, value)
        clone._stats = _Counters()
        return clone

    def pop_stats(self) -> dict[str, float]:
        """Counters since the last call: prompts, prompt/completion tokens, seconds."""
        return self._stats.pop()

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Chat-template token ids of ``messages`` ending with the assistant header."""
        ids = self._backend._prompt_ids(self._loaded, messages)
        limit = self.max_prompt_tokens
        if limit is not None and len(ids) > limit:
            self._stats.truncated_prompts += 1
            if not self._warned_truncation:
                self._warned_truncation = True
                logger.warning(
                    "a prompt of %d tokens exceeds max_prompt_tokens=%d and loses its first "
                    "tokens (counted in the step metrics as truncated_prompts)",
                    len(ids),
                    limit,
                )
            ids = ids[len(ids) - limit :]
        return ids

    def __call__(self, prompts: Sequence[Messages]) -> list[Sample]:
        """One ``Sample`` per chat prompt, in order."""
        t0 = time.perf_counter()
        call = self._calls
        self._calls += 1
        ids = [self.prompt_ids(list(m)) for m in prompts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[Sample | None] = [None] * len(ids)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            seeds = [row_seed(self.seed, call, i) for i in chunk]
            outs = self._generate([ids[i] for i in chunk], seeds)
            for i, (completion, logprobs) in zip(chunk, outs, strict=True):
                text = self.tokenizer.decode(completion, skip_special_tokens=True)
                results[i] = Sample(
                    text=text, prompt_ids=ids[i], completion_ids=completion, logprobs=logprobs
                )
        samples = [r for r in results if r is not None]
        self._stats.prompts += len(samples)
        self._stats.prompt_tokens += sum(len(s.prompt_ids) for s in samples)
        self._stats.completion_tokens += sum(len(s.completion_ids) for s in samples)
        self._stats.seconds += time.perf_counter() - t0
        return samples

    def _generate(
        self, prompts: list[list[int]], seeds: list[int]
    ) -> list[tuple[list[int], list[float] | None]]:
        """Left-padded ``generate`` of one batch: (completion ids, logprobs) per row."""
        torch, transformers = _deps()
        loaded = self._loaded
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), loaded.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            input_ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[row, width - len(p) :] = 1
        config = transformers.GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=False,  # sampling is the recorder's seeded processor
            num_beams=1,
            # library defaults, set so the model's own sampling defaults are not merged in
            temperature=1.0,
            top_p=1.0,
            top_k=50,
            repetition_penalty=1.0,
            pad_token_id=loaded.pad_id,
            eos_token_id=list(loaded.eos_ids) or None,
        )
        recorder = None
        processors = None
        if self.temperature > 0:
            recorder = _recorder_class()(seeds, self.temperature, self.top_p)
            processors = transformers.LogitsProcessorList([recorder])
        model = self.model
        was_training = bool(getattr(model, "training", False))
        model.eval()
        device = loaded.device
        autocast = (
            torch.autocast(device_type=device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        try:
            with torch.inference_mode(), autocast:
                out = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    generation_config=config,
                    logits_processor=processors,
                )
        except Exception as exc:
            raise BackendError(f"policy generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if was_training:
                model.train()
        new = out[:, width:].tolist()
        recorded = torch.stack(recorder.logprobs, dim=1).tolist() if recorder else None
        eos = set(loaded.eos_ids)
        results: list[tuple[list[int], list[float] | None]] = []
        for row, tokens in enumerate(new):
            stop = next((j for j, tid in enumerate(tokens) if tid in eos), None)
            n = len(tokens) if stop is None else stop + 1
            logprobs = None if recorded is None else [float(x) for x in recorded[row][:n]]
            results.append((tokens[:n], logprobs))
        return results


@lru_cache(maxsize=1)
def _recorder_class() -> type:
    """The hf backend's seeded sampler, extended to record the sampled tokens' logprobs.

    Built lazily so this module's import does not pull in transformers' generation code.
    """
    import torch

    base = _sampler_class()

    class LogprobRecorder(base):  # type: ignore[misc, valid-type]
        """Samples like ``SeededSampler``; keeps log p(picked token) under logits / T."""

        def __init__(self, seeds: Sequence[int], temperature: float, top_p: float) -> None:
            super().__init__(seeds, temperature, top_p, None)
            self.logprobs: list[torch.Tensor] = []

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):  # noqa: ANN204
            out = super().__call__(input_ids, scores)
            picks = out.argmax(dim=-1, keepdim=True)
            logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)
            self.logprobs.append(logp.gather(1, picks).squeeze(1))
            return out

    return LogprobRecorder


# -- vLLM ------------------------------------------------------------------------------------

_VLLM_PURPOSE = "GRPO generation with vLLM (generation_backend='vllm')"


class VLLMPolicySampler:
    """Sample controller actions with a vLLM engine on a CUDA GPU (UNTESTED in this repo).

    Args:
        model_path: the policy's initial weights (the engine loads them once).
        temperature, top_p, max_new_tokens, max_prompt_tokens, seed: as ``HFPolicySampler``
            (``max_prompt_tokens`` maps to ``SamplingParams(truncate_prompt_tokens=...)``).
        gpu_memory_utilization: the engine's share of GPU memory; the policy, its
            gradients and optimizer state need the rest.
        engine_kwargs: further ``vllm.LLM`` arguments (``max_model_len``, ``dtype``...).

    Raises ``DependencyError`` without vllm and ``BackendError`` without a GPU.
    vLLM returns logprobs of the model's raw distribution by default; at
    temperature != 1 pass ``engine_kwargs={"logprobs_mode": "processed_logprobs"}``
    (newer vLLM) or train with ``use_sampler_logprobs=False``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        max_prompt_tokens: int | None = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        engine_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        self._vllm = require("vllm", "vllm", _VLLM_PURPOSE)
        from orchenv.backends.vllm_backend import VLLMBackend

        self.backend = VLLMBackend(
            model=str(model_path),
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            trust_remote_code=trust_remote_code,
            engine_kwargs=engine_kwargs,
        )
        self.backend._vllm()  # the GPU check: BackendError on a CPU-only machine
        self.model_path = str(model_path)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = max_new_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = int(seed)
        self._calls = 0
        self._stats = _Counters()

    def reseed(self, seed: int) -> None:
        self.seed = int(seed)
        self._calls = 0

    def with_settings(self, **settings: Any) -> VLLMPolicySampler:
        clone = copy.copy(self)
        for key, value in settings.items():
            if not hasattr(self, key):
                raise ConfigError(f"VLLMPolicySampler has no setting {key!r}")
            setattr(clone, key, value)
        clone._stats = _Counters()
        return clone

    def pop_stats(self) -> dict[str, float]:
        return self._stats.pop()

    def sync_weights(self, model: Any) -> None:
        """Copy the policy's current weights into the engine (before each step's rollouts).

        Full fine-tuning: the state dict as is. LoRA (peft): the adapter is merged into
        the base weights, the merged tensors are sent under the base model's names,
        and the merge is undone, so the engine never needs LoRA support.
        """
        merged = callable(getattr(model, "merge_adapter", None))
        if merged:
            model.merge_adapter()
        try:
            weights = list(_engine_weights(model))
            self.backend.load_weights(weights, model=self.model_path)
        finally:
            if merged:
                model.unmerge_adapter()

    def __call__(self, prompts: Sequence[Messages]) -> list[Sample]:
        t0 = time.perf_counter()
        call = self._calls
        self._calls += 1
        llm = self.backend._engine(self.model_path)
        params = []
        for i in range(len(prompts)):
            kwargs: dict[str, Any] = {
                "temperature": self.temperature,
                "top_p": self.top_p,
                "max_tokens": self.max_new_tokens,
                "seed": row_seed(self.seed, call, i),
                "logprobs": 0 if self.temperature > 0 else None,
            }
            if self.max_prompt_tokens is not None:
                kwargs["truncate_prompt_tokens"] = self.max_prompt_tokens
            params.append(self._vllm.SamplingParams(**kwargs))
        conversations = [[dict(m) for m in messages] for messages in prompts]
        try:
            outputs = list(llm.chat(conversations, sampling_params=params, use_tqdm=False))
        except Exception as exc:
            raise BackendError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        if len(outputs) != len(prompts):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        samples = [self._sample(out) for out in outputs]
        self._stats.prompts += len(samples)
        self._stats.prompt_tokens += sum(len(s.prompt_ids) for s in samples)
        self._stats.completion_tokens += sum(len(s.completion_ids) for s in samples)
        self._stats.seconds += time.perf_counter() - t0
        return samples

    def _sample(self, out: Any) -> Sample:
        """A vLLM ``RequestOutput`` as a Sample (ids include the EOS vLLM stopped on)."""
        first = out.outputs[0]
        completion = [int(t) for t in first.token_ids]
        logprobs = None
        if self.temperature > 0:
            if first.logprobs is None:
                raise BackendError("vLLM returned no logprobs although logprobs=0 was requested")
            logprobs = [
                float(step[tid].logprob)
                for tid, step in zip(completion, first.logprobs, strict=True)
            ]
        return Sample(
            text=first.text,
            prompt_ids=[int(t) for t in out.prompt_token_ids],
            completion_ids=completion,
            logprobs=logprobs,
        )

    def close(self) -> None:
        self.backend.close()


def _engine_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, tensor) pairs under the base model's parameter names (peft prefixes removed)."""
    out = []
    for name, tensor in model.state_dict().items():
        if "lora_" in name or ".original_module." in name:
            continue
        name = name.removeprefix("base_model.model.")
        name = name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        out.append((name, tensor.detach()))
    return out
