"""The run directory: ``metrics.jsonl`` (and TensorBoard), ``checkpoint-STEP/`` (written to a
temporary directory and renamed when complete, so "latest" never picks a half-written one).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchenv.agents.grpo.config import GRPOConfig
from orchenv.agents.grpo.dist import Dist
from orchenv.error import ConfigError, require

logger = logging.getLogger(__name__)


class RunDir:
    """``config.output_dir``: the checkpoint to resume from, metrics and checkpoints."""

    def __init__(self, config: GRPOConfig, dist: Dist) -> None:
        self.config, self.dist, self.path = config, dist, Path(config.output_dir)
        self.path.mkdir(parents=True, exist_ok=True)
        found = checkpoints(self.path)
        if config.resume_from == "latest":
            self.resume_from = found[-1][1] if found else None
        else:
            self.resume_from = None if config.resume_from is None else Path(config.resume_from)
        state = {"step": 0, "lora": config.lora is not None}
        if self.resume_from is not None:
            file = self.resume_from / "trainer_state.json"
            if not file.is_file():
                raise ConfigError(
                    f"resume_from={config.resume_from!r} is not a checkpoint directory (no "
                    "trainer_state.json); give a checkpoint-STEP directory or 'latest'"
                )
            state = json.loads(file.read_text(encoding="utf-8"))
        if state["lora"] != (config.lora is not None):
            raise ConfigError(f"{self.resume_from} was trained with the other LoRA setting")
        self.start_step = state["step"]
        self.metrics, self.writer = self.path / "metrics.jsonl", None
        if not dist.is_main_process:
            return
        if self.resume_from is None and found:
            logger.warning("%s holds checkpoints; this fresh run overwrites them", self.path)
        old = self.metrics.read_text("utf-8").splitlines() if self.metrics.exists() else []
        kept = [line for line in old if _step(line) <= self.start_step]
        self.metrics.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        if config.log_tensorboard:
            require("tensorboard", "train", "TensorBoard scalars (log_tensorboard)")
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.path / "tensorboard"))

    def restore(self, optimizer: Any) -> None:
        """Load the optimizer and put the global RNGs back as at the checkpoint (for envs)."""
        path, dist = self.resume_from, self.dist
        if path is None:
            return
        state = torch.load(path / "optimizer.pt", map_location=dist.device, weights_only=True)
        optimizer.load_state_dict(state)
        file = path / f"rng_state_{dist.process_index}.pt"
        rng = torch.load(file if file.is_file() else path / "rng_state_0.pt", weights_only=False)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])

    def log(self, record: dict[str, Any]) -> None:
        """Append one step's metrics (main process)."""
        if not self.dist.is_main_process:
            return
        with self.metrics.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.writer.add_scalar(key, value, record["step"])
            self.writer.flush()

    def save(self, step: int, policy: Any, tokenizer: Any, optimizer: Any) -> Path:
        """Write ``checkpoint-STEP/`` (the main process the files, every process its RNGs)."""
        dist, config = self.dist, self.config
        final, tmp = self.path / f"checkpoint-{step}", self.path / f".checkpoint-{step}.tmp"
        if dist.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            policy.save_pretrained(tmp)  # peft saves the adapter only
            tokenizer.save_pretrained(tmp)
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            state = {"step": step, "lora": config.lora is not None, "config": config.to_dict()}
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
        dist.wait_for_everyone()
        rng = {"python": random.getstate(), "numpy": np.random.get_state()}
        rng["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / f"rng_state_{dist.process_index}.pt")
        dist.wait_for_everyone()
        if dist.is_main_process:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            if config.keep_last_checkpoints is not None:
                for _, path in checkpoints(self.path)[: -config.keep_last_checkpoints]:
                    shutil.rmtree(path, ignore_errors=True)
        dist.wait_for_everyone()
        return final

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in ``out_dir``, oldest first."""
    found = [(path.name.removeprefix("checkpoint-"), path) for path in out_dir.glob("checkpoint-*")]
    return sorted(
        (int(n), p) for n, p in found if n.isdigit() and (p / "trainer_state.json").exists()
    )


def _step(line: str) -> float:
    """A metrics line's step; a line cut short by a crash counts as after every step."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError):
        return float("inf")
