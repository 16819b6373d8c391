"""Fixtures shared by the test modules.

The suite never reaches the network: the Hugging Face libraries are put in offline mode
here, at import time, before any test module imports them (they read these variables once,
when first imported), and subprocesses the tests start inherit the setting.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
from scenario import tiny_source  # noqa: E402

from orchenv.tasks import ListTaskSource  # noqa: E402


@pytest.fixture
def tiny_tasks() -> ListTaskSource:
    return tiny_source()
