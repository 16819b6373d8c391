"""Samplers of the policy being trained: prompts in, ``Sample``s out, with each token's logprob
read from the logits it was drawn from (what the update computes: no extra forward pass).
"""

from __future__ import annotations

import copy
import time
import warnings
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from orchenv.agents.grpo.algorithms import Messages, Sample
from orchenv.backends.common import call_seed
from orchenv.backends.hf import HFBackend, left_padded, seeded_sampler_class
from orchenv.choice_policy import check_choice_score, normalised_scores
from orchenv.error import require


@dataclass(kw_only=True, eq=False)
class PolicySampler(ABC):
    """A ``Sampler`` the trainer reseeds, copies for evaluation, reads counters from and syncs."""

    temperature: float = 1.0  # 0: greedy, and no logprobs
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_prompt_tokens: int | None = None  # longer prompts keep their last tokens
    seed: int = 0

    def __post_init__(self) -> None:
        self.reseed(self.seed)
        self._stats: defaultdict[str, float] = defaultdict(float)

    def reseed(self, seed: int) -> None:
        """Restart the seed sequence (the trainer does this once per step)."""
        self.seed, self._calls = int(seed), 0

    def row_seed(self, call: int, row: int) -> int:
        """One prompt's sampling seed: independent of the batch it runs in."""
        return call_seed(self.seed, f"grpo-policy/{call}/{row}", ())

    def with_settings(self, **settings: Any) -> PolicySampler:
        """A copy sharing the model, with other decoding settings and its own counters."""
        clone = copy.copy(self)
        vars(clone).update(settings, _stats=defaultdict(float))
        return clone

    def pop_stats(self) -> dict[str, float]:
        """Counters since the last call, named as the trainer's step metrics."""
        stats, self._stats = self._stats, defaultdict(float)
        return dict(stats)

    def sync_weights(self, model: Any) -> None:  # noqa: B027  (optional hook, no-op by default)
        """Copy the policy's weights in (a no-op for samplers that use the policy itself)."""

    def close(self) -> None:  # noqa: B027  (optional hook, no-op by default)
        """Release what the sampler holds (an engine)."""

    def __call__(self, prompts: Sequence[Messages]) -> list[Sample]:
        t0 = time.perf_counter()
        call, self._calls = self._calls, self._calls + 1
        samples = self._sample([list(m) for m in prompts], call)
        self._stats["tokens/prompt"] += sum(len(s.prompt_ids) for s in samples)
        self._stats["tokens/generated"] += sum(len(s.completion_ids) for s in samples)
        self._stats["time/generation_s"] += time.perf_counter() - t0
        return samples

    @abstractmethod
    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        """Generate one completion per prompt; ``call`` numbers the calls (seeds derive from it)."""


class HFPolicySampler(PolicySampler):
    """transformers ``generate`` on the live policy, one seeded generator per row (hf backend)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 64,
        amp: bool = False,
        **decoding: Any,
    ) -> None:
        super().__init__(**decoding)
        # the hf backend resolves the EOS ids, the pad id and the chat template
        self._backend = HFBackend(model=model, tokenizer=tokenizer)
        self._loaded = self._backend.load("policy", model, tokenizer)
        self.model, self.tokenizer, self.pad_id = model, tokenizer, self._loaded.pad_id
        self.batch_size, self.amp = batch_size, amp

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        ids = [self._backend.prompt_ids(self._loaded, m) for m in prompts]
        limit = self.max_prompt_tokens
        if limit is not None and (over := sum(len(p) > limit for p in ids)):
            warnings.warn("prompts over max_prompt_tokens lose their first tokens", stacklevel=2)
            self._stats["truncated_prompts"] += over
            ids = [p[-limit:] for p in ids]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # little padding per batch
        samples: list[Any] = [None] * len(ids)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            seeds = [self.row_seed(call, i) for i in rows]
            for i, sample in zip(rows, self._generate([ids[i] for i in rows], seeds), strict=True):
                samples[i] = sample
        return samples

    def _generate(self, prompts: list[list[int]], seeds: list[int]) -> list[Sample]:
        """One left-padded batch, each completion up to and including its first EOS."""
        loaded = self._loaded
        sampler = seeded_sampler_class()(seeds, self.temperature, self.top_p, None)
        recorder = _Recorder(sampler, self.temperature)
        input_ids, attention = left_padded(prompts, loaded.pad_id)
        was_training = self.model.training
        self.model.eval()
        with (
            torch.inference_mode(),
            torch.autocast(loaded.device.type, dtype=torch.bfloat16, enabled=self.amp),
        ):
            out = self.model.generate(
                input_ids=input_ids.to(loaded.device),
                attention_mask=attention.to(loaded.device),
                generation_config=loaded.greedy_config(self.max_new_tokens, repetition_penalty=1.0),
                logits_processor=[recorder] if self.temperature > 0 else None,
            )
        self.model.train(was_training)
        logprobs = torch.stack(recorder.logprobs, dim=1).tolist() if recorder.logprobs else None
        samples = []
        for row, tokens in enumerate(out[:, input_ids.shape[1] :].tolist()):
            n = next((j + 1 for j, t in enumerate(tokens) if t in loaded.eos_ids), len(tokens))
            text = self.tokenizer.decode(tokens[:n], skip_special_tokens=True)
            samples.append(Sample(text, prompts[row], tokens[:n], logprobs and logprobs[row][:n]))
        return samples


class _Recorder:
    """Seeded sampling that records log p(picked token) under logits / T (closures are slow)."""

    def __init__(self, sampler: Any, temperature: float) -> None:
        self.sampler, self.temperature = sampler, temperature
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        picked = self.sampler(input_ids, scores)  # -inf except at the sampled token
        logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        self.logprobs.append(logp.gather(1, picked.argmax(dim=-1, keepdim=True)).squeeze(1))
        return picked


class VLLMPolicySampler(PolicySampler):
    """A vLLM engine on a CUDA GPU (UNTESTED), synced every step. At temperature != 1 its raw
    logprobs need ``--vllm-kwarg logprobs_mode=processed_logprobs`` or no sampler logprobs."""

    def __init__(
        self, model_path: str, backend_kwargs: dict | None = None, **decoding: Any
    ) -> None:
        """``backend_kwargs`` go to ``VLLMBackend`` (gpu_memory_utilization, engine_kwargs...)."""
        super().__init__(**decoding)
        self._vllm = require("vllm", "vllm", "GRPO generation with vLLM (generation_backend)")
        from orchenv.backends.vllm_backend import VLLMBackend

        self.model_path = str(model_path)
        self.backend = VLLMBackend(model=self.model_path, seed=self.seed, **(backend_kwargs or {}))
        self.backend.engine()  # the GPU check, and the engine starts now rather than mid-step

    def sync_weights(self, model: Any) -> None:  # noqa: B027  (optional hook, no-op by default)
        """Copy the policy into the engine under the base model's names, any LoRA merged in."""
        lora = callable(getattr(model, "merge_adapter", None))
        if lora:
            model.merge_adapter()
        weights = []
        for name, tensor in model.state_dict().items():
            if "lora_" not in name and ".original_module." not in name:
                name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
                weights.append((name.replace(".modules_to_save.default.", "."), tensor.detach()))
        self.backend.load_weights(weights, model=self.model_path)
        if lora:
            model.unmerge_adapter()

    def close(self) -> None:  # noqa: B027  (optional hook, no-op by default)
        self.backend.close()

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        params = [
            self._vllm.SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_new_tokens,
                seed=self.row_seed(call, i),
                logprobs=0 if self.temperature > 0 else None,
                truncate_prompt_tokens=self.max_prompt_tokens,  # keeps the last tokens
            )
            for i in range(len(prompts))
        ]
        samples = []
        for out in self.backend.engine().chat(prompts, sampling_params=params, use_tqdm=False):
            first = out.outputs[0]
            ids = list(first.token_ids)  # including the EOS vLLM stopped on
            logprobs = None
            if self.temperature > 0:
                logprobs = [float(lp[t].logprob) for t, lp in zip(ids, first.logprobs, strict=True)]
            samples.append(Sample(first.text, list(out.prompt_token_ids), ids, logprobs))
        return samples


def normalise_choice_scores(scores: Any, choice_ids: Sequence[Sequence[int]], how: str) -> Any:
    """Choice mode's score of each choice from its summed token log-probability ``scores`` (a
    tensor or a list): ``"sum"`` keeps it, ``"mean"`` divides by the choice's token count (the
    length-normalised score: a long choice is not less likely a priori)."""
    counts = [len(ids) for ids in choice_ids]
    if not isinstance(scores, torch.Tensor):
        return normalised_scores(scores, counts, how)
    if check_choice_score(how) == "sum":
        return scores
    lengths = [max(n, 1) for n in counts]
    return scores / torch.tensor(lengths, dtype=scores.dtype, device=scores.device)


class ChoicePolicySampler(PolicySampler):
    """Choice mode (``action_space="choices"``, ``orchenv.choice_policy``): for each prompt,
    every available choice's text is scored by its summed log-probability under the live
    policy (one forward pass per state, the prompt's KV cache shared), and one choice is drawn
    from ``softmax(score / temperature)`` with the row's own seeded generator (arg-max at
    temperature 0). The ``Sample`` keeps every choice's ids, the pick and ``[log pi(pick)]``,
    what the choice-mode update recomputes. Rollouts pass ``choices=`` (``needs_choices``).

    ``enumerate_choices``: the k-th row of a state in one call takes its choice ``k mod n``
    (n available choices) instead of a draw, so a group of G = n rows tries every choice once;
    the ``Sample`` still records ``[log pi(pick)]`` under ``softmax(score / temperature)``.
    """

    needs_choices = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        amp: bool = False,
        choice_score: str = "sum",
        enumerate_choices: bool = False,
        **decoding: Any,
    ) -> None:
        super().__init__(**decoding)
        normalise_choice_scores([0.0], [[0]], choice_score)  # fails early on a bad name
        self.choice_score = choice_score
        self.enumerate_choices = enumerate_choices
        self._backend = HFBackend(model=model, tokenizer=tokenizer)
        self._loaded = self._backend.load("policy", model, tokenizer)
        self.model, self.tokenizer, self.pad_id = model, tokenizer, self._loaded.pad_id
        self.amp = amp

    def __call__(  # type: ignore[override]
        self, prompts: Sequence[Messages], choices: Sequence[Sequence[str | None]] | None = None
    ) -> list[Sample]:
        if choices is None or len(choices) != len(prompts):
            raise ValueError("choice mode needs one list of choices per prompt (choices=...)")
        self._choices = [list(c) for c in choices]
        return super().__call__(prompts)

    def score_state(
        self, messages: Messages, options: Sequence[str | None]
    ) -> tuple[list[int], list[list[int]], list[float], list[str]]:
        """One state's prompt ids, the available choices' ids, their scores (``choice_score``)
        and texts, under the live policy (no gradient). What ``_sample`` draws from."""
        from orchenv.backends.hf import choice_logprobs, choice_token_ids

        texts = [c for c in options if c is not None]
        if not texts:
            raise ValueError("a state with no available choice")
        prompt = self._backend.prompt_ids(self._loaded, messages)
        if self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:
            self._stats["truncated_prompts"] += 1
            prompt = prompt[-self.max_prompt_tokens :]
        ids = choice_token_ids(self._loaded, texts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                summed = choice_logprobs(
                    self.model, prompt, ids, pad_id=self.pad_id, amp=self.amp
                ).tolist()
        finally:
            self.model.train(was_training)
        return prompt, ids, normalise_choice_scores(summed, ids, self.choice_score), texts

    def _sample(self, prompts: list[Messages], call: int) -> list[Sample]:
        import numpy as np

        from orchenv.choice_policy import choice_distribution, pick_choice

        samples = []
        cache: dict[tuple, tuple[list[int], list[list[int]], list[float], list[str]]] = {}
        seen: dict[tuple, int] = {}  # rows of each state so far (enumerate_choices)
        for row, (messages, options) in enumerate(zip(prompts, self._choices, strict=True)):
            if not any(c is not None for c in options):
                raise ValueError(f"prompt {row} has no available choice")
            # the G rows of one state are scored once
            key = (tuple((m.get("role"), m.get("content")) for m in messages), tuple(options))
            if key not in cache:
                cache[key] = self.score_state(messages, options)
            else:
                self._stats["choice_states_reused"] += 1
            prompt, ids, scores, texts = cache[key]
            rng = np.random.default_rng(self.row_seed(call, row))
            if self.enumerate_choices and self.temperature > 0:
                pick = seen.get(key, 0) % len(texts)
                seen[key] = seen.get(key, 0) + 1
                p = choice_distribution(scores, self.temperature)
                logp = float(np.log(p[pick])) if p[pick] > 0 else -float("inf")
            else:
                # pi(c) = softmax(score / T): the temperature applies to the scores
                pick, logp = pick_choice(scores, self.temperature, rng)
            samples.append(
                Sample(
                    texts[pick],
                    prompt,
                    ids[pick],
                    [logp] if self.temperature > 0 else None,
                    choice_ids=ids,
                    chosen=pick,
                )  # fmt: skip
            )
        return samples
