"""The ``hf`` backend on a tiny random Qwen2 model built offline (CPU, a few seconds)."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import gymnasium as gym  # noqa: E402
from tiny_model import tiny_qwen2_path  # noqa: E402

import orchenv  # noqa: E402, F401  (registers the env ids)
from orchenv.backends.hf import HFBackend, call_seed  # noqa: E402
from orchenv.error import BackendError, ConfigError, DependencyError  # noqa: E402
from orchenv.pool import AgentPool, AgentSpec, CallContext  # noqa: E402

PROMPTS = [
    [
        {"role": "system", "content": "You are a careful mathematician."},
        {"role": "user", "content": text},
    ]
    for text in (
        "Problem: What is 2 + 3?",
        "Problem: Solve 3x + 4 = 19 for x.",
        "Problem: Compute 7 * 8 - 6. Give the answer as \\boxed{}.",
        "Find the remainder when 2024 is divided by 9.",
        "Problem: Let f(x) = x^2 - 5x + 6. What is the sum of the roots of f?",
    )
]


def _spec(name: str = "solver", tier: int = 0, **backend_kwargs: object) -> AgentSpec:
    return AgentSpec(
        name=name,
        model="tiny-qwen2",
        tier=tier,
        price_prompt=1.5,
        price_completion=6.0,
        backend="hf",
        backend_kwargs=backend_kwargs,
    )


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls run faster on one thread than split over this machine's cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def path() -> Path:
    return tiny_qwen2_path()


@pytest.fixture(scope="module")
def tokenizer(path: Path):
    return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)


@pytest.fixture(scope="module")
def backend(path: Path) -> HFBackend:
    hf = HFBackend(model=path, max_new_tokens=16)
    yield hf
    hf.close()


def _prompt_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_construction_is_lazy_and_validated():
    hf = HFBackend(model="/no/such/dir")  # no I/O here
    assert hf._loaded == {} and hf.max_concurrency == 1
    with pytest.raises(ConfigError, match="dtype"):
        HFBackend(dtype="int3")
    with pytest.raises(ConfigError, match="batch_size"):
        HFBackend(batch_size=0)
    with pytest.raises(ConfigError, match="temperature"):
        HFBackend(do_sample=True, temperature=0.0)


def test_greedy_is_deterministic_and_batching_changes_nothing(backend: HFBackend):
    spec = _spec()
    first = backend.complete(spec, PROMPTS[0], CallContext())
    again = backend.complete(spec, PROMPTS[0], CallContext())
    assert first.text == again.text and first.completion_tokens == again.completion_tokens
    singles = [backend.complete(spec, m, CallContext()) for m in PROMPTS]
    batch = backend.complete_batch([(spec, m, CallContext()) for m in PROMPTS])
    assert [c.text for c in batch] == [c.text for c in singles]
    assert [c.prompt_tokens for c in batch] == [c.prompt_tokens for c in singles]
    assert [c.completion_tokens for c in batch] == [c.completion_tokens for c in singles]
    assert {c.meta["batch_size"] for c in batch} == {5}
    assert len({c.latency_s for c in batch}) == 1, "calls of one batch share its wall time"


def test_token_counts_are_exact_and_priced(backend: HFBackend, tokenizer, path: Path):
    spec = _spec()
    for messages in PROMPTS[:3]:
        c = backend.complete(spec, messages, CallContext())
        ids = _prompt_ids(tokenizer, messages)
        assert c.prompt_tokens == len(ids) > 0
        assert 0 < c.completion_tokens <= 16
        assert c.token_source == "tokenizer" and not c.tokens_estimated
        assert c.cost_usd == pytest.approx(spec.cost(c.prompt_tokens, c.completion_tokens))
        # reference: plain transformers greedy generation on the same prompt
        model = backend._loaded[str(path)].model
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=16, do_sample=False,
            )  # fmt: skip
        new = out[0, len(ids) :].tolist()
        eos = tokenizer.eos_token_id
        new = new[: new.index(eos) + 1] if eos in new else new
        assert c.completion_tokens == len(new)
        assert c.text == tokenizer.decode(new, skip_special_tokens=True)


def test_seeded_sampling_is_repeatable_and_varies_with_the_seed(path: Path):
    spec = _spec()
    a = HFBackend(model=path, max_new_tokens=12, do_sample=True, temperature=1.0, seed=1)
    b = HFBackend(model=path, max_new_tokens=12, do_sample=True, temperature=1.0, seed=1)
    c = HFBackend(model=path, max_new_tokens=12, do_sample=True, top_k=50, top_p=0.9, seed=2)
    texts_a = [a.complete(spec, m, CallContext()).text for m in PROMPTS]
    texts_b = [x.text for x in b.complete_batch([(spec, m, CallContext()) for m in PROMPTS])]
    texts_c = [c.complete(spec, m, CallContext()).text for m in PROMPTS]
    assert texts_a == texts_b, "same seed: same samples, batched or not"
    assert any(x != y for x, y in zip(texts_a, texts_c, strict=True))
    one = a.complete(spec, PROMPTS[0], CallContext())
    assert one.meta["seed"] == call_seed(1, spec.name, PROMPTS[0])
    # the global torch RNG is neither seeded nor consumed
    state = torch.random.get_rng_state()
    a.complete(spec, PROMPTS[1], CallContext())
    assert torch.equal(state, torch.random.get_rng_state())


def test_a_loaded_model_object_can_be_passed(backend: HFBackend, path: Path, tokenizer):
    spec = _spec()
    expected = [c.text for c in backend.complete_batch([(spec, m, CallContext()) for m in PROMPTS])]
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.train()
    by_object = HFBackend(model=model, max_new_tokens=16)  # tokenizer from model.name_or_path
    with_tok = HFBackend(model=model, tokenizer=tokenizer, max_new_tokens=16)
    for hf in (by_object, with_tok):
        out = hf.complete_batch([(spec, m, CallContext()) for m in PROMPTS])
        assert [c.text for c in out] == expected
    assert model.training, "the caller's train/eval mode is restored"


def test_per_agent_model_path_and_generation_overrides(path: Path):
    hf = HFBackend(model="/not/used/here", max_new_tokens=16)
    short = _spec("short", model_path=str(path), max_new_tokens=3)
    full = _spec("full", tier=1, model_path=str(path))
    out = hf.complete_batch([(short, PROMPTS[0], CallContext()), (full, PROMPTS[0], CallContext())])
    assert out[0].completion_tokens <= 3 and out[1].text.startswith(out[0].text)
    assert len(hf._loaded) == 1, "agents on one path share one model"
    with pytest.raises(ConfigError, match="max_new_tokens"):
        hf.complete(_spec("bad", model_path=str(path), max_new_tokens=0), PROMPTS[0], CallContext())


def test_missing_model_path_names_the_path_and_offline_mode(tmp_path: Path):
    missing = tmp_path / "no-such-model"
    hf = HFBackend(model=missing)
    with pytest.raises(BackendError) as err:
        hf.complete(_spec(), PROMPTS[0], CallContext())
    message = str(err.value)
    assert str(missing) in message and "local_files_only=True" in message
    assert "config.json" in message
    hub = HFBackend(model="no-such-org/no-such-model")  # a hub id absent from the cache
    with pytest.raises(BackendError, match="no-such-org/no-such-model") as err:
        hub.complete(_spec(), PROMPTS[0], CallContext())
    assert "local_files_only=False" in str(err.value) and "--local-dir" in str(err.value)


def test_missing_transformers_names_the_train_extra(monkeypatch: pytest.MonkeyPatch, path: Path):
    monkeypatch.setitem(sys.modules, "transformers", None)
    hf = HFBackend(model=path)
    with pytest.raises(DependencyError, match=r"orchenv\[train\]"):
        hf.complete(_spec(), PROMPTS[0], CallContext())


def test_tokenizer_without_chat_template_falls_back(path: Path, caplog: pytest.LogCaptureFixture):
    plain = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    plain.chat_template = None
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    hf = HFBackend(model=model, tokenizer=plain, max_new_tokens=4)
    with caplog.at_level(logging.WARNING, logger="orchenv.backends.hf"):
        c = hf.complete(_spec(), PROMPTS[0], CallContext())
        hf.complete(_spec(), PROMPTS[1], CallContext())
    rendered = "system: You are a careful mathematician.\nuser: Problem: What is 2 + 3?\nassistant:"
    assert c.prompt_tokens == len(plain(rendered)["input_ids"])
    assert sum("no chat template" in r.message for r in caplog.records) == 1


def test_threads_share_the_backend_safely(backend: HFBackend):
    spec = _spec()
    expected = [backend.complete(spec, m, CallContext()).text for m in PROMPTS]
    got: dict[int, str] = {}

    def worker(i: int) -> None:
        got[i] = backend.complete(spec, PROMPTS[i], CallContext()).text

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(PROMPTS))] == expected


def test_close_frees_models_and_later_calls_reload(path: Path):
    hf = HFBackend(model=path, max_new_tokens=4)
    before = hf.complete(_spec(), PROMPTS[0], CallContext()).text
    hf.close()
    assert hf._loaded == {}
    assert hf.complete(_spec(), PROMPTS[0], CallContext()).text == before


def _three_agent_pool(backend: HFBackend) -> AgentPool:
    specs = [
        _spec("weak", tier=2),
        AgentSpec("mid", "tiny-qwen2", 1, 1.0, 2.0, backend="hf"),
        AgentSpec("strong", "tiny-qwen2", 0, 10.0, 20.0, backend="hf"),
    ]
    return AgentPool(specs, {"hf": backend}, name="tiny-hf")


def test_call_many_uses_complete_batch_and_keeps_order(path: Path, monkeypatch: pytest.MonkeyPatch):
    hf = HFBackend(model=path, max_new_tokens=8)
    pool = _three_agent_pool(hf)
    calls = [(name, PROMPTS[i % 5], None) for i, name in enumerate(["weak", "mid", "strong"] * 2)]
    singles = [pool.call(name, messages) for name, messages, _ in calls]
    seen: list[int] = []
    original = hf.complete_batch

    def spy(batch):
        seen.append(len(batch))
        return original(batch)

    monkeypatch.setattr(hf, "complete_batch", spy)
    batched = pool.call_many(calls)
    assert seen == [6]
    assert [c.agent for c in batched] == [name for name, _, _ in calls]
    assert [c.text for c in batched] == [c.text for c in singles]
    assert [c.prompt_tokens for c in batched] == [c.prompt_tokens for c in singles]


def test_mathroute_runs_end_to_end_on_the_hf_backend(
    path: Path, tokenizer, monkeypatch: pytest.MonkeyPatch
):
    hf = HFBackend(model=path, max_new_tokens=24)
    pool = _three_agent_pool(hf)
    made: list = []
    original = hf.complete

    def spy(spec, messages, context):
        completion = original(spec, messages, context)
        made.append((messages, completion))
        return completion

    monkeypatch.setattr(hf, "complete", spy)
    env = gym.make("orch/MathRoute-v0", pool=pool, split="test")
    actions = [
        "<thinking>Looks easy.</thinking><model>weak</model>",
        "<checking>Step 1 is wrong.</checking><verdict>False</verdict><model>mid</model>",
        "<checking>Still wrong.</checking><verdict>False</verdict><model>strong</model>",
    ]
    for episode in range(3):
        env.reset(seed=episode)
        terminated = truncated = False
        for step, action in enumerate(actions):
            assert not (terminated or truncated)
            made.clear()
            _, _, terminated, truncated, info = env.step(action)
            assert not info["invalid_action"]
            assert len(made) == 1 and len(info["calls"]) == 1
            messages, completion = made[0]
            call = info["calls"][0]
            assert call["agent"] == ["weak", "mid", "strong"][step]
            assert call["token_source"] == "tokenizer"
            assert call["prompt_tokens"] == completion.prompt_tokens > 0
            assert call["completion_tokens"] == completion.completion_tokens > 0
            assert completion.prompt_tokens == len(_prompt_ids(tokenizer, messages))
            assert info["tokens"] == {
                "prompt": completion.prompt_tokens,
                "completion": completion.completion_tokens,
            }
            assert info["cost_usd"] == pytest.approx(completion.cost_usd)
        # the third turn routes again: seed 000's horizon is terminal, the last draft is final
        assert terminated and not truncated
        assert isinstance(info["correct"], bool)
    env.close()


def test_backend_pickles_without_its_models(backend: HFBackend):
    import pickle

    spec = _spec()
    before = backend.complete(spec, PROMPTS[0], CallContext()).text
    copy = pickle.loads(pickle.dumps(backend))
    assert copy._loaded == {}
    assert copy.complete(spec, PROMPTS[0], CallContext()).text == before


def test_gguf_files_load_through_transformers_gguf_reader(tmp_path):
    """A ``.gguf`` model or tokenizer path becomes ``from_pretrained(folder, gguf_file=name)``
    (the hf backend and the GRPO trainer load the same way); other paths pass unchanged."""
    pytest.importorskip("gguf")
    from orchenv.backends.hf import gguf_source

    file = tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf_source(str(file)) == (str(file.parent), {"gguf_file": file.name})
    assert gguf_source("HuggingFaceTB/SmolLM2-135M-Instruct") == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        {},
    )
