"""Where the trainer's tensors run: an ``accelerate.Accelerator`` (data parallel) or ``Dist``, its
one-process stand-in, so the trainer never asks which. Process ``r`` takes queries ``r mod N``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from orchenv.error import require


@dataclass
class Dist:
    """One process, with ``accelerate.Accelerator``'s method names."""

    device: torch.device
    process_index, num_processes, is_main_process = 0, 1, True

    def prepare(self, *objects: Any) -> tuple[Any, ...]:
        return objects

    def unwrap_model(self, model: Any) -> Any:
        return model

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def no_sync(self, model: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def clip_grad_norm_(self, params: list[Any], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def wait_for_everyone(self) -> None:
        pass


def make_dist(use_accelerate: bool, device: str | None) -> Any:
    """An Accelerator when asked for or launched with several processes, else ``Dist``."""
    if use_accelerate or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        accelerate = require("accelerate", "train", "data-parallel GRPO (use_accelerate)")
        return accelerate.Accelerator(cpu=device == "cpu")
    return Dist(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))


def share(dist: Any, n: int) -> range:
    """This process's items among ``n``."""
    return range(dist.process_index, n, dist.num_processes)


def gather(dist: Any, value: Any) -> list[Any]:
    """``value`` from every process, in process order."""
    if dist.num_processes == 1:
        return [value]
    from accelerate.utils import gather_object

    return gather_object([value])


@contextlib.contextmanager
def forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block on a private, seeded copy of torch's RNG (dropout, inits): resumable."""
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed % (2**63))
        yield
