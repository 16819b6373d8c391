"""Puppeteer's agent spaces (seed 003 section 3): the Mimas, Titan and Mono model presets.

Each model carries its single-call quality per task family, calibrated to Table 1 of seed
003 where the paper has a single-model row ("Pure Models": Llama-3.1-8B, Mistral-Nemo-12B,
Qwen-2.5-14B in Mimas; Llama-3.1-405B, GPT-4o-Mini, GPT-4-Turbo in Titan). The other
models of the paper's subspaces have no row in the paper; their numbers are guesses placed
next to the calibrated model of the same family and size, marked ``"guess"`` in
``MODEL_PROVENANCE`` (docs/puppeteer.md lists both).

What "single-call quality" means: the expected score of one ``MODEL:reasoning`` call on the
task followed by ``terminate`` (the paper's pure-model baseline: one generation, graded as
the paper grades the family). Binary families (GSM-Hard, MMLU-Pro) use it as the chance of a
right answer; continuous ones (CommonGen-Hard, SRDD) mix a reference-quality output and a
flawed one so that the mean score equals it (``revision.right_probability``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FAMILIES: tuple[str, ...] = ("gsm_hard", "mmlu_pro", "srdd", "commongen_hard")


@dataclass(frozen=True)
class ModelProfile:
    """One model of an agent space.

    ``quality``: single-call expected score per family (``FAMILIES`` order as a mapping);
    ``tokens``: completion tokens of one reasoning call; ``price``: USD per 1M tokens
    (prompt and completion alike; list prices rounded, for the cost metric only).
    """

    quality: Mapping[str, float]
    tokens: int
    price: float

    @property
    def capability(self) -> float:
        """The model's mean quality over the four families: how well it revises a draft and
        how often its critique finds the error (``revision``)."""
        return sum(self.quality.values()) / len(self.quality)

    @property
    def code_skill(self) -> float:
        """The chance its ``run_python`` agent writes the task's right program: its SRDD
        quality (the paper's software-development measure), floored at 0.2."""
        return max(0.2, self.quality["srdd"])


def _q(gsm: float, mmlu: float, srdd: float, cgen: float) -> dict[str, float]:
    return {"gsm_hard": gsm, "mmlu_pro": mmlu, "srdd": srdd, "commongen_hard": cgen}


#: every model of the paper's two subspaces (Table 1 columns: GSM-Hard, MMLU-Pro, SRDD,
#: CommonGen-Hard)
MODELS: dict[str, ModelProfile] = {
    # Mimas (smaller models)
    "llama-3.1-8b": ModelProfile(_q(0.0000, 0.5250, 0.4615, 0.6992), 350, 0.18),
    "mistral-nemo-12b": ModelProfile(_q(0.0350, 0.4500, 0.2097, 0.7146), 400, 0.30),
    "qwen-2.5-14b": ModelProfile(_q(0.0450, 0.3800, 0.5891, 0.5747), 450, 0.30),
    "qwen-2.5-7b": ModelProfile(_q(0.0300, 0.3300, 0.5000, 0.5500), 400, 0.20),
    "llama-3.2-3b": ModelProfile(_q(0.0000, 0.4000, 0.3500, 0.6200), 300, 0.06),
    "mistral-7b": ModelProfile(_q(0.0100, 0.3500, 0.1800, 0.6600), 380, 0.20),
    # Titan (larger models)
    "gpt-4-turbo": ModelProfile(_q(0.2750, 0.6800, 0.6244, 0.7632), 500, 15.0),
    "gpt-4o-mini": ModelProfile(_q(0.1050, 0.5950, 0.6822, 0.6691), 400, 0.40),
    "gemini-1.5-pro": ModelProfile(_q(0.2000, 0.7000, 0.6400, 0.7800), 550, 3.0),
    "gemini-1.5-flash": ModelProfile(_q(0.1000, 0.5800, 0.6000, 0.7000), 350, 0.20),
    "claude-3-sonnet": ModelProfile(_q(0.1500, 0.6200, 0.6200, 0.7400), 500, 9.0),
    "claude-3-haiku": ModelProfile(_q(0.0800, 0.5000, 0.5500, 0.6600), 300, 0.75),
    "qwen-2.5-72b": ModelProfile(_q(0.1800, 0.6800, 0.6300, 0.7600), 480, 0.90),
    "llama-3.1-405b": ModelProfile(_q(0.1350, 0.7600, 0.6061, 0.8116), 450, 3.0),
}

#: where each model's numbers come from: "table1" (seed 003 Table 1, a single-model row)
#: or "guess" (no row in the paper)
MODEL_PROVENANCE: dict[str, str] = {
    name: (
        "table1"
        if name
        in {
            "llama-3.1-8b",
            "mistral-nemo-12b",
            "qwen-2.5-14b",
            "llama-3.1-405b",
            "gpt-4o-mini",
            "gpt-4-turbo",
        }
        else "guess"
    )
    for name in MODELS
}

#: the agent spaces: Mimas and Titan as listed in seed 003 section 3 (pool order: the
#: paper's order), the Mono settings (every agent driven by one model: Llama-3.1-8B for
#: Mimas, Llama-3.1-405B for Titan)
PRESET_MODELS: dict[str, tuple[str, ...]] = {
    "mimas": (
        "qwen-2.5-7b",
        "qwen-2.5-14b",
        "llama-3.1-8b",
        "llama-3.2-3b",
        "mistral-7b",
        "mistral-nemo-12b",
    ),
    "titan": (
        "gpt-4-turbo",
        "gpt-4o-mini",
        "gemini-1.5-pro",
        "gemini-1.5-flash",
        "claude-3-sonnet",
        "claude-3-haiku",
        "qwen-2.5-72b",
        "llama-3.1-405b",
    ),
    "mimas-mono": ("llama-3.1-8b",),
    "titan-mono": ("llama-3.1-405b",),
}
PRESETS: tuple[str, ...] = tuple(PRESET_MODELS)

#: completion tokens of one call relative to a reasoning call, per pattern (a critique or a
#: conclusion is shorter than a full solution); tool agents write a short call
PATTERN_TOKEN_FACTOR: dict[str, float] = {
    "planning": 0.9,
    "reasoning": 1.0,
    "critique": 0.8,
    "reflect": 0.7,
    "question": 0.8,
    "summarize": 0.5,
    "conclude": 0.4,
    "modify": 0.9,
    "run_python": 0.5,
    "read_file": 0.15,
    "search": 0.2,
}

#: mean score of a reference-quality output and of a flawed one, per continuous family
#: (measured with ``tasks.score_answer`` on the generated tasks; ``revision.right_probability``
#: solves the right-output chance from them so the mean score equals the model's quality)
SCORE_LEVELS: dict[str, tuple[float, float]] = {
    "commongen_hard": (1.0, 0.50),  # flawed: the reference sentence with ~half the concepts dropped
    # flawed: the task's distractors, 25% run and fail some hidden tests (about 0.6), 75% have
    # a misspelled name and fail nearly every test (0.03); measured 0.199 +- 0.030 on 200 test
    # tasks (was 0.15 when broken code carried an unloadable marker line, before issue 25)
    "srdd": (1.0, 0.20),
}
