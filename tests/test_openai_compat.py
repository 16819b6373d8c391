"""The OpenAI-compatible backend against a real loopback server (offline, fast)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import gymnasium as gym
import pytest
from helpers import one_agent_pool

import orchenv  # noqa: F401 - registers the env ids
from orchenv.backends import openai_compat
from orchenv.backends.openai_compat import OpenAICompatBackend, OpenAIRequestError
from orchenv.backends.simulated import estimate_prompt_tokens, estimate_tokens
from orchenv.error import BackendError, ConfigError
from orchenv.grading import check_math_solution
from orchenv.pool import AgentPool, AgentSpec, UsageMeter
from orchenv.testing.fake_openai import FakeOpenAIServer, Fault, usage_for

MESSAGES = [
    {"role": "system", "content": "You are a careful mathematician."},
    {"role": "user", "content": "What is 2 + 2?"},
]


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch):
    """The client honours proxy variables; loopback requests must not go through one."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply="Two plus two is four. \\boxed{4}") as srv:
        yield srv


def fast_backend(**kwargs) -> OpenAICompatBackend:
    """Small timeouts and backoff so fault tests take milliseconds."""
    settings = {"timeout_s": 0.5, "backoff_base_s": 0.01, "backoff_max_s": 1.0, "rng_seed": 0}
    return OpenAICompatBackend(**{**settings, **kwargs})


def test_happy_path_through_the_pool(server, monkeypatch):
    monkeypatch.setenv("ORCHENV_TEST_KEY", "sk-test-123")
    backend = fast_backend(
        api_key_env="ORCHENV_TEST_KEY", default_params={"temperature": 0.0, "max_tokens": 64}
    )
    pool = one_agent_pool(
        server.url, backend, params={"max_tokens": 32, "seed": 7}, headers={"X-Trace": "t1"}
    )
    completion = pool.call("a", MESSAGES)
    pool.close()

    assert completion.text == "Two plus two is four. \\boxed{4}"
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "m",
        "messages": MESSAGES,
        "temperature": 0.0,
        "max_tokens": 32,  # the agent's params win over default_params
        "seed": 7,
    }
    assert request.headers["authorization"] == "Bearer sk-test-123"
    assert request.headers["x-trace"] == "t1"
    assert request.usage == usage_for(request.body, completion.text)
    assert completion.prompt_tokens == request.usage["prompt_tokens"]
    assert completion.completion_tokens == request.usage["completion_tokens"]
    assert completion.token_source == "server" and not completion.tokens_estimated
    assert completion.cost_usd == pytest.approx(
        (completion.prompt_tokens * 1.0 + completion.completion_tokens * 2.0) / 1e6
    )
    assert completion.latency_s > 0 and not completion.cached
    assert completion.meta["attempts"] == 1
    assert completion.meta["finish_reason"] == "stop"
    assert completion.meta["model"] == "m" and completion.meta["id"].startswith("chatcmpl-")
    assert completion.to_dict()["token_source"] == "server"


def test_agent_settings_override_the_backend_defaults(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = fast_backend(base_url="http://127.0.0.1:9/v1")  # nobody listens on port 9
    pool = one_agent_pool(server.url, backend, model="served-name", api_key="sk-agent")
    pool.call("a", MESSAGES)
    assert server.requests[0].body["model"] == "served-name"
    assert server.requests[0].headers["authorization"] == "Bearer sk-agent"

    # no key anywhere: no Authorization header (local servers need none)
    keyless = one_agent_pool(server.url, fast_backend())
    keyless.call("a", MESSAGES)
    assert "authorization" not in server.requests[1].headers
    # a trailing slash on base_url is fine
    slash = one_agent_pool(server.url, fast_backend(), base_url=server.url + "/")
    slash.call("a", MESSAGES)
    assert server.requests[2].path == "/v1/chat/completions"
    for p in (pool, keyless, slash):
        p.close()


@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=500),
        Fault(status=502),
        Fault(status=503),
        Fault(malformed=True),
        Fault(no_content=True),
        Fault(drop=True),
        Fault(latency_s=2.0),  # beyond timeout_s=0.5: the attempt times out
    ],
    ids=["500", "502", "503", "malformed", "no-content", "drop", "slow"],
)
def test_transient_faults_are_retried(server, fault):
    server.add_faults(fault)
    pool = one_agent_pool(server.url, fast_backend())
    completion = pool.call("a", MESSAGES)
    pool.close()
    assert completion.text.endswith("\\boxed{4}")
    assert completion.meta["attempts"] == 2
    assert len(server.requests) == 2
    assert completion.token_source == "server"
    assert completion.latency_s >= completion.meta["attempt_latency_s"]


def test_429_waits_for_retry_after(server):
    server.add_faults(Fault(status=429, retry_after=0.2))
    pool = one_agent_pool(server.url, fast_backend())
    completion = pool.call("a", MESSAGES)
    pool.close()
    first, second = server.requests
    assert first.status == 429 and second.status == 200
    assert second.arrived - first.answered >= 0.19  # as the server saw it
    assert completion.meta["attempts"] == 2


def test_retry_after_is_capped_by_backoff_max(server, monkeypatch):
    waits: list[float] = []  # what the backend sleeps, recorded instead of slept

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(openai_compat, "_sleep", record)
    server.add_faults(Fault(status=429, retry_after=30))
    pool = one_agent_pool(server.url, fast_backend(backoff_max_s=0.05))
    pool.call("a", MESSAGES)
    pool.close()
    assert waits == [0.05]  # Retry-After 30 s, capped at backoff_max_s


def test_persistent_503_gives_up_with_a_useful_error(server):
    server.default_fault = Fault(status=503)
    pool = one_agent_pool(server.url, fast_backend(max_retries=3))
    with pytest.raises(BackendError) as info:
        pool.call("a", MESSAGES)
    pool.close()
    err = info.value
    message = str(err)
    assert "'a'" in message and server.url + "/chat/completions" in message
    assert "HTTP 503" in message and "4 attempts" in message
    assert "injected fault: HTTP 503" in message  # the body excerpt
    assert isinstance(err, OpenAIRequestError)
    assert (err.agent, err.status, err.attempts) == ("a", 503, 4)
    assert len(server.requests) == 4


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_retried(server, status):
    server.default_fault = Fault(status=status)
    pool = one_agent_pool(server.url, fast_backend())
    with pytest.raises(OpenAIRequestError) as info:
        pool.call("a", MESSAGES)
    pool.close()
    assert len(server.requests) == 1
    assert info.value.attempts == 1 and info.value.status == status
    assert f"HTTP {status}, not retried" in str(info.value) and "1 attempt" in str(info.value)
    if status == 401:
        assert "API key" in str(info.value)


def test_error_quotes_at_most_300_characters_of_the_body(server):
    server.default_fault = Fault(status=500, body="<html>" + "x" * 5000 + "</html>")
    pool = one_agent_pool(server.url, fast_backend(max_retries=0))
    with pytest.raises(OpenAIRequestError, match="HTTP 500") as info:
        pool.call("a", MESSAGES)
    pool.close()
    excerpt = str(info.value).split("(HTTP 500): ", 1)[1]
    assert excerpt.startswith("<html>xxx") and len(excerpt) <= 300


def test_missing_usage_falls_back_to_tokenizer_or_estimate(server):
    server.default_fault = Fault(no_usage=True)
    pool = one_agent_pool(server.url, fast_backend())
    estimated = pool.call("a", MESSAGES)
    assert estimated.token_source == "estimate" and estimated.tokens_estimated
    assert estimated.prompt_tokens == estimate_prompt_tokens(MESSAGES)
    assert estimated.completion_tokens == estimate_tokens(estimated.text)
    assert estimated.cost_usd == pytest.approx(
        (estimated.prompt_tokens + 2 * estimated.completion_tokens) / 1e6
    )
    pool.close()

    words = lambda text: len(text.split())  # noqa: E731 - a tiny stand-in tokenizer
    counted_pool = one_agent_pool(server.url, fast_backend(tokenizer=words))
    counted = counted_pool.call("a", MESSAGES)
    counted_pool.close()
    assert counted.token_source == "tokenizer" and not counted.tokens_estimated
    assert counted.completion_tokens == words(counted.text)
    assert counted.prompt_tokens == sum(words(m["content"]) + 4 for m in MESSAGES)


def test_tokenizer_by_name_is_loaded_from_local_files(server, tmp_path):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "<user>": 1, "<assistant>": 2, "four": 3}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    tok.save_pretrained(tmp_path / "tok")
    server.default_fault = Fault(no_usage=True)
    pool = one_agent_pool(server.url, fast_backend(tokenizer=str(tmp_path / "tok")))
    completion = pool.call("a", MESSAGES)
    pool.close()
    assert completion.token_source == "tokenizer"
    # the chat template: one token per whitespace word, plus the generation prompt
    assert completion.prompt_tokens == sum(len(m["content"].split()) + 1 for m in MESSAGES) + 1
    assert completion.completion_tokens == len(completion.text.split())

    missing = one_agent_pool(server.url, fast_backend(tokenizer=str(tmp_path / "absent")))
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        missing.call("a", MESSAGES)
    missing.close()


@pytest.mark.timeout(30)  # a hang fails the test; how fast it gives up is not measured here
def test_a_stalled_server_cannot_hang_a_call():
    with FakeOpenAIServer(latency_s=60.0) as slow:
        backend = fast_backend(timeout_s=0.3, max_retries=1)
        pool = one_agent_pool(slow.url, backend)
        with pytest.raises(OpenAIRequestError, match="ReadTimeout") as info:
            pool.call("a", MESSAGES)
        pool.close()
    assert info.value.attempts == 2  # one retry, then the read timeout is reported
    assert backend.deadline_s == pytest.approx(2 * 0.3 + 0.01)


def test_connection_refused_is_retried_then_reported():
    with FakeOpenAIServer() as srv:
        url = srv.url
    pool = AgentPool(
        [AgentSpec(name="a", model="m", tier=0, backend="openai")],
        {"openai": fast_backend(base_url=url, max_retries=2)},
    )
    with pytest.raises(OpenAIRequestError, match="ConnectError") as info:
        pool.call("a", MESSAGES)
    pool.close()
    assert info.value.attempts == 3 and info.value.status is None


def test_calls_overlap_on_the_server():
    with FakeOpenAIServer(reply="ok", latency_s=0.2) as srv:
        pool = one_agent_pool(srv.url, fast_backend(timeout_s=5.0, max_concurrency=16))
        calls = [("a", [{"role": "user", "content": f"q{i}"}], None) for i in range(16)]
        out = pool.call_many(calls)
        pool.close()
    assert [c.text for c in out] == ["ok"] * 16
    assert sorted(r.body["messages"][0]["content"] for r in srv.requests) == sorted(
        f"q{i}" for i in range(16)
    )
    assert srv.max_in_flight > 1, "the 16 calls overlapped on the server"


def test_configuration_errors(server):
    backend = fast_backend()
    no_url = AgentSpec(name="a", model="m", tier=0, backend="openai")
    with pytest.raises(ConfigError, match="base_url"):
        AgentPool([no_url], {"openai": backend}).call("a", MESSAGES)
    with pytest.raises(ConfigError, match="unknown backend_kwargs"):
        one_agent_pool(server.url, backend, base_ur="x").call("a", MESSAGES)
    with pytest.raises(ConfigError, match="'model'"):
        one_agent_pool(server.url, backend, params={"model": "x"}).call("a", MESSAGES)
    with pytest.raises(ConfigError, match="timeout_s"):
        OpenAICompatBackend(timeout_s=0)
    with pytest.raises(ConfigError, match="max_retries"):
        OpenAICompatBackend(max_retries=-1)
    assert server.requests == []


def test_backend_pickles_and_reopens_after_close(server):
    backend = fast_backend()
    pool = one_agent_pool(server.url, backend)
    pool.call("a", MESSAGES)
    clone = pickle.loads(pickle.dumps(backend))
    pool.close()
    assert one_agent_pool(server.url, clone).call("a", MESSAGES).text.endswith("\\boxed{4}")
    assert pool.call("a", MESSAGES).meta["attempts"] == 1  # a closed backend reopens
    pool.close()
    clone.close()


def test_mathroute_episode_over_http():
    """System 1's agent names and tiers served over HTTP; the strongest agent answers right."""
    names = {
        "Qwen2.5-1.5B-Instruct": ("qwen-1.5b", 2, 0.025, 0.05),
        "Qwen2.5-7B-Instruct": ("qwen-7b", 1, 0.025, 0.05),
        "Qwen3-30B-A3B-Instruct": ("qwen3-30b", 0, 0.08, 0.29),
    }
    env_box: dict[str, gym.Env] = {}

    def reply(body: dict) -> str:
        if body["model"] == "qwen3-30b":
            answer = env_box["env"].unwrapped.task.answers[0]
            return f"Working carefully, the result is $\\boxed{{{answer}}}$."
        return "I guess $\\boxed{0}$."

    with FakeOpenAIServer(reply=reply) as srv:
        specs = [
            AgentSpec(
                name=name,
                model=model,
                tier=tier,
                price_prompt=pp,
                price_completion=pc,
                backend="openai",
            )
            for name, (model, tier, pp, pc) in names.items()
        ]
        backend = fast_backend(base_url=srv.url, timeout_s=5.0)
        pool = AgentPool(specs, {"openai": backend}, name="system1-http")
        env = gym.make("orch/MathRoute-v0", pool=pool, split="test")
        env_box["env"] = env
        obs, info = env.reset(seed=3)
        assert isinstance(obs, str) and info["phase"] == "route"

        actions = [
            "<thinking>looks easy</thinking><model>Qwen2.5-1.5B-Instruct</model>",
            "<checking>the guess is unjustified</checking><verdict>False</verdict>\n"
            "<model>Qwen3-30B-A3B-Instruct</model>",
            "<checking>fine</checking><verdict>True</verdict>",
        ]
        total_cost = 0.0
        for turn, action in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(action)
            assert not info["invalid_action"], info["parse_error"]
            if turn < 2:
                answered = srv.completions()[turn]
                spec = pool.spec(info["called_agent"])
                assert answered.body["model"] == spec.model
                assert info["tokens"] == {
                    "prompt": answered.usage["prompt_tokens"],
                    "completion": answered.usage["completion_tokens"],
                }
                expected = spec.cost(
                    answered.usage["prompt_tokens"], answered.usage["completion_tokens"]
                )
                assert info["cost_usd"] == pytest.approx(expected)
                total_cost += expected
            else:
                assert info["tokens"] == {"prompt": 0, "completion": 0}
            if terminated or truncated:
                break
        env.close()
        pool.close()

    assert terminated and isinstance(info["correct"], bool)
    assert info["correct"] is True
    assert check_math_solution(info["final_response"], env.unwrapped.task.answers)
    assert info["agent_calls"] == {"Qwen2.5-1.5B-Instruct": 1, "Qwen3-30B-A3B-Instruct": 1}
    assert info["episode_cost_usd"] == pytest.approx(total_cost)
    assert len(srv.requests) == 2


# -- issue 17: per-agent timeouts, verified metering, token ids and logprobs, one loop ------------
@pytest.mark.timeout(30)
def test_an_agent_can_set_its_own_timeout_and_retries():
    """A pool file's backend_kwargs may give a slow agent more time (or fewer retries)."""
    with FakeOpenAIServer(reply="ok", latency_s=0.4) as slow:
        backend = fast_backend(timeout_s=0.1, max_retries=0)
        assert one_agent_pool(slow.url, backend, timeout_s=5.0).call("a", MESSAGES).text == "ok"
        with pytest.raises(OpenAIRequestError, match="ReadTimeout"):
            one_agent_pool(slow.url, backend).call("a", MESSAGES)
        with pytest.raises(ConfigError, match="timeout_s must be a positive"):
            one_agent_pool(slow.url, backend, timeout_s=0).call("a", MESSAGES)
        with pytest.raises(ConfigError, match="max_retries must be"):
            one_agent_pool(slow.url, backend, max_retries=-1).call("a", MESSAGES)
        backend.close()


def test_server_counts_are_checked_against_the_agents_tokenizer(server):
    """usage_for counts words plus framing; a word-count tokenizer misses the framing of the
    prompt (3 per message + 11) and of the completion (7): flagged, with both counts kept."""
    words = lambda text: len(text.split())  # noqa: E731 - a tiny stand-in tokenizer
    pool = one_agent_pool(server.url, fast_backend(tokenizer=words, metering_tolerance=0.05))
    completion = pool.call("a", MESSAGES)
    (request,) = server.requests
    metering = completion.meta["metering"]
    assert completion.token_source == "server"
    assert metering["server"] == [
        request.usage["prompt_tokens"],
        request.usage["completion_tokens"],
    ]
    assert metering["tokenizer"] == [
        sum(words(m["content"]) + 4 for m in MESSAGES),
        words(completion.text),
    ]
    assert metering["disagree"] is True
    meter = UsageMeter()
    meter.record(completion)
    assert (meter.metering_checked, meter.metering_disagreements) == (1, 1)
    lenient = one_agent_pool(server.url, fast_backend(tokenizer=words, metering_tolerance=2.0))
    assert lenient.call("a", MESSAGES).meta["metering"]["disagree"] is False
    pool.close()
    lenient.close()


def test_token_logprobs_and_ids_are_exposed():
    choice = {
        "message": {"content": "Hi there"},
        "logprobs": {
            "content": [
                {"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                {"token": "token_id:318", "logprob": -1.5},
                {"token": " there", "logprob": -0.5, "token_id": 612},
            ]
        },
    }
    assert openai_compat._logprobs(choice) == {
        "logprobs": {
            "tokens": ["Hi", "token_id:318", " there"],
            "logprobs": [-0.25, -1.5, -0.5],
            "token_ids": [None, 318, 612],
        }
    }
    for hostile in (None, {"content": "x"}, {"content": [{"token": 5, "logprob": 0}]},
                    {"content": [{"token": "a", "logprob": "x"}]}):  # fmt: skip
        assert openai_compat._logprobs({"logprobs": hostile}) == {}


def test_calls_from_many_threads_share_one_loop_and_one_session(server):
    import threading

    backend = fast_backend(max_concurrency=8)
    pool = one_agent_pool(server.url, backend)
    pool.call("a", MESSAGES)
    session = backend._session
    threads = [threading.Thread(target=pool.call, args=("a", MESSAGES)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backend._session is session and len(server.requests) == 9
    pool.close()
    assert backend._session is None


def test_proxies_come_from_the_environment_once_per_url(monkeypatch):
    openai_compat._proxy_for.cache_clear()
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    try:
        assert openai_compat._proxy_for("http://10.1.2.3:8000/v1/chat/completions") == (
            "http://proxy.example:3128"
        )
        assert openai_compat._proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    finally:
        openai_compat._proxy_for.cache_clear()


_REPLY = '{"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": %s}}'


@pytest.mark.parametrize(
    "body",
    [
        _REPLY % "3",
        _REPLY % ("1" * 40),  # the longest integer parse_json takes
        _REPLY % ("1" * 41),
        _REPLY % "1e308",
        _REPLY % "1e309",  # reads as infinity
        _REPLY % "NaN",
        _REPLY % "-Infinity",
        _REPLY % ("0." + "1" * 98),
        _REPLY % ("0." + "1" * 99),
        '{"choices": [], "choices": []}',  # a key twice
        "[" * 64 + "]" * 64,
        "[" * 65 + "]" * 65,
        '{"a": "[[[[" }',
        "\ufeff{}",
        "{} x",
        "\ud800",
    ],
)
def test_replies_are_read_exactly_as_parse_json_reads_them(body):
    # _load_reply reads most replies without parse_json's second pass: same value, same refusal
    from orchenv.schema import JSONLimitError, parse_json

    raw = body.encode("utf-8", "surrogatepass")
    try:
        expected: object = parse_json(raw, "HTTP 200 reply")
    except JSONLimitError as exc:
        expected = ("limit", str(exc))
    except ValueError:
        expected = ("not json",)
    try:
        got: object = openai_compat._load_reply(raw, 200)
    except openai_compat._Failure as failure:
        got = ("limit", failure.detail) if not failure.retryable else ("not json",)
    assert pickle.dumps(got) == pickle.dumps(expected)
