"""vLLM's offline engine as agents (backend name ``"vllm"``).

Why: on a CUDA GPU, vLLM serves many concurrent chat requests far faster than
``transformers.generate`` (paged attention, continuous batching), which is what
GRPO-style training needs when every rollout calls several agents. This
backend hands all of a batch's calls for one model to a single ``LLM.chat``
call and reads exact token counts from the request outputs.

Status: the GPU path is UNTESTED in this repository's CI, which has no GPU
and does not install vLLM. The tests check the request/response mapping
against a fake ``vllm`` module shaped like vLLM's documented offline API
(``LLM``, ``SamplingParams``, ``LLM.chat(conversations, sampling_params)``
returning ``RequestOutput`` objects with ``prompt_token_ids`` and
``outputs[0].text`` / ``.token_ids`` / ``.finish_reason``). On a CPU-only
machine use the ``hf`` backend instead.

Which model serves an agent: ``spec.backend_kwargs["model_path"]`` if set, else
the backend's ``model``, else ``spec.model``. Each distinct model is its own
``vllm.LLM`` engine that reserves ``gpu_memory_utilization`` of the GPU, so
with several models lower it until their sum fits. An agent's
``backend_kwargs`` may also set ``temperature``, ``top_p``, ``max_tokens`` and,
with ``enable_lora=True``, ``lora_path`` (an adapter directory served with
``LoRARequest``).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orchenv.backends.common import BatchedEngine, call_seed, chat_messages, check_sampling
from orchenv.error import BackendError, ConfigError, require
from orchenv.pool import AgentSpec, Call, Completion, Message

logger = logging.getLogger(__name__)

_PURPOSE = "the 'vllm' backend (vLLM offline engine)"

#: sampling settings an agent's ``backend_kwargs`` may override
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (tests monkeypatch ``torch.cuda.is_available``)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class VLLMBackend(BatchedEngine):
    """Agents served by ``vllm.LLM`` engines on a CUDA GPU (GPU path untested in CI).

    Args:
        model: a local directory or hub id; ``None`` means each agent's ``spec.model``.
        tensor_parallel_size, gpu_memory_utilization, max_model_len, dtype: passed
            to ``vllm.LLM`` (see vLLM's engine arguments).
        temperature, top_p, max_tokens: ``SamplingParams``; ``temperature=0`` is greedy.
        seed: engine seed, and base of the per-request sampling seeds (a stable
            hash of (seed, agent, messages), as in the ``hf`` backend).
        enable_lora: let agents name a LoRA adapter (``backend_kwargs["lora_path"]``).
        trust_remote_code: passed to ``vllm.LLM``.
        engine_kwargs: further ``vllm.LLM`` keyword arguments.
        gpu_check: returns whether a CUDA GPU is usable (default: ``cuda_available``).

    Metering: ``token_source="tokenizer"`` with counts from
    ``len(request_output.prompt_token_ids)`` and ``len(outputs[0].token_ids)``;
    ``latency_s`` of each call is the wall time of the ``LLM.chat`` call it ran in.
    Thread-safe: a lock serialises engine use and ``max_concurrency`` is 1.
    """

    _fresh_on_copy = {"_engines": {}}  # engines never travel; restarted lazily

    def __init__(
        self,
        *,
        model: str | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "auto",
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 512,
        seed: int = 0,
        enable_lora: bool = False,
        trust_remote_code: bool = False,
        engine_kwargs: Mapping[str, Any] | None = None,
        gpu_check: Callable[[], bool] | None = None,
    ) -> None:
        if not (isinstance(tensor_parallel_size, int) and tensor_parallel_size >= 1):
            raise ConfigError(
                f"tensor_parallel_size must be an int >= 1, got {tensor_parallel_size!r}"
            )
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
            )
        check_sampling("VLLMBackend", temperature=temperature, top_p=top_p, max_tokens=max_tokens)
        self.model = model
        self.tensor_parallel_size = tensor_parallel_size
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_tokens = max_tokens
        self.seed = int(seed)
        self.enable_lora = bool(enable_lora)
        self.trust_remote_code = bool(trust_remote_code)
        self.engine_kwargs = dict(engine_kwargs or {})
        self.gpu_check = gpu_check or cuda_available
        self._engines: dict[str, Any] = {}
        self._lora_ids: dict[str, int] = {}
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"VLLMBackend(model={self.model!r}, tensor_parallel_size={self.tensor_parallel_size}, "
            f"temperature={self.temperature:g}, max_tokens={self.max_tokens})"
        )

    # -- the Backend protocol ------------------------------------------------------
    def complete_batch(self, calls: Sequence[Call]) -> list[Completion]:
        """All calls for one model go to vLLM in a single ``LLM.chat``; input order is kept."""
        if not calls:
            return []
        results: list[Completion | None] = [None] * len(calls)
        groups: dict[str, list[int]] = {}
        for i, (spec, _, _) in enumerate(calls):
            groups.setdefault(self._model_for(spec), []).append(i)
        with self._lock:
            vllm = self._vllm()
            for model, indices in groups.items():
                llm = self._engine(model)
                conversations = [chat_messages(calls[i][1]) for i in indices]
                params = [self._sampling_params(vllm, calls[i][0], calls[i][1]) for i in indices]
                loras = [self._lora_request(calls[i][0]) for i in indices]
                kwargs: dict[str, Any] = {"sampling_params": params, "use_tqdm": False}
                if any(lora is not None for lora in loras):
                    kwargs["lora_request"] = loras
                t0 = time.perf_counter()
                try:
                    outputs = list(llm.chat(conversations, **kwargs))
                except Exception as exc:
                    raise BackendError(
                        f"vLLM chat with {model!r} failed: {type(exc).__name__}: {exc}"
                    ) from exc
                wall = time.perf_counter() - t0
                if len(outputs) != len(indices):
                    raise BackendError(
                        f"vLLM returned {len(outputs)} outputs for {len(indices)} requests"
                    )
                for i, out in zip(indices, outputs, strict=True):
                    results[i] = _completion(calls[i][0], out, model, wall, len(indices))
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Shut the engines down and free GPU memory (best effort across vLLM versions)."""
        with self._lock:
            had_engines = bool(self._engines)
            self._engines.clear()
        if not had_engines:
            return
        try:
            from vllm.distributed.parallel_state import (  # type: ignore[import-not-found]
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception as exc:  # cleanup must not fail; versions differ
            logger.debug("vLLM parallel-state cleanup skipped: %s", exc)
        gc.collect()
        if cuda_available():
            import torch

            torch.cuda.empty_cache()

    # -- weight sync for trainers (UNTESTED on GPU) ------------------------------------
    def load_weights(
        self,
        weights: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        model: str | None = None,
    ) -> None:
        """Copy policy weights (a state dict or ``(name, tensor)`` pairs) into a running engine.

        For GRPO-style training that samples with vLLM and trains with torch.
        UNTESTED on GPU. Uses the in-process worker's model,
        ``llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights``
        (vLLM's V0 engine, the path TRL used), else ``llm.apply_model`` where newer
        engines offer it (V1 with worker processes may also need
        ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``), then resets the prefix cache so
        no KV computed with the old weights is reused. Raises ``BackendError`` when
        the running vLLM exposes neither.

        ``model`` picks the engine; default: the backend's ``model``, or the only
        engine running.
        """
        items = list(weights.items() if isinstance(weights, Mapping) else weights)
        with self._lock:
            key = model or self.model
            if key is None:
                if len(self._engines) != 1:
                    raise ConfigError(
                        "load_weights needs model=... when the backend has no default model "
                        f"and {len(self._engines)} engines are running"
                    )
                key = next(iter(self._engines))
            self._vllm()
            llm = self._engine(key)
            target = None
            try:
                target = llm.llm_engine.model_executor.driver_worker.model_runner.model
            except AttributeError:
                target = None
            try:
                if target is not None and callable(getattr(target, "load_weights", None)):
                    target.load_weights(items)
                elif callable(getattr(llm, "apply_model", None)):
                    llm.apply_model(lambda m: m.load_weights(items))
                else:
                    raise BackendError(
                        "cannot update weights: this vLLM version exposes neither "
                        "llm.llm_engine.model_executor.driver_worker.model_runner.model nor "
                        "llm.apply_model; update orchenv's VLLMBackend.load_weights for it, or "
                        "save the policy and build a new backend from the checkpoint"
                    )
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(
                    f"loading weights into the vLLM engine for {key!r} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            reset = getattr(llm, "reset_prefix_cache", None)
            if callable(reset):
                reset()
            logger.info("vllm backend loaded %d tensors into %s", len(items), key)

    def update_weights(self, named_params: Iterable[tuple[str, Any]], **kwargs: Any) -> None:
        """Alias of ``load_weights`` taking ``model.named_parameters()``-style pairs."""
        self.load_weights(named_params, **kwargs)

    def engine(self, model: str | None = None) -> Any:
        """The ``vllm.LLM`` serving ``model`` (default: the backend's), started on first use.

        For trainers that drive the engine themselves (the GRPO sampler). Raises
        DependencyError without vllm and BackendError without a GPU.
        """
        with self._lock:
            self._vllm()
            return self._engine(model or self.model)  # type: ignore[arg-type]

    # -- internals ---------------------------------------------------------------------
    def _vllm(self) -> Any:
        """The vllm module (DependencyError naming the extra), then the GPU check."""
        vllm = require("vllm", "vllm", _PURPOSE)
        if not self.gpu_check():
            raise BackendError(
                "vLLM needs a CUDA GPU and none is available here. On a CPU-only machine use "
                "the 'hf' backend (local transformers models) instead."
            )
        return vllm

    def _model_for(self, spec: AgentSpec) -> str:
        path = spec.backend_kwargs.get("model_path")
        if path:
            return str(path)
        return self.model if self.model is not None else spec.model

    def _engine(self, model: str) -> Any:
        llm = self._engines.get(model)
        if llm is not None:
            return llm
        import vllm  # already checked by _vllm()

        if self._engines:
            logger.warning(
                "starting a second vLLM engine (%s) beside %s: each reserves "
                "gpu_memory_utilization=%g of the GPU",
                model,
                sorted(self._engines),
                self.gpu_memory_utilization,
            )
        kwargs: dict[str, Any] = {
            "model": model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "seed": self.seed,
            "trust_remote_code": self.trust_remote_code,
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if self.enable_lora:
            kwargs["enable_lora"] = True
        kwargs.update(self.engine_kwargs)
        try:
            llm = vllm.LLM(**kwargs)
        except Exception as exc:
            raise BackendError(
                f"vLLM could not start an engine for {model!r}: {type(exc).__name__}: {exc}"
            ) from exc
        logger.info("vllm backend started an engine for %s", model)
        self._engines[model] = llm
        return llm

    def _sampling_params(self, vllm: Any, spec: AgentSpec, messages: Sequence[Message]) -> Any:
        kw = spec.backend_kwargs
        temperature = float(kw.get("temperature", self.temperature))
        top_p = float(kw.get("top_p", self.top_p))
        max_tokens = kw.get("max_tokens", self.max_tokens)
        check_sampling(
            f"agent {spec.name!r}", temperature=temperature, top_p=top_p, max_tokens=max_tokens
        )
        return vllm.SamplingParams(
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=call_seed(self.seed, spec.name, messages),
        )

    def _lora_request(self, spec: AgentSpec) -> Any:
        path = spec.backend_kwargs.get("lora_path")
        if not path:
            return None
        if not self.enable_lora:
            raise ConfigError(
                f"agent {spec.name!r} names a lora_path but the vllm backend was built "
                "with enable_lora=False"
            )
        from vllm.lora.request import LoRARequest  # type: ignore[import-not-found]

        path = str(path)
        lora_id = self._lora_ids.setdefault(path, len(self._lora_ids) + 1)
        name = str(spec.backend_kwargs.get("lora_name", f"lora{lora_id}"))
        return LoRARequest(name, lora_id, path)


def _completion(spec: AgentSpec, out: Any, model: str, wall: float, batch: int) -> Completion:
    """Map one vLLM ``RequestOutput`` to a metered Completion."""
    try:
        first = out.outputs[0]
        text = first.text
        completion_tokens = len(first.token_ids)
        prompt_ids = out.prompt_token_ids
    except (AttributeError, IndexError, TypeError) as exc:
        raise BackendError(f"unexpected vLLM output for agent {spec.name!r}: {out!r}") from exc
    if prompt_ids is None:
        raise BackendError(f"vLLM returned no prompt_token_ids for agent {spec.name!r}")
    return VLLMBackend.engine_completion(
        spec,
        text,
        len(prompt_ids),
        completion_tokens,
        model=model,
        finish_reason=getattr(first, "finish_reason", None),
        batch_size=batch,
        wall_s=wall,
    )
