"""Train an orchenv controller with TRL's ``GRPOTrainer`` through its ``rollout_func`` hook.

TRL 1.x offers two hooks for interactive training: ``environment_factory`` (env methods
exposed as *tools* the model calls through the chat template's tool-call format) and
``rollout_func`` (the user generates the whole completion). orchenv's controllers act in
free text (``<model>mid</model>``, ``<role>planner</role>``), not tool calls, so this adapter
uses ``rollout_func``: each dataset prompt is one orchenv episode, played turn by turn with
the trainer's own model, returned as one completion whose ``env_mask`` is 1 on the
controller's tokens and 0 on the env's (TRL multiplies it into the loss mask). The folded env
reward travels as the extra field ``orch_reward`` to ``reward_func``, which hands it to the
trainer unchanged and logs the episode metrics (``orch/accuracy``, ``orch/cost_usd``, ...).

Usage::

    rollout = OrchRollout("orch/MathRoute-v0", max_turn_tokens=256)
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=GRPOConfig(...),
        train_dataset=rollout.dataset(512), reward_funcs=rollout.reward_func,
        rollout_func=rollout,
    )

Generation here is transformers ``generate`` on the live policy (sampling with the trainer's
``temperature`` / ``top_p``); with ``use_vllm`` TRL still syncs its vLLM weights but this
adapter does not use vLLM (documented gap, docs/integrations.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from orchenv.error import ConfigError, require
from orchenv.integrations.episode import (
    TokenEpisode,
    default_fold,
    make_env,
    parse_env_kwargs,
    reset_env,
)

#: the dataset column and reward-function field this adapter adds
REWARD_FIELD = "orch_reward"


def prompt_key(prompt: Sequence[Mapping[str, Any]] | str) -> str:
    """A stable key of a dataset prompt, to find the episode it was made from."""
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


class OrchRollout:
    """A TRL ``rollout_func`` playing orchenv episodes; also builds the dataset it needs.

    Args:
        env_id, env_kwargs: the env (``gymnasium.make``); one env per concurrent episode.
        split: task split the dataset draws from.
        reward_fold, gamma: per-turn rewards -> one reward (``episode.REWARD_FOLDS``;
            None: the env's paper, ``episode.default_fold``).
        max_turn_tokens: new tokens per controller turn.
        max_response_tokens: bound on the whole completion, controller and env tokens
            (None: the trainer's ``max_completion_length``).
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | str | None = None,
        *,
        split: str = "train",
        reward_fold: str | None = None,
        gamma: float = 1.0,
        max_turn_tokens: int = 256,
        max_response_tokens: int | None = None,
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = {**parse_env_kwargs(env_kwargs), "split": split}
        self.reward_fold = reward_fold or default_fold(env_id)
        self.gamma = gamma
        self.max_turn_tokens = max_turn_tokens
        self.max_response_tokens = max_response_tokens
        self.episodes: dict[str, tuple[int, str | None]] = {}  # prompt key -> (seed, task id)
        self.envs: list[Any] = []
        self.last_batch: list[TokenEpisode] = []  # the latest call's episodes (inspection)

    # -- the dataset ---------------------------------------------------------------------------
    def dataset(self, n: int, *, seed: int = 0) -> Any:
        """``n`` episodes as a ``datasets.Dataset`` of conversational prompts (the reset
        messages of seeds ``seed .. seed + n - 1``)."""
        datasets = require("datasets", "data", "TRL training datasets")
        env = make_env(self.env_id, self.env_kwargs)
        rows = []
        try:
            for i in range(seed, seed + n):
                info = reset_env(env, seed=i, task_id=None)
                prompt = [dict(m) for m in info["messages"]]
                task_id = info.get("task_id")
                self.episodes[prompt_key(prompt)] = (i, task_id)
                rows.append({"prompt": prompt, "orch_seed": i, "orch_task_id": task_id or ""})
        finally:
            env.close()
        return datasets.Dataset.from_list(rows)

    # -- the rollout -----------------------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt (TRL already repeats each prompt ``num_generations``
        times) in lock step, one batched ``generate`` per turn."""
        tokenizer = trainer.processing_class
        limit = self.max_response_tokens or getattr(trainer.args, "max_completion_length", None)
        while len(self.envs) < len(prompts):
            self.envs.append(make_env(self.env_id, self.env_kwargs))
        episodes, contexts = [], {}
        for i, prompt in enumerate(prompts):
            key = prompt_key(prompt)
            if key not in self.episodes:
                raise ConfigError(
                    "a prompt that OrchRollout.dataset did not make reached the rollout: build "
                    "the train dataset with the same OrchRollout's dataset()"
                )
            seed, task_id = self.episodes[key]
            episode = TokenEpisode(tokenizer, max_response_tokens=limit)
            contexts[i] = episode.start(reset_env(self.envs[i], seed=seed, task_id=task_id))
            episodes.append(episode)
        while contexts:
            order = sorted(contexts)
            replies = self.generate(trainer, [contexts[i] for i in order])
            nxt: dict[int, list[int]] = {}
            for i, ids in zip(order, replies, strict=True):
                episode = episodes[i]
                action = episode.policy_turn(ids)
                _, reward, terminated, truncated, info = self.envs[i].step(action)
                context = episode.env_turn(reward, terminated or truncated, info)
                if context is not None:
                    nxt[i] = context
            contexts = nxt
        self.last_batch = episodes
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.response_ids for e in episodes],
            "logprobs": None,  # TRL recomputes the old log-probabilities itself
            "env_mask": [e.response_mask for e in episodes],
            REWARD_FIELD: [e.reward(self.reward_fold, self.gamma) for e in episodes],
            "orch_metrics": [e.metrics() for e in episodes],
        }

    def generate(self, trainer: Any, contexts: list[list[int]]) -> list[list[int]]:
        """One sampled reply per context with the trainer's model (left padding, stop at the
        end-of-turn token), sampling settings from ``trainer.args``."""
        import torch

        tokenizer, args = trainer.processing_class, trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            ids[row, width - len(context) :] = torch.tensor(context)
            mask[row, width - len(context) :] = 1
        device = next(model.parameters()).device
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    do_sample=True,
                    temperature=float(getattr(args, "temperature", 1.0) or 1.0),
                    top_p=float(getattr(args, "top_p", 1.0) or 1.0),
                    top_k=0,
                    max_new_tokens=self.max_turn_tokens,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=pad,
                )
        finally:
            model.train(training)
        replies = []
        for row in out[:, width:].tolist():
            if tokenizer.eos_token_id in row:  # keep the end-of-turn token, drop the padding
                row = row[: row.index(tokenizer.eos_token_id) + 1]
            replies.append(row)
        return replies

    # -- the reward --------------------------------------------------------------------------------
    def reward_func(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        """The env's folded reward for each completion (TRL ``reward_funcs`` entry); logs the
        batch means of the episode metrics as ``orch/NAME``."""
        rewards = kwargs.get(REWARD_FIELD)
        if rewards is None:
            raise ConfigError(
                "reward_func got no orch_reward: pass this OrchRollout as the trainer's rollout_func"
            )
        log_metric = kwargs.get("log_metric")
        metrics = kwargs.get("orch_metrics") or []
        if log_metric is not None and metrics:
            sums: dict[str, float] = defaultdict(float)
            for record in metrics:
                for name, value in record.items():
                    sums[name] += value
            for name, total in sorted(sums.items()):
                log_metric(f"orch/{name}", total / len(metrics))
        return [float(r) for r in rewards]

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []
