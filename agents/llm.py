"""Prompted LLM controllers: any live pool backend acting as the controller model.

The controller model reads the env's own controller prompts (``info["messages"]``)
and its raw reply is the action: parsing, and penalising malformed output, is
the env's business. Its calls are not agent usage: they are metered on the controller
(``controller_cost_usd``, ``controller_calls``, token totals, ``usage()``), priced by
the ``price_prompt`` / ``price_completion`` you give, and reported apart from the
agents' spend by ``orchenv run`` and ``orchenv eval``. They do go through the pool's
recording or replay file when the env's pool has one (``--record`` / ``--replay``),
under the agent name ``controller``, so a replayed run makes no live call at all.

``action_space="choices"`` (choice mode, ``orchenv.choice_policy``): on an env with
discrete choices (``action_choices()``) the model does not write its action; each
available choice's canonical text is scored by its summed log-probability given the same
chat prompt (``hf``: one forward pass sharing the prompt's KV cache; ``openai``: prompt
log-probabilities of a completions server that returns them, such as vLLM) and the action
is sampled from the normalised distribution (arg-max at temperature 0), so every action is
valid. Scoring calls are metered like generation calls but are not recorded or replayed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.backends.common import call_seed
from orchenv.choice_policy import (
    ACTION_SPACES,
    ChoiceScores,
    check_choice_score,
    normalised_scores,
    pick_choice,
)
from orchenv.discrete import current_choices
from orchenv.error import ConfigError, OrchEnvError, UnknownNameError
from orchenv.pool import BACKENDS, AgentSpec, Backend, CallContext, Completion, make_backend
from orchenv.protocol import accept_text, require_phase

logger = logging.getLogger(__name__)

#: backends that cannot act as a controller model
_NOT_CONTROLLERS = {
    "simulated": "the simulated backend cannot act as a controller model: it needs a task "
    "and only writes math solutions. Use a live model: backend='openai' (any "
    "OpenAI-compatible server, e.g. vLLM) or backend='hf' (a local transformers model)",
    "replay": "the replay backend answers recorded agent calls by task; it cannot act as a "
    "controller model. Use backend='openai' or backend='hf'",
}


def _generation_kwargs(backend: str, temperature: float, max_tokens: int) -> dict[str, Any]:
    """The per-agent ``backend_kwargs`` that set decoding for each backend's own keys."""
    if backend == "openai":
        return {"params": {"temperature": temperature, "max_tokens": max_tokens}}
    if backend == "hf":
        sample = temperature > 0
        return {
            "max_new_tokens": max_tokens,
            "do_sample": sample,
            "temperature": temperature if sample else 1.0,
        }
    if backend == "vllm":
        return {"temperature": temperature, "max_tokens": max_tokens}
    return {}


class LLMController:
    """A prompted LLM as the controller: sends the env's prompt, returns the model's text.

    Table 1 rows "Controller V1/V2" use a trained controller model; this is the
    untrained (prompted) form of the same loop, and the harness for any model you
    serve. Works on every env (it needs only ``info["messages"]``). Not privileged.

    Args:
        backend: a registered backend name (``"openai"``, ``"hf"``, ``"vllm"``) or a
            backend instance. ``"simulated"`` is rejected (it cannot write
            controller text).
        model: the model id the backend serves (``openai``: the request's model;
            ``hf``: a local path or cached name, unless ``backend_kwargs["model"]``).
        backend_kwargs: arguments of the backend's constructor (e.g. ``base_url``).
        base_url, timeout_s: shortcuts for ``backend_kwargs["base_url"]`` /
            ``["timeout_s"]`` of the ``openai`` backend (``-c base_url=http://...``).
        temperature, max_tokens: decoding; 0 means greedy.
        price_prompt, price_completion: USD per 1M tokens, for ``controller_cost_usd``.
        one_shot: route once with the model, then accept every draft without
            calling it (Router-R1 style); needs an env with ``info["phase"]``.
        action_space: ``"text"`` (the model writes its action) or ``"choices"`` (choice
            mode: pick among the env's ``action_choices()`` by log-probability, see the
            module docstring); needs a backend with ``score_choices`` (``hf``, ``openai``).
        seed: base seed of choice-mode sampling (``reset(seed)`` reseeds per episode).
        choice_score: choice mode's score of a choice: ``"sum"`` of its tokens'
            log-probabilities (default) or their ``"mean"`` (length-normalised; use the
            setting a GRPO choice-mode run was trained with, ``--choice-score``).
    """

    privileged = False
    #: what ``one_shot=None`` means for this class
    default_one_shot = False
    _name = "llm"

    def __init__(
        self,
        *,
        backend: str | Backend = "openai",
        model: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        price_prompt: float = 0.0,
        price_completion: float = 0.0,
        one_shot: bool | None = None,
        base_url: str | None = None,
        timeout_s: float | None = None,
        action_space: str = "text",
        seed: int = 0,
        choice_score: str = "sum",
    ) -> None:
        check_choice_score(choice_score)
        if action_space not in ACTION_SPACES:
            raise ConfigError(f"action_space must be one of {ACTION_SPACES}, got {action_space!r}")
        backend_kwargs = dict(backend_kwargs or {})
        for key, value in (("base_url", base_url), ("timeout_s", timeout_s)):
            if value is None:
                continue
            if backend != "openai":
                raise ConfigError(
                    f"{key}= applies to the 'openai' controller backend; for {backend!r} put "
                    "the backend's own arguments in backend_kwargs"
                )
            backend_kwargs[key] = value
        if isinstance(backend, str):
            if backend in _NOT_CONTROLLERS:
                raise ConfigError(_NOT_CONTROLLERS[backend])
            if backend not in BACKENDS:
                raise UnknownNameError("backend", backend, BACKENDS)
            if model is None and "model" not in backend_kwargs:
                raise ConfigError(
                    f"the {backend!r} controller needs model=...: the model id the server "
                    "serves (openai) or a local model path (hf)"
                )
        else:
            from orchenv.backends.simulated import SimulatedBackend

            if isinstance(backend, SimulatedBackend):
                raise ConfigError(_NOT_CONTROLLERS["simulated"])
            if backend_kwargs:
                raise ConfigError("backend_kwargs apply only when backend is a name")
        if not temperature >= 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if not (isinstance(max_tokens, int) and max_tokens >= 1):
            raise ConfigError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if price_prompt < 0 or price_completion < 0:
            raise ConfigError("price_prompt and price_completion must be >= 0 (USD per 1M tokens)")
        backend_name = backend if isinstance(backend, str) else "custom"
        self.backend_name = backend_name
        self.backend_kwargs = backend_kwargs
        self.one_shot = self.default_one_shot if one_shot is None else bool(one_shot)
        self.action_space = action_space
        self.choice_score = choice_score
        self.temperature = float(temperature)
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        #: choice mode: the last state's choices, their scores and the pick (for inspection)
        self.last_choice: dict[str, Any] | None = None
        # a private spec: the controller is not a pool agent and never counts as agent usage
        self.spec = AgentSpec(
            name="controller",
            model=model or str(backend_kwargs.get("model", "controller")),
            tier=0,
            price_prompt=float(price_prompt),
            price_completion=float(price_completion),
            backend=backend_name,
            backend_kwargs=_generation_kwargs(backend_name, float(temperature), max_tokens),
        )
        self._backend: Backend | None = None if isinstance(backend, str) else backend
        self._owns_backend = isinstance(backend, str)
        self._env: Any = None
        self._wrapped_for: Any = None  # the pool whose recording / replay wraps the backend
        self.controller_calls = 0
        self.controller_cost_usd = 0.0
        self.controller_prompt_tokens = 0
        self.controller_completion_tokens = 0
        #: replies cut at max_tokens (``finish_reason == "length"``): the summaries' share
        self.controller_truncated = 0

    def reset(self, seed: int | None = None) -> None:
        """Reseed choice-mode sampling for an episode (a pure function of ``seed``)."""
        base = self.seed if seed is None else call_seed(self.seed, f"llm-choices/{seed}", ())
        self._rng = np.random.default_rng(base)

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        self._env = env

    def _get_raw_backend(self) -> Backend:
        """The backend itself, built on first use (no recording or replay wrapper)."""
        if self._backend is None:  # built on first use: construction does no I/O
            if self.backend_name == "openai" and not self.backend_kwargs.get("base_url"):
                raise ConfigError(
                    "the llm controller has no server: give its OpenAI-compatible endpoint "
                    "with -c base_url=http://HOST:PORT/v1 (in code: base_url=... or "
                    "backend_kwargs={'base_url': ...})"
                )
            self._backend = make_backend(self.backend_name, **self.backend_kwargs)
        return self._backend

    def _get_backend(self) -> Backend:
        backend = self._get_raw_backend()
        pool = _pool_of(self._env)
        wrap = getattr(pool, "wrap_controller_backend", None)
        if callable(wrap):  # record / replay the controller's calls as the pool's agents'
            if self._wrapped_for is None or self._wrapped_for[0] is not pool:
                self._wrapped_for = (pool, wrap(backend))
            return self._wrapped_for[1]  # type: ignore[no-any-return]
        return backend

    def usage(self) -> dict[str, float]:
        """The controller model's spend so far: calls, tokens and dollars."""
        return {
            "controller_calls": self.controller_calls,
            "controller_prompt_tokens": self.controller_prompt_tokens,
            "controller_completion_tokens": self.controller_completion_tokens,
            "controller_truncated": self.controller_truncated,
            "controller_cost_usd": self.controller_cost_usd,
        }

    def complete(self, messages: list[dict[str, str]]) -> Completion:
        """One controller-model call, metered on this controller (keyed on the env's task and
        turn, so recording and replay files can hold it)."""
        env = self._env
        context = CallContext(task=getattr(env, "task", None), turn=int(getattr(env, "turn", 0)))
        completion = self._get_backend().complete(self.spec, messages, context)
        self.controller_calls += 1
        self.controller_cost_usd += completion.cost_usd
        self.controller_prompt_tokens += completion.prompt_tokens
        self.controller_completion_tokens += completion.completion_tokens
        self.controller_truncated += completion.meta.get("finish_reason") == "length"
        return completion

    def score(self, messages: list[dict[str, str]], choices: list[str]) -> ChoiceScores:
        """Choice mode: the backend's summed log-probability of each choice, metered here."""
        backend = self._get_raw_backend()
        scorer = getattr(backend, "score_choices", None)
        if not callable(scorer):
            raise ConfigError(
                f"action_space='choices' needs a backend that scores given replies "
                f"(score_choices: 'hf', or 'openai' on a server with prompt log-probabilities); "
                f"{type(backend).__name__} has none"
            )
        scores: ChoiceScores = scorer(self.spec, messages, choices)
        if len(scores.logprobs) != len(choices):
            raise OrchEnvError(
                f"{type(backend).__name__}.score_choices returned {len(scores.logprobs)} scores "
                f"for {len(choices)} choices"
            )
        self.controller_calls += 1
        self.controller_cost_usd += scores.cost_usd
        self.controller_prompt_tokens += scores.prompt_tokens
        return scores

    def act_choices(self, messages: list[dict[str, str]]) -> str:
        """Choice mode: sample one of the env's available choices by the model's scores."""
        if self._env is None:
            raise ConfigError("action_space='choices' needs the env: bind(env) first")
        try:
            choices = current_choices(self._env)
        except NotImplementedError as exc:
            raise ConfigError(
                f"action_space='choices' needs an env with discrete choices: {exc}"
            ) from exc
        index = [i for i, c in enumerate(choices) if c is not None]
        texts = [str(choices[i]) for i in index]
        scores = self.score(messages, texts)
        values = normalised_scores(scores.logprobs, scores.token_counts, self.choice_score)
        pick, logp = pick_choice(values, self.temperature, self._rng)
        self.last_choice = {
            "choices": texts,
            "logprobs": scores.logprobs,
            "scores": values,
            "index": index[pick],
            "logprob": logp,
        }
        return texts[pick]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self.one_shot and require_phase(info, self._name, self._env) == "verify":
            return accept_text(note="one-shot router: accept without checking")
        messages = list(info.get("messages") or [{"role": "user", "content": obs}])
        if self.action_space == "choices":
            return self.act_choices(messages)
        return self.complete(messages).text

    def close(self) -> None:
        """Release the backend (HTTP client, loaded model) if this controller built it."""
        close = getattr(self._backend, "close", None)
        if self._owns_backend and callable(close):
            close()


def _pool_of(env: Any) -> Any:
    """The env's agent pool, or None (an env without one, or not bound yet)."""
    if env is None:
        return None
    try:
        return getattr(env, "pool", None)
    except OrchEnvError:  # an env whose pool cannot be built
        return None


class RouterR1Controller(LLMController):
    """Router-R1-style one-shot LLM router: the model routes once, every draft is accepted.

    Table 1 row "Router-R1" (seed 000 runs it as a single routing decision, since
    its queries are not decomposed). The model sees the env's routing prompt; at
    verification turns no model call is made (one controller call per episode).
    Untrained here; a GRPO-trained checkpoint served by ``openai`` / ``hf`` /
    ``vllm`` plugs in through ``model``. Same arguments as ``LLMController``
    (``one_shot`` defaults to True). Not privileged.
    """

    default_one_shot = True
    _name = "router-r1"
