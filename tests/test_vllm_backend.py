"""The ``vllm`` backend without vLLM or a GPU: errors, and the mapping against a fake vllm.

The real GPU path is untested here (no GPU, vLLM not installed); the fake
module mirrors vLLM's documented offline API: ``LLM(**engine_args)``,
``SamplingParams(...)``, ``LLM.chat(conversations, sampling_params=..., use_tqdm=...)``
returning ``RequestOutput``-shaped objects.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchenv.backends.hf import call_seed
from orchenv.backends.vllm_backend import VLLMBackend
from orchenv.error import BackendError, ConfigError, DependencyError
from orchenv.pool import AgentPool, AgentSpec, CallContext


def _spec(name: str = "solver", tier: int = 0, **backend_kwargs: Any) -> AgentSpec:
    return AgentSpec(
        name=name,
        model="org/served-model",
        tier=tier,
        price_prompt=2.0,
        price_completion=8.0,
        backend="vllm",
        backend_kwargs=backend_kwargs,
    )


MESSAGES = [
    [{"role": "system", "content": "Solve it."}, {"role": "user", "content": f"{i} + 1 = ?"}]
    for i in range(4)
]


@dataclass
class FakeSamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    seed: int | None = None


@dataclass
class FakeCompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclass
class FakeRequestOutput:
    prompt_token_ids: list[int]
    outputs: list[FakeCompletionOutput]


@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class FakeLLM:
    """Records what it was given; answers deterministically from the conversation."""

    kwargs: dict[str, Any]
    chats: list[dict[str, Any]] = field(default_factory=list)

    def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None):
        self.chats.append(
            {
                "messages": messages,
                "sampling_params": sampling_params,
                "use_tqdm": use_tqdm,
                "lora_request": lora_request,
            }
        )
        outs = []
        for conversation, params in zip(messages, sampling_params, strict=True):
            words = " ".join(m["content"] for m in conversation).split()
            text = f"answer to {conversation[-1]['content']}"
            outs.append(
                FakeRequestOutput(
                    prompt_token_ids=list(range(len(words) + 3)),
                    outputs=[FakeCompletionOutput(text, list(range(min(5, params.max_tokens))))],
                )
            )
        return outs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A fake ``vllm`` package in sys.modules, with a GPU reported present."""
    module = types.ModuleType("vllm")
    module.engines = []

    def make_llm(**kwargs: Any) -> FakeLLM:
        llm = FakeLLM(kwargs)
        module.engines.append(llm)
        return llm

    module.LLM = make_llm
    module.SamplingParams = FakeSamplingParams
    lora = types.ModuleType("vllm.lora")
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.LoRARequest = FakeLoRARequest
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora_request)
    return module


def test_construction_imports_nothing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    backend = VLLMBackend(model="org/m", temperature=0.7)
    assert "vllm" not in sys.modules and backend.max_concurrency == 1
    with pytest.raises(ConfigError, match="top_p"):
        VLLMBackend(top_p=0.0)
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VLLMBackend(gpu_memory_utilization=1.5)


def test_missing_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # absent, even where it is installed
    backend = VLLMBackend(model="org/m", gpu_check=lambda: True)
    with pytest.raises(DependencyError, match=r'pip install "orchenv\[vllm\]"'):
        backend.complete(_spec(), MESSAGES[0], CallContext())


def test_no_gpu_raises_a_backend_error_pointing_at_hf(
    fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch
):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    backend = VLLMBackend(model="org/m")
    with pytest.raises(BackendError, match="CUDA GPU") as err:
        backend.complete(_spec(), MESSAGES[0], CallContext())
    assert "'hf' backend" in str(err.value)
    assert fake_vllm.engines == [], "no engine is started without a GPU"


def test_requests_are_batched_in_one_chat_and_mapped_back(
    fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch
):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    backend = VLLMBackend(
        model="org/m", max_model_len=4096, temperature=0.6, top_p=0.9, max_tokens=64, seed=7
    )
    specs = [_spec("a"), _spec("b", tier=1, max_tokens=3, temperature=0.0)]
    calls = [(specs[i % 2], MESSAGES[i], CallContext()) for i in range(4)]
    out = backend.complete_batch(calls)

    (llm,) = fake_vllm.engines
    assert llm.kwargs["model"] == "org/m" and llm.kwargs["max_model_len"] == 4096
    assert llm.kwargs["tensor_parallel_size"] == 1 and llm.kwargs["seed"] == 7
    assert llm.kwargs["gpu_memory_utilization"] == 0.85 and "enable_lora" not in llm.kwargs
    (chat,) = llm.chats
    assert chat["messages"] == [list(m) for m in MESSAGES] and chat["use_tqdm"] is False
    params = chat["sampling_params"]
    assert [(p.temperature, p.top_p, p.max_tokens) for p in params] == [
        (0.6, 0.9, 64),
        (0.0, 0.9, 3),
        (0.6, 0.9, 64),
        (0.0, 0.9, 3),
    ]
    assert params[0].seed == call_seed(7, "a", MESSAGES[0])
    assert chat["lora_request"] is None

    for i, c in enumerate(out):
        words = " ".join(m["content"] for m in MESSAGES[i]).split()
        assert c.agent == specs[i % 2].name
        assert c.text == f"answer to {MESSAGES[i][-1]['content']}"
        assert c.prompt_tokens == len(words) + 3
        assert c.completion_tokens == (5 if i % 2 == 0 else 3)
        assert c.token_source == "tokenizer"
        assert c.cost_usd == pytest.approx(specs[i % 2].cost(c.prompt_tokens, c.completion_tokens))
        assert c.meta["finish_reason"] == "stop" and c.meta["batch_size"] == 4

    # one engine per model, reused; a per-agent model_path starts another
    backend.complete(_spec(), MESSAGES[0], CallContext())
    backend.complete(_spec("c", model_path="/models/other"), MESSAGES[0], CallContext())
    assert [e.kwargs["model"] for e in fake_vllm.engines] == ["org/m", "/models/other"]
    backend.close()
    assert backend._engines == {}


def test_pool_call_many_goes_through_one_chat(fake_vllm: types.ModuleType):
    backend = VLLMBackend(model="org/m", gpu_check=lambda: True)
    pool = AgentPool([_spec("a", 1), _spec("b", 0)], {"vllm": backend})
    out = pool.call_many([("a", MESSAGES[0], None), ("b", MESSAGES[1], None)])
    assert [c.agent for c in out] == ["a", "b"]
    assert len(fake_vllm.engines[0].chats) == 1


def test_lora_requests_need_enable_lora(fake_vllm: types.ModuleType):
    spec = _spec(lora_path="/adapters/solver", lora_name="solver")
    with pytest.raises(ConfigError, match="enable_lora"):
        VLLMBackend(model="org/m", gpu_check=lambda: True).complete(
            spec, MESSAGES[0], CallContext()
        )
    backend = VLLMBackend(model="org/m", enable_lora=True, gpu_check=lambda: True)
    backend.complete_batch(
        [(spec, MESSAGES[0], CallContext()), (_spec(), MESSAGES[1], CallContext())]
    )
    llm = fake_vllm.engines[-1]
    assert llm.kwargs["enable_lora"] is True
    assert llm.chats[0]["lora_request"] == [FakeLoRARequest("solver", 1, "/adapters/solver"), None]


def test_engine_errors_become_backend_errors(fake_vllm: types.ModuleType):
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("CUDA out of memory")

    fake_vllm.LLM = broken
    backend = VLLMBackend(model="org/m", gpu_check=lambda: True)
    with pytest.raises(BackendError, match="org/m.*CUDA out of memory"):
        backend.complete(_spec(), MESSAGES[0], CallContext())


def test_load_weights_uses_the_worker_model_and_resets_the_prefix_cache(
    fake_vllm: types.ModuleType,
):
    backend = VLLMBackend(model="org/m", gpu_check=lambda: True)
    backend.complete(_spec(), MESSAGES[0], CallContext())
    llm = fake_vllm.engines[0]
    received: list = []
    worker_model = types.SimpleNamespace(load_weights=lambda items: received.extend(items))
    runner = types.SimpleNamespace(model=worker_model)
    llm.llm_engine = types.SimpleNamespace(
        model_executor=types.SimpleNamespace(
            driver_worker=types.SimpleNamespace(model_runner=runner)
        )
    )
    resets: list[int] = []
    llm.reset_prefix_cache = lambda: resets.append(1)
    backend.update_weights([("w", 1.0)])
    backend.load_weights({"v": 2.0})
    assert received == [("w", 1.0), ("v", 2.0)] and resets == [1, 1]


def test_load_weights_without_a_known_path_says_so(fake_vllm: types.ModuleType):
    backend = VLLMBackend(model="org/m", gpu_check=lambda: True)
    with pytest.raises(BackendError, match="apply_model"):
        backend.load_weights({"w": 1.0})


def test_backend_pickles_without_its_engines(fake_vllm: types.ModuleType):
    import pickle

    backend = VLLMBackend(model="org/m", temperature=0.3)
    backend.gpu_check = _always_gpu
    backend.complete(_spec(), MESSAGES[0], CallContext())
    copy = pickle.loads(pickle.dumps(backend))
    assert copy._engines == {} and copy.temperature == 0.3
    copy.complete(_spec(), MESSAGES[0], CallContext())
    assert len(fake_vllm.engines) == 2


def _always_gpu() -> bool:
    return True
