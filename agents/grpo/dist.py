"""Where the trainer's tensors run: one process (``Dist``) or data parallel (``AccelerateDist``).

The trainer calls the same methods either way and never asks whether accelerate is
in use: in ``Dist`` every collective is the identity. Query ``i`` of a step belongs
to process ``i mod world``; process 0 writes the run directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from orchenv.error import require


class Dist:
    """One process: collectives return their input, ``prepare`` and ``unwrap`` the model."""

    rank, world = 0, 1

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_main = self.rank == 0

    def share(self, n: int) -> range:
        """This process's items among ``n``."""
        return range(self.rank, n, self.world)

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        return model, optimizer

    def unwrap(self, model: Any) -> Any:
        return model

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def no_sync(self, model: Any) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce of this backward pass (all but an update's last)."""
        return contextlib.nullcontext()

    def clip_grad_norm(self, params: list[Any], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def sum(self, value: float) -> float:
        return value

    def max(self, value: int) -> int:
        return value

    def gather(self, stats: dict[str, float]) -> dict[str, float]:
        """Every process's statistics, summed key by key (keys may differ between them)."""
        return dict(stats)

    def barrier(self) -> None:
        pass


class AccelerateDist(Dist):
    """Data parallel through an ``accelerate.Accelerator`` (DDP: gradients all-reduced)."""

    def __init__(self, accelerator: Any) -> None:
        self.rank, self.world = accelerator.process_index, accelerator.num_processes
        super().__init__(accelerator.device)
        self.accelerator = accelerator

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        return self.accelerator.prepare(model, optimizer)

    def unwrap(self, model: Any) -> Any:
        return self.accelerator.unwrap_model(model)

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)

    def no_sync(self, model: Any) -> contextlib.AbstractContextManager:
        return self.accelerator.no_sync(model)

    def clip_grad_norm(self, params: list[Any], max_norm: float) -> torch.Tensor:
        return self.accelerator.clip_grad_norm_(params, max_norm)

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    def sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        return float(self.accelerator.reduce(t, reduction="sum"))

    def max(self, value: int) -> int:
        return int(self.accelerator.gather(torch.tensor([value], device=self.device)).max())

    def gather(self, stats: dict[str, float]) -> dict[str, float]:
        from accelerate.utils import gather_object

        total: dict[str, float] = {}
        for part in gather_object([stats]):
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value
        return total


def make_dist(use_accelerate: bool, device: str | None) -> Dist:
    """``AccelerateDist`` when asked for or launched with several processes, else ``Dist``."""
    if use_accelerate or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        accelerate = require("accelerate", "train", "data-parallel GRPO (use_accelerate)")
        return AccelerateDist(accelerate.Accelerator(cpu=device == "cpu"))
    return Dist(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))


def autocast(dtype: torch.dtype | None, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast for "bf16-mixed" precision (``dtype``), else nothing."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block on a private copy of torch's RNG seeded with ``seed`` (dropout, inits),
    so the process-wide RNG is untouched and a resumed run repeats an uninterrupted one."""
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed % (2**63))
        yield
