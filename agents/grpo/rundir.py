"""The run directory: ``metrics.jsonl`` (and TensorBoard), ``checkpoint-STEP/``, resume.

A checkpoint holds the weights (or the LoRA adapter), tokenizer, optimizer, each
process's global RNG states and ``trainer_state.json`` (step, config). It is written
to a temporary directory and renamed when complete, so "latest" never picks up a
half-written one. Restoring the global RNGs is this package's only write to them,
for envs or backends that draw from them; the trainer's own randomness is a
function of (seed, step), so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchenv.agents.grpo.config import GRPOConfig
from orchenv.agents.grpo.dist import Dist
from orchenv.error import ConfigError, OrchEnvError

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"


class MetricsLog:
    """One JSON line per step (and TensorBoard scalars); a resumed run drops later lines."""

    def __init__(self, out_dir: Path, start_step: int, tensorboard: bool) -> None:
        self.path = out_dir / "metrics.jsonl"
        old = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        self.path.write_text("".join(r + "\n" for r in old if _step(r) <= start_step), "utf-8")
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(out_dir / "tensorboard"))
            except ImportError:
                logger.warning("log_tensorboard needs `pip install tensorboard`; skipped")

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.writer.add_scalar(key, value, record["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _step(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except json.JSONDecodeError:
        return math.inf


def save_checkpoint(
    out_dir: Path,
    step: int,
    policy: Any,
    tokenizer: Any,
    optimizer: Any,
    config: GRPOConfig,
    dist: Dist,
) -> Path:
    """Write ``checkpoint-STEP/`` (process 0 the files, every process its RNG states)."""
    final, tmp = out_dir / f"{CHECKPOINT_PREFIX}{step}", out_dir / f".{CHECKPOINT_PREFIX}{step}.tmp"
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        policy.save_pretrained(tmp)  # peft saves the adapter only
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        state = {"step": step, "lora": config.lora is not None, "world_size": dist.world}
        state["config"] = config.to_dict()
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    dist.barrier()
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, tmp / f"rng_state_{dist.rank}.pt")
    dist.barrier()
    if dist.is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        if config.keep_last_checkpoints is not None:
            for _, path in checkpoints(out_dir)[: -config.keep_last_checkpoints]:
                shutil.rmtree(path, ignore_errors=True)
        logger.info("saved %s", final)
    dist.barrier()
    return final


def checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in ``out_dir``, oldest first."""
    found = []
    for path in out_dir.glob(f"{CHECKPOINT_PREFIX}*"):
        suffix = path.name[len(CHECKPOINT_PREFIX) :]
        if suffix.isdigit() and (path / "trainer_state.json").is_file():
            found.append((int(suffix), path))
    return sorted(found)


def resume_dir(config: GRPOConfig, out_dir: Path) -> Path | None:
    """The checkpoint ``config.resume_from`` names, or None for a fresh start."""
    if config.resume_from is None:
        return None
    if config.resume_from == "latest":
        found = checkpoints(out_dir)
        if not found:
            logger.info("resume_from='latest': no checkpoint in %s, starting fresh", out_dir)
        return found[-1][1] if found else None
    path = Path(config.resume_from)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(
            f"resume_from={config.resume_from!r} is not a checkpoint directory (no "
            f"trainer_state.json); give a {CHECKPOINT_PREFIX}STEP directory or 'latest'"
        )
    if bool(read_state(path).get("lora")) != (config.lora is not None):
        raise ConfigError(f"{path} was trained with the other LoRA setting; resume with its own")
    return path


def read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise OrchEnvError(f"cannot read {path / 'trainer_state.json'}: {exc}") from exc


def restore_rng(path: Path, rank: int) -> None:
    """Put the global RNGs back as they were when the checkpoint was written."""
    file = path / f"rng_state_{rank}.pt"
    file = file if file.is_file() else path / "rng_state_0.pt"
    if not file.is_file():
        logger.warning("%s has no RNG state; global RNGs are left as they are", path)
        return
    state = torch.load(file, weights_only=False)  # python / numpy states are not tensors
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
