"""Samplers of the policy being trained: chat prompts in, ``Sample``s (ids + logprobs) out.

``HFPolicySampler`` (tested) runs transformers ``generate`` on the live policy. It
samples with the ``hf`` backend's seeded logits processor, one ``torch.Generator``
per row: the global RNG is never touched and a row's sample does not depend on its
batch. Each sampled token's logprob is read from the logits it was drawn from,
log_softmax(logits / T) before top-p, the distribution the update computes, so no
extra forward pass is needed (a test checks they agree). ``VLLMPolicySampler``
(GPU, UNTESTED here) does the same on a vLLM engine that the trainer syncs the
policy's weights into before each step.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch

from orchenv.agents.grpo.algorithms import Messages, Sample
from orchenv.agents.grpo.dist import autocast
from orchenv.backends.hf import HFBackend, call_seed, seeded_sampler_class
from orchenv.error import BackendError, ConfigError, require

logger = logging.getLogger(__name__)


def row_seed(seed: int, call: int, row: int) -> int:
    """The sampling seed of one prompt: a stable hash of (seed, call number, row)."""
    return call_seed(seed, f"grpo-policy/{call}/{row}", ())


class PolicySampler:
    """A ``Sampler`` the trainer can reseed per step (resumable), copy with other decoding
    settings (greedy evaluation), read counters from and sync weights into.

    temperature > 0 samples and records logprobs; 0 decodes greedily (logprobs None).
    Prompts over ``max_prompt_tokens`` keep their last tokens. Subclasses write ``_sample``.
    """

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        max_prompt_tokens: int | None = None,
        seed: int = 0,
    ) -> None:
        if not (temperature >= 0 and 0.0 < top_p <= 1.0 and max_new_tokens >= 1):
            raise ConfigError(f"bad decoding: {temperature=}, {top_p=}, {max_new_tokens=}")
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.reseed(seed)
        self._stats = _zero_stats()

    def reseed(self, seed: int) -> None:
        """Restart the seed sequence (the trainer does this once per step)."""
        self.seed, self._calls = int(seed), 0

    def with_settings(self, **settings: Any) -> PolicySampler:
        """A copy sharing the model with other decoding settings."""
        clone = copy.copy(self)
        for key, value in settings.items():
            if key not in vars(self):
                raise ConfigError(f"{type(self).__name__} has no setting {key!r}")
            setattr(clone, key, value)
        clone._stats = _zero_stats()
        return clone

    def pop_stats(self) -> dict[str, float]:
        """Counters since the last call, named as the trainer's step metrics."""
        stats, self._stats = self._stats, _zero_stats()
        return stats

    def sync_weights(self, model: Any) -> None:
        """Copy the policy's weights in (a no-op for samplers that use the policy itself)."""

    def close(self) -> None:
        """Release what the sampler holds (an engine)."""

    def __call__(self, prompts: Sequence[Messages]) -> list[Sample]:
        t0 = time.perf_counter()
        call, self._calls = self._calls, self._calls + 1
        samples = self._sample([list(m) for m in prompts], call)
        self._stats["tokens/prompt"] += sum(len(s.prompt_ids) for s in samples)
        self._stats["tokens/generated"] += sum(len(s.completion_ids) for s in samples)
        self._stats["time/generation_s"] += time.perf_counter() - t0
        return samples

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        raise NotImplementedError


class HFPolicySampler(PolicySampler):
    """Sample from a transformers causal LM (peft-wrapped or not), ``batch_size`` prompts per
    ``generate`` (sorted by length), under bf16 autocast when ``autocast_dtype`` is given.

    A completion runs up to and including the first EOS token (padding after it dropped).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 64,
        autocast_dtype: torch.dtype | None = None,
        **decoding: Any,
    ) -> None:
        super().__init__(**decoding)
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size!r}")
        # the hf backend resolves the EOS ids, the pad id and the chat template
        self._backend = HFBackend(model=model, tokenizer=tokenizer)
        self._loaded = self._backend.load("policy", model, tokenizer)
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.autocast_dtype = batch_size, autocast_dtype
        self._warned_truncation = False

    @property
    def pad_id(self) -> int:
        return self._loaded.pad_id

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Chat-template token ids of ``messages`` ending with the assistant header."""
        ids = self._backend.prompt_ids(self._loaded, messages)
        limit = self.max_prompt_tokens
        if limit is not None and len(ids) > limit:
            self._stats["truncated_prompts"] += 1
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

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        ids = [self.prompt_ids(m) for m in prompts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[Any] = [None] * len(ids)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            seeds = [row_seed(self.seed, call, i) for i in chunk]
            outs = self._generate([ids[i] for i in chunk], seeds)
            for i, (completion, logprobs) in zip(chunk, outs, strict=True):
                text = self.tokenizer.decode(completion, skip_special_tokens=True)
                results[i] = Sample(text, ids[i], completion, logprobs)
        return results

    def _generate(self, prompts: list[list[int]], seeds: list[int]) -> list[tuple[list[int], Any]]:
        """Left-padded ``generate`` of one batch: (completion ids, logprobs or None) per row."""
        import transformers

        loaded, width = self._loaded, max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), loaded.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            input_ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[row, width - len(p) :] = 1
        config = transformers.GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=False,  # sampling is the recorder's seeded processor
            num_beams=1,
            # library defaults, so the model's own sampling defaults are not merged in
            temperature=1.0,
            top_p=1.0,
            top_k=50,
            repetition_penalty=1.0,
            pad_token_id=loaded.pad_id,
            eos_token_id=list(loaded.eos_ids) or None,
        )
        sampling = self.temperature > 0
        recorder = _recorder_class()(seeds, self.temperature, self.top_p) if sampling else None
        was_training = bool(getattr(self.model, "training", False))
        self.model.eval()
        try:
            with torch.inference_mode(), autocast(self.autocast_dtype, loaded.device):
                out = self.model.generate(
                    input_ids=input_ids.to(loaded.device),
                    attention_mask=attention.to(loaded.device),
                    generation_config=config,
                    logits_processor=transformers.LogitsProcessorList(
                        [recorder] if sampling else []
                    ),
                )
        except Exception as exc:
            raise BackendError(f"policy generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if was_training:
                self.model.train()
        recorded = torch.stack(recorder.logprobs, dim=1).tolist() if recorder else None
        results = []
        for row, tokens in enumerate(out[:, width:].tolist()):
            stop = next((j for j, tid in enumerate(tokens) if tid in loaded.eos_ids), None)
            n = len(tokens) if stop is None else stop + 1
            results.append((tokens[:n], None if recorded is None else recorded[row][:n]))
        return results


@lru_cache(maxsize=1)
def _recorder_class() -> type:
    """The hf backend's seeded sampler, also recording log p(picked token) under logits / T.

    Built lazily so importing this module does not load transformers' generation code.
    """

    class LogprobRecorder(seeded_sampler_class()):  # type: ignore[misc]
        def __init__(self, seeds: Sequence[int], temperature: float, top_p: float) -> None:
            super().__init__(seeds, temperature, top_p, None)
            self.logprobs: list[torch.Tensor] = []

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):  # noqa: ANN204
            out = super().__call__(input_ids, scores)
            logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)
            self.logprobs.append(logp.gather(1, out.argmax(dim=-1, keepdim=True)).squeeze(1))
            return out

    return LogprobRecorder


class VLLMPolicySampler(PolicySampler):
    """Sample with a vLLM engine on a CUDA GPU (UNTESTED in this repo) loaded from
    ``model_path``; ``gpu_memory_utilization`` leaves the rest to the policy's training,
    ``engine_kwargs`` go to ``vllm.LLM``, ``max_prompt_tokens`` is truncate_prompt_tokens.

    DependencyError without vllm, BackendError without a GPU. vLLM's logprobs are of
    the raw distribution unless ``engine_kwargs={"logprobs_mode": "processed_logprobs"}``
    (newer vLLM): at temperature != 1 use that or ``use_sampler_logprobs=False``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float = 0.3,
        engine_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = False,
        **decoding: Any,
    ) -> None:
        super().__init__(**decoding)
        self._vllm = require(
            "vllm", "vllm", "GRPO generation with vLLM (generation_backend='vllm')"
        )
        from orchenv.backends.vllm_backend import VLLMBackend

        self.model_path = str(model_path)
        self.backend = VLLMBackend(
            model=self.model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=self.seed,
            trust_remote_code=trust_remote_code,
            engine_kwargs=engine_kwargs,
        )
        self.backend.engine()  # the GPU check, and the engine starts now rather than mid-step

    def sync_weights(self, model: Any) -> None:
        """Copy the policy's weights into the engine. A LoRA adapter is merged into the base
        weights for the copy and unmerged after, so the engine needs no LoRA support."""
        merged = callable(getattr(model, "merge_adapter", None))
        if merged:
            model.merge_adapter()
        try:
            self.backend.load_weights(_engine_weights(model), model=self.model_path)
        finally:
            if merged:
                model.unmerge_adapter()

    def close(self) -> None:
        self.backend.close()

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        limit = self.max_prompt_tokens
        params = [
            self._vllm.SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_new_tokens,
                seed=row_seed(self.seed, call, i),
                logprobs=0 if self.temperature > 0 else None,
                **({} if limit is None else {"truncate_prompt_tokens": limit}),
            )
            for i in range(len(prompts))
        ]
        try:
            outputs = list(
                self.backend.engine().chat(prompts, sampling_params=params, use_tqdm=False)
            )
        except Exception as exc:
            raise BackendError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        if len(outputs) != len(prompts):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        samples = []
        for out in outputs:
            first = out.outputs[0]
            ids = [int(t) for t in first.token_ids]  # including the EOS vLLM stopped on
            logprobs = None
            if self.temperature > 0:
                if first.logprobs is None:
                    raise BackendError("vLLM returned no logprobs although logprobs=0 was asked")
                logprobs = [
                    float(step[t].logprob) for t, step in zip(ids, first.logprobs, strict=True)
                ]
            samples.append(
                Sample(first.text, [int(t) for t in out.prompt_token_ids], ids, logprobs)
            )
        return samples


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


def _zero_stats() -> dict[str, float]:
    return {
        "tokens/prompt": 0,
        "tokens/generated": 0,
        "truncated_prompts": 0,
        "time/generation_s": 0.0,
    }
