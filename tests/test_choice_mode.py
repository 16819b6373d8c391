"""Choice mode (issue 31): LLM policies that pick among the env's discrete choices by
log-probability, in the ``llm`` controller (hf, openai) and in the GRPO trainer."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import gymnasium as gym  # noqa: E402
from tiny_model import tiny_qwen2_path  # noqa: E402

import orchenv  # noqa: E402, F401  (registers the env ids)
from orchenv.agents.grpo import algorithms as grpo  # noqa: E402
from orchenv.agents.llm import LLMController  # noqa: E402
from orchenv.backends.hf import HFBackend, choice_logprobs, choice_token_ids  # noqa: E402
from orchenv.choice_policy import choice_distribution, pick_choice  # noqa: E402
from orchenv.error import BackendError, ConfigError  # noqa: E402
from orchenv.pool import AgentSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = [
    {"role": "system", "content": "Route the problem."},
    {"role": "user", "content": "Problem: What is 2 + 3?"},
]
CHOICES = ["<model>weak</model>", "<model>strong</model>", "<verdict>True</verdict>"]
ENV_IDS = sorted(k for k in gym.registry if k.startswith("orch/"))


@pytest.fixture(scope="module")
def tiny() -> tuple[HFBackend, AgentSpec]:
    path = str(tiny_qwen2_path())
    return HFBackend(model=path, device="cpu"), AgentSpec(name="controller", model=path, tier=0)


# -- the sampling rule -----------------------------------------------------------------------
def test_distribution_is_the_softmax_of_scores_over_temperature() -> None:
    p = choice_distribution([-1.0, -2.0, -math.inf], temperature=2.0)
    e = np.exp([-0.5, -1.0])
    assert p == pytest.approx([e[0] / e.sum(), e[1] / e.sum(), 0.0])
    assert choice_distribution([-3.0, -1.0, -1.0], 0).tolist() == [0.0, 1.0, 0.0]  # first tie
    assert choice_distribution([-math.inf] * 2, 1.0).tolist() == [0.5, 0.5]
    with pytest.raises(BackendError, match="NaN"):
        choice_distribution([0.0, math.nan])
    index, logp = pick_choice([-1.0, -1.0], 1.0, np.random.default_rng(0))
    assert index in (0, 1) and logp == pytest.approx(math.log(0.5))


# -- hf scoring: shared prompt KV == separate rows == a plain forward per choice ------------
def test_hf_scores_match_an_independent_forward_per_choice(tiny) -> None:
    backend, spec = tiny
    shared = backend.score_choices(spec, MESSAGES, CHOICES).logprobs
    rows = backend.score_choices(spec, MESSAGES, CHOICES, share_prompt=False).logprobs
    loaded = backend._ensure_loaded(spec)
    prompt = backend.prompt_ids(loaded, MESSAGES)
    expected = []
    for ids in choice_token_ids(loaded, CHOICES):
        assert ids[-1] == loaded.eos_ids[0]  # the reply ends: a prefix cannot score higher
        full = torch.tensor([prompt + ids])
        with torch.no_grad():
            logp = torch.log_softmax(loaded.model(input_ids=full).logits[0].float(), -1)
        expected.append(sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(ids)))
    assert shared == pytest.approx(expected, abs=1e-3)
    assert rows == pytest.approx(expected, abs=1e-3)
    assert len(set(shared)) == 3 and all(v < 0 for v in shared)


# -- the llm controller ---------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_llm_choice_mode_always_acts_validly(tiny, env_id: str) -> None:
    backend, _ = tiny
    controller = LLMController(
        backend=backend, model="controller", action_space="choices", temperature=1.0
    )
    env = gym.make(env_id)
    controller.bind(env)
    obs, info = env.reset(seed=3)
    controller.reset(3)
    actions = 0
    for _ in range(2):  # two turns of each env keep the test fast
        text = controller.act(obs, info)
        pick = controller.last_choice
        assert pick is not None and text == pick["choices"][pick["choices"].index(text)]
        obs, _, terminated, truncated, info = env.step(text)
        actions += 1
        assert not info.get("invalid_action"), (env_id, text, info.get("parse_error"))
        if terminated or truncated:
            break
    assert actions >= 1 and controller.controller_calls == actions
    assert controller.controller_prompt_tokens > 0
    env.close()


def test_choice_mode_is_seeded_and_greedy_at_temperature_zero(tiny) -> None:
    backend, _ = tiny
    env = gym.make("orch/MathRoute-v0")

    def picks(temperature: float, seed: int) -> list[int]:
        controller = LLMController(
            backend=backend, model="c", action_space="choices", temperature=temperature
        )
        controller.bind(env)
        out = []
        for episode in range(2):
            obs, info = env.reset(seed=episode)
            controller.reset(seed + episode)
            controller.act(obs, info)
            out.append(controller.last_choice["index"])  # type: ignore[index]
        return out

    assert picks(1.0, 0) == picks(1.0, 0)
    greedy = LLMController(backend=backend, model="c", action_space="choices")
    greedy.bind(env)
    obs, info = env.reset(seed=0)
    greedy.act(obs, info)
    scores = greedy.last_choice["logprobs"]  # type: ignore[index]
    assert greedy.last_choice["index"] == int(np.argmax(scores))  # type: ignore[index]

    # length-normalised (the GRPO run's --choice-score mean): the arg-max of sum / tokens
    mean = LLMController(backend=backend, model="c", action_space="choices", choice_score="mean")
    mean.bind(env)
    mean.act(obs, info)
    texts = mean.last_choice["choices"]  # type: ignore[index]
    raw = backend.score_choices(mean.spec, info["messages"], texts)
    assert len(raw.token_counts) == len(texts) and min(raw.token_counts) >= 1
    expected = [v / n for v, n in zip(raw.logprobs, raw.token_counts, strict=True)]
    assert mean.last_choice["scores"] == pytest.approx(expected)  # type: ignore[index]
    assert mean.last_choice["index"] == int(np.argmax(expected))  # type: ignore[index]
    with pytest.raises(ConfigError, match="choice_score"):
        LLMController(backend=backend, model="c", choice_score="max")
    env.close()


def test_choice_mode_errors_are_helpful(tiny) -> None:
    with pytest.raises(ConfigError, match="action_space"):
        LLMController(backend="hf", model="x", action_space="tokens")

    class NoScores:
        def complete(self, *args: object) -> None:
            raise AssertionError("not called")

    controller = LLMController(backend=NoScores(), model="c", action_space="choices")  # type: ignore[arg-type]
    env = gym.make("orch/MathRoute-v0")
    controller.bind(env)
    obs, info = env.reset(seed=0)
    with pytest.raises(ConfigError, match="score_choices"):
        controller.act(obs, info)


# -- the openai backend: prompt log-probabilities of a completions server --------------------
def test_openai_scores_from_echoed_prompt_logprobs(tiny) -> None:
    from orchenv.backends.openai_compat import OpenAICompatBackend
    from orchenv.testing.fake_openai import FakeOpenAIServer

    def logprob(token: str, before: str) -> float:  # "strong" is unlikely, the rest -1 each
        return -7.0 if "strong" in token else -1.0

    path = str(tiny_qwen2_path())
    spec = AgentSpec(name="controller", model="served", tier=0, price_prompt=1.0)
    with FakeOpenAIServer(prompt_logprob=logprob) as server:
        backend = OpenAICompatBackend(base_url=server.url, tokenizer=path, max_retries=0)
        choices = ["route weak", "route strong now", "accept"]
        scores = backend.score_choices(spec, MESSAGES, choices)
        request = server.requests[-1]
        assert request.path == "/v1/completions" and request.body["echo"] is True
        assert len(request.body["prompt"]) == 3  # every choice in one request
        # the choice's words (the end-of-turn text joins the last word here), no prompt word
        assert scores.logprobs == [-2.0, -9.0, -1.0]
        assert scores.prompt_tokens > 0 and scores.cost_usd > 0
        backend.close()
    with FakeOpenAIServer(prompt_logprob=None) as server:  # a server that cannot echo them
        backend = OpenAICompatBackend(base_url=server.url, tokenizer=path, max_retries=0)
        with pytest.raises(BackendError, match="no prompt log-probabilities"):
            backend.score_choices(spec, MESSAGES, choices)
        backend.close()
    with pytest.raises(ConfigError, match="tokenizer"):
        OpenAICompatBackend(base_url="http://127.0.0.1:9/v1").score_choices(spec, MESSAGES, ["a"])


# -- GRPO choice mode -----------------------------------------------------------------------
def test_choice_sampler_masks_logprobs_and_the_update_recomputes_them(tiny) -> None:
    from orchenv.agents.grpo.generation import ChoicePolicySampler

    backend, spec = tiny
    loaded = backend._ensure_loaded(spec)
    sampler = ChoicePolicySampler(loaded.model, loaded.tokenizer, temperature=50.0, seed=1)
    options = [None, CHOICES[0], None, CHOICES[1], CHOICES[2]]  # masked choices: None
    samples = sampler([MESSAGES] * 6, choices=[options] * 6)
    assert sampler.pop_stats()["choice_states_reused"] == 5  # one forward for the state
    available = [c for c in options if c is not None]
    assert {s.text for s in samples} <= set(available)
    scores = choice_logprobs(
        loaded.model, samples[0].prompt_ids, samples[0].choice_ids, pad_id=loaded.pad_id
    )
    logp = torch.log_softmax(scores.detach() / 50.0, -1)
    for s in samples:
        assert s.text == available[s.chosen] and s.completion_ids == s.choice_ids[s.chosen]
        assert s.logprobs == pytest.approx([float(logp[s.chosen])], abs=1e-4)
    with pytest.raises(ValueError, match="choices"):
        sampler([MESSAGES])


def test_length_normalised_choice_scores(tiny) -> None:
    from orchenv.agents.grpo.generation import ChoicePolicySampler, normalise_choice_scores

    backend, spec = tiny
    loaded = backend._ensure_loaded(spec)
    summed = ChoicePolicySampler(loaded.model, loaded.tokenizer, temperature=1.0)
    mean = ChoicePolicySampler(loaded.model, loaded.tokenizer, temperature=1.0, choice_score="mean")
    _, ids, s_scores, texts = summed.score_state(MESSAGES, CHOICES)
    _, ids_m, m_scores, texts_m = mean.score_state(MESSAGES, CHOICES)
    assert ids == ids_m and texts == texts_m == list(CHOICES)
    assert len({len(i) for i in ids}) > 1  # choices of different lengths
    assert m_scores == pytest.approx([v / len(i) for v, i in zip(s_scores, ids, strict=True)])
    as_tensor = normalise_choice_scores(torch.tensor(s_scores), ids, "mean")
    assert as_tensor.tolist() == pytest.approx(m_scores, abs=1e-5)
    with pytest.raises(ValueError, match="choice_score"):
        ChoicePolicySampler(loaded.model, loaded.tokenizer, choice_score="max")


@pytest.mark.parametrize(("choice_score", "kl_coef"), [("sum", 0.0), ("mean", 0.05)])
def test_grpo_choice_mode_trains_on_cpu(tmp_path: Path, choice_score: str, kl_coef: float) -> None:
    from orchenv.agents.grpo.config import GRPOConfig
    from orchenv.agents.grpo.trainer import train

    config = GRPOConfig(
        model_path=str(tiny_qwen2_path()),
        env_id="orch/MathRoute-v0",
        max_turns=2,
        action_space="choices",
        choice_score=choice_score,  # type: ignore[arg-type]
        kl_coef=kl_coef,  # the reference model's pick log-probabilities (a full copy here)
        mode="tree",
        temperature=50.0,  # the random tiny model's scores are far apart: flatten them
        group_size=3,
        queries_per_step=1,
        total_steps=1,
        micro_batch_size=64,
        learning_rate=1e-3,
        checkpoint_every=0,
        output_dir=str(tmp_path / "run"),
        device="cpu",
    )
    record = train(config).final_metrics
    assert record["invalid_fraction"] == 0.0  # every sampled action is a valid choice
    assert record["samples"] >= 3 and record["advantage/zero_fraction"] < 1.0
    assert record["loss/ratio"] == pytest.approx(1.0, abs=1e-4)  # sampler == update log-probs
    assert record["grad_norm"] > 0 and record["tokens/trained"] > 0
    if kl_coef:  # first step: the policy is the reference
        assert record["loss/kl"] == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(ConfigError, match="choices"):
        GRPOConfig(model_path="x", action_space="choices", generation_backend="vllm")


def test_tree_advantages_of_choice_samples_are_the_groups() -> None:
    # the same eq. 5-6 as text mode: a choice sample is one node
    sample = grpo.Sample("a", [1], [2], [-0.5], choice_ids=[[2], [3]], chosen=0)
    nodes = [
        grpo.TreeNode(i, None, 0, 0, MESSAGES, sample, r, True, {}) for i, r in enumerate([1, 0])
    ]
    tree = grpo.Tree(0, "t", nodes, {0: [0, 1]})
    q = grpo.node_returns(tree)
    assert grpo.group_advantages(tree, q) == {0: 0.5, 1: -0.5}


# -- no env package in the controllers -------------------------------------------------------
def test_llm_controller_imports_no_env_package_and_accept_text_agrees() -> None:
    from orchenv.envs.mathroute.protocol import verdict_text
    from orchenv.protocol import accept_text

    tree = ast.parse((ROOT / "agents" / "llm.py").read_text(encoding="utf-8"))
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.startswith("orchenv.envs")]
    assert accept_text("ok") == verdict_text(True, note="ok")
